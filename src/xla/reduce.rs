//! The orders in which XLA:CPU sums: along a row (its tree-reduction
//! windows), down the columns of a matrix (windows of rows, or YNNPACK's
//! tiles), and over all axes of an array (windows, then loop nests as LLVM
//! vectorizes them), as measured against jaxlib 0.10.2.

use smallvec::SmallVec;

use super::reduce_gaps::gapped_vector_factor;
use super::ynn_reduce::{ynn_sum, YNN_MIN};

/// `out[r] = sum(x[r, :])` for rows of length `n`, each in XLA's order
/// ([`xla_row_sum`]; checked against `jnp.sum(x, axis=-1)` for rows of up
/// to 100 elements); from 4,096 elements in all, YNNPACK's ([`ynn_sum`]).
pub(crate) fn row_sums(x: &[f32], n: usize, out: &mut [f32]) {
    if n == 0 {
        out.fill(0.0);
        return;
    }
    if x.len() >= YNN_MIN && n > 1 {
        return ynn_sum(x, &[x.len() / n, n], 0b10, out);
    }
    for (o, row) in out.iter_mut().zip(x.chunks_exact(n)) {
        *o = xla_row_sum(row);
    }
}

/// The sum of all elements of a row-major array of `shape`, in XLA:CPU's
/// order: [`xla_row_sum`] for a vector; for more axes, the order of
/// [`reduce_all`] (checked against eager `jnp.sum` of 2-D and 3-D arrays
/// of up to 4,095 elements); from 4,096 elements XLA hands the reduction
/// to YNNPACK ([`ynn_sum`]).
pub(crate) fn sum_all(x: &[f32], shape: &[usize]) -> f32 {
    if x.len() >= YNN_MIN && shape.len() <= 32 {
        let mut out = [0.0f32];
        ynn_sum(
            x,
            shape,
            (1u64 << shape.len()).wrapping_sub(1) as u32,
            &mut out,
        );
        return out[0];
    }
    if shape.len() <= 1 {
        xla_row_sum(x)
    } else {
        reduce_all(x, shape, Loops::Vectorized(&[]))
    }
}

/// How the loop nest of a reduce runs ([`reduce_all`]).
#[derive(Clone, Copy)]
pub(crate) enum Loops<'a> {
    /// Every loop left to right (BatchNorm's fused column sums).
    InOrder,
    /// As LLVM vectorizes it ([`nest_sum`]), in an array where reduced
    /// axis `i` is followed by kept axes of `kept_after[i]` elements in
    /// all (1, or no entry, when no kept axis follows it): that spacing
    /// decides the lanes.
    Vectorized(&'a [usize]),
}

/// The distance in memory between consecutive positions of each axis of a
/// reduced array of `shape` (see [`Loops::Vectorized`]).
fn reduced_strides(shape: &[usize], kept_after: &[usize]) -> SmallVec<[usize; 8]> {
    let mut strides: SmallVec<[usize; 8]> = SmallVec::from_elem(1, shape.len());
    let mut inner = 1;
    for a in (0..shape.len()).rev() {
        strides[a] = kept_after.get(a).copied().unwrap_or(1) * inner;
        inner *= shape[a];
    }
    strides
}

