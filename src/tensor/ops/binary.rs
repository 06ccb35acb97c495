//! Elementwise binary operations with NumPy broadcasting, comparisons and
//! `select`.

use ndarray::{ArcArray, ArrayD, Dimension, IxDyn, Zip};
use smallvec::smallvec;

use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::add_tangents;
use crate::tensor::shape::{array_from_vec, broadcast_shapes_for, same_shape, sum_to, sum_to_view};
use crate::tensor::tape::{Backward, Comparison, InputGrads, OpKind, TangentRule};
use crate::tensor::Tensor;

/// A partial derivative as a function of (lhs, rhs, output).
/// A backward rule: an input's cotangent element from the output's
/// cotangent `g`, the operands `x`, `y` and the output, in JAX's order.
pub(crate) trait Rule: Fn(f32, f32, f32, f32) -> f32 + Copy + Send + Sync + 'static {}

impl<R: Fn(f32, f32, f32, f32) -> f32 + Copy + Send + Sync + 'static> Rule for R {}

// The functions and partial derivatives of `mul` and `div`, shared with
// compiled steps. Functions, not function pointers, so that each loop
// over elements is compiled with its own arithmetic inlined.
pub(crate) fn mul_op(x: f32, y: f32) -> f32 {
    x * y
}
pub(crate) fn mul_da(g: f32, _: f32, y: f32, _: f32) -> f32 {
    g * y
}
pub(crate) fn mul_db(g: f32, x: f32, _: f32, _: f32) -> f32 {
    g * x
}
pub(crate) fn div_op(x: f32, y: f32) -> f32 {
    x / y
}
// A constant scalar divisor (a literal in JAX's program): XLA multiplies
// the cotangent by its reciprocal.
pub(crate) fn div_da(g: f32, _: f32, y: f32, _: f32) -> f32 {
    g * (1.0 / y)
}
pub(crate) fn div_db(g: f32, x: f32, y: f32, _: f32) -> f32 {
    g * (-x / (y * y))
}
// Any other divisor: JAX's rules as its program computes them,
// `div(g, y)` and `neg(mul(mul(g, integer_pow(y, -2)), x))`, where
// `integer_pow(y, -2)` is `1 / (y * y)`.
pub(crate) fn div_traced_da(g: f32, _: f32, y: f32, _: f32) -> f32 {
    g / y
}
pub(crate) fn div_traced_db(g: f32, x: f32, y: f32, _: f32) -> f32 {
    -((g * (1.0 / (y * y))) * x)
}

/// `f` applied elementwise over the broadcast of `a` and `b`.
fn zip_map(
    op: &'static str,
    a: &ArcArray<f32, IxDyn>,
    b: &ArcArray<f32, IxDyn>,
    f: impl Fn(f32, f32) -> f32,
) -> Result<ArrayD<f32>> {
    // Fast paths on row-major data: equal shapes, and one operand repeating
    // along leading axes (a bias, a scalar), whose broadcast shape is the
    // other operand's (taken from it: no shape worked out per call).
    if let (Some(x), Some(y)) = (a.as_slice(), b.as_slice()) {
        let (sa, sb) = (a.shape(), b.shape());
        let fast = if same_shape(sa, sb) {
            Some((x.iter().zip(y).map(|(&x, &y)| f(x, y)).collect(), a))
        } else if let ([y], true) = (y, is_trailing(sb, sa)) {
            Some((x.iter().map(|&x| f(x, *y)).collect(), a))
        } else if let ([x], true) = (x, is_trailing(sa, sb)) {
            Some((y.iter().map(|&y| f(*x, y)).collect(), b))
        } else if sb.len() <= sa.len() && is_trailing(sb, sa) && !y.is_empty() {
            let mut v = Vec::with_capacity(x.len());
            for row in x.chunks_exact(y.len()) {
                v.extend(row.iter().zip(y).map(|(&x, &y)| f(x, y)));
            }
            Some((v, a))
        } else if sa.len() <= sb.len() && is_trailing(sa, sb) && !x.is_empty() {
            let mut v = Vec::with_capacity(y.len());
            for row in y.chunks_exact(x.len()) {
                v.extend(x.iter().zip(row).map(|(&x, &y)| f(x, y)));
            }
            Some((v, b))
        } else {
            None
        };
        if let Some((v, like)) = fast {
            return Ok(array_from_vec(like.raw_dim(), v));
        }
    }
    let shape = broadcast_shapes_for(op, a.shape(), b.shape())?;
    let shape = IxDyn(&shape);
    let (av, bv) = (
        a.broadcast(shape.clone()).unwrap(),
        b.broadcast(shape).unwrap(),
    );
    Ok(Zip::from(&av).and(&bv).map_collect(|&x, &y| f(x, y)))
}

