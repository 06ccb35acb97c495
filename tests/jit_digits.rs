//! The digits recipe's training step compiled (`jax.jit` of
//! `value_and_grad(loss_fn)`, labels and dropout keys as arguments): the
//! replay equals the eager step bit for bit over changing parameters,
//! batches, labels and keys, and a compiled call given bad labels fails
//! with the eager loss's typed error.

#[allow(dead_code)]
#[path = "../examples/train_digits.rs"]
mod train_digits;

use flaxen::core::{Rngs, Variables};
use flaxen::data::{digits, Batches};
use flaxen::nn::Module;
use flaxen::optim::{adamw, losses, warmup_cosine_decay_schedule, GradientTransformation};
use flaxen::random::{self, Key};
use flaxen::tensor::{
    as_jitted, jit_value_and_grad_with_keys, value_and_grad, Array, Tensor, TensorError, Tree,
};
use ndarray::{s, Array1, Array2};
use std::cell::Cell;
use train_digits::{batch_inputs, loss, Mlp, BATCH, TRAIN};

mod common;
use common::tensor_bits as bits;

/// The step as `examples/train_digits.rs` ran it before it was compiled:
/// eagerly under `as_jitted`, the labels a captured array.
fn eager_step(params: &Tree, x: Tensor, y: &Array1<i32>, key: Key) -> (Tensor, Tree) {
    let labels = y.clone().into_dyn();
    as_jitted(|| {
        value_and_grad(
            |p| {
                let variables = Variables::new().with("params", p.clone());
                let rngs = Rngs::from([("dropout", key.clone())]);
                let logits = Mlp { train: true }.apply(&variables, x.clone(), rngs)?;
                let loss = losses::softmax_cross_entropy_with_integer_labels(&logits, &labels)?;
                Ok(loss.mean_all())
            },
            params,
        )
    })
    .unwrap()
}

fn data() -> (Array2<f32>, Array1<i32>) {
    let d = digits::load().unwrap();
    let x = d.images_f32().slice(s![..TRAIN, ..]).to_owned();
    (x, d.labels.slice(s![..TRAIN]).to_owned())
}

fn init(x: &Array2<f32>) -> Tree {
    let first = Tensor::from_array(x.slice(s![..1, ..]).to_owned());
    Mlp { train: false }
        .init(random::key(0), first)
        .unwrap()
        .params()
}

#[test]
fn the_compiled_step_equals_the_eager_step_bit_for_bit() {
    let (x, y) = data();
    let mut params = init(&x);
    let tx = adamw(warmup_cosine_decay_schedule(0.0, 3e-3, 5, 40, 1e-5), 1e-4);
    let mut state = tx.init(&params).unwrap();
    // Counts the traces: a replay does not run the function.
    let traces = Cell::new(0);
    let mut step = jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, k: &[Key]| {
        traces.set(traces.get() + 1);
        loss(p, b, k)
    });
    let dropout = random::key(3);
    let mut t = 0u32;
    let mut losses = Vec::new();
    for epoch in 0..2u32 {
        let shuffle = random::fold_in(random::key(2), epoch);
        for batch in Batches::shuffled(x.view(), y.view(), BATCH, shuffle)
            .unwrap()
            .take(4)
        {
            let key = random::fold_in(random::clone(&dropout), t);
            let inputs = batch_inputs(Tensor::from_array(batch.x.clone()), &batch.y);
            let (l, g) = step
                .call_with_keys(&params, &inputs, std::slice::from_ref(&key))
                .unwrap();
            let (le, ge) = eager_step(&params, Tensor::from_array(batch.x), &batch.y, key);
            assert_eq!(bits(&l), bits(&le), "loss of step {t}");
            for ((path, a), b) in g.paths().into_iter().zip(ge.leaves()) {
                assert_eq!(bits(a), bits(b), "gradient of {path} at step {t}");
            }
            // The replay's own step, not the first trace's.
            assert!(step.is_compiled(), "step {t}");
            losses.push(l.item().unwrap());
            (params, state) = tx.apply_gradients(&g, &state, &params).unwrap();
            t += 1;
        }
    }
    assert_eq!(traces.get(), 1, "traced once, replayed after");
    // Every batch, label set and mask was new.
    losses.dedup();
    assert_eq!(losses.len(), 8);
}

