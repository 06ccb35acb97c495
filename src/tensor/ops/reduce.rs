//! Reductions over axes (sum, mean, var, max) and softmax.

use ndarray::{ArrayD, ArrayViewD, ArrayViewMutD, Axis, IxDyn, Zip};
use smallvec::{smallvec, SmallVec};

use super::rows::{self, nan_max};
use crate::tensor::error::Result;
use crate::tensor::forward::linear;
use crate::tensor::shape::{normalize_axes, normalize_axis};
use crate::tensor::tape::{Backward, InputGrads, OpKind, TangentRule};
use crate::tensor::Tensor;

/// Axis lists, inline up to 8 axes (a replay's reductions allocate
/// nothing).
type Axes = SmallVec<[usize; 8]>;

/// Sums `x` over one axis that is not the last, dropping it, into `out`
/// (row-major): each lane in XLA's order ([`crate::xla::reduce::xla_row_sum`];
/// checked against `jnp.sum(x, axis=0)` of 2-D arrays up to 1000 rows),
/// gathered into `lane`.
fn sum_one_axis_into(x: ArrayViewD<'_, f32>, axis: usize, out: &mut [f32], lane: &mut Vec<f32>) {
    let kept = x.index_axis(Axis(axis), 0).raw_dim();
    let mut out = ArrayViewMutD::from_shape(kept, out).expect("the kept axes' size");
    Zip::from(&mut out)
        .and(x.lanes(Axis(axis)))
        .for_each(|o, l| {
            lane.clear();
            lane.extend(l.iter().copied());
            *o = crate::xla::reduce::xla_row_sum(lane);
        });
}

/// Sums `x` over several (sorted) axes, dropping them, into `out`
/// (row-major), in XLA:CPU's order: each output's elements (the reduced
/// indices in row-major order, gathered into `moved`) summed as
/// [`crate::xla::reduce::reduce_all`] sums an array of the reduced axes,
/// its loop nest vectorized as LLVM vectorizes it for where the reduced
/// axes lie in `x` (checked against `jnp.sum` over two to four axes, the
/// last ones or not, e.g. a GroupNorm's `(H, group)`, a BatchNorm's `(N,
/// H)`, `[6, 40, 7]` over `(1, 2)`, `[2, 63, 2, 2]` over `(1, 2)`).
fn sum_many_axes_into(
    x: ArrayViewD<'_, f32>,
    axes: &[usize],
    out: &mut [f32],
    moved: &mut Vec<f32>,
) {
    let kept: Axes = (0..x.ndim()).filter(|a| !axes.contains(a)).collect();
    let order: Axes = kept.iter().chain(axes).copied().collect();
    let reduced: Axes = axes.iter().map(|&a| x.shape()[a]).collect();
    let inner: usize = reduced.iter().product();
    // How many kept elements follow each reduced axis in `x`: the spacing
    // of the loads that LLVM vectorizes.
    let kept_after: Axes = axes
        .iter()
        .map(|&r| {
            kept.iter()
                .filter(|&&k| k > r)
                .map(|&k| x.shape()[k])
                .product()
        })
        .collect();
    let loops = crate::xla::reduce::Loops::Vectorized(&kept_after);
    moved.clear();
    moved.extend(x.permuted_axes(IxDyn(&order)).iter().copied());
    for (o, lane) in out.iter_mut().zip(moved.chunks_exact(inner)) {
        *o = crate::xla::reduce::reduce_all(lane, &reduced, loops);
    }
}

/// How a sum (or mean) over the (sorted) axes `ax` of an `ndim`-axis
/// tensor is recorded: [`OpKind::SumAxes`], which a compiled module
/// replays with [`reduce_sum`], or `Other` past 32 axes.
fn sum_axes_kind(ax: &[usize], ndim: usize, mean: bool, keepdims: bool) -> OpKind {
    if ndim > 32 {
        return OpKind::Other;
    }
    OpKind::SumAxes {
        axes: ax.iter().fold(0, |m, &a| m | 1 << a),
        mean,
        keepdims,
    }
}

