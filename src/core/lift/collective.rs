//! Collectives over a named mapped axis (`jax.lax.pmean` / `psum` inside
//! `vmap(axis_name=...)`).
//!
//! An item that asks for the mean over all items needs every item to have
//! reached the same point. So a `vmap` with an axis name runs each item on
//! its own thread, in lockstep: a baton passes from item to item in order,
//! and only its holder runs. Each item runs until its next collective,
//! deposits its operand and hands the baton on; the last item reduces the
//! operands (in item order) and hands the baton back to the first, which
//! continues with the result. Every item thus runs once, one at a time, in
//! a fixed order: results — and the order in which operations are recorded
//! for `grad` — are deterministic, and gradients flow through the reduction
//! into every item.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::core::scope::Scope;
use crate::error::{Error, Result};
use crate::tensor::batched::ItemGroup;
use crate::tensor::Tensor;

/// A computation over the items' operands, each stacked along a new
/// leading axis (the items): returns batched results (leading axis: the
/// items) and results shared by every item. It runs on the thread of the
/// last item to arrive, hence `Send + Sync`.
pub type BatchedFn = Arc<dyn Fn(&[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>)> + Send + Sync>;

/// Which reduction a collective performs.
#[derive(Clone)]
pub(crate) enum Reduce {
    Mean,
    Sum,
    Batched(BatchedFn),
}

impl std::fmt::Debug for Reduce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reduce::Mean => "Mean",
            Reduce::Sum => "Sum",
            Reduce::Batched(_) => "Batched",
        })
    }
}

/// The shared state of one `vmap` with an axis name.
#[derive(Debug)]
struct Lockstep {
    /// The item allowed to run.
    turn: usize,
    /// Results of the collectives resolved so far, in call order.
    resolved: Vec<Resolved>,
    /// Operands deposited at the current collective, per item.
    pending: Vec<Option<(Reduce, Vec<Tensor>)>>,
    /// Items whose body has returned.
    finished: Vec<bool>,
    /// Set when an item failed or the items disagree: everyone stops.
    aborted: Option<Error>,
}

/// A collective's results.
#[derive(Debug)]
struct Resolved {
    /// Stacked along a leading axis of the items: each item takes its
    /// slice.
    batched: Vec<Tensor>,
    /// The same for every item.
    shared: Vec<Shared>,
}

/// A result every item receives.
#[derive(Debug)]
enum Shared {
    /// The same value for every item.
    Value(Tensor),
    /// Under `grad`: each item reads it through its own view, so that the
    /// items' cotangents are summed over the items as JAX's transpose of
    /// the broadcast to the mapped axis does (see `tensor::batched`).
    Viewed(Tensor, Arc<ItemGroup>),
}

impl Shared {
    fn new(t: Tensor, items: usize) -> Result<Shared> {
        Ok(if t.is_traced() {
            Shared::Viewed(t, ItemGroup::new(items))
        } else {
            Shared::Value(t)
        })
    }

    fn for_item(&self, item: usize) -> Result<Tensor> {
        Ok(match self {
            Shared::Value(t) => t.clone(),
            Shared::Viewed(t, group) => t.item_view(group, item),
        })
    }
}

/// The baton and the collectives of one `vmap` with an axis name, shared
/// by its item threads.
#[derive(Debug)]
pub(crate) struct Collectives {
    axis_name: String,
    path: String,
    items: usize,
    state: Mutex<Lockstep>,
    baton: Condvar,
}

/// An item's handle on the collectives of an enclosing `vmap`.
#[derive(Clone, Debug)]
pub(crate) struct AxisContext {
    pub(crate) shared: Arc<Collectives>,
    pub(crate) item: usize,
}

/// The error an item's collective returns when another item failed; the
/// driver reports the failure itself instead.
const ABORTED: &str = "stopped: another item failed";

