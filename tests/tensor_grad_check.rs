//! Every differentiable operation's value and gradient against an
//! independent `f64` reference (ndarray) and central finite differences.

mod tensor_common;

use flaxen::tensor::Tensor;
use ndarray::{ArrayD, Axis, Dimension, IxDyn, Zip};
use tensor_common::{check, Gen};

type A = ArrayD<f64>;

/// `f` over the NumPy broadcast of `a` and `b`, using ndarray's own
/// co-broadcasting for the shape.
fn bin(a: &A, b: &A, f: impl Fn(f64, f64) -> f64) -> A {
    let shape = (a * 0.0 + b * 0.0).raw_dim();
    Zip::from(&a.broadcast(shape.clone()).unwrap())
        .and(&b.broadcast(shape).unwrap())
        .map_collect(|&x, &y| f(x, y))
}

fn sum_axes(x: &A, axes: &[usize], keepdims: bool) -> A {
    let mut out = x.clone();
    for &a in axes.iter().rev() {
        out = out.sum_axis(Axis(a));
        if keepdims {
            out = out.insert_axis(Axis(a));
        }
    }
    out
}

#[test]
fn arithmetic_with_broadcasting() {
    let mut g = Gen::new(1);
    let pairs: [(&[usize], &[usize]); 5] = [
        (&[2, 3], &[2, 3]),
        (&[2, 3], &[3]),
        (&[4, 1, 3], &[2, 1]),
        (&[2, 3], &[]),
        (&[1], &[3, 2]),
    ];
    for (sa, sb) in pairs {
        let a = g.array(sa, -2.0, 2.0);
        let b = g.array(sb, -2.0, 2.0);
        let inputs = [a.clone(), b.clone()];
        check("add", &inputs, |x| &x[0] + &x[1], |x| &x[0] + &x[1]);
        check("sub", &inputs, |x| &x[0] - &x[1], |x| &x[0] - &x[1]);
        check("mul", &inputs, |x| &x[0] * &x[1], |x| &x[0] * &x[1]);
        let bpos = g.array(sb, 0.5, 2.0);
        // A constant scalar divisor follows another rule than a
        // differentiated one, as in JAX (tests/division_fixtures.rs), so
        // differentiating the dividend alone gives other bits there.
        if !sb.is_empty() {
            check(
                "div",
                &[a.clone(), bpos],
                |x| x[0].div(&x[1]).unwrap(),
                |x| &x[0] / &x[1],
            );
        }
    }
}

#[test]
fn scalar_operators_and_neg() {
    let mut g = Gen::new(2);
    let a = g.array(&[3, 2], -2.0, 2.0);
    check(
        "scalar ops",
        std::slice::from_ref(&a),
        |x| (2.0 * &x[0] + 1.5) / 4.0 - (3.0 - &x[0]) * 0.5,
        |x| (2.0 * &x[0] + 1.5) / 4.0 - (3.0 - &x[0]) * 0.5,
    );
    check("neg", &[a], |x| -&x[0], |x| -&x[0]);
}

#[test]
fn maximum_minimum_away_from_ties() {
    let mut g = Gen::new(3);
    let a = g.array(&[3, 4], -2.0, 2.0);
    let d = g.away_from_zero(&[4], 0.1, 1.0);
    let b = (&a.slice(ndarray::s![0, ..]).to_owned().into_dyn() + &d).mapv(|v| v as f32 as f64);
    let inputs = [a, b];
    check(
        "maximum",
        &inputs,
        |x| x[0].maximum(&x[1]).unwrap(),
        |x| bin(&x[0], &x[1], f64::max),
    );
    check(
        "minimum",
        &inputs,
        |x| x[0].minimum(&x[1]).unwrap(),
        |x| bin(&x[0], &x[1], f64::min),
    );
}

#[test]
fn pow_of_tensors() {
    let mut g = Gen::new(4);
    let base = g.array(&[2, 3], 0.5, 2.0);
    let exponent = g.array(&[3], -1.5, 1.5);
    check(
        "pow",
        &[base, exponent],
        |x| x[0].pow(&x[1]).unwrap(),
        |x| bin(&x[0], &x[1], f64::powf),
    );
}

#[test]
fn select_with_mask() {
    let mut g = Gen::new(5);
    let a = g.array(&[3, 4], -1.0, 1.0);
    let b = g.array(&[4], -1.0, 1.0);
    let mask = g
        .array(&[3, 4], 0.0, 1.0)
        .mapv(|v| if v < 0.5 { 0.0 } else { 1.0 });
    let m32 = tensor_common::to_tensor(&mask);
    check(
        "select",
        &[a, b],
        |x| Tensor::select(&m32, &x[0], &x[1]).unwrap(),
        |x| {
            let bb = x[1].broadcast(x[0].raw_dim()).unwrap();
            Zip::from(&mask)
                .and(&x[0])
                .and(&bb)
                .map_collect(|&m, &t, &f| if m != 0.0 { t } else { f })
        },
    );
}

