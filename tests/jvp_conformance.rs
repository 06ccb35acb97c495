//! Forward-mode differentiation against JAX 0.10.2 (tools/oracle/generate_jvp.py):
//! `tensor::jvp` of each operation with a tangent rule, `linearize` of an
//! MLP applied to two tangents and of the softmaxes, and `custom_jvp` under
//! `jvp` and `grad`, bit for bit.

mod common;

use std::collections::BTreeMap;

use common::{load_fixture, ulp_distance, F32Array};
use flaxen::tensor::{custom_jvp, grad, jvp, linearize, Tensor, Tree};
use ndarray::{arr1, arr2};

#[derive(serde::Deserialize)]
struct Case {
    inputs: Vec<F32Array>,
    tangents: Vec<F32Array>,
    out: F32Array,
    tangent: F32Array,
}

#[derive(serde::Deserialize)]
struct Linearize {
    inputs: Vec<F32Array>,
    out: F32Array,
    tangents: Vec<Vec<F32Array>>,
    results: Vec<F32Array>,
}

#[derive(serde::Deserialize)]
struct CustomJvp {
    x: F32Array,
    t: F32Array,
    out: F32Array,
    tangent: F32Array,
    grad: F32Array,
}

#[derive(serde::Deserialize)]
struct Fixture {
    cases: BTreeMap<String, Case>,
    linearize: Linearize,
    custom_jvp: CustomJvp,
    linearize_cases: BTreeMap<String, Case>,
}

type Op = fn(&[Tensor]) -> flaxen::Result<Tensor>;

/// The flaxen counterpart of each case of the oracle script.
fn op(name: &str) -> Op {
    match name {
        "exp" => |x| Ok(x[0].exp()),
        "log" => |x| Ok(x[0].log()),
        "tanh" => |x| Ok(x[0].tanh()),
        "sigmoid" => |x| Ok(x[0].sigmoid()),
        "relu" => |x| Ok(x[0].relu()),
        "gelu" => |x| Ok(x[0].gelu()),
        "sqrt" => |x| Ok(x[0].sqrt()),
        "rsqrt" => |x| Ok(x[0].rsqrt()),
        "square" => |x| Ok(x[0].square()),
        "abs" => |x| Ok(x[0].abs()),
        "powf" => |x| Ok(x[0].powf(1.7)),
        "clip" => |x| Ok(x[0].clip(-0.5, 0.5)?),
        "log1p" => |x| Ok(x[0].log1p()),
        "expm1" => |x| Ok(x[0].expm1()),
        "sin" => |x| Ok(x[0].sin()),
        "cos" => |x| Ok(x[0].cos()),
        "neg" => |x| Ok(x[0].neg()),
        "add" | "add_row" => |x| Ok(x[0].add(&x[1])?),
        "sub" => |x| Ok(x[0].sub(&x[1])?),
        "mul" | "mul_row" => |x| Ok(x[0].mul(&x[1])?),
        "div" => |x| Ok(x[0].div(&x[1])?),
        "div_scalar" => |x| Ok(&x[0] / 3.0),
        "maximum" => |x| Ok(x[0].maximum(&x[1])?),
        "minimum" => |x| Ok(x[0].minimum(&x[1])?),
        "sum_0" => |x| Ok(x[0].sum(&[0], false)?),
        "sum_all" => |x| Ok(x[0].sum_all()),
        "mean_last" => |x| Ok(x[0].mean(&[-1], false)?),
        "max_1" => |x| Ok(x[0].max(&[1], false)?),
        "softmax" | "softmax_rows" | "softmax_wide" => |x| Ok(x[0].softmax(-1)?),
        "softmax_0" => |x| Ok(x[0].softmax(0)?),
        "log_softmax" | "log_softmax_rows" | "log_softmax_wide" => |x| Ok(x[0].log_softmax(-1)?),
        "reshape" => |x| Ok(x[0].reshape(&[5, 3])?),
        "transpose" => |x| Ok(x[0].transpose()),
        "concatenate" => |x| Ok(Tensor::concatenate(x, 1)?),
        "stack" => |x| Ok(Tensor::stack(x, 0)?),
        "slice" => |x| Ok(x[0].slice(1, 1, 4)?),
        "take" => |x| Ok(x[0].take(&arr1(&[2, 0, 2]).into_dyn(), 0)?),
        "take_along_axis" => |x| {
            let idx = arr2(&[[0, 4], [1, 1], [3, 2]]).into_dyn();
            Ok(x[0].take_along_axis(&idx, 1)?)
        },
        "matmul" | "matvec" => |x| Ok(x[0].matmul(&x[1])?),
        "logaddexp" => |x| Ok(x[0].logaddexp(&x[1])?),
        "where" => |x| {
            let mask = x[0].greater(&Tensor::scalar(0.0))?;
            Ok(Tensor::select(&mask, &x[0], &x[1])?)
        },
        "mlp" => mlp,
        other => panic!("no flaxen counterpart for case {other}"),
    }
}

