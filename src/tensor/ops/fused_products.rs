//! `a * b + c * d` as XLA computes it inside one compiled computation (the
//! body of `lax.scan`, a jitted function): LLVM contracts one of the two
//! multiplies into the addition, a fused multiply-add over the other
//! product rounded. Which one it contracts is the compiled code's choice
//! (see the recurrent cells, which use this).

use ndarray::{ArrayD, IxDyn, Zip};

use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::add_tangents;
use crate::tensor::Tensor;

impl Tensor {
    /// `a * b + c * d` elementwise with one rounding of a fused
    /// multiply-add: where `first_fused(i)` (element `i`, row-major)
    /// `fma(a, b, fl(c * d))`, elsewhere `fma(c, d, fl(a * b))`. The four
    /// tensors have one shape. The gradient is the plain one
    /// (`g * b`, `g * a`, `g * d`, `g * c`).
    pub(crate) fn fused_products_sum(
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        d: &Tensor,
        first_fused: impl Fn(usize) -> bool,
    ) -> Result<Tensor> {
        for t in [b, c, d] {
            if t.shape() != a.shape() {
                return Err(TensorError::Incompatible {
                    op: "fused_products_sum",
                    lhs: a.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
        }
        let shape = IxDyn(a.shape());
        let mut i = 0usize;
        let mut out = ArrayD::<f32>::zeros(shape);
        Zip::from(&mut out)
            .and(&a.data)
            .and(&b.data)
            .and(&c.data)
            .and(&d.data)
            .for_each(|o, &a, &b, &c, &d| {
                *o = if first_fused(i) {
                    a.mul_add(b, c * d)
                } else {
                    c.mul_add(d, a * b)
                };
                i += 1;
            });
        let saved = [&a.data, &b.data, &c.data, &d.data].map(|t| t.clone());
        let kept = saved.clone();
        let factors = [a, b, c, d].map(|t| t.detached());
        // Each factor's gradient is the cotangent times its partner.
        const PARTNER: [usize; 4] = [1, 0, 3, 2];
        Ok(
            Tensor::record(out.into_shared(), &[a, b, c, d], move |g, needs| {
                (0..4)
                    .map(|k| needs[k].then(|| &g * &saved[PARTNER[k]]))
                    .collect()
            })
            // Products that XLA keeps up to their accumulation (a GRU's
            // `r * ct` reaching `b_hn`: see `ProductCotangents`).
            .keep_products(Box::new(move |g, k| {
                (g.clone(), kept[PARTNER[k]].to_owned())
            }))
            .with_tangent(move || {
                Box::new(move |t: &[Option<Tensor>]| {
                    let mut sum = None;
                    for (k, tk) in t.iter().enumerate() {
                        if let Some(tk) = tk {
                            sum = add_tangents(sum, Some(tk.mul(&factors[PARTNER[k]])?))?;
                        }
                    }
                    Ok(sum)
                })
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::tensor::{grad, Tensor, Tree};

    /// One rounding: `1 + 2^-23` times itself is `1 + 2^-22 + 2^-46`; less
    /// `1 + 2^-22` (exact as the other product) leaves `2^-46`, which
    /// rounding the product first loses. The gradient is the plain
    /// product rule.
    #[test]
    fn one_product_is_fused() {
        let x = 1.0 + f32::EPSILON;
        let a = Tensor::from_vec(vec![x, 3.0], &[2]).unwrap();
        let c = Tensor::from_vec(vec![-(1.0 + 2.0 * f32::EPSILON), 1.0], &[2]).unwrap();
        let one = Tensor::ones(&[2]);
        let y = Tensor::fused_products_sum(&a, &a, &c, &one, |_| true).unwrap();
        assert_eq!(y.to_vec(), [2f32.powi(-46), 10.0]);
        let y = Tensor::fused_products_sum(&c, &one, &a, &a, |i| i == 0).unwrap();
        assert_eq!(y.to_vec(), [0.0, 10.0]);
        let g = grad(
            |t| {
                let a = t.tensor("a")?;
                Ok(Tensor::fused_products_sum(a, a, &c, &one, |_| true)?.sum_all())
            },
            &Tree::new().with("a", a.clone()),
        )
        .unwrap();
        assert_eq!(g.tensor("a").unwrap().to_vec(), [2.0 * x, 6.0]);
        let bad = Tensor::fused_products_sum(&a, &a, &Tensor::ones(&[3]), &one, |_| true);
        assert!(bad.is_err());
    }
}