#[test]
fn unary_functions() {
    let mut g = Gen::new(6);
    let wide = g.array(&[3, 4], -3.0, 3.0);
    let pos = g.array(&[3, 4], 0.5, 3.0);
    let kinked = g.away_from_zero(&[3, 4], 0.05, 2.0);
    type Op = fn(&Tensor) -> Tensor;
    type Ref = fn(f64) -> f64;
    let cases: [(&str, &A, Op, Ref); 12] = [
        ("exp", &wide, Tensor::exp, f64::exp),
        ("log", &pos, Tensor::log, f64::ln),
        ("tanh", &wide, Tensor::tanh, f64::tanh),
        ("sigmoid", &wide, Tensor::sigmoid, |x| {
            1.0 / (1.0 + (-x).exp())
        }),
        ("relu", &kinked, Tensor::relu, |x| x.max(0.0)),
        ("gelu", &wide, Tensor::gelu, |x| {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }),
        ("sqrt", &pos, Tensor::sqrt, f64::sqrt),
        ("rsqrt", &pos, Tensor::rsqrt, |x| 1.0 / x.sqrt()),
        ("square", &wide, Tensor::square, |x| x * x),
        ("abs", &kinked, Tensor::abs, f64::abs),
        ("powf", &pos, |t| t.powf(2.5), |x| x.powf(2.5)),
        (
            "clip",
            &kinked,
            |t| t.clip(-1.0, 1.0).unwrap(),
            |x| x.clamp(-1.0, 1.0),
        ),
    ];
    for (name, input, op, reference) in cases {
        // Keep clip's inputs off its bounds.
        let input = if name == "clip" {
            input.mapv(|v| {
                if (v.abs() - 1.0).abs() < 0.05 {
                    v * 0.9
                } else {
                    v
                }
            })
        } else {
            input.clone()
        };
        check(name, &[input], |x| op(&x[0]), |x| x[0].mapv(reference));
    }
}

#[test]
fn reductions() {
    let mut g = Gen::new(7);
    let x = g.array(&[2, 3, 4], -2.0, 2.0);
    for (axes, norm) in [
        (vec![0isize], vec![0usize]),
        (vec![-1], vec![2]),
        (vec![0, 2], vec![0, 2]),
        (vec![1, 0, 2], vec![0, 1, 2]),
    ] {
        for keepdims in [false, true] {
            let n: usize = norm.iter().map(|&a| x.shape()[a]).product();
            check(
                "sum",
                std::slice::from_ref(&x),
                |t| t[0].sum(&axes, keepdims).unwrap(),
                |r| sum_axes(&r[0], &norm, keepdims),
            );
            check(
                "mean",
                std::slice::from_ref(&x),
                |t| t[0].mean(&axes, keepdims).unwrap(),
                |r| sum_axes(&r[0], &norm, keepdims) / n as f64,
            );
            check(
                "var",
                std::slice::from_ref(&x),
                |t| t[0].var(&axes, keepdims).unwrap(),
                |r| {
                    let m = sum_axes(&r[0], &norm, true) / n as f64;
                    let c = &r[0] - &m;
                    sum_axes(&(&c * &c), &norm, keepdims) / n as f64
                },
            );
            check(
                "max",
                std::slice::from_ref(&x),
                |t| t[0].max(&axes, keepdims).unwrap(),
                |r| {
                    let mut out = r[0].clone();
                    for &a in norm.iter().rev() {
                        out = out.fold_axis(Axis(a), f64::NEG_INFINITY, |&m, &v| m.max(v));
                        if keepdims {
                            out = out.insert_axis(Axis(a));
                        }
                    }
                    out
                },
            );
        }
    }
    check(
        "sum_all",
        std::slice::from_ref(&x),
        |t| t[0].sum_all(),
        |r| ArrayD::from_elem(IxDyn(&[]), r[0].sum()),
    );
    check(
        "mean_all",
        std::slice::from_ref(&x),
        |t| t[0].mean_all(),
        |r| ArrayD::from_elem(IxDyn(&[]), r[0].mean().unwrap()),
    );
}

