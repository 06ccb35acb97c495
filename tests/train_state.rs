//! `TrainState` and the optimizers' bad input: a training step with
//! BatchNorm and Dropout written as in Flax, and typed errors for states
//! that do not fit, bad learning rates and bad labels.

use flaxen::core::{Result, Rngs, Scope};
use flaxen::nn::{BatchNorm, Dense, Dropout, Module};
use flaxen::optim::{adamw, losses, sgd, GradientTransformation, TrainState};
use flaxen::random;
use flaxen::tensor::{value_and_grad, Tensor, Tree};
use flaxen::Error;
use ndarray::arr1;

struct Net {
    train: bool,
}

impl Module for Net {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(8), x)?;
        let x = s
            .call(BatchNorm::new().use_running_average(!self.train), x)?
            .relu();
        let x = s.call(Dropout::new(0.1).deterministic(!self.train), x)?;
        s.call(Dense::new(3), x)
    }
}

#[test]
fn a_training_step_with_batchnorm_and_dropout() {
    let x = Tensor::from_array(ndarray::Array2::from_shape_fn((6, 4), |(i, j)| {
        (i * 4 + j) as f32 / 24.0
    }));
    let y = arr1(&[0, 1, 2, 0, 1, 2]).into_dyn();
    let variables = Net { train: false }
        .init(random::key(0), x.clone())
        .unwrap();
    let mut state = TrainState::create(&variables, adamw(1e-2, 1e-4)).unwrap();
    assert!(state.collections.collection("batch_stats").is_some());
    let mut losses_seen = Vec::new();
    for step in 0..5u32 {
        let rngs = Rngs::from([("dropout", random::fold_in(random::key(1), step))]);
        let mut updated = flaxen::core::Variables::new();
        let (loss, grads) = value_and_grad(
            |p| {
                let (logits, upd) = Net { train: true }.apply_mut(
                    &state.variables_with(p),
                    x.clone(),
                    rngs.clone(),
                    "batch_stats",
                )?;
                updated = upd;
                Ok(losses::softmax_cross_entropy_with_integer_labels(&logits, &y)?.mean_all())
            },
            &state.params,
        )
        .unwrap();
        state = state
            .apply_gradients(&grads)
            .unwrap()
            .with_collections(&updated);
        losses_seen.push(loss.item().unwrap());
    }
    assert_eq!(state.step, 5);
    assert!(losses_seen[4] < losses_seen[0], "{losses_seen:?}");
    // The running statistics moved away from their initial zeros.
    let mean = state
        .collections
        .tensor("batch_stats/BatchNorm_0/mean")
        .unwrap();
    assert!(mean.to_vec().iter().any(|&m| m != 0.0));
    // Evaluation uses the running averages.
    let out = Net { train: false }
        .apply(&state.variables(), x, ())
        .unwrap();
    assert_eq!(out.shape(), &[6, 3]);
}

#[test]
fn optimizer_states_that_do_not_fit_are_typed_errors() {
    let params = Tree::new().with("w", Tensor::ones(&[2]));
    let other = Tree::new().with("v", Tensor::ones(&[2]));
    let tx = adamw(1e-2, 1e-4);
    let state = tx.init(&other).unwrap();
    let err = tx.update(&params, &state, Some(&params)).unwrap_err();
    assert!(err.to_string().contains("\"mu\""), "{err}");
    let err = tx.update(&params, &Tree::new(), Some(&params)).unwrap_err();
    assert!(err.to_string().contains("no entry \"0\""), "{err}");
    // The same mistakes through the fused and the in-place update.
    for owned in [false, true] {
        let apply = |grads: &Tree, state: Tree, params: Tree| {
            if owned {
                tx.apply_gradients_owned(grads, state, params)
            } else {
                tx.apply_gradients(grads, &state, &params)
            }
        };
        let err = apply(&params, state.clone(), params.clone()).unwrap_err();
        assert!(err.to_string().contains("\"mu\""), "{err}");
        let err = apply(&params, Tree::new(), params.clone()).unwrap_err();
        assert!(err.to_string().contains("no entry"), "{err}");
        // Parameters that are not shaped like the gradients.
        let good = tx.init(&params).unwrap();
        let wide = Tree::new().with("w", Tensor::ones(&[3]));
        let err = apply(&params, good.clone(), wide).unwrap_err();
        assert!(
            err.to_string().contains("[2]") && err.to_string().contains("[3]"),
            "{err}"
        );
        let renamed = Tree::new().with("v", Tensor::ones(&[2]));
        assert!(apply(&params, good, renamed).is_err());
    }
}

#[test]
fn bad_learning_rates_are_typed_errors() {
    let params = Tree::new().with("w", Tensor::ones(&[2]));
    for lr in [-0.1, f64::NAN, f64::INFINITY] {
        let tx = sgd(lr, None, false);
        let state = tx.init(&params).unwrap();
        let err = tx.apply_gradients(&params, &state, &params).unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
        assert!(err.to_string().contains("learning rate"), "{err}");
    }
}

#[test]
fn bad_labels_are_typed_errors() {
    let logits = Tensor::zeros(&[2, 3]);
    for labels in [arr1(&[0, 3]), arr1(&[-1, 0])] {
        let err = losses::softmax_cross_entropy_with_integer_labels(&logits, &labels.into_dyn())
            .unwrap_err();
        assert!(err.to_string().contains("outside [0, 3)"), "{err}");
    }
    let err = losses::softmax_cross_entropy_with_integer_labels(&logits, &arr1(&[0]).into_dyn())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("incompatible shapes [2, 3] and [1]"),
        "{err}"
    );
}

/// Updating in place (`apply_gradients_owned`, with AdamW's fused pass and
/// with a chain that has none) gives the borrowed update's numbers, step
/// after step, for `TrainState` and for the transformation itself.
#[test]
fn owned_updates_equal_borrowed_ones() {
    let bits = |t: &Tree| -> Vec<u32> {
        t.leaves()
            .iter()
            .flat_map(|l| l.to_vec())
            .map(f32::to_bits)
            .collect()
    };
    let params = Tree::new()
        .with(
            "w",
            Tensor::from_vec((0..300).map(|i| (i as f32).sin()).collect(), &[30, 10]).unwrap(),
        )
        .with("b", Tensor::from_vec(vec![0.5, -1.0, 2.0], &[3]).unwrap());
    let grads_at =
        |t: usize| flaxen::tensor::tree_map(&params, |p| p * (0.1 * (t as f32 + 1.0)) - 0.3);
    for tx in [adamw(1e-3, 1e-4), sgd(0.1, Some(0.9), false)] {
        let variables = flaxen::core::Variables::new().with("params", params.clone());
        let mut a = TrainState::create(&variables, tx).unwrap();
        let mut b = a.clone();
        for t in 0..4 {
            let g = grads_at(t);
            a = a.apply_gradients(&g).unwrap();
            b = b.apply_gradients_owned(&g).unwrap();
            assert_eq!(a.step, b.step);
            assert_eq!(bits(&a.params), bits(&b.params), "step {t}");
            assert_eq!(bits(&a.opt_state), bits(&b.opt_state), "step {t}");
        }
    }
}
