//! `vmap` on the functional core (Flax's `lift.vmap`): every item runs the
//! body on a rebuilt scope whose mapped variables are sliced and whose
//! split streams have their own keys; the items' variables are stacked back.

use std::cell::RefCell;

use super::pack::{Packed, VarMode};
use crate::core::error::Result;
use crate::core::filter::Filter;
use crate::core::scope::Scope;

/// How `vmap` lifts variables and RNG streams.
#[derive(Clone, Debug, Default)]
pub struct VmapConfig {
    /// Per collection group: the axis the variables are mapped over, or
    /// `None` to broadcast one copy to every item. The first group whose
    /// filter matches a collection decides; unmatched collections are not
    /// available inside.
    pub variable_axes: Vec<(Filter, Option<usize>)>,
    /// Per RNG stream group: whether each item gets its own key (`true`,
    /// `split(seed, axis_size)[i]`) or all share the stream (`false`).
    /// Streams that match no group are not available inside.
    pub split_rngs: Vec<(Filter, bool)>,
}

impl<'s> Scope<'s> {
    /// Runs `body` once per item `0..n`, each on a scope at this scope's
    /// path whose variables and RNG streams are lifted as `config` says, and
    /// commits the variables the items created or changed (stacked along
    /// their axes, or checked identical when broadcast). The calling
    /// scope's `make_rng` counters are not advanced; the lifted scope's
    /// counters continue from call to call.
    pub(crate) fn vmap_items<T>(
        &self,
        n: usize,
        config: &VmapConfig,
        mut body: impl FnMut(&Scope<'_>, usize) -> Result<T>,
    ) -> Result<Vec<T>> {
        let modes = config
            .variable_axes
            .iter()
            .map(|(f, a)| (f.clone(), a.map_or(VarMode::Broadcast, VarMode::Axis)))
            .collect();
        let packed = Packed::new(self, "vmap", modes, &config.split_rngs);
        let rngs = packed.item_rngs(n);
        let mut outputs = Vec::with_capacity(n);
        let mut finished = Vec::with_capacity(n);
        for (i, r) in rngs.into_iter().enumerate() {
            let state = packed.item_state(n, i, r, &[], packed.counters.clone())?;
            let cell = RefCell::new(state);
            outputs.push(body(&Scope::at(&cell, self.path().to_vec()), i)?);
            finished.push(cell.into_inner());
        }
        let collections = packed.repack(&finished)?;
        let counters = finished
            .first()
            .map(|s| s.counters.clone())
            .unwrap_or_default();
        packed.commit(self, collections, &counters)?;
        Ok(outputs)
    }
}
