//! How XLA:CPU sums the products it keeps from YNNPACK: a left operand
//! stored transposed (`a.T @ b`, a dense layer's weight gradient `x^T @ g`).
//!
//! jaxlib 0.10.2's dot thunk hands them to Eigen's tensor contraction on
//! the intra-op thread pool (Eigen `ea13a98d`, built for AVX: packets of 8
//! floats, register blocks `mr = 16`, `nr = 4`), whose blocks run oneDNN
//! 3.7.3's `sgemm` (TSL's contraction kernel; oneDNN picks AVX-512 and FMA
//! at run time). Eigen cuts the `k` terms into blocks by heuristics that read
//! the machine (cache sizes, CPU count); each block's sums start from `+0`
//! and are added to the output in order, so a product of more than one
//! block is not one chain per output. Eigen sees the column-major product
//! `C' = B' A'`: its `m` is JAX's `n`, its `n` JAX's `m`.
//!
//! The heuristics, ported from `TensorContractionThreadPool.h`,
//! `GeneralBlockPanelKernel.h` (`evaluateProductBlockingSizesHeuristic`)
//! and XLA's `eigen_contraction_kernel.h` (the blocking of the oneDNN
//! kernel), decide between three evaluations:
//! - **parallel** (most products): blocks of at most 320 terms;
//! - **sequential** (the cost model gives one thread): blocks from the L1
//!   size, each cut in two by oneDNN past 384 terms;
//! - **sharded by the inner dimension** (small outputs, many terms): `k`
//!   cut into one range per thread, each summed into its own buffer, the
//!   buffers then added in Eigen's order.
//!
//! What depends on the machine: the pool's size (`PJRT_NPROC`, `NPROC` or
//! the CPU count) decides the evaluation; the L1 size the sequential
//! blocks (and the parallel ones below an L1 of 26 KB); the L3 size whether
//! a product shards by the inner dimension. oneDNN's blocks of 384 terms
//! are those of its AVX-512 kernels; on a CPU without AVX-512 they are
//! shorter (not modelled). Checked against JAX on a 2-CPU Intel Xeon (L1d
//! 48 KiB, tests/fixtures/eigen_dots.json).

use std::sync::OnceLock;

use super::dot::DotPlan;
use super::dot_blocked::planned_matmul;

/// Floats per packet (jaxlib is built for AVX).
const PACKET: usize = 8;
/// Eigen's register block rows (`gebp_traits<float, float>::mr` for AVX
/// without FMA at compile time).
const MR: usize = 16;
/// Eigen's register block columns.
const NR: usize = 4;
/// oneDNN's own blocking of `k` inside one `sgemm` call (AVX-512 and AVX2
/// kernels alike: `bk_traditional`).
const DNNL_BK: usize = 384;

/// What Eigen's heuristics read of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Machine {
    /// L1 data cache, bytes.
    pub(crate) l1: usize,
    /// L2 cache, bytes.
    pub(crate) l2: usize,
    /// L3 cache, bytes.
    pub(crate) l3: usize,
    /// Threads of XLA's intra-op pool: the CPUs this process may run on.
    pub(crate) threads: usize,
}

impl Machine {
    /// This machine, read once: cache sizes as Linux reports them (what
    /// Eigen reads through CPUID), Eigen's defaults where they cannot be
    /// read.
    pub(crate) fn current() -> Machine {
        static CURRENT: OnceLock<Machine> = OnceLock::new();
        *CURRENT.get_or_init(|| Machine {
            l1: cache_size(1, "Data").unwrap_or(32 * 1024),
            l2: cache_size(2, "Unified").unwrap_or(256 * 1024),
            l3: cache_size(3, "Unified").unwrap_or(2048 * 1024),
            threads: pool_size(),
        })
    }
}

