//! Transforms over trees and functions against flax 0.12.8
//! (tools/oracle/generate_transforms.py): Flax's test_same_key (keys made
//! in scan steps and returned), test_scan_compact_count (`nn.scan` of a
//! function of the module), test_grad_simple (`nn.value_and_grad`), a scan
//! with a tree carry holding an int32 counter, a broadcast input and
//! `out_axes=1`, and a vmap over a tree input with a shared tensor whose
//! items return a tree with an int32 leaf. Bit for bit. Then the errors:
//! carries that change type, outputs that differ between items, leaves
//! that cannot be mapped.

mod common;

use std::collections::BTreeMap;

use common::{tensor_bits, F32Array};
use flaxen::core::{Error, Result, Scope, Variables};
use flaxen::nn::{self, module_fn, Dense, Module, Scan, VariableAxis, Vmap};
use flaxen::random;
use flaxen::tensor::{Array, Tensor, Tree};
use ndarray::{arr0, ArrayD, IxDyn};
use serde::Deserialize;

/// An oracle array: f32 values (`data`) or integers (`int`).
#[derive(Deserialize)]
struct Encoded {
    shape: Vec<usize>,
    #[serde(default)]
    data: Vec<f32>,
    #[serde(default)]
    int: Vec<i64>,
}

#[derive(Deserialize)]
struct Fixture {
    same_key: SameKey,
    scan_compact_count: CompactCount,
    grad_simple: GradSimpleCase,
    scan_cell: ScanCellCase,
    vmap_item: VmapItemCase,
}

#[derive(Deserialize)]
struct SameKey {
    keys: Vec<[u32; 2]>,
}

#[derive(Deserialize)]
struct CompactCount {
    variables: BTreeMap<String, F32Array>,
    apply_y: F32Array,
}

#[derive(Deserialize)]
struct GradSimpleCase {
    x: F32Array,
    y: F32Array,
    variables: BTreeMap<String, F32Array>,
    z: F32Array,
    x_grad: F32Array,
    y_grad: F32Array,
}

#[derive(Deserialize)]
struct ScanCellCase {
    xs: F32Array,
    ctx: F32Array,
    variables: BTreeMap<String, F32Array>,
    carry: BTreeMap<String, Encoded>,
    ys: BTreeMap<String, F32Array>,
}

#[derive(Deserialize)]
struct VmapItemCase {
    a: F32Array,
    b: F32Array,
    w: F32Array,
    variables: BTreeMap<String, F32Array>,
    y: BTreeMap<String, Encoded>,
}

fn fixture() -> Fixture {
    common::load_fixture("transforms.json")
}

fn assert_same(got: &Tensor, want: &F32Array, what: &str) {
    assert_eq!(got.shape(), want.shape.as_slice(), "{what}");
    assert_eq!(tensor_bits(got), want.bits(), "{what}");
}

fn assert_variables(got: &Variables, want: &BTreeMap<String, F32Array>) {
    let flat = got.flatten();
    let paths: Vec<String> = flat.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(flat.len(), want.len(), "{paths:?}");
    for (path, t) in flat {
        let w = want
            .get(&path)
            .unwrap_or_else(|| panic!("{path} not in {paths:?}"));
        assert_same(t, w, &path);
    }
}

fn assert_int(got: &Array, want: &Encoded, what: &str) {
    assert_eq!(got.shape(), want.shape.as_slice(), "{what}");
    let values: Vec<i64> = got
        .as_i32()
        .unwrap_or_else(|| panic!("{what} is not int32"))
        .iter()
        .map(|&v| v as i64)
        .collect();
    assert_eq!(values, want.int, "{what}");
}

/// Returns a key made from the `params` stream, per step.
struct Block;

impl Module for Block {
    type Input = ((), Array);
    type Output = ((), Array);
    fn call(&self, s: &Scope<'_>, (carry, _): ((), Array)) -> Result<((), Array)> {
        Ok((carry, Array::from(s.make_rng("params")?)))
    }
}

