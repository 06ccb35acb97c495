//! `jit_value_and_grad_with_aux`: auxiliary outputs of a compiled step
//! (operations, arguments passed through, constants) are those of an eager
//! `value_and_grad_with_aux`, call after call; comparisons are replayed;
//! and steps whose values decide something the replay cannot repeat run
//! eagerly instead of replaying stale values.

mod tensor_common;

use flaxen::core::{Rngs, Variables};
use flaxen::nn::{Dropout, Module};
use flaxen::random::{self, Key};
use flaxen::tensor::{
    as_jitted, jit_value_and_grad_with, jit_value_and_grad_with_aux, tree_map2, value_and_grad,
    value_and_grad_with_aux, Tensor, Tree,
};
use tensor_common::{to_tensor, Gen};

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

fn same_trees(a: &Tree, b: &Tree, what: &str) {
    let (pa, pb) = (a.paths(), b.paths());
    assert_eq!(pa.len(), pb.len(), "{what}: structure");
    for ((path, x), (path_b, y)) in pa.into_iter().zip(pb) {
        assert_eq!(path, path_b, "{what}");
        assert_eq!(x.shape(), y.shape(), "{what}: shape of {path}");
        assert_eq!(bits(x), bits(y), "{what}: {path}");
    }
}

/// A two-layer step returning its predictions, a statistic computed after
/// the loss over several axes (no backward to replay), a parameter and an
/// input passed through, and a constant, over six calls with new batches
/// and updated parameters; the dropout between the layers draws from the
/// step's key argument (its input, a `relu`, is returned too, so it is not
/// folded into the dropout's select).
#[test]
fn auxiliary_outputs_are_the_eager_ones() {
    let mut g = Gen::new(11);
    let mut params = Tree::new()
        .with("w0", to_tensor(&g.array(&[4, 6], -0.5, 0.5)))
        .with("b0", to_tensor(&g.array(&[6], -0.1, 0.1)))
        .with("w1", to_tensor(&g.array(&[6, 3], -0.5, 0.5)));
    let constant = to_tensor(&g.array(&[2], -1.0, 1.0));
    let f = |p: &Tree, b: &Tree, keys: &[Key]| -> flaxen::Result<(Tensor, Tree)> {
        let h = b
            .tensor("x")?
            .matmul(p.tensor("w0")?)?
            .add(p.tensor("b0")?)?
            .relu();
        let rectified = h.clone();
        let rngs = Rngs::none().with("dropout", keys[0].clone());
        let h = Dropout::new(0.25).apply(&Variables::new(), h, rngs)?;
        let pred = h.matmul(p.tensor("w1")?)?;
        let loss = (&pred - b.tensor("y")?).square().mean_all();
        let spread = pred.square().reshape(&[-1, 3, 1])?.sum(&[0, 2], false)?;
        let aux = Tree::new()
            .with("pred", pred)
            .with("hidden", h)
            .with("rectified", rectified)
            .with("spread", spread)
            .with("w1", p.tensor("w1")?.clone())
            .with("x", b.tensor("x")?.clone())
            .with("constant", constant.clone());
        Ok((loss, aux))
    };
    let mut step = jit_value_and_grad_with_aux(f);
    for i in 0..6 {
        let batch = Tree::new()
            .with("x", to_tensor(&g.array(&[5, 4], -1.0, 1.0)))
            .with("y", to_tensor(&g.array(&[5, 3], -1.0, 1.0)));
        let keys = [random::fold_in(random::key(3), i)];
        let ((l1, aux1), g1) = step.call_with_aux(&params, &batch, &keys).unwrap();
        let ((l2, aux2), g2) =
            as_jitted(|| value_and_grad_with_aux(|p| f(p, &batch, &keys), &params)).unwrap();
        assert_eq!(bits(&l1), bits(&l2), "loss at step {i}");
        same_trees(&aux1, &aux2, &format!("aux at step {i}"));
        same_trees(&g1, &g2, &format!("gradients at step {i}"));
        assert!(!aux1.leaves().iter().any(Tensor::is_traced));
        params = tree_map2(&params, &g1, |p, g| Ok(p - &(g * 0.1))).unwrap();
    }
    assert!(step.is_compiled());
}

/// The loss may also be an auxiliary output, and a step with no auxiliary
/// outputs returns an empty tree.
#[test]
fn the_loss_itself_and_no_outputs() {
    let params = Tree::new().with("w", Tensor::full(&[3], 2.0));
    let f = |p: &Tree, _: &Tree, _: &[Key]| {
        let loss = p.tensor("w")?.square().sum_all();
        Ok((loss.clone(), Tree::new().with("loss", loss)))
    };
    let mut step = jit_value_and_grad_with_aux(f);
    for _ in 0..3 {
        let ((l, aux), _) = step.call_with_aux(&params, &Tree::new(), &[]).unwrap();
        assert_eq!(l.item().unwrap(), 12.0);
        assert_eq!(aux.tensor("loss").unwrap().item().unwrap(), 12.0);
    }
    assert!(step.is_compiled());
    let g = |p: &Tree, _: &Tree, _: &[Key]| Ok((p.tensor("w")?.sum_all(), Tree::new()));
    let mut step = jit_value_and_grad_with_aux(g);
    for _ in 0..2 {
        let ((l, aux), grads) = step.call_with_aux(&params, &Tree::new(), &[]).unwrap();
        assert_eq!(l.item().unwrap(), 6.0);
        assert!(aux.leaves().is_empty());
        assert_eq!(grads.tensor("w").unwrap().to_vec(), [1.0; 3]);
    }
    assert!(step.is_compiled());
}

