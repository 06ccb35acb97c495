//! RMSNorm, GroupNorm, Embed and BatchNorm over a 3-D input against flax
//! 0.12.8 (tests/fixtures/layers.json, made by
//! tools/oracle/generate_layers.py): parameters at init, outputs and
//! gradients, bit for bit (one measured exception: attend's gradient for
//! ids of two axes, see below).

use flaxen::core::{Result, Scope, Variables};
use flaxen::nn::{BatchNorm, Embed, GroupNorm, Module, RMSNorm};
use flaxen::random;
use flaxen::tensor::{grad, Tensor, Tree};
use ndarray::ArrayD;
use serde_json::Value;

mod common;
use common::{json_shape as shape, json_tensor as tensor, json_u32s as u32s, tensor_bits as bits};

fn fixture() -> Value {
    common::load_fixture("layers.json")
}

/// The largest distance in units in the last place.
fn max_ulp(a: &[u32], b: &[u32]) -> u32 {
    let ord = |x: u32| -> i64 {
        if x & 0x8000_0000 != 0 {
            -((x & 0x7fff_ffff) as i64)
        } else {
            x as i64
        }
    };
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (ord(x) - ord(y)).unsigned_abs() as u32)
        .max()
        .unwrap_or(0)
}

/// Checks every leaf of `tree` against the fixture's `{path: {shape, bits}}`.
fn check_tree(tree: &Tree, want: &Value, what: &str, ulp: u32) {
    let want = want.as_object().unwrap();
    assert_eq!(tree.paths().len(), want.len(), "{what}: leaves");
    for (path, t) in tree.paths() {
        let w = &want[&path];
        assert_eq!(t.shape(), &shape(&w["shape"])[..], "{what} {path}");
        let d = max_ulp(&bits(t), &u32s(&w["bits"]));
        assert!(d <= ulp, "{what} {path}: {d} ulp");
    }
}

/// A norm as the root module (its variables at the top, as Flax's).
struct Root(String);

impl Module for Root {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Root"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        // Run the layer's body in this scope (no submodule level).
        match self.0.as_str() {
            "rms_2d" | "rms_3d" => RMSNorm::new().call(s, x),
            "rms_eps_noscale" => RMSNorm::new().epsilon(1e-3).use_scale(false).call(s, x),
            "group_2d" | "group_3d" => GroupNorm::new().num_groups(2).call(s, x),
            "group_size_2d" => GroupNorm::new().group_size(2).call(s, x),
            other => panic!("{other}"),
        }
    }
}

#[test]
fn norms_match_flax() {
    common::require_rsqrt_as_recorded!();
    let f = fixture();
    for case in f["norms"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        // GroupNorm of a 3-D input: statistics over two axes, in XLA's order.
        let ulp = 0;
        let shp = shape(&case["shape"]);
        let x = tensor(&case["x"], &shp);
        let w = tensor(&case["w"], &shp);
        let model = Root(name.to_string());
        let v = model.init(random::key(0), x.clone()).unwrap();
        check_tree(&v.params(), &case["params"], name, 0);
        let y = model.apply(&v, x.clone(), ()).unwrap();
        let d = max_ulp(&bits(&y), &u32s(&case["y"]));
        assert!(d <= ulp, "{name}: output {d} ulp");
        let inputs = Tree::new().with("params", v.params()).with("x", x.clone());
        let g = grad(
            |t| {
                let vars = Variables::new().with("params", t.subtree("params").unwrap());
                let y = model.apply(&vars, t.tensor("x")?.clone(), ())?;
                Ok(y.mul(&w)?.sum_all())
            },
            &inputs,
        )
        .unwrap();
        check_tree(
            &g.subtree("params").unwrap(),
            &case["grad_params"],
            &format!("{name} grad"),
            ulp,
        );
        let d = max_ulp(&bits(g.tensor("x").unwrap()), &u32s(&case["grad_x"]));
        assert!(d <= ulp, "{name}: grad x {d} ulp");
    }
}

struct Tied;

impl Module for Tied {
    type Input = ArrayD<i32>;
    type Output = (Tensor, Tensor);
    fn call(&self, s: &Scope<'_>, ids: ArrayD<i32>) -> Result<(Tensor, Tensor)> {
        let embed = s.child(Embed::new(10, 4))?;
        let h = embed.call(ids)?;
        let logits = embed.attend(h.clone())?;
        Ok((h, logits))
    }
}

/// The ids as the fixture has them (any rank).
fn ids_of(v: &Value) -> ArrayD<i32> {
    let flat: Vec<i32> = {
        fn walk(v: &Value, out: &mut Vec<i32>) {
            match v.as_array() {
                Some(xs) => xs.iter().for_each(|x| walk(x, out)),
                None => out.push(v.as_i64().unwrap() as i32),
            }
        }
        let mut out = Vec::new();
        walk(v, &mut out);
        out
    };
    let mut dims = Vec::new();
    let mut cur = v;
    while let Some(xs) = cur.as_array() {
        dims.push(xs.len());
        cur = &xs[0];
    }
    ArrayD::from_shape_vec(ndarray::IxDyn(&dims), flat).unwrap()
}

