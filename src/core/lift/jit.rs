//! `jit` on the functional core (Flax's `lift.jit`, behind `nn.jit`): the
//! body is compiled once per signature (the input's structure and shapes,
//! the variables' structure and shapes, the RNG streams, which collections
//! are writable) and replayed afterwards, with its variables, the input
//! and its RNG keys as the program's arguments, and its output and the
//! writable collections as the program's results.
//!
//! As Flax (`linen.transforms.fork_rngs`), the jitted module first draws
//! one key per RNG stream from its own scope (`make_rng(stream)`), and the
//! body's streams are these keys, from which the body's `make_rng` derives
//! its keys as if the module were the root of the call.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use super::jit_signature::{statics, Signature};
use super::pack::{Packed, VarMode};
use super::remat::{variable_tensors, with_variable_tensors};
use crate::core::filter::Filter;
use crate::core::rngs::Rngs;
use crate::core::scope::{Scope, State};
use crate::error::Result;
use crate::random::Key;
use crate::tensor::batched::current_layout;
use crate::tensor::compiled::{CompiledRegion, ForwardJit, GradJit};
use crate::tensor::custom::recorded;
use crate::tensor::debug_nans;
use crate::tensor::jit_forward::{trace_forward, ForwardProgram, Unplanned};
use crate::tensor::{Tensor, Tensors, Tree};

/// The compiled programs of one jitted module, by signature (shared by
/// the module's clones, as Flax shares them between the instances of a
/// jitted class).
pub(crate) struct JitCache<O> {
    /// Each signature's program (`None` while a call runs it).
    entries: Mutex<Vec<(Signature, Option<Entry<O>>)>>,
}

impl<O> Default for JitCache<O> {
    fn default() -> Self {
        JitCache {
            entries: Mutex::new(Vec::new()),
        }
    }
}

impl<O> JitCache<O> {
    /// How many signatures were compiled (replayable), and how many were
    /// traced but run eagerly.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let compiled = entries
            .iter()
            .filter(|(_, e)| matches!(e, Some(Entry::Compiled(_))))
            .count();
        (compiled, entries.len() - compiled)
    }

    /// Why the signatures that run eagerly could not be compiled.
    pub(crate) fn eager_reasons(&self) -> Vec<String> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .filter_map(|(_, e)| match e {
                Some(Entry::Eager(reason)) => Some(reason.clone()),
                _ => None,
            })
            .collect()
    }
}

/// What one signature compiled to.
enum Entry<O> {
    /// Not traced yet (or its trace failed).
    Fresh,
    Compiled(Box<Compiled<O>>),
    /// Traced, but not replayable: every call runs the body.
    Eager(String),
}

/// A replayable body: its program, the structure of its results, and how
/// far it advances the `make_rng` counters.
struct Compiled<O> {
    program: ForwardProgram,
    /// The output with placeholder tensors.
    output: O,
    /// The writable collections' subtrees at the module's path, with
    /// placeholder tensors.
    collections: Vec<(String, Tree)>,
    counters: Vec<((Vec<String>, String), u64)>,
}

