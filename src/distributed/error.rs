//! What can go wrong between processes.

use std::fmt;

/// A failure of work spread over several processes, naming the processes
/// and the values involved.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum DistributedError {
    /// A peer did not answer in time: it died, never joined, or is stuck.
    Timeout {
        /// This process.
        process: usize,
        /// The process waited for.
        peer: usize,
        /// What was waited for.
        what: String,
        /// How long, in seconds.
        seconds: f64,
    },
    /// Another process failed and told this one.
    PeerFailed {
        /// The process that failed.
        peer: usize,
        /// Its error.
        message: String,
    },
    /// Processes disagree: different versions, device counts or model
    /// shapes at the handshake, or different collective calls.
    Mismatch {
        /// What differs.
        what: String,
        /// The first process and its value.
        process: usize,
        /// Its value.
        value: String,
        /// The other process.
        peer: usize,
        /// The other's value.
        peer_value: String,
    },
    /// A global mesh that the processes' devices cannot make up.
    MeshSize {
        /// The process that found it (each process checks on its own).
        process: usize,
        /// The mesh shape asked for.
        shape: Vec<usize>,
        /// The number of processes.
        processes: usize,
        /// What is wrong.
        message: String,
    },
    /// A message from a peer that cannot be read (truncated or corrupt).
    Malformed {
        /// The sender.
        peer: usize,
        /// What is wrong.
        message: String,
    },
    /// The launcher (`mpirun`) started this process as one rank of a job,
    /// but the MPI library sees another job: it cannot reach the launcher's
    /// runtime (another MPI implementation, or its runtime is missing), so
    /// each process would run alone.
    Launch {
        /// This process (the rank MPI gave it).
        process: usize,
        /// Which launcher, and the variables it set.
        launcher: String,
        /// The rank the launcher gave this process, if it said.
        launcher_rank: Option<usize>,
        /// The job size the launcher started.
        launcher_size: usize,
        /// The rank MPI reports.
        mpi_rank: usize,
        /// The job size MPI reports.
        mpi_size: usize,
    },
    /// The transport itself failed (MPI could not start, a send failed),
    /// or an earlier failure left the processes out of step.
    Transport {
        /// This process.
        process: usize,
        /// What happened.
        message: String,
    },
}

impl fmt::Display for DistributedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DistributedError::Timeout {
                process,
                peer,
                what,
                seconds,
            } => write!(
                f,
                "process {process}: no answer from process {peer} within {seconds} s while \
                 waiting for {what} (it died, never joined, or is stuck)"
            ),
            DistributedError::PeerFailed { peer, message } => {
                write!(f, "process {peer} failed: {message}")
            }
            DistributedError::Mismatch {
                what,
                process,
                value,
                peer,
                peer_value,
            } => write!(
                f,
                "processes disagree on {what}: process {process} has {value}, process {peer} \
                 has {peer_value}"
            ),
            DistributedError::MeshSize {
                process,
                shape,
                processes,
                message,
            } => write!(
                f,
                "process {process}: a mesh of shape {shape:?} over {processes} processes: \
                 {message}"
            ),
            DistributedError::Malformed { peer, message } => {
                write!(f, "unreadable message from process {peer}: {message}")
            }
            DistributedError::Launch {
                process,
                launcher,
                launcher_rank,
                launcher_size,
                mpi_rank,
                mpi_size,
            } => {
                let rank = launcher_rank.map_or(String::new(), |r| format!(" as rank {r}"));
                write!(
                    f,
                    "process {process}: {launcher} started it{rank} of {launcher_size} \
                     processes, but the MPI library sees rank {mpi_rank} of {mpi_size}: it \
                     cannot reach the launcher's runtime (a program built against another MPI \
                     than the launcher's, or MPI's runtime missing)"
                )
            }
            DistributedError::Transport { process, message } => {
                write!(f, "process {process}: {message}")
            }
        }
    }
}

impl std::error::Error for DistributedError {}
