//! What can go wrong when placing arrays and work on a mesh.

use std::fmt;

/// A mistake in a mesh, a partition spec, a sharding or a sharded call,
/// with the values involved.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ShardingError {
    /// A mesh shape with no devices (a zero, or no axes).
    EmptyMesh {
        /// The shape asked for.
        shape: Vec<usize>,
    },
    /// Mesh axes and names that do not pair up, or a repeated name.
    AxisNames {
        /// The mesh's shape.
        shape: Vec<usize>,
        /// The names given.
        names: Vec<String>,
        /// What is wrong.
        message: String,
    },
    /// A partition spec naming an axis that the mesh lacks.
    UnknownAxis {
        /// The name.
        name: String,
        /// The mesh's axis names.
        axis_names: Vec<String>,
    },
    /// A partition spec using one mesh axis for two dimensions.
    AxisUsedTwice {
        /// The name.
        name: String,
        /// The spec, as JAX prints it.
        spec: String,
    },
    /// A partition spec with more entries than the array has dimensions.
    SpecRank {
        /// The spec, as JAX prints it.
        spec: String,
        /// The array's shape.
        shape: Vec<usize>,
    },
    /// A dimension that the mesh axes it is split over do not divide.
    Indivisible {
        /// What was being placed (`device_put`, `shard_map argument 1`, ...).
        what: String,
        /// The array's shape.
        shape: Vec<usize>,
        /// The dimension.
        dim: usize,
        /// The number of pieces it is cut into.
        pieces: usize,
        /// The spec, as JAX prints it.
        spec: String,
    },
    /// A per-device result whose shape differs between devices, or from
    /// what the output spec needs.
    ShardShape {
        /// What was being assembled.
        what: String,
        /// The device.
        device: usize,
        /// The shape it returned.
        found: Vec<usize>,
        /// The shape expected.
        expected: Vec<usize>,
    },
    /// A device's worker thread could not be started.
    Spawn {
        /// The device.
        device: usize,
        /// The operating system's message.
        message: String,
    },
    /// A block of an array held only by another process's devices.
    NotAddressable {
        /// A device holding it.
        device: usize,
        /// Its process.
        process: usize,
    },
    /// A replica id or device index outside the mesh.
    OutOfRange {
        /// What was asked for (`replica`, `device`).
        what: &'static str,
        /// The index.
        index: usize,
        /// The number there is.
        count: usize,
    },
}

impl fmt::Display for ShardingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardingError::EmptyMesh { shape } => {
                write!(
                    f,
                    "a mesh needs at least one device; shape {shape:?} has none"
                )
            }
            ShardingError::AxisNames {
                shape,
                names,
                message,
            } => write!(
                f,
                "mesh of shape {shape:?} with axis names {names:?}: {message}"
            ),
            ShardingError::UnknownAxis { name, axis_names } => write!(
                f,
                "resource axis \"{name}\" of the partition spec is not in the mesh's axis \
                 names {axis_names:?}"
            ),
            ShardingError::AxisUsedTwice { name, spec } => write!(
                f,
                "{spec} uses mesh axis \"{name}\" for more than one dimension"
            ),
            ShardingError::SpecRank { spec, shape } => write!(
                f,
                "{spec} has more entries than an array of shape {shape:?} has dimensions"
            ),
            ShardingError::Indivisible {
                what,
                shape,
                dim,
                pieces,
                spec,
            } => write!(
                f,
                "{what}: {spec} cuts dimension {dim} of shape {shape:?} into {pieces} pieces, \
                 but its size {} is not divisible by {pieces}",
                shape[*dim]
            ),
            ShardingError::ShardShape {
                what,
                device,
                found,
                expected,
            } => write!(
                f,
                "{what}: device {device} returned shape {found:?}, expected {expected:?}"
            ),
            ShardingError::Spawn { device, message } => {
                write!(
                    f,
                    "could not start the thread of device {device}: {message}"
                )
            }
            ShardingError::NotAddressable { device, process } => write!(
                f,
                "the block of device {device} is held only by process {process}: this process \
                 cannot read it (gather it across processes first)"
            ),
            ShardingError::OutOfRange { what, index, count } => {
                write!(f, "{what} {index} out of range: there are {count}")
            }
        }
    }
}

impl std::error::Error for ShardingError {}
