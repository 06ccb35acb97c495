//! Portable `logf` and `sincosf` that round exactly as glibc's do.
//!
//! TensorFlow's Box–Muller calls the system glibc's `logf` and `sincosf`.
//! Both are table-driven double-precision evaluations rounded once to `f32`
//! (glibc takes them from Arm's optimized-routines); they are accurate to
//! about 0.82 and 0.56 ulp, *not* correctly rounded, so reproducing
//! TensorFlow's floats means reproducing these exact evaluations. This
//! module does so in plain `f64` arithmetic (Rust never contracts to FMA), so
//! the results are the same on every platform. `tests/tf_libm.rs` checks
//! every input Box–Muller can produce (2^23 of each) against glibc.
//!
//! The constants (logf's 16-entry table and cubic, sincosf's two polynomial
//! tables) are glibc's, read out of the glibc 2.36 `libm.so.6` by
//! `tools/oracle/tf/libm_constants.py`; they originate in Arm's
//! optimized-routines (Copyright (c) 2017-2018, Arm Limited, MIT licence).
//! The bits of 2/π are computed by that script from Machin's formula.
//!
//! **logf.** Write `x = 2^k · z` with `z` in `[0x3f330000, 2·0x3f330000)`
//! (about `[0.7, 1.4)`). The top 4 bits of `z`'s mantissa, offset so that
//! the subintervals straddle 1, pick `(invc, logc)` with `invc ≈ 1/c` for
//! `c` near the subinterval's centre and `logc = log(c)`. Then
//! `r = z·invc − 1` is exact in `f64`, and
//! `log x = k·ln2 + logc + log1p(r)` with `log1p(r) ≈ r + A2 r² + A1 r³ + A0 r⁴`
//! evaluated as `(A0 r² + (A1 r + A2))·r² + (y0 + r)`.
//!
//! **sincosf.** Below `|x| < 2^-12` the results are `(x, 1)`. Below about
//! `0.75` the polynomials are used directly. Below 120, `n = round(x·2/π)`
//! comes from `x · 2^24·2/π` truncated to an integer, the reduced argument is
//! `x − n·π/2` in `f64`, and the quadrant `n` picks the signs and swaps sine
//! and cosine. Above 120 the reduction uses 2/π to 192 bits in fixed point.
//! Sine is `x + x³ s1 + x⁵ (s2 + x² s3)`, cosine
//! `c0 + x² c1 + x⁴ c2 + x⁶ (c3 + x² c4)`; the second table has the cosine
//! coefficients negated, for quadrants 2 and 3.

/// `f64::from_bits` in constants.
const fn d(bits: u64) -> f64 {
    f64::from_bits(bits)
}

/// logf's `(invc, logc)` for each of the 16 subintervals.
const LOGF_TABLE: [(f64, f64); 16] = [
    (d(0x3ff661ec79f8f3be), d(0xbfd57bf7808caade)),
    (d(0x3ff571ed4aaf883d), d(0xbfd2bef0a7c06ddb)),
    (d(0x3ff49539f0f010b0), d(0xbfd01eae7f513a67)),
    (d(0x3ff3c995b0b80385), d(0xbfcb31d8a68224e9)),
    (d(0x3ff30d190c8864a5), d(0xbfc6574f0ac07758)),
    (d(0x3ff25e227b0b8ea0), d(0xbfc1aa2bc79c8100)),
    (d(0x3ff1bb4a4a1a343f), d(0xbfba4e76ce8c0e5e)),
    (d(0x3ff12358f08ae5ba), d(0xbfb1973c5a611ccc)),
    (d(0x3ff0953f419900a7), d(0xbfa252f438e10c1e)),
    (d(0x3ff0000000000000), d(0x0000000000000000)),
    (d(0x3fee608cfd9a47ac), d(0x3faaa5aa5df25984)),
    (d(0x3feca4b31f026aa0), d(0x3fbc5e53aa362eb4)),
    (d(0x3feb2036576afce6), d(0x3fc526e57720db08)),
    (d(0x3fe9c2d163a1aa2d), d(0x3fcbc2860d224770)),
    (d(0x3fe886e6037841ed), d(0x3fd1058bc8a07ee1)),
    (d(0x3fe767dcf5534862), d(0x3fd4043057b6ee09)),
];

