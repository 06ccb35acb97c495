//! `softmax` and `log_softmax` against JAX (tools/oracle/generate_softmax.py,
//! jax 0.10.2) in the three ways JAX computes them: eagerly, under eager
//! `jax.vjp`, and jitted (`as_jitted`, and a compiled step replaying it),
//! and their tangents (`jvp`, `linearize`),
//! bit for bit — from 4,096 elements on with YNNPACK's sums and, where XLA
//! fuses it into them, YNNPACK's `exp`.

mod common;
use common::{differing, load_fixture, Expected};
use flaxen::tensor::{as_jitted, grad, jit_value_and_grad_with, jvp, linearize, vjp, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
    cross_entropy: Vec<CrossEntropy>,
}

/// `optax.softmax_cross_entropy_with_integer_labels` of `inputs(shape, 3)`
/// with labels `(i * 7919) % classes`, and the gradient of its sum
/// weighted by `inputs([rows], 4)`.
#[derive(Deserialize)]
struct CrossEntropy {
    shape: Vec<usize>,
    eager: Expected,
    jit: Expected,
    grad: Expected,
    jit_grad: Expected,
}

#[derive(Deserialize)]
struct Case {
    shape: Vec<usize>,
    softmax: Modes,
    log_softmax: Modes,
}

#[derive(Deserialize)]
struct Modes {
    jvp: Expected,
    linearize: Expected,
    eager: Expected,
    vjp_y: Expected,
    vjp_dx: Expected,
    jit: Expected,
    jit_dx: Expected,
}

/// The oracle's inputs in `[-4, 4)` (`common::uniform_inputs`).
fn inputs(shape: &[usize], seed: u64) -> Tensor {
    common::uniform_inputs(shape, seed, 4.0)
}

type Op = fn(&Tensor) -> flaxen::Result<Tensor>;

fn softmax(x: &Tensor) -> flaxen::Result<Tensor> {
    Ok(x.softmax(-1)?)
}

fn log_softmax(x: &Tensor) -> flaxen::Result<Tensor> {
    Ok(x.log_softmax(-1)?)
}

/// What differs from the fixture in one case and function, each mode
/// named.
fn check(shape: &[usize], name: &str, f: Op, want: &Modes) -> Vec<(String, String)> {
    let x = inputs(shape, 1);
    let c = inputs(shape, 2);
    let mut bad = Vec::new();
    let mut note = |what: &str, got: &Tensor, want: &Expected| {
        if let Some(d) = differing(got, want) {
            bad.push((format!("{name} {shape:?} {what}"), d));
        }
    };
    note("eager", &f(&x).unwrap(), &want.eager);
    let (_, t) = jvp(|t: &Tensor| f(t), &x, &c).unwrap();
    note("jvp", &t, &want.jvp);
    let (_, lin) = linearize(|t: &Tensor| f(t), &x).unwrap();
    note("linearize", &lin.call(&c).unwrap(), &want.linearize);
    let (y, pull) = vjp(|t| f(t.as_tensor().unwrap()), &Tree::from(x.clone())).unwrap();
    note("vjp value", &y, &want.vjp_y);
    let dx = pull.call(&c).unwrap();
    note("vjp cotangent", dx.as_tensor().unwrap(), &want.vjp_dx);
    note("jit", &as_jitted(|| f(&x)).unwrap(), &want.jit);
    let loss = |p: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
        as_jitted(|| Ok(f(p.as_tensor().unwrap())?.mul(b.tensor("c")?)?.sum_all()))
    };
    let batch = Tree::new().with("c", c.clone());
    let params = Tree::from(x.clone());
    let g = grad(|p| loss(p, &batch), &params).unwrap();
    note("jit grad", g.as_tensor().unwrap(), &want.jit_dx);
    let mut step = jit_value_and_grad_with(loss);
    for call in 0..2 {
        let (_, g) = step.call_with(&params, &batch).unwrap();
        note(
            &format!("compiled grad, call {call}"),
            g.as_tensor().unwrap(),
            &want.jit_dx,
        );
    }
    bad
}

