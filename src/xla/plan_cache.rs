//! Plans decided once per shape: what XLA's libraries decide per shape
//! (YNNPACK's kernel choice and packing, Eigen's blocks and cuts) is worked
//! out the first time a thread meets that shape and looked up afterwards.
//! Weighing every kernel's cost took more time than small products
//! themselves.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;
use std::thread::LocalKey;

/// A bound on memory for programs that see endless new shapes: past it a
/// cache starts again.
const MAX_PLANS: usize = 4096;

/// One thread's plans of one kind, by the arguments they were made from.
pub(crate) struct PlanCache<K, V>(RefCell<HashMap<K, Arc<V>, BuildHasherDefault<KeyHasher>>>);

impl<K, V> PlanCache<K, V> {
    /// An empty cache (for a `thread_local!`).
    pub(crate) fn new() -> Self {
        PlanCache(RefCell::new(HashMap::default()))
    }
}

/// The plan for `key` in `cache`, made by `make` if this thread has none.
pub(crate) fn cached<K: Hash + Eq, V>(
    cache: &'static LocalKey<PlanCache<K, V>>,
    key: K,
    make: impl FnOnce() -> V,
) -> Arc<V> {
    if let Some(p) = cache.with(|c| c.0.borrow().get(&key).cloned()) {
        return p;
    }
    // Made outside the borrow: `make` may consult other caches.
    let p = Arc::new(make());
    cache.with(|c| {
        let mut c = c.0.borrow_mut();
        if c.len() >= MAX_PLANS {
            c.clear();
        }
        c.insert(key, Arc::clone(&p));
    });
    p
}

/// A multiplicative hash for small integer keys (SipHash cost more than
/// the small products it was looking up).
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static SQUARES: PlanCache<usize, usize> = PlanCache::new();
    }

    #[test]
    fn a_plan_is_made_once_per_key() {
        let made = std::cell::Cell::new(0);
        let square = |n: usize| {
            *cached(&SQUARES, n, || {
                made.set(made.get() + 1);
                n * n
            })
        };
        assert_eq!((square(3), square(3), square(4)), (9, 9, 16));
        assert_eq!(made.get(), 2);
    }
}
