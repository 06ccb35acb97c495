//! Shared helpers of the integration tests: fixture loading and ulp counting.
#![allow(dead_code)]

use serde::de::DeserializeOwned;

/// Reads `tests/fixtures/<name>` (written by tools/oracle/).
pub fn load_fixture<T: DeserializeOwned>(name: &str) -> T {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Distance in units in the last place between two floats (0 when equal,
/// including +0 and -0; NaN equals NaN).
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 {
            i64::from(i32::MIN) - i64::from(i)
        } else {
            i64::from(i)
        }
    };
    key(a).abs_diff(key(b))
}

/// An f32 array as the oracle scripts write it: the shape, and the values
/// row-major as exact decimals.
#[derive(serde::Deserialize)]
pub struct F32Array {
    /// The shape.
    pub shape: Vec<usize>,
    /// The values, row-major.
    pub data: Vec<f32>,
}

impl F32Array {
    /// The values as a tensor.
    pub fn tensor(&self) -> flaxen::tensor::Tensor {
        flaxen::tensor::Tensor::from_vec(self.data.clone(), &self.shape).expect("shape fits data")
    }

    /// The values' bit patterns.
    pub fn bits(&self) -> Vec<u32> {
        self.data.iter().map(|v| v.to_bits()).collect()
    }
}

/// The bit patterns of a tensor's values, row-major.
pub fn tensor_bits(t: &flaxen::tensor::Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}
