//! Register-tiled kernels for the convolution and its two cotangents.
//!
//! Every output of a convolution (and of each cotangent) is one sequential
//! chain of fused multiply-adds from `+0` in XLA:CPU's order (see
//! `conv.rs`). A tile computes `T` rows by `NV` vectors of outputs at once:
//! `T * NV` independent chains, enough to keep both FMA units busy through
//! each FMA's latency, with the accumulators in registers for the whole
//! chain. Tiles change how many chains run at a time, never any chain's
//! order, so the bits are the plain loops' (tested against them for both
//! instruction sets).
//!
//! A chain is a list of *segments*; segment `q` holds `len` steps, and at
//! step `i` row `r` multiplies `x[start[q][r] + i * stride[q][r]]` by the
//! `NV` weight vectors `w[(q * len + i) * NV * W..]`. A row with nothing to
//! read there (padding, or no row) reads a zero.

use std::ops::Range;

use super::conv::Dims;

/// The vector instructions a tile runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512F: 16 lanes, 32 registers.
    Avx512,
    /// AVX2 and FMA: 8 lanes, 16 registers.
    Avx2,
}

impl Isa {
    /// The best this CPU has, or `None` (the plain loops then run).
    pub(crate) fn detect() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Some(Isa::Avx512);
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Some(Isa::Avx2);
            }
        }
        None
    }

    /// Whether this CPU can run `self`'s tiles.
    pub(crate) fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
                Isa::Avx2 => {
                    std::arch::is_x86_feature_detected!("avx2")
                        && std::arch::is_x86_feature_detected!("fma")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }
}

/// A tile's read pointers: per segment and row, where the row starts and
/// its stride, each checked to stay inside its slice for the segment's
/// steps (rows with nothing to read point at a zero with stride 0).
struct Reads<const T: usize> {
    ptrs: Vec<[(*const f32, usize); T]>,
    /// Zeros for rows without a read, as long as a unit-stride segment.
    zeros: Vec<f32>,
    /// Whether every row of every segment has stride 1.
    unit: bool,
}

impl<const T: usize> Reads<T> {
    /// For segments of at most `len` steps.
    fn new(len: usize) -> Reads<T> {
        Reads {
            ptrs: Vec::new(),
            zeros: vec![0.0; len.max(1)],
            unit: true,
        }
    }

    /// Starts a new list of segments.
    fn clear(&mut self) {
        self.ptrs.clear();
        self.unit = true;
    }

    /// Adds a segment of `len` steps: row `r` reads `x[start[r] + i *
    /// stride]` (zeros for `None`). Panics if a read would leave `x`: the
    /// callers' index lists never do.
    fn push(&mut self, x: &[f32], start: [Option<usize>; T], stride: usize, len: usize) {
        // Rows without a read walk along zeros with the same stride when
        // it is 1 (so that the kernel can index every row alike), else
        // stay on one zero.
        let unit = stride == 1;
        assert!(
            len <= self.zeros.len(),
            "segments longer than `Reads::new` said"
        );
        self.unit &= unit;
        let zeros = self.zeros.as_ptr();
        let zero_stride = if unit { 1 } else { 0 };
        self.ptrs.push(std::array::from_fn(|r| match start[r] {
            Some(s) if len > 0 => {
                assert!(
                    s + (len - 1) * stride < x.len(),
                    "conv tile reads past its input"
                );
                (x[s..].as_ptr(), stride)
            }
            _ => (zeros, zero_stride),
        }));
    }
}

/// Where a tile's weights are: for segment `q` and step `i`, the `ob`
/// weights at `q * segment + i * step`.
#[derive(Clone, Copy)]
struct Weights<'a> {
    w: &'a [f32],
    segment: usize,
    step: usize,
}

impl<'a> Weights<'a> {
    /// The weights from segment `q` on.
    fn skip_segments(self, q: usize) -> Weights<'a> {
        Weights {
            w: &self.w[(q * self.segment).min(self.w.len())..],
            ..self
        }
    }
}

