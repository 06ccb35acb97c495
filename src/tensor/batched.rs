//! The items of a `vmap` seen as JAX sees them: one batched computation.
//!
//! flaxen runs a `vmap`'s items one after another; JAX runs every operation
//! once over all items. The values agree element by element, except where
//! the batched form changes the arithmetic:
//!
//! * A matrix product of an item's operand with a tensor shared by every
//!   item (a broadcast parameter) is, in JAX, one product with the items
//!   folded into the rows (or the columns): XLA picks its kernel for that
//!   larger shape. An item frame ([`ItemFrame`]) tells `matmul` which
//!   tensors are shared and where the item's rows or columns sit
//!   ([`Virtual`]).
//! * The cotangent of a shared tensor is, in JAX, summed over the items by
//!   one reduction (or one matrix product over the folded axis) per use,
//!   and then over the uses. Each item reads a shared tensor through its
//!   own view ([`Tensor::item_view`]); the backward pass collects each
//!   view's cotangents per use and combines all the items' at once (see
//!   `backprop::backward`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::item_view::{ItemGroup, ItemView};
use super::tape::OpKind;
use super::{Tensor, Tree};

/// Where an item's matrix product sits in JAX's batched product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Virtual {
    /// The items are folded into the rows: `rows` rows in all, this item's
    /// from `offset`.
    Rows { rows: usize, offset: usize },
    /// The items are folded into the columns.
    Cols { cols: usize, offset: usize },
    /// Both operands are the item's own: a product batched over `items`.
    Batched { items: usize },
}

/// Whether a collection is broadcast to every item.
pub(crate) type IsBroadcast = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The running item of the innermost `vmap` on this thread and the memory
/// of the tensors its items share.
struct ItemFrame {
    items: usize,
    item: usize,
    shared: Vec<(usize, usize)>,
    /// Whether a collection is broadcast: what the item writes there is
    /// shared too.
    broadcast: IsBroadcast,
    /// The groups of views of the traced inputs the items share, by node.
    inputs: InputGroups,
}

/// The groups of views of the traced unmapped inputs of one `vmap` call,
/// by tape node, shared by its items.
pub(crate) type InputGroups = Arc<Mutex<HashMap<usize, Arc<ItemGroup>>>>;

thread_local! {
    static FRAMES: RefCell<Vec<ItemFrame>> = const { RefCell::new(Vec::new()) };
    static VIRTUAL: RefCell<Option<Virtual>> = const { RefCell::new(None) };
}

/// While alive, this thread runs item `item` of `items`, which share the
/// given tensors.
pub(crate) struct ItemScope(());

impl ItemScope {
    pub(crate) fn enter(
        items: usize,
        item: usize,
        shared: &[Tensor],
        broadcast: IsBroadcast,
        inputs: InputGroups,
    ) -> ItemScope {
        let shared = shared.iter().map(memory).collect();
        FRAMES.with(|f| {
            f.borrow_mut().push(ItemFrame {
                items,
                item,
                shared,
                broadcast,
                inputs,
            })
        });
        ItemScope(())
    }
}

/// Item's copy of `t`, an input that the innermost `vmap` running on this
/// thread does not map: shared by the items, as an unbatched operand in
/// JAX, and read through the item's view when traced.
pub(crate) fn share_input(t: &Tensor) -> Tensor {
    FRAMES.with(|f| {
        let mut frames = f.borrow_mut();
        let Some(frame) = frames.last_mut() else {
            return t.clone();
        };
        frame.shared.push(memory(t));
        match t.tracer.as_ref().filter(|_| t.is_traced()) {
            Some(tr) => {
                let group = Arc::clone(
                    frame
                        .inputs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(tr.node)
                        .or_insert_with(|| ItemGroup::new(frame.items)),
                );
                t.item_view(&group, frame.item)
            }
            None => t.clone(),
        }
    })
}

/// Records that the running item wrote `tree` into `collection`: when the
/// collection is broadcast (parameters created during `init`), its tensors
/// are shared by the items, as in JAX.
pub(crate) fn note_written(collection: &str, tree: &Tree) {
    FRAMES.with(|f| {
        if let Some(frame) = f.borrow_mut().last_mut() {
            if (frame.broadcast)(collection) {
                frame.shared.extend(tree.leaves().iter().map(memory));
            }
        }
    });
}

impl Drop for ItemScope {
    fn drop(&mut self) {
        FRAMES.with(|f| f.borrow_mut().pop());
    }
}

/// The address range of a tensor's elements.
fn memory(t: &Tensor) -> (usize, usize) {
    let start = t.data.as_ptr() as usize;
    (start, start + t.data.len() * std::mem::size_of::<f32>())
}

/// Where `a @ b`, as `[m, k] @ [k, n]`, sits in the batched product JAX
/// computes, when exactly one of them is shared by the items of the
/// innermost `vmap` running on this thread.
pub(crate) fn virtual_layout(a: &Tensor, b: &Tensor, m: usize, n: usize) -> Option<Virtual> {
    FRAMES.with(|f| {
        let frames = f.borrow();
        let frame = frames.last()?;
        if frame.items < 2 {
            return None;
        }
        let is_shared = |t: &Tensor| {
            let (s, e) = memory(t);
            frame
                .shared
                .iter()
                .any(|&(fs, fe)| s >= fs && e <= fe && s < fe)
        };
        match (is_shared(a), is_shared(b)) {
            (false, true) => Some(Virtual::Rows {
                rows: frame.items * m,
                offset: frame.item * m,
            }),
            (true, false) => Some(Virtual::Cols {
                cols: frame.items * n,
                offset: frame.item * n,
            }),
            (false, false) => Some(Virtual::Batched { items: frame.items }),
            (true, true) => None,
        }
    })
}

/// Runs `f` with products laid out as `layout` says.
pub(crate) fn with_layout<T>(layout: Option<Virtual>, f: impl FnOnce() -> T) -> T {
    if layout.is_none() {
        return f();
    }
    let before = VIRTUAL.with(|v| v.replace(layout));
    let out = f();
    VIRTUAL.with(|v| *v.borrow_mut() = before);
    out
}

/// The layout set by [`with_layout`], if any.
pub(crate) fn current_layout() -> Option<Virtual> {
    VIRTUAL.with(|v| *v.borrow())
}

impl Tensor {
    /// Item `item`'s view of `self`, a tensor shared by every item of a
    /// `vmap`: the same values; under `grad`, its cotangents are combined
    /// with the other items' as JAX's batched transpose does.
    pub(crate) fn item_view(&self, group: &Arc<ItemGroup>, item: usize) -> Tensor {
        if !self.is_traced() {
            return self.clone();
        }
        let view = ItemView {
            group: Arc::clone(group),
            item,
        };
        Tensor::record_view(self, view, OpKind::Other)
    }
}
