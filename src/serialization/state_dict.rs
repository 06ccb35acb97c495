//! `to_state_dict` / `from_state_dict` for flaxen's trees, variables and
//! training states, as Flax's serialization registry defines them for
//! dicts, arrays and `TrainState`.

use indexmap::IndexMap;

use super::array::{NpArray, NpDType};
use super::error::SerializationError;
use super::state::State;
use crate::core::Variables;
use crate::optim::TrainState;
use crate::tensor::Tree;

/// A value that converts to and from a Flax state dict
/// (`flax.serialization.to_state_dict` / `from_state_dict`).
///
/// `from_state_dict` takes `self` as the target: its structure, shapes and
/// dtypes say what the state must contain. Unlike Flax, which ignores
/// extra keys and never compares shapes, every missing, extra and
/// misshapen leaf is an error, listed by path.
pub trait StateDict: Sized {
    /// The state dict of `self`.
    fn to_state_dict(&self) -> Result<State, SerializationError>;

    /// A copy of `self` (the target) holding the values of `state`.
    // Flax's name, whose first argument is the target too.
    #[allow(clippy::wrong_self_convention)]
    fn from_state_dict(&self, state: &State) -> Result<Self, SerializationError>;
}

/// Joins a path and a key.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}/{key}")
    }
}

/// Mismatches found while restoring, reported together.
#[derive(Default)]
pub(crate) struct Mismatch {
    missing: Vec<String>,
    extra: Vec<String>,
    misshapen: Vec<(String, Vec<usize>, Vec<usize>)>,
}

impl Mismatch {
    pub(crate) fn missing(&mut self, path: String) {
        self.missing.push(path);
    }

    pub(crate) fn extra(&mut self, path: String) {
        self.extra.push(path);
    }

    pub(crate) fn misshapen(&mut self, path: String, target: &[usize], state: &[usize]) {
        self.misshapen.push((path, target.to_vec(), state.to_vec()));
    }

    pub(crate) fn into_result<T>(self, value: T) -> Result<T, SerializationError> {
        if self.missing.is_empty() && self.extra.is_empty() && self.misshapen.is_empty() {
            Ok(value)
        } else {
            Err(SerializationError::TreeMismatch {
                missing: self.missing,
                extra: self.extra,
                misshapen: self.misshapen,
            })
        }
    }
}

/// The state dict of a tree: dicts of `float32` arrays (tensors) and the
/// arrays' own dtypes.
pub(crate) fn tree_state(t: &Tree) -> State {
    if let Some(x) = t.as_tensor() {
        return State::Array(NpArray::from_tensor(x));
    }
    if let Some(a) = t.as_array() {
        return State::Array(NpArray::from_array(a));
    }
    State::Dict(
        t.entries()
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| (k.clone(), tree_state(v)))
            .collect(),
    )
}

/// `target` with the values of `state`; `None` when a mismatch was
/// recorded for this subtree.
pub(crate) fn restore_tree(
    target: &Tree,
    state: &State,
    path: &str,
    acc: &mut Mismatch,
) -> Result<Option<Tree>, SerializationError> {
    if target.is_leaf() {
        return match state.as_array() {
            Some(a) => restore_leaf(target, a, path, acc),
            None => Err(SerializationError::Kind {
                path: path.to_string(),
                expected: "an array".into(),
                got: state.kind(),
            }),
        };
    }
    let Some(d) = state.as_dict() else {
        return Err(SerializationError::Kind {
            path: path.to_string(),
            expected: "a dict".into(),
            got: state.kind(),
        });
    };
    let entries = target.entries().unwrap_or_default();
    let mut out = Vec::with_capacity(entries.len());
    let mut complete = true;
    for (k, sub) in &entries {
        let p = join(path, k);
        match d.get(k) {
            None => {
                acc.missing(p);
                complete = false;
            }
            Some(s) => match restore_tree(sub, s, &p, acc)? {
                Some(t) => out.push((k.clone(), t)),
                None => complete = false,
            },
        }
    }
    for k in d.keys() {
        if !entries.iter().any(|(t, _)| t == k) {
            acc.extra(join(path, k));
            complete = false;
        }
    }
    Ok(complete.then(|| Tree::from_entries(out)))
}

/// A leaf of `target` (a tensor or an array) from the array `a`.
fn restore_leaf(
    target: &Tree,
    a: &NpArray,
    path: &str,
    acc: &mut Mismatch,
) -> Result<Option<Tree>, SerializationError> {
    if let Some(x) = target.as_tensor() {
        if a.dtype() == NpDType::Float32 && a.shape() != x.shape() {
            acc.misshapen(path.to_string(), x.shape(), a.shape());
            return Ok(None);
        }
        return Ok(Some(Tree::leaf(a.to_tensor(path)?)));
    }
    let like = target.as_array().expect("a leaf is a tensor or an array");
    let restored = a.to_array_like(like, path)?;
    if restored.shape() != like.shape() {
        acc.misshapen(path.to_string(), like.shape(), restored.shape());
        return Ok(None);
    }
    Ok(Some(Tree::array_leaf(restored)))
}

