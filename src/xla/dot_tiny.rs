//! Small products replayed many times (a compiled training step's):
//! every output summed in the order its planned route sums it (see
//! [`super::dot`] and `tensor::ops::matmul`), with the per-call overhead
//! of the general kernels cut out. On CPUs with AVX2 and FMA, eight rows of
//! outputs are summed at once, one lane per row (each lane doing the
//! arithmetic of one output, in its order); elsewhere one output at a
//! time from operands gathered contiguous. Same bits either way.

use super::dot::{chain_start, one_chunk_output, DotPlan};

/// How each output of a [`gathered_product`] is summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TinySum {
    /// A plan's one chunk, no chain (see [`one_chunk_output`]), with
    /// `tile_k` partial sums: 1, 2 or 4.
    OneChunk(usize),
    /// XLA's own emitter (`matmul`'s `dot_step`): the first product plus
    /// `+0` (`-0` from column `from` on), then a chain of fused
    /// multiply-adds, but in column `plain`, whose products are rounded
    /// and added.
    Chain {
        /// The column summed without fused multiply-adds, if any.
        plain: Option<usize>,
        /// The first column whose sum starts from `-0`.
        from: usize,
    },
}

impl TinySum {
    /// How [`planned_scalar`](super::dot::planned_scalar) sums the outputs of `plan`, when it is one
    /// [`gathered_product`] sums (one chunk of a `k`-term product, no
    /// chain); `None` otherwise.
    pub(crate) fn of_plan(plan: &DotPlan, k: usize, n: usize) -> Option<TinySum> {
        let one_chunk = match plan.tiles[..] {
            [(0, j1, kc)] => j1 == n && kc >= k / plan.tile_k * plan.tile_k,
            _ => false,
        };
        (!plan.chain && one_chunk && matches!(plan.tile_k, 1 | 2 | 4))
            .then_some(TinySum::OneChunk(plan.tile_k))
    }
}

/// `out = a @ b` (`[m, k] @ [k, n]`, `k >= 1`, row-major `out`) summed per
/// output as `sum` says, for small products replayed many times: A's rows
/// and B's columns are gathered contiguous into `scratch` (unless they
/// are), so that each output is a dot of two slices, unrolled for `k <=
/// 8`. The same arithmetic in the same order as [`planned_scalar`](super::dot::planned_scalar) (for
/// [`TinySum::OneChunk`]) and `matmul`'s small products (for
/// [`TinySum::Chain`]): same bits.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gathered_product(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    mkn: (usize, usize, usize),
    sum: TinySum,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above;
            // that is the only requirement of `lanes_avx2`, whose body is
            // safe code.
            unsafe { lanes_avx2(x, sa, y, sb, mkn, sum, out, scratch) };
            return;
        }
        if std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports FMA, checked just above; that is the
            // only requirement of `gathered_fma`, whose body is safe code.
            unsafe { gathered_fma(x, sa, y, sb, mkn, sum, out, scratch) };
            return;
        }
    }
    gathered_body(x, sa, y, sb, mkn, sum, out, scratch)
}

/// [`gathered_body`] compiled with FMA instructions (same bits).
///
/// # Safety
///
/// The CPU must support FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn gathered_fma(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    mkn: (usize, usize, usize),
    sum: TinySum,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    gathered_body(x, sa, y, sb, mkn, sum, out, scratch)
}

