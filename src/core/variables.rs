//! `Variables`: the nested, ordered map of collections that `init` returns
//! and `apply` takes (`{'params': {'Dense_0': {'kernel': ...}}}`).

use std::fmt;

use indexmap::IndexMap;

use crate::array_format::format_array_repr;
use crate::error::{Error, Result};
use crate::tensor::{Array, Tensor, Tree};

/// Variables grouped by collection (`params`, `batch_stats`, any name), each
/// collection a [`Tree`] keyed by module path. Insertion-ordered, as Flax's
/// dicts are.
///
/// ```
/// use flaxen::core::Variables;
/// use flaxen::tensor::{Tensor, Tree};
///
/// let v = Variables::new().with(
///     "params",
///     Tree::new().with("Dense_0", Tree::new().with("bias", Tensor::zeros(&[2]))),
/// );
/// assert_eq!(v.tensor("params/Dense_0/bias").unwrap().shape(), &[2]);
/// assert_eq!(
///     v.to_string(),
///     "{'params': {'Dense_0': {'bias': Array([0., 0.], dtype=float32)}}}"
/// );
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Variables {
    collections: IndexMap<String, Tree>,
}

impl Variables {
    /// No collections.
    pub fn new() -> Variables {
        Variables::default()
    }

    /// `self` with `tree` as collection `name` (builder style).
    pub fn with(mut self, name: impl Into<String>, tree: Tree) -> Variables {
        self.collections.insert(name.into(), tree);
        self
    }

    /// Sets collection `name`, returning the one it replaces.
    pub fn insert(&mut self, name: impl Into<String>, tree: Tree) -> Option<Tree> {
        self.collections.insert(name.into(), tree)
    }

    /// Removes collection `name`.
    pub fn remove(&mut self, name: &str) -> Option<Tree> {
        self.collections.shift_remove(name)
    }

    /// Collection `name`, e.g. `variables.collection("params")`.
    pub fn collection(&self, name: &str) -> Option<&Tree> {
        self.collections.get(name)
    }

    /// The `params` collection, or an empty tree.
    pub fn params(&self) -> Tree {
        self.collection("params").cloned().unwrap_or_default()
    }

    /// Collection names, in order.
    pub fn collection_names(&self) -> impl Iterator<Item = &str> {
        self.collections.keys().map(String::as_str)
    }

    /// Whether there is no collection.
    pub fn is_empty(&self) -> bool {
        self.collections.is_empty()
    }

    /// The subtree at a `/`-separated path that starts with the collection:
    /// `"params/Dense_0/kernel"`.
    pub fn get(&self, path: &str) -> Option<Tree> {
        let (collection, rest) = split_collection(path);
        self.collections.get(collection)?.subtree(rest)
    }

    /// The tensor at a `/`-separated path (see [`Variables::get`]).
    pub fn tensor(&self, path: &str) -> Option<&Tensor> {
        let (collection, rest) = split_collection(path);
        self.collections.get(collection)?.tensor(rest).ok()
    }

    /// The array (integers, booleans, keys) at a `/`-separated path that
    /// starts with the collection: `"counter/count"`.
    pub fn array(&self, path: &str) -> Option<&Array> {
        let (collection, rest) = split_collection(path);
        self.collections.get(collection)?.array(rest).ok()
    }

    /// The subtree at `path`, or [`Error::NoSuchPath`] listing the
    /// nearest existing paths (by edit distance), so a typo names its fix.
    ///
    /// ```
    /// use flaxen::core::Variables;
    /// use flaxen::tensor::{Tensor, Tree};
    ///
    /// let v = Variables::from_flat([("params/Dense_0/kernel", Tensor::zeros(&[2, 2]))])?;
    /// let err = v.lookup("params/Dense_0/kernal").unwrap_err();
    /// assert!(err.to_string().contains("params/Dense_0/kernel"));
    /// # Ok::<(), flaxen::Error>(())
    /// ```
    pub fn lookup(&self, path: &str) -> Result<Tree> {
        self.get(path).ok_or_else(|| Error::NoSuchPath {
            path: path.to_string(),
            nearest: self.nearest_paths(path, 3),
        })
    }

