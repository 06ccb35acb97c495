use super::*;

/// The machine tests/fixtures/eigen_dots.json was recorded on, and its
/// cases `(m, k, n, seeds, expected)`.
#[allow(clippy::type_complexity)]
fn fixture() -> (
    Machine,
    Vec<((usize, usize, usize), [u64; 2], serde_json::Value)>,
) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/eigen_dots.json"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    let num = |v: &serde_json::Value| v.as_u64().expect("a number") as usize;
    let mc = &json["machine"];
    let machine = Machine {
        l1: num(&mc["l1d"]),
        l2: num(&mc["l2"]),
        l3: num(&mc["l3"]),
        threads: num(&mc["cpus"]),
    };
    let cases = json["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let seeds = [
                c["seeds"][0].as_u64().unwrap(),
                c["seeds"][1].as_u64().unwrap(),
            ];
            (
                (num(&c["m"]), num(&c["k"]), num(&c["n"])),
                seeds,
                c["y"].clone(),
            )
        })
        .collect();
    (machine, cases)
}

/// generate_matmul.py's `inputs`: mixed magnitudes from integer hashes.
fn inputs(len: usize, seed: u64) -> Vec<f32> {
    (0..len as u64)
        .map(|j| {
            let h = (j * 2654435761 + seed * 40503) % (1 << 32);
            let e = ((j * 40503 + seed * 2654435761) >> 7) % 13;
            let u = h as f64 / 4294967296.0 * 4.0 - 2.0;
            (u * 2f64.powi(e as i32 - 6)) as f32
        })
        .collect()
}

/// Whether `got` has the expected bits (a list of u32, or a SHA-1 digest
/// of the little-endian bits as fixture_io.expected writes it).
fn matches(got: &[f32], want: &serde_json::Value) -> bool {
    use sha1::{Digest, Sha1};
    if let Some(bits) = want.as_array() {
        return bits.len() == got.len()
            && bits
                .iter()
                .zip(got)
                .all(|(w, g)| w.as_u64() == Some(u64::from(g.to_bits())));
    }
    let mut sha = Sha1::new();
    for v in got {
        sha.update(v.to_bits().to_le_bytes());
    }
    let hex: String = sha.finalize().iter().map(|b| format!("{b:02x}")).collect();
    want["n"].as_u64() == Some(got.len() as u64) && want["sha1"].as_str() == Some(hex.as_str())
}

/// JAX's `a.T @ b` on the fixture's machine, bit for bit: each case planned
/// for that machine (whatever this one is) and run by the blocked kernels,
/// the left operand read through its strides as `Tensor::matmul` reads a
/// transposed view.
#[test]
fn transposed_products_match_jax_on_the_recorded_machine() {
    let (machine, cases) = fixture();
    for ((m, k, n), [sa_seed, sb_seed], want) in cases {
        let (a, b) = (inputs(k * m, sa_seed), inputs(k * n, sb_seed));
        let mut out = vec![0.0; m * n];
        // As `Tensor::matmul` runs it: a plan (one range: a chain per
        // output, as every plain plan sums), or Eigen's blocks.
        let plan = match eigen_run(m, k, n, &machine) {
            Some(EigenRun::Plan(plan)) => Some(plan),
            Some(EigenRun::Blocks(blocks)) => {
                sum_blocks(
                    &a,
                    (1, m),
                    &b,
                    (n, 1),
                    (m, k, n),
                    &blocks,
                    &mut out,
                    &mut Vec::new(),
                );
                None
            }
            None if matches!(summation(m, k, n, &machine), Summation::Chunks(c) if c.len() == 1) => {
                Some(DotPlan::chain(k, n))
            }
            None => panic!("{m}x{k}x{n}: not Eigen's"),
        };
        if let Some(plan) = &plan {
            planned_matmul(
                &a,
                (1, m),
                &b,
                (n, 1),
                (m, k, n),
                plan,
                &mut out,
                &mut Vec::new(),
            );
        }
        assert!(matches(&out, &want), "{m}x{k}x{n} differs from JAX");
    }
}

/// The structures Eigen gave on the 2-CPU Xeon (L1d 48 KiB, L2 2 MiB, L3
/// 260 MiB) and with its pool cut to one thread (`NPROC=1`), each checked
/// against JAX's bits (`tools/oracle/generate_eigen_dots.py` and the
/// probes it grew from).
#[test]
fn summations_of_the_measured_machine() {
    let two = Machine {
        l1: 48 * 1024,
        l2: 2 << 20,
        l3: 260 << 20,
        threads: 2,
    };
    let one = Machine { threads: 1, ..two };
    let chunks = |kc: usize, k: usize| {
        Summation::Chunks((0..k).step_by(kc).map(|s| (s, (s + kc).min(k))).collect())
    };
    for (m, k, n, kc) in [
        (64, 700, 512, 240),
        (64, 1500, 256, 304),
        (128, 2048, 256, 296),
        (64, 4096, 512, 320),
        (512, 1000, 512, 256),
        (10, 321, 512, 160),
        (64, 200, 128, 200),
    ] {
        assert_eq!(summation(m, k, n, &two), chunks(kc, k), "{m}x{k}x{n}");
    }
    // One thread: blocks of up to 608 terms, oneDNN halving those past 384.
    assert_eq!(summation(64, 700, 512, &one), chunks(352, 700));
    // Six blocks of 592 in halves of 296, the last of 544 in halves of 272.
    let mut halves: Vec<(usize, usize)> = (0..12).map(|i| (i * 296, (i + 1) * 296)).collect();
    halves.extend([(3552, 3824), (3824, 4096)]);
    let three = summation(3, 4096, 5, &two);
    assert_eq!(uniform_chunk(&halves), None);
    assert_eq!(three, Summation::Chunks(halves));
    // Small outputs over many terms: one range per thread.
    assert_eq!(
        summation(512, 200, 10, &two),
        Summation::InnerDim(vec![vec![(0, 104)], vec![(104, 200)]])
    );
    // XLA's own emitter.
    assert_eq!(summation(3, 8192, 3, &two), Summation::Emitter);
    assert_eq!(summation(1, 4096, 512, &two), Summation::Emitter);
}

/// This machine's cache sizes as sysfs gives them (where it has them).
#[test]
fn reads_this_machines_caches() {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache/index0");
    if !base.exists() {
        return;
    }
    let machine = Machine::current();
    assert_eq!(Some(machine.l1), cache_size(1, "Data"));
    assert!(
        machine.l1 >= 1024 && machine.l2 >= machine.l1,
        "{machine:?}"
    );
    assert!(machine.threads >= 1);
}
