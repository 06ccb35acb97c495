//! `tf.random.Generator`: a stateful generator whose whole state is a small
//! integer vector (spec §6).

use ndarray::{Array2, ArrayD};

use super::dtype::{TfFloat, TfInt};
use super::dynamic::{dispatch_float, dispatch_int, FromF64, FromI64, IntArray, TfIntDType};
use super::error::TfRandomError;
use super::ops;
use super::philox::Philox;
use super::sampler::{element_count, BlockSource};
use super::seed::RngSeed;
use super::threefry_blocks::ThreefryBlocks;
use crate::random::{FloatArray, FloatDType};

/// Counter steps a draw reserves per output element (`RngReadAndSkip`).
const SKIP_PER_ELEMENT: u64 = 256;

/// The RNG algorithm of a generator (`tf.random.Algorithm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Algorithm {
    /// Philox4x32-10 (`"philox"`, id 1): state `[counter_lo, counter_hi, key]`.
    Philox,
    /// Threefry-2x32 (`"threefry"`, id 2): state `[counter, key]`. TensorFlow
    /// runs it only under XLA; flaxen defines its own stream over JAX's
    /// Threefry (see [`Generator`]).
    ThreeFry,
    /// `"auto_select"` (id 3): Philox on CPU, with the same state and stream.
    AutoSelect,
}

impl Algorithm {
    /// TensorFlow's numeric id (`tf.random.Algorithm.*.value`).
    pub fn id(self) -> i64 {
        match self {
            Algorithm::Philox => 1,
            Algorithm::ThreeFry => 2,
            Algorithm::AutoSelect => 3,
        }
    }

    /// The algorithm with TensorFlow's numeric id.
    pub fn from_id(id: i64) -> Result<Algorithm, TfRandomError> {
        match id {
            1 => Ok(Algorithm::Philox),
            2 => Ok(Algorithm::ThreeFry),
            3 => Ok(Algorithm::AutoSelect),
            _ => Err(TfRandomError::UnknownAlgorithm { id }),
        }
    }

    /// The number of `i64` elements of the state: 3 for Philox, 2 for ThreeFry.
    pub fn state_size(self) -> usize {
        match self {
            Algorithm::Philox | Algorithm::AutoSelect => 3,
            Algorithm::ThreeFry => 2,
        }
    }
}

impl std::str::FromStr for Algorithm {
    type Err = TfRandomError;

    /// An algorithm from its name as TensorFlow's `alg=` argument takes it:
    /// case, surrounding spaces, `-` and `_` do not matter (`"Auto-Select"`
    /// is `"auto_select"`).
    ///
    /// ```
    /// use flaxen::random::tf::Algorithm;
    /// assert_eq!(" PHILOX ".parse::<Algorithm>().unwrap(), Algorithm::Philox);
    /// assert_eq!("Auto-Select".parse::<Algorithm>().unwrap(), Algorithm::AutoSelect);
    /// assert!("bogus".parse::<Algorithm>().is_err());
    /// ```
    fn from_str(name: &str) -> Result<Algorithm, TfRandomError> {
        let canon: String = name
            .trim()
            .to_lowercase()
            .chars()
            .filter(|&c| c != '-' && c != '_')
            .collect();
        match canon.as_str() {
            "philox" => Ok(Algorithm::Philox),
            "threefry" => Ok(Algorithm::ThreeFry),
            "autoselect" => Ok(Algorithm::AutoSelect),
            _ => Err(TfRandomError::UnknownAlgorithmName {
                name: name.to_string(),
            }),
        }
    }
}

impl TryFrom<i64> for Algorithm {
    type Error = TfRandomError;

    /// [`Algorithm::from_id`].
    fn try_from(id: i64) -> Result<Algorithm, TfRandomError> {
        Algorithm::from_id(id)
    }
}

