//! The process-wide generator (`tf.random.get_global_generator` and
//! `tf.random.set_global_generator`).

use std::sync::{Arc, Mutex, PoisonError};

use super::generator::Generator;

/// The current global generator, created on first use.
static GLOBAL: Mutex<Option<Arc<Mutex<Generator>>>> = Mutex::new(None);

/// `tf.random.get_global_generator()`: the process-wide generator, shared
/// and thread-safe. On first use it is created with
/// [`Generator::from_non_deterministic_state`].
///
/// ```
/// use flaxen::random::tf::get_global_generator;
/// let g = get_global_generator();
/// let x = g.lock().unwrap().normal(&[2, 3]).unwrap();
/// assert_eq!(x.shape(), &[2, 3]);
/// ```
pub fn get_global_generator() -> Arc<Mutex<Generator>> {
    let mut slot = GLOBAL.lock().unwrap_or_else(PoisonError::into_inner);
    slot.get_or_insert_with(|| Arc::new(Mutex::new(Generator::from_non_deterministic_state())))
        .clone()
}

/// `tf.random.set_global_generator(generator)`: replaces the global
/// generator. Handles returned earlier by [`get_global_generator`] keep the
/// old generator, as TensorFlow's old references do; prefer
/// [`Generator::reset_from_seed`] on the global generator to reseed it in
/// place.
///
/// ```
/// use flaxen::random::tf::{get_global_generator, set_global_generator, Generator};
/// set_global_generator(Generator::from_seed(1));
/// let x = get_global_generator().lock().unwrap().normal(&[]).unwrap();
/// assert_eq!(x[[]], 0.43842274);
/// ```
pub fn set_global_generator(generator: Generator) {
    let mut slot = GLOBAL.lock().unwrap_or_else(PoisonError::into_inner);
    *slot = Some(Arc::new(Mutex::new(generator)));
}
