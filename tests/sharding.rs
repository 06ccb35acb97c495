//! Meshes, shardings and sharded arrays: JAX's printed forms (from the Flax
//! guide, `002_8dddc161bbb0d8fb.txt`, "Managing RNG's on multiple devices")
//! and sharded sampling equal to the unsharded arrays.

use flaxen::random::{self, ThreefryMode};
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
    assert_eq!(a.gather(), x);
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
    assert_eq!(a.gather(), x);
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
                        sharding::random::normal(k(), shape, &s).unwrap().gather(),
                        random::normal(k(), shape).unwrap(),
                        "normal {mode:?} {shape:?} {spec} over {}",
                        m.short()
                    );
                    assert_eq!(
                        sharding::random::bits(k(), shape, &s).unwrap().gather(),
                        random::bits(k(), shape).unwrap()
                    );
                    assert_eq!(
                        sharding::random::randint(k(), shape, -3, 1000, &s)
                            .unwrap()
                            .gather(),
                        random::randint(k(), shape, -3, 1000).unwrap()
                    );
                    assert_eq!(
                        sharding::random::bernoulli(k(), 0.3, shape, &s)
                            .unwrap()
                            .gather(),
                        random::bernoulli(k(), 0.3, shape).unwrap()
                    );
                    let a = sharding::random::normal_as::<f64>(k(), shape, &s).unwrap();
                    assert_eq!(a.gather(), random::normal_as::<f64>(k(), shape).unwrap());
                    let a = sharding::random::bits_as::<u64>(k(), shape, &s).unwrap();
                    assert_eq!(a.gather(), random::bits_as::<u64>(k(), shape).unwrap());
                    let a = sharding::random::uniform_as::<half::bf16>(k(), shape, &s).unwrap();
                    assert_eq!(
                        a.gather(),
                        random::uniform_as::<half::bf16>(k(), shape).unwrap()
                    );
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
                        assert_eq!(a.unwrap().gather(), b.unwrap());
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
    // A huge global shape is the sampler's typed error, per device.
    let s = NamedSharding::new(&m, PartitionSpec::new(["a"])).unwrap();
    let e = sharding::random::normal(random::key(0), &[2, 1 << 62, 8], &s).unwrap_err();
    assert!(matches!(e, Error::Random { .. }), "{e:?}");
}
