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

/// Runs `f` with the numbers of a jitted JAX computation: operations run
/// eagerly, one at a time, but round as XLA rounds them inside one
/// computation (elementwise backward rules fused into fused multiply-adds,
/// constant divisors folded into reciprocal multiplies, products in the
/// layout of the compiled graph). Use it around a training step whose
/// reference runs under `jax.jit` but that cannot be replayed by
/// [`jit_value_and_grad`](super::jit_value_and_grad) (randomness drawn
/// inside, such as dropout masks).
///
/// ```
/// use flaxen::tensor::{as_jitted, value_and_grad, Tensor, Tree};
///
/// let params = Tree::from(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
/// let (loss, _) = as_jitted(|| {
///     value_and_grad(|p| Ok(p.as_tensor().unwrap().square().sum_all()), &params)
/// })?;
/// assert_eq!(loss.item()?, 5.0);
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn as_jitted<T>(f: impl FnOnce() -> T) -> T {
    let _region = CompiledRegion::enter();
    f()
}

/// Whether this thread is inside a compiled region.
pub(crate) fn in_compiled_region() -> bool {
    DEPTH.with(|d| d.get() > 0)
}
