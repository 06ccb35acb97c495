//! JAX's PRNG in flaxen, reproducing the Flax randomness guide
//! ("Randomness and PRNGs in Flax"): how `make_rng` derives its keys, and
//! the six `jax.random.normal` arrays behind `self.param`/`self.variable`.
//!
//! Run: `cargo run --release --example prng_basics`

use flaxen::array_format::format_array;
use flaxen::core::rng_hash::{path_hash, PathElement};
use flaxen::random::{self, Key, RandomError};

/// The guide's `produce_hash(data)`: SHA-1 of the path elements (no
/// separator, Flax's default).
pub fn produce_hash(data: &[PathElement<'_>]) -> u32 {
    path_hash(data, false)
}

pub fn main() -> Result<(), RandomError> {
    // "How self.make_rng works under the hood": the keys of three calls of
    // make_rng('rng_stream') in a root module.
    println!("## make_rng under the hood");
    let stream_seed = random::key(0);
    for call_count in 1..4u64 {
        let hash_int = produce_hash(&[call_count.into()]);
        println!("{}", random::fold_in(random::clone(&stream_seed), hash_int));
    }

    // "Sub-Modules and self.make_rng": paths grow with the module names.
    println!("\n## sub-modules");
    for initial_data in [
        &[][..],
        &["RNGSubModule_0"][..],
        &["RNGSubModule_0", "RNGSubSubModule_0"][..],
    ] {
        let module_name = initial_data.last().copied().unwrap_or("RNGModule");
        for call_count in 1..3u64 {
            let mut data: Vec<PathElement<'_>> = initial_data.iter().map(|&s| s.into()).collect();
            data.push(call_count.into());
            let rng_key = random::fold_in(random::clone(&stream_seed), produce_hash(&data));
            println!("{module_name}, count {call_count}: {rng_key}");
        }
    }

    // "Using self.param and self.variable": the six arrays, reproduced by
    // hand from the stream seeds, the module paths and the call counts.
    println!("\n## param and variable, by hand");
    let params_seed = random::key(0);
    let other_seed = random::key(1);
    let table: [(&[&str], u64, &Key, &[usize]); 6] = [
        (&["Dense_0"], 1, &params_seed, &[2, 2]),
        (&[], 1, &params_seed, &[2, 2]),
        (&[], 2, &params_seed, &[2, 2]),
        (&[], 1, &other_seed, &[2, 2]),
        (&["Dense_1"], 1, &params_seed, &[2, 2]),
        (&["Dense_1"], 2, &params_seed, &[1, 2]),
    ];
    for (initial_data, count, seed, shape) in table {
        let mut data: Vec<PathElement<'_>> = initial_data.iter().map(|&s| s.into()).collect();
        data.push(count.into());
        let rng_key = random::fold_in(random::clone(seed), produce_hash(&data));
        println!("{}", format_array(&random::normal(rng_key, shape)?.view()));
    }

    // "Sharp edge": without a separator, the hash only sees concatenated
    // strings, so these paths collide.
    println!("\n## sharp edge");
    for data in [
        &["A".into(), "B".into(), "C".into(), 1u64.into()][..],
        &["AB".into(), "C".into(), 1u64.into()][..],
        &["A".into(), "BC".into(), 1u64.into()][..],
        &["ABC".into(), 1u64.into()][..],
    ] {
        println!("{}", produce_hash(data));
    }
    Ok(())
}
