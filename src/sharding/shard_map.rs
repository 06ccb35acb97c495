//! `shard_map(f, mesh, in_specs, out_specs)`: `f` runs once per device, on
//! the device's block of every input, and the blocks it returns make up
//! the output; collectives over the mesh's axis names connect the devices.

use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use super::array::{block_of, block_of_view, Sharded};
use super::error::ShardingError;
use super::mesh::Mesh;
use super::named::{NamedSharding, Placement};
use super::spec::PartitionSpec;
use crate::core::lift::collective::{with_device_axes, Collectives, DeviceAxes, Driver, Remote};
use crate::core::Variables;
use crate::distributed::group::GroupLink;
use crate::error::Result;
use crate::random::sampling::{with_window, Window};
use crate::random::{Key, KeyArray};
use crate::tensor::Tensor;

/// An argument of a `shard_map`ped function: an array (cut into blocks as
/// its spec says) or a plain value (which every device receives whole, so
/// its spec must be `PartitionSpec()`).
pub trait ShardArg: Sync {
    /// What a device receives.
    type Local: Send;
    /// The array's shape, or `None` for a value that is not an array.
    fn global_shape(&self) -> Option<Vec<usize>>;
    /// The block at `p` (for a plain value: the value).
    fn block(&self, p: &Placement) -> Result<Self::Local>;
}

impl ShardArg for &Tensor {
    type Local = Tensor;
    fn global_shape(&self) -> Option<Vec<usize>> {
        Some(self.shape().to_vec())
    }
    fn block(&self, p: &Placement) -> Result<Tensor> {
        Ok(Tensor::from_array(block_of_view(self.view(), p)))
    }
}

impl<T: Clone + Send + Sync> ShardArg for &ArrayD<T> {
    type Local = ArrayD<T>;
    fn global_shape(&self) -> Option<Vec<usize>> {
        Some(self.shape().to_vec())
    }
    fn block(&self, p: &Placement) -> Result<ArrayD<T>> {
        Ok(block_of(self, p))
    }
}

/// A batch of keys is cut like any array, and keeps its rank: with 8 keys
/// over 8 devices, each device receives a batch of one.
impl ShardArg for &KeyArray {
    type Local = KeyArray;
    fn global_shape(&self) -> Option<Vec<usize>> {
        Some(self.shape().to_vec())
    }
    fn block(&self, p: &Placement) -> Result<KeyArray> {
        let words = ArrayD::from_shape_vec(IxDyn(self.shape()), self.data().to_vec())
            .expect("a key array's words match its shape");
        let block = block_of(&words, p);
        let shape = block.shape().to_vec();
        Ok(KeyArray::from_data(block.into_iter().collect(), self.mode()).reshape(&shape)?)
    }
}

impl<'a> ShardArg for &'a Variables {
    type Local = &'a Variables;
    fn global_shape(&self) -> Option<Vec<usize>> {
        None
    }
    fn block(&self, _: &Placement) -> Result<&'a Variables> {
        Ok(self)
    }
}

impl ShardArg for &Key {
    type Local = Key;
    fn global_shape(&self) -> Option<Vec<usize>> {
        None
    }
    fn block(&self, _: &Placement) -> Result<Key> {
        Ok((*self).clone())
    }
}

macro_rules! plain_arg {
    ($($t:ty),*) => {$(
        impl ShardArg for $t {
            type Local = $t;
            fn global_shape(&self) -> Option<Vec<usize>> {
                None
            }
            fn block(&self, _: &Placement) -> Result<$t> {
                Ok(*self)
            }
        }
    )*};
}

plain_arg!(bool, f32, i32, u32, usize);

/// The arguments of a `shard_map`ped function: a tuple of [`ShardArg`]s,
/// with one [`PartitionSpec`] each.
pub trait ShardArgs: Sync {
    /// One spec per argument (`[PartitionSpec; N]`).
    type Specs: AsRef<[PartitionSpec]> + Sync;
    /// What a device receives: the tuple of its blocks.
    type Local: Send;
    /// The arguments' shapes (`None`: not an array).
    fn shapes(&self) -> Vec<Option<Vec<usize>>>;
    /// Device `k`'s blocks, given every argument's placements.
    fn blocks(&self, placements: &[Option<Vec<Placement>>], k: usize) -> Result<Self::Local>;
}

