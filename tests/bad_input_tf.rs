//! `random::tf` with shapes too large to hold: a typed error before
//! anything is allocated or drawn, for every function, and the generator's
//! state unchanged.

use flaxen::random::tf::{
    stateless_normal, stateless_truncated_normal, stateless_uniform, stateless_uniform_full_int,
    stateless_uniform_int, Generator, TfRandomError,
};

/// Too many elements for `usize`, and a count that fits but cannot be
/// allocated (2^40 floats, 4 TiB).
const OVERFLOW: &[usize] = &[1 << 62, 8];
const TOO_BIG: &[usize] = &[1 << 40];

fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, TfRandomError>) {
    match r {
        Err(TfRandomError::ShapeOverflow { .. }) | Err(TfRandomError::OutOfMemory { .. }) => {}
        other => panic!("{what}: expected a size error, got {other:?}"),
    }
}

#[test]
fn stateless_functions_refuse_huge_shapes() {
    let seed = [1i32, 2];
    for shape in [OVERFLOW, TOO_BIG] {
        refused(
            "uniform",
            stateless_uniform::<f32, i32>(shape, &seed, 0.0, 1.0),
        );
        refused(
            "uniform f64",
            stateless_uniform::<f64, i32>(shape, &seed, 0.0, 1.0),
        );
        refused(
            "normal",
            stateless_normal::<f32, i32>(shape, &seed, 0.0, 1.0),
        );
        refused(
            "truncated_normal",
            stateless_truncated_normal::<f32, i32>(shape, &seed, 0.0, 1.0),
        );
        refused(
            "uniform_int",
            stateless_uniform_int::<i32, i32>(shape, &seed, 0, 5),
        );
        refused(
            "uniform_full_int",
            stateless_uniform_full_int::<u64, i32>(shape, &seed),
        );
    }
    let e = stateless_normal::<f32, i32>(TOO_BIG, &seed, 0.0, 1.0).unwrap_err();
    assert_eq!(
        e,
        TfRandomError::OutOfMemory {
            shape: vec![1 << 40],
            bytes: 4 << 40
        }
    );
}

#[test]
fn generator_draws_refuse_huge_shapes_without_moving() {
    let mut g = Generator::from_seed(1);
    for shape in [OVERFLOW, TOO_BIG] {
        refused("normal", g.normal(shape));
        refused("uniform", g.uniform_as::<f64>(shape, 0.0, 1.0));
        refused("truncated_normal", g.truncated_normal(shape));
        refused("uniform_int", g.uniform_int::<i64>(shape, 0, 9));
        refused("uniform_full_int", g.uniform_full_int::<u32>(shape));
    }
    refused("make_seeds", g.make_seeds(1 << 60));
    refused("split", g.split(1 << 60));
    assert_eq!(g.state().words(), &[1, 0, 0], "nothing was drawn");
    // The same calls at a sane size work.
    assert_eq!(g.make_seeds(3).unwrap().shape(), &[2, 3]);
}
