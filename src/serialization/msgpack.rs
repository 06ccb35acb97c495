//! Flax's msgpack format (`flax.serialization.msgpack_serialize` and
//! `msgpack_restore`): dicts, Python values, NumPy arrays as extension
//! type 1 (`msgpack((shape, dtype_name, bytes))`), complex numbers as
//! type 2, NumPy scalars as type 3, and arrays above
//! [`MAX_CHUNK_SIZE`] bytes split into chunks.
//!
//! The writer produces the bytes Flax produces (msgpack-python's choice of
//! the shortest form for every int, str, bin, map and ext header). The
//! reader accepts any valid msgpack and refuses everything else with a
//! typed error; it never allocates more than the input's size before
//! checking, and nests at most [`MAX_DEPTH`] containers.

use indexmap::IndexMap;
use rmp::encode;
use rmp::Marker;

use super::array::{byte_len, NpArray, NpDType};
use super::error::SerializationError;
use super::state::State;

/// Flax's `MAX_CHUNK_SIZE`: arrays of more bytes are written in chunks.
pub const MAX_CHUNK_SIZE: usize = 1 << 30;

/// The deepest nesting of dicts and lists the reader accepts (deeper than
/// any model: [`MAX_MODULE_DEPTH`](crate::nn::MAX_MODULE_DEPTH) plus the
/// collection levels).
pub const MAX_DEPTH: usize = 1024;

/// The key Flax marks a chunked array's dict with.
const CHUNKED: &str = "__msgpack_chunked_array__";

const EXT_NDARRAY: i8 = 1;
const EXT_COMPLEX: i8 = 2;
const EXT_NPSCALAR: i8 = 3;

/// `flax.serialization.msgpack_serialize(state)`: the bytes Flax writes for
/// the same tree.
pub fn msgpack_serialize(state: &State) -> Result<Vec<u8>, SerializationError> {
    msgpack_serialize_with_chunk_size(state, MAX_CHUNK_SIZE)
}

/// [`msgpack_serialize`] with another chunk limit (Flax's module-level
/// `MAX_CHUNK_SIZE`, which tests set small to exercise chunking).
pub fn msgpack_serialize_with_chunk_size(
    state: &State,
    max_chunk_size: usize,
) -> Result<Vec<u8>, SerializationError> {
    let mut out = Vec::new();
    let chunked = match state {
        State::Array(a) => chunk(a, max_chunk_size),
        _ => None,
    };
    write_value(
        &mut out,
        chunked.as_ref().unwrap_or(state),
        max_chunk_size,
        0,
    )?;
    Ok(out)
}

/// `flax.serialization.msgpack_restore(bytes)`: the tree, with chunked
/// arrays joined again.
pub fn msgpack_restore(bytes: &[u8]) -> Result<State, SerializationError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let v = r.value(0)?;
    if r.pos != bytes.len() {
        return Err(SerializationError::TrailingBytes { offset: r.pos });
    }
    unchunk_in_place(v, "")
}

/// Flax's `_chunk`: a dict of the shape and the flat array in pieces of
/// at most `max_chunk_size` bytes, if the array is larger than that.
fn chunk(a: &NpArray, max_chunk_size: usize) -> Option<State> {
    let item = a.dtype().itemsize();
    if a.data().len() <= max_chunk_size {
        return None;
    }
    let per = (max_chunk_size / item).max(1);
    let shape = State::dict(
        a.shape()
            .iter()
            .enumerate()
            .map(|(i, &d)| (i.to_string(), State::Int(d as i128))),
    );
    let chunks = State::dict(a.data().chunks(per * item).enumerate().map(|(i, c)| {
        let n = c.len() / item;
        let piece = NpArray::new(a.dtype(), vec![n], c.to_vec()).expect("whole elements");
        (i.to_string(), State::Array(piece))
    }));
    Some(State::dict([
        (CHUNKED, State::Bool(true)),
        ("shape", shape),
        ("chunks", chunks),
    ]))
}

