//! `jax_debug_nans` for flaxen: under [`set_debug_nans`], the first
//! operation whose output holds a NaN is remembered (its name and its
//! inputs' shapes), and the enclosing `grad`, compiled step, `init` or
//! `apply` returns [`TensorError::NanProduced`] instead of its result.

use std::cell::RefCell;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};

use ndarray::{ArcArray, IxDyn};

use super::error::TensorError;
use super::tape::OpKind;
use super::Tensor;

static DEBUG_NANS: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The first NaN-producing operation on this thread since the last
    /// check.
    static FIRST_NAN: RefCell<Option<TensorError>> = const { RefCell::new(None) };
}

/// Turns NaN checking on or off for the whole process (JAX's
/// `jax.config.update("jax_debug_nans", True)`). Off by default: checking
/// reads every output once.
///
/// ```
/// use flaxen::tensor::{self, grad, Tensor, TensorError, Tree};
///
/// tensor::set_debug_nans(true);
/// let params = Tree::from(Tensor::from_vec(vec![-1.0, 4.0], &[2]).unwrap());
/// let err = grad(|p| Ok(p.as_tensor().unwrap().log().sum_all()), &params).unwrap_err();
/// tensor::set_debug_nans(false);
/// match err {
///     flaxen::Error::Tensor { source: TensorError::NanProduced { op, input_shapes }, .. } => {
///         assert_eq!(op, "log");
///         assert_eq!(input_shapes, [vec![2]]);
///     }
///     other => panic!("{other}"),
/// }
/// ```
pub fn set_debug_nans(on: bool) {
    DEBUG_NANS.store(on, Ordering::Relaxed);
}

/// Whether NaN checking is on (see [`set_debug_nans`]).
pub fn debug_nans() -> bool {
    DEBUG_NANS.load(Ordering::Relaxed)
}

/// The first NaN produced on this thread since the last call, as an error;
/// clears it. The transforms and `init`/`apply` call this themselves; call
/// it after operations run outside them.
pub fn check_nans() -> Result<(), TensorError> {
    FIRST_NAN
        .with(|f| f.borrow_mut().take())
        .map_or(Ok(()), Err)
}

/// Notes `value` if checking is on, it holds a NaN, and no earlier NaN is
/// pending. `at` is the operation's implementation, named where the kind
/// does not say what it is.
pub(crate) fn note(value: &ArcArray<f32, IxDyn>, inputs: &[&Tensor], kind: &OpKind, at: &Location) {
    if !debug_nans() || !value.iter().any(|v| v.is_nan()) {
        return;
    }
    FIRST_NAN.with(|f| {
        let mut first = f.borrow_mut();
        if first.is_none() {
            *first = Some(TensorError::NanProduced {
                op: op_name(kind, at),
                input_shapes: inputs.iter().map(|t| t.shape().to_vec()).collect(),
            });
        }
    });
}

/// A gradient that holds a NaN (the backward pass is not checked op by op).
pub(crate) fn check_gradients(grads: &super::Tree) -> Result<(), TensorError> {
    if !debug_nans() {
        return Ok(());
    }
    match grads
        .paths()
        .into_iter()
        .find(|(_, g)| g.view().iter().any(|v| v.is_nan()))
    {
        Some((path, g)) => Err(TensorError::NanProduced {
            op: format!("the backward pass (gradient of \"{path}\")"),
            input_shapes: vec![g.shape().to_vec()],
        }),
        None => Ok(()),
    }
}

fn op_name(kind: &OpKind, at: &Location) -> String {
    match kind {
        OpKind::Neg => "neg".into(),
        OpKind::Add => "add".into(),
        OpKind::Sub => "sub".into(),
        OpKind::Mul => "mul".into(),
        OpKind::Div | OpKind::DivTraced => "div".into(),
        OpKind::Unary(f, _) => format!("{f:?}").to_lowercase(),
        OpKind::Matmul => "matmul".into(),
        OpKind::SumAll
        | OpKind::SumLast { mean: false, .. }
        | OpKind::ProductSum { mean: false, .. } => "sum".into(),
        OpKind::MeanAll
        | OpKind::SumLast { mean: true, .. }
        | OpKind::ProductSum { mean: true, .. } => "mean".into(),
        OpKind::SumAxes { mean: false, .. } | OpKind::ProductSumAxes { mean: false, .. } => {
            "sum".into()
        }
        OpKind::SumAxes { mean: true, .. } | OpKind::ProductSumAxes { mean: true, .. } => {
            "mean".into()
        }
        OpKind::Maximum => "maximum".into(),
        OpKind::Compare(c) => format!("{c:?}").to_lowercase(),
        OpKind::Reshape(_) => "reshape".into(),
        OpKind::SoftmaxLast(_) => "softmax".into(),
        OpKind::LogSoftmaxLast(_) => "log_softmax".into(),
        OpKind::Select => "select".into(),
        OpKind::Sampled(_) => "a random draw".into(),
        OpKind::Squeeze(_) => "squeeze".into(),
        OpKind::StopGradient => "stop_gradient".into(),
        OpKind::MaxLastStopped => "max".into(),
        OpKind::LabelLogits(_) => "take_along_axis".into(),
        OpKind::BatchNorm(_) => "batch_norm".into(),
        OpKind::Kernel(name) => (*name).into(),
        OpKind::Other => format!("the operation at {}:{}", at.file(), at.line()),
    }
}