/// Flax's test_same_key: `nn.scan(Block)` over 10 steps returns the keys.
struct Transformer;

impl Module for Transformer {
    type Input = ();
    type Output = Array;
    fn call(&self, s: &Scope<'_>, (): ()) -> Result<Array> {
        let xs = Array::from(ArrayD::from_shape_vec(IxDyn(&[10]), (0..10).collect()).unwrap());
        let scan = Scan::new(Block)
            .variable_axes("params", 0)
            .split_rngs("params", true);
        let ((), keys) = s.call(scan, ((), xs))?;
        Ok(keys)
    }
}

#[test]
fn keys_made_in_scan_steps_are_returned() {
    let f = fixture().same_key;
    let (keys, _) = Transformer.init_with_output(random::key(1), ()).unwrap();
    assert_eq!(keys.shape(), [10]);
    assert_eq!(keys.dtype(), "key<fry>");
    let data: Vec<[u32; 2]> = keys.as_keys().unwrap().data().to_vec();
    assert_eq!(data, f.keys);
    // Every init gives the same keys.
    let (again, _) = Transformer.init_with_output(random::key(1), ()).unwrap();
    assert_eq!(again, keys);
}

/// Flax's test_scan_compact_count: a function of the module, scanned.
struct Foo;

impl Module for Foo {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let body = module_fn(|s: &Scope<'_>, (x, ()): (Tensor, ())| {
            let features = x.shape()[x.ndim() - 1];
            Ok((s.call(Dense::new(features), x)?, ()))
        });
        let scan = Scan::new(body)
            .length(5)
            .variable_axes("params", 0)
            .split_rngs("params", true);
        // Called with this module's own scope: the variables live at its
        // path (params/Dense_0), not under a child.
        let (x, ()) = scan.call(s, (x, ()))?;
        Ok(x)
    }
}

#[test]
fn scanned_functions_create_variables_at_the_modules_path() {
    let f = fixture().scan_compact_count;
    let x = Tensor::ones(&[3]);
    let v = Foo.init(random::key(0), x.clone()).unwrap();
    assert_variables(&v, &f.variables);
    assert_eq!(
        v.tensor("params/Dense_0/kernel").unwrap().shape(),
        [5, 3, 3]
    );
    assert_same(&Foo.apply(&v, x, ()).unwrap(), &f.apply_y, "apply");
}

/// Flax's LearnScale: sum(scale * x * y).
struct LearnScale;

impl Module for LearnScale {
    type Input = (Tensor, Tensor);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, y): (Tensor, Tensor)) -> Result<Tensor> {
        let p = s.param("scale", flaxen::init::ones(), &[])?;
        Ok(p.mul(&x)?.mul(&y)?.sum_all())
    }
}

/// Flax's test_value_and_grad_simple.
struct GradSimple;

impl Module for GradSimple {
    type Input = (Tensor, Tensor);
    type Output = (Tensor, Tree);
    fn call(&self, s: &Scope<'_>, (x, y): (Tensor, Tensor)) -> Result<(Tensor, Tree)> {
        let primals = Tree::new().with("x", x).with("y", y);
        nn::value_and_grad(
            s,
            |s, p| s.call(LearnScale, (p.tensor("x")?.clone(), p.tensor("y")?.clone())),
            &primals,
        )
    }
}

