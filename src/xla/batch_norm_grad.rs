//! A jitted BatchNorm in training under `jax.grad`: JAX splits the jitted
//! body into a forward program, which computes what the jitted forward
//! pass computes ([`super::batch_norm`]) and returns residuals, and a
//! backward program. In the forward program `k` is a residual computed
//! before the normalization loop, which LLVM then unrolls as it does
//! without a scale (the output's `x - mean` contracted only from 240
//! features, 288 without bias); the residual `x - mean` is the rounded
//! one. XLA:CPU compiles the backward program as follows
//! (measured against jaxlib 0.10.2 with numpy models of both programs,
//! `tools/oracle/generate_nn_jit_bn.py`'s gradient cases). For `x` of
//! shape `[..., C]` (`R` rows), `c = 1/R`, `v = var + eps`,
//! `k = rsqrt(v) · scale` and the output's cotangent `g`, per feature:
//!
//! - `bias`'s cotangent is `Σ g`, summed as the forward pass sums `x`
//!   ([`super::batch_norm::column_sums`]);
//! - `Σ (x - mean) g` ([`chain_products`]) and `Σ g k`
//!   ([`nest_products`]) contract each product into its sum;
//! - `scale`'s cotangent is `rsqrt(v) · Σ (x - mean) g`;
//! - with `m = Σ (x - mean) g · scale · (rsqrt(v) / v · -1/2) · clip'`
//!   (`clip'` the derivative of the clip at 0: 1 above, ½ at 0, 0 below)
//!   the input's cotangent is one fusion,
//!   `fma(m c, 2x, fma(g, k, c · fma(-m, 2c · s1, -Σ g k)))`.
//!
//! In evaluation (the running averages for `mean` and `var`) the forward
//! program is again the jitted forward pass, `fma(x - mean, k, bias)`,
//! and the backward one sums the cotangents of `scale` and `bias` as in
//! training; the input's is the rounded product `g k`.

use super::batch_norm::{
    clip, column_sums, contracted_columns, loops, split, unclipped_variance, Step, YNN_MIN,
};
use super::reduce::{vector_factor, TREE_WINDOW};
use super::vectors::with_fma;

/// What the backward program reads from the forward one.
pub(crate) struct Residuals {
    /// The input's row-major shape (features last).
    pub(crate) shape: Vec<usize>,
    x: Vec<f32>,
    /// `x - mean`, `s1 * c` rounded (not contracted, whatever the
    /// output's).
    centered: Vec<f32>,
    /// Per feature: the sum of `x`, the variance before and after the clip,
    /// `rsqrt(var + eps)` and `k`.
    pub(crate) s1: Vec<f32>,
    unclipped: Vec<f32>,
    pub(crate) var: Vec<f32>,
    ve: Vec<f32>,
    rs: Vec<f32>,
    k: Vec<f32>,
    scale: Option<Vec<f32>>,
    /// Normalized by the running averages (evaluation), not the batch's.
    eval: bool,
}

