//! `nn.jit`: a module compiled once per input signature and replayed.

use std::sync::Arc;

use super::jit_options::{JitOptions, MethodCaches, CALL};
use super::method::Method;
use super::module::Module;
use super::vmap::prefixed_type_name;
use crate::core::lift::JitCache;
use crate::core::{Error, Result, Scope};
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
/// region ([`as_jitted`](crate::tensor::as_jitted)), replayed or not, and
/// a [`BatchNorm`](super::BatchNorm)'s forward pass is the one XLA fuses
/// (see `crate::xla::batch_norm`), as in Flax's `nn.jit`. A
/// module the replay cannot repeat (an operation it does not know, a
/// branch on a value) runs on every call instead, with the same numbers.
/// At `init`, under `grad` (its input or variables traced) and under
/// `debug_nans` the module runs inline; under `grad`, a `BatchNorm` in
/// training is differentiated as XLA compiles the jitted module's backward
/// pass (see `crate::xla::batch_norm_grad`).
///
/// Static arguments and methods read as in Flax's
/// `nn.jit(Block, static_argnums=(2,), methods=["encode"])`:
/// [`static_argnums`](Jit::static_argnums) says which positional arguments
/// (the elements of a tuple input, `self` being argument 0) are static —
/// part of the compile cache key, compared by value, a new value compiling
/// again — and [`methods`](Jit::methods) which methods are compiled
/// (`__call__` alone by default; the others are run with
/// [`Child::method`](super::Child::method)). Without `static_argnums`,
/// every argument that holds no tensor (a `bool`, a size) is static, as
/// Rust's types tell values from tensors.
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
    options: JitOptions,
    cache: Arc<JitCache<M::Output>>,
    methods: Arc<MethodCaches>,
}

impl<M: Module> Jit<M> {
    /// `nn.jit(module)`.
    pub fn new(module: M) -> Jit<M> {
        Jit {
            module,
            options: JitOptions::default(),
            cache: Arc::default(),
            methods: Arc::default(),
        }
    }

    /// Flax's `static_argnums`: the positional arguments (of every compiled
    /// method) that are static, numbered as in Flax with `self` as 0 — for
    /// a `(Tensor, bool)` input, the flag is argument 2. A static argument
    /// is part of the compile cache key: a call with a new value compiles
    /// again, and one with a value seen before replays its program.
    ///
    /// Checked on every call, as typed [`Error::Lift`]s: an index past the
    /// method's arguments (JAX ignores it, then fails to trace the flag),
    /// a static argument holding tensors (JAX cannot hash arrays), and an
    /// argument holding values that are not tensors but not marked static
    /// (JAX cannot trace them).
    ///
    /// ```
    /// use flaxen::core::{Result, Scope};
    /// use flaxen::nn::{Dense, Jit, Module};
    /// use flaxen::{random, tensor::Tensor};
    ///
    /// #[derive(Clone)]
    /// struct Foo;
    ///
    /// impl Module for Foo {
    ///     type Input = (Tensor, bool);
    ///     type Output = Tensor;
    ///     fn call(&self, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<Tensor> {
    ///         let y = s.call(Dense::new(3), x)?;
    ///         Ok(if train { y.relu() } else { y })
    ///     }
    /// }
    ///
    /// let jit = Jit::new(Foo).static_argnums([2]);
    /// let x = Tensor::ones(&[2, 4]);
    /// let v = jit.init(random::key(0), (x.clone(), true))?;
    /// for train in [true, true, false, true] {
    ///     jit.apply(&v, (x.clone(), train), ())?;
    /// }
    /// assert_eq!(jit.compiled_counts(), (2, 0)); // one program per flag
    /// // Argument 1 is the input tensor: it cannot be static.
    /// let bad = Jit::new(Foo).static_argnums([1, 2]);
    /// assert!(bad.apply(&v, (x, true), ()).is_err());
    /// # Ok::<(), flaxen::core::Error>(())
    /// ```
    pub fn static_argnums(mut self, argnums: impl IntoIterator<Item = usize>) -> Jit<M> {
        self.options.static_argnums = Some(argnums.into_iter().collect());
        self.fresh()
    }

    /// Flax's `methods`: the methods that are compiled, by name
    /// (`"__call__"` for [`Module::call`], the others among
    /// [`Module::method_names`]). Without it only `__call__` is; with it,
    /// only the methods named, each with its own programs. A name the
    /// module does not have is an [`Error::Lift`] (Flax raises for a
    /// method the class lacks).
    pub fn methods<S: Into<String>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Result<Jit<M>> {
        let names = names.into_iter().map(Into::into).collect();
        self.options = self.options.with_methods(
            self.module.type_name(),
            self.module.method_names(),
            names,
        )?;
        Ok(self.fresh())
    }

