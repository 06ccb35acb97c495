//! Lifted transforms and the normalization layers against Flax 0.12.8
//! (tools/oracle/generate_modules.py): the design note's MLPs (by hand with
//! a tree-valued parameter, with `Vmap`, with BatchNorm statistics), vmap of
//! a non-root submodule with `in_axes=(0, None)`, `out_axes=1`, params on
//! axis 1, dropout with a split stream, one vmapped instance called twice,
//! gradients through an ensemble; scans with broadcast, per-step, carried
//! and broadcast non-parameter collections, reversed, nested with vmap both
//! ways, and trained (gradients through scan); vmap with parameters shared
//! by every item (a plain and a weight-tied model); BatchNorm/LayerNorm,
//! and gradients through a plain BatchNorm.

mod common;

use std::collections::BTreeMap;

use common::{load_fixture, ulp_distance};
use flaxen::core::{value_and_grad, Result, Rngs, Scope, Variables};
use flaxen::nn::{relu, BatchNorm, Dense, Dropout, LayerNorm, Module, Vmap};
use flaxen::random;
use flaxen::tensor::{Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Leaf {
    shape: Vec<usize>,
    bits: Vec<u32>,
}

type Leaves = BTreeMap<String, Leaf>;

#[derive(Deserialize)]
struct Norm {
    grad_x: Vec<u32>,
    grad_params: Leaves,
    grad_loss: Vec<u32>,
    grad_grads: Leaves,
    bn_x: Vec<u32>,
    bn_variables: BTreeMap<String, Leaves>,
    bn_train: Vec<u32>,
    bn_stats: Leaves,
    bn_eval: Vec<u32>,
    ln_x: Vec<u32>,
    ln_out: Vec<u32>,
}

#[derive(Deserialize)]
struct Lifted {
    mlp_out: Vec<u32>,
    mlp_params: Leaves,
    stateful: BTreeMap<String, Leaves>,
    stateful_x: Vec<u32>,
    stateful_out: Vec<u32>,
    stateful_stats: Leaves,
    stateful_loss: Vec<u32>,
    stateful_grads: Leaves,
    outer_x: Vec<u32>,
    outer_init: Vec<u32>,
    outer_vars: Leaves,
    outer_apply: Vec<u32>,
    ens_x: Vec<u32>,
    ens_y: Vec<u32>,
    ens_params: Leaves,
    ens_loss: Vec<u32>,
    ens_grads: Leaves,
}

#[derive(Deserialize)]
struct Manual {
    params: Leaves,
    init_out: Vec<u32>,
    x: Vec<u32>,
    apply_out: Vec<u32>,
}

#[derive(Deserialize)]
struct Fixture {
    normalization: Norm,
    lifted_vmap: Lifted,
    manual_vmap: Manual,
}

fn tensor(bits: &[u32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect(), shape).unwrap()
}

/// Largest ulp distance; asserts the values are within `max_ulp`.
fn check(what: &str, got: &Tensor, want: &[u32], max_ulp: u64) -> u64 {
    let g = got.to_vec();
    assert_eq!(g.len(), want.len(), "{what}: length");
    let d = g
        .iter()
        .zip(want)
        .map(|(&a, &b)| ulp_distance(a, f32::from_bits(b)))
        .max()
        .unwrap_or(0);
    assert!(d <= max_ulp, "{what}: {d} ulp off: got {g:?}");
    d
}

fn check_tree(what: &str, got: &Tree, want: &Leaves, max_ulp: u64) {
    assert_eq!(
        got.paths().len(),
        want.len(),
        "{what}: variables {:?}",
        got.paths().iter().map(|p| p.0.clone()).collect::<Vec<_>>()
    );
    for (path, leaf) in want {
        let t = got
            .tensor(path)
            .unwrap_or_else(|_| panic!("{what}: missing {path}"));
        assert_eq!(t.shape(), &leaf.shape[..], "{what} {path}");
        check(&format!("{what} {path}"), t, &leaf.bits, max_ulp);
    }
}

#[allow(dead_code)]
#[path = "../examples/lifted_mlp.rs"]
mod lifted_mlp;

use lifted_mlp::{LinenStatefulVmapMlp, LinenVmapMlp, ManualVmapMlp};

#[test]
fn design_note_manually_vmapped_mlp() {
    let f: Fixture = load_fixture("modules.json");
    let m = f.manual_vmap;
    let (out, v) = ManualVmapMlp
        .init_with_output(random::key(0), Tensor::ones(&[3, 4]))
        .unwrap();
    check_tree("params", &v.params(), &m.params, 0);
    // jax.vmap returns its dicts with sorted keys.
    assert_eq!(
        v.params().subtree("mlp/hidden").unwrap().keys(),
        ["bias", "kernel"]
    );
    check("init output", &out, &m.init_out, 0);
    let out = ManualVmapMlp.apply(&v, tensor(&m.x, &[3, 4]), ()).unwrap();
    check("apply output", &out, &m.apply_out, 0);
}

#[test]
fn design_note_vmapped_mlp() {
    let f: Fixture = load_fixture("modules.json");
    let l = f.lifted_vmap;
    let (out, v) = LinenVmapMlp
        .init_with_output(random::key(0), Tensor::ones(&[3, 4]))
        .unwrap();
    check_tree("params", &v.params(), &l.mlp_params, 0);
    check("output", &out, &l.mlp_out, 0);
}

#[test]
fn design_note_stateful_vmapped_mlp_init() {
    common::require_rsqrt_as_recorded!();
    let f: Fixture = load_fixture("modules.json");
    let v = LinenStatefulVmapMlp
        .init(random::key(0), (Tensor::ones(&[3, 5, 4]), true))
        .unwrap();
    for (c, want) in &f.lifted_vmap.stateful {
        check_tree(c, v.collection(c).unwrap(), want, 0);
    }
    // Training: BatchNorm averages its statistics over the mapped items.
    let l = &f.lifted_vmap;
    let x = tensor(&l.stateful_x, &[3, 5, 4]);
    let (out, updated) = LinenStatefulVmapMlp
        .apply_mut(&v, (x.clone(), true), (), ["batch_stats"])
        .unwrap();
    check_tree(
        "batch_stats",
        updated.collection("batch_stats").unwrap(),
        &l.stateful_stats,
        0,
    );
    check("output", &out, &l.stateful_out, 0);
    let (loss, grads) = value_and_grad(
        |params| {
            let vars = Variables::new()
                .with("params", params.clone())
                .with("batch_stats", v.collection("batch_stats").unwrap().clone());
            let (out, _) =
                LinenStatefulVmapMlp.apply_mut(&vars, (x.clone(), true), (), ["batch_stats"])?;
            Ok(out.square().mean_all())
        },
        &v.params(),
    )
    .unwrap();
    check("loss", &loss, &l.stateful_loss, 0);
    // Gradients too: BatchNorm runs once over the stacked items (as JAX's
    // batched computation), so the sums over the items of the statistics'
    // cotangents round as JAX's do.
    for (path, leaf) in &l.stateful_grads {
        check(path, grads.tensor(path).unwrap(), &leaf.bits, 0);
    }
}

struct Block;

impl Module for Block {
    type Input = (Tensor, Tensor);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, scale): (Tensor, Tensor)) -> Result<Tensor> {
        let h = s.call(Dense::new(3), x)?.mul(&scale)?;
        s.call(Dropout::new(0.5), h)
    }
}

