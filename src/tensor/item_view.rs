//! The mark on a tape node that reads a tensor shared by the items of a
//! `vmap` through one item's view (see `batched`).
//!
//! Plain data, in a module of its own, so that the tape (which stores it on
//! a node) and `batched` (which makes it) need not depend on each other.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The views of one shared tensor in the items of one `vmap` call.
#[derive(Debug)]
pub(crate) struct ItemGroup {
    /// Distinguishes groups within a backward pass.
    pub(crate) id: u64,
    /// How many items (views) the group has.
    pub(crate) items: usize,
}

static NEXT_GROUP: AtomicU64 = AtomicU64::new(0);

impl ItemGroup {
    /// A new group of `items` views.
    pub(crate) fn new(items: usize) -> Arc<ItemGroup> {
        Arc::new(ItemGroup {
            id: NEXT_GROUP.fetch_add(1, Ordering::Relaxed),
            items,
        })
    }
}

/// A tape node that is item `item`'s view of a shared tensor.
#[derive(Clone, Debug)]
pub(crate) struct ItemView {
    /// The views of the same tensor in the other items.
    pub(crate) group: Arc<ItemGroup>,
    /// Which item this view belongs to.
    pub(crate) item: usize,
}