/// Whether `small` broadcasts to `full` by repeating along leading axes only
/// (its shape, without leading ones, is a suffix of `full`, and it has no
/// more axes than `full`: `[1, 1]` against `[]` broadcasts to `[1, 1]`).
pub(crate) fn is_trailing(small: &[usize], full: &[usize]) -> bool {
    if small.len() > full.len() {
        return false;
    }
    let lead = small.iter().take_while(|&&d| d == 1).count();
    let small = &small[lead..];
    small.len() <= full.len() && same_shape(&full[full.len() - small.len()..], small)
}

/// `g * partial(a, b, out)` summed to `shape`, reusing `g`'s buffer.
fn scale_grad(
    mut g: ArrayD<f32>,
    a: &ArcArray<f32, IxDyn>,
    b: &ArcArray<f32, IxDyn>,
    out: &ArcArray<f32, IxDyn>,
    rule: impl Rule,
    shape: &[usize],
) -> ArrayD<f32> {
    // Row-major operands of the output's size, or of one element (a
    // scalar), are read as slices; `g` and `out` have the output's shape.
    let n = g.len();
    if let (Some(gs), Some(o), Some(x), Some(y)) = (
        g.as_slice_mut(),
        out.as_slice(),
        Operand::of(a, n),
        Operand::of(b, n),
    ) {
        let gs = gs.iter_mut().zip(o);
        match (x, y) {
            (Operand::Full(x), Operand::Full(y)) => {
                for (((g, &o), &x), &y) in gs.zip(x).zip(y) {
                    *g = rule(*g, x, y, o);
                }
            }
            (Operand::Full(x), Operand::One(y)) => {
                for ((g, &o), &x) in gs.zip(x) {
                    *g = rule(*g, x, y, o);
                }
            }
            (Operand::One(x), Operand::Full(y)) => {
                for ((g, &o), &y) in gs.zip(y) {
                    *g = rule(*g, x, y, o);
                }
            }
            (Operand::One(x), Operand::One(y)) => {
                for (g, &o) in gs {
                    *g = rule(*g, x, y, o);
                }
            }
        }
        return sum_to(g, shape);
    }
    let dim = g.raw_dim();
    Zip::from(&mut g)
        .and_broadcast(a.broadcast(dim.clone()).unwrap())
        .and_broadcast(b.broadcast(dim).unwrap())
        .and(out)
        .for_each(|g, &x, &y, &o| *g = rule(*g, x, y, o));
    sum_to(g, shape)
}

/// Splits one output gradient into the two inputs', cloning only when both
/// inputs need it.
fn split(
    g: ArrayD<f32>,
    needs: &[bool],
    fa: impl FnOnce(ArrayD<f32>) -> ArrayD<f32>,
    fb: impl FnOnce(ArrayD<f32>) -> ArrayD<f32>,
) -> InputGrads {
    match (needs[0], needs[1]) {
        (true, true) => {
            let gb = fb(g.clone());
            smallvec![Some(fa(g)), Some(gb)]
        }
        (true, false) => smallvec![Some(fa(g)), None],
        (false, true) => smallvec![None, Some(fb(g))],
        (false, false) => smallvec![None, None],
    }
}

/// The gradients of `a + b` (or `a - b` when `negate_b`): the output
/// gradient summed to each input's shape. When both inputs need it, the
/// broadcast one is summed from a borrow and the other takes the buffer, so
/// nothing is copied unless both have the output's shape.
fn split_sums(
    g: ArrayD<f32>,
    needs: &[bool],
    sa: &[usize],
    sb: &[usize],
    negate_b: bool,
) -> InputGrads {
    let fb = |gb: ArrayD<f32>| if negate_b { -gb } else { gb };
    match (needs[0], needs[1]) {
        (true, true) if sb != g.shape() => {
            let gb = fb(sum_to_view(g.view(), sb));
            smallvec![Some(sum_to(g, sa)), Some(gb)]
        }
        (true, true) if sa != g.shape() => {
            let ga = sum_to_view(g.view(), sa);
            smallvec![Some(ga), Some(fb(sum_to(g, sb)))]
        }
        _ => split(g, needs, |g| sum_to(g, sa), |g| fb(sum_to(g, sb))),
    }
}

/// The backward rule of `a + b` (or `a - b` when `negate_b`).
fn sum_rule(a: &Tensor, b: &Tensor, negate_b: bool) -> Backward {
    Backward::Sum {
        a: a.data.raw_dim(),
        b: b.data.raw_dim(),
        negate_b,
    }
}