struct Outer;

impl Module for Outer {
    type Input = (Tensor, Tensor);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, scale): (Tensor, Tensor)) -> Result<Tensor> {
        let x = s.call(Dense::new(3), x)?;
        let v = s.child(
            Vmap::new(Block)
                .in_axes((Some(0), None))
                .out_axes(1)
                .variable_axes("params", Some(1))
                .split_rngs("params", true)
                .split_rngs("dropout", true),
        )?;
        let a = v.call((x.clone(), scale.clone()))?;
        let b = v.call((x, scale))?;
        Ok(a.add(&b)?)
    }
}

#[test]
fn vmap_of_a_submodule_with_axes_dropout_and_two_calls() {
    let f: Fixture = load_fixture("modules.json");
    let l = f.lifted_vmap;
    let x = tensor(&l.outer_x, &[4, 2]);
    let (out, v) = Outer
        .init_with_output(
            Rngs::from([("params", random::key(3)), ("dropout", random::key(4))]),
            (x.clone(), Tensor::scalar(0.5)),
        )
        .unwrap();
    check_tree("params", &v.params(), &l.outer_vars, 0);
    check("init output", &out, &l.outer_init, 0);
    let out = Outer
        .apply(
            &v,
            (x, Tensor::scalar(2.0)),
            Rngs::none().with("dropout", random::key(9)),
        )
        .unwrap();
    check("apply output", &out, &l.outer_apply, 0);
}

