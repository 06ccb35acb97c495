//! The lifting design note's `pack` example on the functional core: a
//! `dense` written against a bare `Scope` (no modules), lifted so that every
//! 2-D matrix of `params` is transposed on its way in (`lift_transpose`).
//!
//! Run: `cargo run --release --example lift_transpose`

use flaxen::core::{self, Filter, Result, Scope};
use flaxen::init;
use flaxen::tensor::{tree_map, Tensor, Tree};

/// `flax.core.nn.dense`: a kernel `(in, features)`, then a bias.
pub fn dense(scope: &Scope<'_>, inputs: &Tensor, features: usize) -> Result<Tensor> {
    let in_features = inputs.shape()[inputs.ndim() - 1];
    let kernel = scope.param("kernel", init::lecun_normal(), &[in_features, features])?;
    let y = inputs.matmul(&kernel)?;
    let bias = scope.param("bias", init::zeros(), &[features])?;
    Ok(y.add(&bias)?)
}

/// Transposes every matrix of the tree (`x.T` where `x.ndim == 2`).
fn trans(tree: &Tree) -> Result<Tree> {
    Ok(tree_map(tree, |x| {
        if x.ndim() == 2 {
            x.transpose()
        } else {
            x.clone()
        }
    }))
}

/// `lift_transpose(fn)`: `fn` sees `params` transposed; every other
/// collection, and every RNG stream, passes through.
pub fn lift_transpose<T>(
    scope: &Scope<'_>,
    body: impl FnOnce(&Scope<'_>) -> Result<T>,
) -> Result<T> {
    scope.map_variables(
        Filter::from("params"),
        &trans,
        &|t: &Tree| Ok(t.clone()),
        body,
    )
}

pub fn main() -> Result<()> {
    let x = Tensor::ones(&[3, 2]);
    let (y, variables) = core::init(flaxen::random::key(0), |scope| {
        lift_transpose(scope, |s| dense(s, &x, 4))
    })?;
    println!("y: {:?}", y.shape());
    for (path, value) in variables.flatten() {
        println!("{path}: {:?}", value.shape());
    }
    println!("{y}");
    Ok(())
}
