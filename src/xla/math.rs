//! XLA's CPU `f32` special functions, bit for bit.
//!
//! JAX lowers `lax.log`, `lax.log1p`, `lax.erf` and `lax.erf_inv` to XLA,
//! whose CPU backend does not call libm: it emits its own polynomial
//! approximations as separate multiplies and adds, and LLVM's x86 backend
//! then contracts a multiply into the add that consumes it (when that add is
//! its only use) into a fused multiply-add. The functions here redo the same
//! operations in the same order, with [`f32::mul_add`] exactly where the
//! object code that jaxlib 0.10.2 generates has an FMA instruction, so they
//! return the same bits as JAX on an x86-64 CPU with FMA (on a CPU without
//! FMA, XLA itself would give other bits).
//!
//! XLA runs its CPU kernels with denormals flushed (MXCSR FTZ and DAZ set):
//! a subnormal input reads as a signed zero and a subnormal result becomes
//! one. The functions emulate that where it changes a result.
//!
//! NaN results are reproduced too: `log` and `log1p` return the all-ones
//! pattern `0xFFFF_FFFF` for NaN or out-of-domain inputs, `erf` and
//! `erf_inv` return the input NaN quieted, and `erf_inv` returns
//! `0x7FFF_FFFF` for `|x| > 1`.
//!
//! Everything is branch-free (selects only), so a loop over a slice
//! vectorizes; call the `*_slice` functions from a `#[target_feature]`
//! function that enables `fma` (AVX-512F implies it; AVX2 does not) so that
//! `mul_add` becomes one instruction instead of a call to `fmaf`.
//!
//! Caveat, measured: a stand-alone `lax.log` on a tiny array whose length is
//! 3, 5, 6 or 7 modulo 8 and below 16 is compiled by XLA to libm's `logf`
//! instead of its polynomial; those few results are not reproduced here.
//! Inside fused kernels (every sampler of `jax.random`) and for every other
//! length, the polynomial is used and matched.
//!
//! Verification of `tanh`, `exp`, `logistic` and `expm1` (scalar and slice
//! forms) against dumps of `jax.jit(lax.*)` (jax 0.10.2): 0 differences on
//! seven blocks per function, 6.7e7 inputs in all (from the bit patterns
//! `0x0000_0000` and `0x3800_0000`, `0x3F00_0000`, `0x42A0_0000`,
//! `0x7F80_0000`, `0xBF00_0000`, `0xFF80_0000`: subnormals, small, around 1,
//! beyond the clamps, inf/NaN, negatives); eager `lax.*` gives the same bits.
//! Not yet run on all 2^32 inputs.

// The samplers that use these functions are not written yet.
#![cfg_attr(not(test), allow(dead_code))]

/// `sqrt(0.5)` rounded to `f32`, Cephes' reduction threshold.
const SQRT_HALF: f32 = f32::from_bits(0x3F35_04F3);

/// The all-ones NaN that XLA's `log` returns for NaN and negative inputs.
const LOG_NAN: u32 = 0xFFFF_FFFF;

/// Flushes a subnormal to a zero of the same sign (what FTZ/DAZ do).
#[inline(always)]
fn flush(x: f32) -> f32 {
    let b = x.to_bits();
    let b = if b & 0x7F80_0000 == 0 {
        b & 0x8000_0000
    } else {
        b
    };
    f32::from_bits(b)
}

/// `a * b` as x86 computes it with FTZ set: the result is flushed to a
/// signed zero when the exact product is below `f32::MIN_POSITIVE`, even if
/// it would round up to `MIN_POSITIVE` (tininess is detected before
/// rounding). The product of two `f32` is exact in `f64`.
#[inline(always)]
fn mul_ftz(a: f32, b: f32) -> f32 {
    let r = a * b;
    let tiny = (f64::from(a) * f64::from(b)).abs() < f64::from(f32::MIN_POSITIVE);
    if tiny {
        f32::from_bits(r.to_bits() & 0x8000_0000)
    } else {
        r
    }
}

/// The quiet version of a NaN, as x86 arithmetic returns it.
#[inline(always)]
fn quiet(x: f32) -> f32 {
    f32::from_bits(x.to_bits() | 0x0040_0000)
}