/// The sum of a row-major array of `shape` (all axes reduced) as XLA:CPU
/// computes `reduce(x, dimensions=all)`, measured against jaxlib 0.10.2 on
/// an x86-64 host with AVX2 (LLVM vectorizes for 256-bit registers).
///
/// 1. `TreeReductionRewriter`, to a fixed point: while an axis is longer
///    than 32, a reduce-window with windows of 32 on every such axis (the
///    whole length on the others), padded `kSame` ([`xla_row_sum`]); each
///    window summed by [`window_sum`], from `+0`.
/// 2. The remaining array (every axis at most 32) summed by one loop nest
///    over its axes in row-major order ([`nest_sum`]), from `+0`.
///
/// `loops` says how the loops run: left to right, or vectorized as LLVM
/// vectorizes them for the array's layout.
pub(crate) fn reduce_all(x: &[f32], shape: &[usize], loops: Loops<'_>) -> f32 {
    if x.is_empty() {
        return 0.0;
    }
    let mut data = std::borrow::Cow::Borrowed(x);
    // Inline up to 8 axes: a compiled step's loss sums without allocating.
    let mut shape: smallvec::SmallVec<[usize; 8]> = shape.iter().copied().collect();
    while shape.iter().any(|&d| d > TREE_WINDOW) {
        let (d, s) = reduce_window(&data, &shape, loops);
        data = std::borrow::Cow::Owned(d);
        shape = s.into_iter().collect();
    }
    match loops {
        Loops::Vectorized(kept_after) => {
            let checked = [false; 8];
            let many;
            let checked: &[bool] = match checked.get(..shape.len()) {
                Some(few) => few,
                None => {
                    many = vec![false; shape.len()];
                    &many
                }
            };
            let strides = reduced_strides(&shape, kept_after);
            nest_sum(0.0, &data, &shape, checked, &strides)
        }
        Loops::InOrder => fold(0.0, &data),
    }
}

/// `acc` plus the elements of `x`, left to right.
fn fold(acc: f32, x: &[f32]) -> f32 {
    x.iter().fold(acc, |a, &v| a + v)
}

/// One step of the tree reduction: windows of 32 (kSame padding) on the
/// axes longer than 32, the whole axis on the others.
fn reduce_window(x: &[f32], shape: &[usize], loops: Loops<'_>) -> (Vec<f32>, Vec<usize>) {
    struct Dim {
        windows: usize,
        size: usize,
        low: usize,
        high: usize,
    }
    let dims: Vec<Dim> = shape
        .iter()
        .map(|&d| {
            if d > TREE_WINDOW {
                let windows = d.div_ceil(TREE_WINDOW);
                let pad = windows * TREE_WINDOW - d;
                Dim {
                    windows,
                    size: TREE_WINDOW,
                    low: pad / 2,
                    high: pad - pad / 2,
                }
            } else {
                Dim {
                    windows: 1,
                    size: d,
                    low: 0,
                    high: 0,
                }
            }
        })
        .collect();
    // The loop of an axis padded at both ends keeps its bounds check, and
    // LLVM does not vectorize it. An axis padded by one element at the end
    // has its last iteration split off ([`window_sum`]).
    let checked: Vec<bool> = dims.iter().map(|d| d.low > 0).collect();
    // Innermost first.
    let split: Vec<usize> = (0..dims.len())
        .rev()
        .filter(|&a| dims[a].low == 0 && dims[a].high == 1)
        .collect();
    let out_shape: Vec<usize> = dims.iter().map(|d| d.windows).collect();
    let strides = match loops {
        Loops::Vectorized(kept_after) => Some(reduced_strides(shape, kept_after)),
        Loops::InOrder => None,
    };
    let count: usize = out_shape.iter().product();
    let mut out = Vec::with_capacity(count);
    let mut index = vec![0usize; dims.len()];
    for _ in 0..count {
        let ranges: Vec<(usize, usize)> = dims
            .iter()
            .zip(&index)
            .zip(shape)
            .map(|((d, &o), &n)| {
                let start = (o * d.size).saturating_sub(d.low);
                let end = ((o + 1) * d.size).saturating_sub(d.low).min(n);
                (start, end)
            })
            .collect();
        let (block, extents) = gather(x, shape, &ranges);
        let nest = Nest {
            checked: &checked,
            strides: strides.as_deref().unwrap_or_default(),
        };
        out.push(if strides.is_some() {
            window_sum(0.0, &block, &extents, &nest, &split, false)
        } else {
            fold(0.0, &block)
        });
        // Next output index, row-major.
        for a in (0..index.len()).rev() {
            index[a] += 1;
            if index[a] < out_shape[a] {
                break;
            }
            index[a] = 0;
        }
    }
    (out, out_shape)
}