impl<'s> Scope<'s> {
    /// Runs `body(scope, input)` on a scope at this scope's path as a
    /// compiled JAX function (Flax's `lift.jit`): every collection and RNG
    /// stream is lifted, and the streams are keys drawn from this scope
    /// first (`make_rng(stream)` for each). The first call with a new
    /// signature runs `body` while recording its operations; later calls
    /// with that signature replay them on the new input, variables and
    /// keys (random tensors drawn through [`Tensor::sampled`] are drawn
    /// again), with the same numbers as running `body`. A body the replay
    /// cannot repeat (a value-dependent branch, an operation it does not
    /// know) runs on every call.
    ///
    /// At `init`, under `grad` (the input or the variables are traced), in
    /// a `vmap` traced in place and under `debug_nans`, `body` runs inline,
    /// as JAX inlines a `jit` inside a traced computation. The body always runs as a
    /// compiled region ([`as_jitted`](crate::tensor::as_jitted)).
    pub(crate) fn jit<I, O>(
        &self,
        cache: &JitCache<O>,
        input: I,
        body: impl Fn(&Scope<'_>, I) -> Result<O>,
    ) -> Result<O>
    where
        I: Tensors,
        O: Tensors,
    {
        let _region = CompiledRegion::enter();
        // Flax's fork_rngs: one key per stream, from this scope.
        let streams: Vec<String> = self.state().borrow().rngs.names().map(Into::into).collect();
        let separator = self.state().borrow().rngs.separator_flag();
        let mut rngs = Rngs::none().fix_separator(separator);
        let mut keys = Vec::with_capacity(streams.len());
        for stream in &streams {
            let key = self.make_rng(stream)?;
            keys.push(key.clone());
            rngs = rngs.with(stream.clone(), key);
        }
        let modes = vec![(Filter::All, VarMode::Broadcast)];
        let packed = Packed::new(self, "jit", modes, &[(Filter::All, false)]);
        let mut state = packed.item_state(1, 0, rngs, &[], packed.counters.clone())?;
        state.rng_root = self.path().len();
        let path = self.path().to_vec();

        let run = |state: State, input: I| -> Result<O> {
            packed.run_one(self, state, &path, |scope| body(scope, input))
        };

        let mut args = input.tensors();
        args.extend(variable_tensors(&state.variables));
        let inline = state.initializing
            || debug_nans()
            || current_layout().is_some()
            || args.iter().any(recorded)
            || state.variables.iter().any(|(_, t)| !t.arrays().is_empty());
        // Not inlined: the body is XLA's compiled program, whatever runs it.
        let _forward = (!inline).then(ForwardJit::enter);
        // Inline because it is differentiated: JAX splits the jitted body
        // into compiled forward and backward programs.
        let under_grad = !state.initializing
            && !debug_nans()
            && current_layout().is_none()
            && args.iter().any(recorded);
        let _grad = under_grad.then(GradJit::enter);
        let statics = (!inline).then(|| statics(&input)).flatten();
        let Some(statics) = statics else {
            return run(state, input);
        };
        let lock = || cache.entries.lock().unwrap_or_else(|e| e.into_inner());
        // The entry is taken out while it runs (the body may run on other
        // threads, under a `vmap` with an axis name) and put back after;
        // a call that finds it taken runs the body. Entries are never
        // removed, so a slot's index stays valid.
        let (slot, entry) = {
            let mut entries = lock();
            let found = entries.iter().position(|(sig, _)| {
                sig.matches(&statics, &args, &state, &path, &streams, separator)
            });
            match found {
                Some(i) => (i, entries[i].1.take()),
                None => {
                    let sig = Signature::new(statics, &args, &state, &path, &streams, separator)?;
                    entries.push((sig, None));
                    (entries.len() - 1, Some(Entry::Fresh))
                }
            }
        };
        let put_back = |entry: Entry<O>| {
            if let Some((_, e)) = lock().get_mut(slot) {
                *e = Some(entry);
            }
        };
        match entry {
            Some(Entry::Compiled(mut compiled)) => {
                let result = replay(&mut compiled, &args, &keys, &packed, self);
                put_back(Entry::Compiled(compiled));
                result
            }
            Some(Entry::Eager(reason)) => {
                put_back(Entry::Eager(reason));
                run(state, input)
            }
            // Another call is running this signature's program.
            None => run(state, input),
            Some(Entry::Fresh) => {
                let start = state.clone();
                let again = input.clone();
                // Trace, commit, and say what later calls do.
                let traced = || -> Result<(O, Entry<O>)> {
                    let (result, outs, program) =
                        trace_forward(&args, &keys, |traced: &[Tensor]| {
                            let mut leaves = traced.iter().cloned();
                            let input = input
                                .rebuild(&mut leaves)
                                .expect("as many tensors as flattened");
                            let mut state = state;
                            state.variables = with_variable_tensors(&state.variables, &mut leaves)?;
                            let cell = RefCell::new(state);
                            let output = body(&Scope::at(&cell, path.clone()), input)?;
                            let mut finished = cell.into_inner();
                            packed.trim_for_repack(&mut finished);
                            let counters = finished.counters.clone();
                            let collections = packed.repack(&[finished])?;
                            let mut outs = output.tensors();
                            for (_, tree) in &collections {
                                outs.extend(tree.leaves().iter().cloned());
                            }
                            Ok(((output, collections, counters), outs))
                        })?;
                    let (output, collections, counters) = result;
                    let program = match program {
                        Ok(program) => program,
                        Err(Unplanned::Rerun(reason)) => {
                            return Ok((run(start, again)?, Entry::Eager(reason)));
                        }
                        Err(Unplanned::Eager(reason)) => {
                            // The traced run's results stand.
                            let (output, collections) = results(&output, &collections, outs)?;
                            packed.commit(self, collections, &counters)?;
                            return Ok((output, Entry::Eager(reason)));
                        }
                    };
                    let (output, collections) = results(&output, &collections, outs)?;
                    packed.commit(self, collections.clone(), &counters)?;
                    if collections.iter().any(|(_, t)| !t.arrays().is_empty()) {
                        let reason = "a writable collection holds arrays".to_string();
                        return Ok((output, Entry::Eager(reason)));
                    }
                    let compiled = Compiled {
                        program,
                        output: placeholders(&output),
                        collections: collections
                            .iter()
                            .map(|(c, t)| Ok((c.clone(), placeholder_tree(t)?)))
                            .collect::<Result<_>>()?,
                        counters: advanced(&start.counters, &counters, &path),
                    };
                    Ok((output, Entry::Compiled(Box::new(compiled))))
                };
                match traced() {
                    Ok((output, entry)) => {
                        put_back(entry);
                        Ok(output)
                    }
                    Err(e) => {
                        // The next call with this signature traces again.
                        put_back(Entry::Fresh);
                        Err(e)
                    }
                }
            }
        }
    }
}

/// The body's output and writable collections, with their tensors taken
/// in order from `outs`.
fn results<O: Tensors>(
    output: &O,
    collections: &[(String, Tree)],
    outs: Vec<Tensor>,
) -> Result<(O, Vec<(String, Tree)>)> {
    let mut outs = outs.into_iter();
    let output = output
        .rebuild(&mut outs)
        .expect("as many tensors as traced");
    let mut trees = Vec::with_capacity(collections.len());
    for (c, tree) in collections {
        let n = tree.leaves().len();
        trees.push((
            c.clone(),
            tree.with_leaves(outs.by_ref().take(n).collect())?,
        ));
    }
    Ok((output, trees))
}

/// `value` with a scalar placeholder for each tensor (the structure of a
/// result, without holding on to the traced values).
fn placeholders<O: Tensors>(value: &O) -> O {
    value
        .rebuild(&mut std::iter::repeat_with(|| Tensor::scalar(0.0)))
        .expect("an endless supply")
}

fn placeholder_tree(tree: &Tree) -> Result<Tree> {
    Ok(tree.with_leaves(vec![Tensor::scalar(0.0); tree.leaves().len()])?)
}

/// How far the body advanced the `make_rng` counters under `path`, by
/// path relative to it (a clone of the module may run at another path).
fn advanced(
    before: &HashMap<(Vec<String>, String), u64>,
    after: &HashMap<(Vec<String>, String), u64>,
    path: &[String],
) -> Vec<((Vec<String>, String), u64)> {
    after
        .iter()
        .filter(|((p, _), _)| p.starts_with(path))
        .filter_map(|(key, &count)| {
            let delta = count - before.get(key).copied().unwrap_or(0);
            (delta > 0).then(|| ((key.0[path.len()..].to_vec(), key.1.clone()), delta))
        })
        .collect()
}

/// One replay of a compiled body; commits its writable collections and
/// advances the counters as the traced run did.
fn replay<O: Tensors>(
    compiled: &mut Compiled<O>,
    args: &[Tensor],
    keys: &[Key],
    packed: &Packed,
    scope: &Scope<'_>,
) -> Result<O> {
    let outs = compiled.program.run(args, keys)?;
    let (output, collections) = results(&compiled.output, &compiled.collections, outs)?;
    let mut counters = packed.counters.clone();
    for ((relative, stream), delta) in &compiled.counters {
        let mut key_path = scope.path().to_vec();
        key_path.extend(relative.iter().cloned());
        *counters.entry((key_path, stream.clone())).or_insert(0) += delta;
    }
    packed.commit(scope, collections, &counters)?;
    Ok(output)
}
