//! The backward pass: a tape's nodes walked in reverse, each node's
//! cotangent handed to its backward rule and the results accumulated into
//! its inputs'; the cotangents of the items' views of a tensor shared by a
//! `vmap`'s items combined as JAX's batched transpose combines them.
//!
//! Kept apart from the tape, the data structure that every operation
//! records on, because combining items' cotangents computes products and
//! sums (`ops`), which themselves record on the tape.

use std::cell::Cell;
use std::collections::HashMap;

use ndarray::{ArrayD, Axis, IxDyn};
use smallvec::SmallVec;

use super::ops::matmul::matmul_raw;
use super::scaled_cotangents::{self as scaled_ct, Scaled};
use super::tape::{Backward, OpKind, Tape};
use super::Tensor;

/// A cotangent's two factors `(u, w)`, for `u * w` (see
/// `ProductCotangents`).
type Factors = (ArrayD<f32>, ArrayD<f32>);

/// A scaled cotangent `x * c`: `x` and `c` (see `scaled_cotangents`).
type ScaledFactors = (ndarray::ArcArray<f32, IxDyn>, f32);

/// One cotangent that reached an item's view.
enum Contribution {
    /// A plain cotangent, summed over the items by a reduction.
    Dense(ArrayD<f32>),
    /// The product `a^T @ b` (contraction over the rows of both), summed
    /// over the items by one product over their rows stacked in item
    /// order, as JAX's product over the folded axis; then given the shape
    /// (the view's). The flag: the shared tensor is the product's left
    /// operand (its cotangent is `g @ B^T`, `a` the items' `g^T`).
    Dot(ArrayD<f32>, ArrayD<f32>, Vec<usize>, bool),
}

/// Runs the backward pass from node `root` with output gradient `seed`;
/// returns the accumulated gradient of each node in `wanted`.
pub(crate) fn backward(
    tape: &Tape,
    root: usize,
    seed: ArrayD<f32>,
    wanted: &[usize],
) -> Vec<Option<ArrayD<f32>>> {
    backward_seeded(tape, root, [(root, seed)], wanted)
}

/// [`backward`] from several nodes at once, each with its output gradient
/// (seeds of the same node are added in order).
pub(crate) fn backward_from(
    tape: &Tape,
    seeds: Vec<(usize, ArrayD<f32>)>,
    wanted: &[usize],
) -> Vec<Option<ArrayD<f32>>> {
    let Some(root) = seeds.iter().map(|(r, _)| *r).max() else {
        return vec![None; wanted.len()];
    };
    backward_seeded(tape, root, seeds, wanted)
}