    /// The `n` existing leaf paths closest to `path` (edit distance).
    fn nearest_paths(&self, path: &str, n: usize) -> Vec<String> {
        let want = path.trim_start_matches('/');
        let mut all: Vec<(usize, String)> = self
            .collections
            .iter()
            .flat_map(|(c, t)| {
                t.leaf_paths()
                    .into_iter()
                    .map(move |(p, _)| format!("{c}/{p}"))
            })
            .map(|p| (edit_distance(want, &p), p))
            .collect();
        all.sort();
        all.into_iter().take(n).map(|(_, p)| p).collect()
    }

    /// The variables with the keys of every dict in sorted order, as
    /// `jax.jit` returns them (JAX flattens dicts in key order); a Flax
    /// checkpoint of a trained model is in this order.
    pub fn sorted(&self) -> Variables {
        self.iter()
            .map(|(name, tree)| (name.to_string(), tree.sorted()))
            .collect()
    }

    /// Variables from flat `("collection/path", value)` entries, in order;
    /// values are tensors, arrays or trees.
    ///
    /// ```
    /// use flaxen::core::Variables;
    /// use flaxen::tensor::{Array, Tensor, Tree};
    /// use ndarray::arr0;
    ///
    /// let v = Variables::from_flat([
    ///     ("params/Dense_0/bias", Tree::from(Tensor::zeros(&[2]))),
    ///     ("counter/count", Tree::from(Array::from(arr0(0i32).into_dyn()))),
    /// ])?;
    /// assert_eq!(v["params/Dense_0/bias"].shape(), &[2]);
    /// assert_eq!(v.array("counter/count").unwrap().dtype(), "int32");
    /// # Ok::<(), flaxen::Error>(())
    /// ```
    ///
    /// Fails with [`Error::Config`] for an empty path element or a path
    /// that passes through a leaf.
    pub fn from_flat<P: AsRef<str>, V: Into<Tree>>(
        entries: impl IntoIterator<Item = (P, V)>,
    ) -> Result<Variables> {
        let mut v = Variables::new();
        for (path, value) in entries {
            let path = path.as_ref();
            let parts: Vec<&str> = path.split('/').collect();
            let bad = |message: &str| Error::Config {
                path: "/".into(),
                message: format!("variables path \"{path}\": {message}"),
            };
            if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
                return Err(bad("needs a collection and a name, with no empty element"));
            }
            let tree = v.collection_mut(parts[0]);
            crate::core::scope::put_at(tree, &parts[1..], value.into())
                .map_err(|_| bad("a value stands where the path continues"))?;
        }
        Ok(v)
    }

    /// Every tensor with its full path (`params/Dense_0/kernel`), in order.
    pub fn flatten(&self) -> Vec<(String, &Tensor)> {
        self.collections
            .iter()
            .flat_map(|(c, t)| {
                t.paths()
                    .into_iter()
                    .map(move |(p, x)| (format!("{c}/{p}"), x))
            })
            .collect()
    }

    /// Iterates over `(collection name, tree)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tree)> {
        self.collections.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Mutable access to one collection's tree, created empty if absent.
    pub(crate) fn collection_mut(&mut self, name: &str) -> &mut Tree {
        self.collections.entry(name.to_string()).or_default()
    }
}

/// Levenshtein distance between two strings (by characters).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// `variables["params/Dense_0/kernel"]`: the tensor at a path.
///
/// # Panics
///
/// When there is no tensor at `path`, with [`Error::NoSuchPath`]'s message
/// (the nearest paths); [`Variables::tensor`] and [`Variables::lookup`] do
/// not panic.
impl std::ops::Index<&str> for Variables {
    type Output = Tensor;
    fn index(&self, path: &str) -> &Tensor {
        self.tensor(path).unwrap_or_else(|| {
            let err = Error::NoSuchPath {
                path: path.to_string(),
                nearest: self.nearest_paths(path, 3),
            };
            panic!("{err}")
        })
    }
}