#[test]
fn lifted_value_and_grad_of_a_function() {
    let f = fixture().grad_simple;
    let x = Tensor::from_array(random::uniform(random::key(1), &[4]).unwrap());
    let y = Tensor::from_array(random::uniform(random::key(2), &[4]).unwrap());
    assert_same(&x, &f.x, "x");
    assert_same(&y, &f.y, "y");
    let v = GradSimple
        .init(random::key(0), (x.clone(), y.clone()))
        .unwrap();
    assert_variables(&v, &f.variables);
    let (z, g) = GradSimple.apply(&v, (x, y), ()).unwrap();
    assert_same(&z, &f.z, "z");
    assert_same(g.tensor("x").unwrap(), &f.x_grad, "x_grad");
    assert_same(g.tensor("y").unwrap(), &f.y_grad, "y_grad");
    // nn::grad gives the same gradients.
    struct GradOnly;
    impl Module for GradOnly {
        type Input = (Tensor, Tensor);
        type Output = Tree;
        fn call(&self, s: &Scope<'_>, (x, y): (Tensor, Tensor)) -> Result<Tree> {
            let primals = Tree::new().with("x", x).with("y", y);
            nn::grad(
                s,
                |s, p| s.call(LearnScale, (p.tensor("x")?.clone(), p.tensor("y")?.clone())),
                &primals,
            )
        }
    }
    let x = f.x.tensor();
    let g2 = GradOnly.apply(&v, (x.clone(), f.y.tensor()), ()).unwrap();
    assert_eq!(g2, g);
}

/// A scan step with a tree carry {count: int32, h}, a scanned input and a
/// broadcast one, returning a tree.
struct Cell;

impl Module for Cell {
    type Input = (Tree, (Tensor, Tensor));
    type Output = (Tree, Tree);
    fn call(&self, s: &Scope<'_>, (carry, (x, ctx)): Self::Input) -> Result<(Tree, Tree)> {
        let count = carry.array("count")?.as_i32().expect("int32")[[]];
        let h = carry.tensor("h")?;
        let input = Tensor::concatenate(&[h.clone(), x, ctx], -1)?;
        let h = s.call(Dense::new(3), input)?.tanh();
        let y = Tree::new()
            .with("h", h.clone())
            .with("scaled", h.mul(&Tensor::scalar(count as f32))?);
        let carry = Tree::new()
            .with("count", Array::from(arr0(count + 1).into_dyn()))
            .with("h", h);
        Ok((carry, y))
    }
}

struct ScanCell;

impl Module for ScanCell {
    type Input = (Tree, Tensor, Tensor);
    type Output = (Tree, Tree);
    fn call(&self, s: &Scope<'_>, (carry, xs, ctx): Self::Input) -> Result<(Tree, Tree)> {
        let scan = Scan::new(Cell)
            .variable_axes("params", VariableAxis::Broadcast)
            .split_rngs("params", false)
            .in_axes((Some(0), None))
            .out_axes(1);
        s.call(scan, (carry, (xs, ctx)))
    }
}

#[test]
fn scan_with_a_tree_carry_broadcast_input_and_out_axes() {
    let f = fixture().scan_cell;
    let carry = Tree::new()
        .with("count", Array::from(arr0(1i32).into_dyn()))
        .with("h", Tensor::zeros(&[2, 3]));
    let ((c, ys), v) = ScanCell
        .init_with_output(random::key(0), (carry, f.xs.tensor(), f.ctx.tensor()))
        .unwrap();
    assert_variables(&v, &f.variables);
    assert_int(c.array("count").unwrap(), &f.carry["count"], "count");
    // The values, bit for bit: Flax's scan compiles the step, but XLA runs
    // it as the eager operations (the concatenation written row-major, the
    // `(2, 9) @ (9, 3)` product in YNNPACK's order, then the bias and tanh).
    let bits = |t: &Tensor| -> Vec<u32> { t.to_vec().iter().map(|v| v.to_bits()).collect() };
    let want_bits = |w: &[f32]| -> Vec<u32> { w.iter().map(|v| v.to_bits()).collect() };
    assert_eq!(bits(c.tensor("h").unwrap()), want_bits(&f.carry["h"].data));
    for (k, want) in &f.ys {
        let got = ys.tensor(k).unwrap();
        assert_eq!(got.shape(), want.shape.as_slice(), "{k}");
        assert_eq!(bits(got), want_bits(&want.data), "{k}");
    }
    assert_eq!(ys.tensor("h").unwrap().shape(), [2, 4, 3]);
}

