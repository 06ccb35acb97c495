//! `map_variables` on the functional core (Flax's `lift.map_variables`, the
//! general transform of the lifting note): the variables of chosen
//! collections are transformed on the way into a scope and back out of it,
//! e.g. to tie an autoencoder's decoder to its encoder's transposed weights.

use std::cell::RefCell;

use super::pack::{Packed, VarMode};
use crate::core::filter::Filter;
use crate::core::scope::Scope;
use crate::error::Result;
use crate::tensor::Tree;

/// A transform of one collection's subtree.
pub type TreeFn<'f> = dyn Fn(&Tree) -> Result<Tree> + 'f;

impl<'s> Scope<'s> {
    /// Runs `body` on a scope at this scope's path whose `collections`
    /// subtrees are `trans_in(subtree)`; the other collections pass through.
    /// Writable mapped collections are stored back as `trans_out(subtree)`.
    /// RNG streams pass through unchanged.
    pub fn map_variables<T>(
        &self,
        collections: impl Into<Filter>,
        trans_in: &TreeFn<'_>,
        trans_out: &TreeFn<'_>,
        body: impl FnOnce(&Scope<'_>) -> Result<T>,
    ) -> Result<T> {
        let mapped = collections.into();
        let modes = vec![(Filter::All, VarMode::Broadcast)];
        let packed = Packed::new(self, "map_variables", modes, &[(Filter::All, false)]);
        let rngs = packed.item_rngs(1).pop().unwrap_or_default();
        let mut state = packed.item_state(1, 0, rngs, &[], packed.counters.clone())?;
        let names: Vec<String> = state
            .variables
            .collection_names()
            .map(str::to_string)
            .collect();
        for c in names.iter().filter(|c| mapped.matches(c)) {
            let sub = packed.subtree_of(&state, c);
            let replaced = trans_in(&sub)?;
            packed.replace_subtree(&mut state, c, replaced)?;
        }
        let cell = RefCell::new(state);
        let out = body(&Scope::at(&cell, self.path().to_vec()))?;
        let state = cell.into_inner();
        let mut collections = packed.repack(std::slice::from_ref(&state))?;
        for (c, tree) in &mut collections {
            if mapped.matches(c) {
                *tree = trans_out(tree)?;
            }
        }
        packed.commit(self, collections, &state.counters)?;
        Ok(out)
    }
}
