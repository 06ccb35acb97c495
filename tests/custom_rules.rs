//! `tensor::custom_vjp` and `tensor::checkpoint`: user-written backward
//! rules (straight-through estimator, gradient clipping, scaling) for
//! tensors, tuples and trees, honoured inside `Vmap` and `Scan`, and the
//! errors of rules that return the wrong structure or shapes.

use flaxen::core::{Result, Scope, Variables};
use flaxen::nn::{Dense, Module, Scan, Vmap};
use flaxen::random;
use flaxen::tensor::{checkpoint, custom_vjp, grad, value_and_grad, Tensor, TensorError, Tree};
use flaxen::Error;

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

/// Rounds forward; lets the cotangent through unchanged backward.
fn round_ste(x: &Tensor) -> Result<Tensor> {
    custom_vjp(
        |x: &Tensor| {
            let r: Vec<f32> = x.to_vec().iter().map(|v| v.round()).collect();
            Ok((Tensor::from_vec(r, x.shape())?, ()))
        },
        |_: &(), g: &Tensor| Ok(g.clone()),
        x,
    )
}

/// The identity forward; the cotangent clipped to [-1, 1] backward.
fn clip_gradient(x: &Tensor) -> Result<Tensor> {
    custom_vjp(
        |x: &Tensor| Ok((x.clone(), ())),
        |_: &(), g: &Tensor| Ok(g.clip(-1.0, 1.0)?),
        x,
    )
}

/// The identity forward; twice the cotangent backward (exact).
fn double_gradient(x: &Tensor) -> Result<Tensor> {
    custom_vjp(
        |x: &Tensor| Ok((x.clone(), ())),
        |_: &(), g: &Tensor| Ok(g * 2.0),
        x,
    )
}

#[test]
fn straight_through_estimator() {
    let x = Tree::from(t(&[0.3, 1.7, -2.4], &[3]));
    let w = t(&[1.0, -2.0, 0.5], &[3]);
    let (value, g) = value_and_grad(
        |p| Ok(round_ste(p.as_tensor().unwrap())?.mul(&w)?.sum_all()),
        &x,
    )
    .unwrap();
    assert_eq!(value.item().unwrap(), -5.0);
    assert_eq!(g.as_tensor().unwrap().to_vec(), w.to_vec());
    // Outside a differentiation only the forward pass runs.
    assert_eq!(
        round_ste(x.as_tensor().unwrap()).unwrap().to_vec(),
        [0.0, 2.0, -2.0]
    );
}

#[test]
fn gradient_clipping_rule() {
    let x = Tree::from(t(&[1.0, 2.0, 3.0], &[3]));
    let g = grad(
        |p| {
            Ok(clip_gradient(&(p.as_tensor().unwrap() * 3.0))?
                .square()
                .sum_all())
        },
        &x,
    )
    .unwrap();
    // d/dx of (3x)^2 through the clip: clip(2 * 3x, -1, 1) * 3.
    assert_eq!(g.as_tensor().unwrap().to_vec(), [3.0, 3.0, 3.0]);
}

#[test]
fn tuples_in_and_out_with_residuals() {
    // f(a, b) = (a * b, a + b) with its exact rule, residuals (a, b).
    let f = |ab: &(Tensor, Tensor)| {
        custom_vjp(
            |(a, b): &(Tensor, Tensor)| Ok(((a.mul(b)?, a.add(b)?), (a.clone(), b.clone()))),
            |(a, b): &(Tensor, Tensor), (gp, gs): &(Tensor, Tensor)| {
                Ok((gp.mul(b)?.add(gs)?, gp.mul(a)?.add(gs)?))
            },
            ab,
        )
    };
    let p = Tree::new()
        .with("a", t(&[1.5, -2.0], &[2]))
        .with("b", t(&[0.25, 3.0], &[2]));
    let loss = |custom: bool| {
        move |p: &Tree| -> Result<Tensor> {
            let (a, b) = (p.tensor("a")?.clone(), p.tensor("b")?.clone());
            let (prod, sum) = if custom {
                f(&(a, b))?
            } else {
                (a.mul(&b)?, a.add(&b)?)
            };
            Ok(prod.square().sum_all().add(&sum.exp().sum_all())?)
        }
    };
    let (v1, g1) = value_and_grad(loss(true), &p).unwrap();
    let (v2, g2) = value_and_grad(loss(false), &p).unwrap();
    assert_eq!(v1.item().unwrap().to_bits(), v2.item().unwrap().to_bits());
    for k in ["a", "b"] {
        assert_eq!(
            bits(g1.tensor(k).unwrap()),
            bits(g2.tensor(k).unwrap()),
            "{k}"
        );
    }
}

