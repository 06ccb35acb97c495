//! One error type at the user's surface: `?` takes tensor, random,
//! TensorFlow-random and module errors alike inside `Module::call`, inside
//! `grad` closures and inside compiled steps, and the typed variants and
//! module paths survive.

use flaxen::core::{self, Result, Scope, Variables};
use flaxen::nn::{Dense, Module};
use flaxen::random::{self, tf, RandomError};
use flaxen::tensor::{jit_value_and_grad_with, Tensor, TensorError, Tree};
use flaxen::Error;

/// A module whose body uses `?` on every kind of error.
struct Mixed {
    /// Which step fails.
    fail: &'static str,
}

impl Module for Mixed {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let y = s.call(Dense::new(2), x)?;
        let noise = match self.fail {
            "random" => random::uniform_range(random::key(0), &[2], 1.0, 1.0)?,
            _ => random::normal(random::key(0), &[2])?,
        };
        if self.fail == "tf" {
            tf::stateless_uniform_int::<i32, i64>(&[2], &[1, 2], 5, 5)?;
        }
        let noise = Tensor::from_array(noise);
        match self.fail {
            "tensor" => Ok(y.add(&Tensor::zeros(&[3]))?),
            _ => Ok(y.add(&noise)?),
        }
    }
}

#[test]
fn module_bodies_take_every_error_with_question_mark() {
    let x = Tensor::ones(&[1, 3]);
    let ok = Mixed { fail: "" }.init(random::key(0), x.clone());
    assert!(ok.is_ok());

    let err = Mixed { fail: "tensor" }
        .init(random::key(0), x.clone())
        .unwrap_err();
    match err {
        Error::Tensor { path, source } => {
            assert_eq!(path, "/");
            assert!(matches!(source, TensorError::Incompatible { .. }));
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = Mixed { fail: "tf" }
        .init(random::key(0), x.clone())
        .unwrap_err();
    assert!(
        matches!(err, Error::TfRandom { ref path, .. } if path == "/"),
        "{err}"
    );
    let err = Mixed { fail: "random" }
        .init(random::key(0), x)
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Random {
            source: RandomError::EmptyRange { .. },
            ..
        }
    ));
}

#[test]
fn grad_closures_take_module_errors() {
    let model = Dense::new(1);
    let x = Tensor::ones(&[4, 3]);
    let variables = model.init(random::key(0), x.clone()).unwrap();
    // A module error inside the differentiated function comes back as it was.
    let err = core::grad(
        |params| {
            let v = Variables::new().with("params", params.clone());
            let y = Dense::new(1).apply(&v, Tensor::ones(&[4, 5]), ())?;
            Ok(y.sum_all())
        },
        &variables.params(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    assert!(err.to_string().contains("kernel"), "{err}");
}

#[test]
fn value_and_grad_with_aux_in_core() {
    let model = Dense::new(1);
    let x = Tensor::ones(&[4, 3]);
    let variables = model.init(random::key(0), x.clone()).unwrap();
    let ((loss, prediction), grads) = core::value_and_grad_with_aux(
        |params| {
            let v = Variables::new().with("params", params.clone());
            let y = model.apply(&v, x.clone(), ())?;
            Ok((y.square().mean_all(), y))
        },
        &variables.params(),
    )
    .unwrap();
    assert_eq!(prediction.shape(), &[4, 1]);
    assert!(!prediction.is_traced());
    assert_eq!(grads.tensor("kernel").unwrap().shape(), &[3, 1]);
    assert!(loss.item().unwrap() >= 0.0);
}

#[test]
fn compiled_steps_take_module_errors() {
    let model = Dense::new(1);
    let x = Tensor::ones(&[4, 3]);
    let variables = model.init(random::key(0), x.clone()).unwrap();
    let mut step = jit_value_and_grad_with(|params: &Tree, inputs: &Tree| {
        let v = Variables::new().with("params", params.clone());
        let y = model.apply(&v, inputs.tensor("x")?.clone(), ())?;
        Ok(y.square().mean_all())
    });
    let inputs = Tree::new().with("x", x);
    let (loss, _) = step.call_with(&variables.params(), &inputs).unwrap();
    assert!(loss.item().unwrap() >= 0.0);
    let wrong = Tree::new().with("x", Tensor::ones(&[4, 7]));
    let err = step.call_with(&variables.params(), &wrong).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
}
