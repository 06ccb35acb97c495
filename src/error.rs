//! The crate's error type: every error of the user's surface converts into
//! it, so `?` works on tensor, random and module results alike (inside
//! `Module::call`, inside `grad` closures, inside compiled steps). Every
//! message names the module path and the values involved.

use std::fmt;

use crate::random::tf::TfRandomError;
use crate::random::RandomError;
use crate::tensor::TensorError;

/// Everything a model, a transform or a computation can get wrong: the
/// module API's own errors, and those of [`crate::tensor`],
/// [`crate::random`] and [`crate::random::tf`] wrapped with the module path
/// where they happened.
///
/// ```
/// use flaxen::tensor::{grad, Tensor, Tree};
/// use flaxen::{random, Error};
///
/// // `?` takes tensor and random errors inside a `grad` closure.
/// let params = Tree::from(Tensor::ones(&[2]));
/// let err = grad(
///     |p| {
///         let noise = random::normal(random::key(0), &[3])?;
///         Ok(p.as_tensor().unwrap().add(&Tensor::from_array(noise))?.sum_all())
///     },
///     &params,
/// )
/// .unwrap_err();
/// assert!(matches!(err, Error::Tensor { .. }));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// `make_rng(stream)` without a key for `stream` or for `params`.
    MissingRng {
        /// Module path, e.g. `/Dense_0`.
        path: String,
        /// The stream asked for.
        stream: String,
        /// The streams that were given.
        available: Vec<String>,
    },
    /// A variable read during `apply` that the given variables lack.
    MissingVariable {
        /// Module path.
        path: String,
        /// Collection, e.g. `params`.
        collection: String,
        /// Variable name.
        name: String,
    },
    /// A stored parameter whose shape differs from the one the module asks for.
    ShapeMismatch {
        /// Module path.
        path: String,
        /// Collection.
        collection: String,
        /// Variable name.
        name: String,
        /// The shape the module expects.
        expected: Vec<usize>,
        /// The shape found in the variables.
        found: Vec<usize>,
    },
    /// Creating or writing a variable in a collection that is not mutable.
    ImmutableCollection {
        /// Module path.
        path: String,
        /// Collection.
        collection: String,
        /// Variable name.
        name: String,
    },
    /// A name taken twice in one call of a module (Flax's `NameInUseError`):
    /// two submodules, a submodule and a variable, or two variables of one
    /// collection share a name. Variables of different collections may
    /// share one.
    NameInUse {
        /// The module's path.
        path: String,
        /// What was being created: `"param"`, `"variable"` or `"submodule"`.
        kind: &'static str,
        /// The repeated name.
        name: String,
        /// The module's type name (`Dense`), or its path where the type is
        /// not known (inside `core::init`/`core::apply` functions).
        module: String,
    },
    /// A variable read or written as another kind than it holds (an array
    /// where a tensor is stored, or the reverse).
    VariableType {
        /// Module path.
        path: String,
        /// Collection.
        collection: String,
        /// Variable name.
        name: String,
        /// The kind asked for (`float32 tensor`, `array`).
        expected: &'static str,
        /// The kind stored (`float32 tensor`, a dtype such as `int32`, or
        /// `tree`).
        found: &'static str,
    },
    /// A path that the variables do not hold; `nearest` lists the closest
    /// existing paths.
    NoSuchPath {
        /// The path asked for (`params/Dense_0/kernel`).
        path: String,
        /// The nearest existing paths, closest first.
        nearest: Vec<String>,
    },
    /// A parameter, variable or submodule name that cannot be a path
    /// element: empty, or holding `/`.
    InvalidName {
        /// Module path.
        path: String,
        /// `"param"`, `"variable"` or `"submodule"`.
        kind: &'static str,
        /// The name given.
        name: String,
    },
    /// Submodules nested deeper than [`MAX_MODULE_DEPTH`](crate::nn::MAX_MODULE_DEPTH)
    /// (Python would hit its recursion limit long before).
    ModuleDepth {
        /// The first and last elements of the path where the limit was
        /// reached.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// Variables with an extra `params` level (`{'params': {'params':
    /// ...}}`) given to `apply` (Flax's
    /// `ApplyScopeInvalidVariablesStructureError`).
    ExtraParamsLayer,
    /// An invalid module setting (e.g. a dropout rate outside `[0, 1]`).
    Config {
        /// Module path.
        path: String,
        /// What is wrong, with the value.
        message: String,
    },
    /// A lifted transform (`vmap`) cannot map its inputs or variables:
    /// inconsistent axis sizes, an axis out of range, a broadcast variable
    /// that differs across items, ...
    Lift {
        /// Module path.
        path: String,
        /// The transform.
        transform: &'static str,
        /// What is wrong, with the values involved.
        message: String,
    },
    /// A tensor operation failed inside a module.
    Tensor {
        /// Module path (empty outside modules).
        path: String,
        /// The tensor error.
        source: TensorError,
    },
    /// A sampler or initializer failed inside a module.
    Random {
        /// Module path (empty outside modules).
        path: String,
        /// The random error.
        source: RandomError,
    },
    /// Loading or batching data failed.
    Data {
        /// The data error.
        source: crate::data::DataError,
    },
    /// A mesh, sharding or sharded computation was set up wrongly.
    Sharding(crate::sharding::ShardingError),
    /// A checkpoint could not be read, written or restored.
    /// (Boxed: the error lists paths, and `Error` stays small.)
    Serialization(Box<crate::serialization::SerializationError>),
    /// Work spread over several processes failed: a peer died or timed
    /// out, or the processes disagree.
    Distributed(crate::distributed::DistributedError),
    /// A TensorFlow-compatible random function failed.
    TfRandom {
        /// Module path (empty outside modules).
        path: String,
        /// The TensorFlow random error.
        source: TfRandomError,
    },
}

