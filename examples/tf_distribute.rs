//! TensorFlow's "Random number generation" guide, the sections on
//! distribution strategies, checkpoints and SavedModel: `tf.random.Generator`
//! under `MirroredStrategy`, where each replica gets its own stream. Every
//! line printed is the guide's (`examples/expected/tf_distribute.txt`).
//!
//! Run: `cargo run --release --example tf_distribute`

use flaxen::array_format::format_array;
use flaxen::random::tf::{Generator, MirroredStrategy, TfRandomError};
use ndarray::ArrayD;

/// `print(tensor)` in TensorFlow, for a scalar or a vector.
fn tensor(x: &ArrayD<f32>) -> String {
    let shape = match x.shape() {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        s => format!("{s:?}"),
    };
    // A scalar prints as NumPy's repr of the number (shortest round trip),
    // an array as NumPy's str.
    let body = match x.ndim() {
        0 => x[[]].to_string(),
        _ => format_array(&x.view()),
    };
    format!("tf.Tensor({body}, shape={shape}, dtype=float32)")
}

/// `g.normal([])`.
fn normal(g: &mut Generator) -> Result<ArrayD<f32>, TfRandomError> {
    g.normal(&[])
}

fn main() -> Result<(), TfRandomError> {
    // Created outside the strategy: the replicas take turns on one state.
    let mut g = Generator::from_seed(1);
    let strat = MirroredStrategy::new(&["cpu:0", "cpu:1"])?;
    strat.scope(|| {
        strat.run(|| {
            println!("{}", tensor(&normal(&mut g)?));
            Ok::<_, TfRandomError>(())
        })
    })?;

    // Created inside the strategy: each replica has its own stream.
    let strat = MirroredStrategy::new(&["cpu:0", "cpu:1"])?;
    let mut g = strat.scope(|| Generator::from_seed(1));
    println!("{}", strat.run(|| normal(&mut g))?.map(tensor));
    println!("{}", strat.run(|| normal(&mut g))?.map(tensor));

    // Created inside `Strategy.run`.
    let strat = MirroredStrategy::new(&["cpu:0", "cpu:1"])?;
    let f = || {
        let mut g = Generator::from_seed(1);
        let a = normal(&mut g)?;
        let b = normal(&mut g)?;
        Ok::<_, TfRandomError>(ndarray::arr1(&[a[[]], b[[]]]).into_dyn())
    };
    println!("{}", strat.scope(|| strat.run(f))?.map(tensor));
    println!("{}", strat.scope(|| strat.run(f))?.map(tensor));

    // Checkpoints inside a strategy.
    let strat = MirroredStrategy::new(&["cpu:0", "cpu:1"])?;
    let mut g = strat.scope(|| Generator::from_seed(1));
    println!("{}", strat.run(|| normal(&mut g))?.map(tensor));
    let checkpoint = g.state().clone(); // cp.write(filename)
    println!("RNG stream from saving point:");
    println!("{}", strat.run(|| normal(&mut g))?.map(tensor));
    println!("{}", strat.run(|| normal(&mut g))?.map(tensor));
    g.restore(checkpoint.clone())?; // cp.restore(filename)
    println!("RNG stream from restoring point:");
    println!("{}", strat.run(|| normal(&mut g))?.map(tensor));
    println!("{}", strat.run(|| normal(&mut g))?.map(tensor));

    // Restored into a strategy with three replicas.
    let strat2 = MirroredStrategy::new(&["cpu:0", "cpu:1", "cpu:2"])?;
    let mut g2 = strat2.scope(|| Generator::from_seed(1));
    g2.restore(checkpoint)?;
    println!("RNG stream from restoring point:");
    println!("{}", strat2.run(|| normal(&mut g2))?.map(tensor));
    println!("{}", strat2.run(|| normal(&mut g2))?.map(tensor));

    // SavedModel: a module's generator made and saved inside the strategy,
    // loaded outside it.
    let state = |g: &Generator| {
        let words = ndarray::arr1(g.state().words()).into_dyn();
        format!(
            "state: tf.Tensor({}, shape=(3,), dtype=int64)",
            format_array(&words.view())
        )
    };
    let strat = MirroredStrategy::new(&["cpu:0", "cpu:1"])?;
    let mut m = strat.scope(|| Generator::from_seed(0));
    println!("{}", strat.run(|| normal(&mut m))?.map(tensor));
    println!("{}", state(&m));
    let saved = m.state().clone(); // tf.saved_model.save(m, filename)
    println!("RNG stream from saving point:");
    println!("{}", strat.run(|| normal(&mut m))?.map(tensor));
    println!("{}", state(&m));
    println!("{}", strat.run(|| normal(&mut m))?.map(tensor));
    println!("{}", state(&m));

    let mut imported = Generator::from_generator_state(saved); // tf.saved_model.load
    println!("RNG stream from loading point:");
    println!("{}", state(&imported));
    println!("{}", tensor(&normal(&mut imported)?));
    println!("{}", state(&imported));
    // TF 2.21 gives -0.064250775 here; the guide prints -0.06425078.
    println!("{}", tensor(&normal(&mut imported)?));
    println!("{}", state(&imported));
    Ok(())
}
