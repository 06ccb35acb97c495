//! Collectives over a named mapped axis (`jax.lax.pmean` / `psum` inside
//! `vmap(axis_name=...)`).
//!
//! An item that asks for the mean over all items needs every item to have
//! reached the same point. The items run one at a time, in item order,
//! each until its next collective; when every item has deposited its
//! operand there, the operands are reduced in item order and the items
//! continue with the result. Results — and the order in which operations
//! are recorded for `grad` — are deterministic, and gradients flow through
//! the reduction into every item. Two drivers do this:
//!
//! - [`replay`] (the default) runs everything on the calling thread. An
//!   item runs its body from the start; collectives already resolved
//!   return their results, and the first new one deposits the operand and
//!   stops the body with an error that the body passes on with `?`. Once
//!   all items have deposited, the reduction is resolved and the next
//!   round runs the items again, one collective further. No thread per
//!   item, no waiting: 100,000 items with a `pmean` take two rounds.
//! - [`lockstep`] runs each item on its own thread and passes a baton from
//!   item to item, so that every body runs exactly once. Differentiation
//!   needs it: an operand traced by `grad` must be the very tensor the item
//!   goes on using (replayed bodies would record each operation twice, and
//!   the gradients would add up in another order than JAX's). A traced
//!   operand reaching a collective in replay stops the replay, and the
//!   `vmap` starts again in lockstep.

mod lockstep;
mod parallel;
mod replay;

pub(crate) use parallel::{bound_axis, with_device_axes, DeviceAxes};

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::core::scope::Scope;
use crate::error::{Error, Result};
use crate::tensor::item_view::ItemGroup;
use crate::tensor::Tensor;

/// A computation over the items' operands, each stacked along a new
/// leading axis (the items): returns batched results (leading axis: the
/// items) and results shared by every item. In lockstep it runs on the
/// thread of the last item to arrive, hence `Send + Sync`.
pub type BatchedFn = Arc<dyn Fn(&[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>)> + Send + Sync>;

/// The part of a mesh axis's group run by other processes (multi-process
/// meshes): a collective exchanges this process's operands for theirs.
pub(crate) trait Remote: Send + Sync + std::fmt::Debug {
    /// Whether this process runs item `item`.
    fn is_local(&self, item: usize) -> bool;
    /// Sends this process's operands of collective `index` (named `op`) to
    /// the other processes and returns theirs, per item.
    fn exchange(
        &self,
        index: usize,
        op: &str,
        local: &[(usize, Vec<Tensor>)],
    ) -> Result<Vec<(usize, Vec<Tensor>)>>;
    /// Tells the other processes that this one's devices returned after
    /// `collectives` collectives (or failed), and hears the same from them.
    fn finish(&self, collectives: usize, failure: Option<&Error>) -> Result<()>;
}

/// Which reduction a collective performs.
#[derive(Clone)]
pub(crate) enum Reduce {
    Mean,
    Sum,
    Batched(BatchedFn),
}

impl Reduce {
    /// The collective's name, as processes compare them.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Reduce::Mean => "pmean",
            Reduce::Sum => "psum",
            Reduce::Batched(_) => "batched",
        }
    }
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
struct Progress {
    /// Results of the collectives resolved so far, in call order.
    resolved: Vec<Resolved>,
    /// Operands deposited at the current collective, per item.
    pending: Vec<Option<(Reduce, Vec<Tensor>)>>,
    /// Lockstep: the item allowed to run.
    turn: usize,
    /// Lockstep: set when an item failed or the items disagree; everyone
    /// stops.
    aborted: Option<Error>,
    /// Replay: collectives the running item has called in this run.
    calls: usize,
    /// Replay: the running item deposited at a new collective and must
    /// stop.
    suspended: bool,
    /// Replay: a traced operand reached a collective; start again in
    /// lockstep.
    needs_lockstep: bool,
    /// Parallel: which items' bodies returned.
    finished: Vec<bool>,
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

impl Resolved {
    /// Item `item`'s results: its slices of the batched ones, then the
    /// shared ones.
    fn for_item(&self, item: usize) -> Result<Vec<Tensor>> {
        let mut out = Vec::with_capacity(self.batched.len() + self.shared.len());
        for t in &self.batched {
            out.push(t.index_axis(0, item)?);
        }
        for t in &self.shared {
            out.push(t.for_item(item)?);
        }
        Ok(out)
    }
}

/// Which driver runs the items.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Driver {
    Replay,
    Lockstep,
    /// The devices of a mesh, each on its own thread, running at once
    /// between collectives.
    Parallel,
}