/// Embed, attend and the table's gradient, bit for bit, with ids of one
/// axis and of two (where attend's gradient with respect to the table is a
/// product contracting two axes, `[2, 3, 10] x [2, 3, 4] -> [10, 4]`).
#[test]
fn embed_and_attend_match_flax() {
    let f = fixture();
    for case in ["embed_flat", "embed"] {
        check_embed(&f[case]);
    }
}

fn check_embed(e: &Value) {
    let ids = ids_of(&e["ids"]);
    let v = Tied.init(random::key(0), ids.clone()).unwrap();
    check_tree(&v.params(), &e["params"], "embed params", 0);
    let (h, logits) = Tied.apply(&v, ids.clone(), ()).unwrap();
    assert_eq!(bits(&h), u32s(&e["h"]));
    assert_eq!(bits(&logits), u32s(&e["logits"]));
    let w = tensor(&e["w"], logits.shape());
    let g = grad(
        |p| {
            let vars = Variables::new().with("params", p.clone());
            let (_, logits) = Tied.apply(&vars, ids.clone(), ())?;
            Ok(logits.mul(&w)?.sum_all())
        },
        &v.params(),
    )
    .unwrap();
    check_tree(&g, &e["grad_params"], "embed grad", 0);
    // Ids out of range give NaN rows; -11 is out of range too.
    let table = Variables::new().with("params", v.params().subtree("Embed_0").unwrap());
    let out = Embed::new(10, 4)
        .apply(&table, ndarray::arr1(&[10, -11, 3]).into_dyn(), ())
        .unwrap();
    assert_eq!(bits(&out), u32s(&e["oob"]));
}

