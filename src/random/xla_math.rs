//! Provisional f32 special functions; replaced by XLA-exact versions.

pub(crate) fn log(x: f32) -> f32 {
    x.ln()
}

pub(crate) fn log1p(x: f32) -> f32 {
    x.ln_1p()
}

/// XLA's f32 `erf`: a rational approximation on x clamped to [-4, 4].
pub(crate) fn erf(x: f32) -> f32 {
    const ALPHA: [f32; 7] = [
        -2.726_142_3e-10,
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906_3e-4,
        -2.954_600_6e-3,
        -1.609_603_3e-2,
    ];
    const BETA: [f32; 5] = [
        -1.456_607_2e-5,
        -2.133_740_6e-4,
        -1.682_827e-3,
        -7.373_329_2e-3,
        -1.426_474e-2,
    ];
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = ALPHA.iter().fold(0.0f32, |p, &c| p * x2 + c);
    let q = BETA.iter().fold(0.0f32, |q, &c| q * x2 + c);
    x * p / q
}

/// Giles' single-precision erfinv, as XLA evaluates it.
pub(crate) fn erf_inv(x: f32) -> f32 {
    const LT5: [f32; 9] = [
        2.810_226_4e-8,
        3.432_739_4e-7,
        -3.523_387_7e-6,
        -4.391_506_5e-6,
        2.185_808_7e-4,
        -1.253_725e-3,
        -4.177_681_6e-3,
        2.466_407_3e-1,
        1.501_409_4,
    ];
    const GE5: [f32; 9] = [
        -2.002_142_6e-4,
        1.009_505_6e-4,
        1.349_343_2e-3,
        -3.673_428_4e-3,
        5.739_507_7e-3,
        -7.622_461_3e-3,
        9.438_870_5e-3,
        1.001_674,
        2.832_976_8,
    ];
    let w = -log1p(-x * x);
    let lt = w < 5.0;
    let w = if lt { w - 2.5 } else { w.sqrt() - 3.0 };
    let mut p = if lt { LT5[0] } else { GE5[0] };
    for i in 1..9 {
        let c = if lt { LT5[i] } else { GE5[i] };
        p = c + p * w;
    }
    if x.abs() == 1.0 {
        x * f32::INFINITY
    } else {
        p * x
    }
}