macro_rules! tuple_args {
    ($n:literal; $($a:ident $i:tt),*) => {
        impl<$($a: ShardArg),*> ShardArgs for ($($a,)*) {
            type Specs = [PartitionSpec; $n];
            type Local = ($($a::Local,)*);
            fn shapes(&self) -> Vec<Option<Vec<usize>>> {
                vec![$(self.$i.global_shape()),*]
            }
            fn blocks(
                &self,
                placements: &[Option<Vec<Placement>>],
                k: usize,
            ) -> Result<Self::Local> {
                Ok(($(self.$i.block(whole_or(&placements[$i], k))?,)*))
            }
        }
    };
}

/// Device `k`'s placement, or any placement for a plain value.
fn whole_or(placements: &Option<Vec<Placement>>, k: usize) -> &Placement {
    static WHOLE: Placement = Placement {
        device: super::mesh::Device::cpu(0),
        position: 0,
        index: Vec::new(),
        replica_id: 0,
    };
    placements.as_ref().map_or(&WHOLE, |p| &p[k])
}

tuple_args!(1; A 0);
tuple_args!(2; A 0, B 1);
tuple_args!(3; A 0, B 1, C 2);
tuple_args!(4; A 0, B 1, C 2, D 3);
tuple_args!(5; A 0, B 1, C 2, D 3, E 4);
tuple_args!(6; A 0, B 1, C 2, D 3, E 4, F 5);

/// A function mapped over the devices of a mesh (`jax.shard_map`): see
/// [`shard_map`].
pub struct ShardMapped<A: ShardArgs, F> {
    f: F,
    mesh: Mesh,
    in_specs: A::Specs,
    out_specs: PartitionSpec,
    /// `jit` with shardings: random draws over the local batch are the
    /// device's rows of the global draw.
    data_parallel: bool,
}

/// `jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...)`: calling the
/// result runs `f` on every device of `mesh` at once, each on its own
/// thread and with its block of every argument (a block keeps the rank of
/// the array: a batch of 8 keys over 8 devices is a batch of 1 on each),
/// and puts the blocks `f` returns together as `out_specs` says.
///
/// Inside `f`, [`psum`](super::psum), [`pmean`](super::pmean),
/// [`all_gather`](super::all_gather) and [`axis_index`](super::axis_index)
/// (and `Scope::pmean`/`psum` inside modules, e.g. `BatchNorm` with an
/// `axis_name`) work over the mesh's axis names; the operands are reduced
/// in device order, so the result does not depend on timing.
///
/// ```
/// use flaxen::sharding::{self, create_device_mesh, shard_map, Mesh, PartitionSpec};
/// use flaxen::tensor::Tensor;
///
/// let mesh = Mesh::new(create_device_mesh(&[4])?, &["data"])?;
/// let data = PartitionSpec::new(["data"]);
/// // Each device's rows minus the mean over all rows.
/// let center = shard_map(
///     |(x,): (Tensor,)| {
///         let mean = sharding::pmean(&x.mean(&[0], true)?, "data")?;
///         Ok(x.sub(&mean)?)
///     },
///     &mesh,
///     [data.clone()],
///     data,
/// );
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 6.0], &[4, 1])?;
/// let out = center.call((&x,))?;
/// assert_eq!(out.gather()?.into_raw_vec_and_offset().0, vec![-2.0, -1.0, 0.0, 3.0]);
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn shard_map<A, F>(
    f: F,
    mesh: &Mesh,
    in_specs: A::Specs,
    out_specs: PartitionSpec,
) -> ShardMapped<A, F>
where
    A: ShardArgs,
    F: Fn(A::Local) -> Result<Tensor> + Sync,
{
    ShardMapped {
        f,
        mesh: mesh.clone(),
        in_specs,
        out_specs,
        data_parallel: false,
    }
}

