//! How inputs are mapped over and outputs stacked by `vmap` and `scan`
//! (`in_axes` / `out_axes`), leaf by leaf over nested structures as JAX's
//! pytree rule does: a tuple, `Vec`, `BTreeMap` or [`Tree`] takes one
//! axis setting per tuple element, and one for all its elements otherwise
//! (JAX's axis given for a whole subtree).

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::tensor::{Array, Tensor, Tree};

/// Where a lifted collection's variables live: stacked along an axis, one
/// slice per item or step, or one copy shared by all (Flax's
/// `nn.broadcast`, `None` in `vmap`'s `variable_axes`). `Vmap` and `Scan`
/// take it in the same form: `0`, `Some(0)`, `None` or
/// `VariableAxis::Broadcast`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariableAxis {
    /// Stacked along this axis.
    Axis(usize),
    /// One copy shared by every item or step.
    Broadcast,
}

impl From<usize> for VariableAxis {
    fn from(axis: usize) -> VariableAxis {
        VariableAxis::Axis(axis)
    }
}

impl From<Option<usize>> for VariableAxis {
    fn from(axis: Option<usize>) -> VariableAxis {
        axis.map_or(VariableAxis::Broadcast, VariableAxis::Axis)
    }
}

/// A leaf of an input with an axis to map over.
#[derive(Clone, Debug, PartialEq)]
pub struct MappedAxis {
    /// Where the leaf sits in the input, as JAX prints key paths
    /// (`[0]['a']`; empty for the input itself).
    pub path: String,
    /// The axis to map over.
    pub axis: usize,
    /// The leaf's shape.
    pub shape: Vec<usize>,
}

impl MappedAxis {
    /// The leaf's length along the axis; `None` when it has no such axis
    /// (a scalar with `in_axes=0`).
    pub fn size(&self) -> Option<usize> {
        self.shape.get(self.axis).copied()
    }
}

/// Which transform takes the items of an input: an input that is not
/// mapped is shared by the items of a `vmap` (read through per-item views
/// under `grad`, as JAX's unbatched operands), and passed whole to every
/// step of a `scan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// `vmap`'s items.
    Vmap,
    /// `scan`'s steps.
    Scan,
}

/// An input `vmap` and `scan` can map over: a tensor or [`Array`] (with an
/// axis, or `None` to give every item the whole value), a [`Tree`], a
/// tuple, `Vec` or `BTreeMap` of inputs, or a value that is always given
/// whole (`bool`, `()`, numbers, strings).
pub trait MapIn: Sized {
    /// The `in_axes` of this input: `Option<usize>` for a tensor, array or
    /// tree, a tuple of axes for a tuple, the elements' axes for a `Vec` or
    /// map, `()` for values that are always given whole.
    type Axes: Clone + Send + Sync;

    /// Flax's default `in_axes=0`: axis 0 for every tensor.
    fn default_axes() -> Self::Axes;

    /// Appends every leaf that `axes` maps, with its path under `path`.
    fn mapped_axes(&self, axes: &Self::Axes, path: &str, out: &mut Vec<MappedAxis>);

    /// Item `i` of the input.
    fn item(&self, axes: &Self::Axes, i: usize, mapping: Mapping) -> Result<Self>;
}

/// An output `vmap` and `scan` can stack: a tensor or [`Array`] (along an
/// axis), a [`Tree`], a tuple, `Vec` or `BTreeMap` of outputs, or `()`.
/// Every item must return the same structure.
pub trait StackOut: Sized {
    /// The `out_axes` of this output.
    type Axes: Clone + Send + Sync;

    /// Flax's default `out_axes=0`.
    fn default_axes() -> Self::Axes;

    /// Stacks the items' outputs; `path` is this output's place in the
    /// whole, for errors.
    fn stack(items: Vec<Self>, axes: &Self::Axes, path: &str) -> Result<Self>;
}

/// Records a leaf of `shape` at `path` when `axis` maps it.
fn push_leaf(shape: &[usize], axis: Option<usize>, path: &str, out: &mut Vec<MappedAxis>) {
    if let Some(axis) = axis {
        out.push(MappedAxis {
            path: path.to_string(),
            axis,
            shape: shape.to_vec(),
        });
    }
}

/// An output that the items do not return alike.
fn mismatch(path: &str, message: String) -> Error {
    Error::Lift {
        path: String::new(),
        transform: "stack",
        message: format!("the items' outputs{path} differ: {message}"),
    }
}

impl MapIn for Tensor {
    type Axes = Option<usize>;

