//! optax's `GradientTransformation`: an `init` that makes a state from the
//! parameters and an `update` that maps gradients (and the state) to
//! updates; `chain` composes them and `apply_updates` adds the updates.
//!
//! States are [`Tree`]s, so they print, compare and save like variables:
//! counters are int32 [`Array`]s, moments are trees of tensors shaped like
//! the parameters.

use ndarray::{arr0, ArrayD};

use crate::error::{Error, Result};
use crate::tensor::{tree_map2, Array, Tensor, Tree};

/// An optax gradient transformation.
pub trait GradientTransformation {
    /// The initial state for `params` (`tx.init(params)`).
    fn init(&self, params: &Tree) -> Result<Tree>;

    /// The updates for `updates` (gradients, or the previous
    /// transformation's updates) and the next state (`tx.update(updates,
    /// state, params)`).
    fn update(&self, updates: &Tree, state: &Tree, params: Option<&Tree>) -> Result<(Tree, Tree)>;

    /// If this transformation multiplies the updates by one scalar (a
    /// learning rate), that scalar for `state` and the next state.
    fn scale_factor(&self, _state: &Tree) -> Result<Option<(f32, Tree)>> {
        Ok(None)
    }

    /// The new parameters and state for `grads`, as a jitted training step
    /// computes `updates, state = tx.update(grads, state, params); params =
    /// optax.apply_updates(params, updates)`: XLA fuses the final scaling
    /// by the learning rate into the addition to the parameters (one fused
    /// multiply-add, `p + lr * u`), which [`update`] followed by
    /// [`apply_updates`] cannot reproduce. Flax's
    /// `TrainState.apply_gradients` is this.
    ///
    /// [`update`]: GradientTransformation::update
    fn apply_gradients(&self, grads: &Tree, state: &Tree, params: &Tree) -> Result<(Tree, Tree)> {
        let (updates, state) = self.update(grads, state, Some(params))?;
        Ok((apply_updates(params, &updates)?, state))
    }

    /// [`apply_gradients`](GradientTransformation::apply_gradients) taking
    /// the state and the parameters by value, as a training loop that
    /// replaces both does (`(params, state) = tx.apply_gradients_owned(&g,
    /// state, params)?`): where nothing else holds their arrays, the new
    /// values are written over the old ones instead of into fresh memory —
    /// the same bits, no allocation. Arrays that something else still
    /// holds are copied first, so no other holder sees a change. Fused
    /// AdamW (`adamw`) does this; other transformations allocate as
    /// `apply_gradients` does.
    fn apply_gradients_owned(
        &self,
        grads: &Tree,
        state: Tree,
        params: Tree,
    ) -> Result<(Tree, Tree)> {
        self.apply_gradients(grads, &state, &params)
    }

    /// The transformation itself, for a [`Chain`] that recognizes a
    /// sequence it runs fused (AdamW's). Not for use outside.
    #[doc(hidden)]
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// [`update`](GradientTransformation::update) for updates that
    /// `clip_by_global_norm` produced earlier in the same chain: in the
    /// jitted step they are a `select` (clipped or not), which changes how
    /// LLVM contracts what follows (see `ScaleByAdam`). Not for use
    /// outside.
    #[doc(hidden)]
    fn update_after_clip(
        &self,
        updates: &Tree,
        state: &Tree,
        params: Option<&Tree>,
    ) -> Result<(Tree, Tree)> {
        self.update(updates, state, params)
    }
}

impl<T: GradientTransformation + ?Sized> GradientTransformation for Box<T> {
    fn init(&self, params: &Tree) -> Result<Tree> {
        (**self).init(params)
    }
    fn update(&self, updates: &Tree, state: &Tree, params: Option<&Tree>) -> Result<(Tree, Tree)> {
        (**self).update(updates, state, params)
    }
    fn scale_factor(&self, state: &Tree) -> Result<Option<(f32, Tree)>> {
        (**self).scale_factor(state)
    }
    fn apply_gradients(&self, grads: &Tree, state: &Tree, params: &Tree) -> Result<(Tree, Tree)> {
        (**self).apply_gradients(grads, state, params)
    }
    fn apply_gradients_owned(
        &self,
        grads: &Tree,
        state: Tree,
        params: Tree,
    ) -> Result<(Tree, Tree)> {
        (**self).apply_gradients_owned(grads, state, params)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        (**self).as_any()
    }
    fn update_after_clip(
        &self,
        updates: &Tree,
        state: &Tree,
        params: Option<&Tree>,
    ) -> Result<(Tree, Tree)> {
        (**self).update_after_clip(updates, state, params)
    }
}