/// A generator's complete state: the algorithm and its `i64` words, exactly
/// what `tf.random.Generator.state` holds (and a checkpoint saves).
///
/// It is a plain value: copy it, store it, and give it back to
/// [`Generator::from_generator_state`] or [`Generator::reset`] to continue
/// the stream from that point. With the `serde` feature it serializes as
/// `{"alg": "Philox", "state": [1537, 0, 0]}`; deserializing checks the
/// length against the algorithm.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "StateRepr", into = "StateRepr")
)]
pub struct GeneratorState {
    alg: Algorithm,
    words: [i64; 3],
}

/// The serialized form of [`GeneratorState`].
#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
struct StateRepr {
    alg: Algorithm,
    state: Vec<i64>,
}

#[cfg(feature = "serde")]
impl TryFrom<StateRepr> for GeneratorState {
    type Error = TfRandomError;
    fn try_from(r: StateRepr) -> Result<GeneratorState, TfRandomError> {
        GeneratorState::new(r.alg, &r.state)
    }
}

#[cfg(feature = "serde")]
impl From<GeneratorState> for StateRepr {
    fn from(s: GeneratorState) -> StateRepr {
        StateRepr {
            alg: s.alg,
            state: s.words().to_vec(),
        }
    }
}

impl GeneratorState {
    /// A state of `alg` from its words; the length must be
    /// [`Algorithm::state_size`].
    ///
    /// ```
    /// use flaxen::random::tf::{Algorithm, GeneratorState};
    /// assert!(GeneratorState::new(Algorithm::Philox, &[1, 0, 0]).is_ok());
    /// assert!(GeneratorState::new(Algorithm::Philox, &[1, 0]).is_err());
    /// ```
    pub fn new(alg: Algorithm, words: &[i64]) -> Result<GeneratorState, TfRandomError> {
        let expected = alg.state_size();
        if words.len() != expected {
            return Err(TfRandomError::StateLength {
                alg,
                expected,
                got: words.len(),
            });
        }
        let mut w = [0i64; 3];
        w[..expected].copy_from_slice(words);
        Ok(GeneratorState { alg, words: w })
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// The state words (`g.state` in TensorFlow): 3 for Philox, 2 for ThreeFry.
    pub fn words(&self) -> &[i64] {
        &self.words[..self.alg.state_size()]
    }

    /// The key (the last word).
    pub fn key(&self) -> i64 {
        self.words()[self.alg.state_size() - 1]
    }

    /// The counter words (all but the last).
    pub fn counter(&self) -> &[i64] {
        &self.words()[..self.alg.state_size() - 1]
    }

    /// Moves the counter on by `count` as TensorFlow's `RngSkip` and draws
    /// do: Philox adds it as `PhiloxRandom::Skip`, in 32-bit pieces (see
    /// [`Generator::skip`]); ThreeFry's single counter word wraps.
    fn advance(&mut self, count: u64) {
        match self.alg {
            Algorithm::Philox | Algorithm::AutoSelect => {
                let lo = self.words[0] as u64;
                let hi = self.words[1] as u64;
                let mut c = [lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32];
                let count_lo = count as u32;
                let mut count_hi = (count >> 32) as u32;
                c[0] = c[0].wrapping_add(count_lo);
                if c[0] < count_lo {
                    // TF's quirk: this carry is lost when count_hi wraps.
                    count_hi = count_hi.wrapping_add(1);
                }
                c[1] = c[1].wrapping_add(count_hi);
                if c[1] < count_hi {
                    c[2] = c[2].wrapping_add(1);
                    if c[2] == 0 {
                        c[3] = c[3].wrapping_add(1);
                    }
                }
                self.words[0] = (u64::from(c[0]) | (u64::from(c[1]) << 32)) as i64;
                self.words[1] = (u64::from(c[2]) | (u64::from(c[3]) << 32)) as i64;
            }
            Algorithm::ThreeFry => {
                self.words[0] = (self.words[0] as u64).wrapping_add(count) as i64;
            }
        }
    }

    /// A replica's key (TF's `_make_key_for_replica`): the first uint64 of
    /// the Philox stream of the key at counter `[replica, 0]`
    /// (`stateless_random_uniform_full_int_v2(shape=[1], key, counter,
    /// dtype=uint64, alg=Philox)`); the counter stays.
    fn mix_replica(&mut self, replica: usize) {
        let key = self.key();
        let mut g = Generator {
            state: GeneratorState {
                alg: Algorithm::Philox,
                words: [replica as i64, 0, key],
            },
            distributed: None,
        };
        let mixed = g
            .uniform_full_int::<u64>(&[1])
            .expect("one element")
            .into_raw_vec_and_offset()
            .0[0];
        let last = self.alg.state_size() - 1;
        self.words[last] = mixed as i64;
    }

    /// The block stream of a draw that starts at this state.
    fn blocks(&self) -> Blocks {
        match self.alg {
            Algorithm::Philox | Algorithm::AutoSelect => Blocks::Philox(Philox::from_key_counter(
                self.words[2] as u64,
                [self.words[0] as u64, self.words[1] as u64],
            )),
            Algorithm::ThreeFry => Blocks::ThreeFry(ThreefryBlocks::new(
                self.words[0] as u64,
                self.words[1] as u64,
            )),
        }
    }
}

/// The block stream of one draw.
enum Blocks {
    Philox(Philox),
    ThreeFry(ThreefryBlocks),
}

impl BlockSource for Blocks {
    #[inline]
    fn block(&self, offset: u64) -> [u32; 4] {
        match self {
            Blocks::Philox(p) => p.block(offset),
            Blocks::ThreeFry(t) => t.block(offset),
        }
    }
}

/// `tf.random.Generator`: a stateful random number generator.
///
/// Every draw of `n` elements reads the state, moves the counter on by
/// `256·n` (`RngReadAndSkip`), and runs the stateless V2 kernel with the
/// old key and counter, so a Philox generator gives TensorFlow's numbers bit
/// for bit (floats where glibc's `logf`/`sincosf` are reproduced).
///
/// ```
/// use flaxen::random::tf::Generator;
/// let mut g = Generator::from_seed(1);
/// let x = g.normal(&[]).unwrap();
/// assert_eq!(x[[]], 0.43842274); // the guide prints 0.43842277, see the book
/// assert_eq!(g.state().words(), &[257, 0, 0]);
/// assert_eq!(g.normal(&[]).unwrap()[[]], 1.6272374);
/// ```
///
/// With [`Algorithm::ThreeFry`] the generator runs on JAX's Threefry-2x32
/// instead: state `[counter, key]`, Threefry key words
/// `[key >> 32, key & 0xffffffff]` (as `jax.random.key(key)`), and the block
/// of four words at offset `j` of a draw starting at counter `c` is
/// `threefry2x32(k, split(c + 2j)) ++ threefry2x32(k, split(c + 2j + 1))`,
/// where `split(x) = [x >> 32, x & 0xffffffff]` and sums wrap mod 2^64.
/// Everything else is as for Philox. TensorFlow itself runs ThreeFry only
/// under XLA, whose stream is different and not reproduced.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent)
)]
pub struct Generator {
    state: GeneratorState,
    /// Set for a generator created inside a distribution strategy's scope
    /// or replica context: an id by which the replicas of one `run` share
    /// its state (see [`super::distribute`]).
    #[cfg_attr(feature = "serde", serde(skip))]
    distributed: Option<u64>,
}