#[test]
fn bad_configurations_are_typed_errors() {
    let x = Tensor::ones(&[2, 6]);
    let err = GroupNorm::new()
        .num_groups(4)
        .init(random::key(0), x.clone());
    assert!(
        err.as_ref()
            .unwrap_err()
            .to_string()
            .contains("does not divide"),
        "{err:?}"
    );
    let err = GroupNorm::new()
        .group_size(4)
        .init(random::key(0), x.clone());
    assert!(err.unwrap_err().to_string().contains("not a multiple"));
    let err = GroupNorm::new()
        .num_groups(2)
        .reduction_axes(&[0])
        .init(random::key(0), x.clone());
    assert!(err.unwrap_err().to_string().contains("last axis"));
    let err = RMSNorm::new().reduction_axes(&[3]).init(random::key(0), x);
    assert!(err.unwrap_err().to_string().contains("out of range"));
    // Convolutions and pools refuse what lax would refuse, by name.
    use flaxen::nn::{max_pool, Conv, Padding};
    let img = Tensor::ones(&[1, 4, 4, 2]);
    let conv_err = |c: Conv| c.init(random::key(0), img.clone()).unwrap_err().to_string();
    assert!(conv_err(Conv::new(2, &[3, 3]).strides(&[0])).contains("strides"));
    assert!(conv_err(Conv::new(2, &[3, 0])).contains("kernel_size"));
    assert!(conv_err(Conv::new(3, &[2, 2]).feature_group_count(2)).contains("feature_group_count"));
    assert!(
        conv_err(Conv::new(2, &[2, 2]).padding(Padding::Explicit(vec![(9, 0)]))).contains("larger")
    );
    assert!(conv_err(Conv::new(2, &[2, 2]).padding(Padding::Causal)).contains("causal"));
    assert!(conv_err(Conv::new(2, &[2, 2, 2, 2])).contains("no room"));
    assert!(conv_err(Conv::new(2, &[2, 2]).strides(&[1, 1, 1])).contains("strides"));
    assert!(max_pool(&img, &[2, 2], Some(&[0, 1]), &Padding::Valid).is_err());
    assert!(max_pool(&img, &[], None, &Padding::Valid).is_err());
    // A window larger than the input gives an empty output, as lax.
    let y = max_pool(&img, &[5, 5], None, &Padding::Valid).unwrap();
    assert_eq!(y.shape(), &[1, 0, 0, 2]);
    // A carry that does not fit the inputs names both shapes.
    let cell = flaxen::nn::LSTMCell::new(4);
    let bad = (Tensor::zeros(&[2, 3]), Tensor::zeros(&[2, 3]));
    let err = cell
        .init(random::key(0), (bad, Tensor::ones(&[2, 5])))
        .unwrap_err()
        .to_string();
    assert!(err.contains("[2, 3]") && err.contains("[2, 5]"), "{err}");
    // Attention: heads must divide the features; masks must broadcast.
    use flaxen::nn::{dot_product_attention, AttentionInputs, MultiHeadDotProductAttention};
    let x = Tensor::ones(&[1, 3, 6]);
    let err = MultiHeadDotProductAttention::new(4)
        .init(random::key(0), AttentionInputs::new(x.clone()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("divisible"), "{err}");
    let q = Tensor::ones(&[1, 3, 2, 4]);
    let bad_mask = ArrayD::from_elem(ndarray::IxDyn(&[1, 1, 2, 2]), true);
    let err = dot_product_attention(&q, &q, &q, None, Some(&bad_mask), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not broadcast"), "{err}");
    assert!(dot_product_attention(&q, &Tensor::ones(&[1, 3, 2, 5]), &q, None, None, None).is_err());
    // Zero-size inputs work.
    let v = RMSNorm::new()
        .init(random::key(0), Tensor::ones(&[0, 3]))
        .unwrap();
    assert_eq!(
        RMSNorm::new()
            .apply(&v, Tensor::ones(&[0, 3]), ())
            .unwrap()
            .shape(),
        &[0, 3]
    );
    let e = Embed::new(5, 2);
    let v = e
        .init(random::key(0), ArrayD::zeros(ndarray::IxDyn(&[0])))
        .unwrap();
    assert_eq!(
        e.apply(&v, ArrayD::zeros(ndarray::IxDyn(&[2, 0])), ())
            .unwrap()
            .shape(),
        &[2, 0, 2]
    );
}

/// BatchNorm in training mode over `(N, H, C)`: mean and variance over two
/// axes, summed in XLA's order (the exact-order issue's held-out case).
#[test]
fn batchnorm_over_two_axes_matches_flax() {
    common::require_rsqrt_as_recorded!();
    let f = fixture();
    let c = &f["batchnorm_3d"];
    let shp = shape(&c["shape"]);
    let x = tensor(&c["x"], &shp);
    let w = tensor(&c["w"], &shp);
    let bn = BatchNorm::new();
    let v = bn.init(random::key(0), x.clone()).unwrap();
    let (y, upd) = bn.apply_mut(&v, x.clone(), (), "batch_stats").unwrap();
    assert_eq!(bits(&y), u32s(&c["y"]));
    check_tree(
        upd.collection("batch_stats").unwrap(),
        &c["stats"],
        "stats",
        0,
    );
    let inputs = Tree::new().with("params", v.params()).with("x", x);
    let g = grad(
        |t| {
            let vars = Variables::new()
                .with("params", t.subtree("params").unwrap())
                .with("batch_stats", v.collection("batch_stats").unwrap().clone());
            let (y, _) = bn.apply_mut(&vars, t.tensor("x")?.clone(), (), "batch_stats")?;
            Ok(y.mul(&w)?.sum_all())
        },
        &inputs,
    )
    .unwrap();
    check_tree(
        &g.subtree("params").unwrap(),
        &c["grad_params"],
        "bn grad",
        0,
    );
    assert_eq!(bits(g.tensor("x").unwrap()), u32s(&c["grad_x"]));
}

/// A Flax `nn.Conv` configuration from the fixture.
fn conv_of(cfg: &Value) -> flaxen::nn::Conv {
    use flaxen::nn::{Conv, Padding};
    let usizes = |v: &Value| -> Vec<usize> {
        match v.as_array() {
            Some(xs) => xs.iter().map(|x| x.as_u64().unwrap() as usize).collect(),
            None => vec![v.as_u64().unwrap() as usize],
        }
    };
    let mut c = Conv::new(
        cfg["features"].as_u64().unwrap() as usize,
        &usizes(&cfg["kernel_size"]),
    );
    if let Some(s) = cfg.get("strides") {
        c = c.strides(&usizes(s));
    }
    if let Some(p) = cfg.get("padding") {
        c = c.padding(match p.as_str() {
            Some("SAME") => Padding::Same,
            Some("VALID") => Padding::Valid,
            Some("CIRCULAR") => Padding::Circular,
            Some("CAUSAL") => Padding::Causal,
            Some(other) => panic!("{other}"),
            None => Padding::Explicit(
                p.as_array()
                    .unwrap()
                    .iter()
                    .map(|pair| {
                        let v = usizes(pair);
                        (v[0], v[1])
                    })
                    .collect(),
            ),
        });
    }
    if let Some(d) = cfg.get("kernel_dilation") {
        c = c.kernel_dilation(&usizes(d));
    }
    if let Some(d) = cfg.get("input_dilation") {
        c = c.input_dilation(&usizes(d));
    }
    if let Some(g) = cfg.get("feature_group_count") {
        c = c.feature_group_count(g.as_u64().unwrap() as usize);
    }
    if let Some(b) = cfg.get("use_bias") {
        c = c.use_bias(b.as_bool().unwrap());
    }
    c
}

/// Checks `got` against the fixture's bits: exactly, or — for the orders
/// not reproduced yet — to within `k` units in the last place of the
/// array's largest magnitude (a bound relative to the array's scale: the
/// values that differ are sums that cancel).
fn check_values(got: &Tensor, want: &Value, what: &str, scaled_ulp: Option<f32>) {
    let want: Vec<f32> = u32s(want).into_iter().map(f32::from_bits).collect();
    let got = got.to_vec();
    match scaled_ulp {
        None => assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{what}"
        ),
        Some(k) => {
            let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let ulp = f32::from_bits(scale.to_bits() + 1) - scale;
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(worst <= k * ulp, "{what}: {worst} > {k} ulp of {scale}");
        }
    }
}

/// Every convolution of the fixture: kernel and bias at init, the output,
/// the gradients with respect to the parameters and the input, bit for bit
/// in XLA's orders: Eigen's transposed convolution under input dilation
/// and for a strided convolution's input gradient, XLA's emitted loop where
/// it swaps a cotangent's operands, circular padding's wrapped cotangent
/// folded back as `jnp.pad(mode="wrap")`'s, and oneDNN's matrix-vector
/// order for one output feature per group (forward, kernel gradient) and
/// one input feature per group (input gradient: grouped, depthwise and
/// single-input-feature convolutions).
#[test]
fn convolutions_match_flax() {
    let f = fixture();
    for case in f["convs"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let conv = conv_of(&case["config"]);
        let x = tensor(&case["x"], &shape(&case["shape"]));
        let w = tensor(&case["w"], &shape(&case["y_shape"]));
        let v = conv.init(random::key(0), x.clone()).unwrap();
        check_tree(&v.params(), &case["params"], name, 0);
        let y = conv.apply(&v, x.clone(), ()).unwrap();
        assert_eq!(y.shape(), &shape(&case["y_shape"])[..], "{name}");
        check_values(&y, &case["y"], name, None);
        let inputs = Tree::new().with("params", v.params()).with("x", x);
        let g = grad(
            |t| {
                let vars = Variables::new().with("params", t.subtree("params").unwrap());
                Ok(conv
                    .apply(&vars, t.tensor("x")?.clone(), ())?
                    .mul(&w)?
                    .sum_all())
            },
            &inputs,
        )
        .unwrap();
        for (p, t) in g.subtree("params").unwrap().paths() {
            check_values(
                t,
                &case["grad_params"][&p]["bits"],
                &format!("{name} grad {p}"),
                None,
            );
        }
        check_values(
            g.tensor("x").unwrap(),
            &case["grad_x"],
            &format!("{name} grad x"),
            None,
        );
    }
}

#[test]
fn pools_match_flax() {
    use flaxen::nn::{avg_pool, max_pool, Padding};
    let f = fixture();
    for case in f["pools"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let cfg = &case["config"];
        let window = shape(&cfg["window_shape"]);
        let strides = cfg.get("strides").map(shape);
        let padding = match cfg["padding"].as_str() {
            Some("SAME") => Padding::Same,
            Some("VALID") => Padding::Valid,
            _ => Padding::Explicit(
                cfg["padding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        let v = shape(p);
                        (v[0], v[1])
                    })
                    .collect(),
            ),
        };
        let include = cfg
            .get("count_include_pad")
            .is_none_or(|b| b.as_bool().unwrap());
        let x = tensor(&case["x"], &shape(&case["shape"]));
        let w = tensor(&case["w"], &shape(&case["y_shape"]));
        let pool = |x: &Tensor| -> flaxen::Result<Tensor> {
            match case["kind"].as_str().unwrap() {
                "max" => max_pool(x, &window, strides.as_deref(), &padding),
                _ => avg_pool(x, &window, strides.as_deref(), &padding, include),
            }
        };
        let y = pool(&x).unwrap();
        assert_eq!(y.shape(), &shape(&case["y_shape"])[..], "{name}");
        assert_eq!(bits(&y), u32s(&case["y"]), "{name}");
        let g = grad(
            |t| Ok(pool(t.as_tensor().unwrap())?.mul(&w)?.sum_all()),
            &Tree::leaf(x),
        )
        .unwrap();
        assert_eq!(
            bits(g.as_tensor().unwrap()),
            u32s(&case["grad_x"]),
            "{name} grad"
        );
    }
}

