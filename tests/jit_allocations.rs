//! A compiled step replays without allocating per operation: a call
//! allocates only its results (the gradient tree's list of tensors; the
//! loss and the gradients reuse the plan's buffers), so deeper
//! models with more operations allocate no more per call. Counted by a
//! counting allocator (deterministic, unlike timings).

mod common;

use common::counting::{fewest_allocations, filled, Counting};
use flaxen::tensor::{as_jitted, jit_value_and_grad_with, Tree};

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocations of one compiled call of a ReLU MLP with `sizes`, batch 8,
/// after the trace (the results of the previous call dropped): the fewest
/// of five calls, so that a pool thread starting up is not counted. With
/// `per_column`, the loss first averages the squared errors over the batch
/// in a compiled region (a partial sum fused with its square), then sums
/// the columns.
fn allocations_with(sizes: &[usize], per_column: bool) -> usize {
    let mut params = Tree::new();
    for (i, w) in sizes.windows(2).enumerate() {
        let layer = Tree::new()
            .with("kernel", filled(&[w[0], w[1]], 2 * i as u32))
            .with("bias", filled(&[w[1]], 2 * i as u32 + 1));
        params.insert(format!("Dense_{i}"), layer).unwrap();
    }
    let batch = Tree::new()
        .with("x", filled(&[8, sizes[0]], 100))
        .with("y", filled(&[8, *sizes.last().unwrap()], 101));
    let layers = sizes.len() - 1;
    let mut step = jit_value_and_grad_with(move |p: &Tree, b: &Tree| {
        let mut h = b.tensor("x")?.clone();
        for i in 0..layers {
            let layer = p.subtree(&format!("Dense_{i}")).expect("a layer");
            h = h
                .matmul(layer.tensor("kernel")?)?
                .add(layer.tensor("bias")?)?;
            if i + 1 < layers {
                h = h.relu();
            }
        }
        if per_column {
            // In a compiled region: the mean fused with the square.
            return as_jitted(|| {
                let squares = h.sub(b.tensor("y")?)?.square();
                Ok(squares.mean(&[0], false)?.sum_all())
            });
        }
        Ok(h.sub(b.tensor("y")?)?.square().mean_all())
    });
    drop(step.call_with(&params, &batch).unwrap());
    drop(step.call_with(&params, &batch).unwrap());
    assert!(step.is_compiled());
    fewest_allocations(5, || step.call_with(&params, &batch).unwrap())
}

/// [`allocations_with`] of the plain loss.
fn allocations_per_call(sizes: &[usize]) -> usize {
    allocations_with(sizes, false)
}

#[test]
fn compiled_replay_allocates_only_its_results() {
    let shallow = allocations_per_call(&[2, 3, 2]);
    let deep = allocations_per_call(&[2, 3, 3, 3, 3, 3, 2]);
    // Small products summed per output and larger ones through the blocked
    // kernels (B packed for the input gradients) reuse the plan's buffers.
    let wide = allocations_per_call(&[40, 64, 64, 10]);
    // Tiny products of more than 8 terms (`8 x 12 x 4`) gather into the
    // plan's scratch.
    let long = allocations_per_call(&[12, 4, 2]);
    assert_eq!(
        shallow, deep,
        "allocations grow with the number of operations"
    );
    assert_eq!(shallow, wide, "allocations depend on the products' sizes");
    assert_eq!(shallow, long, "allocations depend on the products' sizes");
    // A sum over the batch fused with its square reads the factors in
    // place.
    let per_column = allocations_with(&[2, 3, 2], true);
    assert_eq!(shallow, per_column, "a fused partial sum allocates");
    // The one allocation: the gradient tree's list of tensors.
    assert!(shallow <= 1, "{shallow} allocations per call");
}
