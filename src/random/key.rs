//! Typed PRNG keys (`key<fry>`), key arrays, and the key-derivation
//! functions `key`, `split`, `fold_in`, `clone`.

use std::fmt;

use super::error::RandomError;
use super::threefry::{fill, threefry2x32, Counters};

/// Which of JAX's two Threefry modes a key (and everything derived from it)
/// uses.
///
/// `fold_in` and `key` agree in both modes; `split` and every sampler
/// differ. JAX's default, and the Flax randomness guide's, is
/// [`ThreefryMode::Partitionable`] (`jax_threefry_partitionable=True`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ThreefryMode {
    /// `jax_threefry_partitionable=True`: each output element hashes its own
    /// 64-bit index, so any slice of the output can be computed alone.
    #[default]
    Partitionable,
    /// `jax_threefry_partitionable=False`: JAX's original layout, which hashes
    /// an iota of counters split into two halves.
    NonPartitionable,
}

/// How an integer seed is turned into a key: JAX without 64-bit types (the
/// default, `jax_enable_x64=False`) keeps only the low 32 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SeedWidth {
    /// JAX's default: the key is `[0, low 32 bits of the seed]`.
    #[default]
    Bits32,
    /// `jax_enable_x64=True`: the key is `[high 32 bits, low 32 bits]` of the
    /// seed as a 64-bit two's-complement integer.
    Bits64,
}

/// A typed Threefry PRNG key, JAX's `key<fry>`: two `u32` words plus the
/// [`ThreefryMode`] that samplers use with it.
///
/// A key is *not* `Copy`: every function that uses a key (`split`,
/// `fold_in`, the samplers) takes it by value, so using one key twice by
/// accident is a compile error. When reuse is what you mean, say so with
/// [`Key::clone`] (or [`clone`](super::clone), as `jax.random.clone`).
///
/// ```
/// use flaxen::random;
///
/// let key = random::key(0);
/// let [a, b] = random::split_n(key);
/// // `key` has been consumed: using it again would not compile.
/// assert_ne!(random::key_data(&a), random::key_data(&b));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key {
    data: [u32; 2],
    mode: ThreefryMode,
}

impl Key {
    /// The key's two raw words (`jax.random.key_data`).
    pub fn data(&self) -> [u32; 2] {
        self.data
    }

    /// The Threefry mode this key samples with.
    pub fn mode(&self) -> ThreefryMode {
        self.mode
    }

    /// The same key words, sampling in another Threefry mode.
    pub fn with_mode(self, mode: ThreefryMode) -> Key {
        Key { mode, ..self }
    }

    /// Builds a key from raw words (`jax.random.wrap_key_data`).
    pub fn from_data(data: [u32; 2], mode: ThreefryMode) -> Key {
        Key { data, mode }
    }

    /// Fills `out` with the 32-bit random words at flat positions
    /// `start..start + out.len()` of an array of `total` words drawn from
    /// this key (`jax.random.bits` of shape with `total` elements).
    pub(crate) fn fill_bits(&self, total: u64, start: u64, out: &mut [u32]) {
        let counters = match self.mode {
            ThreefryMode::Partitionable => Counters::Partitionable,
            ThreefryMode::NonPartitionable => Counters::Original { total },
        };
        fill(self.data, counters, start, out)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?}, {:?})", self.data, self.mode)
    }
}

/// Prints as JAX prints a scalar key:
///
/// ```text
/// Array((), dtype=key<fry>) overlaying:
/// [1428664606 3351135085]
/// ```
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Array((), dtype=key<fry>) overlaying:")?;
        let w = word_width(&[self.data]);
        write!(f, "[{:>w$} {:>w$}]", self.data[0], self.data[1])
    }
}

/// A one-dimensional array of keys, as `split` returns it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct KeyArray {
    data: Vec<[u32; 2]>,
    mode: ThreefryMode,
}

impl KeyArray {
    /// Number of keys.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the array holds no key.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The array's shape, `(len,)`.
    pub fn shape(&self) -> [usize; 1] {
        [self.data.len()]
    }