/// A flat `{"a/b": leaf}` tree nested by its paths.
fn nest(flat: &Tree) -> Tree {
    let mut root = Tree::new();
    for (path, t) in flat.paths() {
        let parts: Vec<&str> = path.split('/').collect();
        let (module, name) = (parts[0], parts[1]);
        let sub = root.subtree(module).unwrap_or_default();
        root.insert(module.to_string(), sub.with(name, t.clone()))
            .unwrap();
    }
    root
}

/// A cell unrolled over the time axis, as a function of its parameters.
type Unroll = Box<dyn Fn(&Tree, &Tensor) -> Result<Tensor>>;

/// `x[t]` of a `[time, batch, features]` tensor.
fn step_of(x: &Tensor, t: usize) -> Tensor {
    x.index_axis(0, t).unwrap()
}

/// LSTMCell and GRUCell unrolled over three steps from zero carries:
/// parameters at init, outputs bit for bit on Flax's parameters, and
/// gradients (biases exact; kernels and inputs within 4 ulp of scale).
#[test]
fn recurrent_cells_match_flax() {
    use flaxen::nn::{GRUCell, LSTMCell};
    let f = fixture();
    for name in ["lstm", "gru"] {
        let c = &f["rnn"][name];
        let x = tensor(&c["x"], &[3, 2, 5]);
        let w = tensor(&c["w"], &[3, 2, 4]);
        let (params, unroll): (Tree, Unroll) = match name {
            "lstm" => {
                let cell = LSTMCell::new(4);
                let carry = cell.initialize_carry(random::key(1), &[2, 5]).unwrap();
                let v = cell
                    .init(random::key(2), (carry.clone(), step_of(&x, 0)))
                    .unwrap();
                (
                    v.params(),
                    Box::new(move |p: &Tree, x: &Tensor| {
                        let vars = Variables::new().with("params", p.clone());
                        let mut c = carry.clone();
                        let mut ys = Vec::new();
                        for t in 0..3 {
                            let (next, y) = cell.apply(&vars, (c, step_of(x, t)), ())?;
                            c = next;
                            ys.push(y);
                        }
                        Ok(Tensor::stack(&ys, 0)?)
                    }),
                )
            }
            _ => {
                let cell = GRUCell::new(4);
                let carry = cell.initialize_carry(random::key(1), &[2, 5]).unwrap();
                let v = cell
                    .init(random::key(2), (carry.clone(), step_of(&x, 0)))
                    .unwrap();
                (
                    v.params(),
                    Box::new(move |p: &Tree, x: &Tensor| {
                        let vars = Variables::new().with("params", p.clone());
                        let mut h = carry.clone();
                        let mut ys = Vec::new();
                        for t in 0..3 {
                            let (next, y) = cell.apply(&vars, (h, step_of(x, t)), ())?;
                            h = next;
                            ys.push(y);
                        }
                        Ok(Tensor::stack(&ys, 0)?)
                    }),
                )
            }
        };
        // The recurrent kernels are `orthogonal`: a QR decomposition, which
        // JAX hands to the CPU's LAPACK, so they match to 1e-5 (see
        // tests/init_conformance.rs); everything else at init is exact.
        // From there on the cell runs on Flax's own parameters.
        let flax_params = Tree::from_entries(params.paths().into_iter().map(|(p, t)| {
            let w = &c["params"][&p];
            let ours = t.to_vec();
            let theirs: Vec<f32> = u32s(&w["bits"]).into_iter().map(f32::from_bits).collect();
            let worst = ours
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            let recurrent = p.starts_with('h') && p.ends_with("kernel");
            assert!(
                if recurrent {
                    worst <= 1e-5
                } else {
                    worst == 0.0
                },
                "{name} {p}: {worst}"
            );
            (p, Tree::leaf(tensor(&w["bits"], t.shape())))
        }));
        let params = nest(&flax_params);
        let ys = unroll(&params, &x).unwrap();
        check_values(&ys, &c["ys"], &format!("{name} outputs"), None);
        let inputs = Tree::new().with("params", params.clone()).with("x", x);
        let g = grad(
            |t| {
                Ok(unroll(&t.subtree("params").unwrap(), t.tensor("x")?)?
                    .mul(&w)?
                    .sum_all())
            },
            &inputs,
        )
        .unwrap();
        // Biases are exact, and so is every GRU gradient. An LSTM kernel's
        // gradient sums x_tᵀ g_t over the steps; for four of its eight
        // kernels the small products (two batch rows) differ from XLA's in
        // the last bits (measured up to 4 ulp; the exact-order issue's
        // small transposed products).
        let lstm = name.starts_with("lstm");
        for (p, t) in g.subtree("params").unwrap().paths() {
            let scaled = (lstm && p.ends_with("kernel")).then_some(4.0);
            check_values(
                t,
                &c["grad_params"][&p]["bits"],
                &format!("{name} grad {p}"),
                scaled,
            );
        }
        // The input's gradient of the last step is exact; for the LSTM
        // earlier steps inherit the small products' last bits through the
        // recurrence.
        check_values(
            g.tensor("x").unwrap(),
            &c["grad_x"],
            &format!("{name} grad x"),
            lstm.then_some(4.0),
        );
    }
}