// Cephes logf coefficients, as XLA stores them ([`log_core`]).
const P0: f32 = f32::from_bits(0x3D90_21BB); // 7.0376836292e-2
const P1: f32 = f32::from_bits(0xBDEB_D1B8); // -1.1514610310e-1
const P2: f32 = f32::from_bits(0x3DEF_251A); // 1.1676998740e-1
const P3: f32 = f32::from_bits(0xBDFE_5D4F); // -1.2420140846e-1
const P4: f32 = f32::from_bits(0x3E11_E9BF); // 1.4249322787e-1
const P5: f32 = f32::from_bits(0xBE2A_AE50); // -1.6668057665e-1
const P6: f32 = f32::from_bits(0x3E4C_CEAC); // 2.0000714765e-1
const P7: f32 = f32::from_bits(0xBE7F_FFFC); // -2.4999993993e-1
const P8: f32 = f32::from_bits(0x3EAA_AAAA); // 3.3333331174e-1
const LN2_LO: f32 = f32::from_bits(0xB95E_8083); // -2.12194440e-4
const LN2_HI: f32 = f32::from_bits(0x3F31_8000); // 0.693359375

/// Natural logarithm, XLA CPU's `log` for `f32`.
///
/// XLA's polynomial is Cephes' `logf`: clamp to at least `f32::MIN_POSITIVE`;
/// split into exponent `e` and mantissa `m` in `[0.5, 1)`; if
/// `m < sqrt(0.5)` use `t = (m - 1) + m` and `e - 1`, else `t = m - 1`.
/// With `z = t·t` and `t3 = z·t`, three fused Horner pairs
/// `yk = fma(fma(t, a, b), t, c)` are combined as
/// `y = fma(fma(fma(y1, t3, y2), t3, y3), t3, e·(-2.12194440e-4))`, and
/// `log = fma(e, 0.693359375, fma(-0.5, z, t) + y)`.
/// Zero (or subnormal) → `-inf`, `+inf` → `+inf`, NaN or negative → the NaN
/// `0xFFFF_FFFF`.
#[inline(always)]
pub(crate) fn log(x: f32) -> f32 {
    log_core(flush(x))
}

/// XLA's `log` body for an input that is already flushed.
#[inline(always)]
fn log_core(x: f32) -> f32 {
    let clamped = if x > f32::MIN_POSITIVE {
        x
    } else {
        f32::MIN_POSITIVE
    };
    let bits = clamped.to_bits();
    let m = f32::from_bits((bits & 0x807F_FFFF) | 0x3F00_0000);
    let e = ((bits >> 23) as i32 - 127) as f32 + 1.0;
    let below = m < SQRT_HALF;
    let e = e - if below { 1.0 } else { 0.0 };
    let t = (m - 1.0) + if below { m } else { 0.0 };

    let z = t * t;
    let t3 = z * t;
    let y1 = t.mul_add(P0, P1).mul_add(t, P2);
    let y2 = t.mul_add(P3, P4).mul_add(t, P5);
    let y3 = t.mul_add(P6, P7).mul_add(t, P8);
    let y = y1.mul_add(t3, y2).mul_add(t3, y3);
    let y = y.mul_add(t3, e * LN2_LO);
    let r = (-0.5f32).mul_add(z, t) + y;
    let r = e.mul_add(LN2_HI, r);

    // Special values, in the order XLA combines them.
    let bits = if x <= 0.0 || x.is_nan() {
        LOG_NAN
    } else {
        r.to_bits()
    };
    let bits = if x == 0.0 {
        f32::NEG_INFINITY.to_bits()
    } else if x == f32::INFINITY {
        f32::INFINITY.to_bits()
    } else {
        bits
    };
    f32::from_bits(bits)
}

// Cephes log1p, rounded to f32 ([`log1p`]).
const LOG1P_SMALL: f32 = f32::from_bits(0x3ED4_13CD); // 0.41421357
const LOG1P_P: [f32; 7] = [
    4.527e-5,
    f32::from_bits(0x3EFF_40C5),
    f32::from_bits(0x40D2_84FA),
    f32::from_bits(0x41EF_4B9C),
    f32::from_bits(0x4273_CC76),
    f32::from_bits(0x4264_73AD),
    f32::from_bits(0x41A0_5101),
];
const LOG1P_Q: [f32; 7] = [
    1.0,
    f32::from_bits(0x4171_01AD),
    f32::from_bits(0x42A6_185B),
    f32::from_bits(0x435D_C32D),
    f32::from_bits(0x439A_8CA3),
    f32::from_bits(0x4358_6D8A),
    f32::from_bits(0x4270_7982),
];