/// A tile's chains: `acc[r * ob + j]` = the chain over the segments of
/// `reads`, and in each over `len` steps, of the row's read times the
/// step's weight `j`, as the module comment says.
fn tile<const T: usize, const TK: usize>(
    isa: Isa,
    reads: &Reads<T>,
    len: usize,
    weights: Weights<'_>,
    ob: usize,
    acc: &mut [f32],
    resume: bool,
) {
    let segments = reads.ptrs.len();
    let w = weights.w;
    let last =
        (segments.max(1) - 1) * weights.segment + len.max(1).saturating_sub(1) * weights.step;
    assert!((segments == 0 || len == 0 || last + ob <= w.len()) && acc.len() >= TK * T * ob);
    assert!(
        len.is_multiple_of(TK),
        "segments of whole partial-sum rounds"
    );
    let (wseg, wstep) = (weights.segment, weights.step);
    #[cfg(target_arch = "x86_64")]
    {
        assert!(isa.available());
        // SAFETY: the instruction set was checked just above; every pointer
        // of `reads` was checked by `Reads::push` to stay inside its slice
        // (or on the one zero, with stride 0) for `len` steps, and `reads`
        // borrows nothing mutably; `w` and `acc` were checked to be long
        // enough for the kernels, which read `w` at `q * wseg + i * wstep
        // .. + ob` for `q < reads.ptrs.len()`, `i < len` (the last of which
        // was checked), and read (when resuming) and write `TK * T * ob`
        // floats of `acc`; `len` is a multiple of `TK`, as they need.
        unsafe {
            let p = &reads.ptrs;
            match (isa, ob, reads.unit) {
                (Isa::Avx512, 32, true) => {
                    x86::tile_avx512::<T, 2, true, TK>(p, len, w, wseg, wstep, acc, resume)
                }
                (Isa::Avx512, 32, false) => {
                    x86::tile_avx512::<T, 2, false, TK>(p, len, w, wseg, wstep, acc, resume)
                }
                (Isa::Avx512, 16, true) => {
                    x86::tile_avx512::<T, 1, true, TK>(p, len, w, wseg, wstep, acc, resume)
                }
                (Isa::Avx512, 16, false) => {
                    x86::tile_avx512::<T, 1, false, TK>(p, len, w, wseg, wstep, acc, resume)
                }
                (Isa::Avx2, 16, true) => {
                    x86::tile_avx2::<T, 2, true, TK>(p, len, w, wseg, wstep, acc, resume)
                }
                (Isa::Avx2, 16, false) => {
                    x86::tile_avx2::<T, 2, false, TK>(p, len, w, wseg, wstep, acc, resume)
                }
                _ => unreachable!("tile widths are chosen by `Shape`"),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, reads, len, w, wseg, wstep, ob, acc);
        unreachable!("no tiles without x86-64");
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Generates a tile kernel for one vector type (see [`super::tile`]).
    macro_rules! tile_kernel {
        ($name:ident, $feature:literal, $vec:ty, $lanes:literal, $zero:ident, $set1:ident,
         $load:ident, $fma:ident, $store:ident) => {
            /// `acc[(l * T + r) * NV * lanes + j]` = one chain of FMAs from
            /// `+0` (or, when `resume`, from `acc`'s value: a chain
            /// continued) over the segments and, in each, their steps `i`
            /// with `i % TK == l`: row `r` reads `*p.add(i * s)` for its
            /// `(p, s)` of the segment, times the `NV` vectors of `w` at
            /// `q * wseg + i * wstep`. `UNIT`: every stride is 1.
            ///
            /// # Safety
            ///
            /// The CPU has the instruction set; each `(p, s)` is valid for
            /// reads at `p + i * s` for `i < len`, a multiple of `TK`; `w`
            /// holds `NV * lanes` floats from every `q * wseg + i * wstep`
            /// and `acc` `TK * T * NV * lanes`.
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn $name<
                const T: usize,
                const NV: usize,
                const UNIT: bool,
                const TK: usize,
            >(
                ptrs: &[[(*const f32, usize); T]],
                len: usize,
                w: &[f32],
                wseg: usize,
                wstep: usize,
                acc: &mut [f32],
                resume: bool,
            ) {
                let ob = NV * $lanes;
                let mut a = [[[$zero(); NV]; T]; TK];
                if resume {
                    for l in 0..TK {
                        for r in 0..T {
                            for v in 0..NV {
                                // SAFETY: `acc` holds `TK * T * ob` floats.
                                a[l][r][v] = unsafe {
                                    $load(acc.as_ptr().add((l * T + r) * ob + v * $lanes))
                                };
                            }
                        }
                    }
                }
                for (q, seg) in ptrs.iter().enumerate() {
                    let mut wp = w.as_ptr().wrapping_add(q * wseg);
                    let mut p: [*const f32; T] = std::array::from_fn(|r| seg[r].0);
                    let s: [usize; T] = std::array::from_fn(|r| seg[r].1);
                    for i0 in (0..len).step_by(TK) {
                        for l in 0..TK {
                            let i = i0 + l;
                            // SAFETY (all reads and stores below): bounds as
                            // the function's contract states (with `UNIT`,
                            // every stride is 1); `wp` is at `q * wseg + i *
                            // wstep`.
                            let wv: [$vec; NV] =
                                std::array::from_fn(|v| unsafe { $load(wp.add(v * $lanes)) });
                            for r in 0..T {
                                let xv = if UNIT {
                                    $set1(unsafe { *p[r].add(i) })
                                } else {
                                    $set1(unsafe { *p[r] })
                                };
                                for v in 0..NV {
                                    a[l][r][v] = $fma(xv, wv[v], a[l][r][v]);
                                }
                                if !UNIT {
                                    p[r] = p[r].wrapping_add(s[r]);
                                }
                            }
                            wp = wp.wrapping_add(wstep);
                        }
                    }
                }
                for l in 0..TK {
                    for r in 0..T {
                        for v in 0..NV {
                            let at = (l * T + r) * ob + v * $lanes;
                            unsafe { $store(acc.as_mut_ptr().add(at), a[l][r][v]) };
                        }
                    }
                }
            }
        };
    }

    tile_kernel!(
        tile_avx512,
        "avx512f",
        __m512,
        16,
        _mm512_setzero_ps,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_fmadd_ps,
        _mm512_storeu_ps
    );
    tile_kernel!(
        tile_avx2,
        "avx2,fma",
        __m256,
        8,
        _mm256_setzero_ps,
        _mm256_set1_ps,
        _mm256_loadu_ps,
        _mm256_fmadd_ps,
        _mm256_storeu_ps
    );
}

/// Rows per tile and outputs per block (`ob` = vectors × lanes) for an
/// instruction set and a block of `width` outputs: as many accumulators as
/// the registers hold with room for the weights.
#[derive(Clone, Copy)]
struct Shape {
    ob: usize,
}

impl Shape {
    fn of(isa: Isa, width: usize) -> Shape {
        match isa {
            Isa::Avx512 if width > 16 => Shape { ob: 32 },
            Isa::Avx512 => Shape { ob: 16 },
            Isa::Avx2 => Shape { ob: 16 },
        }
    }
}

/// Weights of one group: `w[(step) * ob + j]` for outputs
/// `block * ob + j < width` of `get(step, output)`, zero-padded.
fn pack(steps: usize, width: usize, ob: usize, get: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let blocks = width.div_ceil(ob);
    let mut out = vec![0.0f32; blocks * steps * ob];
    for b in 0..blocks {
        let cols = (width - b * ob).min(ob);
        for st in 0..steps {
            let dst = &mut out[(b * steps + st) * ob..][..cols];
            for (j, v) in dst.iter_mut().enumerate() {
                *v = get(st, b * ob + j);
            }
        }
    }
    out
}

/// One of the three tiled computations: what a tile's rows read, and the
/// weights of each block of outputs.
trait Job: Sync {
    /// Pushes onto `reads` the segments `qs` of group `grp`'s chains for
    /// the tile rows `rows` (their indices in the output; `None`: no row).
    fn segments<const T: usize>(
        &self,
        reads: &mut Reads<T>,
        rows: [Option<usize>; T],
        grp: usize,
        qs: Range<usize>,
    );

    /// Group `grp`'s weights for block `b` of its outputs.
    fn weights(&self, grp: usize, b: usize) -> Weights<'_>;
}

/// The shape of a tiled computation's output: `rows` rows of `groups`
/// groups of `width` outputs, each output a chain of `segments` segments
/// of `len` steps; blocks of `ob` outputs.
#[derive(Clone, Copy)]
struct Layout {
    rows: usize,
    groups: usize,
    width: usize,
    segments: usize,
    len: usize,
    ob: usize,
    /// Partial sums per output (see [`Lanes`]).
    tile_k: usize,
}

/// Which steps of each segment the chains take, and in how many partial
/// sums: the steps `first..first + count`, step `first + i` in partial sum
/// `i % tile_k` (`count` a multiple of `tile_k`), the partial sums reduced
/// as YNNPACK reduces them (`s0 + s1`, `(s0 + s1) + (s2 + s3)`). One
/// partial sum of every step is the plain chain; the others are YNNPACK's
/// convolutions (see `conv_ynn`), one chunk of channels at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lanes {
    /// The first step taken.
    pub(crate) first: usize,
    /// How many steps are taken.
    pub(crate) count: usize,
    /// Partial sums: 1, 2 or 4.
    pub(crate) tile_k: usize,
}

impl Lanes {
    /// Every one of `len` steps, one chain.
    pub(crate) fn all(len: usize) -> Lanes {
        Lanes {
            first: 0,
            count: len,
            tile_k: 1,
        }
    }
}

/// Packed weights (segment after segment, step after step) of segments
/// of `len` steps, from step `first` on.
fn packed_from(w: &[f32], len: usize, ob: usize, first: usize) -> Weights<'_> {
    Weights {
        w: &w[(first * ob).min(w.len())..],
        segment: len * ob,
        step: ob,
    }
}