/// The loops of [`gathered_product`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn gathered_body(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    (m, k, n): (usize, usize, usize),
    sum: TinySum,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    // A's rows and B's columns where they lie when contiguous, else
    // gathered into `scratch` (A's, then B's).
    scratch.clear();
    let a_rows = sa.1 == 1 || k == 1;
    let b_cols = sb.0 == 1 || k == 1;
    if !a_rows {
        for i in 0..m {
            scratch.extend((0..k).map(|p| x[i * sa.0 + p * sa.1]));
        }
    }
    let a_len = scratch.len();
    if !b_cols {
        for j in 0..n {
            scratch.extend((0..k).map(|p| y[p * sb.0 + j * sb.1]));
        }
    }
    let (a, a_step) = if a_rows {
        (x, sa.0)
    } else {
        (&scratch[..a_len], k)
    };
    let (b, b_step) = if b_cols {
        (y, sb.1)
    } else {
        (&scratch[a_len..], k)
    };
    let g = Gathered {
        a,
        a_step,
        b,
        b_step,
        m,
        n,
    };
    match sum {
        TinySum::OneChunk(1) => g.run(k, OneChunk::<1>, out),
        TinySum::OneChunk(2) => g.run(k, OneChunk::<2>, out),
        TinySum::OneChunk(_) => g.run(k, OneChunk::<4>, out),
        TinySum::Chain { plain, from } => g.run(k, Chain { plain, from }, out),
    }
}

/// Operands of a [`gathered_product`]: row `i` of A at `a[i * a_step..]`,
/// column `j` of B at `b[j * b_step..]`, each `k` long.
struct Gathered<'a> {
    a: &'a [f32],
    a_step: usize,
    b: &'a [f32],
    b_step: usize,
    m: usize,
    n: usize,
}

impl Gathered<'_> {
    /// Every output, summed by `s`: unrolled for `k <= 8`.
    #[inline(always)]
    fn run(&self, k: usize, s: impl Sum, out: &mut [f32]) {
        match k {
            1 => self.fixed::<1>(s, out),
            2 => self.fixed::<2>(s, out),
            3 => self.fixed::<3>(s, out),
            4 => self.fixed::<4>(s, out),
            5 => self.fixed::<5>(s, out),
            6 => self.fixed::<6>(s, out),
            7 => self.fixed::<7>(s, out),
            8 => self.fixed::<8>(s, out),
            _ => self.any(k, s, out),
        }
    }

    /// Every output, for `k == K` (one bounds check per operand slice).
    #[inline(always)]
    fn fixed<const K: usize>(&self, s: impl Sum, out: &mut [f32]) {
        let rows = out.chunks_exact_mut(self.n).take(self.m);
        for (i, orow) in rows.enumerate() {
            let a: &[f32; K] = self.a[i * self.a_step..][..K].try_into().expect("K terms");
            for (j, o) in orow.iter_mut().enumerate() {
                let b: &[f32; K] = self.b[j * self.b_step..][..K].try_into().expect("K terms");
                *o = s.output(j, K, |p| (a[p], b[p]));
            }
        }
    }

    /// Every output, for any `k`.
    #[inline(always)]
    fn any(&self, k: usize, s: impl Sum, out: &mut [f32]) {
        let rows = out.chunks_exact_mut(self.n).take(self.m);
        for (i, orow) in rows.enumerate() {
            let a = &self.a[i * self.a_step..][..k];
            for (j, o) in orow.iter_mut().enumerate() {
                let b = &self.b[j * self.b_step..][..k];
                *o = s.output(j, k, |p| (a[p], b[p]));
            }
        }
    }
}

/// How one output of a [`gathered_product`] is summed (see [`TinySum`]).
trait Sum: Copy {
    /// Output column `j`'s sum of the `k` terms `term(p)`.
    fn output(self, j: usize, k: usize, term: impl Fn(usize) -> (f32, f32)) -> f32;

    /// [`output`](Sum::output) of columns `j0..j0 + LANES` in the lanes
    /// (with no plain column), `term(p)` holding the lanes' operands from
    /// B and the row's from A.
    fn lanes(self, j: usize, k: usize, term: impl Fn(usize) -> (Lanes, f32)) -> Lanes;
}

/// [`TinySum::OneChunk`] with `T` partial sums.
#[derive(Clone, Copy)]
struct OneChunk<const T: usize>;

impl<const T: usize> Sum for OneChunk<T> {
    #[inline(always)]
    fn output(self, _: usize, k: usize, term: impl Fn(usize) -> (f32, f32)) -> f32 {
        one_chunk_output::<T>(term, k)
    }

    #[inline(always)]
    fn lanes(self, _: usize, k: usize, term: impl Fn(usize) -> (Lanes, f32)) -> Lanes {
        one_chunk_lanes::<T>(term, k)
    }
}