/// A comparison of traced values (a mask) is an operation of the step,
/// computed again on every call (before, the replay kept the traced call's
/// mask); an `argmax` of them is read from the values (not an operation),
/// so its step runs eagerly on every call. Either way, each call's numbers
/// are the eager step's.
#[test]
fn comparisons_replay_and_argmax_runs_eagerly() {
    let masked = |p: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
        let h = b.tensor("x")?.mul(p.tensor("w")?)?;
        let positive = h.greater(&Tensor::scalar(0.0))?;
        let small = h.less_equal(&Tensor::scalar(1.5))?;
        let picked = Tensor::select(&positive, &h, &Tensor::zeros(&[]))?;
        Ok(picked.mul(&small)?.add(&h.equal(&h)?)?.sum_all())
    };
    let best = |p: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
        let h = b.tensor("x")?.mul(p.tensor("w")?)?;
        let best = h.argmax(0)?.into_raw_vec_and_offset().0[0] as f32;
        Ok(h.sum_all().mul(&Tensor::scalar(best))?)
    };
    type Loss<'a> = &'a dyn Fn(&Tree, &Tree) -> flaxen::Result<Tensor>;
    let params = Tree::new().with("w", Tensor::full(&[3], 1.0));
    for (name, f, compiled) in [("greater", &masked as Loss, true), ("argmax", &best, false)] {
        let mut step = jit_value_and_grad_with(f);
        for x in [
            [1.0f32, -1.0, 2.0],
            [-1.0, 1.0, -2.0],
            [3.0, 1.0, 0.5],
            [1e-45, -0.0, 1.5],
        ] {
            let batch = Tree::new().with("x", Tensor::from_vec(x.to_vec(), &[3]).unwrap());
            let (l1, g1) = step.call_with(&params, &batch).unwrap();
            let (l2, g2) = as_jitted(|| value_and_grad(|p| f(p, &batch), &params)).unwrap();
            assert_eq!(bits(&l1), bits(&l2), "{name} on {x:?}");
            same_trees(&g1, &g2, name);
        }
        assert_eq!(step.is_compiled(), compiled, "{name}");
    }
}

/// Dense(8) → BatchNorm (training) → relu → Dense(2).
struct BnNet;

impl Module for BnNet {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &flaxen::core::Scope<'_>, x: Tensor) -> flaxen::core::Result<Tensor> {
        let x = s.call(flaxen::nn::Dense::new(8), x)?;
        let x = s.call(flaxen::nn::BatchNorm::new().use_running_average(false), x)?;
        s.call(flaxen::nn::Dense::new(2), x.relu())
    }
}

/// A BatchNorm training step compiled: its updated `batch_stats` are an
/// auxiliary output fed back as an input of the next call, and every loss,
/// gradient and statistic equals the eager step's over five calls.
#[test]
fn batch_norm_training_steps_compile() {
    let mut g = Gen::new(12);
    let x = to_tensor(&g.array(&[16, 5], -1.0, 1.0));
    let variables = BnNet.init(random::key(0), x.clone()).unwrap();
    let mut params = variables.params();
    let mut stats = variables.collection("batch_stats").cloned().unwrap();
    let f = |p: &Tree, b: &Tree, _: &[Key]| -> flaxen::Result<(Tensor, Tree)> {
        let vars = Variables::new()
            .with("params", p.clone())
            .with("batch_stats", b.subtree("batch_stats").unwrap_or_default());
        let (out, updated) = BnNet.apply_mut(&vars, b.tensor("x")?.clone(), (), ["batch_stats"])?;
        let loss = (&out - b.tensor("y")?).square().mean_all();
        let stats = updated
            .collection("batch_stats")
            .cloned()
            .unwrap_or_default();
        Ok((loss, Tree::new().with("batch_stats", stats)))
    };
    let mut step = jit_value_and_grad_with_aux(f);
    for i in 0..5 {
        let batch = Tree::new()
            .with("x", to_tensor(&g.array(&[16, 5], -1.0, 1.0)))
            .with("y", to_tensor(&g.array(&[16, 2], -1.0, 1.0)))
            .with("batch_stats", stats.clone());
        let ((l1, aux1), g1) = step.call_with_aux(&params, &batch, &[]).unwrap();
        let ((l2, aux2), g2) =
            as_jitted(|| value_and_grad_with_aux(|p| f(p, &batch, &[]), &params)).unwrap();
        assert_eq!(bits(&l1), bits(&l2), "loss at step {i}");
        same_trees(&aux1, &aux2, &format!("statistics at step {i}"));
        same_trees(&g1, &g2, &format!("gradients at step {i}"));
        stats = aux1.subtree("batch_stats").unwrap();
        params = tree_map2(&params, &g1, |p, g| Ok(p - &(g * 0.1))).unwrap();
    }
    assert!(step.is_compiled());
}
