//! Sums as YNNPACK computes them, to which XLA:CPU (jaxlib 0.10.2) hands
//! every `f32` add-reduction of at least [`YNN_MIN`] input elements
//! (counted over the whole input), measured against eager `jnp.sum` by a
//! probe of 56 shapes (full sums of 4,096 to 300,000 elements, sums over
//! the last axis, over leading axes as BatchNorm's statistics, and over
//! middle ones; 0 of 4,185 outputs differ), from XNNPACK's
//! `ynnpack/kernels/reduce/sum.h` as compiled into jaxlib (AVX-512: 16
//! lanes; the order is the same with narrower vectors, which emulate 16).
//!
//! 1. **Tiles.** Walking the axes from the last, each gets a tile of
//!    `max(1, min(32768 / so_far, extent))` (`so_far` the product of the
//!    tiles after it). When a reduced axis is longer than its tile, each
//!    tile is reduced on its own into a tensor of partial sums, which is
//!    then reduced the same way. (Only with a thread pool: XLA running on
//!    one CPU reduces without tiles.)
//! 2. **Kernels.** Reduced axes contiguous in memory merge into rows
//!    summed by [`row_sum`] (16 lanes, three levels, the last a Kahan sum);
//!    when no reduced axis is innermost and the kept ones are, the rows of
//!    kept values are summed by [`column_sums`] (groups of 4 rows, then 16,
//!    then a Kahan sum every 256). Other axes loop outside, each call's sum
//!    added to the output.

use smallvec::SmallVec;

/// From this many input elements XLA:CPU hands an `f32` sum to YNNPACK.
pub(crate) const YNN_MIN: usize = 4096;

/// Elements per tile of a partial reduction (`32768 * 4` bytes of `f32`).
const TILE_AREA: usize = 32768;

/// Lanes of YNNPACK's row kernel.
const LANES: usize = 16;

type Dims = SmallVec<[usize; 8]>;

/// The sum of row-major `x` of `shape` over the axes whose bits are set in
/// `axes`, into `out` (the kept axes, row-major), in YNNPACK's order.
pub(crate) fn ynn_sum(x: &[f32], shape: &[usize], axes: u32, out: &mut [f32]) {
    ynn_sum_strided(x, shape, &row_major_strides(shape), axes, out);
}

/// [`ynn_sum`] of a strided view of `x`: element `i` of `shape` at
/// `sum(i[a] * strides[a])`. YNNPACK reduces such views where it reads
/// its input through a stencil (`reduce_window`, `super::reduce_window`):
/// the view's strides, not those of a dense copy, decide which axes merge
/// into rows and where tiles start.
pub(crate) fn ynn_sum_strided(
    x: &[f32],
    shape: &[usize],
    strides: &[usize],
    axes: u32,
    out: &mut [f32],
) {
    let r = shape.len();
    let reduced = |ax: usize| axes & (1 << ax) != 0;
    let dense: Dims = strides.iter().copied().collect();
    // The output as an array of the input's rank, reduced axes of 1.
    let c_shape: Dims = (0..r)
        .map(|a| if reduced(a) { 1 } else { shape[a] })
        .collect();
    let tiles = tile_sizes(shape);
    // Rows (reduced axes innermost) of a stored array: tiled only for few
    // rows ([`rows_tiled`]); other reductions whenever there is a pool.
    let rows_reduced = (0..r).skip_while(|&a| !reduced(a)).all(reduced);
    let split = (0..r).any(|a| reduced(a) && tiles[a] < shape[a])
        && if rows_reduced {
            rows_tiled(out.len(), false)
        } else {
            pooled()
        };
    out.fill(0.0);
    if !split {
        let view = View {
            offset: 0,
            shape: shape.iter().copied().collect(),
            strides: dense,
        };
        reduce_view(x, &view, axes, &c_shape, out);
        return;
    }
    // The partial sums: reduced axes of one entry per tile.
    let p_shape: Dims = (0..r)
        .map(|a| {
            if reduced(a) {
                shape[a].div_ceil(tiles[a])
            } else {
                shape[a]
            }
        })
        .collect();
    let p_strides = row_major_strides(&p_shape);
    let mut parts = vec![0.0f32; p_shape.iter().product()];
    let mut part = vec![0.0f32; out.len()];
    let count: Dims = (0..r)
        .map(|a| if reduced(a) { p_shape[a] } else { 1 })
        .collect();
    let kept: Dims = (0..r).filter(|&a| !reduced(a)).collect();
    let mut t: Dims = smallvec::smallvec![0; r];
    for _ in 0..count.iter().product::<usize>() {
        let mut view = View {
            offset: 0,
            shape: shape.iter().copied().collect(),
            strides: dense.clone(),
        };
        for a in (0..r).filter(|&a| reduced(a)) {
            let start = t[a] * tiles[a];
            view.offset += start * dense[a];
            view.shape[a] = tiles[a].min(shape[a] - start);
        }
        part.fill(0.0);
        reduce_view(x, &view, axes, &c_shape, &mut part);
        // Scatter the tile's sums to their place among the partials.
        let base: usize = (0..r).map(|a| t[a] * p_strides[a]).sum();
        let mut k: Dims = smallvec::smallvec![0; kept.len()];
        for &v in &part {
            let at: usize = kept.iter().zip(&k).map(|(&a, &i)| i * p_strides[a]).sum();
            parts[base + at] = v;
            for d in (0..kept.len()).rev() {
                k[d] += 1;
                if k[d] < shape[kept[d]] {
                    break;
                }
                k[d] = 0;
            }
        }
        for a in (0..r).rev() {
            t[a] += 1;
            if t[a] < count[a] {
                break;
            }
            t[a] = 0;
        }
    }
    let view = View {
        offset: 0,
        shape: p_shape.clone(),
        strides: p_strides,
    };
    reduce_view(&parts, &view, axes, &c_shape, out);
}