#[test]
fn gradients_flow_through_vmap() {
    let f: Fixture = load_fixture("modules.json");
    let l = f.lifted_vmap;
    let x = tensor(&l.ens_x, &[5, 2]);
    let y = tensor(&l.ens_y, &[3, 5, 1]);
    let ensemble = || {
        Vmap::new(Dense::new(1))
            .in_axes(None)
            .axis_size(3)
            .variable_axes("params", Some(0))
            .split_rngs("params", true)
    };
    let v = ensemble().init(random::key(8), x.clone()).unwrap();
    check_tree("params", &v.params(), &l.ens_params, 0);
    let (loss, grads) = value_and_grad(
        |params| {
            let out = ensemble().apply(
                &Variables::new().with("params", params.clone()),
                x.clone(),
                (),
            )?;
            Ok(out.sub(&y)?.square().mean_all())
        },
        &v.params(),
    )
    .unwrap();
    check("loss", &loss, &l.ens_loss, 0);
    check_tree("grads", &grads, &l.ens_grads, 0);
}

#[test]
fn batch_norm_and_layer_norm() {
    common::require_rsqrt_as_recorded!();
    let f: Fixture = load_fixture("modules.json");
    let n = f.normalization;
    let x = tensor(&n.bn_x, &[8, 3]);
    let bn = BatchNorm::new().momentum(0.9);
    let v = bn.init(random::key(0), x.clone()).unwrap();
    for (c, want) in &n.bn_variables {
        check_tree(c, v.collection(c).unwrap(), want, 0);
    }
    let (y, updated) = bn.apply_mut(&v, x.clone(), (), ["batch_stats"]).unwrap();
    check("train output", &y, &n.bn_train, 0);
    check_tree(
        "batch_stats",
        updated.collection("batch_stats").unwrap(),
        &n.bn_stats,
        0,
    );
    let eval_vars = Variables::new().with("params", v.params()).with(
        "batch_stats",
        updated.collection("batch_stats").unwrap().clone(),
    );
    let y = bn
        .clone()
        .use_running_average(true)
        .apply(&eval_vars, x, ())
        .unwrap();
    check("eval output", &y, &n.bn_eval, 0);
    let z = tensor(&n.ln_x, &[4, 5]);
    let ln = LayerNorm::new();
    let lv = ln.init(random::key(0), z.clone()).unwrap();
    check("layer norm", &ln.apply(&lv, z, ()).unwrap(), &n.ln_out, 0);
}

#[derive(Deserialize)]
struct ScanRun {
    carry: Vec<u32>,
    ys: Vec<u32>,
    params: Leaves,
}

#[derive(Deserialize)]
struct DropoutBlocks {
    xs: Vec<u32>,
    carry: Vec<u32>,
    ys: Vec<u32>,
    params: Leaves,
    apply_carry: Vec<u32>,
    apply_ys: Vec<u32>,
}