/// `log(1 + x)`, XLA CPU's `log1p` for `f32`.
///
/// For `|x| < 0.41421357` (`sqrt(2) - 1`): Cephes' `log1p` rational form
/// `x + fma(-0.5, x², (x·x²)·(P(x)/Q(x)))` with its degree-6 `P` and `Q`
/// rounded to `f32` and evaluated by fused Horner steps (`P` leads with
/// `4.527e-5`, `Q` with `1`). Otherwise XLA's [`log`] of `x + 1` (a plain, rounded
/// add). NaN or `x < -1` → the NaN `0xFFFF_FFFF`, `-1` → `-inf`.
#[inline(always)]
pub(crate) fn log1p(x: f32) -> f32 {
    let x = flush(x);
    let large = log_core(x + 1.0);

    let x2 = x * x;
    let mut p = LOG1P_P[0];
    let mut q = LOG1P_Q[0];
    for k in 1..7 {
        p = p.mul_add(x, LOG1P_P[k]);
        q = q.mul_add(x, LOG1P_Q[k]);
    }
    let small = x + (-0.5f32).mul_add(x2, (x * x2) * (p / q));

    if x.abs() < LOG1P_SMALL {
        small
    } else {
        large
    }
}

/// The error function, XLA CPU's `erf` for `f32`.
///
/// XLA's rational approximation: for `|x| ≥ 3.8325066`
/// it returns `copysign(1, x)`; otherwise with `z = x²`,
/// `erf = x·P(z) / Q(z)` where `P` has degree 4 and `Q` degree 6, both
/// evaluated with explicit fused multiply-adds (`fma(z, ·, c)`; XLA emits
/// `llvm.fma` here, so these are fused even without FMA hardware). A
/// subnormal input reads as zero.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    const CLAMP: f32 = f32::from_bits(0x4075_47CB); // 3.8325066
    const P: [f32; 5] = [
        f32::from_bits(0x3970_2D51),
        f32::from_bits(0x3B5F_5DA2),
        f32::from_bits(0x3D50_B6EB),
        f32::from_bits(0x3E3D_A740),
        f32::from_bits(0x3F90_6EBA),
    ];
    const Q: [f32; 7] = [
        f32::from_bits(0xB3FD_3906),
        f32::from_bits(0x37C5_88DF),
        f32::from_bits(0x3A85_6D28),
        f32::from_bits(0x3C66_87D4),
        f32::from_bits(0x3DE3_4C21),
        f32::from_bits(0x3EFE_B44A),
        1.0,
    ];

    let x = flush(x);
    let z = x * x;
    let mut p = P[0];
    for &c in &P[1..] {
        p = z.mul_add(p, c);
    }
    let mut q = Q[0];
    for &c in &Q[1..] {
        q = z.mul_add(q, c);
    }
    let r = (x * p) / q;
    let r = if x.abs() >= CLAMP {
        1.0f32.copysign(x)
    } else {
        r
    };
    if x.is_nan() {
        quiet(x)
    } else {
        r
    }
}

// Giles' erf_inv ([`erf_inv`]): (w < 5 coefficient, w >= 5 coefficient), highest degree first.
const ERF_INV_C: [(u32, u32); 9] = [
    (0x32F1_6588, 0xB951_F09B),
    (0x34B8_4B36, 0x38D3_B56B),
    (0xB66C_7357, 0x3AB0_DC72),
    (0xB693_5AC1, 0xBB70_BDE7),
    (0x3965_32DB, 0x3BBC_127B),
    (0xBAA4_5408, 0xBBF9_C5D7),
    (0xBB88_E4EF, 0x3C1A_A57E),
    (0x3E7C_8F63, 0x3F80_36DB),
    (0x3FC0_2E2F, 0x4035_4F7E),
];

