//! `nn.jit`: a module compiled once per input signature and replayed.

use std::sync::Arc;

use super::module::Module;
use super::vmap::prefixed_type_name;
use crate::core::lift::JitCache;
use crate::core::{Result, Scope};
use crate::tensor::Tensors;

/// `nn.jit(Module)`: `module`, compiled once per signature and replayed.
/// Its
/// variables, names (`JitBlock_0` for a `Block`), outputs and RNG keys are
/// those Flax gives the jitted module: as Flax's `fork_rngs`, the module
/// first draws one key per RNG stream from its own scope, and the body's
/// `make_rng` derives its keys from those, so its dropout masks differ
/// from the un-jitted module's.
///
/// The first call with a signature (the input's structure, static values
/// and shapes, the variables' structure and shapes, the RNG streams, which
/// collections are writable) runs the module while recording its
/// operations; later calls with that signature replay them on the new
/// input, variables and keys. Random tensors drawn through
/// [`Tensor::sampled`](crate::tensor::Tensor::sampled) (as `Dropout`
/// draws its masks) are drawn again from each call's keys, and writable
/// collections (`BatchNorm`'s `batch_stats` in training) are results of
/// the replay. The numbers are those of running the module as a compiled
/// region ([`as_jitted`](crate::tensor::as_jitted)), replayed or not. A
/// module the replay cannot repeat (an operation it does not know, a
/// branch on a value) runs on every call instead, with the same numbers.
/// At `init`, under `grad` (its input or variables traced) and under
/// `debug_nans` the module runs inline.
///
/// Clones share their compiled programs (as the instances of a jitted
/// class do in Flax): keep a `Jit` in your module and call clones of it,
/// rather than making a new one on every call.
///
/// ```
/// use flaxen::core::{Result, Rngs, Scope};
/// use flaxen::nn::{Dense, Dropout, Jit, Module};
/// use flaxen::random;
/// use flaxen::tensor::Tensor;
///
/// #[derive(Clone)]
/// struct Block;
///
/// impl Module for Block {
///     type Input = Tensor;
///     type Output = Tensor;
///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
///         let h = s.call(Dense::new(8), x)?.relu();
///         s.call(Dropout::new(0.5), h)
///     }
/// }
///
/// let model = Jit::new(Block);
/// let x = Tensor::ones(&[4, 3]);
/// let v = model.init(random::key(0), x.clone())?;
/// assert!(v.get("params/Dense_0/kernel").is_some());
/// let mut masks = Vec::new();
/// for t in 0..3 {
///     let rngs = Rngs::none().with("dropout", random::key(t));
///     masks.push(model.apply(&v, x.clone(), rngs)?.to_vec());
/// }
/// assert!(model.is_compiled());
/// assert_ne!(masks[1], masks[2]); // fresh masks on every call
/// # Ok::<(), flaxen::core::Error>(())
/// ```
pub struct Jit<M: Module> {
    module: M,
    cache: Arc<JitCache<M::Output>>,
}

impl<M: Module> Jit<M> {
    /// `nn.jit(module)`.
    pub fn new(module: M) -> Jit<M> {
        Jit {
            module,
            cache: Arc::default(),
        }
    }

    /// Whether some signature was compiled (its calls replay).
    pub fn is_compiled(&self) -> bool {
        self.cache.counts().0 > 0
    }

    /// How many signatures were compiled, and how many run eagerly on
    /// every call because the replay cannot repeat them.
    pub fn compiled_counts(&self) -> (usize, usize) {
        self.cache.counts()
    }

    /// Why the signatures that run eagerly could not be compiled.
    pub fn eager_reasons(&self) -> Vec<String> {
        self.cache.eager_reasons()
    }
}

impl<M: Module + Clone> Clone for Jit<M> {
    fn clone(&self) -> Self {
        Jit {
            module: self.module.clone(),
            cache: Arc::clone(&self.cache),
        }
    }
}

impl<M: Module + std::fmt::Debug> std::fmt::Debug for Jit<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (compiled, eager) = self.cache.counts();
        f.debug_struct("Jit")
            .field("module", &self.module)
            .field("compiled", &compiled)
            .field("eager", &eager)
            .finish()
    }
}

impl<M> Module for Jit<M>
where
    M: Module,
    M::Input: Tensors,
    M::Output: Tensors,
{
    type Input = M::Input;
    type Output = M::Output;

    fn type_name(&self) -> &'static str {
        prefixed_type_name("Jit", self.module.type_name())
    }

    fn call(&self, s: &Scope<'_>, input: M::Input) -> Result<M::Output> {
        let module = &self.module;
        s.jit(&self.cache, input, |s, x| {
            s.set_module_type(module.type_name());
            module.call(s, x)
        })
    }
}
