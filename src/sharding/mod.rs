//! Devices, meshes and sharded arrays (`jax.sharding`): work split over
//! several virtual CPU devices, each with its own block of the data and,
//! through JAX's partitionable random streams, its own slice of every
//! random array — the same numbers as one device.
//!
//! - [`Device`], [`create_device_mesh`], [`Mesh`]: devices over named axes.
//! - [`PartitionSpec`], [`NamedSharding`]: how an array is cut over them.
//! - [`Sharded`], [`Shard`], [`device_put`]: arrays laid out so, with
//!   `addressable_shards` printed as JAX prints them, and
//!   [`visualize_array_sharding`].
//! - [`shard_map`]: a function run once per device on its blocks, with
//!   collectives ([`psum`], [`pmean`], [`all_gather`]) over the mesh axes.
//! - [`random`]: samplers whose devices each draw only their block.

mod array;
mod collectives;
mod error;
mod mesh;
mod named;
pub mod random;
mod shard_map;
mod spec;
mod visualize;

pub use array::{device_put, Shard, ShardList, Sharded};
pub use collectives::{all_gather, axis_index, pmean, psum};
pub use error::ShardingError;
pub use mesh::{create_device_mesh, Device, DeviceArray, Mesh, MAX_DEVICES};
pub use named::{NamedSharding, Placement};
pub use shard_map::{jit, shard_map, ShardArg, ShardArgs, ShardMapped};
pub use spec::{PartitionSpec, SpecEntry};
pub use visualize::visualize_array_sharding;
