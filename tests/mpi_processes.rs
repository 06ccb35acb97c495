//! Meshes over real processes: `mpirun -np N` runs this test binary's
//! `rank` test once per rank (feature `mpi`; OpenMPI on the loopback
//! interface only). Every run is bounded in time: a fault must end the job
//! with an error, never hang it.
#![cfg(feature = "mpi")]

use std::process::Command;
use std::time::{Duration, Instant};

use flaxen::distributed::Cluster;
use flaxen::sharding::{self, shard_map, PartitionSpec};
use flaxen::tensor::Tensor;

/// Runs scenario `name` on `np` ranks; returns the lines the ranks printed
/// (`RESULT ...`), mpirun's success, and how long it took.
fn mpirun(np: usize, name: &str) -> (Vec<String>, bool, Duration) {
    let exe = std::env::current_exe().expect("the test binary");
    let start = Instant::now();
    let out = Command::new("timeout")
        .args(["120", "mpirun", "--oversubscribe"])
        .args(["--mca", "btl", "self,vader,tcp"])
        .args(["--mca", "btl_tcp_if_include", "lo"])
        .args(["--mca", "oob_tcp_if_include", "lo"])
        .args(["-np", &np.to_string()])
        .arg(exe)
        .args(["--exact", "rank", "--nocapture", "--test-threads=1"])
        .env("FLAXEN_MPI_SCENARIO", name)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("mpirun runs (OpenMPI's openmpi-bin is installed)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // (The test harness may print "test rank ... " before a result.)
    let mut lines: Vec<String> = text
        .lines()
        .filter_map(|l| l.find("RESULT ").map(|i| l[i..].to_string()))
        .collect();
    lines.sort();
    (lines, out.status.success(), start.elapsed())
}

/// A rank's part: runs when mpirun starts this binary with a scenario.
#[test]
fn rank() {
    let Ok(scenario) = std::env::var("FLAXEN_MPI_SCENARIO") else {
        return;
    };
    let result = match scenario.as_str() {
        "centered" => centered(),
        "silent" => silent(),
        "failing" => failing(),
        "dies" => dies(),
        "alone" => alone(),
        other => panic!("unknown scenario {other}"),
    };
    match result {
        Ok(line) => println!("RESULT {line}"),
        Err(line) => {
            println!("RESULT {line}");
            // Ends this rank (and so the job) with an error code.
            std::process::exit(3);
        }
    }
}

/// A rank's result line, or its error line.
type RankResult = Result<String, String>;

/// Rank `rank`'s error line.
fn fail(rank: usize, e: flaxen::Error) -> String {
    format!("{rank} error: {e}")
}

/// Joins a job: what a process started outside the launcher's runtime
/// finds.
fn alone() -> RankResult {
    let cluster = Cluster::from_mpi(1).map_err(|e| fail(usize::MAX, e))?;
    Ok(format!(
        "process {} of {}",
        cluster.process_index(),
        cluster.process_count()
    ))
}

/// Rows minus their mean, times the column sums, gathered everywhere: the
/// bits of the result, per rank.
fn centered() -> RankResult {
    let cluster = Cluster::from_mpi_sharing(4).map_err(|e| fail(usize::MAX, e))?;
    let me = cluster.process_index();
    let run = || -> flaxen::Result<String> {
        let mesh = cluster.mesh(&[4], &["data"])?;
        let v: Vec<f32> = (0..24)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let x = Tensor::from_vec(v, &[8, 3])?;
        let f = shard_map(
            |(x,): (Tensor,)| {
                let mean = sharding::pmean(&x.mean(&[0], true)?, "data")?;
                let total = sharding::psum(&x.sum(&[0], true)?, "data")?;
                sharding::all_gather(&x.sub(&mean)?.mul(&total)?, "data", 0, true)
            },
            &mesh,
            [PartitionSpec::new(["data"])],
            PartitionSpec::replicated(),
        );
        let out = f.call((&x,))?.gather()?;
        let bits: Vec<String> = out.iter().map(|v| format!("{:08x}", v.to_bits())).collect();
        Ok(bits.join(""))
    };
    run().map(|b| format!("{me} {b}")).map_err(|e| fail(me, e))
}

/// Rank 1 joins but never reaches the collective: rank 0 times out.
fn silent() -> RankResult {
    let cluster = Cluster::from_mpi_with_timeout(1, Duration::from_secs(2))
        .map_err(|e| fail(usize::MAX, e))?;
    let me = cluster.process_index();
    if me == 1 {
        // Stuck for longer than rank 0's timeout. (mpirun lets it finish
        // before ending the job, even after rank 0 failed.)
        std::thread::sleep(Duration::from_secs(6));
        return Ok("1 slept".into());
    }
    let mesh = cluster
        .mesh(&[cluster.device_count()], &["data"])
        .map_err(|e| fail(me, e))?;
    let f = shard_map(
        |(x,): (Tensor,)| sharding::psum(&x, "data"),
        &mesh,
        [PartitionSpec::new(["data"])],
        PartitionSpec::new(["data"]),
    );
    let x = Tensor::zeros(&[cluster.device_count(), 2]);
    f.call((&x,))
        .map(|_| "0 no error".to_string())
        .map_err(|e| fail(me, e))
}

/// Rank 1 dies (exits without a word) after joining: the job ends with an
/// error within rank 0's timeout, whether mpirun ends rank 0 first or rank
/// 0 times out.
fn dies() -> RankResult {
    let cluster = Cluster::from_mpi_with_timeout(1, Duration::from_secs(5))
        .map_err(|e| fail(usize::MAX, e))?;
    let me = cluster.process_index();
    if me == 1 {
        std::process::exit(4);
    }
    let mesh = cluster.mesh(&[2], &["data"]).map_err(|e| fail(me, e))?;
    let f = shard_map(
        |(x,): (Tensor,)| sharding::psum(&x, "data"),
        &mesh,
        [PartitionSpec::new(["data"])],
        PartitionSpec::new(["data"]),
    );
    let x = Tensor::zeros(&[2, 2]);
    f.call((&x,))
        .map(|_| "0 no error".to_string())
        .map_err(|e| fail(me, e))
}

/// A device of rank 1 fails: rank 0 hears of it at once.
fn failing() -> RankResult {
    let cluster = Cluster::from_mpi_sharing(2).map_err(|e| fail(usize::MAX, e))?;
    let me = cluster.process_index();
    let mesh = cluster.mesh(&[2], &["data"]).map_err(|e| fail(me, e))?;
    let f = shard_map(
        |(x,): (Tensor,)| {
            if sharding::axis_index("data")? == 1 {
                return Err(flaxen::Error::Config {
                    path: String::new(),
                    message: "device 1 gives up".into(),
                });
            }
            sharding::psum(&x, "data")
        },
        &mesh,
        [PartitionSpec::new(["data"])],
        PartitionSpec::new(["data"]),
    );
    let x = Tensor::zeros(&[2, 2]);
    f.call((&x,))
        .map(|_| format!("{me} no error"))
        .map_err(|e| fail(me, e))
}

#[test]
fn one_two_and_four_processes_give_the_same_bits() {
    let mut seen: Option<String> = None;
    for np in [1, 2, 4] {
        let (lines, ok, took) = mpirun(np, "centered");
        assert!(ok, "{np} ranks: {lines:?}");
        assert!(took < Duration::from_secs(60));
        assert_eq!(lines.len(), np, "{lines:?}");
        for l in &lines {
            let bits = l.split(' ').nth(2).expect("rank, bits").to_string();
            match &seen {
                Some(b) => assert_eq!(&bits, b, "{np} ranks"),
                None => seen = Some(bits),
            }
        }
    }
}

#[test]
fn a_silent_rank_is_a_timeout_not_a_hang() {
    let (lines, ok, took) = mpirun(2, "silent");
    assert!(!ok);
    assert!(took < Duration::from_secs(25), "took {took:?}");
    assert!(
        lines.iter().any(
            |l| l.starts_with("RESULT 0 error: process 0: no answer from process 1 within 2 s")
        ),
        "{lines:?}"
    );
}

#[test]
fn a_failing_rank_stops_the_others() {
    let (lines, ok, took) = mpirun(2, "failing");
    assert!(!ok);
    assert!(took < Duration::from_secs(25), "took {took:?}");
    // Rank 1 reports its device's error and rank 0 hears of it. Either may
    // exit first, and mpirun then ends the other before it prints: at least
    // one line is there, and every line there names the failing device.
    assert!(!lines.is_empty(), "no rank reported");
    for l in &lines {
        if l.starts_with("RESULT 0") {
            assert!(
                l.contains("process 1 failed: ") && l.contains("device 1 gives up"),
                "{l}"
            );
        } else {
            assert!(
                l.starts_with("RESULT 1 error: ") && l.contains("device 1 gives up"),
                "{l}"
            );
        }
    }
}

#[test]
fn a_rank_that_dies_ends_the_job_with_an_error() {
    let (lines, ok, took) = mpirun(2, "dies");
    assert!(!ok, "{lines:?}");
    assert!(took < Duration::from_secs(25), "took {took:?}");
    for l in &lines {
        assert!(l.starts_with("RESULT 0 error: "), "{l}");
    }
}

/// A process whose environment says "rank 1 of 2" (as `mpirun` leaves it)
/// but whose MPI runs it alone (here: started without the launcher's
/// runtime; in practice, a program built against another MPI than the
/// launcher's) stops with a typed error naming both views, instead of
/// training a model of its own.
#[test]
fn a_process_mpi_runs_alone_under_a_launcher_is_an_error() {
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new("timeout")
        .arg("60")
        .arg(exe)
        .args(["--exact", "rank", "--nocapture", "--test-threads=1"])
        .env("FLAXEN_MPI_SCENARIO", "alone")
        .env("OMPI_COMM_WORLD_RANK", "1")
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("the test binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("OpenMPI's mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE) started it as rank 1 of 2 processes, but the MPI library sees rank 0 of 1"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
