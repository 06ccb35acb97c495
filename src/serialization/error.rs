//! The error type of `flaxen::serialization`.

use std::fmt;

/// Everything that can be wrong with a checkpoint: bytes that are not
/// msgpack (truncated, malformed, nested too deeply, trailing bytes),
/// arrays whose data does not match their shape and dtype, and state dicts
/// that do not match the model they are restored into (listed by path).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SerializationError {
    /// The bytes end inside a value.
    Truncated {
        /// Offset where the value started.
        offset: usize,
        /// Bytes the value needs from there.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// Bytes that are not valid msgpack, or not what Flax writes.
    Malformed {
        /// Offset of the offending byte.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
    /// Containers nested deeper than [`MAX_DEPTH`](super::MAX_DEPTH).
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// Bytes after the first value (msgpack's `ExtraData`).
    TrailingBytes {
        /// Offset where the extra bytes start.
        offset: usize,
    },
    /// An array whose data does not have `shape × itemsize` bytes, or whose
    /// size overflows.
    ArrayData {
        /// Path of the array in the tree.
        path: String,
        /// The dtype's name.
        dtype: String,
        /// The shape.
        shape: Vec<usize>,
        /// The data's length in bytes.
        bytes: usize,
    },
    /// A dtype name this reader does not know, or a dtype that the target
    /// leaf cannot hold.
    UnsupportedDType {
        /// Path of the leaf.
        path: String,
        /// The dtype found.
        dtype: String,
        /// What the target expected (empty when reading without a target).
        expected: String,
    },
    /// A value of another kind than the target has at this path (a number
    /// where a dict is expected, …).
    Kind {
        /// Path of the value.
        path: String,
        /// What the target expects.
        expected: String,
        /// What the state has.
        got: String,
    },
    /// A state dict whose tree does not match the target's: every missing,
    /// extra and misshapen leaf, by path.
    TreeMismatch {
        /// Paths the target has and the state lacks.
        missing: Vec<String>,
        /// Paths the state has and the target lacks.
        extra: Vec<String>,
        /// `(path, target shape, state shape)` of leaves whose shapes differ.
        misshapen: Vec<(String, Vec<usize>, Vec<usize>)>,
    },
    /// An integer outside msgpack's range (`-2^63..2^64`), or a step that
    /// does not fit the target.
    IntRange {
        /// Path of the value.
        path: String,
        /// The value.
        value: i128,
    },
    /// A chunked array (`__msgpack_chunked_array__`) whose chunks do not
    /// make up its shape.
    Chunks {
        /// Path of the array.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A key containing `.`, which safetensors' dotted names cannot keep
    /// apart from nesting.
    DottedKey {
        /// Path of the value.
        path: String,
        /// The key.
        key: String,
    },
    /// An error of the safetensors format.
    Safetensors {
        /// The safetensors crate's message.
        reason: String,
    },
}

fn list<T: fmt::Debug>(items: &[T]) -> String {
    const SHOWN: usize = 8;
    let mut s = items
        .iter()
        .take(SHOWN)
        .map(|x| format!("{x:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        s.push_str(&format!(", … ({} in all)", items.len()));
    }
    s
}

impl fmt::Display for SerializationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SerializationError::Truncated {
                offset,
                needed,
                available,
            } => write!(
                f,
                "truncated msgpack: the value at byte {offset} needs {needed} bytes, {available} left"
            ),
            SerializationError::Malformed { offset, reason } => {
                write!(f, "malformed msgpack at byte {offset}: {reason}")
            }
            SerializationError::TooDeep { limit } => {
                write!(f, "msgpack containers nested deeper than {limit}")
            }
            SerializationError::TrailingBytes { offset } => {
                write!(f, "extra bytes after the msgpack value, from byte {offset}")
            }
            SerializationError::ArrayData {
                path,
                dtype,
                shape,
                bytes,
            } => write!(
                f,
                "array at {path:?}: {bytes} bytes of data do not make a {dtype} array of shape {shape:?}"
            ),
            SerializationError::UnsupportedDType {
                path,
                dtype,
                expected,
            } => {
                if expected.is_empty() {
                    write!(f, "array at {path:?}: unsupported dtype {dtype:?}")
                } else {
                    write!(
                        f,
                        "array at {path:?}: dtype {dtype} where the target has {expected}"
                    )
                }
            }
            SerializationError::Kind {
                path,
                expected,
                got,
            } => write!(f, "at {path:?}: expected {expected}, the state has {got}"),
            SerializationError::TreeMismatch {
                missing,
                extra,
                misshapen,
            } => {
                write!(f, "the state dict does not match the target:")?;
                if !missing.is_empty() {
                    write!(f, " missing {}", list(missing))?;
                }
                if !extra.is_empty() {
                    write!(f, "; extra {}", list(extra))?;
                }
                if !misshapen.is_empty() {
                    let shown: Vec<String> = misshapen
                        .iter()
                        .map(|(p, want, got)| format!("{p} (target {want:?}, state {got:?})"))
                        .collect();
                    write!(f, "; misshapen {}", list(&shown))?;
                }
                Ok(())
            }
            SerializationError::IntRange { path, value } => {
                write!(f, "integer {value} at {path:?} is out of range")
            }
            SerializationError::Chunks { path, reason } => {
                write!(f, "chunked array at {path:?}: {reason}")
            }
            SerializationError::DottedKey { path, key } => write!(
                f,
                "key {key:?} at {path:?} contains '.', which dotted safetensors names cannot tell from nesting"
            ),
            SerializationError::Safetensors { reason } => write!(f, "safetensors: {reason}"),
        }
    }
}

impl std::error::Error for SerializationError {}
