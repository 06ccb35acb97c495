//! What `Remat` costs: a gradient step through 24 scanned residual blocks
//! (the stack of tests/remat_memory.rs) with and without remat, next to
//! the forward pass alone. Remat should cost at most one extra forward
//! pass; the book's "Memory: remat" section has the table.
//!
//! ```text
//! cargo bench --bench remat
//! REMAT_BATCHES=1 cargo bench --bench remat   # median and best of ~10 ms batches
//! ```

use criterion::{criterion_group, Criterion};
use flaxen::core::{value_and_grad, Result, Scope, Variables};
use flaxen::nn::{Dense, Module, Remat, Scan};
use flaxen::random;
use flaxen::tensor::{Tensor, Tree};
use std::hint::black_box;

mod common;
use common::{batch_times, fmt};

const BATCH: usize = 32;
const FEATURES: usize = 16;
const HIDDEN: usize = 256;
const DEPTH: usize = 24;

#[derive(Clone)]
struct Block;

impl Module for Block {
    type Input = (Tensor, ());
    type Output = (Tensor, ());
    fn call(&self, s: &Scope<'_>, (x, _): (Tensor, ())) -> Result<(Tensor, ())> {
        let h = s.call(Dense::new(HIDDEN), x.clone())?.tanh();
        Ok((x.add(&s.call(Dense::new(FEATURES), h)?)?, ()))
    }
}

struct Stack {
    remat: bool,
}

impl Module for Stack {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let out = if self.remat {
            let scan = Scan::new(Remat::new(Block))
                .variable_axes("params", 0)
                .split_rngs("params", true)
                .length(DEPTH);
            s.call_named("blocks", scan, (x, ()))?
        } else {
            let scan = Scan::new(Block)
                .variable_axes("params", 0)
                .split_rngs("params", true)
                .length(DEPTH);
            s.call_named("blocks", scan, (x, ()))?
        };
        Ok(out.0)
    }
}

/// A measured call and its name.
type Call = (&'static str, Box<dyn FnMut()>);

/// The three measured calls: forward, plain gradient step, remat step.
fn calls() -> Vec<Call> {
    let x = Tensor::from_array(random::normal(random::key(1), &[BATCH, FEATURES]).unwrap());
    let params = Stack { remat: false }
        .init(random::key(0), x.clone())
        .unwrap()
        .params();
    let step = move |remat: bool, p: Tree, x: Tensor| {
        move || {
            black_box(
                value_and_grad(
                    |p: &Tree| {
                        let v = Variables::new().with("params", p.clone());
                        Ok(Stack { remat }
                            .apply(&v, x.clone(), ())?
                            .square()
                            .mean_all())
                    },
                    &p,
                )
                .unwrap(),
            );
        }
    };
    let forward = {
        let (p, x) = (params.clone(), x.clone());
        move || {
            let v = Variables::new().with("params", p.clone());
            black_box(Stack { remat: false }.apply(&v, x.clone(), ()).unwrap());
        }
    };
    vec![
        ("forward", Box::new(forward)),
        (
            "grad_plain",
            Box::new(step(false, params.clone(), x.clone())),
        ),
        ("grad_remat", Box::new(step(true, params, x))),
    ]
}

fn remat(c: &mut Criterion) {
    let mut g = c.benchmark_group("remat_stack24");
    for (name, mut f) in calls() {
        g.bench_function(name, |b| b.iter(&mut f));
    }
    g.finish();
}

criterion_group!(benches, remat);

fn main() {
    if std::env::var_os("REMAT_BATCHES").is_some() {
        for (name, f) in calls() {
            let (median, best) = batch_times(f);
            println!(
                "remat_stack24/{name}: median {}, best {}",
                fmt(median),
                fmt(best)
            );
        }
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
