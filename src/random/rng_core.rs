//! A bridge to the `rand` ecosystem: [`KeyRng`] implements
//! [`rand_core::RngCore`] over a key's stream of random words, so that
//! `rand_distr` distributions and `ndarray-rand`'s `Array::random_using` can
//! draw from a flaxen key.
//!
//! The words are exactly `jax.random.bits(key, (n,))` in partitionable mode
//! (word `i` of the stream is element `i`), so the stream is deterministic
//! and reproducible; but what `rand_distr` builds from those words is *not*
//! what JAX's samplers compute. Use [`crate::random`]'s own samplers where
//! JAX's numbers matter.

use rand_core::{impls, RngCore};

use super::key::Key;
use super::threefry::{fill, Counters};

/// Words generated at a time.
const BUFFER: usize = 64;

/// A `rand_core::RngCore` reading a key's counter stream, word after word.
///
/// ```
/// use flaxen::random::{self, KeyRng};
/// use rand_core::RngCore;
///
/// let mut rng = KeyRng::new(random::key(1));
/// // The stream is `jax.random.bits(key, (n,))`, word by word.
/// let bits = random::bits(random::key(1), &[2]).unwrap();
/// assert_eq!(rng.next_u32(), bits[0]);
/// assert_eq!(rng.next_u32(), bits[1]);
/// ```
#[derive(Clone, Debug)]
pub struct KeyRng {
    key: [u32; 2],
    /// Stream position of `buffer[0]`.
    base: u64,
    buffer: [u32; BUFFER],
    /// Next unread index into `buffer`; `BUFFER` when it must be refilled.
    next: usize,
}

impl KeyRng {
    /// A generator that reads `key`'s stream from its start.
    pub fn new(key: Key) -> KeyRng {
        KeyRng {
            key: key.data(),
            base: 0u64.wrapping_sub(BUFFER as u64),
            buffer: [0; BUFFER],
            next: BUFFER,
        }
    }

    /// How many words have been read so far.
    pub fn position(&self) -> u64 {
        self.base.wrapping_add(self.next as u64)
    }
}

impl RngCore for KeyRng {
    fn next_u32(&mut self) -> u32 {
        if self.next == BUFFER {
            self.base = self.base.wrapping_add(BUFFER as u64);
            fill(
                self.key,
                Counters::Partitionable,
                self.base,
                &mut self.buffer,
            );
            self.next = 0;
        }
        let w = self.buffer[self.next];
        self.next += 1;
        w
    }

    fn next_u64(&mut self) -> u64 {
        impls::next_u64_via_u32(self)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        impls::fill_bytes_via_next(self, dest)
    }
}