impl Generator {
    /// `Generator.from_seed(seed)` with Philox. No scrambling: an integer is
    /// cut into 64-bit chunks (`1` gives state `[1, 0, 0]`), an array is
    /// truncated or left-padded to three values (see [`RngSeed`]).
    pub fn from_seed(seed: impl Into<RngSeed>) -> Generator {
        Generator::from_seed_with(seed, Algorithm::Philox)
    }

    /// `Generator.from_seed(seed, alg)`.
    pub fn from_seed_with(seed: impl Into<RngSeed>, alg: Algorithm) -> Generator {
        let words = seed.into().to_state(alg);
        Generator::with_state(
            GeneratorState::new(alg, &words).expect("to_state has the state size"),
        )
    }

    /// `Generator.from_state(state, alg)`: the state words as they are.
    pub fn from_state(state: &[i64], alg: Algorithm) -> Result<Generator, TfRandomError> {
        Ok(Generator::with_state(GeneratorState::new(alg, state)?))
    }

    /// A generator continuing from a saved [`GeneratorState`].
    pub fn from_generator_state(state: GeneratorState) -> Generator {
        Generator::with_state(state)
    }

    /// A generator with `state`, distributed when created inside a
    /// strategy's scope or a replica context.
    fn with_state(state: GeneratorState) -> Generator {
        Generator {
            state,
            distributed: super::distribute::creation_id(),
        }
    }