/// [`Backward::Sum`]: the gradients of `a + b` (or `a - b`) for inputs of
/// shapes `a` and `b`.
pub(crate) fn sum_backward(
    g: ArrayD<f32>,
    needs: &[bool],
    a: &IxDyn,
    b: &IxDyn,
    negate_b: bool,
) -> InputGrads {
    split_sums(g, needs, a.slice(), b.slice(), negate_b)
}

/// How a binary operation pushes tangents forward (JAX's jvp rules).
#[derive(Clone, Copy)]
enum Tangent {
    /// `mul`: `xdot * y + x * ydot`.
    Product,
    /// `div`: `xdot / y + ((-ydot) * x) * integer_pow(y, -2)`.
    Quotient,
    /// `tdot * partial`, the partial derivative being the backward rule's
    /// factor (`max`, `min`, `pow`).
    Partials,
}

/// The tangent rule of a binary operation of `a` and `b` with output `o`.
fn binary_tangent(
    how: Tangent,
    (a, b, o): (Tensor, Tensor, Tensor),
    (da, db): (impl Rule, impl Rule),
) -> TangentRule {
    fn partial(a: &Tensor, b: &Tensor, o: &Tensor, rule: impl Rule) -> Result<Tensor> {
        let shape = broadcast_shapes_for("jvp", a.shape(), b.shape())?;
        let dim = IxDyn(&shape);
        let p = Zip::from(&a.data.broadcast(dim.clone()).expect("broadcasts"))
            .and(&b.data.broadcast(dim).expect("broadcasts"))
            .and(&o.data)
            .map_collect(|&x, &y, &o| rule(1.0, x, y, o));
        Ok(Tensor::from_array(p))
    }
    Box::new(move |t: &[Option<Tensor>]| {
        let (ta, tb) = (t[0].as_ref(), t[1].as_ref());
        // Under `jvp` the sum of the two terms is fused into the first
        // product (see `forward::fused`).
        // `fma(l, r, acc)` elementwise, broadcasting.
        let fused = |l: &Tensor, r: &Tensor, acc: &Tensor| -> Result<Tensor> {
            let shape = broadcast_shapes_for("jvp", l.shape(), acc.shape())?;
            let shape = broadcast_shapes_for("jvp", &shape, r.shape())?;
            let dim = IxDyn(&shape);
            let v = Zip::from(&l.data.broadcast(dim.clone()).expect("broadcasts"))
                .and(&r.data.broadcast(dim.clone()).expect("broadcasts"))
                .and(&acc.data.broadcast(dim).expect("broadcasts"))
                .map_collect(|&l, &r, &acc| l.mul_add(r, acc));
            Ok(Tensor::from_array(v))
        };
        let fuse = crate::tensor::forward::fused();
        let (lhs, rhs) = match (how, ta, tb) {
            // `fma(xdot, y, x * ydot)`.
            (Tangent::Product, Some(ta), Some(tb)) if fuse => {
                (Some(fused(ta, &b, &a.mul(tb)?)?), None)
            }
            (Tangent::Product, ta, tb) => (
                ta.map(|t| t.mul(&b)).transpose()?,
                tb.map(|t| a.mul(t)).transpose()?,
            ),
            (Tangent::Quotient, ta, tb) => {
                let inv_sq = || Tensor::from_array(b.data.mapv(|y| 1.0 / (y * y)));
                let lhs = ta.map(|t| t.div(&b)).transpose()?;
                match (lhs, tb) {
                    // `fma((-ydot) * x, integer_pow(y, -2), xdot / y)`.
                    (Some(l), Some(t)) if fuse => {
                        (Some(fused(&t.neg().mul(&a)?, &inv_sq(), &l)?), None)
                    }
                    (Some(l), Some(t)) => (Some(l), Some(t.neg().mul(&a)?.mul(&inv_sq())?)),
                    (None, Some(t)) => (None, Some(t.neg().mul(&a)?.mul(&inv_sq())?)),
                    (l, None) => (l, None),
                }
            }
            (Tangent::Partials, ta, tb) => (
                ta.map(|t| t.mul(&partial(&a, &b, &o, da)?)).transpose()?,
                tb.map(|t| t.mul(&partial(&a, &b, &o, db)?)).transpose()?,
            ),
        };
        Ok(broadcast_tangent(add_tangents(lhs, rhs)?, o.shape())?)
    })
}

/// A tangent of the output's shape: one that comes from a broadcast
/// operand alone still has that operand's shape.
fn broadcast_tangent(t: Option<Tensor>, shape: &[usize]) -> Result<Option<Tensor>> {
    Ok(match t {
        Some(t) if t.shape() != shape => Some(t.broadcast_to(shape)?),
        t => t,
    })
}

