//! The summation order of XLA:CPU's f32 dots that run through YNNPACK
//! (jaxlib 0.10.2), so that `matmul` reproduces them bit for bit.
//!
//! # What XLA does
//!
//! XLA:CPU (the `xla/backends/cpu/ynn_support.cc` of jaxlib 0.10.2) hands a
//! 2-D f32 `dot` to YNNPACK (HLO custom fusion `__ynn_fusion`) when
//! `max(m, k, n) >= 8`, the left operand is canonical (`[m, k]`, contracting
//! its last axis) and row-major, and neither `m` nor `n` is 1 for a batched
//! product. Other dots (a transposed left operand such as `A^T @ g`, one row
//! or column, tiny products) take XLA's own dot emitter.
//!
//! YNNPACK (google/XNNPACK `ynnpack/`, the tree of mid-June 2026 that jaxlib
//! 0.10.2 vendors) computes every output of a dot as follows:
//!
//! * A *kernel* is chosen once when the graph is built, from `n` and `k`
//!   only (`m` is not known then and taken as 2048): the cheapest, by the
//!   linear cost model of `kernels/dot/dot.cc` (`estimate_dot_cost`), of the
//!   generated x86 kernels (`kernels/dot/generator/x86_fp32*.py`), scanned
//!   in `kernels.inc` order with ties to the first. Its `tile_k` (1, 2 or 4)
//!   is the number of partial sums per output: `tile_k = 4` keeps four
//!   accumulators, one per `k mod 4`, each a chain of fused multiply-adds
//!   started from `+0`, reduced as `(s0 + s1) + (s2 + s3)` at the end of
//!   the kernel call; `tile_k = 2` reduces `s0 + s1`.
//! * B is packed (`subgraph/dot.cc`, `should_pack_b`) unless an unpacked
//!   kernel (`tile_k = 1`, unaligned B) is at most twice as expensive and
//!   `ceil(m / block_m) <= 10`; a transposed B (`g @ W^T`) is always packed.
//!   Unpacked, the dot runs with `tile_k = 1`.
//! * `k` is cut into a multiple of `tile_k` and a tail of `k mod tile_k`
//!   terms, run afterwards as one more kernel call on zero-padded A and B.
//! * `schedule_dot` (`kernels/dot/schedule.cc`) splits the multiple of
//!   `tile_k` into chunks of `block_k * floor(128 KiB / (block_n * 4 *
//!   block_k))` terms, where `block_n` is the packed panel width, or, for an
//!   unpacked B, the width of the column tile the output is split into for
//!   threads (`choose_split_factors`). Each chunk is one kernel call whose
//!   result is added to the output computed so far (`acc + c`).
//!
//! All YNNPACK f32 kernels picked on this machine use FMA (AVX-512 `k1`,
//! `k2`, `k4` kernels; AVX2/FMA3 kernels only win where they tie an AVX-512
//! one later in the list, which the scan order rules out). The order emulated
//! here is the one of an x86-64 CPU with AVX-512F (the machine the fixtures
//! were recorded on); on a CPU without AVX-512, YNNPACK would choose among
//! its FMA3/AVX2 kernels (other `tile_k`, other block shapes) and JAX's
//! results differ from these in the last bits. The arithmetic itself is
//! exact IEEE (`mul_add` is correctly rounded whether or not the CPU has
//! FMA), so flaxen computes the same bits everywhere.

use super::plan_cache::{cached, PlanCache};

/// One generated YNNPACK dot kernel: block and tile shapes (`m`, `n`, `k`)
/// and whether it reads B unpacked.
#[derive(Clone, Copy, Debug)]
struct Kernel {
    block: (usize, usize, usize),
    tile: (usize, usize, usize),
    unaligned_b: bool,
    /// Multiply-accumulates fused (the AVX-512 and FMA3 kernels), or a
    /// rounded product added (SSE2, AVX, AVX2).
    fma: bool,
}