    /// Whether this generator was created inside a distribution strategy
    /// (its draws inside `run` mix in the replica id).
    pub fn is_distributed(&self) -> bool {
        self.distributed.is_some()
    }

    /// `Generator.from_key_counter(key, counter, alg)`: state
    /// `counter ++ [key]`; `counter` has 2 words for Philox, 1 for ThreeFry.
    pub fn from_key_counter(
        key: i64,
        counter: &[i64],
        alg: Algorithm,
    ) -> Result<Generator, TfRandomError> {
        let mut words = counter.to_vec();
        words.push(key);
        Generator::from_state(&words, alg)
    }

    /// `Generator.from_non_deterministic_state()`: Philox with a state drawn
    /// from the operating system's randomness (via the standard library's
    /// randomly keyed hasher) and the clock. Not for cryptography.
    pub fn from_non_deterministic_state() -> Generator {
        Generator::from_non_deterministic_state_with(Algorithm::Philox)
    }

    /// `Generator.from_non_deterministic_state(alg)`.
    pub fn from_non_deterministic_state_with(alg: Algorithm) -> Generator {
        let words = non_deterministic_words(alg.state_size());
        Generator::from_state(&words, alg).expect("state size words")
    }

    /// The current state (`g.state`).
    pub fn state(&self) -> &GeneratorState {
        &self.state
    }

    /// The algorithm (`g.algorithm`).
    pub fn algorithm(&self) -> Algorithm {
        self.state.alg
    }

    /// The key (`g.key`), the last state word.
    pub fn key(&self) -> i64 {
        self.state.key()
    }

    /// `g.reset(state)`: replaces the state words; the algorithm stays.
    pub fn reset(&mut self, state: &[i64]) -> Result<(), TfRandomError> {
        self.state = GeneratorState::new(self.state.alg, state)?;
        Ok(())
    }

    /// Restores a saved state, as restoring a checkpoint does: the stream
    /// continues exactly from the point where the state was saved. The
    /// state must be of this generator's algorithm
    /// ([`TfRandomError::AlgorithmMismatch`] otherwise).
    ///
    /// ```
    /// use flaxen::random::tf::Generator;
    /// let mut g = Generator::from_seed(1);
    /// let saved = g.state().clone();
    /// let a = g.normal(&[2]).unwrap();
    /// g.restore(saved).unwrap();
    /// assert_eq!(g.normal(&[2]).unwrap(), a);
    /// ```
    pub fn restore(&mut self, state: GeneratorState) -> Result<(), TfRandomError> {
        if state.alg != self.state.alg {
            return Err(TfRandomError::AlgorithmMismatch {
                expected: self.state.alg,
                got: state.alg,
            });
        }
        self.state = state;
        Ok(())
    }

    /// `g.reset_from_seed(seed)`: the state [`Generator::from_seed`] would give.
    pub fn reset_from_seed(&mut self, seed: impl Into<RngSeed>) {
        self.state = Generator::from_seed_with(seed, self.state.alg).state;
    }

    /// `g.reset_from_key_counter(key, counter)`.
    pub fn reset_from_key_counter(
        &mut self,
        key: i64,
        counter: &[i64],
    ) -> Result<(), TfRandomError> {
        self.state = Generator::from_key_counter(key, counter, self.state.alg)?.state;
        Ok(())
    }