/// `jax.jit(f, in_shardings=..., out_shardings=...)` for a data-parallel
/// function: the arguments whose sharding is given are cut along their
/// leading (batch) axis, the others (`None`) are replicated, and each
/// device runs `f` on its rows with the replicated parameters; the rows
/// make up the output, laid out by `out_shardings`.
///
/// Random numbers drawn inside (`make_rng`, Dropout) are the ones the
/// unsharded call draws: a draw whose leading axis is the device's batch
/// is computed as the device's rows of the draw over the whole batch,
/// which JAX's partitionable Threefry makes possible. So the output equals
/// the unsharded `f`, bit for bit, for functions that treat the rows of
/// the batch independently (no statistics over the batch, no draw whose
/// leading axis has the batch's length by chance): the functions this
/// `jit` is for. Arguments may be split along their leading axis only, and
/// there are no named axes inside (as in JAX's `jit`: collectives are for
/// [`shard_map`]). On a mesh of more devices than the machine has cores,
/// consecutive devices' rows run as one call per core and the output is cut
/// back into their blocks: the same bits, without threads fighting over
/// the cores.
pub fn jit<A, F, const N: usize>(
    f: F,
    in_shardings: [Option<NamedSharding>; N],
    out_shardings: NamedSharding,
) -> Result<ShardMapped<A, F>>
where
    A: ShardArgs<Specs = [PartitionSpec; N]>,
    F: Fn(A::Local) -> Result<Tensor> + Sync,
{
    let mesh = out_shardings.mesh().clone();
    let mut specs: [PartitionSpec; N] = std::array::from_fn(|_| PartitionSpec::replicated());
    for (spec, sharding) in specs.iter_mut().zip(in_shardings) {
        if let Some(s) = sharding {
            if s.mesh() != &mesh {
                return Err(crate::error::Error::Config {
                    path: String::new(),
                    message: "jit: in_shardings and out_shardings must use one mesh".into(),
                });
            }
            *spec = s.spec().clone();
        }
    }
    let batch_only = |p: &PartitionSpec| p.entries().iter().skip(1).all(|e| e.axes().is_empty());
    if let Some(p) = specs
        .iter()
        .chain([out_shardings.spec()])
        .find(|p| !batch_only(p))
    {
        return Err(crate::error::Error::Config {
            path: String::new(),
            message: format!(
                "jit: {p} splits an axis other than the leading (batch) one; this data-parallel \
                 jit splits the batch only"
            ),
        });
    }
    Ok(ShardMapped {
        f,
        mesh,
        in_specs: specs,
        out_specs: out_shardings.spec().clone(),
        data_parallel: true,
    })
}

