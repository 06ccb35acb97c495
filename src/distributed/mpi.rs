//! The transport over MPI (feature `mpi`): one process per MPI rank of
//! `MPI_COMM_WORLD`, as `mpirun -np N` starts them.

use std::sync::mpsc;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Threading;

use super::cluster::Cluster;
use super::error::DistributedError;
use super::transport::Transport;

/// A message waiting to be sent: destination, tag, bytes.
type Outgoing = (usize, u32, Vec<u8>);

/// MPI's `MPI_COMM_WORLD` as a [`Transport`]. Sends go through a thread of
/// their own, so that two processes sending each other large messages
/// never wait on each other; receives poll with a deadline, so that a
/// dead peer is a timeout, not a hang. Dropping it finalizes MPI.
pub struct MpiTransport {
    index: usize,
    count: usize,
    outbox: Mutex<Option<mpsc::Sender<Outgoing>>>,
    sender: Mutex<Option<JoinHandle<()>>>,
    // Dropped last: finalizes MPI once the sender thread is done.
    _universe: mpi::environment::Universe,
}

impl std::fmt::Debug for MpiTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiTransport")
            .field("index", &self.index)
            .field("count", &self.count)
            .finish()
    }
}

impl MpiTransport {
    /// Initializes MPI (with `MPI_THREAD_MULTIPLE`: devices are threads,
    /// and any of them may talk to other processes).
    pub fn initialize() -> Result<MpiTransport, DistributedError> {
        let fail = |message: String| DistributedError::Transport {
            process: 0,
            message,
        };
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| fail("MPI is initialized already in this process".into()))?;
        if threading != Threading::Multiple {
            return Err(fail(format!(
                "this MPI library grants {threading:?} threading, flaxen needs Multiple"
            )));
        }
        let world = universe.world();
        let (index, count) = (world.rank() as usize, world.size() as usize);
        super::launch::check_launch(|v| std::env::var(v).ok(), index, count)?;
        let (tx, rx) = mpsc::channel::<Outgoing>();
        let sender = std::thread::Builder::new()
            .name("flaxen-mpi-send".into())
            .spawn(move || {
                let world = SimpleCommunicator::world();
                for (to, tag, bytes) in rx {
                    world
                        .process_at_rank(to as i32)
                        .send_with_tag(&bytes[..], tag as i32);
                }
            })
            .map_err(|e| fail(format!("could not start the sending thread: {e}")))?;
        Ok(MpiTransport {
            index,
            count,
            outbox: Mutex::new(Some(tx)),
            sender: Mutex::new(Some(sender)),
            _universe: universe,
        })
    }
}

impl Drop for MpiTransport {
    fn drop(&mut self) {
        // Let queued sends finish before MPI is finalized.
        drop(self.outbox.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(t) = self.sender.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Transport for MpiTransport {
    fn process_index(&self) -> usize {
        self.index
    }

    fn process_count(&self) -> usize {
        self.count
    }

    fn send(&self, to: usize, tag: u32, bytes: Vec<u8>) -> Result<(), DistributedError> {
        let fail = |message: String| DistributedError::Transport {
            process: self.index,
            message,
        };
        if to >= self.count {
            return Err(fail(format!("no process {to}: there are {}", self.count)));
        }
        let tag = i32::try_from(tag).map_err(|_| fail(format!("tag {tag} too large")))?;
        let outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        outbox
            .as_ref()
            .ok_or_else(|| fail("the transport is shut down".into()))?
            .send((to, tag as u32, bytes))
            .map_err(|_| fail("the sending thread stopped".into()))
    }

    fn recv(
        &self,
        from: usize,
        tag: u32,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, DistributedError> {
        if from >= self.count {
            return Err(DistributedError::Transport {
                process: self.index,
                message: format!("no process {from}: there are {}", self.count),
            });
        }
        let world = SimpleCommunicator::world();
        let peer = world.process_at_rank(from as i32);
        let mut tries = 0u32;
        loop {
            if let Some(m) = peer.immediate_matched_probe_with_tag(tag as i32) {
                let (bytes, _) = m.matched_receive_vec::<u8>();
                return Ok(Some(bytes));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            // Poll eagerly at first (a collective's answer usually comes
            // within microseconds), then sleep so as not to steal a core
            // from the devices.
            tries += 1;
            if tries < 2000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(if tries < 4000 { 20 } else { 500 }));
            }
        }
    }
}

/// Whether an MPI launcher (`mpirun`/`mpiexec` of OpenMPI, MPICH or a
/// PMIx runtime) started this process: it leaves its marks in the
/// environment.
pub fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// The transport of this process: MPI's under a launcher; otherwise a job of
/// one process that does not start MPI at all (so a program built with the
/// feature runs alone where MPI's runtime is missing).
fn transport() -> Result<Box<dyn Transport>, DistributedError> {
    Ok(if launched_by_mpirun() {
        Box::new(MpiTransport::initialize()?)
    } else {
        Box::new(super::transport::ThreadTransport::single())
    })
}

impl Cluster {
    /// Joins the job `mpirun` started (`jax.distributed.initialize()`):
    /// one process per MPI rank, each with `local_devices` devices;
    /// handshakes with every other rank as [`Cluster::new`] does.
    ///
    /// Run without `mpirun`, it is a job of one process, and MPI is not
    /// started.
    pub fn from_mpi(local_devices: usize) -> crate::Result<Cluster> {
        Cluster::new(transport()?, local_devices)
    }

    /// [`Cluster::sharing`] over MPI: `devices` devices in all, shared
    /// equally by the ranks.
    pub fn from_mpi_sharing(devices: usize) -> crate::Result<Cluster> {
        Cluster::sharing(transport()?, devices)
    }

    /// [`Cluster::from_mpi`] with a timeout for peers.
    pub fn from_mpi_with_timeout(
        local_devices: usize,
        timeout: Duration,
    ) -> crate::Result<Cluster> {
        Cluster::with_timeout(transport()?, local_devices, timeout)
    }
}