fn too_long(what: &str, len: usize) -> SerializationError {
    SerializationError::Malformed {
        offset: 0,
        reason: format!("a {what} of length {len} exceeds msgpack's 2^32 - 1"),
    }
}

fn len32(what: &str, len: usize) -> Result<u32, SerializationError> {
    u32::try_from(len).map_err(|_| too_long(what, len))
}

/// Writing to a `Vec` cannot fail; the `Result`s of `rmp` are for writers
/// that can.
fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) {
    r.expect("writing to a Vec cannot fail");
}

/// Flax's `_ndarray_to_bytes`: `msgpack((shape, dtype.name, bytes))`.
fn ndarray_bytes(a: &NpArray) -> Result<Vec<u8>, SerializationError> {
    let mut out = Vec::with_capacity(a.data().len() + 32);
    ok(encode::write_array_len(&mut out, 3));
    ok(encode::write_array_len(
        &mut out,
        len32("shape", a.shape().len())?,
    ));
    for &d in a.shape() {
        ok(encode::write_uint(&mut out, d as u64));
    }
    ok(encode::write_str(&mut out, a.dtype().name()));
    len32("bin", a.data().len())?;
    ok(encode::write_bin(&mut out, a.data()));
    Ok(out)
}

fn write_ext(out: &mut Vec<u8>, code: i8, data: &[u8]) -> Result<(), SerializationError> {
    if code < 0 {
        return Err(SerializationError::Malformed {
            offset: 0,
            reason: format!("extension type {code}: Python's msgpack writes codes 0 to 127"),
        });
    }
    ok(encode::write_ext_meta(out, len32("ext", data.len())?, code));
    out.extend_from_slice(data);
    Ok(())
}

fn write_value(
    out: &mut Vec<u8>,
    v: &State,
    max_chunk_size: usize,
    depth: usize,
) -> Result<(), SerializationError> {
    if depth > MAX_DEPTH {
        return Err(SerializationError::TooDeep { limit: MAX_DEPTH });
    }
    match v {
        State::Dict(d) => {
            ok(encode::write_map_len(out, len32("dict", d.len())?));
            for (k, x) in d {
                ok(encode::write_str(out, k));
                // Flax chunks the arrays found in dicts (`_chunk_array_leaves_in_place`).
                let chunked = match x {
                    State::Array(a) => chunk(a, max_chunk_size),
                    _ => None,
                };
                write_value(
                    out,
                    chunked.as_ref().unwrap_or(x),
                    max_chunk_size,
                    depth + 1,
                )?;
            }
        }
        State::List(items) => {
            ok(encode::write_array_len(out, len32("list", items.len())?));
            for x in items {
                write_value(out, x, max_chunk_size, depth + 1)?;
            }
        }
        State::Array(a) => write_ext(out, EXT_NDARRAY, &ndarray_bytes(a)?)?,
        State::Scalar(a) => write_ext(out, EXT_NPSCALAR, &ndarray_bytes(a)?)?,
        State::Complex(re, im) => {
            let mut inner = Vec::new();
            ok(encode::write_array_len(&mut inner, 2));
            ok(encode::write_f64(&mut inner, *re));
            ok(encode::write_f64(&mut inner, *im));
            write_ext(out, EXT_COMPLEX, &inner)?;
        }
        State::Int(i) => {
            if let Ok(u) = u64::try_from(*i) {
                ok(encode::write_uint(out, u));
            } else if let Ok(s) = i64::try_from(*i) {
                ok(encode::write_sint(out, s));
            } else {
                return Err(SerializationError::IntRange {
                    path: String::new(),
                    value: *i,
                });
            }
        }
        State::Float(x) => ok(encode::write_f64(out, *x)),
        State::Bool(b) => ok(encode::write_bool(out, *b)),
        State::Str(s) => {
            len32("str", s.len())?;
            ok(encode::write_str(out, s));
        }
        State::Bytes(b) => {
            len32("bin", b.len())?;
            ok(encode::write_bin(out, b));
        }
        State::None => ok(encode::write_nil(out)),
        State::Ext(code, data) => write_ext(out, *code, data)?,
    }
    Ok(())
}

