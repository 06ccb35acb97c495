//! `BatchNorm`'s forward pass inside a jitted module (`nn::Jit`), with the
//! numbers XLA gives it there ([`crate::xla::batch_norm`]) rather than
//! eager JAX's.

use crate::core::{Result, Scope, Variable};
use crate::tensor::Tensor;
use crate::tensor::{batch_norm_in_step, batch_norm_under_grad, compiled_batch_norm};
use crate::xla::batch_norm::{contracted_columns, Step};

use super::normalization::BatchNorm;

/// `bn(x)` with jitted Flax's numbers, or `None` when they do not apply:
/// outside a jitted module's body (under a differentiation, recorded with
/// the jitted backward rule, see [`Tensor::batch_norm_grad`]) and outside
/// a compiled step (in training, kernels with that rule, see
/// [`Tensor::batch_norm_step_train`]), while
/// initializing, with a mask, an axis name, `use_fast_variance` off,
/// a feature axis other than the last, a 1-D input or an empty one (those
/// keep eager JAX's numbers).
pub(super) fn compiled_forward(
    bn: &BatchNorm,
    s: &Scope<'_>,
    x: &Tensor,
    ra_mean: &Variable<'_, '_>,
    ra_var: &Variable<'_, '_>,
) -> Result<Option<Tensor>> {
    let shape = x.shape();
    let forward = crate::tensor::compiled::forward_jit_tape().is_some();
    let grad = !forward && crate::tensor::compiled::grad_jit();
    // Inside a compiled step (`jax.jit` of the whole training step), in
    // training: XLA fuses the normalization as under `grad` of a jitted
    // module. In evaluation the eager operations stay (not measured).
    let in_step =
        !forward && !grad && !bn.use_running_average && crate::tensor::in_compiled_region();
    let plain = (forward || grad || in_step)
        && bn.mask.is_none()
        && bn.axis_name.is_none()
        && bn.use_fast_variance
        && !s.is_initializing()
        && shape.len() >= 2
        && (bn.axis == -1 || bn.axis == shape.len() as isize - 1)
        && shape.iter().product::<usize>() > 0;
    if !plain {
        return Ok(None);
    }
    let features = shape[shape.len() - 1];
    let (mean0, var0) = (ra_mean.value(), ra_var.value());
    // Peeked without taking the names, so that the eager path can still
    // create or fetch them when the compiled steps do not apply.
    let peek = |on: bool, name: &str| on.then(|| s.get_variable("params", name));
    let (peek_scale, peek_bias) = (peek(bn.use_scale, "scale"), peek(bn.use_bias, "bias"));
    let mut all = vec![x, &mean0, &var0];
    for p in [&peek_scale, &peek_bias].into_iter().flatten() {
        match p {
            Some(t) => all.push(t),
            None => return Ok(None),
        }
    }
    let allowed = if in_step {
        batch_norm_in_step(&all)
    } else if grad {
        // `x`, then the peeked scale and bias.
        let mut ops = vec![x];
        ops.extend(all[3..].iter().copied());
        batch_norm_under_grad(&ops, &[&mean0, &var0])
    } else {
        compiled_batch_norm(&all)
    };
    if !allowed {
        return Ok(None);
    }
    let scale = bn
        .use_scale
        .then(|| s.param("scale", &bn.scale_init, &[features]))
        .transpose()?;
    let bias = bn
        .use_bias
        .then(|| s.param("bias", &bn.bias_init, &[features]))
        .transpose()?;
    if in_step {
        let (y, [mean, var]) = Tensor::batch_norm_step_train(
            x,
            scale.as_ref(),
            bias.as_ref(),
            [&mean0, &var0],
            bn.momentum,
            bn.epsilon,
        );
        ra_mean.set(mean)?;
        ra_var.set(var)?;
        return Ok(Some(y));
    }
    if grad {
        let (y, stats) = Tensor::batch_norm_grad(
            x,
            scale.as_ref(),
            bias.as_ref(),
            [&mean0, &var0],
            bn.momentum,
            bn.epsilon,
            !bn.use_running_average,
        );
        if let Some([mean, var]) = stats {
            ra_mean.set(mean)?;
            ra_var.set(var)?;
        }
        return Ok(Some(y));
    }
    let step = Tensor::batch_norm_step;
    let (centered, var) = if bn.use_running_average {
        (x.sub(&mean0)?, var0)
    } else {
        let rows = shape[..shape.len() - 1].iter().product::<usize>();
        // XLA divides by the count as a product by its f32 reciprocal.
        let c = 1.0 / rows as f32;
        let (m, om) = (bn.momentum as f32, (1.0 - bn.momentum) as f32);
        let s1 = step(Step::Sums, &[x]);
        let s2 = step(Step::Squares, &[x]);
        let var = step(Step::Var { c }, &[&s1, &s2]);
        // `(1 - m) * mean` with the mean's `c` folded into the constant.
        ra_mean.set(step(Step::MeanUpdate { m, c2: om * c }, &[&s1, &mean0]))?;
        ra_var.set(step(Step::VarUpdate { m, om }, &[&var, &var0]))?;
        let contracted = contracted_columns(features, bn.use_scale, bn.use_bias);
        (step(Step::Center { c, contracted }, &[x, &s1]), var)
    };
    let mut k = var.add(&Tensor::scalar(bn.epsilon))?.rsqrt();
    if let Some(scale) = &scale {
        k = k.mul(scale)?;
    }
    Ok(Some(match &bias {
        Some(bias) => step(Step::Affine, &[&centered, &k, bias]),
        None => centered.mul(&k)?,
    }))
}
