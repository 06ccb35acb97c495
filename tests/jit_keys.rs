//! Compiled steps with key arguments (`jax.jit` of a step that takes PRNG
//! keys): dropout masks drawn inside are drawn again on every call, the
//! numbers equal the eager step's with the same keys, bit for bit, and a
//! step whose randomness the replay could not repeat runs eagerly instead
//! of replaying stale draws.

mod common;

use common::Bits;

use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::random::{self, Key};
use flaxen::tensor::{
    as_jitted, jit_value_and_grad_with, jit_value_and_grad_with_keys, value_and_grad, Tensor, Tree,
};

/// Dense(32) -> relu -> Dropout(0.3) -> Dense(4), as the digits model.
struct Mlp;

impl Module for Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.child(Dense::new(32))?.call(x)?.relu();
        let h = s.child(Dropout::new(0.3))?.call(h)?;
        s.child(Dense::new(4))?.call(h)
    }
}

fn loss(p: &Tree, b: &Tree, keys: &[Key]) -> flaxen::Result<Tensor> {
    let v = Variables::new().with("params", p.clone());
    let rngs = Rngs::none().with("dropout", keys[0].clone());
    let out = Mlp.apply(&v, b.tensor("x")?.clone(), rngs)?;
    Ok(out.sub(b.tensor("y")?)?.square().mean_all())
}

fn setup() -> (Tree, Tree) {
    let [kp, kx, ky] = random::split(random::key(1), 3)
        .unwrap()
        .into_array()
        .unwrap();
    let x = Tensor::from_array(random::normal(kx, &[16, 8]).unwrap());
    let y = Tensor::from_array(random::normal(ky, &[16, 4]).unwrap());
    let params = Mlp.init(kp, x.clone()).unwrap().params();
    (params, Tree::new().with("x", x).with("y", y))
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

fn assert_same(a: &(Tensor, Tree), b: &(Tensor, Tree)) {
    assert_eq!(bits(&a.0), bits(&b.0));
    for (x, y) in a.1.leaves().iter().zip(b.1.leaves()) {
        assert_eq!(bits(x), bits(y));
    }
}

#[test]
fn dropout_masks_are_drawn_again_on_every_call() {
    let (params, batch) = setup();
    let mut step = jit_value_and_grad_with_keys(loss);
    let mut losses = Vec::new();
    for t in 0..5 {
        let keys = [random::fold_in(random::key(7), t)];
        let compiled = step.call_with_keys(&params, &batch, &keys).unwrap();
        let eager = as_jitted(|| value_and_grad(|p| loss(p, &batch, &keys), &params)).unwrap();
        assert_same(&compiled, &eager);
        losses.push(compiled.0.item().unwrap());
    }
    assert!(step.is_compiled());
    // Different keys, different masks.
    losses.dedup();
    assert_eq!(losses.len(), 5);
}

#[test]
fn inside_as_jitted_the_replay_equals_the_jitted_eager_numbers() {
    let (params, batch) = setup();
    let jitted = |p: &Tree, b: &Tree, k: &[Key]| as_jitted(|| loss(p, b, k));
    let mut step = jit_value_and_grad_with_keys(jitted);
    for t in 0..3 {
        let keys = [random::fold_in(random::key(3), t)];
        let compiled = step.call_with_keys(&params, &batch, &keys).unwrap();
        let eager = as_jitted(|| value_and_grad(|p| loss(p, &batch, &keys), &params)).unwrap();
        assert_same(&compiled, &eager);
    }
    assert!(step.is_compiled());
}

#[test]
fn randomness_the_replay_cannot_repeat_runs_eagerly() {
    let (params, batch) = setup();
    // A key captured from outside: as under jax.jit, a constant; but here
    // it reaches Dropout through make_rng from a stream the step does not
    // take as an argument, so the step is not replayed.
    let outside = random::key(5);
    let mut step = jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, _: &[Key]| {
        loss(p, b, std::slice::from_ref(&outside))
    });
    for _ in 0..2 {
        let keys = [random::key(9)];
        let out = step.call_with_keys(&params, &batch, &keys).unwrap();
        let eager = as_jitted(|| {
            value_and_grad(|p| loss(p, &batch, std::slice::from_ref(&outside)), &params)
        })
        .unwrap();
        assert_same(&out, &eager);
    }
    assert!(!step.is_compiled());
    // A derived key used outside a layer's draw.
    let mut step = jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, keys: &[Key]| {
        struct Noisy;
        impl Module for Noisy {
            type Input = Tensor;
            type Output = Tensor;
            fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
                let key = s.make_rng("noise")?;
                let noise = Tensor::from_array(random::normal(key, x.shape())?);
                Ok(x.add(&noise)?)
            }
        }
        let rngs = Rngs::none().with("noise", keys[0].clone());
        let scale = p.tensor("Dense_0/bias")?.slice(0, 0, 8)?;
        let y = Noisy.apply(&Variables::new(), b.tensor("x")?.mul(&scale)?, rngs)?;
        Ok(y.sum_all())
    });
    let a = step
        .call_with_keys(&params, &batch, &[random::key(1)])
        .unwrap();
    let b = step
        .call_with_keys(&params, &batch, &[random::key(2)])
        .unwrap();
    assert!(!step.is_compiled());
    assert_ne!(bits(&a.0), bits(&b.0));
}

