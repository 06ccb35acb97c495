//! A GRU cell's state update inside one compiled computation (the body of
//! `nn.RNN`'s scan): `h' = (1 - z) n + z h`, recorded as one operation so
//! that its backward pass runs XLA's fusion of the transposed body rather
//! than the plain rules op by op.
//!
//! XLA's backward body computes, per element, from the cotangents of the
//! body's outputs (the carry `h'` and the output `y = h'`):
//!
//! ```text
//! ct_h' = ct_h_carry + ct_y
//! ct_n  = (1 - z) * ct_h'
//! ct_z  = fma(ct_h', h, -(ct_h' * n))
//! ct_h  = fma(z, ct_h', ct_hn) + ...
//! ```
//!
//! `ct_z` is `ct_h' * h + (-(ct_h' * n))` with both products of one use;
//! LLVM contracts the first. The previous state's cotangent starts with
//! `z * ct_h'` plus the cotangent through `h W_hn + b_hn` (then those
//! through the other two gates' products), the product contracted into
//! that addition: a [`DeferredProduct`](crate::tensor::tape::DeferredProduct).

use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::add_tangents;
use crate::tensor::kernel::Kernel;
use crate::tensor::Tensor;

/// The kernel: inputs `h, z, n` of one shape, output `[2, shape]` holding
/// `h'` twice (the carry's and the output's copy, whose cotangents the
/// backward pass adds in XLA's order).
struct GruStep {
    /// `[2, state shape]`.
    shape: Vec<usize>,
}

/// `h' = fma(1 - z, n, fl(z * h))`, as XLA's forward body computes it.
fn new_state(h: f32, z: f32, n: f32) -> f32 {
    (1.0 - z).mul_add(n, z * h)
}

impl Kernel for GruStep {
    fn name(&self) -> &'static str {
        "gru_step"
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], _: &mut [f32]) {
        let [h, z, n] = ins else {
            unreachable!("three inputs")
        };
        let (first, second) = out.split_at_mut(h.len());
        for (k, v) in first.iter_mut().enumerate() {
            *v = new_state(h[k], z[k], n[k]);
        }
        second.copy_from_slice(first);
    }

    fn backward_into(
        &self,
        input: usize,
        g: &[f32],
        ins: &[&[f32]],
        dst: &mut [f32],
        _: &mut [f32],
    ) {
        let [h, z, n] = ins else {
            unreachable!("three inputs")
        };
        let len = h.len();
        // The carry's cotangent first, then the output's.
        let ct = (0..len).map(|k| g[k] + g[len + k]);
        let dst = dst.iter_mut().enumerate().zip(ct);
        match input {
            // Rounded alone: the product is deferred whenever it can be
            // fused (see the module).
            0 => dst.for_each(|((k, d), c)| *d = z[k] * c),
            1 => dst.for_each(|((k, d), c)| *d = c.mul_add(h[k], -(c * n[k]))),
            _ => dst.for_each(|((k, d), c)| *d = (1.0 - z[k]) * c),
        }
    }
}

