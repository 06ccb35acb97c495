//! The hash Flax's `make_rng` folds into a stream's seed key.
//!
//! `make_rng(stream)` in a module at path `(a, b)`, called for the `n`-th
//! time, returns `fold_in(seed, path_hash(&[a, b, n]))`. The hash is SHA-1
//! over the elements (strings as UTF-8, integers as their shortest big-endian
//! bytes, so 0 contributes no byte), read as the first four digest bytes in
//! big-endian order. Flax's `flax_fix_rng_separator` flag puts a `\0` byte
//! before every element, so that `("ab", "c")` and `("a", "bc")` no longer
//! collide.

use sha1::{Digest, Sha1};

/// One element of a `make_rng` path: a scope name or the call count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathElement<'a> {
    /// A module (scope) name, hashed as UTF-8.
    Name(&'a str),
    /// An integer (the call count), hashed as its minimal big-endian bytes.
    Count(u64),
}

impl<'a> From<&'a str> for PathElement<'a> {
    fn from(s: &'a str) -> Self {
        PathElement::Name(s)
    }
}

impl From<u64> for PathElement<'_> {
    fn from(n: u64) -> Self {
        PathElement::Count(n)
    }
}

impl From<u32> for PathElement<'_> {
    fn from(n: u32) -> Self {
        PathElement::Count(n.into())
    }
}

/// Flax's `produce_hash`: SHA-1 of the path elements, first four bytes
/// big-endian. `separator` is Flax's `flax_fix_rng_separator`.
///
/// ```
/// use flaxen::core::rng_hash::path_hash;
/// // The guide's sharp edge: without the separator these all collide.
/// let h = path_hash(&["A".into(), "B".into(), "C".into(), 1u64.into()], false);
/// assert_eq!(h, 947574064);
/// assert_eq!(path_hash(&["ABC".into(), 1u64.into()], false), h);
/// assert_ne!(path_hash(&["ABC".into(), 1u64.into()], true), h);
/// ```
pub fn path_hash(path: &[PathElement<'_>], separator: bool) -> u32 {
    let mut sha = Sha1::new();
    for element in path {
        if separator {
            sha.update([0u8]);
        }
        match element {
            PathElement::Name(s) => sha.update(s.as_bytes()),
            PathElement::Count(n) => {
                let bytes = n.to_be_bytes();
                let skip = (n.leading_zeros() / 8) as usize;
                sha.update(&bytes[skip..]);
            }
        }
    }
    let digest = sha.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}
