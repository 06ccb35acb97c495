//! Shared helpers of the integration tests: fixture loading, ulp counting
//! and the digests of large expected arrays.
#![allow(dead_code)]

pub mod counting;

use serde::de::DeserializeOwned;

/// The numbers of a fixture's JSON array as `u32`s (f32 bit patterns).
pub fn json_u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u32)
        .collect()
}

/// A fixture's JSON shape.
pub fn json_shape(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect()
}

/// A tensor of `shape` from a fixture's JSON array of f32 bit patterns.
pub fn json_tensor(bits: &serde_json::Value, shape: &[usize]) -> flaxen::tensor::Tensor {
    let values = json_u32s(bits).into_iter().map(f32::from_bits).collect();
    flaxen::tensor::Tensor::from_vec(values, shape).unwrap()
}

/// A fixture's `{path: {shape, bits}}` collection as a tree.
pub fn json_tree(want: &serde_json::Value) -> flaxen::tensor::Tree {
    want.as_object()
        .unwrap()
        .iter()
        .fold(flaxen::tensor::Tree::new(), |t, (k, v)| {
            t.with(
                k.as_str(),
                json_tensor(&v["bits"], &json_shape(&v["shape"])),
            )
        })
}

/// How many of `got`'s bit patterns differ from `want`'s, and the first
/// (`None`: all equal).
pub fn differing_bits(got: &[u32], want: &[u32]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} elements, want {}", got.len(), want.len()));
    }
    let bad: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
    bad.first().map(|&i| {
        format!(
            "{} of {} differ, first at {i}: {} vs {}",
            bad.len(),
            want.len(),
            f32::from_bits(got[i]),
            f32::from_bits(want[i])
        )
    })
}

/// `Ok` if the fixtures read on this CPU hold its `rsqrt`, else why not.
///
/// XLA:CPU's `rsqrt` starts from the CPU's own approximate reciprocal
/// square root, whose values differ between vendors, and refines it once
/// on AMD, twice elsewhere, so JAX's results through `rsqrt`
/// (normalization layers, optax's RMSProp and AdaGrad, `rsqrt` itself)
/// depend on the CPU. flaxen's `rsqrt` follows the same rule. The
/// fixtures are an AMD EPYC's (Zen 4), with the files that differ on other
/// CPUs recorded under `tests/fixtures/cpu/<signature>/` (see
/// [`fixture_path`]); where neither matches, the tests through `rsqrt`
/// say that they did not run. The check: `rsqrt` of tensor_ops.json's
/// 1024 inputs against JAX's outputs in the fixture read here.
pub fn rsqrt_as_recorded() -> Result<(), String> {
    static SAME: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    SAME.get_or_init(|| {
        let fixture: serde_json::Value = load_fixture("tensor_ops.json");
        let rule = &fixture["rules"]["rsqrt"];
        let want = json_u32s(&rule["out"]);
        let got = flaxen_rsqrt_bits(&rule["x"]);
        let differ = got.iter().zip(&want).filter(|(g, w)| g != w).count();
        if differ == 0 {
            Ok(())
        } else {
            Err(format!(
                "no fixtures for this CPU's rsqrt (signature {}; {differ} of {} values differ \
                 from the recording CPU's: run tools/oracle/collect_cpu_fixtures.py)",
                cpu_signature(),
                want.len()
            ))
        }
    })
    .clone()
}

/// Returns from the calling test, saying why, unless the fixtures read on
/// this CPU hold its `rsqrt` ([`rsqrt_as_recorded`]): the guard of every
/// test through `rsqrt`.
#[allow(unused_macros)]
macro_rules! require_rsqrt_as_recorded {
    () => {
        if let Err(why) = crate::common::rsqrt_as_recorded() {
            eprintln!("not run: {why}");
            return;
        }
    };
}
#[allow(unused_imports)]
pub(crate) use require_rsqrt_as_recorded;