/// A broadcasting binary operation with the given partial derivatives.
fn binary(
    op: &'static str,
    kind: OpKind,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(f32, f32) -> f32,
    (da, db): (impl Rule, impl Rule),
    how: Tangent,
) -> Result<Tensor> {
    let out = zip_map(op, &a.data, &b.data, f)?.into_shared();
    let (ad, bd, od) = (a.data.clone(), b.data.clone(), out.clone());
    let o = Tensor::constant(out.clone());
    Ok(Tensor::record_kind(out, &[a, b], kind, move |g, needs| {
        split(
            g,
            needs,
            |g| scale_grad(g, &ad, &bd, &od, da, ad.shape()),
            |g| scale_grad(g, &ad, &bd, &od, db, bd.shape()),
        )
    })
    .with_tangent(|| binary_tangent(how, (a.detached(), b.detached(), o), (da, db))))
}

/// The tangent rule of `a + b` (or `a - b` when `negate_b`): JAX's `add`
/// and `sub` rules, a lone tangent broadcast to the output's shape.
fn sum_tangent(a: &Tensor, b: &Tensor, negate_b: bool) -> TangentRule {
    let shape = broadcast_shapes_for("jvp", a.shape(), b.shape()).expect("broadcast checked");
    Box::new(move |t: &[Option<Tensor>]| {
        let out = match (&t[0], &t[1]) {
            (Some(a), Some(b)) if negate_b => Some(a.sub(b)?),
            (Some(a), Some(b)) => Some(a.add(b)?),
            (Some(a), None) => Some(a.clone()),
            (None, Some(b)) if negate_b => Some(b.neg()),
            (None, Some(b)) => Some(b.clone()),
            (None, None) => None,
        };
        Ok(broadcast_tangent(out, &shape)?)
    })
}

/// JAX's "balanced" derivative of max/min: 1 to the chosen side, 0.5 to each
/// on a tie, 0 where the result is NaN.
pub(crate) fn balanced(x: f32, y: f32, out: f32) -> f32 {
    if x == out {
        if y == out {
            0.5
        } else {
            1.0
        }
    } else {
        0.0
    }
}

/// The partial derivatives of `maximum` (and `minimum`), shared with
/// compiled steps.
pub(crate) fn max_da(g: f32, x: f32, y: f32, o: f32) -> f32 {
    g * balanced(x, y, o)
}
pub(crate) fn max_db(g: f32, x: f32, y: f32, o: f32) -> f32 {
    g * balanced(y, x, o)
}

/// `jnp.maximum` of two elements: NaN if either is.
pub(crate) fn nan_max(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else {
        x.max(y)
    }
}

fn nan_min(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else {
        x.min(y)
    }
}