impl<A, F> ShardMapped<A, F>
where
    A: ShardArgs,
    F: Fn(A::Local) -> Result<Tensor> + Sync,
{
    /// Runs the mapped function on `args`.
    pub fn call(&self, args: A) -> Result<Sharded<f32>> {
        let mesh = &self.mesh;
        let specs = self.in_specs.as_ref();
        let mut placements = Vec::with_capacity(specs.len());
        for (i, (shape, spec)) in args.shapes().into_iter().zip(specs).enumerate() {
            let sharding = NamedSharding::new(mesh, spec.clone())?;
            placements.push(match shape {
                Some(shape) => {
                    sharding.check(&shape, &format!("shard_map argument {i}"))?;
                    Some(sharding.placements(&shape)?)
                }
                None if sharding.is_fully_replicated() => None,
                None => {
                    return Err(ShardingError::SpecRank {
                        spec: spec.to_string(),
                        shape: Vec::new(),
                    }
                    .into())
                }
            });
        }
        let out_sharding = NamedSharding::new(mesh, self.out_specs.clone())?;
        if self.data_parallel {
            if let Some(groups) = merge_groups(mesh, &placements, specs, &self.out_specs) {
                return self.call_merged(&args, &placements, &groups, &out_sharding);
            }
        }
        // Data-parallel jit: device k's rows of the batch, from the first
        // argument split along its leading axis.
        let batch = self.data_parallel.then(|| {
            let split = args
                .shapes()
                .into_iter()
                .zip(&placements)
                .find_map(|(shape, p)| match (shape, p) {
                    (Some(shape), Some(p))
                        if p.iter()
                            .any(|q| q.index.first().is_some_and(Option::is_some)) =>
                    {
                        Some((shape[0], p.clone()))
                    }
                    _ => None,
                });
            move |k: usize| {
                split.as_ref().and_then(|(global_rows, p)| {
                    p[k].index[0].clone().map(|r| Window::Batch {
                        global_rows: *global_rows,
                        start: r.start,
                        rows: r.end - r.start,
                    })
                })
            }
        });
        // Every process of a multi-process mesh counts this call.
        let call = match mesh.cluster() {
            Some(c) => {
                c.check_broken()?;
                Some(c.next_call())
            }
            None => None,
        };
        // `jit` has no named axes (as in JAX): collectives are for
        // `shard_map`.
        let axes = if self.data_parallel {
            Vec::new()
        } else {
            device_axes(mesh, call)
        };
        let run = |k: usize| -> Result<ArrayD<f32>> {
            let mine: Vec<(&Arc<Collectives>, usize)> = axes
                .iter()
                .filter(|(_, items)| items[k] != usize::MAX)
                .map(|(c, items)| (c, items[k]))
                .collect();
            let out = args.blocks(&placements, k).and_then(|local| {
                let handles: DeviceAxes = mine.iter().map(|(c, i)| c.handle(*i)).collect();
                let body = || with_device_axes(handles, || (self.f)(local));
                match batch.as_ref().map(|b| b(k)) {
                    Some(Some(window)) => with_window(window, body),
                    _ => body(),
                }
            });
            for (c, i) in &mine {
                c.finish(*i, out.as_ref().map(|_| ()).map_err(Clone::clone));
            }
            Ok(out?.into_array())
        };
        let blocks = mesh.run(run);
        // The other processes learn how this one's devices ended, and this
        // one how theirs did.
        let remote = axes
            .iter()
            .map(|(c, _)| c.finish_remote())
            .find_map(Result::err);
        // A device that failed stopped the others; report its error.
        let blocks = match (blocks, axes.iter().find_map(|(c, _)| c.failure())) {
            (Err(_), Some(first)) => return Err(first),
            (blocks, _) => blocks?,
        };
        if let Some(e) = remote {
            return Err(e);
        }
        assemble_out(&out_sharding, &mesh.local_positions(), blocks)
    }
}

