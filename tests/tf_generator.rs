//! flaxen's `Generator` against TensorFlow 2.21 call sequences
//! (tests/fixtures/tf_generator.json, made by tools/oracle/tf/gen_fixtures.py):
//! every output, every state after every call, split children and skips.

mod tf_common;

use flaxen::random::tf::{Algorithm, Generator, RngSeed, TfRandomError, BF16, F16};
use serde_json::Value;
use tf_common::{encode, expected, fixture, float, i64s, int, matches, shape, Encoded};

/// Parses a decimal integer of any size into an [`RngSeed`].
fn big_seed(s: &str) -> RngSeed {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    // Magnitude in 64-bit limbs, least significant first.
    let mut limbs: Vec<u64> = vec![0];
    for c in digits.bytes() {
        let mut carry = u128::from(c - b'0');
        for l in &mut limbs {
            let v = u128::from(*l) * 10 + carry;
            *l = v as u64;
            carry = v >> 64;
        }
        if carry > 0 {
            limbs.push(carry as u64);
        }
    }
    RngSeed::from_big_int(negative, &limbs)
}

fn seed_of(v: &Value) -> RngSeed {
    match v {
        Value::String(s) => big_seed(s),
        Value::Array(_) => RngSeed::from(i64s(v)),
        other => panic!("seed {other}"),
    }
}

fn make(from: &Value) -> Generator {
    let alg = match from.get("alg").and_then(Value::as_str) {
        Some("auto_select") => Algorithm::AutoSelect,
        _ => Algorithm::Philox,
    };
    if let Some(seed) = from.get("seed") {
        Generator::from_seed_with(seed_of(seed), alg)
    } else if let Some(state) = from.get("state") {
        Generator::from_state(&i64s(state), alg).unwrap()
    } else {
        Generator::from_key_counter(int(&from["key"]) as i64, &i64s(&from["counter"]), alg).unwrap()
    }
}

/// A parameter as `f32` (the 16-bit cases use exactly representable values).
fn half(v: &Value) -> f32 {
    float(v) as f32
}

