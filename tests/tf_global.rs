//! The thread-safe global generator.

use std::thread;

use flaxen::random::tf::{get_global_generator, set_global_generator, Generator};

#[test]
fn global_generator_is_shared_and_replaceable() {
    set_global_generator(Generator::from_seed(1));
    let g = get_global_generator();
    // Draws from four threads serialize on the generator: 4 × 10 elements.
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let h = get_global_generator();
                h.lock().unwrap().normal(&[10]).unwrap();
            });
        }
    });
    assert_eq!(g.lock().unwrap().state().words(), &[1 + 40 * 256, 0, 0]);
    // Replacing it leaves old handles on the old generator.
    set_global_generator(Generator::from_seed(2));
    assert_eq!(
        get_global_generator().lock().unwrap().state().words(),
        &[2, 0, 0]
    );
    assert_eq!(g.lock().unwrap().state().words(), &[1 + 40 * 256, 0, 0]);
}

#[test]
fn non_deterministic_states_differ() {
    let a = Generator::from_non_deterministic_state();
    let b = Generator::from_non_deterministic_state();
    assert_ne!(a.state(), b.state());
}