    /// `g.skip(delta)`: moves the counter on by `256·delta`, as a draw of
    /// `delta` elements does, and returns the old state.
    ///
    /// As in TensorFlow, `delta` may be negative: it is taken modulo 2^64
    /// (TF casts it to `uint64`), multiplied by 256 modulo 2^64 and added
    /// to the Philox counter as `PhiloxRandom::Skip` adds, in 32-bit pieces
    /// whose carry out of the second piece is lost when that piece of the
    /// count is `0xffffffff`. So `skip(-1)` from `[1, 0, 0]` gives
    /// `[-255, 0, 0]`, but from `[257, 0, 0]` it gives `[1, 0, 0]`.
    ///
    /// ```
    /// use flaxen::random::tf::Generator;
    /// let mut g = Generator::from_seed(1);
    /// g.skip(-1);
    /// assert_eq!(g.state().words(), &[-255, 0, 0]);
    /// ```
    pub fn skip(&mut self, delta: i64) -> GeneratorState {
        let old = self.state.clone();
        self.state
            .advance((delta as u64).wrapping_mul(SKIP_PER_ELEMENT));
        old
    }

    /// Moves the state on for a draw of `n` elements and returns the old one.
    fn skip_elements(&mut self, n: usize) -> GeneratorState {
        let old = self.state.clone();
        self.state
            .advance((n as u64).wrapping_mul(SKIP_PER_ELEMENT));
        old
    }

    /// Reads the state for a draw of `shape` and moves it on.
    fn prepare<T>(&mut self, shape: &[usize]) -> Result<Blocks, TfRandomError> {
        let n = element_count::<T>(shape)?;
        if let Some(id) = self.distributed {
            if let Some(replica) = super::distribute::enter_draw(id, &mut self.state) {
                let mut old = self.skip_elements(n);
                old.mix_replica(replica);
                return Ok(old.blocks());
            }
        }
        Ok(self.skip_elements(n).blocks())
    }

    /// `g.normal(shape)`: standard normal `float32`s (mean 0, stddev 1),
    /// TensorFlow's defaults.
    ///
    /// ```
    /// use flaxen::random::tf::Generator;
    /// let mut g = Generator::from_seed(1);
    /// assert_eq!(g.normal(&[])?[[]], 0.43842274); // the guide prints 0.43842277
    /// # Ok::<(), flaxen::random::tf::TfRandomError>(())
    /// ```
    pub fn normal(&mut self, shape: &[usize]) -> Result<ArrayD<f32>, TfRandomError> {
        self.normal_as(shape, 0.0, 1.0)
    }

    /// `g.normal(shape, mean, stddev, dtype)` with the dtype as a type.
    pub fn normal_as<T: TfFloat + Default>(
        &mut self,
        shape: &[usize],
        mean: T,
        stddev: T,
    ) -> Result<ArrayD<T>, TfRandomError> {
        let b = self.prepare::<T>(shape)?;
        Ok(ops::normal(&b, shape, mean, stddev))
    }

    /// `g.normal(shape, mean, stddev, dtype)` with the dtype chosen at run
    /// time. `mean` and `stddev` are rounded to the dtype as TensorFlow
    /// converts Python floats.
    ///
    /// ```
    /// use flaxen::random::{FloatArray, FloatDType};
    /// use flaxen::random::tf::Generator;
    /// let mut g = Generator::from_seed(1);
    /// let x = g.normal_dtype(&[2], 0.0, 1.0, "bfloat16".parse()?)?;
    /// assert_eq!(x.dtype(), FloatDType::BFloat16);
    /// assert!(matches!(x, FloatArray::BF16(_)));
    /// # Ok::<(), flaxen::Error>(())
    /// ```
    pub fn normal_dtype(
        &mut self,
        shape: &[usize],
        mean: f64,
        stddev: f64,
        dtype: FloatDType,
    ) -> Result<FloatArray, TfRandomError> {
        dispatch_float!(dtype, |T| self.normal_as::<T>(
            shape,
            T::from_f64(mean),
            T::from_f64(stddev)
        ))
    }

    /// `g.truncated_normal(shape)`: standard normal `float32`s, values more
    /// than two standard deviations from the mean drawn again.
    pub fn truncated_normal(&mut self, shape: &[usize]) -> Result<ArrayD<f32>, TfRandomError> {
        self.truncated_normal_as(shape, 0.0, 1.0)
    }