/// The forward pass of a BatchNorm over `x` (`shape`, features last, at
/// least one row) with jitted Flax's numbers, and its residuals: in
/// training without `running` (the batch's statistics), in evaluation
/// with the running mean and variance.
pub(crate) fn forward(
    x: Vec<f32>,
    shape: &[usize],
    scale: Option<Vec<f32>>,
    bias: Option<&[f32]>,
    eps: f32,
    running: Option<[&[f32]; 2]>,
) -> (Vec<f32>, Residuals) {
    let (dims, features) = split(shape);
    let rows: usize = dims.iter().product();
    let c = 1.0 / rows as f32;
    let mut s1 = vec![0.0; features];
    let (unclipped, var) = match running {
        Some([_, var]) => (var.to_vec(), var.to_vec()),
        None => {
            let mut s2 = vec![0.0; features];
            Step::Sums.forward(shape, [&x, &[], &[]], &mut s1);
            Step::Squares.forward(shape, [&x, &[], &[]], &mut s2);
            let unit = features == 1;
            let unclipped: Vec<f32> = s1
                .iter()
                .zip(&s2)
                .map(|(&a, &b)| unclipped_variance(a, b, c, unit))
                .collect();
            let var = unclipped.iter().map(|&d| clip(d)).collect();
            (unclipped, var)
        }
    };
    let ve: Vec<f32> = var.iter().map(|&v| v + eps).collect();
    let rs: Vec<f32> = ve.iter().map(|&v| super::math::rsqrt(v)).collect();
    let k: Vec<f32> = match &scale {
        Some(scale) => rs.iter().zip(scale).map(|(&r, &s)| r * s).collect(),
        None => rs.clone(),
    };
    // `x - mean` as the backward program reads it: `s1 * c` rounded.
    let mut centered = vec![0.0; x.len()];
    // The output's `x - mean`, where it differs (contracted).
    let mut contracted_centered = None;
    match running {
        Some([mean, _]) => {
            for (row, x) in centered
                .chunks_exact_mut(features)
                .zip(x.chunks_exact(features))
            {
                row.iter_mut()
                    .zip(x.iter().zip(mean))
                    .for_each(|(o, (&x, &m))| *o = x - m);
            }
        }
        None => {
            let center = |contracted: usize, out: &mut [f32]| {
                Step::Center { c, contracted }.forward(shape, [&x, &s1, &[]], out)
            };
            center(0, &mut centered);
            // `k` is a residual, computed before the normalization loop,
            // which reads it as one operand: LLVM unrolls that loop as
            // the jitted forward pass's without a scale.
            let contracted = contracted_columns(features, false, bias.is_some());
            if contracted > 0 {
                let mut d = vec![0.0; x.len()];
                center(contracted, &mut d);
                contracted_centered = Some(d);
            }
        }
    }
    let d = contracted_centered.as_deref().unwrap_or(&centered);
    let mut y = vec![0.0; x.len()];
    match bias {
        Some(bias) => Step::Affine.forward(shape, [d, &k, bias], &mut y),
        None => {
            for (row, d) in y.chunks_exact_mut(features).zip(d.chunks_exact(features)) {
                row.iter_mut()
                    .zip(d)
                    .zip(&k)
                    .for_each(|((o, &d), &k)| *o = d * k);
            }
        }
    }
    let residuals = Residuals {
        shape: shape.to_vec(),
        x,
        centered,
        s1,
        unclipped,
        var,
        ve,
        rs,
        k,
        scale,
        eval: running.is_some(),
    };
    (y, residuals)
}

/// The cotangents of the input, `scale` and `bias` from the output's `g`.
pub(crate) struct Cotangents {
    pub(crate) x: Vec<f32>,
    pub(crate) scale: Vec<f32>,
    pub(crate) bias: Vec<f32>,
}

/// The backward program's cotangents for the output cotangent `g`
/// (row-major, the input's shape).
pub(crate) fn backward(r: &Residuals, g: &[f32]) -> Cotangents {
    with_fma(
        #[inline(always)]
        || backward_body(r, g),
    )
}

/// The loops of [`backward`].
#[inline(always)]
fn backward_body(r: &Residuals, g: &[f32]) -> Cotangents {
    let shape = &r.shape[..];
    let (dims, features) = split(shape);
    let rows: usize = dims.iter().product();
    let c = 1.0 / rows as f32;
    let mut bias = vec![0.0; features];
    column_sums(g, shape, &mut bias);
    let sxg = chain_products(&r.centered, g, shape);
    let sgk = nest_products(g, &r.k, shape);
    let scale: Vec<f32> = r.rs.iter().zip(&sxg).map(|(&a, &b)| a * b).collect();
    if r.eval {
        let x = g
            .chunks_exact(features)
            .flat_map(|row| row.iter().zip(&r.k).map(|(&g, &k)| g * k))
            .collect();
        return Cotangents { x, scale, bias };
    }
    // Per feature: `m c` and `c · fma(-m, 2c · s1, -Σ g k)`.
    let mut mc = vec![0.0; features];
    let mut shift = vec![0.0; features];
    for j in 0..features {
        let m4 = match &r.scale {
            Some(s) => sxg[j] * s[j],
            None => sxg[j],
        };
        let drs = (r.rs[j] / r.ve[j]) * -0.5;
        let at_clip = if r.unclipped[j] == r.var[j] { 1.0 } else { 0.0 };
        let sel = at_clip / if r.var[j] == 0.0 { 2.0 } else { 1.0 };
        let m = (m4 * drs) * sel;
        let two_mean = r.s1[j] * (2.0 * c);
        shift[j] = (-m).mul_add(two_mean, -sgk[j]) * c;
        mc[j] = m * c;
    }
    let mut x = vec![0.0; g.len()];
    for ((out, gr), xr) in x
        .chunks_exact_mut(features)
        .zip(g.chunks_exact(features))
        .zip(r.x.chunks_exact(features))
    {
        for j in 0..out.len() {
            // A single row: XLA's simplifier leaves `g k` a rounded product
            // shared with `Σ g k`, not contracted.
            let a1 = if rows == 1 {
                gr[j] * r.k[j] + shift[j]
            } else {
                gr[j].mul_add(r.k[j], shift[j])
            };
            out[j] = mc[j].mul_add(xr[j] * 2.0, a1);
        }
    }
    Cotangents { x, scale, bias }
}

