//! Trees of tensors: the nested name → tensor maps that Flax variables are.

use std::ops::Index;

use indexmap::IndexMap;

use super::error::{Result, TensorError};
use super::Tensor;

/// A tensor, or an ordered map from names to subtrees (a JAX pytree of
/// nested dicts, like Flax's `{'params': {'Dense_0': {'kernel': ...}}}`).
///
/// Maps keep insertion order; [`tree_map`] and [`grad`](super::grad) keep the
/// structure.
///
/// ```
/// use flaxen::tensor::{Tensor, Tree};
///
/// let params = Tree::new()
///     .with("dense", Tree::new()
///         .with("kernel", Tensor::ones(&[2, 3]))
///         .with("bias", Tensor::zeros(&[3])));
/// assert_eq!(params.tensor("dense/kernel").unwrap().shape(), &[2, 3]);
/// assert_eq!(params["dense"]["bias"].as_tensor().unwrap().shape(), &[3]);
/// assert_eq!(params.leaves().len(), 2);
/// ```
#[derive(Clone, Debug)]
pub enum Tree {
    /// A tensor.
    Leaf(Tensor),
    /// Named subtrees, in insertion order.
    Map(IndexMap<String, Tree>),
}

impl Default for Tree {
    fn default() -> Tree {
        Tree::new()
    }
}

impl Tree {
    /// An empty map.
    pub fn new() -> Tree {
        Tree::Map(IndexMap::new())
    }

    /// `self` with `value` under `key` (builder style).
    ///
    /// # Panics
    ///
    /// If `self` is a leaf.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Tree>) -> Tree {
        self.insert(key, value).unwrap_or_else(|e| panic!("{e}"));
        self
    }

    /// Puts `value` under `key`, returning the subtree it replaces.
    ///
    /// Fails with [`TensorError::TreeStructure`] if `self` is a leaf.
    pub fn insert(
        &mut self,
        key: impl Into<String>,
        value: impl Into<Tree>,
    ) -> Result<Option<Tree>> {
        match self {
            Tree::Map(m) => Ok(m.insert(key.into(), value.into())),
            Tree::Leaf(_) => Err(TensorError::TreeStructure {
                message: "cannot insert a key into a leaf".into(),
            }),
        }
    }

    /// The subtree at a `/`-separated path (`"params/Dense_0/kernel"`); the
    /// empty path is `self`.
    pub fn get(&self, path: &str) -> Option<&Tree> {
        path.split('/')
            .filter(|k| !k.is_empty())
            .try_fold(self, |t, k| match t {
                Tree::Map(m) => m.get(k),
                Tree::Leaf(_) => None,
            })
    }

    /// The tensor at a `/`-separated path.
    ///
    /// Fails with [`TensorError::MissingKey`] when there is none.
    pub fn tensor(&self, path: &str) -> Result<&Tensor> {
        self.get(path)
            .and_then(Tree::as_tensor)
            .ok_or_else(|| TensorError::MissingKey { path: path.into() })
    }

    /// The tensor, if this is a leaf.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Tree::Leaf(t) => Some(t),
            Tree::Map(_) => None,
        }
    }

    /// The map, if this is not a leaf.
    pub fn as_map(&self) -> Option<&IndexMap<String, Tree>> {
        match self {
            Tree::Map(m) => Some(m),
            Tree::Leaf(_) => None,
        }
    }

    /// All tensors, depth first in insertion order.
    pub fn leaves(&self) -> Vec<&Tensor> {
        self.paths().into_iter().map(|(_, t)| t).collect()
    }

    /// All tensors with their `/`-separated paths, depth first.
    pub fn paths(&self) -> Vec<(String, &Tensor)> {
        fn walk<'a>(t: &'a Tree, prefix: &str, out: &mut Vec<(String, &'a Tensor)>) {
            match t {
                Tree::Leaf(x) => out.push((prefix.to_string(), x)),
                Tree::Map(m) => {
                    for (k, v) in m {
                        let p = if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}/{k}")
                        };
                        walk(v, &p, out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(self, "", &mut out);
        out
    }
}

impl From<Tensor> for Tree {
    fn from(t: Tensor) -> Tree {
        Tree::Leaf(t)
    }
}

impl From<IndexMap<String, Tree>> for Tree {
    fn from(m: IndexMap<String, Tree>) -> Tree {
        Tree::Map(m)
    }
}

/// `tree[key]`: the subtree under `key`.
///
/// # Panics
///
/// If `self` is a leaf or has no `key`.
impl Index<&str> for Tree {
    type Output = Tree;
    fn index(&self, key: &str) -> &Tree {
        match self {
            Tree::Map(m) => m
                .get(key)
                .unwrap_or_else(|| panic!("{}", TensorError::MissingKey { path: key.into() })),
            Tree::Leaf(_) => panic!("{}", TensorError::MissingKey { path: key.into() }),
        }
    }
}

/// A tree of the same structure with `f` applied to every tensor
/// (`jax.tree_util.tree_map`).
///
/// ```
/// use flaxen::tensor::{tree_map, Tensor, Tree};
/// let t = Tree::new().with("a", Tensor::ones(&[2]));
/// let doubled = tree_map(&t, |x| x * 2.0);
/// assert_eq!(doubled.tensor("a").unwrap().to_vec(), [2.0, 2.0]);
/// ```
pub fn tree_map(tree: &Tree, mut f: impl FnMut(&Tensor) -> Tensor) -> Tree {
    fn go(t: &Tree, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Tree {
        match t {
            Tree::Leaf(x) => Tree::Leaf(f(x)),
            Tree::Map(m) => Tree::Map(m.iter().map(|(k, v)| (k.clone(), go(v, f))).collect()),
        }
    }
    go(tree, &mut f)
}

/// `f` over the tensors of two trees of the same structure, pairwise (maps
/// are matched by key, in `a`'s order). The usual SGD update:
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
/// Fails with [`TensorError::TreeStructure`] when the structures differ, or
/// with `f`'s error.
pub fn tree_map2(
    a: &Tree,
    b: &Tree,
    mut f: impl FnMut(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tree> {
    fn go(
        a: &Tree,
        b: &Tree,
        path: &str,
        f: &mut dyn FnMut(&Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Tree> {
        match (a, b) {
            (Tree::Leaf(x), Tree::Leaf(y)) => Ok(Tree::Leaf(f(x, y)?)),
            (Tree::Map(ma), Tree::Map(mb)) => {
                if ma.len() != mb.len() || ma.keys().any(|k| !mb.contains_key(k)) {
                    return Err(TensorError::TreeStructure {
                        message: format!(
                            "keys {:?} and {:?} at {path:?}",
                            ma.keys().collect::<Vec<_>>(),
                            mb.keys().collect::<Vec<_>>()
                        ),
                    });
                }
                ma.iter()
                    .map(|(k, v)| {
                        let p = format!("{path}/{k}");
                        Ok((k.clone(), go(v, &mb[k], &p, f)?))
                    })
                    .collect::<Result<IndexMap<_, _>>>()
                    .map(Tree::Map)
            }
            _ => Err(TensorError::TreeStructure {
                message: format!("a leaf and a map at {path:?}"),
            }),
        }
    }
    go(a, b, "", &mut f)
}