const fn kernels<const N: usize>(
    blocks: [(usize, usize, usize); N],
    tile: (usize, usize, usize),
    unaligned_b: bool,
    fma: bool,
) -> [Kernel; N] {
    let mut out = [Kernel {
        block: (0, 0, 0),
        tile,
        unaligned_b,
        fma,
    }; N];
    let mut i = 0;
    while i < N {
        out[i].block = blocks[i];
        i += 1;
    }
    out
}

/// AVX-512 `tile_k = 1` kernels (FMA; read B unpacked).
const AVX512_K1: [Kernel; 11] = kernels(
    [
        (1, 64, 1),
        (2, 64, 1),
        (3, 64, 1),
        (4, 64, 1),
        (5, 64, 1),
        (1, 32, 1),
        (2, 32, 1),
        (3, 32, 1),
        (4, 32, 1),
        (5, 32, 1),
        (5, 16, 1),
    ],
    (1, 16, 1),
    true,
    true,
);
/// AVX-512 `tile_k = 2` kernels.
const AVX512_K2: [Kernel; 9] = kernels(
    [
        (1, 32, 2),
        (2, 32, 2),
        (3, 32, 2),
        (4, 32, 2),
        (5, 32, 2),
        (1, 16, 2),
        (4, 16, 2),
        (4, 8, 2),
        (8, 8, 2),
    ],
    (1, 8, 2),
    false,
    true,
);
/// AVX-512 `tile_k = 4` kernels.
const AVX512_K4: [Kernel; 11] = kernels(
    [
        (1, 32, 4),
        (2, 32, 4),
        (1, 16, 4),
        (3, 16, 4),
        (4, 16, 4),
        (5, 16, 4),
        (2, 8, 4),
        (4, 8, 4),
        (6, 8, 4),
        (4, 4, 4),
        (8, 4, 4),
    ],
    (1, 4, 4),
    false,
    true,
);
/// FMA3 `tile_k = 1` kernels (unpacked B).
const FMA3_K1: [Kernel; 9] = kernels(
    [
        (1, 32, 1),
        (2, 32, 1),
        (1, 16, 1),
        (2, 16, 1),
        (3, 16, 1),
        (4, 16, 1),
        (5, 16, 1),
        (6, 16, 1),
        (8, 8, 1),
    ],
    (1, 8, 1),
    true,
    true,
);
/// AVX2 `tile_k = 2` block shapes (the FMA3 and the plain AVX2 lists).
const AVX2_K2_BLOCKS: [(usize, usize, usize); 11] = [
    (1, 16, 2),
    (2, 16, 2),
    (1, 8, 2),
    (3, 8, 2),
    (4, 8, 2),
    (5, 8, 2),
    (6, 8, 2),
    (4, 4, 2),
    (5, 4, 2),
    (6, 4, 2),
    (8, 4, 2),
];
const AVX2_FMA3_K2: [Kernel; 11] = kernels(AVX2_K2_BLOCKS, (1, 4, 2), false, true);
/// AVX `tile_k = 1` kernels (no FMA; unpacked B).
const AVX_K1: [Kernel; 9] = kernels(
    [
        (1, 32, 1),
        (2, 32, 1),
        (1, 16, 1),
        (2, 16, 1),
        (3, 16, 1),
        (4, 16, 1),
        (4, 8, 1),
        (6, 8, 1),
        (8, 8, 1),
    ],
    (1, 8, 1),
    true,
    false,
);
const AVX2_K2: [Kernel; 11] = kernels(AVX2_K2_BLOCKS, (1, 4, 2), false, false);
/// SSE2 `tile_k = 1` kernels.
const SSE2_K1: [Kernel; 10] = kernels(
    [
        (1, 16, 1),
        (2, 16, 1),
        (3, 16, 1),
        (1, 8, 1),
        (2, 8, 1),
        (3, 8, 1),
        (4, 8, 1),
        (4, 4, 1),
        (6, 4, 1),
        (8, 4, 1),
    ],
    (1, 4, 1),
    false,
    false,
);

