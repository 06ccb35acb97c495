//! Whole arrays from blocks spread over processes.

use ndarray::{ArrayD, IxDyn, Slice};

use super::error::DistributedError;
use super::wire::Message;
use crate::error::Result;
use crate::sharding::{Sharded, ShardingError};

/// The whole of `x` in every process, each block from the process that
/// holds it (`multihost_utils.process_allgather`): on a single-process
/// mesh, [`Sharded::gather`].
///
/// Every process of the job must call it, in the same order as its other
/// calls.
pub fn process_allgather(x: &Sharded<f32>) -> Result<ArrayD<f32>> {
    let sharding = x.sharding();
    let Some(cluster) = sharding.mesh().cluster() else {
        return x.gather();
    };
    let items = x
        .addressable_shards()
        .iter()
        .map(|s| {
            let values = match s.data.as_slice() {
                Some(v) => v.to_vec(),
                None => s.data.iter().copied().collect(),
            };
            (
                s.device.id() as u32,
                vec![(s.data.shape().to_vec(), values)],
            )
        })
        .collect();
    let mine = Message::Operands {
        call: 0,
        index: 0,
        op: "process_allgather".into(),
        items,
    };
    let placements = sharding.placements(x.shape())?;
    let mut out = ArrayD::zeros(IxDyn(x.shape()));
    let mut filled = vec![false; placements.len()];
    for (p, bytes) in cluster.all_gather_bytes(mine.encode())?.iter().enumerate() {
        let Message::Operands { items, .. } = Message::decode(bytes, p)? else {
            return Err(DistributedError::Malformed {
                peer: p,
                message: "expected shards".into(),
            }
            .into());
        };
        for (device, mut operands) in items {
            let bad = |message: String| DistributedError::Malformed { peer: p, message };
            let k = placements
                .iter()
                .position(|q| q.device.id() == device as usize)
                .ok_or_else(|| bad(format!("a shard of unknown device {device}")))?;
            let (shape, values) = operands
                .pop()
                .ok_or_else(|| bad(format!("an empty shard of device {device}")))?;
            let expected = placements[k].shape(x.shape());
            if shape != expected {
                return Err(bad(format!(
                    "device {device}'s shard has shape {shape:?}, expected {expected:?}"
                ))
                .into());
            }
            let block = ArrayD::from_shape_vec(IxDyn(&shape), values)
                .map_err(|e| bad(format!("device {device}'s shard: {e}")))?;
            let mut view = out.view_mut();
            for (d, r) in placements[k].index.iter().enumerate() {
                if let Some(r) = r {
                    view.slice_axis_inplace(ndarray::Axis(d), Slice::from(r.clone()));
                }
            }
            view.assign(&block);
            // Every device holding the same block is covered by it.
            for (j, q) in placements.iter().enumerate() {
                if q.index == placements[k].index {
                    filled[j] = true;
                }
            }
        }
    }
    if let Some(j) = filled.iter().position(|f| !f) {
        return Err(ShardingError::NotAddressable {
            device: placements[j].device.id(),
            process: placements[j].device.process_index(),
        }
        .into());
    }
    Ok(out)
}
