//! How the process's memory allocator treats the arrays flaxen frees.
//!
//! An eager training step allocates its activations and their cotangents
//! afresh and frees them when the step ends. With glibc's `malloc` (the
//! default allocator of Rust programs on Linux), multi-megabyte arrays are
//! given back to the operating system when freed (large blocks are
//! `mmap`ed and unmapped; the top of the heap is trimmed), so the next step
//! takes them back page by page, each page a fault the kernel zeroes.
//! Measured on `benches/conv.rs` (a convolution layer's forward and
//! backward pass, 3 MB activations): about half of the step's time went to
//! those faults and unmappings. JAX does not meet this: its compiled
//! programs keep their buffers.
//!
//! flaxen leaves the process's allocator alone unless asked:
//! [`keep_freed_memory`] is an explicit opt-in for programs that train.

/// glibc's largest `M_MMAP_THRESHOLD` on 64-bit targets (32 MiB): blocks up
/// to this size come from the heap, where freed memory can be reused.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_MAX: libc::c_int = 32 * 1024 * 1024;

/// Asks the C library's allocator to keep freed memory for reuse instead of
/// returning it to the operating system: on glibc, heap trimming is turned
/// off (`M_TRIM_THRESHOLD` at its maximum) and blocks up to 32 MiB come
/// from the heap (`M_MMAP_THRESHOLD`), so that a training loop's arrays
/// reuse the pages of the previous step's. Returns whether the setting was
/// applied (`false` on other C libraries, where nothing changes).
///
/// The process's resident memory then stays at its peak instead of
/// shrinking between steps; nothing else changes (values are the same
/// bits). The setting is process-wide and stays: call it once, early in
/// `main`. It is the same as starting the program with
/// `GLIBC_TUNABLES=glibc.malloc.trim_threshold=2147483647:glibc.malloc.mmap_threshold=33554432`.
/// A program with its own `#[global_allocator]` is not affected (and does
/// not need this).
///
/// ```
/// // At the start of a training program:
/// let kept = flaxen::memory::keep_freed_memory();
/// # let _ = kept;
/// ```
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` takes two integers and changes the allocator's
        // parameters under glibc's own lock; no pointer or memory of ours is
        // involved, and any thread may call it at any time.
        let trim = unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) };
        // SAFETY: as above.
        let mmap = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) };
        trim == 1 && mmap == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn applies_on_glibc() {
        let applied = super::keep_freed_memory();
        assert_eq!(
            applied,
            cfg!(all(target_os = "linux", target_env = "gnu")),
            "mallopt refused a setting"
        );
    }
}