impl Tensor {
    /// `self + other`, broadcasting as NumPy does.
    ///
    /// Fails with [`TensorError::Incompatible`] naming both shapes when they
    /// do not broadcast.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let x = Tensor::ones(&[2, 3]);
    /// let b = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]).unwrap();
    /// assert_eq!(x.add(&b).unwrap().to_vec(), [2.0, 3.0, 4.0, 2.0, 3.0, 4.0]);
    /// ```
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        let out = zip_map("add", &self.data, &other.data, |x, y| x + y)?.into_shared();
        Ok(Tensor::record_builtin(
            out,
            &[self, other],
            OpKind::Add,
            sum_rule(self, other, false),
        )
        .with_tangent(|| sum_tangent(self, other, false)))
    }

    /// [`add`](Tensor::add) for a `self` the caller gives up (a layer's
    /// fresh output plus its bias): when nothing else holds `self`'s buffer
    /// and `other` repeats along its leading axes, the sum is written over
    /// `self` instead of into a new buffer — the same bits, one large
    /// allocation less (for big activations, glibc returns freed memory to
    /// the system, and every fresh buffer is paid again in page faults).
    pub(crate) fn add_consuming(mut self, other: &Tensor) -> Result<Tensor> {
        // In place only where no record keeps `self`'s values: it is traced
        // on the newest open tape, or nothing here is traced.
        let open = |t: &Tensor| {
            t.tracer
                .as_ref()
                .filter(|tr| tr.tape.is_open())
                .map(|tr| tr.tape.id)
        };
        let safe = match (open(&self), open(other)) {
            (None, None) => true,
            (Some(a), b) => b.is_none_or(|b| b <= a),
            (None, Some(_)) => false,
        };
        let fits = self.data.is_standard_layout()
            && other.data.is_standard_layout()
            && !other.data.is_empty()
            && is_trailing(other.shape(), self.shape())
            && self.data.is_unique();
        if !(safe && fits) || crate::tensor::debug_nans::debug_nans() {
            return self.add(other);
        }
        let y = other.data.as_slice().expect("standard layout");
        let x = self.data.as_slice_mut().expect("standard layout");
        for row in x.chunks_exact_mut(y.len()) {
            for (a, &b) in row.iter_mut().zip(y) {
                *a += b;
            }
        }
        let out = self.data.clone();
        Ok(Tensor::record_builtin(
            out,
            &[&self, other],
            OpKind::Add,
            sum_rule(&self, other, false),
        )
        .with_tangent(|| sum_tangent(&self, other, false)))
    }

    /// `self - other`, broadcasting.
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        let out = zip_map("sub", &self.data, &other.data, |x, y| x - y)?.into_shared();
        Ok(Tensor::record_builtin(
            out,
            &[self, other],
            OpKind::Sub,
            sum_rule(self, other, true),
        )
        .with_tangent(|| sum_tangent(self, other, true)))
    }

    /// `self * other` elementwise, broadcasting.
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        let rules = (mul_da, mul_db);
        // Kept in a compiled region for a sum XLA fuses with it.
        Ok(binary(
            "mul",
            OpKind::Mul,
            self,
            other,
            mul_op,
            rules,
            Tangent::Product,
        )?
        .with_factors(self, other))
    }

    /// `self / other` elementwise, broadcasting. Division by zero gives
    /// ±inf or NaN, as IEEE 754 says.
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        // JAX folds a Python scalar divisor into its program as a literal,
        // and XLA then multiplies by the reciprocal; an array divisor is an
        // argument, divided by truly.
        if other.is_traced() || other.data.len() != 1 {
            let rules = (div_traced_da, div_traced_db);
            binary(
                "div",
                OpKind::DivTraced,
                self,
                other,
                div_op,
                rules,
                Tangent::Quotient,
            )
        } else {
            let rules = (div_da, div_db);
            binary(
                "div",
                OpKind::Div,
                self,
                other,
                div_op,
                rules,
                Tangent::Quotient,
            )
        }
    }

    /// `self / count` as JAX computes `jnp.mean(x, where=mask)`'s division
    /// of the masked sum by the count of `mask` (no gradient flows into
    /// `count`): as a multiply by the count's `f32` reciprocal when
    /// `by_reciprocal` (XLA's rewrite of a division by a count it computes
    /// from a smaller mask), else truly. The cotangent is divided by the
    /// count either way: under eager `grad` the transposed division is a
    /// program of its own, given the count as an array (measured:
    /// `LayerNorm(mask=...)`'s gradients).
    pub(crate) fn div_by_count(&self, count: &Tensor, by_reciprocal: bool) -> Result<Tensor> {
        let rules = (div_traced_da, div_traced_db);
        if by_reciprocal {
            let forward = |x: f32, y: f32| x * (1.0 / y);
            binary(
                "div",
                OpKind::Other,
                self,
                count,
                forward,
                rules,
                Tangent::Quotient,
            )
        } else {
            binary(
                "div",
                OpKind::Other,
                self,
                count,
                div_op,
                rules,
                Tangent::Quotient,
            )
        }
    }

    /// The elementwise maximum (`jnp.maximum`): NaN if either is NaN; on a
    /// tie the gradient is split evenly, as in JAX.
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        binary(
            "maximum",
            OpKind::Maximum,
            self,
            other,
            nan_max,
            (max_da, max_db),
            Tangent::Partials,
        )
    }

    /// The elementwise minimum (`jnp.minimum`), with the same NaN and tie
    /// rules as [`maximum`](Tensor::maximum).
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        binary(
            "minimum",
            OpKind::Other,
            self,
            other,
            nan_min,
            (
                |g, x, y, o| g * balanced(x, y, o),
                |g, x, y, o| g * balanced(y, x, o),
            ),
            Tangent::Partials,
        )
    }

    /// `self ** exponent` elementwise, broadcasting. The gradient with
    /// respect to the exponent uses `log(self)` (with `log(1)` where the base
    /// is 0, as JAX does).
    pub fn pow(&self, exponent: &Tensor) -> Result<Tensor> {
        binary(
            "pow",
            OpKind::Other,
            self,
            exponent,
            f32::powf,
            (
                |g, x, y, _| g * if y == 0.0 { 0.0 } else { y * x.powf(y - 1.0) },
                |g, x, _, o| g * if x == 0.0 { 0.0 } else { x.ln() * o },
            ),
            Tangent::Partials,
        )
    }

    fn compare(&self, other: &Tensor, op: &'static str, c: Comparison) -> Result<Tensor> {
        let out = zip_map(op, &self.data, &other.data, |x, y| c.mask(x, y))?;
        // Recorded, with no gradient, so that a compiled step computes the
        // mask again from each call's values (as JAX traces a comparison).
        Ok(Tensor::record_kind(
            out.into_shared(),
            &[self, other],
            OpKind::Compare(c),
            |_, _| smallvec![None, None],
        )
        .with_tangent(|| Box::new(|_: &[Option<Tensor>]| Ok(None))))
    }

    /// A mask, 1.0 where `self > other` and 0.0 elsewhere (not
    /// differentiated).
    pub fn greater(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, "greater", Comparison::Greater)
    }

    /// A mask of `self >= other`.
    pub fn greater_equal(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, "greater_equal", Comparison::GreaterEqual)
    }

    /// A mask of `self < other`.
    pub fn less(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, "less", Comparison::Less)
    }

    /// A mask of `self <= other`.
    pub fn less_equal(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, "less_equal", Comparison::LessEqual)
    }

    /// A mask of `self == other`.
    pub fn equal(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, "equal", Comparison::Equal)
    }

    /// `jnp.where(mask, on_true, on_false)`: picks `on_true` where `mask` is
    /// non-zero and `on_false` elsewhere, broadcasting all three. The mask is
    /// not differentiated; each branch gets the gradient where it was picked.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let mask = Tensor::from_vec(vec![1.0, 0.0], &[2]).unwrap();
    /// let r = Tensor::select(&mask, &Tensor::ones(&[2]), &Tensor::zeros(&[2])).unwrap();
    /// assert_eq!(r.to_vec(), [1.0, 0.0]);
    /// ```
    pub fn select(mask: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        let mask_input = mask;
        let branches = broadcast_shapes_for("select", on_true.shape(), on_false.shape())?;
        let shape = broadcast_shapes_for("select", mask.shape(), &branches)?;
        let dim = IxDyn(&shape);
        // A mask of the output's shape is kept as it is (shared), not
        // copied; row-major operands are selected from as slices.
        let m = if same_shape(mask.shape(), &shape) {
            mask.data.clone()
        } else {
            mask.data
                .broadcast(dim.clone())
                .unwrap()
                .to_owned()
                .into_shared()
        };
        let out = match (
            m.as_slice(),
            Operand::of(&on_true.data, m.len()),
            Operand::of(&on_false.data, m.len()),
        ) {
            (Some(ms), Some(t), Some(f)) => {
                array_from_vec(dim, select_slices(ms, t, f)).into_shared()
            }
            _ => Zip::from(&m)
                .and_broadcast(on_true.data.broadcast(dim.clone()).unwrap())
                .and_broadcast(on_false.data.broadcast(dim).unwrap())
                .map_collect(|&m, &t, &f| if picks(m) { t } else { f })
                .into_shared(),
        };
        let (st, sf) = (on_true.shape().to_vec(), on_false.shape().to_vec());
        let mask = Tensor::constant(m.clone());
        let tangent = || -> TangentRule {
            let (st2, sf2) = (on_true.shape().to_vec(), on_false.shape().to_vec());
            // JAX's select_n rule: the same selection of the tangents,
            // zeros standing in for a zero one.
            Box::new(move |t: &[Option<Tensor>]| {
                let zeros = |s: &[usize]| Tensor::zeros(s);
                let tt = t[1].clone().unwrap_or_else(|| zeros(&st2));
                let tf = t[2].clone().unwrap_or_else(|| zeros(&sf2));
                Ok(Some(Tensor::select(&mask, &tt, &tf)?))
            })
        };
        // The mask is an input too, so that a compiled step can replay a
        // mask drawn on each call (dropout); it gets no gradient.
        let inputs = [mask_input, on_true, on_false];
        Ok(
            Tensor::record_kind(out, &inputs, OpKind::Select, move |g, needs| {
                let pick = |mut g: ArrayD<f32>, keep: bool, shape: &[usize]| {
                    match (g.as_slice_mut(), m.as_slice()) {
                        (Some(gs), Some(ms)) if gs.len() == ms.len() => {
                            // A select, not a conditional store: vectorizes.
                            for (g, &m) in gs.iter_mut().zip(ms) {
                                *g = if picks(m) == keep { *g } else { 0.0 };
                            }
                        }
                        _ => Zip::from(&mut g).and(&m).for_each(|g, &m| {
                            if picks(m) != keep {
                                *g = 0.0
                            }
                        }),
                    }
                    sum_to(g, shape)
                };
                let mut grads = split(
                    g,
                    &needs[1..],
                    |g| pick(g, true, &st),
                    |g| pick(g, false, &sf),
                );
                grads.insert(0, None);
                grads
            })
            .with_tangent(tangent),
        )
    }
}

