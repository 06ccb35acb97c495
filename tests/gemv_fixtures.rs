//! Matrix-vector products in XLA:CPU's order (tools/oracle/generate_gemv.py,
//! jax 0.10.2): `[m, k] @ [k, 1]` (row-major GEMV), vector dots, and a
//! Flax `Dense(1)` head with its gradients — bit for bit.

use flaxen::core::Variables;
use flaxen::nn::{Dense, Module};
use flaxen::random;
use flaxen::tensor::{grad, Tensor, Tree};
use serde_json::Value;

mod common;
use common::{json_u32s as u32s, tensor_bits as bits};

fn fixture() -> Value {
    common::load_fixture("gemv.json")
}

/// The oracle's inputs in `[-2, 2)` (`common::uniform_inputs`).
fn inputs(shape: &[usize], seed: u64) -> Tensor {
    common::uniform_inputs(shape, seed, 2.0)
}

fn n(v: &Value) -> usize {
    v.as_u64().unwrap() as usize
}

#[test]
fn row_major_gemv_matches_xla() {
    for case in fixture()["gemv"].as_array().unwrap() {
        let (m, k) = (n(&case["m"]), n(&case["k"]));
        let seed = (m * 1000 + k) as u64;
        let a = inputs(&[m, k], seed);
        let v = inputs(&[k, 1], seed + 1);
        let y = a.matmul(&v).unwrap();
        assert_eq!(bits(&y), u32s(&case["y"]), "[{m}, {k}] @ [{k}, 1]");
    }
}

/// Whether the fixture's bits for `k` terms hold on this machine: from
/// 32,768 terms YNNPACK's sum tiles, which it does only with a thread pool.
fn holds_here(k: usize) -> bool {
    k <= 32768 || common::ynn_pooled()
}

/// `[1, k] @ [k, 1]`: a chain, windows of 32, and from 4,096 terms
/// YNNPACK's reduce of the rounded products; eagerly and compiled.
#[test]
fn vector_dots_match_xla() {
    for case in fixture()["dots"].as_array().unwrap() {
        let k = n(&case["k"]);
        if !holds_here(k) {
            eprintln!("k = {k} not run: one CPU (YNNPACK does not tile without a pool)");
            continue;
        }
        let a = inputs(&[1, k], k as u64);
        let v = inputs(&[k, 1], k as u64 + 7);
        let want = u32s(&case["y"]);
        assert_eq!(bits(&a.matmul(&v).unwrap()), want, "k = {k}");
        let mut step = flaxen::tensor::jit_value_and_grad_with(|p: &Tree, b: &Tree| {
            Ok(b.tensor("a")?.matmul(p.tensor("v")?)?.sum_all())
        });
        let params = Tree::new().with("v", v.clone());
        let batch = Tree::new().with("a", a.clone());
        for call in 0..2 {
            let (y, _) = step.call_with(&params, &batch).unwrap();
            assert_eq!(bits(&y), want, "compiled call {call}, k = {k}");
        }
    }
}

#[test]
fn dense_head_matches_flax() {
    let f = fixture();
    let c = &f["dense_head"];
    let x = inputs(&[3, 16], 99);
    let w = inputs(&[3, 1], 98);
    let head = Dense::new(1);
    let v = head.init(random::key(0), x.clone()).unwrap();
    for (path, t) in v.params().paths() {
        assert_eq!(bits(t), u32s(&c["params"][&path]["bits"]), "init {path}");
    }
    let y = head.apply(&v, x.clone(), ()).unwrap();
    assert_eq!(bits(&y), u32s(&c["y"]), "output");
    let args = Tree::new()
        .with("p", v.params())
        .with("x", Tree::from(x.clone()));
    let g = grad(
        |t: &Tree| {
            let p = t.subtree("p").unwrap();
            let out = head.apply(
                &Variables::new().with("params", p),
                t.tensor("x")?.clone(),
                (),
            )?;
            Ok((&out * &w).sum_all())
        },
        &args,
    )
    .unwrap();
    for (path, t) in g.subtree("p").unwrap().paths() {
        assert_eq!(
            bits(t),
            u32s(&c["grad_params"][&path]["bits"]),
            "grad {path}"
        );
    }
    assert_eq!(bits(g.tensor("x").unwrap()), u32s(&c["grad_x"]), "grad x");
}

