//! Random tensors that a compiled step draws again on every call.
//!
//! `jax.jit` takes PRNG keys as arguments: a dropout mask drawn inside a
//! jitted step comes from the keys of each call, not from the first trace.
//! A compiled step with keys ([`jit_value_and_grad_with_keys`]) traces its
//! function once; while it traces, [`note_derived`] learns how each key
//! that `make_rng` hands out derives from the step's key arguments
//! (`fold_in(argument, data)`, or a chain of such folds when `make_rng`
//! draws from a key it derived itself, as a jitted module's forked keys),
//! and [`Tensor::sampled`] records a draw from
//! such a key as an operation of the tape, which the replay runs again from
//! the new arguments. A draw from a key of unknown origin, or a derived key
//! that no [`Tensor::sampled`] consumed (used some other way), makes the
//! step run eagerly on every call instead: never silently stale numbers.
//!
//! [`jit_value_and_grad_with_keys`]: super::jit_value_and_grad_with_keys

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use ndarray::ArrayD;
use smallvec::SmallVec;

use super::tape::{Node, OpKind, Tape, Tracer};
use super::Tensor;
use crate::random::Key;

/// Draws a tensor's values from a key.
pub(crate) type Draw = Arc<dyn Fn(&Key) -> crate::Result<ArrayD<f32>> + Send + Sync>;

/// A draw recorded on a compiled step's tape: from `arguments[key]` folded
/// with each of `data` in turn (none: the argument itself), with `draw`.
#[derive(Clone)]
pub(crate) struct Sampler {
    pub(crate) key: usize,
    pub(crate) data: Vec<u32>,
    pub(crate) draw: Draw,
    pub(crate) shape: Vec<usize>,
    /// `Some(p)` when `draw` is `bernoulli_mask(key, p, shape)` (a
    /// dropout's keep mask), which a replay may draw as bytes instead
    /// ([`draw_bytes_again`]).
    pub(crate) keep: Option<f32>,
}

/// What the trace of a compiled step with keys has seen.
pub(crate) struct RngTrace {
    tape: Arc<Tape>,
    arguments: Vec<Key>,
    /// Derived keys (by value) and how: (argument, the fold_in data from
    /// it, consumed by a draw or a further derivation).
    derived: HashMap<Key, (usize, Vec<u32>, bool)>,
    /// Whether randomness of unknown origin was drawn, or derived in a way
    /// the replay cannot follow.
    pub(crate) unknown: bool,
    pub(crate) samplers: Vec<Sampler>,
}

impl RngTrace {
    /// Whether every derived key was consumed by a recorded draw and
    /// nothing random came from elsewhere.
    pub(crate) fn replayable(&self) -> bool {
        !self.unknown && self.derived.values().all(|&(_, _, used)| used)
    }
}

thread_local! {
    static TRACE: RefCell<Option<RngTrace>> = const { RefCell::new(None) };
}

/// Runs `f` with a trace of key derivations for `tape`; returns `f`'s
/// result and the trace.
pub(crate) fn tracing<T>(
    tape: &Arc<Tape>,
    arguments: &[Key],
    f: impl FnOnce() -> T,
) -> (T, RngTrace) {
    let trace = RngTrace {
        tape: tape.clone(),
        arguments: arguments.to_vec(),
        derived: HashMap::new(),
        unknown: false,
        samplers: Vec::new(),
    };
    let outer = TRACE.with(|t| t.borrow_mut().replace(trace));
    let out = f();
    let trace = TRACE.with(|t| std::mem::replace(&mut *t.borrow_mut(), outer));
    (out, trace.expect("set above"))
}

/// Notes that `derived = fold_in(seed, data)` was handed out (by
/// `make_rng`) while a compiled step traces.
pub(crate) fn note_derived(seed: &Key, data: u32, derived: &Key) {
    TRACE.with(|t| {
        let mut t = t.borrow_mut();
        let Some(trace) = t.as_mut() else { return };
        let from = match trace.arguments.iter().position(|a| a == seed) {
            Some(i) => Some((i, Vec::new())),
            // A key derived before (a jitted module's forked stream): the
            // replay derives it again, then this one from it.
            None => trace.derived.get_mut(seed).map(|entry| {
                entry.2 = true;
                (entry.0, entry.1.clone())
            }),
        };
        match from {
            Some((i, mut chain)) => {
                chain.push(data);
                trace.derived.insert(derived.clone(), (i, chain, false));
            }
            // From a key the step does not take (split inside a lifted
            // transform, say): the replay could not derive it again.
            None => trace.unknown = true,
        }
    });
}

