//! Arrays laid out over a mesh: a global shape, a sharding, and each
//! device's block (`jax.Array` with `addressable_shards`).

use std::fmt;
use std::ops::Deref;

use ndarray::{ArrayD, IxDyn, Slice};

use super::error::ShardingError;
use super::mesh::Device;
use super::named::{NamedSharding, Placement};
use crate::array_format::{empty_shape_suffix, format_array, format_array_repr, NumpyElement};
use crate::error::Result;

/// One device's block of a sharded array (`jax.Shard`).
#[derive(Clone, Debug, PartialEq)]
pub struct Shard<T> {
    /// The device holding it.
    pub device: Device,
    /// Per dimension, the range held (`None`: the whole dimension).
    pub index: Vec<Option<std::ops::Range<usize>>>,
    /// Which copy of this block it is (0 for the first device holding it).
    pub replica_id: usize,
    /// The block.
    pub data: ArrayD<T>,
}

impl<T: NumpyElement> fmt::Display for Shard<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slices: Vec<String> = self
            .index
            .iter()
            .map(|r| match r {
                Some(r) => format!("slice({}, {}, None)", r.start, r.end),
                None => "slice(None, None, None)".to_string(),
            })
            .collect();
        write!(
            f,
            "Shard(device={}, index={}, replica_id={}, data={})",
            self.device,
            super::spec::tuple(slices),
            self.replica_id,
            format_array(&self.data.view())
        )
    }
}

/// The shards of an array, printed as JAX's list of them.
#[derive(Debug)]
pub struct ShardList<'a, T>(&'a [Shard<T>]);

impl<T> Deref for ShardList<'_, T> {
    type Target = [Shard<T>];
    fn deref(&self) -> &[Shard<T>] {
        self.0
    }
}

impl<T: NumpyElement> fmt::Display for ShardList<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // IPython's pretty printer: one shard per line.
        f.write_str("[")?;
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",\n ")?;
            }
            write!(f, "{s}")?;
        }
        f.write_str("]")
    }
}

/// An array of shape `global_shape` laid out over a mesh: each device holds
/// its block (`jax.Array` placed with a `NamedSharding`).
///
/// ```
/// use flaxen::sharding::{create_device_mesh, device_put, Mesh, NamedSharding, PartitionSpec};
/// use ndarray::ArrayD;
///
/// let mesh = Mesh::new(create_device_mesh(&[4])?, &["data"])?;
/// let s = NamedSharding::new(&mesh, PartitionSpec::new(["data"]))?;
/// let x = ArrayD::from_shape_vec(vec![4, 2], (0..8).map(|v| v as f32).collect()).unwrap();
/// let sharded = device_put(&x, &s)?;
/// assert_eq!(sharded.addressable_shards()[1].data.shape(), &[1, 2]);
/// assert_eq!(sharded.gather()?, x);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Sharded<T> {
    global_shape: Vec<usize>,
    sharding: NamedSharding,
    shards: Vec<Shard<T>>,
}

impl<T: Clone + Send + Sync> Sharded<T> {
    /// Computes every device's block on the device's own thread:
    /// `block(placement)` returns the block of the array at `placement`.
    /// `what` names the array in errors.
    pub fn from_fn(
        global_shape: &[usize],
        sharding: &NamedSharding,
        what: &str,
        block: impl Fn(&Placement) -> Result<ArrayD<T>> + Sync,
    ) -> Result<Sharded<T>> {
        let placements = sharding.placements(global_shape)?;
        let mesh = sharding.mesh();
        let datas = mesh.run(|k| {
            let p = &placements[k];
            let data = block(p)?;
            let expected = p.shape(global_shape);
            if data.shape() != expected.as_slice() {
                return Err(ShardingError::ShardShape {
                    what: what.to_string(),
                    device: p.device.id(),
                    found: data.shape().to_vec(),
                    expected,
                }
                .into());
            }
            Ok(data)
        })?;
        let local = placements
            .into_iter()
            .filter(|p| mesh.is_local(&p.device))
            .collect();
        Ok(Sharded::assemble(global_shape, sharding, local, datas))
    }

    /// The array from blocks already computed, one per placement of this
    /// process's devices.
    pub(crate) fn assemble(
        global_shape: &[usize],
        sharding: &NamedSharding,
        placements: Vec<Placement>,
        datas: Vec<ArrayD<T>>,
    ) -> Sharded<T> {
        let shards = placements
            .into_iter()
            .zip(datas)
            .map(|(p, data)| Shard {
                device: p.device,
                index: p.index,
                replica_id: p.replica_id,
                data,
            })
            .collect();
        Sharded {
            global_shape: global_shape.to_vec(),
            sharding: sharding.clone(),
            shards,
        }
    }

