//! `jit_value_and_grad`: every call gives exactly `value_and_grad`'s results
//! as jitted (`as_jitted`), the traced one and the replays.

mod tensor_common;

use flaxen::tensor::{
    as_jitted, jit_value_and_grad, jit_value_and_grad_with, tree_map2, value_and_grad, Tensor,
    TensorError, Tree,
};
use tensor_common::{to_tensor, Gen};

fn params(g: &mut Gen, sizes: &[usize]) -> Tree {
    let mut p = Tree::new();
    for (i, w) in sizes.windows(2).enumerate() {
        p.insert(
            format!("Dense_{i}"),
            Tree::new()
                .with("kernel", to_tensor(&g.array(&[w[0], w[1]], -0.5, 0.5)))
                .with("bias", to_tensor(&g.array(&[w[1]], -0.1, 0.1))),
        )
        .unwrap();
    }
    p
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

/// Runs `steps` SGD steps both ways and checks every loss and gradient bit.
fn same_as_eager<F>(f: F, mut p: Tree, steps: usize, expect_compiled: bool)
where
    F: Fn(&Tree) -> flaxen::Result<Tensor>,
{
    let mut step = jit_value_and_grad(&f);
    for i in 0..steps {
        let (l1, g1) = step.call(&p).unwrap();
        let (l2, g2) = as_jitted(|| value_and_grad(&f, &p)).unwrap();
        assert_eq!(
            l1.item().unwrap().to_bits(),
            l2.item().unwrap().to_bits(),
            "loss at step {i}"
        );
        for ((path, a), (_, b)) in g1.paths().into_iter().zip(g2.paths()) {
            assert_eq!(bits(a), bits(b), "gradient of {path} at step {i}");
        }
        p = tree_map2(&p, &g1, |p, g| Ok(p - &(g * 0.05))).unwrap();
    }
    assert_eq!(step.is_compiled(), expect_compiled);
}

#[test]
fn mlp_steps_match_eager_bit_for_bit() {
    let mut g = Gen::new(1);
    for (sizes, batch) in [(vec![2, 3, 2], 8), (vec![100, 80, 64, 10], 64)] {
        let p = params(&mut g, &sizes);
        let x = to_tensor(&g.array(&[batch, sizes[0]], -1.0, 1.0));
        let y = to_tensor(&g.array(&[batch, *sizes.last().unwrap()], -1.0, 1.0));
        let layers = sizes.len() - 1;
        let f = |p: &Tree| {
            let mut h = x.clone();
            for i in 0..layers {
                h = h
                    .matmul(p.tensor(&format!("Dense_{i}/kernel"))?)?
                    .add(p.tensor(&format!("Dense_{i}/bias"))?)?;
                if i + 1 < layers {
                    h = h.relu();
                }
            }
            Ok((&h - &y).square().mean_all())
        };
        same_as_eager(f, p, 5, true);
    }
}

/// A weight shared by products of one row (`[1, k] @ W`) and of one
/// column (`h @ V`, `V: [k, 1]`): in a compiled region each later
/// cotangent of `W` (and of `h`) is an outer product fused into the
/// addition accumulating it (`fma(u, w, acc)`); the replays fuse it too.
#[test]
fn fused_outer_product_accumulations_replay() {
    let mut g = Gen::new(9);
    let p = Tree::new()
        .with("w", to_tensor(&g.array(&[5, 4], -1.0, 1.0)))
        .with("v", to_tensor(&g.array(&[4, 1], -1.0, 1.0)));
    let rows: Vec<Tensor> = (0..3)
        .map(|_| to_tensor(&g.array(&[1, 5], -1.0, 1.0)))
        .collect();
    let f = |p: &Tree| {
        let (w, v) = (p.tensor("w")?, p.tensor("v")?);
        let mut total = None;
        for x in &rows {
            let h = x.matmul(w)?.tanh();
            // `h` reaches two products: its cotangents accumulate too.
            let out = h.matmul(v)?.add(&h.matmul(&v.square())?)?.sum_all();
            total = Some(match total {
                None => out,
                Some(t) => out.add(&t)?,
            });
        }
        Ok(total.unwrap())
    };
    same_as_eager(f, p, 4, true);
}

#[test]
fn every_replayable_operation() {
    let mut g = Gen::new(2);
    let p = Tree::new()
        .with("a", to_tensor(&g.array(&[4, 3], 0.5, 1.5)))
        .with("b", to_tensor(&g.array(&[3], 0.5, 1.5)))
        .with("c", to_tensor(&g.array(&[1, 3], 0.5, 1.5)))
        .with("unused", to_tensor(&g.array(&[2], 0.5, 1.5)));
    let k = to_tensor(&g.array(&[3, 5], -1.0, 1.0));
    let f = |p: &Tree| {
        let (a, b, c) = (p.tensor("a")?, p.tensor("b")?, p.tensor("c")?);
        let h = (a * b).div(c)? - &(2.0 * a) + b / a;
        let h = -&(h.gelu()
            + h.tanh() * h.sigmoid()
            + h.exp().log()
            + h.abs().sqrt()
            + h.square().rsqrt());
        let h = h.clip(-3.0, 3.0)?.powf(2.0) + h.relu();
        // `a` is used many times: its gradients accumulate.
        Ok(h.matmul(&k)?.sum_all() + (a - c).mean_all() - 1.5)
    };
    same_as_eager(f, p, 3, true);
}

/// Sums and means over several axes (kept or not), reshapes and
/// `maximum` (with a scalar, with a tensor, with ties) on the path to the
/// loss: replayed backward too, with eager's numbers.
#[test]
fn reductions_reshapes_and_maximum_replay() {
    let mut g = Gen::new(4);
    let p = Tree::new()
        .with("x", to_tensor(&g.array(&[6, 4], -1.0, 1.0)))
        .with("y", to_tensor(&g.array(&[6, 4], -1.0, 1.0)))
        .with("z", to_tensor(&g.array(&[2, 3, 4], -1.0, 1.0)));
    let f = |p: &Tree| {
        let (x, y, z) = (p.tensor("x")?, p.tensor("y")?, p.tensor("z")?);
        // A BatchNorm's statistics: mean over the batch, clipped variance.
        let m = x.mean(&[0], true)?;
        let centered = x - &m;
        let var = centered.square().mean(&[0], false)?;
        let clipped = var
            .sub(&Tensor::scalar(0.05))?
            .maximum(&Tensor::scalar(0.0))?;
        let s = z.sum(&[0, 1], false)?.reshape(&[2, 2])?;
        let t = z.mean(&[0, 2], true)?.reshape(&[3])?;
        // Ties: `y` against itself, and `x` against `y`.
        let both = y.maximum(y)?.maximum(x)?;
        Ok(clipped.sum_all()
            + s.square().sum_all()
            + t.exp().sum_all()
            + both.sum(&[0], false)?.mean_all())
    };
    same_as_eager(f, p, 3, true);
}

#[test]
fn other_operations_fall_back_to_eager() {
    let mut g = Gen::new(3);
    let p = Tree::new().with("w", to_tensor(&g.array(&[3, 4], -1.0, 1.0)));
    let f = |p: &Tree| {
        Ok(p.tensor("w")?
            .softmax(-1)?
            .reshape(&[-1])?
            .max(&[0], false)?)
    };
    same_as_eager(f, p, 3, false);
}

#[test]
fn new_shapes_trace_again() {
    let f = |p: &Tree| Ok(p.tensor("w")?.square().sum_all());
    let mut step = jit_value_and_grad(f);
    let small = Tree::new().with("w", Tensor::full(&[2], 3.0));
    let large = Tree::new().with("w", Tensor::full(&[5], 2.0));
    assert_eq!(step.call(&small).unwrap().0.item().unwrap(), 18.0);
    assert_eq!(step.call(&small).unwrap().0.item().unwrap(), 18.0);
    let (l, g) = step.call(&large).unwrap();
    assert_eq!(l.item().unwrap(), 20.0);
    assert_eq!(g.tensor("w").unwrap().to_vec(), [4.0; 5]);
    assert!(step.is_compiled());
}

#[test]
fn results_held_by_the_caller_are_not_overwritten() {
    let mut step = jit_value_and_grad(|p: &Tree| Ok(p.tensor("w")?.square().sum_all()));
    let p1 = Tree::new().with("w", Tensor::full(&[2], 1.0));
    let p2 = Tree::new().with("w", Tensor::full(&[2], 5.0));
    let _ = step.call(&p1).unwrap();
    let (l1, g1) = step.call(&p1).unwrap();
    let (l2, g2) = step.call(&p2).unwrap();
    assert_eq!((l1.item().unwrap(), l2.item().unwrap()), (2.0, 50.0));
    assert_eq!(g1.tensor("w").unwrap().to_vec(), [2.0, 2.0]);
    assert_eq!(g2.tensor("w").unwrap().to_vec(), [10.0, 10.0]);
}

#[test]
fn errors_as_value_and_grad() {
    let mut step = jit_value_and_grad(|p: &Tree| Ok(p.tensor("w")?.square()));
    let p = Tree::new().with("w", Tensor::ones(&[2]));
    assert_eq!(
        step.call(&p).unwrap_err(),
        TensorError::NotScalar { shape: vec![2] }.into()
    );
    let mut step = jit_value_and_grad(|p: &Tree| Ok(p.tensor("missing")?.sum_all()));
    assert!(matches!(
        step.call(&p),
        Err(flaxen::Error::Tensor {
            source: TensorError::MissingKey { .. },
            ..
        })
    ));
    assert!(!step.is_compiled());
}

#[test]
fn parameters_in_any_memory_order() {
    let mut g = Gen::new(4);
    // A transposed (column-major) parameter.
    let w = to_tensor(&g.array(&[3, 4], -1.0, 1.0)).transpose();
    let p = Tree::new()
        .with("w", w)
        .with("b", to_tensor(&g.array(&[3], -1.0, 1.0)));
    let x = to_tensor(&g.array(&[5, 4], -1.0, 1.0));
    let f = |p: &Tree| {
        Ok(x.matmul(p.tensor("w")?)?
            .add(p.tensor("b")?)?
            .tanh()
            .sum_all())
    };
    same_as_eager(f, p, 3, true);
    // Large enough for gemm, and sums of column-major values.
    let w = to_tensor(&g.array(&[40, 50], -1.0, 1.0)).transpose();
    let p = Tree::new().with("w", w);
    let x = to_tensor(&g.array(&[30, 50], -1.0, 1.0));
    let f = |p: &Tree| {
        let w = p.tensor("w")?;
        Ok(x.matmul(w)?.sum_all() + w.exp().mean_all())
    };
    same_as_eager(f, p, 3, true);
}

#[test]
fn inputs_change_between_calls() {
    let mut g = Gen::new(5);
    let sizes = [4, 6, 3];
    let mut p = params(&mut g, &sizes);
    let f = |p: &Tree, batch: &Tree| {
        let h = batch
            .tensor("x")?
            .matmul(p.tensor("Dense_0/kernel")?)?
            .add(p.tensor("Dense_0/bias")?)?
            .gelu();
        let out = h.matmul(p.tensor("Dense_1/kernel")?)? + p.tensor("Dense_1/bias")?;
        // A dropout-style mask as an input.
        let out = &out * batch.tensor("mask")?;
        Ok((&out - batch.tensor("y")?).square().mean_all())
    };
    let mut step = jit_value_and_grad_with(f);
    for i in 0..6 {
        let batch = Tree::new()
            .with("x", to_tensor(&g.array(&[5, 4], -1.0, 1.0)))
            .with("y", to_tensor(&g.array(&[5, 3], -1.0, 1.0)))
            .with(
                "mask",
                to_tensor(&g.array(&[5, 3], 0.0, 1.0).mapv(|v| (v < 0.8) as u8 as f64)),
            );
        let (l1, g1) = step.call_with(&p, &batch).unwrap();
        let (l2, g2) = as_jitted(|| value_and_grad(|p| f(p, &batch), &p)).unwrap();
        assert_eq!(
            l1.item().unwrap().to_bits(),
            l2.item().unwrap().to_bits(),
            "loss at step {i}"
        );
        for ((path, a), (_, b)) in g1.paths().into_iter().zip(g2.paths()) {
            assert_eq!(bits(a), bits(b), "gradient of {path} at step {i}");
        }
        assert_eq!(g1.paths().len(), 4, "only the parameters get gradients");
        p = tree_map2(&p, &g1, |p, g| Ok(p - &(g * 0.1))).unwrap();
    }
    assert!(step.is_compiled());
    // Another batch size traces again.
    let batch = Tree::new()
        .with("x", Tensor::ones(&[2, 4]))
        .with("y", Tensor::zeros(&[2, 3]))
        .with("mask", Tensor::ones(&[2, 3]));
    let (l1, _) = step.call_with(&p, &batch).unwrap();
    let (l2, _) = as_jitted(|| value_and_grad(|p| f(p, &batch), &p)).unwrap();
    assert_eq!(l1.item().unwrap().to_bits(), l2.item().unwrap().to_bits());
}

#[test]
fn classification_losses_replay() {
    let mut g = Gen::new(6);
    let mut p = params(&mut g, &[5, 8, 4]);
    let x = to_tensor(&g.array(&[6, 5], -1.0, 1.0));
    let labels = [0usize, 3, 1, 2, 2, 0];
    let onehot = Tensor::from_vec(
        labels
            .iter()
            .flat_map(|&l| (0..4).map(move |c| (c == l) as u8 as f32))
            .collect(),
        &[6, 4],
    )
    .unwrap();
    let f = |p: &Tree| {
        let h = x
            .matmul(p.tensor("Dense_0/kernel")?)?
            .add(p.tensor("Dense_0/bias")?)?
            .tanh();
        let logits = h
            .matmul(p.tensor("Dense_1/kernel")?)?
            .add(p.tensor("Dense_1/bias")?)?;
        // Cross-entropy, plus terms that exercise softmax and per-row means.
        let ce = -(logits.log_softmax(-1)? * &onehot)
            .sum(&[-1], false)?
            .mean_all();
        let probs = logits.softmax(-1)?;
        let spread = probs.mean(&[-1], true)?.square().sum_all();
        Ok(ce + spread * 0.1)
    };
    let mut step = jit_value_and_grad(&f);
    for i in 0..4 {
        let (l1, g1) = step.call(&p).unwrap();
        let (l2, g2) = as_jitted(|| value_and_grad(f, &p)).unwrap();
        assert_eq!(
            l1.item().unwrap().to_bits(),
            l2.item().unwrap().to_bits(),
            "loss at step {i}"
        );
        for ((path, a), (_, b)) in g1.paths().into_iter().zip(g2.paths()) {
            assert_eq!(bits(a), bits(b), "gradient of {path} at step {i}");
        }
        p = tree_map2(&p, &g1, |p, g| Ok(p - &(g * 0.5))).unwrap();
    }
    assert!(step.is_compiled());
}
