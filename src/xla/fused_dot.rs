//! A transposed matrix times a vector written out in a jitted function
//! (`jax.jit(lambda x, g: x.T @ g)`, `x: [k, f]`, `g: [k, 1]`), as XLA:CPU
//! (jaxlib 0.10.2, x86-64) computes it, read from the LLVM IR XLA emits
//! (`--xla_dump_to`, the module's `ir-with-opt.ll`) and measured against
//! JAX (tools/oracle/generate_xt_g.py):
//!
//! * While the vector is under 16 KiB (`k < 4096`, XLA's
//!   `kFusionThresholdBytes`), XLA fuses the transpose and the dot into one
//!   loop: each output is a loop over the `k` terms, `acc + x[p, i] *
//!   g[p]` from `+0` (reassociation allowed), which LLVM compiles.
//!   - Up to [`chain_max_terms`] terms (49, or 59 with two features) LLVM
//!     unrolls that loop fully and vectorizes across outputs: one chain of
//!     fused multiply-adds per output from `+0` ([`fused_column_dot`]).
//!   - Beyond, LLVM vectorizes the loop as a reduction
//!     ([`vectorized_sum`]) of 8 lanes times 2 or 4 interleaved
//!     accumulators, with a vectorized epilogue for some of the remaining
//!     terms and a scalar chain for the rest; how many of each its cost
//!     model picks ([`Plan`]) depends on how it loads a column of `x`.
//!     With 9 outputs or more it gathers the strided elements. With 2 to
//!     8 it loads whole rows and shuffles (an interleaved group with
//!     gaps), which must not read past the end: the last iterations then
//!     stay scalar, and the epilogue's widths and the unrolling follow
//!     the cost of those loads.
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

/// The most outputs whose strided loads LLVM vectorizes as an interleaved
/// group (a wide load and a shuffle); with more it gathers them.
const MAX_INTERLEAVED: usize = 8;

/// `out[i] = sum_p x[p * rs + i * cs] * g[p * gs]` for `i < f`, `p < k`
/// (`k <= FUSION_MAX_TERMS`), in the order of XLA's fused loop: one chain
/// of fused multiply-adds per output from `+0` up to [`chain_max_terms`]
/// terms, [`vectorized_sum`] beyond.
pub(crate) fn fused_column_dot(
    x: &[f32],
    (rs, cs): (usize, usize),
    g: &[f32],
    gs: usize,
    (k, f): (usize, usize),
    out: &mut [f32],
) {
    let plan = (k > chain_max_terms(f)).then(|| Plan::new(k, f));
    for (i, o) in out.iter_mut().enumerate().take(f) {
        let term = |p: usize| (x[p * rs + i * cs], g[p * gs]);
        *o = match &plan {
            None => (0..k).fold(0.0f32, |acc, p| {
                let (a, b) = term(p);
                a.mul_add(b, acc)
            }),
            Some(plan) => vectorized_sum(plan, term),
        };
    }
}

/// How LLVM's loop vectorizer and unroller compiled the fused loop of `k`
/// terms (`k > chain_max_terms(f)`) for `f` outputs, as its IR shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    /// Interleaved accumulators of the main loop.
    ic: usize,
    /// Blocks of `LANES * ic` terms the main loop sums.
    blocks: usize,
    /// Whether the main loop is unrolled fully (one basic block, so that
    /// the DAG combiner reassociates across its accumulators).
    unrolled: bool,
    /// Lanes of the epilogue and the terms it sums (`None`: none).
    epilogue: Option<(usize, usize)>,
    /// All the terms.
    k: usize,
}

impl Plan {
    /// The plan for `k` terms (more than [`chain_max_terms`]) and `f` outputs.
    fn new(k: usize, f: usize) -> Plan {
        // Interleaved groups with gaps may not read past the last row: the
        // vectorizer keeps at least one iteration scalar, and decides on
        // the trip count less that one.
        let interleaved = f <= MAX_INTERLEAVED;
        let vector_terms = if interleaved { k - 1 } else { k };
        let ic = if vector_terms < 64 { 2 } else { 4 };
        let step = LANES * ic;
        let blocks = vector_terms / step;
        let rest = k - blocks * step;
        let epilogue = if interleaved {
            // Sized for `k % step` remaining terms (none when that is 0),
            // again keeping one iteration scalar.
            match k % step {
                0 => None,
                r => {
                    let width = interleaved_epilogue_lanes(f, r);
                    Some((width, (rest - 1) / width * width))
                }
            }
        } else {
            epilogue_lanes(rest).map(|width| (width, rest / width * width))
        };
        let unrolled = blocks
            <= if interleaved {
                max_unrolled_blocks(f)
            } else {
                3
            };
        Plan {
            ic,
            blocks,
            unrolled,
            epilogue: epilogue.filter(|&(_, terms)| terms > 0),
            k,
        }
    }
}

/// The lanes of the epilogue LLVM vectorizes after a main loop of
/// gathered loads, for `r` remaining terms (`None`: no epilogue, a scalar
/// chain), as measured: its cost model weighs the epilogue's iterations
/// against the scalar ones left.
fn epilogue_lanes(r: usize) -> Option<usize> {
    match r {
        0 | 1 => None,
        2 | 3 => Some(2),
        4..=7 | 12..=15 | 20..=23 => Some(4),
        _ => Some(8),
    }
}

