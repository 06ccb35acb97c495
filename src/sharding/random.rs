//! Random arrays laid out over a mesh, each device drawing only its own
//! block (`jax.random.*` under `jit` with an output sharding).
//!
//! Every element of JAX's random arrays is a function of the key and the
//! element's flat index in the whole array (in the partitionable mode the
//! guide turns on, and, with more hashing, in the original one), so a
//! device can hash exactly the indices of its block: the gathered array is
//! bit for bit the unsharded one, whatever the mesh and the spec.
//!
//! ```
//! use flaxen::random;
//! use flaxen::sharding::{self, create_device_mesh, Mesh, NamedSharding, PartitionSpec};
//!
//! let mesh = Mesh::new(create_device_mesh(&[2, 2])?, &["x", "y"])?;
//! let s = NamedSharding::new(&mesh, PartitionSpec::new(["x", "y"]))?;
//! let key = random::key(0);
//! let sharded = sharding::random::normal(key.clone(), &[4, 6], &s)?;
//! assert_eq!(sharded.addressable_shards()[3].data.shape(), &[2, 3]);
//! assert_eq!(sharded.gather()?, random::normal(key, &[4, 6])?);
//! # Ok::<(), flaxen::Error>(())
//! ```
//!
//! Only samplers whose elements are independent of one another are here;
//! `permutation` and `choice` are not (`categorical` is sharded over its
//! results, each device drawing every category of its block).

use ndarray::ArrayD;

use super::array::Sharded;
use super::named::NamedSharding;
use crate::error::Result;
use crate::random::sampling::{with_region, Region};
use crate::random::{self as jr, Float, Key, RandomError, UInt};

/// Each device of `sharding` runs `draw` (a sampler called with the whole
/// `shape`) computing only its block.
fn draw_sharded<T: Clone + Send + Sync>(
    function: &str,
    shape: &[usize],
    sharding: &NamedSharding,
    draw: impl Fn() -> std::result::Result<ArrayD<T>, RandomError> + Sync,
) -> Result<Sharded<T>> {
    sharding.check(shape, function)?;
    Sharded::from_fn(shape, sharding, function, |p| {
        let region = Region {
            global: shape.to_vec(),
            start: p.start(),
            shape: p.shape(shape),
        };
        Ok(with_region(region, &draw)?)
    })
}

/// `jax.random.bits(key, shape)` (uint32), laid out by `sharding`.
pub fn bits(key: Key, shape: &[usize], sharding: &NamedSharding) -> Result<Sharded<u32>> {
    draw_sharded("bits", shape, sharding, || jr::bits(key.clone(), shape))
}

/// `jax.random.uniform(key, shape)`, laid out by `sharding`.
pub fn uniform(key: Key, shape: &[usize], sharding: &NamedSharding) -> Result<Sharded<f32>> {
    draw_sharded("uniform", shape, sharding, || {
        jr::uniform(key.clone(), shape)
    })
}

/// `jax.random.uniform(key, shape, minval, maxval)`, laid out by `sharding`.
pub fn uniform_range(
    key: Key,
    shape: &[usize],
    minval: f32,
    maxval: f32,
    sharding: &NamedSharding,
) -> Result<Sharded<f32>> {
    draw_sharded("uniform", shape, sharding, || {
        jr::uniform_range(key.clone(), shape, minval, maxval)
    })
}

/// `jax.random.normal(key, shape)`, laid out by `sharding`.
pub fn normal(key: Key, shape: &[usize], sharding: &NamedSharding) -> Result<Sharded<f32>> {
    draw_sharded("normal", shape, sharding, || jr::normal(key.clone(), shape))
}

/// `jax.random.truncated_normal(key, lower, upper, shape)`, laid out by
/// `sharding`.
pub fn truncated_normal(
    key: Key,
    lower: f32,
    upper: f32,
    shape: &[usize],
    sharding: &NamedSharding,
) -> Result<Sharded<f32>> {
    draw_sharded("truncated_normal", shape, sharding, || {
        jr::truncated_normal(key.clone(), lower, upper, shape)
    })
}

/// `jax.random.bernoulli(key, p, shape)`, laid out by `sharding`.
pub fn bernoulli(
    key: Key,
    p: f32,
    shape: &[usize],
    sharding: &NamedSharding,
) -> Result<Sharded<bool>> {
    draw_sharded("bernoulli", shape, sharding, || {
        jr::bernoulli(key.clone(), p, shape)
    })
}