/// Every f32 kernel an AVX-512 x86-64 CPU may run, in `kernels.inc` order
/// (the portable reference kernel costs 100x and never wins).
fn all_kernels() -> impl Iterator<Item = &'static Kernel> {
    AVX512_K1
        .iter()
        .chain(&AVX512_K2)
        .chain(&AVX512_K4)
        .chain(&FMA3_K1)
        .chain(&AVX2_FMA3_K2)
        .chain(&AVX_K1)
        .chain(&AVX2_K2)
        .chain(&SSE2_K1)
}

/// YNNPACK's `estimate_dot_cost`, in the same f32 arithmetic.
fn cost(m: usize, n: usize, k: usize, kr: &Kernel) -> f32 {
    let (bm, bn, bk) = kr.block;
    let (tm, tn, tk) = kr.tile;
    let blocks_m = m.div_ceil(bm) as f32;
    let blocks_n = n.div_ceil(bn) as f32;
    let blocks_k = k.div_ceil(bk) as f32;
    let loads_a = bm * bk / (tm * tk);
    let loads_b = bn * bk / (tn * tk);
    let tile_cost = tm * tn * tk;
    let block_cost = (loads_a * 5 + loads_b * 11 + 9) as f32 + tile_cost as f32 * 1e-4f32;
    blocks_m * blocks_n * blocks_k * block_cost
}

/// The cheapest kernel for `m x n x k` among those with `tile_k ==
/// required_tile_k` (if not 0) and, if asked, an unpacked B; first wins ties.
fn best_kernel(
    m: usize,
    n: usize,
    k: usize,
    required_tile_k: usize,
    unaligned_b: bool,
) -> Option<(Kernel, f32)> {
    let mut best: Option<(Kernel, f32)> = None;
    for kr in all_kernels() {
        if (unaligned_b && !kr.unaligned_b)
            || (required_tile_k != 0 && kr.tile.2 != required_tile_k)
        {
            continue;
        }
        let c = cost(m, n, k, kr);
        if best.is_none_or(|(_, b)| c < b) {
            best = Some((*kr, c));
        }
    }
    best
}

/// YNNPACK's L2 budget for blocking `k` (`cache_size_l2` of
/// `subgraph/dot.cc`), in bytes.
const CACHE_L2: usize = 128 * 1024;

/// How YNNPACK sums the outputs of one `[m, k] @ [k, n]` dot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DotPlan {
    /// Partial sums per output (`tile_k`): 1, 2 or 4.
    pub(crate) tile_k: usize,
    /// Column tiles `[j0, j1)` and, for each, the length of the chunks the
    /// multiple-of-`tile_k` part of `k` is cut into (a multiple of
    /// `tile_k`; `k` itself when not cut).
    pub(crate) tiles: Vec<(usize, usize, usize)>,
    /// XLA's own emitter instead: one sequential chain per output whose
    /// first term is the product `x0 * y0` rounded alone, added to XLA's
    /// `+0` accumulator (which only turns a `-0` product into `+0`).
    pub(crate) chain: bool,
    /// With `chain`: the columns from this one on start from their first
    /// product instead (a sum of `-0` products is `-0`), as XLA's GEMV
    /// epilogue does (see `matmul::signed_from`); `usize::MAX`: none.
    pub(crate) signed_from: usize,
}

impl DotPlan {
    /// One chain `x0*y0`, then `fma(x_t, y_t, acc)`, per output, as XLA's
    /// own dot emitter sums (`k` terms, `n` columns).
    pub(crate) fn chain(k: usize, n: usize) -> Self {
        DotPlan {
            tile_k: 1,
            tiles: vec![(0, n, k.max(1))],
            chain: true,
            signed_from: usize::MAX,
        }
    }

    /// This plan with the columns from `from` on summed from their first
    /// product (see [`DotPlan::signed_from`]).
    pub(crate) fn signed_from(self, from: usize) -> Self {
        DotPlan {
            signed_from: from,
            ..self
        }
    }
}

/// What a chain's column `j` starts from, added to its first product:
/// `+0`, or `-0` (which leaves the product as it is) from column `from` on.
#[inline(always)]
pub(crate) fn chain_start(j: usize, from: usize) -> f32 {
    if j >= from {
        -0.0
    } else {
        0.0
    }
}

