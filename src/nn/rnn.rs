//! `RNN` (`flax.linen.RNN`): a recurrent cell applied along the time axis.

use crate::core::{Result, Scope};
use crate::random::{self, Key};
use crate::tensor::Tensor;

use super::module::{config_error, Module};
use super::recurrent::{GRUCell, LSTMCell};

/// A recurrent cell that [`RNN`] can run: a module from `(carry, x)` to
/// `(carry, y)`, with Flax's `initialize_carry`.
pub trait RecurrentCell:
    Module<Input = (Self::Carry, Tensor), Output = (Self::Carry, Tensor)>
{
    /// The state carried from step to step.
    type Carry: Clone;

    /// The initial carry for inputs of `input_shape` (one step's shape).
    fn initialize_carry(&self, key: Key, input_shape: &[usize]) -> Result<Self::Carry>;
}

impl RecurrentCell for LSTMCell {
    type Carry = (Tensor, Tensor);
    fn initialize_carry(&self, key: Key, input_shape: &[usize]) -> Result<(Tensor, Tensor)> {
        LSTMCell::initialize_carry(self, key, input_shape)
    }
}

impl RecurrentCell for GRUCell {
    type Carry = Tensor;
    fn initialize_carry(&self, key: Key, input_shape: &[usize]) -> Result<Tensor> {
        GRUCell::initialize_carry(self, key, input_shape)
    }
}

/// Flax's `nn.RNN(cell)`: the cell applied at every step of the time axis
/// of `[batch…, time, features]` inputs (the second-to-last axis; the
/// first with `time_major`), its parameters shared by all steps under the
/// name `cell`. The initial carry is the cell's `initialize_carry` with
/// `key(0)` unless given; `reverse` runs from the last step, `keep_order`
/// then flips the outputs back; `return_carry` also returns the final
/// carry.
///
/// ```
/// use flaxen::nn::{LSTMCell, Module, RNN};
/// use flaxen::{random, tensor::Tensor};
///
/// let rnn = RNN::new(LSTMCell::new(4));
/// let x = Tensor::ones(&[2, 7, 3]); // [batch, time, features]
/// let v = rnn.init(random::key(0), (x.clone(), None))?;
/// assert!(v.tensor("params/cell/ii/kernel").is_some());
/// let (_, y) = rnn.apply(&v, (x, None), ())?;
/// assert_eq!(y.shape(), &[2, 7, 4]);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RNN<C> {
    /// The cell.
    pub cell: C,
    /// Time is the first axis (default false: the one before the features).
    pub time_major: bool,
    /// Run from the last step to the first (default false).
    pub reverse: bool,
    /// With `reverse`, return the outputs in the input's order (default
    /// false).
    pub keep_order: bool,
}

impl<C: RecurrentCell + Clone> RNN<C> {
    /// The cell run along time, Flax's defaults otherwise.
    pub fn new(cell: C) -> RNN<C> {
        RNN {
            cell,
            time_major: false,
            reverse: false,
            keep_order: false,
        }
    }

    /// Sets `time_major`.
    pub fn time_major(mut self, on: bool) -> Self {
        self.time_major = on;
        self
    }

    /// Sets `reverse`.
    pub fn reverse(mut self, on: bool) -> Self {
        self.reverse = on;
        self
    }

    /// Sets `keep_order`.
    pub fn keep_order(mut self, on: bool) -> Self {
        self.keep_order = on;
        self
    }
}

impl<C: RecurrentCell + Clone> Module for RNN<C> {
    /// The inputs and, optionally, the initial carry.
    type Input = (Tensor, Option<C::Carry>);
    /// The final carry and the outputs (Flax's `return_carry=True`; take
    /// `.1` for the outputs alone).
    type Output = (C::Carry, Tensor);

    fn call(&self, s: &Scope<'_>, (x, initial): Self::Input) -> Result<Self::Output> {
        if x.ndim() < 2 {
            return Err(config_error(
                s,
                format!(
                    "RNN inputs of shape {:?} need a time axis and features",
                    x.shape()
                ),
            ));
        }
        let axis = if self.time_major { 0 } else { x.ndim() - 2 };
        let steps = x.shape()[axis];
        let mut carry = match initial {
            Some(c) => c,
            None => {
                let mut shape = x.shape().to_vec();
                shape.remove(axis);
                self.cell.initialize_carry(random::key(0), &shape)?
            }
        };
        let cell = s.child_named("cell", self.cell.clone())?;
        let order: Vec<usize> = if self.reverse {
            (0..steps).rev().collect()
        } else {
            (0..steps).collect()
        };
        let mut ys = Vec::with_capacity(steps);
        for t in order {
            let (next, y) = cell.call((carry, x.index_axis(axis as isize, t)?))?;
            carry = next;
            ys.push(y);
        }
        if self.reverse && self.keep_order {
            ys.reverse();
        }
        if ys.is_empty() {
            return Err(config_error(s, "RNN inputs have no time steps".into()));
        }
        Ok((carry, Tensor::stack(&ys, axis as isize)?))
    }
}