#[derive(Deserialize)]
struct VmapOfScan {
    cs: Vec<u32>,
    xss: Vec<u32>,
    carry: Vec<u32>,
    ys: Vec<u32>,
    params: Leaves,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct Scans {
    rnn_reverse_False: ScanRun,
    rnn_reverse_True: ScanRun,
    dropout_blocks: DropoutBlocks,
    vmap_of_scan: VmapOfScan,
    c: Vec<u32>,
    xs: Vec<u32>,
}

#[derive(Deserialize)]
struct ScanFixture {
    lifted_scan: Scans,
}

pub struct Cell;

impl Module for Cell {
    type Input = (Tensor, Tensor);
    type Output = (Tensor, Tensor);
    fn call(&self, s: &Scope<'_>, (c, x): (Tensor, Tensor)) -> Result<(Tensor, Tensor)> {
        let h = s.call(Dense::new(2), c)?.add(&x)?.tanh();
        let y = h.mul(&Tensor::scalar(2.0))?;
        Ok((h, y))
    }
}

fn rnn(reverse: bool) -> flaxen::nn::Scan<Cell> {
    flaxen::nn::Scan::new(Cell)
        .variable_broadcast("params")
        .split_rngs("params", false)
        .reverse(reverse)
}

#[test]
fn scan_rnn_with_broadcast_params_forward_and_reversed() {
    let f: ScanFixture = load_fixture("modules.json");
    let l = f.lifted_scan;
    let c = tensor(&l.c, &[2]);
    let xs = tensor(&l.xs, &[4, 2]);
    for (reverse, want) in [(false, &l.rnn_reverse_False), (true, &l.rnn_reverse_True)] {
        let ((carry, ys), v) = rnn(reverse)
            .init_with_output(random::key(0), (c.clone(), xs.clone()))
            .unwrap();
        check_tree("params", &v.params(), &want.params, 0);
        check("carry", &carry, &want.carry, 0);
        check("ys", &ys, &want.ys, 0);
    }
}

struct DropBlock;

impl Module for DropBlock {
    type Input = (Tensor, Tensor);
    type Output = (Tensor, Tensor);
    fn call(&self, s: &Scope<'_>, (c, x): (Tensor, Tensor)) -> Result<(Tensor, Tensor)> {
        let h = s.call(Dense::new(3), c)?.add(&x)?;
        let h = s.call(Dropout::new(0.5), h)?;
        let total = h.sum_all();
        Ok((h, total))
    }
}

#[test]
fn scan_with_per_step_params_and_split_dropout() {
    let f: ScanFixture = load_fixture("modules.json");
    let d = f.lifted_scan.dropout_blocks;
    let blocks = || {
        flaxen::nn::Scan::new(DropBlock)
            .variable_axes("params", 0)
            .split_rngs("params", true)
            .split_rngs("dropout", true)
    };
    let c = Tensor::ones(&[3]);
    let xs = tensor(&d.xs, &[5, 3]);
    let ((carry, ys), v) = blocks()
        .init_with_output(
            Rngs::from([("params", random::key(1)), ("dropout", random::key(2))]),
            (c.clone(), xs.clone()),
        )
        .unwrap();
    check_tree("params", &v.params(), &d.params, 0);
    check("carry", &carry, &d.carry, 0);
    check("ys", &ys, &d.ys, 0);
    let (carry, ys) = blocks()
        .apply(&v, (c, xs), Rngs::none().with("dropout", random::key(7)))
        .unwrap();
    check("apply carry", &carry, &d.apply_carry, 0);
    check("apply ys", &ys, &d.apply_ys, 0);
}

#[test]
fn vmap_of_scan() {
    let f: ScanFixture = load_fixture("modules.json");
    let m = f.lifted_scan.vmap_of_scan;
    let cs = tensor(&m.cs, &[3, 2]);
    let xss = tensor(&m.xss, &[3, 4, 2]);
    let vrnn = Vmap::new(rnn(false))
        .in_axes((Some(0), Some(0)))
        .out_axes((0, 0))
        .variable_axes("params", Some(0))
        .split_rngs("params", true);
    let ((carry, ys), v) = vrnn.init_with_output(random::key(5), (cs, xss)).unwrap();
    check_tree("params", &v.params(), &m.params, 0);
    check("carry", &carry, &m.carry, 0);
    check("ys", &ys, &m.ys, 0);
}

#[allow(dead_code)]
#[path = "../examples/lift_transpose.rs"]
mod lift_transpose_example;

#[derive(Deserialize)]
struct LiftTranspose {
    y: Vec<u32>,
    params: Leaves,
}

#[derive(Deserialize)]
struct LiftTransposeFixture {
    lift_transpose: LiftTranspose,
}

#[test]
fn lift_transpose_on_the_functional_core() {
    let f: LiftTransposeFixture = load_fixture("modules.json");
    let x = Tensor::ones(&[3, 2]);
    let (y, variables) = flaxen::core::init(random::key(0), |scope| {
        lift_transpose_example::lift_transpose(scope, |s| lift_transpose_example::dense(s, &x, 4))
    })
    .unwrap();
    check("y", &y, &f.lift_transpose.y, 0);
    check_tree("params", &variables.params(), &f.lift_transpose.params, 0);
    // Applying transposes the stored (2, 4) kernel to (4, 2) on the way in,
    // which the dense layer rejects with both shapes named.
    let e = flaxen::core::apply(&variables, (), false, |scope| {
        lift_transpose_example::lift_transpose(scope, |s| lift_transpose_example::dense(s, &x, 4))
    })
    .unwrap_err();
    assert!(e.to_string().contains("[4, 2]"), "{e}");
}

#[derive(Deserialize)]
struct ScanOfVmap {
    c: Vec<u32>,
    xs: Vec<u32>,
    carry: Vec<u32>,
    ys: Vec<u32>,
    params: Leaves,
}

#[derive(Deserialize)]
struct VmapBatchNorm {
    x: Vec<u32>,
    params: Leaves,
    y: Vec<u32>,
    stats: Leaves,
}

#[derive(Deserialize)]
struct MoreScans {
    scan_of_vmap: ScanOfVmap,
    vmap_batch_norm: VmapBatchNorm,
}

#[derive(Deserialize)]
struct MoreFixture {
    lifted_scan: MoreScans,
}

struct TwoCells;

impl Module for TwoCells {
    type Input = (Tensor, Tensor);
    type Output = (Tensor, Tensor);
    fn call(&self, s: &Scope<'_>, input: (Tensor, Tensor)) -> Result<(Tensor, Tensor)> {
        let v = Vmap::new(Cell)
            .variable_axes("params", Some(0))
            .split_rngs("params", true);
        s.call(v, input)
    }
}

#[test]
fn scan_of_vmap() {
    let f: MoreFixture = load_fixture("modules.json");
    let m = f.lifted_scan.scan_of_vmap;
    let sv = flaxen::nn::Scan::new(TwoCells)
        .variable_axes("params", 0)
        .split_rngs("params", true);
    let ((carry, ys), v) = sv
        .init_with_output(
            random::key(6),
            (tensor(&m.c, &[2, 2]), tensor(&m.xs, &[3, 2, 2])),
        )
        .unwrap();
    check_tree("params", &v.params(), &m.params, 0);
    check("carry", &carry, &m.carry, 0);
    check("ys", &ys, &m.ys, 0);
}

struct Normed;

impl Module for Normed {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(3), x)?;
        s.call(BatchNorm::new().momentum(0.8), h)
    }
}