/// YNNPACK's `choose_split_factors`: the width of the column tiles (threads'
/// tasks) of an `m x n` output with `k` terms and panel width `block_n`.
fn split_n(m: usize, n: usize, k: usize, block_n: usize) -> usize {
    let k = k.min(1024);
    let min_area = m.min(64) * n.min(64);
    let (max_area, max_cost, aspect) = (256 * 256, 1024 * 64, 4);
    let mut sn = n.min(block_n);
    let mut sm = m.min(16);
    loop {
        if sn * sm >= min_area && ((sm + sn) * k >= max_cost || sm * sn >= max_area) {
            break;
        }
        if (aspect * sn <= sm || sm >= m) && sn < n {
            sn *= 2;
        } else if (sm <= aspect * sn || sn >= n) && sm < m {
            sm *= 2;
        } else {
            break;
        }
    }
    sn.min(65536)
}

/// The arguments a [`DotPlan`] is made from.
type PlanKey = (usize, usize, usize, bool, usize, usize);

thread_local! {
    static PLANS: PlanCache<PlanKey, DotPlan> = PlanCache::new();
}

/// [`plan`], made once per shape and thread.
pub(crate) fn cached_plan(
    m: usize,
    k: usize,
    n: usize,
    b_transposed: bool,
    a_batch: usize,
    b_batch: usize,
) -> std::sync::Arc<DotPlan> {
    cached(&PLANS, (m, k, n, b_transposed, a_batch, b_batch), || {
        plan(m, k, n, b_transposed, a_batch, b_batch)
    })
}

/// The plan of a dot `[m, k] @ [k, n]` run by YNNPACK (`m, n, k >= 1`).
/// `b_transposed`: B reaches the dot transposed (`g @ W^T`), which YNNPACK
/// always packs. `a_batch`, `b_batch`: how many matrices each operand holds.
pub(crate) fn plan(
    m: usize,
    k: usize,
    n: usize,
    b_transposed: bool,
    a_batch: usize,
    b_batch: usize,
) -> DotPlan {
    plan_with_taps(m, k, 1, n, b_transposed, a_batch, b_batch).0
}

/// The plan of a dot with `taps` further reduction dimensions outside its
/// `k` (YNNPACK's dot of `num_k_dims = 3` that runs a convolution: `k` the
/// channels, `taps` the window's positions), and whether its kernel fuses
/// its multiply-accumulates. The kernel is chosen from `n` and `k` alone;
/// the taps weigh in the cache blocking (chunks of `k` cover every tap) and
/// the column tiles.
pub(crate) fn plan_with_taps(
    m: usize,
    k: usize,
    taps: usize,
    n: usize,
    b_transposed: bool,
    a_batch: usize,
    b_batch: usize,
) -> (DotPlan, bool) {
    // Chosen when the graph is built: m unknown, assumed 2048.
    let (kernel, kernel_cost) = best_kernel(2048, n, k, 0, false).expect("f32 kernels exist");
    let unpacked = if b_transposed {
        None
    } else if kernel.tile.2 == 1 {
        Some((kernel, kernel_cost))
    } else {
        best_kernel(2048, n, k, 1, true)
    };
    let pack = match unpacked {
        None => true,
        Some((u, _)) if !u.unaligned_b => true,
        Some((_, uc)) if uc > kernel_cost * 2.0 => true,
        Some((u, _)) => m.div_ceil(u.block.0) * a_batch > b_batch * 10,
    };
    let tile_k = if pack { kernel.tile.2 } else { 1 };
    let kmain = k / tile_k * tile_k;
    let chunk = |block_n: usize, block_k: usize| {
        let blocks = CACHE_L2 / (taps * block_n * 4 * block_k);
        if blocks > 0 && kmain > block_k * blocks {
            block_k * blocks
        } else {
            kmain.max(1)
        }
    };
    if pack {
        let (kbn, ktn, ktk) = (kernel.block.1, kernel.tile.1, kernel.tile.2);
        let cache_blocks = (CACHE_L2 / 4) / (kbn * k * taps);
        let block_n = (kbn * cache_blocks.max(1))
            .min(n.div_ceil(ktn) * ktn)
            .max(ktn);
        // Every x86 f32 kernel has block_k == tile_k.
        let kc = chunk(block_n, ktk);
        let plan = DotPlan {
            tile_k,
            tiles: vec![(0, n, kc)],
            chain: false,
            signed_from: usize::MAX,
        };
        (plan, kernel.fma)
    } else {
        let (u, _) = unpacked.expect("unpacked kernel");
        let block_n = 16.max(u.block.1);
        let sn = if n <= block_n {
            n
        } else {
            split_n(m, n, k * taps, block_n)
        };
        let tiles = (0..n)
            .step_by(sn)
            .map(|j0| {
                let j1 = (j0 + sn).min(n);
                (j0, j1, chunk(j1 - j0, 1))
            })
            .collect();
        let plan = DotPlan {
            tile_k,
            tiles,
            chain: false,
            signed_from: usize::MAX,
        };
        (plan, u.fma)
    }
}

