//! The processes of a job and their devices (`jax.distributed`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::error::DistributedError;
use super::transport::Transport;
use super::wire::Message;
use crate::error::Result;
use crate::sharding::{Device, DeviceArray, Mesh, MAX_DEVICES};

/// The tag of the cluster's own conversations (handshakes, gathers);
/// collectives use `1 + group`.
pub(crate) const CONTROL_TAG: u32 = 0;

/// How long a process waits for a peer before giving up, unless
/// [`Cluster::with_timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// This process's place in a job of several (`jax.distributed.initialize`):
/// its index, the number of processes, its local devices, and the
/// transport to the others. Cloning is cheap; clones share the transport.
///
/// Every process of the job must make the same calls on its cluster (and on
/// meshes built from it) in the same order, as JAX's multi-process programs
/// do; a process that fails tells the others, and a process that waits
/// longer than the timeout for a peer gives up with
/// [`DistributedError::Timeout`] instead of hanging. After a failure the
/// processes are out of step: later calls fail at once.
#[derive(Clone, Debug)]
pub struct Cluster {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    transport: Box<dyn Transport>,
    local_devices: usize,
    timeout: Duration,
    /// Counts `shard_map` calls; every process counts the same.
    calls: AtomicU64,
    /// Set by the first failure between processes.
    broken: Mutex<Option<String>>,
    /// One control conversation at a time.
    control: Mutex<()>,
}

impl Cluster {
    /// Joins the job over `transport` with `local_devices` devices in this
    /// process, and checks with every other process that they run the same
    /// flaxen version with as many local devices (the handshake).
    pub fn new(transport: impl Transport + 'static, local_devices: usize) -> Result<Cluster> {
        Cluster::with_timeout(transport, local_devices, DEFAULT_TIMEOUT)
    }

    /// Joins the job over `transport` with `devices` devices in all, shared
    /// equally by the processes: fails, naming the counts, when the number
    /// of processes does not divide `devices` (as `mpirun -np 3` for a mesh
    /// of 4).
    pub fn sharing(transport: impl Transport + 'static, devices: usize) -> Result<Cluster> {
        let count = transport.process_count();
        if count == 0 || !devices.is_multiple_of(count) || devices == 0 {
            return Err(DistributedError::MeshSize {
                process: transport.process_index(),
                shape: vec![devices],
                processes: count,
                message: format!(
                    "{count} processes cannot share {devices} devices equally: run a number of \
                     processes that divides {devices}"
                ),
            }
            .into());
        }
        Cluster::new(transport, devices / count)
    }

    /// A job of this process alone, with `local_devices` devices: the same
    /// code as a multi-process job, without a launcher.
    pub fn single(local_devices: usize) -> Result<Cluster> {
        Cluster::new(super::transport::ThreadTransport::single(), local_devices)
    }

    /// [`Cluster::new`], waiting at most `timeout` for any peer.
    pub fn with_timeout(
        transport: impl Transport + 'static,
        local_devices: usize,
        timeout: Duration,
    ) -> Result<Cluster> {
        Cluster::announcing_version(transport, local_devices, timeout, env!("CARGO_PKG_VERSION"))
    }

    /// [`Cluster::with_timeout`], announcing `version` as this process's
    /// flaxen version at the handshake instead of the version it was built
    /// as. A test hook, not API: the threads of [`simulate`](super::simulate)
    /// are all one build, so this is how a test makes one of them pose as a
    /// process built with another flaxen version.
    #[doc(hidden)]
    pub fn announcing_version(
        transport: impl Transport + 'static,
        local_devices: usize,
        timeout: Duration,
        version: &str,
    ) -> Result<Cluster> {
        let process = transport.process_index();
        let count = transport.process_count();
        let total = local_devices.saturating_mul(count);
        if local_devices == 0 || total > MAX_DEVICES {
            return Err(DistributedError::MeshSize {
                process,
                shape: vec![total],
                processes: count,
                message: format!(
                    "each process needs between 1 and {} local devices, process {process} has \
                     {local_devices}",
                    MAX_DEVICES / count.max(1)
                ),
            }
            .into());
        }
        let cluster = Cluster {
            inner: Arc::new(Inner {
                transport: Box::new(transport),
                local_devices,
                timeout,
                calls: AtomicU64::new(0),
                broken: Mutex::new(None),
                control: Mutex::new(()),
            }),
        };
        cluster.check_same("the flaxen version", version)?;
        cluster.check_same("the number of local devices", &local_devices.to_string())?;
        Ok(cluster)
    }

    /// This process's index (`jax.process_index()`).
    pub fn process_index(&self) -> usize {
        self.inner.transport.process_index()
    }

    /// The number of processes (`jax.process_count()`).
    pub fn process_count(&self) -> usize {
        self.inner.transport.process_count()
    }

    /// The devices of this process (`jax.local_device_count()`).
    pub fn local_device_count(&self) -> usize {
        self.inner.local_devices
    }

    /// The devices of the job (`jax.device_count()`).
    pub fn device_count(&self) -> usize {
        self.inner.local_devices * self.process_count()
    }

    /// How long a process waits for a peer.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Every device of the job (`jax.devices()`): process `p` holds devices
    /// `p * local .. (p + 1) * local`.
    pub fn devices(&self) -> Vec<Device> {
        let local = self.inner.local_devices;
        (0..self.device_count())
            .map(|id| Device::on_process(id, id / local))
            .collect()
    }

