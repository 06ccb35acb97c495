//! A compiled step replays without allocating per operation: a call
//! allocates only its results (the gradient tree's list of tensors; the
//! loss and the gradients reuse the plan's buffers), so deeper
//! models with more operations allocate no more per call. Counted by a
//! counting allocator (deterministic, unlike timings).

mod common;

use std::sync::{Mutex, MutexGuard};

use common::counting::{fewest_allocations, filled, Counting};
use flaxen::core::{Scope, Variables};
use flaxen::nn::{
    avg_pool, max_pool, Conv, Dense, GRUCell, LSTMCell, Module, Padding, RecurrentCell, RNN,
};
use flaxen::optim::losses;
use flaxen::random;
use flaxen::tensor::{as_jitted, jit_value_and_grad_with, Tensor, Tree};

#[global_allocator]
static ALLOC: Counting = Counting;

/// Held by each test: allocations are counted process-wide, so the tests
/// of this binary run one at a time (another test's allocations would
/// count against the call measured).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Waits for the other tests of this binary to finish.
fn alone() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

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
    let _alone = alone();
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

/// A small CNN (two convolutions, an average and a maximum pool, a dense
/// layer).
struct SmallCnn;

impl Module for SmallCnn {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> flaxen::Result<Tensor> {
        let x = s.call(Conv::new(4, &[3, 3]), x)?.relu();
        let x = avg_pool(&x, &[2, 2], Some(&[2, 2]), &Padding::Valid, true)?;
        let x = s.call(Conv::new(6, &[3, 3]), x)?.relu();
        let x = max_pool(&x, &[2, 2], Some(&[2, 2]), &Padding::Valid)?;
        let x = x.reshape(&[x.shape()[0] as isize, -1])?;
        s.call(Dense::new(3), x)
    }
}

/// Allocations of one compiled call of `loss` over `params` and `batch`
/// (as [`allocations_with`] counts them), `None` when the step is not
/// compiled (it runs eagerly).
fn allocations_of(
    loss: impl Fn(&Tree, &Tree) -> flaxen::Result<Tensor> + 'static,
    params: &Tree,
    batch: &Tree,
) -> Option<usize> {
    let mut step = jit_value_and_grad_with(loss);
    drop(step.call_with(params, batch).unwrap());
    drop(step.call_with(params, batch).unwrap());
    step.is_compiled()
        .then(|| fewest_allocations(5, || step.call_with(params, batch).unwrap()))
}

/// The soft cross-entropy of `logits` against labels `y`, averaged: the
/// fused kernel in a compiled step.
fn soft_loss(logits: &Tensor, b: &Tree) -> flaxen::Result<Tensor> {
    Ok(losses::softmax_cross_entropy(logits, b.tensor("y")?)?.mean_all())
}

/// A compiled step through window sums and maxima (`avg_pool`,
/// `max_pool`), a dense layer and the fused soft cross-entropy (kernels
/// replayed into the plan's buffers and scratch) allocates what the MLP's
/// does.
#[test]
fn compiled_pool_step_allocates_only_its_results() {
    let _alone = alone();
    let shallow = allocations_per_call(&[2, 3, 2]);
    let params = Tree::new()
        .with("scale", filled(&[2, 10, 10, 2], 3))
        .with("kernel", filled(&[8, 3], 1));
    let batch = Tree::new()
        .with("x", filled(&[2, 10, 10, 2], 2))
        .with("y", filled(&[2, 3], 8));
    let pooled = allocations_of(
        |p: &Tree, b: &Tree| {
            let x = b.tensor("x")?.mul(p.tensor("scale")?)?;
            let x = avg_pool(&x, &[2, 2], Some(&[2, 2]), &Padding::Valid, true)?;
            let x = max_pool(&x, &[2, 2], Some(&[2, 2]), &Padding::Valid)?;
            let logits = x.reshape(&[2, -1])?.matmul(p.tensor("kernel")?)?;
            soft_loss(&logits, b)
        },
        &params,
        &batch,
    );
    assert_eq!(
        Some(shallow),
        pooled,
        "a pooling step allocates per operation"
    );
}

/// KNOWN: a compiled CNN step still allocates per convolution pass: the
/// convolutions' routes (here the register tiles of `conv_fast` and
/// oneDNN's matrix-vector kernel; Eigen's and YNNPACK's likewise) pack
/// their operands and run their tiles with scratch allocated per call.
/// Fails once they do not, to be turned into an equality.
#[test]
fn compiled_cnn_step_allocates_per_convolution_known() {
    let _alone = alone();
    let shallow = allocations_per_call(&[2, 3, 2]);
    let x = filled(&[2, 10, 10, 1], 7);
    let params = SmallCnn
        .init(random::key(0), x.slice(0, 0, 1).unwrap())
        .unwrap()
        .params();
    let batch = Tree::new().with("x", x).with("y", filled(&[2, 3], 8));
    let cnn = allocations_of(
        |p: &Tree, b: &Tree| {
            let v = Variables::new().with("params", p.clone());
            soft_loss(&SmallCnn.apply(&v, b.tensor("x")?.clone(), ())?, b)
        },
        &params,
        &batch,
    )
    .expect("the CNN step is compiled");
    assert!(
        cnn > shallow,
        "the CNN step allocates only its results ({cnn}): no longer KNOWN"
    );
}

/// KNOWN: a step through `nn.RNN` is not compiled (the scan's slices and
/// the cells' `index_axis` of their stacked state are not replayable), so
/// the LSTM and GRU state updates' kernels are replayed only where a step
/// records them directly. Fails once it is compiled, to be turned into an
/// allocation count.
#[test]
fn rnn_steps_are_not_compiled_known() {
    let _alone = alone();
    fn allocations<C: RecurrentCell + Clone + 'static>(cell: C) -> Option<usize> {
        let rnn = RNN::new(cell);
        let x = filled(&[2, 4, 3], 9);
        let params = rnn.init(random::key(0), x.clone().into()).unwrap().params();
        let batch = Tree::new().with("x", x);
        allocations_of(
            move |p: &Tree, b: &Tree| {
                let v = Variables::new().with("params", p.clone());
                let (_, y) = rnn.apply(&v, b.tensor("x")?.clone().into(), ())?;
                Ok(y.square().sum_all())
            },
            &params,
            &batch,
        )
    }
    assert_eq!(allocations(LSTMCell::new(4)), None, "LSTM: no longer KNOWN");
    assert_eq!(allocations(GRUCell::new(4)), None, "GRU: no longer KNOWN");
}

/// A sum over some axes (a mean over the batch, not fused with a
/// product) replays without allocating.
#[test]
fn compiled_sum_over_axes_allocates_nothing() {
    let _alone = alone();
    let shallow = allocations_per_call(&[2, 3, 2]);
    let params = Tree::new().with("w", filled(&[3, 4], 1));
    let batch = Tree::new().with("x", filled(&[5, 3], 2));
    let mean = |axes: &'static [isize]| {
        allocations_of(
            move |p: &Tree, b: &Tree| {
                let h = b.tensor("x")?.matmul(p.tensor("w")?)?.tanh();
                let h = h.reshape(&[5, 2, 2])?;
                Ok(h.mean(axes, false)?.exp().sum_all())
            },
            &params,
            &batch,
        )
    };
    // One axis, not the last; two axes.
    assert_eq!(Some(shallow), mean(&[0]), "a sum over one axis allocates");
    assert_eq!(
        Some(shallow),
        mean(&[0, 2]),
        "a sum over two axes allocates"
    );
}
