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

use super::array::Array;
use super::error::{Result, TensorError};
use super::Tensor;

/// The nesting of a tree: a tensor, an array, or named children.
#[derive(Clone, Debug, PartialEq)]
enum Def {
    Leaf,
    Array,
    Map {
        children: IndexMap<String, Child>,
        leaves: usize,
        arrays: usize,
    },
}

/// A child of a map: its structure, and the offsets of its first tensor and
/// first array in the flat lists.
#[derive(Clone, Debug, PartialEq)]
struct Child {
    leaf: usize,
    array: usize,
    def: Arc<Def>,
}

impl Def {
    fn num_leaves(&self) -> usize {
        match self {
            Def::Leaf => 1,
            Def::Array => 0,
            Def::Map { leaves, .. } => *leaves,
        }
    }

    fn num_arrays(&self) -> usize {
        match self {
            Def::Leaf => 0,
            Def::Array => 1,
            Def::Map { arrays, .. } => *arrays,
        }
    }
}

/// A tensor, an [`Array`] (integers, booleans, keys), or an ordered map
/// from names to subtrees (a JAX pytree of nested dicts, like Flax's
/// `{'params': {'Dense_0': {'kernel': ...}}}`).
///
/// Transforms and tree functions work on the tensors ([`Tree::leaves`]);
/// arrays ride along unchanged, as JAX leaves non-float leaves out of
/// differentiation.
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
    arrays: Vec<Array>,
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
                arrays: 0,
            }),
            leaves: Vec::new(),
            arrays: Vec::new(),
        }
    }

    /// A tree that is just `tensor`.
    pub fn leaf(tensor: Tensor) -> Tree {
        Tree {
            def: Arc::new(Def::Leaf),
            leaves: vec![tensor],
            arrays: Vec::new(),
        }
    }

    /// A tree that is just `array` (an integer, boolean or key array).
    pub fn array_leaf(array: Array) -> Tree {
        Tree {
            def: Arc::new(Def::Array),
            leaves: Vec::new(),
            arrays: vec![array],
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
        if let Def::Map {
            children,
            leaves,
            arrays,
        } = Arc::make_mut(&mut self.def)
        {
            if !children.contains_key(&key) {
                let child = Child {
                    leaf: self.leaves.len(),
                    array: self.arrays.len(),
                    def: value.def,
                };
                children.insert(key, child);
                *leaves += value.leaves.len();
                *arrays += value.arrays.len();
                self.leaves.extend(value.leaves);
                self.arrays.extend(value.arrays);
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
        let mut arrays = Vec::new();
        for (k, v) in children {
            let child = Child {
                leaf: leaves.len(),
                array: arrays.len(),
                def: v.def,
            };
            defs.insert(k, child);
            leaves.extend(v.leaves);
            arrays.extend(v.arrays);
        }
        Tree {
            def: Arc::new(Def::Map {
                children: defs,
                leaves: leaves.len(),
                arrays: arrays.len(),
            }),
            leaves,
            arrays,
        }
    }

    /// The `(key, subtree)` pairs of a map, in order; `None` for a leaf.
    pub fn entries(&self) -> Option<Vec<(String, Tree)>> {
        match &*self.def {
            Def::Leaf | Def::Array => None,
            Def::Map { children, .. } => Some(
                children
                    .iter()
                    .map(|(k, c)| (k.clone(), self.part(c.leaf, c.array, &c.def)))
                    .collect(),
            ),
        }
    }

    /// The keys of a map, in order (empty for a leaf).
    pub fn keys(&self) -> Vec<&str> {
        match &*self.def {
            Def::Leaf | Def::Array => Vec::new(),
            Def::Map { children, .. } => children.keys().map(String::as_str).collect(),
        }
    }

    /// The subtree of structure `def` whose tensors and arrays start at
    /// `leaf` and `array`.
    fn part(&self, leaf: usize, array: usize, def: &Arc<Def>) -> Tree {
        Tree {
            def: def.clone(),
            leaves: self.leaves[leaf..leaf + def.num_leaves()].to_vec(),
            arrays: self.arrays[array..array + def.num_arrays()].to_vec(),
        }
    }

    /// Finds the structure and the tensor and array offsets at `path`.
    fn locate(&self, path: &str) -> Option<(usize, usize, &Arc<Def>)> {
        let mut def = &self.def;
        let (mut leaf, mut array) = (0, 0);
        // Split and compared byte by byte: paths and keys are short, and
        // `str::split` and string equality (a search and a `memcmp` call
        // per key) were most of a lookup's cost, a tenth of the eager 2-3-2
        // step's four lookups.
        let mut rest = path.as_bytes();
        while !rest.is_empty() {
            let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
            let key = &rest[..end];
            rest = rest.get(end + 1..).unwrap_or_default();
            if key.is_empty() {
                continue;
            }
            match &**def {
                Def::Leaf | Def::Array => return None,
                Def::Map { children, .. } => {
                    // A few children (a layer's kernel and bias, a model's
                    // layers): comparing the keys costs less than hashing
                    // the one looked for.
                    let same =
                        |k: &str| k.len() == key.len() && k.bytes().zip(key).all(|(a, &b)| a == b);
                    let c = if children.len() <= 8 {
                        children.iter().find(|(k, _)| same(k))?.1
                    } else {
                        // Whole keys of a `&str` split at an ASCII `/` are
                        // valid UTF-8.
                        children.get(std::str::from_utf8(key).ok()?)?
                    };
                    leaf += c.leaf;
                    array += c.array;
                    def = &c.def;
                }
            }
        }
        Some((leaf, array, def))
    }

    /// The subtree at a `/`-separated path (`"params/Dense_0"`); the empty
    /// path is the whole tree. The copy shares storage with `self`.
    pub fn subtree(&self, path: &str) -> Option<Tree> {
        let (leaf, array, def) = self.locate(path)?;
        Some(self.part(leaf, array, def))
    }

    /// The tensor at a `/`-separated path (`"params/Dense_0/kernel"`).
    ///
    /// Fails with [`TensorError::MissingKey`] when there is none (or the
    /// path names a map).
    pub fn tensor(&self, path: &str) -> Result<&Tensor> {
        match self.locate(path) {
            Some((leaf, _, def)) if **def == Def::Leaf => Ok(&self.leaves[leaf]),
            _ => Err(TensorError::MissingKey { path: path.into() }),
        }
    }

    /// The array (integers, booleans, keys) at a `/`-separated path.
    ///
    /// Fails with [`TensorError::MissingKey`] when there is none (or the
    /// path names a tensor or a map).
    pub fn array(&self, path: &str) -> Result<&Array> {
        match self.locate(path) {
            Some((_, array, def)) if **def == Def::Array => Ok(&self.arrays[array]),
            _ => Err(TensorError::MissingKey { path: path.into() }),
        }
    }

    /// The array, if the tree is a single array.
    pub fn as_array(&self) -> Option<&Array> {
        match &*self.def {
            Def::Array => self.arrays.first(),
            _ => None,
        }
    }

    /// All arrays (integers, booleans, keys), depth first.
    pub fn arrays(&self) -> &[Array] {
        &self.arrays
    }

    /// The tensor, if the tree is a single leaf.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match &*self.def {
            Def::Leaf => self.leaves.first(),
            _ => None,
        }
    }

    /// Whether the tree is a single tensor or array (not a map).
    pub fn is_leaf(&self) -> bool {
        !matches!(*self.def, Def::Map { .. })
    }

    /// All tensors, depth first in insertion order (`jax.tree.leaves`
    /// of the float leaves; arrays are in [`Tree::arrays`]).
    pub fn leaves(&self) -> &[Tensor] {
        &self.leaves
    }

    /// The tensors, to replace in place (the structure stays).
    pub(crate) fn leaves_mut(&mut self) -> &mut [Tensor] {
        &mut self.leaves
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
            arrays: self.arrays.clone(),
        })
    }

    /// Whether `other` has the same structure (same keys in the same order,
    /// leaves in the same places).
    pub fn same_structure(&self, other: &Tree) -> bool {
        Arc::ptr_eq(&self.def, &other.def) || self.def == other.def
    }

    /// A handle on this tree's structure, to recognize trees sharing it
    /// (see [`Structure::is_of`]).
    pub(crate) fn structure(&self) -> Structure {
        Structure(self.def.clone())
    }

    /// Whether the subtree at `path` (by keys) has `other`'s structure;
    /// `false` when there is none. Does not allocate.
    pub(crate) fn same_structure_at(&self, path: &[String], other: &Tree) -> bool {
        let mut def = &self.def;
        for key in path {
            match &**def {
                Def::Map { children, .. } => match children.get(key.as_str()) {
                    Some(c) => def = &c.def,
                    None => return false,
                },
                _ => return false,
            }
        }
        Arc::ptr_eq(def, &other.def) || *def == other.def
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
        let arrays = (0..first.arrays.len())
            .map(|k| {
                let parts: Vec<Array> = trees.iter().map(|t| t.arrays[k].clone()).collect();
                Array::stack(&parts, axis)
            })
            .collect::<Result<Vec<_>>>()?;
        let stacked = Tree {
            def: first.def.clone(),
            leaves,
            arrays,
        };
        Ok(stacked.sorted())
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
        let arrays = self
            .arrays
            .iter()
            .map(|x| x.index_axis(axis, index))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tree {
            def: self.def.clone(),
            leaves,
            arrays,
        })
    }

    /// All tensors with their `/`-separated paths, depth first.
    pub fn paths(&self) -> Vec<(String, &Tensor)> {
        self.walk()
            .into_iter()
            .filter_map(|(p, leaf)| match leaf {
                LeafRef::Tensor(t) => Some((p, t)),
                LeafRef::Array(_) => None,
            })
            .collect()
    }

    /// All arrays with their `/`-separated paths, depth first.
    pub fn array_paths(&self) -> Vec<(String, &Array)> {
        self.walk()
            .into_iter()
            .filter_map(|(p, leaf)| match leaf {
                LeafRef::Array(a) => Some((p, a)),
                LeafRef::Tensor(_) => None,
            })
            .collect()
    }

    /// Every leaf, tensor or array, with its path, depth first.
    pub fn leaf_paths(&self) -> Vec<(String, LeafRef<'_>)> {
        self.walk()
    }

    fn walk(&self) -> Vec<(String, LeafRef<'_>)> {
        fn go<'t>(
            t: &'t Tree,
            def: &Def,
            prefix: &str,
            (leaf, array): (usize, usize),
            out: &mut Vec<(String, LeafRef<'t>)>,
        ) {
            match def {
                Def::Leaf => out.push((prefix.to_string(), LeafRef::Tensor(&t.leaves[leaf]))),
                Def::Array => out.push((prefix.to_string(), LeafRef::Array(&t.arrays[array]))),
                Def::Map { children, .. } => {
                    for (k, c) in children {
                        let p = if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}/{k}")
                        };
                        go(t, &c.def, &p, (leaf + c.leaf, array + c.array), out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        go(self, &self.def, "", (0, 0), &mut out);
        out
    }
}

/// A tree's structure, held (see [`Tree::structure`]).
#[derive(Clone, Debug)]
pub(crate) struct Structure(Arc<Def>);

impl Structure {
    /// Whether `tree` shares this structure (not merely an equal one):
    /// one pointer comparison. Holding the structure keeps its address
    /// from being reused by another.
    pub(crate) fn is_of(&self, tree: &Tree) -> bool {
        Arc::ptr_eq(&self.0, &tree.def)
    }
}

/// What a single-leaf tree can be taken out as: a [`Tensor`] or an
/// [`Array`] (used by variables, whose values are either).
pub trait Leaf: Into<Tree> + Clone {
    /// What the kind is called in messages.
    const KIND: &'static str;

    /// The leaf, if `tree` is a single leaf of this kind.
    fn from_tree(tree: &Tree) -> Option<Self>;

    /// What this value's kind is called in messages.
    fn kind(&self) -> &'static str {
        Self::KIND
    }
}

impl Leaf for Tensor {
    const KIND: &'static str = "float32 tensor";
    fn from_tree(tree: &Tree) -> Option<Tensor> {
        tree.as_tensor().cloned()
    }
}

impl Leaf for Array {
    const KIND: &'static str = "array";
    fn from_tree(tree: &Tree) -> Option<Array> {
        tree.as_array().cloned()
    }
}

/// A leaf of a tree, borrowed: a tensor or an array.
#[derive(Clone, Copy, Debug)]
pub enum LeafRef<'t> {
    /// An `f32` tensor.
    Tensor(&'t Tensor),
    /// An integer, boolean or key array.
    Array(&'t Array),
}

impl LeafRef<'_> {
    /// The leaf's shape (for keys: without the key-data axis).
    pub fn shape(&self) -> &[usize] {
        match self {
            LeafRef::Tensor(t) => t.shape(),
            LeafRef::Array(a) => a.shape(),
        }
    }

    /// The leaf's type as JAX prints it: `float32[2,3]`, `int32[]`,
    /// `key<fry>[4]`.
    pub fn type_name(&self) -> String {
        let dtype = match self {
            LeafRef::Tensor(_) => "float32",
            LeafRef::Array(a) => a.dtype(),
        };
        let dims: Vec<String> = self.shape().iter().map(|d| d.to_string()).collect();
        format!("{dtype}[{}]", dims.join(","))
    }
}

impl From<Tensor> for Tree {
    fn from(t: Tensor) -> Tree {
        Tree::leaf(t)
    }
}

impl From<Array> for Tree {
    fn from(a: Array) -> Tree {
        Tree::array_leaf(a)
    }
}

/// Equal structure and equal values (tensors compare as `f32` `==`, so a
/// NaN is unequal to itself, as in NumPy's `array_equal`).
impl PartialEq for Tree {
    fn eq(&self, other: &Tree) -> bool {
        self.same_structure(other)
            && self.arrays == other.arrays
            && self
                .leaves
                .iter()
                .zip(&other.leaves)
                .all(|(a, b)| a.shape() == b.shape() && a.view() == b.view())
    }
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.entries(), self.as_array()) {
            (None, Some(a)) => write!(f, "{a:?}"),
            (None, None) => write!(f, "{:?}", self.leaves[0]),
            (Some(entries), _) => f
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
        arrays: tree.arrays.clone(),
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
        arrays: a.arrays.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lookups split paths at `/`, skip empty segments, compare whole keys,
    /// and hash the key in maps of more than eight children.
    #[test]
    fn paths_are_looked_up_key_by_key() {
        let t = |v: f32| Tensor::from_vec(vec![v], &[1]).unwrap();
        let mut wide = Tree::new();
        for i in 0..12 {
            wide.insert(format!("layer_{i}"), t(i as f32)).unwrap();
        }
        let tree = Tree::new()
            .with(
                "Dense_0",
                Tree::new().with("kernel", t(1.0)).with("bias", t(2.0)),
            )
            .with("Dense", t(3.0))
            .with("é", t(4.0))
            .with("wide", wide);
        let at = |p: &str| tree.tensor(p).map(|x| x.to_vec()[0]).ok();
        assert_eq!(at("Dense_0/kernel"), Some(1.0));
        assert_eq!(at("/Dense_0//bias/"), Some(2.0));
        assert_eq!(at("Dense"), Some(3.0));
        assert_eq!(at("é"), Some(4.0));
        assert_eq!(at("wide/layer_11"), Some(11.0));
        assert_eq!(at("wide/layer_1"), Some(1.0));
        for missing in [
            "Dense_",
            "Dense_0/kernel/x",
            "Dense_0",
            "",
            "wide/layer_12",
            "e",
        ] {
            assert_eq!(at(missing), None, "{missing:?}");
        }
        assert!(tree.subtree("").is_some());
        assert!(tree.subtree("//Dense_0").is_some());
    }
}
