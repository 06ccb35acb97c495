//! The `Module` trait (Flax's `nn.Module`): a plain struct of
//! hyperparameters whose `call` runs inside a [`Scope`], with `init` and
//! `apply` as entry points.

use crate::core::{Error, Filter, Result, Rngs, Scope, Variables};

/// A Flax Linen module: a plain Rust struct of hyperparameters. `call` is
/// its `__call__`, written compact-style: it asks its scope for parameters,
/// variables and RNG keys, and creates submodules as it goes.
///
/// ```
/// use flaxen::core::{Result, Scope};
/// use flaxen::nn::{Dense, Module};
/// use flaxen::random;
/// use flaxen::tensor::Tensor;
///
/// struct Mlp;
/// impl Module for Mlp {
///     type Input = Tensor;
///     type Output = Tensor;
///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
///         let x = s.call(Dense::new(4), x)?.relu();
///         s.call(Dense::new(1), x)
///     }
/// }
///
/// let x = Tensor::ones(&[2, 3]);
/// let variables = Mlp.init(random::key(0), x.clone())?;
/// assert_eq!(variables.tensor("params/Dense_0/kernel").unwrap().shape(), &[3, 4]);
/// let y = Mlp.apply(&variables, x, ())?;
/// assert_eq!(y.shape(), &[2, 1]);
/// # Ok::<(), flaxen::core::Error>(())
/// ```
pub trait Module {
    /// What `call` takes (a tensor, a tuple such as `(Tensor, bool)`, `()`).
    type Input;
    /// What `call` returns.
    type Output;

    /// The module's computation (Flax's `__call__`).
    fn call(&self, scope: &Scope<'_>, input: Self::Input) -> Result<Self::Output>;

    /// The type name used for auto-names (`Dense` gives `Dense_0`,
    /// `Dense_1`, ...): by default the struct's name without its module
    /// path or generic arguments.
    fn type_name(&self) -> &'static str {
        short_type_name(std::any::type_name::<Self>())
    }

    /// The names of this module's methods besides `call` (Flax's other
    /// methods, such as an autoencoder's `encode`), which
    /// [`Jit::methods`](super::Jit::methods) may name; each is run with
    /// [`Child::method`] through a [`Method`](super::Method). None by
    /// default.
    fn method_names(&self) -> &'static [&'static str] {
        &[]
    }

    /// How [`tabulate`](super::tabulate) shows this module's input (its
    /// `inputs` column): empty by default. A module whose input implements
    /// [`Shapes`](super::Shapes) can return `input.shapes()`, as the
    /// built-in layers do.
    fn tabulate_input(&self, _input: &Self::Input) -> String {
        String::new()
    }

    /// How [`tabulate`](super::tabulate) shows this module's output.
    fn tabulate_output(&self, _output: &Self::Output) -> String {
        String::new()
    }

    /// Creates the variables (Flax's `init`): runs `call` with every
    /// collection mutable and returns all variables.
    fn init(&self, rngs: impl Into<Rngs>, input: Self::Input) -> Result<Variables>
    where
        Self: Sized,
    {
        self.init_with_output(rngs, input).map(|(_, v)| v)
    }

    /// [`Module::init`] that also returns the output.
    fn init_with_output(
        &self,
        rngs: impl Into<Rngs>,
        input: Self::Input,
    ) -> Result<(Self::Output, Variables)>
    where
        Self: Sized,
    {
        crate::core::init(rngs, |scope| {
            scope.set_module_type(self.type_name());
            self.call(scope, input)
        })
    }

    /// Runs the module on existing variables (Flax's `apply` with
    /// `mutable=False`). The caller's variables are never changed.
    fn apply(
        &self,
        variables: &Variables,
        input: Self::Input,
        rngs: impl Into<Rngs>,
    ) -> Result<Self::Output>
    where
        Self: Sized,
    {
        self.apply_mut(variables, input, rngs, Filter::Nothing)
            .map(|(out, _)| out)
    }

    /// Runs the module with the collections selected by `mutable` writable
    /// (Flax's `apply(..., mutable=[...])`), returning the output and the
    /// updated mutable collections.
    fn apply_mut(
        &self,
        variables: &Variables,
        input: Self::Input,
        rngs: impl Into<Rngs>,
        mutable: impl Into<Filter>,
    ) -> Result<(Self::Output, Variables)>
    where
        Self: Sized,
    {
        crate::core::apply(variables, rngs, mutable, |scope| {
            scope.set_module_type(self.type_name());
            self.call(scope, input)
        })
    }
}