#[test]
fn the_example_step_is_compiled_and_replays_new_labels() {
    let (x, y) = data();
    let params = init(&x);
    let xb = Tensor::from_array(x.slice(s![..BATCH, ..]).to_owned());
    let key = random::key(9);
    let traces = Cell::new(0);
    let mut step = jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, k: &[Key]| {
        traces.set(traces.get() + 1);
        loss(p, b, k)
    });
    let y1 = y.slice(s![..BATCH]).to_owned();
    // Same images, other labels: only the labels argument changes.
    let y2 = y1.mapv(|l| (l + 3) % 10);
    for labels in [&y1, &y2, &y1] {
        let inputs = batch_inputs(xb.clone(), labels);
        let (l, g) = step
            .call_with_keys(&params, &inputs, std::slice::from_ref(&key))
            .unwrap();
        let (le, ge) = eager_step(&params, xb.clone(), labels, key.clone());
        assert_eq!(bits(&l), bits(&le));
        assert_eq!(bits(&g.leaves()[0]), bits(&ge.leaves()[0]));
        assert!(step.is_compiled());
    }
    assert_eq!(traces.get(), 1);
}

#[test]
fn bad_labels_in_a_compiled_call_are_typed_errors() {
    let (x, y) = data();
    let params = init(&x);
    let xb = Tensor::from_array(x.slice(s![..BATCH, ..]).to_owned());
    let key = [random::key(1)];
    let mut step = jit_value_and_grad_with_keys(loss);
    let good = y.slice(s![..BATCH]).to_owned();
    step.call_with_keys(&params, &batch_inputs(xb.clone(), &good), &key)
        .unwrap();
    step.call_with_keys(&params, &batch_inputs(xb.clone(), &good), &key)
        .unwrap();
    assert!(step.is_compiled());
    let eager_error = |labels: &Array1<i32>| {
        let logits = Tensor::zeros(&[BATCH, 10]);
        losses::softmax_cross_entropy_with_integer_labels(&logits, labels).unwrap_err()
    };
    // A label out of range, in the replay: the eager loss's error.
    for bad in [10, -1, i32::MAX] {
        let mut labels = good.clone();
        labels[37] = bad;
        let err = step
            .call_with_keys(&params, &batch_inputs(xb.clone(), &labels), &key)
            .unwrap_err();
        assert_eq!(err, eager_error(&labels), "label {bad}");
        assert!(err
            .to_string()
            .contains(&format!("label {bad} is outside [0, 10)")));
    }
    // Labels of the wrong shape: traced again, and the loss says so.
    let short = good.slice(s![..BATCH - 1]).to_owned();
    let err = step
        .call_with_keys(&params, &batch_inputs(xb.clone(), &short), &key)
        .unwrap_err();
    assert!(matches!(
        err,
        flaxen::Error::Tensor {
            source: TensorError::Incompatible { .. },
            ..
        }
    ));
    // Labels of the wrong dtype.
    let inputs = Tree::new()
        .with("x", xb.clone())
        .with("y", Array::from(good.mapv(|l| l as u32).into_dyn()));
    let err = step.call_with_keys(&params, &inputs, &key).unwrap_err();
    assert!(err.to_string().contains("not int32"), "{err}");
    // Good labels again: compiled and right.
    let inputs = batch_inputs(xb.clone(), &good);
    step.call_with_keys(&params, &inputs, &key).unwrap();
    let (l, _) = step.call_with_keys(&params, &inputs, &key).unwrap();
    let (le, _) = eager_step(&params, xb, &good, key[0].clone());
    assert!(step.is_compiled());
    assert_eq!(bits(&l), bits(&le));
}

#[test]
fn labels_copied_out_of_the_inputs_are_baked_in_and_checked() {
    // A step that copies its labels (not by reference) bakes them in, as
    // jax.jit bakes in a captured constant: calls with other labels trace
    // again rather than replaying stale ones.
    let (x, y) = data();
    let params = init(&x);
    let xb = Tensor::from_array(x.slice(s![..BATCH, ..]).to_owned());
    let key = [random::key(1)];
    let traces = Cell::new(0);
    let mut step = jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, k: &[Key]| {
        traces.set(traces.get() + 1);
        let labels = b.array("y")?.as_i32().unwrap().to_owned();
        let variables = Variables::new().with("params", p.clone());
        let rngs = Rngs::from([("dropout", k[0].clone())]);
        let logits = Mlp { train: true }.apply(&variables, b.tensor("x")?.clone(), rngs)?;
        Ok(losses::softmax_cross_entropy_with_integer_labels(&logits, &labels)?.mean_all())
    });
    let y1 = y.slice(s![..BATCH]).to_owned();
    let y2 = y1.mapv(|l| (l + 1) % 10);
    let mut seen = Vec::new();
    for labels in [&y1, &y1, &y2, &y2] {
        let (l, _) = step
            .call_with_keys(&params, &batch_inputs(xb.clone(), labels), &key)
            .unwrap();
        seen.push(l.item().unwrap());
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[2], seen[3]);
    assert_ne!(seen[1], seen[2]);
    // Traced for y1, replayed, traced again for y2, replayed.
    assert_eq!(traces.get(), 2);
    assert!(step.is_compiled());
}
