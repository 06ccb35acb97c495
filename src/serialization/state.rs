//! [`State`]: what `flax.serialization.msgpack_restore` returns, a Python
//! tree of dicts, arrays and plain values.

use indexmap::IndexMap;

use super::array::NpArray;

/// A state dict (`flax.serialization.to_state_dict`) or any value
/// `msgpack_restore` can return: dicts with string keys, NumPy arrays and
/// scalars, and Python's plain values.
///
/// ```
/// use flaxen::serialization::{msgpack_restore, msgpack_serialize, State};
///
/// let s = State::dict([("step", State::Int(3)), ("lr", State::Float(0.1))]);
/// let bytes = msgpack_serialize(&s)?;
/// assert_eq!(msgpack_restore(&bytes)?, s);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    /// A dict, in insertion order.
    Dict(IndexMap<String, State>),
    /// A NumPy array (msgpack extension type 1).
    Array(NpArray),
    /// A NumPy scalar, `np.float32(1.5)` (extension type 3; the array is
    /// 0-d).
    Scalar(NpArray),
    /// A Python int (`-2^63 ..= 2^64 - 1`).
    Int(i128),
    /// A Python float.
    Float(f64),
    /// A Python bool.
    Bool(bool),
    /// A Python str.
    Str(String),
    /// Python bytes.
    Bytes(Vec<u8>),
    /// A Python list or tuple.
    List(Vec<State>),
    /// A Python complex (extension type 2).
    Complex(f64, f64),
    /// `None`.
    None,
    /// An extension type Flax does not define, kept as read.
    Ext(i8, Vec<u8>),
}

impl State {
    /// A dict from `(key, value)` pairs.
    pub fn dict<K: Into<String>>(entries: impl IntoIterator<Item = (K, State)>) -> State {
        State::Dict(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// The dict's entries, if this is a dict.
    pub fn as_dict(&self) -> Option<&IndexMap<String, State>> {
        match self {
            State::Dict(d) => Some(d),
            _ => None,
        }
    }

    /// The array, if this is an array or a NumPy scalar.
    pub fn as_array(&self) -> Option<&NpArray> {
        match self {
            State::Array(a) | State::Scalar(a) => Some(a),
            _ => None,
        }
    }

    /// The value at a `/`-separated path of dict keys.
    pub fn get(&self, path: &str) -> Option<&State> {
        path.split('/')
            .filter(|k| !k.is_empty())
            .try_fold(self, |s, k| s.as_dict()?.get(k))
    }

    /// What kind of value this is, in Python's words (for errors).
    pub fn kind(&self) -> String {
        match self {
            State::Dict(_) => "a dict".into(),
            State::Array(a) => format!("an array {}{:?}", a.dtype(), a.shape()),
            State::Scalar(a) => format!("a NumPy scalar {}", a.dtype()),
            State::Int(v) => format!("the int {v}"),
            State::Float(v) => format!("the float {v}"),
            State::Bool(v) => format!("the bool {v}"),
            State::Str(_) => "a str".into(),
            State::Bytes(_) => "bytes".into(),
            State::List(_) => "a list".into(),
            State::Complex(..) => "a complex".into(),
            State::None => "None".into(),
            State::Ext(code, _) => format!("msgpack extension type {code}"),
        }
    }
}
