//! Backward rules of your own: a weight-quantized linear model trained
//! with a straight-through estimator (`tensor::custom_vjp`: round forward,
//! identity backward), a gradient-clipping rule, and Flax's
//! `nn.custom_vjp` over a module's parameters (`nn::custom_vjp` with
//! `nn::vjp`), whose parameter gradients are replaced by their signs.
//!
//! ```text
//! cargo run --release --example custom_gradients
//! ```

use flaxen::core::{Result, Scope, Variables};
use flaxen::nn::{self, Dense, Module, ScopeVjp};
use flaxen::random;
use flaxen::tensor::{custom_vjp, grad, tree_map, tree_map2, Tensor, Tree};

// ANCHOR: ste
/// Rounds to multiples of 1/4 in the forward pass; the backward pass lets
/// the cotangent through as if nothing had been rounded.
fn quantize_ste(w: &Tensor) -> Result<Tensor> {
    custom_vjp(
        |w: &Tensor| {
            let q: Vec<f32> = w.to_vec().iter().map(|v| (v * 4.0).round() / 4.0).collect();
            Ok((Tensor::from_vec(q, w.shape())?, ()))
        },
        |_residuals: &(), g: &Tensor| Ok(g.clone()),
        w,
    )
}
// ANCHOR_END: ste

// ANCHOR: clip
/// The identity forward; the cotangent clipped to [-0.1, 0.1] backward.
fn clip_gradient(x: &Tensor) -> Result<Tensor> {
    custom_vjp(
        |x: &Tensor| Ok((x.clone(), ())),
        |_: &(), g: &Tensor| Ok(g.clip(-0.1, 0.1)?),
        x,
    )
}
// ANCHOR_END: clip

// ANCHOR: sign
/// Flax's test_custom_vjp: a Dense layer whose parameter gradients are
/// their signs.
struct SignGradDense;

impl Module for SignGradDense {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        nn::custom_vjp(
            s,
            &x,
            // forward: the layer under nn.vjp; its backward function is
            // the residual
            |s, x| {
                let primals = Tree::new().with("x", x.clone());
                nn::vjp(
                    s,
                    |s, p| s.call(Dense::new(1), p.tensor("x")?.clone()),
                    &primals,
                )
            },
            // backward: the true cotangents, the parameters' replaced by
            // their signs
            |vjp_fn: &ScopeVjp, y_t: &Tensor| {
                let (params_t, input_t) = vjp_fn.call(y_t)?;
                let sign = |t: &Tensor| {
                    let s: Vec<f32> = t.to_vec().iter().map(|v| v.signum()).collect();
                    Tensor::from_vec(s, t.shape()).expect("same shape")
                };
                Ok((tree_map(&params_t, sign), input_t.tensor("x")?.clone()))
            },
        )
    }
}
// ANCHOR_END: sign

fn main() -> Result<()> {
    // A quantized linear model fitted to y = x @ [0.5, -0.75]: the weights
    // the model uses are always multiples of 1/4, yet they learn (the
    // rounding's true gradient is zero almost everywhere).
    let x = Tensor::from_array(random::normal(random::key(0), &[32, 2])?);
    let y = x.matmul(&Tensor::from_vec(vec![0.5, -0.75], &[2, 1])?)?;
    let mut params = Tree::new().with("w", Tensor::zeros(&[2, 1]));
    for step in 0..90 {
        let g = grad(
            |p: &Tree| {
                let w = quantize_ste(p.tensor("w")?)?;
                let pred = x.matmul(&clip_gradient(&w)?)?;
                Ok(pred.sub(&y)?.square().mean_all())
            },
            &params,
        )?;
        params = tree_map2(&params, &g, |p, g| Ok(p - &(g * 0.1)))?;
        if step % 30 == 29 {
            let w = quantize_ste(params.tensor("w")?)?;
            println!(
                "step {}: quantized weights {:?}, latent {:?}",
                step + 1,
                w.to_vec(),
                params.tensor("w")?.to_vec()
            );
        }
    }

    // The sign rule: every parameter gradient is +1 or -1.
    let x = Tensor::ones(&[3, 2]);
    let v = SignGradDense.init(random::key(0), x.clone())?;
    let g = grad(
        |p: &Tree| {
            let v = Variables::new().with("params", p.clone());
            Ok(SignGradDense.apply(&v, x.clone(), ())?.sum_all())
        },
        &v.params(),
    )?;
    for (path, leaf) in g.paths() {
        println!("gradient of {path}: {:?}", leaf.to_vec());
    }
    Ok(())
}