/// An operand of an elementwise operation read from a row-major slice: all
/// of it (the output's shape) or its one element (any shape of one
/// element).
#[derive(Clone, Copy)]
enum Operand<'a> {
    Full(&'a [f32]),
    One(f32),
}

impl<'a> Operand<'a> {
    /// `t` as an operand of `n` elements, if it is row-major and of that
    /// length or of one element. (An operand that broadcasts to an output
    /// of as many elements lies in row-major order as the output does.)
    fn of(t: &'a ArcArray<f32, IxDyn>, n: usize) -> Option<Operand<'a>> {
        match t.as_slice()? {
            [one] => Some(Operand::One(*one)),
            s if s.len() == n => Some(Operand::Full(s)),
            _ => None,
        }
    }
}

/// `mask ? t : f` elementwise over `mask`'s length, each loop specialised
/// to its operands (vectorized).
fn select_slices(mask: &[f32], t: Operand<'_>, f: Operand<'_>) -> Vec<f32> {
    let pick = |m: f32, t: f32, f: f32| if picks(m) { t } else { f };
    match (t, f) {
        (Operand::Full(t), Operand::Full(f)) => (mask.iter().zip(t).zip(f))
            .map(|((&m, &t), &f)| pick(m, t, f))
            .collect(),
        (Operand::Full(t), Operand::One(f)) => {
            mask.iter().zip(t).map(|(&m, &t)| pick(m, t, f)).collect()
        }
        (Operand::One(t), Operand::Full(f)) => {
            mask.iter().zip(f).map(|(&m, &f)| pick(m, t, f)).collect()
        }
        (Operand::One(t), Operand::One(f)) => mask.iter().map(|&m| pick(m, t, f)).collect(),
    }
}

/// `x` with a subnormal value flushed to a zero of its sign: XLA:CPU
/// compares with denormals as zero (measured: `1e-45 > 0` is false and
/// `-1e-45 == 0` true in JAX; tools/oracle/generate_data_ops.py).
pub(crate) fn flush(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

/// Whether a `where` mask value picks `on_true`: non-zero, a subnormal
/// counting as zero as in XLA:CPU's comparisons.
pub(crate) fn picks(m: f32) -> bool {
    // `flush(m) != 0.0` without a branch (vectorizes).
    m.abs() >= f32::MIN_POSITIVE || m.is_nan()
}

/// Panics with the error's message; used by the operator overloads.
fn or_panic(r: Result<Tensor>) -> Tensor {
    r.unwrap_or_else(|e: TensorError| panic!("{e}"))
}

macro_rules! operator {
    ($trait:ident, $method:ident, $fn:ident) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                or_panic(Tensor::$fn(self, rhs))
            }
        }
        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                or_panic(Tensor::$fn(&self, &rhs))
            }
        }
        impl std::ops::$trait<&Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                or_panic(Tensor::$fn(&self, rhs))
            }
        }
        impl std::ops::$trait<Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                or_panic(Tensor::$fn(self, &rhs))
            }
        }
        impl std::ops::$trait<f32> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f32) -> Tensor {
                or_panic(Tensor::$fn(self, &Tensor::scalar(rhs)))
            }
        }
        impl std::ops::$trait<f32> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f32) -> Tensor {
                or_panic(Tensor::$fn(&self, &Tensor::scalar(rhs)))
            }
        }
        impl std::ops::$trait<&Tensor> for f32 {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                or_panic(Tensor::$fn(&Tensor::scalar(self), rhs))
            }
        }
        impl std::ops::$trait<Tensor> for f32 {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                or_panic(Tensor::$fn(&Tensor::scalar(self), &rhs))
            }
        }
    };
}

