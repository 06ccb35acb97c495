//! `tf.random.Generator`: a stateful generator whose whole state is a small
//! integer vector (spec §6).

use ndarray::{Array2, ArrayD};

use super::dtype::{TfFloat, TfInt};
use super::error::TfRandomError;
use super::ops;
use super::philox::Philox;
use super::sampler::{element_count, BlockSource};
use super::seed::RngSeed;
use super::threefry_blocks::ThreefryBlocks;

/// Counter steps a draw reserves per output element (`RngReadAndSkip`).
const SKIP_PER_ELEMENT: u128 = 256;

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

    /// Moves the counter on by `steps`, with carries across counter words.
    fn advance(&mut self, steps: u128) {
        match self.alg {
            Algorithm::Philox | Algorithm::AutoSelect => {
                let c = (self.words[0] as u64 as u128) | ((self.words[1] as u64 as u128) << 64);
                let c = c.wrapping_add(steps);
                self.words[0] = c as u64 as i64;
                self.words[1] = (c >> 64) as u64 as i64;
            }
            Algorithm::ThreeFry => {
                self.words[0] = (self.words[0] as u64).wrapping_add(steps as u64) as i64;
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
/// let x = g.normal::<f32>(&[], 0.0, 1.0).unwrap();
/// assert_eq!(x[[]], 0.43842274); // the guide prints 0.43842277, see the book
/// assert_eq!(g.state().words(), &[257, 0, 0]);
/// assert_eq!(g.normal::<f32>(&[], 0.0, 1.0).unwrap()[[]], 1.6272374);
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
    /// let a = g.normal::<f32>(&[2], 0.0, 1.0).unwrap();
    /// g.restore(saved).unwrap();
    /// assert_eq!(g.normal::<f32>(&[2], 0.0, 1.0).unwrap(), a);
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
    pub fn skip(&mut self, delta: u64) -> GeneratorState {
        let old = self.state.clone();
        self.state.advance(SKIP_PER_ELEMENT * u128::from(delta));
        old
    }

    /// Reads the state for a draw of `shape` and moves it on.
    fn prepare<T>(&mut self, shape: &[usize]) -> Result<Blocks, TfRandomError> {
        let n = element_count::<T>(shape)?;
        if let Some(id) = self.distributed {
            if let Some(replica) = super::distribute::enter_draw(id, &mut self.state) {
                let mut old = self.skip(n as u64);
                old.mix_replica(replica);
                return Ok(old.blocks());
            }
        }
        Ok(self.skip(n as u64).blocks())
    }

    /// `g.normal(shape, mean, stddev, dtype)`.
    pub fn normal<T: TfFloat + Default>(
        &mut self,
        shape: &[usize],
        mean: T,
        stddev: T,
    ) -> Result<ArrayD<T>, TfRandomError> {
        let b = self.prepare::<T>(shape)?;
        Ok(ops::normal(&b, shape, mean, stddev))
    }

    /// `g.truncated_normal(shape, mean, stddev, dtype)`: values more than two
    /// standard deviations from the mean are drawn again.
    pub fn truncated_normal<T: TfFloat + Default>(
        &mut self,
        shape: &[usize],
        mean: T,
        stddev: T,
    ) -> Result<ArrayD<T>, TfRandomError> {
        let b = self.prepare::<T>(shape)?;
        Ok(ops::truncated_normal(&b, shape, mean, stddev))
    }

    /// `g.uniform(shape, minval, maxval, dtype)` for floats:
    /// `rnd * (maxval - minval) + minval`.
    pub fn uniform<T: TfFloat + Default>(
        &mut self,
        shape: &[usize],
        minval: T,
        maxval: T,
    ) -> Result<ArrayD<T>, TfRandomError> {
        let b = self.prepare::<T>(shape)?;
        Ok(ops::uniform(&b, shape, minval, maxval))
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

    /// `g.uniform_full_int(shape, dtype)`: every bit pattern of the dtype.
    pub fn uniform_full_int<T: TfInt + Default>(
        &mut self,
        shape: &[usize],
    ) -> Result<ArrayD<T>, TfRandomError> {
        let b = self.prepare::<T>(shape)?;
        Ok(ops::full_int(&b, shape))
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
    /// g.normal::<f32>(&[], 0.0, 1.0).unwrap();
    /// let mut children = g.split(3).unwrap();
    /// assert_eq!(children[0].normal::<f32>(&[], 0.0, 1.0).unwrap()[[]], 2.536413);
    /// assert_eq!(g.normal::<f32>(&[], 0.0, 1.0).unwrap()[[]], -0.79253083);
    /// ```
    pub fn split(&mut self, count: usize) -> Result<Vec<Generator>, TfRandomError> {
        if count == 0 {
            return Err(TfRandomError::SplitCount);
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
        let b = self.skip(count as u64).blocks();
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