    /// The whole array, put together from this process's shards
    /// (`np.asarray(x)`).
    ///
    /// Fails with [`ShardingError::NotAddressable`] when a block is held
    /// only by devices of other processes (an array over a multi-process
    /// mesh that is not replicated on this process's devices).
    pub fn gather(&self) -> Result<ArrayD<T>>
    where
        T: Default,
    {
        // Each block once, from the first local device that holds it.
        let mut blocks: Vec<&Shard<T>> = Vec::new();
        for s in &self.shards {
            if !blocks.iter().any(|b| b.index == s.index) {
                blocks.push(s);
            }
        }
        for p in self.sharding.placements(&self.global_shape)? {
            if !blocks.iter().any(|b| b.index == p.index) {
                return Err(ShardingError::NotAddressable {
                    device: p.device.id(),
                    process: p.device.process_index(),
                }
                .into());
            }
        }
        let mut out = ArrayD::from_elem(IxDyn(&self.global_shape), T::default());
        for s in blocks {
            let mut view = out.view_mut();
            for (d, r) in s.index.iter().enumerate() {
                if let Some(r) = r {
                    view.slice_axis_inplace(ndarray::Axis(d), Slice::from(r.clone()));
                }
            }
            view.assign(&s.data);
        }
        Ok(out)
    }

    /// Whether this process holds every block (always, in one process).
    pub fn is_fully_addressable(&self) -> bool {
        self.sharding
            .placements(&self.global_shape)
            .map(|ps| {
                ps.iter()
                    .all(|p| self.shards.iter().any(|s| s.index == p.index))
            })
            .unwrap_or(false)
    }
}

impl<T> Sharded<T> {
    /// The shape of the whole array.
    pub fn shape(&self) -> &[usize] {
        &self.global_shape
    }

    /// How it is laid out.
    pub fn sharding(&self) -> &NamedSharding {
        &self.sharding
    }

    /// This process's devices' blocks, in the mesh's device order
    /// (`addressable_shards`; in one process, every device's).
    pub fn addressable_shards(&self) -> ShardList<'_, T> {
        ShardList(&self.shards)
    }

    /// The blocks, consumed.
    pub fn into_shards(self) -> Vec<Shard<T>> {
        self.shards
    }
}

/// `jax.device_put(x, sharding)`: lays `x` out over the sharding's mesh.
pub fn device_put<T: Clone + Send + Sync>(
    x: &ArrayD<T>,
    sharding: &NamedSharding,
) -> Result<Sharded<T>> {
    sharding.check(x.shape(), "device_put")?;
    let placements: Vec<Placement> = sharding
        .placements(x.shape())?
        .into_iter()
        .filter(|p| sharding.mesh().is_local(&p.device))
        .collect();
    let datas = placements.iter().map(|p| block_of(x, p)).collect();
    Ok(Sharded::assemble(x.shape(), sharding, placements, datas))
}

/// The block of `x` at `p`.
pub(crate) fn block_of<T: Clone>(x: &ArrayD<T>, p: &Placement) -> ArrayD<T> {
    block_of_view(x.view(), p)
}

/// The block of the array viewed by `view` at `p`, copying only the block.
pub(crate) fn block_of_view<T: Clone>(
    mut view: ndarray::ArrayViewD<'_, T>,
    p: &Placement,
) -> ArrayD<T> {
    for (d, r) in p.index.iter().enumerate() {
        if let Some(r) = r {
            view.slice_axis_inplace(ndarray::Axis(d), Slice::from(r.clone()));
        }
    }
    view.to_owned()
}

/// JAX's repr of the whole array: `Array([...], dtype=float32)`.
macro_rules! display_sharded {
    ($($t:ty => $name:literal),*) => {$(
        impl fmt::Display for Sharded<$t> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let whole = match self.gather() {
                    Ok(w) => w,
                    Err(e) => return write!(f, "Array(<{e}>, dtype={})", $name),
                };
                write!(
                    f,
                    "Array({}{}, dtype={})",
                    format_array_repr(&whole.view(), "Array(".len()),
                    empty_shape_suffix(whole.shape()),
                    $name
                )
            }
        }
    )*};
}

display_sharded!(f32 => "float32", i32 => "int32", u32 => "uint32", bool => "bool");