impl<A, F> ShardMapped<A, F>
where
    A: ShardArgs,
    F: Fn(A::Local) -> Result<Tensor> + Sync,
{
    /// The data-parallel `jit` with several devices' consecutive rows run as
    /// one call (`groups`: the devices of each call, the first runs it), the
    /// output cut back into the devices' blocks. The rows are treated
    /// independently (the contract of this `jit`), and random draws are
    /// each row's own, so every device's block is the one it would compute
    /// alone: the result is the same, bit for bit.
    fn call_merged(
        &self,
        args: &A,
        placements: &[Option<Vec<Placement>>],
        groups: &[Vec<usize>],
        out_sharding: &NamedSharding,
    ) -> Result<Sharded<f32>> {
        let mesh = &self.mesh;
        // Each group's first device gets the rows of the whole group.
        let merged: Vec<Option<Vec<Placement>>> = placements
            .iter()
            .map(|p| {
                p.as_ref().map(|p| {
                    let mut q = p.clone();
                    for g in groups {
                        let (first, last) = (&p[g[0]], &p[g[g.len() - 1]]);
                        if let (Some(a), Some(b)) = (&first.index[0], &last.index[0]) {
                            q[g[0]].index[0] = Some(a.start..b.end);
                        }
                    }
                    q
                })
            })
            .collect();
        let split = args
            .shapes()
            .into_iter()
            .zip(&merged)
            .find_map(|(shape, p)| match (shape, p) {
                (Some(shape), Some(p)) if p[0].index.first().is_some_and(Option::is_some) => {
                    Some((shape[0], p.clone()))
                }
                _ => None,
            });
        let leaders: Vec<usize> = groups.iter().map(|g| g[0]).collect();
        let outs = mesh.run_on(&leaders, |k| {
            let local = args.blocks(&merged, k)?;
            let window = split.as_ref().and_then(|(global_rows, p)| {
                p[k].index[0].clone().map(|r| Window::Batch {
                    global_rows: *global_rows,
                    start: r.start,
                    rows: r.end - r.start,
                })
            });
            let out = match window {
                Some(w) => with_window(w, || (self.f)(local)),
                None => (self.f)(local),
            }?;
            Ok(out.into_array())
        })?;
        let mut blocks: Vec<Option<ArrayD<f32>>> = vec![None; mesh.size()];
        for (g, out) in groups.iter().zip(outs) {
            let rows = out.shape().first().copied().unwrap_or(0);
            if out.ndim() == 0 || rows % g.len() != 0 {
                return Err(ShardingError::ShardShape {
                    what: "jit output".into(),
                    device: mesh.device_list()[g[0]].id(),
                    found: out.shape().to_vec(),
                    expected: vec![g.len(); 1],
                }
                .into());
            }
            let per = rows / g.len();
            for (i, &k) in g.iter().enumerate() {
                let rows = ndarray::Slice::from(i * per..(i + 1) * per);
                blocks[k] = Some(out.slice_axis(ndarray::Axis(0), rows).to_owned());
            }
        }
        let blocks = blocks
            .into_iter()
            .map(|b| b.expect("every device is in a group"))
            .collect();
        assemble_out(out_sharding, &mesh.local_positions(), blocks)
    }
}

/// For the data-parallel `jit` on a mesh of more devices than the machine
/// has cores: groups of consecutive devices whose rows follow each other
/// in every argument split along the batch, one group per core, when the
/// output is split like the arguments. `None` (run device by device) when
/// the devices fit the cores or the layout does not allow it.
///
/// More threads than cores only share the cores and cut the products
/// smaller (measured: 8 devices on 2 cores were 9% slower than 2).
fn merge_groups(
    mesh: &Mesh,
    placements: &[Option<Vec<Placement>>],
    specs: &[PartitionSpec],
    out_spec: &PartitionSpec,
) -> Option<Vec<Vec<usize>>> {
    let n = mesh.size();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if mesh.cluster().is_some() || n <= cores {
        return None;
    }
    // The most groups, at most one per core, that divide the devices.
    let count = (1..=cores).rev().find(|g| n.is_multiple_of(*g))?;
    let size = n / count;
    let groups: Vec<Vec<usize>> = (0..count)
        .map(|g| (g * size..(g + 1) * size).collect())
        .collect();
    let mut split_any = false;
    for (p, spec) in placements.iter().zip(specs) {
        let Some(p) = p else { continue };
        let split = p
            .iter()
            .all(|q| q.index.first().is_some_and(Option::is_some));
        let whole = p.iter().all(|q| q.index.iter().all(Option::is_none));
        if whole {
            continue;
        }
        if !split || spec != out_spec {
            return None;
        }
        split_any = true;
        for g in &groups {
            for w in g.windows(2) {
                let (a, b) = (&p[w[0]], &p[w[1]]);
                let (ra, rb) = (a.index[0].as_ref()?, b.index[0].as_ref()?);
                if ra.end != rb.start || a.index[1..] != b.index[1..] {
                    return None;
                }
            }
        }
    }
    split_any.then_some(groups)
}

