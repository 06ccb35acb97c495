//! Cotangents that XLA computes as one array times a scalar constant and
//! fuses, unrounded, into the bias gradients they reach.
//!
//! In a compiled region, the cotangent of a full mean (or sum) of a
//! square reaching the square's input `x` is `x * c`, one scalar `c`
//! (`2 / n`: XLA's simplifier folds the mean's `1 / n` into the square's
//! `2`). Additions and subtractions pass it on unchanged (or negated);
//! where it reaches a bias broadcast along the rows, XLA duplicates the
//! cheap multiply into the reduction of the bias gradient, whose add LLVM
//! contracts with it: each row adds `fma(x, c, acc)`
//! ([`crate::xla::scaled_columns`]). Everything else reading the
//! cotangent (the products of a kernel's gradient) reads it rounded, as
//! before. Checked against jaxlib 0.10.2's optimized HLO and
//! `tests/jit_step.rs` (mean squared errors).
//!
//! The backward pass (`backprop`) and a compiled step's replay (`jit`)
//! both decide with the rules here, so the traced call and its replays
//! give the same bits. A scaled cotangent is followed only while it is
//! its node's only cotangent.

use std::collections::{HashMap, HashSet};

use ndarray::{ArcArray, IxDyn};

use super::tape::OpKind;
use super::unary_fn::UnaryFn;

/// Whether `kind` sums all of its input (a mean too): its input's
/// cotangent is one scalar broadcast.
pub(crate) fn is_full_sum(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::SumAll | OpKind::MeanAll | OpKind::ProductSum { .. }
    )
}

/// Whether `kind` is a square recorded in a compiled region.
pub(crate) fn is_compiled_square(kind: OpKind) -> bool {
    kind == OpKind::Unary(UnaryFn::Square, true)
}

/// The scale of a square's input cotangent, `x * c`, from the square's
/// own (uniform) cotangent `g`: JAX's rule `g * (2 x)`, whose doubling is
/// exact.
pub(crate) fn square_scale(g: f32) -> f32 {
    2.0 * g
}

/// How an operation passes a scaled cotangent to its input `k`: the
/// factor (`1` or `-1`) its scale is multiplied by, or `None` if it does
/// not pass it on unchanged (only `+` and `-` do).
pub(crate) fn passed_sign(kind: OpKind, k: usize) -> Option<f32> {
    match (kind, k) {
        (OpKind::Add, _) | (OpKind::Sub, 0) => Some(1.0),
        (OpKind::Sub, 1) => Some(-1.0),
        _ => None,
    }
}

/// Whether an operand of `shape` of a sum with output `out` is a bias
/// broadcast along the rows of a matrix: `[n]` or `[1, n]` with `out`
/// `[rows, n]`. Its cotangent is then the output's summed down the
/// columns.
pub(crate) fn is_row_bias(shape: &[usize], out: &[usize]) -> bool {
    match (shape, out) {
        ([n], [_, m]) | ([1, n], [_, m]) => n == m,
        _ => false,
    }
}

/// The scaled cotangents of one backward pass (see the module's docs), by
/// node.
#[derive(Default)]
pub(crate) struct Scaled {
    /// Nodes whose cotangent is `x * c`: `x` and `c`.
    factors: HashMap<usize, (ArcArray<f32, IxDyn>, f32)>,
    /// Compiled squares whose only cotangent (so far) is a full sum's.
    uniform: HashSet<usize>,
}

impl Scaled {
    /// Forgets what node `id` held: another cotangent reaches it.
    pub(crate) fn forget(&mut self, id: usize) {
        if !self.factors.is_empty() {
            self.factors.remove(&id);
        }
        if !self.uniform.is_empty() {
            self.uniform.remove(&id);
        }
    }

    /// Takes node `id`'s scaled cotangent, if it has one.
    pub(crate) fn take(&mut self, id: usize) -> Option<(ArcArray<f32, IxDyn>, f32)> {
        (!self.factors.is_empty())
            .then(|| self.factors.remove(&id))
            .flatten()
    }

    /// Takes whether node `id` is a square whose cotangent is uniform.
    pub(crate) fn take_uniform(&mut self, id: usize) -> bool {
        !self.uniform.is_empty() && self.uniform.remove(&id)
    }

    /// Records that node `id`'s first cotangent is `x * c`.
    pub(crate) fn keep(&mut self, id: usize, x: ArcArray<f32, IxDyn>, c: f32) {
        self.factors.insert(id, (x, c));
    }

    /// Records that square `id`'s first cotangent is a full sum's.
    pub(crate) fn mark_uniform(&mut self, id: usize) {
        self.uniform.insert(id);
    }
}

/// A bias gradient that a compiled step's replay sums with its scaled
/// cotangent's products fused in: the cotangent is `x * c`, `x` the value
/// of node `x` and `c = sign * square_scale(g)`, `g` the (uniform)
/// cotangent of square `square`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FusedBias {
    pub(crate) x: usize,
    pub(crate) square: usize,
    pub(crate) sign: f32,
}

/// One cotangent of a planned backward pass: node `id`'s carried to its
/// input `input`, node `target`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlannedEdge {
    pub(crate) id: usize,
    pub(crate) input: usize,
    pub(crate) target: usize,
}

/// What the planner knows of an operation node: its kind, its output
/// shape and its inputs' shapes.
pub(crate) type NodeView<'a> = (OpKind, &'a [usize], &'a [Vec<usize>]);

/// For each of `edges` (the backward pass in its order), the fused bias
/// sum it computes, if any: the decisions the backward pass makes as it
/// goes, made from the plan (`node(i)`: an operation's view, `None` for a
/// leaf). A node keeps a scaled cotangent only when it is the only
/// cotangent reaching it, as the backward pass finds out.
pub(crate) fn plan_fused_biases<'a>(
    edges: &[PlannedEdge],
    node: impl Fn(usize) -> Option<NodeView<'a>>,
) -> Vec<Option<FusedBias>> {
    let mut reaching: HashMap<usize, usize> = HashMap::new();
    for e in edges {
        *reaching.entry(e.target).or_default() += 1;
    }
    let only = |t: usize| reaching.get(&t) == Some(&1);
    let mut uniform: HashSet<usize> = HashSet::new();
    let mut factors: HashMap<usize, (usize, usize, f32)> = HashMap::new();
    let mut out = Vec::with_capacity(edges.len());
    for e in edges {
        let mut fused = None;
        if let Some((kind, shape, in_shapes)) = node(e.id) {
            let target = node(e.target);
            let same_len = |a: &[usize], b: &[usize]| {
                a.iter().product::<usize>() == b.iter().product::<usize>()
            };
            if is_full_sum(kind)
                && target.is_some_and(|t| is_compiled_square(t.0))
                && only(e.target)
            {
                uniform.insert(e.target);
            }
            if uniform.contains(&e.id) && only(e.target) {
                factors.insert(e.target, (e.target, e.id, 1.0));
            }
            if let (Some(&(x, square, sign)), Some(s)) =
                (factors.get(&e.id), passed_sign(kind, e.input))
            {
                let operand = &in_shapes[e.input];
                if is_row_bias(operand, shape) {
                    fused = Some(FusedBias {
                        x,
                        square,
                        sign: sign * s,
                    });
                } else if only(e.target) && same_len(operand, shape) {
                    factors.insert(e.target, (x, square, sign * s));
                }
            }
        }
        out.push(fused);
    }
    out
}
