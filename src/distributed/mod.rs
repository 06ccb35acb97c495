//! Several processes, one mesh (`jax.distributed`): each process of a job
//! contributes its local devices to a global [`Mesh`](crate::sharding::Mesh),
//! runs their share of a `shard_map`, and the collectives inside
//! (`psum`, `pmean`, `all_gather`, `BatchNorm`'s statistics) reach the
//! devices of the other processes.
//!
//! - [`Cluster`]: this process in the job: `process_index`,
//!   `process_count`, its devices, a handshake ([`Cluster::check_same`]),
//!   and [`Cluster::mesh`].
//! - [`process_allgather`]: a sharded array whole in every process.
//! - [`Transport`]: how processes talk. With the cargo feature `mpi`,
//!   `Cluster::from_mpi` runs over MPI (OpenMPI under `mpirun`);
//!   [`simulate`] runs a job's processes as threads of one, for tests.
//!
//! Collectives reduce the operands of every device of the group in device
//! order, wherever the devices run: a data-parallel step gives the same
//! bits on 1 process of 4 devices, 2 of 2 and 4 of 1. A peer that dies or
//! never answers is an error after [`Cluster::timeout`], not a hang; a peer
//! that fails tells the others, and processes that call different
//! collectives (or pass different shapes) are told which and how.

mod cluster;
mod error;
mod gather;
pub(crate) mod group;
mod launch;
#[cfg(feature = "mpi")]
mod mpi;
mod transport;
mod wire;

pub use cluster::{Cluster, DEFAULT_TIMEOUT};
pub use error::DistributedError;
pub use gather::process_allgather;
pub use launch::check_launch;
#[cfg(feature = "mpi")]
pub use mpi::{launched_by_mpirun, MpiTransport};
pub use transport::{simulate, ThreadTransport, Transport};
