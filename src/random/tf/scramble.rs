//! The stateless seed scramble: a shape-`[2]` seed to the `key` and
//! `counter` of the V2 kernels (`StatelessRandomGetKeyCounter`, spec §2.1).

use super::dtype::SeedInt;
use super::error::TfRandomError;
use super::philox::{philox4x32_10, Philox};

/// The fixed key of the scramble, `0x02461E293EC8F720`.
const SCRAMBLE_KEY: [u32; 2] = [0x3EC8_F720, 0x0246_1E29];

/// The `key` and `counter` TensorFlow derives from a stateless seed
/// (`tf.random.experimental.stateless_random_get_key_counter` gives the same
/// with `alg="philox"`).
///
/// Each seed element is sign-extended to 64 bits; one Philox block of the
/// seed under a fixed key gives `key = m0 | m1 << 32` and
/// `counter = [0, m2 | m3 << 32]`.
///
/// ```
/// use flaxen::random::tf::stateless_key_counter;
/// let (key, counter) = stateless_key_counter(&[1, 2]).unwrap();
/// assert_eq!(key, 0x908502c96d2f7fba);
/// assert_eq!(counter, [0, 0xf7734320619cb60b]);
/// ```
pub fn stateless_key_counter<S: SeedInt>(seed: &[S]) -> Result<(u64, [u64; 2]), TfRandomError> {
    let &[a, b] = seed else {
        return Err(TfRandomError::SeedShape { len: seed.len() });
    };
    let (s0, s1) = (a.to_u64_bits(), b.to_u64_bits());
    let m = philox4x32_10(
        [s0 as u32, (s0 >> 32) as u32, s1 as u32, (s1 >> 32) as u32],
        SCRAMBLE_KEY,
    );
    let key = u64::from(m[0]) | (u64::from(m[1]) << 32);
    let counter = [0, u64::from(m[2]) | (u64::from(m[3]) << 32)];
    Ok((key, counter))
}

/// The Philox stream of a stateless seed.
pub(crate) fn philox_for_seed<S: SeedInt>(seed: &[S]) -> Result<Philox, TfRandomError> {
    let (key, counter) = stateless_key_counter(seed)?;
    Ok(Philox::from_key_counter(key, counter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_first_block() {
        let mut p = philox_for_seed(&[1i64, 2]).unwrap();
        assert_eq!(
            p.next_block(),
            [0x41ec0a2c, 0x679894f1, 0xebff843e, 0x16148793]
        );
    }

    #[test]
    fn int32_and_int64_seeds_agree() {
        assert_eq!(
            stateless_key_counter(&[-5i32, 7]).unwrap(),
            stateless_key_counter(&[-5i64, 7]).unwrap()
        );
    }

    #[test]
    fn wrong_shape() {
        assert_eq!(
            stateless_key_counter(&[1i32, 2, 3]),
            Err(TfRandomError::SeedShape { len: 3 })
        );
        assert_eq!(
            stateless_key_counter::<i64>(&[]),
            Err(TfRandomError::SeedShape { len: 0 })
        );
    }
}