    /// `g.truncated_normal(shape, mean, stddev, dtype)` with the dtype as a
    /// type: values more than two standard deviations from the mean are
    /// drawn again.
    pub fn truncated_normal_as<T: TfFloat + Default>(
        &mut self,
        shape: &[usize],
        mean: T,
        stddev: T,
    ) -> Result<ArrayD<T>, TfRandomError> {
        let b = self.prepare::<T>(shape)?;
        Ok(ops::truncated_normal(&b, shape, mean, stddev))
    }

    /// `g.truncated_normal(shape, mean, stddev, dtype)` with the dtype chosen
    /// at run time.
    pub fn truncated_normal_dtype(
        &mut self,
        shape: &[usize],
        mean: f64,
        stddev: f64,
        dtype: FloatDType,
    ) -> Result<FloatArray, TfRandomError> {
        dispatch_float!(dtype, |T| self.truncated_normal_as::<T>(
            shape,
            T::from_f64(mean),
            T::from_f64(stddev)
        ))
    }

    /// `g.uniform(shape)`: `float32`s uniform in `[0, 1)`.
    pub fn uniform(&mut self, shape: &[usize]) -> Result<ArrayD<f32>, TfRandomError> {
        self.uniform_as(shape, 0.0, 1.0)
    }

    /// `g.uniform(shape, minval, maxval, dtype)` for floats, the dtype as a
    /// type: `rnd * (maxval - minval) + minval`.
    pub fn uniform_as<T: TfFloat + Default>(
        &mut self,
        shape: &[usize],
        minval: T,
        maxval: T,
    ) -> Result<ArrayD<T>, TfRandomError> {
        let b = self.prepare::<T>(shape)?;
        Ok(ops::uniform(&b, shape, minval, maxval))
    }

    /// `g.uniform(shape, minval, maxval, dtype)` for floats with the dtype
    /// chosen at run time.
    pub fn uniform_dtype(
        &mut self,
        shape: &[usize],
        minval: f64,
        maxval: f64,
        dtype: FloatDType,
    ) -> Result<FloatArray, TfRandomError> {
        dispatch_float!(dtype, |T| self.uniform_as::<T>(
            shape,
            T::from_f64(minval),
            T::from_f64(maxval)
        ))
    }

    /// `g.uniform(shape, minval, maxval, dtype)` for integers:
    /// `minval + bits % (maxval - minval)`.
    ///
    /// As in TensorFlow, the state moves on before the range is checked, so
    /// a refused call ([`TfRandomError::EmptyRange`],
    /// [`TfRandomError::UnsignedRange`]) still uses up `256·n` counters.
    pub fn uniform_int<T: TfInt + Default>(
        &mut self,
        shape: &[usize],
        minval: T,
        maxval: T,
    ) -> Result<ArrayD<T>, TfRandomError> {
        let b = self.prepare::<T>(shape)?;
        ops::check_int_range(minval, maxval)?;
        Ok(ops::range_int(&b, shape, minval, maxval))
    }

    /// `g.uniform(shape, minval, maxval, dtype)` for an integer dtype chosen
    /// at run time.
    ///
    /// In TensorFlow `maxval` defaults to `None`, which an integer dtype
    /// refuses: `None` here is [`TfRandomError::MissingMaxval`], before the
    /// state moves, and so is a bound that the dtype cannot hold
    /// ([`TfRandomError::BoundOutOfRange`]). An empty range or an unsigned
    /// dtype is refused after the state moved, as TensorFlow's kernel does.
    ///
    /// ```
    /// use flaxen::random::tf::{Generator, IntArray, TfIntDType};
    /// let mut g = Generator::from_seed(1);
    /// let x = g.uniform_int_dtype(&[3], 0, Some(10), TfIntDType::Int64)?;
    /// assert!(matches!(x, IntArray::I64(_)));
    /// assert!(g.uniform_int_dtype(&[3], 0, None, TfIntDType::Int32).is_err());
    /// # Ok::<(), flaxen::random::tf::TfRandomError>(())
    /// ```
    pub fn uniform_int_dtype(
        &mut self,
        shape: &[usize],
        minval: i64,
        maxval: Option<i64>,
        dtype: TfIntDType,
    ) -> Result<IntArray, TfRandomError> {
        let maxval = maxval.ok_or(TfRandomError::MissingMaxval {
            dtype: dtype.name(),
        })?;
        dispatch_int!(dtype, |T| {
            let lo = T::from_i64(minval, dtype)?;
            let hi = T::from_i64(maxval, dtype)?;
            self.uniform_int::<T>(shape, lo, hi)
        })
    }