#[test]
fn dense_general_matches_flax() {
    use flaxen::nn::DenseGeneral;
    let f = fixture();
    for (case, layer) in [
        ("dense_general", DenseGeneral::new(&[2, 3])),
        (
            "dense_general_axes",
            DenseGeneral::new(&[4]).axis(&[-2, -1]),
        ),
    ] {
        let c = &f["attention"][case];
        let x = tensor(&c["x"], &shape(&c["shape"]));
        let w = tensor(&c["w"], &shape(&c["y_shape"]));
        let v = layer.init(random::key(0), x.clone()).unwrap();
        check_tree(&v.params(), &c["params"], case, 0);
        let y = layer.apply(&v, x.clone(), ()).unwrap();
        check_values(&y, &c["y"], case, None);
        let inputs = Tree::new().with("params", v.params()).with("x", x);
        let g = grad(
            |t| {
                let vars = Variables::new().with("params", t.subtree("params").unwrap());
                Ok(layer
                    .apply(&vars, t.tensor("x")?.clone(), ())?
                    .mul(&w)?
                    .sum_all())
            },
            &inputs,
        )
        .unwrap();
        // The cotangents contract two axes at once (`dot_general` over the
        // batch and length axes for the kernel, over the feature axes for
        // the input): bit for bit too, as XLA sums them.
        for (p, t) in g.subtree("params").unwrap().paths() {
            check_values(
                t,
                &c["grad_params"][&p]["bits"],
                &format!("{case} grad {p}"),
                None,
            );
        }
        check_values(g.tensor("x").unwrap(), &c["grad_x"], case, None);
    }
}

