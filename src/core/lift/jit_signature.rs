//! What a jitted module's compiled program depends on besides the values
//! of its arguments (JAX's cache key for `jax.jit`): the input's structure
//! and static values, every argument's shape, the variables' structure,
//! which collections are writable, and the RNG streams.
//!
//! Checked on every call, so [`Signature::matches`] compares in place,
//! without allocating.

use crate::core::filter::Filter;
use crate::core::scope::State;
use crate::tensor::{Tensor, Tensors, Tree};

/// One compiled program's signature.
pub(super) struct Signature {
    /// The input's [`Tensors::static_signature`].
    statics: String,
    /// Every argument's shape (the input's tensors, then the variables').
    shapes: Vec<Vec<usize>>,
    /// Per lifted collection: its name, whether it is writable, and its
    /// structure at the module's path (placeholder leaves): as Flax's
    /// cache key, it does not depend on where the module sits.
    collections: Vec<(String, bool, Tree)>,
    streams: Vec<String>,
    separator: bool,
    mutable: Filter,
    lifted: Vec<Vec<Filter>>,
}

/// The input's static signature, or `None` when it cannot tell (such a
/// module runs eagerly on every call).
pub(super) fn statics<I: Tensors>(input: &I) -> Option<String> {
    let mut s = String::new();
    input.static_signature(&mut s).then_some(s)
}

impl Signature {
    /// The signature of a call.
    pub(super) fn new(
        statics: String,
        args: &[Tensor],
        state: &State,
        path: &[String],
        streams: &[String],
        separator: bool,
    ) -> crate::Result<Signature> {
        let mut collections = Vec::new();
        for (c, tree) in state.variables.iter() {
            // The state holds the collection's subtree at `path`, nested.
            let at = tree.subtree(&path.join("/"));
            let tree = at.as_ref().unwrap_or(tree);
            let structure = tree.with_leaves(vec![Tensor::scalar(0.0); tree.leaves().len()])?;
            collections.push((c.to_string(), state.writable(c), structure));
        }
        Ok(Signature {
            statics,
            shapes: args.iter().map(|t| t.shape().to_vec()).collect(),
            collections,
            streams: streams.to_vec(),
            separator,
            mutable: (*state.mutable).clone(),
            lifted: (*state.lifted).clone(),
        })
    }

    /// Whether a call has this signature.
    pub(super) fn matches(
        &self,
        statics: &str,
        args: &[Tensor],
        state: &State,
        path: &[String],
        streams: &[String],
        separator: bool,
    ) -> bool {
        self.statics == statics
            && self.separator == separator
            && self.streams == streams
            && self.shapes.len() == args.len()
            && self
                .shapes
                .iter()
                .zip(args)
                .all(|(s, a)| a.shape() == &s[..])
            && *state.mutable == self.mutable
            && *state.lifted == self.lifted
            && self.collections.len() == state.variables.iter().count()
            && self.collections.iter().zip(state.variables.iter()).all(
                |((name, writable, structure), (c, tree))| {
                    name == c
                        && *writable == state.writable(c)
                        && tree.same_structure_at(path, structure)
                },
            )
    }
}