/// The sum of row-major `x` (of `shape`) over the axes in bit set `axes`,
/// times the `f32` reciprocal of their size when `mean`, into `out`: the
/// kernels and order of [`Tensor::sum`] and [`Tensor::mean`] (the replay
/// of [`OpKind::SumAxes`]). `buf`: where values are gathered (kept
/// between calls, it allocates once).
pub(crate) fn reduce_sum(
    x: &[f32],
    shape: &[usize],
    axes: u32,
    mean: bool,
    out: &mut [f32],
    buf: &mut Vec<f32>,
) {
    let ax: Axes = (0..shape.len()).filter(|a| axes & (1 << a) != 0).collect();
    let n: usize = ax.iter().map(|&a| shape[a]).product();
    if ax.len() == shape.len() {
        out[0] = crate::xla::reduce::sum_all(x, shape);
    } else if ax.len() == 1 && ax[0] + 1 == shape.len() {
        crate::xla::reduce::row_sums(x, shape[ax[0]], out);
    } else {
        let view = ArrayViewD::from_shape(IxDyn(shape), x).expect("planned shape");
        sum_axes_into(view, &ax, out, buf);
    }
    if mean {
        let r = 1.0 / n as f32;
        out.iter_mut().for_each(|v| *v *= r);
    }
}

/// Sums `x` over the (sorted) `axes`, dropping them (see
/// [`sum_axes_into`]).
pub(crate) fn sum_axes(x: ArrayViewD<'_, f32>, axes: &[usize]) -> ArrayD<f32> {
    let kept: Axes = (0..x.ndim())
        .filter(|a| !axes.contains(a))
        .map(|a| x.shape()[a])
        .collect();
    let mut out = vec![0.0f32; kept.iter().product()];
    sum_axes_into(x, axes, &mut out, &mut Vec::new());
    ArrayD::from_shape_vec(IxDyn(&kept), out).expect("kept size")
}

/// Sums `x` over the (sorted) `axes`, dropping them, into `out`
/// (row-major): from 4,096 elements (and a reduced axis longer than 1) in
/// YNNPACK's order, to which XLA hands such sums
/// ([`crate::xla::ynn_reduce::ynn_sum`]). `buf`: where lanes are gathered.
fn sum_axes_into(x: ArrayViewD<'_, f32>, axes: &[usize], out: &mut [f32], buf: &mut Vec<f32>) {
    let long = axes.iter().any(|&a| x.shape()[a] > 1);
    if x.len() >= crate::xla::ynn_reduce::YNN_MIN && long && x.ndim() <= 32 {
        // XLA hands it to YNNPACK.
        let mask = axes.iter().fold(0u32, |m, &a| m | 1 << a);
        let x = x.as_standard_layout();
        crate::xla::ynn_reduce::ynn_sum(x.as_slice().expect("row-major"), x.shape(), mask, out);
        return;
    }
    if axes.iter().any(|&a| x.shape()[a] == 0) {
        // Empty sums.
        out.fill(0.0);
        return;
    }
    match axes {
        [] => {
            for (o, &v) in out.iter_mut().zip(x.iter()) {
                *o = v;
            }
        }
        [axis] => sum_one_axis_into(x, *axis, out, buf),
        _ => sum_many_axes_into(x, axes, out, buf),
    }
}

/// The maximum of `x` over the (sorted) `axes`, dropping them.
fn max_axes(x: ArrayViewD<'_, f32>, axes: &[usize]) -> ArrayD<f32> {
    let mut out = x.to_owned();
    for &a in axes.iter().rev() {
        out = out.fold_axis(Axis(a), f32::NEG_INFINITY, |&acc, &v| nan_max(acc, v));
    }
    out
}

/// `x` in row-major memory order (moved when it already is).
fn standard(x: ArrayD<f32>) -> ArrayD<f32> {
    if x.is_standard_layout() {
        x
    } else {
        x.as_standard_layout().into_owned()
    }
}

/// The input's shape with the reduced axes set to 1.
fn kept_shape(shape: &[usize], axes: &[usize]) -> IxDyn {
    // Inline up to 4 axes: no allocation per reduction.
    let mut s = IxDyn(shape);
    for &a in axes {
        s[a] = 1;
    }
    s
}

/// Reshapes a reduced array to `kept` (a pure relabeling of axes of length 1).
fn to_kept(x: ArrayD<f32>, kept: &IxDyn) -> ArrayD<f32> {
    let x = if x.is_standard_layout() {
        x
    } else {
        x.as_standard_layout().into_owned()
    };
    x.into_shape_with_order(kept.clone())
        .expect("same element count")
}