/// The inverse error function, XLA's `erf_inv` for `f32` (from
/// `chlo.erf_inv`).
///
/// Giles' single-precision approximation: `w = -log1p(-x·x)` with XLA's
/// [`log1p`]; if `w < 5`, `v = w - 2.5` and the first set of nine
/// coefficients, else `v = sqrt(w) - 3` and the second; `p` is a Horner
/// chain of fused multiply-adds in `v`, and the result is `x·p`
/// (`x·inf` when `|x| = 1`), flushed to zero if the exact product is
/// below `f32::MIN_POSITIVE`.
#[inline(always)]
pub(crate) fn erf_inv(x: f32) -> f32 {
    let w = -log1p(flush(x * -x));
    let central = w < 5.0;
    let v = if central { w - 2.5 } else { w.sqrt() - 3.0 };
    let pick = |(a, b): (u32, u32)| f32::from_bits(if central { a } else { b });
    // Unrolled by hand so that each `pick` selects between two constants; in
    // a loop, LLVM turns the selects into loads from a table, which in a
    // vectorized loop become slow gathers.
    let mut p = pick(ERF_INV_C[0]);
    p = p.mul_add(v, pick(ERF_INV_C[1]));
    p = p.mul_add(v, pick(ERF_INV_C[2]));
    p = p.mul_add(v, pick(ERF_INV_C[3]));
    p = p.mul_add(v, pick(ERF_INV_C[4]));
    p = p.mul_add(v, pick(ERF_INV_C[5]));
    p = p.mul_add(v, pick(ERF_INV_C[6]));
    p = p.mul_add(v, pick(ERF_INV_C[7]));
    p = p.mul_add(v, pick(ERF_INV_C[8]));
    let ax = x.abs();
    let p = if ax == 1.0 { f32::INFINITY } else { p };
    let r = mul_ftz(x, p);
    // NaN patterns: x's own (quieted) NaN, or XLA's log NaN with its sign
    // bit cleared by the negation, for |x| > 1.
    let r = if ax > 1.0 {
        f32::from_bits(LOG_NAN >> 1)
    } else {
        r
    };
    if x.is_nan() {
        quiet(x)
    } else {
        r
    }
}

/// The clamp of XLA's `tanh`: `|x|` beyond this gives the same result.
const TANH_CLAMP: f32 = f32::from_bits(0x40FF_F644); // 7.99881172

/// XLA's `tanh` body (Eigen's `ptanh_float` rational form).
///
/// With `c = clamp(x, ±7.9988117)` (a NaN passes through) and `z = c·c`,
/// `tanh = c·P(z) / Q(z)` where `P` has seven and `Q` four coefficients,
/// both fused Horner chains `fma(z, p, k)`. `|x| < 4e-4` returns `x`
/// itself (a subnormal too, unflushed) and `|x| ≥ 20` returns
/// `copysign(1, x)`. NaNs are left to the caller.
#[inline(always)]
fn tanh_core(x: f32) -> f32 {
    const P: [f32; 7] = [
        f32::from_bits(0xA59F_25C0), // -2.76076847742355e-16
        f32::from_bits(0x2A61_337E), // 2.00018790482477e-13
        f32::from_bits(0xAEBD_37FF), // -8.60467152213735e-11
        f32::from_bits(0x335C_0041), // 5.12229709037114e-08
        f32::from_bits(0x3779_434A), // 1.48572235717979e-05
        f32::from_bits(0x3A27_0DED), // 6.37261928875436e-04
        f32::from_bits(0x3BA0_59DC), // 4.89352455891786e-03
    ];
    const Q: [f32; 4] = [
        f32::from_bits(0x35A0_D3D8), // 1.19825839466702e-06
        f32::from_bits(0x38F8_95D6), // 1.18534705686654e-04
        f32::from_bits(0x3B14_AA05), // 2.26843463243900e-03
        f32::from_bits(0x3BA0_59DD), // 4.89352518554385e-03
    ];

    let c = if x < -TANH_CLAMP { -TANH_CLAMP } else { x };
    let c = if c > TANH_CLAMP { TANH_CLAMP } else { c };
    let z = c * c;
    let mut p = P[0];
    for &k in &P[1..] {
        p = z.mul_add(p, k);
    }
    let mut q = Q[0];
    for &k in &Q[1..] {
        q = z.mul_add(q, k);
    }
    let r = (c * p) / q;
    // Compared as x86 does with DAZ: a subnormal reads as zero.
    let ax = flush(x).abs();
    let r = if ax < 4e-4 { x } else { r };
    if ax >= 20.0 {
        1.0f32.copysign(x)
    } else {
        r
    }
}