#[test]
fn batch_norm_inside_vmap_with_mutable_batch_stats() {
    common::require_rsqrt_as_recorded!();
    let f: MoreFixture = load_fixture("modules.json");
    let b = f.lifted_scan.vmap_batch_norm;
    let x = tensor(&b.x, &[2, 6, 4]);
    let vb = || {
        Vmap::new(Normed)
            .variable_axes("params", Some(0))
            .variable_axes("batch_stats", Some(0))
            .split_rngs("params", true)
    };
    let v = vb().init(random::key(11), x.clone()).unwrap();
    check_tree("params", &v.params(), &b.params, 0);
    let (y, updated) = vb().apply_mut(&v, x, (), ["batch_stats"]).unwrap();
    check_tree(
        "batch_stats",
        updated.collection("batch_stats").unwrap(),
        &b.stats,
        0,
    );
    check("output", &y, &b.y, 0);
}

#[derive(Deserialize)]
struct TrainStep {
    params: Leaves,
    loss: Vec<u32>,
    grads: Leaves,
}

#[derive(Deserialize)]
struct ScanTraining {
    x: Vec<u32>,
    y: Vec<u32>,
    steps: Vec<TrainStep>,
    rnn_c: Vec<u32>,
    rnn_xs: Vec<u32>,
    rnn_params: Leaves,
    rnn_loss: Vec<u32>,
    rnn_grads: Leaves,
    batched_c: Vec<u32>,
    batched_xs: Vec<u32>,
    batched_params: Leaves,
    batched_loss: Vec<u32>,
    batched_grads: Leaves,
}

#[derive(Deserialize)]
struct ScanTrainingFixture {
    scan_training: ScanTraining,
}

/// `c + relu(Dense(4)(c))`, scanned with per-step parameters.
struct ResBlock;

impl Module for ResBlock {
    type Input = (Tensor, ());
    type Output = (Tensor, ());
    fn call(&self, s: &Scope<'_>, (c, _): (Tensor, ())) -> Result<(Tensor, ())> {
        let h = s.call(Dense::new(4), c.clone())?.relu();
        Ok((c.add(&h)?, ()))
    }
}

#[test]
fn training_a_scanned_mlp_and_gradients_through_broadcast_params() {
    let f: ScanTrainingFixture = load_fixture("modules.json");
    let t = f.scan_training;
    let mlp = || {
        flaxen::nn::Scan::new(ResBlock)
            .variable_axes("params", 0)
            .split_rngs("params", true)
            .length(3)
    };
    let (x, y) = (tensor(&t.x, &[5, 4]), tensor(&t.y, &[5, 4]));
    let mut params = mlp()
        .init(random::key(11), (x.clone(), ()))
        .unwrap()
        .params();
    for (k, step) in t.steps.iter().enumerate() {
        check_tree(&format!("step {k} params"), &params, &step.params, 0);
        let (loss, grads) = value_and_grad(
            |p| {
                let vars = Variables::new().with("params", p.clone());
                let (out, ()) = mlp().apply(&vars, (x.clone(), ()), ())?;
                Ok(out.sub(&y)?.square().mean_all())
            },
            &params,
        )
        .unwrap();
        check(&format!("step {k} loss"), &loss, &step.loss, 0);
        check_tree(&format!("step {k} grads"), &grads, &step.grads, 0);
        params =
            flaxen::tensor::tree_map2(&params, &grads, |p, g| p.sub(&g.mul(&Tensor::scalar(0.1))?))
                .unwrap();
    }
    // The RNN's parameters are broadcast: their gradient sums every step's.
    let (c, xs) = (tensor(&t.rnn_c, &[2]), tensor(&t.rnn_xs, &[6, 2]));
    let v = rnn(false)
        .init(random::key(12), (c.clone(), xs.clone()))
        .unwrap();
    check_tree("rnn params", &v.params(), &t.rnn_params, 0);
    let (loss, grads) = value_and_grad(
        |p| {
            let vars = Variables::new().with("params", p.clone());
            let (cf, ys) = rnn(false).apply(&vars, (c.clone(), xs.clone()), ())?;
            Ok(ys.square().sum_all().add(&cf.sum_all())?)
        },
        &v.params(),
    )
    .unwrap();
    check("rnn loss", &loss, &t.rnn_loss, 0);
    // Exact thanks to the backward rules being fused as XLA fuses them in
    // scan's compiled body (`src/tensor/compiled.rs`): tanh's, and the
    // kernel's cotangent, an outer product that XLA adds into its
    // accumulator as one fused multiply-add per element.
    check_tree("rnn grads", &grads, &t.rnn_grads, 0);

    // On a batch, the kernel's cotangent is a dot over the batch, rounded
    // before it is added (no fusion): exact as well.
    let (c, xs) = (
        tensor(&t.batched_c, &[3, 2]),
        tensor(&t.batched_xs, &[6, 3, 2]),
    );
    let v = rnn(false)
        .init(random::key(12), (c.clone(), xs.clone()))
        .unwrap();
    check_tree("batched params", &v.params(), &t.batched_params, 0);
    let (loss, grads) = value_and_grad(
        |p| {
            let vars = Variables::new().with("params", p.clone());
            let (cf, ys) = rnn(false).apply(&vars, (c.clone(), xs.clone()), ())?;
            Ok(ys.square().sum_all().add(&cf.sum_all())?)
        },
        &v.params(),
    )
    .unwrap();
    check("batched loss", &loss, &t.batched_loss, 0);
    check_tree("batched grads", &grads, &t.batched_grads, 0);
}

