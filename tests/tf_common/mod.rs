//! Shared helpers of the TensorFlow fixture tests: reading fixtures and
//! encoding outputs the way tools/oracle/tf/gen_fixtures.py stores them.

#![allow(dead_code)]

use ndarray::ArrayD;
use serde_json::Value;
use sha1::{Digest, Sha1};

/// Reads `tests/fixtures/<name>`.
pub fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// An element as the fixtures store it: float bits or the integer.
pub trait Enc: Copy {
    fn enc(self) -> i128;
    fn le(self, out: &mut Vec<u8>);
}

impl Enc for f32 {
    fn enc(self) -> i128 {
        i128::from(self.to_bits())
    }
    fn le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
}
impl Enc for f64 {
    fn enc(self) -> i128 {
        i128::from(self.to_bits())
    }
    fn le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
}
macro_rules! enc_half {
    ($($t:ty),*) => {$(
        impl Enc for $t {
            fn enc(self) -> i128 {
                i128::from(self.to_bits())
            }
            fn le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_bits().to_le_bytes());
            }
        }
    )*};
}
enc_half!(flaxen::random::tf::F16, flaxen::random::tf::BF16);

macro_rules! enc_int {
    ($($t:ty),*) => {$(
        impl Enc for $t {
            fn enc(self) -> i128 {
                i128::from(self)
            }
            fn le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
enc_int!(i32, i64, u32, u64);

/// An output array encoded as the fixture would store it.
#[derive(Debug, PartialEq)]
pub enum Encoded {
    Values(Vec<i128>),
    Sha1(String),
}

/// Encodes `a` like the oracle: SHA-1 of the little-endian bytes above 2048 elements.
pub fn encode<T: Enc>(a: &ArrayD<T>) -> Encoded {
    if a.len() > 2048 {
        let mut bytes = Vec::with_capacity(a.len() * 8);
        a.iter().for_each(|&x| x.le(&mut bytes));
        Encoded::Sha1(format!("{:x}", Sha1::digest(&bytes)))
    } else {
        Encoded::Values(a.iter().map(|&x| x.enc()).collect())
    }
}

/// The expected encoding of a fixture record (`values` or `sha1`).
pub fn expected(case: &Value) -> Encoded {
    if let Some(h) = case.get("sha1") {
        Encoded::Sha1(h.as_str().unwrap().to_string())
    } else {
        let mut out = Vec::new();
        flatten(&case["values"], &mut out);
        Encoded::Values(out)
    }
}

/// Row-major integers of a nested JSON array.
fn flatten(v: &Value, out: &mut Vec<i128>) {
    match v.as_array() {
        Some(items) => items.iter().for_each(|x| flatten(x, out)),
        None => out.push(int(v)),
    }
}

/// A JSON integer of any sign as `i128`.
pub fn int(v: &Value) -> i128 {
    v.as_i64()
        .map(i128::from)
        .or_else(|| v.as_u64().map(i128::from))
        .unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// A JSON float.
pub fn float(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

/// A JSON array of integers as `i64`.
pub fn i64s(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| int(x) as i64)
        .collect()
}

/// A JSON array of integers as `usize` (a shape).
pub fn shape(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

/// Whether this machine's `f64` `ln`/`sin`/`cos` are the ones the fixtures
/// were made with: glibc on x86-64 picks an FMA build of `log`, `sin` and
/// `cos` when the CPU has FMA and AVX2, and that build rounds about 0.1% of
/// Box–Muller's `sin`/`cos` values differently from the plain SSE2 build.
/// TensorFlow's own `float64` normals therefore depend on the CPU, and the
/// fixtures (made on x86-64 with FMA, glibc 2.36) are exact only there.
pub fn f64_libm_is_reference() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
    {
        std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64")))]
    {
        false
    }
}

/// Whether a case is a `float64` normal or truncated normal, whose values
/// depend on the platform's double-precision `log`/`sin`/`cos`.
pub fn uses_f64_libm(case: &Value) -> bool {
    let call = case
        .get("op")
        .or_else(|| case.get("call"))
        .and_then(Value::as_str)
        .unwrap_or("");
    case.get("dtype").and_then(Value::as_str) == Some("float64")
        && (call == "normal" || call == "truncated_normal")
}

/// Compares an output with a fixture record. `float64` normals on a
/// platform whose libm is not the fixtures' are compared to within 4 ulp
/// (SHA-1 records cannot be, and are skipped); everything else exactly.
pub fn matches(case: &Value, got: &Encoded) -> bool {
    let want = expected(case);
    if !uses_f64_libm(case) || f64_libm_is_reference() {
        return *got == want;
    }
    match (got, want) {
        (Encoded::Values(g), Encoded::Values(w)) => {
            g.len() == w.len()
                && g.iter().zip(&w).all(|(&a, &b)| {
                    let (a, b) = (a as u64 as i64, b as u64 as i64);
                    (a < 0) == (b < 0) && a.abs_diff(b) <= 4
                })
        }
        _ => true,
    }
}
