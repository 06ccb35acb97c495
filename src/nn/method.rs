//! Methods of a module besides `call` (a Flax module's other methods, such
//! as an autoencoder's `encode` and `decode`), and running one as a
//! module's entry point (Flax's `apply(..., method=...)`).

use super::module::Module;
use crate::core::{Result, Scope};

/// A method of module `M` besides [`Module::call`]: Flax's
/// `def encode(self, x)`. Run it on a bound submodule with
/// [`Child::method`](super::Child::method), at the top level with
/// [`MethodCall`]; a [`Jit`](super::Jit) of `M` compiles it when
/// [`Jit::methods`](super::Jit::methods) names it.
///
/// ```
/// use flaxen::core::{Result, Scope};
/// use flaxen::nn::{Dense, Method, MethodCall, Module};
/// use flaxen::{random, tensor::Tensor};
///
/// #[derive(Clone)]
/// struct Ae;
///
/// /// `Ae.encode(x)`.
/// #[derive(Clone)]
/// struct Encode;
///
/// impl Method<Ae> for Encode {
///     type Input = Tensor;
///     type Output = Tensor;
///     fn name(&self) -> &'static str {
///         "encode"
///     }
///     fn run(&self, _: &Ae, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
///         s.call_named("enc", Dense::new(2), x)
///     }
/// }
///
/// impl Module for Ae {
///     type Input = Tensor;
///     type Output = Tensor;
///     fn method_names(&self) -> &'static [&'static str] {
///         &["encode"]
///     }
///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
///         let z = Encode.run(self, s, x)?;
///         s.call_named("dec", Dense::new(3), z)
///     }
/// }
///
/// let x = Tensor::ones(&[4, 3]);
/// let v = Ae.init(random::key(0), x.clone())?;
/// let z = MethodCall::new(Ae, Encode).apply(&v, x, ())?;
/// assert_eq!(z.shape(), &[4, 2]);
/// # Ok::<(), flaxen::core::Error>(())
/// ```
pub trait Method<M> {
    /// What the method takes.
    type Input;
    /// What it returns.
    type Output;

    /// The method's name, as [`Module::method_names`] and
    /// [`Jit::methods`](super::Jit::methods) list it.
    fn name(&self) -> &'static str;

    /// The method's computation, in the scope of `module`.
    fn run(&self, module: &M, scope: &Scope<'_>, input: Self::Input) -> Result<Self::Output>;
}

/// Method `Me` of module `M` as a module whose `call` runs it: Flax's
/// `module.apply(variables, x, method=...)` at the top level (and, inside
/// a parent, an auto-named submodule `M` on which only that method is
/// called). Its variables and names are `M`'s.
#[derive(Clone, Debug)]
pub struct MethodCall<M, Me> {
    module: M,
    method: Me,
}

impl<M, Me> MethodCall<M, Me> {
    /// `method` of `module`.
    pub fn new(module: M, method: Me) -> MethodCall<M, Me> {
        MethodCall { module, method }
    }
}

impl<M: Module, Me: Method<M>> Module for MethodCall<M, Me> {
    type Input = Me::Input;
    type Output = Me::Output;

    fn type_name(&self) -> &'static str {
        self.module.type_name()
    }

    fn method_names(&self) -> &'static [&'static str] {
        self.module.method_names()
    }

    fn call(&self, s: &Scope<'_>, input: Me::Input) -> Result<Me::Output> {
        self.method.run(&self.module, s, input)
    }
}
