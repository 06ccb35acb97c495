//! `vjp` and `custom_vjp` on the functional core (Flax's `lift.vjp` and
//! `lift.custom_vjp`): differentiation with respect to a scope's `params`
//! as well as explicit inputs.

use std::cell::RefCell;

use super::pack::{Packed, VarMode};
use crate::core::filter::Filter;
use crate::core::scope::{Scope, State};
use crate::error::{Error, Result};
use crate::tensor::custom::{record_custom, recorded, untraced};
use crate::tensor::{self, Pullback, Tensor, Tensors, Tree};

/// The backward function of [`Scope::vjp`]: cotangents of the scope's
/// `params` and of the primals (Flax's `vjp_fn`).
#[derive(Debug)]
pub struct ScopeVjp {
    pullback: Pullback,
}

impl ScopeVjp {
    /// `(params_cotangent, primals_cotangent)` for the output's cotangent
    /// `cotangent` (which must have the output's shape); the parameters'
    /// tree has the structure of this scope's `params`, relative to it.
    pub fn call(&self, cotangent: &Tensor) -> Result<(Tree, Tree)> {
        let grads = self.pullback.call(cotangent)?;
        Ok((
            grads.subtree("params").unwrap_or_default(),
            grads.subtree("primals").unwrap_or_default(),
        ))
    }
}

/// This scope's subtree of `params` in `state`.
fn params_at(state: &State, path: &[String]) -> Tree {
    state
        .variables
        .collection("params")
        .and_then(|t| t.subtree(&path.join("/")))
        .unwrap_or_default()
}

