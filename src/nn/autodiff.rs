//! Lifted differentiation inside a module (`nn.grad`, `nn.value_and_grad`):
//! the gradient of a function of the module's scope with respect to its
//! inputs, with the module's variables available (and created, at `init`)
//! inside, as in Flax. Flax's `nn.grad` differentiates the inputs only,
//! never the variables; so does this.

use crate::core::lift::ScopeVjp;
use crate::core::{Result, Scope};
use crate::tensor::{self, Tensor, Tensors, Tree};

/// `nn.value_and_grad(fn, mdl, *primals, has_aux=True)`: runs `f(s,
/// primals)`, which returns a scalar and auxiliary data, and returns both
/// with the gradient of the scalar with respect to every tensor of
/// `primals`.
///
/// Differentiation is first order: inside a `grad` over the parameters
/// (a training step), an `nn::grad` whose function reads the parameters
/// is a typed error.
pub fn value_and_grad_with_aux<T>(
    s: &Scope<'_>,
    f: impl FnOnce(&Scope<'_>, &Tree) -> Result<(Tensor, T)>,
    primals: &Tree,
) -> Result<((Tensor, T), Tree)> {
    tensor::value_and_grad_with_aux(|p| f(s, p), primals)
}

/// `nn.value_and_grad(fn, mdl, *primals)`: the value of `f(s, primals)`
/// and its gradient with respect to every tensor of `primals`.
///
/// ```
/// use flaxen::core::{Result, Scope};
/// use flaxen::nn::{self, Module};
/// use flaxen::tensor::{Tensor, Tree};
/// use flaxen::{init, random};
///
/// /// Flax's test_grad_simple: d/dx and d/dy of sum(scale * x * y).
/// struct Foo;
///
/// impl Module for Foo {
///     type Input = (Tensor, Tensor);
///     type Output = (Tensor, Tree);
///     fn call(&self, s: &Scope<'_>, (x, y): (Tensor, Tensor)) -> Result<(Tensor, Tree)> {
///         let primals = Tree::new().with("x", x).with("y", y);
///         nn::value_and_grad(
///             s,
///             |s, p| {
///                 let scale = s.param("scale", init::ones(), &[])?;
///                 Ok((&(&scale * p.tensor("x")?) * p.tensor("y")?).sum_all())
///             },
///             &primals,
///         )
///     }
/// }
///
/// let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap();
/// let y = Tensor::from_vec(vec![3.0, 4.0], &[2]).unwrap();
/// let v = Foo.init(random::key(0), (x.clone(), y.clone()))?;
/// let (z, g) = Foo.apply(&v, (x, y), ())?;
/// assert_eq!(z.item().unwrap(), 11.0);
/// assert_eq!(g.tensor("x").unwrap().to_vec(), [3.0, 4.0]);
/// # Ok::<(), flaxen::core::Error>(())
/// ```
pub fn value_and_grad(
    s: &Scope<'_>,
    f: impl FnOnce(&Scope<'_>, &Tree) -> Result<Tensor>,
    primals: &Tree,
) -> Result<(Tensor, Tree)> {
    let ((value, ()), grads) = value_and_grad_with_aux(s, |s, p| Ok((f(s, p)?, ())), primals)?;
    Ok((value, grads))
}

/// `nn.grad(fn, mdl, *primals)`: the gradient of `f(s, primals)` with
/// respect to every tensor of `primals`.
pub fn grad(
    s: &Scope<'_>,
    f: impl FnOnce(&Scope<'_>, &Tree) -> Result<Tensor>,
    primals: &Tree,
) -> Result<Tree> {
    Ok(value_and_grad(s, f, primals)?.1)
}

/// `nn.grad(fn, mdl, *primals, has_aux=True)`: the gradient and the
/// auxiliary data.
pub fn grad_with_aux<T>(
    s: &Scope<'_>,
    f: impl FnOnce(&Scope<'_>, &Tree) -> Result<(Tensor, T)>,
    primals: &Tree,
) -> Result<(Tree, T)> {
    let ((_, aux), grads) = value_and_grad_with_aux(s, f, primals)?;
    Ok((grads, aux))
}

/// `nn.vjp(fn, mdl, *primals)`: the output of `f(s, primals)` and its
/// backward function, whose [`call`](ScopeVjp::call) gives the cotangents
/// of the `params` of `s` (relative to `s`: a submodule `f` calls shows as
/// `Bar_0/...`) and of `primals`.
///
/// ```
/// use flaxen::core::{Result, Scope};
/// use flaxen::nn::{self, Module};
/// use flaxen::tensor::{Tensor, Tree};
/// use flaxen::{init, random};
///
/// /// Flax's test_vjp: `p * x * y` with `p = 0.5`.
/// struct Foo;
///
/// impl Module for Foo {
///     type Input = (Tensor, Tensor);
///     type Output = (Tree, Tree);
///     fn call(&self, s: &Scope<'_>, (x, y): (Tensor, Tensor)) -> Result<(Tree, Tree)> {
///         let primals = Tree::new().with("x", x).with("y", y);
///         let (z, bwd) = nn::vjp(
///             s,
///             |s, p| {
///                 let test = s.param("test", init::constant(0.5), &[])?;
///                 Ok(&(&test * p.tensor("x")?) * p.tensor("y")?)
///             },
///             &primals,
///         )?;
///         bwd.call(&Tensor::ones(z.shape()))
///     }
/// }
///
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]).unwrap();
/// let y = Tensor::from_vec(vec![4.0, 5.0, 6.0], &[3]).unwrap();
/// let v = Foo.init(random::key(0), (x.clone(), y.clone()))?;
/// let (params_grad, grads) = Foo.apply(&v, (x, y), ())?;
/// assert_eq!(params_grad.tensor("test").unwrap().item().unwrap(), 32.0);
/// assert_eq!(grads.tensor("x").unwrap().to_vec(), [2.0, 2.5, 3.0]);
/// assert_eq!(grads.tensor("y").unwrap().to_vec(), [0.5, 1.0, 1.5]);
/// # Ok::<(), flaxen::core::Error>(())
/// ```
pub fn vjp(
    s: &Scope<'_>,
    f: impl FnOnce(&Scope<'_>, &Tree) -> Result<Tensor>,
    primals: &Tree,
) -> Result<(Tensor, ScopeVjp)> {
    s.vjp(f, primals)
}

/// `nn.jvp(fn, mdl, primals, tangents, variable_tangents)`: the output of
/// `f(s, primals)` and its tangent, for tangents of `primals` and of the
/// `params` of `s` (`params_tangents`, in the structure of `params` at
/// `s`). See [`Scope::jvp`].
///
/// Flax's `nn.jvp` example: the tangent of `scale * x` in the direction
/// of the parameter alone (`x`'s tangent zero) is `x`.
///
/// ```
/// use flaxen::core::{Result, Scope};
/// use flaxen::init;
/// use flaxen::nn::{self, Module};
/// use flaxen::tensor::{Tensor, Tree};
/// use flaxen::random;
///
/// struct Foo;
///
/// impl Module for Foo {
///     type Input = Tensor;
///     type Output = Tensor;
///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
///         // At init `scale` does not exist yet: no parameter tangents.
///         let params_t = if s.is_initializing() {
///             Tree::new()
///         } else {
///             Tree::new().with("scale", Tensor::ones(&[]))
///         };
///         let primals = Tree::new().with("x", x.clone());
///         let tangents = Tree::new().with("x", Tensor::zeros(x.shape()));
///         let (_, out_t) = nn::jvp(
///             s,
///             |s, p| {
///                 let scale = s.param("scale", init::zeros(), &[])?;
///                 Ok(p.tensor("x")?.mul(&scale)?)
///             },
///             &primals,
///             &tangents,
///             &params_t,
///         )?;
///         Ok(out_t)
///     }
/// }
///
/// let x = Tensor::ones(&[3]);
/// let variables = Foo.init(random::key(0), x.clone())?;
/// let y_t = Foo.apply(&variables, x, ())?;
/// assert_eq!(y_t.to_vec(), [1.0, 1.0, 1.0]);
/// # Ok::<(), flaxen::core::Error>(())
/// ```
pub fn jvp(
    s: &Scope<'_>,
    f: impl FnOnce(&Scope<'_>, &Tree) -> Result<Tensor>,
    primals: &Tree,
    tangents: &Tree,
    params_tangents: &Tree,
) -> Result<(Tensor, Tensor)> {
    s.jvp(f, primals, tangents, params_tangents)
}

/// `nn.custom_vjp(fn, forward_fn, backward_fn)`: `fwd(s, input)` gives
/// the output and residuals; under a `grad`, `bwd(residuals, cotangent)`
/// gives the cotangents of the `params` of `s` (as [`vjp`]'s backward
/// function gives them) and of `input`. See [`Scope::custom_vjp`].
///
/// Flax's test_custom_vjp: a Dense layer whose parameter gradients are
/// replaced by their signs.
///
/// ```
/// use flaxen::core::{self, Result, Scope, Variables};
/// use flaxen::nn::{self, Dense, Module};
/// use flaxen::tensor::{tree_map, Tensor, Tree};
/// use flaxen::random;
///
/// struct Foo;
///
/// impl Module for Foo {
///     type Input = Tensor;
///     type Output = Tensor;
///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
///         let y = nn::custom_vjp(
///             s,
///             &x,
///             |s, x| {
///                 let primals = Tree::new().with("x", x.clone());
///                 nn::vjp(s, |s, p| s.call(Dense::new(1), p.tensor("x")?.clone()), &primals)
///             },
///             |vjp_fn, y_t| {
///                 let (params_t, input_t) = vjp_fn.call(y_t)?;
///                 let sign = |t: &Tensor| {
///                     let s: Vec<f32> = t.to_vec().iter().map(|v| v.signum()).collect();
///                     Tensor::from_vec(s, t.shape()).unwrap()
///                 };
///                 let params_t = tree_map(&params_t, sign);
///                 Ok((params_t, input_t.tensor("x")?.clone()))
///             },
///         )?;
///         Ok(y.reshape(&[])?)
///     }
/// }
///
/// let x = Tensor::ones(&[2]);
/// let v = Foo.init(random::key(0), x.clone())?;
/// let g = core::grad(
///     |p: &Tree| Foo.apply(&Variables::new().with("params", p.clone()), x.clone(), ()),
///     &v.params(),
/// )?;
/// for leaf in g.leaves() {
///     assert!(leaf.to_vec().iter().all(|v| v.abs() == 1.0));
/// }
/// # Ok::<(), flaxen::core::Error>(())
/// ```
pub fn custom_vjp<I, O, R>(
    s: &Scope<'_>,
    input: &I,
    fwd: impl FnOnce(&Scope<'_>, &I) -> Result<(O, R)>,
    bwd: impl Fn(&R, &O) -> Result<(Tree, I)> + Send + Sync + 'static,
) -> Result<O>
where
    I: Tensors,
    O: Tensors + Send + Sync + 'static,
    R: Send + Sync + 'static,
{
    s.custom_vjp(input, fwd, bwd)
}
