//! Products whose left operand is stored transposed (`a.T @ b`, a dense
//! layer's weight gradient `x^T @ g`) against JAX (jax 0.10.2, CPU), bit
//! for bit, eager, through `vjp` and through a compiled step.
//!
//! XLA hands these to Eigen's contraction, which blocks the terms by the
//! machine's cache sizes and CPU count (see `src/xla/eigen_dot.rs`), so
//! the fixture (tools/oracle/generate_eigen_dots.py) records the machine
//! it was made on, and the comparisons through the public API run where
//! this machine gives the same blocks; elsewhere they say why they did not
//! run. The library's own tests check the recorded bits for the recorded
//! machine on any machine.

mod common;

use common::{differing, hashed_inputs, load_fixture, Expected};
use flaxen::tensor::{jit_value_and_grad, vjp, Tree};
use serde::Deserialize;

#[derive(Deserialize, Debug, PartialEq)]
struct Machine {
    l1d: usize,
    l2: usize,
    l3: usize,
    cpus: usize,
}

#[derive(Deserialize)]
struct Case {
    m: usize,
    k: usize,
    n: usize,
    seeds: [u64; 2],
    y: Expected,
}

#[derive(Deserialize)]
struct Vjp {
    batch: usize,
    #[serde(rename = "in")]
    d_in: usize,
    out: usize,
    seeds: [u64; 3],
    dx: Expected,
    dw: Expected,
}

#[derive(Deserialize)]
struct Fixture {
    machine: Machine,
    cases: Vec<Case>,
    vjps: Vec<Vjp>,
}

/// The size of CPU 0's cache of `level` and `kind` (sysfs), as the oracle
/// script reads it.
fn cache(level: &str, kind: &str) -> Option<usize> {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    std::fs::read_dir(base).ok()?.flatten().find_map(|e| {
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).ok();
        if read("level")?.trim() != level || read("type")?.trim() != kind {
            return None;
        }
        let size = read("size")?;
        let size = size.trim();
        let (digits, unit) = match size.chars().last()? {
            'K' => (&size[..size.len() - 1], 1024),
            'M' => (&size[..size.len() - 1], 1 << 20),
            _ => (size, 1),
        };
        Some(digits.parse::<usize>().ok()? * unit)
    })
}

/// Whether this machine gives Eigen the parameters the fixture was made
/// with (else why not).
fn same_machine(recorded: &Machine) -> Result<(), String> {
    let cpus = ["PJRT_NPROC", "NPROC"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let here = Machine {
        l1d: cache("1", "Data").unwrap_or(0),
        l2: cache("2", "Unified").unwrap_or(0),
        l3: cache("3", "Unified").unwrap_or(0),
        cpus,
    };
    #[cfg(target_arch = "x86_64")]
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let avx512 = false;
    if here != *recorded || !avx512 {
        return Err(format!(
            "recorded on {recorded:?} with AVX-512; this machine is {here:?}, AVX-512 {avx512}"
        ));
    }
    Ok(())
}

#[test]
fn transposed_products_are_bit_exact() {
    let fixture: Fixture = load_fixture("eigen_dots.json");
    if let Err(why) = same_machine(&fixture.machine) {
        eprintln!("not run: {why}");
        return;
    }
    let mut bad = Vec::new();
    for c in &fixture.cases {
        let a = hashed_inputs(&[c.k, c.m], c.seeds[0]);
        let b = hashed_inputs(&[c.k, c.n], c.seeds[1]);
        let y = a.transpose().matmul(&b).unwrap();
        if let Some(diff) = differing(&y, &c.y) {
            bad.push(format!("{}x{}x{}: {diff}", c.m, c.k, c.n));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Dense layers' gradients over large batches: eager `vjp` and a compiled
/// step (loss `sum(x @ w * g)`, whose cotangent of the product is `g`).
#[test]
fn weight_gradients_over_large_batches_are_bit_exact() {
    let fixture: Fixture = load_fixture("eigen_dots.json");
    if let Err(why) = same_machine(&fixture.machine) {
        eprintln!("not run: {why}");
        return;
    }
    for v in &fixture.vjps {
        let [sx, sw, sg] = v.seeds;
        let x = hashed_inputs(&[v.batch, v.d_in], sx);
        let w = hashed_inputs(&[v.d_in, v.out], sw);
        let g = hashed_inputs(&[v.batch, v.out], sg);
        let name = format!("[{}, {}] @ [{}, {}]", v.batch, v.d_in, v.d_in, v.out);
        let params = Tree::new().with("x", x).with("w", w);
        let (_, pullback) = vjp(|p| Ok(p.tensor("x")?.matmul(p.tensor("w")?)?), &params).unwrap();
        let grads = pullback.call(&g).unwrap();
        assert_eq!(
            differing(grads.tensor("x").unwrap(), &v.dx),
            None,
            "{name} dx"
        );
        assert_eq!(
            differing(grads.tensor("w").unwrap(), &v.dw),
            None,
            "{name} dw"
        );
        let mut step = jit_value_and_grad(|p: &Tree| {
            Ok(p.tensor("x")?.matmul(p.tensor("w")?)?.mul(&g)?.sum_all())
        });
        step.call(&params).unwrap();
        let (_, grads) = step.call(&params).unwrap();
        assert!(step.is_compiled());
        assert_eq!(
            differing(grads.tensor("w").unwrap(), &v.dw),
            None,
            "{name} compiled dw"
        );
    }
}
