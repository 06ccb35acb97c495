//! `nn.map_variables` against flax 0.12.8 (tools/oracle/generate_api.py):
//! Flax's `test_map_variables_bit_weights` (`init=True`), `init=True` with a
//! dropout stream (the counts of the second run), and `mutable=True` with a
//! `trans_out`. Values are compared bit for bit.

mod common;

use common::F32Array as Array;

use std::collections::BTreeMap;

use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::{Dense, Dropout, MapVariables, Module};
use flaxen::random;
use flaxen::tensor::{tree_map, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    x: Array,
    init_y: Array,
    variables: BTreeMap<String, Array>,
    apply_y: Array,
    #[serde(default)]
    updated: BTreeMap<String, Array>,
}

#[derive(Deserialize)]
struct ExplicitRngCase {
    x: Array,
    explicit: Array,
    stream: Array,
    eval_explicit: Array,
    eval_stream: Array,
    default_key: [u32; 2],
}

#[derive(Deserialize)]
struct Fixture {
    cases: BTreeMap<String, Case>,
    explicit_rng: ExplicitRngCase,
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

fn assert_same(got: &Tensor, want: &Array, what: &str) {
    assert_eq!(got.shape(), want.shape.as_slice(), "{what}");
    let want: Vec<u32> = want.data.iter().map(|v| v.to_bits()).collect();
    assert_eq!(bits(got), want, "{what}");
}

fn assert_variables(got: &Variables, want: &BTreeMap<String, Array>) {
    let flat = got.flatten();
    assert_eq!(
        flat.len(),
        want.len(),
        "{:?}",
        flat.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    for (path, t) in flat {
        let w = want
            .get(&path)
            .unwrap_or_else(|| panic!("unexpected {path}"));
        assert_same(t, w, &path);
    }
}

fn case(name: &str) -> Case {
    let mut f: Fixture = common::load_fixture("api.json");
    f.cases.remove(name).unwrap()
}

/// `jnp.sign` (a constant: its gradient is zero).
fn sign(t: &Tree) -> Result<Tree> {
    Ok(tree_map(t, |x| {
        Tensor::from_array(x.to_array().mapv(|v| if v == 0.0 { v } else { v.signum() }))
    }))
}

struct BitWeights;

impl Module for BitWeights {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        s.call(
            MapVariables::new(Dense::new(4), "params")
                .trans_in(sign)
                .init(true),
            x,
        )
    }
}

#[test]
fn test_map_variables_bit_weights() {
    let c = case("bit_weights");
    let x = c.x.tensor();
    let (y, v) = BitWeights
        .init_with_output(random::key(0), x.clone())
        .unwrap();
    assert_variables(&v, &c.variables);
    assert_same(&y, &c.init_y, "init y");
    assert_same(&BitWeights.apply(&v, x, ()).unwrap(), &c.apply_y, "apply y");
}

struct DenseDropout;

impl Module for DenseDropout {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(3), x)?;
        s.call(Dropout::new(0.5), x)
    }
}

struct Doubled;

impl Module for Doubled {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let double = |t: &Tree| Ok(tree_map(t, |a| a * 2.0));
        s.call(
            MapVariables::new(DenseDropout, "params")
                .trans_in(double)
                .init(true),
            x,
        )
    }
}

#[test]
fn init_runs_twice_with_the_streams_of_flax() {
    let c = case("doubled_dropout");
    let x = c.x.tensor();
    let rngs = Rngs::from([("params", random::key(0)), ("dropout", random::key(1))]);
    let (y, v) = Doubled.init_with_output(rngs, x.clone()).unwrap();
    assert_variables(&v, &c.variables);
    assert_same(&y, &c.init_y, "init y");
    let y = Doubled
        .apply(&v, x, Rngs::from([("dropout", random::key(2))]))
        .unwrap();
    assert_same(&y, &c.apply_y, "apply y");
}

struct Count;

impl Module for Count {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let c = s.variable("stats", "count", || Ok(Tensor::zeros(&[2])))?;
        c.set(&c.value() + 1.0)?;
        Ok(&x * &c.value())
    }
}

struct Shifted;

impl Module for Shifted {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let m = MapVariables::new(Count, "stats")
            .trans_in(|t: &Tree| Ok(tree_map(t, |a| a + 10.0)))
            .trans_out(|t: &Tree| Ok(tree_map(t, |a| a - 10.0)))
            .mutable(true);
        s.call(m, x)
    }
}

#[test]
fn mutable_mappings_store_through_trans_out() {
    let c = case("shifted_counter");
    let x = c.x.tensor();
    let (y, v) = Shifted.init_with_output(random::key(0), x.clone()).unwrap();
    assert_variables(&v, &c.variables);
    assert_same(&y, &c.init_y, "init y");
    let (y, updated) = Shifted.apply_mut(&v, x, (), "stats").unwrap();
    assert_same(&y, &c.apply_y, "apply y");
    assert_variables(&updated, &c.updated);
}

#[test]
fn without_init_or_mutable_the_mapped_collection_is_read_only() {
    // Flax: ScopeCollectionNotFound ("the collection is empty") at init.
    struct NoInit;
    impl Module for NoInit {
        type Input = Tensor;
        type Output = Tensor;
        fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
            s.call(MapVariables::new(Dense::new(4), "params").trans_in(sign), x)
        }
    }
    let err = NoInit
        .init(random::key(0), Tensor::ones(&[2, 4]))
        .unwrap_err();
    assert!(
        matches!(err, flaxen::Error::MissingVariable { ref name, .. } if name == "kernel"),
        "{err}"
    );
}

/// Flax: `nn.Dropout(0.5)(x, deterministic=not train, rng=key(5))`, then a
/// Dropout on the stream, then `make_rng()`.
struct ExplicitRng {
    train: bool,
}

impl Module for ExplicitRng {
    type Input = Tensor;
    type Output = (Tensor, Tensor, [u32; 2]);
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<(Tensor, Tensor, [u32; 2])> {
        let explicit = Dropout::new(0.5)
            .deterministic(!self.train)
            .rng(random::key(5));
        let a = s.call(explicit, x.clone())?;
        let b = s.call(Dropout::new(0.5).deterministic(!self.train), x)?;
        let k = random::key_data(&s.make_rng_default()?);
        Ok((a, b, k))
    }
}

#[test]
fn dropout_with_an_explicit_rng_and_make_rng_default() {
    let f: Fixture = common::load_fixture("api.json");
    let c = f.explicit_rng;
    let rngs = || Rngs::from([("params", random::key(0)), ("dropout", random::key(1))]);
    let ((a, b, k), _) = ExplicitRng { train: true }
        .init_with_output(rngs(), c.x.tensor())
        .unwrap();
    assert_same(&a, &c.explicit, "explicit rng");
    assert_same(&b, &c.stream, "dropout stream");
    assert_eq!(k, c.default_key);
    let ((a, b, _), _) = ExplicitRng { train: false }
        .init_with_output(rngs(), c.x.tensor())
        .unwrap();
    assert_same(&a, &c.eval_explicit, "deterministic");
    assert_same(&b, &c.eval_stream, "deterministic");
}
