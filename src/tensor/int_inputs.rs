//! Integer arrays that a compiled step takes as arguments.
//!
//! `jax.jit` traces integer arguments (a batch's labels) like float ones:
//! each call passes its own. A compiled step
//! ([`jit_value_and_grad_with`](super::jit_value_and_grad_with)) finds the
//! `int32` arrays of its inputs tree while it traces: an operation that
//! reads integers it can replay (the labels of
//! `softmax_cross_entropy_with_integer_labels`) asks [`argument`] whether
//! they are one of those arrays — the same storage, not equal values — and
//! if so records which, so that the replay reads that array of every
//! call. Arrays no such operation consumed are baked into the replay, which
//! then runs only on calls passing the same values.

use std::cell::RefCell;

use ndarray::ArrayViewD;

use super::array::Array;

/// One `int32` array of the inputs being traced, by storage.
struct Entry {
    ptr: usize,
    shape: Vec<usize>,
    strides: Vec<isize>,
    consumed: bool,
}

thread_local! {
    /// Per input array (in `Tree::arrays` order): its entry if `int32`.
    static INPUTS: RefCell<Option<Vec<Option<Entry>>>> = const { RefCell::new(None) };
}

/// Runs `f` while the `int32` arrays among `arrays` are a compiled step's
/// integer arguments; returns `f`'s result and, per array, whether a
/// replayable operation consumed it.
pub(crate) fn tracing<T>(arrays: &[Array], f: impl FnOnce() -> T) -> (T, Vec<bool>) {
    let entries = arrays
        .iter()
        .map(|a| {
            a.as_i32().map(|v| Entry {
                ptr: v.as_ptr() as usize,
                shape: v.shape().to_vec(),
                strides: v.strides().to_vec(),
                consumed: false,
            })
        })
        .collect();
    let outer = INPUTS.with(|t| t.borrow_mut().replace(entries));
    let out = f();
    let entries = INPUTS.with(|t| std::mem::replace(&mut *t.borrow_mut(), outer));
    let consumed = entries
        .expect("set above")
        .iter()
        .map(|e| e.as_ref().is_some_and(|e| e.consumed))
        .collect();
    (out, consumed)
}

/// Which integer argument of the compiled step being traced `values` is
/// (the same storage, shape and strides), marking it consumed; `None`
/// outside a trace or for other arrays.
pub(crate) fn argument(values: &ArrayViewD<'_, i32>) -> Option<usize> {
    INPUTS.with(|t| {
        let mut t = t.borrow_mut();
        let entries = t.as_mut()?;
        let j = entries.iter().position(|e| {
            e.as_ref().is_some_and(|e| {
                e.ptr == values.as_ptr() as usize
                    && e.shape == values.shape()
                    && e.strides == values.strides()
            })
        })?;
        entries[j].as_mut().expect("found above").consumed = true;
        Some(j)
    })
}
