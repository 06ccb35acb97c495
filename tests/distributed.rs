//! Meshes over several processes, with the processes simulated as threads
//! (`distributed::simulate`): the same bits as one process, and typed
//! errors (never a hang) when processes fail, disagree or stop answering.
//! The same code runs over MPI in `tests/mpi_processes.rs`.

use std::time::{Duration, Instant};

use flaxen::distributed::{process_allgather, simulate, Cluster, DistributedError, Transport};
use flaxen::sharding::{self, create_device_mesh, shard_map, Mesh, PartitionSpec};
use flaxen::tensor::Tensor;
use flaxen::Error;

fn input(rows: usize, cols: usize) -> Tensor {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    Tensor::from_vec(v, &[rows, cols]).unwrap()
}

fn bits(t: &ndarray::ArrayD<f32>) -> Vec<u32> {
    t.iter().map(|v| v.to_bits()).collect()
}

/// Each device's rows minus the mean over all rows, times the sum over
/// the devices' rows: two reductions, then an all_gather that hands every
/// device (so every process) the whole result.
fn centered(mesh: &Mesh, x: &Tensor) -> flaxen::Result<ndarray::ArrayD<f32>> {
    let f = shard_map(
        |(x,): (Tensor,)| {
            let mean = sharding::pmean(&x.mean(&[0], true)?, "data")?;
            let total = sharding::psum(&x.sum(&[0], true)?, "data")?;
            sharding::all_gather(&x.sub(&mean)?.mul(&total)?, "data", 0, true)
        },
        mesh,
        [PartitionSpec::new(["data"])],
        PartitionSpec::replicated(),
    );
    f.call((x,))?.gather()
}

#[test]
fn collectives_over_processes_give_one_process_bits() {
    let x = input(8, 3);
    let one = Mesh::new(create_device_mesh(&[4]).unwrap(), &["data"]).unwrap();
    let reference = centered(&one, &x).unwrap();
    for processes in [1, 2, 4] {
        let results = simulate(processes, |t| {
            let cluster = Cluster::new(t, 4 / processes)?;
            let mesh = cluster.mesh(&[4], &["data"])?;
            assert_eq!(mesh.local_devices().len(), 4 / processes);
            centered(&mesh, &x)
        });
        for r in results {
            assert_eq!(bits(&r.unwrap()), bits(&reference), "{processes} processes");
        }
    }
}

/// A pmean over `axis` of a mesh of `shape` over `processes` processes
/// (0: a single-process mesh); the bits of each process's shards.
fn mean_of_rows(processes: usize, shape: &[usize], names: &[&str], axis: &str) -> Vec<Vec<u32>> {
    let x = input(8, 5);
    let rows = PartitionSpec::new([names[0]]);
    // The result differs along the other axis only.
    let other = if axis == names[0] { names[1] } else { names[0] };
    let run = |mesh: &Mesh| -> flaxen::Result<Vec<u32>> {
        let f = shard_map(
            |(x,): (Tensor,)| sharding::pmean(&x.sum(&[0], false)?, axis),
            mesh,
            [rows.clone()],
            PartitionSpec::new([other]),
        );
        let out = f.call((&x,))?;
        Ok(out
            .addressable_shards()
            .iter()
            .flat_map(|s| bits(&s.data))
            .collect())
    };
    if processes == 0 {
        let mesh = Mesh::new(create_device_mesh(shape).unwrap(), names).unwrap();
        return vec![run(&mesh).unwrap()];
    }
    let n: usize = shape.iter().product();
    simulate(processes, |t| {
        let cluster = Cluster::new(t, n / processes)?;
        run(&cluster.mesh(shape, names)?)
    })
    .into_iter()
    .map(Result::unwrap)
    .collect()
}