    /// A mesh over every device of the job, laid out in row-major order
    /// over `shape` (as `create_device_mesh` then `Mesh`); each process
    /// runs its own devices' share of the work on it.
    ///
    /// Fails when `shape` does not hold exactly the job's devices (for
    /// example under `mpirun` with a process count that does not divide
    /// the mesh).
    pub fn mesh(&self, shape: &[usize], axis_names: &[&str]) -> Result<Mesh> {
        let n: Option<usize> = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if n != Some(self.device_count()) {
            return Err(DistributedError::MeshSize {
                process: self.process_index(),
                shape: shape.to_vec(),
                processes: self.process_count(),
                message: format!(
                    "the mesh needs {} devices, the job has {} ({} per process)",
                    n.map_or("too many".to_string(), |n| n.to_string()),
                    self.device_count(),
                    self.inner.local_devices
                ),
            }
            .into());
        }
        let devices = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), self.devices())
            .expect("the count matches the shape");
        Mesh::with_cluster(DeviceArray(devices), axis_names, self.clone())
    }

    /// Checks that every process passes the same `value` for `what` (a
    /// model's parameter shapes, a configuration): otherwise every process
    /// fails with an error naming itself, the first process whose value
    /// differs from its own, and both values.
    pub fn check_same(&self, what: &str, value: &str) -> Result<()> {
        let mine = Message::Value {
            what: what.to_string(),
            value: value.to_string(),
        };
        let all = self.all_gather(mine, &format!("the handshake on {what}"))?;
        for (p, m) in all.iter().enumerate() {
            let theirs = match m {
                Message::Value { what: w, value: v } if w == what => v.clone(),
                other => format!("{other:?}"),
            };
            if theirs != value {
                let (first, second) = (self.process_index().min(p), self.process_index().max(p));
                let (a, b) = if first == p {
                    (theirs, value.to_string())
                } else {
                    (value.to_string(), theirs)
                };
                return Err(self
                    .broke(DistributedError::Mismatch {
                        what: what.to_string(),
                        process: first,
                        value: a,
                        peer: second,
                        peer_value: b,
                    })
                    .into());
            }
        }
        Ok(())
    }

    /// Every process's `bytes`, in process order (`process_allgather` of a
    /// block of bytes).
    pub fn all_gather_bytes(&self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let all = self.all_gather(Message::Blob { bytes }, "a gather of bytes")?;
        all.into_iter()
            .enumerate()
            .map(|(p, m)| match m {
                Message::Blob { bytes } => Ok(bytes),
                other => Err(self
                    .broke(DistributedError::Malformed {
                        peer: p,
                        message: format!("expected a block of bytes, got {other:?}"),
                    })
                    .into()),
            })
            .collect()
    }

    /// Sends `mine` to every other process and receives theirs; the result
    /// holds one message per process, `mine` at this process's index.
    fn all_gather(&self, mine: Message, what: &str) -> Result<Vec<Message>> {
        let _one = self.inner.control.lock().unwrap_or_else(|e| e.into_inner());
        self.check_broken()?;
        let me = self.process_index();
        let bytes = mine.encode();
        for p in (0..self.process_count()).filter(|&p| p != me) {
            self.send(p, CONTROL_TAG, bytes.clone())?;
        }
        (0..self.process_count())
            .map(|p| {
                if p == me {
                    Ok(mine.clone())
                } else {
                    self.recv(p, CONTROL_TAG, what)
                }
            })
            .collect()
    }

    /// Sends to process `to` on `tag`.
    pub(crate) fn send(&self, to: usize, tag: u32, bytes: Vec<u8>) -> Result<()> {
        self.inner
            .transport
            .send(to, tag, bytes)
            .map_err(|e| self.broke(e).into())
    }

    /// The next message from `from` on `tag`, waiting at most the timeout;
    /// `what` says what was waited for in the error.
    pub(crate) fn recv(&self, from: usize, tag: u32, what: &str) -> Result<Message> {
        let deadline = Instant::now() + self.inner.timeout;
        match self.inner.transport.recv(from, tag, deadline) {
            Ok(Some(bytes)) => Message::decode(&bytes, from).map_err(|e| self.broke(e).into()),
            Ok(None) => Err(self
                .broke(DistributedError::Timeout {
                    process: self.process_index(),
                    peer: from,
                    what: what.to_string(),
                    seconds: self.inner.timeout.as_secs_f64(),
                })
                .into()),
            Err(e) => Err(self.broke(e).into()),
        }
    }

    /// The next call's number (each `shard_map` over a mesh of this
    /// cluster is one call).
    pub(crate) fn next_call(&self) -> u64 {
        self.inner.calls.fetch_add(1, Ordering::SeqCst)
    }

    /// Records a failure between processes (later calls fail at once) and
    /// returns it.
    pub(crate) fn broke(&self, e: DistributedError) -> DistributedError {
        let mut b = self.inner.broken.lock().unwrap_or_else(|e| e.into_inner());
        if b.is_none() {
            *b = Some(e.to_string());
        }
        e
    }

    /// Fails if an earlier failure left the processes out of step.
    pub(crate) fn check_broken(&self) -> Result<()> {
        let b = self.inner.broken.lock().unwrap_or_else(|e| e.into_inner());
        match &*b {
            Some(first) => Err(DistributedError::Transport {
                process: self.process_index(),
                message: format!(
                    "an earlier failure left the processes out of step ({first}); start the job \
                     again"
                ),
            }
            .into()),
            None => Ok(()),
        }
    }

    /// Whether two handles are the same cluster.
    pub(crate) fn same(&self, other: &Cluster) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
