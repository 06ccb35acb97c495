//! Compiled regions: code that JAX runs as one XLA computation (the body of
//! `lax.scan`, which `nn.scan` uses) rather than one operation at a time.
//!
//! Inside such a computation XLA fuses elementwise operations, and LLVM
//! contracts a multiplication that feeds an addition in the same fusion into
//! one fused multiply-add. Eagerly, JAX rounds each operation on its own. So
//! the same backward rule can round differently in and out of a scan; an
//! operation records, when it runs, whether it ran inside such a region.

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// While alive, operations on this thread are recorded as compiled (nests).
pub(crate) struct CompiledRegion(());

impl CompiledRegion {
    /// Enters a compiled region until the guard is dropped.
    pub(crate) fn enter() -> CompiledRegion {
        DEPTH.with(|d| d.set(d.get() + 1));
        CompiledRegion(())
    }
}

impl Drop for CompiledRegion {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// Whether this thread is inside a compiled region.
pub(crate) fn in_compiled_region() -> bool {
    DEPTH.with(|d| d.get() > 0)
}
