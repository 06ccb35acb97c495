//! Meshes, shardings and sharded arrays: JAX's printed forms (from the Flax
//! guide, `002_8dddc161bbb0d8fb.txt`, "Managing RNG's on multiple devices")
//! and sharded sampling equal to the unsharded arrays.

use flaxen::random::{self, Float, Key, RandomError, ThreefryMode, UInt};
use flaxen::sharding::{
    self, create_device_mesh, device_put, visualize_array_sharding, Mesh, NamedSharding,
    PartitionSpec, ShardingError,
};
use flaxen::Error;
use ndarray::ArrayD;

fn mesh(shape: &[usize], names: &[&str]) -> Mesh {
    Mesh::new(create_device_mesh(shape).unwrap(), names).unwrap()
}

/// The guide's three prints.
#[test]
fn guide_mesh_prints() {
    let device_mesh = create_device_mesh(&[8]).unwrap();
    assert_eq!(
        device_mesh.to_string(),
        "[CpuDevice(id=0) CpuDevice(id=1) CpuDevice(id=2) CpuDevice(id=3)\n \
         CpuDevice(id=4) CpuDevice(id=5) CpuDevice(id=6) CpuDevice(id=7)]"
    );
    let mesh = Mesh::new(device_mesh, &["data"]).unwrap();
    assert_eq!(
        mesh.to_string(),
        "Mesh(device_ids=array([0, 1, 2, 3, 4, 5, 6, 7]), axis_names=('data',))"
    );
    let data_sharding = NamedSharding::new(&mesh, PartitionSpec::new(["data"])).unwrap();
    assert_eq!(
        data_sharding.to_string(),
        "NamedSharding(mesh=Mesh('data': 8), spec=PartitionSpec('data',))"
    );
}

/// The guide's shard listing and picture for an (8, 1) array over 8
/// devices (values from the guide's `out` with noise).
#[test]
fn guide_shard_listing_and_picture() {
    let values = [
        -2.2187614f32,
        -2.8055234,
        -2.5464187,
        1.0270392,
        -3.5243359,
        -2.2795477,
        -0.6504516,
        0.17373264,
    ];
    let m = mesh(&[8], &["data"]);
    let s = NamedSharding::new(&m, PartitionSpec::new(["data"])).unwrap();
    let x = ArrayD::from_shape_vec(vec![8, 1], values.to_vec()).unwrap();
    let out = device_put(&x, &s).unwrap();
    let expected = "[Shard(device=CpuDevice(id=0), index=(slice(0, 1, None), slice(None, None, None)), replica_id=0, data=[[-2.2187614]]),
 Shard(device=CpuDevice(id=1), index=(slice(1, 2, None), slice(None, None, None)), replica_id=0, data=[[-2.8055234]]),
 Shard(device=CpuDevice(id=2), index=(slice(2, 3, None), slice(None, None, None)), replica_id=0, data=[[-2.5464187]]),
 Shard(device=CpuDevice(id=3), index=(slice(3, 4, None), slice(None, None, None)), replica_id=0, data=[[1.0270392]]),
 Shard(device=CpuDevice(id=4), index=(slice(4, 5, None), slice(None, None, None)), replica_id=0, data=[[-3.5243359]]),
 Shard(device=CpuDevice(id=5), index=(slice(5, 6, None), slice(None, None, None)), replica_id=0, data=[[-2.2795477]]),
 Shard(device=CpuDevice(id=6), index=(slice(6, 7, None), slice(None, None, None)), replica_id=0, data=[[-0.6504516]]),
 Shard(device=CpuDevice(id=7), index=(slice(7, 8, None), slice(None, None, None)), replica_id=0, data=[[0.17373264]])]";
    assert_eq!(out.addressable_shards().to_string(), expected);
    let picture: Vec<String> = (0..8)
        .flat_map(|i| [format!("  CPU {i}  "), "         ".to_string()])
        .collect();
    assert_eq!(visualize_array_sharding(&out).unwrap(), picture.join("\n"));
    assert_eq!(
        out.to_string(),
        "Array([[-2.2187614 ],\n       [-2.8055234 ],\n       [-2.5464187 ],\n       [ 1.0270392 ],\n       \
         [-3.5243359 ],\n       [-2.2795477 ],\n       [-0.6504516 ],\n       [ 0.17373264]], dtype=float32)"
    );
}

