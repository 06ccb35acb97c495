//! Division's backward rules against `jax.vjp` (jax 0.10.2, CPU), bit for
//! bit: a differentiated divisor takes JAX's rules as written
//! (`g / y`, `-((g * (1 / (y * y))) * x)`); a constant scalar divisor, a
//! literal in JAX's program, has the cotangent multiplied by its reciprocal
//! (tools/oracle/generate_division.py writes tests/fixtures/division.json).

mod common;

use common::load_fixture;
use flaxen::tensor::{vjp, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    x: Vec<u32>,
    y: Vec<u32>,
    g: Vec<u32>,
    out: Vec<u32>,
    gx: Vec<u32>,
    gy: Vec<u32>,
    c: f32,
    c_out: Vec<u32>,
    c_gx: Vec<u32>,
}

fn tensor(bits: &[u32]) -> Tensor {
    Tensor::from_vec(
        bits.iter().map(|&b| f32::from_bits(b)).collect(),
        &[bits.len()],
    )
    .unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn division_by_a_tensor_and_by_a_constant_scalar() {
    let f: Fixture = load_fixture("division.json");
    let (x, y, g) = (tensor(&f.x), tensor(&f.y), tensor(&f.g));
    let params = Tree::new().with("x", x.clone()).with("y", y);
    let (out, pullback) = vjp(|p| Ok(p.tensor("x")?.div(p.tensor("y")?)?), &params).unwrap();
    assert_eq!(bits(&out), f.out);
    let grads = pullback.call(&g).unwrap();
    assert_eq!(bits(grads.tensor("x").unwrap()), f.gx, "cotangent of x");
    assert_eq!(bits(grads.tensor("y").unwrap()), f.gy, "cotangent of y");

    let c = Tensor::scalar(f.c);
    let params = Tree::new().with("x", x);
    let (out, pullback) = vjp(|p| Ok(p.tensor("x")?.div(&c)?), &params).unwrap();
    assert_eq!(bits(&out), f.c_out);
    let grads = pullback.call(&g).unwrap();
    assert_eq!(
        bits(grads.tensor("x").unwrap()),
        f.c_gx,
        "cotangent with a constant divisor"
    );
}