/// Known, measured: none. (A sum of products over one row beside axes of
/// extent 1, such as the log-softmax's tangent over `[1, n]`, is a YNNPACK
/// dot; from 4,096 rows the row sums' log and the backward's updates run in
/// YNNPACK's fusion.)
const KNOWN_ROWS: [&str; 0] = [];

#[test]
fn softmaxes_match_jax_in_each_mode() {
    let f: Fixture = load_fixture("softmax.json");
    let mut found = Vec::new();
    for case in &f.cases {
        if case.shape.last() > Some(&32768) && !common::ynn_pooled() {
            eprintln!(
                "{:?} not run: one CPU (YNNPACK does not tile without a pool)",
                case.shape
            );
            continue;
        }
        found.extend(check(&case.shape, "softmax", softmax, &case.softmax));
        found.extend(check(
            &case.shape,
            "log_softmax",
            log_softmax,
            &case.log_softmax,
        ));
    }
    let (known, bad): (Vec<_>, Vec<_>) = found
        .into_iter()
        .partition(|(key, _)| KNOWN_ROWS.contains(&key.as_str()));
    let bad: Vec<String> = bad.into_iter().map(|(k, d)| format!("{k}: {d}")).collect();
    let known: Vec<String> = known.into_iter().map(|(k, _)| k).collect();
    common::assert_only_known(&bad, &known, &KNOWN_ROWS);
}

/// Known, measured: none. (From 4,096 rows XLA hands the row sums' log to
/// YNNPACK with the sums, and YNNPACK's own `log` runs.)
const KNOWN: [&str; 0] = [];

/// The cross-entropy with integer labels, eagerly and jitted, its value
/// and its gradient (also replayed by a compiled step).
#[test]
fn cross_entropy_matches_optax_in_each_mode() {
    use flaxen::optim::losses::softmax_cross_entropy_with_integer_labels as xent;
    let f: Fixture = load_fixture("softmax.json");
    let (mut bad, mut still_known) = (Vec::new(), Vec::new());
    for case in &f.cross_entropy {
        let (rows, classes) = (case.shape[0], case.shape[1]);
        if classes > 32768 && !common::ynn_pooled() {
            eprintln!("{:?} not run: one CPU", case.shape);
            continue;
        }
        let logits = inputs(&case.shape, 3);
        let labels = ndarray::Array1::from_shape_fn(rows, |i| ((i * 7919) % classes) as i32);
        let w = inputs(&[rows], 4);
        let mut note = |what: &str, got: &Tensor, want: &Expected| {
            if let Some(d) = differing(got, want) {
                let key = format!("{:?} {what}", case.shape);
                if KNOWN.contains(&key.as_str()) {
                    still_known.push(key);
                } else {
                    bad.push(format!("{key}: {d}"));
                }
            }
        };
        note("eager", &xent(&logits, &labels).unwrap(), &case.eager);
        note(
            "jit",
            &as_jitted(|| xent(&logits, &labels)).unwrap(),
            &case.jit,
        );
        let loss = |p: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
            Ok(xent(p.as_tensor().unwrap(), &labels)?
                .mul(b.tensor("w")?)?
                .sum_all())
        };
        let params = Tree::from(logits.clone());
        let batch = Tree::new().with("w", w.clone());
        let g = grad(|p| loss(p, &batch), &params).unwrap();
        note("grad", g.as_tensor().unwrap(), &case.grad);
        let g = grad(|p| as_jitted(|| loss(p, &batch)), &params).unwrap();
        note("jit grad", g.as_tensor().unwrap(), &case.jit_grad);
        let mut step = jit_value_and_grad_with(|p: &Tree, b: &Tree| as_jitted(|| loss(p, b)));
        for call in 0..2 {
            let (_, g) = step.call_with(&params, &batch).unwrap();
            note(
                &format!("compiled grad, call {call}"),
                g.as_tensor().unwrap(),
                &case.jit_grad,
            );
        }
    }
    common::assert_only_known(&bad, &still_known, &KNOWN);
}