/// The sums of the rows of `n` elements of `x` into `out` (one per row),
/// in YNNPACK's order, for a reduction of at least [`YNN_MIN`] elements in
/// all. `fused`: whether XLA fused an elementwise producer into the
/// reduction (`sum(exp(x - max))`, `sum((g * a) * e)`) rather than reading
/// a stored array (as [`ynn_sum`] does). A row longer than a tile is cut
/// into tiles whose sums are summed again ([`rows_tiled`]).
pub(crate) fn row_sums(x: &[f32], n: usize, fused: bool, out: &mut [f32]) {
    if n == 0 {
        out.fill(0.0);
        return;
    }
    let tiled = n > TILE_AREA && rows_tiled(x.len() / n, fused);
    for (o, row) in out.iter_mut().zip(x.chunks_exact(n)) {
        *o = if tiled {
            let parts: SmallVec<[f32; 32]> = row.chunks(TILE_AREA).map(row_sum).collect();
            row_sum(&parts)
        } else {
            row_sum(row)
        };
    }
}

/// Whether YNNPACK cuts `rows` rows longer than a tile into tiles:
/// always with a thread pool when XLA fused an elementwise producer into
/// the reduction; for a stored array only with fewer rows than twice the
/// pool's threads (measured on 2 CPUs, eager `jnp.sum` and softmax alike:
/// tiled with up to 3 rows, whole rows from 4; YNNPACK's scheduler then
/// has tasks enough across rows).
fn rows_tiled(rows: usize, fused: bool) -> bool {
    pooled() && (fused || rows < 2 * super::eigen_dot::pool_size())
}

/// Whether XLA runs YNNPACK with a thread pool, which is what makes it
/// reduce in tiles (measured: pinned to one CPU, JAX's sums are those of
/// the untiled reduction). XLA's pool has as many threads as the machine
/// has CPUs.
fn pooled() -> bool {
    static POOLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *POOLED.get_or_init(|| super::eigen_dot::pool_size() > 1)
}

/// The tile of each axis ([`ynn_sum`], step 1).
fn tile_sizes(shape: &[usize]) -> Dims {
    let mut tiles: Dims = smallvec::smallvec![1; shape.len()];
    let mut so_far = 1usize;
    for a in (0..shape.len()).rev() {
        let t = (TILE_AREA / so_far).min(shape[a]).max(1);
        tiles[a] = t;
        so_far = so_far.saturating_mul(t);
    }
    tiles
}

/// Row-major strides (elements) of `shape`.
fn row_major_strides(shape: &[usize]) -> Dims {
    let mut s: Dims = smallvec::smallvec![1; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * shape[a + 1];
    }
    s
}

/// A strided view of a slice.
struct View {
    offset: usize,
    shape: Dims,
    strides: Dims,
}