/// An item: a tree {a, b} and a shared tensor w; returns {y, arg}.
struct Item;

impl Module for Item {
    type Input = (Tree, Tensor);
    type Output = Tree;
    fn call(&self, s: &Scope<'_>, (x, w): (Tree, Tensor)) -> Result<Tree> {
        let h = x.tensor("a")?.mul(&w)?.add(x.tensor("b")?)?;
        let y = s.call(Dense::new(2), h)?;
        let arg = Array::from(y.argmax(0)?);
        Ok(Tree::new().with("y", y).with("arg", arg))
    }
}

#[test]
fn vmap_over_a_tree_with_a_shared_tensor_returning_int_leaves() {
    let f = fixture().vmap_item;
    let x = Tree::new().with("a", f.a.tensor()).with("b", f.b.tensor());
    /// Flax's `nn.vmap(Item, in_axes=(0, None), variable_axes={'params':
    /// None}, split_rngs={'params': False})()(x, w)` in a compact module.
    struct Outer;
    impl Module for Outer {
        type Input = (Tree, Tensor);
        type Output = Tree;
        fn call(&self, s: &Scope<'_>, input: (Tree, Tensor)) -> Result<Tree> {
            let m = Vmap::new(Item)
                .in_axes((Some(0), None))
                .variable_axes("params", None)
                .split_rngs("params", false);
            s.call(m, input)
        }
    }
    let (y, v) = Outer
        .init_with_output(random::key(0), (x, f.w.tensor()))
        .unwrap();
    assert_variables(&v, &f.variables);
    let want_y = &f.y["y"];
    let want_y = F32Array {
        shape: want_y.shape.clone(),
        data: want_y.data.clone(),
    };
    assert_same(y.tensor("y").unwrap(), &want_y, "y");
    assert_int(y.array("arg").unwrap(), &f.y["arg"], "arg");
}

/// Returns a carry of another shape, dtype or structure, as told.
struct Changing(&'static str);

impl Module for Changing {
    type Input = ((Tensor, Array), Tensor);
    type Output = ((Tensor, Array), ());
    fn call(&self, _: &Scope<'_>, ((h, n), x): Self::Input) -> Result<Self::Output> {
        Ok(match self.0 {
            "shape" => ((Tensor::concatenate(&[h, x], 0)?, n), ()),
            "dtype" => ((h, Array::from(arr0(1u32).into_dyn())), ()),
            _ => ((h.add(&x)?, n), ()),
        })
    }
}

#[test]
fn a_carry_that_changes_type_is_an_error() {
    let carry = (Tensor::zeros(&[3]), Array::from(arr0(0i32).into_dyn()));
    let xs = Tensor::ones(&[4, 3]);
    let (c, ()) = Scan::new(Changing(""))
        .apply(&Variables::default(), (carry.clone(), xs.clone()), ())
        .unwrap();
    assert_eq!(c.0.to_vec(), [4.0; 3]);
    let message = |e: Error| match e {
        Error::Lift {
            transform: "scan",
            message,
            ..
        } => message,
        other => panic!("{other:?}"),
    };
    let e = Scan::new(Changing("shape"))
        .apply(&Variables::default(), (carry.clone(), xs.clone()), ())
        .unwrap_err();
    assert_eq!(
        message(e),
        "scan body function carry input and carry output must have equal types, but they \
         differ: the input carry component carry[0] has type float32[3] but the corresponding \
         output carry component has type float32[6], so the shapes do not match"
    );
    let e = Scan::new(Changing("dtype"))
        .apply(&Variables::default(), (carry, xs), ())
        .unwrap_err();
    assert!(message(e).contains(
        "the input carry component carry[1] has type int32[] but the corresponding output \
             carry component has type uint32[], so the dtypes do not match"
    ));
}

/// Returns a list whose length depends on the item.
struct Ragged;

impl Module for Ragged {
    type Input = Tensor;
    type Output = Vec<Tensor>;
    fn call(&self, _: &Scope<'_>, x: Tensor) -> Result<Vec<Tensor>> {
        let n = x.to_vec()[0] as usize;
        Ok(vec![x; n + 1])
    }
}

/// Returns a map whose keys depend on the item.
struct Keyed;

impl Module for Keyed {
    type Input = Tensor;
    type Output = BTreeMap<String, Tensor>;
    fn call(&self, _: &Scope<'_>, x: Tensor) -> Result<BTreeMap<String, Tensor>> {
        let k = format!("k{}", x.to_vec()[0]);
        Ok(BTreeMap::from([(k, x)]))
    }
}

#[test]
fn outputs_whose_structure_differs_between_items_are_errors() {
    let x = Tensor::from_vec(vec![0.0, 1.0], &[2]).unwrap();
    let e = Vmap::new(Ragged)
        .apply(&Variables::default(), x.clone(), ())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("the items' outputs differ: item 0 returns a list of 1, item 1 one of 2"),
        "{e}"
    );
    let e = Vmap::new(Keyed)
        .apply(&Variables::default(), x, ())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(r#"item 0 returns the keys ["k0"], item 1 ["k1"]"#),
        "{e}"
    );
}

