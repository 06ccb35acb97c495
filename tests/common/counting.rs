//! A counting allocator for the allocation-count tests: the system
//! allocator, counting every allocation, zeroed allocation and
//! reallocation. A test binary installs it with
//! `#[global_allocator] static ALLOC: Counting = Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The system allocator, counting allocations.
pub struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// Allocations (and reallocations) made so far by the process.
pub fn allocations() -> usize {
    ALLOCATIONS.load(Relaxed)
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the counter only observes calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

/// The fewest allocations of `calls` calls of `f` (its result dropped
/// outside the count), after the global thread pool's workers have started.
///
/// Allocations are counted process-wide, so a worker of the pool starting
/// up (its thread-locals, its first steal's epoch registration) while a
/// call is measured would be counted against the call: on a loaded 2-CPU
/// machine one call in a few hundred saw 1 to 3 such allocations. Every
/// worker runs one job before the count, and the fewest of several calls
/// is what every call allocates; a real per-call allocation shows in each.
pub fn fewest_allocations<T>(calls: usize, mut f: impl FnMut() -> T) -> usize {
    rayon::broadcast(|_| ());
    (0..calls.max(1))
        .map(|_| {
            let before = allocations();
            let out = f();
            let after = allocations();
            drop(out);
            after - before
        })
        .min()
        .unwrap_or(0)
}

/// A tensor of `shape` with deterministic values in `[-1, 1)`.
pub fn filled(shape: &[usize], seed: u32) -> flaxen::tensor::Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    flaxen::tensor::Tensor::from_vec(v, shape).unwrap()
}
