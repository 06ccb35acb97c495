//! Compiled forward programs: `jax.jit(f)` for a function of tensors and
//! PRNG keys that returns tensors (behind [`nn::Jit`](crate::nn::Jit)).
//!
//! [`trace_forward`] runs `f` once on traced copies of its arguments,
//! with the keys as key arguments (random draws from keys `make_rng`
//! derives from them are recorded, see [`super::sampled`]), and plans the
//! replay of the recorded operations with the kernels of
//! [`jit_value_and_grad`](super::jit_value_and_grad), forward only.
//! [`ForwardProgram::run`] replays it on new arguments of the same shapes,
//! drawing again from the new keys: the same kernels in the same order as
//! the traced run, so the same bits.

use std::sync::Arc;

use super::compiled::ForwardJit;
use super::error::TensorError;
use super::grad::trace_on;
use super::jit::{off_tape, on_tape, Out, Plan};
use super::tape::{OpKind, Tape};
use super::{Tensor, Tree};
use crate::random::Key;

/// A traced function, replayable on arguments of the traced shapes.
pub(crate) struct ForwardProgram {
    /// The replay of the operations (`None`: every output is an argument
    /// or a constant).
    plan: Option<Plan>,
    shapes: Vec<Vec<usize>>,
    keys: usize,
    outputs: Vec<Out>,
}

/// Why a trace gives no program.
pub(crate) enum Unplanned {
    /// The replay cannot repeat the function; the traced run's outputs
    /// are right.
    Eager(String),
    /// The function mixed its arguments with values traced by an enclosing
    /// differentiation: the traced run's outputs lost that tracing, so the
    /// caller must run the function again without tracing.
    Rerun(String),
}

/// A trace's result: `f`'s own result, its output tensors (detached from
/// the trace), and the program or why there is none.
pub(crate) type Traced<T> = (T, Vec<Tensor>, Result<ForwardProgram, Unplanned>);

/// Runs `f` on traced copies of `args` with `keys` as key arguments, and
/// plans its replay. `f` returns a value of its own and its output tensors.
pub(crate) fn trace_forward<T>(
    args: &[Tensor],
    keys: &[Key],
    f: impl FnOnce(&[Tensor]) -> crate::Result<(T, Vec<Tensor>)>,
) -> crate::Result<Traced<T>> {
    let tape = Tape::new();
    let _traced = ForwardJit::traced_on(tape.id);
    let entries = args
        .iter()
        .enumerate()
        .map(|(i, t)| (i.to_string(), Tree::leaf(t.clone())));
    let arg_tree = Tree::from_entries(entries);
    let (traced, _) = trace_on(&tape, &arg_tree);
    let (result, rngs) = super::sampled::tracing(&tape, keys, || f(traced.leaves()));
    tape.close();
    let (value, outs) = result?;
    let program = if tape.is_nested() || outs.iter().any(|t| on_other_tape(t, &tape)) {
        Err(Unplanned::Rerun(
            "the function reads values traced by an enclosing transform".into(),
        ))
    } else if tape.was_read() {
        Err(Unplanned::Eager(
            "the function reads traced values (a value-dependent branch)".into(),
        ))
    } else if !rngs.replayable() {
        Err(Unplanned::Eager(
            "the function uses keys from make_rng other than through Tensor::sampled, or \
             draws from keys it did not get from make_rng"
                .into(),
        ))
    } else {
        plan(&tape, &arg_tree, &outs, rngs.samplers, keys.len())
    };
    let detached = outs.iter().map(|t| off_tape(t, &tape)).collect();
    Ok((value, detached, program))
}

fn on_other_tape(t: &Tensor, tape: &Arc<Tape>) -> bool {
    t.tracer.is_some() && !on_tape(t, tape)
}