/// XLA's intra-op pool size (`DefaultThreadPoolSize`): `PJRT_NPROC`, else
/// `NPROC`, else the CPUs this process may run on.
pub(super) fn pool_size() -> usize {
    ["PJRT_NPROC", "NPROC"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The size of CPU 0's cache of `level` and `kind` from sysfs.
fn cache_size(level: u32, kind: &str) -> Option<usize> {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    std::fs::read_dir(base)
        .ok()?
        .flatten()
        .find_map(|entry| index_size(&entry.path(), level, kind))
}

/// The size of the cache that sysfs directory `dir` describes, if it is
/// of `level` and `kind` (`None` for anything else in the directory).
fn index_size(dir: &std::path::Path, level: u32, kind: &str) -> Option<usize> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let lvl: u32 = read("level")?.trim().parse().ok()?;
    if lvl != level || read("type")?.trim() != kind {
        return None;
    }
    let size = read("size")?;
    let size = size.trim();
    let (digits, unit) = match size.as_bytes().last()? {
        b'K' => (&size[..size.len() - 1], 1024),
        b'M' => (&size[..size.len() - 1], 1024 * 1024),
        _ => (size, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

/// How Eigen sums each output of `[m, k]^T-stored @ [k, n]` (JAX's shape).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Summation {
    /// Not Eigen's: XLA's own emitter (a matrix-vector product, or one
    /// smaller than 3 x 3), one chain per output (for `n == 1`, XLA's
    /// column-major GEMV of `g^T @ A`, with its plain column: see
    /// [`super::gemv`]).
    Emitter,
    /// One buffer: these ranges of terms in order, each summed from `+0`
    /// and added to the sums of those before it.
    Chunks(Vec<(usize, usize)>),
    /// Sharded by the inner dimension: each block of ranges summed into a
    /// buffer of its own as in [`Summation::Chunks`], the buffers then
    /// added in Eigen's order (`EvalShardedByInnerDimContext`).
    InnerDim(Vec<Vec<(usize, usize)>>),
}

/// The length of consecutive ranges `c` from 0 when they all have one
/// length but the last (which may be shorter): what a
/// [`super::dot::DotPlan`]'s chunks express.
pub(crate) fn uniform_chunk(c: &[(usize, usize)]) -> Option<usize> {
    let kc = c.first().map_or(0, |&(s, e)| e - s);
    let uniform = c.first().is_some_and(|&(s, _)| s == 0)
        && c.windows(2).all(|w| w[0].1 == w[1].0)
        && c.iter().rev().skip(1).all(|&(s, e)| e - s == kc)
        && c.last().is_some_and(|&(s, e)| e - s <= kc);
    uniform.then_some(kc)
}

/// How a product `[m, k]^T @ [k, n]` runs to sum as Eigen does on
/// `machine` (see [`eigen_run`]).
#[derive(Clone, Debug)]
pub(crate) enum EigenRun {
    /// Blocks of one length: one plan on the blocked kernels, each chunk a
    /// chain from `+0` (a `-0` product then gives `+0`, as XLA's) added
    /// to those before it.
    Plan(DotPlan),
    /// Others: [`sum_blocks`] over these blocks of ranges.
    Blocks(Vec<Vec<(usize, usize)>>),
}

/// How `x^T @ y` (`[m, k]^T @ [k, n]`) runs to give Eigen's bits on
/// `machine`: `None` where Eigen is not involved or sums one chain per
/// output ([`Summation::Emitter`], a single range), which the plain plans
/// already give.
pub(crate) fn eigen_run(m: usize, k: usize, n: usize, machine: &Machine) -> Option<EigenRun> {
    let blocks = match summation(m, k, n, machine) {
        Summation::Emitter => return None,
        Summation::Chunks(c) if c.len() <= 1 => return None,
        Summation::Chunks(c) => vec![c],
        Summation::InnerDim(blocks) => blocks,
    };
    match (&blocks[..], uniform_chunk(&blocks[0])) {
        ([_], Some(kc)) => Some(EigenRun::Plan(DotPlan {
            tiles: vec![(0, n, kc)],
            ..DotPlan::chain(k, n)
        })),
        _ => Some(EigenRun::Blocks(blocks)),
    }
}

/// `out = x @ y` (`x` through strides `sa`, `y` through `sb`) summed as
/// `blocks`: each block's ranges of terms into a buffer of its own, each
/// range a chain from `+0` (run by the blocked kernels as a product of its
/// own) added to the ranges before it; the buffers then added as
/// [`combine`] adds them. `packed`: the kernels' scratch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sum_blocks(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    (m, _, n): (usize, usize, usize),
    blocks: &[Vec<(usize, usize)>],
    out: &mut [f32],
    packed: &mut Vec<f32>,
) {
    let mut buffers: Vec<Vec<f32>> = Vec::with_capacity(blocks.len());
    let mut part = vec![0.0; m * n];
    for ranges in blocks {
        let mut buffer = vec![0.0; m * n];
        for (r, &(s, e)) in ranges.iter().enumerate() {
            let dst = if r == 0 {
                &mut buffer[..]
            } else {
                &mut part[..]
            };
            let plan = DotPlan::chain(e - s, n);
            let (xs, ys) = (&x[s * sa.1..], &y[s * sb.0..]);
            planned_matmul(xs, sa, ys, sb, (m, e - s, n), &plan, dst, packed);
            if r > 0 {
                buffer.iter_mut().zip(&part).for_each(|(o, p)| *o += p);
            }
        }
        buffers.push(buffer);
    }
    combine(&mut buffers);
    if let Some(first) = buffers.first() {
        out.copy_from_slice(first);
    }
}

/// Adds the buffers of a product sharded by the inner dimension into the
/// first, as `EvalShardedByInnerDimContext` does: groups of four blocks
/// (`(b0 + b1) + (b2 + b3)`, a short last group one by one), then the
/// groups three at a time into the first, the rest one by one. A four-way
/// addition adds packets of 8 as `(d + s0) + (s1 + s2)` and the elements
/// past the last whole packet as `d + ((s0 + s1) + s2)`.
pub(crate) fn combine(buffers: &mut [Vec<f32>]) {
    const L0: usize = 4;
    let nb = buffers.len();
    if nb < 2 {
        return;
    }
    let groups = nb.div_ceil(L0);
    let add_all = |bufs: &mut [Vec<f32>], d: usize, s: [usize; 3]| {
        let mut dst = std::mem::take(&mut bufs[d]);
        let packets = dst.len() / PACKET * PACKET;
        let terms = bufs[s[0]].iter().zip(&bufs[s[1]]).zip(&bufs[s[2]]);
        for (i, (v, ((a, b), c))) in dst.iter_mut().zip(terms).enumerate() {
            *v = if i < packets {
                (*v + a) + (b + c)
            } else {
                *v + ((a + b) + c)
            };
        }
        bufs[d] = dst;
    };
    let add = |bufs: &mut [Vec<f32>], d: usize, s: usize| {
        let (lo, hi) = bufs.split_at_mut(s);
        lo[d].iter_mut().zip(&hi[0]).for_each(|(o, x)| *o += x);
    };
    for g in 0..groups {
        let d = g * L0;
        let len = if g + 1 < groups {
            L0
        } else {
            nb - L0 * (groups - 1)
        };
        if len == L0 {
            add_all(buffers, d, [d + 1, d + 2, d + 3]);
        } else {
            for i in 1..len {
                add(buffers, d, d + i);
            }
        }
    }
    let mut g = 1;
    while g + 2 < groups {
        add_all(buffers, 0, [g * L0, (g + 1) * L0, (g + 2) * L0]);
        g += 3;
    }
    while g < groups {
        add(buffers, 0, g * L0);
        g += 1;
    }
}

/// How XLA:CPU's Eigen contraction sums JAX's `a.T @ b` (`a: [k, m]`,
/// `b: [k, n]`) on `machine`.
pub(crate) fn summation(m: usize, k: usize, n: usize, machine: &Machine) -> Summation {
    // XLA's dot emitter keeps matrix-vector products and those "smaller
    // than 3x3" (`GetNonBatchDotImplementationStrategy`).
    if m == 1 || n == 1 || k <= 3 || (m <= 3 && n <= 3) {
        return Summation::Emitter;
    }
    // Eigen's view; the operands are plain arrays (no compute per
    // coefficient), and oneDNN's `sgemm` blocks `k` again.
    let plan = contraction(n, m, k, OperandCosts::default(), true, machine);
    let ranges = plan.blocks.into_iter().map(|b| b.ranges);
    if plan.sharded {
        Summation::InnerDim(ranges.collect())
    } else {
        Summation::Chunks(ranges.flatten().collect())
    }
}

/// The compute cost per coefficient (`costPerCoeff(true).compute_cycles`)
/// of a contraction's two operand expressions, which Eigen's cost model
/// adds to the product's: zero for arrays in memory, more for expressions
/// computed on the fly (a convolution's image patches); and the bytes
/// that the right operand loads per coefficient.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct OperandCosts {
    /// Eigen's left operand (`m` rows).
    pub(crate) lhs: f64,
    /// Eigen's right operand (`n` columns).
    pub(crate) rhs: f64,
    /// The bytes Eigen's right operand loads per coefficient: a float
    /// (4), except for an expression whose cost leaves out its argument's
    /// (a volume-patch op: 0).
    pub(crate) rhs_bytes: f64,
}

impl Default for OperandCosts {
    /// Arrays in memory: no compute, a float loaded per coefficient.
    fn default() -> OperandCosts {
        OperandCosts {
            lhs: 0.0,
            rhs: 0.0,
            rhs_bytes: 4.0,
        }
    }
}

/// One buffer of an Eigen contraction: ranges of terms, each summed from
/// `+0` and added to the ranges before it in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EigenBlock {
    /// The ranges of terms, in order.
    pub(crate) ranges: Vec<(usize, usize)>,
    /// Eigen's column block (`nc`): its `n` columns go to the kernel in
    /// blocks of `nc` (the last one shorter).
    pub(crate) nc: usize,
}