#[test]
fn checkpoint_of_tuples_and_static_values() {
    let f = |(x, k, scale): &(Tensor, usize, f32)| -> Result<(Tensor, Tensor)> {
        let mut h = x.clone();
        for _ in 0..*k {
            h = h.sin();
        }
        Ok((h.clone(), &h * *scale))
    };
    let p = Tree::from(t(&[0.5, -1.25, 2.0], &[3]));
    let loss = |remat: bool| {
        move |p: &Tree| -> Result<Tensor> {
            let input = (p.as_tensor().unwrap().clone(), 3usize, 0.5f32);
            let (a, b) = if remat {
                checkpoint(f, &input)?
            } else {
                f(&input)?
            };
            Ok(a.mul(&b)?.sum_all())
        }
    };
    let (v1, g1) = value_and_grad(loss(true), &p).unwrap();
    let (v2, g2) = value_and_grad(loss(false), &p).unwrap();
    assert_eq!(v1.item().unwrap().to_bits(), v2.item().unwrap().to_bits());
    assert_eq!(bits(g1.as_tensor().unwrap()), bits(g2.as_tensor().unwrap()));
}

fn argument_error(e: &Error, op: &str) -> String {
    match e {
        Error::Tensor {
            source: TensorError::Argument { op: o, message },
            ..
        } if *o == op => message.clone(),
        other => panic!("expected an argument error of {op}, got {other:?}"),
    }
}

#[test]
fn rules_returning_the_wrong_structure_or_shapes_are_errors() {
    let x = Tree::from(t(&[1.0, 2.0], &[2]));
    // A rule over a pair whose backward returns a cotangent of the wrong
    // shape for the second input.
    let e = grad(
        |p| {
            let y = p.as_tensor().unwrap().clone();
            let z = custom_vjp(
                |(a, b): &(Tensor, Tensor)| Ok((a.add(b)?, ())),
                |_: &(), g: &Tensor| Ok((g.clone(), g.reshape(&[1, 2])?)),
                &(y.clone(), y),
            )?;
            Ok(z.sum_all())
        },
        &x,
    )
    .unwrap_err();
    let m = argument_error(&e, "custom_vjp");
    assert!(m.contains("shape [1, 2]") && m.contains("shape [2]"), "{m}");
    // The rule's own error comes back as it is.
    let e = grad(
        |p| {
            let y = custom_vjp(
                |x: &Tensor| Ok((x.clone(), ())),
                |_: &(), g: &Tensor| Ok(g.add(&Tensor::zeros(&[3]))?),
                p.as_tensor().unwrap(),
            )?;
            Ok(y.sum_all())
        },
        &x,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Tensor {
                source: TensorError::Incompatible { op: "add", .. },
                ..
            }
        ),
        "{e:?}"
    );
    // A later grad is not affected by the failure.
    assert!(grad(
        |p| Ok(double_gradient(p.as_tensor().unwrap())?.sum_all()),
        &x
    )
    .is_ok());
}

#[test]
fn functions_that_capture_traced_tensors_are_refused() {
    let p = Tree::from(t(&[1.0, 2.0], &[2]));
    let e = grad(
        |p| {
            let w = p.as_tensor().unwrap().clone();
            let x = Tensor::ones(&[2]);
            // `w` is traced but captured, not an input.
            let y = checkpoint(
                move |x: &Tensor| Ok(x.mul(&w)?),
                &(&x + &Tensor::zeros(&[2])),
            )?;
            Ok(y.sum_all())
        },
        &p,
    );
    // x is not traced: nothing is recorded, the function just runs.
    assert!(e.is_ok());
    let e = grad(
        |p| {
            let w = p.as_tensor().unwrap().clone();
            let x = p.as_tensor().unwrap() * 2.0;
            let y = checkpoint(move |x: &Tensor| Ok(x.mul(&w)?), &x)?;
            Ok(y.sum_all())
        },
        &p,
    )
    .unwrap_err();
    assert!(argument_error(&e, "checkpoint").contains("not among its inputs"));
}

/// A Dense layer whose output's gradient is doubled by a custom rule.
struct Doubled;

impl Module for Doubled {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        double_gradient(&s.call(Dense::new(3), x)?)
    }
}

struct Plain;

impl Module for Plain {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Doubled"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        s.call(Dense::new(3), x)
    }
}

#[derive(Clone)]
struct ScanCell<M>(M);

impl<M: Module<Input = Tensor, Output = Tensor> + Clone> Module for ScanCell<M> {
    type Input = (Tensor, ());
    type Output = (Tensor, ());
    fn type_name(&self) -> &'static str {
        "ScanCell"
    }
    fn call(&self, s: &Scope<'_>, (c, _): (Tensor, ())) -> Result<(Tensor, ())> {
        Ok((s.call(self.0.clone(), c)?.tanh(), ()))
    }
}

impl Clone for Doubled {
    fn clone(&self) -> Self {
        Doubled
    }
}

impl Clone for Plain {
    fn clone(&self) -> Self {
        Plain
    }
}