    /// Key `i`, copied out of the array, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<Key> {
        self.data.get(i).map(|&data| Key {
            data,
            mode: self.mode,
        })
    }

    /// The keys' Threefry mode.
    pub fn mode(&self) -> ThreefryMode {
        self.mode
    }

    /// The raw words, shape `(len, 2)` (`jax.random.key_data`).
    pub fn data(&self) -> &[[u32; 2]] {
        &self.data
    }

    /// Builds a key array from raw words (`jax.random.wrap_key_data`).
    pub fn from_data(data: Vec<[u32; 2]>, mode: ThreefryMode) -> KeyArray {
        KeyArray { data, mode }
    }

    /// The keys as a fixed-size array, as Python's `a, b = split(key)`.
    ///
    /// ```
    /// use flaxen::random;
    /// let [a, b, c] = random::split(random::key(0), 3).into_array().unwrap();
    /// # let _ = (a, b, c);
    /// ```
    pub fn into_array<const N: usize>(self) -> Result<[Key; N], RandomError> {
        let len = self.data.len();
        let keys: Vec<Key> = self.into_iter().collect();
        keys.try_into().map_err(|_| RandomError::KeyCount {
            expected: N,
            found: len,
        })
    }
}

impl IntoIterator for KeyArray {
    type Item = Key;
    type IntoIter = std::iter::Map<
        std::iter::Zip<std::vec::IntoIter<[u32; 2]>, std::iter::Repeat<ThreefryMode>>,
        fn(([u32; 2], ThreefryMode)) -> Key,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.data
            .into_iter()
            .zip(std::iter::repeat(self.mode))
            .map(|(data, mode)| Key { data, mode })
    }
}

impl FromIterator<Key> for KeyArray {
    /// Collects keys into an array; an empty iterator gives an empty array in
    /// the default mode, and the mode of the first key is kept otherwise.
    fn from_iter<I: IntoIterator<Item = Key>>(iter: I) -> Self {
        let mut mode = None;
        let data = iter
            .into_iter()
            .map(|k| {
                mode.get_or_insert(k.mode);
                k.data
            })
            .collect();
        KeyArray {
            data,
            mode: mode.unwrap_or_default(),
        }
    }
}

/// Prints as JAX prints a key array:
///
/// ```text
/// Array((3,), dtype=key<fry>) overlaying:
/// [[1797259609 2579123966]
///  [ 928981903 3453687069]
///  [4146024105 2718843009]]
/// ```
impl fmt::Display for KeyArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Array(({},), dtype=key<fry>) overlaying:",
            self.data.len()
        )?;
        if self.data.is_empty() {
            return write!(f, "[]");
        }
        let w = word_width(&self.data);
        for (i, d) in self.data.iter().enumerate() {
            let open = if i == 0 { "[[" } else { " [" };
            let close = if i + 1 == self.data.len() {
                "]]"
            } else {
                "]\n"
            };
            write!(f, "{open}{:>w$} {:>w$}{close}", d[0], d[1])?;
        }
        Ok(())
    }
}

/// NumPy pads every element of an integer array to the widest one.
fn word_width(words: &[[u32; 2]]) -> usize {
    words
        .iter()
        .flatten()
        .map(|w| w.to_string().len())
        .max()
        .unwrap_or(1)
}

/// An integer seed for [`key`]: any primitive integer up to 64 bits, signed
/// or unsigned. Negative seeds are taken as two's complement, as JAX does.
pub trait Seed: Copy {
    /// The seed's 64-bit two's-complement bit pattern.
    fn to_bits64(self) -> u64;
}

macro_rules! seed_signed {
    ($($t:ty),*) => {$(
        impl Seed for $t {
            fn to_bits64(self) -> u64 { self as i64 as u64 }
        }
    )*};
}
macro_rules! seed_unsigned {
    ($($t:ty),*) => {$(
        impl Seed for $t {
            fn to_bits64(self) -> u64 { self as u64 }
        }
    )*};
}
seed_signed!(i8, i16, i32, i64, isize);
seed_unsigned!(u8, u16, u32, u64, usize);

