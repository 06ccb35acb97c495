//! Virtual CPU devices and meshes of them (`jax.sharding.Mesh`,
//! `mesh_utils.create_device_mesh`).

use std::fmt;
use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use super::error::ShardingError;
use super::spec::{quoted, tuple};
use crate::array_format::{format_array, format_array_repr, NumpyElement};
use crate::distributed::Cluster;
use crate::error::{Error, Result};

/// One virtual CPU device (`CpuDevice(id=0)`). A device runs its share of a
/// sharded computation on a worker thread of its own, so a mesh may have
/// more devices than the machine has cores, as JAX's
/// `--xla_force_host_platform_device_count=8` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    id: usize,
    process: usize,
}

impl Device {
    /// The device with global id `id` (of process 0).
    pub const fn cpu(id: usize) -> Device {
        Device { id, process: 0 }
    }

    /// The device with global id `id`, run by process `process` of a
    /// multi-process job (see [`crate::distributed`]).
    pub const fn on_process(id: usize, process: usize) -> Device {
        Device { id, process }
    }

    /// Its global id.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The process that runs it (`device.process_index`).
    pub fn process_index(&self) -> usize {
        self.process
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuDevice(id={})", self.id)
    }
}

impl NumpyElement for Device {
    fn format_all(values: &[Device]) -> Vec<String> {
        // NumPy prints object arrays with each element's repr, unpadded.
        values.iter().map(Device::to_string).collect()
    }
}

/// An n-dimensional array of devices, as `mesh_utils.create_device_mesh`
/// returns; it prints as NumPy prints that array.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceArray(pub ArrayD<Device>);

impl fmt::Display for DeviceArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_array(&self.0.view()))
    }
}

/// `mesh_utils.create_device_mesh(shape)`: devices `0..product(shape)` laid
/// out in row-major order over `shape`.
///
/// ```
/// use flaxen::sharding::create_device_mesh;
///
/// let devices = create_device_mesh(&[8]).unwrap();
/// assert_eq!(
///     devices.to_string(),
///     "[CpuDevice(id=0) CpuDevice(id=1) CpuDevice(id=2) CpuDevice(id=3)\n \
///      CpuDevice(id=4) CpuDevice(id=5) CpuDevice(id=6) CpuDevice(id=7)]"
/// );
/// ```
pub fn create_device_mesh(shape: &[usize]) -> Result<DeviceArray> {
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n > 0 && !shape.is_empty())
        .ok_or_else(|| ShardingError::EmptyMesh {
            shape: shape.to_vec(),
        })?;
    // A mesh is a set of worker threads: refuse sizes no machine can run.
    if n > MAX_DEVICES {
        return Err(ShardingError::OutOfRange {
            what: "device count",
            index: n,
            count: MAX_DEVICES,
        }
        .into());
    }
    let devices = (0..n).map(Device::cpu).collect();
    Ok(DeviceArray(
        ArrayD::from_shape_vec(IxDyn(shape), devices).expect("the count matches the shape"),
    ))
}

/// The most devices a mesh may have (each is a thread while it works).
pub const MAX_DEVICES: usize = 4096;

/// Devices laid out over named axes (`jax.sharding.Mesh`). Cloning is cheap.
///
/// ```
/// use flaxen::sharding::{create_device_mesh, Mesh};
///
/// let mesh = Mesh::new(create_device_mesh(&[8])?, &["data"])?;
/// assert_eq!(
///     mesh.to_string(),
///     "Mesh(device_ids=array([0, 1, 2, 3, 4, 5, 6, 7]), axis_names=('data',))"
/// );
/// assert_eq!(mesh.axis_size("data"), Some(8));
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Mesh {
    inner: Arc<MeshInner>,
}

#[derive(Debug)]
struct MeshInner {
    devices: ArrayD<Device>,
    axis_names: Vec<String>,
    /// One single-thread pool per device, made on first use: a device's
    /// work (and the parallel loops inside its operations) runs on its
    /// own thread only, so that N devices use N threads.
    pools: std::sync::OnceLock<std::result::Result<Vec<rayon::ThreadPool>, ShardingError>>,
    /// The job, for a mesh over several processes' devices.
    cluster: Option<Cluster>,
}

