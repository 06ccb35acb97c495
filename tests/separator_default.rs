//! The process-wide default of Flax's separator flag. In a test binary of
//! its own, because it changes global state that other tests rely on.

#[allow(dead_code)]
#[path = "../examples/guide_sharp_edge.rs"]
mod sharp_edge;

use flaxen::core::{Rngs, Variables};
use flaxen::nn::Module;
use flaxen::random;

#[test]
fn separator_process_default() {
    let rngs = || Rngs::none().with("rng", random::key(33));
    assert!(
        !flaxen::core::flax_fix_rng_separator(),
        "off by default, as in Flax"
    );
    flaxen::core::set_flax_fix_rng_separator(true);
    let with_default = sharp_edge::Model.apply(&Variables::new(), 0, rngs());
    // An explicit per-call setting wins over the default.
    let explicit_off = sharp_edge::Model.apply(&Variables::new(), 0, rngs().fix_separator(false));
    flaxen::core::set_flax_fix_rng_separator(false);
    let (a, b) = with_default.unwrap();
    assert_ne!(a, b);
    let (a, b) = explicit_off.unwrap();
    assert_eq!(a, b);
}