/// Steps of a chain that the tiles of a part run before the next tile's
/// turn: long chains (the kernel cotangent's run over every position and
/// image) are cut into chunks of about this many steps, and all the
/// part's tiles go through one chunk before the next, so that the chunk's
/// inputs and weights stay in cache for all of them instead of being read
/// from memory again by each tile. A chain continues from its stored
/// partial sum (the same FMAs in the same order: the same bits). Measured
/// on the kernel cotangent of `benches/conv.rs`.
const CHUNK_STEPS: usize = 512;

/// Most tiles in one part (a unit of work for rayon's threads).
const PART_TILES: usize = 16;

/// Runs `job` over tiles of `T` rows on rayon's threads: the rows are
/// split into parts of whole tiles; a part runs its chains chunk by chunk
/// (see [`CHUNK_STEPS`]), each tile's chains for each group and block of
/// outputs, and copies them into the output.
fn tiled<const T: usize, const TK: usize>(isa: Isa, job: &impl Job, l: Layout) -> Vec<f32> {
    let row = (l.groups * l.width).max(1);
    let blocks = l.width.div_ceil(l.ob);
    let tiles = l.rows.div_ceil(T);
    let per = tiles
        .div_ceil(rayon::current_num_threads().max(1))
        .clamp(1, PART_TILES);
    let chunk = (CHUNK_STEPS / l.len.max(1)).max(1);
    let block = TK * T * l.ob;
    let mut out = vec![0.0f32; l.rows * l.groups * l.width];
    // Runs of parts, four per thread, shared between the calling thread
    // and the pool (see `share_runs`); a run's parts reuse its scratch.
    let part_len = row * T * per;
    crate::pool::share_runs(&mut out, part_len, 4, |first, parts| {
        let (reads, accs) = &mut (Reads::<T>::new(l.len), Vec::new());
        for (j, outs) in parts.chunks_mut(part_len).enumerate() {
            let part = first + j;
            let count = outs.len() / row;
            let first = part * per * T;
            let mine = count.div_ceil(T);
            accs.resize(mine * l.groups * blocks * block, 0.0);
            for q0 in (0..l.segments.max(1)).step_by(chunk) {
                let qs = q0..(q0 + chunk).min(l.segments);
                for tl in 0..mine {
                    let rows = std::array::from_fn(|r| {
                        let i = tl * T + r;
                        (i < count).then_some(first + i)
                    });
                    for grp in 0..l.groups {
                        reads.clear();
                        job.segments(reads, rows, grp, qs.clone());
                        for b in 0..blocks {
                            let w = job.weights(grp, b).skip_segments(q0);
                            let acc =
                                &mut accs[((tl * l.groups + grp) * blocks + b) * block..][..block];
                            tile::<T, TK>(isa, reads, l.len, w, l.ob, acc, q0 > 0);
                        }
                    }
                }
            }
            for tl in 0..mine {
                for grp in 0..l.groups {
                    for b in 0..blocks {
                        let acc = &accs[((tl * l.groups + grp) * blocks + b) * block..][..block];
                        let cols = (l.width - b * l.ob).min(l.ob);
                        for r in 0..(count - tl * T).min(T) {
                            let out = &mut outs[(tl * T + r) * row + grp * l.width + b * l.ob..];
                            let lane = |k: usize, j: usize| acc[(k * T + r) * l.ob + j];
                            for (j, o) in out[..cols].iter_mut().enumerate() {
                                *o = match TK {
                                    1 => lane(0, j),
                                    2 => lane(0, j) + lane(1, j),
                                    _ => (lane(0, j) + lane(1, j)) + (lane(2, j) + lane(3, j)),
                                };
                            }
                        }
                    }
                }
            }
        }
    });
    out
}

