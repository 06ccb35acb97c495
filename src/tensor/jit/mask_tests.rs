//! Keep masks drawn as bytes by a compiled step: the same bits as eager.

use super::*;
use crate::core::{Rngs, Scope, Variables};
use crate::nn::{Dense, Dropout, Module};
use crate::random;
use crate::tensor::{as_jitted, value_and_grad};

/// Dense(width) -> relu -> Dropout(rate), `layers` times, then Dense(3).
struct Dropped {
    layers: usize,
    width: usize,
    rate: f64,
}

impl Module for Dropped {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> crate::core::Result<Tensor> {
        let mut h = x;
        for _ in 0..self.layers {
            h = s.child(Dense::new(self.width))?.call(h)?.relu();
            h = s.child(Dropout::new(self.rate))?.call(h)?;
        }
        s.child(Dense::new(3))?.call(h)
    }
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

/// Compiled steps of `model` on a batch of `rows` give the eager bits on
/// every call; returns the plan.
fn check_against_eager(model: Dropped, rows: usize) -> Plan {
    let [kp, kx] = random::split(random::key(0), 2)
        .unwrap()
        .into_array()
        .unwrap();
    let x = Tensor::from_array(random::normal(kx, &[rows, 8]).unwrap());
    let params = model.init(kp, x.clone()).unwrap().params();
    let batch = Tree::new().with("x", x);
    let loss = |p: &Tree, b: &Tree, keys: &[Key]| -> crate::Result<Tensor> {
        let v = Variables::new().with("params", p.clone());
        let rngs = Rngs::none().with("dropout", keys[0].clone());
        Ok(model
            .apply(&v, b.tensor("x")?.clone(), rngs)?
            .square()
            .mean_all())
    };
    let mut step = jit_value_and_grad_with_keys(loss);
    for t in 0..4 {
        let keys = [random::fold_in(random::key(7), t)];
        let (l, g) = step.call_with_keys(&params, &batch, &keys).unwrap();
        let (le, ge) = as_jitted(|| value_and_grad(|p| loss(p, &batch, &keys), &params)).unwrap();
        assert_eq!(bits(&l), bits(&le), "loss of call {t}");
        for (a, b) in g.leaves().iter().zip(ge.leaves()) {
            assert_eq!(bits(a), bits(b), "gradient of call {t}");
        }
    }
    match step.plan {
        Some(Ok(plan)) => plan,
        _ => panic!("compiled"),
    }
}

/// Two dropouts with masks large enough to be drawn in parallel, and one
/// small: masks drawn as bytes (their float arrays never allocated) give
/// the eager bits.
#[test]
fn masks_drawn_as_bytes_give_the_eager_bits() {
    for (layers, width, rows) in [(2, 1024, 40), (1, 16, 5)] {
        let plan = check_against_eager(
            Dropped {
                layers,
                width,
                rate: 0.1,
            },
            rows,
        );
        assert_eq!(plan.masks.len(), layers);
        for (s, step) in plan.steps.iter().enumerate() {
            if is_byte_draw(step) {
                assert!(plan.values[plan.leaves + s].is_empty());
            }
        }
        let mut selects = plan.steps.iter().filter(|s| s.kind == OpKind::Select);
        assert!(selects.clone().count() == layers && selects.all(|s| s.bytes.is_some()));
    }
}

/// A keep mask read other than as a select's mask stays a float array.
#[test]
fn a_mask_read_elsewhere_stays_floats() {
    let loss = |p: &Tree, _: &Tree, keys: &[Key]| -> crate::Result<Tensor> {
        let w = p.tensor("w")?;
        let mask = Tensor::sampled_keep_mask(&keys[0], 0.5, w.shape())?;
        let picked = Tensor::select(&mask, &w.relu(), &Tensor::zeros(&[]))?;
        Ok(picked.add(&mask)?.square().sum_all())
    };
    let params = Tree::new().with(
        "w",
        Tensor::from_vec((0..6).map(|i| i as f32 - 2.5).collect(), &[2, 3]).unwrap(),
    );
    let mut step = jit_value_and_grad_with_keys(loss);
    for t in 0..3 {
        let keys = [random::fold_in(random::key(3), t)];
        let (l, g) = step.call_with_keys(&params, &Tree::new(), &keys).unwrap();
        let (le, ge) =
            as_jitted(|| value_and_grad(|p| loss(p, &Tree::new(), &keys), &params)).unwrap();
        assert_eq!(bits(&l), bits(&le));
        assert_eq!(bits(g.tensor("w").unwrap()), bits(ge.tensor("w").unwrap()));
    }
    let Some(Ok(plan)) = &step.plan else {
        panic!("compiled")
    };
    assert!(plan.masks.is_empty());
}
