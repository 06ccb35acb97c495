//! How XLA:CPU sums a convolution that it keeps on Eigen
//! (`EigenGenericConv2D`: at most 16 input and 16 output features, see
//! [`super::ynn_conv`] for the others), when Eigen cuts the sums.
//!
//! Per feature group, Eigen contracts the kernel `[K, F/G]` (its left
//! operand, `m = F/G` rows) with the image patches `[P, K]` (its right
//! operand, `n = P` columns: batch and output positions), `K` = taps
//! row-major times the group's input features, innermost. Its contraction
//! decides from the sizes and the machine how to cut the `K` terms
//! ([`super::eigen_dot::contraction`], with the operands' costs below):
//! ranges summed from `+0` and added in order, or, sharded by the inner
//! dimension, blocks summed into buffers of their own and combined. Each
//! range is one oneDNN call:
//! - `m >= 2` (`sgemm`): per output one chain of fused multiply-adds over
//!   the range; except that a column block of width 1 (`P % nc == 1`: the
//!   last output position alone) becomes `gemv_n`, one chain continued
//!   over all the block's ranges;
//! - `m == 1` (`gemv_t`): [`super::onednn_gemv`]'s order per range, each
//!   range after the first continuing from the sum so far (`beta = 1`).
//!
//! Model from a helper's study (Eigen `ea13a98d`, TSL's contraction
//! kernel and oneDNN read; jaxlib 0.10.2 on the AMD EPYC, 2 CPUs: no
//! mismatching output in 90 random forward passes and 27 chosen
//! convolutions and cotangents); checked here by `tests/conv_orders.rs`'
//! `eigen_*` cases.

use super::eigen_dot::{combine, contraction, EigenBlock, EigenContraction, Machine, OperandCosts};
use super::onednn_gemv::{gemv_t_sum_onto, GEMV_MAX_TERMS};
use super::vectors::with_fma;

/// Eigen's compute cost per coefficient of the image patches
/// (`TensorImagePatch.h`: `(3 * div + 6 * mul + 8 * mul) / 8`, a division
/// of `long` costing 24).
const PATCH_COST: f64 = 86.0 / 8.0;
/// Eigen's compute cost per coefficient of a chip on a middle dimension
/// (`TensorChipping.h`: `(3 * mul + div + 3 * add) / 8`).
const CHIP_COST: f64 = 30.0 / 8.0;

/// The operand costs of a 2-D convolution (`EigenConv2D`, image patches)
/// with `groups` feature groups, as measured (bisecting the
/// inner-dimension shard's threshold): with one group jaxlib's convolution
/// builds no chip (the patches cost alone); with several both operands are
/// chips of the group.
pub(crate) fn image_patch_costs(groups: usize) -> OperandCosts {
    if groups == 1 {
        OperandCosts {
            lhs: 0.0,
            rhs: PATCH_COST,
            rhs_bytes: 4.0,
        }
    } else {
        OperandCosts {
            lhs: CHIP_COST,
            rhs: PATCH_COST + CHIP_COST,
            rhs_bytes: 4.0,
        }
    }
}

/// The operand costs of a 3-D convolution (`EigenConv3D`, volume
/// patches: the kernel cotangent of a grouped convolution). The kernel is
/// a chip; the patches cost `(10 * div + 21 * mul + 8 * add) / 8`
/// (`TensorVolumePatch.h`), which, unlike the image patches', does not add
/// its argument's cost: no bytes loaded. Measured by the helper
/// (`/work/scratch/grouped_dk/REPORT.md`: the other candidate costs fail).
pub(crate) const VOLUME_PATCH_COSTS: OperandCosts = OperandCosts {
    lhs: CHIP_COST,
    rhs: 269.0 / 8.0,
    rhs_bytes: 0.0,
};

/// How Eigen sums one group's contraction of a convolution: `rows`
/// outputs per column (Eigen's `n`), `terms` terms each (`k`), `columns`
/// (`m`).
#[derive(Clone, Debug)]
pub(crate) struct EigenConvPlan {
    /// Eigen's `n`: the rows of the patches.
    rows: usize,
    /// Eigen's `k`.
    terms: usize,
    /// Eigen's `m`: the kernel's columns (output features per group).
    columns: usize,
    /// Eigen's ranges and buffers.
    contraction: EigenContraction,
}

