//! A value computed inside a compiled step and cut from differentiation
//! (`stop_gradient`) changes with the step's inputs and parameters: a
//! replay must compute it again (or not replay), never reuse the traced
//! call's value.

use flaxen::tensor::{as_jitted, jit_value_and_grad_with, value_and_grad, Tensor, Tree};

mod common;
use common::tensor_bits as bits;

#[test]
fn stop_gradient_values_follow_each_call() {
    let loss = |p: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
        let w = p.tensor("w")?;
        let x = b.tensor("x")?;
        // A constant of the step from an input and from a parameter.
        let scale = x.mul(w)?.stop_gradient();
        let shift = w.square().stop_gradient();
        Ok(x.mul(w)?.mul(&scale)?.add(&shift)?.sum_all())
    };
    let mut step = jit_value_and_grad_with(loss);
    for i in 0..4 {
        let p = Tree::new().with("w", Tensor::full(&[3], 0.5 + i as f32));
        let b = Tree::new().with("x", Tensor::full(&[3], 1.0 + 2.0 * i as f32));
        let (v, g) = step.call_with(&p, &b).unwrap();
        let (ve, ge) = as_jitted(|| value_and_grad(|p| loss(p, &b), &p)).unwrap();
        assert_eq!(bits(&v), bits(&ve), "call {i}");
        assert_eq!(
            bits(g.tensor("w").unwrap()),
            bits(ge.tensor("w").unwrap()),
            "call {i}"
        );
    }
}
