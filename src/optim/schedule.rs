//! optax's schedules: a learning rate (or any scalar) as a function of the
//! int32 step count.
//!
//! The values are those of the schedule inside a jitted training step:
//! XLA folds the constants (a division by a constant becomes a multiply by
//! its f32 reciprocal, `pi * count / steps` becomes `count * (pi / steps)`)
//! and contracts `a * b + c` into a fused multiply-add, and each formula
//! below does the same (checked against optax 0.2.8 under `jax.jit` in
//! `tests/optim_conformance.rs`). Parameters are `f64`, as Python floats
//! are; JAX rounds them to `f32` where they meet an array.

use std::fmt;
use std::sync::Arc;

use crate::xla::libm_f32;

/// A scalar as a function of the step count (`optax.Schedule`).
///
/// ```
/// use flaxen::optim::warmup_cosine_decay_schedule;
///
/// let lr = warmup_cosine_decay_schedule(0.0, 3e-3, 50, 450, 1e-5);
/// assert_eq!(lr.value(0), 0.0);
/// assert_eq!(lr.value(50), 3e-3);
/// assert!(lr.value(450) < 1.1e-5);
/// ```
#[derive(Clone)]
pub struct Schedule(Arc<dyn Fn(i32) -> f32 + Send + Sync>);

impl Schedule {
    /// A schedule from any function of the count.
    pub fn new(f: impl Fn(i32) -> f32 + Send + Sync + 'static) -> Schedule {
        Schedule(Arc::new(f))
    }

    /// The value at step `count`.
    pub fn value(&self, count: i32) -> f32 {
        (self.0)(count)
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule(0 -> {})", self.value(0))
    }
}

/// A learning rate: a constant or a [`Schedule`] (optax's
/// `ScalarOrSchedule`).
#[derive(Clone, Debug)]
pub enum LearningRate {
    /// The same value at every step.
    Constant(f64),
    /// A function of the step count.
    Schedule(Schedule),
}

impl From<f64> for LearningRate {
    fn from(v: f64) -> LearningRate {
        LearningRate::Constant(v)
    }
}

impl From<Schedule> for LearningRate {
    fn from(s: Schedule) -> LearningRate {
        LearningRate::Schedule(s)
    }
}

/// `optax.constant_schedule(value)`.
pub fn constant_schedule(value: f64) -> Schedule {
    let v = value as f32;
    Schedule::new(move |_| v)
}

/// `optax.linear_schedule(init_value, end_value, transition_steps,
/// transition_begin)`: from `init_value` to `end_value` over
/// `transition_steps` steps after `transition_begin`, constant outside.
/// A non-positive `transition_steps` gives `init_value` throughout, as in
/// optax.
pub fn linear_schedule(
    init_value: f64,
    end_value: f64,
    transition_steps: i32,
    transition_begin: i32,
) -> Schedule {
    if transition_steps <= 0 {
        return constant_schedule(init_value);
    }
    let begin = transition_begin.max(0);
    // (init - end) * (1 - count / steps) + end, as XLA computes it: the
    // division a multiply by 1/steps, both multiply-adds fused.
    let span = (init_value - end_value) as f32;
    let end = end_value as f32;
    let inv = 1.0 / transition_steps as f32;
    Schedule::new(move |count| {
        let c = count.saturating_sub(begin).clamp(0, transition_steps) as f32;
        let frac = (-c).mul_add(inv, 1.0);
        frac.mul_add(span, end)
    })
}

/// `optax.cosine_decay_schedule(init_value, decay_steps, alpha)` (with
/// optax's default `exponent=1`): `init_value * ((1 - alpha) * (1 +
/// cos(pi * min(count, decay_steps) / decay_steps)) / 2 + alpha)`.
///
/// # Panics
///
/// If `decay_steps` is not positive (optax raises a `ValueError`).
pub fn cosine_decay_schedule(init_value: f64, decay_steps: i32, alpha: f64) -> Schedule {
    assert!(
        decay_steps > 0,
        "cosine_decay_schedule requires positive decay_steps, got {decay_steps}"
    );
    // XLA folds pi / decay_steps, and 0.5 * (1 - alpha), into constants.
    let angle = std::f32::consts::PI * (1.0 / decay_steps as f32);
    let half_range = 0.5 * (1.0 - alpha) as f32;
    let alpha = alpha as f32;
    let init = init_value as f32;
    let steps = decay_steps as f32;
    Schedule::new(move |count| {
        let x = (count as f32).min(steps) * angle;
        let (_, cos) = libm_f32::sincosf(x);
        (cos + 1.0).mul_add(half_range, alpha) * init
    })
}