/// `optax.chain`: the transformations one after the other; the state is a
/// tree with one entry per transformation (`"0"`, `"1"`, ...).
pub struct Chain(Vec<Box<dyn GradientTransformation + Send + Sync>>);

/// `optax.chain(*transforms)`.
pub fn chain(transforms: Vec<Box<dyn GradientTransformation + Send + Sync>>) -> Chain {
    Chain(transforms)
}

/// Entry `k` of a chain's state.
fn chain_entry(state: &Tree, k: &str) -> Result<Tree> {
    state
        .subtree(k)
        .ok_or_else(|| state_error(format!("the chain's state has no entry \"{k}\"")))
}

/// A fused AdamW chain's next state: Adam's, the decay's and the learning
/// rate's (under `key`).
fn adamw_state(adam: Tree, decay: Tree, key: &str, rate: Tree) -> Tree {
    Tree::new().with("0", adam).with("1", decay).with(key, rate)
}

impl Chain {
    /// The updates and states of `transforms` (this chain's, from the
    /// first), one after the other; the first takes updates clipped
    /// before the chain when `after_clip`.
    fn run(
        transforms: &[Box<dyn GradientTransformation + Send + Sync>],
        updates: &Tree,
        state: &Tree,
        params: Option<&Tree>,
        mut after_clip: bool,
    ) -> Result<(Tree, Tree)> {
        let mut updates = updates.clone();
        let mut next = Tree::new();
        for (i, t) in transforms.iter().enumerate() {
            let key = i.to_string();
            let own = state.subtree(&key).ok_or_else(|| {
                state_error(format!(
                    "the chain's state has no entry \"{key}\" (transformation {i})"
                ))
            })?;
            let (u, s) = if after_clip {
                t.update_after_clip(&updates, &own, params)?
            } else {
                t.update(&updates, &own, params)?
            };
            updates = u;
            next.insert(key, s)?;
            after_clip = t
                .as_any()
                .is_some_and(|a| a.is::<super::ClipByGlobalNorm>());
        }
        Ok((updates, next))
    }

    /// `adam`, then decayed weights, then a learning rate: AdamW, which
    /// [`Chain::apply_gradients`](GradientTransformation::apply_gradients)
    /// runs as one pass (its Adam and its weight decay).
    fn fused_adamw(&self) -> Option<(&super::ScaleByAdam, f64)> {
        let [a, d, _] = self.0.as_slice() else {
            return None;
        };
        let adam = a.as_any()?.downcast_ref::<super::ScaleByAdam>()?;
        let decay = d.as_any()?.downcast_ref::<super::AddDecayedWeights>()?;
        Some((adam, decay.weight_decay))
    }
}

impl GradientTransformation for Chain {
    fn init(&self, params: &Tree) -> Result<Tree> {
        let mut state = Tree::new();
        for (i, t) in self.0.iter().enumerate() {
            state.insert(i.to_string(), t.init(params)?)?;
        }
        Ok(state)
    }

    fn update(&self, updates: &Tree, state: &Tree, params: Option<&Tree>) -> Result<(Tree, Tree)> {
        Chain::run(&self.0, updates, state, params, false)
    }

    fn update_after_clip(
        &self,
        updates: &Tree,
        state: &Tree,
        params: Option<&Tree>,
    ) -> Result<(Tree, Tree)> {
        Chain::run(&self.0, updates, state, params, true)
    }

