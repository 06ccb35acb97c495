//! An LSTM cell's state update inside one compiled computation (the body
//! of `nn.RNN`'s scan): `c' = f c + i g`, `h' = o tanh(c')`, recorded as
//! one operation so that its backward pass runs XLA's fusion of the
//! transposed body rather than the plain rules op by op.
//!
//! XLA's backward body computes, per element, from the cotangents of the
//! body's outputs (the carry `c'`, the carry `h'`, the output `y = h'`):
//!
//! ```text
//! ct_h  = ct_h_carry + ct_y
//! tt    = (o * ct_h) * (1 - tanh c')
//! ct_c' = fma(tt, tanh c', ct_c_carry + tt)
//! ```
//!
//! tanh's transposed jvp adds `tt` to the carry's cotangent, then
//! `tt * tanh c'`; LLVM contracts a product into the addition it feeds
//! only when that is the product's one use, and `tt` has two, so the first
//! addition stays plain and the second is the fused one. Adding the
//! carry's cotangent and tanh's two terms in that order needs both
//! cotangents of `c'` at once, which the tape's accumulation (a sum of
//! finished contributions) cannot give: hence one operation with the three
//! outputs stacked.

use std::sync::Arc;

use ndarray::{ArrayD, Axis, Zip};

use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::{add_tangents, fused};
use crate::tensor::kernel::Kernel;
use crate::tensor::unary_fn::{apply_into, UnaryFn};
use crate::tensor::Tensor;

/// The kernel: inputs `c, i, f, g, o` of one shape, output `[3, shape]`
/// holding `c'`, `h'` and `h'` again (the carry's and the output's copy,
/// whose cotangents the backward pass adds in XLA's order).
struct LstmStep {
    /// `[3, state shape]`.
    shape: Vec<usize>,
    /// Elements (row-major) below this index contract `f * c` into the sum
    /// (`fma(f, c, fl(i * g))`), the rest `i * g`.
    fc_fused: usize,
}

impl LstmStep {
    /// `c'` into `nc` and `tanh(c')` into `tc` from the inputs, as the
    /// forward pass computes them.
    fn state_into(&self, ins: &[&[f32]], nc: &mut [f32], tc: &mut [f32]) {
        let [c, i, f, g, _] = ins else {
            unreachable!("five inputs")
        };
        for (k, v) in nc.iter_mut().enumerate() {
            *v = if k < self.fc_fused {
                f[k].mul_add(c[k], i[k] * g[k])
            } else {
                i[k].mul_add(g[k], f[k] * c[k])
            };
        }
        apply_into(UnaryFn::Tanh, nc, tc);
    }
}

impl Kernel for LstmStep {
    fn name(&self) -> &'static str {
        "lstm_step"
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// `c'` and `tanh(c')`, one state each.
    fn scratch_len(&self) -> usize {
        2 * self.shape[1..].iter().product::<usize>()
    }

    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], scratch: &mut [f32]) {
        let n = ins[0].len();
        let (nc, rest) = out.split_at_mut(n);
        let tc = &mut scratch[..n];
        self.state_into(ins, nc, tc);
        let (h, h_again) = rest.split_at_mut(n);
        for ((h, o), t) in h.iter_mut().zip(ins[4]).zip(&*tc) {
            *h = o * t;
        }
        h_again.copy_from_slice(h);
    }

    fn backward_into(
        &self,
        input: usize,
        g: &[f32],
        ins: &[&[f32]],
        dst: &mut [f32],
        scratch: &mut [f32],
    ) {
        let n = ins[0].len();
        let (gc, gh, gy) = (&g[..n], &g[n..2 * n], &g[2 * n..]);
        let (nc, tc) = scratch[..2 * n].split_at_mut(n);
        self.state_into(ins, nc, tc);
        let tc = &*tc;
        // The carry's cotangent first, then the output's.
        let ct_h = (0..n).map(|k| gh[k] + gy[k]);
        let [c, i, f, gate, o] = ins else {
            unreachable!("five inputs")
        };
        if input == 4 {
            for (d, (h, t)) in dst.iter_mut().zip(ct_h.zip(tc)) {
                *d = h * t;
            }
            return;
        }
        let ct_nc = ct_h.enumerate().map(|(k, h)| {
            let tt = (o[k] * h) * (1.0 - tc[k]);
            tt.mul_add(tc[k], gc[k] + tt)
        });
        // The product rule of `f * c + i * g`.
        let partner = match input {
            0 => f,
            1 => gate,
            2 => c,
            _ => i,
        };
        for (dv, (d, p)) in dst.iter_mut().zip(ct_nc.zip(partner.iter())) {
            *dv = d * p;
        }
    }
}