fn bools(v: &Value, shp: &[usize]) -> ArrayD<bool> {
    let b: Vec<bool> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() != 0)
        .collect();
    ArrayD::from_shape_vec(ndarray::IxDyn(shp), b).unwrap()
}

#[test]
fn dot_product_attention_matches_flax() {
    use flaxen::nn::{dot_product_attention, make_attention_mask};
    let f = fixture();
    let c = &f["attention"]["dpa"];
    let q = tensor(&c["q"], &[2, 3, 2, 4]);
    let k = tensor(&c["k"], &[2, 5, 2, 4]);
    let v = tensor(&c["v"], &[2, 5, 2, 4]);
    let bias = tensor(&c["bias"], &[2, 2, 3, 5]);
    let qm = ndarray::arr2(&[[true, true, true], [true, true, false]]).into_dyn();
    let km = ndarray::arr2(&[
        [true, true, true, true, false],
        [true, true, true, false, false],
    ])
    .into_dyn();
    let mask = make_attention_mask(&qm, &km).unwrap();
    assert_eq!(mask, bools(&c["mask"], &shape(&c["mask_shape"])));
    let y = dot_product_attention(&q, &k, &v, Some(&bias), Some(&mask), None).unwrap();
    check_values(&y, &c["y"], "attention", None);
    let w = tensor(&c["w"], y.shape());
    let inputs = Tree::new().with("q", q).with("k", k).with("v", v);
    let g = grad(
        |t| {
            Ok(dot_product_attention(
                t.tensor("q")?,
                t.tensor("k")?,
                t.tensor("v")?,
                Some(&bias),
                Some(&mask),
                None,
            )?
            .mul(&w)?
            .sum_all())
        },
        &inputs,
    )
    .unwrap();
    // Exact, the signs of the zeros at masked positions of the key's and
    // value's cotangents included (products accumulate from +0, as XLA's).
    for (name, want, scaled) in [("q", "gq", None), ("k", "gk", None), ("v", "gv", None)] {
        check_values(
            g.tensor(name).unwrap(),
            &c[want],
            &format!("grad {name}"),
            scaled,
        );
    }
}

#[test]
fn multi_head_attention_matches_flax() {
    use flaxen::core::Rngs;
    use flaxen::nn::{make_causal_mask, AttentionInputs, MultiHeadDotProductAttention};
    let f = fixture();
    let c = &f["attention"]["mha"];
    let x = tensor(&c["x"], &[2, 3, 8]);
    let causal = make_causal_mask(&[2, 3]).unwrap();
    assert_eq!(causal, bools(&c["causal"], &[2, 1, 3, 3]));
    let mha = MultiHeadDotProductAttention::new(2);
    let inputs = |x: Tensor| AttentionInputs::new(x).mask(causal.clone());
    let v = mha.init(random::key(0), inputs(x.clone())).unwrap();
    check_tree(&v.params(), &c["params"], "mha", 0);
    let y = mha.apply(&v, inputs(x.clone()), ()).unwrap();
    check_values(&y, &c["y"], "mha", None);
    let w = tensor(&c["w"], y.shape());
    let t = Tree::new().with("params", v.params()).with("x", x.clone());
    let g = grad(
        |t| {
            let vars = Variables::new().with("params", t.subtree("params").unwrap());
            Ok(mha
                .apply(&vars, inputs(t.tensor("x")?.clone()), ())?
                .mul(&w)?
                .sum_all())
        },
        &t,
    )
    .unwrap();
    // The gradients, bit for bit: the projections' cotangents contract two
    // axes (see DenseGeneral), and `key/bias`'s is mathematically zero
    // (softmax ignores a shift of every score of a query), rounding noise
    // that matches too.
    for (p, t) in g.subtree("params").unwrap().paths() {
        check_values(
            t,
            &c["grad_params"][&p]["bits"],
            &format!("mha grad {p}"),
            None,
        );
    }
    check_values(g.tensor("x").unwrap(), &c["grad_x"], "mha grad x", None);
    // Dropout of the weights from the `dropout` stream.
    let drop = MultiHeadDotProductAttention::new(2).dropout_rate(0.5);
    let yd = drop
        .apply(&v, inputs(x), Rngs::from([("dropout", random::key(5))]))
        .unwrap();
    check_values(&yd, &c["y_dropout"], "mha dropout", None);
}