/// The hyperbolic tangent, XLA CPU's `tanh` for `f32`.
///
/// XLA's rational approximation (see `tanh_core`): `c·P(c²)/Q(c²)` with `c`
/// clamped to `±7.9988117`, `x` itself for `|x| < 4e-4` (subnormals are
/// returned unflushed), `±1` for `|x| ≥ 20`. NaN → the input NaN quieted.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    let r = tanh_core(x);
    if x.is_nan() {
        quiet(x)
    } else {
        r
    }
}

/// XLA's `exp` body: `(s, scale)` with `exp(x) = s·scale`.
///
/// Cephes' `expf`: clamp `x` to `[-87.8, 88.8]` (a NaN passes through);
/// `n = floor(fma(x, log2(e), 0.5))` clamped to `[-127, 127]`;
/// `r = fma(-n, -2.12194440e-4, fma(-n, 0.693359375, x))`;
/// `y` = a fused Horner chain of five coefficients in `r` ending in `0.5`;
/// `s = fma(y, r·r, r) + 1`; `scale = 2^n` built from the exponent bits (so
/// `n = -127` gives `+0`). The input must already be flushed.
#[inline(always)]
fn exp_core(x: f32) -> (f32, f32) {
    const LO: f32 = f32::from_bits(0xC2AF_999A); // -87.8
    const HI: f32 = f32::from_bits(0x42B1_999A); // 88.8
    const LOG2E: f32 = f32::from_bits(0x3FB8_AA3B); // 1.44269504
    const LN2_HI: f32 = f32::from_bits(0x3F31_8000); // 0.693359375
    const LN2_LO: f32 = f32::from_bits(0xB95E_8083); // -2.12194440e-4
    const P: [f32; 6] = [
        f32::from_bits(0x3950_6967), // 1.9875691500e-4
        f32::from_bits(0x3AB7_43CE), // 1.3981999507e-3
        f32::from_bits(0x3C08_8908), // 8.3334519073e-3
        f32::from_bits(0x3D2A_A9C1), // 4.1665795894e-2
        f32::from_bits(0x3E2A_AAAA), // 1.6666665459e-1
        0.5,
    ];

    let x = if x < LO { LO } else { x };
    let x = if x > HI { HI } else { x };
    let n = x.mul_add(LOG2E, 0.5).floor();
    let n = if n < -127.0 { -127.0 } else { n };
    let n = if n > 127.0 { 127.0 } else { n };
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let mut y = P[0];
    for &k in &P[1..] {
        y = y.mul_add(r, k);
    }
    let s = y.mul_add(r * r, r) + 1.0;
    // A NaN `n` converts to 0 here and to i32::MIN on x86; both give a
    // finite scale, and the NaN comes through `s`.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    (s, scale)
}

/// The exponential, XLA CPU's `exp` for `f32`.
///
/// Cephes' `expf` as XLA emits it (see `exp_core`): `s·2^n`, with the
/// product flushed to zero when it is subnormal. `+inf` → `+inf`, `-inf`
/// (and anything below about `-87.34`) → `0`, NaN → the input NaN quieted.
///
/// Caveat, measured: like [`log`], a stand-alone `lax.exp` of a 1-D array
/// whose length is 3, 5, 6 or 7 modulo 8 and below 16 computes the last
/// `len % 8` elements with libm's `expf` (`f32::exp` on glibc) instead;
/// arrays of two or more dimensions, and fused kernels, always use the
/// polynomial.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let (s, scale) = exp_core(flush(x));
    let r = mul_ftz(s, scale);
    if x.is_nan() {
        quiet(x)
    } else {
        r
    }
}

/// The logistic function `1 / (1 + exp(-x))`, XLA CPU's `logistic` for
/// `f32` (`jax.nn.sigmoid`).
///
/// XLA expands it to `1 / (exp(-x) + 1)` in one fused loop, and LLVM fuses
/// `exp`'s final multiply into the add: with `(s, scale)` from `exp_core`
/// of `-x`, `logistic = 1 / fma(s, scale, 1)`. NaN → the input NaN quieted
/// with its sign flipped (by the negation).
#[inline(always)]
pub(crate) fn logistic(x: f32) -> f32 {
    let (s, scale) = exp_core(-flush(x));
    let r = 1.0 / s.mul_add(scale, 1.0);
    if x.is_nan() {
        quiet(-x)
    } else {
        r
    }
}

