//! `jax.debug.visualize_array_sharding`: which device holds which block,
//! as a picture.

use super::array::Sharded;
use crate::error::Result;

/// The picture `jax.debug.visualize_array_sharding(x)` prints for a 1-D or
/// 2-D array (a 1-D array is one row): one cell per block, labelled with
/// the devices holding it (`CPU 0`, or `CPU 0,1` for replicas), without
/// the box lines a terminal shows.
///
/// ```
/// use flaxen::sharding::{create_device_mesh, device_put, visualize_array_sharding, Mesh, NamedSharding, PartitionSpec};
/// use ndarray::ArrayD;
///
/// let mesh = Mesh::new(create_device_mesh(&[2])?, &["data"])?;
/// let s = NamedSharding::new(&mesh, PartitionSpec::new(["data"]))?;
/// let x = device_put(&ArrayD::<f32>::zeros(vec![2, 1]), &s)?;
/// assert_eq!(visualize_array_sharding(&x)?, "  CPU 0  \n         \n  CPU 1  \n         ");
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn visualize_array_sharding<T>(x: &Sharded<T>) -> Result<String> {
    let shape = x.shape();
    if shape.len() > 2 {
        return Err(crate::error::Error::Config {
            path: String::new(),
            message: format!(
                "visualize_array_sharding draws 1-D and 2-D arrays; this one has shape {shape:?}"
            ),
        });
    }
    // Block starts along rows and columns (a 1-D array is one row).
    let start = |s: &super::array::Shard<T>, d: usize| -> usize {
        s.index.get(d).cloned().flatten().map_or(0, |r| r.start)
    };
    let (row_dim, col_dim) = if shape.len() == 2 {
        (Some(0), Some(1))
    } else {
        (None, Some(0))
    };
    let mut rows: Vec<usize> = Vec::new();
    let mut cols: Vec<usize> = Vec::new();
    for s in x.addressable_shards().iter() {
        let r = row_dim.map_or(0, |d| start(s, d));
        let c = col_dim.map_or(0, |d| if shape.is_empty() { 0 } else { start(s, d) });
        if !rows.contains(&r) {
            rows.push(r);
        }
        if !cols.contains(&c) {
            cols.push(c);
        }
    }
    rows.sort_unstable();
    cols.sort_unstable();
    let mut labels = vec![vec![Vec::new(); cols.len()]; rows.len()];
    for s in x.addressable_shards().iter() {
        let r = row_dim.map_or(0, |d| start(s, d));
        let c = col_dim.map_or(0, |d| if shape.is_empty() { 0 } else { start(s, d) });
        let (i, j) = (
            rows.binary_search(&r).unwrap_or(0),
            cols.binary_search(&c).unwrap_or(0),
        );
        labels[i][j].push(s.device.id().to_string());
    }
    let cells: Vec<Vec<String>> = labels
        .iter()
        .map(|row| {
            row.iter()
                .map(|ids| format!("CPU {}", ids.join(",")))
                .collect()
        })
        .collect();
    // Every cell is as wide as the widest label with two spaces each side.
    let width = cells.iter().flatten().map(String::len).max().unwrap_or(0) + 4;
    let mut lines = Vec::new();
    for row in &cells {
        lines.push(
            row.iter()
                .map(|c| format!("{c:^width$}"))
                .collect::<String>(),
        );
        lines.push(" ".repeat(width * row.len()));
    }
    Ok(lines.join("\n"))
}
