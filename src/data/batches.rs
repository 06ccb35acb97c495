//! Shuffled minibatches, as the usual JAX loop draws them:
//! `perm = jax.random.permutation(key, n)`, then `x[perm[i*bs:(i+1)*bs]]`.

use ndarray::{Array1, Array2, ArrayView1, ArrayView2, Axis};

use super::error::DataError;
use crate::random::{self, Key};

/// One minibatch: features (rows gathered from the data set) and labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// Rows of the features, in permutation order.
    pub x: Array2<f32>,
    /// The matching labels.
    pub y: Array1<i32>,
}

/// An epoch's minibatches over borrowed features and labels: the data set
/// is not copied, each batch gathers only its own rows. The last partial
/// batch is dropped, as the usual loop's `n // batch_size` steps do (see
/// [`Batches::keep_last`]).
///
/// ```
/// use flaxen::data::Batches;
/// use flaxen::random;
/// use ndarray::{Array1, Array2};
///
/// let x = Array2::from_shape_fn((10, 2), |(i, j)| (i * 2 + j) as f32);
/// let y = Array1::from_iter(0..10);
/// let batches = Batches::shuffled(x.view(), y.view(), 4, random::key(0))?;
/// assert_eq!(batches.len(), 2); // 10 // 4; the last two examples are dropped
/// for batch in batches {
///     assert_eq!(batch.x.dim(), (4, 2));
///     assert_eq!(batch.x[[0, 0]], 2.0 * batch.y[0] as f32);
/// }
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Batches<'d> {
    x: ArrayView2<'d, f32>,
    y: ArrayView1<'d, i32>,
    order: Vec<usize>,
    batch_size: usize,
    next: usize,
    keep_last: bool,
}

impl<'d> Batches<'d> {
    /// Batches in the order of `jax.random.permutation(key, n)`.
    ///
    /// Fails with [`DataError::BatchSize`] for a batch size of 0 or larger
    /// than the data set, and [`DataError::Shape`] when `x` and `y` differ
    /// in length.
    pub fn shuffled(
        x: ArrayView2<'d, f32>,
        y: ArrayView1<'d, i32>,
        batch_size: usize,
        key: Key,
    ) -> crate::Result<Batches<'d>> {
        let n = check(&x, &y, batch_size)?;
        let perm = random::permutation(key, n)?;
        let order = perm.iter().map(|&i| i as usize).collect();
        Ok(Batches::new(x, y, order, batch_size))
    }

    /// Batches in a given order (a permutation of `0..n`).
    ///
    /// Fails as [`Batches::shuffled`] does, and with [`DataError::Shape`]
    /// when `order` is not a permutation of the examples.
    pub fn in_order(
        x: ArrayView2<'d, f32>,
        y: ArrayView1<'d, i32>,
        batch_size: usize,
        order: Vec<usize>,
    ) -> Result<Batches<'d>, DataError> {
        let n = check(&x, &y, batch_size)?;
        let mut seen = vec![false; n];
        let is_perm = order.len() == n
            && order
                .iter()
                .all(|&i| i < n && !std::mem::replace(&mut seen[i], true));
        if !is_perm {
            return Err(DataError::Shape {
                message: format!("the order is not a permutation of the {n} examples"),
            });
        }
        Ok(Batches::new(x, y, order, batch_size))
    }

    fn new(
        x: ArrayView2<'d, f32>,
        y: ArrayView1<'d, i32>,
        order: Vec<usize>,
        batch_size: usize,
    ) -> Batches<'d> {
        Batches {
            x,
            y,
            order,
            batch_size,
            next: 0,
            keep_last: false,
        }
    }

    /// Also yields the last, smaller batch when the batch size does not
    /// divide the data set.
    pub fn keep_last(mut self, keep: bool) -> Batches<'d> {
        self.keep_last = keep;
        self
    }

    /// The order the examples are visited in.
    pub fn order(&self) -> &[usize] {
        &self.order
    }
}

/// The number of examples, after checking lengths and the batch size.
fn check(
    x: &ArrayView2<'_, f32>,
    y: &ArrayView1<'_, i32>,
    batch_size: usize,
) -> Result<usize, DataError> {
    let n = x.nrows();
    if y.len() != n {
        return Err(DataError::Shape {
            message: format!("{n} feature rows but {} labels", y.len()),
        });
    }
    if batch_size == 0 || batch_size > n {
        return Err(DataError::BatchSize {
            batch_size,
            examples: n,
        });
    }
    Ok(n)
}

impl Iterator for Batches<'_> {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        let start = self.next;
        let remaining = self.order.len() - start;
        if remaining == 0 || (remaining < self.batch_size && !self.keep_last) {
            return None;
        }
        let end = start + remaining.min(self.batch_size);
        self.next = end;
        let rows = &self.order[start..end];
        Some(Batch {
            x: self.x.select(Axis(0), rows),
            y: self.y.select(Axis(0), rows),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let remaining = self.order.len() - self.next;
        let n = if self.keep_last {
            remaining.div_ceil(self.batch_size)
        } else {
            remaining / self.batch_size
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for Batches<'_> {}