/// [`TinySum::Chain`].
#[derive(Clone, Copy)]
struct Chain {
    plain: Option<usize>,
    from: usize,
}

impl Sum for Chain {
    #[inline(always)]
    fn output(self, j: usize, k: usize, term: impl Fn(usize) -> (f32, f32)) -> f32 {
        if self.plain == Some(j) {
            return super::gemv::plain_column_sum(chain_start(j, self.from), k, term);
        }
        let (x, y) = term(0);
        let mut acc = x * y + chain_start(j, self.from);
        for p in 1..k {
            let (x, y) = term(p);
            acc = x.mul_add(y, acc);
        }
        acc
    }

    #[inline(always)]
    fn lanes(self, j0: usize, k: usize, term: impl Fn(usize) -> (Lanes, f32)) -> Lanes {
        let (x, y) = term(0);
        let start: Lanes = std::array::from_fn(|l| chain_start(j0 + l, self.from));
        let mut acc: Lanes = std::array::from_fn(|l| x[l] * y + start[l]);
        debug_assert!(
            self.plain.is_none(),
            "a plain column goes one output at a time"
        );
        for p in 1..k {
            let (x, y) = term(p);
            fma_lanes(&x, y, &mut acc);
        }
        acc
    }
}

/// Columns summed at once by [`lanes_body`].
const LANES: usize = 8;

/// One value per column of a block of [`LANES`] columns.
type Lanes = [f32; LANES];

/// [`lanes_body`] compiled for AVX2 and FMA (each lane's arithmetic is
/// that of [`gathered_body`]'s output: same bits).
///
/// # Safety
///
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn lanes_avx2(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    mkn: (usize, usize, usize),
    sum: TinySum,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    if mkn.1 <= avx2::MAX_K && mkn.0 > 0 && mkn.2 > 0 {
        // SAFETY: the CPU supports AVX2 and FMA (this function's own
        // requirement), which is `avx2::product`'s.
        if unsafe { avx2::product(x, sa, y, sb, mkn, sum, out) } {
            return;
        }
    }
    lanes_body(x, sa, y, sb, mkn, sum, out, scratch)
}

/// [`gathered_product`] on blocks of [`LANES`] columns: B's rows within
/// the block copied (zero columns past `n`), then each row of outputs in
/// the block summed lane-wise (one lane per output, A's value broadcast)
/// and stored. Unrolled for `k <= 8`. A chain with a plain column (a
/// one-row product) goes to [`gathered_body`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn lanes_body(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    mkn: (usize, usize, usize),
    sum: TinySum,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    if mkn.0 == 0 || mkn.2 == 0 {
        return;
    }
    let b = Block { x, sa, y, sb, mkn };
    match sum {
        TinySum::OneChunk(1) => b.run(OneChunk::<1>, out, scratch),
        TinySum::OneChunk(2) => b.run(OneChunk::<2>, out, scratch),
        TinySum::OneChunk(_) => b.run(OneChunk::<4>, out, scratch),
        TinySum::Chain { plain: None, from } => b.run(Chain { plain: None, from }, out, scratch),
        TinySum::Chain { .. } => gathered_body(x, sa, y, sb, mkn, sum, out, scratch),
    }
}

/// The operands of [`lanes_body`].
struct Block<'a> {
    x: &'a [f32],
    sa: (usize, usize),
    y: &'a [f32],
    sb: (usize, usize),
    mkn: (usize, usize, usize),
}