/// [`Backward::Reduce`]: the gradient of a sum over the axes that `kept`
/// has as 1 of an input of shape `input`, times the reciprocal of
/// `divisor` when given: the output's gradient broadcast back.
pub(crate) fn reduce_backward(
    g: ArrayD<f32>,
    input: &IxDyn,
    kept: &IxDyn,
    divisor: Option<f32>,
) -> InputGrads {
    let scale = |v: f32| match divisor {
        Some(d) => v * (1.0 / d),
        None => v,
    };
    let g = if g.len() == 1 {
        // Every element is the one cotangent times the reciprocal: scaled
        // once, then repeated (the same product, one pass less).
        ArrayD::from_elem(input.clone(), scale(*g.iter().next().unwrap()))
    } else {
        let mut g = to_kept(g, kept)
            .broadcast(input.clone())
            .unwrap()
            .to_owned();
        if divisor.is_some() {
            g.mapv_inplace(scale);
        }
        g
    };
    smallvec![Some(g)]
}

impl Tensor {
    /// The sum over `axes` (negative axes count from the end), keeping them
    /// as length-1 axes when `keepdims` (`jnp.sum(x, axis, keepdims)`).
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    /// assert_eq!(x.sum(&[0], false).unwrap().to_vec(), [4.0, 6.0]);
    /// assert_eq!(x.sum(&[-1], true).unwrap().shape(), &[2, 1]);
    /// ```
    pub fn sum(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        self.sum_divided("sum", Some(axes), keepdims, None)
    }

    /// The sum over `axes` (`None`: all of them), times the reciprocal of
    /// `divisor` when given (the mean).
    fn sum_divided(
        &self,
        op: &'static str,
        axes: Option<&[isize]>,
        keepdims: bool,
        divisor: Option<f32>,
    ) -> Result<Tensor> {
        let ax: SmallVec<[usize; 4]> = match axes {
            None => (0..self.ndim()).collect(),
            Some(axes) => SmallVec::from_vec(normalize_axes(op, axes, self.ndim())?),
        };
        let mut kind = match (axes, keepdims, divisor) {
            (None, false, None) => OpKind::SumAll,
            (None, false, Some(_)) => OpKind::MeanAll,
            // Replayable forward by `reduce_sum` (see `sum_axes_kind`).
            _ => sum_axes_kind(&ax, self.ndim(), divisor.is_some(), keepdims),
        };
        if let (None, false) = (axes, keepdims) {
            // Loss rows whose total XLA merges into one reduction.
            if let Some(total) = self.merged_total(divisor.is_some()) {
                return Ok(total);
            }
        }
        let kept = kept_shape(self.shape(), &ax);
        let mut scaled = false;
        let mut out = if ax.len() == self.ndim() {
            // Everything: in XLA's order over the row-major elements,
            // whatever the memory order (compiled steps sum the same way);
            // a product made in a compiled region fused with the sum.
            let fused = self.fused_total();
            let total = match (fused, self.data.as_slice()) {
                (Some(total), _) => {
                    kind = OpKind::ProductSum {
                        mean: divisor.is_some(),
                        keepdims,
                    };
                    total
                }
                (None, Some(s)) => crate::xla::reduce::sum_all(s, self.shape()),
                (None, None) => crate::xla::reduce::sum_all(
                    &self.data.iter().copied().collect::<Vec<_>>(),
                    self.shape(),
                ),
            };
            // A mean's one product here, not a pass over a 0-dimensional
            // array below.
            let total = match divisor {
                Some(d) => total * (1.0 / d),
                None => total,
            };
            scaled = true;
            ndarray::arr0(total).into_dyn()
        } else if let Some(sums) = self.fused_sums(&ax) {
            // A product made in a compiled region, fused with its sum.
            kind = OpKind::ProductSumAxes {
                axes: ax.iter().fold(0, |m, &a| m | 1 << a),
                mean: divisor.is_some(),
                keepdims,
            };
            sums
        } else if ax.len() == 1 && ax[0] + 1 == self.ndim() {
            // The last axis: sequential sums of row-major rows.
            kind = OpKind::SumLast {
                mean: divisor.is_some(),
                keepdims,
            };
            let x = self.data.as_standard_layout();
            let n = self.shape()[ax[0]];
            let mut sums = vec![0.0; self.shape()[..ax[0]].iter().product()];
            crate::xla::reduce::row_sums(x.as_slice().expect("row-major"), n, &mut sums);
            ArrayD::from_shape_vec(IxDyn(&self.shape()[..ax[0]]), sums).expect("row count")
        } else {
            sum_axes(self.data.view(), &ax)
        };
        if let Some(d) = divisor.filter(|_| !scaled) {
            // jnp.mean divides by a constant, which XLA turns into a
            // multiplication by its f32 reciprocal.
            let r = 1.0 / d;
            out.mapv_inplace(|v| v * r);
        }
        if keepdims {
            out = to_kept(out, &kept);
        }
        let in_shape = self.data.raw_dim();
        let tangent = || {
            let axes = axes.map(<[isize]>::to_vec);
            // Linear: the same reduction of the tangent.
            linear(move |t| Ok(t.sum_divided(op, axes.as_deref(), keepdims, divisor)?))
        };
        let backward = Backward::Reduce {
            input: in_shape,
            kept,
            divisor,
        };
        Ok(
            Tensor::record_builtin(out.into_shared(), &[self], kind, backward)
                .with_tangent(tangent),
        )
    }

