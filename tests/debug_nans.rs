//! `set_debug_nans` (JAX's `jax_debug_nans`): the first operation producing
//! a NaN is a typed error naming the operation and its input shapes, from
//! `grad`, compiled steps, `init`/`apply`, or `check_nans`. One test, as
//! the switch is process-wide.

use flaxen::core::{Result, Scope};
use flaxen::nn::{Dense, Module};
use flaxen::random;
use flaxen::tensor::{
    self, check_nans, grad, jit_value_and_grad, set_debug_nans, Tensor, TensorError, Tree,
};
use flaxen::Error;

struct LogLayer;

impl Module for LogLayer {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let y = s.call(Dense::new(3), x)?;
        // Some outputs are negative: log gives NaN there.
        Ok(y.log())
    }
}

fn nan_op(err: Error) -> (String, Vec<Vec<usize>>) {
    match err {
        Error::Tensor {
            source: TensorError::NanProduced { op, input_shapes },
            ..
        } => (op, input_shapes),
        other => panic!("not a NaN error: {other}"),
    }
}

#[test]
fn debug_nans_names_the_first_operation() {
    let params = Tree::from(Tensor::from_vec(vec![-1.0, 4.0], &[2]).unwrap());
    let f = |p: &Tree| Ok(p.as_tensor().unwrap().log().sqrt().sum_all());

    // Off (the default): NaNs flow silently, as in JAX.
    assert!(grad(f, &params).is_ok());

    set_debug_nans(true);
    let (op, shapes) = nan_op(grad(f, &params).unwrap_err());
    assert_eq!(op, "log");
    assert_eq!(shapes, [vec![2]]);

    // A compiled step, on its first and later calls.
    let mut step = jit_value_and_grad(f);
    for _ in 0..2 {
        let (op, _) = nan_op(step.call(&params).unwrap_err());
        assert_eq!(op, "log");
    }

    // Inside a module: init reports it.
    let x = Tensor::from_vec(vec![1.0, -2.0, 0.5, 3.0], &[2, 2]).unwrap();
    let (op, shapes) = nan_op(LogLayer.init(random::key(0), x.clone()).unwrap_err());
    assert_eq!((op.as_str(), shapes), ("log", vec![vec![2, 3]]));

    // Operations run outside the transforms: check_nans reports them.
    let a = Tensor::from_vec(vec![f32::INFINITY, 1.0], &[2]).unwrap();
    let b = Tensor::from_vec(vec![f32::INFINITY, 1.0], &[2]).unwrap();
    let _ = a.sub(&b).unwrap();
    let err = check_nans().unwrap_err();
    assert!(
        matches!(err, TensorError::NanProduced { ref op, .. } if op == "sub"),
        "{err}"
    );
    assert!(check_nans().is_ok(), "check_nans clears what it reports");

    // A NaN born in the backward pass is reported from the gradients.
    let p = Tree::from(Tensor::from_vec(vec![0.0], &[1]).unwrap());
    let err = grad(
        |p| {
            Ok(p.as_tensor()
                .unwrap()
                .sqrt()
                .mul(&Tensor::zeros(&[1]))?
                .sum_all())
        },
        &p,
    )
    .unwrap_err();
    let (op, _) = nan_op(err);
    assert!(op.contains("backward"), "{op}");

    set_debug_nans(false);
    assert!(!tensor::debug_nans());
    assert!(grad(f, &params).is_ok());
}
