//! One training step of examples/cnn_digits.rs's network against Flax
//! (tools/oracle/generate_cnn_step.py): the parameters at init, and the
//! loss and every gradient of the first batch under eager
//! `value_and_grad`, bit for bit. Its convolutions take Eigen's route (1 ->
//! 8 and 8 -> 16 features) and YNNPACK's (the kernels' cotangents over a
//! batch of 100 images).

mod common;
use std::collections::BTreeMap;

use common::{differing, load_fixture, tensor_bits, Expected};
use flaxen::core::{Result, Scope, Variables};
use flaxen::data::digits;
use flaxen::nn::{avg_pool, Conv, Dense, Module, Padding};
use flaxen::optim::losses;
use flaxen::random;
use flaxen::tensor::{
    as_jitted, jit_value_and_grad_with, tree_map2, value_and_grad, Array, Tensor, Tree,
};
use ndarray::s;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    init: BTreeMap<String, Expected>,
    logits: Expected,
    loss: Expected,
    grads: BTreeMap<String, Expected>,
}

/// The example's network (Flax's MNIST CNN, scaled down).
pub struct Cnn;

impl Module for Cnn {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Conv::new(8, &[3, 3]), x)?.relu();
        let x = avg_pool(&x, &[2, 2], Some(&[2, 2]), &Padding::Valid, true)?;
        let x = s.call(Conv::new(16, &[3, 3]), x)?.relu();
        let x = avg_pool(&x, &[2, 2], Some(&[2, 2]), &Padding::Valid, true)?;
        let x = x.reshape(&[x.shape()[0] as isize, -1])?;
        let x = s.call(Dense::new(64), x)?.relu();
        s.call(Dense::new(10), x)
    }
}

/// What differs between `tree` and the fixture's leaves, by path.
fn compare(what: &str, tree: &Tree, want: &BTreeMap<String, Expected>) -> Vec<String> {
    assert_eq!(tree.paths().len(), want.len(), "{what}: leaves");
    want.iter()
        .filter_map(|(path, w)| {
            let got = tree
                .tensor(path)
                .unwrap_or_else(|e| panic!("{what} {path}: {e}"));
            differing(got, w).map(|d| format!("{what} {path}: {d}"))
        })
        .collect()
}

#[test]
fn cnn_training_step_matches_flax() {
    let f: Fixture = load_fixture("cnn_step.json");
    let data = digits::load().unwrap();
    let x = data.images_f32().slice(s![..100, ..]).to_owned();
    let images = Tensor::from_array(x.into_shape_with_order((100, 8, 8, 1)).unwrap().into_dyn());
    let labels = data.labels.slice(s![..100]).to_owned().into_dyn();
    let [params_key, _] = random::split_n(random::key(0));
    let first = images.slice(0, 0, 1).unwrap();
    let params = Cnn.init(params_key, first).unwrap().params();
    let mut bad = compare("init", &params, &f.init);
    let v = Variables::new().with("params", params.clone());
    if let Some(d) = differing(&Cnn.apply(&v, images.clone(), ()).unwrap(), &f.logits) {
        bad.push(format!("logits: {d}"));
    }
    let (loss, grads) = value_and_grad(
        |p| {
            let v = Variables::new().with("params", p.clone());
            let logits = Cnn.apply(&v, images.clone(), ())?;
            Ok(losses::softmax_cross_entropy_with_integer_labels(&logits, &labels)?.mean_all())
        },
        &params,
    )
    .unwrap();
    if let Some(d) = differing(&loss, &f.loss) {
        bad.push(format!("loss: {d}"));
    }
    bad.extend(compare("grad", &grads, &f.grads));
    assert!(bad.is_empty(), "differs from Flax:\n{}", bad.join("\n"));
}

/// The same step compiled (`jit_value_and_grad_with`, the batch and its
/// labels as arguments): the convolutions and window sums are replayed
/// with the routes decided when traced, and every call equals the eager
/// step run as jitted bit for bit over changing parameters and batches.
#[test]
fn the_compiled_cnn_step_replays_the_eager_step() {
    let data = digits::load().unwrap();
    let x = data.images_f32();
    let images = |i: usize| {
        let b = x.slice(s![i * 50..(i + 1) * 50, ..]).to_owned();
        Tensor::from_array(b.into_shape_with_order((50, 8, 8, 1)).unwrap().into_dyn())
    };
    let labels = |i: usize| {
        data.labels
            .slice(s![i * 50..(i + 1) * 50])
            .to_owned()
            .into_dyn()
    };
    let loss = |p: &Tree, b: &Tree| -> Result<Tensor> {
        let v = Variables::new().with("params", p.clone());
        let logits = Cnn.apply(&v, b.tensor("x")?.clone(), ())?;
        Ok(losses::softmax_cross_entropy_with_integer_labels(&logits, b.array("y")?)?.mean_all())
    };
    let mut params = Cnn
        .init(random::key(0), images(0).slice(0, 0, 1).unwrap())
        .unwrap()
        .params();
    let mut step = jit_value_and_grad_with(loss);
    for i in 0..3 {
        let batch = Tree::new()
            .with("x", images(i))
            .with("y", Array::from(labels(i)));
        let (l1, g1) = step.call_with(&params, &batch).unwrap();
        let (l2, g2) = as_jitted(|| value_and_grad(|p| loss(p, &batch), &params)).unwrap();
        assert_eq!(tensor_bits(&l1), tensor_bits(&l2), "loss, call {i}");
        for ((path, a), (_, b)) in g1.paths().into_iter().zip(g2.paths()) {
            assert_eq!(tensor_bits(a), tensor_bits(b), "{path}, call {i}");
        }
        params = tree_map2(&params, &g1, |p, g| Ok(p - &(g * 0.1))).unwrap();
    }
    assert!(step.is_compiled(), "a convolutional step is replayed");
}
