//! `BatchNorm` inside `nn::Jit` against flax 0.12.8's `nn.jit(nn.BatchNorm)`
//! (tools/oracle/generate_nn_jit_bn.py): the outputs and updated batch
//! statistics of three calls (the first traces, the others replay), bit
//! for bit with XLA's compiled numbers, for 2-D and 4-D inputs, rows from
//! 1 to 64, 1 to 300 features, `use_scale` / `use_bias` off, other
//! momenta, and evaluation with the running averages.

use flaxen::core::Variables;
use flaxen::nn::{BatchNorm, Jit, Module};
use serde_json::Value;

mod common;

use common::{
    differing_bits as differing, json_shape as shape, json_tensor as tensor, json_tree as tree,
    json_u32s as u32s, load_fixture, tensor_bits as bits,
};

#[test]
fn batch_norm_in_a_jit_matches_jitted_flax() {
    common::require_rsqrt_as_recorded!();
    let fixture: Value = load_fixture("nn_jit_bn.json");
    let mut failures = Vec::new();
    for c in fixture["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let shp = shape(&c["shape"]);
        let train = c["train"].as_bool().unwrap();
        let mut bn = BatchNorm::new()
            .use_running_average(!train)
            .momentum(c["momentum"].as_f64().unwrap());
        bn.use_scale = c["use_scale"].as_bool().unwrap();
        bn.use_bias = c["use_bias"].as_bool().unwrap();
        let jit = Jit::new(bn);
        let params = tree(&c["variables"]["params"]);
        let mut stats = tree(&c["variables"]["batch_stats"]);
        for (t, call) in c["calls"].as_array().unwrap().iter().enumerate() {
            let vars = Variables::new()
                .with("params", params.clone())
                .with("batch_stats", stats.clone());
            let x = tensor(&call["x"], &shp);
            let (y, upd) = jit.apply_mut(&vars, x, (), ["batch_stats"]).unwrap();
            if let Some(d) = differing(&bits(&y), &u32s(&call["y"])) {
                failures.push(format!("{name} call {t} output: {d}"));
            }
            if train {
                stats = upd.collection("batch_stats").unwrap().clone();
                for (path, leaf) in stats.paths() {
                    let want = u32s(&call["batch_stats"][&path]["bits"]);
                    if let Some(d) = differing(&bits(leaf), &want) {
                        failures.push(format!("{name} call {t} {path}: {d}"));
                    }
                }
            }
        }
        // Replayed after the first call, not run eagerly.
        assert_eq!(
            jit.compiled_counts(),
            (1, 0),
            "{name}: {:?}",
            jit.eager_reasons()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