/// `exp(x) - 1`, XLA CPU's `expm1` for `f32`.
///
/// With `e = s·scale` from `exp_core` (not flushed or fused: it has two
/// uses): `e + (-1)` for `|x| > 0.5`, otherwise `tanh_core(x·0.5)·(e + 1)`;
/// `x` itself when `x·0.5` is zero (subnormal `x` too, unflushed).
/// NaN → the input NaN quieted.
#[inline(always)]
// Not used by the crate yet (the tensor ops call the scalar forms).
#[allow(dead_code)]
pub(crate) fn expm1(x: f32) -> f32 {
    let (s, scale) = exp_core(flush(x));
    let e = s * scale;
    let h = flush(mul_ftz(x, 0.5));
    let small = tanh_core(h) * (e + 1.0);
    let r = if flush(x).abs() > 0.5 {
        e + -1.0
    } else {
        small
    };
    let r = if h == 0.0 { x } else { r };
    if x.is_nan() {
        quiet(x)
    } else {
        r
    }
}

/// [`log`] of every element, in place.
#[inline(always)]
pub(crate) fn log_slice(xs: &mut [f32]) {
    for x in xs {
        *x = log(*x);
    }
}

/// [`log1p`] of every element, in place.
#[inline(always)]
pub(crate) fn log1p_slice(xs: &mut [f32]) {
    for x in xs {
        *x = log1p(*x);
    }
}

/// [`erf`] of every element, in place.
#[inline(always)]
pub(crate) fn erf_slice(xs: &mut [f32]) {
    for x in xs {
        *x = erf(*x);
    }
}

/// [`erf_inv`] of every element, in place: [`erf_inv_lanes`] on batches of
/// [`LANES`], the scalar function on the rest.
#[inline(always)]
pub(crate) fn erf_inv_slice(xs: &mut [f32]) {
    let mut chunks = xs.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        let chunk: &mut [f32; LANES] = chunk.try_into().expect("a whole batch");
        erf_inv_lanes(chunk);
    }
    for x in chunks.into_remainder() {
        *x = erf_inv(*x);
    }
}

/// Elements per batch of the lane-wise functions: four AVX-512 vectors (or
/// eight AVX2 ones), whose independent dependency chains overlap.
const LANES: usize = 64;

/// Applies `$body` to every lane `$l` of a batch: each use is one (or a few
/// independent) vector instructions.
macro_rules! lanes {
    ($l:ident => $body:expr) => {
        for $l in 0..LANES {
            $body;
        }
    };
}

/// [`log_core`] of a batch, statement by statement over all lanes, so that
/// the long chain of each lane is interleaved with those of the others.
/// The same operations, in the same order, as [`log_core`].
#[inline(always)]
fn log_core_lanes(x: &[f32; LANES]) -> [f32; LANES] {
    let mut e = [0f32; LANES];
    let mut t = [0f32; LANES];
    lanes!(l => {
        let clamped = if x[l] > f32::MIN_POSITIVE {
            x[l]
        } else {
            f32::MIN_POSITIVE
        };
        let bits = clamped.to_bits();
        let m = f32::from_bits((bits & 0x807F_FFFF) | 0x3F00_0000);
        let el = ((bits >> 23) as i32 - 127) as f32 + 1.0;
        let below = m < SQRT_HALF;
        e[l] = el - if below { 1.0 } else { 0.0 };
        t[l] = (m - 1.0) + if below { m } else { 0.0 };
    });
    let mut z = [0f32; LANES];
    let mut t3 = [0f32; LANES];
    let mut y1 = [0f32; LANES];
    let mut y2 = [0f32; LANES];
    let mut y3 = [0f32; LANES];
    lanes!(l => {
        z[l] = t[l] * t[l];
        t3[l] = z[l] * t[l];
        y1[l] = t[l].mul_add(P0, P1);
        y2[l] = t[l].mul_add(P3, P4);
        y3[l] = t[l].mul_add(P6, P7);
    });
    lanes!(l => {
        y1[l] = y1[l].mul_add(t[l], P2);
        y2[l] = y2[l].mul_add(t[l], P5);
        y3[l] = y3[l].mul_add(t[l], P8);
    });
    let mut y = [0f32; LANES];
    lanes!(l => y[l] = y1[l].mul_add(t3[l], y2[l]));
    lanes!(l => y[l] = y[l].mul_add(t3[l], y3[l]));
    lanes!(l => y[l] = y[l].mul_add(t3[l], e[l] * LN2_LO));
    let mut r = [0f32; LANES];
    lanes!(l => r[l] = (-0.5f32).mul_add(z[l], t[l]) + y[l]);
    lanes!(l => r[l] = e[l].mul_add(LN2_HI, r[l]));
    lanes!(l => {
        let bits = if x[l] <= 0.0 || x[l].is_nan() {
            LOG_NAN
        } else {
            r[l].to_bits()
        };
        let bits = if x[l] == 0.0 {
            f32::NEG_INFINITY.to_bits()
        } else if x[l] == f32::INFINITY {
            f32::INFINITY.to_bits()
        } else {
            bits
        };
        r[l] = f32::from_bits(bits);
    });
    r
}