/// `a::b::Dense<T>` → `Dense`.
fn short_type_name(full: &'static str) -> &'static str {
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base)
}

/// How deep submodules may nest: deeper calls are
/// [`Error::ModuleDepth`]. Every level keeps its path, so memory grows with
/// the square of the depth; 1,000 levels take a few megabytes.
pub const MAX_MODULE_DEPTH: usize = 1000;

/// Stack that must remain for a submodule's call to run on the current
/// segment: one module level of user code plus flaxen's own frames.
const STACK_RED_ZONE: usize = 256 * 1024;

/// Size of each new stack segment for deeply nested modules.
const STACK_SEGMENT: usize = 4 * 1024 * 1024;

/// A submodule bound to a name inside its parent's call: calling it again
/// reuses its variables (weight sharing).
pub struct Child<'p, 's, M> {
    pub(super) parent: &'p Scope<'s>,
    pub(super) name: String,
    pub(super) module: M,
}

impl<M: Module> Child<'_, '_, M> {
    /// The submodule's name (`Dense_0`, or the explicit one).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the submodule in its own scope.
    ///
    /// Nesting depth is bounded by memory, not by the thread's stack: a
    /// submodule called near the end of the stack continues on a new
    /// segment allocated on the heap.
    pub fn call(&self, input: M::Input) -> Result<M::Output> {
        self.enter(|scope| {
            let row = if super::tabulate::recording() {
                super::tabulate::enter(
                    scope.path(),
                    self.module.type_name(),
                    self.module.tabulate_input(&input),
                )
            } else {
                None
            };
            let out = self.module.call(scope, input)?;
            if let Some(row) = row {
                super::tabulate::exit(row, self.module.tabulate_output(&out));
            }
            Ok(out)
        })
    }

    /// Runs `method` of the submodule in its scope (a Flax module's other
    /// methods: `self.ae.encode(x)`), with the submodule's variables and
    /// names, as [`call`](Child::call) runs `call`.
    pub fn method<Me: super::Method<M>>(&self, method: Me, input: Me::Input) -> Result<Me::Output> {
        self.enter(|scope| method.run(&self.module, scope, input))
    }

    /// Runs `f` in the submodule's scope, with the depth limit and the
    /// module path on errors.
    fn enter<T>(&self, f: impl FnOnce(&Scope<'_>) -> Result<T>) -> Result<T> {
        let depth = self.parent.path().len();
        if depth >= MAX_MODULE_DEPTH {
            let path = self.parent.path();
            return Err(Error::ModuleDepth {
                path: format!(
                    "/{}/.../{}",
                    path[..3].join("/"),
                    path[depth - 3..].join("/")
                ),
                limit: MAX_MODULE_DEPTH,
            });
        }
        stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || {
            let scope = self.parent.push(&self.name);
            scope.set_module_type(self.module.type_name());
            f(&scope).map_err(|e| e.at(&scope.path_text()))
        })
    }
}

impl<'s> Scope<'s> {
    /// Binds a submodule under its auto-name `{TypeName}_{n}` (Flax's
    /// compact submodules); call it with [`Child::call`], as often as needed.
    pub fn child<M: Module>(&self, module: M) -> Result<Child<'_, 's, M>> {
        let name = self.auto_name(module.type_name());
        self.reserve(&name)?;
        Ok(Child {
            parent: self,
            name,
            module,
        })
    }

    /// Binds a submodule under an explicit name (Flax's `name=`); a name
    /// used twice in one call is an error.
    pub fn child_named<M: Module>(&self, name: &str, module: M) -> Result<Child<'_, 's, M>> {
        self.reserve(name)?;
        Ok(Child {
            parent: self,
            name: name.to_string(),
            module,
        })
    }

    /// Creates an auto-named submodule and calls it once: `nn.Dense(3)(x)`
    /// is `scope.call(Dense::new(3), x)`.
    pub fn call<M: Module>(&self, module: M, input: M::Input) -> Result<M::Output> {
        self.child(module)?.call(input)
    }

    /// Creates a named submodule and calls it once.
    pub fn call_named<M: Module>(
        &self,
        name: &str,
        module: M,
        input: M::Input,
    ) -> Result<M::Output> {
        self.child_named(name, module)?.call(input)
    }
}

/// Helper for errors inside `call` bodies that are not tied to a variable.
pub(crate) fn config_error(scope: &Scope<'_>, message: String) -> Error {
    Error::Config {
        path: scope.path_text(),
        message,
    }
}