/// Replicas: a 2x2 mesh with rows split over "x" only; the "y" devices
/// hold copies (replica ids 0 and 1).
#[test]
fn replicas_and_two_d_meshes() {
    let m = mesh(&[2, 2], &["x", "y"]);
    assert_eq!(
        m.to_string(),
        "Mesh(device_ids=array([[0, 1],\n       [2, 3]]), axis_names=('x', 'y'))"
    );
    let s = NamedSharding::new(&m, PartitionSpec::new(["x"])).unwrap();
    let x = ArrayD::from_shape_vec(vec![4, 3], (0..12).map(|v| v as f32).collect()).unwrap();
    let a = device_put(&x, &s).unwrap();
    let ids: Vec<(usize, usize, Vec<usize>)> = a
        .addressable_shards()
        .iter()
        .map(|sh| (sh.device.id(), sh.replica_id, sh.data.shape().to_vec()))
        .collect();
    assert_eq!(
        ids,
        vec![
            (0, 0, vec![2, 3]),
            (1, 1, vec![2, 3]),
            (2, 0, vec![2, 3]),
            (3, 1, vec![2, 3])
        ]
    );
    assert_eq!(a.gather().unwrap(), x);
    assert_eq!(
        visualize_array_sharding(&a).unwrap(),
        "  CPU 0,1  \n           \n  CPU 2,3  \n           "
    );
    // Both axes for one dimension, major first.
    let s = NamedSharding::new(&m, PartitionSpec::new([["y", "x"]])).unwrap();
    assert_eq!(s.spec().to_string(), "PartitionSpec(('y', 'x'),)");
    let a = device_put(&x, &s).unwrap();
    let starts: Vec<usize> = a
        .addressable_shards()
        .iter()
        .map(|sh| sh.index[0].clone().unwrap().start)
        .collect();
    // Device (x, y) holds block y * 2 + x.
    assert_eq!(starts, vec![0, 2, 1, 3]);
    assert_eq!(a.gather().unwrap(), x);
}

/// `sharding::random::bits_as::<U>` gathers to `random::bits_as::<U>`.
fn typed_bits_equal_unsharded<U: UInt>(key: &Key, shape: &[usize], s: &NamedSharding, at: &str) {
    let a = sharding::random::bits_as::<U>(key.clone(), shape, s).unwrap();
    assert_eq!(
        a.gather().unwrap(),
        random::bits_as::<U>(key.clone(), shape).unwrap(),
        "bits_as::<{}> {at}",
        std::any::type_name::<U>()
    );
}

/// Every typed float sampler of `sharding::random` (`*_as::<T>`) gathers
/// to its unsharded counterpart, bit for bit; `lo < hi` are the range and
/// truncation bounds, `p` the Bernoulli probability.
fn typed_floats_equal_unsharded<T: Float + Into<f64>>(
    key: &Key,
    shape: &[usize],
    s: &NamedSharding,
    lo: T,
    hi: T,
    p: T,
    at: &str,
) {
    let k = || key.clone();
    let dtype = std::any::type_name::<T>();
    // Compared as the bits of the exact widening to f64: -0.0 is not 0.0,
    // and a NaN equals the same NaN.
    let bits = |a: ArrayD<T>| a.mapv(|v| v.into().to_bits());
    for (name, a, b) in [
        (
            "uniform_as",
            sharding::random::uniform_as::<T>(k(), shape, s),
            random::uniform_as::<T>(k(), shape),
        ),
        (
            "uniform_range_as",
            sharding::random::uniform_range_as::<T>(k(), shape, lo, hi, s),
            random::uniform_range_as::<T>(k(), shape, lo, hi),
        ),
        (
            "normal_as",
            sharding::random::normal_as::<T>(k(), shape, s),
            random::normal_as::<T>(k(), shape),
        ),
        (
            "truncated_normal_as",
            sharding::random::truncated_normal_as::<T>(k(), lo, hi, shape, s),
            random::truncated_normal_as::<T>(k(), lo, hi, shape),
        ),
        (
            "gumbel_as",
            sharding::random::gumbel_as::<T>(k(), shape, s),
            random::gumbel_as::<T>(k(), shape),
        ),
        (
            "exponential_as",
            sharding::random::exponential_as::<T>(k(), shape, s),
            random::exponential_as::<T>(k(), shape),
        ),
    ] {
        assert_eq!(
            bits(a.unwrap().gather().unwrap()),
            bits(b.unwrap()),
            "{name}::<{dtype}> {at}"
        );
    }
    assert_eq!(
        sharding::random::bernoulli_as::<T>(k(), p, shape, s)
            .unwrap()
            .gather()
            .unwrap(),
        random::bernoulli_as::<T>(k(), p, shape).unwrap(),
        "bernoulli_as::<{dtype}> {at}"
    );
}