#[test]
fn two_axis_meshes_reduce_within_and_across_processes() {
    for axis in ["a", "b"] {
        let one = mean_of_rows(0, &[2, 2], &["a", "b"], axis).remove(0);
        let two = mean_of_rows(2, &[2, 2], &["a", "b"], axis);
        // Process p holds devices 2p, 2p + 1: their shards in order.
        assert_eq!(two.concat(), one, "axis {axis}");
        let four = mean_of_rows(4, &[2, 2], &["a", "b"], axis);
        assert_eq!(four.concat(), one, "axis {axis}");
    }
}

fn distributed(e: &Error) -> &DistributedError {
    match e {
        Error::Distributed(d) => d,
        other => panic!("expected a distributed error, got {other:?}"),
    }
}

#[test]
fn a_failing_device_stops_the_other_processes_at_once() {
    let start = Instant::now();
    let results = simulate(2, |t| {
        let cluster = Cluster::with_timeout(t, 2, Duration::from_secs(30))?;
        let mesh = cluster.mesh(&[4], &["data"])?;
        let f = shard_map(
            |(x,): (Tensor,)| {
                if sharding::axis_index("data")? == 3 {
                    return Err(Error::Config {
                        path: String::new(),
                        message: "device 3 gives up".into(),
                    });
                }
                sharding::psum(&x, "data")
            },
            &mesh,
            [PartitionSpec::new(["data"])],
            PartitionSpec::new(["data"]),
        );
        f.call((&input(4, 2),)).map(|_| ())
    });
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(results[1]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("device 3 gives up"));
    let e = results[0].as_ref().unwrap_err();
    assert!(
        matches!(distributed(e), DistributedError::PeerFailed { peer: 1, message } if message.contains("device 3 gives up")),
        "{e}"
    );
}

#[test]
fn processes_that_call_different_collectives_are_told_which() {
    let results = simulate(2, |t| {
        let cluster = Cluster::with_timeout(t, 1, Duration::from_secs(30))?;
        let mesh = cluster.mesh(&[2], &["data"])?;
        let f = shard_map(
            |(x,): (Tensor,)| {
                if sharding::axis_index("data")? == 1 {
                    sharding::pmean(&x.reshape(&[-1])?, "data")
                } else {
                    sharding::pmean(&x, "data")
                }
            },
            &mesh,
            [PartitionSpec::new(["data"])],
            PartitionSpec::replicated(),
        );
        f.call((&input(2, 3),)).map(|_| ())
    });
    for r in &results {
        let e = r.as_ref().unwrap_err();
        match distributed(e) {
            DistributedError::Mismatch {
                what,
                value,
                peer_value,
                ..
            } => {
                assert!(what.contains("operand shapes"), "{e}");
                let mut v = [value.as_str(), peer_value.as_str()];
                v.sort();
                assert_eq!(v, ["[[1, 3]]", "[[3]]"], "{e}");
            }
            DistributedError::PeerFailed { message, .. } => {
                assert!(message.contains("operand shapes"), "{e}")
            }
            other => panic!("{other}"),
        }
    }
    // And one that returns without reaching a collective the other reached.
    let results = simulate(2, |t| {
        let cluster = Cluster::with_timeout(t, 1, Duration::from_secs(30))?;
        let mesh = cluster.mesh(&[2], &["data"])?;
        let f = shard_map(
            |(x,): (Tensor,)| {
                if sharding::axis_index("data")? == 1 {
                    return Ok(x);
                }
                sharding::psum(&x, "data")
            },
            &mesh,
            [PartitionSpec::new(["data"])],
            PartitionSpec::new(["data"]),
        );
        f.call((&input(2, 3),)).map(|_| ())
    });
    let msg = results[0].as_ref().unwrap_err().to_string();
    assert!(
        msg.contains("process 1's devices returned after 0 collectives"),
        "{msg}"
    );
    let msg = results[1].as_ref().unwrap_err().to_string();
    assert!(msg.contains("reached collective #0"), "{msg}");
}