impl EigenConvPlan {
    /// The plan of a contraction of `rows x terms` patches with a
    /// `terms x columns` kernel whose operands cost `costs`
    /// ([`image_patch_costs`], [`VOLUME_PATCH_COSTS`]), on `machine`.
    pub(crate) fn new(
        rows: usize,
        terms: usize,
        columns: usize,
        costs: OperandCosts,
        machine: &Machine,
    ) -> EigenConvPlan {
        // oneDNN jumps to its matrix-vector kernel for one column before
        // it blocks `k`.
        let dnnl_split = columns != 1;
        let contraction = contraction(columns, rows, terms, costs, dnnl_split, machine);
        EigenConvPlan {
            rows,
            terms,
            columns,
            contraction,
        }
    }

    /// Whether the plan sums as the plain routes do: with several columns,
    /// one chain per output over all the terms (one range); with one, one
    /// matrix-vector sum of at most [`GEMV_MAX_TERMS`] terms (what the
    /// plain route takes; Eigen never cuts fewer).
    pub(crate) fn is_plain(&self) -> bool {
        let blocks = &self.contraction.blocks;
        let one_range = blocks.len() == 1 && blocks[0].ranges.len() <= 1;
        one_range && (self.columns != 1 || self.terms <= GEMV_MAX_TERMS)
    }

    /// The row that `block`'s column blocks leave alone (`rows % nc == 1`),
    /// which oneDNN sums as `gemv_n`; only with several columns (one
    /// column is `gemv_t` throughout).
    fn alone(&self, block: &EigenBlock) -> Option<usize> {
        let nc = block.nc.max(1);
        (self.columns >= 2 && nc < self.rows && self.rows % nc == 1).then(|| self.rows - 1)
    }

    /// The sums: `out[r * columns + f] = Σ_j a_r[j] * w[j * columns + f]`
    /// for every row `r`, where `row(r, a)` writes row `r`'s `terms`
    /// terms into `a`; `w` is the kernel `[terms, columns]`.
    pub(crate) fn sums(&self, w: &[f32], row: impl Fn(usize, &mut [f32]) + Sync) -> Vec<f32> {
        use rayon::prelude::*;
        let (m, k) = (self.columns, self.terms);
        let blocks = &self.contraction.blocks;
        let nb = blocks.len();
        let width = m.div_ceil(LANES) * LANES;
        let wp: Vec<f32> = if m == 1 {
            Vec::new()
        } else {
            w.chunks_exact(m)
                .flat_map(|r| r.iter().copied().chain(std::iter::repeat_n(0.0, width - m)))
                .collect()
        };
        let padded = Padded { w: &wp, width, m };
        // Per row, each block's sums side by side: `[row][block][column]`.
        let mut parts = vec![0.0f32; self.rows * nb * m];
        parts
            .par_chunks_mut((TILE * nb * m).max(1))
            .enumerate()
            .for_each_init(
                || (vec![0.0f32; TILE * k], vec![0.0f32; TILE * m]),
                |(a, part), (tile, out)| {
                    let first = tile * TILE;
                    let rows = out.len() / (nb * m).max(1);
                    for (i, a) in a.chunks_exact_mut(k).take(rows).enumerate() {
                        row(first + i, a);
                    }
                    with_fma(
                        #[inline(always)]
                        || {
                            for (b, block) in blocks.iter().enumerate() {
                                let at = |i: usize| (i * nb + b) * m..(i * nb + b + 1) * m;
                                if m == 1 {
                                    for i in 0..rows {
                                        out[at(i)][0] = gemv_t(&block.ranges, &a[i * k..], w);
                                    }
                                    continue;
                                }
                                let mut y = vec![0.0f32; rows * m];
                                sum_ranges(&block.ranges, (a, k), &padded, &mut y, part);
                                if let Some(r) = self.alone(block).filter(|r| r / TILE == tile) {
                                    // `gemv_n`: y loaded and updated by one
                                    // chain per call, range after range: one
                                    // chain over the whole block.
                                    let (s, e) =
                                        (block.ranges[0].0, block.ranges[block.ranges.len() - 1].1);
                                    let i = r - first;
                                    let yr = &mut y[i * m..(i + 1) * m];
                                    chain((&a[i * k..], k), (s, e), &padded, yr);
                                }
                                for i in 0..rows {
                                    out[at(i)].copy_from_slice(&y[i * m..(i + 1) * m]);
                                }
                            }
                        },
                    )
                },
            );
        if nb == 1 {
            return parts;
        }
        // Eigen's buffers are column-major `[m, n]`: row-major `[rows,
        // columns]`, the flat order its packets of 8 run over.
        let mut buffers: Vec<Vec<f32>> = (0..nb)
            .map(|b| {
                parts
                    .chunks_exact(nb * m)
                    .flat_map(|c| c[b * m..(b + 1) * m].iter().copied())
                    .collect()
            })
            .collect();
        combine(&mut buffers);
        buffers.swap_remove(0)
    }
}

