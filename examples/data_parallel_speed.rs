//! How data-parallel training scales with processes: a 64-512-512-10 MLP's
//! training step (forward, backward, one all-reduce of the gradients, SGD)
//! on a global batch split over one device per process, timed.
//!
//! ```text
//! cargo build --release --features mpi --example data_parallel_speed
//! target/release/examples/data_parallel_speed                 # 1 process
//! mpirun -np 2 target/release/examples/data_parallel_speed    # 2 processes
//! ```
//!
//! Options: `--batch B` (global, default 2048), `--steps N` (default 10),
//! `--local-devices D` (default 1).

use std::time::Instant;

use flaxen::core::{Result, Scope, Variables};
use flaxen::distributed::Cluster;
use flaxen::nn::{Dense, Module};
use flaxen::random;
use flaxen::sharding::{self, shard_map, PartitionSpec};
use flaxen::tensor::{value_and_grad, Tensor, Tree};

struct Mlp;

impl Module for Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(512), x)?.relu();
        let x = s.call(Dense::new(512), x)?.relu();
        s.call(Dense::new(10), x)
    }
}

fn main() -> flaxen::Result<()> {
    // An eager step over large arrays: keep glibc from giving them back to
    // the system and faulting them in again at every step.
    flaxen::memory::keep_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (batch, steps, local) = (
        flag("--batch", 2048),
        flag("--steps", 10),
        flag("--local-devices", 1),
    );
    #[cfg(feature = "mpi")]
    let cluster = Cluster::from_mpi(local)?;
    #[cfg(not(feature = "mpi"))]
    let cluster = Cluster::single(local)?;
    let devices = cluster.device_count();
    let mesh = cluster.mesh(&[devices], &["data"])?;

    let [data_key, init_key] = random::split_n(random::key(0));
    let x = Tensor::from_array(random::normal(data_key, &[batch, 64])?);
    let mut params = Mlp.init(init_key, Tensor::zeros(&[1, 64]))?.params();
    let data = PartitionSpec::new(["data"]);
    let mut times = Vec::new();
    for step in 0..steps + 2 {
        let variables = Variables::new().with("params", params.clone());
        let start = Instant::now();
        let f = shard_map(
            device_step,
            &mesh,
            [data.clone(), PartitionSpec::replicated()],
            PartitionSpec::replicated(),
        );
        let packed = f.call((&x, &variables))?.gather()?;
        params = sgd(&params, packed.as_slice().expect("contiguous"))?;
        // The first two steps warm up (threads, buffers).
        if step >= 2 {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    if cluster.process_index() == 0 {
        println!(
            "processes {}, devices {devices}, global batch {batch}: {:.2} steps/s (median step \
             {:.1} ms)",
            cluster.process_count(),
            1.0 / median,
            median * 1e3
        );
    }
    Ok(())
}

/// One device's step: the gradients of a squared loss on its rows, then one
/// all-reduce (mean over the devices) of all of them packed in a vector.
fn device_step((x, variables): (Tensor, &Variables)) -> flaxen::Result<Tensor> {
    let (_, grads) = value_and_grad(
        |p: &Tree| {
            let v = Variables::new().with("params", p.clone());
            let y = Mlp.apply(&v, x.clone(), ())?;
            Ok(y.square().mean_all())
        },
        &variables.params(),
    )?;
    let parts = grads
        .leaves()
        .iter()
        .map(|g| g.reshape(&[-1]))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    sharding::pmean(&Tensor::concatenate(&parts, 0)?, "data")
}

/// `params - 0.01 * grads`, the gradients read from the packed vector.
fn sgd(params: &Tree, packed: &[f32]) -> flaxen::Result<Tree> {
    let mut at = 0;
    let mut leaves = Vec::new();
    for p in params.leaves() {
        let n: usize = p.shape().iter().product();
        let g = Tensor::from_vec(packed[at..at + n].to_vec(), p.shape())?;
        leaves.push(p.sub(&(&g * 0.01))?);
        at += n;
    }
    Ok(params.with_leaves(leaves)?)
}
