//! `avg_pool` against Flax (tools/oracle/generate_pools.py, jax 0.10.2,
//! flax 0.12.8), bit for bit: its values and the cotangent of
//! `sum(avg_pool(x) * c)`, eagerly and jitted (`as_jitted`, and a compiled
//! step), with windows summed by YNNPACK (no overlap, from 4,096 elements)
//! or by XLA's loop (src/xla/reduce_window.rs).

mod common;
use common::{differing, load_fixture, Expected};
use flaxen::nn::{avg_pool, Padding};
use flaxen::tensor::{as_jitted, grad, jit_value_and_grad_with, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    shape: Vec<usize>,
    window: Vec<usize>,
    strides: Vec<usize>,
    /// "SAME", "VALID" or `[low, high]` per spatial axis.
    padding: serde_json::Value,
    count_include_pad: bool,
    y: Expected,
    dx: Expected,
    jit_y: Expected,
    jit_dx: Expected,
}

impl Case {
    fn padding(&self) -> Padding {
        match &self.padding {
            serde_json::Value::String(s) if s == "SAME" => Padding::Same,
            serde_json::Value::String(s) if s == "VALID" => Padding::Valid,
            v => Padding::Explicit(serde_json::from_value(v.clone()).expect("pairs")),
        }
    }

    fn name(&self) -> String {
        format!(
            "{:?} window {:?} strides {:?} {}{}",
            self.shape,
            self.window,
            self.strides,
            self.padding,
            if self.count_include_pad {
                ""
            } else {
                " count_include_pad=False"
            }
        )
    }

    fn pool(&self, x: &Tensor) -> flaxen::Result<Tensor> {
        avg_pool(
            x,
            &self.window,
            Some(&self.strides),
            &self.padding(),
            self.count_include_pad,
        )
    }
}

/// Known, not modelled: none.
const KNOWN: [&str; 0] = [];

#[test]
fn avg_pools_match_flax_eager_and_jitted() {
    let f: Fixture = load_fixture("pools.json");
    let (mut bad, mut still_known) = (Vec::new(), Vec::new());
    for case in &f.cases {
        let x = common::uniform_inputs(&case.shape, 1, 2.0);
        let y = case.pool(&x).unwrap();
        let c = common::uniform_inputs(y.shape(), 2, 2.0);
        let mut note = |what: &str, got: &Tensor, want: &Expected| {
            if let Some(d) = differing(got, want) {
                let key = format!("{} {what}", case.name());
                if KNOWN.contains(&key.as_str()) {
                    still_known.push(key);
                } else {
                    bad.push(format!("{key}: {d}"));
                }
            }
        };
        note("y", &y, &case.y);
        note("jit y", &as_jitted(|| case.pool(&x)).unwrap(), &case.jit_y);
        let loss = |p: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
            Ok(case
                .pool(p.as_tensor().unwrap())?
                .mul(b.tensor("c")?)?
                .sum_all())
        };
        let params = Tree::from(x.clone());
        let batch = Tree::new().with("c", c);
        let g = grad(|p| loss(p, &batch), &params).unwrap();
        note("dx", g.as_tensor().unwrap(), &case.dx);
        let g = grad(|p| as_jitted(|| loss(p, &batch)), &params).unwrap();
        note("jit dx", g.as_tensor().unwrap(), &case.jit_dx);
        let mut step = jit_value_and_grad_with(|p: &Tree, b: &Tree| as_jitted(|| loss(p, b)));
        for call in 0..2 {
            let (_, g) = step.call_with(&params, &batch).unwrap();
            note(
                &format!("compiled dx, call {call}"),
                g.as_tensor().unwrap(),
                &case.jit_dx,
            );
        }
    }
    common::assert_only_known(&bad, &still_known, &KNOWN);
}
