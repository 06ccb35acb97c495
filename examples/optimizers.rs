//! optax's optimizers in flaxen: the same small regression fitted with
//! each, through `GradientTransformation::apply_gradients` (or the
//! `TrainState` a Flax user would carry). Every optimizer here is checked
//! against optax 0.2.8 bit for bit in tests/optim_conformance.rs.
//!
//! Run: `cargo run --release --example optimizers`

use flaxen::core::Variables;
use flaxen::nn::{Dense, Module};
use flaxen::optim::{
    adagrad, adam, adamw, chain, clip_by_global_norm, exponential_decay, lion, losses, rmsprop,
    sgd, warmup_cosine_decay_schedule, GradientTransformation, TrainState,
};
use flaxen::random;
use flaxen::tensor::{grad, Tensor};

/// `y = 2 x0 - 3 x1 + 0.5` on 64 random points.
fn data() -> flaxen::Result<(Tensor, Tensor)> {
    let x = Tensor::from_array(random::normal(random::key(1), &[64, 2])?);
    let w = Tensor::from_vec(vec![2.0, -3.0], &[2, 1])?;
    let y = x.matmul(&w)?.add(&Tensor::scalar(0.5))?;
    Ok((x, y))
}

/// 200 steps of `tx` on the regression; the final mean squared error.
fn fit(tx: impl GradientTransformation + Send + Sync + 'static) -> flaxen::Result<f32> {
    let (x, y) = data()?;
    let model = Dense::new(1);
    let variables = model.init(random::key(0), x.clone())?;
    let mut state = TrainState::create(&variables, tx)?;
    let loss = |v: &Variables| -> flaxen::Result<Tensor> {
        let pred = model.apply(v, x.clone(), ())?;
        Ok(losses::squared_error(&pred, Some(&y))?.mean_all())
    };
    for _ in 0..200 {
        let g = grad(|p| loss(&state.variables_with(p)), &state.params)?;
        state = state.apply_gradients(&g)?;
    }
    loss(&state.variables())?.item().map_err(Into::into)
}

pub fn main() -> flaxen::Result<()> {
    println!("final mean squared error after 200 steps");
    println!("sgd                 {:.6}", fit(sgd(0.05, None, false))?);
    println!(
        "sgd + momentum      {:.6}",
        fit(sgd(0.05, Some(0.9), false))?
    );
    println!(
        "sgd + Nesterov      {:.6}",
        fit(sgd(0.05, Some(0.9), true))?
    );
    println!("adam                {:.6}", fit(adam(0.05))?);
    println!("adamw               {:.6}", fit(adamw(0.05, 1e-4))?);
    println!("rmsprop             {:.6}", fit(rmsprop(0.01, 0.9, 1e-8))?);
    println!("adagrad             {:.6}", fit(adagrad(0.5, 0.1, 1e-7))?);
    println!(
        "lion                {:.6}",
        fit(lion(0.01, 0.9, 0.99, 1e-3))?
    );
    let warmup = warmup_cosine_decay_schedule(0.0, 0.1, 20, 200, 1e-3);
    println!("adam, warmup+cosine {:.6}", fit(adam(warmup))?);
    let decay = exponential_decay(0.1, 50, 0.5, 0, false, None);
    let clipped = chain(vec![
        Box::new(clip_by_global_norm(1.0)),
        Box::new(adam(decay)),
    ]);
    println!("clip + adam, decay  {:.6}", fit(clipped)?);
    Ok(())
}