/// The collectives of every mesh axis: for axis `a`, the devices that
/// agree on every other coordinate form a group, and a device's item in it
/// is its coordinate along `a`. Returns one entry per (axis, group) with
/// each device's item (devices outside the group are never asked).
///
/// On a multi-process mesh (`call`: the cluster's number for this call),
/// a group some of whose devices other processes run is linked to them;
/// groups are numbered alike in every process.
fn device_axes(mesh: &Mesh, call: Option<u64>) -> Vec<(Arc<Collectives>, Vec<usize>)> {
    let n = mesh.size();
    let coords: Vec<Vec<usize>> = (0..n).map(|k| mesh.coords(k)).collect();
    let devices = mesh.device_list();
    let mut out = Vec::new();
    let mut group = 0;
    for (a, name) in mesh.axis_names().iter().enumerate() {
        let size = mesh.shape()[a];
        let mut groups: Vec<(Vec<usize>, Arc<Collectives>)> = Vec::new();
        for c in &coords {
            let mut rest = c.clone();
            rest.remove(a);
            if !groups.iter().any(|(r, _)| *r == rest) {
                let remote = match (mesh.cluster(), call) {
                    (Some(cluster), Some(call)) => {
                        // The process of each item (coordinate along `a`).
                        let mut item_process = vec![0; size];
                        for (k, ck) in coords.iter().enumerate() {
                            let mut r = ck.clone();
                            r.remove(a);
                            if r == rest {
                                item_process[ck[a]] = devices[k].process_index();
                            }
                        }
                        GroupLink::new(cluster, call, group, name, item_process)
                            .map(|l| Box::new(l) as Box<dyn Remote>)
                    }
                    _ => None,
                };
                group += 1;
                let coll = Collectives::with_remote(name, "", size, Driver::Parallel, remote);
                groups.push((rest, coll));
            }
        }
        for (rest, coll) in groups {
            // Devices outside the group never use it; their item is unused.
            let items: Vec<usize> = coords.iter().map(|c| c[a]).collect();
            let members: Vec<bool> = coords
                .iter()
                .map(|c| {
                    let mut r = c.clone();
                    r.remove(a);
                    r == rest
                })
                .collect();
            out.push((coll, items, members));
        }
    }
    // Each device keeps only the groups it belongs to.
    out.into_iter()
        .map(|(c, items, members)| {
            let items = items
                .into_iter()
                .zip(members)
                .map(|(i, m)| if m { i } else { usize::MAX })
                .collect();
            (c, items)
        })
        .collect()
}

/// The whole output from the devices' blocks, as `sharding` lays it out.
fn assemble_out(
    sharding: &NamedSharding,
    positions: &[usize],
    blocks: Vec<ArrayD<f32>>,
) -> Result<Sharded<f32>> {
    let local = blocks[0].shape().to_vec();
    if sharding.spec().entries().len() > local.len() {
        return Err(ShardingError::SpecRank {
            spec: sharding.spec().to_string(),
            shape: local,
        }
        .into());
    }
    let global: Vec<usize> = local
        .iter()
        .enumerate()
        .map(|(d, &l)| l * sharding.pieces(d))
        .collect();
    let all = sharding.placements(&global)?;
    let placements: Vec<Placement> = positions.iter().map(|&k| all[k].clone()).collect();
    for (k, b) in blocks.iter().enumerate() {
        if b.shape() != local.as_slice() {
            return Err(ShardingError::ShardShape {
                what: "shard_map output".into(),
                device: placements[k].device.id(),
                found: b.shape().to_vec(),
                expected: local.clone(),
            }
            .into());
        }
    }
    // Devices holding the same block must have computed the same values.
    for (k, p) in placements.iter().enumerate() {
        if p.replica_id > 0 {
            // (Among this process's devices: replicas elsewhere are not
            // compared.)
            let first = placements
                .iter()
                .position(|q| q.index == p.index)
                .expect("p itself holds it");
            if first == k {
                continue;
            }
            let same = blocks[k]
                .iter()
                .zip(blocks[first].iter())
                .all(|(a, b)| a.to_bits() == b.to_bits());
            if !same {
                return Err(crate::error::Error::Config {
                    path: String::new(),
                    message: format!(
                        "shard_map: out_specs {} leaves the output replicated over devices {} \
                         and {}, but they returned different values",
                        sharding.spec(),
                        placements[first].device.id(),
                        p.device.id()
                    ),
                });
            }
        }
    }
    Ok(Sharded::assemble(&global, sharding, placements, blocks))
}