/// Adds the sum of `view` over `axes` to `c` (dense, of `c_shape`: the
/// view's rank, reduced axes of 1), as YNNPACK's reduce subgraph calls its
/// kernels: reduced axes contiguous in memory merge into `k1` (rows for
/// [`row_sum`]), other reduced ones into `k2`, kept ones contiguous in `c`
/// into `n`; the rest loop outside, in row-major order.
fn reduce_view(x: &[f32], view: &View, axes: u32, c_shape: &[usize], c: &mut [f32]) {
    /// Axes merged into one: `len` elements `stride` apart.
    struct Group {
        len: usize,
        stride: usize,
    }
    impl Group {
        /// Takes an axis of `e` elements `st` apart, innermost first: the
        /// group's continuation in memory, or its first axis.
        fn take(&mut self, e: usize, st: usize) -> bool {
            if self.stride * self.len == st {
                self.len *= e;
            } else if self.len == 1 {
                (self.len, self.stride) = (e, st);
            } else {
                return false;
            }
            true
        }
    }
    let r = view.shape.len();
    let c_strides = row_major_strides(c_shape);
    let mut k1 = 1usize;
    let mut k2 = Group { len: 1, stride: 0 };
    let mut n = Group { len: 1, stride: 0 };
    let mut left: Dims = SmallVec::new();
    for ax in (0..r).rev() {
        let (e, st) = (view.shape[ax], view.strides[ax]);
        if e == 1 {
            continue;
        }
        let merged = if axes & (1 << ax) != 0 {
            // Contiguous from the innermost element: the rows; else `k2`.
            if k1 == st {
                k1 *= e;
                true
            } else {
                k2.take(e, st)
            }
        } else {
            // Kept axes merge only where they are contiguous in `c` too.
            c_strides[ax] == n.len && n.take(e, st)
        };
        if !merged {
            left.push(ax);
        }
    }
    let (n, sn, k2, sk2) = (n.len, n.stride, k2.len, k2.stride);
    if view.shape.contains(&0) {
        return;
    }
    left.sort_unstable();
    let columns = k1 == 1 && (n == 1 || sn == 1);
    let mut idx: Dims = smallvec::smallvec![0; left.len()];
    let loops: usize = left.iter().map(|&a| view.shape[a]).product();
    let mut acc = vec![0.0f32; n];
    for _ in 0..loops {
        let mut base = view.offset;
        let mut c_base = 0;
        for (&a, &i) in left.iter().zip(&idx) {
            base += i * view.strides[a];
            if c_shape[a] > 1 {
                c_base += i * c_strides[a];
            }
        }
        let out = &mut c[c_base..c_base + n];
        if columns {
            acc.copy_from_slice(out);
            // The kept values are contiguous (`sn == 1`) or one (`n == 1`).
            column_sums(|i2| &x[base + i2 * sk2..][..n], k2, &mut acc);
            out.copy_from_slice(&acc);
        } else {
            for i2 in 0..k2 {
                for (j, o) in out.iter_mut().enumerate() {
                    let start = base + i2 * sk2 + j * sn;
                    *o += row_sum(&x[start..start + k1]);
                }
            }
        }
        for d in (0..left.len()).rev() {
            idx[d] += 1;
            if idx[d] < view.shape[left[d]] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// One Kahan step: `a` added to `acc` with the running error `err` (reset
/// when not finite).
#[inline(always)]
fn kahan(a: f32, acc: &mut f32, err: &mut f32) {
    let y = a - *err;
    let t = *acc + y;
    let e = (t - *acc) - y;
    *err = if e.is_finite() { e } else { 0.0 };
    *acc = t;
}

/// The sum of a contiguous row as YNNPACK's `sum_float_k1` kernel computes
/// it: blocks of 64 elements (the last zero-padded), each 16 lanes of 4
/// elements summed from `+0`; the blocks' lanes added into a first
/// accumulator, flushed into a second every 1,024 elements and into a
/// third by a Kahan step every 16,384 (and at the end); then the 16 lanes
/// halved (`j + 8`, `j + 4`, `j + 2`, `j + 1`).
pub(crate) fn row_sum(x: &[f32]) -> f32 {
    const BLOCK: usize = 4 * LANES;
    let zero = [0.0f32; LANES];
    let (mut acc0, mut acc1, mut acc2, mut err) = (zero, zero, zero, zero);
    let partial = |blk: &[f32]| -> [f32; LANES] {
        let mut loc = zero;
        for g in 0..4 {
            for (j, l) in loc.iter_mut().enumerate() {
                *l += blk.get(g * LANES + j).copied().unwrap_or(0.0);
            }
        }
        loc
    };
    let mut flush = |clock: usize, acc0: &mut [f32; LANES]| {
        if clock & 15 == 0 {
            for j in 0..LANES {
                acc1[j] += acc0[j];
            }
            *acc0 = zero;
            if clock & 255 == 0 {
                for j in 0..LANES {
                    kahan(acc1[j], &mut acc2[j], &mut err[j]);
                }
                acc1 = zero;
            }
        }
    };
    let add = |acc0: &mut [f32; LANES], p: [f32; LANES]| {
        for j in 0..LANES {
            acc0[j] += p[j];
        }
    };
    let (mut p, mut k, mut clock) = (0usize, x.len(), 0usize);
    while k >= BLOCK * 4 {
        for _ in 0..4 {
            add(&mut acc0, partial(&x[p..p + BLOCK]));
            p += BLOCK;
        }
        k -= BLOCK * 4;
        clock += LANES * 4;
        flush(clock, &mut acc0);
    }
    while k >= BLOCK {
        add(&mut acc0, partial(&x[p..p + BLOCK]));
        p += BLOCK;
        k -= BLOCK;
        clock += LANES;
        flush(clock, &mut acc0);
    }
    if k > 0 {
        add(&mut acc0, partial(&x[p..]));
    }
    flush(0, &mut acc0);
    // `0 + acc2`, then halving: lane `j` plus lane `j + h`.
    let mut v = acc2.map(|a| 0.0 + a);
    let mut h = LANES;
    while h > 1 {
        h /= 2;
        for j in 0..h {
            v[j] += v[j + h];
        }
    }
    v[0]
}

/// `acc +=` the sum of the `k` rows `row(i)` (each `acc.len()` values), as
/// YNNPACK's `sum_float_kn` kernel computes it: up to 4 rows,
/// `((r0 + r1) + r2) + r3` from `+0`; more, groups of 4 rows (from `+0`)
/// added into a first accumulator, flushed into a second every 16 rows and
/// into a third by a Kahan step every 256 (and at the end).
pub(crate) fn column_sums<'a>(row: impl Fn(usize) -> &'a [f32], k: usize, acc: &mut [f32]) {
    let n = acc.len();
    let mut group = vec![0.0f32; n];
    // The group of rows `from..from + rows` (at most 4) from `+0`; the
    // kernel's added zeros for missing rows change nothing after that.
    let local = |from: usize, rows: usize, group: &mut [f32]| {
        group.fill(0.0);
        for r in from..from + rows {
            group.iter_mut().zip(row(r)).for_each(|(g, &v)| *g += v);
        }
    };
    if k <= 4 {
        local(0, k, &mut group);
        acc.iter_mut().zip(&group).for_each(|(a, &g)| *a += g);
        return;
    }
    let (mut acc0, mut acc1, mut acc2, mut err) = (
        vec![0.0f32; n],
        vec![0.0f32; n],
        vec![0.0f32; n],
        vec![0.0f32; n],
    );
    let mut flush = |clock: usize, acc0: &mut [f32]| {
        if clock & 15 == 0 {
            for (a1, a0) in acc1.iter_mut().zip(acc0.iter_mut()) {
                *a1 += *a0;
                *a0 = 0.0;
            }
            if clock & 255 == 0 {
                for j in 0..n {
                    kahan(acc1[j], &mut acc2[j], &mut err[j]);
                    acc1[j] = 0.0;
                }
            }
        }
    };
    let (mut p, mut rest, mut clock) = (0usize, k, 0usize);
    while rest >= 4 {
        local(p, 4, &mut group);
        acc0.iter_mut().zip(&group).for_each(|(a, &g)| *a += g);
        p += 4;
        rest -= 4;
        clock += 4;
        flush(clock, &mut acc0);
    }
    if rest > 0 {
        local(p, rest, &mut group);
        acc0.iter_mut().zip(&group).for_each(|(a, &g)| *a += g);
    }
    flush(0, &mut acc0);
    for (a, &s) in acc.iter_mut().zip(&acc2) {
        *a += s;
    }
}
