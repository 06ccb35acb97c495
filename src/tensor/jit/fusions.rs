//! Which cotangents of a replayed backward pass are fused into their
//! accumulation, decided when planned: the trace's backward pass
//! (`tensor::backprop`) fuses an outer product (`FusedOuter`) or a compiled
//! sigmoid's product cotangent carried through additions
//! (`ProductCotangents`) into a cotangent already held, with one rounding
//! per element. Which ones it fuses depends only on the graph and on which
//! nodes hold a cotangent when, both fixed for a plan, so the replay
//! repeats the trace's choices without deciding anything per call.

use super::{unsupported, Edge, Result, Step};
use crate::tensor::ops::unary::sigmoid_slope;
use crate::tensor::tape::OpKind;
use crate::tensor::unary_fn::UnaryFn;

/// How an edge's cotangent reaches its target in the replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fusion {
    /// Computed by the step's rule, then written or added.
    Plain,
    /// A matrix product's outer-product cotangent (see `FusedOuter`),
    /// added as `fma(u_i, w_j, acc)`.
    Outer,
    /// The cotangent of the compiled sigmoid at this node carried unrounded
    /// through additions (see `ProductCotangents`), added as
    /// `fma(g, s (1 - s), acc)` with `g` the sigmoid's output cotangent
    /// and `s` its output, elementwise in row-major order.
    Sigmoid(usize),
}

/// Sets [`Edge::fusion`] of `edges` (in the replay's order, each node's
/// edges together, inputs in order) as the trace's backward pass fused
/// them; `shapes` holds every node's shape, the first `leaves` nodes being
/// leaves. Fails when a step keeps product cotangents whose factors the
/// replay cannot compute.
///
/// Mirrors `backprop::backward_seeded`: a node's fusions are decided from
/// which nodes held a cotangent before its own were added (an outer product
/// or a carried product is fused only into one held already), and a node's
/// cotangent stays one product only while it is the first and only one to
/// reach it.
pub(super) fn plan_fusions(
    edges: &mut [Edge],
    steps: &[Step],
    shapes: &[Vec<usize>],
    leaves: usize,
) -> Result<()> {
    let size = |i: usize| shapes[i].iter().product::<usize>();
    let is_add = |i: usize| i >= leaves && steps[i - leaves].kind == OpKind::Add;
    let mut held = vec![false; shapes.len()];
    // Per node: the compiled sigmoid whose product (output cotangent times
    // slope) the node's cotangent still is, unrounded.
    let mut kept: Vec<Option<usize>> = vec![None; shapes.len()];
    let mut start = 0;
    while start < edges.len() {
        let id = edges[start].id;
        let end = start + edges[start..].iter().take_while(|e| e.id == id).count();
        let step = &steps[id - leaves];
        if step.products && !matches!(step.kind, OpKind::Unary(UnaryFn::Sigmoid, true)) {
            return Err(unsupported(format!(
                "{:?} keeps its cotangents as products",
                step.kind
            )));
        }
        let product = kept[id].take().filter(|_| step.kind == OpKind::Add);
        let group = &mut edges[start..end];
        for e in group.iter_mut() {
            e.fusion = if step.fused_outer == Some(e.input) && held[e.target] {
                kept[e.target] = None;
                Fusion::Outer
            } else {
                Fusion::Plain
            };
        }
        // The products each plain edge carries on (by position in the
        // group): an addition passes its own on, a sigmoid offers its own.
        let mut carried: [Option<usize>; super::MAX_INPUTS] = [None; super::MAX_INPUTS];
        if product.is_some() || step.products {
            for (k, e) in group.iter_mut().enumerate() {
                let t = e.target;
                if e.fusion != Fusion::Plain || k >= carried.len() {
                    continue;
                }
                match (product, held[t]) {
                    (Some(s), true) if size(t) == size(s) => {
                        e.fusion = Fusion::Sigmoid(s);
                        kept[t] = None;
                    }
                    (Some(s), false) if is_add(t) => carried[k] = Some(s),
                    (None, false) if is_add(t) => carried[k] = Some(id),
                    _ => {}
                }
            }
        }
        for (k, e) in group.iter().enumerate() {
            if e.fusion != Fusion::Plain {
                continue;
            }
            let first = !held[e.target];
            held[e.target] = true;
            kept[e.target] = match carried.get(k).copied().flatten() {
                Some(s) if first && size(e.target) == size(s) => Some(s),
                _ => None,
            };
        }
        start = end;
    }
    Ok(())
}

/// `acc = fma(g, s (1 - s), acc)` elementwise: a compiled sigmoid's
/// cotangent (output cotangent `g`, output `s`) fused into the cotangent
/// `acc` already holds, as `backprop`'s `fused_add` adds it. (Not
/// inlined: rare, and kept out of the replay loop's registers.)
#[inline(never)]
pub(super) fn add_sigmoid_product(acc: &mut [f32], g: &[f32], s: &[f32]) {
    for ((a, &g), &s) in acc.iter_mut().zip(g).zip(s) {
        *a = g.mul_add(sigmoid_slope(s), *a);
    }
}