/// The elements of `x` (row-major, `shape`) in the box `ranges`, row-major,
/// with the box's extents.
fn gather(x: &[f32], shape: &[usize], ranges: &[(usize, usize)]) -> (Vec<f32>, Vec<usize>) {
    let extents: Vec<usize> = ranges.iter().map(|&(s, e)| e - s).collect();
    let count: usize = extents.iter().product();
    let mut strides = vec![1usize; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let mut out = Vec::with_capacity(count);
    if count == 0 {
        return (out, extents);
    }
    let last = shape.len() - 1;
    let mut index: Vec<usize> = ranges.iter().map(|&(s, _)| s).collect();
    loop {
        let base: usize = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out.extend_from_slice(&x[base..base + extents[last]]);
        let mut a = last;
        loop {
            if a == 0 {
                return (out, extents);
            }
            a -= 1;
            index[a] += 1;
            if index[a] < ranges[a].1 {
                break;
            }
            index[a] = ranges[a].0;
        }
    }
}

/// `acc` plus one window (its valid elements `block`, row-major, of
/// `extents`). Each axis in `split` (padded by one element at the end, so
/// only the last window has 31 valid positions; innermost first) has its
/// last iteration split off and summed after the first 31, the split of an
/// inner axis outermost: for two such axes, `[..31, ..31]`, `[31, ..31]`,
/// `[..31, 31]`, `[31, 31]`. Split off from the innermost loop or the one
/// LLVM vectorizes ([`nest_sum`]), the last iterations are summed left to
/// right; split off from an outer loop, they are summed as the others.
fn window_sum(
    acc: f32,
    block: &[f32],
    extents: &[usize],
    nest: &Nest<'_>,
    split: &[usize],
    tail: bool,
) -> f32 {
    let Some((&axis, rest)) = split.split_first() else {
        return if tail {
            fold(acc, block)
        } else {
            nest_sum(acc, block, extents, nest.checked, nest.strides)
        };
    };
    let n = extents[axis];
    let head = n.min(TREE_WINDOW - 1);
    let (first, first_ext) = take(block, extents, axis, 0, head);
    let mut acc = window_sum(acc, &first, &first_ext, nest, rest, tail);
    if n == TREE_WINDOW {
        // The two innermost loops (axes longer than 1).
        let vector_loop = (0..extents.len())
            .rev()
            .filter(|&a| extents[a] != 1)
            .take(2)
            .any(|a| a == axis);
        let (last, last_ext) = take(block, extents, axis, head, n);
        acc = window_sum(acc, &last, &last_ext, nest, rest, tail || vector_loop);
    }
    acc
}

/// Positions `start..end` of `axis` of a row-major block.
fn take(
    block: &[f32],
    extents: &[usize],
    axis: usize,
    start: usize,
    end: usize,
) -> (Vec<f32>, Vec<usize>) {
    let inner: usize = extents[axis + 1..].iter().product();
    let n = extents[axis];
    let out = block
        .chunks_exact(n * inner)
        .flat_map(|c| &c[start * inner..end * inner])
        .copied()
        .collect();
    let mut ext = extents.to_vec();
    ext[axis] = end - start;
    (out, ext)
}

/// What a window's loop nest needs beyond its extents: which axes keep a
/// bounds check, and how far apart in memory consecutive positions of
/// each axis are.
struct Nest<'a> {
    checked: &'a [bool],
    strides: &'a [usize],
}