/// A key from an integer seed, as `jax.random.key(seed)` with JAX's defaults
/// (32-bit seeds, partitionable Threefry).
///
/// ```
/// use flaxen::random;
/// assert_eq!(random::key_data(&random::key(0)), [0, 0]);
/// assert_eq!(random::key_data(&random::key(-1)), [0, 4294967295]);
/// assert_eq!(random::key_data(&random::key(1u64 << 32 | 5)), [0, 5]);
/// ```
pub fn key(seed: impl Seed) -> Key {
    key_with(seed, SeedWidth::Bits32, ThreefryMode::Partitionable)
}

/// A key from an integer seed with an explicit seed width (JAX's
/// `jax_enable_x64`) and Threefry mode (`jax_threefry_partitionable`).
pub fn key_with(seed: impl Seed, width: SeedWidth, mode: ThreefryMode) -> Key {
    let bits = seed.to_bits64();
    let hi = match width {
        SeedWidth::Bits32 => 0,
        SeedWidth::Bits64 => (bits >> 32) as u32,
    };
    Key {
        data: [hi, bits as u32],
        mode,
    }
}

/// The raw words of a key (`jax.random.key_data`).
pub fn key_data(key: &Key) -> [u32; 2] {
    key.data
}

/// A key from raw words, in the default (partitionable) mode
/// (`jax.random.wrap_key_data`).
pub fn wrap_key_data(data: [u32; 2]) -> Key {
    Key::from_data(data, ThreefryMode::Partitionable)
}

/// An explicit copy of a key (`jax.random.clone`): the way to say that a key
/// is deliberately used more than once.
pub fn clone(key: &Key) -> Key {
    key.clone()
}

/// Splits a key into `n` new keys (`jax.random.split(key, n)`).
///
/// `split(key, 0)` returns an empty key array, as JAX does.
///
/// ```
/// use flaxen::random;
/// let keys = random::split(random::key(0), 3);
/// assert_eq!(keys.data()[0], [1797259609, 2579123966]);
/// ```
pub fn split(key: Key, n: usize) -> KeyArray {
    let data = match key.mode {
        ThreefryMode::Partitionable => (0..n as u64)
            .map(|i| threefry2x32(key.data, [(i >> 32) as u32, i as u32]))
            .collect(),
        ThreefryMode::NonPartitionable => {
            // The iota 0..2n hashed in halves; the flat output, read as
            // (n, 2), gives the keys.
            let mut words = vec![0u32; 2 * n];
            fill(
                key.data,
                Counters::Original {
                    total: 2 * n as u64,
                },
                0,
                &mut words,
            );
            words.chunks_exact(2).map(|w| [w[0], w[1]]).collect()
        }
    };
    KeyArray {
        data,
        mode: key.mode,
    }
}

/// Splits a key into a fixed number of keys, for destructuring:
/// `let [a, b] = split_n(key);` is Python's `a, b = jax.random.split(key)`.
pub fn split_n<const N: usize>(key: Key) -> [Key; N] {
    let keys = split(key, N);
    std::array::from_fn(|i| Key {
        data: keys.data[i],
        mode: keys.mode,
    })
}

/// Folds an integer into a key (`jax.random.fold_in(key, data)`): the
/// Threefry hash of the counter pair `(0, data)`.
///
/// ```
/// use flaxen::random;
/// // The first key `make_rng` gives a root module (Flax randomness guide).
/// let k = random::fold_in(random::key(0), flaxen::core::rng_hash::path_hash(&[1u64.into()], false));
/// assert_eq!(random::key_data(&k), [1428664606, 3351135085]);
/// ```
pub fn fold_in(key: Key, data: u32) -> Key {
    Key {
        data: threefry2x32(key.data, [0, data]),
        mode: key.mode,
    }
}
