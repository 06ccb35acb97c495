//! `RNN` (`flax.linen.RNN`): a recurrent cell applied along the time axis.

use ndarray::{ArrayD, IxDyn};

use crate::core::{Result, Scope};
use crate::random::{self, Key};
use crate::tensor::{Tensor, Tensors, XlaOrigin};

use super::module::{config_error, Module};
use super::recurrent::{GRUCell, LSTMCell};

/// A recurrent cell that [`RNN`] can run: a module from `(carry, x)` to
/// `(carry, y)`, with Flax's `initialize_carry`.
pub trait RecurrentCell:
    Module<Input = (Self::Carry, Tensor), Output = (Self::Carry, Tensor)>
{
    /// The state carried from step to step.
    type Carry: Clone + Tensors;

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
/// use flaxen::nn::{LSTMCell, Module, RnnInput, RNN};
/// use flaxen::{random, tensor::Tensor};
///
/// let rnn = RNN::new(LSTMCell::new(4));
/// let x = Tensor::ones(&[2, 7, 3]); // [batch, time, features]
/// let v = rnn.init(random::key(0), x.clone().into())?;
/// assert!(v.tensor("params/cell/ii/kernel").is_some());
/// let (_, y) = rnn.apply(&v, x.clone().into(), ())?;
/// assert_eq!(y.shape(), &[2, 7, 4]);
/// // Padded sequences: the first is 7 steps long, the second 3; the final
/// // carry is each sequence's own last one.
/// let ((c, h), y) = rnn.apply(&v, RnnInput::new(x).seq_lengths(&[7, 3]), ())?;
/// assert_eq!(h.shape(), &[2, 4]);
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

/// What [`RNN`] takes: the inputs, and optionally the initial carry and
/// the length of each sequence (Flax's `initial_carry` and `seq_lengths`
/// arguments). A tensor converts into one with neither.
#[derive(Clone, Debug)]
pub struct RnnInput<Carry> {
    /// `[batch…, time, features]` (time first with `time_major`).
    pub inputs: Tensor,
    /// The carry before the first step (default: the cell's
    /// `initialize_carry` with `key(0)`).
    pub initial_carry: Option<Carry>,
    /// Per sequence (the batch axes, row-major), how many steps are real;
    /// the rest are padding.
    pub seq_lengths: Option<Vec<usize>>,
}

impl<Carry> RnnInput<Carry> {
    /// `inputs` with no initial carry and no lengths.
    pub fn new(inputs: Tensor) -> Self {
        RnnInput {
            inputs,
            initial_carry: None,
            seq_lengths: None,
        }
    }

    /// Sets the initial carry.
    pub fn initial_carry(mut self, carry: Carry) -> Self {
        self.initial_carry = Some(carry);
        self
    }

    /// Sets the sequences' lengths.
    pub fn seq_lengths(mut self, lengths: &[usize]) -> Self {
        self.seq_lengths = Some(lengths.to_vec());
        self
    }
}

impl<Carry> From<Tensor> for RnnInput<Carry> {
    fn from(inputs: Tensor) -> Self {
        RnnInput::new(inputs)
    }
}

/// Flax's `flip_sequences`: each sequence's first `length` steps reversed,
/// its padding reversed after them (`(T - 1 - t + length) mod T`), along
/// `axis`; the batch axes are `batch` (row-major, `lengths` one per
/// sequence).
fn flip_sequences(x: &Tensor, axis: usize, time_major: bool, lengths: &[usize]) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    let steps = shape[axis];
    let idx = ArrayD::from_shape_fn(IxDyn(&shape), |i| {
        let t = i[axis];
        // The sequence: the batch axes' row-major index.
        let batch_axes: Vec<usize> = if time_major {
            (1..shape.len() - 1).collect()
        } else {
            (0..axis).collect()
        };
        let b = batch_axes.iter().fold(0, |acc, &d| acc * shape[d] + i[d]);
        ((steps - 1 - t + lengths[b]) % steps) as i32
    });
    Ok(x.take_along_axis(&idx, axis as isize)?)
}

impl<C: RecurrentCell + Clone> Module for RNN<C> {
    /// The inputs and, optionally, the initial carry and sequence lengths.
    type Input = RnnInput<C::Carry>;
    /// The final carry and the outputs (Flax's `return_carry=True`; take
    /// `.1` for the outputs alone).
    type Output = (C::Carry, Tensor);