/// `nn.RNN` over the cells: the parameters under `cell`, the outputs and
/// the final carry, on Flax's parameters (the orthogonal kernels differ by
/// LAPACK rounding at init), bit for bit. Flax runs the cell inside
/// `lax.scan`, which compiles its body even outside `jit`: XLA contracts
/// one product of each two-product sum into a fused multiply-add, and the
/// cells do the same in `RNN`'s compiled region.
#[test]
fn rnn_module_matches_flax() {
    use flaxen::nn::{GRUCell, LSTMCell, RnnInput, RNN};
    let f = fixture();
    let c = &f["rnn_module"];
    let x = tensor(&c["x"], &[2, 5, 3]);
    let flax_params = |case: &Value, ours: &Tree| -> Tree {
        let leaves: Vec<Tensor> = ours
            .paths()
            .into_iter()
            .map(|(p, t)| tensor(&case["params"][&p]["bits"], t.shape()))
            .collect();
        ours.with_leaves(leaves).unwrap()
    };
    // LSTM, forward.
    let rnn = RNN::new(LSTMCell::new(4));
    let v = rnn.init(random::key(0), x.clone().into()).unwrap();
    let p = flax_params(&c["lstm"], &v.params());
    let ((cc, hh), y) = rnn
        .apply(&Variables::new().with("params", p), x.clone().into(), ())
        .unwrap();
    check_values(&y, &c["lstm"]["y"], "rnn lstm outputs", None);
    let carry =
        Tensor::concatenate(&[cc.reshape(&[-1]).unwrap(), hh.reshape(&[-1]).unwrap()], 0).unwrap();
    check_values(&carry, &c["lstm"]["carry"], "rnn lstm carry", None);
    // GRU, reversed, outputs in the input's order.
    let rnn = RNN::new(GRUCell::new(4)).reverse(true).keep_order(true);
    let v = rnn.init(random::key(0), x.clone().into()).unwrap();
    let p = flax_params(&c["gru_reverse"], &v.params());
    let (h, y) = rnn
        .apply(&Variables::new().with("params", p), x.clone().into(), ())
        .unwrap();
    check_values(&y, &c["gru_reverse"]["y"], "rnn gru outputs", None);
    check_values(&h, &c["gru_reverse"]["carry"], "rnn gru carry", None);
    // Padded sequences.
    let rnn = RNN::new(LSTMCell::new(4));
    let input = RnnInput::new(x.clone()).seq_lengths(&[5, 2]);
    let v = rnn.init(random::key(0), input.clone()).unwrap();
    let p = flax_params(&c["lstm_lengths"], &v.params());
    let ((cc, hh), y) = rnn
        .apply(&Variables::new().with("params", p), input, ())
        .unwrap();
    check_values(
        &y,
        &c["lstm_lengths"]["y"],
        "rnn lstm lengths outputs",
        None,
    );
    let carry =
        Tensor::concatenate(&[cc.reshape(&[-1]).unwrap(), hh.reshape(&[-1]).unwrap()], 0).unwrap();
    check_values(
        &carry,
        &c["lstm_lengths"]["carry"],
        "rnn lstm lengths carry",
        None,
    );
    for (case, lengths, keep) in [
        ("gru_reverse_lengths", [3, 5], true),
        ("gru_reverse_lengths_no_keep", [1, 4], false),
    ] {
        let rnn = RNN::new(GRUCell::new(4)).reverse(true).keep_order(keep);
        let input = RnnInput::new(x.clone()).seq_lengths(&lengths);
        let v = rnn.init(random::key(0), input.clone()).unwrap();
        let p = flax_params(&c[case], &v.params());
        let (h, y) = rnn
            .apply(&Variables::new().with("params", p), input, ())
            .unwrap();
        check_values(&y, &c[case]["y"], case, None);
        check_values(&h, &c[case]["carry"], case, None);
    }
    // One row: the LSTM contracts `i * g` in the elements its compiled
    // code does not vectorize (17 features: the last; 36: the last 4).
    if c["x_one_row"].is_null() {
        eprintln!("one-row cases not run: not recorded on this CPU");
    } else {
        let x1 = tensor(&c["x_one_row"], &[1, 6, 3]);
        for (case, features) in [("lstm_one_row_17", 17), ("lstm_one_row_36", 36)] {
            let rnn = RNN::new(LSTMCell::new(features));
            let v = rnn.init(random::key(0), x1.clone().into()).unwrap();
            let p = flax_params(&c[case], &v.params());
            let ((cc, hh), y) = rnn
                .apply(&Variables::new().with("params", p), x1.clone().into(), ())
                .unwrap();
            check_values(&y, &c[case]["y"], case, None);
            let carry =
                Tensor::concatenate(&[cc.reshape(&[-1]).unwrap(), hh.reshape(&[-1]).unwrap()], 0)
                    .unwrap();
            check_values(&carry, &c[case]["carry"], case, None);
        }
        let rnn = RNN::new(GRUCell::new(20));
        let v = rnn.init(random::key(0), x1.clone().into()).unwrap();
        let p = flax_params(&c["gru_one_row_20"], &v.params());
        let (h, y) = rnn
            .apply(&Variables::new().with("params", p), x1.into(), ())
            .unwrap();
        check_values(&y, &c["gru_one_row_20"]["y"], "gru one row", None);
        check_values(&h, &c["gru_one_row_20"]["carry"], "gru one row", None);
    }
    // No time step: empty outputs, the initial carry, the parameters
    // created all the same.
    let rnn = RNN::new(LSTMCell::new(4));
    let empty = Tensor::zeros(&[2, 0, 3]);
    let v = rnn.init(random::key(0), empty.clone().into()).unwrap();
    // Names and shapes (the recurrent kernels' orthogonal init depends on
    // LAPACK, see init_conformance.rs).
    check_tree(
        &v.params(),
        &c["empty"]["params"],
        "rnn empty params",
        u32::MAX,
    );
    let ((cc, hh), y) = rnn.apply(&v, empty.into(), ()).unwrap();
    assert_eq!(y.shape(), &shape(&c["empty"]["y_shape"])[..]);
    let carry =
        Tensor::concatenate(&[cc.reshape(&[-1]).unwrap(), hh.reshape(&[-1]).unwrap()], 0).unwrap();
    check_values(&carry, &c["empty"]["carry"], "rnn empty carry", None);
    // Lengths that do not fit are errors naming the shapes.
    for lengths in [&[1usize][..], &[6, 1]] {
        let e = rnn
            .apply(&v, RnnInput::new(x.clone()).seq_lengths(lengths), ())
            .unwrap_err();
        assert!(e.to_string().contains("sequence length"), "{e}");
    }
}