impl Error {
    /// Attaches a module path to a tensor or random error that has none yet.
    pub fn at(self, module_path: &str) -> Error {
        match self {
            Error::Tensor { path, source } if path.is_empty() => Error::Tensor {
                path: module_path.to_string(),
                source,
            },
            Error::Random { path, source } if path.is_empty() => Error::Random {
                path: module_path.to_string(),
                source,
            },
            Error::TfRandom { path, source } if path.is_empty() => Error::TfRandom {
                path: module_path.to_string(),
                source,
            },
            other => other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::MissingRng {
                path,
                stream,
                available,
            } => write!(
                f,
                "module {path}: make_rng(\"{stream}\") needs an RNG key for stream \"{stream}\" \
                 (or \"params\" to fall back on); streams given: {available:?}"
            ),
            Error::MissingVariable {
                path,
                collection,
                name,
            } => write!(
                f,
                "module {path}: could not find variable \"{name}\" in collection \
                 \"{collection}\" (were these variables made by this model's init?)"
            ),
            Error::ShapeMismatch {
                path,
                collection,
                name,
                expected,
                found,
            } => write!(
                f,
                "module {path}: variable \"{collection}/{name}\" has shape {found:?}, \
                 but the module expects {expected:?}"
            ),
            Error::ImmutableCollection {
                path,
                collection,
                name,
            } => write!(
                f,
                "module {path}: cannot write variable \"{name}\" in the immutable collection \
                 \"{collection}\" (pass it in `mutable`)"
            ),
            Error::NameInUse {
                path,
                kind,
                name,
                module,
            } => write!(
                f,
                "module {path}: Could not create {kind} \"{name}\" in Module {module}: Name in use."
            ),
            Error::VariableType {
                path,
                collection,
                name,
                expected,
                found,
            } => write!(
                f,
                "module {path}: variable \"{collection}/{name}\" is a {found} \
                 (asked for: {expected})"
            ),
            Error::NoSuchPath { path, nearest } if nearest.is_empty() => {
                write!(f, "no variable at \"{path}\" (the variables are empty)")
            }
            Error::NoSuchPath { path, nearest } => write!(
                f,
                "no variable at \"{path}\"; nearest existing paths: {}",
                nearest.join(", ")
            ),
            Error::InvalidName { path, kind, name } => write!(
                f,
                "module {path}: {kind} name {name:?} is not a valid path element \
                 (names must be non-empty and may not contain '/')"
            ),
            Error::ModuleDepth { path, limit } => write!(
                f,
                "module {path}: submodules nested more than {limit} deep (a model this deep \
                 is almost certainly unbounded recursion; use a Scan for long stacks)"
            ),
            Error::ExtraParamsLayer => write!(
                f,
                "Expect the `variables` (first argument) passed to apply() to be a dict with \
                 the structure {{\"params\": ...}}, but got a dict with an extra params layer, \
                 i.e.  {{\"params\": {{\"params\": ... }} }}. You should instead pass in \
                 your dict's [\"params\"]."
            ),
            Error::Config { path, message } => write!(f, "module {path}: {message}"),
            // Not tied to a module yet (a transform's options).
            Error::Lift {
                path,
                transform,
                message,
            } if path.is_empty() => write!(f, "{transform}: {message}"),
            Error::Lift {
                path,
                transform,
                message,
            } => write!(f, "module {path}: {transform}: {message}"),
            Error::Tensor { path, source } if path.is_empty() => write!(f, "{source}"),
            Error::Tensor { path, source } => write!(f, "module {path}: {source}"),
            Error::Random { path, source } if path.is_empty() => write!(f, "{source}"),
            Error::Random { path, source } => write!(f, "module {path}: {source}"),
            Error::Data { source } => write!(f, "{source}"),
            Error::Sharding(e) => write!(f, "{e}"),
            Error::Serialization(e) => write!(f, "{e}"),
            Error::Distributed(e) => write!(f, "{e}"),
            Error::TfRandom { path, source } if path.is_empty() => write!(f, "{source}"),
            Error::TfRandom { path, source } => write!(f, "module {path}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Tensor { source, .. } => Some(source),
            Error::Random { source, .. } => Some(source),
            Error::TfRandom { source, .. } => Some(source),
            Error::Data { source } => Some(source),
            Error::Sharding(e) => Some(e),
            Error::Serialization(e) => Some(e.as_ref()),
            Error::Distributed(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TensorError> for Error {
    fn from(source: TensorError) -> Error {
        Error::Tensor {
            path: String::new(),
            source,
        }
    }
}

impl From<RandomError> for Error {
    fn from(source: RandomError) -> Error {
        Error::Random {
            path: String::new(),
            source,
        }
    }
}

impl From<TfRandomError> for Error {
    fn from(source: TfRandomError) -> Error {
        Error::TfRandom {
            path: String::new(),
            source,
        }
    }
}

impl From<crate::serialization::SerializationError> for Error {
    fn from(e: crate::serialization::SerializationError) -> Error {
        Error::Serialization(Box::new(e))
    }
}

impl From<crate::distributed::DistributedError> for Error {
    fn from(e: crate::distributed::DistributedError) -> Error {
        Error::Distributed(e)
    }
}

impl From<crate::sharding::ShardingError> for Error {
    fn from(e: crate::sharding::ShardingError) -> Error {
        Error::Sharding(e)
    }
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