/// How Eigen's contraction of `[m, k] x [k, n]` (its column-major view)
/// sums each output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EigenContraction {
    /// The buffers: one, or with [`EigenContraction::sharded`] one per
    /// block of the inner dimension, added as [`combine`] adds them.
    pub(crate) blocks: Vec<EigenBlock>,
    /// Sharded by the inner dimension (`EvalShardedByInnerDimContext`).
    pub(crate) sharded: bool,
}

/// Eigen's evaluation of its contraction of `m x k` by `k x n` on
/// `machine` with operand costs `costs` (`TensorContractionThreadPool.h`):
/// sharded by the inner dimension, or one buffer in ranges of the
/// parallel (`t > 1`) or sequential blocking. `dnnl_split`: oneDNN's
/// `sgemm` cuts one call of more than 384 terms again (not when it sees
/// one row, `m == 1`: it then jumps to its matrix-vector kernel).
pub(crate) fn contraction(
    em: usize,
    en: usize,
    ek: usize,
    costs: OperandCosts,
    dnnl_split: bool,
    machine: &Machine,
) -> EigenContraction {
    let threads = machine.threads.max(1);
    let by_col = shard_by_col(em, en, 2);
    let (bk, bm, bn) = blocking(ek, em, en, 2, by_col, machine);
    let cost = contraction_cost(em, en, (bm, bn, bk), by_col, costs);
    let t = num_threads(en as f64 * em as f64, cost, threads);
    let tk = num_threads_inner_dim(em, en, ek, threads, costs);
    if shard_by_inner_dim((em, en, ek), t, tk, machine.l3) {
        let target = ek.div_ceil(tk).div_ceil(8) * 8;
        let size = ek.min((12 * PACKET).max(target));
        let count = ek.div_ceil(size);
        let blocks = (0..count)
            .map(|b| {
                let (k0, k1) = (b * size, ((b + 1) * size).min(ek));
                // Each block is its own contraction (`evalGemmPartial`),
                // blocked for as many threads as there are blocks.
                let (kc, _, nc) = blocking(k1 - k0, em, en, count, true, machine);
                EigenBlock {
                    ranges: k_chunks(k0, k1, kc, dnnl_split),
                    nc,
                }
            })
            .collect();
        return EigenContraction {
            blocks,
            sharded: true,
        };
    }
    // One column runs on one thread.
    let t = if en == 1 { 1 } else { t };
    let (kc, _, nc) = if t == 1 {
        blocking(ek, em, en, 1, true, machine)
    } else {
        blocking(ek, em, en, t, shard_by_col(em, en, t), machine)
    };
    EigenContraction {
        blocks: vec![EigenBlock {
            ranges: k_chunks(0, ek, kc, dnnl_split),
            nc,
        }],
        sharded: false,
    }
}

