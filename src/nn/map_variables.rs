//! `MapVariables` (Flax's `nn.map_variables`): a module whose variables of
//! chosen collections are transformed on the way in and out.

use std::sync::Arc;

use super::module::Module;
use super::vmap::prefixed_type_name;
use crate::core::lift::MapOptions;
use crate::core::{Filter, Result, Scope};
use crate::tensor::Tree;

/// A shared transform of one collection's subtree.
type SharedTreeFn = Arc<dyn Fn(&Tree) -> Result<Tree> + Send + Sync>;

/// `nn.map_variables(Module, collections, trans_in_fn, trans_out_fn, init,
/// mutable)`: runs `module` on its variables as `trans_in` sees them.
///
/// Flax's `test_map_variables_bit_weights`, a Dense layer on the signs of
/// its weights:
///
/// ```
/// use flaxen::nn::{Dense, MapVariables, Module};
/// use flaxen::random;
/// use flaxen::tensor::{tree_map, Tensor};
///
/// // jnp.sign: -1, 0 or 1 (a constant: its gradient is zero).
/// let sign = |t: &flaxen::tensor::Tree| {
///     Ok(tree_map(t, |x| {
///         Tensor::from_array(x.to_array().mapv(|v| if v == 0.0 { v } else { v.signum() }))
///     }))
/// };
/// let bit_dense = MapVariables::new(Dense::new(4), "params").trans_in(sign).init(true);
/// let x = Tensor::ones(&[2, 4]);
/// let (y, variables) = bit_dense.init_with_output(random::key(0), x.clone())?;
/// assert_eq!(bit_dense.apply(&variables, x, ())?.to_vec(), y.to_vec());
/// # Ok::<(), flaxen::Error>(())
/// ```
pub struct MapVariables<M> {
    module: M,
    collections: Filter,
    trans_in: SharedTreeFn,
    trans_out: SharedTreeFn,
    options: MapOptions,
}

impl<M: Module> MapVariables<M> {
    /// Maps the `collections` of `module`, with identity transforms,
    /// `init=False` and `mutable=False` (Flax's defaults).
    pub fn new(module: M, collections: impl Into<Filter>) -> MapVariables<M> {
        let identity: SharedTreeFn = Arc::new(|t: &Tree| Ok(t.clone()));
        MapVariables {
            module,
            collections: collections.into(),
            trans_in: identity.clone(),
            trans_out: identity,
            options: MapOptions::default(),
        }
    }

    /// The view `module` sees of each mapped collection (`trans_in_fn`).
    pub fn trans_in(mut self, f: impl Fn(&Tree) -> Result<Tree> + Send + Sync + 'static) -> Self {
        self.trans_in = Arc::new(f);
        self
    }

    /// How an updated view is stored back (`trans_out_fn`).
    pub fn trans_out(mut self, f: impl Fn(&Tree) -> Result<Tree> + Send + Sync + 'static) -> Self {
        self.trans_out = Arc::new(f);
        self
    }

    /// Flax's `init=True`: create the variables untransformed first, so
    /// that `init` computes what `apply` computes.
    pub fn init(mut self, init: bool) -> Self {
        self.options.init = init;
        self
    }

    /// Flax's `mutable=True`: the mapped collections are writable inside.
    pub fn mutable(mut self, mutable: bool) -> Self {
        self.options.mutable = mutable;
        self
    }
}

impl<M: Module> Module for MapVariables<M>
where
    M::Input: Clone,
{
    type Input = M::Input;
    type Output = M::Output;

    /// `Map_variables{Inner}`, as Flax names the lifted class.
    fn type_name(&self) -> &'static str {
        prefixed_type_name("Map_variables", self.module.type_name())
    }

    fn tabulate_input(&self, input: &M::Input) -> String {
        self.module.tabulate_input(input)
    }

    fn tabulate_output(&self, output: &M::Output) -> String {
        self.module.tabulate_output(output)
    }

    fn call(&self, s: &Scope<'_>, input: M::Input) -> Result<M::Output> {
        let module_type = self.module.type_name();
        s.map_variables_with(
            self.collections.clone(),
            &*self.trans_in,
            &*self.trans_out,
            self.options,
            |inner| {
                inner.set_module_type(module_type);
                self.module.call(inner, input.clone())
            },
        )
    }
}