/// `"params/Dense_0/kernel"` → `("params", "Dense_0/kernel")`.
fn split_collection(path: &str) -> (&str, &str) {
    let path = path.trim_start_matches('/');
    path.split_once('/').unwrap_or((path, ""))
}

impl FromIterator<(String, Tree)> for Variables {
    fn from_iter<I: IntoIterator<Item = (String, Tree)>>(iter: I) -> Self {
        Variables {
            collections: iter.into_iter().collect(),
        }
    }
}

/// JAX's `repr` of an `f32` array: `Array([[1., 2.],\n       [3., 4.]], dtype=float32)`.
pub fn array_repr(t: &Tensor) -> String {
    const PREFIX: &str = "Array(";
    format!(
        "{PREFIX}{}{}, dtype=float32)",
        format_array_repr(&t.view(), PREFIX.len()),
        crate::array_format::empty_shape_suffix(t.shape())
    )
}

fn write_tree(f: &mut fmt::Formatter<'_>, t: &Tree) -> fmt::Result {
    if let Some(a) = t.as_array() {
        return write!(f, "{}", a.repr());
    }
    match (t.as_tensor(), t.entries()) {
        (Some(x), _) => write!(f, "{}", array_repr(x)),
        (None, entries) => {
            write!(f, "{{")?;
            for (i, (k, v)) in entries.unwrap_or_default().iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "'{k}': ")?;
                write_tree(f, v)?;
            }
            write!(f, "}}")
        }
    }
}

/// IPython's line width.
const PRETTY_WIDTH: usize = 79;

/// IPython's pretty form of a nested dict (what a notebook shows for
/// `model.init(...)`), at nesting depth `depth` and starting column `col`.
fn pretty_tree(t: &Tree, depth: usize, col: usize) -> String {
    let leaf = match (t.as_tensor(), t.as_array()) {
        (Some(x), _) => Some(array_repr(x)),
        (_, Some(a)) => Some(a.repr()),
        _ => None,
    };
    if let Some(repr) = leaf {
        // A multi-line repr continues at the current indentation.
        let indent = " ".repeat(depth);
        return repr.replace('\n', &format!("\n{indent}"));
    }
    let entries = t.entries().unwrap_or_default();
    let mut items = Vec::with_capacity(entries.len());
    let mut item_col = col + 1;
    for (k, v) in &entries {
        let key = format!("'{k}': ");
        let item = format!("{key}{}", pretty_tree(v, depth + 1, item_col + key.len()));
        item_col += item.len() + 2;
        items.push(item);
    }
    let one_line = format!("{{{}}}", items.join(", "));
    if !one_line.contains('\n') && col + one_line.len() <= PRETTY_WIDTH {
        return one_line;
    }
    // Broken: one item per line, indented by the nesting depth; items are
    // re-rendered for the column they now start at.
    let indent = " ".repeat(depth + 1);
    let items: Vec<String> = entries
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let start = if i == 0 { col + 1 } else { depth + 1 };
            let key = format!("'{k}': ");
            format!("{key}{}", pretty_tree(v, depth + 1, start + key.len()))
        })
        .collect();
    format!("{{{}}}", items.join(&format!(",\n{indent}")))
}

impl Variables {
    /// The variables as a notebook shows them (IPython's pretty printer):
    /// Python's dict syntax, wrapped at 79 columns with one entry per line
    /// and nested entries indented by their depth.
    ///
    /// ```
    /// use flaxen::core::Variables;
    /// use flaxen::tensor::{Tensor, Tree};
    /// let v = Variables::new().with("params", Tree::new().with("bias", Tensor::zeros(&[2])));
    /// assert_eq!(v.pretty(), "{'params': {'bias': Array([0., 0.], dtype=float32)}}");
    /// ```
    pub fn pretty(&self) -> String {
        let tree = Tree::from_entries(self.collections.iter().map(|(k, v)| (k.clone(), v.clone())));
        pretty_tree(&tree, 0, 0)
    }
}

/// Python's `repr` of the dict Flax returns, in insertion order.
impl fmt::Display for Variables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{")?;
        for (i, (k, v)) in self.collections.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "'{k}': ")?;
            write_tree(f, v)?;
        }
        write!(f, "}}")
    }
}