#[test]
fn rules_are_honoured_inside_vmap_and_scan() {
    let x = Tensor::from_array(random::normal(random::key(3), &[4, 2, 3]).unwrap());
    // Vmap over 4 items with per-item parameters.
    let vmapped = |doubled: bool, p: &Tree| -> Result<Tensor> {
        let v = Variables::new().with("params", p.clone());
        let out = if doubled {
            Vmap::new(Doubled)
                .variable_axes("params", Some(0))
                .split_rngs("params", true)
                .apply(&v, x.clone(), ())?
        } else {
            Vmap::new(Plain)
                .variable_axes("params", Some(0))
                .split_rngs("params", true)
                .apply(&v, x.clone(), ())?
        };
        Ok(out.square().sum_all())
    };
    let v = Vmap::new(Plain)
        .variable_axes("params", Some(0))
        .split_rngs("params", true)
        .init(random::key(0), x.clone())
        .unwrap();
    let g2 = grad(|p| vmapped(true, p), &v.params()).unwrap();
    let g1 = grad(|p| vmapped(false, p), &v.params()).unwrap();
    for ((path, a), (_, b)) in g2.paths().iter().zip(g1.paths()) {
        assert_eq!(bits(a), bits(&(b * 2.0)), "vmap {path}");
    }
    // Scan over 4 steps with per-step parameters.
    let c = x.index_axis(0, 0).unwrap();
    let scanned = |doubled: bool, p: &Tree| -> Result<Tensor> {
        let v = Variables::new().with("params", p.clone());
        let out = if doubled {
            Scan::new(ScanCell(Doubled))
                .variable_axes("params", 0)
                .split_rngs("params", true)
                .length(4)
                .apply(&v, (c.clone(), ()), ())?
        } else {
            Scan::new(ScanCell(Plain))
                .variable_axes("params", 0)
                .split_rngs("params", true)
                .length(4)
                .apply(&v, (c.clone(), ()), ())?
        };
        Ok(out.0.sum_all())
    };
    let v = Scan::new(ScanCell(Plain))
        .variable_axes("params", 0)
        .split_rngs("params", true)
        .length(4)
        .init(random::key(0), (c.clone(), ()))
        .unwrap();
    let g2 = grad(|p| scanned(true, p), &v.params()).unwrap();
    let g1 = grad(|p| scanned(false, p), &v.params()).unwrap();
    // The last step's parameters see one doubling, earlier ones more (each
    // later step doubles the cotangent flowing back through it).
    let last = |g: &Tree| {
        g.tensor("Doubled_0/Dense_0/bias")
            .unwrap()
            .index_axis(0, 3)
            .unwrap()
    };
    assert_eq!(bits(&last(&g2)), bits(&(&last(&g1) * 2.0)));
    let first = |g: &Tree| {
        g.tensor("Doubled_0/Dense_0/bias")
            .unwrap()
            .index_axis(0, 0)
            .unwrap()
    };
    assert_ne!(bits(&first(&g2)), bits(&(&first(&g1) * 2.0)));
}

/// Flax's test_custom_vjp with a backward rule of the wrong parameter
/// structure, and with the sign rule (`nn::custom_vjp`, `nn::vjp`).
struct SignGrad {
    drop_bias: bool,
}

impl Module for SignGrad {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Foo"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let drop_bias = self.drop_bias;
        let y = flaxen::nn::custom_vjp(
            s,
            &x,
            |s, x| {
                let primals = Tree::new().with("x", x.clone());
                flaxen::nn::vjp(
                    s,
                    |s, p| s.call(Dense::new(1), p.tensor("x")?.clone()),
                    &primals,
                )
            },
            move |vjp_fn, y_t| {
                let (params_t, input_t) = vjp_fn.call(y_t)?;
                let sign = |t: &Tensor| {
                    let s: Vec<f32> = t.to_vec().iter().map(|v| v.signum()).collect();
                    Tensor::from_vec(s, t.shape()).unwrap()
                };
                let mut params_t = flaxen::tensor::tree_map(&params_t, sign);
                if drop_bias {
                    params_t = Tree::new().with(
                        "Dense_0",
                        Tree::new().with("kernel", params_t.tensor("Dense_0/kernel")?.clone()),
                    );
                }
                Ok((params_t, input_t.tensor("x")?.clone()))
            },
        )?;
        Ok(y.reshape(&[])?)
    }
}

#[test]
fn module_custom_vjp_replaces_parameter_gradients() {
    let x = Tensor::ones(&[2]);
    let v = SignGrad { drop_bias: false }
        .init(random::key(0), x.clone())
        .unwrap();
    assert!(v.get("params/Dense_0/kernel").is_some());
    let loss = |drop_bias: bool| {
        let x = x.clone();
        move |p: &Tree| {
            let v = Variables::new().with("params", p.clone());
            SignGrad { drop_bias }.apply(&v, x.clone(), ())
        }
    };
    let g = grad(loss(false), &v.params()).unwrap();
    for leaf in g.leaves() {
        assert!(leaf.to_vec().iter().all(|v| v.abs() == 1.0), "{leaf:?}");
    }
    let e = grad(loss(true), &v.params()).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Tensor {
                source: TensorError::TreeStructure { message },
                ..
            } if message.contains("Dense_0/bias")
        ),
        "{e:?}"
    );
}