/// flaxen's `rsqrt` of a fixture's f32 bit patterns, as bit patterns.
fn flaxen_rsqrt_bits(x: &serde_json::Value) -> Vec<u32> {
    let x: Vec<f32> = json_u32s(x).into_iter().map(f32::from_bits).collect();
    let n = x.len();
    flaxen::tensor::Tensor::from_vec(x, &[n])
        .unwrap()
        .rsqrt()
        .to_vec()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// This CPU's signature as tools/oracle/collect_cpu_fixtures.py names its
/// directory: the first 12 hex digits of the SHA-1 of flaxen's `rsqrt`
/// over tensor_ops.json's `rules.rsqrt` inputs (little-endian bits). Equal
/// to a directory's name only where flaxen's `rsqrt` gives the bits JAX
/// gave on the CPU that recorded it.
pub fn cpu_signature() -> &'static str {
    static SIGNATURE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SIGNATURE.get_or_init(|| {
        use sha1::{Digest, Sha1};
        let path = format!(
            "{}/tests/fixtures/tensor_ops.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut sha = Sha1::new();
        for bits in flaxen_rsqrt_bits(&fixture["rules"]["rsqrt"]["x"]) {
            sha.update(bits.to_le_bytes());
        }
        let hex: String = sha.finalize().iter().map(|b| format!("{b:02x}")).collect();
        hex[..12].to_string()
    })
}

/// The signature ([`cpu_signature`]) of the CPU the fixtures directly
/// under `tests/fixtures/` were recorded on: an AMD EPYC (Zen 4).
pub const RECORDING_CPU: &str = "76a6d45fc554";

/// The signature of the Intel Xeon (Emerald Rapids) whose fixtures are
/// under `tests/fixtures/cpu/ff47a056181a/`.
pub const INTEL_XEON: &str = "ff47a056181a";

/// The entry of `pins` for this CPU's signature: for values that depend on
/// the CPU beyond the fixtures, such as the known distance of an inexact
/// result from JAX's. `None` where this CPU has none.
pub fn per_cpu<T: Copy>(pins: &[(&str, T)]) -> Option<T> {
    pins.iter()
        .find(|(sig, _)| *sig == cpu_signature())
        .map(|&(_, v)| v)
}

/// Whether YNNPACK tiles long reductions here as on the machine the
/// fixtures come from (2 CPUs): only with a thread pool, so not on one CPU
/// or with `PJRT_NPROC`/`NPROC` set to 1.
#[allow(dead_code)]
pub fn ynn_pooled() -> bool {
    std::thread::available_parallelism().map_or(1, |n| n.get()) > 1
        && std::env::var("PJRT_NPROC").map_or(true, |v| v.trim() != "1")
        && std::env::var("NPROC").map_or(true, |v| v.trim() != "1")
}

/// The path of fixture `name` (relative to `tests/fixtures/`) for this
/// CPU: the first of `tests/fixtures/cpu/<cpu_signature()>/<name>` (the
/// fixtures that came out different through `rsqrt` on such a CPU) and,
/// on a CPU with AVX512-FP16, `tests/fixtures/cpu/avx512fp16/<name>` (the
/// `float16` samplers, which XLA computes natively there) that exists,
/// else `tests/fixtures/<name>` (the AMD EPYC's).
pub fn fixture_path(name: &str) -> String {
    let root = format!("{}/tests/fixtures", env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![cpu_signature().to_string()];
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512fp16") {
        dirs.push("avx512fp16".to_string());
    }
    dirs.iter()
        .map(|d| format!("{root}/cpu/{d}/{name}"))
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| format!("{root}/{name}"))
}

/// The oracle scripts' uniform hashed inputs (generate_gemv.py's
/// `inputs`): `((i * 2654435761 + seed * 40503) mod 2^32) / 2^32 * 2w - w`
/// with `w = half_width`, in f64, then f32 (`i` the row-major index).
#[allow(dead_code)]
pub fn uniform_inputs(shape: &[usize], seed: u64, half_width: f64) -> flaxen::tensor::Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n as u64)
        .map(|i| {
            let h = (i * 2654435761 + seed * 40503) % (1 << 32);
            (h as f64 / 4294967296.0 * 2.0 * half_width - half_width) as f32
        })
        .collect();
    flaxen::tensor::Tensor::from_vec(v, shape).unwrap()
}

/// The oracle scripts' hashed inputs (generate_matmul.py's `inputs`),
/// mixed magnitudes: `u * 2^e` with `u = ((j * 2654435761 + seed * 40503)
/// mod 2^32) / 2^32 * 4 - 2` and `e = ((j * 40503 + seed * 2654435761) >>
/// 7) mod 13 - 6`, in f64, then f32 (`j` the row-major index).
pub fn hashed_inputs(shape: &[usize], seed: u64) -> flaxen::tensor::Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n as u64)
        .map(|j| {
            let h = (j * 2654435761 + seed * 40503) % (1 << 32);
            let e = ((j * 40503 + seed * 2654435761) >> 7) % 13;
            let u = h as f64 / 4294967296.0 * 4.0 - 2.0;
            (u * 2f64.powi(e as i32 - 6)) as f32
        })
        .collect();
    flaxen::tensor::Tensor::from_vec(v, shape).unwrap()
}

