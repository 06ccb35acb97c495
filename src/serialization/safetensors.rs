//! safetensors files with dotted names (`params.Dense_0.kernel`, as
//! `flax.traverse_util.flatten_dict(variables, sep='.')` names them for
//! `safetensors.flax.save_file`), through the `safetensors` crate.

use indexmap::IndexMap;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use super::array::{NpArray, NpDType};
use super::error::SerializationError;
use super::state::State;
use super::state_dict::StateDict;

fn to_st(d: NpDType) -> Dtype {
    match d {
        NpDType::Bool => Dtype::BOOL,
        NpDType::Int8 => Dtype::I8,
        NpDType::Int16 => Dtype::I16,
        NpDType::Int32 => Dtype::I32,
        NpDType::Int64 => Dtype::I64,
        NpDType::UInt8 => Dtype::U8,
        NpDType::UInt16 => Dtype::U16,
        NpDType::UInt32 => Dtype::U32,
        NpDType::UInt64 => Dtype::U64,
        NpDType::Float16 => Dtype::F16,
        NpDType::BFloat16 => Dtype::BF16,
        NpDType::Float32 => Dtype::F32,
        NpDType::Float64 => Dtype::F64,
    }
}

fn from_st(d: Dtype, name: &str) -> Result<NpDType, SerializationError> {
    Ok(match d {
        Dtype::BOOL => NpDType::Bool,
        Dtype::I8 => NpDType::Int8,
        Dtype::I16 => NpDType::Int16,
        Dtype::I32 => NpDType::Int32,
        Dtype::I64 => NpDType::Int64,
        Dtype::U8 => NpDType::UInt8,
        Dtype::U16 => NpDType::UInt16,
        Dtype::U32 => NpDType::UInt32,
        Dtype::U64 => NpDType::UInt64,
        Dtype::F16 => NpDType::Float16,
        Dtype::BF16 => NpDType::BFloat16,
        Dtype::F32 => NpDType::Float32,
        Dtype::F64 => NpDType::Float64,
        other => {
            return Err(SerializationError::UnsupportedDType {
                path: name.to_string(),
                dtype: format!("{other:?}"),
                expected: String::new(),
            })
        }
    })
}

fn st_error(e: impl std::fmt::Display) -> SerializationError {
    SerializationError::Safetensors {
        reason: e.to_string(),
    }
}

/// The arrays of a state dict under dotted names, depth first.
fn flatten<'s>(
    s: &'s State,
    name: &str,
    path: &str,
    out: &mut Vec<(String, &'s NpArray)>,
) -> Result<(), SerializationError> {
    match s {
        State::Array(a) | State::Scalar(a) => {
            out.push((name.to_string(), a));
            Ok(())
        }
        State::Dict(d) => {
            for (k, v) in d {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}/{k}")
                };
                if k.contains('.') {
                    return Err(SerializationError::DottedKey {
                        path: p,
                        key: k.clone(),
                    });
                }
                let n = if name.is_empty() {
                    k.clone()
                } else {
                    format!("{name}.{k}")
                };
                flatten(v, &n, &p, out)?;
            }
            Ok(())
        }
        other => Err(SerializationError::Kind {
            path: path.to_string(),
            expected: "an array (safetensors holds arrays only)".into(),
            got: other.kind(),
        }),
    }
}

/// The safetensors bytes of `target`'s state dict, names dotted
/// (`params.Dense_0.kernel`): what `safetensors.flax.save(flatten_dict(
/// variables, sep='.'))` writes for the same tree.
///
/// ```
/// use flaxen::core::Variables;
/// use flaxen::serialization::{from_safetensors, to_safetensors};
/// use flaxen::tensor::Tensor;
///
/// let v = Variables::from_flat([("params/Dense_0/bias", Tensor::ones(&[3]))])?;
/// let bytes = to_safetensors(&v)?;
/// assert_eq!(from_safetensors(&v, &bytes)?, v);
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn to_safetensors<T: StateDict>(target: &T) -> Result<Vec<u8>, SerializationError> {
    let state = target.to_state_dict()?;
    let mut flat = Vec::new();
    flatten(&state, "", "", &mut flat)?;
    let views = flat
        .iter()
        .map(|(n, a)| {
            TensorView::new(to_st(a.dtype()), a.shape().to_vec(), a.data())
                .map(|v| (n.clone(), v))
                .map_err(st_error)
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::tensor::serialize(views, None).map_err(st_error)
}

/// Every array of a safetensors file by name, in the file's order.
pub fn read_safetensors(bytes: &[u8]) -> Result<IndexMap<String, NpArray>, SerializationError> {
    let st = SafeTensors::deserialize(bytes).map_err(st_error)?;
    let mut out = IndexMap::new();
    for (name, view) in st.iter() {
        let dtype = from_st(view.dtype(), name)?;
        let a = NpArray::checked(dtype, view.shape().to_vec(), view.data().to_vec(), name)?;
        out.insert(name.to_string(), a);
    }
    Ok(out)
}

/// A copy of `target` holding the arrays of a safetensors file with dotted
/// names; every missing, extra or misshapen array is an error, by path.
pub fn from_safetensors<T: StateDict>(target: &T, bytes: &[u8]) -> Result<T, SerializationError> {
    let flat = read_safetensors(bytes)?;
    let mut root = State::Dict(IndexMap::new());
    for (name, a) in flat {
        insert(&mut root, &name, a)?;
    }
    target.from_state_dict(&root)
}

/// Puts `a` at the dotted `name` in nested dicts.
fn insert(root: &mut State, name: &str, a: NpArray) -> Result<(), SerializationError> {
    let parts: Vec<&str> = name.split('.').collect();
    let mut node = root;
    for (i, part) in parts.iter().enumerate() {
        let here = parts[..i].join("/");
        let State::Dict(d) = node else {
            return Err(SerializationError::Kind {
                path: here,
                expected: "a dict (a longer name goes through it)".into(),
                got: "an array".into(),
            });
        };
        if i + 1 == parts.len() {
            d.insert(part.to_string(), State::Array(a));
            return Ok(());
        }
        node = d
            .entry(part.to_string())
            .or_insert_with(|| State::Dict(IndexMap::new()));
    }
    Ok(())
}
