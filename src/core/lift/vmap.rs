//! `vmap` on the functional core: the variables and RNG streams of a scope
//! are packed, filtered into groups, mapped over items (sliced, split or
//! broadcast), the body runs once per item on a rebuilt scope, and the
//! mutated variables are stacked and committed back (Flax's `lift.vmap`,
//! through the stages of `pack`).

use std::cell::RefCell;

use crate::core::error::{Error, Result};
use crate::core::filter::Filter;
use crate::core::rngs::Rngs;
use crate::core::scope::{put_at, Scope, State};
use crate::random;
use crate::tensor::{Tensor, Tree};

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

impl VmapConfig {
    fn variable_axis(&self, collection: &str) -> Option<Option<usize>> {
        self.variable_axes
            .iter()
            .find(|(f, _)| f.matches(collection))
            .map(|&(_, a)| a)
    }

    fn split(&self, stream: &str) -> Option<bool> {
        self.split_rngs
            .iter()
            .find(|(f, _)| f.matches(stream))
            .map(|&(_, s)| s)
    }
}

impl<'s> Scope<'s> {
    /// Runs `body` once per item `0..n`, each on a scope at this scope's
    /// path whose variables and RNG streams are lifted as `config` says, and
    /// commits the variables the items created or changed (stacked along
    /// their axes, or checked identical when broadcast). This scope's own
    /// `make_rng` counters are not advanced; the lifted scope's counters
    /// continue from call to call.
    pub(crate) fn vmap_items<T>(
        &self,
        n: usize,
        config: &VmapConfig,
        mut body: impl FnMut(&Scope<'_>, usize) -> Result<T>,
    ) -> Result<Vec<T>> {
        let path = self.path().to_vec();
        let path_text = self.path_text();
        let lift_error = |message: String| Error::Lift {
            path: path_text.clone(),
            transform: "vmap",
            message,
        };
        let sub_path = path.join("/");
        let outer = self.state().borrow();

        // Filter: the variables of this scope, per lifted collection, sliced
        // per item or broadcast.
        let mut item_vars: Vec<Vec<(String, Tree)>> = vec![Vec::new(); n];
        for (collection, tree) in outer.variables.iter() {
            let Some(axis) = config.variable_axis(collection) else {
                continue;
            };
            let Some(sub) = tree.subtree(&sub_path) else {
                continue;
            };
            for (i, vars) in item_vars.iter_mut().enumerate() {
                let item = match axis {
                    None => sub.clone(),
                    Some(a) => {
                        let mut leaves = Vec::with_capacity(sub.leaves().len());
                        for (name, x) in sub.paths() {
                            if a >= x.ndim() || x.shape()[a] != n {
                                return Err(lift_error(format!(
                                    "variable \"{collection}/{name}\" of shape {:?} cannot be \
                                     mapped over axis {a} with {n} items",
                                    x.shape()
                                )));
                            }
                            leaves.push(x.index_axis(a as isize, i)?);
                        }
                        sub.with_leaves(leaves)?
                    }
                };
                vars.push((collection.to_string(), item));
            }
        }

        // RNG streams: split per item, broadcast, or left out.
        let mut item_rngs: Vec<Rngs> = (0..n)
            .map(|_| Rngs::none().fix_separator(outer.rngs.separator_flag()))
            .collect();
        for (stream, seed) in &outer.rngs.streams {
            match config.split(stream) {
                None => {}
                Some(false) => {
                    for r in &mut item_rngs {
                        r.streams.insert(stream.clone(), random::clone(seed));
                    }
                }
                Some(true) => {
                    let keys = random::split(random::clone(seed), n);
                    for (r, k) in item_rngs.iter_mut().zip(keys) {
                        r.streams.insert(stream.clone(), k);
                    }
                }
            }
        }

        let groups: Vec<Filter> = config
            .variable_axes
            .iter()
            .map(|(f, _)| f.clone())
            .collect();
        let mut lifted = outer.lifted.clone();
        lifted.push(groups);
        let template = |vars: Vec<(String, Tree)>, rngs: Rngs| -> Result<State> {
            let mut variables = crate::core::Variables::new();
            for (c, sub) in vars {
                let mut tree = Tree::new();
                if path.is_empty() {
                    tree = sub;
                } else {
                    let parts: Vec<&str> = path.iter().map(String::as_str).collect();
                    put_at(&mut tree, &parts, sub).map_err(|_| {
                        lift_error(format!(
                            "collection \"{c}\" cannot hold this scope's variables"
                        ))
                    })?;
                }
                variables.insert(c, tree);
            }
            let mut state = State::new(variables, rngs, outer.mutable.clone(), outer.initializing);
            state.counters = outer.counters.clone();
            state.lifted = lifted.clone();
            Ok(state)
        };
        let states: Vec<State> = item_vars
            .into_iter()
            .zip(item_rngs)
            .map(|(v, r)| template(v, r))
            .collect::<Result<_>>()?;
        drop(outer);

        // Transform-specific lifting: one run per item.
        let mut outputs = Vec::with_capacity(n);
        let mut finished = Vec::with_capacity(n);
        for (i, state) in states.into_iter().enumerate() {
            let cell = RefCell::new(state);
            let scope = Scope::at(&cell, path.clone());
            outputs.push(body(&scope, i)?);
            drop(scope);
            finished.push(cell.into_inner());
        }

        // Repack and commit: counters under this path, and the variables of
        // the mutable lifted collections.
        let mut outer = self.state().borrow_mut();
        if let Some(first) = finished.first() {
            for (key, &count) in &first.counters {
                if key.0.starts_with(&path) {
                    outer.counters.insert(key.clone(), count);
                }
            }
            let collections: Vec<String> = first
                .variables
                .collection_names()
                .map(str::to_string)
                .collect();
            for collection in collections {
                if !first.writable(&collection) {
                    continue;
                }
                let Some(axis) = config.variable_axis(&collection) else {
                    continue;
                };
                let subs: Vec<Tree> = finished
                    .iter()
                    .map(|st| {
                        st.variables
                            .collection(&collection)
                            .and_then(|t| t.subtree(&sub_path))
                            .unwrap_or_default()
                    })
                    .collect();
                let merged = match axis {
                    Some(a) => stack_trees(&subs, a)
                        .map_err(|m| lift_error(format!("{collection}: {m}")))?,
                    None => {
                        same_trees(&subs).map_err(|m| {
                            lift_error(format!(
                                "variable \"{collection}/{m}\" is broadcast (variable axis None) \
                                 but differs across the {n} items; give it an axis or split \
                                 fewer RNG streams"
                            ))
                        })?;
                        subs.into_iter().next().unwrap_or_default()
                    }
                };
                // Variables that went through a JAX transform come back as a
                // pytree, whose dicts have sorted keys.
                let merged = sort_keys(&merged);
                let target = outer.variables.collection_mut(&collection);
                if path.is_empty() {
                    *target = merged;
                } else {
                    let parts: Vec<&str> = path.iter().map(String::as_str).collect();
                    put_at(target, &parts, merged).map_err(|_| {
                        lift_error(format!(
                            "collection \"{collection}\" cannot hold this scope's variables"
                        ))
                    })?;
                }
            }
        }
        Ok(outputs)
    }
}

/// The same tree with every map's keys in sorted order.
fn sort_keys(tree: &Tree) -> Tree {
    match tree.entries() {
        None => tree.clone(),
        Some(mut entries) => {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Tree::from_entries(entries.into_iter().map(|(k, v)| (k, sort_keys(&v))))
        }
    }
}

/// Stacks trees of the same structure leaf by leaf along `axis`.
fn stack_trees(trees: &[Tree], axis: usize) -> std::result::Result<Tree, String> {
    let first = trees.first().ok_or("no items")?;
    if let Some(t) = trees.iter().find(|t| !t.same_structure(first)) {
        let names = |t: &Tree| t.paths().into_iter().map(|(p, _)| p).collect::<Vec<_>>();
        return Err(format!(
            "items created different variables: {:?} and {:?}",
            names(first),
            names(t)
        ));
    }
    let leaves = (0..first.leaves().len())
        .map(|k| {
            let parts: Vec<Tensor> = trees.iter().map(|t| t.leaves()[k].clone()).collect();
            Tensor::stack(&parts, axis as isize).map_err(|e| e.to_string())
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    first.with_leaves(leaves).map_err(|e| e.to_string())
}

/// Checks that every tree equals the first, bit for bit; the error names
/// the first variable that differs.
fn same_trees(trees: &[Tree]) -> std::result::Result<(), String> {
    let Some(first) = trees.first() else {
        return Ok(());
    };
    for t in &trees[1..] {
        if !t.same_structure(first) {
            return Err("(structure)".to_string());
        }
        for ((name, a), b) in first.paths().into_iter().zip(t.leaves()) {
            let same = a.shape() == b.shape()
                && a.to_vec()
                    .iter()
                    .zip(b.to_vec())
                    .all(|(x, y)| x.to_bits() == y.to_bits());
            if !same {
                return Err(name);
            }
        }
    }
    Ok(())
}