/// The weight gradient of a `Dense(1)` head, `x^T @ c` (`x: [k, m]`, `c:
/// [k, 1]`), as eager `jax.grad` of `sum((x @ w) * c)` gives it (XLA's
/// column-major GEMV; the jitted gradient is the same kernel): eagerly and
/// in a compiled step, for batches `k` from 2 to 4096 and `m` from 2 to 33
/// features, among them the outputs whose first eight terms XLA rounds
/// separately (`m == 2`, `m % 8 == 1`); and with one feature (`m == 1`, a
/// dot of two vectors) for `k` up to 100,000, YNNPACK's sum from 4,096.
#[test]
fn dense_head_weight_gradients_match_xla() {
    let f = fixture();
    for case in f["head_grads"].as_array().unwrap() {
        let (m, k) = (n(&case["m"]), n(&case["k"]));
        if !holds_here(k) {
            eprintln!("m {m} k {k} not run: one CPU (YNNPACK does not tile without a pool)");
            continue;
        }
        let seed = (7 * m + k) as u64;
        let x = inputs(&[k, m], seed);
        let c = inputs(&[k, 1], seed + 1);
        let want = u32s(&case["grad"]);
        let loss = |t: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
            let y = b.tensor("x")?.matmul(t.tensor("w")?)?;
            Ok(y.mul(b.tensor("c")?)?.sum_all())
        };
        let params = Tree::new().with("w", Tensor::zeros(&[m, 1]));
        let batch = Tree::new().with("x", x.clone()).with("c", c.clone());
        let g = grad(|t: &Tree| loss(t, &batch), &params).unwrap();
        assert_eq!(bits(g.tensor("w").unwrap()), want, "eager, m {m} k {k}");
        let mut step = flaxen::tensor::jit_value_and_grad_with(loss);
        for call in 0..2 {
            let (_, g) = step.call_with(&params, &batch).unwrap();
            assert_eq!(
                bits(g.tensor("w").unwrap()),
                want,
                "compiled call {call}, m {m} k {k}"
            );
        }
    }
}

/// An ensemble of `Dense(1)` heads (`Vmap`, parameters split over axis 0,
/// each member its own input): the kernel's gradient is JAX's batched dot,
/// each member summed as the column-major GEMV of one head (plain columns
/// included).
#[test]
fn vmapped_dense_head_weight_gradients_match_xla() {
    use flaxen::nn::Vmap;
    let f = fixture();
    for case in f["vmap_heads"].as_array().unwrap() {
        let (b, m, k) = (n(&case["b"]), n(&case["m"]), n(&case["k"]));
        let seed = (11 * m + k) as u64;
        let x = inputs(&[b, k, m], seed);
        let c = inputs(&[b, k, 1], seed + 1);
        let heads = || {
            Vmap::new(Dense::new(1))
                .variable_axes("params", Some(0))
                .split_rngs("params", true)
        };
        let v = heads().init(random::key(0), x.clone()).unwrap();
        let g = grad(
            |p: &Tree| {
                let vs = Variables::new().with("params", p.clone());
                Ok(heads().apply(&vs, x.clone(), ())?.mul(&c)?.sum_all())
            },
            &v.params(),
        )
        .unwrap();
        let kernel = g.tensor("kernel").unwrap();
        assert_eq!(
            bits(kernel),
            u32s(&case["grad_kernel"]),
            "b {b} m {m} k {k}"
        );
    }
}

/// The same ensemble on one shared input (`in_axes(None)`), heads of 1 to 4
/// features: JAX folds the members into the rows of one product
/// `c'[b * n, k] @ x[k, m]`, summed as a plain `[b * n, k] @ [k, m]`, and
/// the input's gradient sums the members' cotangents.
#[test]
fn vmapped_heads_on_a_shared_input_match_xla() {
    use flaxen::nn::Vmap;
    let f = fixture();
    let mut failed = Vec::new();
    for case in f["vmap_shared_heads"].as_array().unwrap() {
        let (b, m, k, feats) = (n(&case["b"]), n(&case["m"]), n(&case["k"]), n(&case["n"]));
        let seed = (13 * m + k) as u64;
        let x = inputs(&[k, m], seed);
        let c = inputs(&[b, k, feats], seed + 1);
        let heads = || {
            Vmap::new(Dense::new(feats))
                .variable_axes("params", Some(0))
                .split_rngs("params", true)
                .in_axes(None)
                .axis_size(b)
        };
        let v = heads().init(random::key(0), x.clone()).unwrap();
        let both = Tree::new().with("params", v.params()).with("x", x.clone());
        let g = grad(
            |t: &Tree| {
                let vs = Variables::new().with("params", t.subtree("params").unwrap());
                Ok(heads()
                    .apply(&vs, t.tensor("x")?.clone(), ())?
                    .mul(&c)?
                    .sum_all())
            },
            &both,
        )
        .unwrap();
        let kernel = g.tensor("params/kernel").unwrap();
        if bits(kernel) != u32s(&case["grad_kernel"]) {
            failed.push(format!("kernel b {b} m {m} k {k} n {feats}"));
        }
        if bits(g.tensor("x").unwrap()) != u32s(&case["grad_x"]) {
            failed.push(format!("x b {b} m {m} k {k} n {feats}"));
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}
