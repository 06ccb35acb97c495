//! What the launcher promised against what the MPI library sees.
//!
//! `mpirun` tells each process its rank and the job's size in the
//! environment before the program starts. If the MPI library the program
//! runs with cannot reach that launcher's runtime (another MPI
//! implementation than the launcher's, say an MPICH build started by
//! OpenMPI's `mpirun`, or a runtime that is missing or broken), MPI starts
//! every process as a job of one of its own: N processes each believing
//! they are rank 0 of 1 would train N separate models and write N
//! checkpoints. This check turns that into an error before any work.

use super::error::DistributedError;

/// The environment variables launchers set: (rank, size) per launcher.
const LAUNCHERS: [(&str, &str, &str); 3] = [
    (
        "OpenMPI's mpirun",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
    ),
    ("a PMI launcher (MPICH, Slurm)", "PMI_RANK", "PMI_SIZE"),
    ("a PMIx launcher", "PMIX_RANK", "PMIX_SIZE"),
];

/// Checks that the rank and size MPI reports (`mpi_rank` of `mpi_size`)
/// are the ones the launcher put in the environment (read with `env`),
/// for every launcher whose variables are there.
///
/// A variable that is missing is not checked (launchers set different
/// ones); one that is not a number is an error, as is any disagreement.
/// The error names this process (MPI's rank), the launcher, and both
/// values.
///
/// ```
/// use flaxen::distributed::{check_launch, DistributedError};
///
/// let env = |name: &str| match name {
///     "OMPI_COMM_WORLD_RANK" => Some("1".to_string()),
///     "OMPI_COMM_WORLD_SIZE" => Some("2".to_string()),
///     _ => None,
/// };
/// assert!(check_launch(env, 1, 2).is_ok());
/// // An MPI library that cannot reach mpirun's runtime starts a job of one.
/// let err = check_launch(env, 0, 1).unwrap_err();
/// assert!(matches!(err, DistributedError::Launch { launcher_size: 2, mpi_size: 1, .. }));
/// ```
pub fn check_launch(
    env: impl Fn(&str) -> Option<String>,
    mpi_rank: usize,
    mpi_size: usize,
) -> Result<(), DistributedError> {
    for (launcher, rank_var, size_var) in LAUNCHERS {
        let read = |var: &str| -> Result<Option<usize>, DistributedError> {
            match env(var) {
                None => Ok(None),
                Some(text) => {
                    text.trim()
                        .parse()
                        .map(Some)
                        .map_err(|_| DistributedError::Transport {
                            process: mpi_rank,
                            message: format!("{var}={text:?} (set by {launcher}) is not a number"),
                        })
                }
            }
        };
        let (rank, size) = (read(rank_var)?, read(size_var)?);
        let size_differs = size.is_some_and(|s| s != mpi_size);
        let rank_differs = rank.is_some_and(|r| r != mpi_rank);
        if size_differs || rank_differs {
            return Err(DistributedError::Launch {
                process: mpi_rank,
                launcher: format!("{launcher} ({rank_var}, {size_var})"),
                launcher_rank: rank,
                launcher_size: size.unwrap_or(mpi_size),
                mpi_rank,
                mpi_size,
            });
        }
    }
    Ok(())
}