impl PartialEq for MeshInner {
    fn eq(&self, other: &MeshInner) -> bool {
        let same_job = match (&self.cluster, &other.cluster) {
            (Some(a), Some(b)) => a.same(b),
            (a, b) => a.is_none() && b.is_none(),
        };
        self.devices == other.devices && self.axis_names == other.axis_names && same_job
    }
}

impl Mesh {
    /// A mesh of `devices` whose axes are called `axis_names` (one name per
    /// axis, all different).
    pub fn new(devices: DeviceArray, axis_names: &[&str]) -> Result<Mesh> {
        if let Some(d) = devices.0.iter().find(|d| d.process_index() != 0) {
            return Err(ShardingError::AxisNames {
                shape: devices.0.shape().to_vec(),
                names: axis_names.iter().map(|s| s.to_string()).collect(),
                message: format!(
                    "{d} belongs to process {}: build meshes over several processes with \
                     `Cluster::mesh`",
                    d.process_index()
                ),
            }
            .into());
        }
        Mesh::build(devices, axis_names, None)
    }

    /// A mesh over the devices of several processes (`Cluster::mesh`).
    pub(crate) fn with_cluster(
        devices: DeviceArray,
        axis_names: &[&str],
        cluster: Cluster,
    ) -> Result<Mesh> {
        Mesh::build(devices, axis_names, Some(cluster))
    }

