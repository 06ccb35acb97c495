//! Running a closure compiled for the CPU's vector instructions. Rust never
//! reorders or contracts floating-point arithmetic, and `f32::mul_add`
//! rounds once whatever the CPU, so the bits do not depend on these
//! wrappers; without them every `mul_add` is a call to `fmaf` and loops
//! use 128-bit vectors only. The closure must be `#[inline(always)]` (and
//! so must the functions it calls for their loops) so that its body is
//! compiled inside the wrapper with the wrapper's features.

/// Runs `f` compiled with AVX2 and FMA when the CPU has them, else as is.
#[inline(always)]
pub(crate) fn with_fma<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        /// `f`, compiled for AVX2 and FMA.
        ///
        /// # Safety
        ///
        /// The CPU must support AVX2 and FMA.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn fma<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: both features were detected just above; they are the
            // only requirement of `fma`, whose body is safe code.
            return unsafe { fma(f) };
        }
    }
    f()
}

/// Runs `f` compiled for the widest vectors this CPU has (AVX-512, which
/// implies FMA, or AVX2 with FMA), else as is.
#[inline(always)]
pub(crate) fn on_widest_vectors<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        /// `f`, compiled for AVX-512.
        ///
        /// # Safety
        ///
        /// The CPU must support AVX-512F.
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected just above; it is the only
            // requirement of `avx512`, whose body is safe code.
            return unsafe { avx512(f) };
        }
    }
    with_fma(f)
}
