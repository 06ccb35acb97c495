//! Values and vector-Jacobian products against JAX
//! (tests/fixtures/tensor_ops.json, made by tools/oracle/generate_tensor.py).

mod common;

use flaxen::tensor::{value_and_grad, vjp, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Arr {
    shape: Vec<usize>,
    data: Vec<f32>,
}

impl Arr {
    fn tensor(&self) -> Tensor {
        Tensor::from_vec(self.data.clone(), &self.shape).unwrap()
    }
}

#[derive(Deserialize)]
struct Case {
    name: String,
    inputs: Vec<Arr>,
    cotangent: Arr,
    output: Arr,
    grads: Vec<Arr>,
}

#[derive(Deserialize)]
struct Dense {
    kernel: Arr,
    bias: Arr,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct Mlp {
    Dense_0: Dense,
    Dense_1: Dense,
}

#[derive(Deserialize)]
struct TrainStep {
    x: Arr,
    onehot: Arr,
    params: Mlp,
    loss: f32,
    grads: Mlp,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
    train_step: TrainStep,
}

fn fixture() -> Fixture {
    common::load_fixture("tensor_ops.json")
}

/// Asserts `got` matches JAX's `want` to within `rel` (relative to
/// `1 + |want|`), returning the largest difference seen.
fn assert_close(what: &str, got: &Tensor, want: &Arr, rel: f32) -> f32 {
    assert_eq!(got.shape(), &want.shape[..], "{what}: shape");
    let mut worst = 0.0f32;
    for (i, (g, w)) in got.to_vec().iter().zip(&want.data).enumerate() {
        let d = (g - w).abs() / (1.0 + w.abs());
        assert!(d <= rel, "{what}[{i}]: flaxen {g} vs JAX {w}");
        worst = worst.max(d);
    }
    worst
}

fn op(name: &str, x: &[Tensor]) -> Tensor {
    match name {
        "relu" => x[0].relu(),
        "gelu" => x[0].gelu(),
        "sigmoid" => x[0].sigmoid(),
        "tanh" => x[0].tanh(),
        "exp" => x[0].exp(),
        "log" => x[0].log(),
        "sqrt" => x[0].sqrt(),
        "rsqrt" => x[0].rsqrt(),
        "abs" => x[0].abs(),
        "square" => x[0].square(),
        "clip" => x[0].clip(-0.5, 0.5).unwrap(),
        "powf" => x[0].powf(2.5),
        "pow" => x[0].pow(&x[1]).unwrap(),
        "maximum" => x[0].maximum(&x[1]).unwrap(),
        "minimum" => x[0].minimum(&x[1]).unwrap(),
        "max_axis1" => x[0].max(&[1], false).unwrap(),
        "max_all" => x[0].max(&[0, 1], false).unwrap(),
        "softmax" => x[0].softmax(-1).unwrap(),
        "log_softmax" => x[0].log_softmax(0).unwrap(),
        "mean_keepdims" => x[0].mean(&[0], true).unwrap(),
        "var" => x[0].var(&[-1], false).unwrap(),
        "broadcast_div" => &x[0] / &x[1],
        "matmul_batched" => x[0].matmul(&x[1]).unwrap(),
        other => panic!("no operation for fixture case {other}"),
    }
}

#[test]
fn operations_match_jax_values_and_vjps() {
    for case in fixture().cases {
        let mut params = Tree::new();
        for (i, a) in case.inputs.iter().enumerate() {
            params.insert(format!("x{i}"), a.tensor()).unwrap();
        }
        let n = case.inputs.len();
        let (out, pullback) = vjp(
            |p| {
                let xs: Vec<Tensor> = (0..n)
                    .map(|i| p.tensor(&format!("x{i}")).unwrap().clone())
                    .collect();
                Ok(op(&case.name, &xs))
            },
            &params,
        )
        .unwrap();
        // The composite operations (softmax, var, batched matmul, ...) are
        // not all in XLA's order yet: a few ulp apart. Elementwise ones are
        // checked bit for bit below.
        assert_close(&case.name, &out, &case.output, 2e-6);
        let grads = pullback.call(&case.cotangent.tensor()).unwrap();
        for (i, want) in case.grads.iter().enumerate() {
            let got = grads.tensor(&format!("x{i}")).unwrap();
            assert_close(&format!("{} grad {i}", case.name), got, want, 2e-6);
        }
    }
}

#[test]
fn mlp_training_step_matches_jax() {
    let step = fixture().train_step;
    let dense = |d: &Dense| {
        Tree::new()
            .with("kernel", d.kernel.tensor())
            .with("bias", d.bias.tensor())
    };
    let params = Tree::new()
        .with("Dense_0", dense(&step.params.Dense_0))
        .with("Dense_1", dense(&step.params.Dense_1));
    let (x, onehot) = (step.x.tensor(), step.onehot.tensor());
    let (loss, grads) = value_and_grad(
        |p| {
            let h = x
                .matmul(p.tensor("Dense_0/kernel")?)?
                .add(p.tensor("Dense_0/bias")?)?
                .relu();
            let logits = h
                .matmul(p.tensor("Dense_1/kernel")?)?
                .add(p.tensor("Dense_1/bias")?)?;
            Ok(-(logits.log_softmax(-1)? * &onehot)
                .sum(&[-1], false)?
                .mean_all())
        },
        &params,
    )
    .unwrap();
    let l = loss.item().unwrap();
    assert!(
        (l - step.loss).abs() <= 1e-6 * (1.0 + step.loss.abs()),
        "loss {l} vs JAX {}",
        step.loss
    );
    for (name, want) in [
        ("Dense_0", &step.grads.Dense_0),
        ("Dense_1", &step.grads.Dense_1),
    ] {
        assert_close(
            &format!("{name}/kernel"),
            grads.tensor(&format!("{name}/kernel")).unwrap(),
            &want.kernel,
            1e-6,
        );
        assert_close(
            &format!("{name}/bias"),
            grads.tensor(&format!("{name}/bias")).unwrap(),
            &want.bias,
            1e-6,
        );
    }
}

#[derive(Deserialize)]
struct Rule {
    x: Vec<u32>,
    ct: Vec<u32>,
    out: Vec<u32>,
    grad: Vec<u32>,
}

#[derive(Deserialize)]
struct RulesFixture {
    rules: std::collections::BTreeMap<String, Rule>,
}

fn from_bits(bits: &[u32]) -> Tensor {
    Tensor::from_vec(
        bits.iter().map(|&b| f32::from_bits(b)).collect(),
        &[bits.len()],
    )
    .unwrap()
}

/// Elements whose bits differ from JAX's.
fn differing(got: &Tensor, want: &[u32]) -> usize {
    got.to_vec()
        .iter()
        .zip(want)
        .filter(|(g, &w)| g.to_bits() != w && !(g.is_nan() && f32::from_bits(w).is_nan()))
        .count()
}

/// Every elementwise function's value and backward rule, bit for bit, on
/// 1024 inputs: the rules are written in JAX's order of operations
/// (`t + t * y` for tanh, `g / x` for log, gelu's transposed linearization).
#[test]
fn elementwise_values_and_backward_rules_are_bit_exact() {
    let rules: RulesFixture = common::load_fixture("tensor_ops.json");
    let rsqrt = common::rsqrt_as_recorded();
    for (name, rule) in &rules.rules {
        if let (Err(why), "rsqrt") = (&rsqrt, name.as_str()) {
            eprintln!("rsqrt not checked: {why}");
            continue;
        }
        let x = Tree::new().with("x", from_bits(&rule.x));
        let (out, pullback) = vjp(|p| Ok(op(name, &[p.tensor("x")?.clone()])), &x).unwrap();
        let grads = pullback.call(&from_bits(&rule.ct)).unwrap();
        let (bad_out, bad_grad) = (
            differing(&out, &rule.out),
            differing(grads.tensor("x").unwrap(), &rule.grad),
        );
        assert_eq!(
            (bad_out, bad_grad),
            (0, 0),
            "{name}: values and gradients that differ from JAX's, of 1024"
        );
    }
}

#[derive(Deserialize)]
struct SoftmaxOut {
    out: Vec<u32>,
    grad: Vec<u32>,
}

#[derive(Deserialize)]
struct SoftmaxCase {
    shape: Vec<usize>,
    axis: isize,
    exact: bool,
    x: Vec<u32>,
    ct: Vec<u32>,
    softmax: SoftmaxOut,
    log_softmax: SoftmaxOut,
}

#[derive(Deserialize)]
struct SoftmaxFixture {
    softmax: Vec<SoftmaxCase>,
}

fn shaped(bits: &[u32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect(), shape).unwrap()
}

/// `jax.nn.softmax` and `jax.nn.log_softmax` values and VJPs bit for bit,
/// over row lengths 1 to 1500, along the last axis and others. Cases of
/// 4096 elements or more (`exact: false`) are left to YNNPACK by XLA:CPU,
/// whose exp and summation order are not reproduced: they are only run.
#[test]
fn softmax_and_log_softmax_are_bit_exact() {
    let fixture: SoftmaxFixture = common::load_fixture("tensor_ops.json");
    let mut report = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for case in &fixture.softmax {
        for (name, want) in [
            ("softmax", &case.softmax),
            ("log_softmax", &case.log_softmax),
        ] {
            let x = Tree::new().with("x", shaped(&case.x, &case.shape));
            let axis = case.axis;
            let (out, pullback) = vjp(
                |p| {
                    let x = p.tensor("x")?;
                    Ok(if name == "softmax" {
                        x.softmax(axis)?
                    } else {
                        x.log_softmax(axis)?
                    })
                },
                &x,
            )
            .unwrap();
            let grads = pullback.call(&shaped(&case.ct, &case.shape)).unwrap();
            let bad = (
                differing(&out, &want.out),
                differing(grads.tensor("x").unwrap(), &want.grad),
            );
            let line = format!("{name} {:?} axis {axis}: {bad:?}", case.shape);
            if case.exact && bad != (0, 0) {
                failures.push(line.clone());
            }
            report.push(line);
        }
    }
    println!("{}", report.join("\n"));
    assert_eq!(
        failures, KNOWN_SOFTMAX_DIFFS,
        "cases whose values and gradients differ from JAX's (count of values, of gradients)"
    );
}

/// Exact-path cases still off: log_softmax [5, 3] along axis 0, element 6
/// (the column's max, so the value is `-log(sum)`): -0.028991386 for JAX's
/// -0.028991384. A numpy emulation with jitted `jnp.exp` / `jnp.log` and the
/// same sequential sum matches JAX, so `xla_math::exp` or `xla_math::log`
/// likely differs from XLA's on this input (not yet pinned down).
const KNOWN_SOFTMAX_DIFFS: &[&str] = &["log_softmax [5, 3] axis 0: (1, 0)"];