/// `jax.random.randint(key, shape, minval, maxval)`, laid out by
/// `sharding`.
pub fn randint(
    key: Key,
    shape: &[usize],
    minval: i32,
    maxval: i32,
    sharding: &NamedSharding,
) -> Result<Sharded<i32>> {
    draw_sharded("randint", shape, sharding, || {
        jr::randint(key.clone(), shape, minval, maxval)
    })
}

/// `jax.random.gumbel(key, shape)`, laid out by `sharding`.
pub fn gumbel(key: Key, shape: &[usize], sharding: &NamedSharding) -> Result<Sharded<f32>> {
    draw_sharded("gumbel", shape, sharding, || jr::gumbel(key.clone(), shape))
}

/// `jax.random.exponential(key, shape)`, laid out by `sharding`.
pub fn exponential(key: Key, shape: &[usize], sharding: &NamedSharding) -> Result<Sharded<f32>> {
    draw_sharded("exponential", shape, sharding, || {
        jr::exponential(key.clone(), shape)
    })
}

/// `jax.random.bits(key, shape, dtype)` for any unsigned dtype, laid out by
/// `sharding`.
pub fn bits_as<U: UInt + Clone + Send + Sync>(
    key: Key,
    shape: &[usize],
    sharding: &NamedSharding,
) -> Result<Sharded<U>> {
    draw_sharded("bits", shape, sharding, || {
        jr::bits_as::<U>(key.clone(), shape)
    })
}

/// `jax.random.uniform(key, shape, dtype)` for any float dtype, laid out by
/// `sharding`.
pub fn uniform_as<T: Float + Clone + Send + Sync>(
    key: Key,
    shape: &[usize],
    sharding: &NamedSharding,
) -> Result<Sharded<T>> {
    draw_sharded("uniform", shape, sharding, || {
        jr::uniform_as::<T>(key.clone(), shape)
    })
}

/// `jax.random.normal(key, shape, dtype)` for any float dtype, laid out by
/// `sharding`.
pub fn normal_as<T: Float + Clone + Send + Sync>(
    key: Key,
    shape: &[usize],
    sharding: &NamedSharding,
) -> Result<Sharded<T>> {
    draw_sharded("normal", shape, sharding, || {
        jr::normal_as::<T>(key.clone(), shape)
    })
}

/// `jax.random.uniform(key, shape, dtype, minval, maxval)` for any float
/// dtype, laid out by `sharding`.
pub fn uniform_range_as<T: Float + Clone + Send + Sync>(
    key: Key,
    shape: &[usize],
    minval: T,
    maxval: T,
    sharding: &NamedSharding,
) -> Result<Sharded<T>> {
    draw_sharded("uniform", shape, sharding, || {
        jr::uniform_range_as::<T>(key.clone(), shape, minval, maxval)
    })
}

/// `jax.random.truncated_normal(key, lower, upper, shape, dtype)` for any
/// float dtype, laid out by `sharding`.
pub fn truncated_normal_as<T: Float + Clone + Send + Sync>(
    key: Key,
    lower: T,
    upper: T,
    shape: &[usize],
    sharding: &NamedSharding,
) -> Result<Sharded<T>> {
    draw_sharded("truncated_normal", shape, sharding, || {
        jr::truncated_normal_as::<T>(key.clone(), lower, upper, shape)
    })
}

/// `jax.random.bernoulli(key, p, shape)` drawn in `p`'s float dtype, laid
/// out by `sharding`.
pub fn bernoulli_as<T: Float + Clone + Send + Sync>(
    key: Key,
    p: T,
    shape: &[usize],
    sharding: &NamedSharding,
) -> Result<Sharded<bool>> {
    draw_sharded("bernoulli", shape, sharding, || {
        jr::bernoulli_as::<T>(key.clone(), p, shape)
    })
}

/// `jax.random.gumbel(key, shape, dtype)` for any float dtype, laid out by
/// `sharding`.
pub fn gumbel_as<T: Float + Clone + Send + Sync>(
    key: Key,
    shape: &[usize],
    sharding: &NamedSharding,
) -> Result<Sharded<T>> {
    draw_sharded("gumbel", shape, sharding, || {
        jr::gumbel_as::<T>(key.clone(), shape)
    })
}

/// `jax.random.exponential(key, shape, dtype)` for any float dtype, laid
/// out by `sharding`.
pub fn exponential_as<T: Float + Clone + Send + Sync>(
    key: Key,
    shape: &[usize],
    sharding: &NamedSharding,
) -> Result<Sharded<T>> {
    draw_sharded("exponential", shape, sharding, || {
        jr::exponential_as::<T>(key.clone(), shape)
    })
}

