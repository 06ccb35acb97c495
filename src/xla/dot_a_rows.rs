//! Products of one panel of columns (at most 64; one, two or four partial
//! sums per output) with A's rows read in place: each of A's values is used
//! once per chunk, so the blocked kernels' packing of A was a pass over A of its
//! own, run while the sums waited; read in place, the rows stream while
//! the sums run. Measured, best of many calls, 2 cores: `[6272, 288] @
//! [288, 64]` 526 -> 463 us (gemm 449), `[4096, 256] @ [256, 64]` 306 ->
//! 267 us (gemm 263), `[128, 512] @ [512, 64]` 20.3 -> 17.1 us, `[4, 1024]
//! @ [1024, 32]` 3.9 -> 1.7 us. Each output is summed as the blocked
//! kernels sum it (see [`super::dot_avx512::rows_tk`]), so the bits are the
//! same.

use std::arch::x86_64::{
    __m512, _mm512_add_ps, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_setzero_ps,
};

use super::dot::{chain_start, DotPlan};
use super::dot_avx512::{add_block, load, reduce_partials};
use super::dot_blocked::panels;

/// The `rows` rows of the product in `o` (row-major, `n` wide): A's rows
/// from `x` on, `rs` apart, each `k` contiguous terms; B's one panel of
/// `NV` vectors packed (`[k][NV * 16]`, or B itself when it is exactly that
/// wide); blocks of `R` rows. `plan` has `T` partial sums per output
/// (`tile_k`; a chain only for `T == 1`) and one panel of `NV * 16`
/// columns.
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA
/// ([`super::dot_avx512::available`]).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn rows<const T: usize, const R: usize, const NV: usize>(
    (x, rs): (&[f32], usize),
    panel: &[f32],
    (k, n): (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    let nr = NV * 16;
    debug_assert!(plan.tile_k == T && (T == 1 || !plan.chain));
    debug_assert!(panels(plan, nr).count() == 1);
    let Some((c0, w, kc)) = panels(plan, nr).next() else {
        return;
    };
    let starts: Option<[__m512; NV]> = plan.chain.then(|| {
        std::array::from_fn(|v| {
            let lanes: [f32; 16] =
                std::array::from_fn(|l| chain_start(c0 + v * 16 + l, plan.signed_from));
            load(&lanes, 0)
        })
    });
    let kmain = k / T * T;
    // Chunk by chunk, each over all the blocks (see `rows_t1`): chunks of
    // the multiple of `T`, then the tail's own call.
    let mut s = 0;
    while s < k {
        let e = if s < kmain { (s + kc).min(kmain) } else { k };
        let first = s == 0;
        let chain = starts.as_ref().filter(|_| first);
        let b = &panel[s * nr..e * nr];
        for r0 in (0..rows).step_by(R) {
            let br = R.min(rows - r0);
            // Rows past the last repeat it: computed, never stored.
            let a: [&[f32]; R] = std::array::from_fn(|r| {
                let i = (r0 + r.min(br - 1)) * rs;
                &x[i + s..i + e]
            });
            let acc = chunk::<T, R, NV>(&a, b, chain);
            add_block(&acc, br, o, (r0 * n + c0, n, w), first);
        }
        s = e;
    }
}

/// One chunk's sums for a block, as `dot_avx512::chunk_tk` sums them: term
/// `t` of row `r` is `a[r][t]`, B's terms are `b`'s rows (`NV * 16` wide);
/// term `t` goes to partial sum `t % T` (a tail shorter than `T`: term `t`
/// to partial sum `t`), the partial sums reduced as YNNPACK reduces them.
/// `chain` (`T == 1`): the first term is a plain product added to these
/// starts (XLA's own emitter).
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn chunk<const T: usize, const R: usize, const NV: usize>(
    a: &[&[f32]; R],
    b: &[f32],
    chain: Option<&[__m512; NV]>,
) -> [[__m512; NV]; R] {
    let nr = NV * 16;
    let len = b.len() / nr;
    let mut acc = [[[_mm512_setzero_ps(); NV]; R]; T];
    let mut t0 = 0;
    if let (Some(starts), true) = (chain, len > 0) {
        for (r, accr) in acc[0].iter_mut().enumerate() {
            let av = _mm512_set1_ps(a[r][0]);
            for (v, x) in accr.iter_mut().enumerate() {
                *x = _mm512_add_ps(_mm512_mul_ps(av, load(b, v * 16)), starts[v]);
            }
        }
        t0 = 1;
    }
    let full = t0 + (len - t0) / T * T;
    for g in (t0..full).step_by(T) {
        for (q, accq) in acc.iter_mut().enumerate() {
            term(accq, &b[(g + q) * nr..], a, g + q);
        }
    }
    for (q, t) in (full..len).enumerate() {
        term(&mut acc[q], &b[t * nr..], a, t);
    }
    reduce_partials(&acc)
}

/// Term `t` of a block: `acc[r][v] += a[r][t] * b[v]` (fused), `b` the
/// term's row of the panel onwards.
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn term<const R: usize, const NV: usize>(
    acc: &mut [[__m512; NV]; R],
    b: &[f32],
    a: &[&[f32]; R],
    t: usize,
) {
    let mut bv = [_mm512_setzero_ps(); NV];
    for (v, x) in bv.iter_mut().enumerate() {
        *x = load(b, v * 16);
    }
    for (r, accr) in acc.iter_mut().enumerate() {
        // Broadcast straight from the row.
        let av = _mm512_set1_ps(a[r][t]);
        for (x, &bx) in accr.iter_mut().zip(&bv) {
            *x = _mm512_fmadd_ps(av, bx, *x);
        }
    }
}
