//! Checkpoints, as `flax.serialization`: the msgpack state dicts Flax's
//! `to_bytes`/`from_bytes` read and write, byte for byte, and safetensors
//! files with dotted names.
//!
//! A tree saved by Flax loads in flaxen and one saved by flaxen loads in
//! Flax: [`to_bytes`] writes the bytes `flax.serialization.to_bytes` writes
//! for the same variables (or `TrainState`), and [`from_bytes`] restores
//! into a target of the expected structure, refusing missing, extra and
//! misshapen leaves by path. The readers survive any input: truncated,
//! oversized or malformed files are typed errors
//! ([`SerializationError`]), never a panic or an allocation beyond the
//! file's size.
//!
//! ```
//! use flaxen::nn::{Dense, Module};
//! use flaxen::serialization::{from_bytes, to_bytes};
//! use flaxen::{random, tensor::Tensor};
//!
//! let model = Dense::new(3);
//! let variables = model.init(random::key(0), Tensor::ones(&[1, 2]))?;
//! let bytes = to_bytes(&variables)?;
//! let restored = from_bytes(&variables, &bytes)?;
//! assert_eq!(restored, variables);
//! # Ok::<(), flaxen::Error>(())
//! ```

mod array;
mod error;
mod msgpack;
mod safetensors;
mod state;
mod state_dict;

pub use array::{NpArray, NpDType};
pub use error::SerializationError;
pub use msgpack::{
    msgpack_restore, msgpack_serialize, msgpack_serialize_with_chunk_size, MAX_CHUNK_SIZE,
    MAX_DEPTH,
};
pub use safetensors::{from_safetensors, read_safetensors, to_safetensors};
pub use state::State;
pub use state_dict::StateDict;

/// `flax.serialization.to_bytes(target)`: the msgpack bytes of the state
/// dict.
pub fn to_bytes<T: StateDict>(target: &T) -> Result<Vec<u8>, SerializationError> {
    msgpack_serialize(&target.to_state_dict()?)
}

/// `flax.serialization.from_bytes(target, bytes)`: a copy of `target`
/// holding the values the bytes hold.
pub fn from_bytes<T: StateDict>(target: &T, bytes: &[u8]) -> Result<T, SerializationError> {
    target.from_state_dict(&msgpack_restore(bytes)?)
}