    /// The sum of all elements, as a scalar (shape `[]`).
    pub fn sum_all(&self) -> Tensor {
        self.sum_divided("sum", None, false, None)
            .expect("all axes are valid")
    }

    /// The mean over `axes` (`jnp.mean`: the sum times the `f32` reciprocal of
    /// the count, which is what XLA computes for it).
    pub fn mean(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        let ax = normalize_axes("mean", axes, self.ndim())?;
        let n: usize = ax.iter().map(|&a| self.shape()[a]).product();
        self.sum_divided("mean", Some(axes), keepdims, Some(n as f32))
    }

    /// The mean of all elements, as a scalar.
    pub fn mean_all(&self) -> Tensor {
        self.sum_divided("mean", None, false, Some(self.size() as f32))
            .expect("all axes are valid")
    }

    /// The (biased, `ddof=0`) variance over `axes` (`jnp.var`):
    /// `mean((x - mean(x))^2)`.
    pub fn var(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        let centered = self.sub(&self.mean(axes, true)?)?;
        centered.mul(&centered)?.mean(axes, keepdims)
    }

    /// The maximum over `axes` (`jnp.max`); NaN if any element is NaN. The
    /// gradient is shared equally between tied maxima, as in JAX.
    pub fn max(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        let ax = normalize_axes("max", axes, self.ndim())?;
        let kept = kept_shape(self.shape(), &ax);
        let reduced = max_axes(self.data.view(), &ax);
        let kept_max = to_kept(reduced.clone(), &kept);
        let out = if keepdims { kept_max.clone() } else { reduced };
        let xd = self.data.clone();
        let tangent = || -> TangentRule {
            // Recomputed here, so that only forward mode pays for it.
            let at = normalize_axes("max", axes, self.ndim()).expect("checked above");
            let mt = to_kept(
                max_axes(self.data.view(), &at),
                &kept_shape(self.shape(), &at),
            );
            let xt = self.data.clone();
            // JAX's reduce_max rule: `sum(g * at_max) / sum(at_max)`, the
            // sums over the reduced axes.
            let axes: Vec<isize> = at.iter().map(|&a| a as isize).collect();
            Box::new(move |t: &[Option<Tensor>]| {
                let Some(g) = &t[0] else { return Ok(None) };
                let dim = xt.raw_dim();
                let at_max = Zip::from(&xt)
                    .and_broadcast(mt.broadcast(dim).unwrap())
                    .map_collect(|&x, &m| if x == m { 1.0f32 } else { 0.0 });
                let at_max = Tensor::from_array(at_max);
                let counts = at_max.sum(&axes, keepdims)?;
                Ok(Some(g.mul(&at_max)?.sum(&axes, keepdims)?.div(&counts)?))
            })
        };
        Ok(Tensor::record(out.into_shared(), &[self], move |g, _| {
            let dim = xd.raw_dim();
            let mut mask = Zip::from(&xd)
                .and_broadcast(kept_max.broadcast(dim.clone()).unwrap())
                .map_collect(|&x, &m| if x == m { 1.0f32 } else { 0.0 });
            let counts = to_kept(sum_axes(mask.view(), &ax), &kept);
            let g = to_kept(g, &kept);
            Zip::from(&mut mask)
                .and_broadcast(g.broadcast(dim.clone()).unwrap())
                .and_broadcast(counts.broadcast(dim).unwrap())
                .for_each(|m, &g, &c| *m = *m * g / c);
            smallvec![Some(mask)]
        })
        .with_tangent(tangent))
    }