/// `acc` plus a block of `extents` (row-major) summed by XLA's loop nest as
/// LLVM compiles it. Axes of length 1 have no loop. The innermost loop is
/// unrolled; when the next loop (over `b` rows) has no bounds check
/// (`checked`), LLVM may vectorize it: lane `l` adds rows `l, l + vf, ...`
/// element by element, lane 0 starting from the running sum; the lanes are
/// added pairwise (`l + vf/2`, ...), then the rows left over are added in
/// order. With rows of `c` adjacent elements (`strides`: the innermost
/// axis 1 apart, the next `c`), [`vector_factor`] gives the lanes; when
/// the loads leave gaps, [`gapped_vector_factor`] (which may also leave a
/// whole group of lanes to the rows summed in order). Outer loops run in
/// order around this.
fn nest_sum(
    acc: f32,
    block: &[f32],
    extents: &[usize],
    checked: &[bool],
    strides: &[usize],
) -> f32 {
    // The two innermost loops longer than one (compiled steps sum their
    // losses here: found in place, nothing collected).
    let mut long = (0..extents.len()).rev().filter(|&a| extents[a] != 1);
    let (Some(inner), Some(outer)) = (long.next(), long.next()) else {
        return fold(acc, block);
    };
    let (b, b_checked, f) = (extents[outer], checked[outer], strides[outer]);
    let (c, k) = (extents[inner], strides[inner]);
    if b_checked {
        return fold(acc, block);
    }
    let (vf, epilogue) = if k == 1 && f == c {
        (vector_factor(b, c), false)
    } else {
        gapped_vector_factor(b, c, f)
    };
    if vf == 0 {
        return fold(acc, block);
    }
    let mut main = b - b % vf;
    if epilogue && main == b {
        main -= vf;
    }
    vector_blocks(acc, block, (b, c, vf), main, |lane, x| lane + x)
}

/// `acc` plus `v`'s blocks of `b` rows of `c` elements, each block by the
/// loop over its rows as LLVM vectorizes it with `vf` (2, 4 or 8) lanes:
/// lane `l` takes rows `l, l + vf, ...` element by element (lane 0 starting
/// from the running sum), the lanes are added pairwise, then the rows left
/// over in order. `add(lane, x)` adds an element: a sum's `lane + x`, or a
/// fused body's contracted product (BatchNorm's sums of squares).
#[inline(always)]
pub(crate) fn vector_nest(
    acc: f32,
    v: &[f32],
    (b, c, vf): (usize, usize, usize),
    add: impl Fn(f32, f32) -> f32 + Copy,
) -> f32 {
    vector_blocks(acc, v, (b, c, vf), b - b % vf, add)
}

/// [`vector_nest`] with the lanes taking only the first `main` rows of
/// each block (a multiple of `vf`), the others added in order.
#[inline(always)]
fn vector_blocks(
    acc: f32,
    v: &[f32],
    (b, c, vf): (usize, usize, usize),
    main: usize,
    add: impl Fn(f32, f32) -> f32 + Copy,
) -> f32 {
    // The lane count a constant: the lanes stay in registers.
    let blocks = v.chunks_exact(b * c);
    match vf {
        2 => blocks.fold(acc, |acc, rows| vector_rows::<2>(acc, rows, (main, c), add)),
        4 => blocks.fold(acc, |acc, rows| vector_rows::<4>(acc, rows, (main, c), add)),
        _ => blocks.fold(acc, |acc, rows| vector_rows::<8>(acc, rows, (main, c), add)),
    }
}

/// `acc` plus rows of `c` elements, the first `main` (a multiple of `VF`)
/// split among `VF` lanes, the rest added in order (see [`vector_nest`]).
#[inline(always)]
fn vector_rows<const VF: usize>(
    acc: f32,
    rows: &[f32],
    (main, c): (usize, usize),
    add: impl Fn(f32, f32) -> f32,
) -> f32 {
    let mut lanes = [-0.0f32; VF];
    lanes[0] = acc;
    for group in rows[..main * c].chunks_exact(VF * c) {
        for j in 0..c {
            for (l, lane) in lanes.iter_mut().enumerate() {
                *lane = add(*lane, group[l * c + j]);
            }
        }
    }
    let mut width = VF;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            lanes[l] += lanes[l + width];
        }
    }
    rows[main * c..].iter().fold(lanes[0], |a, &x| add(a, x))
}