/// Products of at most this many multiply-adds are summed one output at a
/// time by [`planned_scalar`]: for them, clearing and reducing the
/// kernels' accumulator blocks costs more than the arithmetic.
pub(crate) const SCALAR_LIMIT: usize = 1024;

/// The partial sums of one kernel call for one output: terms `s..e`, lane
/// `(p - s) % T`, reduced as [`reduce`] does (zero lanes included, which
/// decide the sign of a zero sum as YNNPACK's padded lanes do).
/// `chain_first`: the first term is a plain product (XLA's own emitter,
/// `T == 1`) added to this start (see [`chain_start`]).
#[inline(always)]
fn scalar_call<const T: usize>(
    term: impl Fn(usize) -> (f32, f32),
    (s, e): (usize, usize),
    chain_first: Option<f32>,
) -> f32 {
    let mut lanes = [0.0f32; T];
    let mut p = s;
    if let (Some(start), true) = (chain_first, p < e) {
        let (x, y) = term(p);
        lanes[0] = x * y + start;
        p += 1;
    }
    while p + T <= e {
        for (q, lane) in lanes.iter_mut().enumerate() {
            let (x, y) = term(p + q);
            *lane = x.mul_add(y, *lane);
        }
        p += T;
    }
    for (q, lane) in lanes.iter_mut().enumerate().take(e - p) {
        let (x, y) = term(p + q);
        *lane = x.mul_add(y, *lane);
    }
    match T {
        1 => lanes[0],
        2 => lanes[0] + lanes[1],
        _ => (lanes[0] + lanes[1]) + (lanes[2 % T] + lanes[3 % T]),
    }
}

/// One output of the product under `plan`, summed as the blocked kernels
/// (`dot_blocked`) sum it: `kc`-term chunks of the multiple of `T`, then
/// the tail. `chain`: a chain's start (see [`chain_start`]), if the plan
/// is one.
#[inline(always)]
fn scalar_output<const T: usize>(
    term: impl Fn(usize) -> (f32, f32) + Copy,
    k: usize,
    kc: usize,
    chain: Option<f32>,
) -> f32 {
    let kmain = k / T * T;
    let mut tot = 0.0f32;
    let mut first = true;
    let mut s = 0;
    while s < kmain {
        let e = (s + kc).min(kmain);
        let v = scalar_call::<T>(term, (s, e), chain.filter(|_| first));
        tot = if first { v } else { v + tot };
        first = false;
        s = e;
    }
    if kmain < k {
        let v = scalar_call::<T>(term, (kmain, k), chain.filter(|_| first));
        tot = if first { v } else { v + tot };
    }
    tot
}