    /// `jax.nn.softmax(x, axis)`: `exp(x - max) / sum(exp(x - max))`, with
    /// the max not differentiated; bit for bit as JAX computes it eagerly,
    /// under a differentiation, or inside [`as_jitted`](crate::tensor::as_jitted)
    /// as jitted (see `rows::softmax_rows`).
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        let a = normalize_axis("softmax", axis, self.ndim())?;
        let mode = self.softmax_mode();
        self.row_op(
            a,
            OpKind::SoftmaxLast(mode),
            mode,
            rows::softmax_rows,
            rows::softmax_rows_backward,
            rows::softmax_rows_jvp,
        )
    }

    /// `jax.nn.log_softmax(x, axis)`: `x - max - log(sum(exp(x - max)))`,
    /// bit for bit as JAX computes it eagerly, under a differentiation, or
    /// jitted (see `rows::log_softmax_rows`).
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        let a = normalize_axis("log_softmax", axis, self.ndim())?;
        let mode = self.softmax_mode();
        self.row_op(
            a,
            OpKind::LogSoftmaxLast(mode),
            mode,
            rows::log_softmax_rows,
            rows::log_softmax_rows_backward,
            rows::log_softmax_rows_jvp,
        )
    }

    /// Which of JAX's softmax computations applies here: jitted inside a
    /// compiled region, else under a differentiation when traced, else
    /// eager.
    fn softmax_mode(&self) -> rows::Softmax {
        if crate::tensor::in_compiled_region() {
            rows::Softmax::Jitted
        } else if self.is_traced() {
            rows::Softmax::Traced
        } else {
            rows::Softmax::Eager
        }
    }

    /// Applies a row kernel along axis `a`, recording `kind` when `a` is the
    /// last axis. Another axis is moved last, the rows computed, and the
    /// result moved back: XLA reduces a non-minor dimension in the same
    /// order as a minor one, so the bits are the same. The backward kernel
    /// gets the output gradient and the input.
    #[allow(clippy::too_many_arguments)]
    fn row_op(
        &self,
        a: usize,
        kind: OpKind,
        mode: rows::Softmax,
        fwd: fn(&[f32], usize, &mut [f32], rows::Softmax),
        bwd: fn(&mut [f32], &[f32], usize, rows::Softmax, bool),
        jvp: fn(&mut [f32], &[f32], usize, bool),
    ) -> Result<Tensor> {
        let nd = self.ndim();
        let n = self.shape()[a];
        let dot_row = rows::dot_row(self.shape(), n);
        // `perm` moves axis `a` last; `inv` moves it back.
        // Shared, so that the tangent rule's copies of the closures below
        // cost no allocation.
        let perm: std::sync::Arc<[usize]> = (0..nd).filter(|&d| d != a).chain([a]).collect();
        let mut inv = vec![0; nd];
        perm.iter().enumerate().for_each(|(i, &p)| inv[p] = i);
        let inv: std::sync::Arc<[usize]> = inv.into();
        let last = a + 1 == nd;
        let to_rows = move |x: ArrayViewD<'_, f32>| -> ArrayD<f32> {
            if last {
                x.as_standard_layout().into_owned()
            } else {
                x.permuted_axes(perm.to_vec())
                    .as_standard_layout()
                    .into_owned()
            }
        };
        let from_rows = move |x: ArrayD<f32>| -> ArrayD<f32> {
            if last {
                x
            } else {
                standard(x.permuted_axes(inv.to_vec()))
            }
        };
        let xr = std::sync::Arc::new(to_rows(self.data.view()));
        let mut out = vec![0.0; self.size()];
        fwd(xr.as_slice().expect("row-major"), n, &mut out, mode);
        let out = ArrayD::from_shape_vec(xr.raw_dim(), out).expect("same shape");
        let out = from_rows(out).into_shared();
        let (to_rows_t, from_rows_t, xr_t) = (to_rows.clone(), from_rows.clone(), xr.clone());
        let tangent = move || -> TangentRule {
            Box::new(move |t: &[Option<Tensor>]| {
                let Some(t) = &t[0] else { return Ok(None) };
                let mut t = to_rows_t(t.data.view());
                jvp(
                    t.as_slice_mut().expect("row-major"),
                    xr_t.as_slice().expect("row-major"),
                    n,
                    dot_row,
                );
                Ok(Some(Tensor::from_array(from_rows_t(t))))
            })
        };
        let backward = move |g: ArrayD<f32>, _: &[bool]| {
            let mut g = to_rows(g.view());
            bwd(
                g.as_slice_mut().expect("row-major"),
                xr.as_slice().expect("row-major"),
                n,
                mode,
                dot_row,
            );
            smallvec![Some(from_rows(g))]
        };
        Ok(if last {
            Tensor::record_kind(out, &[self], kind, backward)
        } else {
            Tensor::record(out, &[self], backward)
        }
        .with_tangent(tangent))
    }
}