/// Sums a list of tensors and a map of tensors.
struct Nested;

impl Module for Nested {
    type Input = (Vec<Tensor>, BTreeMap<String, Tensor>);
    type Output = Tensor;
    fn call(&self, _: &Scope<'_>, (v, m): Self::Input) -> Result<Tensor> {
        let mut acc = v[0].clone();
        for t in v.iter().skip(1).chain(m.values()) {
            acc = acc.add(t)?;
        }
        Ok(acc)
    }
}

#[test]
fn vecs_and_maps_are_mapped_leaf_by_leaf() {
    let v = vec![Tensor::ones(&[3, 2]), Tensor::ones(&[3, 2])];
    let m = BTreeMap::from([("a".to_string(), Tensor::ones(&[3, 2]))]);
    let y = Vmap::new(Nested)
        .apply(&Variables::default(), (v.clone(), m.clone()), ())
        .unwrap();
    assert_eq!(y.to_vec(), [3.0; 6]);
    // A scalar leaf with in_axes 0: the error names its path.
    let bad = BTreeMap::from([("a".to_string(), Tensor::scalar(1.0))]);
    let e = Vmap::new(Nested)
        .apply(&Variables::default(), (v, bad), ())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("in_axes 0 is out of range for the input[1]['a'] of shape []"),
        "{e}"
    );
    // A key array of rank 0 cannot be scanned over.
    let keys = Array::from(random::key(0));
    let e = Scan::new(module_fn(|_: &Scope<'_>, (c, _k): ((), Array)| Ok((c, ()))))
        .apply(&Variables::default(), ((), keys), ())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("xs of shape [] has no axis 0 to scan over"),
        "{e}"
    );
}

#[derive(Deserialize)]
struct CondFixture {
    cond: CondCase,
    switch: SwitchCase,
}

#[derive(Deserialize)]
struct CondCase {
    variables: BTreeMap<String, Encoded>,
    init_y: F32Array,
    apply_false_y: F32Array,
    apply_false_state: BTreeMap<String, Encoded>,
}

#[derive(Deserialize)]
struct SwitchCase {
    variables: BTreeMap<String, Encoded>,
    init_y: F32Array,
    apply_1_y: F32Array,
    apply_1_state: BTreeMap<String, Encoded>,
    apply_7_y: F32Array,
    apply_7_state: BTreeMap<String, Encoded>,
}

