//! Names checked as Flax checks them: Flax's own tests
//! `test_call_var_collision`, `test_submodule_var_collision_with_submodule`,
//! `test_submodule_var_collision_with_params` (tests/linen/linen_module_test.py)
//! and `test_apply_variables_bad_pytree` (tests/linen/linen_test.py), ported.
//! Flax's `setup` has no counterpart in flaxen; the submodule or parameter it
//! creates first is created first in the compact body here.

use flaxen::core::{self, Result, Scope, Variables};
use flaxen::nn::{Dense, Module};
use flaxen::tensor::{Tensor, Tree};
use flaxen::{init, random, Error};

/// `DummyModule` of Flax's tests: one `bias` parameter added to the input.
struct DummyModule;

impl Module for DummyModule {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let bias = s.param("bias", init::ones(), x.shape())?;
        Ok(&x + &bias)
    }
}

/// The three collisions of Flax's tests.
enum Collision {
    ParamTwice,
    SubmoduleAfterParam,
    ParamAfterSubmodule,
}

struct Dummy(Collision);

impl Module for Dummy {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let bias = match self.0 {
            Collision::ParamTwice => {
                s.param("bias", init::ones(), x.shape())?;
                s.param("bias", init::ones(), x.shape())?
            }
            Collision::SubmoduleAfterParam => {
                let bias = s.param("bias", init::ones(), x.shape())?;
                s.child_named("bias", DummyModule)?;
                bias
            }
            Collision::ParamAfterSubmodule => {
                s.child_named("bias", DummyModule)?;
                s.param("bias", init::ones(), x.shape())?
            }
        };
        Ok(&x + &bias)
    }
}

fn init_error(collision: Collision) -> Error {
    let x = Tensor::from_vec(vec![1.0], &[1]).unwrap();
    Dummy(collision).init(random::key(0), x).unwrap_err()
}

#[test]
fn test_call_var_collision() {
    let err = init_error(Collision::ParamTwice);
    assert!(matches!(err, Error::NameInUse { kind: "param", .. }));
    assert!(
        err.to_string()
            .contains("Could not create param \"bias\" in Module Dummy: Name in use"),
        "{err}"
    );
}

#[test]
fn test_submodule_var_collision_with_submodule() {
    let err = init_error(Collision::SubmoduleAfterParam);
    assert!(
        err.to_string()
            .contains("Could not create submodule \"bias\" in Module Dummy: Name in use"),
        "{err}"
    );
}

#[test]
fn test_submodule_var_collision_with_params() {
    let err = init_error(Collision::ParamAfterSubmodule);
    assert!(
        err.to_string()
            .contains("Could not create param \"bias\" in Module Dummy: Name in use"),
        "{err}"
    );
}

#[test]
fn collisions_are_found_at_apply_too() {
    // Flax reserves names on every call, not only at init.
    let x = Tensor::from_vec(vec![1.0], &[1]).unwrap();
    let variables = Variables::new().with("params", Tree::new().with("bias", Tensor::ones(&[1])));
    let err = Dummy(Collision::ParamTwice)
        .apply(&variables, x, ())
        .unwrap_err();
    assert!(matches!(err, Error::NameInUse { .. }), "{err}");
}

#[test]
fn variables_of_different_collections_may_share_a_name() {
    // Flax's `Scope.name_reserved` allows one name in two collections.
    let (_, v) = core::init(random::key(0), |s| {
        s.param("mean", init::zeros(), &[2])?;
        s.variable("stats", "mean", || Ok(Tensor::zeros(&[2])))?;
        Ok(())
    })
    .unwrap();
    assert!(v.tensor("params/mean").is_some());
    assert!(v.tensor("stats/mean").is_some());
    // ... but not twice in one collection, and a submodule takes the name
    // in every collection.
    let err = core::init(random::key(0), |s| {
        s.variable("stats", "mean", || Ok(Tensor::zeros(&[2])))?;
        s.variable("stats", "mean", || Ok(Tensor::zeros(&[2])))?;
        Ok(())
    })
    .unwrap_err();
    assert!(
        matches!(err, Error::NameInUse { kind: "variable", ref module, .. } if module == "/"),
        "{err}"
    );
    let err = core::init(random::key(0), |s| {
        s.variable("stats", "dense", || Ok(Tensor::zeros(&[2])))?;
        s.call_named("dense", Dense::new(1), Tensor::ones(&[1, 2]))?;
        Ok(())
    })
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NameInUse {
                kind: "submodule",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_module_called_twice_reserves_afresh() {
    // Each call is a new frame (Flax rewinds the scope per compact call).
    struct Twice;
    impl Module for Twice {
        type Input = Tensor;
        type Output = Tensor;
        fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
            let d = s.child_named("shared", DummyModule)?;
            let y = d.call(x)?;
            d.call(y)
        }
    }
    let x = Tensor::from_vec(vec![1.0], &[1]).unwrap();
    let v = Twice.init(random::key(0), x.clone()).unwrap();
    assert_eq!(Twice.apply(&v, x, ()).unwrap().to_vec(), [3.0]);
}

#[test]
fn test_apply_variables_bad_pytree() {
    // Flax: `model.apply({'params': variables}, x)` with variables =
    // `{'params': ...}` raises ApplyScopeInvalidVariablesStructureError.
    let x = Tensor::ones(&[1, 3]);
    let model = Dense::new(2);
    let variables = model.init(random::key(0), x.clone()).unwrap();
    let wrapped = Variables::new().with("params", Tree::new().with("params", variables.params()));
    let err = model.apply(&wrapped, x.clone(), ()).unwrap_err();
    assert_eq!(err, Error::ExtraParamsLayer);
    assert!(err
        .to_string()
        .contains("but got a dict with an extra params layer"));
    // The right structure still works.
    assert!(model.apply(&variables, x, ()).is_ok());
}