impl Tensor {
    /// A tensor of random values drawn from `key` by `draw` (a dropout
    /// mask, noise): `draw(key)` outside compiled steps. Inside a compiled
    /// step with keys ([`jit_value_and_grad_with_keys`]), where `key` comes
    /// from `make_rng`, the draw is recorded so that every later call
    /// draws again from its own keys. Layers that draw random tensors
    /// (`Dropout`) go through here; a layer of your own should too, or a
    /// compiled step using it runs eagerly on every call.
    ///
    /// ```
    /// use flaxen::core::{Result, Rngs, Scope, Variables};
    /// use flaxen::nn::Module;
    /// use flaxen::random::{self, Key};
    /// use flaxen::tensor::{jit_value_and_grad_with_keys, Tensor, Tree};
    ///
    /// /// Adds Gaussian noise from the `noise` stream.
    /// struct Noise;
    ///
    /// impl Module for Noise {
    ///     type Input = Tensor;
    ///     type Output = Tensor;
    ///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
    ///         let shape = x.shape().to_vec();
    ///         let noise = Tensor::sampled(&s.make_rng("noise")?, move |k: &Key| {
    ///             Ok(random::normal(k.clone(), &shape)?)
    ///         })?;
    ///         Ok(x.add(&noise)?)
    ///     }
    /// }
    ///
    /// let mut step = jit_value_and_grad_with_keys(|p: &Tree, _: &Tree, keys: &[Key]| {
    ///     let rngs = Rngs::none().with("noise", keys[0].clone());
    ///     let y = Noise.apply(&Variables::new(), p.tensor("w")?.clone(), rngs)?;
    ///     Ok(y.square().sum_all())
    /// });
    /// let params = Tree::new().with("w", Tensor::zeros(&[4]));
    /// let (a, _) = step.call_with_keys(&params, &Tree::new(), &[random::key(1)])?;
    /// let (b, _) = step.call_with_keys(&params, &Tree::new(), &[random::key(2)])?;
    /// assert!(step.is_compiled());
    /// assert_ne!(a.item()?, b.item()?);
    /// # Ok::<(), flaxen::Error>(())
    /// ```
    ///
    /// [`jit_value_and_grad_with_keys`]: super::jit_value_and_grad_with_keys
    pub fn sampled(
        key: &Key,
        draw: impl Fn(&Key) -> crate::Result<ArrayD<f32>> + Send + Sync + 'static,
    ) -> crate::Result<Tensor> {
        Tensor::sampled_as(key, draw, None)
    }

    /// `bernoulli(key, keep, shape)` as `1.0` / `0.0` through
    /// [`Tensor::sampled`], marked as such so that a compiled step may
    /// draw it again as bytes (`Dropout`'s keep mask).
    pub(crate) fn sampled_keep_mask(
        key: &Key,
        keep: f32,
        shape: &[usize],
    ) -> crate::Result<Tensor> {
        let shape = shape.to_vec();
        let draw = move |key: &Key| Ok(crate::random::bernoulli_mask(key, keep, &shape)?);
        Tensor::sampled_as(key, draw, Some(keep))
    }

    /// [`Tensor::sampled`], with the sampler's [`Sampler::keep`].
    fn sampled_as(
        key: &Key,
        draw: impl Fn(&Key) -> crate::Result<ArrayD<f32>> + Send + Sync + 'static,
        keep: Option<f32>,
    ) -> crate::Result<Tensor> {
        let value = draw(key)?;
        let recorded = TRACE.with(|t| {
            let mut t = t.borrow_mut();
            let trace = t.as_mut()?;
            // A key `make_rng` derived from an argument, or an argument
            // itself (a layer given an explicit key).
            let (argument, data) = match trace.derived.get_mut(key) {
                Some(entry) => {
                    entry.2 = true;
                    (entry.0, entry.1.clone())
                }
                None => match trace.arguments.iter().position(|a| a == key) {
                    Some(i) => (i, Vec::new()),
                    None => {
                        trace.unknown = true;
                        return None;
                    }
                },
            };
            let index = trace.samplers.len();
            trace.samplers.push(Sampler {
                key: argument,
                data,
                draw: Arc::new(draw),
                shape: value.shape().to_vec(),
                keep,
            });
            let node = trace.tape.push(Node::leaf(OpKind::Sampled(index)));
            Some(Tracer {
                tape: trace.tape.clone(),
                node,
            })
        });
        let data = value.into_shared();
        Ok(match recorded {
            Some(tracer) => Tensor {
                data,
                tracer: Some(tracer),
                factors: None,
                origin: None,
                merged: None,
            },
            None => Tensor::constant(data),
        })
    }
}

/// A sampler's values for the step's key arguments `keys`, in row-major
/// order.
pub(crate) fn draw_again(sampler: &Sampler, keys: &[Key]) -> crate::Result<Vec<f32>> {
    let values = (sampler.draw)(&key_of(sampler, keys))?;
    debug_assert_eq!(values.shape(), &sampler.shape[..]);
    // Logical (row-major) order, whatever the memory order.
    Ok(if values.is_standard_layout() {
        values.into_raw_vec_and_offset().0
    } else {
        values.iter().copied().collect()
    })
}

/// Keep-mask samplers' values ([`Sampler::keep`]) for the step's key
/// arguments `keys` as bytes (`1` where the float mask has `1.0`), each
/// into its buffer of `masks` (reused from call to call), all in one
/// parallel job.
pub(crate) fn draw_bytes_again<'a>(
    samplers: impl Iterator<Item = &'a Sampler>,
    keys: &[Key],
    masks: &mut [Vec<u8>],
) -> crate::Result<()> {
    let drawn: SmallVec<[(Key, f32, &[usize]); 4]> = samplers
        .map(|s| (key_of(s, keys), s.keep.expect("a keep mask"), &s.shape[..]))
        .collect();
    let ps: SmallVec<[f32; 4]> = drawn.iter().map(|d| d.1).collect();
    let mut jobs: SmallVec<[crate::random::ByteMask<'_>; 4]> = drawn
        .iter()
        .zip(masks.iter_mut())
        .map(|((key, _, shape), out)| (key, *shape, &mut out[..]))
        .collect();
    Ok(crate::random::bernoulli_bytes_into_all(&mut jobs, &ps)?)
}

/// The key a sampler draws from, derived from the step's key arguments.
fn key_of(sampler: &Sampler, keys: &[Key]) -> Key {
    sampler
        .data
        .iter()
        .fold(keys[sampler.key].clone(), |k, &d| {
            crate::random::fold_in(k, d)
        })
}