    fn call(&self, s: &Scope<'_>, input: Self::Input) -> Result<Self::Output> {
        let RnnInput {
            inputs: x,
            initial_carry: initial,
            seq_lengths,
        } = input;
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
        let batch: Vec<usize> = if self.time_major {
            x.shape()[1..x.ndim() - 1].to_vec()
        } else {
            x.shape()[..axis].to_vec()
        };
        if let Some(lengths) = &seq_lengths {
            let sequences: usize = batch.iter().product();
            if lengths.len() != sequences {
                return Err(config_error(
                    s,
                    format!(
                        "{} sequence lengths for inputs of shape {:?} ({sequences} sequences)",
                        lengths.len(),
                        x.shape()
                    ),
                ));
            }
            if let Some(&l) = lengths.iter().find(|&&l| l > steps) {
                return Err(config_error(
                    s,
                    format!("a sequence length of {l} for inputs of {steps} time steps"),
                ));
            }
            if batch.len() != 1 && steps > 0 {
                return Err(config_error(
                    s,
                    format!(
                        "sequence lengths need exactly one batch axis (inputs of shape {:?})",
                        x.shape()
                    ),
                ));
            }
        }
        let mut step_shape = x.shape().to_vec();
        step_shape.remove(axis);
        let mut carry = match initial {
            Some(c) => c,
            None => self.cell.initialize_carry(random::key(0), &step_shape)?,
        };
        let cell = s.child_named("cell", self.cell.clone())?;
        if steps == 0 {
            // lax.scan over no step still traces the body once (creating
            // the parameters at init) to know the outputs' shape.
            let (_, y) = cell.call((carry.clone(), Tensor::zeros(&step_shape)))?;
            let mut shape = y.shape().to_vec();
            shape.insert(axis, 0);
            return Ok((carry, Tensor::zeros(&shape)));
        }
        let flip = |t: &Tensor| -> Result<Tensor> {
            match &seq_lengths {
                Some(lengths) => flip_sequences(t, axis, self.time_major, lengths),
                None => {
                    let parts: Vec<Tensor> = (0..steps)
                        .rev()
                        .map(|i| t.index_axis(axis as isize, i))
                        .collect::<std::result::Result<_, _>>()?;
                    Ok(Tensor::stack(&parts, axis as isize)?)
                }
            }
        };
        let x = if self.reverse { flip(&x)? } else { x };
        let mut ys = Vec::with_capacity(steps);
        let mut carries: Vec<Vec<Tensor>> = Vec::new();
        // The cell's parameters are the scan's constants, whose cotangents
        // eager JAX accumulates from +0.
        carry = s.with_scan_consts("cell", || {
            // Flax runs the cell in `nn.scan`: one XLA computation, whose
            // fusions the cells reproduce inside a compiled region.
            let _compiled = crate::tensor::compiled::CompiledRegion::enter();
            for t in 0..steps {
                let (next, y) = cell.call((carry, x.index_axis(axis as isize, t)?))?;
                carry = next;
                if seq_lengths.is_some() {
                    carries.push(carry.tensors());
                }
                ys.push(y);
            }
            Ok(carry)
        })?;
        let mut y = Tensor::stack(&ys, axis as isize)?;
        let flipped = self.reverse && self.keep_order;
        if flipped {
            y = flip(&y)?;
        }
        // How XLA makes the outputs, for a sum fused with a product of
        // them: the step's operations themselves when the scan has one
        // step; else stacked with the steps first, the move of that axis a
        // layout change (measured without `keep_order`'s flip, whose
        // outputs XLA walks in their own order).
        if steps == 1 {
            y = y.with_origin(XlaOrigin::OneStepScan { axis });
        } else if axis != 0 && !flipped {
            y = y.with_origin(XlaOrigin::ScanOutputs { axis });
        }
        if let Some(lengths) = &seq_lengths {
            // Each sequence's carry after its last step (`length - 1`; a
            // length of 0 wraps to the last step, as Python's indexing).
            let last: Vec<usize> = lengths.iter().map(|&l| (l + steps - 1) % steps).collect();
            let leaves = (0..carries[0].len())
                .map(|k| {
                    let stacked = Tensor::stack(
                        &carries.iter().map(|c| c[k].clone()).collect::<Vec<_>>(),
                        0,
                    )?;
                    let mut shape = stacked.shape().to_vec();
                    shape[0] = 1;
                    let idx = ArrayD::from_shape_fn(IxDyn(&shape), |i| last[i[1]] as i32);
                    let picked = stacked.take_along_axis(&idx, 0)?;
                    Ok(picked.index_axis(0, 0)?)
                })
                .collect::<Result<Vec<Tensor>>>()?;
            carry = carry
                .rebuild(&mut leaves.into_iter())
                .expect("as many tensors as flattened");
        }
        Ok((carry, y))
    }
}
