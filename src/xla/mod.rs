//! How XLA:CPU computes, emulated: the one home of everything flaxen does
//! to get JAX's bits on a CPU, used alike by `random` (samplers) and
//! `tensor` (operations, gradients, compiled steps).
//!
//! - [`math`] / `math_f64`: XLA's own polynomial `log`, `log1p`, `erf`,
//!   `erf_inv`, `exp`, ... with its FMA contractions and flushed denormals.
//! - [`dot`]: the summation order of 2-D products that XLA hands to
//!   YNNPACK (kernel choice, packing, `k` chunks), run by the
//!   register-blocked kernels of [`dot_blocked`] (`dot_avx512` for
//!   one partial sum per output on AVX-512, `dot_t4` for four, both run
//!   by `dot_panels`, which packs B as the first block of rows reads it;
//!   `pack_t_avx512` packs a B stored transposed); [`gemv`]: XLA's own
//!   matrix-vector and vector-vector emitters, [`fused_dot`] the loop XLA
//!   fuses a jitted `x.T @ g` into; [`eigen_dot`]: the products
//!   XLA keeps from YNNPACK (left operand transposed), blocked as Eigen's
//!   contraction blocks them, and [`eigen_conv`] the convolutions it
//!   keeps; [`onednn_gemv`]: oneDNN's matrix-vector
//!   kernel, which sums convolutions with one output (or, for the input's
//!   gradient, one input) feature per group.
//! - [`reduce`]: the order of sums along rows (tree-reduction windows) and
//!   down columns (windows of rows, YNNPACK tiles), and [`reduce_gaps`]
//!   the lanes of its loop nests when kept axes follow the reduced ones
//!   (loads with gaps); [`ynn_reduce`]: sums
//!   from 4,096 elements, which XLA hands to YNNPACK, and [`ynn_exp`]:
//!   YNNPACK's `exp`, where XLA fuses one into such a sum, and [`ynn_log`]
//!   its `log`, where XLA fuses the log of such sums into them;
//!   [`reduce_window`]: window sums (`avg_pool`) and their cotangents,
//!   by YNNPACK or XLA's loop; [`scaled_columns`]: the column sums of a
//!   scaled array with the multiply fused in (a mean of squares' bias
//!   gradient).
//! - [`plan_cache`]: what those libraries decide per shape, decided once
//!   per shape and thread.
//! - [`batch_norm`]: BatchNorm's forward pass as XLA fuses it in a jitted
//!   module (sums of squares contracted, constants folded);
//!   [`batch_norm_grad`]: its backward program under `jax.grad`.
//! - [`libm_f32`]: glibc's `sinf`/`cosf`/`logf` (XLA:CPU calls glibc for
//!   sine and cosine; TensorFlow's Box–Muller for `logf` and `sincosf`),
//!   ported to plain `f64` arithmetic; public as `random::tf::libm_f32`.
//!
//! Every function here works on slices of `f32` and knows nothing of
//! tensors or keys.

pub(crate) mod batch_norm;
pub(crate) mod batch_norm_grad;
pub(crate) mod dot;
#[cfg(target_arch = "x86_64")]
pub(crate) mod dot_a_rows;
#[cfg(target_arch = "x86_64")]
pub(crate) mod dot_avx512;
pub(crate) mod dot_blocked;
#[cfg(target_arch = "x86_64")]
pub(crate) mod dot_panels;
#[cfg(target_arch = "x86_64")]
pub(crate) mod dot_t4;
pub(crate) mod dot_tiny;
pub(crate) mod eigen_conv;
pub(crate) mod eigen_dot;
pub(crate) mod fused_dot;
pub(crate) mod gemv;
pub mod libm_f32;
pub(crate) mod math;
pub(crate) mod math_f64;
pub(crate) mod onednn_gemv;
#[cfg(target_arch = "x86_64")]
pub(crate) mod pack_t_avx512;
pub(crate) mod plan_cache;
pub(crate) mod reduce;
pub(crate) mod reduce_gaps;
pub(crate) mod reduce_products;
pub(crate) mod reduce_products_kept;
pub(crate) mod reduce_window;
pub(crate) mod scaled_columns;
pub(crate) mod select_scatter;
pub(crate) mod vectors;
pub(crate) mod window_max;
pub(crate) mod ynn_conv;
pub(crate) mod ynn_exp;
pub(crate) mod ynn_log;
pub(crate) mod ynn_reduce;
