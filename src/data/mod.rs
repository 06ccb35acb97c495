//! Data for training: the handwritten digits shipped with the crate, and
//! minibatches of a shuffled data set as the usual JAX training loop draws
//! them.
//!
//! * [`digits`] — the UCI / scikit-learn digits (1,797 8×8 images), decoded
//!   from the gzip file embedded in the library.
//! * [`Batches`] — `x[perm[i*bs:(i+1)*bs]]` for a permutation drawn with
//!   [`random::permutation`](crate::random::permutation), gathering only
//!   each batch's rows.

mod batches;
pub mod digits;
mod error;

pub use batches::{Batch, Batches};
pub use error::DataError;
