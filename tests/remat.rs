//! `nn::Remat` against flax 0.12.8's `nn.remat` (tools/oracle/generate_remat.py):
//! variable names and values, outputs with the dropout masks drawn inside,
//! and gradients, bit for bit; and against the same modules without remat.

use flaxen::core::{grad, Result, Scope, Variables};
use flaxen::nn::{Dense, Dropout, Module, Remat, Scan};
use flaxen::random;
use flaxen::tensor::{Tensor, Tree};
use serde_json::Value;

mod common;
use common::{json_shape as shape, json_tensor as tensor, json_u32s as u32s, tensor_bits as bits};

fn fixture() -> Value {
    common::load_fixture("remat.json")
}

fn check_tree(tree: &Tree, want: &Value, what: &str) {
    let want = want.as_object().unwrap();
    let paths = tree.paths();
    assert_eq!(paths.len(), want.len(), "{what}: leaves");
    for (path, t) in paths {
        let w = &want[&path];
        assert_eq!(t.shape(), &shape(&w["shape"])[..], "{what} {path}");
        assert_eq!(bits(t), u32s(&w["bits"]), "{what} {path}");
    }
}

#[derive(Clone)]
struct Block;

impl Module for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(6), x)?.relu();
        let h = s.call(Dropout::new(0.5), h)?;
        s.call(Dense::new(3), h)
    }
}

/// `nn.remat(Block)` twice, or plain `Block` twice (`remat = false`).
struct Outer {
    remat: bool,
}

impl Module for Outer {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Outer"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        if self.remat {
            let y = s.call(Remat::new(Block), x)?;
            s.call(Remat::new(Block), y)
        } else {
            let y = s.call(Block, x)?;
            s.call(Block, y)
        }
    }
}

#[derive(Clone)]
struct Cell;

impl Module for Cell {
    type Input = (Tensor, ());
    type Output = (Tensor, ());
    fn call(&self, s: &Scope<'_>, (c, _): (Tensor, ())) -> Result<(Tensor, ())> {
        let h = s.call(Dense::new(5), c.clone())?.tanh();
        let h = s.call(Dropout::new(0.25), h)?;
        Ok((c.add(&h)?, ()))
    }
}

struct ScanRemat;

impl Module for ScanRemat {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "ScanRemat"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let scan = Scan::new(Remat::new(Cell))
            .variable_axes("params", 0)
            .split_rngs("params", true)
            .split_rngs("dropout", true)
            .length(4);
        Ok(s.call(scan, (x, ()))?.0)
    }
}

/// Flax's test_remat_static_argnums: `train` is a plain `bool` inside.
#[derive(Clone)]
struct Foo;

impl Module for Foo {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<Tensor> {
        let y = s.call(Dense::new(3).use_bias(false), x)?;
        Ok(if train { &y * 2.0 } else { y })
    }
}

struct StaticArg;

impl Module for StaticArg {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "StaticArg"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let a = s.call(Remat::new(Foo), (x.clone(), true))?;
        let b = s.call(Remat::new(Foo), (x, false))?;
        Ok(a.add(&b)?)
    }
}

/// Init, apply and the gradients of `sum(out * w)`, checked against the
/// fixture case `name`.
fn check<M: Module<Input = Tensor, Output = Tensor>>(module: &M, name: &str) {
    let f = fixture();
    let c = f["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap();
    let x = tensor(&c["x"], &shape(&c["x_shape"]));
    let w = tensor(&c["w"], &shape(&c["y_shape"]));
    let rngs = || {
        flaxen::core::Rngs::none()
            .with("params", random::key(0))
            .with("dropout", random::key(1))
    };
    let v = module.init(rngs(), x.clone()).unwrap();
    check_tree(&v.params(), &c["params"], &format!("{name} params"));
    let drop = || flaxen::core::Rngs::none().with("dropout", random::key(2));
    let y = module.apply(&v, x.clone(), drop()).unwrap();
    assert_eq!(bits(&y), u32s(&c["y"]), "{name} output");
    let params = Tree::new()
        .with("p", v.params())
        .with("x", Tree::from(x.clone()));
    let g = grad(
        |t: &Tree| {
            let p = t.subtree("p").unwrap();
            let x = t.tensor("x")?;
            let out = module.apply(&Variables::new().with("params", p), x.clone(), drop())?;
            Ok((&out * &w).sum_all())
        },
        &params,
    )
    .unwrap();
    check_tree(
        &g.subtree("p").unwrap(),
        &c["grad_params"],
        &format!("{name} grads"),
    );
    assert_eq!(
        bits(g.tensor("x").unwrap()),
        u32s(&c["grad_x"]),
        "{name} grad x"
    );
}

#[test]
fn remat_matches_flax() {
    check(&Outer { remat: true }, "outer");
}

#[test]
fn scan_of_remat_matches_flax() {
    check(&ScanRemat, "scan");
}

#[test]
fn static_arguments_pass_through() {
    check(&StaticArg, "static");
}

/// Two residual Dense blocks, remat'ed or not, no randomness.
#[derive(Clone)]
struct Residual;

impl Module for Residual {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(5), x.clone())?.relu();
        Ok(x.add(&s.call(Dense::new(5), h)?)?)
    }
}

struct Deep {
    remat: bool,
}

impl Module for Deep {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Deep"
    }
    fn call(&self, s: &Scope<'_>, mut x: Tensor) -> Result<Tensor> {
        for i in 0..3 {
            x = if self.remat {
                s.call_named(&format!("block{i}"), Remat::new(Residual), x)?
            } else {
                s.call_named(&format!("block{i}"), Residual, x)?
            };
        }
        Ok(x)
    }
}

#[test]
fn remat_computes_what_the_module_computes() {
    let x = Tensor::from_vec((0..20).map(|i| (i as f32 * 0.37).sin()).collect(), &[4, 5]).unwrap();
    let v = Deep { remat: true }
        .init(random::key(0), x.clone())
        .unwrap();
    let plain_v = Deep { remat: false }
        .init(random::key(0), x.clone())
        .unwrap();
    assert_eq!(v, plain_v.sorted(), "same variables under the same names");
    let loss = |remat: bool| {
        let x = x.clone();
        move |p: &Tree| -> Result<Tensor> {
            let v = Variables::new().with("params", p.clone());
            Ok(Deep { remat }.apply(&v, x.clone(), ())?.square().sum_all())
        }
    };
    let (g_remat, g_plain) = (
        grad(loss(true), &v.params()).unwrap(),
        grad(loss(false), &v.params()).unwrap(),
    );
    for ((pa, a), (pb, b)) in g_remat.paths().iter().zip(g_plain.paths()) {
        assert_eq!(pa, &pb);
        assert_eq!(bits(a), bits(b), "{pa}");
    }
}