/// The lanes with which LLVM (jaxlib 0.10.2, AVX2 cost model) vectorizes a
/// loop of `b` iterations whose body adds `c` consecutive elements (0: not
/// vectorized), as read from XLA's optimized IR for `b` and `c` of 2 to 32.
/// A loop whose body has more than 8 elements is not vectorized, nor one
/// of fewer than 16 iterations that the lanes do not divide.
pub(crate) fn vector_factor(b: usize, c: usize) -> usize {
    #[rustfmt::skip]
    const TABLE: [[u8; 31]; 7] = [
        // b = 2, 3, ..., 32
        [2, 0, 4, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 4, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8], // c = 2
        [2, 0, 4, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 4, 4, 4, 4, 8, 8, 8, 8, 4, 4, 4, 4, 8], // c = 3
        [2, 0, 4, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 4, 4, 4, 4, 8, 8, 8, 8, 4, 4, 4, 4, 8], // c = 4
        [2, 0, 4, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 4, 4, 4, 4, 8, 8, 8, 8, 4, 4, 4, 4, 8], // c = 5
        [2, 0, 4, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 4, 4, 4, 4, 8, 8, 8, 8, 4, 4, 4, 4, 8], // c = 6
        [2, 0, 4, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4], // c = 7
        [2, 0, 4, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4], // c = 8
    ];
    if (2..=32).contains(&b) && (2..=8).contains(&c) {
        usize::from(TABLE[c - 2][b - 2])
    } else {
        0
    }
}

/// The sum over all axes of the product `x_i * y_i` of two factors (element
/// `i` of the row-major product of `shape` being `at(i)`), as XLA:CPU
/// computes it when the product is fused into the reduction (a jitted
/// `jnp.sum(x * c)`, `jnp.mean((h - y) ** 2)`); `None` where XLA does not
/// fuse it, and the product is rounded on its own before the plain sum
/// ([`sum_all`]).
///
/// With fewer than [`YNN_MIN`] elements and every axis at most
/// [`TREE_WINDOW`] long, the multiply joins the reduce's loop fusion: the
/// loop nest of [`nest_sum`], whose add LLVM contracts with the product
/// into one fused multiply-add (`lane = fma(x, y, lane)`), with the lanes
/// of [`fused_vector_factor`]. Measured against jaxlib 0.10.2 for a factor
/// broadcast from a scalar or a row (every shape of two axes up to
/// `[32, 9]`, three and four axes); for two factors of the product's shape
/// (and squares) LLVM vectorizes rows of 5 to 8 elements (and some
/// others) with another cost and contracts only some of the products,
/// which this does not follow. With a longer axis XLA's tree reduction
/// splits the reduce from the multiply; from [`YNN_MIN`] elements the
/// fusion runs on YNNPACK, which gave the plain sum of the rounded
/// products for the shapes measured (`[16, 16, 16]`, `[32, 32, 8]`,
/// `[8, 20, 64]`): both `None`.
///
/// `product_loop` says what else LLVM sees in the loop: two factors of
/// the product's shape, or the factors' own operations (see
/// [`ProductLoop`]).
#[inline(always)]
pub(crate) fn product_sum(
    shape: &[usize],
    product_loop: ProductLoop,
    at: impl Fn(usize) -> (f32, f32),
) -> Option<f32> {
    let n: usize = shape.iter().product();
    if n == 0 || n >= YNN_MIN || shape.iter().any(|&d| d > TREE_WINDOW) {
        return None;
    }
    // Inline: compiled steps sum their losses without allocating.
    let loops: SmallVec<[usize; 8]> = shape.iter().copied().filter(|&d| d != 1).collect();
    let fold = |acc: f32, range: std::ops::Range<usize>| {
        range.fold(acc, |acc, i| {
            let (x, y) = at(i);
            x.mul_add(y, acc)
        })
    };
    if product_loop.fused_body {
        if let Some(&c) = loops.last().filter(|&&c| c >= FUSED_BODY_ROWS) {
            // Each row vectorized along its elements, then reduced; 4
            // lanes where they leave 4 fewer products to the scalar loop.
            let acc = match c % 8 {
                0..4 => row_lanes::<8>(n, c, &at, fold),
                _ => row_lanes::<4>(n, c, &at, fold),
            };
            return Some(acc);
        }
    }
    let [.., b, c] = loops[..] else {
        return Some(fold(0.0, 0..n));
    };
    let lanes = if product_loop.two_loads && b == 2 {
        0
    } else {
        fused_vector_factor(b, c)
    };
    let acc = match lanes {
        0 => fold(0.0, 0..n),
        2 => product_blocks::<2>(n, (b, c), &at, fold),
        4 => product_blocks::<4>(n, (b, c), &at, fold),
        _ => product_blocks::<8>(n, (b, c), &at, fold),
    };
    Some(acc)
}