/// [`log1p`] of a batch, lane-wise as [`log_core_lanes`].
#[inline(always)]
fn log1p_lanes(input: &[f32; LANES]) -> [f32; LANES] {
    let mut x = [0f32; LANES];
    let mut x1 = [0f32; LANES];
    lanes!(l => {
        x[l] = flush(input[l]);
        x1[l] = x[l] + 1.0;
    });
    let large = log_core_lanes(&x1);
    let mut p = [LOG1P_P[0]; LANES];
    let mut q = [LOG1P_Q[0]; LANES];
    for k in 1..7 {
        lanes!(l => {
            p[l] = p[l].mul_add(x[l], LOG1P_P[k]);
            q[l] = q[l].mul_add(x[l], LOG1P_Q[k]);
        });
    }
    let mut r = [0f32; LANES];
    lanes!(l => {
        let x2 = x[l] * x[l];
        let small = x[l] + (-0.5f32).mul_add(x2, (x[l] * x2) * (p[l] / q[l]));
        r[l] = if x[l].abs() < LOG1P_SMALL {
            small
        } else {
            large[l]
        };
    });
    r
}

/// [`erf_inv`] of a batch in place, lane-wise as [`log_core_lanes`].
#[inline(always)]
fn erf_inv_lanes(x: &mut [f32; LANES]) {
    let mut a = [0f32; LANES];
    lanes!(l => a[l] = flush(x[l] * -x[l]));
    let mut w = log1p_lanes(&a);
    let mut v = [0f32; LANES];
    lanes!(l => {
        w[l] = -w[l];
        v[l] = if w[l] < 5.0 {
            w[l] - 2.5
        } else {
            w[l].sqrt() - 3.0
        };
    });
    // The coefficient of degree k for lane l.
    let c = |k: usize, l: usize| {
        let (a, b) = ERF_INV_C[k];
        f32::from_bits(if w[l] < 5.0 { a } else { b })
    };
    let mut p = [0f32; LANES];
    lanes!(l => p[l] = c(0, l));
    // Unrolled by hand, as in `erf_inv`, so that `c` picks constants.
    lanes!(l => p[l] = p[l].mul_add(v[l], c(1, l)));
    lanes!(l => p[l] = p[l].mul_add(v[l], c(2, l)));
    lanes!(l => p[l] = p[l].mul_add(v[l], c(3, l)));
    lanes!(l => p[l] = p[l].mul_add(v[l], c(4, l)));
    lanes!(l => p[l] = p[l].mul_add(v[l], c(5, l)));
    lanes!(l => p[l] = p[l].mul_add(v[l], c(6, l)));
    lanes!(l => p[l] = p[l].mul_add(v[l], c(7, l)));
    lanes!(l => p[l] = p[l].mul_add(v[l], c(8, l)));
    lanes!(l => {
        let xl = x[l];
        let ax = xl.abs();
        let pl = if ax == 1.0 { f32::INFINITY } else { p[l] };
        let r = mul_ftz(xl, pl);
        let r = if ax > 1.0 {
            f32::from_bits(LOG_NAN >> 1)
        } else {
            r
        };
        x[l] = if xl.is_nan() { quiet(xl) } else { r };
    });
}