impl Collectives {
    /// The collectives of `items` items over axis `axis_name`, at `path`.
    pub(crate) fn new(axis_name: &str, path: &str, items: usize) -> Arc<Collectives> {
        Arc::new(Collectives {
            axis_name: axis_name.to_string(),
            path: path.to_string(),
            items,
            state: Mutex::new(Lockstep {
                turn: 0,
                resolved: Vec::new(),
                pending: vec![None; items],
                finished: vec![false; items],
                aborted: None,
            }),
            baton: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Lockstep> {
        // A poisoned lock means an item panicked; its thread's panic is
        // re-raised by the driver, so the state can still be read here.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks item `item` until it holds the baton (or everything stopped).
    fn wait_turn<'a>(
        &'a self,
        mut st: MutexGuard<'a, Lockstep>,
        item: usize,
    ) -> MutexGuard<'a, Lockstep> {
        while st.turn != item && st.aborted.is_none() {
            st = self.baton.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st
    }

    /// Runs item `item`'s body once it holds the baton, then records that it
    /// finished (or failed) and hands the baton on.
    pub(crate) fn run_item<T>(&self, item: usize, body: impl FnOnce() -> Result<T>) -> Result<T> {
        let st = self.wait_turn(self.lock(), item);
        if st.aborted.is_some() {
            return Err(self.error(ABORTED.to_string()));
        }
        drop(st);
        // If the body panics, the guard stops the other items (which would
        // otherwise wait for the baton forever); the panic then reaches the
        // driver when it joins the threads.
        let mut guard = PanicGuard {
            shared: self,
            item,
            armed: true,
        };
        let out = body();
        guard.armed = false;
        let mut st = self.lock();
        st.finished[item] = true;
        if let Err(e) = &out {
            if st.aborted.is_none() {
                st.aborted = Some(e.clone());
            }
        }
        self.pass(&mut st, item);
        out
    }

    /// Hands the baton from `item` to the next item; after the last item,
    /// resolves the collective every item reached, or checks that all
    /// finished.
    fn pass(&self, st: &mut Lockstep, item: usize) {
        if item + 1 < self.items {
            st.turn = item + 1;
        } else if st.aborted.is_none() {
            let deposited = st.pending.iter().filter(|p| p.is_some()).count();
            if deposited == self.items {
                match self.reduce(st) {
                    Ok(r) => {
                        st.resolved.push(r);
                        st.turn = 0;
                    }
                    Err(e) => st.aborted = Some(e),
                }
            } else if deposited > 0 {
                let missing = st.pending.iter().position(Option::is_none).unwrap_or(0);
                st.aborted = Some(self.error(format!(
                    "item {missing} did not reach collective #{} over axis \"{}\" that the \
                     other items reached",
                    st.resolved.len(),
                    self.axis_name
                )));
            }
        }
        self.baton.notify_all();
    }

    /// The reduction of the deposited operands, in item order.
    fn reduce(&self, st: &mut Lockstep) -> Result<Resolved> {
        let mut parts = Vec::with_capacity(self.items);
        let mut op = Reduce::Sum;
        for p in &mut st.pending {
            let (reduce, x) = p.take().expect("every item deposited");
            op = reduce;
            parts.push(x);
        }
        let arity = parts[0].len();
        if let Some(i) = parts.iter().position(|p| p.len() != arity) {
            return Err(self.error(format!(
                "item {i} passed {} operands to collective #{} over axis \"{}\", item 0 passed \
                 {arity}",
                parts[i].len(),
                st.resolved.len(),
                self.axis_name
            )));
        }
        // One stacked tensor per operand position.
        let index = st.resolved.len();
        let stacked = (0..arity)
            .map(|k| {
                Tensor::stack(&parts.iter().map(|p| p[k].clone()).collect::<Vec<_>>(), 0).map_err(
                    |e| {
                        self.error(format!(
                            "operand {k} of collective #{index} over axis \"{}\" differs \
                             between items: {e}",
                            self.axis_name
                        ))
                    },
                )
            })
            .collect::<Result<Vec<_>>>()?;
        if let Reduce::Batched(f) = op {
            let (batched, shared) = f(&stacked)?;
            let shared = shared
                .into_iter()
                .map(|t| Shared::new(t, self.items))
                .collect::<Result<_>>()?;
            return Ok(Resolved { batched, shared });
        }
        let stacked = stacked
            .into_iter()
            .next()
            .expect("a reduction has one operand");
        let reduced = match op {
            // `pmean` is a sum divided by the axis size. Run eagerly, XLA
            // multiplies by the f32 reciprocal of the constant; under
            // `jax.grad` the size reaches the kernel as an argument and the
            // division is a true one (as for Dropout's `x / keep_prob`).
            Reduce::Mean if stacked.is_traced() => stacked
                .sum(&[0], false)?
                .div(&Tensor::scalar(self.items as f32))?,
            Reduce::Mean => stacked.mean(&[0], false)?,
            _ => stacked.sum(&[0], false)?,
        };
        Ok(Resolved {
            batched: Vec::new(),
            shared: vec![Shared::new(reduced, self.items)?],
        })
    }

    /// Item `item`'s collective: deposit, hand the baton on, wait for the
    /// results (this item's slices of the batched ones, then the shared
    /// ones).
    fn collective(&self, item: usize, reduce: Reduce, x: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut st = self.lock();
        let index = st.resolved.len();
        st.pending[item] = Some((reduce, x.to_vec()));
        self.pass(&mut st, item);
        let st = self.wait_turn(st, item);
        if st.aborted.is_some() {
            return Err(self.error(ABORTED.to_string()));
        }
        let r = &st.resolved[index];
        let mut out = Vec::with_capacity(r.batched.len() + r.shared.len());
        for t in &r.batched {
            out.push(t.index_axis(0, item)?);
        }
        for t in &r.shared {
            out.push(t.for_item(item)?);
        }
        Ok(out)
    }

    /// The first failure, if any item failed.
    pub(crate) fn failure(&self) -> Option<Error> {
        self.lock().aborted.clone()
    }

    fn error(&self, message: String) -> Error {
        Error::Lift {
            path: self.path.clone(),
            transform: "vmap",
            message,
        }
    }
}

/// Stops every item when the item running dies by a panic.
struct PanicGuard<'a> {
    shared: &'a Collectives,
    item: usize,
    /// Cleared when the body returned.
    armed: bool,
}

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut st = self.shared.lock();
        st.finished[self.item] = true;
        if st.aborted.is_none() {
            st.aborted = Some(self.shared.error(format!("item {} panicked", self.item)));
        }
        self.shared.baton.notify_all();
    }
}

