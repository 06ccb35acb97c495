//! TensorFlow's "Random number generation" guide, reproduced with
//! `flaxen::random::tf`: every number printed here is the one TensorFlow 2.21
//! computes (where the guide's own print differs by an ulp or two, the
//! comment says so; see the book chapter "TensorFlow random numbers").
//!
//! Run with `cargo run --release --example tf_random` (add `--features serde`
//! to see the checkpoint as JSON).

use std::error::Error;

use flaxen::array_format::format_array;
use flaxen::random::tf::{
    get_global_generator, stateless_fold_in, stateless_normal, stateless_split, Algorithm,
    Generator,
};
use ndarray::ArrayD;

/// Prints like `print(tensor)` in TensorFlow: `tf.Tensor(<numpy str>, shape=(2, 3), dtype=float32)`.
fn tensor(x: &ArrayD<f32>) -> String {
    let dims: Vec<String> = x.shape().iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let body = format_array(&x.view());
    let sep = if x.ndim() >= 2 { "\n" } else { "" };
    format!("tf.Tensor({sep}{body}, shape={shape}, dtype=float32)")
}

/// `g.normal([])`, the scalar draws of the guide.
fn scalar(g: &mut Generator) -> Result<ArrayD<f32>, Box<dyn Error>> {
    Ok(g.normal(&[])?)
}

fn main() -> Result<(), Box<dyn Error>> {
    // g1 = tf.random.Generator.from_seed(1); print(g1.normal(shape=[2, 3]))
    println!("# Generator.from_seed(1).normal([2, 3])");
    let mut g1 = Generator::from_seed(1);
    let x = g1.normal(&[2, 3])?;
    println!("{}", tensor(&x));
    // The guide prints 0.43842277 for element 0; TF 2.21 computes 0.43842274.
    assert_eq!(x[[0, 0]], 0.43842274);
    assert_eq!(x[[1, 0]], 1.5658046);
    println!("state after the draw: {:?}", g1.state().words());

    // The global generator starts from a non-deterministic state.
    println!("\n# get_global_generator().normal([2, 3]) (differs on every run)");
    let global = get_global_generator();
    let y = global.lock().unwrap().normal(&[2, 3])?;
    println!("{}", tensor(&y));

    println!("\n# two scalar normals, reset_from_seed(1), one more");
    let mut g = Generator::from_seed(1);
    let a = scalar(&mut g)?;
    let b = scalar(&mut g)?;
    println!("{}\n{}", tensor(&a), tensor(&b));
    g.reset_from_seed(1);
    let c = scalar(&mut g)?;
    println!("{}", tensor(&c));
    assert_eq!((a[[]], b[[]], c[[]]), (0.43842274, 1.6272374, 0.43842274));

    println!("\n# split(3): three independent generators");
    let mut g = Generator::from_seed(1);
    println!("{}", tensor(&scalar(&mut g)?));
    let children = g.split(3)?;
    let mut firsts = Vec::new();
    for mut child in children {
        let v = scalar(&mut child)?;
        println!("{}", tensor(&v));
        firsts.push(v[[]]);
    }
    let after = scalar(&mut g)?;
    println!("{}", tensor(&after));
    assert_eq!(firsts, [2.536413, 0.33186463, -0.07144657]);
    assert_eq!(after[[]], -0.79253083);

    println!("\n# saving and restoring the state (a checkpoint)");
    let mut g = Generator::from_seed(1);
    println!("{}", tensor(&scalar(&mut g)?));
    // cp.write(filename): the whole state is a plain value.
    let checkpoint = g.state().clone();
    #[cfg(feature = "serde")]
    let saved_json = serde_json::to_string(&checkpoint)?;
    #[cfg(feature = "serde")]
    println!("checkpoint as JSON: {saved_json}");
    #[cfg(not(feature = "serde"))]
    println!(
        "checkpoint: {:?} {:?}",
        checkpoint.algorithm(),
        checkpoint.words()
    );
    println!("RNG stream from saving point:");
    let saving = [scalar(&mut g)?, scalar(&mut g)?];
    saving.iter().for_each(|t| println!("{}", tensor(t)));
    // cp.restore(filename)
    #[cfg(feature = "serde")]
    g.restore(serde_json::from_str(&saved_json)?)?;
    #[cfg(not(feature = "serde"))]
    g.restore(checkpoint.clone())?;
    println!("RNG stream from restoring point:");
    let restoring = [scalar(&mut g)?, scalar(&mut g)?];
    restoring.iter().for_each(|t| println!("{}", tensor(t)));
    assert_eq!(saving, restoring);
    assert_eq!(saving[1][[]], 1.6307176);
    // A new generator object restored from the same checkpoint continues too.
    let mut other = Generator::from_generator_state(checkpoint);
    assert_eq!(scalar(&mut other)?, saving[0]);

    println!("\n# stateless_normal(shape=[2, 3], seed=[1, 2]), twice");
    for _ in 0..2 {
        let s = stateless_normal::<f32, i32>(&[2, 3], &[1, 2], 0.0, 1.0)?;
        println!("{}", tensor(&s));
        // The guide prints 0.07356433, -1.30159, -0.95385665 for elements 2, 4, 5.
        assert_eq!(
            (s[[0, 2]], s[[1, 1]], s[[1, 2]]),
            (0.07356432, -1.3015898, -0.9538565)
        );
    }

    println!("\n# stateless_split([1, 2], 3) and stateless_fold_in([1, 2], 3)");
    let seeds = stateless_split(&[1i32, 2], 3)?;
    for row in seeds.rows() {
        println!("{:?}", row.to_vec());
    }
    println!("{:?}", stateless_fold_in(&[1i32, 2], 3i32)?);
    // Each new seed drives its own stateless stream.
    let s = stateless_normal::<f32, i32>(&[3], seeds.row(0).as_slice().unwrap(), 0.0, 1.0)?;
    println!("{}", tensor(&s));

    println!("\n# beyond TensorFlow: the same Generator on Threefry-2x32");
    let mut t = Generator::from_seed_with(1, Algorithm::ThreeFry);
    println!("{}", tensor(&t.normal(&[2, 3])?));
    println!("state after the draw: {:?}", t.state().words());
    Ok(())
}
