//! `pack`: the stages every lifted transform shares (Flax's `lift.pack`).
//!
//! 1. scope selection — a transform lifts the scope it is called on (its
//!    own path), so there is one root scope and nothing to de-duplicate;
//! 2. filtering — collections and RNG streams are put in the group of the
//!    first filter that matches them; unmatched ones stay outside;
//! 3. transform-specific lifting — done by the caller with
//!    [`Packed::item_state`], which slices, broadcasts or carries each
//!    collection and splits or broadcasts each stream for one item;
//! 4. scope rebuild — each item gets a fresh state at the same path;
//! 5. repack — only writable collections come back;
//! 6. commit — [`Packed::commit`] stores them in the outer scope, with the
//!    `make_rng` counters of the lifted path.

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::filter::Filter;
use crate::core::rngs::Rngs;
use crate::core::scope::{put_at, Scope, State};
use crate::core::variables::Variables;
use crate::error::{Error, Result};
use crate::random::{self, Key};
use crate::tensor::batched::IsBroadcast;
use crate::tensor::item_view::ItemGroup;
use crate::tensor::{LeafRef, Tensor, Tree};

/// How a lifted collection reaches the items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VarMode {
    /// Sliced along this axis, one slice per item; stacked back.
    Axis(usize),
    /// One copy shared by every item; must come back identical.
    Broadcast,
    /// Threaded from item to item (scan's carry).
    Carry,
}

/// The lifted view of one scope: its variables and streams, filtered.
pub(crate) struct Packed {
    transform: &'static str,
    path: Vec<String>,
    path_text: String,
    /// Lifted collections: name, mode, the scope's subtree (if any).
    collections: Vec<(String, VarMode, Option<Tree>)>,
    /// Lifted streams: name, split per item, seed key.
    streams: Vec<(String, bool, Key)>,
    separator: bool,
    mutable: Arc<Filter>,
    initializing: bool,
    lifted: Arc<Vec<Vec<Filter>>>,
    axes: Vec<super::AxisContext>,
    /// The outer state's [`State::rng_root`], kept by the items.
    rng_root: usize,
    /// `make_rng` counters when the transform started.
    pub(crate) counters: HashMap<(Vec<String>, String), u64>,
    /// RNG streams of the outer scopes that this and enclosing transforms
    /// do not pass in (for the error of a `make_rng` that wants one).
    pub(crate) hidden_streams: Arc<Vec<(String, &'static str, String)>>,
    modes: Vec<(Filter, VarMode)>,
    /// Per collection, per leaf: the items' views of a broadcast variable
    /// (set by [`Packed::share_broadcast`]; `vmap` only).
    groups: Vec<Option<Vec<Arc<ItemGroup>>>>,
}

impl Packed {
    /// Gives each of `items` items its own view of every broadcast
    /// variable, so that under `grad` their cotangents are combined as in
    /// JAX's batched computation (see `tensor::batched`); returns the
    /// broadcast variables (the tensors the items share).
    pub(crate) fn share_broadcast(&mut self, items: usize) -> Vec<Tensor> {
        let mut shared = Vec::new();
        self.groups = self
            .collections
            .iter()
            .map(|(_, mode, sub)| match (mode, sub) {
                (VarMode::Broadcast, Some(sub)) => {
                    shared.extend(sub.leaves().iter().cloned());
                    Some(sub.leaves().iter().map(|_| ItemGroup::new(items)).collect())
                }
                _ => None,
            })
            .collect();
        shared
    }

    /// Whether a collection is broadcast to every item (whether it exists
    /// yet or not).
    pub(crate) fn is_broadcast(&self) -> IsBroadcast {
        let modes = self.modes.clone();
        Arc::new(move |c: &str| {
            modes
                .iter()
                .find(|(f, _)| f.matches(c))
                .is_some_and(|(_, m)| *m == VarMode::Broadcast)
        })
    }

    /// Packs the variables and RNG streams of `scope` (stages 1 and 2).
    pub(crate) fn new(
        scope: &Scope<'_>,
        transform: &'static str,
        modes: Vec<(Filter, VarMode)>,
        split_rngs: &[(Filter, bool)],
    ) -> Packed {
        let outer = scope.state().borrow();
        let path = scope.path().to_vec();
        let sub_path = path.join("/");
        let mode_of = |c: &str| modes.iter().find(|(f, _)| f.matches(c)).map(|&(_, m)| m);
        let collections = outer
            .variables
            .iter()
            .filter_map(|(c, tree)| mode_of(c).map(|m| (c.to_string(), m, tree.subtree(&sub_path))))
            .collect();
        let streams = outer
            .rngs
            .streams
            .iter()
            .filter_map(|(name, key)| {
                split_rngs
                    .iter()
                    .find(|(f, _)| f.matches(name))
                    .map(|&(_, split)| (name.clone(), split, random::clone(key)))
            })
            .collect();
        let mut hidden = (*outer.hidden_streams).clone();
        hidden.extend(
            outer
                .rngs
                .names()
                .filter(|name| !split_rngs.iter().any(|(f, _)| f.matches(name)))
                .map(|name| (name.to_string(), transform, scope.path_text())),
        );
        let mut lifted = (*outer.lifted).clone();
        lifted.push(modes.iter().map(|(f, _)| f.clone()).collect());
        let lifted = Arc::new(lifted);
        Packed {
            transform,
            path_text: scope.path_text(),
            path,
            collections,
            streams,
            separator: outer.rngs.separator_flag(),
            mutable: Arc::clone(&outer.mutable),
            initializing: outer.initializing,
            lifted,
            axes: outer.axes.clone(),
            rng_root: outer.rng_root,
            counters: outer.counters.clone(),
            hidden_streams: Arc::new(hidden),
            modes,
            groups: Vec::new(),
        }
    }

