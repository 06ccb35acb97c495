//! The order of `sum` and `mean` against `jnp.sum` / `jnp.mean` (jax 0.10.2,
//! CPU), bit for bit: vectors, axis 0 and the last axis of matrices, with
//! lengths around XLA:CPU's reduction window of 32 and beyond
//! (tools/oracle/generate_reductions.py writes tests/fixtures/reductions.json).

mod common;

use common::{load_fixture, ulp_distance};
use flaxen::tensor::Tensor;
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    op: String,
    shape: Vec<usize>,
    axis: Option<isize>,
    x: Vec<u32>,
    y: Vec<u32>,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[test]
fn sums_and_means_in_xla_order() {
    let f: Fixture = load_fixture("reductions.json");
    for c in &f.cases {
        let x =
            Tensor::from_vec(c.x.iter().map(|&b| f32::from_bits(b)).collect(), &c.shape).unwrap();
        let y = match (c.op.as_str(), c.axis) {
            ("sum", None) => x.sum_all(),
            ("mean", None) => x.mean_all(),
            ("sum", Some(a)) => x.sum(&[a], false).unwrap(),
            ("mean", Some(a)) => x.mean(&[a], false).unwrap(),
            _ => unreachable!("{}", c.op),
        };
        let d = y
            .to_vec()
            .iter()
            .zip(&c.y)
            .map(|(&g, &w)| ulp_distance(g, f32::from_bits(w)))
            .max()
            .unwrap();
        assert_eq!(d, 0, "{} of {:?} over {:?}: {d} ulp", c.op, c.shape, c.axis);
    }
}