    /// Flax's `methods` as a dict (`methods={"encode":
    /// dict(static_argnums=(2,)), "decode": {}}`): compiles method `name`
    /// (adding it to [`methods`](Jit::methods)) with static arguments of
    /// its own, in place of [`static_argnums`](Jit::static_argnums) —
    /// methods whose positional arguments differ (`encode(x, train)`,
    /// `decode(z)`) need their own. A name the module does not have is an
    /// [`Error::Lift`].
    pub fn method_static_argnums(
        mut self,
        name: impl Into<String>,
        argnums: impl IntoIterator<Item = usize>,
    ) -> Result<Jit<M>> {
        self.options = self.options.with_method_argnums(
            self.module.type_name(),
            self.module.method_names(),
            name.into(),
            argnums.into_iter().collect(),
        )?;
        Ok(self.fresh())
    }

    /// This `Jit` with no compiled program (its options changed).
    fn fresh(mut self) -> Jit<M> {
        self.cache = Arc::default();
        self.methods = Arc::default();
        self
    }

    /// Whether some signature was compiled (its calls replay).
    pub fn is_compiled(&self) -> bool {
        self.compiled_counts().0 > 0
    }

    /// How many signatures were compiled, and how many run eagerly on
    /// every call because the replay cannot repeat them, over every
    /// compiled method.
    pub fn compiled_counts(&self) -> (usize, usize) {
        let methods = self.methods.all();
        methods
            .iter()
            .map(|c| c.counts())
            .fold(self.cache.counts(), |(a, b), (c, d)| (a + c, b + d))
    }

    /// [`compiled_counts`](Jit::compiled_counts) of method `name` alone
    /// (`"__call__"` for `call`); `(0, 0)` for a method not called yet.
    pub fn compiled_counts_of(&self, name: &str) -> (usize, usize) {
        if name == CALL {
            return self.cache.counts();
        }
        self.methods.find(name).map_or((0, 0), |c| c.counts())
    }

    /// Why the signatures that run eagerly could not be compiled.
    pub fn eager_reasons(&self) -> Vec<String> {
        let mut reasons = self.cache.eager_reasons();
        for c in self.methods.all() {
            reasons.extend(c.eager_reasons());
        }
        reasons
    }
}

impl<M: Module + Clone> Clone for Jit<M> {
    fn clone(&self) -> Self {
        Jit {
            module: self.module.clone(),
            options: self.options.clone(),
            cache: Arc::clone(&self.cache),
            methods: Arc::clone(&self.methods),
        }
    }
}

impl<M: Module + std::fmt::Debug> std::fmt::Debug for Jit<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (compiled, eager) = self.compiled_counts();
        f.debug_struct("Jit")
            .field("module", &self.module)
            .field("static_argnums", &self.options.static_argnums)
            .field("methods", &self.options.methods)
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

    fn method_names(&self) -> &'static [&'static str] {
        self.module.method_names()
    }

    fn call(&self, s: &Scope<'_>, input: M::Input) -> Result<M::Output> {
        let module = &self.module;
        if !self.options.jits(CALL) {
            return module.call(s, input);
        }
        self.options.check_arguments(&s.path_text(), CALL, &input)?;
        s.jit(&self.cache, input, |s, x| {
            s.set_module_type(module.type_name());
            module.call(s, x)
        })
    }
}

/// A method of `M` is one of `Jit<M>`: compiled when
/// [`Jit::methods`] names it, run as it is otherwise.
impl<M, Me> Method<Jit<M>> for Me
where
    M: Module,
    Me: Method<M>,
    Me::Input: Tensors,
    Me::Output: Tensors + Send + 'static,
{
    type Input = Me::Input;
    type Output = Me::Output;

    fn name(&self) -> &'static str {
        Method::<M>::name(self)
    }

    fn run(&self, jit: &Jit<M>, s: &Scope<'_>, input: Me::Input) -> Result<Me::Output> {
        let name = Method::<M>::name(self);
        let module = &jit.module;
        if !jit.options.jits(name) {
            return Method::<M>::run(self, module, s, input);
        }
        jit.options.check_arguments(&s.path_text(), name, &input)?;
        let cache = jit.methods.get::<Me::Output>(name);
        let Some(cache) = cache.as_any().downcast_ref::<JitCache<Me::Output>>() else {
            return Err(Error::Lift {
                path: s.path_text(),
                transform: "jit",
                message: format!("two methods named {name:?} with different outputs"),
            });
        };
        s.jit(cache, input, |s, x| {
            s.set_module_type(module.type_name());
            Method::<M>::run(self, module, s, x)
        })
    }
}
