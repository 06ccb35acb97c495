//! flaxen's Generator over JAX's Threefry-2x32 (`Algorithm::ThreeFry`): the
//! stream is the one documented on `Generator` and in the book.

use flaxen::random::tf::{uint32_to_float, Algorithm, Generator};
use flaxen::random::threefry2x32;

/// The documented words of block `j` of a draw at counter `c` with key `k`.
fn block(k: u64, c: u64, j: u64) -> [u32; 4] {
    let key = [(k >> 32) as u32, k as u32];
    let t = |x: u64| threefry2x32(key, [(x >> 32) as u32, x as u32]);
    let x = c.wrapping_add(2 * j);
    let [a, b] = t(x);
    let [d, e] = t(x.wrapping_add(1));
    [a, b, d, e]
}

#[test]
fn words_follow_the_documented_layout() {
    let (c, k) = (u64::MAX - 2, 0x0123_4567_89ab_cdef_u64);
    let mut g = Generator::from_state(&[c as i64, k as i64], Algorithm::ThreeFry).unwrap();
    let words = g.uniform_full_int::<u32>(&[10]).unwrap();
    let want: Vec<u32> = (0..3).flat_map(|j| block(k, c, j)).take(10).collect();
    assert_eq!(words.into_raw_vec_and_offset().0, want);
    // The counter moved on by 256 per element, mod 2^64; the key stayed.
    assert_eq!(g.state().words(), &[c.wrapping_add(2560) as i64, k as i64]);
}

#[test]
fn floats_and_64_bit_ints_use_the_tensorflow_layout() {
    let mut g = Generator::from_key_counter(42, &[7], Algorithm::ThreeFry).unwrap();
    let u = g.uniform(&[3]).unwrap();
    let b = block(42, 7, 0);
    assert_eq!(
        u.into_raw_vec_and_offset().0,
        b[..3]
            .iter()
            .map(|&w| uint32_to_float(w))
            .collect::<Vec<_>>()
    );
    let i = g.uniform_full_int::<u64>(&[1]).unwrap();
    let b = block(42, 7 + 3 * 256, 0);
    assert_eq!(i[[0]], u64::from(b[0]) | u64::from(b[1]) << 32);
}

#[test]
fn from_seed_split_and_reset() {
    let mut g = Generator::from_seed_with(5, Algorithm::ThreeFry);
    assert_eq!(g.state().words(), &[5, 0]);
    let first = g.normal(&[4]).unwrap();
    let children = g.split(2).unwrap();
    for c in &children {
        assert_eq!(c.algorithm(), Algorithm::ThreeFry);
        assert_eq!(c.state().counter(), &[0]);
    }
    assert_ne!(children[0].key(), children[1].key());
    assert_eq!(g.state().words(), &[5 + 4 * 256 + 2 * 256, 0]);
    g.reset_from_seed(5);
    assert_eq!(g.normal(&[4]).unwrap(), first);
    // Truncated normals stay inside two standard deviations.
    let t = g.truncated_normal_as::<f64>(&[1000], 0.0, 1.0).unwrap();
    assert!(t.iter().all(|x| x.abs() < 2.0));
}

#[test]
fn differs_from_philox() {
    let a = Generator::from_seed_with(1, Algorithm::ThreeFry)
        .normal(&[8])
        .unwrap();
    let b = Generator::from_seed(1).normal(&[8]).unwrap();
    assert_ne!(a, b);
}