/// A bounds-checked reader over msgpack bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SerializationError> {
        let available = self.buf.len() - self.pos;
        if n > available {
            return Err(SerializationError::Truncated {
                offset: self.pos,
                needed: n,
                available,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn be(&mut self, n: usize) -> Result<u64, SerializationError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn malformed(&self, offset: usize, reason: impl Into<String>) -> SerializationError {
        SerializationError::Malformed {
            offset,
            reason: reason.into(),
        }
    }

    /// A container of `n` items needs at least `n` more bytes: checked
    /// before anything is reserved for it.
    fn check_count(&self, n: usize, per_item: usize) -> Result<(), SerializationError> {
        let available = self.buf.len() - self.pos;
        match n.checked_mul(per_item) {
            Some(need) if need <= available => Ok(()),
            _ => Err(SerializationError::Truncated {
                offset: self.pos,
                needed: n.saturating_mul(per_item),
                available,
            }),
        }
    }

    fn value(&mut self, depth: usize) -> Result<State, SerializationError> {
        if depth > MAX_DEPTH {
            return Err(SerializationError::TooDeep { limit: MAX_DEPTH });
        }
        let start = self.pos;
        let marker = Marker::from_u8(self.take(1)?[0]);
        Ok(match marker {
            Marker::FixPos(v) => State::Int(i128::from(v)),
            Marker::FixNeg(v) => State::Int(i128::from(v)),
            Marker::Null => State::None,
            Marker::True => State::Bool(true),
            Marker::False => State::Bool(false),
            Marker::U8 => State::Int(i128::from(self.be(1)?)),
            Marker::U16 => State::Int(i128::from(self.be(2)?)),
            Marker::U32 => State::Int(i128::from(self.be(4)?)),
            Marker::U64 => State::Int(i128::from(self.be(8)?)),
            Marker::I8 => State::Int(i128::from(self.be(1)? as u8 as i8)),
            Marker::I16 => State::Int(i128::from(self.be(2)? as u16 as i16)),
            Marker::I32 => State::Int(i128::from(self.be(4)? as u32 as i32)),
            Marker::I64 => State::Int(i128::from(self.be(8)? as i64)),
            Marker::F32 => State::Float(f64::from(f32::from_bits(self.be(4)? as u32))),
            Marker::F64 => State::Float(f64::from_bits(self.be(8)?)),
            Marker::FixStr(n) => self.str(usize::from(n), start)?,
            Marker::Str8 => {
                let n = self.be(1)? as usize;
                self.str(n, start)?
            }
            Marker::Str16 => {
                let n = self.be(2)? as usize;
                self.str(n, start)?
            }
            Marker::Str32 => {
                let n = self.be(4)? as usize;
                self.str(n, start)?
            }
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                let width = match marker {
                    Marker::Bin8 => 1,
                    Marker::Bin16 => 2,
                    _ => 4,
                };
                let n = self.be(width)? as usize;
                State::Bytes(self.take(n)?.to_vec())
            }
            Marker::FixArray(n) => self.list(usize::from(n), depth)?,
            Marker::Array16 => {
                let n = self.be(2)? as usize;
                self.list(n, depth)?
            }
            Marker::Array32 => {
                let n = self.be(4)? as usize;
                self.list(n, depth)?
            }
            Marker::FixMap(n) => self.map(usize::from(n), depth)?,
            Marker::Map16 => {
                let n = self.be(2)? as usize;
                self.map(n, depth)?
            }
            Marker::Map32 => {
                let n = self.be(4)? as usize;
                self.map(n, depth)?
            }
            Marker::FixExt1 => self.ext(1, start)?,
            Marker::FixExt2 => self.ext(2, start)?,
            Marker::FixExt4 => self.ext(4, start)?,
            Marker::FixExt8 => self.ext(8, start)?,
            Marker::FixExt16 => self.ext(16, start)?,
            Marker::Ext8 => {
                let n = self.be(1)? as usize;
                self.ext(n, start)?
            }
            Marker::Ext16 => {
                let n = self.be(2)? as usize;
                self.ext(n, start)?
            }
            Marker::Ext32 => {
                let n = self.be(4)? as usize;
                self.ext(n, start)?
            }
            Marker::Reserved => return Err(self.malformed(start, "the reserved byte 0xc1")),
        })
    }

    fn str(&mut self, n: usize, start: usize) -> Result<State, SerializationError> {
        let bytes = self.take(n)?;
        let s = std::str::from_utf8(bytes)
            .map_err(|_| self.malformed(start, "a str that is not UTF-8"))?;
        Ok(State::Str(s.to_string()))
    }

    fn list(&mut self, n: usize, depth: usize) -> Result<State, SerializationError> {
        self.check_count(n, 1)?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.value(depth + 1)?);
        }
        Ok(State::List(items))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<State, SerializationError> {
        self.check_count(n, 2)?;
        let mut d = IndexMap::with_capacity(n);
        for _ in 0..n {
            let at = self.pos;
            let key = match self.value(depth + 1)? {
                State::Str(k) => k,
                other => {
                    return Err(self.malformed(
                        at,
                        format!("a dict key that is {}, not a str", other.kind()),
                    ))
                }
            };
            let v = self.value(depth + 1)?;
            d.insert(key, v);
        }
        Ok(State::Dict(d))
    }

    fn ext(&mut self, n: usize, start: usize) -> Result<State, SerializationError> {
        let code = self.take(1)?[0] as i8;
        let data = self.take(n)?;
        let data_at = self.pos - n;
        match code {
            EXT_NDARRAY => Ok(State::Array(ndarray_from_bytes(data, data_at)?)),
            EXT_NPSCALAR => Ok(State::Scalar(ndarray_from_bytes(data, data_at)?)),
            EXT_COMPLEX => {
                let mut r = Reader { buf: data, pos: 0 };
                let v = r.value(0).map_err(|e| shift(e, data_at))?;
                let part = |x: &State| match x {
                    State::Float(f) => Some(*f),
                    State::Int(i) => Some(*i as f64),
                    _ => None,
                };
                match v {
                    State::List(ref xs) if xs.len() == 2 && r.pos == data.len() => {
                        match (part(&xs[0]), part(&xs[1])) {
                            (Some(re), Some(im)) => Ok(State::Complex(re, im)),
                            _ => Err(self.malformed(start, "a complex that is not two numbers")),
                        }
                    }
                    _ => Err(self.malformed(start, "a complex that is not two numbers")),
                }
            }
            _ => Ok(State::Ext(code, data.to_vec())),
        }
    }
}

