//! `vmap` on the functional core (Flax's `lift.vmap`): every item runs the
//! body on a rebuilt scope whose mapped variables are sliced and whose
//! split streams have their own keys; the items' variables are stacked back.

use std::cell::RefCell;
use std::rc::Rc;

use super::collective::{is_pending, Collectives};
use super::AxisContext;

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
    /// A name for the mapped axis, so that collectives (`Scope::pmean`,
    /// `Scope::psum`, `BatchNorm::axis_name`) can reduce over the items.
    pub axis_name: Option<String>,
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
        let shared = config.axis_name.as_ref().map(|name| {
            Rc::new(RefCell::new(Collectives {
                axis_name: name.clone(),
                items: n,
                resolved: Vec::new(),
                pending: vec![None; n],
            }))
        });
        // Without an axis name one round runs every item to the end; with
        // one, rounds repeat until no item stops at a pending collective.
        let (outputs, finished) = loop {
            let mut outputs = Vec::with_capacity(n);
            let mut finished = Vec::with_capacity(n);
            let mut stopped = false;
            for (i, r) in rngs.iter().enumerate() {
                let mut state = packed.item_state(n, i, r.clone(), &[], packed.counters.clone())?;
                if let Some(shared) = &shared {
                    state.axes.push(AxisContext {
                        shared: Rc::clone(shared),
                        item: i,
                        calls: Rc::new(RefCell::new(0)),
                    });
                }
                let cell = RefCell::new(state);
                match body(&Scope::at(&cell, self.path().to_vec()), i) {
                    Ok(out) => outputs.push(out),
                    Err(e) if shared.is_some() && is_pending(&e) => stopped = true,
                    Err(e) => return Err(e),
                }
                let mut state = cell.into_inner();
                packed.trim_for_repack(&mut state);
                finished.push(state);
            }
            match (&shared, stopped) {
                (Some(shared), true) => shared.borrow_mut().resolve(&self.path_text())?,
                _ => break (outputs, finished),
            }
        };
        let collections = packed.repack(&finished)?;
        let counters = finished
            .first()
            .map(|s| s.counters.clone())
            .unwrap_or_default();
        packed.commit(self, collections, &counters)?;
        Ok(outputs)
    }
}
