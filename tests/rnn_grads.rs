//! Gradients through `nn.RNN` against Flax (tools/oracle/generate_rnn_grads.py,
//! jax 0.10.2, flax 0.12.8), bit for bit: the outputs, the loss
//! `sum(y * c)` and its gradients with respect to every parameter and the
//! input, eagerly (`jax.grad`: scan's forward and backward passes are
//! compiled `while` loops, the rest runs op by op) and jitted
//! (`jax.jit(jax.grad)`, here `as_jitted` around the loss).

mod common;
use std::collections::BTreeMap;

use common::{differing, load_fixture, Expected};
use flaxen::core::Variables;
use flaxen::nn::{GRUCell, LSTMCell, Module, RecurrentCell, RNN};
use flaxen::random;
use flaxen::tensor::{as_jitted, grad, Tensor, Tensors, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

/// One parameter as the oracle made it.
#[derive(Deserialize)]
struct ParamSpec {
    path: String,
    shape: Vec<usize>,
    seed: u64,
    width: f64,
}

#[derive(Deserialize)]
struct Case {
    cell: String,
    batch: usize,
    features: usize,
    inputs: usize,
    time: usize,
    reverse: bool,
    keep_order: bool,
    carry_loss: bool,
    seed: u64,
    params: Vec<ParamSpec>,
    y: Expected,
    carry: Vec<Expected>,
    loss: Expected,
    jit_loss: Expected,
    grad_params: BTreeMap<String, Expected>,
    grad_x: Expected,
    jit_grad_params: BTreeMap<String, Expected>,
    jit_grad_x: Expected,
}

impl Case {
    fn name(&self) -> String {
        let mut name = format!(
            "{} b{} f{} i{} t{}",
            self.cell, self.batch, self.features, self.inputs, self.time
        );
        if self.reverse {
            name += if self.keep_order {
                " reverse keep_order"
            } else {
                " reverse"
            };
        }
        if self.carry_loss {
            name += " carry_loss";
        }
        name
    }
}

/// Cells of the fixture that flaxen does not have (their cases are not
/// run): Flax's `OptimizedLSTMCell` (one product over the four gates'
/// concatenated kernels) and `SimpleCell`.
const NOT_PORTED: [&str; 2] = ["optimized_lstm", "simple"];

/// What differs from Flax and why, as `<case> <part>`, the parts being
/// `forward` (outputs, final carry), `loss`, `jit loss`, `grad` and
/// `jit grad` (any parameter's or the input's gradient; most are listed
/// by [`known_grads`]).
///
/// The forward corners (not modelled, see src/nn/recurrent.rs): loops XLA
/// hoists into one kernel (an LSTM of one row of up to 3 features, two
/// rows of 1 or 2, 3 or 4 rows of 1), products of length one that XLA
/// turns into multiplies joining the gate fusion (one input or hidden
/// feature), whose values drift from the fifth step on.
///
/// `jit loss`: `sum(y * c)` jitted is one fused reduction of the products
/// (`product_sum` in src/xla/reduce.rs) over the scan's outputs as XLA
/// lays them out, the steps outermost, with the step's operations inside
/// its loop when the scan has one step (`XlaOrigin` in
/// src/tensor/ops/product_sum.rs). Not modelled: the order of the
/// 10,240 products (`[8, 20, 64]`) that YNNPACK reduces, neither the
/// outputs' row-major order nor the steps-first one.
const KNOWN: &[&str] = &[
    // Forward corners.
    "lstm b1 f1 i3 t20 forward",
    "lstm b2 f1 i3 t20 forward",
    "lstm b8 f1 i3 t5 forward",
    "lstm b8 f1 i3 t20 forward",
    "lstm b8 f1 i3 t20 loss",
    "gru b1 f1 i3 t20 forward",
    "gru b2 f1 i3 t5 forward",
    "gru b2 f1 i3 t20 forward",
    "gru b2 f1 i3 t20 loss",
    "gru b8 f1 i3 t5 forward",
    "gru b8 f1 i3 t5 loss",
    "gru b8 f1 i3 t20 forward",
    "gru b8 f1 i3 t20 loss",
    "lstm b2 f2 i3 t5 forward",
    "lstm b2 f2 i3 t5 loss",
    "lstm b3 f1 i3 t5 forward",
    "lstm b4 f1 i3 t5 forward",
    "lstm b4 f1 i3 t5 loss",
    "lstm b2 f4 i1 t5 forward",
    "lstm b1 f4 i1 t5 forward",
    "lstm b1 f4 i1 t5 loss",
    "gru b2 f4 i1 t5 forward",
    "gru b2 f4 i1 t5 loss",
    "gru b1 f4 i1 t5 forward",
    "gru b2 f1 i3 t5 forward",
    "gru b4 f1 i3 t5 forward",
    // Their jitted loss sums the drifted outputs (in the fused order).
    "lstm b2 f2 i3 t5 jit loss",
    "lstm b8 f1 i3 t5 jit loss",
    "lstm b1 f4 i1 t5 jit loss",
    "gru b1 f1 i3 t20 jit loss",
    "gru b2 f4 i1 t5 jit loss",
    "gru b4 f1 i3 t5 jit loss",
    "gru b8 f1 i3 t5 jit loss",
    "gru b8 f1 i3 t20 jit loss",
    // The jitted loss's reduction on YNNPACK (10,240 products).
    "lstm b8 f64 i3 t20 jit loss",
    "gru b8 f64 i3 t20 jit loss",
];

/// Whether a case's gradients (`jit`: jitted) are known to differ.
///
/// The backward scan body is XLA's fusion (`Tensor::lstm_step`,
/// `Tensor::gru_step`, the bias cotangents of one row fused into their
/// accumulators: `ProductCotangents` in src/tensor/tape.rs); not modelled
/// are products of length one (one hidden or one input feature), which
/// XLA turns into multiplies joining the fusions (the eager one-step
/// one-feature LSTM of one row is still exact), and the loops XLA hoists
/// into one kernel in an LSTM of one row of up to three features over
/// more than one step (its kernels' and biases' cotangents differ).
fn known_grads(case: &Case, jit: bool) -> bool {
    let lstm_one_step_row = case.cell == "lstm" && case.batch == 1 && case.time == 1;
    let lstm_hoisted =
        case.cell == "lstm" && case.batch == 1 && case.features <= 3 && case.time > 1;
    (case.features == 1 && (jit || !lstm_one_step_row)) || case.inputs == 1 || lstm_hoisted
}

/// The differences of one case's outputs, by part (see [`KNOWN`]).
#[derive(Default)]
struct Report {
    parts: BTreeMap<&'static str, Vec<String>>,
}

impl Report {
    /// Notes `what` (in `part`) if `got` differs from `want`.
    fn note(&mut self, part: &'static str, what: &str, got: &Tensor, want: &Expected) {
        if let Some(d) = differing(got, want) {
            self.parts
                .entry(part)
                .or_default()
                .push(format!("{what}: {d}"));
        }
    }
}

/// Runs one case with the cell `cell`.
fn check<C>(case: &Case, cell: C) -> Report
where
    C: RecurrentCell + Clone,
{
    let mut report = Report::default();
    let rnn = RNN::new(cell)
        .reverse(case.reverse)
        .keep_order(case.keep_order);
    let x = common::uniform_inputs(&[case.batch, case.time, case.inputs], case.seed, 1.0);
    let v = rnn
        .init(random::key(0), x.clone().into())
        .unwrap_or_else(|e| panic!("{}: {e}", case.name()));
    let ours = v.params();
    let specs: BTreeMap<&str, &ParamSpec> =
        case.params.iter().map(|p| (p.path.as_str(), p)).collect();
    let leaves = ours
        .paths()
        .into_iter()
        .map(|(path, t)| {
            let spec = specs[path.as_str()];
            assert_eq!(spec.shape, t.shape(), "{} {path}", case.name());
            common::uniform_inputs(&spec.shape, spec.seed, spec.width)
        })
        .collect();
    let params = ours.with_leaves(leaves).unwrap();
    let (carry, y) = rnn
        .apply(
            &Variables::new().with("params", params.clone()),
            x.clone().into(),
            (),
        )
        .unwrap();
    report.note("forward", "y", &y, &case.y);
    for (k, (leaf, want)) in carry.tensors().iter().zip(&case.carry).enumerate() {
        report.note("forward", &format!("carry {k}"), leaf, want);
    }
    let c = common::uniform_inputs(y.shape(), case.seed + 50, 1.0);
    let carry_c: Vec<Tensor> = carry
        .tensors()
        .iter()
        .enumerate()
        .map(|(n, leaf)| common::uniform_inputs(leaf.shape(), case.seed + 60 + 10 * n as u64, 1.0))
        .collect();
    let loss = |t: &Tree| -> flaxen::Result<Tensor> {
        let vars = Variables::new().with("params", t.subtree("params").unwrap());
        let (carry, y) = rnn.apply(&vars, t.tensor("x")?.clone().into(), ())?;
        let mut total = y.mul(&c)?.sum_all();
        if case.carry_loss {
            // The last leaf (h) first, as the oracle adds them.
            for (leaf, w) in carry.tensors().iter().zip(&carry_c).rev() {
                total = total.add(&leaf.mul(w)?.sum_all())?;
            }
        }
        Ok(total)
    };
    let inputs = Tree::new().with("params", params).with("x", x);
    report.note("loss", "loss", &loss(&inputs).unwrap(), &case.loss);
    report.note(
        "jit loss",
        "loss",
        &as_jitted(|| loss(&inputs)).unwrap(),
        &case.jit_loss,
    );
    for (jit, want_params, want_x) in [
        (false, &case.grad_params, &case.grad_x),
        (true, &case.jit_grad_params, &case.jit_grad_x),
    ] {
        let g = if jit {
            grad(|t| as_jitted(|| loss(t)), &inputs)
        } else {
            grad(loss, &inputs)
        }
        .unwrap();
        let part = if jit { "jit grad" } else { "grad" };
        for (path, t) in g.subtree("params").unwrap().paths() {
            report.note(part, &path, t, &want_params[&path]);
        }
        report.note(part, "x", g.tensor("x").unwrap(), want_x);
    }
    report
}

#[test]
fn rnn_gradients_match_flax() {
    let f: Fixture = load_fixture("rnn_grads.json");
    let (mut bad, mut still_known, mut known) = (Vec::new(), Vec::new(), Vec::new());
    let mut run = 0;
    for case in &f.cases {
        if NOT_PORTED.contains(&case.cell.as_str()) {
            continue;
        }
        run += 1;
        let report = match case.cell.as_str() {
            "lstm" => check(case, LSTMCell::new(case.features)),
            "gru" => check(case, GRUCell::new(case.features)),
            other => panic!("unknown cell {other}"),
        };
        // Every part expected to differ, and what does.
        let name = case.name();
        for part in ["forward", "loss", "jit loss", "grad", "jit grad"] {
            let key = format!("{name} {part}");
            let listed = KNOWN.contains(&key.as_str())
                || match part {
                    "grad" => known_grads(case, false),
                    "jit grad" => known_grads(case, true),
                    _ => false,
                };
            if listed {
                known.push(key.clone());
            }
            match (report.parts.get(part), listed) {
                (Some(_), true) => still_known.push(key),
                (Some(d), false) => bad.push(format!("{key}: {}", d.join("; "))),
                (None, _) => {}
            }
        }
    }
    assert!(run > 0, "no case ran");
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    common::assert_only_known(&bad, &still_known, &known);
}