    fn default_axes() -> Option<usize> {
        Some(0)
    }

    fn mapped_axes(&self, axes: &Option<usize>, path: &str, out: &mut Vec<MappedAxis>) {
        push_leaf(self.shape(), *axes, path, out);
    }

    fn item(&self, axes: &Option<usize>, i: usize, mapping: Mapping) -> Result<Tensor> {
        match (*axes, mapping) {
            // Shared by every item, as an unbatched operand in JAX.
            (None, Mapping::Vmap) => Ok(crate::tensor::batched::share_input(self)),
            (None, Mapping::Scan) => Ok(self.clone()),
            (Some(a), _) => Ok(self.index_axis(a as isize, i)?),
        }
    }
}

impl StackOut for Tensor {
    type Axes = usize;

    fn default_axes() -> usize {
        0
    }

    fn stack(items: Vec<Tensor>, axis: &usize, path: &str) -> Result<Tensor> {
        Tensor::stack(&items, *axis as isize).map_err(|e| mismatch(path, e.to_string()))
    }
}

impl MapIn for Array {
    type Axes = Option<usize>;

    fn default_axes() -> Option<usize> {
        Some(0)
    }

    fn mapped_axes(&self, axes: &Option<usize>, path: &str, out: &mut Vec<MappedAxis>) {
        push_leaf(self.shape(), *axes, path, out);
    }

    fn item(&self, axes: &Option<usize>, i: usize, _: Mapping) -> Result<Array> {
        match *axes {
            None => Ok(self.clone()),
            Some(a) => Ok(self.index_axis(a as isize, i)?),
        }
    }
}

impl StackOut for Array {
    type Axes = usize;

    fn default_axes() -> usize {
        0
    }

    fn stack(items: Vec<Array>, axis: &usize, path: &str) -> Result<Array> {
        Array::stack(&items, *axis as isize).map_err(|e| mismatch(path, e.to_string()))
    }
}

impl MapIn for Tree {
    type Axes = Option<usize>;

    fn default_axes() -> Option<usize> {
        Some(0)
    }

    fn mapped_axes(&self, axes: &Option<usize>, path: &str, out: &mut Vec<MappedAxis>) {
        if let Some(axis) = *axes {
            for (p, leaf) in self.leaf_paths() {
                push_leaf(
                    leaf.shape(),
                    Some(axis),
                    &format!("{path}{}", key_path(&p)),
                    out,
                );
            }
        }
    }

    fn item(&self, axes: &Option<usize>, i: usize, mapping: Mapping) -> Result<Tree> {
        match *axes {
            None => {
                let leaves = self
                    .leaves()
                    .iter()
                    .map(|t| MapIn::item(t, &None, i, mapping))
                    .collect::<Result<Vec<_>>>()?;
                Ok(self.with_leaves(leaves)?)
            }
            Some(a) => Ok(self.index_axis(a as isize, i)?),
        }
    }
}

impl StackOut for Tree {
    type Axes = usize;

    fn default_axes() -> usize {
        0
    }

    fn stack(items: Vec<Tree>, axis: &usize, path: &str) -> Result<Tree> {
        Tree::stack(&items, *axis as isize).map_err(|e| mismatch(path, e.to_string()))
    }
}

/// A tree's `/`-separated path as JAX prints key paths: `['a']['b']`.
fn key_path(p: &str) -> String {
    p.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| format!("['{s}']"))
        .collect()
}

impl<T: MapIn> MapIn for Vec<T> {
    type Axes = T::Axes;

    fn default_axes() -> T::Axes {
        T::default_axes()
    }

    fn mapped_axes(&self, axes: &T::Axes, path: &str, out: &mut Vec<MappedAxis>) {
        for (k, x) in self.iter().enumerate() {
            x.mapped_axes(axes, &format!("{path}[{k}]"), out);
        }
    }

    fn item(&self, axes: &T::Axes, i: usize, mapping: Mapping) -> Result<Vec<T>> {
        self.iter().map(|x| x.item(axes, i, mapping)).collect()
    }
}

impl<T: StackOut> StackOut for Vec<T> {
    type Axes = T::Axes;

    fn default_axes() -> T::Axes {
        T::default_axes()
    }

