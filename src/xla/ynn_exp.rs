//! YNNPACK's `f32` exponential, which XLA:CPU (jaxlib 0.10.2) uses instead
//! of its own [`math::exp`](super::math::exp) where it fuses an `exp` into
//! a reduction it hands to YNNPACK (from 4,096 input elements: a jitted
//! softmax's `exp(x - max)` feeding its row sums, log-softmax's
//! `sum(exp(x - max))`). It differs from XLA's own by 1 ulp in about 2 %
//! of its results.
//!
//! Read from the machine code of `ynn::exp_fp32_x86_avx512f_avx512bw` in
//! jaxlib 0.10.2's `libjax_common.so` (XNNPACK's
//! `ynnpack/base/simd/generic.inc` as of its non-rational polynomials,
//! 2026-05-25), and checked against JAX's softmaxes
//! (tools/oracle/generate_softmax.py): `2^n` times a degree-7 polynomial
//! of the reduced argument, its odd and even powers in two chains.

/// The inputs are clamped to these first (beyond them the result is `0`
/// or `+inf` anyway).
const LO: f32 = f32::from_bits(0xC2B0_0F34); // -88.0296936
const HI: f32 = f32::from_bits(0x42B1_7218); // 88.7228394
const LOG2E: f32 = f32::from_bits(0x3FB8_AA3B);
/// `1.5 * 2^23`: added and taken away, it rounds to an integer (ties to
/// even).
const MAGIC: f32 = f32::from_bits(0x4B40_0000);
/// `2^23 + 127`: `n` plus this holds `n + 127` in its low bits, shifted
/// into the exponent to make `2^n`.
const BIAS: f32 = f32::from_bits(0x4B00_007F);
/// `-ln 2` in two parts (Cody–Waite).
const LN2_HI: f32 = f32::from_bits(0xBF31_7200);
const LN2_LO: f32 = f32::from_bits(0xB5BF_BE8E);
/// The polynomial's odd-power chain, in `r^2`.
const P: [f32; 3] = [
    f32::from_bits(0x396E_CCE9),
    f32::from_bits(0x3C08_629E),
    f32::from_bits(0x3E2A_AAD2),
];
/// The even-power chain, in `r^2`.
const Q: [f32; 4] = [
    f32::from_bits(0xB851_27E0),
    f32::from_bits(0x3AB9_3CAC),
    f32::from_bits(0x3D2A_A994),
    f32::from_bits(0x3EFF_FFFE),
];

/// `exp(x)` as YNNPACK computes it: with `t` the clamped input and
/// `n = round(t · log2 e)`, `r = t - n ln 2` (two fused steps),
/// `q = r + r^2 (r p(r^2) + q(r^2))`, then `2^n + 2^n q` (one fused
/// multiply-add; `2^n` itself where it is infinite). A NaN input gives the
/// input quieted (not measured against YNNPACK, whose NaN may differ in
/// payload). A subnormal result is flushed to zero, as XLA's threads run
/// with FTZ (not measured either: no softmax reaches it, since
/// `exp(x - max)` with `x - max >= -88.03` is normal unless `2^n` is
/// `2^-126` and `q < 0`).
#[inline(always)]
pub(crate) fn ynn_exp(x: f32) -> f32 {
    // Branch-free (selects only), so that a loop over a slice vectorizes.
    let t = x.clamp(LO, HI);
    // Rounded separately: a multiply, then two adds (no fused step).
    let n = (t * LOG2E + MAGIC) - MAGIC;
    let s = f32::from_bits((n + BIAS).to_bits() << 23);
    let r = n.mul_add(LN2_HI, t);
    let r = n.mul_add(LN2_LO, r);
    let r2 = r * r;
    let p = P[0].mul_add(r2, P[1]).mul_add(r2, P[2]);
    let q = Q[0].mul_add(r2, Q[1]).mul_add(r2, Q[2]).mul_add(r2, Q[3]);
    let q = r.mul_add(p, q);
    let q = r2.mul_add(q, r);
    let e = q.mul_add(s, s);
    let e = if e != 0.0 && e.abs() < f32::MIN_POSITIVE {
        0.0
    } else {
        e
    };
    let e = if s.is_infinite() { s } else { e };
    if x.is_nan() {
        f32::from_bits(x.to_bits() | 0x0040_0000)
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact where the polynomial is: `exp(0) = 1`; the clamps give `0`
    /// and `+inf`; and it stays within an ulp or two of the true value.
    #[test]
    fn ynn_exp_is_an_exponential() {
        assert_eq!(ynn_exp(0.0), 1.0);
        assert_eq!(ynn_exp(-100.0), 0.0);
        assert_eq!(ynn_exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(ynn_exp(100.0), f32::INFINITY);
        assert_eq!(ynn_exp(f32::INFINITY), f32::INFINITY);
        assert!(ynn_exp(f32::NAN).is_nan());
        for i in -800..800 {
            let x = i as f32 * 0.1;
            let want = (x as f64).exp();
            let got = ynn_exp(x) as f64;
            assert!(
                ((got - want) / want).abs() < 3e-7,
                "exp({x}) = {got}, want {want}"
            );
        }
    }
}
