//! How inputs are mapped over and outputs stacked by `vmap`
//! (`in_axes` / `out_axes`).

use crate::error::Result;
use crate::tensor::Tensor;

/// An input `vmap` can map over: a tensor (with an axis, or `None` to give
/// every item the whole tensor), a tuple of inputs, or a value that is
/// always broadcast (`bool`, `()`, integers).
pub trait MapIn: Sized {
    /// The `in_axes` of this input: `Option<usize>` for a tensor, a tuple
    /// of axes for a tuple, `()` for values that are always broadcast.
    type Axes: Clone + Send + Sync;

    /// Flax's default `in_axes=0`: axis 0 for every tensor.
    fn default_axes() -> Self::Axes;

    /// Appends the size of every mapped axis (to check they agree).
    fn mapped_sizes(&self, axes: &Self::Axes, sizes: &mut Vec<(usize, Vec<usize>, usize)>);

    /// Item `i` of the input.
    fn item(&self, axes: &Self::Axes, i: usize) -> Result<Self>;
}

/// An output `vmap` can stack: a tensor (along an axis) or a tuple of
/// outputs, or `()`.
pub trait StackOut: Sized {
    /// The `out_axes` of this output.
    type Axes: Clone + Send + Sync;

    /// Flax's default `out_axes=0`.
    fn default_axes() -> Self::Axes;

    /// Stacks the items' outputs.
    fn stack(items: Vec<Self>, axes: &Self::Axes) -> Result<Self>;
}

impl MapIn for Tensor {
    type Axes = Option<usize>;

    fn default_axes() -> Option<usize> {
        Some(0)
    }

    fn mapped_sizes(&self, axes: &Option<usize>, sizes: &mut Vec<(usize, Vec<usize>, usize)>) {
        if let Some(a) = *axes {
            let size = self.shape().get(a).copied().unwrap_or(usize::MAX);
            sizes.push((a, self.shape().to_vec(), size));
        }
    }

    fn item(&self, axes: &Option<usize>, i: usize) -> Result<Tensor> {
        match *axes {
            // Shared by every item, as an unbatched operand in JAX.
            None => Ok(crate::tensor::batched::share_input(self)),
            Some(a) => Ok(self.index_axis(a as isize, i)?),
        }
    }
}

impl StackOut for Tensor {
    type Axes = usize;

    fn default_axes() -> usize {
        0
    }

    fn stack(items: Vec<Tensor>, axis: &usize) -> Result<Tensor> {
        Ok(Tensor::stack(&items, *axis as isize)?)
    }
}

impl StackOut for () {
    type Axes = ();

    fn default_axes() {}

    fn stack(_: Vec<()>, _: &()) -> Result<()> {
        Ok(())
    }
}

macro_rules! broadcast_input {
    ($($t:ty),*) => {$(
        impl MapIn for $t {
            type Axes = ();
            fn default_axes() {}
            fn mapped_sizes(&self, _: &(), _: &mut Vec<(usize, Vec<usize>, usize)>) {}
            fn item(&self, _: &(), _: usize) -> Result<Self> {
                Ok(self.clone())
            }
        }
    )*};
}
broadcast_input!((), bool, i32, i64, u32, u64, usize, f32, f64);

macro_rules! tuple_impls {
    ($(($($name:ident : $idx:tt),+)),*) => {$(
        impl<$($name: MapIn),+> MapIn for ($($name,)+) {
            type Axes = ($($name::Axes,)+);
            fn default_axes() -> Self::Axes {
                ($($name::default_axes(),)+)
            }
            fn mapped_sizes(&self, axes: &Self::Axes, sizes: &mut Vec<(usize, Vec<usize>, usize)>) {
                $(self.$idx.mapped_sizes(&axes.$idx, sizes);)+
            }
            fn item(&self, axes: &Self::Axes, i: usize) -> Result<Self> {
                Ok(($(self.$idx.item(&axes.$idx, i)?,)+))
            }
        }

        impl<$($name: StackOut),+> StackOut for ($($name,)+) {
            type Axes = ($($name::Axes,)+);
            fn default_axes() -> Self::Axes {
                ($($name::default_axes(),)+)
            }
            #[allow(non_snake_case)]
            fn stack(items: Vec<Self>, axes: &Self::Axes) -> Result<Self> {
                $(let mut $name = Vec::with_capacity(items.len());)+
                for item in items {
                    $($name.push(item.$idx);)+
                }
                Ok(($($name::stack($name, &axes.$idx)?,)+))
            }
        }
    )*};
}
tuple_impls!((A: 0), (A: 0, B: 1), (A: 0, B: 1, C: 2), (A: 0, B: 1, C: 2, D: 3));