    fn apply_gradients_owned(
        &self,
        grads: &Tree,
        state: Tree,
        params: Tree,
    ) -> Result<(Tree, Tree)> {
        let (Some((adam, weight_decay)), Some(last)) = (self.fused_adamw(), self.0.last()) else {
            return self.apply_gradients(grads, &state, &params);
        };
        let key = (self.0.len() - 1).to_string();
        let sub = |k: &str| chain_entry(&state, k);
        let Some((step, last_state)) = last.scale_factor(&sub(&key)?)? else {
            return self.apply_gradients(grads, &state, &params);
        };
        let (adam_own, decay_own) = (sub("0")?, sub("1")?);
        // The caller's state goes, so that the moments' arrays are held
        // only by `adam_own` and can be updated in place.
        drop(state);
        let (new, adam_state) =
            super::adamw_fused::apply_owned(adam, weight_decay, step, grads, adam_own, params)?;
        Ok((new, adamw_state(adam_state, decay_own, &key, last_state)))
    }

    fn apply_gradients(&self, grads: &Tree, state: &Tree, params: &Tree) -> Result<(Tree, Tree)> {
        let Some((last, rest)) = self.0.split_last() else {
            return Ok((params.clone(), state.clone()));
        };
        let key = rest.len().to_string();
        let Some((step, last_state)) = last.scale_factor(&chain_entry(state, &key)?)? else {
            let (updates, state) = self.update(grads, state, Some(params))?;
            return Ok((apply_updates(params, &updates)?, state));
        };
        // AdamW (`adam`, then decayed weights, then the rate): one pass.
        if let Some((adam, weight_decay)) = self.fused_adamw() {
            let adam_own = chain_entry(state, "0")?;
            let (new, adam_state) =
                super::adamw_fused::apply(adam, weight_decay, step, grads, &adam_own, params)?;
            let decay_own = chain_entry(state, "1")?;
            return Ok((new, adamw_state(adam_state, decay_own, &key, last_state)));
        }
        // Every transformation but the last, then `p + step * u` fused.
        let (updates, mut next) = Chain::run(rest, grads, state, Some(params), false)?;
        next.insert(key, last_state)?;
        let params = moments(&Tree::new().with("p", params.clone()), "p", &updates)?;
        let new = zip_leaves([&updates, &params], |[u, p], j| step.mul_add(u[j], p[j]))?;
        Ok((new, next))
    }
}

/// `optax.apply_updates`: `params + updates`, leaf by leaf.
///
/// Fails with a tree-structure error naming both trees' paths when they
/// differ.
pub fn apply_updates(params: &Tree, updates: &Tree) -> Result<Tree> {
    Ok(tree_map2(params, updates, |p, u| p.add(u))?)
}

/// An int32 scalar counter leaf.
pub(crate) fn count_leaf(count: i32) -> Tree {
    Tree::array_leaf(Array::from(arr0(count).into_dyn()))
}

/// The int32 counter at `path` of `state`.
pub(crate) fn read_count(state: &Tree, path: &str) -> Result<i32> {
    state
        .array(path)
        .ok()
        .and_then(Array::as_i32)
        .filter(|a| a.ndim() == 0)
        .map(|a| a[[]])
        .ok_or_else(|| {
            state_error(format!(
                "no int32 counter at \"{path}\" in the optimizer state"
            ))
        })
}

/// optax's `safe_increment`: `count + 1`, staying at `i32::MAX`.
pub(crate) fn safe_increment(count: i32) -> i32 {
    count.saturating_add(1)
}

/// The subtree at `path` of `state`, checked to have `params`' structure.
pub(crate) fn moments(state: &Tree, path: &str, like: &Tree) -> Result<Tree> {
    let m = state
        .subtree(path)
        .ok_or_else(|| state_error(format!("no \"{path}\" in the optimizer state")))?;
    if !m.same_structure(like) {
        let names = |t: &Tree| t.paths().into_iter().map(|(p, _)| p).collect::<Vec<_>>();
        return Err(state_error(format!(
            "the state's \"{path}\" holds {:?}, but the updates are {:?}",
            names(&m),
            names(like)
        )));
    }
    Ok(m)
}

/// Zeros shaped like every tensor of `params`.
pub(crate) fn zeros_like(params: &Tree) -> Tree {
    crate::tensor::tree_map(params, |p| Tensor::zeros(p.shape()))
}

