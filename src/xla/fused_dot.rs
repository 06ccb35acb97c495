//! A transposed matrix times a vector written out in a jitted function
//! (`jax.jit(lambda x, g: x.T @ g)`, `x: [k, f]`, `g: [k, 1]`), as XLA:CPU
//! (jaxlib 0.10.2, x86-64) computes it, measured against JAX
//! (tools/oracle/generate_xt_g.py):
//!
//! * While the vector is under 16 KiB (`k < 4096`, XLA's
//!   `kFusionThresholdBytes`), XLA fuses the transpose and the dot into one
//!   loop: each output is a loop over the `k` terms, `acc + x[p, i] *
//!   g[p]` from `+0` (reassociation allowed), which LLVM compiles.
//!   - Up to [`chain_max_terms`] terms (49, or 59 with two features) LLVM
//!     unrolls that loop fully and vectorizes across outputs: one chain of
//!     fused multiply-adds per output from `+0` ([`fused_column_dot`]).
//!   - Beyond, LLVM vectorizes the loop as a reduction
//!     ([`vectorized_sum`]): 8 lanes times 2 (under 64 terms) or 4
//!     interleaved accumulators, a vectorized epilogue for some of the
//!     remaining terms ([`epilogue_lanes`]) and a scalar chain for the
//!     rest. Exact for 9 outputs or more (measured: 9, 12, 16, 17, 33 and
//!     128, every `k` from 50 to 200 and 255 to 4,095 tried), whose
//!     strided loads LLVM gathers. With 2 to 8 outputs it loads them as
//!     interleaved groups, whose cost makes it choose other widths: not
//!     pinned down, not exact (the chain is computed there, a few ulp
//!     from JAX's).
//! * From 4,096 terms XLA copies the transpose row-major and runs its
//!   row-major GEMV on the copy, as JAX does eagerly (`gemv`).

/// The most terms of a product that XLA fuses into a loop: beyond, the
/// vector (`4 * k` bytes) reaches XLA:CPU's 16 KiB fusion threshold.
pub(crate) const FUSION_MAX_TERMS: usize = 4095;

/// The most terms for which LLVM unrolls the fused loop of a product with
/// `f` outputs fully, so that each output is one chain (measured: every
/// `f` from 3 to 9, 12, 16, 17, 33 and 128 unrolls 49 terms, not 50;
/// two outputs unroll 59, not 60).
pub(crate) fn chain_max_terms(f: usize) -> usize {
    if f == 2 {
        59
    } else {
        49
    }
}

/// Lanes of LLVM's vectors for the fused loop (256-bit registers).
const LANES: usize = 8;

/// `out[i] = sum_p x[p * rs + i * cs] * g[p * gs]` for `i < f`, `p < k`
/// (`k <= FUSION_MAX_TERMS`), in the order of XLA's fused loop: one chain
/// of fused multiply-adds per output from `+0` up to [`chain_max_terms`]
/// terms, [`vectorized_sum`] beyond (exact with 9 outputs or more).
pub(crate) fn fused_column_dot(
    x: &[f32],
    (rs, cs): (usize, usize),
    g: &[f32],
    gs: usize,
    (k, f): (usize, usize),
    out: &mut [f32],
) {
    for (i, o) in out.iter_mut().enumerate().take(f) {
        let term = |p: usize| (x[p * rs + i * cs], g[p * gs]);
        *o = if k <= chain_max_terms(f) {
            (0..k).fold(0.0f32, |acc, p| {
                let (a, b) = term(p);
                a.mul_add(b, acc)
            })
        } else {
            vectorized_sum(k, term)
        };
    }
}

/// The lanes of the epilogue LLVM vectorizes after the main loop, for `r`
/// remaining terms (`None`: no epilogue, a scalar chain), as measured:
/// its cost model weighs the epilogue's iterations against the scalar
/// ones left.
fn epilogue_lanes(r: usize) -> Option<usize> {
    match r {
        0 | 1 => None,
        2 | 3 => Some(2),
        4..=7 | 12..=15 | 20..=23 => Some(4),
        _ => Some(8),
    }
}