#[test]
fn softmax_and_log_softmax() {
    let mut g = Gen::new(8);
    let x = g.array(&[3, 4], -3.0, 3.0);
    for (axis, a) in [(0isize, 0usize), (-1, 1)] {
        let softmax = move |r: &A| {
            let m = r
                .fold_axis(Axis(a), f64::NEG_INFINITY, |&m, &v| m.max(v))
                .insert_axis(Axis(a));
            let e = (r - &m).mapv(f64::exp);
            let s = e.sum_axis(Axis(a)).insert_axis(Axis(a));
            e / s
        };
        check(
            "softmax",
            std::slice::from_ref(&x),
            |t| t[0].softmax(axis).unwrap(),
            |r| softmax(&r[0]),
        );
        check(
            "log_softmax",
            std::slice::from_ref(&x),
            |t| t[0].log_softmax(axis).unwrap(),
            |r| softmax(&r[0]).mapv(f64::ln),
        );
    }
}

#[test]
fn shape_operations() {
    let mut g = Gen::new(9);
    let x = g.array(&[2, 3, 4], -2.0, 2.0);
    let one = [x.clone()];
    check(
        "reshape",
        &one,
        |t| t[0].reshape(&[4, -1]).unwrap(),
        |r| r[0].clone().into_shape_with_order(IxDyn(&[4, 6])).unwrap(),
    );
    check(
        "expand_dims",
        &one,
        |t| t[0].expand_dims(1).unwrap(),
        |r| r[0].clone().insert_axis(Axis(1)),
    );
    check(
        "squeeze",
        &one,
        |t| t[0].expand_dims(-1).unwrap().squeeze(-1).unwrap(),
        |r| r[0].clone(),
    );
    check(
        "transpose",
        &one,
        |t| t[0].transpose(),
        |r| r[0].t().to_owned(),
    );
    check(
        "permute",
        &one,
        |t| t[0].permute(&[1, 2, 0]).unwrap(),
        |r| r[0].clone().permuted_axes(IxDyn(&[1, 2, 0])),
    );
    check(
        "swap_axes",
        &one,
        |t| t[0].swap_axes(0, -1).unwrap(),
        |r| {
            let mut v = r[0].clone();
            v.swap_axes(0, 2);
            v
        },
    );
    // Reshaping a transposed (non-contiguous) tensor copies into row-major order.
    check(
        "transpose+reshape",
        &one,
        |t| t[0].transpose().reshape(&[-1]).unwrap(),
        |r| ArrayD::from_shape_vec(IxDyn(&[24]), r[0].t().iter().copied().collect()).unwrap(),
    );
    let b = g.array(&[3, 1], -2.0, 2.0);
    check(
        "broadcast_to",
        &[b],
        |t| t[0].broadcast_to(&[2, 3, 4]).unwrap(),
        |r| r[0].broadcast(IxDyn(&[2, 3, 4])).unwrap().to_owned(),
    );
    check(
        "slice",
        &one,
        |t| t[0].slice(2, 1, 3).unwrap(),
        |r| r[0].slice_axis(Axis(2), (1..3).into()).to_owned(),
    );
    check(
        "index_axis",
        &one,
        |t| t[0].index_axis(1, 2).unwrap(),
        |r| r[0].index_axis(Axis(1), 2).to_owned(),
    );
    let y = g.array(&[2, 3, 4], -2.0, 2.0);
    let z = g.array(&[2, 1, 4], -2.0, 2.0);
    check(
        "stack",
        &[x.clone(), y.clone()],
        |t| Tensor::stack(t, 1).unwrap(),
        |r| ndarray::stack(Axis(1), &[r[0].view(), r[1].view()]).unwrap(),
    );
    check(
        "concatenate",
        &[x.clone(), z],
        |t| Tensor::concatenate(t, 1).unwrap(),
        |r| ndarray::concatenate(Axis(1), &[r[0].view(), r[1].view()]).unwrap(),
    );
    // Slicing then stacking back (what a lifted vmap/scan does).
    check(
        "unstack+stack",
        &one,
        |t| {
            let parts: Vec<Tensor> = (0..2)
                .map(|i| t[0].index_axis(0, i).unwrap().tanh())
                .collect();
            Tensor::stack(&parts, 0).unwrap()
        },
        |r| r[0].mapv(f64::tanh),
    );
}

/// `a @ b` over broadcast batch axes in f64, by explicit loops.
fn matmul_ref(a: &A, b: &A) -> A {
    let (ra, rb) = (a.ndim(), b.ndim());
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    let ba = a.shape()[..ra - 2].to_vec();
    let bb = b.shape()[..rb - 2].to_vec();
    let batch = (ArrayD::<f64>::zeros(IxDyn(&ba)) + ArrayD::<f64>::zeros(IxDyn(&bb)))
        .shape()
        .to_vec();
    let mut sa = batch.clone();
    sa.extend([m, k]);
    let mut sb = batch.clone();
    sb.extend([k, n]);
    let mut so = batch.clone();
    so.extend([m, n]);
    let (av, bv) = (
        a.broadcast(IxDyn(&sa)).unwrap(),
        b.broadcast(IxDyn(&sb)).unwrap(),
    );
    ArrayD::from_shape_fn(IxDyn(&so), |idx| {
        let idx = idx.as_array_view().to_vec();
        let nb = idx.len() - 2;
        (0..k)
            .map(|p| {
                let mut ia = idx[..nb].to_vec();
                ia.extend([idx[nb], p]);
                let mut ib = idx[..nb].to_vec();
                ib.extend([p, idx[nb + 1]]);
                av[IxDyn(&ia)] * bv[IxDyn(&ib)]
            })
            .sum()
    })
}

