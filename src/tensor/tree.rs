//! Trees of tensors: the nested name → tensor maps that Flax variables are.
//!
//! A [`Tree`] is stored flattened, as JAX stores a pytree: its tensors in
//! depth-first order, plus a shared description of the nesting (the
//! "treedef"). Mapping over a tree, as `grad` and optimizers do on every
//! step, then copies no keys: the result shares the description and only
//! gets a new list of tensors.

use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;

use super::error::{Result, TensorError};
use super::Tensor;

/// The nesting of a tree: a leaf, or named children with the offset of
/// their first tensor in the flat list.
#[derive(Clone, Debug, PartialEq)]
enum Def {
    Leaf,
    Map {
        children: IndexMap<String, (usize, Arc<Def>)>,
        leaves: usize,
    },
}

impl Def {
    fn num_leaves(&self) -> usize {
        match self {
            Def::Leaf => 1,
            Def::Map { leaves, .. } => *leaves,
        }
    }
}

/// A tensor, or an ordered map from names to subtrees (a JAX pytree of
/// nested dicts, like Flax's `{'params': {'Dense_0': {'kernel': ...}}}`).
///
/// Maps keep insertion order. Paths are `/`-separated keys. Clones are
/// cheap: the tensors share storage and the structure is shared.
///
/// ```
/// use flaxen::tensor::{Tensor, Tree};
///
/// let params = Tree::new().with(
///     "dense",
///     Tree::new()
///         .with("kernel", Tensor::ones(&[2, 3]))
///         .with("bias", Tensor::zeros(&[3])),
/// );
/// assert_eq!(params.tensor("dense/kernel").unwrap().shape(), &[2, 3]);
/// let dense = params.subtree("dense").unwrap();
/// assert_eq!(dense.keys(), ["kernel", "bias"]);
/// assert_eq!(params.leaves().len(), 2);
/// ```
#[derive(Clone)]
pub struct Tree {
    def: Arc<Def>,
    leaves: Vec<Tensor>,
}

impl Default for Tree {
    fn default() -> Tree {
        Tree::new()
    }
}

impl Tree {
    /// An empty map.
    pub fn new() -> Tree {
        Tree {
            def: Arc::new(Def::Map {
                children: IndexMap::new(),
                leaves: 0,
            }),
            leaves: Vec::new(),
        }
    }

    /// A tree that is just `tensor`.
    pub fn leaf(tensor: Tensor) -> Tree {
        Tree {
            def: Arc::new(Def::Leaf),
            leaves: vec![tensor],
        }
    }

