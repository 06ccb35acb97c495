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

    /// Appends to `out` what a compiled module ([`nn::Jit`]) must see
    /// unchanged to replay a call: the structure and the static values
    /// (flags, sizes), not the tensors' values or shapes. Returns `false`
    /// when it cannot tell (the default, for types defined outside
    /// flaxen): a module given such an input runs eagerly on every call.
    ///
    /// ```
    /// use flaxen::tensor::{Tensor, Tensors};
    ///
    /// let (mut a, mut b) = (String::new(), String::new());
    /// assert!((Tensor::zeros(&[2]), true).static_signature(&mut a));
    /// assert!((Tensor::ones(&[3]), false).static_signature(&mut b));
    /// assert_ne!(a, b);
    /// ```
    ///
    /// [`nn::Jit`]: crate::nn::Jit
    fn static_signature(&self, _out: &mut String) -> bool {
        false
    }

    /// Whether this value holds values that are not tensors (flags,
    /// sizes, strings): what JAX cannot trace, so that a function compiled
    /// with explicit `static_argnums` ([`nn::Jit::static_argnums`]) must
    /// take such an argument as static. `false` by default (for types
    /// defined outside flaxen, which also cannot tell their
    /// [`static_signature`](Tensors::static_signature)).
    ///
    /// ```
    /// use flaxen::tensor::{Tensor, Tensors};
    ///
    /// assert!(!vec![Tensor::zeros(&[2])].holds_static_values());
    /// assert!((Tensor::zeros(&[2]), true).holds_static_values());
    /// assert!(!().holds_static_values());
    /// ```
    ///
    /// [`nn::Jit::static_argnums`]: crate::nn::Jit::static_argnums
    fn holds_static_values(&self) -> bool {
        false
    }

    /// This value as the positional arguments of a function (JAX's
    /// `*args`, which `static_argnums` numbers): a tuple's elements, none
    /// for `()`, and any other value as one argument. Each argument as its
    /// number of tensors and whether it
    /// [holds static values](Tensors::holds_static_values).
    ///
    /// ```
    /// use flaxen::tensor::{Tensor, Tensors};
    ///
    /// let args = (Tensor::zeros(&[2]), true).positional_arguments();
    /// assert_eq!(args, [(1, false), (0, true)]);
    /// assert_eq!(Tensor::zeros(&[2]).positional_arguments(), [(1, false)]);
    /// assert!(().positional_arguments().is_empty());
    /// ```
    fn positional_arguments(&self) -> Vec<(usize, bool)> {
        vec![(self.tensors().len(), self.holds_static_values())]
    }
}

impl Tensors for Tensor {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.push(self.clone());
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
        leaves.next()
    }

    fn static_signature(&self, out: &mut String) -> bool {
        out.push('T');
        true
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

    /// The paths of the leaves; a tree holding arrays (integers, keys,
    /// whose values may steer the computation) cannot tell.
    fn static_signature(&self, out: &mut String) -> bool {
        if !self.arrays().is_empty() {
            return false;
        }
        out.push('{');
        for (path, _) in self.paths() {
            out.push_str(&path);
            out.push(',');
        }
        out.push('}');
        true
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

            fn static_signature(&self, out: &mut String) -> bool {
                out.push_str(&format!("{self:?},"));
                true
            }

            fn holds_static_values(&self) -> bool {
                true
            }
        }
    )*};
}

/// No value at all: no positional argument, no static value (JAX's empty
/// pytree).
impl Tensors for () {
    fn flatten(&self, _: &mut Vec<Tensor>) {}

    fn rebuild(&self, _: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
        Some(())
    }

    fn static_signature(&self, out: &mut String) -> bool {
        out.push_str("(),");
        true
    }

    fn positional_arguments(&self) -> Vec<(usize, bool)> {
        Vec::new()
    }
}

static_tensors!(bool, usize, isize, u32, i32, u64, i64, f32, f64, String);

impl<T: Tensors> Tensors for Vec<T> {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|x| x.flatten(out));
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Option<Self> {
        self.iter().map(|x| x.rebuild(leaves)).collect()
    }

    fn static_signature(&self, out: &mut String) -> bool {
        out.push_str(&format!("[{}:", self.len()));
        let known = self.iter().all(|x| x.static_signature(out));
        out.push(']');
        known
    }

    fn holds_static_values(&self) -> bool {
        self.iter().any(Tensors::holds_static_values)
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

    fn static_signature(&self, out: &mut String) -> bool {
        match self {
            Some(x) => {
                out.push_str("Some(");
                let known = x.static_signature(out);
                out.push(')');
                known
            }
            None => {
                out.push_str("None");
                true
            }
        }
    }

    fn holds_static_values(&self) -> bool {
        self.as_ref().is_some_and(Tensors::holds_static_values)
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

    fn holds_static_values(&self) -> bool {
        self.values().any(Tensors::holds_static_values)
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

            fn static_signature(&self, out: &mut String) -> bool {
                out.push('(');
                let known = true $(&& self.$idx.static_signature(out))+;
                out.push(')');
                known
            }

            fn holds_static_values(&self) -> bool {
                false $(|| self.$idx.holds_static_values())+
            }

            /// One argument per element.
            fn positional_arguments(&self) -> Vec<(usize, bool)> {
                vec![$((self.$idx.tensors().len(), self.$idx.holds_static_values())),+]
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
