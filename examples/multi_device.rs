//! The Flax randomness guide, section "Managing RNG's on multiple devices":
//! a model run on a mesh of 8 CPU devices with `jit` shardings (each
//! device computes its rows; the output equals the unsharded run) and with
//! `shard_map` (one split key per device). The guide ran these cells with
//! `flax_fix_rng_separator` on.
//!
//! Run: `cargo run --release --example multi_device`

use flaxen::array_format::format_array_repr;
use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::{Dense, Module};
use flaxen::random::{self, Key, KeyArray};
use flaxen::sharding::{
    self, create_device_mesh, shard_map, visualize_array_sharding, Mesh, NamedSharding,
    PartitionSpec,
};
use flaxen::tensor::Tensor;

struct Model;

impl Module for Model {
    type Input = (Tensor, bool);
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, (x, add_noise): (Tensor, bool)) -> Result<Tensor> {
        let x = s.call(Dense::new(1), x)?;
        // `jnp.where` computes both sides: the key is drawn either way.
        let noise = random::normal(s.make_rng("params")?, x.shape())?;
        if add_noise {
            Ok(x.add(&Tensor::from_array(noise))?)
        } else {
            Ok(x)
        }
    }
}

/// JAX's repr of an unsharded array.
fn repr(x: &Tensor) -> String {
    format!(
        "Array({}, dtype=float32)",
        format_array_repr(&x.view(), "Array(".len())
    )
}

/// `rngs={'params': rng}`, with the separator fix the guide had turned on.
fn rngs(rng: Key) -> Rngs {
    Rngs::from(rng).fix_separator(true)
}

fn main() -> Result<()> {
    // Create a mesh and annotate the axis with a name.
    let device_mesh = create_device_mesh(&[8])?;
    println!("{device_mesh}");

    let mesh = Mesh::new(device_mesh, &["data"])?;
    println!("{mesh}");

    let data_sharding = NamedSharding::new(&mesh, PartitionSpec::new(["data"]))?;
    println!("{data_sharding}");

    let module = Model;
    let [init_rng, apply_rng] = random::split_n(random::key(0));
    let x = Tensor::ones(&[8, 1]);
    let variables = module.init(rngs(init_rng), (x.clone(), false))?;

    let forward = |(variables, x, add_noise, rng): (&Variables, Tensor, bool, Key)| {
        module.apply(variables, (x, add_noise), rngs(rng))
    };

    // shard the inputs x across devices
    // replicate the variables, add_noise boolean and rng key across devices
    // shard the output across devices
    let jit_forward = sharding::jit(
        forward,
        [None, Some(data_sharding.clone()), None, None],
        data_sharding.clone(),
    )?;
    let out = jit_forward.call((&variables, &x, true, &apply_rng))?;
    println!("{out}");
    println!("{}", out.addressable_shards());
    println!("{}", visualize_array_sharding(&out)?);

    let out = jit_forward.call((&variables, &x, false, &apply_rng))?;
    println!("{out}");

    // The un-jitted function gives the same values, unsharded.
    let out = forward((&variables, x.clone(), true, random::clone(&apply_rng)))?;
    println!("{}", repr(&out));
    let out = forward((&variables, x.clone(), false, random::clone(&apply_rng)))?;
    println!("{}", repr(&out));

    // shard_map: each device receives a batch of one key, and indexes it.
    let forward =
        |(variables, x, add_noise, rng_key_batch): (&Variables, Tensor, bool, KeyArray)| {
            let rng = rng_key_batch.get(0).expect("a batch of one key");
            module.apply(variables, (x, add_noise), rngs(rng))
        };
    let data_pspec = PartitionSpec::new(["data"]);
    let no_pspec = PartitionSpec::replicated();
    let shmap_forward = shard_map(
        forward,
        &mesh,
        [
            no_pspec.clone(),
            data_pspec.clone(),
            no_pspec,
            data_pspec.clone(),
        ],
        data_pspec,
    );
    // get 8 different rng's that will be used by the 8 devices
    let apply_rngs = random::split(apply_rng, 8)?;
    let out = shmap_forward.call((&variables, &x, true, &apply_rngs))?;
    println!("{out}");
    println!("{}", out.addressable_shards());
    println!("{}", visualize_array_sharding(&out)?);
    Ok(())
}
