//! The module API, as `flax.linen`: the [`Module`] trait, layers,
//! activations, and the lifted transforms ([`Vmap`], [`Scan`], [`Remat`],
//! [`Jit`], ...), on top of the functional core ([`crate::core`]).

mod activation;
mod attention;
mod autodiff;
mod batch_norm_jit;
mod control_flow;
mod conv;
mod conv_transpose;
mod dense;
mod dense_general;
mod dropout;
mod embed;
mod group_norm;
mod jit;
mod jit_options;
mod map_variables;
mod method;
mod module;
mod module_fn;
mod normalization;
mod pooling;
mod recurrent;
mod remat;
mod rms_norm;
mod rnn;
mod scan;
mod tabulate;
mod vmap;
mod while_loop;

pub use crate::core::lift::ScopeVjp;
pub use crate::core::lift::VariableAxis;
pub use activation::{gelu, leaky_relu, log_softmax, relu, sigmoid, silu, softmax, tanh};
pub use attention::{
    combine_masks, dot_product_attention, dot_product_attention_weights, make_attention_mask,
    make_causal_mask, AttentionDropout, AttentionInputs, MultiHeadDotProductAttention,
};
pub use autodiff::{
    custom_vjp, grad, grad_with_aux, jvp, value_and_grad, value_and_grad_with_aux, vjp,
};
pub use control_flow::{cond, switch, Branch};
pub use conv::{Conv, Padding};
pub use conv_transpose::ConvTranspose;
pub use dense::Dense;
pub use dense_general::DenseGeneral;
pub use dropout::Dropout;
pub use embed::Embed;
pub use group_norm::GroupNorm;
pub use jit::Jit;
pub use map_variables::MapVariables;
pub use method::{Method, MethodCall};
pub use module::{Child, Module, MAX_MODULE_DEPTH};
pub use module_fn::{module_fn, ModuleFn};
pub use normalization::{BatchNorm, LayerNorm};
pub use pooling::{avg_pool, max_pool};
pub use recurrent::{GRUCell, LSTMCell};
pub use remat::Remat;
pub use rms_norm::RMSNorm;
pub use rnn::{RecurrentCell, RnnInput, RNN};
pub use scan::{Scan, ScanInput, ScanOutput};
pub use tabulate::{tabulate, Shapes, Summary, SummaryRow, VariableSummary};
pub use vmap::Vmap;
pub use while_loop::while_loop;
