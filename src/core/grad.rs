//! `jax.grad` for functions that run modules: [`crate::tensor::grad`]
//! takes functions that fail with a `TensorError`; these take functions that
//! fail with any [`Error`] of the module API (a missing RNG stream, say),
//! and return that error unchanged.

use std::cell::RefCell;

use super::error::{Error, Result};
use crate::tensor::{self, Tensor, TensorError, Tree};

/// The value of the scalar `f(params)` and its gradient with respect to
/// every tensor of `params`, in the same tree structure.
///
/// ```
/// use flaxen::core::{value_and_grad, Variables};
/// use flaxen::nn::{Dense, Module};
/// use flaxen::{random, tensor::Tensor};
///
/// let model = Dense::new(1);
/// let x = Tensor::ones(&[4, 3]);
/// let variables = model.init(random::key(0), x.clone())?;
/// let (loss, grads) = value_and_grad(
///     |params| {
///         let v = Variables::new().with("params", params.clone());
///         Ok(model.apply(&v, x.clone(), ())?.square().mean_all())
///     },
///     &variables.params(),
/// )?;
/// assert_eq!(grads.tensor("kernel").unwrap().shape(), &[3, 1]);
/// assert!(loss.item().unwrap() >= 0.0);
/// # Ok::<(), flaxen::core::Error>(())
/// ```
pub fn value_and_grad<F>(f: F, params: &Tree) -> Result<(Tensor, Tree)>
where
    F: FnOnce(&Tree) -> Result<Tensor>,
{
    // The tensor transform only knows TensorError: carry any other error
    // past it and hand it back as it was.
    let failure: RefCell<Option<Error>> = RefCell::new(None);
    let out = tensor::value_and_grad(
        |p| {
            f(p).map_err(|e| match e {
                Error::Tensor { path, source } if path.is_empty() => source,
                other => {
                    *failure.borrow_mut() = Some(other);
                    TensorError::Argument {
                        op: "grad",
                        message: "the function failed".to_string(),
                    }
                }
            })
        },
        params,
    );
    match (out, failure.into_inner()) {
        (_, Some(e)) => Err(e),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(e.into()),
    }
}

/// The gradient of the scalar `f(params)` (see [`value_and_grad`]).
pub fn grad<F>(f: F, params: &Tree) -> Result<Tree>
where
    F: FnOnce(&Tree) -> Result<Tensor>,
{
    value_and_grad(f, params).map(|(_, g)| g)
}
