//! Packing a B stored transposed (`g @ W^T`: B's columns contiguous) into
//! the blocked kernels' row panels, 16 x 16 tiles at a time transposed in
//! AVX-512 registers. Element by element, each panel row was 64 scattered
//! stores: packing took a third of `[128, 512] @ [512, 512]^T`'s time. Pure
//! data movement, so the same bits.

use std::arch::x86_64::{
    __m512, _mm512_castpd_ps, _mm512_castps_pd, _mm512_shuffle_f32x4, _mm512_unpackhi_pd,
    _mm512_unpackhi_ps, _mm512_unpacklo_pd, _mm512_unpacklo_ps,
};

use super::dot_avx512::{load, store};

/// Lanes of a vector, and the side of a tile.
const L: usize = 16;

/// The 16 x 16 transpose of `r` (row `i` of the result holds lane `i` of
/// every input row): unpacking pairs of floats, then pairs of pairs, then
/// 128-bit quarters twice.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose(r: [__m512; L]) -> [__m512; L] {
    let lo = |a, b| _mm512_unpacklo_ps(a, b);
    let hi = |a, b| _mm512_unpackhi_ps(a, b);
    let lo2 = |a, b| _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    let hi2 = |a, b| _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    // Pairs: t[2i] and t[2i + 1] from rows 2i and 2i + 1.
    let t: [__m512; L] = std::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            lo(a, b)
        } else {
            hi(a, b)
        }
    });
    // Quads: from t[4q + {0, 2}] and t[4q + {1, 3}].
    let u: [__m512; L] = std::array::from_fn(|i| {
        let q = i / 4 * 4;
        match i % 4 {
            0 => lo2(t[q], t[q + 2]),
            1 => hi2(t[q], t[q + 2]),
            2 => lo2(t[q + 1], t[q + 3]),
            _ => hi2(t[q + 1], t[q + 3]),
        }
    });
    // Quarters of the rows 0-7 and 8-15 apart.
    let v: [__m512; L] = std::array::from_fn(|i| {
        let base = i / 8 * 8;
        let j = i % 4;
        if i % 8 < 4 {
            _mm512_shuffle_f32x4::<0x88>(u[base + j], u[base + 4 + j])
        } else {
            _mm512_shuffle_f32x4::<0xdd>(u[base + j], u[base + 4 + j])
        }
    });
    std::array::from_fn(|i| {
        if i < 8 {
            _mm512_shuffle_f32x4::<0x88>(v[i], v[i + 8])
        } else {
            _mm512_shuffle_f32x4::<0xdd>(v[i - 8], v[i])
        }
    })
}

/// Packs the whole 16 x 16 tiles of columns `c0..c0 + w` of B (`[k, n]`
/// stored transposed in `y`: `B[p, j] = y[j * col + p]`) into `dst` (`k`
/// rows of `nr`): terms `0..k / 16 * 16` of columns `c0..c0 + w / 16 * 16`.
/// Returns the number of terms and of columns done; the caller packs the
/// rest.
///
/// # Safety
///
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack_tiles(
    y: &[f32],
    col: usize,
    k: usize,
    (c0, w): (usize, usize),
    nr: usize,
    dst: &mut [f32],
) -> (usize, usize) {
    let (kt, wt) = (k / L * L, w / L * L);
    for j0 in (0..wt).step_by(L) {
        for p0 in (0..kt).step_by(L) {
            let rows: [__m512; L] = std::array::from_fn(|j| load(y, (c0 + j0 + j) * col + p0));
            for (p, v) in transpose(rows).into_iter().enumerate() {
                store(dst, (p0 + p) * nr + j0, v);
            }
        }
    }
    (kt, wt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tile's elements land where the element-wise packing puts
    /// them, on shapes with partial tiles in both directions (left to the
    /// caller, so untouched here).
    #[test]
    fn tiles_are_transposed_in_place() {
        if !super::super::dot_avx512::available() {
            eprintln!("not run: no AVX-512");
            return;
        }
        for (k, n, c0, w, nr) in [
            (16, 16, 0, 16, 16),
            (37, 70, 3, 64, 64),
            (512, 130, 64, 64, 64),
            (20, 40, 0, 33, 48),
        ] {
            let y: Vec<f32> = (0..n * k).map(|i| i as f32).collect();
            let mut dst = vec![-1.0f32; k * nr];
            // SAFETY: AVX-512F checked above.
            let (kt, wt) = unsafe { pack_tiles(&y, k, k, (c0, w), nr, &mut dst) };
            assert_eq!((kt, wt), (k / 16 * 16, w / 16 * 16));
            for p in 0..k {
                for j in 0..nr {
                    let want = if p < kt && j < wt {
                        y[(c0 + j) * k + p]
                    } else {
                        -1.0
                    };
                    assert_eq!(dst[p * nr + j], want, "k {k} w {w}: term {p} column {j}");
                }
            }
        }
    }
}
