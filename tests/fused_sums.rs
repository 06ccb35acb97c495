//! Sums over all axes of a product (`sum(x * c)`, `mean((h - y) ** 2)`)
//! against JAX (tools/oracle/generate_fused_sums.py, jax 0.10.2), bit for
//! bit: eagerly (the product rounded, then the plain sum) and jitted, where
//! XLA fuses the product into the reduction and contracts each product
//! into the running sum (src/xla/reduce.rs, `product_sum`): `as_jitted`
//! alone, around `value_and_grad`, and a compiled step replaying it. The
//! gradient is the plain one (the fusion is the forward's alone).

mod common;
use common::{differing, load_fixture, Expected};
use flaxen::tensor::{
    as_jitted, jit_value_and_grad_with, jit_value_and_grad_with_aux, value_and_grad, Tensor, Tree,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
    partial: Vec<Partial>,
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
/// factor (a scalar, a row), exact for every shape here, but for two rows
/// of two factors, which it leaves unvectorized as LLVM does.
///
/// From 4,096 elements (all axes at most 32 long) the fused product and
/// sum run on YNNPACK, whose order for them is not known.
const KNOWN: &[&str] = &[
    "mean_sq [1, 20, 3]",
    "mean_sq [4, 8, 8]",
    "mean_sq [8, 8]",
    "mean_xc [3, 8, 7]",
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

/// A sum over some axes of a product (`tools/oracle/generate_fused_sums.py`,
/// `partial_cases`).
#[derive(Deserialize)]
struct Partial {
    op: String,
    shape: Vec<usize>,
    axes: Vec<isize>,
    seed: u64,
    value: Expected,
    jit: Expected,
    jit_aux: Expected,
    jit_vg: u32,
    jit_dx: Expected,
}

impl Partial {
    fn name(&self) -> String {
        format!("{} {:?} {:?}", self.op, self.shape, self.axes)
    }

    /// The second factor, as the oracle makes it.
    fn factor(&self) -> Tensor {
        let s = &self.shape;
        let shape = match self.op.as_str() {
            "psum_xc" => s.clone(),
            "psum_xr" | "pmean_xr" => s[s.len() - 1..].to_vec(),
            "psum_xk" => s[..s.len() - 1].iter().copied().chain([1]).collect(),
            _ => vec![],
        };
        common::uniform_inputs(&shape, self.seed + 1, 2.0)
    }

    /// The case's sums of `x` and `c`.
    fn f(&self, x: &Tensor, c: &Tensor) -> flaxen::Result<Tensor> {
        let ax = &self.axes;
        Ok(match self.op.as_str() {
            "psum_xc" | "psum_xr" | "psum_xk" => x.mul(c)?.sum(ax, false)?,
            "psum_xx" => x.mul(x)?.sum(ax, false)?,
            "pmean_sq" => x.square().mean(ax, false)?,
            "pmean_xr" => x.mul(c)?.mean(ax, true)?,
            other => panic!("unknown op {other}"),
        })
    }
}

/// The partial sums whose jitted values differ from JAX (`<op> <shape>
/// <axes>`); their eager values are exact.
const PARTIAL_KNOWN: &[&str] = &[
    // Several trailing axes of a square or of two full factors: LLVM
    // vectorizes their nest with another cost, as for the sums over all
    // axes (see `KNOWN`).
    "psum_xc [4, 8, 8] [1, 2]",
    "psum_xx [4, 8, 8] [1, 2]",
    "pmean_sq [4, 8, 8] [1, 2]",
    "psum_xx [3, 16, 8] [1, 2]",
    "pmean_sq [3, 16, 8] [1, 2]",
    // 4,096 elements or more with a broadcast factor: YNNPACK's fused
    // order is not the rounded products' (with two full factors it is).
    "psum_xk [64, 64] [0]",
    "psum_xk [16, 512] [0]",
    "psum_xr [64, 64] [1]",
    "pmean_xr [64, 64] [1]",
];

#[test]
fn partial_fused_sums_match_jax() {
    let f: Fixture = load_fixture("fused_sums.json");
    let (mut bad, mut still_known) = (Vec::new(), Vec::new());
    let mut exact = 0;
    for case in &f.partial {
        let x = common::uniform_inputs(&case.shape, case.seed, 2.0);
        let c = case.factor();
        let mut parts: Vec<(&str, Option<String>)> = vec![
            ("value", differing(&case.f(&x, &c).unwrap(), &case.value)),
            (
                "jit",
                differing(&as_jitted(|| case.f(&x, &c)).unwrap(), &case.jit),
            ),
        ];
        let shape = case.f(&x, &c).unwrap().shape().to_vec();
        let d = common::uniform_inputs(&shape, case.seed + 2, 2.0);
        let params = Tree::from(x.clone());
        let batch = Tree::new().with("c", c.clone()).with("d", d.clone());
        let loss = |p: &Tree, b: &Tree, _: &[flaxen::random::Key]| {
            let y = case.f(p.as_tensor().unwrap(), b.tensor("c")?)?;
            let l = y.mul(b.tensor("d")?)?.sum_all();
            Ok((l, Tree::from(y)))
        };
        let (value, g) =
            as_jitted(|| value_and_grad(|p| Ok(loss(p, &batch, &[])?.0), &params)).unwrap();
        let loss_differs = |v: &Tensor| (bits(v) != case.jit_vg).then(|| "loss".to_string());
        parts.push(("jit vg", loss_differs(&value)));
        parts.push(("jit dx", differing(g.as_tensor().unwrap(), &case.jit_dx)));
        let mut step =
            jit_value_and_grad_with_aux(|p: &Tree, b: &Tree, k: &[_]| as_jitted(|| loss(p, b, k)));
        for (call, call_dx) in [
            ("compiled, call 0", "compiled dx, call 0"),
            ("compiled, call 1", "compiled dx, call 1"),
        ] {
            let ((value, aux), g) = step.call_with_aux(&params, &batch, &[]).unwrap();
            let aux = differing(aux.as_tensor().unwrap(), &case.jit_aux);
            let d = aux.map(|e| format!("aux: {e}")).or(loss_differs(&value));
            parts.push((call, d));
            parts.push((call_dx, differing(g.as_tensor().unwrap(), &case.jit_dx)));
        }
        // A product with a broadcast column is not replayed (the step runs
        // its function, in a compiled region).
        assert!(
            step.is_compiled() || case.op == "psum_xk",
            "{} not compiled",
            case.name()
        );
        let name = case.name();
        for (part, d) in parts {
            // The gradients do not read the fused sums: all exact.
            let jitted_sum = part != "value" && !part.contains("dx");
            let known = jitted_sum && PARTIAL_KNOWN.contains(&name.as_str());
            match (d, known) {
                (None, _) => exact += 1,
                (Some(_), true) => still_known.push(name.clone()),
                (Some(d), false) => bad.push(format!("{name} {part}: {d}")),
            }
        }
    }
    println!(
        "{} partial sums: {exact} checks exact, {} known",
        f.partial.len(),
        still_known.len()
    );
    common::assert_only_known(&bad, &still_known, PARTIAL_KNOWN);
}
