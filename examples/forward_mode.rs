//! Forward-mode derivatives: `jvp`, `linearize`, `custom_jvp` and the
//! lifted `nn::jvp`, as `jax.jvp`, `jax.linearize`, `jax.custom_jvp` and
//! Flax's `nn.jvp` compute them.
//!
//! Run with `cargo run --release --example forward_mode`.

use flaxen::core::{Result, Scope};
use flaxen::init;
use flaxen::nn::{self, Module};
use flaxen::random;
use flaxen::tensor::{custom_jvp, grad, jvp, linearize, Tensor, Tree};

// ANCHOR: jvp
/// A small two-layer network of its input and weights.
fn mlp(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Result<Tensor> {
    Ok(x.matmul(w1)?.tanh().matmul(w2)?)
}

fn directional_derivative() -> Result<()> {
    let key = random::key(0);
    let [kx, k1, k2, kt] = random::split(key, 4)?.into_array()?;
    let normal = |k, shape: &[usize]| -> Result<Tensor> {
        Ok(Tensor::from_array(random::normal(k, shape)?))
    };
    let x = normal(kx, &[2, 3])?;
    let w1 = normal(k1, &[3, 4])?;
    let w2 = normal(k2, &[4, 1])?;
    // The derivative in the direction `t` of the input only.
    let t = normal(kt, &[2, 3])?;
    let f = |x: &Tensor| mlp(x, &w1, &w2);
    let (y, y_dot) = jvp(f, &x, &t)?;
    // The same number by central differences.
    let h = 1e-2;
    let plus = f(&x.add(&(&t * h))?)?;
    let minus = f(&x.sub(&(&t * h))?)?;
    let numeric = plus.sub(&minus)?.div(&Tensor::scalar(2.0 * h))?;
    println!("y           = {y}");
    println!("jvp         = {y_dot}");
    println!("differences = {numeric}");
    Ok(())
}
// ANCHOR_END: jvp

// ANCHOR: linearize
fn jacobian_by_columns() -> Result<()> {
    let x = Tensor::from_vec(vec![0.5, -1.0, 2.0], &[3])?;
    // f(x) = [sum(x²), sum(x sin x)]: two outputs of three inputs.
    let f = |x: &Tensor| -> Result<Tensor> {
        let a = x.square().sum_all().reshape(&[1])?;
        let b = x.sin().mul(x)?.sum_all().reshape(&[1])?;
        Ok(Tensor::concatenate(&[a, b], 0)?)
    };
    // Linearize once; each basis tangent gives one column of the Jacobian
    // without running `f` again.
    let (y, f_jvp) = linearize(f, &x)?;
    println!("f(x) = {y}");
    for i in 0..3 {
        let mut e = vec![0.0; 3];
        e[i] = 1.0;
        let column = f_jvp.call(&Tensor::from_vec(e, &[3])?)?;
        println!("column {i} of the Jacobian = {column}");
    }
    Ok(())
}
// ANCHOR_END: linearize

// ANCHOR: custom_jvp
/// `sqrt` whose derivative stays finite at 0: the tangent rule divides by
/// `2 sqrt(x) + 1e-6`. `grad` uses the same rule, transposed.
fn safe_sqrt(x: &Tensor) -> Result<Tensor> {
    custom_jvp(
        |x: &Tensor| Ok(x.sqrt()),
        |x: &Tensor, t: &Tensor| {
            let y = x.sqrt();
            let scale = (&y * 2.0 + 1e-6).powf(-1.0);
            Ok((y, t * &scale))
        },
        x,
    )
}

fn custom_rule() -> Result<()> {
    let x = Tensor::from_vec(vec![0.0, 1.0, 4.0], &[3])?;
    let (_, plain) = jvp(|x: &Tensor| Ok(x.sqrt()), &x, &Tensor::ones(&[3]))?;
    let (_, safe) = jvp(safe_sqrt, &x, &Tensor::ones(&[3]))?;
    let g = grad(
        |p| Ok(safe_sqrt(p.as_tensor().unwrap())?.sum_all()),
        &Tree::from(x),
    )?;
    println!("sqrt's tangent      = {plain}");
    println!("safe_sqrt's tangent = {safe}");
    println!("safe_sqrt's grad    = {}", g.as_tensor().unwrap());
    Ok(())
}
// ANCHOR_END: custom_jvp

// ANCHOR: nn_jvp
/// Flax's `nn.jvp` example: the tangent of `scale * x` in the direction of
/// the parameter `scale` alone.
struct Foo;

impl Module for Foo {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        // At init `scale` does not exist yet, so it has no tangent.
        let params_t = if s.is_initializing() {
            Tree::new()
        } else {
            Tree::new().with("scale", Tensor::ones(&[]))
        };
        let primals = Tree::new().with("x", x.clone());
        let tangents = Tree::new().with("x", Tensor::zeros(x.shape()));
        let (_, out_t) = nn::jvp(
            s,
            |s, p| {
                let scale = s.param("scale", init::zeros(), &[])?;
                Ok(p.tensor("x")?.mul(&scale)?)
            },
            &primals,
            &tangents,
            &params_t,
        )?;
        Ok(out_t)
    }
}

fn lifted() -> Result<()> {
    let x = Tensor::ones(&[3]);
    let variables = Foo.init(random::key(0), x.clone())?;
    let y_t = Foo.apply(&variables, x, ())?;
    println!("nn::jvp: y_t = {y_t}");
    Ok(())
}
// ANCHOR_END: nn_jvp

fn main() -> Result<()> {
    directional_derivative()?;
    jacobian_by_columns()?;
    custom_rule()?;
    lifted()
}