/// `ConvTranspose`: the input dilated by the strides, then a stride-1
/// convolution (Eigen's transposed convolution in 2-D); outputs and
/// gradients bit for bit.
#[test]
fn conv_transposes_match_flax() {
    use flaxen::nn::{ConvTranspose, Padding};
    let f = fixture();
    for case in f["conv_transposes"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let cfg = &case["config"];
        let mut layer = ConvTranspose::new(
            cfg["features"].as_u64().unwrap() as usize,
            &shape(&cfg["kernel_size"]),
        );
        if let Some(st) = cfg.get("strides") {
            layer = layer.strides(&shape(st));
        }
        if cfg.get("padding").and_then(Value::as_str) == Some("VALID") {
            layer = layer.padding(Padding::Valid);
        }
        let x = tensor(&case["x"], &shape(&case["shape"]));
        let w = tensor(&case["w"], &shape(&case["y_shape"]));
        let v = layer.init(random::key(0), x.clone()).unwrap();
        check_tree(&v.params(), &case["params"], name, 0);
        let y = layer.apply(&v, x.clone(), ()).unwrap();
        assert_eq!(y.shape(), &shape(&case["y_shape"])[..], "{name}");
        check_values(&y, &case["y"], name, None);
        let inputs = Tree::new().with("params", v.params()).with("x", x);
        let g = grad(
            |t| {
                let vars = Variables::new().with("params", t.subtree("params").unwrap());
                Ok(layer
                    .apply(&vars, t.tensor("x")?.clone(), ())?
                    .mul(&w)?
                    .sum_all())
            },
            &inputs,
        )
        .unwrap();
        // Every cotangent is exact. The kernel's, a convolution of the
        // input with the output's cotangent, has a window larger than its
        // input in 2-D here: XLA swaps its operands and runs it as its
        // emitted loop, over the positions in decreasing order.
        for (p, t) in g.subtree("params").unwrap().paths() {
            check_values(
                t,
                &case["grad_params"][&p]["bits"],
                &format!("{name} grad {p}"),
                None,
            );
        }
        check_values(
            g.tensor("x").unwrap(),
            &case["grad_x"],
            &format!("{name} grad x"),
            None,
        );
    }
}
