//! The Module API's behaviour and its typed errors: naming, weight sharing,
//! RNG fallback, mutability, and what each user mistake reports.

use flaxen::core::{Error, Result, Rngs, Scope, Variables};
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::random;
use flaxen::tensor::Tensor;

struct Mlp;

impl Module for Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call_named("hidden", Dense::new(4), x)?.relu();
        s.call(Dense::new(2), x)
    }
}

#[test]
fn names_paths_and_shapes() {
    let v = Mlp.init(random::key(0), Tensor::ones(&[1, 3])).unwrap();
    let paths: Vec<(String, Vec<usize>)> = v
        .flatten()
        .into_iter()
        .map(|(p, t)| (p, t.shape().to_vec()))
        .collect();
    assert_eq!(
        paths,
        [
            ("params/hidden/kernel".to_string(), vec![3, 4]),
            ("params/hidden/bias".to_string(), vec![4]),
            ("params/Dense_0/kernel".to_string(), vec![4, 2]),
            ("params/Dense_0/bias".to_string(), vec![2]),
        ]
    );
}

struct Shared;

impl Module for Shared {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let dense = s.child(Dense::new(3))?;
        let y = dense.call(x)?;
        dense.call(y)
    }
}

#[test]
fn calling_one_child_twice_shares_its_variables() {
    let v = Shared.init(random::key(0), Tensor::ones(&[1, 3])).unwrap();
    assert_eq!(v.flatten().len(), 2);
    assert!(v.tensor("params/Dense_0/kernel").is_some());
    assert!(v.tensor("params/Dense_1/kernel").is_none());
}

struct Draws;

impl Module for Draws {
    type Input = ();
    type Output = Vec<[u32; 2]>;
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<Vec<[u32; 2]>> {
        let leaf = s.child_named("leaf", DrawOnce)?;
        Ok(vec![
            leaf.call(())?,
            leaf.call(())?,
            s.make_rng("dropout")?.data(),
        ])
    }
}

struct DrawOnce;

impl Module for DrawOnce {
    type Input = ();
    type Output = [u32; 2];
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<[u32; 2]> {
        Ok(s.make_rng("dropout")?.data())
    }
}

#[test]
fn counters_continue_across_calls_and_missing_streams_fall_back_to_params() {
    // 'dropout' has no seed: it falls back to 'params', counting under
    // 'params'; the same child called twice continues its counter.
    let hash = |path: &[&str], n: u64| {
        let mut data: Vec<flaxen::core::rng_hash::PathElement<'_>> =
            path.iter().map(|&p| p.into()).collect();
        data.push(n.into());
        random::fold_in(
            random::key(0),
            flaxen::core::rng_hash::path_hash(&data, false),
        )
        .data()
    };
    let (out, _) = Draws.init_with_output(random::key(0), ()).unwrap();
    assert_eq!(
        out,
        vec![hash(&["leaf"], 1), hash(&["leaf"], 2), hash(&[], 1)]
    );
}

#[test]
fn missing_rng_stream_is_a_typed_error() {
    let e = Draws
        .init(Rngs::none().with("other", random::key(0)), ())
        .unwrap_err();
    assert!(
        matches!(&e, Error::MissingRng { path, stream, .. } if path == "/leaf" && stream == "dropout")
    );
    assert_eq!(
        e.to_string(),
        "module /leaf: make_rng(\"dropout\") needs an RNG key for stream \"dropout\" \
         (or \"params\" to fall back on); streams given: [\"other\"]"
    );
}

#[test]
fn parameter_errors_at_apply() {
    let x = Tensor::ones(&[1, 3]);
    let v = Mlp.init(random::key(0), x.clone()).unwrap();
    // Missing parameter: variables of another model.
    let other = Shared.init(random::key(0), x.clone()).unwrap();
    let e = Mlp.apply(&other, x.clone(), ()).unwrap_err();
    assert_eq!(
        e,
        Error::MissingVariable {
            path: "/hidden".into(),
            collection: "params".into(),
            name: "kernel".into()
        }
    );
    assert!(e.to_string().contains("module /hidden"));
    // Shape mismatch: an input with 5 features for kernels made for 3.
    let e = Mlp.apply(&v, Tensor::ones(&[1, 5]), ()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "module /hidden: variable \"params/kernel\" has shape [3, 4], but the module expects [5, 4]"
    );
    // Empty variables.
    assert!(matches!(
        Mlp.apply(&Variables::new(), x, ()).unwrap_err(),
        Error::MissingVariable { .. }
    ));
}

struct Counter;

impl Module for Counter {
    type Input = ();
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<Tensor> {
        let count = s.variable("counter", "count", || Ok(Tensor::zeros(&[])))?;
        let next = count.value().add(&Tensor::scalar(1.0))?;
        count.set(next.clone())?;
        Ok(next)
    }
}

#[test]
fn mutable_collections_and_immutable_writes() {
    let v = Counter.init((), ()).unwrap();
    assert_eq!(v.tensor("counter/count").unwrap().to_vec(), [1.0]);
    let (out, updated) = Counter.apply_mut(&v, (), (), ["counter"]).unwrap();
    assert_eq!(out.to_vec(), [2.0]);
    assert_eq!(updated.tensor("counter/count").unwrap().to_vec(), [2.0]);
    // The caller's variables are untouched.
    assert_eq!(v.tensor("counter/count").unwrap().to_vec(), [1.0]);
    let e = Counter.apply(&v, (), ()).unwrap_err();
    assert_eq!(
        e,
        Error::ImmutableCollection {
            path: "/".into(),
            collection: "counter".into(),
            name: "count".into()
        }
    );
    assert_eq!(v.tensor("counter/count").unwrap().to_vec(), [1.0]);
}

