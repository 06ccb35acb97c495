//! The cotangent of a window maximum (`max_pool`'s) as XLA:CPU computes
//! it, measured against jaxlib 0.10.2 (tools/oracle/generate_max_pools.py;
//! a probe of 9 window shapes, overlapping or not, VALID, SAME and explicit
//! padding, tie-rich and NaN/±0/±inf inputs: 0 differ, eager and jitted).
//!
//! JAX differentiates `reduce_window` max through
//! `select_and_scatter_add` with `ge`: one element per window receives the
//! window's cotangent. XLA:CPU expands it (`SelectAndScatterExpander`,
//! the same eagerly and in a jitted program) into
//!
//! 1. a `pad` of the input with `-inf` (padding becomes selectable),
//! 2. a variadic `reduce-window` over the padded input and its indices
//!    from `(value 0, index -1)`: the first element of a window is taken,
//!    then each next one (row-major over the window) replaces it unless
//!    `selected >= next` (so the first of tied elements wins, a NaN
//!    replaces anything and anything replaces a NaN),
//! 3. a `scatter` adding each window's cotangent to its selected element
//!    of zeros, windows in row-major order, and a `slice` back to the
//!    input (a cotangent selected in the padding is dropped).
//!
//! JAX's tangent (`select_and_gather_add`, forward mode) is modelled as a
//! `reduce-window` of `(value, tangent)` pairs from `(-inf, 0)` with the
//! same `ge` selection and padding read as `(-inf, 0)`: the tangent of the
//! element that step 2 selects, except that a window that never rises
//! above `-inf` keeps the tangent 0. That matches 29 of the fixture's 34
//! pools; in five SAME-padded ones JAX takes the tangent of another
//! element (not studied; tests/max_pool_orders.rs KNOWN).

use smallvec::SmallVec;

use super::reduce_window::{next_index, row_major_strides, window_out_shape};

type Dims = SmallVec<[usize; 8]>;

/// How a window's selection starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Selection {
    /// `select_and_scatter_add`'s: from the window's first element.
    Scatter,
    /// `select_and_gather_add`'s: from `-inf` standing for no element.
    Gather,
}

/// For each window of row-major `x` (`shape`; windows row-major, extents
/// [`window_out_shape`]), the row-major index in `x` of the element XLA
/// selects (the module's documentation), `None` where it is padding (or,
/// for [`Selection::Gather`], no element).
pub(crate) fn select_windows(
    x: &[f32],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    how: Selection,
) -> Vec<Option<usize>> {
    let mut selected = Vec::new();
    for_each_selected(x, shape, window, strides, pads, how, |at| selected.push(at));
    selected
}

/// `select_and_scatter_add`'s cotangent into `dx` (one element per
/// element of `x`): zeros, to which each window's cotangent `g[o]` is
/// added at its selected element ([`Selection::Scatter`]), in window
/// order, as [`scatter_selected`] adds them; without a list of the
/// selections.
pub(crate) fn scatter_windows_into(
    x: &[f32],
    shape: &[usize],
    (window, strides, pads): (&[usize], &[usize], &[(usize, usize)]),
    g: &[f32],
    dx: &mut [f32],
) {
    dx.fill(0.0);
    let mut gs = g.iter();
    for_each_selected(x, shape, window, strides, pads, Selection::Scatter, |at| {
        let v = *gs.next().expect("one cotangent per window");
        if let Some(i) = at {
            dx[i] += v;
        }
    });
}

