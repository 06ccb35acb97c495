//! Data-parallel training over processes: the digits recipe of
//! `train_digits.rs` with each batch of 100 split over a mesh of 4 devices
//! (25 examples each), the gradients averaged across the devices, and the
//! same AdamW step in every process. The devices may live in one process
//! or several: 1 process × 4 devices, 2 × 2 and 4 × 1 print the same lines,
//! bit for bit, because the all-reduce adds the devices' gradients in
//! device order wherever they run.
//!
//! ```text
//! cargo run --release --example data_parallel                 # 1 process
//! cargo run --release --example data_parallel -- --simulate 2 # 2 processes as threads
//! cargo build --release --features mpi --example data_parallel
//! mpirun -np 2 target/release/examples/data_parallel          # 2 processes over MPI
//! ```
//!
//! `--checkpoint PATH` makes process 0 write the trained parameters
//! (Flax's msgpack).

#[allow(dead_code)]
#[path = "train_digits.rs"]
mod train_digits;

use flaxen::core::Variables;
use flaxen::data::{digits, Batches};
use flaxen::distributed::{self, Cluster};
use flaxen::nn::Module;
use flaxen::optim::{adamw, warmup_cosine_decay_schedule, GradientTransformation};
use flaxen::random::{self, Key};
use flaxen::sharding::{self, shard_map, PartitionSpec};
use flaxen::tensor::{Tensor, Tree};
use ndarray::{s, ArrayD, Ix1};
use train_digits::{accuracy, format_g9, loss_and_grads, Mlp, BATCH, EPOCHS, TRAIN};

/// The mesh: 4 devices along one axis, `data`.
const DEVICES: usize = 4;

fn main() -> flaxen::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let checkpoint = flag("--checkpoint");
    if let Some(n) = flag("--simulate") {
        let n: usize = n.parse().map_err(|_| flaxen::Error::Config {
            path: String::new(),
            message: format!("--simulate takes a process count, got {n}"),
        })?;
        let runs = distributed::simulate(n, |t| train(Cluster::sharing(t, DEVICES)?, None));
        return runs.into_iter().collect();
    }
    #[cfg(feature = "mpi")]
    let cluster = Cluster::from_mpi_sharing(DEVICES)?;
    #[cfg(not(feature = "mpi"))]
    let cluster = Cluster::single(DEVICES)?;
    train(cluster, checkpoint)
}

/// The recipe, run by every process of the job; process 0 prints.
fn train(cluster: Cluster, checkpoint: Option<String>) -> flaxen::Result<()> {
    let mesh = cluster.mesh(&[DEVICES], &["data"])?;
    let lead = cluster.process_index() == 0;
    let data = digits::load()?;
    let x = data.images_f32();
    let (x_train, y_train) = (x.slice(s![..TRAIN, ..]), data.labels.slice(s![..TRAIN]));
    let (x_test, y_test) = (
        x.slice(s![TRAIN.., ..]).to_owned(),
        data.labels.slice(s![TRAIN..]).to_owned(),
    );
    let total_steps = (EPOCHS * TRAIN / BATCH) as i32;

    // Every process starts from the same parameters (replicated).
    let [params_key, dropout_key, shuffle_key] = random::split_n(random::key(0));
    let first = Tensor::from_array(x_train.slice(s![..1, ..]).to_owned());
    let mut params = Mlp { train: false }.init(params_key, first)?.params();
    cluster.check_same("the parameter shapes", &shapes(&params))?;
    let tx = adamw(
        warmup_cosine_decay_schedule(0.0, 3e-3, 50, total_steps, 1e-5),
        1e-4,
    );
    let mut opt_state = tx.init(&params)?;

    // The batch and the labels are split over the devices; the parameters
    // and the key are replicated.
    let data_spec = PartitionSpec::new(["data"]);
    let in_specs = [
        data_spec.clone(),
        data_spec,
        PartitionSpec::replicated(),
        PartitionSpec::replicated(),
    ];

    let mut t = 0u32;
    for epoch in 0..EPOCHS {
        let key = random::fold_in(random::clone(&shuffle_key), epoch as u32);
        let mut losses = Vec::new();
        for batch in Batches::shuffled(x_train, y_train, BATCH, key)? {
            let variables = Variables::new().with("params", params.clone());
            let key = random::fold_in(random::clone(&dropout_key), t);
            let x = Tensor::from_array(batch.x);
            let y = batch.y.into_dyn();
            let step = shard_map(
                device_step,
                &mesh,
                in_specs.clone(),
                PartitionSpec::replicated(),
            );
            let packed = step.call((&x, &y, &variables, &key))?.gather()?;
            let (loss, grads) = unpack(&packed, &params)?;
            (params, opt_state) = tx.apply_gradients_owned(&grads, opt_state, params)?;
            losses.push(loss);
            t += 1;
        }
        let mean = losses.iter().fold(0.0f32, |a, &l| a + l) / losses.len() as f32;
        let acc = accuracy(&params, &x_test, &y_test)?;
        if lead {
            println!(
                "epoch {epoch:02}  loss {}  test accuracy {acc:.4}",
                format_g9(mean)
            );
        }
    }
    if let (Some(path), true) = (checkpoint, lead) {
        let bytes = flaxen::serialization::to_bytes(&params)?;
        std::fs::write(&path, bytes).map_err(|e| flaxen::Error::Config {
            path: String::new(),
            message: format!("cannot write {path}: {e}"),
        })?;
        eprintln!("process 0 wrote the parameters to {path}");
    }
    Ok(())
}

/// One device's step: its 25 rows, its own dropout key, and one
/// all-reduce of the loss and every gradient packed in one vector.
fn device_step(
    (x, y, variables, key): (Tensor, ArrayD<i32>, &Variables, Key),
) -> flaxen::Result<Tensor> {
    let device = sharding::axis_index("data")?;
    let key = random::fold_in(key, device as u32);
    let y = y.into_dimensionality::<Ix1>().expect("labels are 1-D");
    let (loss, grads) = loss_and_grads(&variables.params(), x, &y, key)?;
    let mut parts = vec![loss.reshape(&[1])?];
    for g in grads.leaves() {
        parts.push(g.reshape(&[-1])?);
    }
    sharding::pmean(&Tensor::concatenate(&parts, 0)?, "data")
}

/// The loss and the gradients (in the structure of `params`) from the
/// packed vector.
fn unpack(packed: &ArrayD<f32>, params: &Tree) -> flaxen::Result<(f32, Tree)> {
    let v = packed.as_slice().expect("a fresh array is contiguous");
    let mut at = 1;
    let mut leaves = Vec::new();
    for p in params.leaves() {
        let n: usize = p.shape().iter().product();
        leaves.push(Tensor::from_vec(v[at..at + n].to_vec(), p.shape())?);
        at += n;
    }
    Ok((v[0], params.with_leaves(leaves)?))
}

/// The parameters' paths and shapes, which every process must agree on.
fn shapes(params: &Tree) -> String {
    let shapes: Vec<Vec<usize>> = params.leaves().iter().map(|t| t.shape().to_vec()).collect();
    format!("{shapes:?}")
}