    /// A lift error at this scope.
    pub(crate) fn error(&self, message: String) -> Error {
        Error::Lift {
            path: self.path_text.clone(),
            transform: self.transform,
            message,
        }
    }

    /// The mode of a collection, if lifted.
    pub(crate) fn mode(&self, collection: &str) -> Option<VarMode> {
        self.modes
            .iter()
            .find(|(f, _)| f.matches(collection))
            .map(|&(_, m)| m)
    }

    /// The seeds of every item: `split(seed, n)[i]` for split streams, the
    /// seed itself otherwise. A count of keys that cannot be allocated is
    /// an error.
    pub(crate) fn item_rngs(&self, n: usize) -> Result<Vec<Rngs>> {
        let mut rngs: Vec<Rngs> = (0..n)
            .map(|_| Rngs::none().fix_separator(self.separator))
            .collect();
        for (name, split, seed) in &self.streams {
            if *split {
                let keys = random::split(random::clone(seed), n)?;
                for (r, k) in rngs.iter_mut().zip(keys) {
                    r.streams.insert(name.clone(), k);
                }
            } else {
                for r in &mut rngs {
                    r.streams.insert(name.clone(), random::clone(seed));
                }
            }
        }
        Ok(rngs)
    }

    /// The seeds of one `while_loop` iteration: `fold_in(seed, i)` (as a
    /// `uint32`, so that `-i` wraps as in JAX) for split streams, the seed
    /// itself otherwise.
    pub(crate) fn loop_rngs(&self, i: i64) -> Rngs {
        let mut rngs = Rngs::none().fix_separator(self.separator);
        for (name, split, seed) in &self.streams {
            let key = if *split {
                random::fold_in(random::clone(seed), i as u32)
            } else {
                random::clone(seed)
            };
            rngs.streams.insert(name.clone(), key);
        }
        rngs
    }

    /// The state of item `i` of `n` (stages 3 and 4): mapped collections
    /// sliced, broadcast ones shared, carried ones taken from `carry`.
    pub(crate) fn item_state(
        &self,
        n: usize,
        i: usize,
        rngs: Rngs,
        carry: &[(String, Tree)],
        counters: HashMap<(Vec<String>, String), u64>,
    ) -> Result<State> {
        let mut variables = Variables::new();
        for (k, (c, mode, sub)) in self.collections.iter().enumerate() {
            let item = match (mode, sub) {
                (VarMode::Carry, _) => continue,
                (_, None) => continue,
                (VarMode::Broadcast, Some(sub)) => match self.groups.get(k) {
                    Some(Some(groups)) => sub.with_leaves(
                        sub.leaves()
                            .iter()
                            .zip(groups)
                            .map(|(t, g)| t.item_view(g, i))
                            .collect(),
                    )?,
                    _ => sub.clone(),
                },
                (VarMode::Axis(a), Some(sub)) => {
                    let unmappable = |shape: &[usize]| *a >= shape.len() || shape[*a] != n;
                    let bad = sub.leaves().iter().any(|x| unmappable(x.shape()))
                        || sub.arrays().iter().any(|x| unmappable(x.shape()));
                    if bad {
                        // Names are built only for the error (items are hot).
                        let (name, shape) = sub
                            .leaf_paths()
                            .into_iter()
                            .map(|(p, leaf)| match leaf {
                                LeafRef::Tensor(t) => (p, t.shape().to_vec()),
                                LeafRef::Array(x) => (p, x.shape().to_vec()),
                            })
                            .find(|(_, shape)| unmappable(shape))
                            .unwrap_or_default();
                        return Err(self.error(format!(
                            "variable \"{c}/{name}\" of shape {shape:?} cannot be mapped over \
                             axis {a} with {n} items"
                        )));
                    }
                    sub.index_axis(*a as isize, i)?
                }
            };
            variables.insert(c.clone(), self.place(c, item)?);
        }
        for (c, sub) in carry {
            variables.insert(c.clone(), self.place(c, sub.clone())?);
        }
        let mut state = State::new(
            variables,
            rngs,
            Arc::clone(&self.mutable),
            self.initializing,
        );
        state.counters = counters;
        state.lifted = Arc::clone(&self.lifted);
        state.hidden_streams = Arc::clone(&self.hidden_streams);
        state.axes = self.axes.clone();
        state.rng_root = self.rng_root;
        Ok(state)
    }

