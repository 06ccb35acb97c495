//! Bernoulli booleans and bounded integers.

use ndarray::{ArrayD, Zip};

use super::uniform::{check_range, unit_float};
use crate::random::error::RandomError;
use crate::random::key::{split_n, Key};
use crate::random::sampling::{sample, sample_all_into};

/// Booleans that are `true` with probability `p`
/// (`jax.random.bernoulli(key, p, shape)`, i.e. `uniform(key, shape) < p`).
///
/// `p` outside `[0, 1]`, or NaN, is an error (JAX would quietly return all
/// `true` or all `false`).
///
/// ```
/// use flaxen::random;
/// let keep = random::bernoulli(random::key(0), 0.8, &[3, 4]).unwrap();
/// assert_eq!(keep.shape(), &[3, 4]);
/// assert!(random::bernoulli(random::key(0), 1.5, &[2]).is_err());
/// ```
pub fn bernoulli(key: Key, p: f32, shape: &[usize]) -> Result<ArrayD<bool>, RandomError> {
    check_probability(p)?;
    sample(
        "bernoulli",
        &key,
        shape,
        #[inline(always)]
        |words, out| {
            for (o, &w) in out.iter_mut().zip(words) {
                *o = unit_float(w) < p;
            }
        },
    )
}

/// `p` as a probability of [`bernoulli`]: in `[0, 1]`, not NaN.
fn check_probability(p: f32) -> Result<(), RandomError> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(RandomError::Probability {
            function: "bernoulli",
            p,
        })
    }
}

/// [`bernoulli`] as `1.0` / `0.0` in one pass (no boolean array to convert):
/// the keep mask of `Dropout`, drawn again on every call of a compiled
/// step.
pub(crate) fn bernoulli_mask(
    key: &Key,
    p: f32,
    shape: &[usize],
) -> Result<ArrayD<f32>, RandomError> {
    check_probability(p)?;
    sample(
        "bernoulli",
        key,
        shape,
        #[inline(always)]
        |words, out| {
            for (o, &w) in out.iter_mut().zip(words) {
                *o = if unit_float(w) < p { 1.0 } else { 0.0 };
            }
        },
    )
}

/// One mask of [`bernoulli_bytes_into_all`]: its key, shape and buffer.
pub(crate) type ByteMask<'a> = (&'a Key, &'a [usize], &'a mut [u8]);

