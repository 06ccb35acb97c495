//! An eager training step (`value_and_grad`: a tape recorded per call,
//! then backpropagated) of a tiny MLP makes a bounded number of heap
//! allocations, so that its cost per step (mostly allocator calls at this
//! size) cannot silently grow back. Counted by a counting allocator
//! (deterministic, unlike timings).

mod common;

use common::counting::{fewest_allocations, filled, Counting};
use flaxen::tensor::{value_and_grad, Tree};

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocations (including reallocations) of one eager step of a ReLU MLP
/// with `sizes`, batch 8, MSE loss (the step of `benches/autodiff.rs`),
/// results included; after two warm-up steps, the fewest of five.
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
    fewest_allocations(5, step)
}

#[test]
fn eager_tiny_step_allocations_are_bounded() {
    let tiny = allocations_per_step(&[2, 3, 2]);
    eprintln!("eager 2-3-2 step: {tiny} allocations");
    assert!(tiny <= 36, "{tiny} allocations per eager step");
}