/// `8` lanes summed by halving, `((l0 + l4) + (l2 + l6)) + ((l1 + l5) +
/// (l3 + l7))` (and so for 4 and 2 lanes): LLVM's `vector.reduce.fadd`.
fn halving(lanes: &mut [f32]) -> f32 {
    let mut n = lanes.len();
    while n > 1 {
        n /= 2;
        for l in 0..n {
            lanes[l] += lanes[l + n];
        }
    }
    lanes[0]
}

/// The sum of `term(p) = (x_p, g_p)` products over `p < k` as LLVM
/// vectorizes XLA's fused loop (`k > 49`, gathered loads):
///
/// 1. Main loop: [`LANES`] lanes times `ic` interleaved accumulators (2
///    under 64 terms, else 4), term `p` of block `t = p / (8 ic)` in
///    accumulator `u = p % (8 ic) / 8`, lane `p % 8`; the first
///    accumulator starts from `+0` in lane 0 (`-0` elsewhere), the others
///    from their first products. Up to 3 blocks LLVM unrolls the loop,
///    and the DAG combiner, allowed to reassociate, folds every other
///    accumulator's chain onto the first, lane by lane, its terms in
///    block order `1, 0, 2, 3, ...` (the first product it fuses is the
///    first of the `fadd` of two products; the second stays rounded).
///    From 4 blocks the accumulators are fused chains of their own,
///    added `((a1 + a0) + a2) + a3`. The lanes then reduce by halving.
/// 2. Epilogue: [`epilogue_lanes`] lanes over as many of the remaining
///    terms as fit whole, lane 0 starting from the main loop's sum, the
///    others from `-0`; reduced by halving.
/// 3. The last terms: a chain of fused multiply-adds onto the sum.
fn vectorized_sum(k: usize, term: impl Fn(usize) -> (f32, f32)) -> f32 {
    let ic = if k < 64 { 2 } else { 4 };
    let step = LANES * ic;
    let blocks = k / step;
    let fma = |acc: f32, p: usize| {
        let (a, b) = term(p);
        a.mul_add(b, acc)
    };
    let mut lanes = [0.0f32; LANES];
    for (l, lane) in lanes.iter_mut().enumerate() {
        let at = |t: usize, u: usize| t * step + u * LANES + l;
        let start = if l == 0 { 0.0 } else { -0.0 };
        let mut acc = (0..blocks).fold(start, |acc, t| fma(acc, at(t, 0)));
        for u in 1..ic {
            if blocks <= 3 {
                // Unrolled: this accumulator's terms fused onto the sum.
                let order = if blocks == 1 { [0, 0, 0] } else { [1, 0, 2] };
                for &t in order.iter().take(blocks) {
                    acc = fma(acc, at(t, u));
                }
            } else {
                let own = (0..blocks).fold(-0.0f32, |a, t| fma(a, at(t, u)));
                // `own + acc` in LLVM's order: the same bits either way.
                acc += own;
            }
        }
        *lane = acc;
    }
    let mut sum = halving(&mut lanes);
    let mut p = blocks * step;
    if let Some(width) = epilogue_lanes(k - p) {
        let whole = (k - p) / width * width;
        let mut epilogue = [-0.0f32; LANES];
        epilogue[0] = sum;
        for q in 0..whole {
            epilogue[q % width] = fma(epilogue[q % width], p + q);
        }
        sum = halving(&mut epilogue[..width]);
        p += whole;
    }
    (p..k).fold(sum, fma)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each output is its own chain from `+0`: a `-0` product gives `+0`,
    /// and a product that cancels the sum exactly leaves the fused rest.
    #[test]
    fn one_chain_per_output_from_plus_zero() {
        // x: [2, 2] row-major; outputs are the columns.
        let x = [-0.0f32, 3.0, 1.0, 0.1];
        let g = [1.0f32, 10.0];
        let mut out = [f32::NAN; 2];
        fused_column_dot(&x, (2, 1), &g, 1, (1, 2), &mut out);
        assert_eq!(out[0].to_bits(), 0.0f32.to_bits());
        assert_eq!(out[1], 3.0);
        fused_column_dot(&x, (2, 1), &g, 1, (2, 2), &mut out);
        assert_eq!(out, [10.0, 0.1f32.mul_add(10.0, 3.0)]);
    }
}