    /// `self` with `value` under `key` (builder style).
    ///
    /// # Panics
    ///
    /// If `self` is a leaf, with [`TensorError::TreeStructure`]'s message.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Tree>) -> Tree {
        self.insert(key, value).unwrap_or_else(|e| panic!("{e}"));
        self
    }

    /// Puts `value` under `key` (replacing, in place, what was there, or
    /// appending), returning the subtree it replaces.
    ///
    /// Fails with [`TensorError::TreeStructure`] if `self` is a leaf.
    pub fn insert(
        &mut self,
        key: impl Into<String>,
        value: impl Into<Tree>,
    ) -> Result<Option<Tree>> {
        let key = key.into();
        let value = value.into();
        // Appending a new key: O(1) amortized (the structure is copied only
        // if another tree shares it).
        if let Def::Map { children, leaves } = Arc::make_mut(&mut self.def) {
            if !children.contains_key(&key) {
                children.insert(key, (self.leaves.len(), value.def));
                *leaves += value.leaves.len();
                self.leaves.extend(value.leaves);
                return Ok(None);
            }
        }
        let mut entries = self.entries().ok_or_else(|| TensorError::TreeStructure {
            message: format!("cannot insert key {key:?} into a leaf"),
        })?;
        let old = match entries.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                entries.push((key, value));
                None
            }
        };
        *self = Tree::from_entries(entries);
        Ok(old)
    }

    /// A map from `(key, subtree)` pairs, in order (a repeated key keeps its
    /// first position and its last value).
    pub fn from_entries(entries: impl IntoIterator<Item = (String, Tree)>) -> Tree {
        let mut children: IndexMap<String, Tree> = IndexMap::new();
        for (k, v) in entries {
            children.insert(k, v);
        }
        let mut defs = IndexMap::with_capacity(children.len());
        let mut leaves = Vec::new();
        for (k, v) in children {
            defs.insert(k, (leaves.len(), v.def));
            leaves.extend(v.leaves);
        }
        Tree {
            def: Arc::new(Def::Map {
                children: defs,
                leaves: leaves.len(),
            }),
            leaves,
        }
    }

    /// The `(key, subtree)` pairs of a map, in order; `None` for a leaf.
    pub fn entries(&self) -> Option<Vec<(String, Tree)>> {
        match &*self.def {
            Def::Leaf => None,
            Def::Map { children, .. } => Some(
                children
                    .iter()
                    .map(|(k, (offset, def))| {
                        let leaves = self.leaves[*offset..offset + def.num_leaves()].to_vec();
                        (
                            k.clone(),
                            Tree {
                                def: def.clone(),
                                leaves,
                            },
                        )
                    })
                    .collect(),
            ),
        }
    }

    /// The keys of a map, in order (empty for a leaf).
    pub fn keys(&self) -> Vec<&str> {
        match &*self.def {
            Def::Leaf => Vec::new(),
            Def::Map { children, .. } => children.keys().map(String::as_str).collect(),
        }
    }

    /// Finds the structure and leaf offset at `path`.
    fn locate(&self, path: &str) -> Option<(usize, &Arc<Def>)> {
        let mut def = &self.def;
        let mut offset = 0;
        for key in path.split('/').filter(|k| !k.is_empty()) {
            match &**def {
                Def::Leaf => return None,
                Def::Map { children, .. } => {
                    let (o, d) = children.get(key)?;
                    offset += o;
                    def = d;
                }
            }
        }
        Some((offset, def))
    }

    /// The subtree at a `/`-separated path (`"params/Dense_0"`); the empty
    /// path is the whole tree. The copy shares storage with `self`.
    pub fn subtree(&self, path: &str) -> Option<Tree> {
        let (offset, def) = self.locate(path)?;
        Some(Tree {
            def: def.clone(),
            leaves: self.leaves[offset..offset + def.num_leaves()].to_vec(),
        })
    }

    /// The tensor at a `/`-separated path (`"params/Dense_0/kernel"`).
    ///
    /// Fails with [`TensorError::MissingKey`] when there is none (or the
    /// path names a map).
    pub fn tensor(&self, path: &str) -> Result<&Tensor> {
        match self.locate(path) {
            Some((offset, def)) if **def == Def::Leaf => Ok(&self.leaves[offset]),
            _ => Err(TensorError::MissingKey { path: path.into() }),
        }
    }

    /// The tensor, if the tree is a single leaf.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match &*self.def {
            Def::Leaf => self.leaves.first(),
            Def::Map { .. } => None,
        }
    }

    /// Whether the tree is a single tensor.
    pub fn is_leaf(&self) -> bool {
        *self.def == Def::Leaf
    }

    /// All tensors, depth first in insertion order (`jax.tree.leaves`).
    pub fn leaves(&self) -> &[Tensor] {
        &self.leaves
    }

    /// The tensors, consuming the tree.
    pub fn into_leaves(self) -> Vec<Tensor> {
        self.leaves
    }

    /// A tree of the same structure holding `leaves` (in the order of
    /// [`leaves`](Tree::leaves); `jax.tree.unflatten`).
    ///
    /// Fails with [`TensorError::TreeStructure`] when the count differs.
    pub fn with_leaves(&self, leaves: Vec<Tensor>) -> Result<Tree> {
        if leaves.len() != self.leaves.len() {
            return Err(TensorError::TreeStructure {
                message: format!(
                    "{} leaves for a tree of {}",
                    leaves.len(),
                    self.leaves.len()
                ),
            });
        }
        Ok(Tree {
            def: self.def.clone(),
            leaves,
        })
    }

    /// Whether `other` has the same structure (same keys in the same order,
    /// leaves in the same places).
    pub fn same_structure(&self, other: &Tree) -> bool {
        Arc::ptr_eq(&self.def, &other.def) || self.def == other.def
    }

    /// Stacks trees of the same structure leaf by leaf along a new axis
    /// (`jax.tree.map(lambda *xs: jnp.stack(xs, axis), *trees)`: what
    /// `jax.vmap` does to the trees its items return). As from JAX, the
    /// result's keys are [sorted](Tree::sorted).
    ///
    /// ```
    /// use flaxen::tensor::{Tensor, Tree};
    ///
    /// let item = Tree::new().with("bias", Tensor::zeros(&[4]));
    /// let stacked = Tree::stack(&[item.clone(), item.clone(), item], 0)?;
    /// assert_eq!(stacked.tensor("bias")?.shape(), &[3, 4]);
    /// assert_eq!(stacked.index_axis(0, 1)?.tensor("bias")?.shape(), &[4]);
    /// # Ok::<(), flaxen::tensor::TensorError>(())
    /// ```
    ///
    /// Fails with [`TensorError::TreeStructure`] when the structures differ
    /// (the message lists both trees' paths), and like [`Tensor::stack`]
    /// when `trees` is empty or shapes differ.
    pub fn stack(trees: &[Tree], axis: isize) -> Result<Tree> {
        let first = trees.first().ok_or_else(|| TensorError::Argument {
            op: "stack",
            message: "needs at least one tree".into(),
        })?;
        if let Some(t) = trees.iter().find(|t| !t.same_structure(first)) {
            let names = |t: &Tree| t.paths().into_iter().map(|(p, _)| p).collect::<Vec<_>>();
            return Err(TensorError::TreeStructure {
                message: format!("cannot stack {:?} with {:?}", names(first), names(t)),
            });
        }
        let leaves = (0..first.leaves.len())
            .map(|k| {
                let parts: Vec<Tensor> = trees.iter().map(|t| t.leaves[k].clone()).collect();
                Tensor::stack(&parts, axis)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(first.with_leaves(leaves)?.sorted())
    }

    /// The same tree with the keys of every map in sorted order, as JAX's
    /// tree functions (`jax.tree.map`, `jax.vmap`, `jax.grad`, ...) return
    /// dicts.
    ///
    /// ```
    /// use flaxen::tensor::{Tensor, Tree};
    ///
    /// let t = Tree::new().with("kernel", Tensor::ones(&[1])).with("bias", Tensor::zeros(&[1]));
    /// assert_eq!(t.sorted().keys(), ["bias", "kernel"]);
    /// ```
    pub fn sorted(&self) -> Tree {
        match self.entries() {
            None => self.clone(),
            Some(mut entries) => {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Tree::from_entries(entries.into_iter().map(|(k, v)| (k, v.sorted())))
            }
        }
    }

    /// Item `index` of every leaf along `axis` (`jax.tree.map(lambda x:
    /// x[index], tree)` for axis 0); the inverse of [`Tree::stack`].
    ///
    /// Fails like [`Tensor::index_axis`] when a leaf has no such axis or
    /// index.
    pub fn index_axis(&self, axis: isize, index: usize) -> Result<Tree> {
        let leaves = self
            .leaves
            .iter()
            .map(|x| x.index_axis(axis, index))
            .collect::<Result<Vec<_>>>()?;
        self.with_leaves(leaves)
    }

    /// All tensors with their `/`-separated paths, depth first.
    pub fn paths(&self) -> Vec<(String, &Tensor)> {
        fn walk(def: &Def, prefix: &str, offset: usize, out: &mut Vec<(String, usize)>) {
            match def {
                Def::Leaf => out.push((prefix.to_string(), offset)),
                Def::Map { children, .. } => {
                    for (k, (o, d)) in children {
                        let p = if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}/{k}")
                        };
                        walk(d, &p, offset + o, out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.def, "", 0, &mut out);
        out.into_iter().map(|(p, i)| (p, &self.leaves[i])).collect()
    }
}

impl From<Tensor> for Tree {
    fn from(t: Tensor) -> Tree {
        Tree::leaf(t)
    }
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.entries() {
            None => write!(f, "{:?}", self.leaves[0]),
            Some(entries) => f
                .debug_map()
                .entries(entries.iter().map(|(k, v)| (k, v)))
                .finish(),
        }
    }
}

/// A tree of the same structure with `f` applied to every tensor
/// (`jax.tree_util.tree_map`). Copies no keys.
///
/// ```
/// use flaxen::tensor::{tree_map, Tensor, Tree};
/// let t = Tree::new().with("a", Tensor::ones(&[2]));
/// let doubled = tree_map(&t, |x| x * 2.0);
/// assert_eq!(doubled.tensor("a").unwrap().to_vec(), [2.0, 2.0]);
/// ```
pub fn tree_map(tree: &Tree, f: impl FnMut(&Tensor) -> Tensor) -> Tree {
    Tree {
        def: tree.def.clone(),
        leaves: tree.leaves.iter().map(f).collect(),
    }
}

/// `f` over the tensors of two trees of the same structure, pairwise. The
/// usual SGD update:
///
/// ```
/// use flaxen::tensor::{tree_map2, Tensor, Tree};
/// let params = Tree::new().with("w", Tensor::ones(&[2]));
/// let grads = Tree::new().with("w", Tensor::full(&[2], 0.5));
/// let lr = 0.1;
/// let new = tree_map2(&params, &grads, |p, g| p.sub(&(g * lr))).unwrap();
/// assert_eq!(new.tensor("w").unwrap().to_vec(), [0.95, 0.95]);
/// ```
///
/// Fails with [`TensorError::TreeStructure`] when the structures differ
/// (keys, their order, or where the leaves are), or with `f`'s error.
pub fn tree_map2(
    a: &Tree,
    b: &Tree,
    mut f: impl FnMut(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tree> {
    if !a.same_structure(b) {
        let paths = |t: &Tree| t.paths().into_iter().map(|(p, _)| p).collect::<Vec<_>>();
        return Err(TensorError::TreeStructure {
            message: format!("leaves {:?} and {:?}", paths(a), paths(b)),
        });
    }
    let leaves = a
        .leaves
        .iter()
        .zip(&b.leaves)
        .map(|(x, y)| f(x, y))
        .collect::<Result<Vec<_>>>()?;
    Ok(Tree {
        def: a.def.clone(),
        leaves,
    })
}