/// Whether the backward program rounds the products of a sum over `shape`
/// before summing them (then as [`column_sums`] sums): from 4,096 elements
/// or with a reduced axis longer than 32, as for the forward pass's sum of
/// squares.
fn rounded_first(len: usize, dims: &[usize]) -> bool {
    len >= YNN_MIN || dims.iter().any(|&d| d > TREE_WINDOW)
}

/// `Σ a b` per feature, each product contracted into a chain from `+0`
/// down the rows (rounded first where [`rounded_first`]).
#[inline(always)]
fn chain_products(a: &[f32], b: &[f32], shape: &[usize]) -> Vec<f32> {
    let (dims, features) = split(shape);
    let mut out = vec![0.0; features];
    if a.len() == features {
        // One row: no sum, the product alone (a `-0` stays).
        out.iter_mut()
            .zip(a.iter().zip(b))
            .for_each(|(o, (&a, &b))| *o = a * b);
        return out;
    }
    if rounded_first(a.len(), dims) {
        let p: Vec<f32> = a.iter().zip(b).map(|(&a, &b)| a * b).collect();
        column_sums(&p, shape, &mut out);
        return out;
    }
    for (ra, rb) in a.chunks_exact(features).zip(b.chunks_exact(features)) {
        for ((o, &a), &b) in out.iter_mut().zip(ra).zip(rb) {
            *o = a.mul_add(b, *o);
        }
    }
    out
}

/// `Σ g k` per feature (`k` repeating along the rows), each product
/// contracted: a chain from `+0` over one reduced axis, the loop nest of
/// the forward pass's sum of squares over several (its second innermost
/// loop vectorized when [`vector_factor`] allows); rounded first where
/// [`rounded_first`].
#[inline(always)]
fn nest_products(g: &[f32], k: &[f32], shape: &[usize]) -> Vec<f32> {
    let (dims, features) = split(shape);
    if g.len() == features {
        // One row: no sum, the product alone.
        return g.iter().zip(k).map(|(&g, &k)| g * k).collect();
    }
    if rounded_first(g.len(), dims) {
        let p: Vec<f32> = g
            .chunks_exact(features)
            .flat_map(|row| row.iter().zip(k).map(|(&g, &k)| g * k))
            .collect();
        let mut out = vec![0.0; features];
        column_sums(&p, shape, &mut out);
        return out;
    }
    let nest: Vec<usize> = dims.iter().copied().filter(|&d| d != 1).collect();
    let vf = match nest[..] {
        [.., b, c] if loops(dims) >= 2 => vector_factor(b, c),
        _ => 0,
    };
    if vf == 0 {
        // Each column from +0 down the rows: row by row is the same order.
        let mut out = vec![0.0; features];
        for row in g.chunks_exact(features) {
            for ((o, &g), &k) in out.iter_mut().zip(row).zip(k) {
                *o = g.mul_add(k, *o);
            }
        }
        return out;
    }
    let [.., b, c] = nest[..] else {
        unreachable!("two loops at least")
    };
    let mut lane = Vec::with_capacity(g.len() / features.max(1));
    (0..features)
        .map(|j| {
            lane.clear();
            lane.extend(g[j..].iter().step_by(features).copied());
            vectorized(&lane, k[j], b, c, vf)
        })
        .collect()
}

/// The loop nest's order over blocks of `b · c` rows of `v`, each element
/// times `k` contracted into its lane (see [`super::reduce::vector_nest`]).
#[inline(always)]
fn vectorized(v: &[f32], k: f32, b: usize, c: usize, vf: usize) -> f32 {
    super::reduce::vector_nest(0.0, v, (b, c, vf), |lane, x| x.mul_add(k, lane))
}