/// [`tanh`] of every element, in place.
#[inline(always)]
// Not used by the crate yet (the tensor ops call the scalar forms).
#[allow(dead_code)]
pub(crate) fn tanh_slice(xs: &mut [f32]) {
    for x in xs {
        *x = tanh(*x);
    }
}

/// [`exp`] of every element, in place.
#[inline(always)]
// Not used by the crate yet (the tensor ops call the scalar forms).
#[allow(dead_code)]
pub(crate) fn exp_slice(xs: &mut [f32]) {
    for x in xs {
        *x = exp(*x);
    }
}

/// [`logistic`] of every element, in place.
#[inline(always)]
// Not used by the crate yet (the tensor ops call the scalar forms).
#[allow(dead_code)]
pub(crate) fn logistic_slice(xs: &mut [f32]) {
    for x in xs {
        *x = logistic(*x);
    }
}

/// [`expm1`] of every element, in place.
#[inline(always)]
// Not used by the crate yet (the tensor ops call the scalar forms).
#[allow(dead_code)]
pub(crate) fn expm1_slice(xs: &mut [f32]) {
    for x in xs {
        *x = expm1(*x);
    }
}

#[cfg(test)]
mod tests;

/// `1/sqrt(x)`, XLA CPU's `rsqrt` for `f32` on x86-64
/// (`xla/codegen/intrinsic/rsqrt.cc`): the SSE approximate reciprocal
/// square root `y = rsqrtss(x)` refined by Newton steps with fused
/// multiply-adds, `y = fma(-0.5·y, fma(x·y, y, -1), y)`, for positive
/// normal `x`; the raw approximation elsewhere (`+0 → +inf`, `+inf → +0`,
/// negative or NaN → NaN), and a subnormal input reads as zero (DAZ).
///
/// One step on AMD CPUs, whose approximation is the more accurate, and two
/// on others (XLA's `num_steps` for vectors of at most 8 lanes, the width
/// its elementwise loops use). The approximation comes from the CPU's own
/// `rsqrtss` table, as in XLA, so results are JAX's on the same CPU
/// (checked on an AMD EPYC on 4096 values and the special ones, at every
/// array length, and on an Intel Xeon on 4096 values). Elsewhere it is
/// `1 / sqrt(x)`.
#[inline(always)]
pub(crate) fn rsqrt(x: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cvtss_f32, _mm_rsqrt_ss, _mm_set_ss};
        let bits = x.to_bits();
        let abs = bits & 0x7FFF_FFFF;
        if abs & 0x7F80_0000 == 0 {
            return f32::INFINITY.copysign(x);
        }
        // SAFETY: SSE is part of the x86-64 baseline, so these intrinsics'
        // only requirement (the `sse` target feature) always holds.
        let y = unsafe { _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x))) };
        let positive_normal = bits >> 31 == 0 && abs.wrapping_sub(0x0080_0000) < 0x7F00_0000;
        if !positive_normal {
            return y;
        }
        let step = |y: f32| (y * -0.5).mul_add(y.mul_add(x * y, -1.0), y);
        let y = step(y);
        if rsqrt_steps() == 1 {
            y
        } else {
            step(y)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        1.0 / x.sqrt()
    }
}

/// How many Newton steps XLA refines `rsqrtss` with on this CPU: one on
/// AMD's (CPUID vendor `AuthenticAMD`), two on others.
#[cfg(target_arch = "x86_64")]
fn rsqrt_steps() -> u8 {
    use std::sync::atomic::{AtomicU8, Ordering};
    static STEPS: AtomicU8 = AtomicU8::new(0);
    match STEPS.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: CPUID leaf 0 exists on every x86-64 CPU (`__cpuid` is a
            // safe function in recent Rust, unsafe in older releases).
            #[allow(unused_unsafe)]
            let id = unsafe { std::arch::x86_64::__cpuid(0) };
            let vendor = [id.ebx, id.edx, id.ecx];
            let amd = vendor == [0x6874_7541, 0x6974_6E65, 0x444D_4163]; // "AuthenticAMD"
            let steps = if amd { 1 } else { 2 };
            STEPS.store(steps, Ordering::Relaxed);
            steps
        }
        steps => steps,
    }
}