/// [`backward_from`] with the largest seeded node `root` known.
fn backward_seeded(
    tape: &Tape,
    root: usize,
    seeds: impl IntoIterator<Item = (usize, ArrayD<f32>)>,
    wanted: &[usize],
) -> Vec<Option<ArrayD<f32>>> {
    let nodes = tape.nodes();
    let mut grads = SPARE_GRADS.try_with(|s| s.take()).unwrap_or_default();
    grads.resize_with(root + 1, || None);
    for (r, seed) in seeds {
        accumulate(&mut grads[r], seed);
    }
    // Cotangents of items' views, per view in arrival order, and the views'
    // groups waiting for their other items.
    let mut views: HashMap<usize, Vec<Contribution>> = HashMap::new();
    let mut groups: HashMap<u64, Vec<Option<Vec<Contribution>>>> = HashMap::new();
    // Deferred product cotangents (see `DeferredProduct`), by input node.
    let mut pending: HashMap<usize, (ArrayD<f32>, ArrayD<f32>)> = HashMap::new();
    // The factors of cotangents that are still one product on their way to
    // an accumulation (see `ProductCotangents`), by node.
    let mut kept: HashMap<usize, Factors> = HashMap::new();
    // Cotangents that are one array times a scalar, on their way to a
    // bias (see `scaled_cotangents`).
    let mut scaled = Scaled::default();
    let is_view = |i: usize| nodes[i].view().is_some();
    // Scaled cotangents start only at a compiled square: an eager tape
    // skips their bookkeeping (a small eager step's backward pass is
    // short, and it cost 5% of it).
    let scaling = nodes.iter().any(|n| scaled_ct::is_compiled_square(n.kind));
    // Inputs always have smaller ids than the nodes using them, so walking
    // ids downwards visits a node only after all its uses.
    for id in (0..=root).rev() {
        // (Emptiness first: most passes defer nothing, and every eager
        // step would pay for hashing a key per node.)
        if let Some((u, w)) = (!pending.is_empty()).then(|| pending.remove(&id)).flatten() {
            // No other cotangent followed the product: rounded alone.
            forget(&mut kept, &mut scaled, &grads[id], id);
            accumulate(&mut grads[id], u * w);
        }
        let node = &nodes[id];
        if let Some(view) = node.view() {
            let list = views.remove(&id).unwrap_or_default();
            let items = groups
                .entry(view.group.id)
                .or_insert_with(|| (0..view.group.items).map(|_| None).collect());
            items[view.item] = Some(list);
            if items.iter().all(Option::is_some) {
                let items = groups.remove(&view.group.id).expect("present");
                let lists = items.into_iter().map(Option::unwrap).collect();
                if let (Some(input), Some(total)) = (node.inputs[0], combine_items(lists)) {
                    forget(&mut kept, &mut scaled, &grads[input], input);
                    add_cotangent(&mut grads[input], &mut pending, input, total);
                }
            }
            continue;
        }
        let Some(backward) = &node.backward else {
            continue;
        };
        let Some(g) = grads[id].take() else {
            continue;
        };
        // (Kept only for additions: see below.)
        let product = (!kept.is_empty()).then(|| kept.remove(&id)).flatten();
        // A square whose only cotangent is a full sum's hands its input
        // the scaled cotangent `x * 2g`.
        let square_scale = match backward {
            Backward::Unary(rule) if scaling && scaled.take_uniform(id) => g
                .first()
                .map(|&g| (rule.x.clone(), scaled_ct::square_scale(g))),
            _ => None,
        };
        let scaled_here = scaled.take(id);
        // One or two inputs written in place (see `Tensor::record_node`).
        let mut needs: SmallVec<[bool; 4]> = match node.inputs.as_slice() {
            [a] => SmallVec::from_buf_and_len([a.is_some(), false, false, false], 1),
            [a, b] => SmallVec::from_buf_and_len([a.is_some(), b.is_some(), false, false], 2),
            inputs => inputs.iter().map(|i| i.is_some()).collect(),
        };
        if let Some(dot) = node.dot() {
            for (k, input) in node.inputs.iter().enumerate() {
                if let Some(i) = input.filter(|&i| is_view(i)) {
                    let (a, b, shape) = dot(&g, k);
                    views
                        .entry(i)
                        .or_default()
                        .push(Contribution::Dot(a, b, shape, k == 0));
                    needs[k] = false;
                }
            }
        }
        if let Some(f) = node.fused() {
            // Only an accumulation is fused: a first cotangent is the plain
            // product, which the regular rule computes.
            if let Some(Some(acc)) = node.inputs[f.input].map(|i| grads[i].as_mut()) {
                let (u, w) = (f.factors)(&g);
                accumulate_outer(acc, &u, &w);
                needs[f.input] = false;
                if let Some(i) = node.inputs[f.input] {
                    kept.remove(&i);
                    scaled.forget(i);
                }
            }
        }
        if let Some(d) = node.deferred() {
            if let Some(input) = node.inputs[d.input] {
                let first = grads[input].is_none() && !pending.contains_key(&input);
                if needs[d.input] && first && !is_view(input) {
                    pending.insert(input, (d.factors)(&g));
                    needs[d.input] = false;
                }
            }
        }
        // Products carried on: an addition passes its own on; an operation
        // that keeps its cotangents as products offers them for additions.
        let mut carried: SmallVec<[(usize, Factors); 2]> = SmallVec::new();
        let product = product.filter(|_| node.kind == OpKind::Add);
        let offers = if product.is_some() || node.products().is_some() {
            node.inputs.len()
        } else {
            0
        };
        for k in 0..offers {
            let Some(i) = node.inputs[k].filter(|&i| needs[k] && !is_view(i)) else {
                continue;
            };
            if pending.contains_key(&i) {
                continue;
            }
            let add = nodes[i].kind == OpKind::Add;
            match (&product, grads[i].as_mut()) {
                // An addition's operand that holds a cotangent already: the
                // product is fused into it.
                (Some((u, w)), Some(acc)) if acc.len() == u.len() => {
                    fused_add(acc, u, w);
                    needs[k] = false;
                    kept.remove(&i);
                    scaled.forget(i);
                }
                (Some((u, w)), None) if add => carried.push((k, (u.clone(), w.clone()))),
                (None, None) if add => {
                    let factors = node.products().expect("offered").factors.as_ref();
                    carried.push((k, factors(&g, k)));
                }
                _ => {}
            }
        }
        // A scaled cotangent reaching a bias: its column sums with the
        // products fused in; passed on to the other operands.
        let mut passed: SmallVec<[Option<ScaledFactors>; 2]> = SmallVec::new();
        if let (Some((x, c)), Backward::Sum { a, b, .. }) = (&scaled_here, backward) {
            for (k, shape) in [a, b].into_iter().enumerate() {
                let (Some(i), Some(sign)) = (node.inputs[k], scaled_ct::passed_sign(node.kind, k))
                else {
                    passed.push(None);
                    continue;
                };
                passed.push(Some((x.clone(), sign * c)));
                if !needs[k]
                    || is_view(i)
                    || !scaled_ct::is_row_bias(ndarray::Dimension::slice(shape), g.shape())
                {
                    continue;
                }
                let xs = x.as_standard_layout();
                let xs = xs.as_slice().expect("row-major");
                let mut sums = ArrayD::zeros(shape.clone());
                let dst = sums.as_slice_mut().expect("fresh");
                if crate::xla::scaled_columns::scaled_column_sums(xs, sign * c, dst) {
                    needs[k] = false;
                    forget(&mut kept, &mut scaled, &grads[i], i);
                    add_cotangent(&mut grads[i], &mut pending, i, sums);
                }
            }
        }
        let full_sum = scaling && scaled_ct::is_full_sum(node.kind);
        let mut input_grads = backward.call(g, &needs);
        // Taken in place: iterating the small vector by value copied it
        // whole (two arrays' headers) for every node.
        for (k, (input, grad)) in node.inputs.iter().zip(input_grads.iter_mut()).enumerate() {
            if let (Some(input), Some(grad)) = (input, grad.take()) {
                if is_view(*input) {
                    views
                        .entry(*input)
                        .or_default()
                        .push(Contribution::Dense(grad));
                } else {
                    let first = grads[*input].is_none();
                    forget(&mut kept, &mut scaled, &grads[*input], *input);
                    let len = grad.len();
                    add_cotangent(&mut grads[*input], &mut pending, *input, grad);
                    if first && scaling {
                        let target = nodes[*input].kind;
                        if full_sum && scaled_ct::is_compiled_square(target) {
                            scaled.mark_uniform(*input);
                        }
                        let pass = passed.get(k).cloned().flatten();
                        if let Some((x, c)) = square_scale.clone().filter(|_| k == 0).or(pass) {
                            if x.len() == len {
                                scaled.keep(*input, x, c);
                            }
                        }
                    }
                    if let Some(at) = carried.iter().position(|c| c.0 == k) {
                        let (_, factors) = carried.swap_remove(at);
                        if first && factors.0.len() == len {
                            kept.insert(*input, factors);
                        }
                    }
                }
            }
        }
    }
    drop(nodes);
    let out = wanted
        .iter()
        .map(|&w| if w <= root { grads[w].take() } else { None })
        .collect();
    grads.clear();
    if grads.capacity() <= SPARE_CAPACITY {
        // During the thread's teardown there is nowhere to keep it.
        let _ = SPARE_GRADS.try_with(|s| s.set(grads));
    }
    out
}

