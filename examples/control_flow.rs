//! Control flow inside a module: `nn::while_loop` refines a hidden state
//! until it settles, `nn::cond` keeps it or falls back, and `nn::switch`
//! picks one of two heads of different structure by task. The same model
//! in Flax (tools/oracle/control_flow_example.py) prints the same lines,
//! bit for bit (examples/expected/control_flow.txt; CI compares them).
//!
//! Run with `cargo run --release --example control_flow`.

use flaxen::core::lift::WhileConfig;
use flaxen::core::{Result, Scope, Variables};
use flaxen::nn::{self, Dense, Module};
use flaxen::random;
use flaxen::tensor::{Array, Tensor};
use ndarray::{arr0, ArrayD};

// ANCHOR: heads
/// A two-layer head: `Dense(hidden)`, ReLU, `Dense(out)`.
struct Mlp {
    hidden: usize,
    out: usize,
}

impl Module for Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(self.hidden), x)?.relu();
        s.call(Dense::new(self.out), h)
    }
}
// ANCHOR_END: heads

// ANCHOR: model
/// An embedding, a refinement loop, a fallback and a head per task.
struct Adaptive {
    /// Largest change of the state at which the refinement stops.
    tol: f32,
    /// Most refinement steps.
    max_steps: i32,
}

/// A scalar int32 counter.
fn zero() -> Result<Array> {
    Ok(Array::from(arr0(0i32).into_dyn()))
}

/// Adds one to the counter `stats/name`.
fn bump(s: &Scope<'_>, name: &str) -> Result<()> {
    let v = s.variable("stats", name, zero)?;
    let next = v.value().as_i32().expect("int32").map(|c| c + 1);
    v.set(Array::from(next))
}

impl Module for Adaptive {
    type Input = (Tensor, i64);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, task): (Tensor, i64)) -> Result<Tensor> {
        let steps = s.variable("stats", "steps", zero)?;
        s.variable("stats", "settled", zero)?;
        s.variable("stats", "fallbacks", zero)?;
        steps.set(zero()?)?;

        let h0 = s.call_named("embed", Dense::new(4), x)?;
        // One step outside the loop creates core's parameters: a loop body
        // may not create variables.
        let step = |s: &Scope<'_>, h: Tensor| -> Result<Tensor> {
            let update = s.call_named("core", Dense::new(4), h)?;
            Ok(update.mul(&Tensor::scalar(0.5))?.add(&h0)?.tanh())
        };
        let h = step(s, h0.clone())?;

        // ANCHOR_END: model
        // ANCHOR: while_loop
        let config = WhileConfig {
            carry_variables: "stats".into(),
            ..Default::default()
        };
        let (h, delta) = nn::while_loop(
            s,
            |s, (_, delta): &(Tensor, Tensor)| {
                let steps = s.get_value::<Array>("stats", "steps").expect("made above");
                Ok(delta.item()? > self.tol && steps.as_i32().expect("int32")[[]] < self.max_steps)
            },
            |s, (h, _): (Tensor, Tensor)| {
                let new = step(s, h.clone())?;
                let steps = s.get_value::<Array>("stats", "steps").expect("made above");
                let next = steps.as_i32().expect("int32").map(|n| n + 1);
                s.put_variable("stats", "steps", Array::from(next))?;
                let delta = new.sub(&h)?.abs().max(&[0, 1], false)?;
                Ok((new, delta))
            },
            (h, Tensor::scalar(f32::INFINITY)),
            &config,
        )?;
        // ANCHOR_END: while_loop

        // ANCHOR: cond
        let h = nn::cond(
            s,
            delta.item()? <= self.tol,
            |s, (h, _): (Tensor, Tensor)| {
                bump(s, "settled")?;
                Ok(h)
            },
            |s, (_, h0): (Tensor, Tensor)| {
                bump(s, "fallbacks")?;
                Ok(h0)
            },
            (h, h0),
        )?;
        // ANCHOR_END: cond

        // ANCHOR: switch
        let head_0 = |s: &Scope<'_>, h: Tensor| s.call_named("heads_0", Dense::new(3), h);
        let head_1 =
            |s: &Scope<'_>, h: Tensor| s.call_named("heads_1", Mlp { hidden: 8, out: 3 }, h);
        let branches: [nn::Branch<'_, Tensor, Tensor>; 2] = [&head_0, &head_1];
        // Every branch must leave the same variables, so the heads (of
        // different structure) are all created first, as Flax's docstring
        // of `nn.switch` does.
        if s.is_mutable_collection("params") {
            for branch in branches {
                branch(s, h.clone())?;
            }
        }
        nn::switch(s, task, &branches, h)
        // ANCHOR_END: switch
    }
}

/// Rows of floats, each printed with the shortest digits that identify it.
fn rows(t: &Tensor) -> String {
    let a = t.to_array();
    let width = a.shape()[a.ndim() - 1];
    let values: Vec<String> = a.iter().map(|v| v.to_string()).collect();
    let rows: Vec<String> = values
        .chunks(width)
        .map(|r| format!("[{}]", r.join(", ")))
        .collect();
    format!("[{}]", rows.join(", "))
}

/// The three counters of `stats`.
fn counters(stats: &Variables) -> String {
    let get = |name: &str| {
        let a = stats.array(&format!("stats/{name}")).expect("a counter");
        a.as_i32().expect("int32")[[]]
    };
    format!(
        "  steps {}, settled {}, fallbacks {}",
        get("steps"),
        get("settled"),
        get("fallbacks")
    )
}

// ANCHOR: main
fn main() -> Result<()> {
    let x = Tensor::from(ArrayD::from(random::normal(random::key(1), &[2, 5])?));
    let model = Adaptive {
        tol: 1e-4,
        max_steps: 50,
    };
    let variables = model.init(random::key(0), (x.clone(), 0))?;
    let params = Variables::new().with("params", variables.params());
    for (path, p) in params.sorted().flatten() {
        println!("{path}: {:?}", p.shape());
    }
    for task in [0, 1] {
        let (y, stats) = model.apply_mut(&params, (x.clone(), task), (), ["stats"])?;
        println!("task {task}: {}", rows(&y));
        println!("{}", counters(&stats));
    }
    let short = Adaptive {
        max_steps: 3,
        ..model
    };
    let (y, stats) = short.apply_mut(&params, (x, 1), (), ["stats"])?;
    println!("at most 3 steps, task 1: {}", rows(&y));
    println!("{}", counters(&stats));
    Ok(())
}
// ANCHOR_END: main
