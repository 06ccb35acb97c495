//! Plain stochastic gradient descent, as the Flax guide's
//! `tree_map(lambda p, g: p - lr * g, params, grads)` and `optax.sgd`.

use crate::core::Result;
use crate::tensor::{tree_map2, Tensor, Tree};

/// SGD without momentum: every parameter `p` becomes `p - learning_rate * g`
/// (the product rounded to `f32` first, as JAX computes `p - 1e-3 * g`).
///
/// ```
/// use flaxen::optim::Sgd;
/// use flaxen::tensor::{Tensor, Tree};
///
/// let params = Tree::new().with("w", Tensor::ones(&[2]));
/// let grads = Tree::new().with("w", Tensor::full(&[2], 10.0));
/// let new = Sgd::new(0.1).update(&params, &grads)?;
/// assert_eq!(new.tensor("w").unwrap().to_vec(), [0.0, 0.0]);
/// # Ok::<(), flaxen::core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    /// The step size.
    pub learning_rate: f32,
}

impl Sgd {
    /// SGD with the given learning rate.
    pub fn new(learning_rate: f32) -> Sgd {
        Sgd { learning_rate }
    }

    /// The parameters after one step along `grads` (same tree structure).
    pub fn update(&self, params: &Tree, grads: &Tree) -> Result<Tree> {
        let lr = Tensor::scalar(self.learning_rate);
        Ok(tree_map2(params, grads, |p, g| p.sub(&lr.mul(g)?))?)
    }
}
