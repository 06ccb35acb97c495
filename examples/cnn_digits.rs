//! A small convolutional network on the shipped 8×8 digits, written as the
//! Flax CNN of the Flax docs' MNIST example (scaled down): two `Conv` →
//! relu → `avg_pool` blocks, then `Dense` layers, trained with `adam` and
//! evaluated on the last 297 images. It prints the model's table and one
//! line per epoch — the lines Flax and optax print for the same training
//! (`tools/oracle/train_cnn_digits.py`): every step's convolutions,
//! pooling and gradients are computed in XLA:CPU's orders
//! (`tests/cnn_step.rs` checks one step's gradients bit for bit).
//!
//! Run: `cargo run --release --example cnn_digits`

use flaxen::core::{Result, Scope, Variables};
use flaxen::data::{digits, Batches};
use flaxen::nn::{avg_pool, tabulate, Conv, Dense, Module, Padding};
use flaxen::optim::{adam, losses, GradientTransformation};
use flaxen::random;
use flaxen::tensor::{value_and_grad, Tensor, Tree};
use ndarray::{s, Array1, Array2};

/// ```python
/// class CNN(nn.Module):
///   @nn.compact
///   def __call__(self, x):
///     x = nn.Conv(features=8, kernel_size=(3, 3))(x)
///     x = nn.relu(x)
///     x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
///     x = nn.Conv(features=16, kernel_size=(3, 3))(x)
///     x = nn.relu(x)
///     x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
///     x = x.reshape((x.shape[0], -1))
///     x = nn.Dense(features=64)(x)
///     x = nn.relu(x)
///     return nn.Dense(features=10)(x)
/// ```
struct Cnn;

impl Module for Cnn {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Conv::new(8, &[3, 3]), x)?.relu();
        let x = avg_pool(&x, &[2, 2], Some(&[2, 2]), &Padding::Valid, true)?;
        let x = s.call(Conv::new(16, &[3, 3]), x)?.relu();
        let x = avg_pool(&x, &[2, 2], Some(&[2, 2]), &Padding::Valid, true)?;
        let x = x.reshape(&[x.shape()[0] as isize, -1])?;
        let x = s.call(Dense::new(64), x)?.relu();
        s.call(Dense::new(10), x)
    }
}

const TRAIN: usize = 1500;
const BATCH: usize = 100;
const EPOCHS: usize = 5;

/// Images `[n, 64]` as `[n, 8, 8, 1]` (NHWC).
fn images(x: Array2<f32>) -> Tensor {
    let n = x.shape()[0];
    Tensor::from_array(
        x.into_shape_with_order((n, 8, 8, 1))
            .expect("64 pixels")
            .into_dyn(),
    )
}

fn accuracy(params: &Tree, x: &Array2<f32>, y: &Array1<i32>) -> flaxen::Result<f64> {
    let v = Variables::new().with("params", params.clone());
    let predicted = Cnn.apply(&v, images(x.clone()), ())?.argmax(-1)?;
    let correct = predicted.iter().zip(y).filter(|(p, l)| p == l).count();
    Ok(correct as f64 / y.len() as f64)
}

fn main() -> flaxen::Result<()> {
    // A training loop: let glibc keep each step's freed arrays for the
    // next step instead of giving them back to the system (see the book's
    // "Speed" section of this chapter).
    flaxen::memory::keep_freed_memory();
    let data = digits::load()?;
    let x = data.images_f32();
    let (x_train, y_train) = (
        x.slice(s![..TRAIN, ..]).to_owned(),
        data.labels.slice(s![..TRAIN]).to_owned(),
    );
    let (x_test, y_test) = (
        x.slice(s![TRAIN.., ..]).to_owned(),
        data.labels.slice(s![TRAIN..]).to_owned(),
    );
    let [params_key, shuffle_key] = random::split_n(random::key(0));
    let first = images(x_train.slice(s![..1, ..]).to_owned());
    println!(
        "{}",
        tabulate(&Cnn, random::clone(&params_key), first.clone())?
    );
    let mut params = Cnn.init(params_key, first)?.params();
    let tx = adam(1e-2);
    let mut opt_state = tx.init(&params)?;
    let mut last = 0.0;
    for epoch in 0..EPOCHS {
        let key = random::fold_in(random::clone(&shuffle_key), epoch as u32);
        let mut total = 0.0f32;
        let mut batches = 0;
        for batch in Batches::shuffled(x_train.view(), y_train.view(), BATCH, key)? {
            let labels = batch.y.clone().into_dyn();
            let xb = images(batch.x);
            let (loss, grads) = value_and_grad(
                |p| {
                    let v = Variables::new().with("params", p.clone());
                    let logits = Cnn.apply(&v, xb.clone(), ())?;
                    Ok(
                        losses::softmax_cross_entropy_with_integer_labels(&logits, &labels)?
                            .mean_all(),
                    )
                },
                &params,
            )?;
            (params, opt_state) = tx.apply_gradients(&grads, &opt_state, &params)?;
            total += loss.item()?;
            batches += 1;
        }
        last = accuracy(&params, &x_test, &y_test)?;
        println!(
            "epoch {}: train loss {:.4}, test accuracy {:.4}",
            epoch + 1,
            total / batches as f32,
            last
        );
    }
    // Far better than chance (0.1) after five epochs.
    assert!(last > 0.5, "test accuracy {last}");
    Ok(())
}
