//! JAX's PRNG (`jax.random`), bit for bit.
//!
//! Keys are splittable and counter-based: a [`Key`] is two `u32` words,
//! [`split`] and [`fold_in`] derive new keys by hashing with Threefry-2x32,
//! and samplers hash a counter per output element. Everything here gives
//! the same keys, bits and integers as JAX 0.10 on CPU, and the same `f32`
//! values (XLA's own `erf`, `erf_inv`, `log` and `log1p` formulas are
//! reproduced).
//!
//! ```
//! use flaxen::random;
//!
//! let key = random::key(0);
//! let [k1, k2] = random::split_n(key);
//! let x = random::normal(k1, &[2, 3]).unwrap();
//! let b = random::bits(k2, &[4]).unwrap();
//! assert_eq!(x.shape(), &[2, 3]);
//! assert_eq!(b.len(), 4);
//! ```

mod distributions;
mod dtype;
mod error;
mod key;
mod rng_core;
pub(crate) mod sampling;
mod threefry;
mod uint_bits;

pub(crate) use distributions::{
    argmax_of_scores, bernoulli_bytes_into_all, bernoulli_mask, flushed, ByteMask,
};
pub use distributions::{
    bernoulli, bernoulli_as, bits, bits_as, bits_dtype, categorical, choice, exponential,
    exponential_as, exponential_dtype, gumbel, gumbel_as, gumbel_dtype, normal, normal_as,
    normal_dtype, permutation, permutation_along, randint, truncated_normal, truncated_normal_as,
    truncated_normal_dtype, uniform, uniform_as, uniform_dtype, uniform_range, uniform_range_as,
    uniform_range_dtype, FloatArray, UIntArray,
};
pub use dtype::{Float, FloatDType, UInt, UIntDType, X64};
pub(crate) use error::element_count;
pub use error::RandomError;
/// The 16-bit float types of the samplers' `float16` and `bfloat16`
/// results (re-exported from the `half` crate).
pub use half::{bf16, f16};
pub use key::{
    clone, fold_in, key, key_data, key_with, split, split_n, try_key, try_key_with, wrap_key_data,
    Key, KeyArray, Seed, SeedWidth, SplitShape, ThreefryMode,
};
pub use rng_core::KeyRng;
pub use threefry::threefry2x32;

pub mod tf;