struct Duplicate;

impl Module for Duplicate {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call_named("Dense_0", Dense::new(2), x)?;
        s.call(Dense::new(2), x)
    }
}

#[test]
fn duplicate_names_are_typed_errors() {
    let e = Duplicate
        .init(random::key(0), Tensor::ones(&[1, 2]))
        .unwrap_err();
    assert_eq!(
        e,
        Error::NameInUse {
            path: "/".into(),
            kind: "submodule",
            name: "Dense_0".into(),
            module: "Duplicate".into(),
        }
    );
}

#[test]
fn dropout_edge_cases() {
    let x = Tensor::ones(&[3, 4]);
    let v = Variables::new();
    // Rate 0 and deterministic are the identity and draw no key.
    assert_eq!(
        Dropout::new(0.0).apply(&v, x.clone(), ()).unwrap().to_vec(),
        x.to_vec()
    );
    assert_eq!(
        Dropout::new(0.5)
            .deterministic(true)
            .apply(&v, x.clone(), ())
            .unwrap()
            .to_vec(),
        x.to_vec()
    );
    // Rate 1 gives zeros, drawing no key.
    assert!(Dropout::new(1.0)
        .apply(&v, x.clone(), ())
        .unwrap()
        .to_vec()
        .iter()
        .all(|&z| z == 0.0));
    // Otherwise a key is needed.
    assert!(matches!(
        Dropout::new(0.5).apply(&v, x.clone(), ()).unwrap_err(),
        Error::MissingRng { .. }
    ));
    // broadcast_dims share the mask along an axis.
    let rngs = Rngs::none().with("dropout", random::key(3));
    let y = Dropout::new(0.5)
        .broadcast_dims(&[0])
        .apply(&v, x.clone(), rngs)
        .unwrap();
    let y = y.to_array_fixed::<ndarray::Ix2>().unwrap();
    for row in y.rows() {
        assert_eq!(row.to_vec(), y.row(0).to_vec());
    }
    // Bad settings.
    let e = Dropout::new(1.5).apply(&v, x.clone(), ()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "module /: Dropout rate must be in [0, 1], got 1.5"
    );
    assert!(matches!(
        Dropout::new(0.5)
            .broadcast_dims(&[2])
            .apply(&v, x, ())
            .unwrap_err(),
        Error::Config { .. }
    ));
}

/// A module whose parameter is a whole tree (`ManualVmapMLP`'s pattern).
struct Pair {
    fail: bool,
}

impl Module for Pair {
    type Input = ();
    type Output = flaxen::tensor::Tree;
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<flaxen::tensor::Tree> {
        let fail = self.fail;
        s.call_named("inner", TreeParam { fail }, ())
    }
}

struct TreeParam {
    fail: bool,
}

impl Module for TreeParam {
    type Input = ();
    type Output = flaxen::tensor::Tree;
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<flaxen::tensor::Tree> {
        let fail = self.fail;
        s.param_tree("pair", |key| {
            if fail {
                // An initializer's own mistake, e.g. stacking unequal items.
                let a = flaxen::tensor::Tree::new().with("a", Tensor::zeros(&[2]));
                let b = flaxen::tensor::Tree::new().with("b", Tensor::zeros(&[2]));
                return Ok(flaxen::tensor::Tree::stack(&[a, b], 0)?);
            }
            Ok(flaxen::tensor::Tree::new()
                .with("a", Tensor::from_array(random::normal(key, &[2]).unwrap()))
                .with("b", Tensor::ones(&[3])))
        })
    }
}

#[test]
fn tree_valued_params() {
    let (tree, v) = Pair { fail: false }
        .init_with_output(random::key(0), ())
        .unwrap();
    assert_eq!(v.tensor("params/inner/pair/b").unwrap().shape(), &[3]);
    // The initializer got make_rng("params") at /inner, count 1.
    let scope_key = flaxen::core::init(random::key(0), |s| {
        let inner = s.call_named("inner", KeyOf, ())?;
        Ok(inner)
    })
    .unwrap()
    .0;
    assert_eq!(
        tree.tensor("a").unwrap().to_vec(),
        random::normal(scope_key, &[2])
            .unwrap()
            .into_raw_vec_and_offset()
            .0
    );
    // apply returns the stored tree.
    let again = Pair { fail: false }.apply(&v, (), ()).unwrap();
    assert_eq!(
        again.tensor("a").unwrap().to_vec(),
        tree.tensor("a").unwrap().to_vec()
    );
    // Missing at apply.
    let e = Pair { fail: false }
        .apply(&Variables::new(), (), ())
        .unwrap_err();
    assert_eq!(
        e,
        Error::MissingVariable {
            path: "/inner".into(),
            collection: "params".into(),
            name: "pair".into()
        }
    );
    // The initializer's error names the module and both structures.
    let e = Pair { fail: true }.init(random::key(0), ()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("/inner"), "{msg}");
    assert!(msg.contains("cannot stack [\"a\"] with [\"b\"]"), "{msg}");
}

/// The key `make_rng("params")` gives at its scope.
struct KeyOf;

impl Module for KeyOf {
    type Input = ();
    type Output = random::Key;
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<random::Key> {
        s.make_rng("params")
    }
}
