//! The differentiable operations, as methods of [`Tensor`](super::Tensor).

pub(crate) mod batch_norm;
pub(crate) mod batch_norm_step;
pub(crate) mod binary;

pub(crate) use binary::is_trailing;
pub(crate) mod conv;
mod conv_eigen;
mod conv_fast;
mod conv_routes;
mod conv_ynn;
pub(crate) mod cross_entropy;
mod data_ops;
mod dot_general;
mod fused_products;
pub(crate) mod gather;
mod gru_step;
mod lstm_step;
pub(crate) mod matmul;
pub(crate) mod product_sum;
pub(crate) mod reduce;
pub(crate) mod reduce_window;
pub(crate) mod rows;
mod scan_const;
mod shape_ops;
pub(crate) mod soft_cross_entropy;
pub(crate) mod soft_cross_entropy_total;
mod standardize;
pub(crate) mod unary;
mod window_max;
pub use conv::ConvSpec;
pub use data_ops::one_hot;