/// logf's polynomial `A0, A1, A2` (≈ −1/4, 1/3, −1/2).
const LOGF_A: [f64; 3] = [
    d(0xbfd00ea348b88334),
    d(0x3fd5575b0be00b6a),
    d(0xbfdffffef20a4123),
];

/// ln 2 rounded to `f64`.
const LN2: f64 = d(0x3fe62e42fefa39ef);

/// The start of logf's reduced range, as `f32` bits (≈ 0.6992).
const LOGF_OFF: u32 = 0x3f33_0000;

/// `log(x)` for `f32`, rounded as glibc's `logf`.
///
/// ```
/// use flaxen::random::tf::libm_f32::logf;
/// assert_eq!(logf(1.0), 0.0);
/// assert_eq!(logf(0.78749514).to_bits(), 0xbe74a1b3); // the spec's worked example
/// ```
pub fn logf(x: f32) -> f32 {
    let mut ix = x.to_bits();
    if ix == 0x3f80_0000 {
        return 0.0;
    }
    if ix.wrapping_sub(0x0080_0000) >= 0x7f80_0000 - 0x0080_0000 {
        // Zero, subnormal, negative, infinite or NaN.
        if ix << 1 == 0 {
            return f32::NEG_INFINITY;
        }
        if ix == 0x7f80_0000 {
            return x;
        }
        if ix & 0x8000_0000 != 0 || ix << 1 >= 0xff00_0000 {
            return f32::NAN;
        }
        // Subnormal: scale into the normal range and take 23 off the exponent.
        ix = (x * 8_388_608.0).to_bits().wrapping_sub(23 << 23);
    }
    let tmp = ix.wrapping_sub(LOGF_OFF);
    let i = ((tmp >> 19) % 16) as usize;
    let k = (tmp as i32) >> 23;
    let iz = ix.wrapping_sub(tmp & (0x1ff << 23));
    let (invc, logc) = LOGF_TABLE[i];
    let z = f64::from(f32::from_bits(iz));
    let r = z * invc - 1.0;
    let y0 = logc + f64::from(k) * LN2;
    let r2 = r * r;
    let p = LOGF_A[1] * r + LOGF_A[2];
    let q = LOGF_A[0] * r2 + p;
    (q * r2 + (y0 + r)) as f32
}

/// One of sincosf's two coefficient tables.
struct SinCosTable {
    /// Sign of the reduced argument in quadrants 0..3.
    sign: [f64; 4],
    /// 2/π · 2^24.
    hpi_inv: f64,
    /// π/2.
    hpi: f64,
    /// Cosine polynomial.
    c: [f64; 5],
    /// Sine polynomial (s1, s2, s3).
    s: [f64; 3],
}

/// Quadrants 0 and 1.
const SINCOSF_0: SinCosTable = SinCosTable {
    sign: [1.0, -1.0, -1.0, 1.0],
    hpi_inv: d(0x41645f306dc9c883),
    hpi: d(0x3ff921fb54442d18),
    c: [
        d(0x3ff0000000000000),
        d(0xbfdffffffd0c621c),
        d(0x3fa55553e1068f19),
        d(0xbf56c087e89a359d),
        d(0x3ef99343027bf8c3),
    ],
    s: [
        d(0xbfc555545995a603),
        d(0x3f81107605230bc4),
        d(0xbf2994eb3774cf24),
    ],
};

/// Quadrants 2 and 3: the cosine coefficients negated.
const SINCOSF_1: SinCosTable = SinCosTable {
    sign: [1.0, -1.0, -1.0, 1.0],
    hpi_inv: d(0x41645f306dc9c883),
    hpi: d(0x3ff921fb54442d18),
    c: [
        d(0xbff0000000000000),
        d(0x3fdffffffd0c621c),
        d(0xbfa55553e1068f19),
        d(0x3f56c087e89a359d),
        d(0xbef99343027bf8c3),
    ],
    s: [
        d(0xbfc555545995a603),
        d(0x3f81107605230bc4),
        d(0xbf2994eb3774cf24),
    ],
};

/// Bits of 2/π: word `j` holds bytes `j−3 ..= j` of its binary fraction.
const INV_PIO4: [u32; 24] = [
    0x000000a2, 0x0000a2f9, 0x00a2f983, 0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
    0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
    0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041,
];