/// Rows summed together: independent chains keep the FMA units busy
/// (each chain is sequential).
const TILE: usize = 8;

/// oneDNN's `gemv_t` of one row's terms `a` with the column `w` over
/// `ranges`, each range continuing the sum (`beta = 1`).
#[inline(always)]
fn gemv_t(ranges: &[(usize, usize)], a: &[f32], w: &[f32]) -> f32 {
    ranges.iter().fold(0.0, |acc, &(s, e)| {
        gemv_t_sum_onto(acc, e - s, |j| (a[s + j], w[s + j]))
    })
}

/// A tile's sums over one block's `ranges` into `y` (`[rows, m]`): per
/// range a chain from `+0` per output, added to the ranges before it.
/// `a`: the tile's rows of terms and their length; `w`: the kernel;
/// `part`: a scratch of at least `y.len()`.
#[inline(always)]
fn sum_ranges(
    ranges: &[(usize, usize)],
    (a, k): (&[f32], usize),
    w: &Padded,
    y: &mut [f32],
    part: &mut [f32],
) {
    let part = &mut part[..y.len()];
    for (i, &range) in ranges.iter().enumerate() {
        let dst = if i == 0 { &mut *y } else { &mut *part };
        chain((a, k), range, w, dst);
        if i > 0 {
            y.iter_mut().zip(part.iter()).for_each(|(v, p)| *v += p);
        }
    }
}

/// Lanes of a column chunk: one 256-bit register.
const LANES: usize = 8;

/// The kernel `[terms, m]` with its columns padded with zeros to a
/// multiple of [`LANES`] (so that [`chain`] always runs whole registers).
struct Padded<'a> {
    /// `[terms, width]`.
    w: &'a [f32],
    /// Padded columns.
    width: usize,
    /// Real columns.
    m: usize,
}