/// `optax.join_schedules(schedules, boundaries)`: `schedules[i + 1]` from
/// `boundaries[i]` on, counting from the boundary.
///
/// # Panics
///
/// If there is not exactly one boundary fewer than schedules.
pub fn join_schedules(schedules: Vec<Schedule>, boundaries: Vec<i32>) -> Schedule {
    assert_eq!(
        schedules.len(),
        boundaries.len() + 1,
        "join_schedules needs one boundary fewer than schedules"
    );
    Schedule::new(move |count| {
        let mut out = schedules[0].value(count);
        for (b, s) in boundaries.iter().zip(&schedules[1..]) {
            if count >= *b {
                out = s.value(count - b);
            }
        }
        out
    })
}

/// `optax.warmup_cosine_decay_schedule(init_value, peak_value,
/// warmup_steps, decay_steps, end_value)`: linear from `init_value` to
/// `peak_value` over `warmup_steps`, then cosine decay to `end_value` at
/// `decay_steps` (counted from 0).
pub fn warmup_cosine_decay_schedule(
    init_value: f64,
    peak_value: f64,
    warmup_steps: i32,
    decay_steps: i32,
    end_value: f64,
) -> Schedule {
    let alpha = if peak_value == 0.0 {
        0.0
    } else {
        end_value / peak_value
    };
    join_schedules(
        vec![
            linear_schedule(init_value, peak_value, warmup_steps, 0),
            cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha),
        ],
        vec![warmup_steps],
    )
}

/// `optax.exponential_decay(init_value, transition_steps, decay_rate,
/// transition_begin, staircase, end_value)`: `init_value * decay_rate ^
/// ((count - begin) / steps)` (the exponent floored with `staircase`),
/// `init_value` until `transition_begin`, bounded by `end_value` if given.
/// A non-positive `transition_steps` or a zero `decay_rate` gives
/// `init_value` throughout, as in optax.
pub fn exponential_decay(
    init_value: f64,
    transition_steps: i32,
    decay_rate: f64,
    transition_begin: i32,
    staircase: bool,
    end_value: Option<f64>,
) -> Schedule {
    if transition_steps <= 0 || decay_rate == 0.0 {
        return constant_schedule(init_value);
    }
    let begin = transition_begin.max(0);
    let (init, rate) = (init_value as f32, decay_rate as f32);
    // XLA: the division by the constant step count is a multiply by its
    // reciprocal; the power is `powf`.
    let inv = 1.0 / transition_steps as f32;
    let end = end_value.map(|e| e as f32);
    Schedule::new(move |count| {
        let decreased = count.saturating_sub(begin);
        let mut p = decreased as f32 * inv;
        if staircase {
            p = p.floor();
        }
        let v = if decreased <= 0 {
            init
        } else {
            init * rate.powf(p)
        };
        match end {
            Some(e) if rate < 1.0 => v.max(e),
            Some(e) => v.min(e),
            None => v,
        }
    })
}

/// `optax.piecewise_constant_schedule(init_value, boundaries_and_scales)`:
/// the value is multiplied by `scale` at each boundary step (boundaries in
/// increasing order), as optax's `v * indicator + (1 - indicator) * scale *
/// v` computes it.
pub fn piecewise_constant_schedule(
    init_value: f64,
    boundaries_and_scales: &[(i32, f64)],
) -> Schedule {
    let mut steps = boundaries_and_scales.to_vec();
    steps.sort_by_key(|&(b, _)| b);
    let init = init_value as f32;
    Schedule::new(move |count| {
        let mut v = init;
        for &(threshold, scale) in &steps {
            // indicator = max(0, sign(threshold - count)): 1 before, 0 after.
            if count >= threshold {
                v *= scale as f32;
            }
        }
        v
    })
}
