//! A BatchNorm in training inside a compiled step
//! ([`jit_value_and_grad`](crate::tensor::jit_value_and_grad), or
//! [`as_jitted`](crate::tensor::as_jitted) around a differentiation), as
//! replayable kernels.
//!
//! In `jax.jit(jax.value_and_grad(loss))` XLA compiles the BatchNorm's
//! forward pass and its transpose into one program with the rest of the
//! step. Within the normalization its fusions compute what a jitted
//! module's forward and backward programs compute under `jax.grad`
//! ([`crate::xla::batch_norm_grad`]): the statistics summed and fused as
//! in [`crate::xla::batch_norm`], the running averages' multiply-adds
//! contracted, the cotangents fused (measured against `jax.jit` of
//! Dense → BatchNorm → relu → Dense steps and of a Conv → BatchNorm over
//! NHWC, tests/jit_norm_step.rs). Eager JAX rounds each operation alone,
//! so the eager layer's operations do not give these numbers; the
//! kernels here do, traced and replayed alike.

use std::sync::Arc;

use crate::tensor::batched::current_layout;
use crate::tensor::kernel::Kernel;
use crate::tensor::Tensor;
use crate::xla::batch_norm::Step;
use crate::xla::batch_norm_grad as grad;

/// Whether `tensors` may go through [`Tensor::batch_norm_step_train`]:
/// inside a compiled region, outside `vmap`, with every traced tensor on
/// one open tape that records no tangent rules (forward-mode tangents of
/// these kernels are not defined).
pub(crate) fn batch_norm_in_step(tensors: &[&Tensor]) -> bool {
    if !crate::tensor::in_compiled_region() || current_layout().is_some() {
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
    true
}

impl Tensor {
    /// A BatchNorm in training over `x` (features last, at least one row)
    /// as one compiled step computes it: the output, recorded as one
    /// kernel of `x`, `scale` and `bias` with the jitted backward rule,
    /// and the updated running mean and variance, each a kernel of `x` and
    /// the running average it updates. Call it only where
    /// [`batch_norm_in_step`] holds.
    #[track_caller]
    pub(crate) fn batch_norm_step_train(
        x: &Tensor,
        scale: Option<&Tensor>,
        bias: Option<&Tensor>,
        running: [&Tensor; 2],
        momentum: f64,
        eps: f32,
    ) -> (Tensor, [Tensor; 2]) {
        let shape = x.shape().to_vec();
        let normalize = Arc::new(Normalize {
            shape: shape.clone(),
            scale: scale.is_some(),
            bias: bias.is_some(),
            eps,
        });
        let mut inputs = vec![x];
        inputs.extend(scale);
        inputs.extend(bias);
        let y = Tensor::record_kernel(normalize, &inputs);
        let (m, om) = (momentum as f32, (1.0 - momentum) as f32);
        let [mean0, var0] = running;
        let stat = |which: Statistic, old: &Tensor| {
            let kernel = Arc::new(RunningAverage {
                shape: shape.clone(),
                which,
                m,
                om,
            });
            Tensor::record_kernel(kernel, &[x, old])
        };
        let mean = stat(Statistic::Mean, mean0);
        let var = stat(Statistic::Var, var0);
        (y, [mean, var])
    }
}

/// The normalized output of `x` (then `scale`, then `bias`, when present)
/// with the batch's statistics.
struct Normalize {
    /// The input's shape, features last.
    shape: Vec<usize>,
    /// Whether a scale, and a bias, follow `x` among the inputs.
    scale: bool,
    bias: bool,
    eps: f32,
}

impl Normalize {
    /// The forward program's output and residuals for the inputs `ins`.
    fn run(&self, ins: &[&[f32]]) -> (Vec<f32>, grad::Residuals) {
        let scale = self.scale.then(|| ins[1].to_vec());
        let bias = self.bias.then(|| ins[1 + usize::from(self.scale)]);
        grad::forward(ins[0].to_vec(), &self.shape, scale, bias, self.eps, None)
    }
}

impl Kernel for Normalize {
    fn name(&self) -> &'static str {
        "batch_norm"
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    // The jitted program's model (`batch_norm_grad`) works on vectors of
    // its own: copied into the plan's buffers (not yet allocation-free).
    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], _scratch: &mut [f32]) {
        out.copy_from_slice(&self.run(ins).0);
    }

    fn backward_into(
        &self,
        input: usize,
        g: &[f32],
        ins: &[&[f32]],
        dst: &mut [f32],
        _scratch: &mut [f32],
    ) {
        // The residuals again rather than kept from the forward pass: a
        // kernel holds no per-call state (a replay shares it).
        let (_, residuals) = self.run(ins);
        let cot = grad::backward(&residuals, g);
        dst.copy_from_slice(&match (input, self.scale) {
            (0, _) => cot.x,
            (1, true) => cot.scale,
            _ => cot.bias,
        });
    }
}

