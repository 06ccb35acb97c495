//! `NamedSharding`: a mesh and a partition spec, and which block of an
//! array each device holds.

use std::fmt;
use std::ops::Range;

use super::error::ShardingError;
use super::mesh::{Device, Mesh};
use super::spec::PartitionSpec;
use crate::error::Result;

/// An array laid out over `mesh` as `spec` says
/// (`jax.sharding.NamedSharding`).
///
/// ```
/// use flaxen::sharding::{create_device_mesh, Mesh, NamedSharding, PartitionSpec};
///
/// let mesh = Mesh::new(create_device_mesh(&[8])?, &["data"])?;
/// let s = NamedSharding::new(&mesh, PartitionSpec::new(["data"]))?;
/// assert_eq!(
///     s.to_string(),
///     "NamedSharding(mesh=Mesh('data': 8), spec=PartitionSpec('data',))"
/// );
/// assert_eq!(s.shard_shape(&[8, 1])?, vec![1, 1]);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct NamedSharding {
    mesh: Mesh,
    spec: PartitionSpec,
}

/// Where one device's block of an array lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The device.
    pub device: Device,
    /// The device's position in the mesh's row-major order.
    pub position: usize,
    /// Per dimension: the range held, or `None` for the whole dimension
    /// (printed `slice(None, None, None)`).
    pub index: Vec<Option<Range<usize>>>,
    /// Which copy of the block this is: devices holding the same block
    /// are numbered 0, 1, ... in mesh order.
    pub replica_id: usize,
}

impl Placement {
    /// The block's start along each dimension.
    pub fn start(&self) -> Vec<usize> {
        self.index
            .iter()
            .map(|r| r.as_ref().map_or(0, |r| r.start))
            .collect()
    }

    /// The block's shape, for an array of shape `global`.
    pub fn shape(&self, global: &[usize]) -> Vec<usize> {
        self.index
            .iter()
            .zip(global)
            .map(|(r, &g)| r.as_ref().map_or(g, |r| r.end - r.start))
            .collect()
    }
}

impl NamedSharding {
    /// The sharding of `spec` over `mesh`: every axis name must be one of
    /// the mesh's, and used at most once.
    pub fn new(mesh: &Mesh, spec: PartitionSpec) -> Result<NamedSharding> {
        let mut seen: Vec<&str> = Vec::new();
        for e in spec.entries() {
            for a in e.axes() {
                if mesh.axis_index(a).is_none() {
                    return Err(ShardingError::UnknownAxis {
                        name: a.to_string(),
                        axis_names: mesh.axis_names().to_vec(),
                    }
                    .into());
                }
                if seen.contains(&a) {
                    return Err(ShardingError::AxisUsedTwice {
                        name: a.to_string(),
                        spec: spec.to_string(),
                    }
                    .into());
                }
                seen.push(a);
            }
        }
        Ok(NamedSharding {
            mesh: mesh.clone(),
            spec,
        })
    }

    /// A fully replicated sharding over `mesh`.
    pub fn replicated(mesh: &Mesh) -> NamedSharding {
        NamedSharding {
            mesh: mesh.clone(),
            spec: PartitionSpec::replicated(),
        }
    }

    /// The mesh.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// The spec.
    pub fn spec(&self) -> &PartitionSpec {
        &self.spec
    }

    /// How many pieces dimension `d` is cut into.
    pub fn pieces(&self, d: usize) -> usize {
        self.spec
            .entry(d)
            .axes()
            .iter()
            .map(|a| self.mesh.axis_size(a).unwrap_or(1))
            .product()
    }

    /// Checks that an array of shape `global` can be laid out so; `what`
    /// names it in the error.
    pub fn check(&self, global: &[usize], what: &str) -> Result<()> {
        if self.spec.entries().len() > global.len() {
            return Err(ShardingError::SpecRank {
                spec: self.spec.to_string(),
                shape: global.to_vec(),
            }
            .into());
        }
        for (d, &size) in global.iter().enumerate() {
            let pieces = self.pieces(d);
            if size % pieces != 0 {
                return Err(ShardingError::Indivisible {
                    what: what.to_string(),
                    shape: global.to_vec(),
                    dim: d,
                    pieces,
                    spec: self.spec.to_string(),
                }
                .into());
            }
        }
        Ok(())
    }

    /// The shape of each device's block (`shard_shape`).
    pub fn shard_shape(&self, global: &[usize]) -> Result<Vec<usize>> {
        self.check(global, "shard_shape")?;
        Ok(global
            .iter()
            .enumerate()
            .map(|(d, &g)| g / self.pieces(d))
            .collect())
    }

    /// Every device's block of an array of shape `global`, in the mesh's
    /// device order (`devices_indices_map`, with replica ids).
    pub fn placements(&self, global: &[usize]) -> Result<Vec<Placement>> {
        self.check(global, "placements")?;
        let mesh = &self.mesh;
        let mut out: Vec<Placement> = Vec::with_capacity(mesh.size());
        for (k, device) in mesh.device_list().into_iter().enumerate() {
            let c = mesh.coords(k);
            let index = global
                .iter()
                .enumerate()
                .map(|(d, &g)| {
                    let axes = self.spec.entry(d).axes();
                    if axes.is_empty() {
                        return None;
                    }
                    // Mixed radix over the axes, major first.
                    let (mut block, mut pieces) = (0, 1);
                    for a in axes {
                        let i = mesh.axis_index(a).expect("checked in new");
                        block = block * mesh.shape()[i] + c[i];
                        pieces *= mesh.shape()[i];
                    }
                    let len = g / pieces;
                    Some(block * len..(block + 1) * len)
                })
                .collect::<Vec<_>>();
            let replica_id = out.iter().filter(|p| p.index == index).count();
            out.push(Placement {
                device,
                position: k,
                index,
                replica_id,
            });
        }
        Ok(out)
    }

    /// Whether every device holds the whole array.
    pub fn is_fully_replicated(&self) -> bool {
        self.spec.entries().iter().all(|e| e.axes().is_empty())
    }
}

impl fmt::Display for NamedSharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NamedSharding(mesh={}, spec={})",
            self.mesh.short(),
            self.spec
        )
    }
}
