//! `random::tf`'s TensorFlow API details against TensorFlow 2.21
//! (tests/fixtures/tf_api.json, made by tools/oracle/tf/gen_api_fixtures.py):
//! Generator defaults, the dtype chosen at run time, `split(0)`, `skip` with
//! negative deltas, `stateless_fold_in` over every integer dtype, the `alg`
//! argument, the raw V2 kernels with an explicit key and counter, and which
//! refused calls move the state.

mod tf_common;

use flaxen::random::tf::{
    stateless_fold_in, stateless_random_get_key_counter, stateless_random_normal_v2,
    stateless_random_uniform_full_int_v2, stateless_random_uniform_int_v2,
    stateless_random_uniform_v2, stateless_truncated_normal_v2, Algorithm, Generator, IntArray,
    TfIntDType, TfRandomError,
};
use flaxen::random::{FloatArray, FloatDType};
use ndarray::ArrayD;
use serde_json::Value;
use tf_common::fixture;

/// A JSON integer, or a decimal string of one, as `i128`.
fn big(v: &Value) -> i128 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        _ => v
            .as_i64()
            .map(i128::from)
            .or_else(|| v.as_u64().map(i128::from))
            .unwrap(),
    }
}

fn bigs(v: &Value) -> Vec<i128> {
    v.as_array().unwrap().iter().map(big).collect()
}