impl Block<'_> {
    /// Every output, summed by `s`.
    #[inline(always)]
    fn run(&self, s: impl Sum, out: &mut [f32], scratch: &mut Vec<f32>) {
        match self.mkn.1 {
            1 => self.fixed::<1>(s, out),
            2 => self.fixed::<2>(s, out),
            3 => self.fixed::<3>(s, out),
            4 => self.fixed::<4>(s, out),
            5 => self.fixed::<5>(s, out),
            6 => self.fixed::<6>(s, out),
            7 => self.fixed::<7>(s, out),
            8 => self.fixed::<8>(s, out),
            k => {
                scratch.clear();
                scratch.resize(k * LANES, 0.0);
                self.blocks(s, out, scratch.as_chunks_mut::<LANES>().0)
            }
        }
    }

    /// Every output for `k == K`, B's block rows on the stack.
    #[inline(always)]
    fn fixed<const K: usize>(&self, s: impl Sum, out: &mut [f32]) {
        let mut rows = [[0.0f32; LANES]; K];
        self.blocks(s, out, &mut rows)
    }

    /// Every output, B's block rows copied into `brows` (`k` of them).
    #[inline(always)]
    fn blocks(&self, s: impl Sum, out: &mut [f32], brows: &mut [Lanes]) {
        let (x, (sa0, sa1), y, (sb0, sb1)) = (self.x, self.sa, self.y, self.sb);
        let (m, _, n) = self.mkn;
        let k = brows.len();
        for j0 in (0..n).step_by(LANES) {
            let cols = LANES.min(n - j0);
            for (p, brow) in brows.iter_mut().enumerate() {
                // Columns past `n`: zeros.
                *brow = [0.0; LANES];
                if sb1 == 1 {
                    copy_lanes(&mut brow[..], &y[p * sb0 + j0..], cols);
                } else {
                    for (l, b) in brow.iter_mut().enumerate().take(cols) {
                        *b = y[p * sb0 + (j0 + l) * sb1];
                    }
                }
            }
            let brows: &[Lanes] = brows;
            for (i, orow) in out.chunks_exact_mut(n).enumerate().take(m) {
                let v = if sa1 == 1 {
                    let arow = &x[i * sa0..][..k];
                    s.lanes(j0, k, |p| (brows[p], arow[p]))
                } else {
                    s.lanes(j0, k, |p| (brows[p], x[i * sa0 + p * sa1]))
                };
                copy_lanes(&mut orow[j0..], &v, cols);
            }
        }
    }
}

/// `dst[..n] = src[..n]` for `n <= LANES`, without a call to `memcpy`.
#[inline(always)]
fn copy_lanes(dst: &mut [f32], src: &[f32], n: usize) {
    /// The copy of `N` values.
    #[inline(always)]
    fn copy<const N: usize>(dst: &mut [f32], src: &[f32]) {
        dst[..N].copy_from_slice(&src[..N]);
    }
    match n {
        1 => copy::<1>(dst, src),
        2 => copy::<2>(dst, src),
        3 => copy::<3>(dst, src),
        4 => copy::<4>(dst, src),
        5 => copy::<5>(dst, src),
        6 => copy::<6>(dst, src),
        7 => copy::<7>(dst, src),
        _ => copy::<LANES>(dst, src),
    }
}

/// `acc + x * y` in every lane, fused (one rounding).
#[inline(always)]
fn fma_lanes(x: &Lanes, y: f32, acc: &mut Lanes) {
    for (a, &x) in acc.iter_mut().zip(x) {
        *a = x.mul_add(y, *a);
    }
}

/// `a + b` in every lane.
#[inline(always)]
fn add_lanes(a: Lanes, b: Lanes) -> Lanes {
    std::array::from_fn(|l| a[l] + b[l])
}

/// [`one_chunk_output`] in every lane.
#[inline(always)]
fn one_chunk_lanes<const T: usize>(term: impl Fn(usize) -> (Lanes, f32), k: usize) -> Lanes {
    let reduce = |l: [Lanes; T]| match T {
        1 => l[0],
        2 => add_lanes(l[0], l[1 % T]),
        _ => add_lanes(add_lanes(l[0], l[1 % T]), add_lanes(l[2 % T], l[3 % T])),
    };
    let kmain = k / T * T;
    let mut lanes = [[0.0f32; LANES]; T];
    let mut p = 0;
    while p < kmain {
        for (q, lane) in lanes.iter_mut().enumerate() {
            let (x, y) = term(p + q);
            fma_lanes(&x, y, lane);
        }
        p += T;
    }
    if kmain == k {
        return reduce(lanes);
    }
    let mut tail = [[0.0f32; LANES]; T];
    for (q, lane) in tail.iter_mut().enumerate().take(k - kmain) {
        let (x, y) = term(kmain + q);
        fma_lanes(&x, y, lane);
    }
    let tail = reduce(tail);
    if kmain == 0 {
        tail
    } else {
        add_lanes(tail, reduce(lanes))
    }
}

