//! Timing as the JAX scripts under tools/bench/ time: batches of calls
//! lasting about 10 ms, for at least 3 s; the median and the best batch's
//! time per call (the best is the steadier figure on a shared machine).

use std::time::Instant;

/// Per-call times of `f` in batches of about 10 ms for at least 3 s, as
/// tools/bench/jax_train_step.py times JAX: (median, best) in seconds.
pub fn batch_times(mut f: impl FnMut()) -> (f64, f64) {
    f();
    let start = Instant::now();
    let mut calls = 0u32;
    while start.elapsed().as_secs_f64() < 0.01 {
        f();
        calls += 1;
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < 3.0 || times.len() < 20 {
        let t = Instant::now();
        for _ in 0..calls {
            f();
        }
        times.push(t.elapsed().as_secs_f64() / f64::from(calls));
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[0])
}

/// `t` seconds as the JAX scripts print it.
pub fn fmt(t: f64) -> String {
    if t < 1e-3 {
        format!("{:.2} µs", t * 1e6)
    } else {
        format!("{:.3} ms", t * 1e3)
    }
}