/// [`tiled`] with the tile row count that fits `isa` and the block width
/// (8 × 32 or 16 × 16 on AVX-512: 16 accumulators of 32; 4 × 16 on AVX2:
/// 8 of 16).
fn run(isa: Isa, job: &impl Job, l: Layout) -> Vec<f32> {
    // As many rows as keep the accumulators of all partial sums in
    // registers.
    match (isa, l.ob, l.tile_k) {
        (Isa::Avx512, 32, 1) => tiled::<8, 1>(isa, job, l),
        (Isa::Avx512, 32, 2) => tiled::<6, 2>(isa, job, l),
        (Isa::Avx512, 32, _) => tiled::<3, 4>(isa, job, l),
        (Isa::Avx512, _, 1) => tiled::<16, 1>(isa, job, l),
        (Isa::Avx512, _, 2) => tiled::<12, 2>(isa, job, l),
        (Isa::Avx512, _, _) => tiled::<6, 4>(isa, job, l),
        (Isa::Avx2, _, 1) => tiled::<4, 1>(isa, job, l),
        (Isa::Avx2, _, 2) => tiled::<2, 2>(isa, job, l),
        (Isa::Avx2, _, _) => tiled::<1, 4>(isa, job, l),
    }
}

/// Each row's `(row / per, row % per)`: divided once per tile, not per
/// segment.
fn split<const T: usize>(rows: [Option<usize>; T], per: usize) -> [Option<(usize, usize)>; T] {
    rows.map(|r| r.map(|r| (r / per, r % per)))
}