/// [`product_sum`]'s vectorized nest: blocks of `b` rows of `c` products
/// in order, each as [`vector_rows`] sums its rows with `VF` lanes, adding
/// a product by a fused multiply-add; the rows left over by `fold`.
#[inline(always)]
pub(crate) fn product_blocks<const VF: usize>(
    n: usize,
    (b, c): (usize, usize),
    at: &impl Fn(usize) -> (f32, f32),
    fold: impl Fn(f32, std::ops::Range<usize>) -> f32,
) -> f32 {
    let main = b - b % VF;
    (0..n).step_by(b * c).fold(0.0, |acc, start| {
        let mut lanes = [-0.0f32; VF];
        lanes[0] = acc;
        for group in (start..start + main * c).step_by(VF * c) {
            for j in 0..c {
                for (l, lane) in lanes.iter_mut().enumerate() {
                    let (x, y) = at(group + l * c + j);
                    *lane = x.mul_add(y, *lane);
                }
            }
        }
        let mut width = VF;
        while width > 1 {
            width /= 2;
            for l in 0..width {
                lanes[l] += lanes[l + width];
            }
        }
        fold(lanes[0], start + main * c..start + b * c)
    })
}

/// What LLVM sees in the loop of a sum fused with a product
/// ([`product_sum`]) besides its shape, where that changes how it
/// vectorizes it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ProductLoop {
    /// The factors are two arrays of the product's shape (two loads per
    /// product, not a broadcast factor or a square): a loop over two rows
    /// is not vectorized (measured for rows of 2 to 8 elements; other
    /// shapes of such products follow the broadcast factor's lanes, which
    /// is not always right: `tests/fused_sums.rs`).
    pub(crate) two_loads: bool,
    /// The factors' own elementwise operations are in the loop (the step
    /// of a one-step scan, whose loop XLA drops, fused into the sum):
    /// LLVM vectorizes rows of [`FUSED_BODY_ROWS`] to 32 elements along
    /// the row, each row's lanes reduced before the next row: 8 lanes, or
    /// 4 where the row's length is 4 to 7 more than a multiple of 8
    /// (measured for `nn.RNN` over `LSTMCell` and `GRUCell`, rows of 16
    /// to 32 elements, 1 or 2 rows, and 3, 4 and 8 rows of 16, 17, 24, 31
    /// and 32). Shorter rows are as `two_loads` says, but for rows of 7
    /// and 8 elements, which LLVM vectorizes by the cell's own cost (not
    /// modelled).
    pub(crate) fused_body: bool,
}

/// The shortest row that LLVM vectorizes along its elements when the
/// factors' operations are fused into the sum ([`ProductLoop::fused_body`]).
const FUSED_BODY_ROWS: usize = 16;

/// [`product_sum`]'s loop when LLVM vectorizes each row of `c` products
/// along its elements: `VF` lanes, the first starting from the sum so
/// far, adding consecutive products by fused multiply-adds; then the
/// lanes halved into one, and the row's leftover products by `fold`.
#[inline(always)]
fn row_lanes<const VF: usize>(
    n: usize,
    c: usize,
    at: &impl Fn(usize) -> (f32, f32),
    fold: impl Fn(f32, std::ops::Range<usize>) -> f32,
) -> f32 {
    let main = c - c % VF;
    (0..n).step_by(c).fold(0.0, |acc, start| {
        let mut lanes = [-0.0f32; VF];
        lanes[0] = acc;
        for group in (start..start + main).step_by(VF) {
            for (l, lane) in lanes.iter_mut().enumerate() {
                let (x, y) = at(group + l);
                *lane = x.mul_add(y, *lane);
            }
        }
        let mut width = VF;
        while width > 1 {
            width /= 2;
            for l in 0..width {
                lanes[l] += lanes[l + width];
            }
        }
        fold(lanes[0], start + main..start + c)
    })
}