/// Runs one step; returns the output encoding, if the call has one.
fn step(gens: &mut Vec<Generator>, s: &Value) -> Result<Option<Encoded>, TfRandomError> {
    let i = s.get("gen").map_or(0, |g| g.as_u64().unwrap() as usize);
    let call = s["call"].as_str().unwrap();
    let dtype = s.get("dtype").and_then(Value::as_str).unwrap_or("");
    let shp = s.get("shape").map(shape).unwrap_or_default();
    let p: Vec<Value> = s
        .get("params")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| vec![0.0.into(), 1.0.into()]);
    let g = &mut gens[i];
    let out = match (call, dtype) {
        ("normal", "float32") => {
            encode(&g.normal_as(&shp, float(&p[0]) as f32, float(&p[1]) as f32)?)
        }
        ("normal", "float16") => {
            let (a, b) = (half(&p[0]), half(&p[1]));
            encode(&g.normal_as(&shp, F16::from_f32(a), F16::from_f32(b))?)
        }
        ("normal", "bfloat16") => {
            let (a, b) = (half(&p[0]), half(&p[1]));
            encode(&g.normal_as(&shp, BF16::from_f32(a), BF16::from_f32(b))?)
        }
        ("uniform", "float16") => {
            let (a, b) = (half(&p[0]), half(&p[1]));
            encode(&g.uniform_as(&shp, F16::from_f32(a), F16::from_f32(b))?)
        }
        ("uniform", "bfloat16") => {
            let (a, b) = (half(&p[0]), half(&p[1]));
            encode(&g.uniform_as(&shp, BF16::from_f32(a), BF16::from_f32(b))?)
        }
        ("truncated_normal", "float16") => {
            let (a, b) = (half(&p[0]), half(&p[1]));
            encode(&g.truncated_normal_as(&shp, F16::from_f32(a), F16::from_f32(b))?)
        }
        ("truncated_normal", "bfloat16") => {
            let (a, b) = (half(&p[0]), half(&p[1]));
            encode(&g.truncated_normal_as(&shp, BF16::from_f32(a), BF16::from_f32(b))?)
        }
        ("normal", "float64") => encode(&g.normal_as(&shp, float(&p[0]), float(&p[1]))?),
        ("truncated_normal", "float32") => {
            encode(&g.truncated_normal_as(&shp, float(&p[0]) as f32, float(&p[1]) as f32)?)
        }
        ("truncated_normal", "float64") => {
            encode(&g.truncated_normal_as(&shp, float(&p[0]), float(&p[1]))?)
        }
        ("uniform", "float32") => {
            encode(&g.uniform_as(&shp, float(&p[0]) as f32, float(&p[1]) as f32)?)
        }
        ("uniform", "float64") => encode(&g.uniform_as(&shp, float(&p[0]), float(&p[1]))?),
        ("uniform_int", "int32") => {
            encode(&g.uniform_int(&shp, int(&p[0]) as i32, int(&p[1]) as i32)?)
        }
        ("uniform_int", "int64") => {
            encode(&g.uniform_int(&shp, int(&p[0]) as i64, int(&p[1]) as i64)?)
        }
        ("uniform_full_int", "int32") => encode(&g.uniform_full_int::<i32>(&shp)?),
        ("uniform_full_int", "int64") => encode(&g.uniform_full_int::<i64>(&shp)?),
        ("uniform_full_int", "uint32") => encode(&g.uniform_full_int::<u32>(&shp)?),
        ("uniform_full_int", "uint64") => encode(&g.uniform_full_int::<u64>(&shp)?),
        ("make_seeds", _) => {
            let seeds = g.make_seeds(s["count"].as_u64().unwrap() as usize).unwrap();
            Encoded::Values(seeds.iter().map(|&x| i128::from(x)).collect())
        }
        ("split", _) => {
            let children = g.split(s["count"].as_u64().unwrap() as usize)?;
            let want: Vec<Vec<i64>> = s["new_states"]
                .as_array()
                .unwrap()
                .iter()
                .map(i64s)
                .collect();
            let got: Vec<Vec<i64>> = children
                .iter()
                .map(|c| c.state().words().to_vec())
                .collect();
            assert_eq!(got, want, "split children of {s}");
            gens.extend(children);
            return Ok(None);
        }
        ("skip", _) => {
            let old = g.skip(s["delta"].as_i64().unwrap());
            assert_eq!(
                old.words(),
                &i64s(&s["returned"])[..],
                "skip returns the old state"
            );
            return Ok(None);
        }
        ("reset_from_seed", _) => {
            g.reset_from_seed(seed_of(&s["seed"]));
            return Ok(None);
        }
        ("reset", _) => {
            g.reset(&i64s(&s["state"]))?;
            return Ok(None);
        }
        other => panic!("unknown step {other:?}"),
    };
    Ok(Some(out))
}

#[test]
fn generator_sequences_match_tensorflow() {
    let fx = fixture("tf_generator.json");
    let seqs = fx["sequences"].as_array().unwrap();
    assert!(seqs.len() >= 15);
    let mut steps_checked = 0;
    for seq in seqs {
        let mut gens = vec![make(&seq["from"])];
        assert_eq!(
            gens[0].state().words(),
            &i64s(&seq["initial_state"])[..],
            "initial state of {}",
            seq["from"]
        );
        for s in seq["steps"].as_array().unwrap() {
            let i = s.get("gen").map_or(0, |g| g.as_u64().unwrap() as usize);
            match step(&mut gens, s) {
                Ok(Some(out)) => assert!(
                    matches(s, &out),
                    "{} step {s}: got {out:?}, want {:?}",
                    seq["from"],
                    expected(s)
                ),
                Ok(None) => {}
                Err(e) => assert!(s.get("error").is_some(), "{} step {s}: {e}", seq["from"]),
            }
            assert_eq!(
                gens[i].state().words(),
                &i64s(&s["state_after"])[..],
                "state after {} step {s}",
                seq["from"]
            );
            steps_checked += 1;
        }
    }
    assert!(steps_checked > 300);
}