    /// The carried collections as they are before the first item.
    pub(crate) fn initial_carry(&self) -> Vec<(String, Tree)> {
        self.collections
            .iter()
            .filter(|(_, m, _)| *m == VarMode::Carry)
            .filter_map(|(c, _, sub)| sub.clone().map(|s| (c.clone(), s)))
            .collect()
    }

    /// This scope's subtree of `collection` in an item's final state.
    pub(crate) fn subtree_of(&self, state: &State, collection: &str) -> Tree {
        state
            .variables
            .collection(collection)
            .and_then(|t| t.subtree(&self.path.join("/")))
            .unwrap_or_default()
    }

    /// Replaces this scope's subtree of `collection` in `state`.
    pub(crate) fn replace_subtree(
        &self,
        state: &mut State,
        collection: &str,
        sub: Tree,
    ) -> Result<()> {
        let placed = self.place(collection, sub)?;
        state.variables.insert(collection.to_string(), placed);
        Ok(())
    }

    /// A tree holding `sub` at this scope's path.
    fn place(&self, collection: &str, sub: Tree) -> Result<Tree> {
        if self.path.is_empty() {
            return Ok(sub);
        }
        let mut tree = Tree::new();
        let parts: Vec<&str> = self.path.iter().map(String::as_str).collect();
        put_at(&mut tree, &parts, sub).map_err(|_| {
            self.error(format!(
                "collection \"{collection}\" cannot hold this scope's variables"
            ))
        })?;
        Ok(tree)
    }

    /// Runs `body` once, as the only item, on `state` at `path` (the
    /// lifted scope's), then repacks its writable collections and commits
    /// them and its counters to `scope` (sorted, as from a JAX transform):
    /// stages 4 to 6 for a transform of one item (`remat`, `jit`).
    pub(crate) fn run_one<O>(
        &self,
        scope: &Scope<'_>,
        state: State,
        path: &[String],
        body: impl FnOnce(&Scope<'_>) -> Result<O>,
    ) -> Result<O> {
        let cell = std::cell::RefCell::new(state);
        let out = body(&Scope::at(&cell, path.to_vec()))?;
        let mut finished = cell.into_inner();
        self.trim_for_repack(&mut finished);
        let counters = finished.counters.clone();
        let collections = self.repack(&[finished])?;
        self.commit(scope, collections, &counters)?;
        Ok(out)
    }

    /// Drops from an item's final state what [`Packed::repack`] will not
    /// read (collections that are not writable, e.g. the slices of `params`
    /// during `apply`), so that a long scan does not hold every step's
    /// variables.
    pub(crate) fn trim_for_repack(&self, state: &mut State) {
        let unused: Vec<String> = state
            .variables
            .collection_names()
            .filter(|c| self.mode(c).is_none() || !state.writable(c))
            .map(str::to_string)
            .collect();
        for c in unused {
            state.variables.remove(&c);
        }
    }

    /// The writable lifted collections that `states` (the items' final
    /// states) hold, merged by mode (stage 5).
    pub(crate) fn repack(&self, states: &[State]) -> Result<Vec<(String, Tree)>> {
        let Some(first) = states.first() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let names: Vec<String> = first
            .variables
            .collection_names()
            .map(str::to_string)
            .collect();
        for c in names {
            let Some(mode) = self.mode(&c) else { continue };
            if !first.writable(&c) {
                continue;
            }
            let subs: Vec<Tree> = states.iter().map(|st| self.subtree_of(st, &c)).collect();
            let merged = match mode {
                VarMode::Axis(a) => {
                    Tree::stack(&subs, a as isize).map_err(|e| self.error(format!("{c}: {e}")))?
                }
                VarMode::Broadcast => {
                    same_trees(&subs).map_err(|m| {
                        self.error(format!(
                            "variable \"{c}/{m}\" is broadcast (not mapped) but differs across \
                             the {} items; give its collection an axis, or split fewer RNG streams",
                            subs.len()
                        ))
                    })?;
                    subs.into_iter().next().unwrap_or_default()
                }
                VarMode::Carry => subs.into_iter().last().unwrap_or_default(),
            };
            out.push((c, merged));
        }
        Ok(out)
    }

    /// Stores repacked collections and the lifted path's counters in the
    /// outer scope (stage 6). Variables that went through a JAX transform
    /// come back as a pytree, whose dicts have sorted keys; so do these.
    pub(crate) fn commit(
        &self,
        scope: &Scope<'_>,
        collections: Vec<(String, Tree)>,
        counters: &HashMap<(Vec<String>, String), u64>,
    ) -> Result<()> {
        let mut outer = scope.state().borrow_mut();
        for (key, &count) in counters {
            if key.0.starts_with(&self.path) {
                outer.counters.insert(key.clone(), count);
            }
        }
        for (c, tree) in collections {
            let tree = tree.sorted();
            let target = outer.variables.collection_mut(&c);
            if self.path.is_empty() {
                *target = tree;
            } else {
                let parts: Vec<&str> = self.path.iter().map(String::as_str).collect();
                put_at(target, &parts, tree).map_err(|_| {
                    self.error(format!(
                        "collection \"{c}\" cannot hold this scope's variables"
                    ))
                })?;
            }
        }
        Ok(())
    }
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
