//! XLA's CPU `f64` special functions used by the samplers, as jaxlib
//! 0.10.2 compiles them (read from its optimized HLO and LLVM IR).
//!
//! Unlike `f32` (see [`super::math`]), XLA's CPU backend does not
//! inline a polynomial for an `f64` `log` or `erf`: it calls the C
//! library's `log` and `erf`. [`log`] is Rust's [`f64::ln`], which on Linux
//! calls the same glibc `log` that jaxlib calls, so it gives the same bits
//! on the same system. [`erf`] is the `libm` crate's port of the fdlibm
//! `erf` that glibc 2.36 also derives from; it is only used for the two
//! bounds of `truncated_normal`. `log1p` and `erf_inv` are XLA's own
//! expansions, redone here operation by operation, with [`f64::mul_add`]
//! where LLVM contracts a multiply into the add that is its only use.
//!
//! XLA runs with denormals flushed to zero; no sampler feeds these
//! functions a subnormal, so that is not emulated here.

/// `log(x)`, a call to the C library's `log` (as XLA's `llvm.log.f64`).
#[inline]
pub(crate) fn log(x: f64) -> f64 {
    x.ln()
}

/// `erf(x)`, a call to the C library's `erf` in XLA; fdlibm's algorithm here.
#[inline]
pub(crate) fn erf(x: f64) -> f64 {
    libm::erf(x)
}

/// Cephes' `log1p` numerator, highest degree first (the leading term is
/// XLA's `x·0 + c`).
const LOG1P_P: [u64; 7] = [
    0x3F07_BC09_62B3_95CA,
    0x3FDF_E818_A0FE_1A83,
    0x401A_509F_46F4_FA53,
    0x403D_E973_8B8C_B9C9,
    0x404E_798E_B86C_3351,
    0x404C_8E75_9747_9A10,
    0x4034_0A20_2D99_830A,
];

/// Cephes' `log1p` denominator after its leading 1, highest degree first.
const LOG1P_Q: [u64; 6] = [
    0x402E_2035_9E90_3E37,
    0x4054_C30B_5221_3498,
    0x406B_B865_90FC_FB56,
    0x4073_5194_5DC9_08A5,
    0x406B_0DB1_3E48_E066,
    0x404E_0F30_4466_448E,
];

/// `sqrt(2) - 1`, below which the rational form is used.
const LOG1P_SMALL: u64 = 0x3FDA_8279_99FC_EF32;

/// `log(1 + x)`, XLA CPU's `log1p` for `f64`: for `|x| < sqrt(2) - 1`,
/// `x + fma(x², -0.5, (x·x²)·(P(x)/Q(x)))` with Cephes' degree-6 `P` and
/// `Q` by fused Horner steps; otherwise the C library's `log(x + 1)`.
pub(crate) fn log1p(x: f64) -> f64 {
    let large = log(x + 1.0);
    let x2 = x * x;
    // `x·0` has two uses in XLA's code, so it is not fused.
    let zero = x * 0.0;
    let mut q = zero + 1.0;
    for c in LOG1P_Q {
        q = q.mul_add(x, f64::from_bits(c));
    }
    let mut p = zero + f64::from_bits(LOG1P_P[0]);
    for &c in &LOG1P_P[1..] {
        p = p.mul_add(x, f64::from_bits(c));
    }
    let small = x + x2.mul_add(-0.5, (x * x2) * (p / q));
    if x.abs() < f64::from_bits(LOG1P_SMALL) {
        small
    } else {
        large
    }
}

/// Giles' double-precision `erf_inv` coefficients for `w < 6.25`, highest
/// degree first.
const W_LT_6_25: [u64; 23] = [
    0xBBB1_35D2_E746_E627,
    0xBC08_DDF9_3324_D327,
    0x3C37_B83E_EF0B_7C9F,
    0x3C69_BA72_CD58_9B91,
    0xBCA3_3689_090A_6B96,
    0x3C78_2E11_8981_32E0,
    0x3CFD_E4AC_FD9E_26BA,
    0xBD26_D33E_ED66_C487,
    0xBD36_F216_7040_D8E2,
    0x3D87_2A22_C2D7_7E20,
    0xBDAC_8859_C4E5_C0AF,
    0xBDCD_C583_D118_A561,
    0x3E12_0F47_CCF4_6B3C,
    0xBE31_A9E3_8DC8_4D60,
    0xBE5F_36CD_6D3D_46A9,
    0x3E9C_6B4F_5D03_B787,
    0xBEB6_E8A5_434A_E8A2,
    0xBEED_1D1F_7B87_36F6,
    0x3F28_79C2_A212_F024,
    0xBF48_4576_9484_FCA8,
    0xBF78_B6C3_3114_F909,
    0x3FCE_BD80_D9B1_3E28,
    0x3FFA_755E_7C99_AE86,
];