    fn stack(items: Vec<Vec<T>>, axes: &T::Axes, path: &str) -> Result<Vec<T>> {
        let len = items.first().map_or(0, Vec::len);
        if let Some((i, v)) = items.iter().enumerate().find(|(_, v)| v.len() != len) {
            return Err(mismatch(
                path,
                format!(
                    "item 0 returns a list of {len}, item {i} one of {}",
                    v.len()
                ),
            ));
        }
        let mut columns: Vec<Vec<T>> = (0..len).map(|_| Vec::with_capacity(items.len())).collect();
        for item in items {
            for (column, x) in columns.iter_mut().zip(item) {
                column.push(x);
            }
        }
        columns
            .into_iter()
            .enumerate()
            .map(|(k, c)| T::stack(c, axes, &format!("{path}[{k}]")))
            .collect()
    }
}

impl<T: MapIn> MapIn for BTreeMap<String, T> {
    type Axes = T::Axes;

    fn default_axes() -> T::Axes {
        T::default_axes()
    }

    fn mapped_axes(&self, axes: &T::Axes, path: &str, out: &mut Vec<MappedAxis>) {
        for (k, x) in self {
            x.mapped_axes(axes, &format!("{path}['{k}']"), out);
        }
    }

    fn item(&self, axes: &T::Axes, i: usize, mapping: Mapping) -> Result<Self> {
        self.iter()
            .map(|(k, x)| Ok((k.clone(), x.item(axes, i, mapping)?)))
            .collect()
    }
}

impl<T: StackOut> StackOut for BTreeMap<String, T> {
    type Axes = T::Axes;

    fn default_axes() -> T::Axes {
        T::default_axes()
    }

    fn stack(items: Vec<Self>, axes: &T::Axes, path: &str) -> Result<Self> {
        let keys: Vec<String> = items
            .first()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        if let Some((i, m)) = items
            .iter()
            .enumerate()
            .find(|(_, m)| !m.keys().eq(keys.iter()))
        {
            return Err(mismatch(
                path,
                format!(
                    "item 0 returns the keys {keys:?}, item {i} {:?}",
                    m.keys().collect::<Vec<_>>()
                ),
            ));
        }
        let mut columns: BTreeMap<String, Vec<T>> =
            keys.iter().map(|k| (k.clone(), Vec::new())).collect();
        for item in items {
            for (k, x) in item {
                columns.get_mut(&k).expect("same keys").push(x);
            }
        }
        columns
            .into_iter()
            .map(|(k, c)| {
                let stacked = T::stack(c, axes, &format!("{path}['{k}']"))?;
                Ok((k, stacked))
            })
            .collect()
    }
}

impl StackOut for () {
    type Axes = ();

    fn default_axes() {}

    fn stack(_: Vec<()>, _: &(), _: &str) -> Result<()> {
        Ok(())
    }
}

macro_rules! broadcast_input {
    ($($t:ty),*) => {$(
        impl MapIn for $t {
            type Axes = ();
            fn default_axes() {}
            fn mapped_axes(&self, _: &(), _: &str, _: &mut Vec<MappedAxis>) {}
            fn item(&self, _: &(), _: usize, _: Mapping) -> Result<Self> {
                Ok(self.clone())
            }
        }
    )*};
}
broadcast_input!((), bool, i32, i64, u32, u64, usize, f32, f64, String);

macro_rules! tuple_impls {
    ($(($($name:ident : $idx:tt),+)),*) => {$(
        impl<$($name: MapIn),+> MapIn for ($($name,)+) {
            type Axes = ($($name::Axes,)+);
            fn default_axes() -> Self::Axes {
                ($($name::default_axes(),)+)
            }
            fn mapped_axes(&self, axes: &Self::Axes, path: &str, out: &mut Vec<MappedAxis>) {
                $(self.$idx.mapped_axes(&axes.$idx, &format!("{path}[{}]", $idx), out);)+
            }
            fn item(&self, axes: &Self::Axes, i: usize, mapping: Mapping) -> Result<Self> {
                Ok(($(self.$idx.item(&axes.$idx, i, mapping)?,)+))
            }
        }

        impl<$($name: StackOut),+> StackOut for ($($name,)+) {
            type Axes = ($($name::Axes,)+);
            fn default_axes() -> Self::Axes {
                ($($name::default_axes(),)+)
            }
            #[allow(non_snake_case)]
            fn stack(items: Vec<Self>, axes: &Self::Axes, path: &str) -> Result<Self> {
                $(let mut $name = Vec::with_capacity(items.len());)+
                for item in items {
                    $($name.push(item.$idx);)+
                }
                Ok(($($name::stack($name, &axes.$idx, &format!("{path}[{}]", $idx))?,)+))
            }
        }
    )*};
}
tuple_impls!((A: 0), (A: 0, B: 1), (A: 0, B: 1, C: 2), (A: 0, B: 1, C: 2, D: 3));
