//! A compiled step's replays compute what its trace computed, bit for bit,
//! where the trace's backward pass fuses cotangents into their
//! accumulation: a compiled sigmoid's `g * s (1 - s)` carried through
//! additions into a bias that already holds a cotangent
//! (`ProductCotangents`), and outer products of a batch of one or a
//! one-column head (`FusedOuter`). Calls 0 (the trace), 1 and 2 run with
//! the same parameters and batch and must agree; the one-row recurrent
//! networks also against `jax.jit(jax.grad)` (tools/oracle/
//! generate_rnn_grads.py's jitted gradients).

mod common;
use std::collections::BTreeMap;

use common::{differing, load_fixture, tensor_bits, Expected};
use flaxen::core::Variables;
use flaxen::nn::{GRUCell, LSTMCell, Module, RecurrentCell, RNN};
use flaxen::random;
use flaxen::tensor::{jit_value_and_grad_with, Tensor, Tree};
use serde::Deserialize;

/// The loss's and every gradient's bits, by path.
fn bits(loss: &Tensor, grads: &Tree) -> Vec<(String, Vec<u32>)> {
    let mut all = vec![("loss".to_string(), tensor_bits(loss))];
    all.extend(grads.paths().into_iter().map(|(p, t)| (p, tensor_bits(t))));
    all
}

/// Runs `f` compiled three times on the same `params` and `inputs`;
/// returns whether it replayed, the traced call's gradients, and what the
/// replays changed (paths of call 1 or 2 differing from call 0).
fn three_calls(
    params: &Tree,
    inputs: &Tree,
    f: impl Fn(&Tree, &Tree) -> flaxen::Result<Tensor>,
) -> (bool, Tree, Vec<String>) {
    let mut step = jit_value_and_grad_with(f);
    let (loss, traced) = step.call_with(params, inputs).unwrap();
    let first = bits(&loss, &traced);
    let mut changed = Vec::new();
    for call in 1..=2 {
        let (l, g) = step.call_with(params, inputs).unwrap();
        for ((path, want), (_, got)) in first.iter().zip(bits(&l, &g)) {
            if *want != got {
                changed.push(format!("call {call} {path}"));
            }
        }
    }
    (step.is_compiled(), traced, changed)
}

/// `steps` steps of `h = sigmoid(x_t W + h U + b)` over `rows` rows of
/// `features` (three inputs), the loss summing `h * c` after each step:
/// the bias's cotangents of one row accumulate over the steps as fused
/// products, and the kernels' as fused outer products.
#[test]
fn dense_sigmoid_scan_replays_its_trace() {
    for (rows, features) in [(1, 4), (1, 3), (1, 17), (1, 1), (2, 4)] {
        let steps = 5;
        let params = Tree::new()
            .with("w", common::uniform_inputs(&[3, features], 1, 0.5))
            .with("u", common::uniform_inputs(&[features, features], 2, 0.5))
            .with("b", common::uniform_inputs(&[features], 3, 0.5));
        let mut inputs = Tree::new();
        for t in 0..steps {
            let x = common::uniform_inputs(&[rows, 3], 10 + t as u64, 1.0);
            inputs.insert(format!("x{t}"), Tree::leaf(x)).unwrap();
        }
        let c = common::uniform_inputs(&[rows, features], 4, 1.0);
        let (compiled, _, changed) = three_calls(&params, &inputs, |p, b| {
            let mut h = Tensor::zeros(&[rows, features]);
            let mut total: Option<Tensor> = None;
            for t in 0..steps {
                let x = b.tensor(&format!("x{t}"))?;
                h = x
                    .matmul(p.tensor("w")?)?
                    .add(&h.matmul(p.tensor("u")?)?)?
                    .add(p.tensor("b")?)?
                    .sigmoid();
                let term = h.mul(&c)?.sum_all();
                total = Some(match total {
                    Some(s) => s.add(&term)?,
                    None => term,
                });
            }
            Ok(total.expect("at least one step"))
        });
        let name = format!("{rows} rows of {features}");
        assert!(compiled, "{name}: not compiled");
        assert!(changed.is_empty(), "{name}: {changed:?}");
    }
}

/// A batch of one through `Dense(4)`, a sigmoid and a `Dense(1)` head, one
/// example after another: the first kernel's cotangents accumulate as
/// outer products (a contraction of one row), and the hidden activations'
/// cotangent through the head (a contraction of one column) is fused into
/// the one the loss's other term gave them.
#[test]
fn batch_of_one_with_a_one_column_head_replays_its_trace() {
    let params = Tree::new()
        .with("w", common::uniform_inputs(&[3, 4], 21, 0.5))
        .with("b", common::uniform_inputs(&[4], 22, 0.5))
        .with("v", common::uniform_inputs(&[4, 1], 23, 0.5))
        .with("c", common::uniform_inputs(&[1], 24, 0.5));
    let mut inputs = Tree::new();
    for t in 0..4 {
        let x = common::uniform_inputs(&[1, 3], 30 + t as u64, 1.0);
        inputs.insert(format!("x{t}"), Tree::leaf(x)).unwrap();
    }
    let (compiled, _, changed) = three_calls(&params, &inputs, |p, b| {
        let mut total: Option<Tensor> = None;
        for t in 0..4 {
            let x = b.tensor(&format!("x{t}"))?;
            let h = x.matmul(p.tensor("w")?)?.add(p.tensor("b")?)?.sigmoid();
            let y = h.matmul(p.tensor("v")?)?.add(p.tensor("c")?)?;
            let term = y.square().sum_all().add(&h.sum_all())?;
            total = Some(match total {
                Some(s) => s.add(&term)?,
                None => term,
            });
        }
        Ok(total.expect("four examples"))
    });
    assert!(compiled, "not compiled");
    assert!(changed.is_empty(), "{changed:?}");
}

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