impl Scope<'_> {
    /// The mean of `x` over the items of the enclosing `Vmap` whose axis is
    /// named `axis_name` (`jax.lax.pmean`).
    ///
    /// ```
    /// use flaxen::core::{Result, Scope};
    /// use flaxen::nn::{Module, Vmap};
    /// use flaxen::tensor::Tensor;
    ///
    /// /// Each item minus the mean over the items.
    /// struct Center;
    ///
    /// impl Module for Center {
    ///     type Input = Tensor;
    ///     type Output = Tensor;
    ///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
    ///         Ok(x.sub(&s.pmean("batch", &x)?)?)
    ///     }
    /// }
    ///
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 6.0], &[3]).unwrap();
    /// let y = Vmap::new(Center)
    ///     .axis_name("batch")
    ///     .apply(&Default::default(), x, ())?;
    /// assert_eq!(y.to_vec(), [-2.0, -1.0, 3.0]);
    /// # Ok::<(), flaxen::core::Error>(())
    /// ```
    pub fn pmean(&self, axis_name: &str, x: &Tensor) -> Result<Tensor> {
        self.reduce_collective(axis_name, x, Reduce::Mean)
    }

    /// The sum of `x` over the items of the enclosing `Vmap` whose axis is
    /// named `axis_name` (`jax.lax.psum`).
    pub fn psum(&self, axis_name: &str, x: &Tensor) -> Result<Tensor> {
        self.reduce_collective(axis_name, x, Reduce::Sum)
    }

    /// Runs `f` once on the operands of all the items of the enclosing
    /// `Vmap` whose axis is named `axis_name`, each operand stacked along a
    /// new leading axis, as JAX runs a batched computation; returns this
    /// item's slice of every batched result of `f`, then its shared
    /// results. Reductions over the items inside `f` (and, under `grad`,
    /// the sums of their cotangents) are then single operations over the
    /// stacked axis, rounding as JAX's batched ones do. `BatchNorm` with an
    /// axis name computes its statistics this way.
    ///
    /// Every item must pass the same number of operands, with the same
    /// shapes.
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use flaxen::core::lift::BatchedFn;
    /// use flaxen::core::{Result, Scope};
    /// use flaxen::nn::{Module, Vmap};
    /// use flaxen::tensor::Tensor;
    ///
    /// /// Each item scaled by the largest item (computed once, over all).
    /// struct Normalize;
    ///
    /// impl Module for Normalize {
    ///     type Input = Tensor;
    ///     type Output = Tensor;
    ///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
    ///         let f: BatchedFn = Arc::new(|ops: &[Tensor]| {
    ///             let max = ops[0].max(&[0], false)?;
    ///             Ok((vec![ops[0].div(&max)?], vec![max]))
    ///         });
    ///         let out = s.batched_collective("batch", &[x], f)?;
    ///         Ok(out[0].clone()) // out[1] is the shared maximum
    ///     }
    /// }
    ///
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 4.0], &[3]).unwrap();
    /// let y = Vmap::new(Normalize)
    ///     .axis_name("batch")
    ///     .apply(&Default::default(), x, ())?;
    /// assert_eq!(y.to_vec(), [0.25, 0.5, 1.0]);
    /// # Ok::<(), flaxen::core::Error>(())
    /// ```
    pub fn batched_collective(
        &self,
        axis_name: &str,
        operands: &[Tensor],
        f: BatchedFn,
    ) -> Result<Vec<Tensor>> {
        self.collective(axis_name, operands, Reduce::Batched(f))
    }

    fn reduce_collective(&self, axis_name: &str, x: &Tensor, reduce: Reduce) -> Result<Tensor> {
        let mut out = self.collective(axis_name, std::slice::from_ref(x), reduce)?;
        Ok(out.pop().expect("a reduction has one result"))
    }

    fn collective(&self, axis_name: &str, x: &[Tensor], reduce: Reduce) -> Result<Vec<Tensor>> {
        let ctx = self
            .state()
            .borrow()
            .axes
            .iter()
            .rev()
            .find(|c| c.shared.axis_name == axis_name)
            .cloned();
        let Some(ctx) = ctx else {
            return Err(Error::Lift {
                path: self.path_text(),
                transform: "vmap",
                message: format!("unbound axis name \"{axis_name}\": no enclosing Vmap has it"),
            });
        };
        ctx.shared.collective(ctx.item, reduce, x)
    }
}