/// The forward pass: rows are (image, output position), chains run over
/// the taps and, in each, the input features.
struct Forward<'a> {
    x: &'a [f32],
    packed: Vec<Vec<f32>>,
    idx: &'a [Option<usize>],
    d: Dims,
    ob: usize,
    lanes: Lanes,
}

impl Job for Forward<'_> {
    fn segments<const T: usize>(
        &self,
        reads: &mut Reads<T>,
        rows: [Option<usize>; T],
        g: usize,
        qs: Range<usize>,
    ) {
        let d = self.d;
        let at = split(rows, d.p);
        for t in qs {
            let first = g * d.cg + self.lanes.first;
            let start = at.map(|a| {
                a.and_then(|(n, m)| self.idx[m * d.t + t].map(|s| (n * d.s + s) * d.c + first))
            });
            reads.push(self.x, start, 1, self.lanes.count);
        }
    }

    fn weights(&self, g: usize, b: usize) -> Weights<'_> {
        let size = self.d.t * self.d.cg * self.ob;
        packed_from(
            &self.packed[g][b * size..][..size],
            self.d.cg,
            self.ob,
            self.lanes.first,
        )
    }
}

/// The forward pass (`conv.rs`'s `conv_forward`) on tiles: rows are output
/// positions, chains run over the taps and, in each, the input features.
pub(crate) fn forward(isa: Isa, x: &[f32], k: &[f32], idx: &[Option<usize>], d: Dims) -> Vec<f32> {
    forward_lanes(isa, x, k, idx, d, Lanes::all(d.cg))
}