/// Calls `f` with each window's selection (see [`select_windows`]), the
/// windows in row-major order.
fn for_each_selected(
    x: &[f32],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    how: Selection,
    mut f: impl FnMut(Option<usize>),
) {
    let r = shape.len();
    let out_shape = window_out_shape(shape, window, strides, pads);
    let count: usize = out_shape.iter().product();
    if count == 0 {
        return;
    }
    let x_strides = row_major_strides(shape);
    let mut o: Dims = smallvec::smallvec![0; r];
    let mut w: Dims = smallvec::smallvec![0; r];
    loop {
        // The selected value and element; `Scatter` starts from none.
        let mut best: Option<(f32, Option<usize>)> = match how {
            Selection::Scatter => None,
            Selection::Gather => Some((f32::NEG_INFINITY, None)),
        };
        w.fill(0);
        loop {
            // The element under window position `w`, or padding.
            let mut at = Some(0usize);
            for a in 0..r {
                let p = (o[a] * strides[a] + w[a]) as isize - pads[a].0 as isize;
                at = match at {
                    Some(i) if p >= 0 && (p as usize) < shape[a] => {
                        Some(i + p as usize * x_strides[a])
                    }
                    _ => None,
                };
            }
            let v = at.map_or(f32::NEG_INFINITY, |i| x[i]);
            // `ge(selected, next)` keeps the selection.
            if !best.is_some_and(|(b, _)| b >= v) {
                best = Some((v, at));
            }
            if !next_index(&mut w, window) {
                break;
            }
        }
        f(best.and_then(|(_, at)| at));
        if !next_index(&mut o, &out_shape) {
            return;
        }
    }
}

/// `select_and_scatter_add`'s scatter: zeros of `n` elements, to which
/// each window's cotangent `g[o]` is added at its selected element, in
/// window order.
pub(crate) fn scatter_selected(g: &[f32], selected: &[Option<usize>], n: usize) -> Vec<f32> {
    let mut dx = vec![0.0f32; n];
    for (&v, at) in g.iter().zip(selected) {
        if let Some(i) = *at {
            dx[i] += v;
        }
    }
    dx
}

/// `select_and_gather_add`'s gather: each window's selected element of
/// `t`, 0 where none is.
pub(crate) fn gather_selected(t: &[f32], selected: &[Option<usize>]) -> Vec<f32> {
    selected.iter().map(|at| at.map_or(0.0, |i| t[i])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_tied_elements_takes_the_cotangent() {
        // [1, 4, 1], windows of 2 at stride 1: 1, 1 | 1, 2 | 2, 2.
        let x = [1.0, 1.0, 2.0, 2.0];
        let sel = select_windows(
            &x,
            &[1, 4, 1],
            &[1, 2, 1],
            &[1; 3],
            &[(0, 0); 3],
            Selection::Scatter,
        );
        assert_eq!(sel, [Some(0), Some(2), Some(2)]);
        assert_eq!(
            scatter_selected(&[1.0, 10.0, 100.0], &sel, 4),
            [1.0, 0.0, 110.0, 0.0]
        );
    }

    #[test]
    fn a_window_of_minus_infinity_selects_its_padding() {
        // SAME (1, 1): the first window starts in the padding.
        let x = [f32::NEG_INFINITY, 0.0];
        let pads = [(0, 0), (1, 1), (0, 0)];
        let sel = select_windows(
            &x,
            &[1, 2, 1],
            &[1, 3, 1],
            &[1, 2, 1],
            &pads,
            Selection::Scatter,
        );
        assert_eq!(sel, [Some(1)]);
        let sel = select_windows(
            &[f32::NEG_INFINITY; 2],
            &[1, 2, 1],
            &[1, 3, 1],
            &[1, 2, 1],
            &pads,
            Selection::Scatter,
        );
        assert_eq!(sel, [None]);
        let sel = select_windows(
            &[f32::NEG_INFINITY; 2],
            &[1, 2, 1],
            &[1, 3, 1],
            &[1, 2, 1],
            &pads,
            Selection::Gather,
        );
        assert_eq!(sel, [None]);
    }

    #[test]
    fn nan_replaces_and_is_replaced() {
        let x = [f32::NAN, 1.0, 0.5, f32::NAN];
        let all = |x: &[f32]| {
            select_windows(
                x,
                &[1, 4, 1],
                &[1, 4, 1],
                &[1; 3],
                &[(0, 0); 3],
                Selection::Scatter,
            )
        };
        // NaN, then 1 replaces it (`NaN >= 1` fails), 0.5 does not, NaN does.
        assert_eq!(all(&x), [Some(3)]);
        assert_eq!(all(&[f32::NAN, 1.0, 0.5, 0.0]), [Some(1)]);
    }
}
