//! The training toolkit's hot paths next to JAX
//! (tools/bench/jax_train_digits.py, same machine, same session): one epoch
//! of the digits recipe (15 steps of 100 examples: forward, backward, AdamW
//! with its schedule) with the example's compiled step, the same epoch with
//! the step run eagerly (`as_jitted(|| value_and_grad(..))`, as the example
//! ran it before it was compiled; no JAX counterpart), and an AdamW update
//! of a 1M-parameter tree.
//!
//! ```text
//! cargo bench --bench train
//! .venv-oracle/bin/python tools/bench/jax_train_digits.py
//! ```

mod common;

#[allow(dead_code)]
#[path = "../examples/train_digits.rs"]
mod train_digits;

use common::{batch_times, fmt};
use criterion::black_box;
use flaxen::data::{digits, Batches};
use flaxen::nn::Module;
use flaxen::optim::{adamw, warmup_cosine_decay_schedule, GradientTransformation};
use flaxen::random::{self, Key};
use flaxen::tensor::{value_and_grad, Tensor, Tree};
use ndarray::{s, Array1};
use train_digits::{batch_inputs, loss, loss_and_grads, Mlp, BATCH, TRAIN};

/// A step of the example's loss, traced and run op by op on every call.
fn eager_step(
    params: &Tree,
    x: Tensor,
    y: &Array1<i32>,
    key: Key,
) -> flaxen::Result<(Tensor, Tree)> {
    let batch = batch_inputs(x, y);
    value_and_grad(|p| loss(p, &batch, std::slice::from_ref(&key)), params)
}

type StepFn = fn(&Tree, Tensor, &Array1<i32>, Key) -> flaxen::Result<(Tensor, Tree)>;

/// Times one epoch with `step` as the JAX script does (batches of ~10 ms:
/// median and best) or, `sustained`, over 600 epochs in a row: the wall
/// time and the CPU time of all the process's threads per epoch (the
/// steadier figures on a shared machine, where a best batch of a program
/// that uses two threads, as XLA does, may have found both cores idle).
fn epoch(name: &str, step: StepFn, sustained: bool) {
    let d = digits::load().unwrap();
    let x = d.images_f32();
    let (xt, yt) = (x.slice(s![..TRAIN, ..]), d.labels.slice(s![..TRAIN]));
    let [pk, dk, sk] = random::split_n(random::key(0));
    let init = Tensor::from_array(xt.slice(s![..1, ..]).to_owned());
    let params0 = Mlp { train: false }.init(pk, init).unwrap().params();
    let tx = adamw(warmup_cosine_decay_schedule(0.0, 3e-3, 50, 450, 1e-5), 1e-4);
    let state0 = tx.init(&params0).unwrap();
    let run = || {
        let (mut params, mut state) = (params0.clone(), state0.clone());
        let batches = Batches::shuffled(xt, yt, BATCH, random::clone(&sk)).unwrap();
        for (t, batch) in batches.enumerate() {
            let key = random::fold_in(random::clone(&dk), t as u32);
            let (_, grads) = step(&params, Tensor::from_array(batch.x), &batch.y, key).unwrap();
            (params, state) = tx.apply_gradients_owned(&grads, state, params).unwrap();
        }
        black_box(params);
    };
    if sustained {
        let n = 600;
        (0..20).for_each(|_| run());
        let (cpu0, wall0) = (common::cpu_seconds(), std::time::Instant::now());
        (0..n).for_each(|_| run());
        let wall = wall0.elapsed().as_secs_f64() / f64::from(n);
        let cpu = (common::cpu_seconds() - cpu0) / f64::from(n);
        println!("train/{name}: wall {}, cpu {}", fmt(wall), fmt(cpu));
        return;
    }
    let (median, best) = batch_times(run);
    println!("train/{name}: median {}, best {}", fmt(median), fmt(best));
}

fn adamw_update() {
    // 1,048,576 parameters in four 512×512 leaves.
    let mut params = Tree::new();
    for i in 0..4 {
        let v: Vec<f32> = (0..512 * 512)
            .map(|j| ((j * 7 + i) % 13) as f32 * 0.01)
            .collect();
        params
            .insert(format!("w{i}"), Tensor::from_vec(v, &[512, 512]).unwrap())
            .unwrap();
    }
    let grads = flaxen::tensor::tree_map(&params, |p| p * 0.5);
    let tx = adamw(1e-3, 1e-4);
    let state = tx.init(&params).unwrap();
    let (median, best) = batch_times(|| {
        black_box(tx.apply_gradients(&grads, &state, &params).unwrap());
    });
    println!(
        "train/adamw_update_1M: median {}, best {}",
        fmt(median),
        fmt(best)
    );
    // As a training loop runs it: the old parameters and state given up,
    // so the update writes over them.
    let mut current = Some((params, state));
    let (median, best) = batch_times(|| {
        let (p, s) = current.take().expect("put back below");
        let (p, s) = tx.apply_gradients_owned(&grads, s, p).unwrap();
        current = Some((black_box(p), s));
    });
    println!(
        "train/adamw_update_1M_in_place: median {}, best {}",
        fmt(median),
        fmt(best)
    );
}

/// Runs the bench named by the first argument that is not an option (all
/// without one): `cargo bench --bench train -- digits_epoch`.
fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name == f);
    if wanted("digits_epoch") {
        epoch("digits_epoch", loss_and_grads, false);
    }
    if wanted("digits_epoch_eager") {
        epoch("digits_epoch_eager", eager_step, false);
    }
    if wanted("digits_epoch_sustained") {
        epoch("digits_epoch_sustained", loss_and_grads, true);
    }
    if wanted("adamw_update_1M") {
        adamw_update();
    }
}