/// [`forward`] over the input features `lanes` of each tap, in its
/// partial sums.
pub(crate) fn forward_lanes(
    isa: Isa,
    x: &[f32],
    k: &[f32],
    idx: &[Option<usize>],
    d: Dims,
    lanes: Lanes,
) -> Vec<f32> {
    let og = d.og();
    let ob = Shape::of(isa, og).ob;
    let taps = d.t * d.cg;
    if taps == 0 || lanes.count == 0 {
        return vec![0.0; d.n * d.p * d.o];
    }
    let packed = (0..d.groups)
        .map(|g| pack(taps, og, ob, |tc, j| d.kernel_row(k, tc)[g * og + j]))
        .collect();
    let job = Forward {
        x,
        packed,
        idx,
        d,
        ob,
        lanes,
    };
    let layout = Layout {
        rows: d.n * d.p,
        groups: d.groups,
        width: og,
        segments: d.t,
        len: lanes.count,
        ob,
        tile_k: lanes.tile_k,
    };
    run(isa, &job, layout)
}

/// The input cotangent: rows are (image, input position), chains run over
/// the taps in reverse order and, in each, the outputs of the group.
struct InputGrad<'a> {
    g: &'a [f32],
    packed: Vec<Vec<f32>>,
    inv: &'a [Option<usize>],
    d: Dims,
    ob: usize,
    lanes: Lanes,
}

impl Job for InputGrad<'_> {
    fn segments<const T: usize>(
        &self,
        reads: &mut Reads<T>,
        rows: [Option<usize>; T],
        grp: usize,
        qs: Range<usize>,
    ) {
        let d = self.d;
        let og = d.og();
        let at = split(rows, d.s);
        for tt in qs {
            let t = d.t - 1 - tt;
            let first = grp * og + self.lanes.first;
            let start = at.map(|a| {
                a.and_then(|(n, s)| self.inv[s * d.t + t].map(|m| (n * d.p + m) * d.o + first))
            });
            reads.push(self.g, start, 1, self.lanes.count);
        }
    }

    fn weights(&self, grp: usize, b: usize) -> Weights<'_> {
        let og = self.d.og();
        let size = self.d.t * og * self.ob;
        packed_from(
            &self.packed[grp][b * size..][..size],
            og,
            self.ob,
            self.lanes.first,
        )
    }
}

/// The input cotangent (`conv.rs`'s `conv_input_grad`) on tiles: rows are
/// input positions, chains run over the taps in reverse order and, in each,
/// the outputs of the group (`inv[s * T + t]`: the output position that
/// reads input `s` through tap `t`).
pub(crate) fn input_grad(
    isa: Isa,
    g: &[f32],
    k: &[f32],
    inv: &[Option<usize>],
    d: Dims,
) -> Vec<f32> {
    input_grad_lanes(isa, g, k, inv, d, Lanes::all(d.og()))
}

