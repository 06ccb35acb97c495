//! `while_loop` on the functional core (Flax's `lift.while_loop`): a body
//! run on a lifted scope while a condition holds, threading a carry and
//! the carried variable collections.
//!
//! JAX traces the condition and the body once and runs the traced
//! computation every iteration, so flaxen runs each iteration from the
//! `make_rng` counters the trace saw: the condition from the counters at
//! the start, the body from the counters the condition left. Split
//! streams are folded with the iteration (`fold_in(key, i)` in the body,
//! `fold_in(key, -i)` in the condition, as Flax does). Broadcast
//! collections are read-only; carried ones keep their structure, and the
//! body may not create variables (Flax: "you cannot initialize variables
//! inside the body").

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::carry::{carry_mismatch, Carry};
use super::pack::{Packed, VarMode};
use crate::core::filter::Filter;
use crate::core::scope::{Scope, State};
use crate::error::Result;
use crate::tensor::Tree;

/// How `while_loop` lifts variables and RNG streams.
#[derive(Clone, Debug)]
pub struct WhileConfig {
    /// Collections carried through the iterations, mutable inside the
    /// body (default: none).
    pub carry_variables: Filter,
    /// Collections the condition and body read but may not change
    /// (default: all the others).
    pub broadcast_variables: Filter,
    /// Per stream group: a key per iteration (`true`), or the same key in
    /// every iteration. Streams that match no group are not available
    /// inside.
    pub split_rngs: Vec<(Filter, bool)>,
}

impl Default for WhileConfig {
    fn default() -> Self {
        WhileConfig {
            carry_variables: Filter::Nothing,
            broadcast_variables: Filter::All,
            split_rngs: Vec::new(),
        }
    }
}

/// `(path, type)` of every leaf of the carried collections.
fn collection_types(collections: &[(String, Tree)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (c, tree) in collections {
        tree.sorted()
            .carry_types(&format!("variables['{c}']"), &mut out);
    }
    out
}

impl Scope<'_> {
    /// Runs `body` while `cond` holds (Flax's `lift.while_loop`), starting
    /// from `init`; returns the final carry. See the module documentation
    /// of `core::lift` for how variables and streams reach the iterations.
    pub fn while_loop<C: Carry>(
        &self,
        cond: impl Fn(&Scope<'_>, &C) -> Result<bool>,
        body: impl Fn(&Scope<'_>, C) -> Result<C>,
        init: C,
        config: &WhileConfig,
    ) -> Result<C> {
        let modes = vec![
            (config.carry_variables.clone(), VarMode::Carry),
            (config.broadcast_variables.clone(), VarMode::Broadcast),
        ];
        let packed = Packed::new(self, "while_loop", modes, &config.split_rngs);
        let path = self.path().to_vec();
        let outer_mutable = Arc::clone(&self.state().borrow().mutable);
        let mut carried = packed.initial_carry();
        let carried_types = collection_types(&carried);
        let start = packed.counters.clone();
        // Counters after the condition and after the body, as traced.
        let mut after_cond: Option<HashMap<_, _>> = None;
        let mut after_body: Option<HashMap<_, _>> = None;
        let mut carry = init;
        let state_for = |i: i64, carried: &[(String, Tree)], counters, mutable: Filter| {
            let mut state: State =
                packed.item_state(1, 0, packed.loop_rngs(i), carried, counters)?;
            state.mutable = Arc::new(mutable);
            Ok::<_, crate::error::Error>(state)
        };
        for i in 0i64.. {
            let cell = RefCell::new(state_for(-i, &carried, start.clone(), Filter::Nothing)?);
            let go = cond(&Scope::at(&cell, path.clone()), &carry)?;
            let counters = cell.into_inner().counters;
            let body_start = after_cond.get_or_insert(counters).clone();
            if !go {
                break;
            }
            let writable = outer_mutable.intersection(&config.carry_variables);
            let cell = RefCell::new(state_for(i, &carried, body_start, writable)?);
            let mut before = Vec::new();
            carry.carry_types("carry", &mut before);
            carry = body(&Scope::at(&cell, path.clone()), carry)?;
            if let Some(message) = carry_mismatch("while_loop", &before, &carry) {
                return Err(packed.error(message));
            }
            let mut state = cell.into_inner();
            after_body.get_or_insert_with(|| state.counters.clone());
            packed.trim_for_repack(&mut state);
            let collections = packed.repack(std::slice::from_ref(&state))?;
            let next: Vec<(String, Tree)> = collections
                .into_iter()
                .filter(|(c, _)| config.carry_variables.matches(c))
                .collect();
            let types = collection_types(&next);
            if types != carried_types {
                // Name a leaf, rather than the tree whose keys changed.
                let leaf = |(p, t): &&(String, String)| {
                    !carried_types.contains(&(p.clone(), t.clone())) && !t.starts_with("tree")
                };
                let new = types
                    .iter()
                    .find(leaf)
                    .or_else(|| types.iter().find(|t| !carried_types.contains(t)))
                    .map(|(p, t)| format!("{p} ({t})"))
                    .unwrap_or_else(|| "a variable".to_string());
                return Err(packed.error(format!(
                    "the body of a while_loop changed the carried variables: {new} is new or \
                     changed type; carried variables must exist before the loop and keep \
                     their shapes (call the body once before the loop to create them)"
                )));
            }
            carried = next;
        }
        let counters = after_body.or(after_cond).unwrap_or(start);
        packed.commit(self, carried, &counters)?;
        Ok(carry)
    }
}