/// An error inside an extension's data, with offsets in the whole input.
fn shift(e: SerializationError, by: usize) -> SerializationError {
    match e {
        SerializationError::Truncated {
            offset,
            needed,
            available,
        } => SerializationError::Truncated {
            offset: offset + by,
            needed,
            available,
        },
        SerializationError::Malformed { offset, reason } => SerializationError::Malformed {
            offset: offset + by,
            reason,
        },
        SerializationError::TrailingBytes { offset } => SerializationError::TrailingBytes {
            offset: offset + by,
        },
        other => other,
    }
}

/// Flax's `_ndarray_from_bytes`: `(shape, dtype_name, buffer)`.
fn ndarray_from_bytes(data: &[u8], at: usize) -> Result<NpArray, SerializationError> {
    let mut r = Reader { buf: data, pos: 0 };
    let v = r.value(1).map_err(|e| shift(e, at))?;
    if r.pos != data.len() {
        return Err(SerializationError::TrailingBytes { offset: at + r.pos });
    }
    let bad = |reason: &str| SerializationError::Malformed {
        offset: at,
        reason: format!("an ndarray extension {reason}"),
    };
    let State::List(parts) = v else {
        return Err(bad("that is not a (shape, dtype, bytes) tuple"));
    };
    let [shape, name, buffer] = &parts[..] else {
        return Err(bad("that is not a (shape, dtype, bytes) tuple"));
    };
    let State::List(dims) = shape else {
        return Err(bad("whose shape is not a tuple"));
    };
    let shape = dims
        .iter()
        .map(|d| match d {
            State::Int(i) => usize::try_from(*i).ok(),
            _ => None,
        })
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| bad("whose shape has a dimension that is not a size"))?;
    // Flax reads with raw=True: the name and the buffer may be str or bytes.
    let name = match name {
        State::Str(s) => s.clone(),
        State::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        _ => return Err(bad("whose dtype is not a name")),
    };
    let buffer = match buffer {
        State::Bytes(b) => b.clone(),
        State::Str(s) => s.clone().into_bytes(),
        _ => return Err(bad("whose data is not bytes")),
    };
    let dtype = NpDType::from_name(&name).ok_or_else(|| SerializationError::UnsupportedDType {
        path: String::new(),
        dtype: name.clone(),
        expected: String::new(),
    })?;
    NpArray::checked(dtype, shape, buffer, "")
}