/// [`input_grad`] over the outputs `lanes` of each tap, in its partial
/// sums.
pub(crate) fn input_grad_lanes(
    isa: Isa,
    g: &[f32],
    k: &[f32],
    inv: &[Option<usize>],
    d: Dims,
    lanes: Lanes,
) -> Vec<f32> {
    let og = d.og();
    let ob = Shape::of(isa, d.cg).ob;
    let chain = d.t * og;
    if chain == 0 || lanes.count == 0 {
        return vec![0.0; d.n * d.s * d.c];
    }
    let packed = (0..d.groups)
        .map(|grp| pack(chain, d.cg, ob, |st, j| d.flipped_kernel(k, grp, st, j)))
        .collect();
    let job = InputGrad {
        g,
        packed,
        inv,
        d,
        ob,
        lanes,
    };
    let layout = Layout {
        rows: d.n * d.s,
        groups: d.groups,
        width: d.cg,
        segments: d.t,
        len: lanes.count,
        ob,
        tile_k: lanes.tile_k,
    };
    run(isa, &job, layout)
}

/// The kernel cotangent: rows are (tap, input feature of the group),
/// chains run over the output positions and, in each, the batch.
struct KernelGrad<'a> {
    x: &'a [f32],
    g: &'a [f32],
    /// `None`: the cotangent is read where it is.
    packed: Option<Vec<Vec<f32>>>,
    idx: &'a [Option<usize>],
    d: Dims,
    ob: usize,
    lanes: Lanes,
}

impl Job for KernelGrad<'_> {
    fn segments<const T: usize>(
        &self,
        reads: &mut Reads<T>,
        rows: [Option<usize>; T],
        grp: usize,
        qs: Range<usize>,
    ) {
        let d = self.d;
        let at = split(rows, d.cg);
        for m in qs {
            let first = self.lanes.first * d.s * d.c + grp * d.cg;
            let start =
                at.map(|a| a.and_then(|(t, c)| self.idx[m * d.t + t].map(|s| first + s * d.c + c)));
            reads.push(self.x, start, d.s * d.c, self.lanes.count);
        }
    }

    fn weights(&self, grp: usize, b: usize) -> Weights<'_> {
        let (d, ob) = (self.d, self.ob);
        let og = d.og();
        match &self.packed {
            Some(p) => {
                let size = d.p * d.n * ob;
                packed_from(&p[grp][b * size..][..size], d.n, ob, self.lanes.first)
            }
            None => Weights {
                w: &self.g[self.lanes.first * d.p * d.o + grp * og + b * ob..],
                segment: d.o,
                step: d.p * d.o,
            },
        }
    }
}

/// The kernel cotangent (`conv.rs`'s `conv_kernel_grad`) on tiles: rows
/// are kernel elements (tap, input feature), chains run over the output
/// positions and, in each, the batch.
pub(crate) fn kernel_grad(
    isa: Isa,
    x: &[f32],
    g: &[f32],
    idx: &[Option<usize>],
    d: Dims,
) -> Vec<f32> {
    kernel_grad_lanes(isa, x, g, idx, d, Lanes::all(d.n))
}

/// [`kernel_grad`] over the images `lanes` at each output position, in its
/// partial sums.
pub(crate) fn kernel_grad_lanes(
    isa: Isa,
    x: &[f32],
    g: &[f32],
    idx: &[Option<usize>],
    d: Dims,
    lanes: Lanes,
) -> Vec<f32> {
    let og = d.og();
    let ob = Shape::of(isa, og).ob;
    let steps = d.p * d.n;
    if steps == 0 || lanes.count == 0 {
        return vec![0.0; d.t * d.cg * d.o];
    }
    // The cotangent is read where it is (step (m, i) at `(i * P + m) * O`)
    // when a group's outputs are one whole block (measured: 2.0 ms against
    // 2.5 ms packed, for 32 outputs on AVX-512); packed, zero-padded,
    // otherwise (several blocks would read it strided several times).
    let packed = (og != ob).then(|| {
        (0..d.groups)
            .map(|grp| pack(steps, og, ob, |st, j| d.cotangent_row(g, st)[grp * og + j]))
            .collect()
    });
    let job = KernelGrad {
        x,
        g,
        packed,
        idx,
        d,
        ob,
        lanes,
    };
    let layout = Layout {
        rows: d.t * d.cg,
        groups: d.groups,
        width: og,
        segments: d.p,
        len: lanes.count,
        ob,
        tile_k: lanes.tile_k,
    };
    run(isa, &job, layout)
}