/// Eigen's blocks of `kc` terms over `k0..k1`, each cut again by oneDNN's
/// own blocking of one call when `dnnl_split`.
fn k_chunks(k0: usize, k1: usize, kc: usize, dnnl_split: bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = k0;
    while s < k1 {
        let e = (s + kc.max(1)).min(k1);
        let len = e - s;
        // One block up to DNNL_BK terms, two halves below twice that, then
        // blocks of DNNL_BK.
        let step = if !dnnl_split || len <= DNNL_BK {
            len
        } else if len < 2 * DNNL_BK {
            len.div_ceil(2)
        } else {
            DNNL_BK
        };
        let mut p = s;
        while p < e {
            out.push((p, (p + step).min(e)));
            p += step;
        }
        s = e;
    }
    out
}

/// `evaluateProductBlockingSizesHeuristic<float, float, 1>`: `(kc, mc, nc)`.
fn heuristic(k: usize, m: usize, n: usize, threads: usize, mc: &Machine) -> (usize, usize, usize) {
    let (l1, l2, l3) = (mc.l1, mc.l2, mc.l3);
    let (kdiv, ksub) = (MR * 4 + NR * 4, MR * NR * 4);
    let (mut k, mut m, mut n) = (k, m, n);
    if threads > 1 {
        // "Once the latency is hidden there is no point in increasing the
        // value of k, so we'll cap it at 320."
        let k_cache = (l1.saturating_sub(ksub) / kdiv).clamp(8, 320);
        if k_cache < k {
            k = k_cache - k_cache % 8;
        }
        let n_cache = l2.saturating_sub(l1) / (NR * 4 * k);
        let n_per_thread = n.div_ceil(threads);
        if n_cache <= n_per_thread {
            n = n_cache - n_cache % NR;
        } else {
            n = n.min((n_per_thread + NR - 1) - (n_per_thread + NR - 1) % NR);
        }
        if l3 > l2 {
            let m_cache = (l3 - l2) / (4 * k * threads);
            let m_per_thread = m.div_ceil(threads);
            if m_cache < m_per_thread && m_cache >= MR {
                m = m_cache - m_cache % MR;
            } else {
                m = m.min((m_per_thread + MR - 1) - (m_per_thread + MR - 1) % MR);
            }
        }
        return (k, m, n);
    }
    if k.max(m).max(n) < 48 {
        return (k, m, n);
    }
    let max_kc = ((l1.saturating_sub(ksub) / kdiv) & !7).max(1);
    if k > max_kc {
        k = if k.is_multiple_of(max_kc) {
            max_kc
        } else {
            max_kc - 8 * ((max_kc - 1 - k % max_kc) / (8 * (k / max_kc + 1)))
        };
    }
    // Second level, on the L2 (`actual_l2`: 1.5 times its size): `nc`,
    // which decides whether a last column block of width 1 is left (see
    // [`EigenBlock::nc`]). Eigen's `mc` for one thread only sizes the
    // blocks, which does not change any output's sums.
    let actual_l2 = l2 * 3 / 2;
    let remaining_l1 = l1 as i64 - ksub as i64 - (m * k * 4) as i64;
    let max_nc = if remaining_l1 >= (NR * 4 * k) as i64 {
        remaining_l1 as usize / (k * 4)
    } else {
        (3 * actual_l2) / (2 * 2 * k * 4)
    };
    let nc = (actual_l2 / (2 * k * 4)).min(max_nc) & !(NR - 1);
    if n > nc && nc > 0 {
        n = if n.is_multiple_of(nc) {
            nc
        } else {
            nc - NR * ((nc - n % nc) / (NR * (n / nc + 1)))
        };
    }
    (k, m, n)
}