operator!(Add, add, add);
operator!(Sub, sub, sub);
operator!(Mul, mul, mul);
operator!(Div, div, div);

impl std::ops::Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(self)
    }
}

impl std::ops::Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(&self)
    }
}

#[cfg(test)]
mod add_consuming_tests {
    use crate::tensor::{value_and_grad, Tensor, Tree};

    fn bits(t: &Tensor) -> Vec<u32> {
        t.data.iter().map(|v| v.to_bits()).collect()
    }

    /// In place or not, the sum, its gradients and every other holder of
    /// the operands are what `add` gives.
    #[test]
    fn add_consuming_is_add() {
        let x =
            Tensor::from_vec((0..12).map(|i| i as f32 * 0.37 - 1.1).collect(), &[4, 3]).unwrap();
        let b = Tensor::from_vec(vec![0.1, f32::INFINITY, -0.0], &[3]).unwrap();
        // A fresh buffer nobody else holds: written in place.
        let fresh = x.mul(&Tensor::scalar(1.0)).unwrap();
        let ptr = fresh.data.as_ptr();
        let sum = fresh.add_consuming(&b).unwrap();
        assert_eq!(sum.data.as_ptr(), ptr);
        assert_eq!(bits(&sum), bits(&x.add(&b).unwrap()));
        // A buffer someone else holds is left alone.
        let held = x.clone();
        let sum = held.add_consuming(&b).unwrap();
        assert_ne!(sum.data.as_ptr(), x.data.as_ptr());
        assert_eq!(bits(&sum), bits(&x.add(&b).unwrap()));
        // Under differentiation: the same value and gradients as `add`,
        // with the left operand traced, or only the right one.
        let params = Tree::new().with("w", x.clone()).with("b", b.clone());
        let run = |consuming: bool| {
            value_and_grad(
                |p| {
                    let h = p.tensor("w")?.mul(&Tensor::scalar(2.0))?;
                    let y = if consuming {
                        h.add_consuming(p.tensor("b")?)?
                    } else {
                        h.add(p.tensor("b")?)?
                    };
                    let z = x.clone().add_consuming(p.tensor("b")?)?;
                    Ok(y.mul(&z)?.sum_all())
                },
                &params,
            )
            .unwrap()
        };
        let ((v1, g1), (v2, g2)) = (run(true), run(false));
        assert_eq!(bits(&v1), bits(&v2));
        for k in ["w", "b"] {
            assert_eq!(bits(g1.tensor(k).unwrap()), bits(g2.tensor(k).unwrap()));
        }
    }
}