/// Every sharded sampler gathers to the unsharded array, over many shapes,
/// meshes, 1-D and 2-D specs and both Threefry modes.
#[test]
fn sharded_sampling_equals_unsharded() {
    let meshes = [
        mesh(&[1], &["d"]),
        mesh(&[2], &["d"]),
        mesh(&[8], &["d"]),
        mesh(&[2, 3], &["a", "b"]),
        mesh(&[4, 2], &["a", "b"]),
    ];
    let shapes: [&[usize]; 6] = [&[24], &[24, 1], &[48, 6], &[12, 5, 4], &[0, 6], &[8, 3000]];
    let mut checked = 0;
    for mode in [ThreefryMode::Partitionable, ThreefryMode::NonPartitionable] {
        let key = random::key(7).with_mode(mode);
        for m in &meshes {
            let names: Vec<&str> = m.axis_names().iter().map(String::as_str).collect();
            let mut specs = vec![PartitionSpec::replicated(), PartitionSpec::new([names[0]])];
            if names.len() == 2 {
                specs.push(PartitionSpec::new([names[1], names[0]]));
                specs.push(PartitionSpec::new([Some(names[1]), None]));
                specs.push(PartitionSpec::new([names]));
            } else {
                specs.push(PartitionSpec::new([None, Some(names[0])]));
            }
            for shape in shapes {
                for spec in &specs {
                    let s = NamedSharding::new(m, spec.clone()).unwrap();
                    if s.check(shape, "test").is_err() {
                        continue;
                    }
                    let k = || key.clone();
                    assert_eq!(
                        sharding::random::normal(k(), shape, &s)
                            .unwrap()
                            .gather()
                            .unwrap(),
                        random::normal(k(), shape).unwrap(),
                        "normal {mode:?} {shape:?} {spec} over {}",
                        m.short()
                    );
                    assert_eq!(
                        sharding::random::bits(k(), shape, &s)
                            .unwrap()
                            .gather()
                            .unwrap(),
                        random::bits(k(), shape).unwrap()
                    );
                    assert_eq!(
                        sharding::random::randint(k(), shape, -3, 1000, &s)
                            .unwrap()
                            .gather()
                            .unwrap(),
                        random::randint(k(), shape, -3, 1000).unwrap()
                    );
                    assert_eq!(
                        sharding::random::bernoulli(k(), 0.3, shape, &s)
                            .unwrap()
                            .gather()
                            .unwrap(),
                        random::bernoulli(k(), 0.3, shape).unwrap()
                    );
                    let at = format!("{mode:?} {shape:?} {spec} over {}", m.short());
                    typed_bits_equal_unsharded::<u8>(&key, shape, &s, &at);
                    typed_bits_equal_unsharded::<u16>(&key, shape, &s, &at);
                    typed_bits_equal_unsharded::<u32>(&key, shape, &s, &at);
                    typed_bits_equal_unsharded::<u64>(&key, shape, &s, &at);
                    let f16 = half::f16::from_f32;
                    let bf16 = half::bf16::from_f32;
                    let (lo, hi, p) = (f16(-1.5), f16(2.0), f16(0.3));
                    typed_floats_equal_unsharded(&key, shape, &s, lo, hi, p, &at);
                    let (lo, hi, p) = (bf16(-1.5), bf16(2.0), bf16(0.3));
                    typed_floats_equal_unsharded(&key, shape, &s, lo, hi, p, &at);
                    typed_floats_equal_unsharded(&key, shape, &s, -1.5f32, 2.0, 0.3, &at);
                    typed_floats_equal_unsharded(&key, shape, &s, -1.5f64, 2.0, 0.3, &at);
                    for (a, b) in [
                        (
                            sharding::random::uniform(k(), shape, &s),
                            random::uniform(k(), shape),
                        ),
                        (
                            sharding::random::uniform_range(k(), shape, -2.0, 3.0, &s),
                            random::uniform_range(k(), shape, -2.0, 3.0),
                        ),
                        (
                            sharding::random::truncated_normal(k(), -1.0, 2.0, shape, &s),
                            random::truncated_normal(k(), -1.0, 2.0, shape),
                        ),
                        (
                            sharding::random::gumbel(k(), shape, &s),
                            random::gumbel(k(), shape),
                        ),
                        (
                            sharding::random::exponential(k(), shape, &s),
                            random::exponential(k(), shape),
                        ),
                    ] {
                        assert_eq!(a.unwrap().gather().unwrap(), b.unwrap());
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 80, "{checked} cases");
}

/// Each device draws only its own block: the draw on a device is the
/// size of its shard, not of the whole array.
#[test]
fn devices_draw_only_their_block() {
    let m = mesh(&[8], &["d"]);
    let s = NamedSharding::new(&m, PartitionSpec::new(["d"])).unwrap();
    let a = sharding::random::normal(random::key(0), &[8, 1 << 16], &s).unwrap();
    for sh in a.addressable_shards().iter() {
        assert_eq!(sh.data.len(), 1 << 16);
    }
}

#[test]
fn bad_meshes_and_specs_are_typed_errors() {
    let sharding_err = |e: Error| match e {
        Error::Sharding(s) => s,
        other => panic!("not a sharding error: {other:?}"),
    };
    assert_eq!(
        sharding_err(create_device_mesh(&[0, 4]).unwrap_err()),
        ShardingError::EmptyMesh { shape: vec![0, 4] }
    );
    assert!(matches!(
        sharding_err(create_device_mesh(&[]).unwrap_err()),
        ShardingError::EmptyMesh { .. }
    ));
    assert!(matches!(
        sharding_err(create_device_mesh(&[1 << 40, 1 << 40]).unwrap_err()),
        ShardingError::EmptyMesh { .. }
    ));
    assert!(matches!(
        sharding_err(create_device_mesh(&[1 << 20]).unwrap_err()),
        ShardingError::OutOfRange { .. }
    ));
    let e = Mesh::new(create_device_mesh(&[2, 2]).unwrap(), &["a"]).unwrap_err();
    assert!(e.to_string().contains("1 names for 2 axes"), "{e}");
    let e = Mesh::new(create_device_mesh(&[2, 2]).unwrap(), &["a", "a"]).unwrap_err();
    assert!(e.to_string().contains("\"a\" is used twice"), "{e}");
    let m = mesh(&[2, 2], &["a", "b"]);
    assert_eq!(
        sharding_err(NamedSharding::new(&m, PartitionSpec::new(["c"])).unwrap_err()),
        ShardingError::UnknownAxis {
            name: "c".into(),
            axis_names: vec!["a".into(), "b".into()]
        }
    );
    assert!(matches!(
        sharding_err(NamedSharding::new(&m, PartitionSpec::new(["a", "a"])).unwrap_err()),
        ShardingError::AxisUsedTwice { .. }
    ));
    let s = NamedSharding::new(&m, PartitionSpec::new(["a", "b"])).unwrap();
    let e = sharding_err(sharding::random::normal(random::key(0), &[3, 2], &s).unwrap_err());
    assert_eq!(
        e,
        ShardingError::Indivisible {
            what: "normal".into(),
            shape: vec![3, 2],
            dim: 0,
            pieces: 2,
            spec: "PartitionSpec('a', 'b')".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "normal: PartitionSpec('a', 'b') cuts dimension 0 of shape [3, 2] into 2 pieces, but \
         its size 3 is not divisible by 2"
    );
    assert!(matches!(
        sharding_err(device_put(&ArrayD::<f32>::zeros(vec![4]), &s).unwrap_err()),
        ShardingError::SpecRank { .. }
    ));
    // The typed samplers: the spec is checked first, with the sampler's
    // JAX name; then their arguments, as the unsharded samplers check them.
    let e = sharding::random::truncated_normal_as(random::key(0), -1.0f64, 1.0, &[3, 2], &s);
    assert!(matches!(
        sharding_err(e.unwrap_err()),
        ShardingError::Indivisible { what, .. } if what == "truncated_normal"
    ));
    let random_err = |e: Error| match e {
        Error::Random { source, .. } => source,
        other => panic!("not a random error: {other:?}"),
    };
    let k = || random::key(0);
    let bf = half::bf16::from_f32;
    assert_eq!(
        random_err(
            sharding::random::truncated_normal_as(k(), bf(2.0), bf(1.0), &[4, 2], &s).unwrap_err()
        ),
        random::truncated_normal_as(k(), bf(2.0), bf(1.0), &[4, 2]).unwrap_err()
    );
    assert_eq!(
        random_err(sharding::random::uniform_range_as(k(), &[4, 2], 1.0f32, 1.0, &s).unwrap_err()),
        RandomError::EmptyRange {
            function: "uniform",
            low: "1".into(),
            high: "1".into()
        }
    );
    assert_eq!(
        random_err(
            sharding::random::bernoulli_as(k(), half::f16::from_f32(1.5), &[4, 2], &s).unwrap_err()
        ),
        RandomError::Probability {
            function: "bernoulli",
            p: 1.5
        }
    );
    // A huge global shape is the sampler's typed error, per device.
    let s = NamedSharding::new(&m, PartitionSpec::new(["a"])).unwrap();
    let e = sharding::random::normal(random::key(0), &[2, 1 << 62, 8], &s).unwrap_err();
    assert!(matches!(e, Error::Random { .. }), "{e:?}");
    for e in [
        sharding::random::gumbel_as::<f64>(random::key(0), &[2, 1 << 62, 8], &s).unwrap_err(),
        sharding::random::exponential_as::<half::f16>(random::key(0), &[2, 1 << 62, 8], &s)
            .unwrap_err(),
    ] {
        assert!(
            matches!(
                e,
                Error::Random {
                    source: RandomError::ShapeOverflow { .. },
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

mod guide_model {
    use flaxen::core::{Result, Rngs, Scope, Variables};
    use flaxen::nn::{Dense, Module};
    use flaxen::random::{self, Key, KeyArray};
    use flaxen::sharding::{self, shard_map, NamedSharding, PartitionSpec};
    use flaxen::tensor::Tensor;

    /// The guide's model: `Dense(1)`, plus noise from the `params` stream.
    pub struct Model;

    impl Module for Model {
        type Input = (Tensor, bool);
        type Output = Tensor;

        fn call(&self, s: &Scope<'_>, (x, add_noise): (Tensor, bool)) -> Result<Tensor> {
            let x = s.call(Dense::new(1), x)?;
            let noise = random::normal(s.make_rng("params")?, x.shape())?;
            if add_noise {
                Ok(x.add(&Tensor::from_array(noise))?)
            } else {
                Ok(x)
            }
        }
    }

    fn rngs(rng: Key) -> Rngs {
        Rngs::from(rng).fix_separator(true)
    }

    /// The guide's `jit` and `shard_map` outputs, on 8 devices.
    #[test]
    fn guide_jit_and_shard_map_outputs() {
        let mesh = super::mesh(&[8], &["data"]);
        let data = NamedSharding::new(&mesh, PartitionSpec::new(["data"])).unwrap();
        let [init_rng, apply_rng] = random::split_n(random::key(0));
        let x = Tensor::ones(&[8, 1]);
        let variables = Model.init(rngs(init_rng), (x.clone(), false)).unwrap();
        let forward = |(v, x, add_noise, rng): (&Variables, Tensor, bool, Key)| {
            Model.apply(v, (x, add_noise), rngs(rng))
        };
        let jit_forward = sharding::jit(
            forward,
            [None, Some(data.clone()), None, None],
            data.clone(),
        )
        .unwrap();
        let noisy = [
            -2.2187614f32,
            -2.8055234,
            -2.5464187,
            1.0270392,
            -3.5243359,
            -2.2795477,
            -0.6504516,
            0.17373264,
        ];
        let out = jit_forward
            .call((&variables, &x, true, &apply_rng))
            .unwrap();
        assert_eq!(out.gather().unwrap().into_raw_vec_and_offset().0, noisy);
        for (k, shard) in out.addressable_shards().iter().enumerate() {
            assert_eq!(shard.device.id(), k);
            assert_eq!(shard.data.shape(), &[1, 1]);
        }
        let out = jit_forward
            .call((&variables, &x, false, &apply_rng))
            .unwrap();
        assert_eq!(
            out.gather().unwrap().into_raw_vec_and_offset().0,
            [-1.2839764f32; 8]
        );
        // Unsharded, the same numbers (the guide's point).
        let plain = forward((&variables, x.clone(), true, random::clone(&apply_rng))).unwrap();
        assert_eq!(plain.to_vec(), noisy);

        let forward = |(v, x, add_noise, keys): (&Variables, Tensor, bool, KeyArray)| {
            assert_eq!(keys.shape(), &[1], "a batch of one key per device");
            Model.apply(v, (x, add_noise), rngs(keys.get(0).unwrap()))
        };
        let p = PartitionSpec::new(["data"]);
        let r = PartitionSpec::replicated();
        let shmap_forward = shard_map(
            forward,
            &mesh,
            [r.clone(), p.clone(), r, p.clone()],
            p.clone(),
        );
        let apply_rngs = random::split(apply_rng, 8).unwrap();
        let out = shmap_forward
            .call((&variables, &x, true, &apply_rngs))
            .unwrap();
        assert_eq!(
            out.gather().unwrap().into_raw_vec_and_offset().0,
            [
                -1.2605132f32,
                -1.2405176,
                -0.99350417,
                -1.0277128,
                -1.4154483,
                -0.3905797,
                -2.417677,
                0.9023453
            ]
        );
    }

    /// jit's data-parallel contract, on other meshes and batch sizes: the
    /// output (with Dropout-like noise) equals the unsharded call.
    #[test]
    fn jit_equals_unsharded_for_other_batches() {
        // (More devices than cores run merged, a group of devices per core:
        // 6, 12 and 16 devices on a 2-core machine.)
        for (devices, batch) in [(1, 4), (2, 6), (4, 8), (3, 9), (6, 12), (12, 24), (16, 48)] {
            let mesh = super::mesh(&[devices], &["d"]);
            let data = NamedSharding::new(&mesh, PartitionSpec::new(["d"])).unwrap();
            let x = Tensor::from_array(random::normal(random::key(3), &[batch, 5]).unwrap());
            let variables = Model
                .init(rngs(random::key(1)), (x.clone(), false))
                .unwrap();
            let forward =
                |(v, x, rng): (&Variables, Tensor, Key)| Model.apply(v, (x, true), rngs(rng));
            let jitted = sharding::jit(forward, [None, Some(data.clone()), None], data).unwrap();
            let out = jitted.call((&variables, &x, &random::key(9))).unwrap();
            let plain = forward((&variables, x.clone(), random::key(9))).unwrap();
            assert_eq!(
                out.gather().unwrap().into_raw_vec_and_offset().0,
                plain.to_vec()
            );
            // Every device holds its own rows.
            let rows: Vec<usize> = out
                .addressable_shards()
                .iter()
                .map(|s| s.index[0].clone().unwrap().start)
                .collect();
            let per = batch / devices;
            assert_eq!(rows, (0..devices).map(|k| k * per).collect::<Vec<_>>());
        }
    }

    /// `jit` has no named axes, as in JAX: a collective inside is an
    /// unbound-axis error, whatever the number of devices.
    #[test]
    fn jit_has_no_named_axes() {
        for devices in [2, 8] {
            let mesh = super::mesh(&[devices], &["d"]);
            let data = NamedSharding::new(&mesh, PartitionSpec::new(["d"])).unwrap();
            let f = |(x,): (Tensor,)| sharding::psum(&x, "d");
            let jitted = sharding::jit(f, [Some(data.clone())], data).unwrap();
            let x = Tensor::zeros(&[devices, 2]);
            let e = jitted.call((&x,)).unwrap_err().to_string();
            assert!(e.contains("unbound axis name \"d\""), "{e}");
        }
    }
}

mod collectives {
    use flaxen::core::{Result, Scope};
    use flaxen::nn::Module;
    use flaxen::sharding::{self, shard_map, PartitionSpec};
    use flaxen::tensor::Tensor;
    use flaxen::Error;

    fn rows(n: usize) -> Tensor {
        Tensor::from_vec((0..n).map(|v| (v * v) as f32 * 0.1).collect(), &[n, 1]).unwrap()
    }

    #[test]
    fn psum_pmean_all_gather_axis_index() {
        let mesh = super::mesh(&[4], &["d"]);
        let p = PartitionSpec::new(["d"]);
        let x = rows(8);
        let sum = shard_map(
            |(x,): (Tensor,)| sharding::psum(&x.sum(&[0], true)?, "d"),
            &mesh,
            [p.clone()],
            PartitionSpec::replicated(),
        );
        let out = sum.call((&x,)).unwrap();
        // Device order: the per-device sums added 0 + 1 + 2 + 3.
        let v = x.to_vec();
        let parts: Vec<f32> = (0..4).map(|k| v[2 * k] + v[2 * k + 1]).collect();
        let expected = ((parts[0] + parts[1]) + parts[2]) + parts[3];
        assert_eq!(
            out.gather().unwrap().into_raw_vec_and_offset().0,
            [expected]
        );

        let idx = shard_map(
            |(x,): (Tensor,)| {
                let i = sharding::axis_index("d")? as f32;
                Ok(x.mul(&Tensor::scalar(0.0))?.add(&Tensor::scalar(i))?)
            },
            &mesh,
            [p.clone()],
            p.clone(),
        );
        assert_eq!(
            idx.call((&x,))
                .unwrap()
                .gather()
                .unwrap()
                .into_raw_vec_and_offset()
                .0,
            [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
        );

        // all_gather, stacked and tiled: every device sees all rows.
        let gather = shard_map(
            |(x,): (Tensor,)| {
                let stacked = sharding::all_gather(&x, "d", 0, false)?;
                assert_eq!(stacked.shape(), &[4, 2, 1]);
                let tiled = sharding::all_gather(&x, "d", 0, true)?;
                assert_eq!(tiled.shape(), &[8, 1]);
                Ok(tiled)
            },
            &mesh,
            [p.clone()],
            PartitionSpec::replicated(),
        );
        assert_eq!(
            gather
                .call((&x,))
                .unwrap()
                .gather()
                .unwrap()
                .into_raw_vec_and_offset()
                .0,
            v
        );

        // Over one axis of a 2-D mesh: groups along "b" only.
        let mesh2 = super::mesh(&[2, 2], &["a", "b"]);
        let ab = PartitionSpec::new([["a", "b"]]);
        let mean_b = shard_map(
            |(x,): (Tensor,)| sharding::pmean(&x, "b"),
            &mesh2,
            [ab.clone()],
            ab,
        );
        let x4 = rows(4);
        let v4 = x4.to_vec();
        let out = mean_b
            .call((&x4,))
            .unwrap()
            .gather()
            .unwrap()
            .into_raw_vec_and_offset()
            .0;
        assert_eq!(out[0], out[1]);
        assert_eq!(out[2], out[3]);
        assert_ne!(out[0], out[2]);
        assert_eq!(
            out,
            [
                Tensor::from_vec(vec![v4[0], v4[1]], &[2])
                    .unwrap()
                    .mean(&[0], false)
                    .unwrap()
                    .to_vec()[0],
                Tensor::from_vec(vec![v4[0], v4[1]], &[2])
                    .unwrap()
                    .mean(&[0], false)
                    .unwrap()
                    .to_vec()[0],
                Tensor::from_vec(vec![v4[2], v4[3]], &[2])
                    .unwrap()
                    .mean(&[0], false)
                    .unwrap()
                    .to_vec()[0],
                Tensor::from_vec(vec![v4[2], v4[3]], &[2])
                    .unwrap()
                    .mean(&[0], false)
                    .unwrap()
                    .to_vec()[0],
            ]
        );
    }

    /// `Scope::pmean` inside a module reaches the mesh axis.
    #[test]
    fn module_collectives_reach_mesh_axes() {
        struct Center;
        impl Module for Center {
            type Input = Tensor;
            type Output = Tensor;
            fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
                Ok(x.sub(&s.pmean("d", &x.mean(&[0], true)?)?)?)
            }
        }
        let mesh = super::mesh(&[2], &["d"]);
        let p = PartitionSpec::new(["d"]);
        let f = shard_map(
            |(x,): (Tensor,)| Center.apply(&Default::default(), x, ()),
            &mesh,
            [p.clone()],
            p,
        );
        let x = Tensor::from_vec(vec![1.0, 3.0, 5.0, 7.0], &[4, 1]).unwrap();
        assert_eq!(
            f.call((&x,))
                .unwrap()
                .gather()
                .unwrap()
                .into_raw_vec_and_offset()
                .0,
            [-3.0, -1.0, 1.0, 3.0]
        );
    }

    /// Failures stop every device, with the failing device's error; a
    /// device skipping a collective is named; nothing hangs.
    #[test]
    fn failures_stop_every_device() {
        let mesh = super::mesh(&[4], &["d"]);
        let p = PartitionSpec::new(["d"]);
        let x = rows(4);
        let fails = shard_map(
            |(x,): (Tensor,)| {
                if sharding::axis_index("d")? == 2 {
                    return Err(Error::Config {
                        path: "/device2".into(),
                        message: "boom".into(),
                    });
                }
                sharding::psum(&x, "d")
            },
            &mesh,
            [p.clone()],
            p.clone(),
        );
        let e = fails.call((&x,)).unwrap_err();
        assert!(e.to_string().contains("boom"), "{e}");

        let skips = shard_map(
            |(x,): (Tensor,)| {
                if sharding::axis_index("d")? == 1 {
                    return Ok(x);
                }
                sharding::psum(&x, "d")
            },
            &mesh,
            [p.clone()],
            p.clone(),
        );
        let e = skips.call((&x,)).unwrap_err().to_string();
        assert!(
            e.contains("device 1 returned without reaching collective #0"),
            "{e}"
        );

        let shapes = shard_map(
            |(x,): (Tensor,)| {
                let y = if sharding::axis_index("d")? == 3 {
                    Tensor::zeros(&[2])
                } else {
                    x
                };
                sharding::psum(&y, "d")
            },
            &mesh,
            [p.clone()],
            p.clone(),
        );
        let e = shapes.call((&x,)).unwrap_err().to_string();
        assert!(e.contains("differs between items"), "{e}");

        let unbound = shard_map(
            |(x,): (Tensor,)| sharding::psum(&x, "model"),
            &mesh,
            [p.clone()],
            p.clone(),
        );
        let e = unbound.call((&x,)).unwrap_err().to_string();
        assert!(e.contains("unbound axis name \"model\""), "{e}");
        assert!(sharding::psum(&x, "d").is_err(), "outside shard_map");
    }

    #[test]
    fn bad_arguments_are_typed_errors() {
        let mesh = super::mesh(&[8], &["data"]);
        let p = PartitionSpec::new(["data"]);
        let keys = flaxen::random::split(flaxen::random::key(0), 4).unwrap();
        let f = shard_map(
            |(k,): (flaxen::random::KeyArray,)| Ok(Tensor::scalar(k.len() as f32).reshape(&[1])?),
            &mesh,
            [p.clone()],
            p.clone(),
        );
        let e = f.call((&keys,)).unwrap_err().to_string();
        assert_eq!(
            e,
            "shard_map argument 0: PartitionSpec('data',) cuts dimension 0 of shape [4] into 8 \
             pieces, but its size 4 is not divisible by 8"
        );
        let g = shard_map(
            |(x, _b): (Tensor, bool)| Ok(x),
            &mesh,
            [p.clone(), p.clone()],
            p.clone(),
        );
        assert!(
            g.call((&rows(8), true)).is_err(),
            "a plain value cannot be split"
        );
        // Replicated output that differs between devices.
        let h = shard_map(
            |(x,): (Tensor,)| Ok(x),
            &mesh,
            [p.clone()],
            PartitionSpec::replicated(),
        );
        let e = h.call((&rows(8),)).unwrap_err().to_string();
        assert!(e.contains("returned different values"), "{e}");
        // jit splits the batch axis only.
        let s =
            flaxen::sharding::NamedSharding::new(&mesh, PartitionSpec::new([None, Some("data")]))
                .unwrap();
        let e = sharding::jit::<(&Tensor,), _, 1>(|(x,): (Tensor,)| Ok(x), [Some(s.clone())], s)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("leading (batch)"), "{e}");
    }
}

/// `categorical` sharded over its results gathers to the unsharded draw:
/// logits of several ranks, the category axis first, last or inside, a
/// sample prefix, meshes and specs of one and two axes, both Threefry
/// modes; and its errors are the unsharded sampler's.
#[test]
fn sharded_categorical_equals_unsharded() {
    let meshes = [
        mesh(&[2], &["d"]),
        mesh(&[4], &["d"]),
        mesh(&[2, 2], &["a", "b"]),
    ];
    // Logits' shape, category axis, result shape.
    type Case = (&'static [usize], isize, Option<&'static [usize]>);
    let cases: [Case; 5] = [
        (&[8, 5], -1, None),
        (&[5, 8], 0, None),
        (&[4, 7, 6], 1, None),
        (&[4, 6], -1, Some(&[2, 4])),
        (&[8, 3], 1, Some(&[4, 8])),
    ];
    let mut checked = 0;
    for mode in [ThreefryMode::Partitionable, ThreefryMode::NonPartitionable] {
        let key = random::key(11).with_mode(mode);
        for (lshape, axis, shape) in cases {
            let n: usize = lshape.iter().product();
            let values = (0..n).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
            let logits = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(lshape), values).unwrap();
            let whole = random::categorical(key.clone(), &logits.view(), axis, shape).unwrap();
            for m in &meshes {
                let names: Vec<&str> = m.axis_names().iter().map(String::as_str).collect();
                let mut specs = vec![PartitionSpec::replicated(), PartitionSpec::new([names[0]])];
                if names.len() == 2 {
                    specs.push(PartitionSpec::new([None, Some(names[1])]));
                    specs.push(PartitionSpec::new([names]));
                }
                for spec in specs {
                    let s = NamedSharding::new(m, spec).unwrap();
                    if s.check(whole.shape(), "test").is_err() {
                        continue;
                    }
                    let sharded =
                        sharding::random::categorical(key.clone(), &logits.view(), axis, shape, &s)
                            .unwrap();
                    assert_eq!(
                        sharded.gather().unwrap(),
                        whole,
                        "{lshape:?} axis {axis} {shape:?}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 40, "{checked}");
    let s = NamedSharding::new(&mesh(&[2], &["d"]), PartitionSpec::new(["d"])).unwrap();
    let logits = ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[4, 0]));
    let e =
        sharding::random::categorical(random::key(0), &logits.view(), -1, None, &s).unwrap_err();
    assert!(e.to_string().contains("no categories"), "{e}");
    let logits = ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[4, 3]));
    let e = sharding::random::categorical(random::key(0), &logits.view(), 2, None, &s).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = sharding::random::categorical(random::key(0), &logits.view(), -1, Some(&[3]), &s)
        .unwrap_err();
    assert!(e.to_string().contains("must end with"), "{e}");
}
