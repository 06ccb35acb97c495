//! Collectives over a named mapped axis (`jax.lax.pmean` / `psum` inside
//! `vmap(axis_name=...)`).
//!
//! flaxen's `vmap` runs its items one after another, so an item that asks
//! for the mean over all items cannot get it at once. The items are run in
//! rounds instead: in a round, each item runs until its next unresolved
//! collective, deposits its operand and stops; the driver then reduces the
//! operands (in item order) and starts the next round, in which that
//! collective returns the result. Runs are deterministic, so a rerun
//! computes the same values — and, under `grad`, the reduced value is built
//! from the recorded operands, so gradients flow into every item.

use std::cell::RefCell;
use std::rc::Rc;

use crate::core::error::{Error, Result};
use crate::core::scope::Scope;
use crate::tensor::Tensor;

/// A computation over the items' operands stacked along a new leading
/// axis: returns batched results (leading axis: the items) and results
/// shared by every item.
pub type BatchedFn = Rc<dyn Fn(&[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>)>>;

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

/// A resolved collective: one tensor for every item, or batched results
/// (each item takes its slice) and shared ones.
#[derive(Clone, Debug)]
pub(crate) enum Resolved {
    Shared(Tensor),
    Batched(Vec<Tensor>, Vec<Tensor>),
}

/// The rounds of one `vmap` with an axis name.
#[derive(Debug)]
pub(crate) struct Collectives {
    pub(crate) axis_name: String,
    pub(crate) items: usize,
    /// Results of the collectives resolved so far, in call order.
    pub(crate) resolved: Vec<Resolved>,
    /// Operands deposited in this round, per item, with the reduction.
    pub(crate) pending: Vec<Option<(Reduce, Vec<Tensor>)>>,
}

/// An item's handle: the shared rounds, the item's index, and how many
/// collectives this run has passed.
#[derive(Clone, Debug)]
pub(crate) struct AxisContext {
    pub(crate) shared: Rc<RefCell<Collectives>>,
    pub(crate) item: usize,
    pub(crate) calls: Rc<RefCell<usize>>,
}

/// The signal an item returns when it stops at an unresolved collective.
pub(crate) const PENDING: &str = "collective pending";

impl Collectives {
    /// Reduces this round's operands into the next resolved result; every
    /// item must have stopped at the same collective with the same shape.
    pub(crate) fn resolve(&mut self, path: &str) -> Result<()> {
        let mut parts: Vec<Vec<Tensor>> = Vec::with_capacity(self.items);
        let mut op = None;
        for (i, p) in self.pending.iter_mut().enumerate() {
            let Some((reduce, x)) = p.take() else {
                return Err(Error::Lift {
                    path: path.to_string(),
                    transform: "vmap",
                    message: format!(
                        "item {i} did not reach collective #{} over axis \"{}\" that the other \
                         items reached",
                        self.resolved.len(),
                        self.axis_name
                    ),
                });
            };
            op = Some(reduce);
            parts.push(x);
        }
        if let Some(Reduce::Batched(f)) = &op {
            let stacked = (0..parts.first().map_or(0, Vec::len))
                .map(|k| {
                    let column: Vec<Tensor> = parts.iter().map(|p| p[k].clone()).collect();
                    Tensor::stack(&column, 0)
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let (batched, shared) = f(&stacked)?;
            self.resolved.push(Resolved::Batched(batched, shared));
            return Ok(());
        }
        let parts: Vec<Tensor> = parts.into_iter().map(|mut p| p.remove(0)).collect();
        let stacked = Tensor::stack(&parts, 0)?;
        let reduced = match op {
            // `pmean` is a sum divided by the axis size. Run eagerly, XLA
            // multiplies by the f32 reciprocal of the constant; under
            // `jax.grad` the size reaches the kernel as an argument and the
            // division is a true one (as for Dropout's `x / keep_prob`).
            Some(Reduce::Mean) if stacked.is_traced() => stacked
                .sum(&[0], false)?
                .div(&Tensor::scalar(self.items as f32))?,
            Some(Reduce::Mean) => stacked.mean(&[0], false)?,
            _ => stacked.sum(&[0], false)?,
        };
        self.resolved.push(Resolved::Shared(reduced));
        Ok(())
    }
}

impl Scope<'_> {
    /// The mean of `x` over the items of the enclosing `Vmap` whose axis is
    /// named `axis_name` (`jax.lax.pmean`).
    pub fn pmean(&self, axis_name: &str, x: &Tensor) -> Result<Tensor> {
        self.collective(axis_name, x, Reduce::Mean)
    }

    /// The sum of `x` over the items of the enclosing `Vmap` whose axis is
    /// named `axis_name` (`jax.lax.psum`).
    pub fn psum(&self, axis_name: &str, x: &Tensor) -> Result<Tensor> {
        self.collective(axis_name, x, Reduce::Sum)
    }

    fn collective(&self, axis_name: &str, x: &Tensor, reduce: Reduce) -> Result<Tensor> {
        match self.collective_parts(axis_name, std::slice::from_ref(x), reduce)? {
            Resolved::Shared(t) => Ok(t),
            Resolved::Batched(..) => unreachable!("a reduction resolves to one tensor"),
        }
    }

    /// Runs `f` once on the operands of all the items of the enclosing
    /// `Vmap` whose axis is named `axis_name`, each operand stacked along a
    /// new leading axis, as JAX runs a batched computation; returns this
    /// item's slice of every batched result of `f`, then its shared
    /// results. Reductions over the items inside `f` (and, under `grad`,
    /// the sums of their cotangents) are then single operations over the
    /// stacked axis, rounding as JAX's batched ones do.
    pub fn batched_collective(
        &self,
        axis_name: &str,
        operands: &[Tensor],
        f: BatchedFn,
    ) -> Result<Vec<Tensor>> {
        let item = self
            .state()
            .borrow()
            .axes
            .iter()
            .rev()
            .find(|c| c.shared.borrow().axis_name == axis_name)
            .map(|c| c.item);
        match self.collective_parts(axis_name, operands, Reduce::Batched(f))? {
            Resolved::Batched(batched, shared) => {
                let item = item.expect("the axis is bound");
                let mut out = batched
                    .iter()
                    .map(|t| t.index_axis(0, item))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                out.extend(shared);
                Ok(out)
            }
            Resolved::Shared(_) => unreachable!("a batched collective resolves to parts"),
        }
    }

    fn collective_parts(&self, axis_name: &str, x: &[Tensor], reduce: Reduce) -> Result<Resolved> {
        let ctx = self
            .state()
            .borrow()
            .axes
            .iter()
            .rev()
            .find(|c| c.shared.borrow().axis_name == axis_name)
            .cloned();
        let Some(ctx) = ctx else {
            return Err(Error::Lift {
                path: self.path_text(),
                transform: "vmap",
                message: format!("unbound axis name \"{axis_name}\": no enclosing Vmap has it"),
            });
        };
        let k = {
            let mut calls = ctx.calls.borrow_mut();
            *calls += 1;
            *calls - 1
        };
        let mut shared = ctx.shared.borrow_mut();
        if let Some(done) = shared.resolved.get(k) {
            return Ok(done.clone());
        }
        shared.pending[ctx.item] = Some((reduce, x.to_vec()));
        Err(Error::Lift {
            path: self.path_text(),
            transform: "vmap",
            message: PENDING.to_string(),
        })
    }
}

/// Whether `e` is the signal of an item stopped at a collective.
pub(crate) fn is_pending(e: &Error) -> bool {
    matches!(e, Error::Lift { message, .. } if message == PENDING)
}
