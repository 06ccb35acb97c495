//! Sums over all axes of a product (`sum(x * c)`, `mean((h - y) ** 2)`)
//! against JAX (tools/oracle/generate_fused_sums.py, jax 0.10.2), bit for
//! bit: eagerly (the product rounded, then the plain sum) and jitted, where
//! XLA fuses the product into the reduction and contracts each product
//! into the running sum (src/xla/reduce.rs, `product_sum`): `as_jitted`
//! alone, around `value_and_grad`, and a compiled step replaying it. The
//! gradient is the plain one (the fusion is the forward's alone).

mod common;
use common::{differing, load_fixture, Expected};
use flaxen::tensor::{as_jitted, jit_value_and_grad_with, value_and_grad, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    op: String,
    shape: Vec<usize>,
    seed: u64,
    value: u32,
    jit: u32,
    jit_vg: u32,
    jit_dx: Expected,
}

impl Case {
    fn name(&self) -> String {
        format!("{} {:?}", self.op, self.shape)
    }

    /// The second operand, as the oracle makes it.
    fn factor(&self) -> Tensor {
        let shape = match self.op.as_str() {
            "sum_xr" => &self.shape[self.shape.len() - 1..],
            "sum_xs" => &[],
            _ => &self.shape[..],
        };
        common::uniform_inputs(shape, self.seed + 1, 2.0)
    }

    /// The case's function of `x` and `c`.
    fn f(&self, x: &Tensor, c: &Tensor) -> flaxen::Result<Tensor> {
        Ok(match self.op.as_str() {
            "sum_xc" | "sum_xr" | "sum_xs" => x.mul(c)?.sum_all(),
            "sum_xx" => x.mul(x)?.sum_all(),
            "mean_sq" => x.sub(c)?.square().mean_all(),
            "mean_xc" => x.mul(c)?.mean_all(),
            other => panic!("unknown op {other}"),
        })
    }

    /// A sum's function with the axes named (`jnp.sum(x * c, axis=(0, ..))`:
    /// the same reduction).
    fn f_axes(&self, x: &Tensor, c: &Tensor) -> Option<Tensor> {
        let all: Vec<isize> = (0..self.shape.len() as isize).collect();
        let product = match self.op.as_str() {
            "sum_xc" | "sum_xr" | "sum_xs" => x.mul(c),
            "sum_xx" => x.mul(x),
            _ => return None,
        };
        Some(product.and_then(|p| p.sum(&all, false)).unwrap())
    }
}

/// The cases whose jitted values (all of them: `as_jitted`, around
/// `value_and_grad`, compiled) differ from JAX, as `<op> <shape>`; their
/// eager values and gradients are exact.
///
/// Two factors of the product's shape (and squares): LLVM vectorizes their
/// fused loop with another cost than a sum's (two loads, or one load
/// multiplied by itself, per element) and contracts only some of the
/// products; `product_sum` follows the loop of a product with a broadcast
/// factor (a scalar, a row), exact for every shape here.
///
/// From 4,096 elements (all axes at most 32 long) the fused product and
/// sum run on YNNPACK, whose order for them is not known.
const KNOWN: &[&str] = &[
    "mean_sq [1, 20, 3]",
    "mean_sq [4, 8, 8]",
    "mean_sq [8, 8]",
    "mean_xc [2, 4]",
    "mean_xc [3, 8, 7]",
    "sum_xc [2, 4]",
    "sum_xc [3, 8, 7]",
    "sum_xx [17, 5]",
];

fn bits(t: &Tensor) -> u32 {
    t.item().unwrap().to_bits()
}

#[test]
fn fused_sums_match_jax() {
    let f: Fixture = load_fixture("fused_sums.json");
    let (mut bad, mut still_known) = (Vec::new(), Vec::new());
    let mut exact = 0;
    for case in &f.cases {
        let x = common::uniform_inputs(&case.shape, case.seed, 2.0);
        let c = case.factor();
        let mut parts: Vec<(&str, Option<String>)> = Vec::new();
        let mut check = |part: &'static str, got: u32, want: u32| {
            let d = (got != want)
                .then(|| format!("{} vs {}", f32::from_bits(got), f32::from_bits(want)));
            parts.push((part, d));
        };
        check("value", bits(&case.f(&x, &c).unwrap()), case.value);
        check(
            "jit",
            bits(&as_jitted(|| case.f(&x, &c)).unwrap()),
            case.jit,
        );
        if let Some(sum) = as_jitted(|| case.f_axes(&x, &c)) {
            check("jit axes", bits(&sum), case.jit);
        }
        let params = Tree::from(x.clone());
        let (value, g) =
            as_jitted(|| value_and_grad(|p| case.f(p.as_tensor().unwrap(), &c), &params)).unwrap();
        check("jit vg", bits(&value), case.jit_vg);
        let dx = differing(g.as_tensor().unwrap(), &case.jit_dx);
        parts.push(("jit dx", dx));
        let batch = Tree::new().with("c", c.clone());
        let mut step = jit_value_and_grad_with(|p: &Tree, b: &Tree| {
            as_jitted(|| case.f(p.as_tensor().unwrap(), b.tensor("c")?))
        });
        for call in ["compiled, call 0", "compiled, call 1"] {
            let (value, g) = step.call_with(&params, &batch).unwrap();
            let mut d = (bits(&value) != case.jit_vg).then(|| "value".to_string());
            if let Some(e) = differing(g.as_tensor().unwrap(), &case.jit_dx) {
                d = Some(format!("dx: {e}"));
            }
            parts.push((call, d));
        }
        assert!(step.is_compiled(), "{} not compiled", case.name());
        for (part, d) in parts {
            let jitted_value = !matches!(part, "value" | "jit dx");
            let known = jitted_value && KNOWN.contains(&case.name().as_str());
            match (d, known) {
                (None, _) => exact += 1,
                (Some(_), true) => still_known.push(case.name()),
                (Some(d), false) => bad.push(format!("{} {part}: {d}", case.name())),
            }
        }
    }
    println!(
        "{} cases: {exact} checks exact, {} known",
        f.cases.len(),
        still_known.len()
    );
    common::assert_only_known(&bad, &still_known, KNOWN);
}