    fn build(devices: DeviceArray, axis_names: &[&str], cluster: Option<Cluster>) -> Result<Mesh> {
        let shape = devices.0.shape().to_vec();
        let names: Vec<String> = axis_names.iter().map(|s| s.to_string()).collect();
        let bad = |message: String| -> Error {
            ShardingError::AxisNames {
                shape: shape.clone(),
                names: names.clone(),
                message,
            }
            .into()
        };
        if devices.0.is_empty() {
            return Err(ShardingError::EmptyMesh { shape }.into());
        }
        if names.len() != shape.len() {
            return Err(bad(format!(
                "{} names for {} axes",
                names.len(),
                shape.len()
            )));
        }
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() {
                return Err(bad("an axis name is empty".into()));
            }
            if names[..i].contains(n) {
                return Err(bad(format!("axis name \"{n}\" is used twice")));
            }
        }
        let mut ids: Vec<usize> = devices.0.iter().map(Device::id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad("a device appears twice".into()));
        }
        Ok(Mesh {
            inner: Arc::new(MeshInner {
                devices: devices.0,
                axis_names: names,
                pools: std::sync::OnceLock::new(),
                cluster,
            }),
        })
    }

    /// The devices, laid out over the axes.
    pub fn devices(&self) -> &ArrayD<Device> {
        &self.inner.devices
    }

    /// The axis names.
    pub fn axis_names(&self) -> &[String] {
        &self.inner.axis_names
    }

    /// The number of devices along each axis.
    pub fn shape(&self) -> &[usize] {
        self.inner.devices.shape()
    }

    /// The number of devices.
    pub fn size(&self) -> usize {
        self.inner.devices.len()
    }

    /// The number of devices along the axis called `name`.
    pub fn axis_size(&self, name: &str) -> Option<usize> {
        self.axis_index(name).map(|i| self.shape()[i])
    }

    /// The position of the axis called `name`.
    pub fn axis_index(&self, name: &str) -> Option<usize> {
        self.inner.axis_names.iter().position(|n| n == name)
    }

    /// The devices in the mesh's (row-major) order.
    pub fn device_list(&self) -> Vec<Device> {
        self.inner.devices.iter().copied().collect()
    }

    /// The job this mesh spans, for a mesh over several processes.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.inner.cluster.as_ref()
    }

    /// Whether device `d` is run by this process.
    pub fn is_local(&self, d: &Device) -> bool {
        d.process_index()
            == self
                .inner
                .cluster
                .as_ref()
                .map_or(0, Cluster::process_index)
    }

    /// This process's devices, in the mesh's order
    /// (`jax.local_devices()` on the mesh).
    pub fn local_devices(&self) -> Vec<Device> {
        self.inner
            .devices
            .iter()
            .copied()
            .filter(|d| self.is_local(d))
            .collect()
    }

    /// The positions (in the mesh's row-major order) of this process's
    /// devices: every position in a single-process mesh.
    pub fn local_positions(&self) -> Vec<usize> {
        self.inner
            .devices
            .iter()
            .enumerate()
            .filter(|(_, d)| self.is_local(d))
            .map(|(k, _)| k)
            .collect()
    }

    /// The mesh coordinates of the `k`-th device in row-major order.
    pub fn coords(&self, k: usize) -> Vec<usize> {
        let mut rest = k;
        let mut c = vec![0; self.shape().len()];
        for (d, &n) in self.shape().iter().enumerate().rev() {
            c[d] = rest % n;
            rest /= n;
        }
        c
    }

    /// `Mesh('data': 8)`: the short form JAX prints inside a sharding.
    pub fn short(&self) -> String {
        let axes: Vec<String> = self
            .axis_names()
            .iter()
            .zip(self.shape())
            .map(|(n, s)| format!("{}: {s}", quoted(n)))
            .collect();
        format!("Mesh({})", axes.join(", "))
    }

    /// Runs `f(k)` for every device `k` of this process (`k`: its position
    /// in row-major order, see [`Mesh::local_positions`]) on the device's
    /// own worker thread, all at once, and returns the results in device
    /// order. Parallel loops inside `f` stay on that thread: a device is
    /// one thread, whatever the number of cores.
    pub fn run<R: Send>(&self, f: impl Fn(usize) -> Result<R> + Sync) -> Result<Vec<R>> {
        self.run_on(&self.local_positions(), f)
    }

    /// [`Mesh::run`] on some of this process's devices only: `positions`
    /// (row-major positions of local devices), results in that order.
    pub(crate) fn run_on<R: Send>(
        &self,
        positions: &[usize],
        f: impl Fn(usize) -> Result<R> + Sync,
    ) -> Result<Vec<R>> {
        let all = self.pools()?;
        let local = self.local_positions();
        let pools: Vec<&rayon::ThreadPool> = positions
            .iter()
            .map(|k| {
                local.iter().position(|l| l == k).map(|i| &all[i]).ok_or(
                    ShardingError::OutOfRange {
                        what: "local device position",
                        index: *k,
                        count: self.size(),
                    },
                )
            })
            .collect::<std::result::Result<_, _>>()?;
        let positions = positions.to_vec();
        let f = &f;
        let results: Vec<Result<R>> = std::thread::scope(|scope| {
            // Each device's work is handed to its pool from a short-lived
            // thread that waits for it.
            let handles: Vec<_> = pools
                .iter()
                .zip(positions)
                .map(|(pool, k)| {
                    std::thread::Builder::new()
                        .spawn_scoped(scope, move || pool.install(|| f(k)))
                        .map_err(|e| ShardingError::Spawn {
                            device: k,
                            message: e.to_string(),
                        })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h {
                    Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    Err(e) => Err(e.into()),
                })
                .collect()
        });
        results.into_iter().collect()
    }

    /// The devices' worker threads, started on first use.
    fn pools(&self) -> Result<&[rayon::ThreadPool]> {
        let pools = self.inner.pools.get_or_init(|| {
            self.inner
                .devices
                .iter()
                .filter(|d| self.is_local(d))
                .map(|d| {
                    let id = d.id();
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(1)
                        .thread_name(move |_| format!("flaxen-device-{id}"))
                        .build()
                        .map_err(|e| ShardingError::Spawn {
                            device: id,
                            message: e.to_string(),
                        })
                })
                .collect()
        });
        match pools {
            Ok(p) => Ok(p),
            Err(e) => Err(e.clone().into()),
        }
    }
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = self.inner.devices.mapv(|d| d.id() as i64);
        let names = tuple(self.axis_names().iter().map(|n| quoted(n)).collect());
        write!(
            f,
            "Mesh(device_ids=array({}), axis_names={names})",
            format_array_repr(&ids.view(), "array(".len())
        )
    }
}