/// [`scalar_output`] when the multiple of `T` is one chunk and there is no
/// chain: its `T` partial sums reduced, then the tail's (each term in its
/// own partial sum, from `+0`) reduced and added.
#[inline(always)]
pub(crate) fn one_chunk_output<const T: usize>(
    term: impl Fn(usize) -> (f32, f32),
    k: usize,
) -> f32 {
    let reduce = |l: [f32; T]| match T {
        1 => l[0],
        2 => l[0] + l[1 % T],
        _ => (l[0] + l[1 % T]) + (l[2 % T] + l[3 % T]),
    };
    let kmain = k / T * T;
    let mut lanes = [0.0f32; T];
    let mut p = 0;
    while p < kmain {
        for (q, lane) in lanes.iter_mut().enumerate() {
            let (x, y) = term(p + q);
            *lane = x.mul_add(y, *lane);
        }
        p += T;
    }
    if kmain == k {
        return reduce(lanes);
    }
    let mut tail = [0.0f32; T];
    for (q, lane) in tail.iter_mut().enumerate().take(k - kmain) {
        let (x, y) = term(kmain + q);
        *lane = x.mul_add(y, 0.0);
    }
    let tail = reduce(tail);
    if kmain == 0 {
        tail
    } else {
        tail + reduce(lanes)
    }
}

/// [`planned_scalar`]'s loops for `tile_k == T`.
#[inline(always)]
fn scalar_tiles<const T: usize>(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    (m, k, n): (usize, usize, usize),
    plan: &DotPlan,
    out: &mut [f32],
) {
    let chain = |j: usize| plan.chain.then(|| chain_start(j, plan.signed_from));
    if let (false, [(0, j1, kc)]) = (plan.chain, &plan.tiles[..]) {
        if *j1 == n && *kc >= k / T * T {
            // One chunk and the tail, no chain (most small products): the
            // same sums without the chunk loop's bookkeeping per output.
            for i in 0..m {
                for j in 0..n {
                    let term = |p: usize| (x[i * sa.0 + p * sa.1], y[p * sb.0 + j * sb.1]);
                    out[i * n + j] = one_chunk_output::<T>(term, k);
                }
            }
            return;
        }
    }
    if sa.1 == 1 && sb.0 == 1 {
        // Rows of A and columns of B contiguous: each output a dot of two
        // slices (bounds checked once per output).
        for &(j0, j1, kc) in &plan.tiles {
            for i in 0..m {
                let xr = &x[i * sa.0..i * sa.0 + k];
                for j in j0..j1 {
                    let yc = &y[j * sb.1..j * sb.1 + k];
                    let term = |p: usize| (xr[p], yc[p]);
                    out[i * n + j] = scalar_output::<T>(term, k, kc, chain(j));
                }
            }
        }
        return;
    }
    for &(j0, j1, kc) in &plan.tiles {
        for i in 0..m {
            for j in j0..j1 {
                let term = |p: usize| (x[i * sa.0 + p * sa.1], y[p * sb.0 + j * sb.1]);
                out[i * n + j] = scalar_output::<T>(term, k, kc, chain(j));
            }
        }
    }
}

/// `sum(a * b)` of two vectors of one length `k >= 1` as a YNNPACK dot
/// `[1, k] @ [k, 1]`: YNNPACK rewrites a jitted sum over one axis of a
/// product into a dot when a kept axis has extent 1 (its `fusion.cc`,
/// `rewrite_sum_to_dot`), so a one-row `jnp.sum(a * b, -1)` of 4,096
/// elements or more, handed to YNNPACK, runs in the dot's order.
pub(crate) fn vector_dot(a: &[f32], b: &[f32]) -> f32 {
    let k = a.len();
    debug_assert!(k >= 1 && b.len() == k);
    let plan = cached_plan(1, k, 1, false, 1, 1);
    let mut out = [0.0f32];
    planned_scalar(a, (k, 1), b, (1, 1), (1, k, 1), &plan, &mut out);
    out[0]
}

/// [`super::dot_blocked::planned_matmul`] for small products (at most
/// [`SCALAR_LIMIT`] multiply-adds), one output at a time, with B read
/// through its strides `sb` (no packing): the same arithmetic in the same
/// order, same bits.
pub(crate) fn planned_scalar(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    mkn: (usize, usize, usize),
    plan: &DotPlan,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports FMA, checked just above; that is the only
        // requirement of `planned_scalar_fma`, whose body is safe code.
        unsafe { planned_scalar_fma(x, sa, y, sb, mkn, plan, out) };
        return;
    }
    planned_scalar_body(x, sa, y, sb, mkn, plan, out)
}

