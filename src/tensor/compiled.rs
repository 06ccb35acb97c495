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
/// reference runs under `jax.jit` but that is not compiled with
/// [`jit_value_and_grad`](super::jit_value_and_grad) and its variants:
/// those trace their function inside a compiled region themselves, so
/// their numbers (traced and replayed) are `jax.jit`'s without it, and
/// equal `as_jitted(|| value_and_grad(f, params))`'s. Regions nest: an
/// `as_jitted` inside a compiled step changes nothing.
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

thread_local! {
    /// Inside a jitted module's forward program (`nn::Jit` tracing,
    /// replaying or running its body without a differentiation around
    /// it): `Some(tape)` while it is traced on that tape, `Some(None)`
    /// while it runs untraced.
    static FORWARD_JIT: Cell<Option<Option<u64>>> = const { Cell::new(None) };
}

/// While alive, this thread runs a jitted module's forward program (see
/// [`forward_jit_tape`]); restores the enclosing state when dropped.
pub(crate) struct ForwardJit(Option<Option<u64>>);

impl ForwardJit {
    /// Enters a forward program, untraced.
    pub(crate) fn enter() -> ForwardJit {
        ForwardJit(FORWARD_JIT.with(|f| f.replace(Some(None))))
    }

    /// Notes that the forward program being entered is traced on the tape
    /// `tape` (no-op outside a forward program).
    pub(crate) fn traced_on(tape: u64) -> ForwardJit {
        ForwardJit(FORWARD_JIT.with(|f| {
            let before = f.get();
            if before.is_some() {
                f.set(Some(Some(tape)));
            }
            before
        }))
    }
}

impl Drop for ForwardJit {
    fn drop(&mut self) {
        FORWARD_JIT.with(|f| f.set(self.0));
    }
}

/// Inside a jitted module's forward program, the id of the tape it is
/// traced on (`Some(None)`: not traced); `None` elsewhere, including
/// under a differentiation. Operations that XLA fuses differently from
/// eager JAX (BatchNorm) use their compiled numbers only here, and only
/// on tensors untraced or traced on that tape.
pub(crate) fn forward_jit_tape() -> Option<Option<u64>> {
    FORWARD_JIT.with(|f| f.get())
}

thread_local! {
    /// How many jitted modules' bodies this thread runs inline under a
    /// reverse-mode differentiation (`nn::Jit` under `grad`).
    static GRAD_JIT: Cell<usize> = const { Cell::new(0) };
}

/// While alive, this thread runs a jitted module's body inline under a
/// differentiation: JAX differentiates the jitted function as a whole,
/// and XLA compiles its forward and backward programs (see [`grad_jit`]).
pub(crate) struct GradJit(());

impl GradJit {
    /// Enters a jitted body run under a differentiation.
    pub(crate) fn enter() -> GradJit {
        GRAD_JIT.with(|d| d.set(d.get() + 1));
        GradJit(())
    }
}

impl Drop for GradJit {
    fn drop(&mut self) {
        GRAD_JIT.with(|d| d.set(d.get() - 1));
    }
}

/// Whether a jitted module's body runs inline under a differentiation on
/// this thread: operations whose compiled backward programs differ from
/// eager JAX's (BatchNorm in training) record those programs' rules.
pub(crate) fn grad_jit() -> bool {
    GRAD_JIT.with(|d| d.get() > 0)
}