/// Reads fixture `name` (written by tools/oracle/) for this CPU: see
/// [`fixture_path`].
pub fn load_fixture<T: DeserializeOwned>(name: &str) -> T {
    let path = fixture_path(name);
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

/// An f32 array as the oracle scripts write exact values: the shape, and
/// the values' bit patterns row-major.
#[derive(serde::Deserialize)]
pub struct Bits {
    /// The shape.
    pub shape: Vec<usize>,
    /// The values' bit patterns, row-major.
    pub bits: Vec<u32>,
}

impl Bits {
    /// The values as a tensor.
    pub fn tensor(&self) -> flaxen::tensor::Tensor {
        let v = self.bits.iter().map(|&b| f32::from_bits(b)).collect();
        flaxen::tensor::Tensor::from_vec(v, &self.shape).expect("shape fits data")
    }
}

/// The bit patterns of a tensor's values, row-major.
pub fn tensor_bits(t: &flaxen::tensor::Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

/// An expected f32 array as the oracle writes it (tools/oracle/fixture_io.py's
/// `expected`): its bits, or for more than 4,096 elements the SHA-1 of its
/// bits (little-endian, every NaN as 0x7fc00000) and its length.
#[derive(serde::Deserialize)]
#[serde(untagged)]
pub enum Expected {
    /// Every value's bit pattern, row-major.
    Bits(Vec<u32>),
    /// The length and the SHA-1 (hex) of the bits, as [`digest`] computes it.
    Digest {
        /// How many values.
        n: usize,
        /// The SHA-1 of their bits, lowercase hex.
        sha1: String,
    },
}

/// The SHA-1 (hex) of `values`' bits as the oracle hashes them
/// (little-endian u32s, every NaN as 0x7fc00000: XLA does not promise a
/// NaN's payload or sign).
pub fn digest(values: &[f32]) -> String {
    use sha1::{Digest, Sha1};
    let mut sha = Sha1::new();
    for v in values {
        let bits = if v.is_nan() { 0x7fc0_0000 } else { v.to_bits() };
        sha.update(bits.to_le_bytes());
    }
    sha.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// How `got` differs from `want`: `None` if bit for bit equal (any NaN
/// matches a NaN: XLA does not promise a NaN's payload or sign), else how
/// many elements differ and the largest distance in ulp, or for a digest,
/// that it differs.
#[allow(dead_code)]
pub fn differing(got: &flaxen::tensor::Tensor, want: &Expected) -> Option<String> {
    let got = got.to_vec();
    match want {
        Expected::Digest { n, sha1 } => (got.len() != *n || digest(&got) != *sha1)
            .then(|| format!("the digest of {} values differs", got.len())),
        Expected::Bits(want) => {
            if got.len() != want.len() {
                return Some(format!("{} values, expected {}", got.len(), want.len()));
            }
            let (n, ulp) = got
                .iter()
                .zip(want)
                .map(|(&g, &w)| {
                    let w = f32::from_bits(w);
                    if g.is_nan() && w.is_nan() {
                        0
                    } else if g.is_nan() || w.is_nan() || g.is_infinite() || w.is_infinite() {
                        u64::from(g.to_bits() != w.to_bits())
                    } else {
                        ulp_distance(g, w)
                    }
                })
                .filter(|&d| d > 0)
                .fold((0, 0), |(n, m), d| (n + 1, m.max(d)));
            (n > 0).then(|| format!("{n} of {} (max {ulp} ulp)", want.len()))
        }
    }
}

/// Asserts that nothing differs from the oracle but the `known`
/// differences (`bad`: the other differences found), and that each known
/// one still differs (`still_known`): an entry that became exact is
/// removed from its list.
#[allow(dead_code)]
pub fn assert_only_known(bad: &[String], still_known: &[String], known: &[&str]) {
    assert!(
        bad.is_empty(),
        "{} outputs differ from JAX's:\n{}",
        bad.len(),
        bad.join("\n")
    );
    let exact: Vec<&&str> = known
        .iter()
        .filter(|k| !still_known.iter().any(|s| s == *k))
        .collect();
    assert!(exact.is_empty(), "exact now, remove from KNOWN: {exact:?}");
}