/// The collectives of one `vmap` with an axis name, shared by its items.
#[derive(Debug)]
pub(crate) struct Collectives {
    axis_name: String,
    path: String,
    items: usize,
    driver: Driver,
    state: Mutex<Progress>,
    /// Lockstep: one per item, so that handing the baton on wakes only the
    /// item that takes it. Parallel: one, on which every device waits.
    batons: Vec<Condvar>,
    /// The transform named in errors (`vmap`, `shard_map`).
    transform: &'static str,
    /// Parallel: the items other processes run, if any.
    remote: Option<Box<dyn Remote>>,
}

/// An item's handle on the collectives of an enclosing `vmap`.
#[derive(Clone, Debug)]
pub(crate) struct AxisContext {
    pub(crate) shared: Arc<Collectives>,
    pub(crate) item: usize,
}

impl Collectives {
    /// The collectives of `items` items over axis `axis_name`, at `path`,
    /// run by `driver`.
    pub(crate) fn new(axis_name: &str, path: &str, items: usize, driver: Driver) -> Arc<Self> {
        Collectives::with_remote(axis_name, path, items, driver, None)
    }

    /// [`Collectives::new`] for a group some of whose items other processes
    /// run (`remote`).
    pub(crate) fn with_remote(
        axis_name: &str,
        path: &str,
        items: usize,
        driver: Driver,
        remote: Option<Box<dyn Remote>>,
    ) -> Arc<Self> {
        let batons = match driver {
            Driver::Replay => Vec::new(),
            Driver::Lockstep => (0..items).map(|_| Condvar::new()).collect(),
            Driver::Parallel => vec![Condvar::new()],
        };
        let transform = match driver {
            Driver::Parallel => "shard_map",
            _ => "vmap",
        };
        Arc::new(Collectives {
            axis_name: axis_name.to_string(),
            path: path.to_string(),
            items,
            driver,
            state: Mutex::new(Progress {
                resolved: Vec::new(),
                pending: vec![None; items],
                turn: 0,
                aborted: None,
                calls: 0,
                suspended: false,
                needs_lockstep: false,
                finished: vec![false; items],
            }),
            batons,
            transform,
            remote,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        // A poisoned lock means an item panicked; its thread's panic is
        // re-raised by the driver, so the state can still be read here.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Item `item`'s collective.
    pub(crate) fn collective(
        &self,
        item: usize,
        reduce: Reduce,
        x: &[Tensor],
    ) -> Result<Vec<Tensor>> {
        match self.driver {
            Driver::Replay => self.replay_collective(item, reduce, x),
            Driver::Lockstep => self.lockstep_collective(item, reduce, x),
            Driver::Parallel => self.parallel_collective(item, reduce, x),
        }
    }

    /// If every item deposited at the current collective, resolves it;
    /// otherwise (some deposited, some did not) the error naming an item
    /// that did not reach it. `Ok(false)`: nobody deposited.
    fn resolve(&self, st: &mut Progress) -> Result<bool> {
        let deposited = st.pending.iter().filter(|p| p.is_some()).count();
        if deposited == 0 {
            return Ok(false);
        }
        if deposited < self.items {
            let missing = st.pending.iter().position(Option::is_none).unwrap_or(0);
            return Err(self.error(format!(
                "item {missing} did not reach collective #{} over axis \"{}\" that the other \
                 items reached",
                st.resolved.len(),
                self.axis_name
            )));
        }
        let r = self.reduce(st)?;
        st.resolved.push(r);
        Ok(true)
    }

    /// The reduction of the deposited operands, in item order.
    fn reduce(&self, st: &mut Progress) -> Result<Resolved> {
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

    fn error(&self, message: String) -> Error {
        Error::Lift {
            path: self.path.clone(),
            transform: self.transform,
            message,
        }
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
        let Some(ctx) = ctx.or_else(|| bound_axis(axis_name)) else {
            return Err(Error::Lift {
                path: self.path_text(),
                transform: "vmap",
                message: format!(
                    "unbound axis name \"{axis_name}\": no enclosing Vmap or shard_map has it"
                ),
            });
        };
        ctx.shared.collective(ctx.item, reduce, x)
    }
}