#[cfg(test)]
mod slice_path_tests {
    use crate::tensor::{value_and_grad, Tensor, Tree};

    fn bits(t: &Tensor) -> Vec<u32> {
        t.to_vec().iter().map(|v| v.to_bits()).collect()
    }

    /// `values` as a row-major `[4, 3]` tensor and as the transposed view
    /// of a `[3, 4]` one (the same elements, not row-major: the broadcast
    /// path).
    fn both(values: &[f32]) -> [Tensor; 2] {
        let row_major = Tensor::from_vec(values.to_vec(), &[4, 3]).unwrap();
        let t: Vec<f32> = (0..12).map(|i| values[(i % 4) * 3 + i / 4]).collect();
        let strided = Tensor::from_vec(t, &[3, 4]).unwrap().transpose();
        assert!(strided.data.as_slice().is_none());
        assert_eq!(bits(&strided), bits(&row_major));
        [row_major, strided]
    }

    /// `select` and the products and quotients by a scalar give the same
    /// values and gradients on row-major slices as through broadcasting,
    /// including NaN, infinite, zero and subnormal mask values.
    #[test]
    fn slices_and_broadcasting_agree() {
        let mask = [
            1.0,
            0.0,
            f32::NAN,
            1e-45,
            -1e-45,
            2.0,
            -0.0,
            f32::INFINITY,
            1.0,
            0.0,
            1.0,
            1.0,
        ];
        let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.37 - 1.9).collect();
        let w: Vec<f32> = (0..12).map(|i| 1.3 - i as f32 * 0.21).collect();
        let results: Vec<(Vec<u32>, Vec<u32>)> = both(&mask)
            .iter()
            .zip(both(&x))
            .map(|(m, x)| {
                let params = Tree::new().with("x", x).with("s", Tensor::scalar(0.8));
                let (v, g) = value_and_grad(
                    |p| {
                        let x = p.tensor("x")?;
                        let s = p.tensor("s")?;
                        let a = Tensor::select(m, &x.mul(s)?, &Tensor::zeros(&[]))?;
                        let b =
                            Tensor::select(m, &Tensor::scalar(3.0), &x.div(&Tensor::scalar(0.9))?)?;
                        let c = Tensor::select(m, &x.div(s)?, &x.mul(&Tensor::scalar(-2.0))?)?;
                        let w = Tensor::from_vec(w.clone(), &[4, 3])?;
                        Ok(a.add(&b)?.add(&c)?.mul(&w)?.sum_all())
                    },
                    &params,
                )
                .unwrap();
                let mut grads = bits(g.tensor("x").unwrap());
                grads.extend(bits(g.tensor("s").unwrap()));
                (bits(&v), grads)
            })
            .collect();
        assert_eq!(results[0], results[1]);
    }
}

#[cfg(test)]
mod tests {
    use crate::tensor::Tensor;

    /// A scalar against a one-element operand of more axes broadcasts to
    /// the operand's axes (JAX: `(1.0 - z).shape == z.shape`), whichever
    /// side it is on; a one-feature GRU's `1 - z` took the scalar's shape.
    #[test]
    fn scalar_with_one_element_keeps_the_axes() {
        let z = Tensor::from_vec(vec![0.25], &[1, 1]).unwrap();
        let one = Tensor::scalar(1.0);
        for t in [one.sub(&z), z.sub(&one), one.mul(&z), one.add(&z)] {
            assert_eq!(t.unwrap().shape(), &[1, 1]);
        }
        let row = Tensor::from_vec(vec![2.0], &[1]).unwrap();
        assert_eq!(row.add(&z).unwrap().shape(), &[1, 1]);
        assert_eq!(z.add(&row).unwrap().shape(), &[1, 1]);
    }
}