/// The parts of tests/rnn_grads.rs's cases used here.
#[derive(Deserialize)]
struct Case {
    cell: String,
    batch: usize,
    features: usize,
    inputs: usize,
    time: usize,
    reverse: bool,
    carry_loss: bool,
    seed: u64,
    params: Vec<ParamSpec>,
    jit_grad_params: BTreeMap<String, Expected>,
    jit_grad_x: Expected,
}

/// Whether a case's jitted gradients are known to differ from
/// `jax.jit`'s (tests/rnn_grads.rs's `known_grads` of the jitted ones:
/// products of length one, and the loops XLA hoists in an LSTM of one row
/// of up to three features).
fn known_jit_grads(case: &Case) -> bool {
    let lstm_hoisted =
        case.cell == "lstm" && case.batch == 1 && case.features <= 3 && case.time > 1;
    case.features == 1 || case.inputs == 1 || lstm_hoisted
}

/// One case as tests/rnn_grads.rs runs it (`sum(y * c)` over the inputs'
/// parameters), compiled: whether the replays changed anything, and the
/// traced gradients' differences from `jax.jit(jax.grad)`.
fn rnn_case<C: RecurrentCell + Clone>(case: &Case, cell: C) -> (Vec<String>, Vec<String>) {
    let rnn = RNN::new(cell);
    let x = common::uniform_inputs(&[case.batch, case.time, case.inputs], case.seed, 1.0);
    let v = rnn.init(random::key(0), x.clone().into()).unwrap();
    let ours = v.params();
    let specs: BTreeMap<&str, &ParamSpec> =
        case.params.iter().map(|p| (p.path.as_str(), p)).collect();
    let leaves = ours
        .paths()
        .into_iter()
        .map(|(path, _)| {
            let spec = specs[path.as_str()];
            common::uniform_inputs(&spec.shape, spec.seed, spec.width)
        })
        .collect();
    let params = ours.with_leaves(leaves).unwrap();
    let y_shape = [case.batch, case.time, case.features];
    let c = common::uniform_inputs(&y_shape, case.seed + 50, 1.0);
    // The input is differentiated too, as the oracle does.
    let args = Tree::new().with("params", params).with("x", x);
    let (_, grads, changed) = three_calls(&args, &Tree::new(), |t, _| {
        let vars = Variables::new().with("params", t.subtree("params").unwrap());
        let (_, y) = rnn.apply(&vars, t.tensor("x")?.clone().into(), ())?;
        Ok(y.mul(&c)?.sum_all())
    });
    let mut oracle = Vec::new();
    for (path, g) in grads.subtree("params").unwrap().paths() {
        if let Some(d) = differing(g, &case.jit_grad_params[&path]) {
            oracle.push(format!("{path}: {d}"));
        }
    }
    if let Some(d) = differing(grads.tensor("x").unwrap(), &case.jit_grad_x) {
        oracle.push(format!("x: {d}"));
    }
    (changed, oracle)
}

/// One-row LSTMs and GRUs over several steps (`nn.RNN`, whose scan body
/// fuses the gates' bias cotangents into their accumulators): the replays
/// equal the trace, and where flaxen models XLA's fusions, the gradients
/// equal `jax.jit(jax.grad)`'s.
#[test]
fn one_row_recurrent_networks_replay_their_trace() {
    let f: Fixture = load_fixture("rnn_grads.json");
    let (mut bad, mut exact, mut run) = (Vec::new(), 0, 0);
    for case in &f.cases {
        let one_row = case.batch == 1 && case.time > 1;
        if !one_row || case.reverse || case.carry_loss {
            continue;
        }
        let (changed, oracle) = match case.cell.as_str() {
            "lstm" => rnn_case(case, LSTMCell::new(case.features)),
            "gru" => rnn_case(case, GRUCell::new(case.features)),
            _ => continue,
        };
        run += 1;
        let name = format!(
            "{} f{} i{} t{}",
            case.cell, case.features, case.inputs, case.time
        );
        if !changed.is_empty() {
            bad.push(format!("{name}: replays changed {changed:?}"));
        }
        match (oracle.is_empty(), known_jit_grads(case)) {
            (true, _) => exact += 1,
            (false, false) => bad.push(format!("{name}: {}", oracle.join("; "))),
            (false, true) => {}
        }
    }
    assert!(run >= 10, "only {run} cases ran");
    assert!(bad.is_empty(), "{exact} of {run} exact; {bad:#?}");
}