/// Gradient vectors kept for reuse with at most this many slots.
const SPARE_CAPACITY: usize = 1024;

thread_local! {
    /// The emptied gradient vector of this thread's last backward pass: a
    /// fresh one per eager step (a slot of 112 bytes per node, over glibc's
    /// small sizes for a dozen nodes) made glibc consolidate its freed small
    /// blocks on every step of the tiny 2-3-2 MLP. A nested pass (a rule
    /// that differentiates) finds none and allocates its own.
    static SPARE_GRADS: Cell<Vec<Option<ArrayD<f32>>>> = const { Cell::new(Vec::new()) };
}

/// The cotangent of a shared tensor from its items' views' cotangents, as
/// JAX's batched transpose computes it: each use summed over the items
/// (one reduction, or one product over the items' stacked rows), then the
/// uses added in the order their cotangents arrived. Items whose uses
/// differ are summed item by item instead.
fn combine_items(lists: Vec<Vec<Contribution>>) -> Option<ArrayD<f32>> {
    let uses = lists[0].len();
    let aligned = lists.iter().all(|l| {
        l.len() == uses
            && l.iter().zip(&lists[0]).all(|(a, b)| {
                matches!(
                    (a, b),
                    (Contribution::Dense(_), Contribution::Dense(_))
                        | (Contribution::Dot(..), Contribution::Dot(..))
                )
            })
    });
    let mut total: Option<ArrayD<f32>> = None;
    if aligned {
        let mut columns: Vec<Vec<Contribution>> = (0..uses).map(|_| Vec::new()).collect();
        for list in lists {
            for (u, c) in list.into_iter().enumerate() {
                columns[u].push(c);
            }
        }
        for column in columns {
            accumulate(&mut total, reduce_items(column));
        }
    } else {
        for list in lists {
            let mut item: Option<ArrayD<f32>> = None;
            for c in list {
                accumulate(&mut item, evaluate(c));
            }
            if let Some(item) = item {
                accumulate(&mut total, item);
            }
        }
    }
    total
}