impl StateDict for Tree {
    fn to_state_dict(&self) -> Result<State, SerializationError> {
        Ok(tree_state(self))
    }

    fn from_state_dict(&self, state: &State) -> Result<Tree, SerializationError> {
        let mut acc = Mismatch::default();
        let t = restore_tree(self, state, "", &mut acc)?;
        acc.into_result(t)
            .map(|t| t.expect("no mismatch means a whole tree"))
    }
}

impl StateDict for Variables {
    fn to_state_dict(&self) -> Result<State, SerializationError> {
        Ok(State::Dict(
            self.iter()
                .map(|(name, t)| (name.to_string(), tree_state(t)))
                .collect(),
        ))
    }

    fn from_state_dict(&self, state: &State) -> Result<Variables, SerializationError> {
        let as_tree =
            Tree::from_entries(self.iter().map(|(name, t)| (name.to_string(), t.clone())));
        let restored = as_tree.from_state_dict(state)?;
        Ok(restored.entries().unwrap_or_default().into_iter().collect())
    }
}

/// The state dict of a [`TrainState`], as Flax's `TrainState` (a
/// `struct.dataclass` whose data fields are `step`, `params`, `opt_state`)
/// with the other collections as further fields (Flax users add
/// `batch_stats` by subclassing): `{'step', 'params', 'opt_state',
/// 'batch_stats', ...}`.
///
/// `step` is written as a 0-d `int32` array, as a jitted Flax training
/// step leaves it (`int64` beyond `int32`'s range); a Python int or any 0-d
/// integer array is read.
impl StateDict for TrainState {
    fn to_state_dict(&self) -> Result<State, SerializationError> {
        let step = match i32::try_from(self.step) {
            Ok(s) => NpArray::new(NpDType::Int32, vec![], s.to_le_bytes().to_vec()),
            Err(_) => NpArray::new(
                NpDType::Int64,
                vec![],
                (self.step as i64).to_le_bytes().to_vec(),
            ),
        }
        .expect("a 0-d array");
        let mut d = IndexMap::new();
        d.insert("step".to_string(), State::Array(step));
        d.insert("params".to_string(), tree_state(&self.params));
        d.insert("opt_state".to_string(), tree_state(&self.opt_state));
        for (name, t) in self.collections.iter() {
            d.insert(name.to_string(), tree_state(t));
        }
        Ok(State::Dict(d))
    }

    fn from_state_dict(&self, state: &State) -> Result<TrainState, SerializationError> {
        let Some(d) = state.as_dict() else {
            return Err(SerializationError::Kind {
                path: String::new(),
                expected: "a dict".into(),
                got: state.kind(),
            });
        };
        let mut acc = Mismatch::default();
        let step = match d.get("step") {
            None => {
                acc.missing("step".into());
                None
            }
            Some(s) => Some(read_step(s)?),
        };
        let mut part = |name: &str, target: &Tree| -> Result<Option<Tree>, SerializationError> {
            match d.get(name) {
                None => {
                    acc.missing(name.to_string());
                    Ok(None)
                }
                Some(s) => restore_tree(target, s, name, &mut acc),
            }
        };
        let params = part("params", &self.params)?;
        let opt_state = part("opt_state", &self.opt_state)?;
        let mut collections = Vec::new();
        for (name, t) in self.collections.iter() {
            collections.push((name.to_string(), part(name, t)?));
        }
        let known = |k: &str| {
            ["step", "params", "opt_state"].contains(&k) || self.collections.collection(k).is_some()
        };
        for k in d.keys().filter(|k| !known(k)) {
            acc.extra(k.clone());
        }
        acc.into_result(())?;
        let mut out = self.clone();
        out.step = step.expect("checked");
        out.params = params.expect("checked");
        out.opt_state = opt_state.expect("checked");
        for (name, t) in collections {
            out.collections.insert(name, t.expect("checked"));
        }
        Ok(out)
    }
}

/// A step count: a Python int or a 0-d integer array, not negative.
fn read_step(s: &State) -> Result<u64, SerializationError> {
    let value: i128 = match s {
        State::Int(i) => *i,
        State::Array(a) | State::Scalar(a) if a.shape().is_empty() => {
            let b = a.data();
            match a.dtype() {
                NpDType::Int32 => i128::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                NpDType::UInt32 => i128::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                NpDType::Int64 => {
                    i128::from(i64::from_le_bytes(b[..8].try_into().expect("8 bytes")))
                }
                NpDType::UInt64 => {
                    i128::from(u64::from_le_bytes(b[..8].try_into().expect("8 bytes")))
                }
                other => {
                    return Err(SerializationError::UnsupportedDType {
                        path: "step".into(),
                        dtype: other.name().into(),
                        expected: "an integer".into(),
                    })
                }
            }
        }
        other => {
            return Err(SerializationError::Kind {
                path: "step".into(),
                expected: "an int or a 0-d integer array".into(),
                got: other.kind(),
            })
        }
    };
    u64::try_from(value).map_err(|_| SerializationError::IntRange {
        path: "step".into(),
        value,
    })
}