#[derive(Deserialize)]
struct ScanCollections {
    c: Vec<u32>,
    xs: Vec<u32>,
    init_carry: Vec<u32>,
    init_ys: Vec<u32>,
    init_vars: BTreeMap<String, Leaves>,
    carry: Vec<u32>,
    ys: Vec<u32>,
    counter: Leaves,
}

#[derive(Deserialize)]
struct ScanCollectionsFixture {
    scan_collections: ScanCollections,
}

/// A step with a constant in `consts` (broadcast) and a step counter in
/// `counter` (carried).
struct CountingStep;

impl Module for CountingStep {
    type Input = (Tensor, Tensor);
    type Output = (Tensor, Tensor);
    fn call(&self, s: &Scope<'_>, (c, x): (Tensor, Tensor)) -> Result<(Tensor, Tensor)> {
        let scale = s.variable("consts", "scale", || Ok(Tensor::full(&[2], 0.5)))?;
        let n = s.variable("counter", "n", || Ok(Tensor::zeros(&[])))?;
        n.set(n.value().add(&Tensor::scalar(1.0))?)?;
        let h = s.call(Dense::new(2), c)?.mul(&scale.value())?.add(&x)?;
        let y = h.mul(&n.value())?;
        Ok((h, y))
    }
}

#[test]
fn scan_with_broadcast_and_carried_collections() {
    let f: ScanCollectionsFixture = load_fixture("modules.json");
    let t = f.scan_collections;
    let scan = || {
        flaxen::nn::Scan::new(CountingStep)
            .variable_broadcast(["params", "consts"])
            .variable_carry("counter")
            .split_rngs("params", false)
    };
    let (c, xs) = (tensor(&t.c, &[2]), tensor(&t.xs, &[3, 2]));
    // The counter must exist before the scan; params and consts are made
    // by the first (constancy-check) pass, which does not commit the carry.
    let start = Variables::new().with("counter", Tree::new().with("n", Tensor::zeros(&[])));
    let ((carry, ys), v) = scan()
        .apply_mut(
            &start,
            (c.clone(), xs.clone()),
            Rngs::from([("params", random::key(13))]),
            true,
        )
        .unwrap();
    check("init carry", &carry, &t.init_carry, 0);
    check("init ys", &ys, &t.init_ys, 0);
    for (collection, want) in &t.init_vars {
        check_tree(collection, v.collection(collection).unwrap(), want, 0);
    }
    let ((carry, ys), updated) = scan().apply_mut(&v, (c, xs), (), ["counter"]).unwrap();
    check("carry", &carry, &t.carry, 0);
    check("ys", &ys, &t.ys, 0);
    check_tree(
        "counter",
        updated.collection("counter").unwrap(),
        &t.counter,
        0,
    );
}

#[derive(Deserialize)]
struct NestedCollectives {
    x: Vec<u32>,
    out: Vec<u32>,
    params: Leaves,
    loss: Vec<u32>,
    grads: Leaves,
    center_x: Vec<u32>,
    center_params: Leaves,
    center_loss: Vec<u32>,
    center_grads: Leaves,
}

/// `h - pmean(h)` over the mapped axis.
struct Center;

impl Module for Center {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(3), x)?;
        Ok(h.sub(&s.pmean("batch", &h)?)?)
    }
}

