//! Scan's memory grows linearly with depth: the peak heap of `apply` and of
//! a gradient step through `Scan` over `depth` residual blocks, measured by
//! a counting allocator (deterministic, unlike timings). Run with
//! `--nocapture` to see the numbers (the book's "What lifting costs" table).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use flaxen::core::{value_and_grad, Result, Scope, Variables};
use flaxen::nn::{Dense, Module, Scan};
use flaxen::random;
use flaxen::tensor::Tensor;

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(live, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const BATCH: usize = 32;
const FEATURES: usize = 64;

struct Block;

impl Module for Block {
    type Input = (Tensor, ());
    type Output = (Tensor, ());
    fn call(&self, s: &Scope<'_>, (x, _): (Tensor, ())) -> Result<(Tensor, ())> {
        let h = s.call(Dense::new(FEATURES), x.clone())?.relu();
        Ok((x.add(&h)?, ()))
    }
}

fn scan(depth: usize) -> Scan<Block> {
    Scan::new(Block)
        .variable_axes("params", 0)
        .split_rngs("params", true)
        .length(depth)
}

/// Heap bytes above the starting point at the peak of `f`.
fn peak_of(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    f();
    PEAK.load(Relaxed) - base
}

/// (apply peak, gradient-step peak) for `depth` blocks.
fn measure(depth: usize) -> (usize, usize) {
    let x = Tensor::from_array(random::normal(random::key(1), &[BATCH, FEATURES]).unwrap());
    let v: Variables = scan(depth).init(random::key(0), (x.clone(), ())).unwrap();
    let apply = peak_of(|| {
        scan(depth).apply(&v, (x.clone(), ()), ()).unwrap();
    });
    let grad = peak_of(|| {
        value_and_grad(
            |p| {
                let vars = Variables::new().with("params", p.clone());
                Ok(scan(depth)
                    .apply(&vars, (x.clone(), ()), ())?
                    .0
                    .square()
                    .mean_all())
            },
            &v.params(),
        )
        .unwrap();
    });
    (apply, grad)
}

#[test]
fn scan_memory_is_linear_in_depth() {
    // One thread: the matmul thread pool's own allocations stay out. Its
    // worker is started and settled before anything is measured: it
    // allocates when it first runs, which on a loaded machine could fall
    // inside a measurement (a flaky peak, seen about once in 40 runs).
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .expect("the first use of the global pool");
    rayon::broadcast(|_| ());
    let depths = [8, 16, 32, 64, 128];
    // Warm-up: per-thread caches (product routes, tape spares) are filled
    // on first use and would count against the first depth only.
    measure(depths[0]);
    let peaks: Vec<(usize, usize)> = depths.iter().map(|&d| measure(d)).collect();
    let block_params = (FEATURES * FEATURES + FEATURES) * 4;
    let activation = BATCH * FEATURES * 4;
    println!("depth | apply peak | gradient-step peak (bytes; one block's params {block_params}, one activation {activation})");
    for (d, (a, g)) in depths.iter().zip(&peaks) {
        println!("{d:5} | {a:10} | {g:10}");
    }
    for w in peaks.windows(2).zip(depths.windows(2)) {
        let ([(a0, g0), (a1, g1)], [d0, d1]) = w else {
            unreachable!()
        };
        let steps = d1 - d0;
        // Apply holds one step's activations at a time: no tensor outlives
        // its step (each is >= 8 KB here); what grows is each step's
        // bookkeeping (its key and make_rng counters, < 1 KB).
        let apply_per_step = (*a1 as f64 - *a0 as f64) / steps as f64;
        assert!(
            apply_per_step < 1024.0,
            "apply peak grew from {a0} to {a1} bytes between depths {d0} and {d1}"
        );
        // A gradient step keeps each step's activations and produces one
        // gradient per parameter: per extra step, at most the step's
        // parameter gradients plus a few activations, and no more.
        let per_step = (*g1 as f64 - *g0 as f64) / steps as f64;
        assert!(
            per_step <= (2 * block_params + 8 * activation) as f64,
            "gradient peak grows by {per_step} bytes per step between depths {d0} and {d1}"
        );
    }
    // Linear: the growth per step is the same between every pair of depths
    // (within 10%).
    let slopes: Vec<f64> = peaks
        .windows(2)
        .zip(depths.windows(2))
        .map(|(p, d)| (p[1].1 as f64 - p[0].1 as f64) / (d[1] - d[0]) as f64)
        .collect();
    let (lo, hi) = slopes
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &s| (lo.min(s), hi.max(s)));
    assert!(hi <= lo * 1.1, "gradient peak per step varies: {slopes:?}");
}