/// The error for an optimizer state that does not fit.
pub(crate) fn state_error(message: String) -> Error {
    Error::Config {
        path: "optimizer".to_string(),
        message,
    }
}

/// Leaves with at least this many elements are updated on all cores.
const PARALLEL_LEN: usize = 1 << 16;

/// Applies `f` to the raw values of same-shaped tensors, leaf by leaf, in
/// one pass (the elementwise arithmetic of an update, as XLA fuses it).
/// Contiguous leaves are read in place.
/// `out[i] = f(start + i)`, compiled with FMA where the CPU has it: the
/// optimizers' `f32::mul_add` is otherwise a library call per element.
/// (`mul_add` rounds once either way: the bits do not depend on the CPU.)
fn fill(out: &mut [f32], start: usize, f: impl Fn(usize) -> f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports FMA, checked just above; that is the only
        // requirement of `fill_fma`, whose body is safe code.
        unsafe { fill_fma(out, start, f) };
        return;
    }
    fill_plain(out, start, f);
}

/// [`fill`]'s loop, inlined into [`fill_fma`] to get its features.
#[inline(always)]
fn fill_plain(out: &mut [f32], start: usize, f: impl Fn(usize) -> f32) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = f(start + i);
    }
}

/// [`fill`] compiled for FMA.
///
/// # Safety
///
/// The CPU must support FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn fill_fma(out: &mut [f32], start: usize, f: impl Fn(usize) -> f32) {
    fill_plain(out, start, f)
}

pub(crate) fn zip_leaves<const N: usize>(
    trees: [&Tree; N],
    f: impl Fn([&[f32]; N], usize) -> f32 + Sync,
) -> Result<Tree> {
    let first = trees[0];
    let leaves = (0..first.leaves().len())
        .map(|k| {
            let tensors: [&Tensor; N] = std::array::from_fn(|i| &trees[i].leaves()[k]);
            let views: Vec<ndarray::ArrayViewD<'_, f32>> =
                tensors.iter().map(|t| t.view()).collect();
            let owned: Vec<Option<Vec<f32>>> = views
                .iter()
                .map(|v| v.as_slice().is_none().then(|| v.iter().copied().collect()))
                .collect();
            let slices: [&[f32]; N] = std::array::from_fn(|i| match &owned[i] {
                Some(v) => v.as_slice(),
                None => views[i].as_slice().expect("contiguous"),
            });
            let len = slices[0].len();
            // Large leaves are split over the cores (each element is
            // independent, so the bits are those of one thread), the
            // calling thread taking its share (`share_out`).
            let mut out = vec![0.0f32; len];
            if len >= PARALLEL_LEN {
                let size = PARALLEL_LEN / 4;
                crate::pool::share_out(out.chunks_mut(size).enumerate(), |(c, chunk)| {
                    fill(chunk, c * size, |j| f(slices, j))
                });
            } else {
                fill(&mut out, 0, |j| f(slices, j));
            }
            Tensor::from_array(ArrayD::from_shape_vec(tensors[0].shape(), out).expect("same shape"))
        })
        .collect();
    Ok(first.with_leaves(leaves)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leaf long enough to be shared between threads gets every element
    /// from its own index, as a short one does.
    #[test]
    fn large_leaves_are_filled_element_by_element() {
        for len in [37, PARALLEL_LEN, PARALLEL_LEN + 5, 3 * PARALLEL_LEN + 1] {
            let a: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
            let b: Vec<f32> = (0..len).map(|i| (i % 7) as f32).collect();
            let tree = |v: Vec<f32>| Tree::new().with("w", Tensor::from_vec(v, &[len]).unwrap());
            let (ta, tb) = (tree(a.clone()), tree(b.clone()));
            let out = zip_leaves([&ta, &tb], |[x, y], j| x[j].mul_add(2.0, y[j])).unwrap();
            let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x.mul_add(2.0, *y)).collect();
            assert_eq!(out.tensor("w").unwrap().to_vec(), want, "length {len}");
        }
    }
}
