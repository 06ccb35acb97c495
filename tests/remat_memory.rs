//! What `Remat` saves: the peak heap of a gradient step through a deep stack
//! of wide residual blocks, with and without remat, measured by a counting
//! allocator (deterministic, unlike timings). Run with `--nocapture` to see
//! the numbers (the book's "Memory: remat" table).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use flaxen::core::{value_and_grad, Result, Scope, Variables};
use flaxen::nn::{Dense, Module, Remat, Scan};
use flaxen::random;
use flaxen::tensor::{Tensor, Tree};

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
const FEATURES: usize = 16;
const HIDDEN: usize = 256;

/// A residual block with a wide hidden layer: its intermediates (the
/// hidden activations) are 16 times its input.
#[derive(Clone)]
struct Block;

impl Module for Block {
    type Input = (Tensor, ());
    type Output = (Tensor, ());
    fn call(&self, s: &Scope<'_>, (x, _): (Tensor, ())) -> Result<(Tensor, ())> {
        let h = s.call(Dense::new(HIDDEN), x.clone())?.tanh();
        Ok((x.add(&s.call(Dense::new(FEATURES), h)?)?, ()))
    }
}

/// `depth` blocks scanned, remat'ed or not.
struct Stack {
    depth: usize,
    remat: bool,
}

impl Module for Stack {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Stack"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let out = if self.remat {
            let scan = Scan::new(Remat::new(Block))
                .variable_axes("params", 0)
                .split_rngs("params", true)
                .length(self.depth);
            s.call_named("blocks", scan, (x, ()))?
        } else {
            let scan = Scan::new(Block)
                .variable_axes("params", 0)
                .split_rngs("params", true)
                .length(self.depth);
            s.call_named("blocks", scan, (x, ()))?
        };
        Ok(out.0)
    }
}

/// Peak heap above the baseline during one gradient step, and the
/// gradients.
fn step(depth: usize, remat: bool) -> (usize, Tree) {
    let x = Tensor::from_vec(
        (0..BATCH * FEATURES)
            .map(|i| ((i * 7919) % 97) as f32 / 97.0 - 0.5)
            .collect(),
        &[BATCH, FEATURES],
    )
    .unwrap();
    let stack = Stack { depth, remat };
    let v = stack.init(random::key(0), x.clone()).unwrap();
    let params = v.params();
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let (_, grads) = value_and_grad(
        |p: &Tree| {
            let v = Variables::new().with("params", p.clone());
            Ok(stack.apply(&v, x.clone(), ())?.square().mean_all())
        },
        &params,
    )
    .unwrap();
    (PEAK.load(Relaxed) - base, grads)
}

#[test]
fn remat_keeps_peak_memory_well_below_the_plain_stack() {
    let depth = 24;
    let (plain, g_plain) = step(depth, false);
    let (remat, g_remat) = step(depth, true);
    println!(
        "peak heap of a gradient step, {depth} blocks: plain {} KiB, remat {} KiB ({:.2}x)",
        plain / 1024,
        remat / 1024,
        remat as f64 / plain as f64
    );
    // The parameters and their gradients are the same in both (2 x 24 x
    // 2 x 256 x 16 floats, about 0.8 MB); the activations kept are not.
    assert!(remat * 2 < plain, "remat {remat} bytes, plain {plain}");
    // Same gradients, bit for bit (the block names differ: ScanBlock vs
    // ScanCheckpointBlock).
    let bits = |t: &Tree| -> Vec<Vec<u32>> {
        t.leaves()
            .iter()
            .map(|x| x.to_vec().iter().map(|v| v.to_bits()).collect())
            .collect()
    };
    assert_eq!(bits(&g_plain), bits(&g_remat));
}