/// `dst[i * m + f]`: the chain of fused multiply-adds from `+0` of
/// `a[i * k + j] * w[j][f]` for `j` over `s..e` in order, for the
/// `dst.len() / m` rows `i` (at most [`TILE`]) of `k` terms in `a`. Rows
/// and column chunks in registers: every chain is independent of the
/// others, so they run side by side.
#[inline(always)]
fn chain((a, k): (&[f32], usize), (s, e): (usize, usize), w: &Padded, dst: &mut [f32]) {
    let m = w.m;
    let rows = dst.len() / m;
    for f0 in (0..w.width).step_by(LANES) {
        let mut acc = [[0.0f32; LANES]; TILE];
        for j in s..e {
            let wv: [f32; LANES] = w.w[j * w.width + f0..][..LANES].try_into().expect("padded");
            for (i, acc) in acc.iter_mut().enumerate() {
                // Rows past the tile's repeat its last (discarded).
                let av = a[i.min(rows - 1) * k + j];
                for (c, &wv) in acc.iter_mut().zip(&wv) {
                    *c = av.mul_add(wv, *c);
                }
            }
        }
        let width = (m - f0).min(LANES);
        for (i, acc) in acc.iter().enumerate().take(rows) {
            dst[i * m + f0..][..width].copy_from_slice(&acc[..width]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The measured machine: AMD EPYC, 2 CPUs.
    const EPYC: Machine = Machine {
        l1: 32 * 1024,
        l2: 1024 * 1024,
        l3: 32 * 1024 * 1024,
        threads: 2,
    };

    fn ranges(p: &EigenConvPlan) -> Vec<Vec<(usize, usize)>> {
        p.contraction
            .blocks
            .iter()
            .map(|b| b.ranges.clone())
            .collect()
    }

    /// The helper's measured plans (`/work/scratch/eigen_conv/REPORT.md`,
    /// section 3): shards, chunks, oneDNN's halving, the lone column.
    #[test]
    fn plans_of_the_measured_machine() {
        // 5x5 on 16 channels, 4 features, 56 positions: sharded 200 + 200.
        let p = EigenConvPlan::new(56, 400, 4, image_patch_costs(1), &EPYC);
        assert!(p.contraction.sharded);
        assert_eq!(ranges(&p), [vec![(0, 200)], vec![(200, 400)]]);
        // 7x7 on 16 channels, 16 features, 194 positions: 264, 264, 256.
        let p = EigenConvPlan::new(194, 784, 16, image_patch_costs(1), &EPYC);
        assert!(!p.contraction.sharded);
        assert_eq!(ranges(&p), [vec![(0, 264), (264, 528), (528, 784)]]);
        // One thread (10 positions): 392-term blocks halved by oneDNN.
        let p = EigenConvPlan::new(10, 784, 2, image_patch_costs(1), &EPYC);
        assert_eq!(
            ranges(&p),
            [vec![(0, 196), (196, 392), (392, 588), (588, 784)]]
        );
        // 25 positions in blocks of 24: the last alone.
        let p = EigenConvPlan::new(25, 784, 16, image_patch_costs(1), &EPYC);
        assert!(p.contraction.sharded);
        assert!(p.contraction.blocks.iter().all(|b| p.alone(b) == Some(24)));
        // Two groups of 8 channels, 5x5, 4 features each, 512 positions:
        // sharded 104 + 96 (the chips' costs count).
        let p = EigenConvPlan::new(512, 200, 4, image_patch_costs(2), &EPYC);
        assert_eq!(ranges(&p), [vec![(0, 104)], vec![(104, 200)]]);
        // One column, 144 terms: sharded from 127 rows on.
        assert!(!EigenConvPlan::new(126, 144, 1, image_patch_costs(1), &EPYC).is_plain());
        assert!(
            !EigenConvPlan::new(126, 144, 1, image_patch_costs(1), &EPYC)
                .contraction
                .sharded
        );
        assert!(
            EigenConvPlan::new(127, 144, 1, image_patch_costs(1), &EPYC)
                .contraction
                .sharded
        );
        // 3x3 on 16 channels, 16 features: one chain.
        assert!(EigenConvPlan::new(1600, 144, 16, image_patch_costs(1), &EPYC).is_plain());
    }

    /// Cut sums: ranges added in order; the lone row one chain.
    #[test]
    fn sums_follow_the_ranges() {
        let (rows, k, m) = (25, 784, 16);
        let p = EigenConvPlan::new(rows, k, m, image_patch_costs(1), &EPYC);
        let a = |r: usize, j: usize| ((r * 31 + j * 17) % 23) as f32 * 0.37 - 4.0;
        let w: Vec<f32> = (0..k * m)
            .map(|i| ((i * 13) % 29) as f32 * 0.11 - 1.5)
            .collect();
        let got = p.sums(&w, |r, out| {
            for (j, v) in out.iter_mut().enumerate() {
                *v = a(r, j);
            }
        });
        let chain_of = |r: usize, f: usize, s: usize, e: usize| {
            (s..e).fold(0.0f32, |acc, j| a(r, j).mul_add(w[j * m + f], acc))
        };
        let blocks = ranges(&p);
        for r in 0..rows {
            for f in 0..m {
                let want = blocks
                    .iter()
                    .map(|rs| {
                        if r == rows - 1 {
                            chain_of(r, f, rs[0].0, rs[rs.len() - 1].1)
                        } else {
                            rs.iter()
                                .map(|&(s, e)| chain_of(r, f, s, e))
                                .reduce(|x, y| x + y)
                                .unwrap()
                        }
                    })
                    .reduce(|x, y| x + y)
                    .unwrap();
                assert_eq!(got[r * m + f].to_bits(), want.to_bits(), "{r} {f}");
            }
        }
    }
}
