//! Gradients through a `BatchNorm` in training inside `nn::Jit` against
//! flax 0.12.8's `jax.value_and_grad` through `nn.jit(nn.BatchNorm)`
//! (tools/oracle/generate_nn_jit_bn_grad.py): the loss `sum(y * w)`, the
//! output, the updated batch statistics and the cotangents of the
//! parameters and of the input, bit for bit with the forward and backward
//! programs XLA compiles (`value_and_grad`); and a compiled training step
//! (`jit_value_and_grad`) giving the same numbers.

use flaxen::core::Variables;
use flaxen::nn::{BatchNorm, Jit, Module};
use flaxen::tensor::{as_jitted, jit_value_and_grad, value_and_grad, Tensor, Tree};
use serde_json::Value;

mod common;

use common::{
    differing_bits as differing, json_shape as shape, json_tensor as tensor, json_tree as tree,
    json_u32s as u32s, load_fixture, tensor_bits as bits,
};

/// The jitted module of fixture case `c`.
fn module(c: &Value) -> Jit<BatchNorm> {
    let mut bn = BatchNorm::new()
        .use_running_average(!c["train"].as_bool().unwrap())
        .momentum(c["momentum"].as_f64().unwrap());
    bn.use_scale = c["use_scale"].as_bool().unwrap();
    bn.use_bias = c["use_bias"].as_bool().unwrap();
    Jit::new(bn)
}

/// Differentiated arguments: the parameters under `params`, the input
/// under `x`.
fn arguments(c: &Value) -> Tree {
    Tree::new()
        .with("params", tree(&c["variables"]["params"]))
        .with("x", tensor(&c["x"], &shape(&c["shape"])))
}

/// `sum(y * w)` of the module on `args`, and (untraced) `y` and the updated
/// statistics through `out`.
fn loss(
    jit: &Jit<BatchNorm>,
    c: &Value,
    args: &Tree,
    out: Option<&std::cell::RefCell<Option<(Tensor, Tree)>>>,
) -> flaxen::Result<Tensor> {
    let shp = shape(&c["shape"]);
    let w = tensor(&c["w"], &shp);
    let vars = Variables::new()
        .with("params", args.subtree("params").unwrap())
        .with("batch_stats", tree(&c["variables"]["batch_stats"]));
    let x = args.tensor("x")?.clone();
    let (y, upd) = jit.apply_mut(&vars, x, (), ["batch_stats"])?;
    if let Some(out) = out {
        let stats = upd.collection("batch_stats").unwrap().clone();
        *out.borrow_mut() = Some((y.clone(), stats));
    }
    Ok((&y * &w).sum_all())
}

/// The differences between flaxen's loss and cotangents and case `c`'s.
fn compare(name: &str, c: &Value, value: &Tensor, grads: &Tree, failures: &mut Vec<String>) {
    // The loss is eager `jnp.sum(y * w)`, outside the module: from 4,096
    // elements JAX hands the full sum to YNNPACK, whose order flaxen's
    // `sum_all` does not follow (not BatchNorm's numbers; `y` is checked).
    let size: usize = shape(&c["shape"]).iter().product();
    if size < 4096 {
        if let Some(d) = differing(&bits(value), &u32s(&c["loss"])) {
            failures.push(format!("{name} loss: {d}"));
        }
    }
    if let Some(d) = differing(&bits(grads.tensor("x").unwrap()), &u32s(&c["grad_x"])) {
        failures.push(format!("{name} grad x: {d}"));
    }
    let gp = grads.subtree("params").unwrap();
    for (path, want) in c["grads"].as_object().unwrap() {
        let got = bits(gp.tensor(path).unwrap());
        if let Some(d) = differing(&got, &u32s(&want["bits"])) {
            failures.push(format!("{name} grad {path}: {d}"));
        }
    }
}

#[test]
fn gradients_through_a_jitted_batch_norm_match_jitted_flax() {
    common::require_rsqrt_as_recorded!();
    let fixture: Value = load_fixture("nn_jit_bn_grad.json");
    let mut failures = Vec::new();
    for c in fixture["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let jit = module(c);
        let args = arguments(c);
        let out = std::cell::RefCell::new(None);
        let (value, grads) = value_and_grad(|a| loss(&jit, c, a, Some(&out)), &args).unwrap();
        compare(name, c, &value, &grads, &mut failures);
        let (y, stats) = out.into_inner().unwrap();
        if let Some(d) = differing(&bits(&y), &u32s(&c["y"])) {
            failures.push(format!("{name} output: {d}"));
        }
        for (path, want) in c["batch_stats"].as_object().unwrap() {
            let got = bits(stats.tensor(path).unwrap());
            if let Some(d) = differing(&got, &u32s(&want["bits"])) {
                failures.push(format!("{name} {path}: {d}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `jit_value_and_grad` (`jax.jit(jax.value_and_grad(f))`) is not checked
/// against Flax: there XLA compiles the loss with the module, a larger
/// fusion than the fixture's. It must give the numbers of the eager step
/// run as jitted (`as_jitted`) on every call, traced or not.
#[test]
fn a_compiled_training_step_gives_the_jitted_eager_numbers() {
    let fixture: Value = load_fixture("nn_jit_bn_grad.json");
    for c in fixture["cases"].as_array().unwrap().iter().take(8) {
        let name = c["name"].as_str().unwrap();
        let jit = module(c);
        let args = arguments(c);
        let (value, grads) =
            as_jitted(|| value_and_grad(|a| loss(&jit, c, a, None), &args)).unwrap();
        let step_loss = |a: &Tree| loss(&jit, c, a, None);
        let mut step = jit_value_and_grad(&step_loss);
        for call in 0..3 {
            let (v, g) = step.call(&args).unwrap();
            assert_eq!(bits(&v), bits(&value), "{name} call {call} loss");
            for ((path, got), (_, want)) in g.paths().into_iter().zip(grads.paths()) {
                assert_eq!(bits(got), bits(want), "{name} call {call} grad {path}");
            }
        }
    }
}
