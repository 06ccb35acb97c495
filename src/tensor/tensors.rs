//! [`Tensors`]: values made of tensors (JAX's pytrees of arrays), flattened
//! to their tensors and rebuilt, so that transforms such as
//! [`checkpoint`](super::checkpoint) and [`custom_vjp`](super::custom_vjp)
//! can take and return tuples, trees and plain values alike.

use std::collections::BTreeMap;

use super::{Tensor, Tree};

/// A value whose tensors a transform can list and replace: a [`Tensor`], a
/// [`Tree`], tuples, `Vec`s, `Option`s and `BTreeMap`s of them, and static
/// values that hold no tensor (`()`, `bool`, numbers, `String`; JAX's
/// `static_argnums`), which pass through unchanged.
///
/// ```
/// use flaxen::tensor::{Tensor, Tensors};
///
/// let value = (Tensor::scalar(1.0), 3usize, vec![Tensor::zeros(&[2])]);
/// let mut leaves = Vec::new();
/// value.flatten(&mut leaves);
/// assert_eq!(leaves.len(), 2);
/// let doubled = leaves.iter().map(|t| t * 2.0).collect::<Vec<_>>();
/// let rebuilt = value.rebuild(&mut doubled.into_iter()).unwrap();
/// assert_eq!(rebuilt.0.item().unwrap(), 2.0);
/// assert_eq!(rebuilt.1, 3);
/// ```
pub trait Tensors: Clone {
    /// Appends this value's tensors, in a fixed order.
    fn flatten(&self, out: &mut Vec<Tensor>);

    /// This value's structure with its tensors taken, in
    /// [`flatten`](Tensors::flatten)'s order, from `leaves`; `None` when
    /// `leaves` runs out.
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Option<Self>;

    /// The tensors, as [`flatten`](Tensors::flatten) lists them.
    fn tensors(&self) -> Vec<Tensor> {
        let mut out = Vec::new();
        self.flatten(&mut out);
        out
    }
}

impl Tensors for Tensor {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.push(self.clone());
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
        leaves.next()
    }
}

impl Tensors for Tree {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.extend(self.leaves().iter().cloned());
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
        let n = self.leaves().len();
        let taken: Vec<Tensor> = leaves.take(n).collect();
        if taken.len() != n {
            return None;
        }
        self.with_leaves(taken).ok()
    }
}

/// Values that hold no tensor pass through unchanged.
macro_rules! static_tensors {
    ($($t:ty),*) => {$(
        impl Tensors for $t {
            fn flatten(&self, _: &mut Vec<Tensor>) {}

            fn rebuild(&self, _: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
                Some(self.clone())
            }
        }
    )*};
}

static_tensors!((), bool, usize, isize, u32, i32, u64, i64, f32, f64, String);

impl<T: Tensors> Tensors for Vec<T> {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|x| x.flatten(out));
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
        self.iter().map(|x| x.rebuild(leaves)).collect()
    }
}

impl<T: Tensors> Tensors for Option<T> {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        if let Some(x) = self {
            x.flatten(out);
        }
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
        match self {
            Some(x) => Some(Some(x.rebuild(leaves)?)),
            None => Some(None),
        }
    }
}

impl<K: Ord + Clone, T: Tensors> Tensors for BTreeMap<K, T> {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.values().for_each(|x| x.flatten(out));
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
        self.iter()
            .map(|(k, x)| Some((k.clone(), x.rebuild(leaves)?)))
            .collect()
    }
}

/// Tuples, element by element.
macro_rules! tuple_tensors {
    ($(($($name:ident $idx:tt),+)),*) => {$(
        impl<$($name: Tensors),+> Tensors for ($($name,)+) {
            fn flatten(&self, out: &mut Vec<Tensor>) {
                $(self.$idx.flatten(out);)+
            }

            fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
                Some(($(self.$idx.rebuild(leaves)?,)+))
            }
        }
    )*};
}

tuple_tensors!(
    (A 0),
    (A 0, B 1),
    (A 0, B 1, C 2),
    (A 0, B 1, C 2, D 3),
    (A 0, B 1, C 2, D 3, E 4)
);