/// One contribution's value.
fn evaluate(c: Contribution) -> ArrayD<f32> {
    match c {
        Contribution::Dense(g) => g,
        Contribution::Dot(a, b, shape, _) => matmul_raw(a.t().into_dyn(), b.view())
            .expect("factor shapes agree")
            .into_shape_with_order(IxDyn(&shape))
            .expect("the view's size"),
    }
}

/// One use's cotangents of every item, summed over the items.
fn reduce_items(column: Vec<Contribution>) -> ArrayD<f32> {
    if matches!(column[0], Contribution::Dense(_)) {
        let parts: Vec<Tensor> = column
            .into_iter()
            .map(|c| Tensor::constant(evaluate(c).into_shared()))
            .collect();
        let stacked = Tensor::stack(&parts, 0).expect("every item's cotangent has one shape");
        return stacked
            .sum(&[0], false)
            .expect("axis 0 exists")
            .data
            .into_owned();
    }
    let (mut lhs, mut rhs, mut shape, mut left) = (Vec::new(), Vec::new(), Vec::new(), false);
    for c in column {
        if let Contribution::Dot(a, b, s, l) = c {
            lhs.push(a);
            rhs.push(b);
            shape = s;
            left = l;
        }
    }
    let cat = |parts: &[ArrayD<f32>]| {
        let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
        ndarray::concatenate(Axis(0), &views).expect("factors agree but for their rows")
    };
    let (a, b) = (cat(&lhs), cat(&rhs));
    // A shared left operand's cotangent is JAX's `G[rows, items * n] @
    // W'[items * n, k]` with the stacked output cotangent `G` row-major (a
    // bitcast of the batched cotangent): a plain product. A shared right
    // operand's, `X'^T @ G'` over the items' stacked rows, keeps its
    // transposed left operand, as XLA's dot contracting dimension 0 does.
    let at = if left {
        a.t().as_standard_layout().into_owned()
    } else {
        a.reversed_axes()
    };
    matmul_raw(at.view(), b.view())
        .expect("factor shapes agree")
        .into_shape_with_order(IxDyn(&shape))
        .expect("the view's size")
}

