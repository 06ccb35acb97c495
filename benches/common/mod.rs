//! Timing as the JAX scripts under tools/bench/ time: batches of calls
//! lasting about 10 ms, for at least 3 s; the median and the best batch's
//! time per call (the best is the steadier figure on a shared machine).

use std::time::Instant;

/// Per-call times of `f` in batches of about 10 ms for at least 3 s, as
/// tools/bench/jax_train_step.py times JAX: (median, best) in seconds.
pub fn batch_times(mut f: impl FnMut()) -> (f64, f64) {
    let calls = calls_per_batch(&mut f);
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

/// How many calls of `f` (after a first one) take about 10 ms.
fn calls_per_batch(mut f: impl FnMut()) -> u32 {
    f();
    let start = Instant::now();
    let mut calls = 0u32;
    while start.elapsed().as_secs_f64() < 0.01 {
        f();
        calls += 1;
    }
    calls.max(1)
}

/// `t` seconds as the JAX scripts print it.
pub fn fmt(t: f64) -> String {
    if t < 1e-3 {
        format!("{:.2} µs", t * 1e6)
    } else {
        format!("{:.3} ms", t * 1e3)
    }
}

/// The CPU time of all the process's threads so far, in seconds (Linux:
/// the on-CPU nanoseconds of `/proc/self/task/*/schedstat`; 0 elsewhere),
/// as tools/bench/jax_train_step.py's `cpu_seconds` reads it.
#[allow(dead_code)]
pub fn cpu_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 * 1e-9
}

/// Per-call times of several functions timed in alternation: after each
/// is calibrated to batches of about 10 ms, rounds of one batch of each
/// run for at least `3 s × fs.len()`, so a drift of the machine (another
/// process, the CPU's clock) falls on all of them alike. Returns each
/// function's (median, best) per-call time in seconds and, for each
/// round, every function's per-call time (for ratios taken within a
/// round).
#[allow(dead_code)]
pub fn interleaved_batch_times(fs: &mut [&mut dyn FnMut()]) -> (Vec<(f64, f64)>, Vec<Vec<f64>>) {
    let calls: Vec<u32> = fs.iter_mut().map(calls_per_batch).collect();
    let mut rounds: Vec<Vec<f64>> = Vec::new();
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < 3.0 * fs.len() as f64 || rounds.len() < 20 {
        let round = fs
            .iter_mut()
            .zip(&calls)
            .map(|(f, &n)| {
                let t = Instant::now();
                for _ in 0..n {
                    f();
                }
                t.elapsed().as_secs_f64() / f64::from(n)
            })
            .collect();
        rounds.push(round);
    }
    let stats = (0..fs.len())
        .map(|i| {
            let mut times: Vec<f64> = rounds.iter().map(|r| r[i]).collect();
            times.sort_by(f64::total_cmp);
            (times[times.len() / 2], times[0])
        })
        .collect();
    (stats, rounds)
}
