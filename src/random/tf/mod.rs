//! TensorFlow's random numbers (`tf.random`), bit for bit, on Philox.
//!
//! TensorFlow has two ways to control randomness, and both are here:
//!
//! * the **stateless** functions ([`stateless_normal`], [`stateless_uniform`],
//!   …), pure functions of a shape-`[2]` seed;
//! * the stateful [`Generator`], whose whole state is three `i64` words that
//!   can be saved ([`GeneratorState`], serde with the `serde` feature) and
//!   restored to continue the same stream, split into independent
//!   generators, and shared process-wide ([`get_global_generator`]).
//!
//! Both run on [`Philox`] 4x32-10 and reproduce TensorFlow 2.21's CPU
//! kernels: integers, states and uniform floats exactly everywhere; `f32`
//! normals exactly everywhere, because `logf` and `sincosf` are ports of
//! glibc's algorithms; `f64` normals exactly where `std` uses the same glibc
//! build as TensorFlow (Linux; see the book for the caveat).
//!
//! ```
//! use flaxen::random::tf::{stateless_normal, Generator};
//!
//! let x = stateless_normal::<f32, _>(&[2, 3], &[1, 2], 0.0, 1.0).unwrap();
//! assert_eq!(x[[0, 0]], 0.5441101);
//!
//! let mut g = Generator::from_seed(1);
//! let saved = g.state().clone();
//! let a = g.normal(&[4]).unwrap();
//! g.restore(saved).unwrap();
//! assert_eq!(g.normal(&[4]).unwrap(), a);
//! ```

mod convert;
pub mod distribute;
mod dtype;
pub(crate) mod dynamic;
mod error;
mod generator;
mod global;
mod half;
pub use crate::xla::libm_f32;
mod math;
mod ops;
mod philox;
mod raw;
mod sampler;
mod scramble;
mod seed;
mod stateless;
mod threefry_blocks;

pub use convert::{box_muller_double, box_muller_float, uint32_to_float, uint64_to_double};
pub use distribute::{MirroredStrategy, PerReplica};
pub use dtype::{SeedInt, TfFloat, TfInt};
pub use dynamic::{IntArray, TfIntDType};
pub use error::TfRandomError;
pub use generator::{Algorithm, Generator, GeneratorState};
pub use global::{get_global_generator, set_global_generator};
pub use half::{BF16, F16};
pub use philox::{philox4x32_10, Philox};
pub use raw::{
    stateless_random_get_key_counter, stateless_random_normal_v2,
    stateless_random_uniform_full_int_v2, stateless_random_uniform_int_v2,
    stateless_random_uniform_v2, stateless_truncated_normal_v2,
};
pub use scramble::stateless_key_counter;
pub use seed::RngSeed;
pub use stateless::{
    stateless_fold_in, stateless_normal, stateless_split, stateless_truncated_normal,
    stateless_uniform, stateless_uniform_full_int, stateless_uniform_int,
};