    /// `g.uniform_full_int(shape, dtype)`: every bit pattern of the dtype.
    pub fn uniform_full_int<T: TfInt + Default>(
        &mut self,
        shape: &[usize],
    ) -> Result<ArrayD<T>, TfRandomError> {
        let b = self.prepare::<T>(shape)?;
        Ok(ops::full_int(&b, shape))
    }

    /// `g.uniform_full_int(shape, dtype)` with the dtype chosen at run time.
    pub fn uniform_full_int_dtype(
        &mut self,
        shape: &[usize],
        dtype: TfIntDType,
    ) -> Result<IntArray, TfRandomError> {
        dispatch_int!(dtype, |T| self.uniform_full_int::<T>(shape))
    }

    /// `g.make_seeds(count)`: `count` seeds for the stateless functions, as
    /// the columns of a `[2, count]` array (row 0 random, row 1 zeros). One
    /// draw of `count` full-range `i64`s.
    ///
    /// A count too large to allocate is an error, before the state moves.
    pub fn make_seeds(&mut self, count: usize) -> Result<Array2<i64>, TfRandomError> {
        element_count::<i64>(&[2, count])?;
        let keys = self.int64_keys(count)?;
        let mut seeds = Array2::zeros((2, count));
        seeds
            .row_mut(0)
            .assign(&ndarray::ArrayView1::from(&keys[..]));
        Ok(seeds)
    }

    /// `g.split(count)`: `count` new generators with states
    /// `[0, 0, key_i]` (`[0, key_i]` for ThreeFry), keys from one draw of
    /// `count` full-range `i64`s of this generator.
    ///
    /// ```
    /// use flaxen::random::tf::Generator;
    /// let mut g = Generator::from_seed(1);
    /// g.normal(&[]).unwrap();
    /// let mut children = g.split(3).unwrap();
    /// assert_eq!(children[0].normal(&[]).unwrap()[[]], 2.536413);
    /// assert_eq!(g.normal(&[]).unwrap()[[]], -0.79253083);
    /// ```
    pub fn split(&mut self, count: usize) -> Result<Vec<Generator>, TfRandomError> {
        if count == 0 {
            // TensorFlow returns no generators and leaves the state alone.
            return Ok(Vec::new());
        }
        element_count::<Generator>(&[count])?;
        let alg = self.state.alg;
        let size = alg.state_size();
        Ok(self
            .int64_keys(count)?
            .into_iter()
            .map(|key| {
                let mut words = vec![0i64; size];
                words[size - 1] = key;
                Generator::from_state(&words, alg).expect("state size words")
            })
            .collect())
    }

    /// One draw of `count` full-range `i64`s.
    fn int64_keys(&mut self, count: usize) -> Result<Vec<i64>, TfRandomError> {
        element_count::<i64>(&[count])?;
        let b = self.skip_elements(count).blocks();
        Ok(ops::full_int::<i64, _>(&b, &[count])
            .into_raw_vec_and_offset()
            .0)
    }
}

/// `n` words of non-deterministic state.
fn non_deterministic_words(n: usize) -> Vec<i64> {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::time::{SystemTime, UNIX_EPOCH};
    let hasher = RandomState::new();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    (0..n)
        .map(|i| {
            let mut h = hasher.build_hasher();
            h.write_u128(now);
            h.write_usize(i);
            h.finish() as i64
        })
        .collect()
}
