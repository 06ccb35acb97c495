//! `random::tf` as a TensorFlow user calls it: defaults, the dtype chosen at
//! run time (from a string, as `dtype="bfloat16"`), `split(0)`, `skip` with a
//! negative delta, `stateless_fold_in` with `uint32` data, the `alg`
//! argument, and the raw V2 kernels with an explicit key and counter. Every
//! number asserted here is TensorFlow 2.21's (tests/fixtures/tf_api.json).
//!
//! Run with `cargo run --release --example tf_api`.

use flaxen::random::tf::{
    stateless_fold_in, stateless_random_get_key_counter, stateless_random_uniform_full_int_v2,
    stateless_random_uniform_int_v2, stateless_random_uniform_v2, Algorithm, Generator, IntArray,
    TfIntDType,
};
use flaxen::random::{FloatArray, FloatDType};

fn main() -> Result<(), flaxen::Error> {
    // g = tf.random.Generator.from_seed(7); g.normal([2, 3])
    let mut g = Generator::from_seed(7);
    let x = g.normal(&[2, 3])?;
    println!("normal([2, 3]) (mean 0, stddev 1, float32):\n{x}");
    println!("state: {:?}", g.state().words());
    assert_eq!(g.state().words(), &[1543, 0, 0]);

    // g.uniform([4], dtype=dtype) with the dtype known only at run time.
    for name in ["float16", "bfloat16", "float64"] {
        let dtype: FloatDType = name.parse()?;
        match g.uniform_dtype(&[4], 0.0, 1.0, dtype)? {
            FloatArray::F16(a) => println!("uniform float16: {a}"),
            FloatArray::BF16(a) => println!("uniform bfloat16: {a}"),
            FloatArray::F64(a) => println!("uniform float64: {a}"),
            FloatArray::F32(a) => println!("uniform float32: {a}"),
        }
    }
    let dtype: TfIntDType = "int64".parse()?;
    if let IntArray::I64(a) = g.uniform_int_dtype(&[5], -3, Some(11), dtype)? {
        println!("uniform int64 in [-3, 11): {a}");
    }
    // An integer dtype has no default maxval (TF: ValueError); the state stays.
    let before = g.state().clone();
    let err = g
        .uniform_int_dtype(&[3], 0, None, TfIntDType::Int32)
        .unwrap_err();
    println!("refused: {err}");
    assert_eq!(g.state(), &before);

    // split(0) returns no generators; skip takes negative deltas.
    let mut g = Generator::from_seed(1);
    assert!(g.split(0)?.is_empty());
    g.skip(-1);
    println!(
        "from_seed(1), split(0), skip(-1): state {:?}",
        g.state().words()
    );
    assert_eq!(g.state().words(), &[-255, 0, 0]);

    // stateless_fold_in with uint32 data returns uint32.
    let folded: [u32; 2] = stateless_fold_in(&[1i32, 2], 3u32)?;
    println!("stateless_fold_in([1, 2], uint32 3) = {folded:?}");
    assert_eq!(folded, [1105988140, 3]);

    // alg= takes TF's names and ids; Philox and auto_select agree on CPU.
    let alg: Algorithm = "auto_select".parse()?;
    let (key, counter) = stateless_random_get_key_counter(&[1i64, 2])?;
    println!("key {key}, counter {counter:?}");
    let u = stateless_random_uniform_v2::<f32>(&[3], key, counter, alg)?;
    println!("StatelessRandomUniformV2: {u}");
    assert_eq!(u.as_slice().unwrap(), [0.8440604, 0.19204533, 0.9962232]);
    let i = stateless_random_uniform_int_v2::<i32>(&[3], key, counter, Algorithm::Philox, 0, 10)?;
    println!("StatelessRandomUniformIntV2 [0, 10): {i}");
    let f = stateless_random_uniform_full_int_v2::<u64>(&[3], key, counter, alg)?;
    println!("StatelessRandomUniformFullIntV2 uint64: {f}");
    // ThreeFry is refused on CPU, as TensorFlow refuses it.
    let err = stateless_random_uniform_v2::<f32>(&[3], key, counter, Algorithm::ThreeFry);
    println!("alg=threefry: {}", err.unwrap_err());
    Ok(())
}