#[derive(Deserialize)]
struct NestedCollectivesFixture {
    nested_collectives: NestedCollectives,
}

/// `pmean` over the outer mapped axis, `psum` over the inner one.
struct TwoAxes;

impl Module for TwoAxes {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(2), x)?;
        let a = s.pmean("outer", &h)?;
        let b = s.psum("inner", &h.mul(&a)?)?;
        Ok(a.add(&b)?)
    }
}

#[test]
fn nested_vmaps_with_collectives_over_both_axes() {
    let f: NestedCollectivesFixture = load_fixture("modules.json");
    let t = f.nested_collectives;
    let model = || {
        Vmap::new(
            Vmap::new(TwoAxes)
                .variable_axes("params", Some(0))
                .split_rngs("params", true)
                .axis_name("inner"),
        )
        .variable_axes("params", Some(0))
        .split_rngs("params", true)
        .axis_name("outer")
    };
    let x = tensor(&t.x, &[3, 2, 4]);
    let (out, v) = model()
        .init_with_output(random::key(14), x.clone())
        .unwrap();
    check_tree("params", &v.params(), &t.params, 0);
    check("out", &out, &t.out, 0);
    let (loss, grads) = value_and_grad(
        |p| {
            let vars = Variables::new().with("params", p.clone());
            // Flattened, as the oracle does (see generate_modules.py).
            Ok(model()
                .apply(&vars, x.clone(), ())?
                .square()
                .reshape(&[-1])?
                .sum_all())
        },
        &v.params(),
    )
    .unwrap();
    check("loss", &loss, &t.loss, 0);
    let nested_grads = grads;

    // One use of the reduced value per item: its cotangents are summed over
    // the items in item order, as JAX's transpose does.
    let center = || {
        Vmap::new(Center)
            .variable_axes("params", Some(0))
            .split_rngs("params", true)
            .axis_name("batch")
    };
    let x = tensor(&t.center_x, &[5, 4]);
    let v = center().init(random::key(15), x.clone()).unwrap();
    check_tree("center params", &v.params(), &t.center_params, 0);
    let (loss, grads) = value_and_grad(
        |p| {
            let vars = Variables::new().with("params", p.clone());
            Ok(center()
                .apply(&vars, x.clone(), ())?
                .square()
                .reshape(&[-1])?
                .sum_all())
        },
        &v.params(),
    )
    .unwrap();
    check("center loss", &loss, &t.center_loss, 0);
    check_tree("center grads", &grads, &t.center_grads, 0);

    // With two uses of the outer mean in every item: JAX runs the items as
    // one batch, so the cotangents of the mean are summed over the items
    // for each use, then the uses are added; each item reads the mean
    // through its own view, whose cotangents flaxen combines the same way.
    check_tree("grads", &nested_grads, &t.grads, 0);
}

struct BnMlp;

impl Module for BnMlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call_named("hidden", Dense::new(4), x)?;
        let h = s.call(BatchNorm::new(), h)?;
        s.call_named("out", Dense::new(1), relu(&h))
    }
}

#[test]
fn gradients_through_batch_norm_are_bit_exact() {
    common::require_rsqrt_as_recorded!();
    // Dense -> BatchNorm -> relu -> Dense, trained with mutable batch_stats:
    // as Flax computes |x|^2 before the means, the cotangents of x add up
    // in JAX's order.
    let f: Fixture = load_fixture("modules.json");
    let n = f.normalization;
    let x = tensor(&n.grad_x, &[7, 4]);
    let v = BnMlp.init(random::key(0), x.clone()).unwrap();
    check_tree("params", &v.params(), &n.grad_params, 0);
    let (loss, grads) = value_and_grad(
        |params| {
            let vars = Variables::new()
                .with("params", params.clone())
                .with("batch_stats", v.collection("batch_stats").unwrap().clone());
            let (out, _) = BnMlp.apply_mut(&vars, x.clone(), (), ["batch_stats"])?;
            Ok(out.square().mean_all())
        },
        &v.params(),
    )
    .unwrap();
    check("loss", &loss, &n.grad_loss, 0);
    check_tree("grads", &grads, &n.grad_grads, 0);
}

#[derive(Deserialize)]
struct SharedCase {
    x: Vec<u32>,
    y: Vec<u32>,
    params: Leaves,
    #[serde(default)]
    loss: Vec<u32>,
    #[serde(default)]
    grads: Leaves,
    #[serde(default)]
    x_grad: Vec<u32>,
}

#[derive(Deserialize)]
struct SharedParamsFixture {
    vmap_shared_params: BTreeMap<String, SharedCase>,
}

/// `relu(Dense(4)) -> Dense(2)`, per example.
#[derive(Clone)]
struct SmallMlp;

