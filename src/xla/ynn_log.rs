//! YNNPACK's `f32` logarithm, which XLA:CPU (jaxlib 0.10.2) runs instead of
//! its own [`math::log`](super::math::log) where it hands a `log` to
//! YNNPACK inside a fusion: the log of a row sum of at least 4,096 rows
//! (optax's cross-entropy `log(sum(exp(x - max)))`, `jax.nn.log_softmax`'s
//! `log(sum)`), whose consumer YNNPACK takes into the reduction's fusion.
//!
//! From XNNPACK's `ynnpack/base/simd/generic.inc` (`log_impl` through
//! `log_taylor2`, full precision; the build has FMA, and the FMA variant
//! is the one that matches JAX), checked against JAX's jitted
//! cross-entropy and log-softmax (tools/oracle/generate_softmax.py):
//! `x = 2^e m` with `m` in `[sqrt(2)/2, sqrt(2))` read off the bits, and
//! `log x = e ln 2 + r + r^2 P(r)/Q(r)` for `r = m - 1`.

/// `P(r)`'s coefficients (`p0 r^2 + p1 r + p2`).
const P: [f32; 3] = [-5.229_335_3e-3, -3.312_789e-1, -4.999_996_4e-1];
/// `Q(r)`'s coefficients.
const Q: [f32; 3] = [3.965_804_3e-1, 1.329_217_1, 1.0];
/// `sqrt(2)` rounded to `f32`: a mantissa above it is halved.
const SQRT2: f32 = std::f32::consts::SQRT_2;
const LN2: f32 = std::f32::consts::LN_2;

/// `c[0] r^2 + c[1] r + c[2]` as YNNPACK evaluates it:
/// `fma(r, c1, fma(r^2, c0, c2))`.
#[inline(always)]
fn poly(c: [f32; 3], r: f32, r2: f32) -> f32 {
    r.mul_add(c[1], r2.mul_add(c[0], c[2]))
}

/// `floor(log2 |x|)` of a finite non-zero `x` as AVX-512's `getexp`
/// gives it: the true exponent, also of a subnormal.
#[inline(always)]
fn exponent(x: f32) -> f32 {
    let bits = x.to_bits() & 0x7FFF_FFFF;
    let field = (bits >> 23) as i32;
    if field == 0 {
        // A subnormal: its leading one's position.
        (31 - bits.leading_zeros() as i32 - 149) as f32
    } else {
        (field - 127) as f32
    }
}

/// `log(x)` as YNNPACK computes it (the module's documentation): the
/// exponent `e` as `getexp` gives it, the raw mantissa bits with the
/// exponent of 1 as `m` (halved, and `e` raised, above `sqrt(2)`), then
/// `fma(e, ln 2, fma(r^2, P(r)/Q(r), r))` with a true division. Special
/// values as YNNPACK's code gives them (not measured against it): `0`
/// gives `-inf`, `+inf` itself, a negative or NaN input NaN; a subnormal
/// keeps its raw mantissa bits (not normalized).
pub(crate) fn ynn_log(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    let mut e = exponent(x);
    let mut m = f32::from_bits((x.to_bits() & 0x007F_FFFF) | 1.0f32.to_bits());
    if m > SQRT2 {
        e += 1.0;
        m *= 0.5;
    }
    let r = m - 1.0;
    let r2 = r * r;
    let log_r = r2.mul_add(poly(P, r, r2) / poly(Q, r, r2), r);
    e.mul_add(LN2, log_r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact at 1, the special values as documented, and within an ulp or
    /// two of the true logarithm across the range.
    #[test]
    fn ynn_log_is_a_logarithm() {
        assert_eq!(ynn_log(1.0).to_bits(), 0);
        assert_eq!(ynn_log(0.0), f32::NEG_INFINITY);
        assert_eq!(ynn_log(f32::INFINITY), f32::INFINITY);
        assert!(ynn_log(-1.0).is_nan());
        assert!(ynn_log(f32::NAN).is_nan());
        let mut x = 1e-30f32;
        while x < 1e30 {
            let want = (x as f64).ln();
            let got = ynn_log(x) as f64;
            assert!(
                (got - want).abs() <= 3e-7 * want.abs().max(1.0),
                "log({x}) = {got}, want {want}"
            );
            x *= 1.37;
        }
    }

    /// The polynomial's constants are the decimal literals of YNNPACK's
    /// source, rounded to `f32`.
    #[test]
    fn constants_round_as_in_the_source() {
        assert_eq!(P[0], "-5.2293352783e-03".parse::<f32>().unwrap());
        assert_eq!(P[1], "-3.3127889037e-01".parse::<f32>().unwrap());
        assert_eq!(P[2], "-4.9999964237e-01".parse::<f32>().unwrap());
        assert_eq!(Q[0], "3.9658042789e-01".parse::<f32>().unwrap());
        assert_eq!(Q[1], "1.3292170763e+00".parse::<f32>().unwrap());
        assert_eq!(SQRT2, "1.41421356237309504880".parse::<f32>().unwrap());
        assert_eq!(LN2, "0.693147180559945309".parse::<f32>().unwrap());
    }
}
