//! The RNG streams handed to `init`/`apply`, and Flax's separator flag.

use std::sync::atomic::{AtomicBool, Ordering};

use indexmap::IndexMap;

use crate::random::Key;

static FIX_RNG_SEPARATOR: AtomicBool = AtomicBool::new(false);

/// Sets the process-wide default of Flax's `flax_fix_rng_separator` flag
/// (off, as in Flax): with it on, `make_rng` hashes a `\0` byte before every
/// path element, so that module paths like `("ab", "c")` and `("a", "bc")`
/// no longer give the same keys. A call can override it with
/// [`Rngs::fix_separator`].
pub fn set_flax_fix_rng_separator(on: bool) {
    FIX_RNG_SEPARATOR.store(on, Ordering::Relaxed);
}

/// The process-wide default of the separator flag.
pub fn flax_fix_rng_separator() -> bool {
    FIX_RNG_SEPARATOR.load(Ordering::Relaxed)
}

/// Named RNG streams: a seed key per stream name, as the `rngs` dict of
/// Flax's `init`/`apply`. A single key means the `params` stream.
///
/// ```
/// use flaxen::core::Rngs;
/// use flaxen::random;
///
/// let rngs = Rngs::from(random::key(0)); // {'params': key(0)}
/// assert!(rngs.contains("params"));
/// let rngs = Rngs::from([("params", random::key(0)), ("dropout", random::key(1))]);
/// assert_eq!(rngs.names().collect::<Vec<_>>(), ["params", "dropout"]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Rngs {
    pub(crate) streams: IndexMap<String, Key>,
    pub(crate) separator: Option<bool>,
}

impl Rngs {
    /// No streams (Flax's `rngs=None`).
    pub fn none() -> Rngs {
        Rngs::default()
    }

    /// `self` with `key` as the seed of stream `name`.
    pub fn with(mut self, name: impl Into<String>, key: Key) -> Rngs {
        self.streams.insert(name.into(), key);
        self
    }

    /// Overrides the process default of Flax's separator flag for this call.
    pub fn fix_separator(mut self, on: bool) -> Rngs {
        self.separator = Some(on);
        self
    }

    /// Whether stream `name` has a seed.
    pub fn contains(&self, name: &str) -> bool {
        self.streams.contains_key(name)
    }

    /// Stream names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.streams.keys().map(String::as_str)
    }

    /// The separator flag in force for a call with these streams.
    pub(crate) fn separator_flag(&self) -> bool {
        self.separator.unwrap_or_else(flax_fix_rng_separator)
    }
}

impl From<Key> for Rngs {
    fn from(key: Key) -> Rngs {
        Rngs::none().with("params", key)
    }
}

impl<const N: usize> From<[(&str, Key); N]> for Rngs {
    fn from(streams: [(&str, Key); N]) -> Rngs {
        streams
            .into_iter()
            .fold(Rngs::none(), |r, (name, key)| r.with(name, key))
    }
}

impl From<()> for Rngs {
    fn from(_: ()) -> Rngs {
        Rngs::none()
    }
}
