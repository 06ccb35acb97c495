//! Gradients of tensors shared by a `Vmap`'s items (broadcast parameters,
//! unmapped inputs) when the items do not use them alike. Values are small
//! integers, so every order of summation gives the same, exact result.

use flaxen::core::{value_and_grad, Result, Scope, Variables};
use flaxen::init;
use flaxen::nn::{Dense, Module, Vmap};
use flaxen::random;
use flaxen::tensor::{Tensor, Tree};

/// Uses its `Dense` twice when the item's input sums to more than zero,
/// once otherwise.
#[derive(Clone)]
struct Uneven;

impl Module for Uneven {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let d = s.child(
            Dense::new(2)
                .kernel_init(init::ones())
                .bias_init(init::ones()),
        )?;
        let positive = x.to_vec().iter().sum::<f32>() > 0.0;
        let h = d.call(x)?;
        if positive {
            d.call(h)
        } else {
            Ok(h)
        }
    }
}

fn model() -> Vmap<Uneven> {
    Vmap::new(Uneven)
        .variable_axes("params", None)
        .split_rngs("params", false)
}

#[test]
fn items_that_use_a_shared_parameter_differently() {
    // Item 0 uses the Dense twice, items 1 and 2 once.
    let x = Tensor::from_vec(vec![1.0, 2.0, -1.0, -2.0, 0.0, -1.0], &[3, 2]).unwrap();
    let v = model().init(random::key(0), x.clone()).unwrap();
    let (_, grads) = value_and_grad(
        |p| {
            let vars = Variables::new().with("params", p.clone());
            Ok(model().apply(&vars, x.clone(), ())?.sum_all())
        },
        &v.params(),
    )
    .unwrap();
    // Kernel and bias all ones; the sum's cotangent is 1 everywhere.
    // Item 0 (x = [1, 2]): h = [4, 4], y = W h + b; dW = h g^T + x (W g)^T
    // = [[4, 4], [4, 4]] + [[2, 2], [4, 4]], db = [1, 1] + [2, 2].
    // Item 1 (x = [-1, -2]): dW = [[-1, -1], [-2, -2]], db = [1, 1].
    // Item 2 (x = [0, -1]): dW = [[0, 0], [-1, -1]], db = [1, 1].
    let dk = grads.tensor("Dense_0/kernel").unwrap().to_vec();
    let db = grads.tensor("Dense_0/bias").unwrap().to_vec();
    assert_eq!(dk, [5.0, 5.0, 5.0, 5.0]);
    assert_eq!(db, [3.0 + 1.0 + 1.0, 3.0 + 1.0 + 1.0]);
}

#[test]
fn gradient_of_an_unmapped_input() {
    // Three items share x (in_axes None); each has its own ones-kernel.
    let ensemble = Vmap::new(Dense::new(2).kernel_init(init::ones()))
        .variable_axes("params", Some(0))
        .split_rngs("params", true)
        .in_axes(None)
        .axis_size(3);
    let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap();
    let v = ensemble.init(random::key(0), x.clone()).unwrap();
    let vars = Variables::new().with("params", v.params());
    let (y, g) = value_and_grad(
        |t| Ok(ensemble.apply(&vars, t.tensor("x")?.clone(), ())?.sum_all()),
        &Tree::new().with("x", x),
    )
    .unwrap();
    // Each item: y_j = x0 + x1 = 3 for 2 outputs; 3 items.
    assert_eq!(y.to_vec(), [18.0]);
    // dx_i = sum over items and outputs of W[i, j] = 6.
    assert_eq!(g.tensor("x").unwrap().to_vec(), [6.0, 6.0]);
}