impl Module for SmallMlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(4), x)?.relu();
        s.call(Dense::new(2), h)
    }
}

/// One `Dense(3)` used twice (tied weights).
#[derive(Clone)]
struct Tied;

impl Module for Tied {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let d = s.child(Dense::new(3))?;
        let h = d.call(x)?.tanh();
        d.call(h)
    }
}

/// Checks one case of `vmap_shared_params`; returns the largest distance
/// in ulp of the output, the loss and the gradients (the parameters must be
/// exact).
fn shared_case<M>(case: &SharedCase, m: M, b: usize) -> u64
where
    M: Module<Input = Tensor, Output = Tensor> + Sync + Clone,
{
    let model = || {
        Vmap::new(m.clone())
            .variable_axes("params", None)
            .split_rngs("params", false)
    };
    let x = tensor(&case.x, &[b, 3]);
    let (y, v) = model()
        .init_with_output(random::key(16), x.clone())
        .unwrap();
    check_tree("params", &v.params(), &case.params, 0);
    let (loss, grads) = value_and_grad(
        |p| {
            let vars = Variables::new().with("params", p.clone());
            Ok(model()
                .apply(&vars, x.clone(), ())?
                .square()
                .reshape(&[-1])?
                .sum_all())
        },
        &v.params(),
    )
    .unwrap();
    // The largest distance (`check` with no bound measures it).
    let mut d = check("y", &y, &case.y, u64::MAX).max(check("loss", &loss, &case.loss, u64::MAX));
    for (path, leaf) in &case.grads {
        d = d.max(check(
            path,
            grads.tensor(path).unwrap(),
            &leaf.bits,
            u64::MAX,
        ));
    }
    d
}

#[test]
fn vmap_with_parameters_shared_by_every_item() {
    // JAX runs the items as one batch: a product with a shared kernel is
    // one product over all the items' rows, and a shared parameter's
    // cotangent is summed over the items per use (a product over the
    // items' rows for a kernel, a reduction for a bias), then over the
    // uses. flaxen's items reproduce both (`tensor::batched`).
    let f: SharedParamsFixture = load_fixture("modules.json");
    let cases = &f.vmap_shared_params;
    assert_eq!(shared_case(&cases["mlp_5"], SmallMlp, 5), 0, "mlp, 5 items");
    assert_eq!(shared_case(&cases["tied_5"], Tied, 5), 0, "tied, 5 items");
    // With 40 items too: the batched products of 40 rows go to XLA's
    // YNNPACK kernels, whose order `matmul` follows for that shape, and the
    // sums over the 40 items (the biases' cotangents) and over the 80
    // outputs (the loss) are XLA's tree reductions in windows of 32.
    assert_eq!(
        shared_case(&cases["mlp_40"], SmallMlp, 40),
        0,
        "mlp, 40 items"
    );
    assert_eq!(
        shared_case(&cases["tied_40"], Tied, 40),
        0,
        "tied, 40 items"
    );

    // An ensemble on one shared example: the items are folded into the
    // columns of JAX's product (16 of them); alone, a one-row product with
    // 2 columns would be summed as XLA's one-row kernel does.
    let e = &cases["ensemble"];
    let ensemble = Vmap::new(Dense::new(2))
        .variable_axes("params", Some(0))
        .split_rngs("params", true)
        .in_axes(None)
        .axis_size(8);
    let (y, v) = ensemble
        .init_with_output(random::key(17), tensor(&e.x, &[8]))
        .unwrap();
    check_tree("ensemble params", &v.params(), &e.params, 0);
    check("ensemble y", &y, &e.y, 0);
    let x = tensor(&e.x, &[8]);
    let (loss, grads) = value_and_grad(
        |p| {
            let vars = Variables::new().with("params", p.clone());
            Ok(ensemble
                .apply(&vars, x.clone(), ())?
                .square()
                .reshape(&[-1])?
                .sum_all())
        },
        &v.params(),
    )
    .unwrap();
    check("ensemble loss", &loss, &e.loss, 0);
    check_tree("ensemble grads", &grads, &e.grads, 0);
    // With respect to the shared example: each item reads it through its
    // own view, and the cotangents are summed over the items as JAX does.
    let vars = Variables::new().with("params", v.params());
    let x_grad = value_and_grad(
        |t| {
            let x = t.tensor("x")?;
            Ok(ensemble
                .apply(&vars, x.clone(), ())?
                .square()
                .reshape(&[-1])?
                .sum_all())
        },
        &Tree::new().with("x", x),
    )
    .unwrap()
    .1;
    check("ensemble x grad", x_grad.tensor("x").unwrap(), &e.x_grad, 0);
}