/// The program of a closed trace whose outputs are `outs`.
fn plan(
    tape: &Arc<Tape>,
    args: &Tree,
    outs: &[Tensor],
    samplers: Vec<super::sampled::Sampler>,
    keys: usize,
) -> Result<ForwardProgram, Unplanned> {
    let n = args.leaves().len();
    // No output is on another tape (checked by the caller).
    let outputs: Vec<Out> = outs
        .iter()
        .map(|t| Out::of(t, tape, n).expect("on this tape or none"))
        .collect();
    // The last operation any output needs ends the replay.
    let root = outs
        .iter()
        .zip(&outputs)
        .filter(|(_, o)| matches!(o, Out::Node(..)))
        .max_by_key(|(_, o)| match o {
            Out::Node(id, _) => *id,
            _ => 0,
        })
        .map(|(t, _)| t);
    if let Some(root) = root.and_then(|t| t.tracer.as_ref()).map(|tr| tr.node) {
        let nodes = tape.nodes();
        if let Some(node) = nodes[n..=root].iter().find(|nd| nd.kind == OpKind::Other) {
            return Err(Unplanned::Eager(format!(
                "the operation at {}:{} cannot be replayed",
                node.site.file(),
                node.site.line()
            )));
        }
    }
    // The nodes the program returns: read from the plan, so never turned
    // into byte masks.
    let read: Vec<usize> = outputs.iter().filter_map(Out::node).collect();
    let plan = match root {
        Some(root) => Some(
            Plan::forward_only(tape, root, args, samplers, keys, &read)
                .map_err(|e: TensorError| Unplanned::Eager(e.to_string()))?,
        ),
        None => None,
    };
    Ok(ForwardProgram {
        plan,
        shapes: args.leaves().iter().map(|t| t.shape().to_vec()).collect(),
        keys,
        outputs,
    })
}

impl ForwardProgram {
    /// Replays the program on `args` (of the traced shapes) with `keys`.
    pub(crate) fn run(&mut self, args: &[Tensor], keys: &[Key]) -> crate::Result<Vec<Tensor>> {
        let fits = args.len() == self.shapes.len()
            && keys.len() == self.keys
            && args
                .iter()
                .zip(&self.shapes)
                .all(|(a, s)| a.shape() == &s[..]);
        if !fits {
            // The callers key programs by shapes; a mismatch is a bug, not
            // a reason to compute wrong numbers.
            return Err(TensorError::Argument {
                op: "jit",
                message: "arguments of other shapes than the program was traced with".into(),
            }
            .into());
        }
        if let Some(plan) = &mut self.plan {
            plan.run_forward(args, keys)?;
        }
        let plan = self.plan.as_ref();
        Ok(self
            .outputs
            .iter()
            .map(|o| o.value(|id| plan.expect("planned").value(id), |i| &args[i]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random;

    /// `where(keep_mask(key), 2x, 0)` traced once, then replayed with other
    /// keys: the eager bits; the mask is drawn as bytes unless the program
    /// returns it (then its floats are read).
    #[test]
    fn forward_programs_draw_dropout_masks_as_bytes() {
        let x = Tensor::from_array(random::normal(random::key(3), &[40, 300]).unwrap());
        let f = |x: &Tensor, key: &Key, return_mask: bool| -> crate::Result<Vec<Tensor>> {
            let mask = Tensor::sampled_keep_mask(key, 0.7, x.shape())?;
            let y = Tensor::select(&mask, &x.mul(&Tensor::scalar(2.0))?, &Tensor::zeros(&[]))?;
            Ok(if return_mask { vec![mask, y] } else { vec![y] })
        };
        let bits = |t: &Tensor| t.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for return_mask in [false, true] {
            let first = [random::key(0)];
            let (_, _, program) = trace_forward(std::slice::from_ref(&x), &first, |args| {
                Ok(((), f(&args[0], &first[0], return_mask)?))
            })
            .unwrap();
            let Ok(mut program) = program else {
                panic!("planned")
            };
            let masks = program.plan.as_ref().map_or(0, |p| p.byte_mask_count());
            assert_eq!(masks, usize::from(!return_mask), "byte masks");
            for t in 1..4 {
                let keys = [random::fold_in(random::key(5), t)];
                let got = program.run(std::slice::from_ref(&x), &keys).unwrap();
                let want = f(&x, &keys[0], return_mask).unwrap();
                assert_eq!(got.len(), want.len());
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(bits(g), bits(w), "call {t}, mask returned: {return_mask}");
                }
            }
        }
    }
}