#[test]
fn matmul_all_forms() {
    let mut g = Gen::new(10);
    let cases: [(&[usize], &[usize]); 5] = [
        (&[3, 4], &[4, 5]),
        (&[2, 3, 4], &[2, 4, 5]),
        (&[2, 1, 3, 4], &[3, 4, 2]),
        (&[3, 4], &[2, 4, 5]),
        (&[1, 64], &[64, 70]),
    ];
    for (sa, sb) in cases {
        let inputs = [g.array(sa, -1.0, 1.0), g.array(sb, -1.0, 1.0)];
        check(
            "matmul",
            &inputs,
            |t| t[0].matmul(&t[1]).unwrap(),
            |r| matmul_ref(&r[0], &r[1]),
        );
    }
    // A product large enough for the threaded kernel.
    let inputs = [g.array(&[50, 60], -1.0, 1.0), g.array(&[60, 50], -1.0, 1.0)];
    check(
        "matmul threaded",
        &inputs,
        |t| t[0].matmul(&t[1]).unwrap(),
        |r| {
            r[0].clone()
                .into_dimensionality::<ndarray::Ix2>()
                .unwrap()
                .dot(&r[1].clone().into_dimensionality::<ndarray::Ix2>().unwrap())
                .into_dyn()
        },
    );
    // Vectors, and transposed (strided) operands.
    let v = g.array(&[4], -1.0, 1.0);
    let m = g.array(&[4, 3], -1.0, 1.0);
    check(
        "vec@mat",
        &[v.clone(), m.clone()],
        |t| t[0].matmul(&t[1]).unwrap(),
        |r| matmul_ref(&r[0].clone().insert_axis(Axis(0)), &r[1]).index_axis_move(Axis(0), 0),
    );
    let w = g.array(&[4], -1.0, 1.0);
    check(
        "vec@vec",
        &[v.clone(), w],
        |t| t[0].matmul(&t[1]).unwrap(),
        |r| ArrayD::from_elem(IxDyn(&[]), (&r[0] * &r[1]).sum()),
    );
    // Batched matrix @ vector.
    let bm = g.array(&[2, 3, 4], -1.0, 1.0);
    check(
        "batch@vec",
        &[bm, v.clone()],
        |t| t[0].matmul(&t[1]).unwrap(),
        |r| matmul_ref(&r[0], &r[1].clone().insert_axis(Axis(1))).index_axis_move(Axis(2), 0),
    );
    check(
        "mat^T@vec",
        &[m, v],
        |t| t[0].transpose().matmul(&t[1]).unwrap(),
        |r| {
            matmul_ref(&r[0].t().to_owned(), &r[1].clone().insert_axis(Axis(1)))
                .index_axis_move(Axis(1), 0)
        },
    );
}

#[test]
fn mlp_with_mse_loss() {
    let mut g = Gen::new(11);
    let x = g.array(&[5, 4], -1.0, 1.0);
    let y = g.array(&[5, 2], -1.0, 1.0);
    let (x32, y32) = (tensor_common::to_tensor(&x), tensor_common::to_tensor(&y));
    let inputs = [
        g.array(&[4, 3], -1.0, 1.0),
        g.array(&[3], -0.1, 0.1),
        g.array(&[3, 2], -1.0, 1.0),
        g.array(&[2], -0.1, 0.1),
    ];
    check(
        "mlp",
        &inputs,
        |p| {
            let h = x32.matmul(&p[0]).unwrap().add(&p[1]).unwrap().gelu();
            let out = h.matmul(&p[2]).unwrap() + &p[3];
            (&out - &y32).square().mean_all()
        },
        |p| {
            let c = 0.7978845608028654;
            let h = matmul_ref(&x, &p[0]) + &p[1];
            let h = h.mapv(|v| 0.5 * v * (1.0 + (c * (v + 0.044715 * v.powi(3))).tanh()));
            let out = matmul_ref(&h, &p[2]) + &p[3];
            let d = out - &y;
            ArrayD::from_elem(IxDyn(&[]), (&d * &d).mean().unwrap())
        },
    );
}