/// The lanes with which LLVM vectorizes the loop over `b` rows of `c`
/// products fused into a sum ([`product_sum`]): [`vector_factor`]'s, but 8
/// for 8 rows of 7 or 8 (read from the object code of `[4, 8, 8]`).
fn fused_vector_factor(b: usize, c: usize) -> usize {
    if b == 8 && (c == 7 || c == 8) {
        8
    } else {
        vector_factor(b, c)
    }
}

/// The reduction window of XLA's CPU `TreeReductionRewriter`: a reduced
/// dimension longer than this is first reduced in windows of this length.
pub(crate) const TREE_WINDOW: usize = 32;

/// `sum(row)` in the order of a reduce that XLA:CPU emits as a loop fusion
/// (jitted `jax.nn.softmax` / `log_softmax`): left to right when the row has
/// at most 32 elements. A longer row is split as `TreeReductionRewriter`
/// does: padded (with the init value 0) to a multiple of 32, the padding
/// split evenly with the odd element at the end (`Padding::kSame`), and each
/// window summed left to right; the window sums are then reduced the same
/// way (the pass runs to a fixed point, so 1500 elements give 47 window
/// sums, then 2, then one).
pub(crate) fn xla_row_sum(row: &[f32]) -> f32 {
    let n = row.len();
    if n <= TREE_WINDOW {
        return row.iter().fold(0.0, |acc, &v| acc + v);
    }
    let windows = n.div_ceil(TREE_WINDOW);
    let low = (windows * TREE_WINDOW - n) / 2;
    // Window `w` covers padded positions [32w, 32w + 32).
    let window = |w: usize| {
        let start = (w * TREE_WINDOW).saturating_sub(low);
        let end = ((w + 1) * TREE_WINDOW).saturating_sub(low).min(n);
        &row[start..end]
    };
    let sum = |values: &[f32]| values.iter().fold(0.0f32, |acc, &v| acc + v);
    let mut parts: SmallVec<[f32; 64]> = SmallVec::from_elem(0.0, windows);
    // The first and last windows may be short; those between are whole and
    // summed eight at a time, side by side (each still left to right: a
    // window alone waited on every add's latency).
    parts[0] = sum(window(0));
    parts[windows - 1] = sum(window(windows - 1));
    let mut groups = parts[1..windows - 1].chunks_exact_mut(8);
    let mut w0 = 1;
    for group in &mut groups {
        let slices: [&[f32; TREE_WINDOW]; 8] =
            std::array::from_fn(|l| window(w0 + l).try_into().expect("a whole window"));
        let mut acc = [0.0f32; 8];
        for i in 0..TREE_WINDOW {
            for (a, s) in acc.iter_mut().zip(&slices) {
                *a += s[i];
            }
        }
        group.copy_from_slice(&acc);
        w0 += 8;
    }
    for (l, p) in groups.into_remainder().iter_mut().enumerate() {
        *p = sum(window(w0 + l));
    }
    xla_row_sum(&parts)
}