/// `acc[i, j] = fma(u[i], w[j], acc[i, j])`: the outer product added with
/// one rounding per element.
fn accumulate_outer(acc: &mut ArrayD<f32>, u: &[f32], w: &[f32]) {
    debug_assert_eq!(acc.shape(), [u.len(), w.len()]);
    for (mut row, &ui) in acc.outer_iter_mut().zip(u) {
        for (a, &wj) in row.iter_mut().zip(w) {
            *a = ui.mul_add(wj, *a);
        }
    }
}

/// `acc = fma(u, w, acc)` elementwise, over the row-major elements (the
/// factors may have the accumulator's shape with axes of length one more:
/// a bias's row).
fn fused_add(acc: &mut ArrayD<f32>, u: &ArrayD<f32>, w: &ArrayD<f32>) {
    let (u, w) = (u.as_standard_layout(), w.as_standard_layout());
    let (u, w) = (
        u.as_slice().expect("row-major"),
        w.as_slice().expect("row-major"),
    );
    let fuse = |(a, (&u, &w)): (&mut f32, (&f32, &f32))| *a = u.mul_add(w, *a);
    match acc.as_slice_mut() {
        Some(a) => a.iter_mut().zip(u.iter().zip(w)).for_each(fuse),
        None => acc.iter_mut().zip(u.iter().zip(w)).for_each(fuse),
    }
}

/// Drops the kept factors and scaled cotangent of node `id` when another
/// cotangent is about to be added to it (its `slot` holds one already).
fn forget(
    kept: &mut HashMap<usize, Factors>,
    scaled: &mut Scaled,
    slot: &Option<ArrayD<f32>>,
    id: usize,
) {
    if slot.is_some() {
        if !kept.is_empty() {
            kept.remove(&id);
        }
        scaled.forget(id);
    }
}

/// Adds the cotangent `grad` of node `input` into its `slot`, first
/// fusing into it the product deferred for that node, if any:
/// `fma(u, w, grad)`.
fn add_cotangent(
    slot: &mut Option<ArrayD<f32>>,
    pending: &mut HashMap<usize, (ArrayD<f32>, ArrayD<f32>)>,
    input: usize,
    mut grad: ArrayD<f32>,
) {
    if let Some((u, w)) = (!pending.is_empty())
        .then(|| pending.remove(&input))
        .flatten()
    {
        ndarray::Zip::from(&mut grad)
            .and(&u)
            .and(&w)
            .for_each(|g, &u, &w| *g = u.mul_add(w, *g));
    }
    accumulate(slot, grad);
}

/// Adds `grad` into `slot`, in place when the slot already holds a buffer.
fn accumulate(slot: &mut Option<ArrayD<f32>>, grad: ArrayD<f32>) {
    match slot {
        None => *slot = Some(grad),
        Some(acc) => {
            if acc.is_standard_layout() && grad.is_standard_layout() {
                let (a, g) = (acc.as_slice_mut().unwrap(), grad.as_slice().unwrap());
                a.iter_mut().zip(g).for_each(|(a, g)| *a += g);
            } else {
                *acc += &grad;
            }
        }
    }
}
