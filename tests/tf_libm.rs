//! flaxen's portable `logf`/`sincosf` round exactly as glibc's, which
//! TensorFlow's Box–Muller uses, on every input Box–Muller can produce:
//! all 2^23 values of `u1 = Uint32ToFloat(w)` (plus the 1e-7 clamp) for
//! `logf`, and all 2^23 values of `v1 = f32(2π_f64 · u)` for `sincosf`.
//!
//! Everywhere, the SHA-1 of the outputs is compared with the digest that
//! tools/oracle/tf/libm_digests.py computed by calling glibc's `logf` and
//! `sincosf` directly. On glibc Linux, where Rust's `std` calls glibc, the
//! values are also compared one by one, and on a sample of all floats.

mod tf_common;

use flaxen::random::tf::libm_f32::{logf, sincosf};
use flaxen::random::tf::uint32_to_float;
use rayon::prelude::*;
use sha1::{Digest, Sha1};

/// Every `u1` that Box–Muller can pass to `logf`, in order of the word's low 23 bits.
fn all_u1() -> impl IndexedParallelIterator<Item = f32> {
    (0u32..1 << 23)
        .into_par_iter()
        .map(|m| uint32_to_float(m).max(1.0e-7))
}

/// Every `v1` that Box–Muller can pass to `sincosf`.
fn all_v1() -> impl IndexedParallelIterator<Item = f32> {
    (0u32..1 << 23)
        .into_par_iter()
        .map(|m| (2.0 * std::f64::consts::PI * f64::from(uint32_to_float(m))) as f32)
}

fn digest(bits: &[u32]) -> String {
    let mut h = Sha1::new();
    for b in bits {
        h.update(b.to_le_bytes());
    }
    format!("{:x}", h.finalize())
}

#[test]
fn logf_digest_matches_glibc() {
    let fx = tf_common::fixture("tf_libm.json");
    let out: Vec<u32> = all_u1().map(|u| logf(u).to_bits()).collect();
    assert_eq!(digest(&out), fx["logf_u1"].as_str().unwrap());
}

#[test]
fn sincosf_digest_matches_glibc() {
    let fx = tf_common::fixture("tf_libm.json");
    let (s, c): (Vec<u32>, Vec<u32>) = all_v1()
        .map(|v| {
            let (s, c) = sincosf(v);
            (s.to_bits(), c.to_bits())
        })
        .unzip();
    assert_eq!(digest(&s), fx["sinf_v1"].as_str().unwrap());
    assert_eq!(digest(&c), fx["cosf_v1"].as_str().unwrap());
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod against_std_on_glibc {
    use super::*;

    /// Every 61st bit pattern of the non-negative and negative floats.
    fn sample() -> impl ParallelIterator<Item = f32> {
        (0u32..=u32::MAX / 61)
            .into_par_iter()
            .map(|i| f32::from_bits(i.wrapping_mul(61)))
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn logf_equals_glibc_on_all_u1() {
        let bad = all_u1().filter(|&u| !same(logf(u), u.ln())).count();
        assert_eq!(bad, 0);
    }

    #[test]
    fn sincosf_equals_glibc_on_all_v1() {
        let bad = all_v1()
            .filter(|&v| {
                let (s, c) = sincosf(v);
                !same(s, v.sin()) || !same(c, v.cos())
            })
            .count();
        assert_eq!(bad, 0);
    }

    #[test]
    fn logf_equals_glibc_on_a_sample_of_all_floats() {
        let bad: Vec<f32> = sample()
            .filter(|&x| !same(logf(x), x.ln()))
            .take_any(5)
            .collect();
        assert!(bad.is_empty(), "{bad:?}");
    }

    #[test]
    fn sincosf_equals_glibc_on_a_sample_of_all_floats() {
        let bad: Vec<f32> = sample()
            .filter(|&x| {
                let (s, c) = sincosf(x);
                !same(s, x.sin()) || !same(c, x.cos())
            })
            .take_any(5)
            .collect();
        assert!(bad.is_empty(), "{bad:?}");
    }
}
