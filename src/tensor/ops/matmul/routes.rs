//! The routes of eager 2-D products, decided once per shape and strides.
//!
//! Deciding how XLA sums `[m, k] @ [k, n]` (small chains, a YNNPACK plan
//! looked up in a hashed cache, a GEMV, ...) cost about as much as summing
//! the tiny products of a 2-3-2 MLP's training step; a few recent decisions
//! are kept per thread and reused as they are.

use std::cell::RefCell;

use super::{exact_matmul_limit, plain_column, signed_columns, ynn_route, DotRoute, PACKED, SMALL};
use crate::tensor::batched::current_layout;
use crate::xla::dot_tiny::{gathered_product, TinySum};

/// What a route depends on: the product's shape, the operands' (row,
/// column) strides and the exact-product limit in force.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key {
    mkn: (usize, usize, usize),
    sa: (usize, usize),
    sb: (usize, usize),
    limit: usize,
}

/// How many decisions each thread keeps (a model's products have a few
/// shapes each: forward, and the two products of its backward pass).
const KEPT: usize = 16;

/// A kept decision: the route, and how a tiny product's outputs are summed
/// (see [`DotRoute::tiny_sum`]).
type Kept = (Key, DotRoute, Option<TinySum>);

thread_local! {
    /// Recent decisions, the oldest replaced first.
    static ROUTES: RefCell<(Vec<Kept>, usize)> =
        const { RefCell::new((Vec::new(), 0)) };
}

/// The route [`super::matmul2d_into`] takes for operands with these
/// non-negative strides, outside a `vmap` layout: the plain chains of a
/// small product that YNNPACK would not take (the same call as its
/// `small_matmul`), or [`super::dot_into`]'s route.
fn decide(key: Key) -> DotRoute {
    let Key { mkn, sa, sb, .. } = key;
    let (m, k, n) = mkn;
    let row_gemv_t = m == 1 && n >= 2 && sb.0 == 1 && sb.1 != 1;
    let vector = n == 1 || row_gemv_t;
    let strides = |s: (usize, usize)| (s.0 as isize, s.1 as isize);
    if !vector && m * n * k <= SMALL && ynn_route(m, k, n, strides(sa), strides(sb)).is_none() {
        DotRoute::Small(plain_column(m, k, n), signed_columns(m, k, n, sb, (1, 1)))
    } else {
        DotRoute::with_plan_shape(sa, sb, mkn, (m, n, (1, 1)), false)
    }
}

/// `out = a @ b` for `a: [m, k]` in `x` with strides `sa`, `b: [k, n]` in
/// `y` with strides `sb` (non-negative, every element inside its slice),
/// row-major `out`; the same bits as [`super::matmul2d_into`]. `false`
/// (nothing written) inside a `vmap` layout, where routes depend on it.
pub(super) fn run_cached(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    mkn: (usize, usize, usize),
    out: &mut [f32],
) -> bool {
    if current_layout().is_some() {
        return false;
    }
    let key = Key {
        mkn,
        sa,
        sb,
        limit: exact_matmul_limit(),
    };
    // A tiny product's route is not cloned (its plan is shared: two
    // atomic counts per product).
    let route = ROUTES.with(|r| {
        let (kept, next) = &mut *r.borrow_mut();
        if let Some((_, route, tiny)) = kept.iter().find(|(k, ..)| *k == key) {
            return match tiny {
                Some(sum) => Err(*sum),
                None => Ok(route.clone()),
            };
        }
        let route = decide(key);
        let tiny = route.tiny_sum(mkn);
        if kept.len() < KEPT {
            kept.push((key, route.clone(), tiny));
        } else {
            kept[*next] = (key, route.clone(), tiny);
            *next = (*next + 1) % KEPT;
        }
        tiny.map_or(Ok(route), Err)
    });
    let route = match route {
        Ok(route) => route,
        Err(sum) => {
            // A tiny product: its outputs summed lane-wise, each in the
            // route's order (the compiled replay's kernel).
            PACKED.with(|p| gathered_product(x, sa, y, sb, mkn, sum, out, &mut p.borrow_mut()));
            return true;
        }
    };
    match route {
        // No scratch needed.
        DotRoute::Small(plain, from) => {
            let (m, k, n) = mkn;
            super::small_matmul_strided(x, sa, y, sb, m, k, n, out, (plain, from));
        }
        route => PACKED.with(|p| route.run(x, sa, y, sb, mkn, out, &mut p.borrow_mut())),
    }
    true
}
