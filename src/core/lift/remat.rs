//! `checkpoint` on the functional core (Flax's `lift.checkpoint`, behind
//! `nn.remat`): the body's intermediate values are not kept for the
//! backward pass of an enclosing `grad`; the backward pass runs the body
//! again, on the same variables, RNG streams and inputs, to get them.

use std::cell::RefCell;
use std::sync::Arc;

use super::pack::{Packed, VarMode};
use crate::core::filter::Filter;
use crate::core::scope::{Scope, State};
use crate::core::variables::Variables;
use crate::error::Result;
use crate::tensor::custom::{forward_of, recompute, record_custom, recorded, untraced};
use crate::tensor::{Tensor, Tensors};

/// Every tensor of `variables`, collection by collection.
pub(super) fn variable_tensors(variables: &Variables) -> Vec<Tensor> {
    variables
        .iter()
        .flat_map(|(_, tree)| tree.leaves().to_vec())
        .collect()
}

/// `variables` with its tensors taken, in [`variable_tensors`]' order, from
/// `leaves`.
pub(super) fn with_variable_tensors(
    variables: &Variables,
    leaves: &mut impl Iterator<Item = Tensor>,
) -> Result<Variables> {
    let mut out = Variables::new();
    for (name, tree) in variables.iter() {
        let taken: Vec<Tensor> = leaves.take(tree.leaves().len()).collect();
        out.insert(name, tree.with_leaves(taken)?);
    }
    Ok(out)
}

impl<'s> Scope<'s> {
    /// Runs `body(scope, input)` on a scope at this scope's path with every
    /// collection and RNG stream passed in unchanged (Flax's
    /// `lift.checkpoint`), recording it on an enclosing `grad`'s tape as
    /// one operation: its intermediate values are dropped, and the backward
    /// pass runs `body` again, with the same variables, RNG keys and
    /// input, to get them. Values and gradients are those of running `body`
    /// directly, bit for bit; what it saves is memory.
    ///
    /// Writable collections (batch statistics) are updated by the first
    /// run only. At `init`, or when no tensor of the variables or the input
    /// is differentiated, `body` runs once and nothing is recorded.
    pub fn checkpoint<I, O>(
        &self,
        input: &I,
        body: impl Fn(&Scope<'_>, &I) -> Result<O> + Send + Sync + 'static,
    ) -> Result<O>
    where
        I: Tensors + Send + Sync + 'static,
        O: Tensors,
    {
        let modes = vec![(Filter::All, VarMode::Broadcast)];
        let packed = Packed::new(self, "remat", modes, &[(Filter::All, false)]);
        let rngs = packed.item_rngs(1)?.pop().unwrap_or_default();
        let state = packed.item_state(1, 0, rngs, &[], packed.counters.clone())?;
        let path = self.path().to_vec();
        // One run of the body on `state`, its writable collections and
        // counters committed (sorted, as from a JAX transform).
        let run_once = |state: State, input: &I| -> Result<O> {
            packed.run_one(self, state, &path, |scope| body(scope, input))
        };
        let mut inputs = input.tensors();
        inputs.extend(variable_tensors(&state.variables));
        if !inputs.iter().any(recorded) {
            // At init, or outside a differentiation: nothing to recompute.
            return run_once(state, input);
        }
        // Everything the body reads, detached: the first run records
        // nothing, and the rule's run records on a tape of its own.
        let free: Vec<Tensor> = inputs.iter().map(Tensor::detached).collect();
        let n_input = input.tensors().len();
        let free_input = input
            .rebuild(&mut free[..n_input].iter().cloned())
            .expect("as many tensors as flattened");
        let mut free_state: State = state;
        free_state.variables =
            with_variable_tensors(&free_state.variables, &mut free[n_input..].iter().cloned())?;
        let out = run_once(free_state.clone(), &free_input)?;
        let leaves = untraced("remat", &out)?;

        // The rule runs the body again from the state as the first run
        // found it (same RNG counters, the variables' values before any
        // update); what it writes is dropped.
        let rerun_state = free_state;
        let primals = free.clone();
        let rerun = move |traced: Vec<Tensor>| -> Result<Vec<Tensor>> {
            let mut leaves = traced.into_iter();
            let input = free_input
                .rebuild(&mut leaves)
                .expect("as many tensors as flattened");
            let mut state = rerun_state.clone();
            state.variables = with_variable_tensors(&state.variables, &mut leaves)?;
            let cell = RefCell::new(state);
            Ok(body(&Scope::at(&cell, path.clone()), &input)?.tensors())
        };
        let rerun: Arc<dyn Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync> = Arc::new(rerun);
        let rule = recompute(free, {
            let rerun = rerun.clone();
            move |traced| rerun(traced)
        });
        let forward = forward_of(primals, rerun);
        let outputs = record_custom("remat", &inputs, leaves, rule, forward);
        Ok(out
            .rebuild(&mut outputs.into_iter())
            .expect("as many tensors as flattened"))
    }
}
