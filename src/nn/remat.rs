//! `nn.remat` / `nn.checkpoint`: a module whose forward pass is recomputed
//! during the backward pass instead of kept.

use super::module::Module;
use super::vmap::prefixed_type_name;
use crate::core::{Result, Scope};
use crate::tensor::Tensors;

/// `nn.remat(Module)` (also `nn.checkpoint`): `module`, whose intermediate
/// values are not kept for the backward pass of a training step but
/// recomputed from its input, variables and RNG keys when the backward pass
/// needs them (see [`Scope::checkpoint`]). Its values and gradients are the
/// module's own, bit for bit; its variables, RNG keys and names are those
/// Flax gives the remat'ed module (`CheckpointBlock_0` for a `Block`).
///
/// Inputs and outputs are [`Tensors`]: tensors, trees, tuples of them, and
/// values that hold no tensor (flags, sizes: Flax's `static_argnums`),
/// which pass through as they are. The usual pattern for deep models is a
/// [`Scan`](super::Scan) over `Remat::new(Block)`: memory then grows with
/// the depth only by each block's input.
///
/// ```
/// use flaxen::core::{Result, Scope, Variables};
/// use flaxen::nn::{Dense, Module, Remat};
/// use flaxen::tensor::{Tensor, Tree};
/// use flaxen::{core, random};
///
/// #[derive(Clone)]
/// struct Block;
///
/// impl Module for Block {
///     type Input = Tensor;
///     type Output = Tensor;
///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
///         let h = s.call(Dense::new(4), x)?.relu();
///         s.call(Dense::new(2), h)
///     }
/// }
///
/// let x = Tensor::ones(&[3, 2]);
/// let v = Remat::new(Block).init(random::key(0), x.clone())?;
/// assert!(v.get("params/Dense_0").is_some());
/// let remat = core::grad(
///     |p: &Tree| {
///         let v = Variables::new().with("params", p.clone());
///         Ok(Remat::new(Block).apply(&v, x.clone(), ())?.square().sum_all())
///     },
///     &v.params(),
/// )?;
/// let plain = core::grad(
///     |p: &Tree| {
///         let v = Variables::new().with("params", p.clone());
///         Ok(Block.apply(&v, x.clone(), ())?.square().sum_all())
///     },
///     &v.params(),
/// )?;
/// assert_eq!(remat, plain);
/// # Ok::<(), flaxen::core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Remat<M> {
    module: M,
}

impl<M> Remat<M> {
    /// `nn.remat(module)`.
    pub fn new(module: M) -> Remat<M> {
        Remat { module }
    }
}

impl<M> Module for Remat<M>
where
    M: Module + Clone + Send + Sync + 'static,
    M::Input: Tensors + Send + Sync + 'static,
    M::Output: Tensors,
{
    type Input = M::Input;
    type Output = M::Output;

    fn type_name(&self) -> &'static str {
        prefixed_type_name("Checkpoint", self.module.type_name())
    }

    fn call(&self, s: &Scope<'_>, input: M::Input) -> Result<M::Output> {
        let module = self.module.clone();
        s.checkpoint(&input, move |s, x| module.call(s, x.clone()))
    }
}
