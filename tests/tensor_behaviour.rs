//! Autodiff semantics, bad input, conversions and trees.

use flaxen::tensor::{
    grad, stop_gradient, tree_map, tree_map2, value_and_grad, value_and_grad_with_aux, vjp, Tensor,
    TensorError, Tree,
};
use ndarray::{array, Array2, ArrayD, IxDyn};

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[test]
fn broadcast_gradients_have_the_input_shapes() {
    let params = Tree::new()
        .with("row", Tensor::ones(&[1, 3]))
        .with("col", Tensor::ones(&[4, 1]))
        .with("scalar", Tensor::scalar(2.0))
        .with("vec", Tensor::ones(&[3]));
    let g = grad(
        |p| {
            let s = p.tensor("row")? * p.tensor("col")?;
            let s = &s * p.tensor("scalar")? + p.tensor("vec")?;
            Ok(s.sum_all())
        },
        &params,
    )
    .unwrap();
    // d/d row[j] = sum_i col[i] * scalar = 4 * 2; d/d col[i] = sum_j row * 2 = 6.
    assert_eq!(g.tensor("row").unwrap().shape(), &[1, 3]);
    assert_eq!(g.tensor("row").unwrap().to_vec(), [8.0; 3]);
    assert_eq!(g.tensor("col").unwrap().to_vec(), [6.0; 4]);
    assert_eq!(g.tensor("scalar").unwrap().shape(), &[] as &[usize]);
    assert_eq!(g.tensor("scalar").unwrap().item().unwrap(), 12.0);
    assert_eq!(g.tensor("vec").unwrap().to_vec(), [4.0; 3]);
}

#[test]
fn unused_inputs_get_zero_gradients() {
    let params = Tree::new()
        .with("used", Tensor::ones(&[2]))
        .with("unused", Tree::new().with("deep", Tensor::ones(&[3, 2])));
    let g = grad(|p| Ok(p.tensor("used")?.sum_all()), &params).unwrap();
    let unused = g.tensor("unused/deep").unwrap();
    assert_eq!(unused.shape(), &[3, 2]);
    assert!(unused.to_vec().iter().all(|&v| v == 0.0));
    // A function that ignores its argument entirely.
    let g = grad(|_| Ok(Tensor::scalar(1.0)), &params).unwrap();
    assert!(g
        .leaves()
        .iter()
        .all(|l| l.to_vec().iter().all(|&v| v == 0.0)));
}

#[test]
fn gradients_keep_the_tree_structure_and_order() {
    let params = Tree::new().with("b", Tensor::ones(&[1])).with(
        "a",
        Tree::new()
            .with("z", Tensor::ones(&[2]))
            .with("y", Tensor::ones(&[3])),
    );
    let g = grad(|p| Ok(p.tensor("a/y")?.sum_all()), &params).unwrap();
    let paths: Vec<String> = g.paths().into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["b", "a/z", "a/y"]);
}

#[test]
fn captured_tensors_are_not_differentiated() {
    let x = t(&[1.0, 2.0], &[2]);
    let params = Tree::from(t(&[3.0, 4.0], &[2]));
    let g = grad(|p| Ok((p.as_tensor().unwrap() * &x).sum_all()), &params).unwrap();
    assert_eq!(g.as_tensor().unwrap().to_vec(), [1.0, 2.0]);
    assert!(!x.is_traced());
}

#[test]
fn reused_values_accumulate() {
    // f(x) = sum(x * x + x * 3) -> 2x + 3
    let params = Tree::from(t(&[1.0, -2.0], &[2]));
    let g = grad(
        |p| {
            let x = p.as_tensor().unwrap();
            Ok((x * x + x * 3.0).sum_all())
        },
        &params,
    )
    .unwrap();
    assert_eq!(g.as_tensor().unwrap().to_vec(), [5.0, -1.0]);
}

