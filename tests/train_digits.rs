//! The digits recipe against the Flax + optax reference run
//! (tools/oracle/train_digits.py): the data set as scikit-learn loads it,
//! the first epoch's permutation, the initial parameters, the parameters
//! after the first step, every step's loss, the per-epoch lines and the
//! final parameters, bit for bit.

mod common;

#[allow(dead_code)]
#[path = "../examples/train_digits.rs"]
mod train_digits;

use std::collections::BTreeMap;

use flaxen::data::{digits, Batches};
use flaxen::nn::Module;
use flaxen::optim::{adamw, warmup_cosine_decay_schedule, GradientTransformation};
use flaxen::random;
use flaxen::tensor::{Tensor, Tree};
use ndarray::s;
use serde::Deserialize;
use train_digits::{loss_and_grads, Mlp, BATCH, TRAIN};

#[derive(Deserialize)]
struct Array {
    shape: Vec<usize>,
    data: Vec<f32>,
}

#[derive(Deserialize)]
struct Fixture {
    first_image: Vec<u8>,
    labels_head: Vec<i32>,
    label_counts: Vec<usize>,
    perm0: Vec<usize>,
    init_params: BTreeMap<String, Array>,
    params_step1: BTreeMap<String, Array>,
    final_params: BTreeMap<String, Array>,
    losses: Vec<f32>,
    lines: Vec<String>,
}

fn assert_params(got: &Tree, want: &BTreeMap<String, Array>, what: &str) {
    let got = got.paths();
    assert_eq!(got.len(), want.len(), "{what}");
    for (path, t) in got {
        let w = &want[&path];
        assert_eq!(t.shape(), w.shape.as_slice(), "{what} {path}");
        let bits: Vec<u32> = t.to_vec().iter().map(|v| v.to_bits()).collect();
        let wbits: Vec<u32> = w.data.iter().map(|v| v.to_bits()).collect();
        let differ = bits.iter().zip(&wbits).filter(|(a, b)| a != b).count();
        assert_eq!(
            differ,
            0,
            "{what} {path}: {differ} of {} values differ",
            bits.len()
        );
    }
}

#[test]
fn the_data_set_as_scikit_learn_loads_it() {
    let f: Fixture = common::load_fixture("train_digits.json");
    let d = digits::load().unwrap();
    assert_eq!(d.pixels.row(0).to_vec(), f.first_image);
    assert_eq!(d.labels.slice(s![..20]).to_vec(), f.labels_head);
    let counts: Vec<usize> = (0..10)
        .map(|c| d.labels.iter().filter(|&&l| l == c).count())
        .collect();
    assert_eq!(counts, f.label_counts);
}

#[test]
fn steps_match_flax_and_optax() {
    let f: Fixture = common::load_fixture("train_digits.json");
    let d = digits::load().unwrap();
    let x = d.images_f32();
    let (x_train, y_train) = (x.slice(s![..TRAIN, ..]), d.labels.slice(s![..TRAIN]));
    let (x_test, y_test) = (
        x.slice(s![TRAIN.., ..]).to_owned(),
        d.labels.slice(s![TRAIN..]).to_owned(),
    );
    let [params_key, dropout_key, shuffle_key] = random::split_n(random::key(0));
    let first = Tensor::from_array(x_train.slice(s![..1, ..]).to_owned());
    let mut params = Mlp { train: false }
        .init(params_key, first)
        .unwrap()
        .params();
    assert_params(&params, &f.init_params, "init");
    let tx = adamw(warmup_cosine_decay_schedule(0.0, 3e-3, 50, 450, 1e-5), 1e-4);
    let mut state = tx.init(&params).unwrap();
    let mut step = 0usize;
    let mut first_inexact = None;
    let mut worst = 0;
    for epoch in 0..train_digits::EPOCHS {
        let key = random::fold_in(random::clone(&shuffle_key), epoch as u32);
        let batches = Batches::shuffled(x_train, y_train, BATCH, key).unwrap();
        if epoch == 0 {
            assert_eq!(batches.order(), f.perm0.as_slice());
        }
        for batch in batches {
            let key = random::fold_in(random::clone(&dropout_key), step as u32);
            let (loss, grads) =
                loss_and_grads(&params, Tensor::from_array(batch.x), &batch.y, key).unwrap();
            let (got, want) = (loss.item().unwrap(), f.losses[step]);
            if got.to_bits() != want.to_bits() && first_inexact.is_none() {
                first_inexact = Some(step);
            }
            worst = worst.max(common::ulp_distance(got, want));
            (params, state) = tx.apply_gradients(&grads, &state, &params).unwrap();
            if step == 0 {
                assert_params(&params, &f.params_step1, "after step 1");
            }
            step += 1;
        }
        // Every epoch's test accuracy is the reference's.
        let acc = train_digits::accuracy(&params, &x_test, &y_test).unwrap();
        let want = f.lines[epoch].rsplit(' ').next().unwrap();
        assert_eq!(format!("{acc:.4}"), want, "test accuracy of epoch {epoch}");
    }
    // Every loss of the 450 steps is the reference's, bit for bit (XLA's
    // sums of the 128-wide bias cotangents over the batch of 100 are
    // YNNPACK's, in chunks of 16 rows: `tensor::shape::ynn_column_sums`).
    assert_eq!(first_inexact, None, "worst loss distance {worst} ulp");
    assert_params(&params, &f.final_params, "after 450 steps");
}