/// The lanes of the epilogue after a main loop of interleaved loads for
/// `f` outputs, `r = k % (LANES * ic)` terms left (read from the IR for
/// every `r` and `f` from 2 to 8: the cost of a strided load of 2 or 4
/// lanes decides between the widths).
fn interleaved_epilogue_lanes(f: usize, r: usize) -> usize {
    match r {
        2 | 3 | 6 | 7 => 2,
        4 | 5 | 12..=15 | 20..=23 => 4,
        28..=31 if f != 5 && f != 6 => 4,
        _ => 8,
    }
}

/// The most blocks of the main loop LLVM's unroller unrolls fully for `f`
/// interleaved outputs (read from the IR: its cost grows with the shuffles
/// a wider stride takes).
fn max_unrolled_blocks(f: usize) -> usize {
    match f {
        2 => 14,
        3 | 4 => 11,
        _ => 10,
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
/// vectorizes XLA's fused loop (`plan`):
///
/// 1. Main loop: [`LANES`] lanes times `ic` interleaved accumulators, term
///    `p` of block `t = p / (8 ic)` in accumulator `u = p % (8 ic) / 8`,
///    lane `p % 8`; the first accumulator starts from `+0` in lane 0 (`-0`
///    elsewhere), the others from their first products. Unrolled fully,
///    the loop is one basic block: each other accumulator is `(p1 + p0) +
///    p2 + ...` over its blocks, its first product fused and the second
///    rounded, and the DAG combiner, allowed to reassociate the sum
///    `((a1 + a0) + a2) + a3`, replaces that rounded product by a fused
///    multiply-add onto the sum so far: every other accumulator's chain
///    continues the first, lane by lane, in block order `1, 0, 2, 3, ...`.
///    Otherwise the accumulators are fused chains of their own, added
///    `((a1 + a0) + a2) + a3`. The lanes then reduce by halving.
/// 2. Epilogue: its lanes over its terms, lane 0 starting from the main
///    loop's sum, the others from `-0`; reduced by halving.
/// 3. The last terms: a chain of fused multiply-adds onto the sum.
fn vectorized_sum(plan: &Plan, term: impl Fn(usize) -> (f32, f32)) -> f32 {
    let Plan {
        ic,
        blocks,
        unrolled,
        epilogue,
        k,
    } = *plan;
    let step = LANES * ic;
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
            if unrolled {
                // This accumulator's terms fused onto the sum so far.
                let order = [1, 0].into_iter().chain(2..blocks);
                for t in order.filter(|&t| t < blocks) {
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
    if let Some((width, terms)) = epilogue {
        let mut lanes = [-0.0f32; LANES];
        lanes[0] = sum;
        for q in 0..terms {
            lanes[q % width] = fma(lanes[q % width], p + q);
        }
        sum = halving(&mut lanes[..width]);
        p += terms;
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

    fn plan(
        ic: usize,
        blocks: usize,
        unrolled: bool,
        epilogue: Option<(usize, usize)>,
        k: usize,
    ) -> Plan {
        Plan {
            ic,
            blocks,
            unrolled,
            epilogue,
            k,
        }
    }

    /// Plans as XLA's optimized IR shows them (`ir-with-opt.ll`: the
    /// vector accumulators, the `vector.reduce.fadd` widths and the scalar
    /// `fadd`s of one output).
    #[test]
    fn plans_as_the_ir_shows_them() {
        // Interleaved: one iteration stays scalar, so 64 terms take 2
        // accumulators, 3 blocks and 16 scalar terms (64 % 16 == 0).
        assert_eq!(Plan::new(64, 2), plan(2, 3, true, None, 64));
        // 60: 12 left, 4 lanes over 8 of them (one iteration scalar).
        assert_eq!(Plan::new(60, 7), plan(2, 3, true, Some((4, 8)), 60));
        // 6 left: 2 lanes over 4.
        assert_eq!(Plan::new(54, 3), plan(2, 3, true, Some((2, 4)), 54));
        // 31 left: 4 lanes over 28 with 4 features, 8 over 24 with 5.
        assert_eq!(Plan::new(127, 4), plan(4, 3, true, Some((4, 28)), 127));
        assert_eq!(Plan::new(127, 5), plan(4, 3, true, Some((8, 24)), 127));
        // Unrolled fully up to 14 blocks with 2 features, 11 with 4, 10 with 5.
        assert_eq!(Plan::new(449, 2), plan(4, 14, true, None, 449));
        assert_eq!(Plan::new(481, 2), plan(4, 15, false, None, 481));
        assert_eq!(Plan::new(353, 4), plan(4, 11, true, None, 353));
        assert_eq!(Plan::new(353, 5), plan(4, 11, false, None, 353));
        // Gathered: no scalar iteration kept; 64 terms are 2 blocks of 32.
        assert_eq!(Plan::new(64, 9), plan(4, 2, true, None, 64));
        assert_eq!(Plan::new(60, 9), plan(2, 3, true, Some((4, 12)), 60));
    }
}
