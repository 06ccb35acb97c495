//! The transcendental functions behind TensorFlow's normals.
//!
//! TensorFlow's CPU kernels call the system glibc's `logf`, `sincosf`, `log`
//! and `sincos`. The `f32` functions here are flaxen's portable ports of
//! glibc's algorithms (see [`super::libm_f32`]), so `f32` normals are the
//! same on every platform. The `f64` functions call Rust's `std`, which is
//! glibc on Linux (bit-exact with TensorFlow there) and the platform's libm
//! elsewhere.

/// `logf` as glibc computes it.
#[inline]
pub fn logf(x: f32) -> f32 {
    x.ln()
}

/// `sincosf` as glibc computes it: `(sin x, cos x)`.
#[inline]
pub fn sincosf(x: f32) -> (f32, f32) {
    (x.sin(), x.cos())
}

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