/// Compares variables holding tensors and int32 arrays with the oracle's.
fn assert_any_variables(got: &Variables, want: &BTreeMap<String, Encoded>) {
    for (path, w) in want {
        if w.int.is_empty() && !w.data.is_empty() {
            let t = got.tensor(path).unwrap_or_else(|| panic!("{path}"));
            let w = F32Array {
                shape: w.shape.clone(),
                data: w.data.clone(),
            };
            assert_same(t, &w, path);
        } else {
            assert_int(got.array(path).unwrap_or_else(|| panic!("{path}")), w, path);
        }
    }
    let count: usize = got.iter().map(|(_, t)| t.leaf_paths().len()).sum();
    assert_eq!(count, want.len());
}

/// `count += 1` for the int32 counter `state/{name}`.
fn bump(s: &Scope<'_>, name: &str) -> Result<()> {
    let v = s.variable("state", name, || Ok(Array::from(arr0(0i32).into_dyn())))?;
    let next = v.value().as_i32().expect("int32").map(|c| c + 1);
    v.set(Array::from(next))
}

/// Flax's test_cond.
struct CondFoo;

impl Module for CondFoo {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, pred): (Tensor, bool)) -> Result<Tensor> {
        for name in ["true_count", "false_count"] {
            s.variable("state", name, || Ok(Array::from(arr0(0i32).into_dyn())))?;
        }
        nn::cond(
            s,
            pred,
            |s, x: Tensor| {
                bump(s, "true_count")?;
                s.call_named("dense", Dense::new(2), x)
            },
            |s, x: Tensor| {
                bump(s, "false_count")?;
                Ok(s.call_named("dense", Dense::new(2), x)?.neg())
            },
            x,
        )
    }
}

/// Flax's test_switch.
struct SwitchFoo;

impl Module for SwitchFoo {
    type Input = (Tensor, i64);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, index): (Tensor, i64)) -> Result<Tensor> {
        for name in ["a_count", "b_count", "c_count"] {
            s.variable("state", name, || Ok(Array::from(arr0(0i32).into_dyn())))?;
        }
        let a = |s: &Scope<'_>, x: Tensor| {
            bump(s, "a_count")?;
            s.call_named("dense", Dense::new(2), x)
        };
        let b = |s: &Scope<'_>, x: Tensor| {
            bump(s, "b_count")?;
            Ok(s.call_named("dense", Dense::new(2), x)?.neg())
        };
        let c = |s: &Scope<'_>, x: Tensor| {
            bump(s, "c_count")?;
            s.call_named("dense", Dense::new(2), x)
        };
        nn::switch(s, index, &[&a, &b, &c], x)
    }
}

#[test]
fn cond_as_flax_test_cond() {
    let f: CondFixture = common::load_fixture("transforms.json");
    let f = f.cond;
    let x = Tensor::ones(&[1, 3]);
    let (y1, v) = CondFoo
        .init_with_output(random::key(0), (x.clone(), true))
        .unwrap();
    assert_any_variables(&v, &f.variables);
    assert_same(&y1, &f.init_y, "init y");
    let (y2, upd) = CondFoo.apply_mut(&v, (x, false), (), ["state"]).unwrap();
    assert_same(&y2, &f.apply_false_y, "apply y");
    assert_any_variables(&upd, &f.apply_false_state);
}

#[test]
fn switch_as_flax_test_switch() {
    let f: CondFixture = common::load_fixture("transforms.json");
    let f = f.switch;
    let x = Tensor::ones(&[1, 3]);
    let (y1, v) = SwitchFoo
        .init_with_output(random::key(0), (x.clone(), 0))
        .unwrap();
    assert_any_variables(&v, &f.variables);
    assert_same(&y1, &f.init_y, "init y");
    let (y2, upd) = SwitchFoo
        .apply_mut(&v, (x.clone(), 1), (), ["state"])
        .unwrap();
    assert_same(&y2, &f.apply_1_y, "apply 1");
    assert_any_variables(&upd, &f.apply_1_state);
    // lax.switch clamps the index.
    let (y3, upd) = SwitchFoo.apply_mut(&v, (x, 7), (), ["state"]).unwrap();
    assert_same(&y3, &f.apply_7_y, "apply 7");
    assert_any_variables(&upd, &f.apply_7_state);
}