/// `jax.random.categorical(key, logits, axis, shape)`, laid out by
/// `sharding` over the result's shape. Each device draws the Gumbel noise
/// of its block of results only, every category of it (the whole `axis`),
/// and takes the argmax there: the gathered result is the unsharded one.
///
/// ```
/// use flaxen::random;
/// use flaxen::sharding::{self, create_device_mesh, Mesh, NamedSharding, PartitionSpec};
/// use ndarray::ArrayD;
///
/// let mesh = Mesh::new(create_device_mesh(&[2])?, &["batch"])?;
/// let s = NamedSharding::new(&mesh, PartitionSpec::new(["batch"]))?;
/// let logits = ArrayD::from_shape_fn(ndarray::IxDyn(&[6, 5]), |i| (i[0] + 2 * i[1]) as f32 * 0.1);
/// let key = random::key(0);
/// let sharded = sharding::random::categorical(key.clone(), &logits.view(), -1, None, &s)?;
/// assert_eq!(sharded.gather()?, random::categorical(key, &logits.view(), -1, None)?);
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn categorical(
    key: Key,
    logits: &ndarray::ArrayViewD<'_, f32>,
    axis: isize,
    shape: Option<&[usize]>,
    sharding: &NamedSharding,
) -> Result<Sharded<i32>> {
    use ndarray::{IxDyn, Slice};
    let shape_error = |message: String| RandomError::Shape {
        function: "categorical",
        message,
    };
    let ndim = logits.ndim();
    let ax = if axis < 0 { axis + ndim as isize } else { axis };
    if ax < 0 || ax as usize >= ndim {
        return Err(shape_error(format!(
            "axis {axis} is out of range for logits of {ndim} dimensions"
        ))
        .into());
    }
    let ax = ax as usize;
    let mut batch = logits.shape().to_vec();
    batch.remove(ax);
    let shape = shape.unwrap_or(&batch).to_vec();
    if shape.len() < batch.len() || shape[shape.len() - batch.len()..] != batch[..] {
        return Err(shape_error(format!(
            "shape {shape:?} must end with the logits' batch shape {batch:?} (logits shape {:?} \
             without axis {axis})",
            logits.shape()
        ))
        .into());
    }
    if logits.shape()[ax] == 0 {
        return Err(shape_error(format!(
            "the logits have no categories: axis {axis} of shape {:?} is empty",
            logits.shape()
        ))
        .into());
    }
    sharding.check(&shape, "categorical")?;
    let prefix = shape.len() - batch.len();
    let mut gshape = shape[..prefix].to_vec();
    gshape.extend_from_slice(logits.shape());
    // XLA's CPU reads subnormal logits as zero, as the unsharded sampler.
    let logits = jr::flushed(logits);
    Sharded::from_fn(&shape, sharding, "categorical", |p| {
        let (start, block) = (p.start(), p.shape(&shape));
        if block.iter().product::<usize>() == 0 {
            return Ok(ArrayD::from_shape_vec(IxDyn(&block), Vec::new()).expect("empty"));
        }
        // The noise's block: the results' block, and every category.
        let (bs, bb) = (&start[prefix..], &block[prefix..]);
        let mut gstart = start[..prefix].to_vec();
        let mut gblock = block[..prefix].to_vec();
        for d in 0..ndim {
            let (s, n) = match d.cmp(&ax) {
                std::cmp::Ordering::Less => (bs[d], bb[d]),
                std::cmp::Ordering::Equal => (0, logits.shape()[ax]),
                std::cmp::Ordering::Greater => (bs[d - 1], bb[d - 1]),
            };
            gstart.push(s);
            gblock.push(n);
        }
        let region = Region {
            global: gshape.clone(),
            start: gstart,
            shape: gblock.clone(),
        };
        let g = with_region(region, || jr::gumbel(key.clone(), &gshape))?;
        let local = logits.slice_each_axis(|a| {
            let d = a.axis.index();
            match d.cmp(&ax) {
                std::cmp::Ordering::Less => Slice::from(bs[d]..bs[d] + bb[d]),
                std::cmp::Ordering::Equal => Slice::from(..),
                std::cmp::Ordering::Greater => Slice::from(bs[d - 1]..bs[d - 1] + bb[d - 1]),
            }
        });
        let draws: usize = block[..prefix].iter().product();
        let out = jr::argmax_of_scores(g, &local, ax, draws);
        Ok(ArrayD::from_shape_vec(IxDyn(&block), out).expect("the block's element count"))
    })
}
