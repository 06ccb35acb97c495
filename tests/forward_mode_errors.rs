//! Forward-mode differentiation refuses what it cannot do with typed
//! errors: tangents of the wrong shape or count, a custom backward rule
//! (as JAX refuses), a custom tangent rule of the wrong shape, a `jvp`
//! reading tensors an enclosing `grad` traces, parameter tangents of
//! another structure; and it goes through `checkpoint` and zero tangents.

use flaxen::core::{Result, Scope};
use flaxen::init;
use flaxen::nn::{self, Module};
use flaxen::random;
use flaxen::tensor::{checkpoint, custom_jvp, custom_vjp, grad, jvp, Tensor, TensorError, Tree};

fn message(e: flaxen::Error) -> String {
    e.to_string()
}

#[test]
fn tangents_must_have_the_primals_shapes_and_count() {
    let x = Tensor::ones(&[2, 3]);
    let e = jvp(|x: &Tensor| Ok(x.exp()), &x, &Tensor::ones(&[3, 2])).unwrap_err();
    assert!(matches!(
        e,
        flaxen::Error::Tensor {
            source: TensorError::Incompatible { op: "jvp", .. },
            ..
        }
    ));
    let pair = vec![x.clone(), x.clone()];
    let e = jvp(
        |x: &Vec<Tensor>| Ok(x[0].add(&x[1])?),
        &pair,
        &vec![x.clone()],
    )
    .unwrap_err();
    assert!(message(e).contains("1 tangent tensors were given for 2 primal tensors"));
}

#[test]
fn custom_vjp_is_refused_in_forward_mode() {
    let x = Tensor::ones(&[2]);
    let f = |x: &Tensor| {
        custom_vjp(
            |x: &Tensor| Ok((x.square(), ())),
            |_: &(), g: &Tensor| Ok(g.clone()),
            x,
        )
    };
    let e = jvp(f, &x, &x).unwrap_err();
    assert!(message(e).contains("cannot be differentiated in forward mode"));
}

#[test]
fn a_custom_tangent_of_the_wrong_shape_is_an_error() {
    let x = Tensor::ones(&[2]);
    let f = |x: &Tensor| {
        custom_jvp(
            |x: &Tensor| Ok(x.exp()),
            |x: &Tensor, _: &Tensor| Ok((x.exp(), Tensor::zeros(&[3]))),
            x,
        )
    };
    let e = jvp(f, &x, &x).unwrap_err();
    assert!(message(e).contains("tangent of shape [3] for output tensor 0 of shape [2]"));
}

#[test]
fn jvp_inside_grad_is_a_nested_error() {
    let p = Tree::from(Tensor::ones(&[2]));
    let e = grad(
        |p| {
            let w = p.as_tensor().unwrap().clone();
            let (y, _) = jvp(
                |x: &Tensor| Ok(x.mul(&w)?),
                &Tensor::ones(&[2]),
                &Tensor::ones(&[2]),
            )?;
            Ok(y.sum_all())
        },
        &p,
    )
    .unwrap_err();
    assert!(message(e).contains("higher-order derivatives are not supported"));
}

#[test]
fn checkpoint_is_differentiated_through_its_body_and_zero_tangents_stay_zero() {
    let x = Tensor::from_vec(vec![0.5, 1.5], &[2]).unwrap();
    let t = Tensor::from_vec(vec![1.0, -2.0], &[2]).unwrap();
    let body = |x: &Tensor| -> flaxen::Result<Tensor> { Ok(x.sin().mul(x)?) };
    let (_, plain) = jvp(body, &x, &t).unwrap();
    let (_, remat) = jvp(|x: &Tensor| checkpoint(body, x), &x, &t).unwrap();
    assert_eq!(plain.to_vec(), remat.to_vec());
    // An output that does not depend on the input has a zero tangent.
    let (_, zero) = jvp(|_: &Tensor| Ok(Tensor::ones(&[3])), &x, &t).unwrap();
    assert_eq!(zero.to_vec(), [0.0; 3]);
}

struct Scale;

impl Module for Scale {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let primals = Tree::new().with("x", x.clone());
        let tangents = Tree::new().with("x", Tensor::zeros(x.shape()));
        // Tangents named after a parameter that does not exist.
        let params_t = Tree::new().with("bias", Tensor::ones(&[]));
        let (_, t) = nn::jvp(
            s,
            |s, p| Ok(p.tensor("x")?.mul(&s.param("scale", init::zeros(), &[])?)?),
            &primals,
            &tangents,
            &params_t,
        )?;
        Ok(t)
    }
}

#[test]
fn parameter_tangents_of_another_structure_are_an_error() {
    let e = Scale.init(random::key(0), Tensor::ones(&[2])).unwrap_err();
    assert!(message(e).contains("the tangents of the parameters"));
}