/// A submodule in one branch only (Flax: "cond branch outputs must have
/// the same pytree structure").
struct OneSided;

impl Module for OneSided {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, pred): (Tensor, bool)) -> Result<Tensor> {
        nn::cond(
            s,
            pred,
            |s, x: Tensor| s.call_named("dense", Dense::new(3), x),
            |_, x: Tensor| Ok(x),
            x,
        )
    }
}

#[test]
fn branches_of_different_structure_are_errors() {
    let x = Tensor::ones(&[1, 3]);
    let e = OneSided
        .init(random::key(0), (x.clone(), true))
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(
            "branches 0 and 1 must return the same types and leave variables of the same structure"
        ),
        "{msg}"
    );
    // Outputs of different shapes.
    let e = flaxen::core::init(random::key(0), |s| {
        nn::cond(
            s,
            false,
            |_, x: Tensor| Ok(x),
            |_, x: Tensor| Ok(Tensor::concatenate(&[x.clone(), x], 0)?),
            x.clone(),
        )
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("output is float32[2,3] in branch 0 but output is float32[1,3] in branch 1"),
        "{e}"
    );
    // No branch at all.
    let e = flaxen::core::init(random::key(0), |s| {
        nn::switch::<Tensor, Tensor>(s, 0, &[], x.clone())
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("switch needs at least one branch"),
        "{e}"
    );
}

#[derive(Deserialize)]
struct WhileFixture {
    while_loop: WhileCase,
}

#[derive(Deserialize)]
struct WhileCase {
    acc: i32,
    inc: i32,
    rng_params: Vec<[u32; 2]>,
    rng_loop: Vec<[u32; 2]>,
}

/// Flax's test_while_loop: two iterations, each writing its `params` key
/// (not split: the same in both) and its `loop` key (split: different).
struct WhileFoo;

impl Module for WhileFoo {
    type Input = i32;
    type Output = ();
    fn call(&self, s: &Scope<'_>, x: i32) -> Result<()> {
        let int = |v: i32| Array::from(arr0(v).into_dyn());
        let key_zero = || {
            let k = random::key_data(&random::key(0));
            Array::from(random::KeyArray::from_data(
                vec![k, k],
                random::ThreefryMode::default(),
            ))
        };
        // Flax's `self.param('inc', lambda _: 1)` draws a `params` key for
        // its initializer (which ignores it): the stream's counter moves.
        s.variable("params", "inc", || {
            s.make_rng("params")?;
            Ok(int(1))
        })?;
        s.put_variable("state", "acc", int(0))?;
        s.put_variable("state", "rng_params", key_zero())?;
        s.put_variable("state", "rng_loop", key_zero())?;
        let acc = |s: &Scope<'_>| -> i32 {
            s.get_value::<Array>("state", "acc")
                .unwrap()
                .as_i32()
                .unwrap()[[]]
        };
        let set_key = |s: &Scope<'_>, name: &str, i: usize, key: random::Key| -> Result<()> {
            let keys = s
                .get_value::<Array>("state", name)
                .unwrap()
                .as_keys()
                .unwrap();
            let mut data = keys.data().to_vec();
            data[i] = random::key_data(&key);
            s.put_variable(
                "state",
                name,
                Array::from(random::KeyArray::from_data(data, keys.mode())),
            )
        };
        let config = flaxen::core::lift::WhileConfig {
            carry_variables: "state".into(),
            split_rngs: vec![("params".into(), false), ("loop".into(), true)],
            ..Default::default()
        };
        nn::while_loop(
            s,
            |s, _: &()| Ok(acc(s) < x),
            |s, c: ()| {
                let i = acc(s);
                let p = s.make_rng("params")?;
                let l = s.make_rng("loop")?;
                set_key(s, "rng_params", i as usize, p)?;
                set_key(s, "rng_loop", i as usize, l)?;
                let inc = s
                    .get_value::<Array>("params", "inc")
                    .unwrap()
                    .as_i32()
                    .unwrap()[[]];
                s.put_variable("state", "acc", int(i + inc))?;
                Ok(c)
            },
            (),
            &config,
        )
    }
}