/// [`bernoulli`] of each `shape` with probability `ps[i]` as one byte per
/// element (`1` for `true`) into each `out`, buffers the caller reuses:
/// the keep masks of `Dropout` as a compiled step draws them again on
/// every call (a quarter of the float mask's bytes to write and read
/// back), shared out together over the calling thread and the pool.
pub(crate) fn bernoulli_bytes_into_all(
    masks: &mut [ByteMask<'_>],
    ps: &[f32],
) -> Result<(), RandomError> {
    assert_eq!(masks.len(), ps.len(), "one probability per mask");
    ps.iter().try_for_each(|&p| check_probability(p))?;
    sample_all_into(
        "bernoulli",
        masks,
        #[inline(always)]
        |i, words, out| {
            let p = ps[i];
            for (o, &w) in out.iter_mut().zip(words) {
                *o = u8::from(unit_float(w) < p);
            }
        },
    )
}

/// Integers uniformly in `[minval, maxval)`
/// (`jax.random.randint(key, shape, minval, maxval)` with `dtype=int32`).
///
/// Like JAX, it draws two 32-bit words per element (from the two halves of
/// `split(key)`) and reduces them modulo the span, which keeps the bias tiny
/// for spans that are not powers of two. `minval >= maxval` is an error
/// (JAX would return `minval` everywhere).
///
/// ```
/// use flaxen::random;
/// let d = random::randint(random::key(0), &[5], 1, 7).unwrap();
/// assert!(d.iter().all(|&v| (1..7).contains(&v)));
/// ```
pub fn randint(
    key: Key,
    shape: &[usize],
    minval: i32,
    maxval: i32,
) -> Result<ArrayD<i32>, RandomError> {
    check_range("randint", minval, maxval)?;
    let [k1, k2] = split_n(key);
    let higher = super::bits(k1, shape).map_err(|e| rename(e, "randint"))?;
    let lower = super::bits(k2, shape).map_err(|e| rename(e, "randint"))?;
    let span = maxval.wrapping_sub(minval) as u32;
    // 2^32 mod span, computed as (2^16 mod span)^2 mod span.
    let multiplier = (1u32 << 16) % span;
    let multiplier = multiplier.wrapping_mul(multiplier) % span;
    Ok(Zip::from(&higher).and(&lower).map_collect(|&hi, &lo| {
        let offset = (hi % span).wrapping_mul(multiplier).wrapping_add(lo % span) % span;
        minval.wrapping_add(offset as i32)
    }))
}

/// Reports an error of an inner sampler under the public function's name.
pub(crate) fn rename(e: RandomError, function: &'static str) -> RandomError {
    match e {
        RandomError::ShapeOverflow { shape, .. } => RandomError::ShapeOverflow { function, shape },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::{key, ThreefryMode};

    #[test]
    fn the_mask_is_bernoulli_as_floats() {
        for (seed, p, shape) in [
            (0, 0.9, vec![128, 512]),
            (3, 0.5, vec![7, 3]),
            (5, 0.0, vec![4]),
        ] {
            let k = key(seed);
            let mask = bernoulli_mask(&k, p, &shape).unwrap();
            let bools = bernoulli(k, p, &shape).unwrap();
            assert_eq!(mask, bools.mapv(|b| if b { 1.0 } else { 0.0 }));
        }
        assert!(bernoulli_mask(&key(0), f32::NAN, &[2]).is_err());
    }

    /// The byte mask, drawn into a reused buffer, holds `bernoulli`'s
    /// booleans, on both sides of the parallel threshold and in both
    /// threefry modes.
    #[test]
    fn the_byte_mask_is_bernoulli_as_bytes() {
        let mut buf = Vec::new();
        for (seed, p, shape) in [
            (0, 0.9, vec![128, 512]),
            (1, 0.9, vec![128, 512]),
            (3, 0.5, vec![7, 3]),
            (5, 0.0, vec![4]),
            (6, 1.0, vec![3, 2049]),
        ] {
            for mode in [ThreefryMode::Partitionable, ThreefryMode::NonPartitionable] {
                let k = key(seed).with_mode(mode);
                buf.resize(shape.iter().product(), 7);
                bernoulli_bytes_into_all(&mut [(&k, &shape[..], &mut buf[..])], &[p]).unwrap();
                let bools = bernoulli(k, p, &shape).unwrap();
                let expected: Vec<u8> = bools.iter().map(|&b| u8::from(b)).collect();
                assert_eq!(buf, expected, "{seed} {p} {shape:?} {mode:?}");
            }
        }
        let bad = bernoulli_bytes_into_all(&mut [(&key(0), &[2][..], &mut [0; 2][..])], &[1.5]);
        assert!(bad.is_err());
    }

    /// Masks drawn together hold each one's `bernoulli` booleans, in both
    /// threefry modes: large ones (shared out over threads, a share
    /// spanning masks), small ones (one by one), mixed.
    #[test]
    fn masks_drawn_together_are_each_bernoulli() {
        let modes = [ThreefryMode::Partitionable, ThreefryMode::NonPartitionable];
        let cases = [
            vec![vec![128, 512], vec![128, 512]],
            vec![vec![7, 3], vec![4], vec![2, 5]],
            vec![vec![3, 2049], vec![40000], vec![1]],
        ];
        for (mode, shapes) in modes
            .iter()
            .flat_map(|m| cases.iter().map(move |c| (*m, c)))
        {
            let keys: Vec<Key> = (0..shapes.len() as u32)
                .map(|i| key(10 + i).with_mode(mode))
                .collect();
            let ps: Vec<f32> = (0..shapes.len()).map(|i| 0.9 - 0.3 * i as f32).collect();
            let mut bufs: Vec<Vec<u8>> =
                shapes.iter().map(|s| vec![9; s.iter().product()]).collect();
            let mut masks: Vec<(&Key, &[usize], &mut [u8])> = keys
                .iter()
                .zip(shapes)
                .zip(bufs.iter_mut())
                .map(|((k, s), b)| (k, &s[..], &mut b[..]))
                .collect();
            bernoulli_bytes_into_all(&mut masks, &ps).unwrap();
            for (((k, s), b), &p) in keys.iter().zip(shapes).zip(&bufs).zip(&ps) {
                let bools = bernoulli(k.clone(), p, s).unwrap();
                let expected: Vec<u8> = bools.iter().map(|&b| u8::from(b)).collect();
                assert_eq!(b, &expected, "{s:?} {p}");
            }
        }
    }
}
