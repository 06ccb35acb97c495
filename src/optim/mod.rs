//! Optimizers over variable trees.

mod sgd;

pub use sgd::Sgd;