/// XLA's `TensorContractionBlocking` for the oneDNN kernel: `(kc, mc, nc)`.
fn blocking(
    k: usize,
    m: usize,
    n: usize,
    threads: usize,
    by_col: bool,
    machine: &Machine,
) -> (usize, usize, usize) {
    let (kc, mc, nc) = if by_col {
        heuristic(k, m, n, threads, machine)
    } else {
        let (kc, nc, mc) = heuristic(k, n, m, threads, machine);
        (kc, mc, nc)
    };
    let mc = m.min((mc * 3 / 2).div_ceil(48) * 48);
    let nc = n.min(nc.div_ceil(24) * 24);
    let slices = k.div_ceil(kc.max(1)).max(1);
    let kc = k.min((k / slices).div_ceil(PACKET.max(8)) * PACKET.max(8));
    (kc, mc, nc)
}

/// Eigen's bandwidth factor of a contraction's cost (`computeBandwidth`,
/// without FMA at compile time).
fn bandwidth(by_col: bool, bm: usize, bn: usize, bk: usize) -> f64 {
    if bk == 1 {
        4.0
    } else if (if by_col { bn } else { bm }) < NR || (if by_col { bm } else { bn }) < MR {
        2.0
    } else {
        1.0
    }
}

/// Eigen's `TensorOpCost` of a contraction: (bytes loaded, stored, compute).
type Cost = (f64, f64, f64);