/// Flax's `_unchunk_array_leaves_in_place`: dicts marked as chunked arrays
/// (at the top, or anywhere in nested dicts) become arrays again.
fn unchunk_in_place(v: State, path: &str) -> Result<State, SerializationError> {
    match v {
        State::Dict(d) if d.contains_key(CHUNKED) => unchunk(&d, path),
        State::Dict(d) => {
            let mut out = IndexMap::with_capacity(d.len());
            for (k, x) in d {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}/{k}")
                };
                let x = match x {
                    State::Dict(_) => unchunk_in_place(x, &p)?,
                    other => other,
                };
                out.insert(k, x);
            }
            Ok(State::Dict(out))
        }
        other => Ok(other),
    }
}

/// Flax's `_dict_to_tuple`: the values at keys `"0"`, `"1"`, ….
fn dict_items<'s>(
    d: Option<&'s State>,
    path: &str,
    what: &str,
) -> Result<Vec<&'s State>, SerializationError> {
    let bad = || SerializationError::Chunks {
        path: path.to_string(),
        reason: format!("its {what} is not a dict with keys \"0\", \"1\", …"),
    };
    let d = d.and_then(State::as_dict).ok_or_else(bad)?;
    (0..d.len())
        .map(|i| d.get(&i.to_string()).ok_or_else(bad))
        .collect()
}

fn unchunk(d: &IndexMap<String, State>, path: &str) -> Result<State, SerializationError> {
    let err = |reason: String| SerializationError::Chunks {
        path: path.to_string(),
        reason,
    };
    let shape = dict_items(d.get("shape"), path, "shape")?
        .into_iter()
        .map(|s| match s {
            State::Int(i) => usize::try_from(*i).ok(),
            _ => None,
        })
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| err("a dimension is not a size".into()))?;
    let chunks = dict_items(d.get("chunks"), path, "chunks")?;
    let mut dtype = None;
    let mut data = Vec::new();
    for c in chunks {
        let a = c
            .as_array()
            .ok_or_else(|| err(format!("a chunk is {}", c.kind())))?;
        if *dtype.get_or_insert(a.dtype()) != a.dtype() {
            return Err(err("the chunks have different dtypes".into()));
        }
        data.extend_from_slice(a.data());
    }
    let dtype = dtype.ok_or_else(|| err("it has no chunks".into()))?;
    if byte_len(&shape, dtype.itemsize()) != Some(data.len()) {
        return Err(err(format!(
            "{} bytes of chunks do not make a {dtype} array of shape {shape:?}",
            data.len()
        )));
    }
    Ok(State::Array(NpArray::checked(dtype, shape, data, path)?))
}