#[test]
fn a_process_that_never_joins_is_a_timeout() {
    let start = Instant::now();
    let results = simulate(2, |t| {
        if t.process_index() == 1 {
            return Ok(());
        }
        Cluster::with_timeout(t, 1, Duration::from_millis(300)).map(|_| ())
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    let e = results[0].as_ref().unwrap_err();
    assert!(
        matches!(
            distributed(e),
            DistributedError::Timeout {
                process: 0,
                peer: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("within 0.3 s"), "{e}");
}

#[test]
fn handshakes_and_mesh_sizes_are_checked() {
    // Different numbers of local devices.
    let results = simulate(2, |t| {
        let local = 1 + t.process_index();
        Cluster::new(t, local).map(|_| ())
    });
    for r in &results {
        let e = r.as_ref().unwrap_err();
        assert!(
            matches!(distributed(e), DistributedError::Mismatch { what, process: 0, value, peer: 1, peer_value }
                if what == "the number of local devices" && value == "1" && peer_value == "2"),
            "{e}"
        );
    }
    // A model-shape check that differs.
    let results = simulate(2, |t| {
        let me = t.process_index();
        let cluster = Cluster::new(t, 1)?;
        cluster.check_same(
            "parameter shapes",
            if me == 0 { "[3, 4]" } else { "[3, 5]" },
        )
    });
    assert!(results[1]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("process 0 has [3, 4], process 1 has [3, 5]"));
    // Three processes cannot make up a mesh of four devices with equal
    // shares; two processes of two devices cannot make a mesh of 8.
    let results = simulate(2, |t| {
        let cluster = Cluster::new(t, 2)?;
        cluster.mesh(&[8], &["data"]).map(|_| ())
    });
    let e = results[0].as_ref().unwrap_err();
    assert!(
        matches!(distributed(e), DistributedError::MeshSize { .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("the mesh needs 8 devices, the job has 4"),
        "{e}"
    );
    let e = simulate(1, |t| Cluster::new(t, 0).map(|_| ()))
        .remove(0)
        .unwrap_err();
    assert!(
        matches!(distributed(&e), DistributedError::MeshSize { .. }),
        "{e}"
    );
}

/// The `Mismatch` in `e`: what differs, and the two processes with their
/// values.
fn mismatch(e: &Error) -> (&str, usize, &str, usize, &str) {
    match distributed(e) {
        DistributedError::Mismatch {
            what,
            process,
            value,
            peer,
            peer_value,
        } => (what, *process, value, *peer, peer_value),
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[test]
fn a_process_of_another_flaxen_version_fails_the_handshake() {
    // Process 1 poses as another build; both fail at once (no timeout),
    // each naming both processes and both versions.
    let start = Instant::now();
    let results = simulate(2, |t| {
        let timeout = Duration::from_secs(30);
        if t.process_index() == 1 {
            Cluster::announcing_version(t, 2, timeout, "0.0.0-other").map(|_| ())
        } else {
            Cluster::with_timeout(t, 2, timeout).map(|_| ())
        }
    });
    assert!(start.elapsed() < Duration::from_secs(10));
    for r in &results {
        let e = r.as_ref().unwrap_err();
        assert_eq!(
            mismatch(e),
            ("the flaxen version", 0, VERSION, 1, "0.0.0-other"),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "processes disagree on the flaxen version: process 0 has {VERSION}, process 1 \
                 has 0.0.0-other"
            )
        );
    }
    // Of three, the odd one out is named by every process, with whichever
    // other process it is compared to; the version is checked before the
    // device count (which differs too).
    let results = simulate(3, |t| {
        let timeout = Duration::from_secs(30);
        if t.process_index() == 2 {
            Cluster::announcing_version(t, 2, timeout, "9.9.9").map(|_| ())
        } else {
            Cluster::with_timeout(t, 1, timeout).map(|_| ())
        }
    });
    let pairs: Vec<_> = results
        .iter()
        .map(|r| mismatch(r.as_ref().unwrap_err()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("the flaxen version", 0, VERSION, 2, "9.9.9"),
            ("the flaxen version", 1, VERSION, 2, "9.9.9"),
            ("the flaxen version", 0, VERSION, 2, "9.9.9"),
        ]
    );
    // The same version announced through the hook passes.
    let results = simulate(2, |t| {
        Cluster::announcing_version(t, 1, Duration::from_secs(30), VERSION).map(|_| ())
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

#[test]
fn different_local_device_counts_fail_the_handshake() {
    let start = Instant::now();
    let results = simulate(3, |t| {
        let local = if t.process_index() == 1 { 3 } else { 2 };
        Cluster::with_timeout(t, local, Duration::from_secs(30)).map(|_| ())
    });
    assert!(start.elapsed() < Duration::from_secs(10));
    let pairs: Vec<_> = results
        .iter()
        .map(|r| mismatch(r.as_ref().unwrap_err()))
        .collect();
    let what = "the number of local devices";
    assert_eq!(
        pairs,
        [
            (what, 0, "2", 1, "3"),
            (what, 0, "2", 1, "3"),
            (what, 1, "3", 2, "2"),
        ]
    );
    assert_eq!(
        results[2].as_ref().unwrap_err().to_string(),
        "processes disagree on the number of local devices: process 1 has 3, process 2 has 2"
    );
}

#[test]
fn check_same_names_the_processes_and_the_model_shapes() {
    let results = simulate(2, |t| {
        let me = t.process_index();
        let cluster = Cluster::with_timeout(t, 1, Duration::from_secs(30))?;
        // Agreeing is fine.
        cluster.check_same("the optimizer", "adam")?;
        let shapes = if me == 0 {
            "Dense_0/kernel [3, 4]"
        } else {
            "Dense_0/kernel [3, 5]"
        };
        let e = cluster.check_same("parameter shapes", shapes).unwrap_err();
        // The processes are out of step now: a later call fails at once.
        let later = cluster.check_same("the optimizer", "adam").unwrap_err();
        Ok((e, later))
    });
    for r in &results {
        let (e, later) = r.as_ref().unwrap();
        assert_eq!(
            mismatch(e),
            (
                "parameter shapes",
                0,
                "Dense_0/kernel [3, 4]",
                1,
                "Dense_0/kernel [3, 5]"
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "processes disagree on parameter shapes: process 0 has Dense_0/kernel [3, 4], \
             process 1 has Dense_0/kernel [3, 5]"
        );
        assert!(
            matches!(distributed(later), DistributedError::Transport { .. })
                && later.to_string().contains("out of step"),
            "{later}"
        );
    }
}

#[test]
fn a_process_count_that_does_not_divide_the_devices_is_refused() {
    // `mpirun -np 3` for 4 devices: refused by every process before any
    // message is sent.
    let results = simulate(3, |t| Cluster::sharing(t, 4).map(|_| ()));
    for (i, r) in results.iter().enumerate() {
        let e = r.as_ref().unwrap_err();
        assert!(
            matches!(
                distributed(e),
                DistributedError::MeshSize { process, shape, processes: 3, .. }
                    if shape == &[4] && *process == i
            ),
            "{e}"
        );
        assert!(e.to_string().contains(&format!("process {i}: ")), "{e}");
        assert!(
            e.to_string()
                .contains("3 processes cannot share 4 devices equally"),
            "{e}"
        );
    }
    // Zero devices cannot be shared either.
    let e = simulate(2, |t| Cluster::sharing(t, 0).map(|_| ()))
        .remove(0)
        .unwrap_err();
    assert!(
        matches!(
            distributed(&e),
            DistributedError::MeshSize { processes: 2, .. }
        ),
        "{e}"
    );
    // A count that divides gives each process its share.
    let locals = simulate(2, |t| Ok(Cluster::sharing(t, 4)?.local_device_count()));
    assert_eq!(
        locals.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        [2, 2]
    );
    // Three processes of one device each cannot make up a mesh of four.
    let results = simulate(3, |t| {
        let cluster = Cluster::with_timeout(t, 1, Duration::from_secs(30))?;
        cluster.mesh(&[2, 2], &["a", "b"]).map(|_| ())
    });
    for (i, r) in results.iter().enumerate() {
        let e = r.as_ref().unwrap_err();
        assert!(
            matches!(
                distributed(e),
                DistributedError::MeshSize { process, shape, processes: 3, .. }
                    if shape == &[2, 2] && *process == i
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("the mesh needs 4 devices, the job has 3 (1 per process)"),
            "{e}"
        );
    }
}

#[test]
fn sharded_arrays_know_which_shards_are_local() {
    let results = simulate(2, |t| {
        let cluster = Cluster::new(t, 2)?;
        let mesh = cluster.mesh(&[4], &["data"])?;
        let s = sharding::NamedSharding::new(&mesh, PartitionSpec::new(["data"]))?;
        let x = sharding::random::normal(flaxen::random::key(0), &[8, 2], &s)?;
        let ids: Vec<usize> = x
            .addressable_shards()
            .iter()
            .map(|s| s.device.id())
            .collect();
        let whole = flaxen::random::normal(flaxen::random::key(0), &[8, 2])?;
        // Each process computed exactly its rows of the unsharded array.
        for shard in x.addressable_shards().iter() {
            let r = shard.index[0].clone().unwrap();
            let rows = whole.slice(ndarray::s![r, ..]).to_owned().into_dyn();
            assert_eq!(bits(&shard.data), bits(&rows));
        }
        assert!(!x.is_fully_addressable());
        let e = x.gather().unwrap_err();
        // Every process can have it whole.
        assert_eq!(bits(&process_allgather(&x)?), bits(&whole));
        Ok((ids, e.to_string()))
    });
    let (ids0, e0) = results[0].as_ref().unwrap();
    let (ids1, _) = results[1].as_ref().unwrap();
    assert_eq!(
        (ids0.as_slice(), ids1.as_slice()),
        (&[0, 1][..], &[2, 3][..])
    );
    assert!(e0.contains("held only by process 1"), "{e0}");
}

/// What `mpirun` put in the environment against what MPI reports: every
/// launcher's variables are checked when present, and a disagreement or a
/// garbled variable is a typed error naming the process and both values.
#[test]
fn launch_environment_is_checked_against_mpi() {
    use flaxen::distributed::check_launch;
    let env_of = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    };
    // No launcher at all, and launchers that agree.
    assert_eq!(check_launch(env_of(&[]), 0, 1), Ok(()));
    let ompi = env_of(&[("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "4")]);
    assert_eq!(check_launch(ompi, 3, 4), Ok(()));
    // A PMI launcher (MPICH's hydra, Slurm) whose job MPI cannot see.
    let pmi = env_of(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")]);
    match check_launch(pmi, 0, 1) {
        Err(DistributedError::Launch {
            process: 0,
            launcher_rank: Some(2),
            launcher_size: 4,
            mpi_rank: 0,
            mpi_size: 1,
            launcher,
        }) => assert!(launcher.contains("PMI_SIZE"), "{launcher}"),
        other => panic!("{other:?}"),
    }
    // Same size, another rank: still a mismatch.
    let e = check_launch(ompi, 1, 4).unwrap_err();
    assert!(e.to_string().contains("rank 3 of 4"), "{e}");
    assert!(e.to_string().contains("rank 1 of 4"), "{e}");
    // PMIx sets only a rank.
    let pmix = env_of(&[("PMIX_RANK", "1")]);
    assert!(matches!(
        check_launch(pmix, 0, 1),
        Err(DistributedError::Launch {
            launcher_rank: Some(1),
            launcher_size: 1,
            ..
        })
    ));
    assert_eq!(check_launch(pmix, 1, 2), Ok(()));
    // A variable that is not a number.
    let garbled = env_of(&[("OMPI_COMM_WORLD_SIZE", "two")]);
    let e = check_launch(garbled, 0, 2).unwrap_err();
    assert!(
        matches!(e, DistributedError::Transport { process: 0, .. })
            && e.to_string().contains("\"two\""),
        "{e}"
    );
}
