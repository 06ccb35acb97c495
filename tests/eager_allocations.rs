//! An eager training step (`value_and_grad`: a tape recorded per call,
//! then backpropagated) of a tiny MLP makes a bounded number of heap
//! allocations, so that its cost per step (mostly allocator calls at this
//! size) cannot silently grow back. Counted by a counting allocator
//! (deterministic, unlike timings).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use flaxen::tensor::{value_and_grad, Tensor, Tree};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the counter only observes calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn filled(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// Allocations (including reallocations) of one eager step of a ReLU MLP
/// with `sizes`, batch 8, MSE loss (the step of `benches/autodiff.rs`),
/// results included; after two warm-up steps.
fn allocations_per_step(sizes: &[usize]) -> usize {
    let mut params = Tree::new();
    for (i, w) in sizes.windows(2).enumerate() {
        let layer = Tree::new()
            .with("kernel", filled(&[w[0], w[1]], 2 * i as u32))
            .with("bias", filled(&[w[1]], 2 * i as u32 + 1));
        params.insert(format!("Dense_{i}"), layer).unwrap();
    }
    let x = filled(&[8, sizes[0]], 100);
    let y = filled(&[8, *sizes.last().unwrap()], 101);
    let layers = sizes.len() - 1;
    let paths: Vec<(String, String)> = (0..layers)
        .map(|i| (format!("Dense_{i}/kernel"), format!("Dense_{i}/bias")))
        .collect();
    let step = || {
        value_and_grad(
            |p| {
                let mut h = x.clone();
                for (i, (kernel, bias)) in paths.iter().enumerate() {
                    h = h.matmul(p.tensor(kernel)?)?.add(p.tensor(bias)?)?;
                    if i + 1 < layers {
                        h = h.relu();
                    }
                }
                Ok(h.sub(&y)?.square().mean_all())
            },
            &params,
        )
        .unwrap()
    };
    drop(step());
    drop(step());
    let before = ALLOCATIONS.load(Relaxed);
    let out = step();
    let after = ALLOCATIONS.load(Relaxed);
    drop(out);
    after - before
}

#[test]
fn eager_tiny_step_allocations_are_bounded() {
    let tiny = allocations_per_step(&[2, 3, 2]);
    eprintln!("eager 2-3-2 step: {tiny} allocations");
    assert!(tiny <= 36, "{tiny} allocations per eager step");
}
