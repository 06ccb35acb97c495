//! The Flax randomness guide's numbers, produced through the module API:
//! `make_rng` in root and nested modules, `param`/`variable`, and the sharp
//! edge with and without Flax's separator flag.

#[allow(dead_code)]
#[path = "../examples/guide_param_variable.rs"]
mod param_variable;

#[allow(dead_code)]
#[path = "../examples/guide_sharp_edge.rs"]
mod sharp_edge;

use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::Module;
use flaxen::random::{self, Key};
use flaxen::tensor::Tensor;

/// A module that draws `n` keys from `stream`.
struct Draw {
    stream: &'static str,
    n: usize,
    type_name: &'static str,
}

impl Module for Draw {
    type Input = ();
    type Output = Vec<(String, Key)>;
    fn type_name(&self) -> &'static str {
        self.type_name
    }
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<Vec<(String, Key)>> {
        (0..self.n)
            .map(|_| Ok((s.path_text(), s.make_rng(self.stream)?)))
            .collect()
    }
}

fn words(keys: &[(String, Key)]) -> Vec<[u32; 2]> {
    keys.iter().map(|(_, k)| k.data()).collect()
}

fn leaf(type_name: &'static str, n: usize) -> Draw {
    Draw {
        stream: "rng_stream",
        n,
        type_name,
    }
}

#[test]
fn root_module_keys() {
    let m = leaf("RNGModule", 3);
    let keys = m
        .init_with_output([("rng_stream", random::key(0))], ())
        .unwrap()
        .0;
    assert_eq!(
        words(&keys),
        [
            [1428664606, 3351135085],
            [3456700291, 3873160899],
            [2411773124, 4124888837]
        ]
    );
    assert_eq!(
        keys[0].1.to_string(),
        "Array((), dtype=key<fry>) overlaying:\n[1428664606 3351135085]"
    );
    let keys = m
        .init_with_output([("rng_stream", random::key(1))], ())
        .unwrap()
        .0;
    assert_eq!(
        words(&keys),
        [
            [3077990774, 2166202870],
            [3825832496, 2886313970],
            [791337683, 1373966058]
        ]
    );
}

struct TwoStreams;

impl Module for TwoStreams {
    type Input = ();
    type Output = Vec<[u32; 2]>;
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<Vec<[u32; 2]>> {
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(s.make_rng("rng_stream1")?.data());
            out.push(s.make_rng("rng_stream2")?.data());
        }
        Ok(out)
    }
}

#[test]
fn two_streams_do_not_interfere() {
    let out = TwoStreams
        .init_with_output(
            [
                ("rng_stream1", random::key(0)),
                ("rng_stream2", random::key(1)),
            ],
            (),
        )
        .unwrap()
        .0;
    assert_eq!(
        out,
        [
            [1428664606, 3351135085],
            [3077990774, 2166202870],
            [3456700291, 3873160899],
            [3825832496, 2886313970],
            [2411773124, 4124888837],
            [791337683, 1373966058]
        ]
    );
    let same = TwoStreams
        .init_with_output(
            [
                ("rng_stream1", random::key(0)),
                ("rng_stream2", random::key(0)),
            ],
            (),
        )
        .unwrap()
        .0;
    assert!(same.chunks(2).all(|p| p[0] == p[1]));
}

struct SubSub;
impl Module for SubSub {
    type Input = ();
    type Output = Vec<(String, [u32; 2])>;
    fn type_name(&self) -> &'static str {
        "RNGSubSubModule"
    }
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<Vec<(String, [u32; 2])>> {
        (0..2)
            .map(|_| Ok((s.path_text(), s.make_rng("rng_stream")?.data())))
            .collect()
    }
}

struct Sub {
    nested: bool,
}
impl Module for Sub {
    type Input = ();
    type Output = Vec<(String, [u32; 2])>;
    fn type_name(&self) -> &'static str {
        "RNGSubModule"
    }
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<Vec<(String, [u32; 2])>> {
        let mut out: Vec<(String, [u32; 2])> = (0..2)
            .map(|_| Ok((s.path_text(), s.make_rng("rng_stream")?.data())))
            .collect::<Result<_>>()?;
        if self.nested {
            out.extend(s.call(SubSub, ())?);
        }
        Ok(out)
    }
}

struct Root {
    subs: Vec<bool>,
}
impl Module for Root {
    type Input = ();
    type Output = Vec<(String, [u32; 2])>;
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<Vec<(String, [u32; 2])>> {
        let mut out: Vec<(String, [u32; 2])> = (0..2)
            .map(|_| Ok((s.path_text(), s.make_rng("rng_stream")?.data())))
            .collect::<Result<_>>()?;
        for &nested in &self.subs {
            out.extend(s.call(Sub { nested }, ())?);
        }
        Ok(out)
    }
}

#[test]
fn sub_module_keys_and_auto_names() {
    let out = Root { subs: vec![true] }
        .init_with_output([("rng_stream", random::key(0))], ())
        .unwrap()
        .0;
    let expect: Vec<(String, [u32; 2])> = vec![
        ("/".into(), [1428664606, 3351135085]),
        ("/".into(), [3456700291, 3873160899]),
        ("/RNGSubModule_0".into(), [3858825717, 2323087578]),
        ("/RNGSubModule_0".into(), [601859108, 3782857444]),
        (
            "/RNGSubModule_0/RNGSubSubModule_0".into(),
            [234240654, 1028548813],
        ),
        (
            "/RNGSubModule_0/RNGSubSubModule_0".into(),
            [3650462303, 2124609379],
        ),
    ];
    assert_eq!(out, expect);
    let out = Root {
        subs: vec![false, false],
    }
    .init_with_output([("rng_stream", random::key(0))], ())
    .unwrap()
    .0;
    assert_eq!(
        out[4..],
        [
            ("/RNGSubModule_1".to_string(), [426957352, 2006350344]),
            ("/RNGSubModule_1".to_string(), [4006253729, 4205356731])
        ]
    );
}

#[test]
fn param_and_variable_arrays() {
    let variables = param_variable::Model
        .init(
            Rngs::from([("params", random::key(0)), ("other", random::key(1))]),
            Tensor::ones(&[2, 2]),
        )
        .unwrap();
    let printed: Vec<String> = [
        "params/Dense_0/kernel",
        "params/model_param",
        "other_collection/model_variable1",
        "other_collection/model_variable2",
        "params/Dense_1/kernel",
        "params/Dense_1/bias",
    ]
    .iter()
    .map(|p| variables.tensor(p).unwrap().to_string())
    .collect();
    assert_eq!(
        printed,
        [
            "[[-1.6185919   0.700908  ]\n [-1.3146383  -0.79342234]]",
            "[[ 0.0761425 -1.6157459]\n [-1.6857724  0.7126891]]",
            "[[ 0.60175574  0.2553228 ]\n [ 0.27367848 -2.1975214 ]]",
            "[[1.6249592  0.30813068]\n [1.6613585  1.0404155 ]]",
            "[[ 0.0030665   0.29551846]\n [ 0.16670242 -0.78252524]]",
            "[1.582462   0.15216611]",
        ]
    );
}

#[test]
fn sharp_edge_and_the_separator() {
    let rngs = || Rngs::none().with("rng", random::key(33));
    let (a, b) = sharp_edge::Model
        .apply(&Variables::new(), 0, rngs())
        .unwrap();
    assert_eq!(a, b, "without the separator the two leaves collide");
    let (a, b) = sharp_edge::Model
        .apply(&Variables::new(), 0, rngs().fix_separator(true))
        .unwrap();
    assert_ne!(a, b, "with the separator they differ");
}