#[test]
fn stop_gradient_blocks() {
    let params = Tree::from(t(&[2.0], &[1]));
    let g = grad(
        |p| {
            let x = p.as_tensor().unwrap();
            Ok((x * &stop_gradient(x)).sum_all() + x.stop_gradient().sum_all())
        },
        &params,
    )
    .unwrap();
    assert_eq!(g.as_tensor().unwrap().to_vec(), [2.0]);
}

#[test]
fn grad_of_non_scalar_is_an_error() {
    let params = Tree::from(Tensor::ones(&[3]));
    let err = grad(|p| Ok(p.as_tensor().unwrap().clone()), &params).unwrap_err();
    assert_eq!(err, TensorError::NotScalar { shape: vec![3] }.into());
    // A one-element but not 0-d result is not a scalar either (as in JAX).
    let err = grad(|p| Ok(p.as_tensor().unwrap().sum(&[0], true)?), &params).unwrap_err();
    assert!(matches!(
        err,
        flaxen::Error::Tensor {
            source: TensorError::NotScalar { .. },
            ..
        }
    ));
}

#[test]
fn errors_from_the_function_pass_through() {
    let params = Tree::from(Tensor::ones(&[3]));
    let err = grad(|p| Ok(p.tensor("missing")?.sum_all()), &params).unwrap_err();
    assert!(matches!(
        err,
        flaxen::Error::Tensor {
            source: TensorError::MissingKey { .. },
            ..
        }
    ));
}

#[test]
fn value_and_grad_and_aux() {
    let params = Tree::from(t(&[3.0], &[]));
    let (v, g) = value_and_grad(|p| Ok(p.as_tensor().unwrap().square()), &params).unwrap();
    assert_eq!(v.item().unwrap(), 9.0);
    assert!(!v.is_traced());
    assert_eq!(g.as_tensor().unwrap().item().unwrap(), 6.0);
    let ((v, aux), g) = value_and_grad_with_aux(
        |p| {
            let x = p.as_tensor().unwrap();
            Ok((x.exp(), "aux"))
        },
        &params,
    )
    .unwrap();
    assert_eq!(aux, "aux");
    assert_eq!(v.item().unwrap(), g.as_tensor().unwrap().item().unwrap());
}

#[test]
fn vjp_pullback_is_reusable_and_checks_the_cotangent() {
    let params = Tree::new().with("w", t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]));
    let x = t(&[1.0, 1.0], &[2]);
    let (y, pb) = vjp(|p| Ok(p.tensor("w")?.matmul(&x)?), &params).unwrap();
    assert_eq!(y.to_vec(), [3.0, 7.0]);
    let g1 = pb.call(&t(&[1.0, 0.0], &[2])).unwrap();
    let g2 = pb.call(&t(&[0.0, 1.0], &[2])).unwrap();
    assert_eq!(g1.tensor("w").unwrap().to_vec(), [1.0, 1.0, 0.0, 0.0]);
    assert_eq!(g2.tensor("w").unwrap().to_vec(), [0.0, 0.0, 1.0, 1.0]);
    let err = pb.call(&Tensor::ones(&[3])).unwrap_err();
    assert!(err.to_string().contains("[2]") && err.to_string().contains("[3]"));
}

/// A loss whose gradient is known in closed form: d/dw sum((x w)^2) = 2 x^T x w.
fn quadratic(seed: f32) -> (Tree, Tensor, Tensor) {
    let w = Tensor::from_vec(
        (0..12).map(|i| (i as f32 * 0.37 + seed).sin()).collect(),
        &[4, 3],
    )
    .unwrap();
    let x = Tensor::from_vec(
        (0..8).map(|i| (i as f32 * 0.91 - seed).cos()).collect(),
        &[2, 4],
    )
    .unwrap();
    let expected = x.transpose().matmul(&x).unwrap().matmul(&w).unwrap() * 2.0;
    (Tree::new().with("w", w), x, expected)
}