/// Sums the rows of `g` (rows of `dst.len()` values) into `dst`, each
/// column in XLA's order (windows of 32 rows, [`xla_row_sum`]; from 4,096
/// elements YNNPACK's, [`ynn_sum`]), as JAX reduces the cotangent of a
/// broadcast bias.
///
/// XLA:CPU sums narrow columns (10 wide, measured) in this order, but
/// reduces wide ones (128) with its vectorized column emitter, whose order
/// is not emulated (see `tests/train_digits.rs`).
///
pub(crate) fn sum_columns_into(g: &[f32], dst: &mut [f32]) {
    let n = dst.len();
    let rows = g.len().checked_div(n).unwrap_or(0);
    if rows == 0 {
        // No rows (a batch of none): the sums' initial +0.
        dst.fill(0.0);
        return;
    }
    if n <= 8 && rows <= 32 {
        // Narrow and short (a small step's bias gradients, or a copy): each
        // column's chain in row order, the order below, without a call
        // to `memcpy` or a loop per row.
        for (j, d) in dst.iter_mut().enumerate() {
            *d = g[j..].iter().step_by(n).skip(1).fold(g[j], |s, &x| s + x);
        }
        return;
    }
    if g.len() == n {
        dst.copy_from_slice(g);
        return;
    }
    if g.len() >= YNN_MIN && rows > 1 {
        return ynn_sum(g, &[rows, n], 0b01, dst);
    }
    if g.len() <= 32 * n {
        // Up to 32 rows XLA adds them in order: row by row is the same and
        // faster.
        dst.copy_from_slice(&g[..n]);
        for row in g[n..].chunks_exact(n) {
            dst.iter_mut().zip(row).for_each(|(d, &x)| *d += x);
        }
        return;
    }
    // XLA's windows of 32 rows (kSame padding), each summed in order from
    // zero, row by row over contiguous memory; then each column's window
    // sums reduced the same way.
    let rows = g.len() / n;
    let windows = rows.div_ceil(32);
    let low = (windows * 32 - rows) / 2;
    let mut parts = vec![0.0f32; windows * n];
    for (w, part) in parts.chunks_exact_mut(n).enumerate() {
        let start = (w * 32).saturating_sub(low);
        let end = ((w + 1) * 32).saturating_sub(low).min(rows);
        for row in g[start * n..end * n].chunks_exact(n) {
            part.iter_mut().zip(row).for_each(|(p, &x)| *p += x);
        }
    }
    let mut column = Vec::with_capacity(windows);
    for (j, d) in dst.iter_mut().enumerate() {
        column.clear();
        column.extend(parts[j..].iter().step_by(n).copied());
        *d = xla_row_sum(&column);
    }
}

#[cfg(test)]
mod tests {
    use super::{sum_columns_into, xla_row_sum, TREE_WINDOW};

    /// Column sums of narrow, short cotangents add the rows in order (the
    /// column-by-column fast path), and no rows sum to `+0`.
    #[test]
    fn narrow_column_sums_add_rows_in_order() {
        let g: Vec<f32> = (0..96)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.37e-3 + 1.0e3 * (i % 3) as f32)
            .collect();
        for n in 1..=8 {
            for rows in [1, 2, 7, 12] {
                let g = &g[..rows * n];
                let mut want = g[..n].to_vec();
                for row in g[n..].chunks_exact(n) {
                    want.iter_mut().zip(row).for_each(|(w, &x)| *w += x);
                }
                let mut got = vec![f32::NAN; n];
                sum_columns_into(g, &mut got);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{rows} rows of {n}");
            }
        }
        let mut none = [f32::NAN; 3];
        sum_columns_into(&[], &mut none);
        assert_eq!(none.map(f32::to_bits), [0; 3]);
    }

    /// [`xla_row_sum`]'s order written out one window at a time.
    fn row_sum_reference(row: &[f32]) -> f32 {
        let n = row.len();
        if n <= TREE_WINDOW {
            return row.iter().fold(0.0, |acc, &v| acc + v);
        }
        let windows = n.div_ceil(TREE_WINDOW);
        let low = (windows * TREE_WINDOW - n) / 2;
        let parts: Vec<f32> = (0..windows)
            .map(|w| {
                let start = (w * TREE_WINDOW).saturating_sub(low);
                let end = ((w + 1) * TREE_WINDOW).saturating_sub(low).min(n);
                row[start..end].iter().fold(0.0f32, |acc, &v| acc + v)
            })
            .collect();
        row_sum_reference(&parts)
    }

    #[test]
    fn windows_side_by_side_sum_as_one_at_a_time() {
        let mut s = 9u64;
        // Magnitudes from 2^-20 to 2^11: sums that round differently in
        // another order.
        let row: Vec<f32> = (0..5000)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let e = ((s >> 59) as i32) - 20;
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2f32.powi(e)
            })
            .collect();
        for n in [
            33, 63, 64, 65, 100, 289, 290, 320, 321, 1000, 1500, 2049, 5000,
        ] {
            let got = xla_row_sum(&row[..n]);
            assert_eq!(
                got.to_bits(),
                row_sum_reference(&row[..n]).to_bits(),
                "n = {n}"
            );
        }
    }
}