fn mlp(x: &[Tensor]) -> flaxen::Result<Tensor> {
    Ok(x[0].matmul(&x[1])?.add(&x[2])?.tanh().matmul(&x[3])?)
}

/// The largest ulp distance between two arrays of equal shape.
fn worst(a: &Tensor, expected: &F32Array) -> u64 {
    assert_eq!(a.shape(), &expected.shape[..]);
    a.to_vec()
        .iter()
        .zip(&expected.data)
        .map(|(&a, &b)| {
            if a.to_bits() == b.to_bits() {
                0
            } else {
                ulp_distance(a, b).max(1)
            }
        })
        .max()
        .unwrap_or(0)
}

/// Cases not yet bit for bit, with the measured worst tangent distance.
/// Everything must be exact, and a listed case that becomes exact must
/// leave the list.
const KNOWN: &[(&str, u64)] = &[];

#[test]
fn jvp_of_every_operation_matches_jax() {
    let fixture: Fixture = load_fixture("jvp.json");
    let mut report = Vec::new();
    let rsqrt = common::rsqrt_as_recorded();
    for (name, case) in &fixture.cases {
        if let (Err(why), "rsqrt") = (&rsqrt, name.as_str()) {
            eprintln!("rsqrt not checked: {why}");
            continue;
        }
        let xs: Vec<Tensor> = case.inputs.iter().map(F32Array::tensor).collect();
        let ts: Vec<Tensor> = case.tangents.iter().map(F32Array::tensor).collect();
        let f = op(name);
        let (y, ty) = jvp(|x: &Vec<Tensor>| f(x), &xs, &ts).unwrap();
        let (dy, dt) = (worst(&y, &case.out), worst(&ty, &case.tangent));
        let allowed = KNOWN.iter().find(|(n, _)| n == name).map_or(0, |&(_, u)| u);
        if allowed > 0 && dt == 0 {
            report.push(format!("{name}: exact now, take it off KNOWN"));
        }
        if dy != 0 || dt > allowed {
            report.push(format!("{name}: output {dy} ulp, tangent {dt} ulp"));
        }
    }
    assert!(
        report.is_empty(),
        "differences from JAX:\n{}",
        report.join("\n")
    );
}

/// `linearize` of the softmaxes: `softmax`'s tangent unfused (its linear
/// part runs operation by operation), `log_softmax`'s as under `jvp` (one
/// jitted function).
#[test]
fn linearize_of_the_softmaxes_matches_jax() {
    let fixture: Fixture = load_fixture("jvp.json");
    assert_eq!(fixture.linearize_cases.len(), 7);
    for (name, case) in &fixture.linearize_cases {
        let xs: Vec<Tensor> = case.inputs.iter().map(F32Array::tensor).collect();
        let ts: Vec<Tensor> = case.tangents.iter().map(F32Array::tensor).collect();
        let f = op(name);
        let (y, f_jvp) = linearize(|x: &Vec<Tensor>| f(x), &xs).unwrap();
        assert_eq!(worst(&y, &case.out), 0, "{name}: output");
        assert_eq!(
            worst(&f_jvp.call(&ts).unwrap(), &case.tangent),
            0,
            "{name}: tangent"
        );
    }
}

#[test]
fn linearize_matches_jax_for_several_tangents() {
    let fixture: Fixture = load_fixture("jvp.json");
    let lin = &fixture.linearize;
    let xs: Vec<Tensor> = lin.inputs.iter().map(F32Array::tensor).collect();
    let (y, f_jvp) = linearize(|x: &Vec<Tensor>| mlp(x), &xs).unwrap();
    assert_eq!(worst(&y, &lin.out), 0);
    for (ts, expected) in lin.tangents.iter().zip(&lin.results) {
        let ts: Vec<Tensor> = ts.iter().map(F32Array::tensor).collect();
        assert_eq!(worst(&f_jvp.call(&ts).unwrap(), expected), 0);
    }
}

fn safe_sqrt(x: &Tensor) -> flaxen::Result<Tensor> {
    custom_jvp(
        |x: &Tensor| Ok(x.sqrt()),
        |x: &Tensor, t: &Tensor| {
            let y = x.sqrt();
            let scale = (&y * 2.0 + 1e-6).powf(-1.0);
            Ok((y, t * &scale))
        },
        x,
    )
}

#[test]
fn custom_jvp_matches_jax_in_both_modes() {
    let fixture: Fixture = load_fixture("jvp.json");
    let c = &fixture.custom_jvp;
    let (x, t) = (c.x.tensor(), c.t.tensor());
    let (y, ty) = jvp(safe_sqrt, &x, &t).unwrap();
    assert_eq!(worst(&y, &c.out), 0);
    assert_eq!(worst(&ty, &c.tangent), 0);
    let w = Tensor::from_vec((0..8).map(|i| i as f32).collect(), &[8]).unwrap();
    let g = grad(
        |p| Ok(safe_sqrt(p.as_tensor().unwrap())?.mul(&w)?.sum_all()),
        &Tree::from(x),
    )
    .unwrap();
    assert_eq!(worst(g.as_tensor().unwrap(), &c.grad), 0);
}
