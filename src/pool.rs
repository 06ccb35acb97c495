//! Sharing one piece of work between the calling thread and rayon's pool.
//!
//! A parallel iterator started from a thread outside the pool hands the
//! whole job to the pool and puts the caller to sleep until the pool wakes
//! it, and a thread of the pool that was asleep starts late: each costs
//! about 10-25 µs on the 2-core machine the benches run on, which is a
//! tenth of a 128x512 mask or product. [`share_out`] keeps the caller
//! working and awake instead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use smallvec::SmallVec;

/// Runs `work(item)` for every item: the items are taken in turn by the
/// calling thread and by one job per other thread of rayon's pool, so a
/// thread that starts late takes fewer; when none is left the caller
/// waits, awake, for those still being worked on (at most one per
/// thread), rather than asleep until the pool wakes it.
///
/// The order in which items run is not fixed: `work` must not depend on
/// it (each item writes its own part of the output).
pub(crate) fn share_out<T: Send>(items: impl IntoIterator<Item = T>, work: impl Fn(T) + Sync) {
    let items: SmallVec<[Mutex<Option<T>>; 16]> =
        items.into_iter().map(|i| Mutex::new(Some(i))).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let take = || {
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            // Counted as done even if `work` panics, so that the wait below
            // always ends (the panic then comes out of the scope).
            let _done = Done(&done);
            // Each index is handed out once: the lock is never contended.
            if let Some(item) = item.lock().unwrap_or_else(|e| e.into_inner()).take() {
                work(item);
            }
        }
    };
    let jobs = rayon::current_num_threads()
        .min(items.len())
        .saturating_sub(1);
    if jobs == 0 {
        take();
        return;
    }
    rayon::in_place_scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|_| take());
        }
        take();
        while done.load(Ordering::Acquire) < items.len() {
            std::hint::spin_loop();
        }
    });
}

/// [`share_out`] over `out` cut into runs of whole `unit`s (`unit >= 1`),
/// `per_thread` runs for each thread of the pool (the last may be shorter):
/// `work(first, run)`, `first` the index of the run's first unit. For work
/// in many small units (blocks of a random draw, tiles of a convolution):
/// one item per unit would lock and count each of them, and a few runs
/// per thread still let a thread of the pool that starts late take fewer.
pub(crate) fn share_runs<T: Send>(
    out: &mut [T],
    unit: usize,
    per_thread: usize,
    work: impl Fn(usize, &mut [T]) + Sync,
) {
    debug_assert!(unit >= 1);
    let len = run_len(out.len(), unit, per_thread);
    share_out(out.chunks_mut(len).enumerate(), |(r, run)| {
        work(r * (len / unit), run)
    });
}

/// The length of the runs [`share_runs`] cuts `total` elements into:
/// `per_thread` per thread of the pool, in whole `unit`s, at least one.
pub(crate) fn run_len(total: usize, unit: usize, per_thread: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    total
        .div_ceil(threads * per_thread.max(1))
        .next_multiple_of(unit)
        .max(unit)
}

/// Counts one item of [`share_out`] as done when dropped.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_once() {
        for n in [0, 1, 2, 3, 17, 100] {
            let mut out = vec![0u32; n];
            share_out(out.iter_mut().enumerate(), |(i, o)| *o += i as u32 + 1);
            assert!(out.iter().enumerate().all(|(i, &o)| o == i as u32 + 1));
        }
    }

    #[test]
    fn nested_calls_from_the_pool_finish() {
        let mut out = vec![0u32; 64];
        share_out(out.chunks_mut(8), |chunk| {
            share_out(chunk.iter_mut(), |o| *o += 1);
        });
        assert!(out.iter().all(|&o| o == 1));
    }

    /// Runs cover every unit once, each told its first unit's index,
    /// whatever the lengths (a short last unit, fewer units than runs).
    #[test]
    fn runs_cover_every_unit_with_its_index() {
        for (n, unit) in [
            (0, 4),
            (1, 4),
            (7, 3),
            (1000, 16),
            (4096, 2048),
            (100_003, 2048),
        ] {
            let mut out = vec![usize::MAX; n];
            share_runs(&mut out, unit, 8, |first, run| {
                for (j, chunk) in run.chunks_mut(unit).enumerate() {
                    chunk.fill(first + j);
                }
            });
            assert!(
                out.iter().enumerate().all(|(i, &u)| u == i / unit),
                "{n} by {unit}"
            );
        }
    }

    #[test]
    fn a_panic_comes_out() {
        let r = std::panic::catch_unwind(|| {
            share_out(0..8, |i| assert!(i != 5, "item five"));
        });
        assert!(r.is_err());
    }
}