#[test]
fn a_step_without_keys_still_bakes_in_captured_randomness_as_jax_does() {
    let (params, batch) = setup();
    let key = random::key(4);
    let mut step =
        jit_value_and_grad_with(|p: &Tree, b: &Tree| loss(p, b, std::slice::from_ref(&key)));
    let first = step.call_with(&params, &batch).unwrap();
    let second = step.call_with(&params, &batch).unwrap();
    assert_same(&first, &second);
}

#[derive(serde::Deserialize)]
struct FlaxStep {
    loss: Vec<u32>,
    grads: std::collections::BTreeMap<String, Bits>,
}

#[derive(serde::Deserialize)]
struct FlaxFixture {
    x: Vec<u32>,
    y: Vec<u32>,
    params: std::collections::BTreeMap<String, Bits>,
    steps: Vec<FlaxStep>,
}

/// Dense(32) -> relu -> Dropout(0.3) -> Dense(2), tools/oracle/generate_jit_keys.py's model.
struct FlaxMlp;

impl Module for FlaxMlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.child(Dense::new(32))?.call(x)?.relu();
        let h = s.child(Dropout::new(0.3))?.call(h)?;
        s.child(Dense::new(2))?.call(h)
    }
}

#[test]
fn a_compiled_step_with_dropout_equals_flaxs_jitted_step() {
    let fx: FlaxFixture = common::load_fixture("jit_keys.json");
    let tensor = |bits: &[u32], shape: &[usize]| {
        Tensor::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect(), shape).unwrap()
    };
    let batch = Tree::new()
        .with("x", tensor(&fx.x, &[12, 8]))
        .with("y", tensor(&fx.y, &[12, 2]));
    let mut params = Tree::new();
    for (path, b) in &fx.params {
        let (module, name) = path.split_once('/').unwrap();
        let mut layer = params.subtree(module).unwrap_or_default();
        layer.insert(name, b.tensor()).unwrap();
        params.insert(module, layer).unwrap();
    }
    let loss = |p: &Tree, b: &Tree, keys: &[Key]| {
        as_jitted(|| {
            let v = Variables::new().with("params", p.clone());
            let rngs = Rngs::none().with("dropout", keys[0].clone());
            let out = FlaxMlp.apply(&v, b.tensor("x")?.clone(), rngs)?;
            Ok(out.sub(b.tensor("y")?)?.square().sum_all())
        })
    };
    let mut step = jit_value_and_grad_with_keys(loss);
    for (t, expected) in fx.steps.iter().enumerate() {
        let keys = [random::fold_in(random::key(7), t as u32)];
        let (l, grads) = step.call_with_keys(&params, &batch, &keys).unwrap();
        assert_eq!(bits(&l), expected.loss, "loss of step {t}");
        for (path, b) in &expected.grads {
            assert_eq!(
                bits(grads.tensor(path).unwrap()),
                b.bits,
                "{path} at step {t}"
            );
        }
    }
    assert!(step.is_compiled());
}

