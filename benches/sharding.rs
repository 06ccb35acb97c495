//! Data-parallel throughput on a mesh: a 784-512-512-10 MLP applied to a
//! batch of 4,096 with `sharding::jit` (batch split over the devices,
//! parameters replicated) on 1, 2 and 8 devices. A device is one worker
//! thread; the goal on a 2-core machine is 2 devices at least 1.8x one
//! device's throughput, and 8 no slower than 2. The book's "Devices and
//! sharding" chapter has the table.

use criterion::{criterion_group, criterion_main, Criterion};
use flaxen::core::{Result, Scope, Variables};
use flaxen::nn::{Dense, Module};
use flaxen::random;
use flaxen::sharding::{self, create_device_mesh, Mesh, NamedSharding, PartitionSpec};
use flaxen::tensor::Tensor;

const BATCH: usize = 4096;

struct Mlp;

impl Module for Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(512), x)?.relu();
        let x = s.call(Dense::new(512), x)?.relu();
        s.call(Dense::new(10), x)
    }
}

fn sharded_apply(c: &mut Criterion) {
    let x = Tensor::from_array(random::normal(random::key(1), &[BATCH, 784]).unwrap());
    let variables = Mlp.init(random::key(0), x.clone()).unwrap();
    let mut g = c.benchmark_group("sharded_apply_mlp_4096");
    g.sample_size(10);
    for devices in [1, 2, 8] {
        let mesh = Mesh::new(create_device_mesh(&[devices]).unwrap(), &["data"]).unwrap();
        let data = NamedSharding::new(&mesh, PartitionSpec::new(["data"])).unwrap();
        let forward = |(v, x): (&Variables, Tensor)| Mlp.apply(v, x, ());
        let jitted = sharding::jit(forward, [None, Some(data.clone())], data).unwrap();
        g.bench_function(format!("{devices}_devices"), |b| {
            b.iter(|| jitted.call((&variables, &x)).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, sharded_apply);
criterion_main!(benches);
