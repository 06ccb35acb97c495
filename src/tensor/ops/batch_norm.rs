//! The steps of BatchNorm's forward pass as a jitted module compiles them
//! ([`crate::xla::batch_norm`]), as tensor operations a forward program
//! records and replays; and BatchNorm as one operation whose
//! backward rule is the jitted module's under `grad`
//! ([`crate::xla::batch_norm_grad`]).

use ndarray::{ArcArray, ArrayD, IxDyn};
use smallvec::SmallVec;

use crate::tensor::batched::current_layout;
use crate::tensor::compiled::{forward_jit_tape, grad_jit};
use crate::tensor::custom::recorded;
use crate::tensor::tape::{InputGrads, OpKind};
use crate::tensor::Tensor;
use crate::xla::batch_norm::Step;
use crate::xla::batch_norm_grad as grad;

/// Whether `tensors` may go through the compiled steps: inside a jitted
/// module's forward program, each untraced, traced on a closed tape, or
/// traced on the program's own tape (never by a differentiation, whose
/// numbers are not these and which could not differentiate them).
pub(crate) fn compiled_batch_norm(tensors: &[&Tensor]) -> bool {
    let Some(tape) = forward_jit_tape() else {
        return false;
    };
    tensors.iter().all(|t| match &t.tracer {
        None => true,
        Some(tr) => !tr.tape.is_open() || Some(tr.tape.id) == tape,
    })
}

impl Tensor {
    /// One compiled BatchNorm step of `inputs` (at most three, row-major
    /// shapes as [`Step`] expects them), recorded as
    /// [`OpKind::BatchNorm`]. Call it only where [`compiled_batch_norm`]
    /// holds: the step has no gradient.
    #[track_caller]
    pub(crate) fn batch_norm_step(step: Step, inputs: &[&Tensor]) -> Tensor {
        let data: SmallVec<[Vec<f32>; 3]> = inputs
            .iter()
            .map(|t| t.data.iter().copied().collect())
            .collect();
        let first = inputs.first().map_or(&[][..], |t| t.shape());
        let shape = step.shape(first);
        let mut out = vec![0.0f32; shape.iter().product()];
        let input = |k: usize| data.get(k).map_or(&[][..], |v| &v[..]);
        step.forward(first, [input(0), input(1), input(2)], &mut out);
        let value = ArcArray::from_shape_vec(IxDyn(&shape), out).expect("the step's shape");
        // Recorded only on a forward program's tape, which is replayed and
        // never differentiated: no input gets a cotangent.
        Tensor::record_kind(value, inputs, OpKind::BatchNorm(step), |_, needs| {
            needs.iter().map(|_| None).collect()
        })
    }
}

/// Whether `tensors` may go through [`Tensor::batch_norm_grad`]: inside a
/// jitted module's body that runs inline under a reverse-mode
/// differentiation (`nn::Jit` under `grad`), with every traced tensor on
/// one open tape that records no tangent rules, and the running averages
/// (`stats`) not traced (their updates are not differentiated).
pub(crate) fn batch_norm_under_grad(tensors: &[&Tensor], stats: &[&Tensor]) -> bool {
    if !grad_jit() || forward_jit_tape().is_some() || current_layout().is_some() {
        return false;
    }
    let mut tape = None;
    for t in tensors {
        if let Some(tr) = t.tracer.as_ref().filter(|tr| tr.tape.is_open()) {
            if tr.tape.records_tangents() || tape.is_some_and(|id| id != tr.tape.id) {
                return false;
            }
            tape = Some(tr.tape.id);
        }
    }
    tape.is_some() && stats.iter().all(|t| !recorded(t))
}

impl Tensor {
    /// A BatchNorm over `x` (features last, at least one row) as a jitted
    /// module computes it under `jax.grad`: the output with the jitted
    /// forward pass's numbers, recorded as one operation of `x`, `scale`
    /// and `bias` whose backward rule is XLA's backward program
    /// ([`crate::xla::batch_norm_grad`]); and, untraced, in training, the
    /// updated running mean and variance (in evaluation, `train` false,
    /// the running averages normalize and stay). Call it only where
    /// [`batch_norm_under_grad`] holds.
    #[track_caller]
    pub(crate) fn batch_norm_grad(
        x: &Tensor,
        scale: Option<&Tensor>,
        bias: Option<&Tensor>,
        running: [&Tensor; 2],
        momentum: f64,
        eps: f32,
        train: bool,
    ) -> (Tensor, Option<[Tensor; 2]>) {
        let flat = |t: &Tensor| t.data.iter().copied().collect::<Vec<f32>>();
        let shape = x.shape().to_vec();
        let bias_values = bias.map(flat);
        let [mean0, var0] = running.map(flat);
        let (y, residuals) = grad::forward(
            flat(x),
            &shape,
            scale.map(flat),
            bias_values.as_deref(),
            eps,
            (!train).then_some([&mean0[..], &var0[..]]),
        );
        let rows = (x.data.len() / residuals.s1.len().max(1)) as f32;
        let c = 1.0 / rows;
        let features = [residuals.s1.len()];
        let mut mean = vec![0.0; features[0]];
        let mut var = vec![0.0; features[0]];
        // `(1 - m) * mean` with the mean's `c` folded into the constant.
        let (m, om) = (momentum as f32, (1.0 - momentum) as f32);
        let c2 = om * c;
        Step::MeanUpdate { m, c2 }.forward(&features, [&residuals.s1, &mean0, &[]], &mut mean);
        Step::VarUpdate { m, om }.forward(&features, [&residuals.var, &var0, &[]], &mut var);
        let stat = |v: Vec<f32>| {
            Tensor::constant(ArcArray::from_shape_vec(IxDyn(&features), v).expect("[C]"))
        };
        let value = ArcArray::from_shape_vec(IxDyn(&shape), y).expect("x's shape");
        let mut inputs: SmallVec<[&Tensor; 3]> = SmallVec::new();
        inputs.push(x);
        inputs.extend(scale);
        inputs.extend(bias);
        let has = (scale.is_some(), bias.is_some());
        let y = Tensor::record_kind(value, &inputs, OpKind::Other, move |g, needs| {
            let g: Vec<f32> = g.iter().copied().collect();
            let cot = grad::backward(&residuals, &g);
            let as_array = |v: Vec<f32>, s: &[usize]| {
                ArrayD::from_shape_vec(IxDyn(s), v).expect("the input's shape")
            };
            let mut grads: InputGrads = SmallVec::new();
            let want = |k: usize| needs.get(k).copied().unwrap_or(false);
            grads.push(want(0).then(|| as_array(cot.x, &residuals.shape)));
            let mut next = 1;
            if has.0 {
                grads.push(want(next).then(|| as_array(cot.scale.clone(), &features)));
                next += 1;
            }
            if has.1 {
                grads.push(want(next).then(|| as_array(cot.bias.clone(), &features)));
            }
            grads
        });
        (y, train.then(|| [stat(mean), stat(var)]))
    }
}