#[test]
fn another_number_of_keys_traces_again() {
    let (params, batch) = setup();
    // The function reads as many keys as it gets; one or two streams.
    let mut step = jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, keys: &[Key]| {
        let second = keys.get(1).cloned().unwrap_or_else(|| keys[0].clone());
        let total = loss(p, b, &keys[..1])?.add(&loss(p, b, std::slice::from_ref(&second))?)?;
        Ok(total)
    });
    let one = [random::key(3)];
    let two = [random::key(3), random::key(4)];
    for keys in [&one[..], &two[..], &one[..]] {
        let compiled = step.call_with_keys(&params, &batch, keys).unwrap();
        let eager = as_jitted(|| {
            value_and_grad(
                |p| {
                    let second = keys.get(1).cloned().unwrap_or_else(|| keys[0].clone());
                    loss(p, &batch, &keys[..1])?
                        .add(&loss(p, &batch, std::slice::from_ref(&second))?)
                        .map_err(Into::into)
                },
                &params,
            )
        })
        .unwrap();
        assert_same(&compiled, &eager);
    }
}

#[test]
fn a_layer_given_a_key_argument_directly_draws_again() {
    let (params, batch) = setup();
    // Dropout with an explicit key (Flax's `rng=`), the step's argument.
    let f = |p: &Tree, b: &Tree, keys: &[Key]| -> flaxen::Result<Tensor> {
        let x = b.tensor("x")?.matmul(p.tensor("Dense_0/kernel")?)?;
        let y = Dropout::new(0.5)
            .rng(keys[0].clone())
            .apply(&Variables::new(), x, ())?;
        Ok(y.square().sum_all())
    };
    let mut step = jit_value_and_grad_with_keys(f);
    for t in 0..3 {
        let keys = [random::fold_in(random::key(2), t)];
        let compiled = step.call_with_keys(&params, &batch, &keys).unwrap();
        let eager = as_jitted(|| value_and_grad(|p| f(p, &batch, &keys), &params)).unwrap();
        assert_same(&compiled, &eager);
    }
    assert!(step.is_compiled());
}

#[test]
fn a_scaled_branch_inside_a_select_replays_the_same_bits() {
    // x * -2, x / -3 and x / y (traced y is not fused) picked by a mask,
    // with signed zeros, NaN and infinities in x: the fused replay equals
    // the eager step, cotangents' signs of zero included.
    let x = Tensor::from_vec(
        vec![0.0, -0.0, 1.5, f32::NAN, f32::INFINITY, -2.0, 3.0, -0.0],
        &[2, 4],
    )
    .unwrap();
    let mask = Tensor::from_vec(vec![1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0], &[2, 4]).unwrap();
    let params = Tree::new().with("x", x);
    let f = |p: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
        let x = p.tensor("x")?;
        let m = b.tensor("mask")?;
        let a = Tensor::select(m, &(x * -2.0), &Tensor::zeros(&[]))?;
        let c = Tensor::select(m, &(x / -3.0), &Tensor::full(&[2, 4], 0.5))?;
        Ok(a.add(&c)?.mul(&Tensor::full(&[2, 4], -1.0))?.sum_all())
    };
    let batch = Tree::new().with("mask", mask);
    let mut step = jit_value_and_grad_with(f);
    for _ in 0..3 {
        let compiled = step.call_with(&params, &batch).unwrap();
        let eager = as_jitted(|| value_and_grad(|p| f(p, &batch), &params)).unwrap();
        assert_eq!(bits(&compiled.0), bits(&eager.0));
        assert_eq!(
            bits(compiled.1.tensor("x").unwrap()),
            bits(eager.1.tensor("x").unwrap())
        );
    }
    assert!(step.is_compiled());
}