/// π · 2^-62, the scale of the fixed-point reduced argument.
const PI64: f64 = d(0x3c1921fb54442d18);

/// The exponent and top 3 mantissa bits of `|x|`.
#[inline]
fn abstop12(x: f32) -> u32 {
    (x.to_bits() >> 20) & 0x7ff
}

/// `(sin x, cos x)` for the reduced argument `x` (`x2 = x²` of the
/// unsigned reduced value); odd quadrants swap the two.
#[inline]
fn sincos_poly(x: f64, x2: f64, p: &SinCosTable, n: u32) -> (f32, f32) {
    let x4 = x2 * x2;
    let x3 = x2 * x;
    let c2 = p.c[3] + x2 * p.c[4];
    let s1 = p.s[1] + x2 * p.s[2];
    let c1 = p.c[0] + x2 * p.c[1];
    let x5 = x3 * x2;
    let x6 = x4 * x2;
    let s = x + x3 * p.s[0];
    let c = c1 + x4 * p.c[2];
    let sin = (s + x5 * s1) as f32;
    let cos = (c + x6 * c2) as f32;
    if n & 1 == 1 {
        (cos, sin)
    } else {
        (sin, cos)
    }
}

/// `x − n·π/2` for `|x| < 120`, with `n = round(x·2/π)` from a truncation
/// of `x · 2^24·2/π`.
#[inline]
fn reduce_fast(x: f64, p: &SinCosTable) -> (f64, u32) {
    let r = x * p.hpi_inv;
    let n = ((r as i32).wrapping_add(0x80_0000)) >> 24;
    (x - f64::from(n) * p.hpi, n as u32)
}

/// Reduction of a large `|x|` (bits `xi`, `|x| >= 120`) with 2/π in fixed
/// point: the 2.62 fixed-point remainder, exact, scaled by π·2^-62.
fn reduce_large(xi: u32) -> (f64, u32) {
    let arr = &INV_PIO4[((xi >> 26) & 15) as usize..];
    let shift = (xi >> 23) & 7;
    let m = ((xi & 0xff_ffff) | 0x80_0000) << shift;
    let res0 = u64::from(m.wrapping_mul(arr[0]));
    let res1 = u64::from(m) * u64::from(arr[4]);
    let res2 = u64::from(m) * u64::from(arr[8]);
    let mut res = (res2 >> 32) | (res0 << 32);
    res = res.wrapping_add(res1);
    let n = res.wrapping_add(1 << 61) >> 62;
    res = res.wrapping_sub(n << 62);
    ((res as i64) as f64 * PI64, n as u32)
}

/// `(sin x, cos x)` for `f32`, rounded as glibc's `sincosf`.
///
/// ```
/// use flaxen::random::tf::libm_f32::sincosf;
/// let (s, c) = sincosf(2.4545333);
/// assert_eq!((s.to_bits(), c.to_bits()), (0x3f225f49, 0xbf45ead6)); // the spec's example
/// assert_eq!(sincosf(0.0), (0.0, 1.0));
/// ```
pub fn sincosf(y: f32) -> (f32, f32) {
    let x = f64::from(y);
    let top = abstop12(y);
    if top < abstop12(std::f32::consts::FRAC_PI_4) {
        if top < abstop12(f32::from_bits(0x3980_0000)) {
            // |y| < 2^-12: sin y rounds to y and cos y to 1.
            return (y, 1.0);
        }
        sincos_poly(x, x * x, &SINCOSF_0, 0)
    } else if top < abstop12(120.0) {
        let (r, n) = reduce_fast(x, &SINCOSF_0);
        let s = SINCOSF_0.sign[(n & 3) as usize];
        let p = if n & 2 != 0 { &SINCOSF_1 } else { &SINCOSF_0 };
        sincos_poly(r * s, r * r, p, n)
    } else if top < abstop12(f32::INFINITY) {
        let xi = y.to_bits();
        let sign = xi >> 31;
        let (r, n) = reduce_large(xi);
        let q = n.wrapping_add(sign);
        let s = SINCOSF_0.sign[(q & 3) as usize];
        let p = if q & 2 != 0 { &SINCOSF_1 } else { &SINCOSF_0 };
        sincos_poly(r * s, r * r, p, n)
    } else {
        (f32::NAN, f32::NAN)
    }
}