#[test]
fn independent_grad_calls_do_not_interfere() {
    // Interleaved on one thread: a grad call inside another's function.
    let (p1, x1, e1) = quadratic(0.1);
    let (p2, x2, e2) = quadratic(0.7);
    let mut inner = None;
    let g1 = grad(
        |p| {
            let partial = p.tensor("w")?.transpose().matmul(&x1.transpose())?;
            inner = Some(grad(
                |q| Ok(x2.matmul(q.tensor("w")?)?.square().sum_all()),
                &p2,
            )?);
            Ok(partial.square().sum_all())
        },
        &p1,
    )
    .unwrap();
    let close = |a: &Tensor, b: &Tensor| {
        a.to_vec()
            .iter()
            .zip(b.to_vec())
            .all(|(x, y)| (x - y).abs() <= 1e-4 * (1.0 + y.abs()))
    };
    // sum((w^T x1^T)^2) = sum((x1 w)^2).
    assert!(close(g1.tensor("w").unwrap(), &e1));
    assert!(close(inner.unwrap().tensor("w").unwrap(), &e2));

    // Many threads at once.
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                s.spawn(move || {
                    let (p, x, e) = quadratic(i as f32);
                    for _ in 0..50 {
                        let g =
                            grad(|q| Ok(x.matmul(q.tensor("w")?)?.square().sum_all()), &p).unwrap();
                        let got = g.tensor("w").unwrap();
                        assert!(got
                            .to_vec()
                            .iter()
                            .zip(e.to_vec())
                            .all(|(a, b)| (a - b).abs() <= 1e-4 * (1.0 + b.abs())));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

#[test]
fn incompatible_shapes_name_both() {
    let a = Tensor::zeros(&[2, 3]);
    let b = Tensor::zeros(&[4]);
    for (err, op) in [
        (a.add(&b).unwrap_err(), "add"),
        (a.sub(&b).unwrap_err(), "sub"),
        (a.mul(&b).unwrap_err(), "mul"),
        (a.div(&b).unwrap_err(), "div"),
        (a.maximum(&b).unwrap_err(), "maximum"),
        (a.matmul(&b).unwrap_err(), "matmul"),
        (Tensor::select(&a, &a, &b).unwrap_err(), "select"),
    ] {
        assert_eq!(
            err,
            TensorError::Incompatible {
                op,
                lhs: vec![2, 3],
                rhs: vec![4]
            }
        );
        assert_eq!(
            err.to_string(),
            format!("{op}: incompatible shapes [2, 3] and [4]")
        );
    }
    assert!(matches!(
        a.reshape(&[4, -1]),
        Err(TensorError::Reshape { .. })
    ));
    assert!(matches!(
        a.sum(&[2], false),
        Err(TensorError::Axis {
            axis: 2,
            ndim: 2,
            ..
        })
    ));
    assert!(matches!(
        a.broadcast_to(&[3, 3]),
        Err(TensorError::Reshape { .. })
    ));
    assert!(matches!(
        a.slice(0, 1, 5),
        Err(TensorError::Argument { .. })
    ));
    assert!(matches!(
        a.index_axis(1, 3),
        Err(TensorError::Argument { .. })
    ));
    assert!(matches!(
        a.permute(&[0, 0]),
        Err(TensorError::Argument { .. })
    ));
    assert!(matches!(
        Tensor::stack(&[a.clone(), b.clone()], 0),
        Err(TensorError::Incompatible { .. })
    ));
    assert!(matches!(
        Tensor::concatenate(&[], 0),
        Err(TensorError::Argument { .. })
    ));
    assert!(matches!(
        a.clip(1.0, 0.0),
        Err(TensorError::Argument { .. })
    ));
}

#[test]
#[should_panic(expected = "add: incompatible shapes [2, 3] and [4]")]
fn operators_panic_with_the_error_message() {
    let _ = &Tensor::zeros(&[2, 3]) + &Tensor::zeros(&[4]);
}

#[test]
#[should_panic(expected = "div: incompatible shapes [2] and [3]")]
fn owned_operators_panic_too() {
    let _ = Tensor::zeros(&[2]) / Tensor::zeros(&[3]);
}

#[test]
fn nan_and_inf_propagate() {
    let x = t(&[f32::NAN, f32::INFINITY, -f32::INFINITY, 0.0, -1.0], &[5]);
    let y = x.exp();
    assert!(y.to_vec()[0].is_nan());
    assert_eq!(y.to_vec()[1..4], [f32::INFINITY, 0.0, 1.0]);
    assert!(x.log().to_vec()[4].is_nan());
    assert_eq!(x.log().to_vec()[3], -f32::INFINITY);
    assert!((&x / &Tensor::zeros(&[5])).to_vec()[3].is_nan());
    assert!(x.relu().to_vec()[0].is_nan());
    assert!(x.max(&[0], false).unwrap().item().unwrap().is_nan());
    assert!(x.maximum(&Tensor::zeros(&[5])).unwrap().to_vec()[0].is_nan());
    assert!(x.clip(-1.0, 1.0).unwrap().to_vec()[0].is_nan());
    assert!(x.softmax(0).unwrap().to_vec().iter().all(|v| v.is_nan()));
    // Gradients through NaN do not crash either.
    let g = grad(
        |p| Ok(p.as_tensor().unwrap().sqrt().sum_all()),
        &Tree::from(x.clone()),
    )
    .unwrap();
    assert!(g.as_tensor().unwrap().to_vec()[0].is_nan());
    let inf = Tensor::scalar(f32::INFINITY);
    assert_eq!(inf.tanh().item().unwrap(), 1.0);
    assert_eq!(inf.sigmoid().item().unwrap(), 1.0);
    assert_eq!((-&inf).sigmoid().item().unwrap(), 0.0);
}

#[test]
fn conversions_round_trip() {
    let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let x = Tensor::from(a.clone());
    assert_eq!(x.shape(), &[2, 3]);
    assert_eq!(x.ndim(), 2);
    assert_eq!(x.size(), 6);
    let back: Array2<f32> = x.to_array_fixed().unwrap();
    assert_eq!(back, a);
    assert!(x.to_array_fixed::<ndarray::Ix1>().is_err());
    let dynamic: ArrayD<f32> = x.clone().into();
    assert_eq!(dynamic, a.clone().into_dyn());
    // Transposes are views; conversions give the logical values.
    let xt = x.transpose();
    assert_eq!(xt.to_vec(), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(xt.to_array(), a.t().to_owned().into_dyn());
    assert_eq!(xt.clone().into_array(), a.t().to_owned().into_dyn());
    // Clones share storage and are independent values.
    let y = x.clone();
    drop(x);
    assert_eq!(y.view()[IxDyn(&[1, 2])], 6.0);
    assert_eq!(Tensor::from(2.0f32).shape(), &[] as &[usize]);
    assert!(Tensor::from_vec(vec![1.0; 5], &[2, 3]).is_err());
}

#[test]
fn views_share_storage_but_values_are_immutable() {
    let x = Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[2, 3]).unwrap();
    let s = x.slice(1, 1, 3).unwrap();
    let r = x.reshape(&[3, 2]).unwrap();
    let mut owned = s.clone().into_array();
    owned[[0, 0]] = 100.0;
    assert_eq!(x.to_vec(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(s.to_vec(), [1.0, 2.0, 4.0, 5.0]);
    assert_eq!(r.to_vec(), x.to_vec());
}

#[test]
fn tree_helpers() {
    let params = Tree::new()
        .with("a", Tensor::ones(&[2]))
        .with("b", Tree::new().with("c", Tensor::zeros(&[1])));
    let shifted = tree_map(&params, |x| x + 1.0);
    assert_eq!(shifted.tensor("a").unwrap().to_vec(), [2.0, 2.0]);
    assert_eq!(shifted.tensor("b/c").unwrap().to_vec(), [1.0]);
    let sum = tree_map2(&params, &shifted, |x, y| x.add(y)).unwrap();
    assert_eq!(sum.tensor("a").unwrap().to_vec(), [3.0, 3.0]);
    let other = Tree::new().with("a", Tensor::ones(&[2]));
    assert!(matches!(
        tree_map2(&params, &other, |x, _| Ok(x.clone())),
        Err(TensorError::TreeStructure { .. })
    ));
    let leafy = Tree::new()
        .with("a", Tensor::ones(&[2]))
        .with("b", Tensor::ones(&[1]));
    assert!(matches!(
        tree_map2(&params, &leafy, |x, _| Ok(x.clone())),
        Err(TensorError::TreeStructure { .. })
    ));
    assert!(matches!(
        params.tensor("b"),
        Err(TensorError::MissingKey { .. })
    ));
    assert!(params.subtree("b/c/d").is_none());
    assert_eq!(
        params.subtree("b").unwrap().tensor("c").unwrap().to_vec(),
        [0.0]
    );
    // An SGD step with tree_map2 lowers a quadratic loss.
    let loss = |p: &Tree| Ok(p.tensor("a")?.square().sum_all());
    let (before, g) = value_and_grad(loss, &params).unwrap();
    let stepped = tree_map2(&params, &g, |p, g| Ok(p - &(g * 0.1))).unwrap();
    let (after, _) = value_and_grad(loss, &stepped).unwrap();
    assert!(after.item().unwrap() < before.item().unwrap());
}

#[test]
fn display_uses_numpy_style_formatting() {
    let x = t(&[0.0761425, -1.6157459, -1.6857724, 0.7126891], &[2, 2]);
    assert_eq!(
        format!("{x}"),
        flaxen::array_format::format_array(&x.view())
    );
    assert!(format!("{x:?}").contains("shape: [2, 2]"));
}

#[test]
fn types_cross_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tensor>();
    assert_send_sync::<Tree>();
    assert_send_sync::<flaxen::tensor::Pullback>();
    assert_send_sync::<TensorError>();
}

#[test]
fn recording_stops_when_the_function_returns() {
    let params = Tree::from(t(&[1.0, 2.0], &[2]));
    let mut escaped = None;
    let ((_, aux), _) = value_and_grad_with_aux(
        |p| {
            let x = p.as_tensor().unwrap();
            assert!(x.is_traced());
            escaped = Some(x.exp());
            Ok((x.sum_all(), x.clone()))
        },
        &params,
    )
    .unwrap();
    // Tensors that escape are plain values afterwards.
    assert!(!aux.is_traced());
    let later = escaped.unwrap().tanh();
    assert!(!later.is_traced());
    // And can be differentiated again in a new call.
    let g = grad(|p| Ok((p.as_tensor().unwrap() * &aux).sum_all()), &params).unwrap();
    assert_eq!(g.as_tensor().unwrap().to_vec(), [1.0, 2.0]);
}

#[test]
fn vector_dot_and_bad_vectors() {
    let a = t(&[1.0, 2.0, 3.0], &[3]);
    assert_eq!(a.matmul(&a).unwrap().item().unwrap(), 14.0);
    assert_eq!(a.matmul(&a).unwrap().shape(), &[] as &[usize]);
    let err = a.matmul(&Tensor::ones(&[2])).unwrap_err();
    assert_eq!(err.to_string(), "matmul: incompatible shapes [3] and [2]");
    let err = a.matmul(&Tensor::ones(&[2, 2])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "matmul: incompatible shapes [3] and [2, 2]"
    );
}

#[test]
fn tree_insert_appends_replaces_and_copies_on_write() {
    let a = Tree::new()
        .with("x", Tensor::ones(&[1]))
        .with("sub", Tree::new().with("k", Tensor::ones(&[2])));
    let mut b = a.clone();
    assert!(b.insert("y", Tensor::zeros(&[3])).unwrap().is_none());
    let old = b.insert("x", Tensor::zeros(&[4])).unwrap().unwrap();
    assert_eq!(old.as_tensor().unwrap().shape(), &[1]);
    // `b` changed in place, keeping key order; `a` did not change.
    assert_eq!(b.keys(), ["x", "sub", "y"]);
    assert_eq!(b.tensor("x").unwrap().shape(), &[4]);
    assert_eq!(b.tensor("sub/k").unwrap().shape(), &[2]);
    assert_eq!(a.keys(), ["x", "sub"]);
    assert_eq!(a.tensor("x").unwrap().shape(), &[1]);
    assert!(!a.same_structure(&b));
    let mut leaf = Tree::from(Tensor::ones(&[1]));
    assert!(matches!(
        leaf.insert("k", Tensor::ones(&[1])),
        Err(TensorError::TreeStructure { .. })
    ));
    let paths: Vec<String> = b.paths().into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["x", "sub/k", "y"]);
}

#[test]
fn empty_axes_reduce_to_zeros() {
    let x = Tensor::zeros(&[3, 0]);
    assert_eq!(x.sum(&[-1], false).unwrap().to_vec(), [0.0; 3]);
    assert_eq!(x.sum(&[-1], true).unwrap().shape(), &[3, 1]);
    assert_eq!(x.sum(&[0], false).unwrap().shape(), &[0]);
    assert_eq!(x.sum_all().item().unwrap(), 0.0);
    assert_eq!(x.softmax(-1).unwrap().shape(), &[3, 0]);
    assert_eq!(x.log_softmax(0).unwrap().shape(), &[3, 0]);
    assert_eq!(
        x.matmul(&Tensor::zeros(&[0, 2])).unwrap().to_vec(),
        [0.0; 6]
    );
    let g = grad(
        |p| Ok(p.as_tensor().unwrap().sum(&[-1], false)?.sum_all()),
        &Tree::from(x.clone()),
    )
    .unwrap();
    assert_eq!(g.as_tensor().unwrap().shape(), &[3, 0]);
}

/// A product reads a joined tensor as the row-major array XLA's
/// `concatenate` and `stack` write, whatever the axis: the same bits as the
/// same values made directly (a column-major join had been read as a
/// transposed operand, in that operand's XLA order).
#[test]
fn joined_tensors_multiply_like_their_values() {
    let (m, k, n) = (2, 9, 3);
    let vals: Vec<f32> = (0..m * k)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
        .collect();
    let w: Vec<f32> = (0..k * n)
        .map(|i| ((i * 53 % 29) as f32 - 14.0) / 9.0)
        .collect();
    let w = t(&w, &[k, n]);
    let direct = t(&vals, &[m, k]).matmul(&w).unwrap().to_vec();
    let part = |c0: usize, c1: usize| {
        let v: Vec<f32> = (0..m)
            .flat_map(|r| vals[r * k + c0..r * k + c1].to_vec())
            .collect();
        t(&v, &[m, c1 - c0])
    };
    let joined = Tensor::concatenate(&[part(0, 3), part(3, 7), part(7, 9)], -1).unwrap();
    assert_eq!(joined.to_vec(), vals);
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(joined.matmul(&w).unwrap().to_vec()),
        bits(direct.clone())
    );
    let columns: Vec<Tensor> = (0..k)
        .map(|c| part(c, c + 1).reshape(&[m as isize]).unwrap())
        .collect();
    let stacked = Tensor::stack(&columns, -1).unwrap();
    assert_eq!(stacked.to_vec(), vals);
    assert_eq!(bits(stacked.matmul(&w).unwrap().to_vec()), bits(direct));
}