impl Tensor {
    /// One LSTM state update in a compiled region: `[c', h', h']` stacked
    /// along a new first axis, `c' = f c + i g` (one fused multiply-add:
    /// `f * c` contracted below element `fc_fused`, `i * g` from there)
    /// and `h' = o tanh(c')`. The inputs have one shape. The gradient is
    /// XLA's fused backward body (see the module); the tangent the plain
    /// rules of those operations.
    pub(crate) fn lstm_step(
        c: &Tensor,
        i: &Tensor,
        f: &Tensor,
        g: &Tensor,
        o: &Tensor,
        fc_fused: usize,
    ) -> Result<Tensor> {
        for t in [i, f, g, o] {
            if t.shape() != c.shape() {
                return Err(TensorError::Incompatible {
                    op: "lstm_step",
                    lhs: c.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
        }
        let mut shape = vec![3];
        shape.extend_from_slice(c.shape());
        let kernel = LstmStep { shape, fc_fused };
        let out = Tensor::record_kernel(Arc::new(kernel), &[c, i, f, g, o]);
        let primals = [c, i, f, g, o].map(|t| t.detached());
        let nc = out.data.index_axis(Axis(0), 0).to_owned();
        let mut tc = ArrayD::zeros(nc.raw_dim());
        apply_into(
            UnaryFn::Tanh,
            nc.as_slice().expect("standard layout"),
            tc.as_slice_mut().expect("standard layout"),
        );
        Ok(out.with_tangent(move || {
            Box::new(move |t: &[Option<Tensor>]| {
                let [c, i, f, g, o] = &primals;
                // `f * c + i * g`: each factor's tangent times its partner,
                // in the order of the factors (`fused_products_sum`'s rule).
                let mut t_nc = None;
                for (k, partner) in [(2, c), (0, f), (1, g), (3, i)] {
                    if let Some(tk) = &t[k] {
                        t_nc = add_tangents(t_nc, Some(tk.mul(partner)?))?;
                    }
                }
                // tanh's rule, then the product rule of `o * tanh(c')`.
                let fuse = fused();
                let t_tc = t_nc.as_ref().map(|t| {
                    let v = Zip::from(&t.data)
                        .and(&nc)
                        .and(&tc)
                        .map_collect(|&t, &x, &y| UnaryFn::Tanh.jvp(t, x, y, fuse));
                    Tensor::from_array(v)
                });
                let tanh_c = Tensor::from_array(tc.clone());
                let t_h = match (&t[4], &t_tc) {
                    (Some(t_o), Some(t_tc)) if fuse => {
                        // `fma(t_o, tanh c', o * t_tc)`.
                        let rhs = o.mul(t_tc)?;
                        let v = Zip::from(&t_o.data)
                            .and(&tc)
                            .and(&rhs.data)
                            .map_collect(|&a, &b, &acc| a.mul_add(b, acc));
                        Some(Tensor::from_array(v))
                    }
                    (t_o, t_tc) => add_tangents(
                        t_o.as_ref().map(|t| t.mul(&tanh_c)).transpose()?,
                        t_tc.as_ref().map(|t| o.mul(t)).transpose()?,
                    )?,
                };
                if t_nc.is_none() && t_h.is_none() {
                    return Ok(None);
                }
                let zeros = || Tensor::zeros(c.shape());
                let t_nc = t_nc.unwrap_or_else(zeros);
                let t_h = t_h.unwrap_or_else(zeros);
                Ok(Some(Tensor::stack(&[t_nc, t_h.clone(), t_h], 0)?))
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::tensor::compiled::CompiledRegion;
    use crate::tensor::unary_fn::{apply_into, UnaryFn};
    use crate::tensor::{grad, jit_value_and_grad, jvp, linearize, Tensor, Tree};

    /// Five `[2, 3]` inputs `c, i, f, g, o` (gates in (0, 1), `g` and
    /// `c` signed), shifted by `s`.
    fn inputs(s: f32) -> Vec<Tensor> {
        (0..5)
            .map(|k| {
                let v = (0..6)
                    .map(|j| {
                        let x = ((k * 7 + j) as f32 * 0.37 + s).sin();
                        if k == 0 || k == 3 {
                            x
                        } else {
                            0.5 + 0.45 * x
                        }
                    })
                    .collect();
                Tensor::from_vec(v, &[2, 3]).unwrap()
            })
            .collect()
    }

    fn step(x: &[Tensor], fc_fused: usize) -> Tensor {
        Tensor::lstm_step(&x[0], &x[1], &x[2], &x[3], &x[4], fc_fused).unwrap()
    }

    /// The operations the step stands for, as a compiled region records
    /// them: `[c', h', h']`.
    fn composed(x: &[Tensor], fc_fused: usize) -> Tensor {
        let [c, i, f, g, o] = x else { unreachable!() };
        let nc = Tensor::fused_products_sum(f, c, i, g, |k| k < fc_fused).unwrap();
        let h = o.mul(&nc.tanh()).unwrap();
        Tensor::stack(&[nc, h.clone(), h], 0).unwrap()
    }

    /// The values and the tangents (fused under `jvp`, op by op under
    /// `linearize`) are those of the operations it stands for.
    #[test]
    fn forward_and_tangents_are_the_composed_ones() {
        let _region = CompiledRegion::enter();
        let x = inputs(0.0);
        let t = inputs(1.0);
        for fc_fused in [0, 4, 6] {
            assert_eq!(step(&x, fc_fused).to_vec(), composed(&x, fc_fused).to_vec());
            let (_, ours) = jvp(|x: &Vec<Tensor>| Ok(step(x, fc_fused)), &x, &t).unwrap();
            let (_, want) = jvp(|x: &Vec<Tensor>| Ok(composed(x, fc_fused)), &x, &t).unwrap();
            assert_eq!(ours.to_vec(), want.to_vec());
            let (_, lin) = linearize(|x: &Vec<Tensor>| Ok(step(x, fc_fused)), &x).unwrap();
            let (_, lin_want) = linearize(|x: &Vec<Tensor>| Ok(composed(x, fc_fused)), &x).unwrap();
            assert_eq!(
                lin.call(&t).unwrap().to_vec(),
                lin_want.call(&t).unwrap().to_vec()
            );
        }
    }

    /// The cotangents follow XLA's fused backward body, element by element.
    #[test]
    fn gradient_is_the_fused_body() {
        let x = inputs(0.0);
        let w = Tensor::from_vec(
            (0..18).map(|k| (k as f32 * 0.91).cos()).collect(),
            &[3, 2, 3],
        )
        .unwrap();
        let tree = Tree::from_entries((0..5).map(|k| (k.to_string(), Tree::leaf(x[k].clone()))));
        let loss = |t: &Tree| {
            let x: Vec<Tensor> = (0..5)
                .map(|k| t.tensor(&k.to_string()).unwrap().clone())
                .collect();
            Ok(step(&x, 6).mul(&w)?.sum_all())
        };
        let g = grad(loss, &tree).unwrap();
        let v: Vec<Vec<f32>> = x.iter().map(Tensor::to_vec).collect();
        let wv = w.to_vec();
        for k in 0..6 {
            let [c, i, f, gg, o] = [0, 1, 2, 3, 4].map(|n| v[n][k]);
            let nc = f.mul_add(c, i * gg);
            let mut tc = [0.0];
            apply_into(UnaryFn::Tanh, &[nc], &mut tc);
            let tc = tc[0];
            let ct_h = wv[6 + k] + wv[12 + k];
            let tt = (o * ct_h) * (1.0 - tc);
            let ct_nc = tt.mul_add(tc, wv[k] + tt);
            let want = [f * ct_nc, ct_nc * gg, ct_nc * c, i * ct_nc, ct_h * tc];
            for (n, want) in want.into_iter().enumerate() {
                let got = g.tensor(&n.to_string()).unwrap().to_vec()[k];
                assert_eq!(got.to_bits(), want.to_bits(), "input {n} element {k}");
            }
        }
        // A compiled step replays it with the same bits.
        let mut step_fn = jit_value_and_grad(loss);
        step_fn.call(&tree).unwrap();
        let other = Tree::from_entries(
            inputs(0.5)
                .into_iter()
                .enumerate()
                .map(|(k, t)| (k.to_string(), Tree::leaf(t))),
        );
        let (_, replayed) = step_fn.call(&other).unwrap();
        assert!(step_fn.is_compiled());
        // The step traces as one compiled computation.
        let eager = crate::tensor::as_jitted(|| grad(loss, &other)).unwrap();
        for n in 0..5 {
            let n = n.to_string();
            assert_eq!(
                replayed.tensor(&n).unwrap().to_vec(),
                eager.tensor(&n).unwrap().to_vec()
            );
        }
    }
}