/// Which running average a [`RunningAverage`] updates.
#[derive(Clone, Copy)]
enum Statistic {
    Mean,
    Var,
}

/// The running mean or variance updated with the batch's statistics of `x`
/// (inputs: `x`, the old average), as the jitted forward pass computes it
/// ([`Step::MeanUpdate`], [`Step::VarUpdate`]).
struct RunningAverage {
    /// `x`'s shape, features last.
    shape: Vec<usize>,
    which: Statistic,
    /// The momentum and `1 - momentum`, in `f32`.
    m: f32,
    om: f32,
}

impl RunningAverage {
    /// `1/R` for `R` rows.
    fn c(&self) -> f32 {
        let rows = self.shape[..self.shape.len() - 1].iter().product::<usize>();
        1.0 / rows as f32
    }

    /// Per feature, the sum of `x` and the batch's (clipped) variance.
    fn moments(&self, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let features = [self.features()];
        let mut s1 = vec![0.0; features[0]];
        Step::Sums.forward(&self.shape, [x, &[], &[]], &mut s1);
        let mut var = vec![0.0; features[0]];
        if let Statistic::Var = self.which {
            let mut s2 = vec![0.0; features[0]];
            Step::Squares.forward(&self.shape, [x, &[], &[]], &mut s2);
            Step::Var { c: self.c() }.forward(&features, [&s1, &s2, &[]], &mut var);
        }
        (s1, var)
    }

    fn features(&self) -> usize {
        self.shape[self.shape.len() - 1]
    }
}

impl Kernel for RunningAverage {
    fn name(&self) -> &'static str {
        "batch_norm_running_average"
    }

    fn shape(&self) -> &[usize] {
        &self.shape[self.shape.len() - 1..]
    }

    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], _scratch: &mut [f32]) {
        let (s1, var) = self.moments(ins[0]);
        let features = [self.features()];
        let (m, om) = (self.m, self.om);
        match self.which {
            // `(1 - m) * mean` with the mean's `1/R` folded into the
            // constant, as XLA folds it.
            Statistic::Mean => {
                let c2 = om * self.c();
                Step::MeanUpdate { m, c2 }.forward(&features, [&s1, ins[1], &[]], out)
            }
            Statistic::Var => {
                Step::VarUpdate { m, om }.forward(&features, [&var, ins[1], &[]], out)
            }
        }
    }

    /// The plain derivative (a running average is an auxiliary output of
    /// a training step, which no loss differentiates in practice; these
    /// numbers are not checked against JAX's): `m g` for the old average;
    /// for `x`, `(1 - m) g / R` through the mean, `(1 - m) g · 2 (x -
    /// mean) / R` through the variance where it is not clipped.
    fn backward_into(
        &self,
        input: usize,
        g: &[f32],
        ins: &[&[f32]],
        dx: &mut [f32],
        _scratch: &mut [f32],
    ) {
        if input == 1 {
            dx.iter_mut().zip(g).for_each(|(d, &g)| *d = g * self.m);
            return;
        }
        let x = ins[0];
        let c = self.c();
        let features = self.features();
        let (s1, var) = self.moments(x);
        for (row, xs) in dx.chunks_exact_mut(features).zip(x.chunks_exact(features)) {
            for j in 0..features {
                row[j] = match self.which {
                    Statistic::Mean => self.om * g[j] * c,
                    Statistic::Var if var[j] > 0.0 => {
                        self.om * g[j] * 2.0 * (xs[j] - s1[j] * c) * c
                    }
                    Statistic::Var => 0.0,
                };
            }
        }
    }
}