impl Tensor {
    /// One GRU state update in a compiled region: `[h', h']` stacked along
    /// a new first axis, `h' = fma(1 - z, n, fl(z * h))`. The inputs have
    /// one shape. The gradient is XLA's fused backward body (see the
    /// module); the tangent the plain rules of `1 - z` and the fused sum
    /// of products.
    pub(crate) fn gru_step(h: &Tensor, z: &Tensor, n: &Tensor) -> Result<Tensor> {
        for t in [z, n] {
            if t.shape() != h.shape() {
                return Err(TensorError::Incompatible {
                    op: "gru_step",
                    lhs: h.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
        }
        let mut shape = vec![2];
        shape.extend_from_slice(h.shape());
        let out = Tensor::record_kernel(Arc::new(GruStep { shape }), &[h, z, n]);
        let zs = z.data.clone();
        let out = out.defer_product(
            0,
            Box::new(move |g: &ArrayD<f32>| {
                let half = g.len() / 2;
                let g = g.as_standard_layout();
                let g = g.as_slice().expect("standard layout");
                let ct = (0..half).map(|k| g[k] + g[half + k]).collect();
                let ct = ArrayD::from_shape_vec(IxDyn(zs.shape()), ct).expect("the state's shape");
                (zs.to_owned(), ct)
            }),
        );
        let [h, z, n] = [h, z, n].map(|t| t.detached());
        Ok(out.with_tangent(move || {
            Box::new(move |t: &[Option<Tensor>]| {
                // `1 - z`'s tangent, then each factor of `(1 - z) n + z h`
                // times its partner, in the order of the factors.
                let t_omz = t[1].as_ref().map(Tensor::neg);
                let omz = Tensor::from_array(z.data.mapv(|z| 1.0 - z));
                let terms = [
                    (t_omz.as_ref(), n.clone()),
                    (t[2].as_ref(), omz),
                    (t[1].as_ref(), h.clone()),
                    (t[0].as_ref(), z.clone()),
                ];
                let mut t_h = None;
                for (tk, partner) in terms {
                    if let Some(tk) = tk {
                        t_h = add_tangents(t_h, Some(tk.mul(&partner)?))?;
                    }
                }
                t_h.map(|t| Tensor::stack(&[t.clone(), t], 0))
                    .transpose()
                    .map_err(Into::into)
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::tensor::compiled::CompiledRegion;
    use crate::tensor::{grad, jvp, linearize, Tensor, Tree};

    /// Three `[2, 3]` inputs `h, z, n` (`z` in (0, 1)), shifted by `s`.
    fn inputs(s: f32) -> Vec<Tensor> {
        (0..3)
            .map(|k| {
                let v = (0..6)
                    .map(|j| {
                        let x = ((k * 7 + j) as f32 * 0.37 + s).sin();
                        if k == 1 {
                            0.5 + 0.45 * x
                        } else {
                            x
                        }
                    })
                    .collect();
                Tensor::from_vec(v, &[2, 3]).unwrap()
            })
            .collect()
    }

    fn step(x: &[Tensor]) -> Tensor {
        Tensor::gru_step(&x[0], &x[1], &x[2]).unwrap()
    }

    /// The operations the step stands for: `[h', h']`.
    fn composed(x: &[Tensor]) -> Tensor {
        let [h, z, n] = x else { unreachable!() };
        let omz = Tensor::scalar(1.0).sub(z).unwrap();
        let new = Tensor::fused_products_sum(&omz, n, z, h, |_| true).unwrap();
        Tensor::stack(&[new.clone(), new], 0).unwrap()
    }

    /// The values and the tangents (fused under `jvp`, op by op under
    /// `linearize`) are those of the operations it stands for.
    #[test]
    fn forward_and_tangents_are_the_composed_ones() {
        let _region = CompiledRegion::enter();
        let x = inputs(0.0);
        let t = inputs(1.0);
        assert_eq!(step(&x).to_vec(), composed(&x).to_vec());
        let (_, ours) = jvp(|x: &Vec<Tensor>| Ok(step(x)), &x, &t).unwrap();
        let (_, want) = jvp(|x: &Vec<Tensor>| Ok(composed(x)), &x, &t).unwrap();
        assert_eq!(ours.to_vec(), want.to_vec());
        let (_, lin) = linearize(|x: &Vec<Tensor>| Ok(step(x)), &x).unwrap();
        let (_, lin_want) = linearize(|x: &Vec<Tensor>| Ok(composed(x)), &x).unwrap();
        assert_eq!(
            lin.call(&t).unwrap().to_vec(),
            lin_want.call(&t).unwrap().to_vec()
        );
    }

    /// The cotangents follow XLA's fused backward body; the previous
    /// state's product is fused into the next cotangent reaching it, and
    /// rounded alone when none does.
    #[test]
    fn gradient_is_the_fused_body() {
        let x = inputs(0.0);
        let w = Tensor::from_vec(
            (0..12).map(|k| (k as f32 * 0.91).cos()).collect(),
            &[2, 2, 3],
        )
        .unwrap();
        let other =
            Tensor::from_vec((0..6).map(|k| (k as f32 * 0.53).sin()).collect(), &[2, 3]).unwrap();
        let tree = Tree::from_entries((0..3).map(|k| (k.to_string(), Tree::leaf(x[k].clone()))));
        let v: Vec<Vec<f32>> = x.iter().map(Tensor::to_vec).collect();
        let (wv, ov) = (w.to_vec(), other.to_vec());
        for also_used in [false, true] {
            let loss = |t: &Tree| {
                let x: Vec<Tensor> = (0..3)
                    .map(|k| t.tensor(&k.to_string()).unwrap().clone())
                    .collect();
                // Recorded first, so that its cotangent `other` reaches
                // `h` after the step's.
                let before = also_used
                    .then(|| x[0].mul(&other).map(|t| t.sum_all()))
                    .transpose()?;
                let total = step(&x).mul(&w)?.sum_all();
                Ok(match before {
                    Some(b) => b.add(&total)?,
                    None => total,
                })
            };
            let g = grad(loss, &tree).unwrap();
            for k in 0..6 {
                let [h, z, n] = [0, 1, 2].map(|i| v[i][k]);
                let ct = wv[k] + wv[6 + k];
                let ct_h = if also_used {
                    z.mul_add(ct, ov[k])
                } else {
                    z * ct
                };
                let want = [ct_h, ct.mul_add(h, -(ct * n)), (1.0 - z) * ct];
                for (i, want) in want.into_iter().enumerate() {
                    let got = g.tensor(&i.to_string()).unwrap().to_vec()[k];
                    assert_eq!(got.to_bits(), want.to_bits(), "input {i} element {k}");
                }
            }
        }
    }
}