impl<'s> Scope<'s> {
    /// Flax's `lift.vjp` (behind `nn.vjp`): `f(scope, primals)` and a
    /// function from the output's cotangent to the cotangents of this
    /// scope's `params` and of `primals`. Differentiation is first order:
    /// inside an enclosing `grad` over the same parameters this is an error
    /// (inside [`Scope::custom_vjp`]'s forward rule the parameters are
    /// detached, so it works there).
    pub fn vjp(
        &self,
        f: impl FnOnce(&Scope<'_>, &Tree) -> Result<Tensor>,
        primals: &Tree,
    ) -> Result<(Tensor, ScopeVjp)> {
        let (out, pullback) = self.over_params("vjp", f, |params, body| {
            let args = Tree::new()
                .with("params", params)
                .with("primals", primals.clone());
            tensor::vjp(body, &args)
        })?;
        Ok((out, ScopeVjp { pullback }))
    }

    /// Flax's `lift.jvp` (behind `nn.jvp`): `f(scope, primals)` and its
    /// tangent for the tangents `tangents` of `primals` and
    /// `params_tangents` of this scope's `params` (Flax's
    /// `variable_tangents={'params': ...}`; a tree of the structure of
    /// `params` at this scope). Tangents of another structure or shape are
    /// errors naming the first difference. Forward mode, first order, as
    /// [`tensor::jvp`] computes it.
    pub fn jvp(
        &self,
        f: impl FnOnce(&Scope<'_>, &Tree) -> Result<Tensor>,
        primals: &Tree,
        tangents: &Tree,
        params_tangents: &Tree,
    ) -> Result<(Tensor, Tensor)> {
        self.over_params("jvp", f, |params, body| {
            let paths = |t: &Tree| t.paths().into_iter().map(|(p, _)| p).collect::<Vec<_>>();
            for (what, given, like) in [
                ("the parameters", params_tangents, &params),
                ("the primals", tangents, primals),
            ] {
                if paths(given) != paths(like) {
                    return Err(tensor::TensorError::Argument {
                        op: "jvp",
                        message: format!(
                            "the tangents of {what} at {:?} have the paths {:?}, not {:?}",
                            self.path_text(),
                            paths(given),
                            paths(like)
                        ),
                    }
                    .into());
                }
            }
            let args = Tree::new()
                .with("params", params)
                .with("primals", primals.clone());
            let tangent_args = Tree::new()
                .with("params", params_tangents.clone())
                .with("primals", tangents.clone());
            tensor::jvp(body, &args, &tangent_args)
        })
    }

    /// Runs a transform of `f(scope, primals)` as a function of this
    /// scope's `params` and the primals (Flax's lifted `vjp` and `jvp`):
    /// `transform` gets the scope's `params` and the body to transform, a
    /// function of the tree `{params, primals}`; what the body writes is
    /// committed afterwards.
    fn over_params<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Scope<'_>, &Tree) -> Result<Tensor>,
        transform: impl FnOnce(Tree, Box<dyn FnOnce(&Tree) -> Result<Tensor> + '_>) -> Result<T>,
    ) -> Result<T> {
        let modes = vec![(Filter::All, VarMode::Broadcast)];
        let packed = Packed::new(self, op, modes, &[(Filter::All, false)]);
        let rngs = packed.item_rngs(1)?.pop().unwrap_or_default();
        let state = packed.item_state(1, 0, rngs, &[], packed.counters.clone())?;
        let path = self.path().to_vec();
        let params = params_at(&state, &path);
        let finished = RefCell::new(None);
        let body = Box::new(|a: &Tree| -> Result<Tensor> {
            let mut st = state.clone();
            let params = a.subtree("params").unwrap_or_default();
            packed.replace_subtree(&mut st, "params", params)?;
            let cell = RefCell::new(st);
            let out = f(
                &Scope::at(&cell, path.clone()),
                &a.subtree("primals").unwrap_or_default(),
            )?;
            *finished.borrow_mut() = Some(cell.into_inner());
            Ok(out)
        });
        let result = transform(params, body)?;
        if let Some(mut st) = finished.into_inner() {
            packed.trim_for_repack(&mut st);
            let counters = st.counters.clone();
            let collections = packed.repack(&[st])?;
            packed.commit(self, collections, &counters)?;
        }
        Ok(result)
    }

    /// Flax's `lift.custom_vjp` (behind `nn.custom_vjp`): `fwd(scope,
    /// input)` computes the output and residuals with this scope's
    /// variables; under an enclosing `grad`, `bwd(residuals, cotangent)`
    /// returns the cotangents of this scope's `params` (a tree of the
    /// structure of `params` at this scope, as [`ScopeVjp::call`] gives
    /// it) and of `input`. A rule that returns other structures or shapes
    /// is an error of the `grad`. At `init`, or when nothing is
    /// differentiated, only `fwd` runs.
    pub fn custom_vjp<I, O, R>(
        &self,
        input: &I,
        fwd: impl FnOnce(&Scope<'_>, &I) -> Result<(O, R)>,
        bwd: impl Fn(&R, &O) -> Result<(Tree, I)> + Send + Sync + 'static,
    ) -> Result<O>
    where
        I: Tensors,
        O: Tensors + Send + Sync + 'static,
        R: Send + Sync + 'static,
    {
        let modes = vec![(Filter::All, VarMode::Broadcast)];
        let packed = Packed::new(self, "custom_vjp", modes, &[(Filter::All, false)]);
        let rngs = packed.item_rngs(1)?.pop().unwrap_or_default();
        let mut state = packed.item_state(1, 0, rngs, &[], packed.counters.clone())?;
        let path = self.path().to_vec();
        let params = params_at(&state, &path);
        let mut inputs = input.tensors();
        let n_input = inputs.len();
        inputs.extend(params.leaves().iter().cloned());
        let traced = !self.is_initializing() && inputs.iter().any(recorded);
        // The forward rule reads detached values when a rule is recorded.
        let input = if traced {
            let free: Vec<Tensor> = input.tensors().iter().map(Tensor::detached).collect();
            let free_params =
                params.with_leaves(params.leaves().iter().map(Tensor::detached).collect())?;
            packed.replace_subtree(&mut state, "params", free_params)?;
            input
                .rebuild(&mut free.into_iter())
                .expect("as many tensors as flattened")
        } else {
            input.clone()
        };
        let cell = RefCell::new(state);
        let (out, residuals) = fwd(&Scope::at(&cell, path.clone()), &input)?;
        let mut finished = cell.into_inner();
        packed.trim_for_repack(&mut finished);
        let counters = finished.counters.clone();
        let collections = packed.repack(&[finished])?;
        packed.commit(self, collections, &counters)?;
        if !traced {
            return Ok(out);
        }
        let leaves = untraced("custom_vjp", &out)?;
        let template = out.clone();
        let params_template = params.clone();
        let rule =
            move |cts: &[Tensor]| -> Result<Vec<Tensor>> {
                let ct = template
                    .rebuild(&mut cts.iter().cloned())
                    .expect("one cotangent per output tensor");
                let (params_ct, input_ct) = bwd(&residuals, &ct)?;
                if !params_ct.same_structure(&params_template) {
                    return Err(Error::Tensor {
                        path: String::new(),
                        source: tensor::TensorError::TreeStructure {
                            message: format!(
                            "custom_vjp's backward rule returned parameter cotangents {:?} for \
                             parameters {:?}",
                            params_ct.paths().iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
                            params_template
                                .paths()
                                .iter()
                                .map(|(p, _)| p.clone())
                                .collect::<Vec<_>>()
                        ),
                        },
                    });
                }
                let mut all = input_ct.tensors();
                if all.len() != n_input {
                    return Err(tensor::TensorError::Argument {
                        op: "custom_vjp",
                        message: format!(
                            "the backward rule returned {} input cotangent tensors for {n_input}",
                            all.len()
                        ),
                    }
                    .into());
                }
                all.extend(params_ct.leaves().iter().cloned());
                Ok(all)
            };
        let outputs = record_custom(
            "custom_vjp",
            &inputs,
            leaves,
            std::sync::Arc::new(rule),
            crate::tensor::custom::no_forward(),
        );
        Ok(out
            .rebuild(&mut outputs.into_iter())
            .expect("as many tensors as flattened"))
    }
}
