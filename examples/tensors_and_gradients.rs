//! Tensors and gradients: fit a two-layer MLP to `y = tanh(3x)` with
//! `value_and_grad` and a `tree_map2` SGD update, the shape of the training
//! loop in Flax's guides.
//!
//! ```text
//! cargo run --release --example tensors_and_gradients
//! ```

use flaxen::tensor::{tree_map2, value_and_grad, Result, Tensor, TensorError, Tree};

/// Deterministic, roughly uniform values in `[-scale, scale)` (a stand-in
/// for an initializer).
fn init(shape: &[usize], scale: f32, seed: f32) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let values = (0..n)
        .map(|i| ((i as f32 + seed) * 12.9898).sin() * scale)
        .collect();
    Tensor::from_vec(values, shape)
}

/// The model: `Dense(16) -> gelu -> Dense(1)`, reading its parameters from
/// the tree as a Flax module reads `params`.
fn mlp(params: &Tree, x: &Tensor) -> Result<Tensor> {
    let h = x
        .matmul(params.tensor("Dense_0/kernel")?)?
        .add(params.tensor("Dense_0/bias")?)?
        .gelu();
    h.matmul(params.tensor("Dense_1/kernel")?)?
        .add(params.tensor("Dense_1/bias")?)
}

fn main() -> flaxen::Result<()> {
    // 32 inputs in [-1, 1) as a [32, 1] batch, and their targets.
    let x = Tensor::from_vec((0..32).map(|i| i as f32 / 16.0 - 1.0).collect(), &[32, 1])?;
    let y = (&x * 3.0).tanh();

    let mut params = Tree::new()
        .with(
            "Dense_0",
            Tree::new()
                .with("kernel", init(&[1, 16], 3.0, 0.0)?)
                .with("bias", Tensor::zeros(&[16])),
        )
        .with(
            "Dense_1",
            Tree::new()
                .with("kernel", init(&[16, 1], 0.2, 1.0)?)
                .with("bias", Tensor::zeros(&[1])),
        );

    // Mean squared error; `x` and `y` are captured, so they are not
    // differentiated.
    let loss_fn = |p: &Tree| Ok((&mlp(p, &x)? - &y).square().mean_all());

    let learning_rate = 0.5;
    for step in 0..=500 {
        let (loss, grads) = value_and_grad(loss_fn, &params)?;
        params = tree_map2(&params, &grads, |p, g| Ok(p - &(g * learning_rate)))?;
        if step % 100 == 0 {
            println!("step {step:3}: loss {:.6}", loss.item()?);
        }
    }

    let probe = Tensor::from_vec(vec![-0.5, 0.0, 0.5], &[3, 1])?;
    println!("model at [-0.5, 0, 0.5]:\n{}", mlp(&params, &probe)?);
    println!("tanh(3x) at the same points:\n{}", (&probe * 3.0).tanh());

    // Incompatible shapes are a typed error naming both shapes.
    match x.add(&Tensor::zeros(&[5, 2])) {
        Err(e @ TensorError::Incompatible { .. }) => println!("error: {e}"),
        other => panic!("expected an error, got {other:?}"),
    }
    Ok(())
}
