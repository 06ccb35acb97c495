//! flaxen's stateless functions against TensorFlow 2.21
//! (tests/fixtures/tf_stateless.json and tf_seeds.json, made by
//! tools/oracle/tf/gen_fixtures.py).

mod tf_common;

use flaxen::random::tf::{
    stateless_fold_in, stateless_key_counter, stateless_normal, stateless_split,
    stateless_truncated_normal, stateless_uniform, stateless_uniform_full_int,
    stateless_uniform_int, SeedInt, TfFloat, BF16, F16,
};
use serde_json::Value;
use tf_common::{encode, fixture, float, int, matches, shape, Encoded};

/// Runs a float case of a 16-bit dtype `T` (parameters converted from `f32`).
fn run_half<T, S>(case: &Value, seed: &[S], from: fn(f32) -> T) -> Encoded
where
    T: TfFloat + Default + tf_common::Enc,
    S: SeedInt + Default,
{
    let shp = shape(&case["shape"]);
    let p = case["params"].as_array().unwrap();
    let (a, b) = (from(float(&p[0]) as f32), from(float(&p[1]) as f32));
    match case["op"].as_str().unwrap() {
        "uniform" => encode(&stateless_uniform(&shp, seed, a, b).unwrap()),
        "normal" => encode(&stateless_normal(&shp, seed, a, b).unwrap()),
        "truncated_normal" => encode(&stateless_truncated_normal(&shp, seed, a, b).unwrap()),
        other => panic!("unknown case {other}"),
    }
}

/// Runs one stateless case with seed dtype `S`.
fn run<S: SeedInt + Default>(case: &Value, seed: &[S]) -> Encoded {
    let op = case["op"].as_str().unwrap();
    let dtype = case["dtype"].as_str().unwrap();
    let shp = shape(&case["shape"]);
    let p = case["params"].as_array().unwrap();
    match (op, dtype) {
        (_, "float16") => run_half(case, seed, F16::from_f32),
        (_, "bfloat16") => run_half(case, seed, BF16::from_f32),
        ("uniform", "float32") => encode(
            &stateless_uniform(&shp, seed, float(&p[0]) as f32, float(&p[1]) as f32).unwrap(),
        ),
        ("uniform", "float64") => {
            encode(&stateless_uniform(&shp, seed, float(&p[0]), float(&p[1])).unwrap())
        }
        ("normal", "float32") => {
            encode(&stateless_normal(&shp, seed, float(&p[0]) as f32, float(&p[1]) as f32).unwrap())
        }
        ("normal", "float64") => {
            encode(&stateless_normal(&shp, seed, float(&p[0]), float(&p[1])).unwrap())
        }
        ("truncated_normal", "float32") => encode(
            &stateless_truncated_normal(&shp, seed, float(&p[0]) as f32, float(&p[1]) as f32)
                .unwrap(),
        ),
        ("truncated_normal", "float64") => {
            encode(&stateless_truncated_normal(&shp, seed, float(&p[0]), float(&p[1])).unwrap())
        }
        ("full_int", "int32") => encode(&stateless_uniform_full_int::<i32, S>(&shp, seed).unwrap()),
        ("full_int", "int64") => encode(&stateless_uniform_full_int::<i64, S>(&shp, seed).unwrap()),
        ("full_int", "uint32") => {
            encode(&stateless_uniform_full_int::<u32, S>(&shp, seed).unwrap())
        }
        ("full_int", "uint64") => {
            encode(&stateless_uniform_full_int::<u64, S>(&shp, seed).unwrap())
        }
        ("uniform_int", "int32") => encode(
            &stateless_uniform_int(&shp, seed, int(&p[0]) as i32, int(&p[1]) as i32).unwrap(),
        ),
        ("uniform_int", "int64") => encode(
            &stateless_uniform_int(&shp, seed, int(&p[0]) as i64, int(&p[1]) as i64).unwrap(),
        ),
        other => panic!("unknown case {other:?}"),
    }
}

/// Runs `f` with the case's seed in its dtype.
fn with_seed<R>(case: &Value, f32_: impl FnOnce(&[i32]) -> R, f64_: impl FnOnce(&[i64]) -> R) -> R {
    let seed: Vec<i128> = case["seed"].as_array().unwrap().iter().map(int).collect();
    match case["seed_dtype"].as_str().unwrap() {
        "int32" => f32_(&seed.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        "int64" => f64_(&seed.iter().map(|&x| x as i64).collect::<Vec<_>>()),
        other => panic!("seed dtype {other}"),
    }
}

#[test]
fn stateless_matches_tensorflow() {
    let fx = fixture("tf_stateless.json");
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() > 500);
    let mut failures = Vec::new();
    for case in cases {
        let got = with_seed(case, |s| run(case, s), |s| run(case, s));
        if !matches(case, &got) {
            failures.push(format!(
                "{} {} shape {} seed {} params {}",
                case["op"], case["dtype"], case["shape"], case["seed"], case["params"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn key_counter_matches_tensorflow() {
    let fx = fixture("tf_seeds.json");
    for case in fx["key_counter"].as_array().unwrap() {
        let got = with_seed(
            case,
            |s| stateless_key_counter(s).unwrap(),
            |s| stateless_key_counter(s).unwrap(),
        );
        let counter = case["counter"].as_array().unwrap();
        assert_eq!(got.0, case["key"].as_u64().unwrap(), "{case}");
        assert_eq!(
            got.1,
            [counter[0].as_u64().unwrap(), counter[1].as_u64().unwrap()],
            "{case}"
        );
    }
}

#[test]
fn split_matches_tensorflow() {
    let fx = fixture("tf_seeds.json");
    for case in fx["split"].as_array().unwrap() {
        let num = case["num"].as_u64().unwrap() as usize;
        let got: Vec<i128> = with_seed(
            case,
            |s| {
                stateless_split(s, num)
                    .unwrap()
                    .iter()
                    .map(|&x| i128::from(x))
                    .collect()
            },
            |s| {
                stateless_split(s, num)
                    .unwrap()
                    .iter()
                    .map(|&x| i128::from(x))
                    .collect()
            },
        );
        let want: Vec<i128> = case["values"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(int))
            .collect();
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn fold_in_matches_tensorflow() {
    let fx = fixture("tf_seeds.json");
    for case in fx["fold_in"].as_array().unwrap() {
        let data = int(&case["data"]);
        let got: [i128; 2] = match case["data_dtype"].as_str().unwrap() {
            "int32" => with_seed(
                case,
                |s| stateless_fold_in(s, data as i32).unwrap().map(i128::from),
                |s| stateless_fold_in(s, data as i32).unwrap().map(i128::from),
            ),
            _ => with_seed(
                case,
                |s| stateless_fold_in(s, data as i64).unwrap().map(i128::from),
                |s| stateless_fold_in(s, data as i64).unwrap().map(i128::from),
            ),
        };
        let want: Vec<i128> = case["values"].as_array().unwrap().iter().map(int).collect();
        assert_eq!(got.to_vec(), want, "{case}");
    }
}