/// `contractionCost` (per output coefficient): the memory of one operand
/// (the one not sharded), the compute of both.
fn contraction_cost(
    m: usize,
    n: usize,
    (bm, bn, bk): (usize, usize, usize),
    by_col: bool,
    costs: OperandCosts,
) -> Cost {
    let kd = bk as f64;
    // Eigen passes `false` for `shard_by_col` here.
    let compute = kd * bandwidth(false, bm, bn, bk) / PACKET as f64
        + costs.lhs * kd / n as f64
        + costs.rhs * kd / m as f64;
    let (lhs, rhs) = (4.0 * kd / n as f64, costs.rhs_bytes * kd / m as f64);
    let loaded = if by_col { rhs } else { lhs };
    (loaded, 4.0, compute)
}

/// `TensorCostModel::totalCost`.
fn total_cost(outputs: f64, (loaded, stored, compute): Cost) -> f64 {
    const MEMORY: f64 = 11.0 / 64.0;
    outputs * (MEMORY * loaded + MEMORY * stored + compute)
}

/// `TensorCostModel::numThreads`.
fn num_threads(outputs: f64, cost: Cost, max: usize) -> usize {
    let threads = (total_cost(outputs, cost) - 100_000.0) / 100_000.0 + 0.9;
    // `int` truncation, then at least one.
    (threads as i64).clamp(1, max as i64) as usize
}

/// `shardByCol`.
fn shard_by_col(m: usize, n: usize, t: usize) -> bool {
    if m / t >= NR
        && (n / t < NR
            || (n / t < 4 * NR
                && !n.is_multiple_of(t * NR)
                && (m.is_multiple_of(t * NR) || m / n.max(1) >= 6)))
    {
        return false;
    }
    !(n / t < 16 * NR && m > n * 32)
}

/// `numThreadsInnerDim`.
fn num_threads_inner_dim(m: usize, n: usize, k: usize, max: usize, costs: OperandCosts) -> usize {
    let compute = bandwidth(true, m, n, k) * (m * n) as f64 / PACKET as f64
        + costs.lhs * m as f64
        + costs.rhs * n as f64;
    let parallel = total_cost(k as f64, (costs.rhs_bytes * n as f64, 4.0, compute));
    let reduction = total_cost((m * n) as f64, (2.0, 1.0, 1.0 / PACKET as f64));
    let (mut best, mut min) = (1, parallel);
    for nt in (2..=max).step_by(2) {
        let sequential = 100_000.0 + nt as f64 * (reduction + 3000.0);
        let cost = parallel / nt as f64 + sequential;
        if cost < min {
            (best, min) = (nt, cost);
        }
    }
    best
}

/// `shardByInnerDim`.
fn shard_by_inner_dim((m, n, k): (usize, usize, usize), t: usize, tk: usize, l3: usize) -> bool {
    let bufsize = m * n * 4;
    if n == 1 || tk < 2 || tk < t || bufsize > l3 / tk || k / tk < 2 * NR {
        return false;
    }
    m.max(n) / t < NR || (k / tk > 8 * NR && (m.min(n) < 2 * NR || tk > t))
}

#[cfg(test)]
#[path = "eigen_dot_tests.rs"]
mod tests;
