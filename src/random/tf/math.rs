//! The transcendental functions behind TensorFlow's normals.
//!
//! TensorFlow's CPU kernels call the system glibc's `logf`, `sincosf`, `log`
//! and `sincos`. The `f32` functions here are flaxen's portable ports of
//! glibc's algorithms (see [`super::libm_f32`]), so `f32` normals are the
//! same on every platform (`std`'s `f32::ln`/`sin`/`cos` agree with them
//! on glibc Linux only). The `f64` functions call Rust's `std`, which is
//! glibc on Linux (bit-exact with TensorFlow on the same machine) and the
//! platform's libm elsewhere. glibc itself has FMA and non-FMA builds of the
//! double-precision `log`, `sin` and `cos`, chosen by CPU, which round a
//! small fraction of inputs differently, so TensorFlow's `float64` normals
//! already vary between x86-64 machines.

pub use super::libm_f32::{logf, sincosf};

/// `log` for doubles (the platform's `std`).
#[inline]
pub fn log(x: f64) -> f64 {
    x.ln()
}

/// `sincos` for doubles (the platform's `std`): `(sin x, cos x)`.
#[inline]
pub fn sincos(x: f64) -> (f64, f64) {
    (x.sin(), x.cos())
}