fn shape(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

fn state(g: &Generator) -> Vec<i128> {
    g.state().words().iter().map(|&w| i128::from(w)).collect()
}

/// Float values as their bits, as the fixtures store them.
fn float_bits(a: &FloatArray) -> Vec<i128> {
    match a {
        FloatArray::F16(x) => x.iter().map(|v| i128::from(v.to_bits())).collect(),
        FloatArray::BF16(x) => x.iter().map(|v| i128::from(v.to_bits())).collect(),
        FloatArray::F32(x) => x.iter().map(|v| i128::from(v.to_bits())).collect(),
        FloatArray::F64(x) => x.iter().map(|v| i128::from(v.to_bits())).collect(),
    }
}

fn ints<T: Copy + Into<i128>>(a: &ArrayD<T>) -> Vec<i128> {
    a.iter().map(|&v| v.into()).collect()
}

#[test]
fn generator_defaults_and_run_time_dtypes() {
    let f = fixture("tf_api.json");
    let mut g = Generator::from_seed(7);
    for case in f["generator"].as_array().unwrap() {
        let op = case["op"].as_str().unwrap();
        let dtype = case["dtype"].as_str().unwrap();
        let shp = shape(&case["shape"]);
        let got: Vec<i128> = match (op, case.get("params")) {
            // The three-value defaults, typed f32.
            ("normal" | "uniform" | "truncated_normal", _) if shp == [2, 3] => {
                let a = match op {
                    "normal" => g.normal(&shp),
                    "uniform" => g.uniform(&shp),
                    _ => g.truncated_normal(&shp),
                }
                .unwrap();
                a.iter().map(|v| i128::from(v.to_bits())).collect()
            }
            ("normal" | "uniform" | "truncated_normal", _) => {
                let d: FloatDType = dtype.parse().unwrap();
                let a = match op {
                    "normal" => g.normal_dtype(&shp, 0.0, 1.0, d),
                    "uniform" => g.uniform_dtype(&shp, 0.0, 1.0, d),
                    _ => g.truncated_normal_dtype(&shp, 0.0, 1.0, d),
                }
                .unwrap();
                assert_eq!(a.dtype(), d);
                float_bits(&a)
            }
            ("uniform_int", Some(p)) => {
                let d: TfIntDType = dtype.parse().unwrap();
                let (lo, hi) = (big(&p[0]) as i64, big(&p[1]) as i64);
                let a = g.uniform_int_dtype(&shp, lo, Some(hi), d).unwrap();
                assert_eq!(a.dtype(), d);
                a.to_i128().iter().copied().collect()
            }
            ("uniform_full_int", _) => {
                let d: TfIntDType = dtype.parse().unwrap();
                let a = g.uniform_full_int_dtype(&shp, d).unwrap();
                assert_eq!((a.dtype(), a.shape()), (d, &shp[..]));
                a.to_i128().iter().copied().collect()
            }
            other => panic!("case {other:?}"),
        };
        assert_eq!(got, bigs(&case["values"]), "{op} {dtype}");
        assert_eq!(state(&g), bigs(&case["state"]), "state after {op} {dtype}");
    }
}

#[test]
fn split_zero_is_empty_and_leaves_the_state() {
    let f = fixture("tf_api.json");
    let mut g = Generator::from_seed(1);
    let children = g.split(0).unwrap();
    assert_eq!(
        children.len() as u64,
        f["split0"]["count"].as_u64().unwrap()
    );
    assert_eq!(state(&g), bigs(&f["split0"]["state"]));
}

#[test]
fn skip_with_negative_and_large_deltas() {
    let f = fixture("tf_api.json");
    for case in f["skip"].as_array().unwrap() {
        let start: Vec<i64> = bigs(&case["start"]).iter().map(|&w| w as i64).collect();
        let mut g = Generator::from_state(&start, Algorithm::Philox).unwrap();
        let states = case["states"].as_array().unwrap();
        for (d, want) in case["deltas"].as_array().unwrap().iter().zip(states) {
            let before = g.state().clone();
            let old = g.skip(big(d) as i64);
            assert_eq!(old, before);
            assert_eq!(state(&g), bigs(want), "{start:?} skip({d})");
        }
    }
}

#[test]
fn fold_in_with_every_integer_dtype() {
    let f = fixture("tf_api.json");
    for case in f["fold_in"].as_array().unwrap() {
        let seed = bigs(&case["seed"]);
        let data = big(&case["data"]);
        let fold = |seed: &[i128]| -> Vec<i128> {
            macro_rules! run {
                ($s:ty) => {{
                    let s: Vec<$s> = seed.iter().map(|&x| x as $s).collect();
                    match case["data_dtype"].as_str().unwrap() {
                        "int32" => stateless_fold_in(&s, data as i32)
                            .unwrap()
                            .map(i128::from)
                            .to_vec(),
                        "int64" => stateless_fold_in(&s, data as i64)
                            .unwrap()
                            .map(i128::from)
                            .to_vec(),
                        "uint32" => stateless_fold_in(&s, data as u32)
                            .unwrap()
                            .map(i128::from)
                            .to_vec(),
                        "uint64" => stateless_fold_in(&s, data as u64)
                            .unwrap()
                            .map(i128::from)
                            .to_vec(),
                        other => panic!("{other}"),
                    }
                }};
            }
            match case["seed_dtype"].as_str().unwrap() {
                "int32" => run!(i32),
                _ => run!(i64),
            }
        };
        assert_eq!(fold(&seed), bigs(&case["values"]), "{case}");
    }
}

/// TF's `alg=` argument as flaxen takes it: a name or a numeric id.
fn parse_alg(s: &str) -> Result<Algorithm, TfRandomError> {
    match s.parse::<i64>() {
        Ok(id) => Algorithm::from_id(id),
        Err(_) => s.parse(),
    }
}

#[test]
fn the_alg_argument() {
    let f = fixture("tf_api.json");
    let (key, counter) = stateless_random_get_key_counter(&[1i32, 2]).unwrap();
    for case in f["alg"].as_array().unwrap() {
        let name = case["alg"].as_str().unwrap();
        let got = parse_alg(name)
            .and_then(|alg| stateless_random_normal_v2::<f32>(&[2], key, counter, alg));
        match case["error"].as_str() {
            None => {
                let a = got.unwrap();
                let bits: Vec<i128> = a.iter().map(|v| i128::from(v.to_bits())).collect();
                assert_eq!(bits, bigs(&case["values"]), "alg {name}");
            }
            // A name or id TF does not know (Python's ValueError).
            Some("ValueError") => assert!(
                matches!(
                    got,
                    Err(TfRandomError::UnknownAlgorithm { .. }
                        | TfRandomError::UnknownAlgorithmName { .. })
                ),
                "alg {name}: {got:?}"
            ),
            // Known, but refused by the CPU kernel.
            Some("InvalidArgumentError") => assert!(
                matches!(got, Err(TfRandomError::UnsupportedAlgorithm { .. })),
                "alg {name}: {got:?}"
            ),
            Some(other) => panic!("{other}"),
        }
    }
    for (name, alg) in [
        (" PHILOX ", Algorithm::Philox),
        ("Auto-Select", Algorithm::AutoSelect),
        ("three_fry", Algorithm::ThreeFry),
    ] {
        assert_eq!(name.parse::<Algorithm>().unwrap(), alg);
    }
    let err = "bogus".parse::<Algorithm>().unwrap_err();
    assert!(err.to_string().contains("\"bogus\""), "{err}");
}

#[test]
fn key_counter_of_seeds() {
    let f = fixture("tf_api.json");
    for case in f["key_counter"].as_array().unwrap() {
        let seed: Vec<i64> = bigs(&case["seed"]).iter().map(|&x| x as i64).collect();
        let (key, counter) = stateless_random_get_key_counter(&seed).unwrap();
        assert_eq!(i128::from(key), big(&case["key"]));
        assert_eq!(counter.map(i128::from).to_vec(), bigs(&case["counter"]));
    }
}

macro_rules! v2_float {
    ($f:ident, $t:ty, $shp:expr, $k:expr, $c:expr) => {
        $f::<$t>($shp, $k, $c, Algorithm::Philox)
            .unwrap()
            .iter()
            .map(|v| i128::from(v.to_bits()))
            .collect::<Vec<i128>>()
    };
}

macro_rules! v2_floats {
    ($f:ident, $dtype:expr, $shp:expr, $k:expr, $c:expr) => {
        match $dtype {
            "float16" => v2_float!($f, flaxen::random::tf::F16, $shp, $k, $c),
            "bfloat16" => v2_float!($f, flaxen::random::tf::BF16, $shp, $k, $c),
            "float32" => v2_float!($f, f32, $shp, $k, $c),
            "float64" => v2_float!($f, f64, $shp, $k, $c),
            other => panic!("{other}"),
        }
    };
}

#[test]
fn raw_v2_kernels_with_explicit_key_and_counter() {
    let f = fixture("tf_api.json");
    let cases = f["v2"].as_array().unwrap();
    assert!(cases.len() > 50);
    for case in cases {
        let key = big(&case["key"]) as u64;
        let c = bigs(&case["counter"]);
        let counter = [c[0] as u64, c[1] as u64];
        let shp = shape(&case["shape"]);
        let dtype = case["dtype"].as_str().unwrap();
        let got = match case["op"].as_str().unwrap() {
            "uniform" => v2_floats!(stateless_random_uniform_v2, dtype, &shp, key, counter),
            "normal" => v2_floats!(stateless_random_normal_v2, dtype, &shp, key, counter),
            "truncated_normal" => {
                v2_floats!(stateless_truncated_normal_v2, dtype, &shp, key, counter)
            }
            "uniform_int" => {
                let p = bigs(&case["params"]);
                match dtype {
                    "int32" => ints(
                        &stateless_random_uniform_int_v2::<i32>(
                            &shp,
                            key,
                            counter,
                            Algorithm::Philox,
                            p[0] as i32,
                            p[1] as i32,
                        )
                        .unwrap(),
                    ),
                    _ => ints(
                        &stateless_random_uniform_int_v2::<i64>(
                            &shp,
                            key,
                            counter,
                            Algorithm::Philox,
                            p[0] as i64,
                            p[1] as i64,
                        )
                        .unwrap(),
                    ),
                }
            }
            "uniform_full_int" => {
                let alg = Algorithm::AutoSelect;
                match dtype {
                    "int32" => ints(
                        &stateless_random_uniform_full_int_v2::<i32>(&shp, key, counter, alg)
                            .unwrap(),
                    ),
                    "int64" => ints(
                        &stateless_random_uniform_full_int_v2::<i64>(&shp, key, counter, alg)
                            .unwrap(),
                    ),
                    "uint32" => ints(
                        &stateless_random_uniform_full_int_v2::<u32>(&shp, key, counter, alg)
                            .unwrap(),
                    ),
                    _ => ints(
                        &stateless_random_uniform_full_int_v2::<u64>(&shp, key, counter, alg)
                            .unwrap(),
                    ),
                }
            }
            other => panic!("{other}"),
        };
        assert_eq!(got, bigs(&case["values"]), "{case}");
    }
}

#[test]
fn raw_v2_refusals() {
    let f = fixture("tf_api.json");
    let e = &f["v2_errors"];
    let (k, c) = (1u64, [0u64, 0]);
    assert_eq!(e["threefry_alg"], "InvalidArgumentError");
    assert_eq!(
        stateless_random_normal_v2::<f32>(&[2], k, c, Algorithm::ThreeFry).unwrap_err(),
        TfRandomError::UnsupportedAlgorithm {
            op: "StatelessRandomNormalV2",
            alg: Algorithm::ThreeFry
        }
    );
    assert_eq!(e["bad_alg_id"], "InvalidArgumentError");
    assert!(matches!(
        Algorithm::from_id(9),
        Err(TfRandomError::UnknownAlgorithm { id: 9 })
    ));
    // TF has no CPU kernel for unsigned bounded ranges.
    assert_eq!(e["uint32_int_range"], "NotFoundError");
    assert!(matches!(
        stateless_random_uniform_int_v2::<u32>(&[2], k, c, Algorithm::Philox, 0, 5),
        Err(TfRandomError::UnsignedRange { dtype: "uint32" })
    ));
    assert_eq!(e["empty_int_range"], "InvalidArgumentError");
    assert!(matches!(
        stateless_random_uniform_int_v2::<i32>(&[2], k, c, Algorithm::Philox, 5, 5),
        Err(TfRandomError::EmptyRange { .. })
    ));
    // The algorithm is checked before the range, as the kernel does.
    assert!(matches!(
        stateless_random_uniform_int_v2::<i32>(&[2], k, c, Algorithm::ThreeFry, 5, 5),
        Err(TfRandomError::UnsupportedAlgorithm { .. })
    ));
}

/// Refused Generator calls: the state afterwards is TensorFlow's. Python-level
/// refusals (a missing `maxval`, a float op with an integer dtype) leave it;
/// kernel-level ones (an empty range, an unsigned range) have moved it.
/// Calls Rust's types rule out (negative shapes and counts, float dtypes for
/// integer draws) have no counterpart.
#[test]
fn refused_calls_move_the_state_as_tf_does() {
    let f = fixture("tf_api.json");
    let mut seen = 0;
    for case in f["refused"].as_array().unwrap() {
        let mut g = Generator::from_seed(3);
        assert_eq!(state(&g), bigs(&case["before"]));
        let err = match case["case"].as_str().unwrap() {
            "uniform_int_no_maxval" => g
                .uniform_int_dtype(&[3], 0, None, TfIntDType::Int32)
                .unwrap_err(),
            "uniform_int_empty_range" => g
                .uniform_int_dtype(&[3], 5, Some(5), TfIntDType::Int32)
                .unwrap_err(),
            "uniform_int_reversed_range" => g.uniform_int::<i64>(&[3], 5, 2).unwrap_err(),
            "uniform_int_uint32" => g
                .uniform_int_dtype(&[2], 0, Some(5), TfIntDType::UInt32)
                .unwrap_err(),
            _ => continue,
        };
        seen += 1;
        let kind = case["error"].as_str().unwrap();
        match kind {
            "ValueError" => assert!(matches!(err, TfRandomError::MissingMaxval { .. })),
            "InvalidArgumentError" => assert!(matches!(err, TfRandomError::EmptyRange { .. })),
            "NotFoundError" => assert!(matches!(err, TfRandomError::UnsignedRange { .. })),
            other => panic!("{other}"),
        }
        assert_eq!(state(&g), bigs(&case["after"]), "{}", case["case"]);
    }
    assert_eq!(seen, 4);
    // A bound the dtype cannot hold is refused while converting, before
    // the state moves.
    let mut g = Generator::from_seed(3);
    assert_eq!(
        g.uniform_int_dtype(&[2], 0, Some(1 << 40), TfIntDType::Int32)
            .unwrap_err(),
        TfRandomError::BoundOutOfRange {
            value: 1 << 40,
            dtype: "int32"
        }
    );
    assert_eq!(g.state().words(), &[3, 0, 0]);
}

#[test]
fn int_arrays_and_dtype_names() {
    for name in ["int32", "int64", "uint32", "uint64"] {
        let d: TfIntDType = name.parse().unwrap();
        assert_eq!(d.to_string(), name);
    }
    assert_eq!(
        "float32".parse::<TfIntDType>().unwrap_err(),
        TfRandomError::UnknownDType {
            name: "float32".into()
        }
    );
    let mut g = Generator::from_seed(1);
    let a = g
        .uniform_full_int_dtype(&[0, 3], TfIntDType::UInt64)
        .unwrap();
    assert!(matches!(&a, IntArray::U64(x) if x.shape() == [0, 3]));
}

/// Float parameters reach 16-bit dtypes through `float32`, as in TF.
#[test]
fn parameters_are_converted_as_tf_converts_them() {
    let f = fixture("tf_api.json");
    for case in f["param_rounding"].as_array().unwrap() {
        let mean: f64 = case["mean"].as_str().unwrap().parse().unwrap();
        let d: FloatDType = case["dtype"].as_str().unwrap().parse().unwrap();
        let mut g = Generator::from_seed(1);
        let x = g.normal_dtype(&[1], mean, 0.0, d).unwrap();
        assert_eq!(float_bits(&x), bigs(&case["values"]), "{case}");
    }
}
