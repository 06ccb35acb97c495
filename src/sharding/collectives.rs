//! Collectives between the devices of a `shard_map` over the mesh's axis
//! names (`jax.lax.psum`, `pmean`, `all_gather`, `axis_index`). They share
//! their machinery with `Vmap`'s: the operands are reduced in device order.

use std::sync::Arc;

use crate::core::lift::collective::{bound_axis, AxisContext, Reduce};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// This device's handle on the mesh axis `axis_name`.
fn axis(axis_name: &str, op: &str) -> Result<AxisContext> {
    bound_axis(axis_name).ok_or_else(|| Error::Lift {
        path: String::new(),
        transform: "shard_map",
        message: format!(
            "{op}: unbound axis name \"{axis_name}\": no enclosing shard_map has a mesh axis of \
             that name"
        ),
    })
}

/// The sum of `x` over the devices along mesh axis `axis_name`
/// (`jax.lax.psum`), the same on each of them.
pub fn psum(x: &Tensor, axis_name: &str) -> Result<Tensor> {
    let a = axis(axis_name, "psum")?;
    Ok(a.shared
        .collective(a.item, Reduce::Sum, std::slice::from_ref(x))?
        .remove(0))
}

/// The mean of `x` over the devices along mesh axis `axis_name`
/// (`jax.lax.pmean`).
pub fn pmean(x: &Tensor, axis_name: &str) -> Result<Tensor> {
    let a = axis(axis_name, "pmean")?;
    Ok(a.shared
        .collective(a.item, Reduce::Mean, std::slice::from_ref(x))?
        .remove(0))
}

/// Every device's `x` along mesh axis `axis_name`, stacked along a new
/// axis `axis` (`jax.lax.all_gather`), or, with `tiled`, concatenated
/// along the existing axis `axis`.
pub fn all_gather(x: &Tensor, axis_name: &str, axis_pos: usize, tiled: bool) -> Result<Tensor> {
    let a = axis(axis_name, "all_gather")?;
    let limit = if tiled { x.ndim() } else { x.ndim() + 1 };
    if axis_pos >= limit.max(1) {
        return Err(Error::Lift {
            path: String::new(),
            transform: "shard_map",
            message: format!(
                "all_gather: axis {axis_pos} out of range for an operand of shape {:?}{}",
                x.shape(),
                if tiled { " (tiled)" } else { "" }
            ),
        });
    }
    let f: crate::core::lift::BatchedFn = Arc::new(move |ops: &[Tensor]| {
        // ops[0]: (devices, ...x.shape)
        let stacked = &ops[0];
        let n = stacked.ndim();
        let mut perm: Vec<usize> = (1..n).collect();
        perm.insert(axis_pos, 0);
        let moved = stacked.permute(&perm)?;
        let out = if tiled {
            let mut shape: Vec<isize> = moved.shape().iter().map(|&d| d as isize).collect();
            let merged = shape[axis_pos] * shape[axis_pos + 1];
            shape.splice(axis_pos..axis_pos + 2, [merged]);
            moved.reshape(&shape)?
        } else {
            moved
        };
        Ok((Vec::new(), vec![out]))
    });
    Ok(a.shared
        .collective(a.item, Reduce::Batched(f), std::slice::from_ref(x))?
        .remove(0))
}

/// This device's position along mesh axis `axis_name`
/// (`jax.lax.axis_index`).
pub fn axis_index(axis_name: &str) -> Result<usize> {
    Ok(axis(axis_name, "axis_index")?.item)
}
