//! A tour of the module API beyond layers: variables that hold integer
//! arrays and keys, `map_variables`, errors that compose and name what is
//! wrong, and `debug_nans`. Everything printed is checked by the tests
//! (tests/variables_any_array.rs, map_variables_conformance.rs,
//! flax_name_checks.rs, debug_nans.rs).
//!
//! Run: `cargo run --release --example api_tour`

use flaxen::core::{Result, Scope, Variable};
use flaxen::nn::{Dense, MapVariables, Module};
use flaxen::random;
use flaxen::tensor::{self, tree_map, Array, Tensor, Tree};
use ndarray::arr0;

/// Flax's counter pattern: an int32 step count in its own collection, and
/// the key of the last call kept in another.
struct Counted;

impl Module for Counted {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let count: Variable<'_, '_, Array> = s.variable("counter", "count", || {
            Ok(Array::from(arr0(0i32).into_dyn()))
        })?;
        if s.is_mutable_collection("counter") {
            let next = count.value().as_i32().expect("int32").map(|c| c + 1);
            count.set(Array::from(next))?;
        }
        if s.is_mutable_collection("keys") {
            s.put_variable("keys", "last", Array::from(s.make_rng("params")?))?;
        }
        s.call(Dense::new(2), x)
    }
}

/// A Dense layer on the signs of its weights (Flax's
/// `nn.map_variables(nn.Dense, 'params', sign, init=True)`).
struct BitDense;

impl Module for BitDense {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let sign = |t: &Tree| {
            Ok(tree_map(t, |w| {
                Tensor::from_array(w.to_array().mapv(|v| if v == 0.0 { v } else { v.signum() }))
            }))
        };
        s.call(
            MapVariables::new(Dense::new(4), "params")
                .trans_in(sign)
                .init(true),
            x,
        )
    }
}

/// A module that creates `bias` twice.
struct Clash;

impl Module for Clash {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        s.param("bias", flaxen::init::zeros(), &[1])?;
        let b = s.param("bias", flaxen::init::zeros(), &[1])?;
        Ok(&x + &b)
    }
}

pub fn main() -> flaxen::Result<()> {
    // Variables hold int32 arrays and keys next to float32 tensors.
    let x = Tensor::ones(&[1, 3]);
    let variables = Counted.init(random::key(0), x.clone())?;
    println!(
        "counter: {}",
        variables.array("counter/count").expect("count").repr()
    );
    println!(
        "last key: {}",
        variables.array("keys/last").expect("key").repr()
    );
    let (_, updated) = Counted.apply_mut(&variables, x.clone(), (), "counter")?;
    println!(
        "after apply: {}",
        updated.array("counter/count").expect("count").repr()
    );

    // map_variables with init=True: init and apply compute the same thing.
    let x = Tensor::ones(&[2, 4]);
    let (y, v) = BitDense.init_with_output(random::key(0), x.clone())?;
    println!(
        "bit kernel row: {}",
        v["params/Map_variablesDense_0/kernel"].index_axis(0, 0)?
    );
    println!(
        "init == apply: {}",
        y.to_vec() == BitDense.apply(&v, x, ())?.to_vec()
    );

    // Errors name the module, the values, and Flax's message.
    let err = Clash.init(random::key(0), Tensor::ones(&[1])).unwrap_err();
    println!("error: {err}");
    let err = variables.lookup("params/Dense_0/kernal").unwrap_err();
    println!("error: {err}");

    // debug_nans: the first operation producing a NaN, as an error.
    tensor::set_debug_nans(true);
    let p = Tree::from(Tensor::from_vec(vec![-1.0, 4.0], &[2])?);
    let err = tensor::grad(|p| Ok(p.as_tensor().expect("leaf").log().sum_all()), &p).unwrap_err();
    tensor::set_debug_nans(false);
    println!("error: {err}");
    Ok(())
}