/// [`lanes_body`] written with AVX2 intrinsics, for `k <= 8`: the same
/// operations on the same lanes, one vector each.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256, _mm256_add_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps,
        _mm256_setzero_ps, _mm256_storeu_ps,
    };

    use super::{chain_start, copy_lanes, TinySum, LANES};

    /// The longest sums unrolled here.
    pub(super) const MAX_K: usize = 8;

    /// `out = a @ b` as [`super::lanes_body`] computes it, for `1 <= k <=
    /// MAX_K`, `m, n >= 1`; `false` (nothing written) for sums it does not
    /// take (a chain with a plain column).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn product(
        x: &[f32],
        sa: (usize, usize),
        y: &[f32],
        sb: (usize, usize),
        mkn: (usize, usize, usize),
        sum: TinySum,
        out: &mut [f32],
    ) -> bool {
        let ops = Ops { x, sa, y, sb, mkn };
        macro_rules! by_k {
            ($sum:expr) => {
                match mkn.1 {
                    1 => ops.blocks::<1, _>($sum, out),
                    2 => ops.blocks::<2, _>($sum, out),
                    3 => ops.blocks::<3, _>($sum, out),
                    4 => ops.blocks::<4, _>($sum, out),
                    5 => ops.blocks::<5, _>($sum, out),
                    6 => ops.blocks::<6, _>($sum, out),
                    7 => ops.blocks::<7, _>($sum, out),
                    8 => ops.blocks::<8, _>($sum, out),
                    _ => return false,
                }
            };
        }
        match sum {
            TinySum::OneChunk(1) => by_k!(Vsum::Chunk::<1>),
            TinySum::OneChunk(2) => by_k!(Vsum::Chunk::<2>),
            TinySum::OneChunk(_) => by_k!(Vsum::Chunk::<4>),
            TinySum::Chain { plain: None, from } => by_k!(Vsum::<1>::Chain(from)),
            TinySum::Chain { .. } => return false,
        }
        true
    }

    /// How a block's outputs are summed: a plan's one chunk with `T`
    /// partial sums, or a chain whose columns from this one start from
    /// `-0`.
    #[derive(Clone, Copy)]
    enum Vsum<const T: usize> {
        Chunk,
        Chain(usize),
    }

    /// The operands.
    struct Ops<'a> {
        x: &'a [f32],
        sa: (usize, usize),
        y: &'a [f32],
        sb: (usize, usize),
        mkn: (usize, usize, usize),
    }

    impl Ops<'_> {
        /// Every output, `k == K`, in blocks of [`LANES`] columns.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn blocks<const K: usize, const T: usize>(&self, sum: Vsum<T>, out: &mut [f32]) {
            let (x, (sa0, sa1), y, (sb0, sb1)) = (self.x, self.sa, self.y, self.sb);
            let (m, _, n) = self.mkn;
            for j0 in (0..n).step_by(LANES) {
                // The block's lanes: the first `cols`.
                let cols = LANES.min(n - j0);
                // B's rows within the block (zeros past `n`), as vectors.
                let mut b = [_mm256_setzero_ps(); K];
                for (p, v) in b.iter_mut().enumerate() {
                    if sb1 == 1 {
                        *v = load_first(&y[p * sb0 + j0..][..cols]);
                    } else {
                        let mut row = [0.0f32; LANES];
                        for (l, r) in row.iter_mut().enumerate().take(cols) {
                            *r = y[p * sb0 + (j0 + l) * sb1];
                        }
                        *v = load(&row);
                    }
                }
                let start = match sum {
                    Vsum::Chain(from) => {
                        let s: [f32; LANES] = std::array::from_fn(|l| chain_start(j0 + l, from));
                        load(&s)
                    }
                    Vsum::Chunk => _mm256_setzero_ps(),
                };
                for (i, orow) in out.chunks_exact_mut(n).enumerate().take(m) {
                    let a: [f32; K] = if sa1 == 1 {
                        x[i * sa0..][..K].try_into().expect("K terms")
                    } else {
                        std::array::from_fn(|p| x[i * sa0 + p * sa1])
                    };
                    let v = match sum {
                        Vsum::Chunk => chunk::<K, T>(&b, &a),
                        Vsum::Chain(_) => chain::<K>(&b, &a, start),
                    };
                    store_first(&mut orow[j0..][..cols], v);
                }
            }
        }
    }

    /// A vector of eight values.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn load(v: &[f32; LANES]) -> __m256 {
        // SAFETY: `v` holds the eight `f32`s read (an unaligned load).
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }

    /// `src` (at most [`LANES`] values) in the first lanes of a vector,
    /// zeros in the others. Not a masked load: one waits for the stores
    /// before it to retire (no store forwarding), and `src` is often a
    /// buffer the previous operation has just written (several times the
    /// cost of the product in a small step, measured).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn load_first(src: &[f32]) -> __m256 {
        if let Ok(full) = <&[f32; LANES]>::try_from(src) {
            return load(full);
        }
        let mut v = [0.0f32; LANES];
        copy_lanes(&mut v, src, src.len());
        load(&v)
    }

    /// The first `dst.len()` lanes (at most [`LANES`]) of `v` into `dst`.
    /// Not a masked store, whose values the next operation's loads cannot
    /// take from the store queue (see [`load_first`]).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn store_first(dst: &mut [f32], v: __m256) {
        let mut lanes = [0.0f32; LANES];
        // SAFETY: `lanes` holds the eight `f32`s written (an unaligned store).
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
        copy_lanes(dst, &lanes, dst.len());
    }

    /// `(l0 + l1) + (l2 + l3)` for `T == 4`, `l0 + l1` for 2, `l0` for 1,
    /// as `one_chunk_output` reduces.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn reduce<const T: usize>(l: [__m256; T]) -> __m256 {
        match T {
            1 => l[0],
            2 => _mm256_add_ps(l[0], l[1 % T]),
            _ => _mm256_add_ps(
                _mm256_add_ps(l[0], l[1 % T]),
                _mm256_add_ps(l[2 % T], l[3 % T]),
            ),
        }
    }

    /// `one_chunk_output` of `K` terms in every lane: B's rows `b`, A's
    /// row `a` broadcast.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn chunk<const K: usize, const T: usize>(b: &[__m256; K], a: &[f32; K]) -> __m256 {
        let kmain = K / T * T;
        let mut lanes = [_mm256_setzero_ps(); T];
        let mut p = 0;
        while p < kmain {
            for (q, lane) in lanes.iter_mut().enumerate() {
                *lane = _mm256_fmadd_ps(b[p + q], _mm256_set1_ps(a[p + q]), *lane);
            }
            p += T;
        }
        if kmain == K {
            return reduce(lanes);
        }
        let mut tail = [_mm256_setzero_ps(); T];
        for (q, lane) in tail.iter_mut().enumerate().take(K - kmain) {
            *lane = _mm256_fmadd_ps(b[kmain + q], _mm256_set1_ps(a[kmain + q]), *lane);
        }
        let tail = reduce(tail);
        if kmain == 0 {
            tail
        } else {
            _mm256_add_ps(tail, reduce(lanes))
        }
    }

    /// A chain of `K` terms in every lane from `start` (see `Chain`).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn chain<const K: usize>(b: &[__m256; K], a: &[f32; K], start: __m256) -> __m256 {
        let mut acc = _mm256_add_ps(_mm256_mul_ps(b[0], _mm256_set1_ps(a[0])), start);
        for p in 1..K {
            acc = _mm256_fmadd_ps(b[p], _mm256_set1_ps(a[p]), acc);
        }
        acc
    }
}