/// [`planned_scalar_body`] compiled with FMA instructions (`mul_add` is
/// one instruction instead of a call to libm's `fmaf`; same bits).
///
/// # Safety
///
/// The CPU must support FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn planned_scalar_fma(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    mkn: (usize, usize, usize),
    plan: &DotPlan,
    out: &mut [f32],
) {
    planned_scalar_body(x, sa, y, sb, mkn, plan, out)
}

/// The loops of [`planned_scalar`].
#[inline(always)]
fn planned_scalar_body(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    (m, k, n): (usize, usize, usize),
    plan: &DotPlan,
    out: &mut [f32],
) {
    debug_assert!(out.len() == m * n && m * k * n <= SCALAR_LIMIT);
    match plan.tile_k {
        1 => scalar_tiles::<1>(x, sa, y, sb, (m, k, n), plan, out),
        2 => scalar_tiles::<2>(x, sa, y, sb, (m, k, n), plan, out),
        _ => scalar_tiles::<4>(x, sa, y, sb, (m, k, n), plan, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xla::dot_blocked::planned_matmul;

    #[test]
    fn per_output_sums_match_the_blocked_kernels() {
        // Same order, same bits: every small shape, plan and stride pattern
        // (B row-major, transposed, and A transposed), with values whose
        // sums round differently in other orders, signed zeros included.
        let mut seed = 7u64;
        let mut value = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            match seed >> 60 {
                0 => -0.0,
                1 => 0.0,
                _ => ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0,
            }
        };
        for (m, k, n) in [
            (1, 1, 1),
            (8, 2, 3),
            (8, 3, 2),
            (3, 9, 8),
            (5, 13, 11),
            (9, 4, 16),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| value()).collect();
            let y: Vec<f32> = (0..k * n).map(|_| value()).collect();
            let yt: Vec<f32> = (0..n * k).map(|i| y[(i % k) * n + i / k]).collect();
            let xt: Vec<f32> = (0..k * m).map(|i| x[(i % m) * k + i / m]).collect();
            let plans = [
                plan(m, k, n, false, 1, 1),
                plan(m, k, n, true, 1, 1),
                DotPlan::chain(k, n),
                DotPlan::chain(k, n).signed_from(n / 2),
            ];
            for p in &plans {
                let mut blocked = vec![0.0; m * n];
                let mkn = (m, k, n);
                planned_matmul(
                    &x,
                    (k, 1),
                    &y,
                    (n, 1),
                    mkn,
                    p,
                    &mut blocked,
                    &mut Vec::new(),
                );
                type Operands<'a> = (&'a [f32], (usize, usize), &'a [f32], (usize, usize));
                let cases: [Operands<'_>; 3] = [
                    (&x, (k, 1), &y, (n, 1)),
                    (&x, (k, 1), &yt, (1, k)),
                    (&xt, (1, m), &y, (n, 1)),
                ];
                for (xs, sa, ys, sb) in cases {
                    let mut single = vec![0.0; m * n];
                    planned_scalar(xs, sa, ys, sb, (m, k, n), p, &mut single);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&single),
                        bits(&blocked),
                        "{m}x{k}x{n} {p:?} {sa:?} {sb:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn plans_of_measured_shapes() {
        // Fitted against jax 0.10.2 (see tools/oracle/generate_matmul.py).
        assert_eq!(plan(40, 3, 4, false, 1, 1).tile_k, 4);
        assert_eq!(plan(32, 64, 32, false, 1, 1).tile_k, 1);
        let p = plan(128, 784, 512, false, 1, 1);
        assert_eq!((p.tile_k, p.tiles[0].2), (1, 512));
        let p = plan(4, 100, 512, false, 1, 1);
        assert_eq!((p.tile_k, p.tiles), (1, vec![(0, 512, 64)]));
        let p = plan(2, 300, 512, false, 1, 1);
        assert_eq!(p.tiles, vec![(0, 256, 128), (256, 512, 128)]);
    }
}