/// Coefficients for `6.25 <= w < 16`.
const W_LT_16: [u64; 19] = [
    0x3E23_040F_87DB_D932,
    0x3E78_5CBE_5287_8635,
    0xBE92_7774_53DD_3955,
    0x3E53_95AB_CD55_4C6C,
    0x3EB9_3638_8A37_90AD,
    0xBED0_D5DB_812B_5083,
    0x3EC8_860C_D5D6_52F6,
    0x3EEA_29A0_CACD_FB23,
    0xBF08_CEF1_F802_81F2,
    0x3F11_E684_D0B9_188A,
    0x3EF9_32CD_54C8_A222,
    0xBF37_448A_89EF_8AA3,
    0x3F4F_3CC5_5AD4_0C25,
    0xBF5B_A924_132F_38B1,
    0x3F64_68EE_CA53_3CF8,
    0xBF6E_BADA_BB89_1BBD,
    0x3F75_FFCF_E5B7_6AFC,
    0x3FF0_158A_6D64_1D39,
    0x4008_ABCC_380D_5A48,
];

/// Coefficients for `w >= 16`.
const W_GE_16: [u64; 17] = [
    0xBDBD_CEC3_A778_5389,
    0xBDF1_8FEE_C0E3_8727,
    0x3E19_E6BF_2DDA_45E3,
    0xBE30_468F_B24E_2F5F,
    0x3E40_5AC6_A8FB_A182,
    0xBE50_102E_495F_B9C0,
    0x3E5F_4C20_E133_4AF8,
    0xBE72_2D22_0FDF_9C3E,
    0x3E8E_BC8B_B824_CB54,
    0xBEB0_A8D4_0EA3_72CC,
    0x3ED2_FBD2_9D09_3D2B,
    0xBEF4_A349_7E1E_0FAC,
    0x3F13_EBF4_EB00_938F,
    0xBF2C_2F36_A8FC_5D53,
    0xBF22_2EA5_DF04_047C,
    0x3FF0_2A30_D1FB_A0DC,
    0x4013_664D_DD1A_D7FB,
];

/// The inverse error function, XLA's `erf_inv` for `f64`: Giles'
/// double-precision approximation. With `w = -log1p(-x·x)`, the
/// polynomial (23, 19 or 17 terms for `w < 6.25`, `< 16`, `>= 16`) is
/// evaluated in `w - 3.125`, `sqrt(w) - 3.25` or `sqrt(w) - 5` by fused
/// Horner steps, and the result is `p·x` (`x·inf` when `|x| = 1`).
pub(crate) fn erf_inv(x: f64) -> f64 {
    let w = -log1p(x * -x);
    let lt_6_25 = w < 6.25;
    let lt_16 = w < 16.0;
    let coefficient = |i: usize| {
        let c = if lt_6_25 || i >= 19 {
            W_LT_6_25[i]
        } else if lt_16 || i >= 17 {
            W_LT_16[i]
        } else {
            W_GE_16[i]
        };
        f64::from_bits(c)
    };
    let v = if lt_6_25 {
        w - 3.125
    } else {
        w.sqrt() - if lt_16 { 3.25 } else { 5.0 }
    };
    let mut p = coefficient(0);
    for i in 1..17 {
        p = p.mul_add(v, coefficient(i));
    }
    for i in 17..19 {
        if lt_16 {
            p = p.mul_add(v, coefficient(i));
        }
    }
    for i in 19..23 {
        if lt_6_25 {
            p = p.mul_add(v, coefficient(i));
        }
    }
    if x.abs() == 1.0 {
        x * f64::INFINITY
    } else {
        p * x
    }
}