#[test]
fn while_loop_as_flax_test_while_loop() {
    let f: WhileFixture = common::load_fixture("transforms.json");
    let f = f.while_loop;
    let rngs = flaxen::core::Rngs::none()
        .with("params", random::key(1))
        .with("loop", random::key(2));
    let ((), v) = WhileFoo
        .apply_mut(&Variables::default(), 2, rngs, true)
        .unwrap();
    let int = |p: &str| v.array(p).unwrap().as_i32().unwrap()[[]];
    assert_eq!(int("state/acc"), f.acc);
    assert_eq!(int("params/inc"), f.inc);
    let keys = |p: &str| v.array(p).unwrap().as_keys().unwrap().data().to_vec();
    assert_eq!(keys("state/rng_params"), f.rng_params);
    assert_eq!(keys("state/rng_loop"), f.rng_loop);
}

/// A body that creates a carried variable, or changes the carry's shape.
struct BadLoop(&'static str);

impl Module for BadLoop {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        s.put_variable("state", "n", Array::from(arr0(0i32).into_dyn()))?;
        s.put_variable("stats", "m", Array::from(arr0(1i32).into_dyn()))?;
        let config = flaxen::core::lift::WhileConfig {
            carry_variables: "state".into(),
            ..Default::default()
        };
        let mode = self.0;
        nn::while_loop(
            s,
            |s, _: &Tensor| {
                Ok(s.get_value::<Array>("state", "n")
                    .unwrap()
                    .as_i32()
                    .unwrap()[[]]
                    < 3)
            },
            move |s, x: Tensor| {
                let n = s
                    .get_value::<Array>("state", "n")
                    .unwrap()
                    .as_i32()
                    .unwrap()[[]];
                s.put_variable("state", "n", Array::from(arr0(n + 1).into_dyn()))?;
                match mode {
                    "create" => {
                        s.put_variable("state", "new", Array::from(arr0(1i32).into_dyn()))?;
                        Ok(x)
                    }
                    "shape" => Ok(Tensor::concatenate(&[x.clone(), x], 0)?),
                    "broadcast" => {
                        s.put_variable("stats", "m", Array::from(arr0(2i32).into_dyn()))?;
                        Ok(x)
                    }
                    _ => Ok(x),
                }
            },
            x,
            &config,
        )
    }
}

#[test]
fn while_loop_errors() {
    let x = Tensor::ones(&[2]);
    let run = |mode| {
        BadLoop(mode)
            .apply_mut(&Variables::default(), x.clone(), (), true)
            .map(|(y, _)| y)
    };
    assert!(run("").is_ok());
    let e = run("create").unwrap_err().to_string();
    assert!(
        e.contains(
            "the body of a while_loop changed the carried variables: variables['state']['new']"
        ),
        "{e}"
    );
    // Broadcast collections are read-only inside.
    let e = run("broadcast").unwrap_err();
    assert!(matches!(e, Error::ImmutableCollection { .. }), "{e:?}");
    let e = run("shape").unwrap_err().to_string();
    assert!(
        e.contains(
            "while_loop body function carry input and carry output must have equal types, but \
             they differ: the input carry carry has type float32[2] but the \
             corresponding output carry component has type float32[4], so the shapes do not \
             match"
        ),
        "{e}"
    );
}
