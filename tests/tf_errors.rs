//! Bad input to `flaxen::random::tf` gives typed errors, as TensorFlow refuses it.

use flaxen::random::tf::{
    stateless_fold_in, stateless_normal, stateless_split, stateless_truncated_normal,
    stateless_uniform, stateless_uniform_full_int, stateless_uniform_int, Algorithm, Generator,
    GeneratorState, TfRandomError,
};

#[test]
fn seeds_of_the_wrong_shape() {
    let e = |len| TfRandomError::SeedShape { len };
    assert_eq!(
        stateless_normal::<f32, i32>(&[2], &[1], 0.0, 1.0).unwrap_err(),
        e(1)
    );
    assert_eq!(
        stateless_uniform::<f64, i64>(&[2], &[1, 2, 3], 0.0, 1.0).unwrap_err(),
        e(3)
    );
    assert_eq!(
        stateless_truncated_normal::<f32, i64>(&[2], &[], 0.0, 1.0).unwrap_err(),
        e(0)
    );
    assert_eq!(
        stateless_uniform_full_int::<u32, i32>(&[2], &[1, 2, 3, 4]).unwrap_err(),
        e(4)
    );
    assert_eq!(
        stateless_uniform_int::<i32, i32>(&[2], &[9], 0, 5).unwrap_err(),
        e(1)
    );
    assert_eq!(
        stateless_split::<i32>(&[1, 2, 3], 2).unwrap_err(),
        TfRandomError::SeedShape { len: 3 }
    );
    assert_eq!(
        stateless_fold_in::<i64, i32>(&[1], 3),
        Err(TfRandomError::SeedShape { len: 1 })
    );
}

#[test]
fn empty_integer_ranges() {
    let err = stateless_uniform_int::<i32, i32>(&[3], &[1, 2], 5, 5).unwrap_err();
    assert_eq!(
        err,
        TfRandomError::EmptyRange {
            minval: "5".into(),
            maxval: "5".into()
        }
    );
    assert!(matches!(
        stateless_uniform_int::<i64, i64>(&[3], &[1, 2], 10, -10),
        Err(TfRandomError::EmptyRange { .. })
    ));
    // As in TensorFlow (see the tf_generator fixture), the state still moves on.
    let mut g = Generator::from_seed(1);
    assert!(matches!(
        g.uniform_int::<i32>(&[3], 7, 2),
        Err(TfRandomError::EmptyRange { .. })
    ));
    assert_eq!(g.state().words(), &[1 + 3 * 256, 0, 0]);
}

#[test]
fn unsigned_ranges_are_refused() {
    assert_eq!(
        stateless_uniform_int::<u32, i32>(&[3], &[1, 2], 0, 10),
        Err(TfRandomError::UnsignedRange { dtype: "uint32" })
    );
    let mut g = Generator::from_seed(1);
    assert_eq!(
        g.uniform_int::<u64>(&[3], 0, 10),
        Err(TfRandomError::UnsignedRange { dtype: "uint64" })
    );
    // Full-range unsigned draws are fine.
    assert!(g.uniform_full_int::<u64>(&[3]).is_ok());
}

#[test]
fn states_of_the_wrong_length_or_algorithm() {
    assert_eq!(
        Generator::from_state(&[1, 2], Algorithm::Philox),
        Err(TfRandomError::StateLength {
            alg: Algorithm::Philox,
            expected: 3,
            got: 2
        })
    );
    assert_eq!(
        Generator::from_state(&[1, 2, 3], Algorithm::ThreeFry).unwrap_err(),
        TfRandomError::StateLength {
            alg: Algorithm::ThreeFry,
            expected: 2,
            got: 3
        }
    );
    assert!(Generator::from_key_counter(1, &[0], Algorithm::Philox).is_err());
    assert!(GeneratorState::new(Algorithm::AutoSelect, &[0; 4]).is_err());
    let mut g = Generator::from_seed(1);
    assert!(g.reset(&[1, 2, 3, 4]).is_err());
    assert!(g.reset_from_key_counter(1, &[1, 2, 3]).is_err());
    assert_eq!(
        g.state().words(),
        &[1, 0, 0],
        "a refused reset leaves the state"
    );
    let threefry = Generator::from_seed_with(1, Algorithm::ThreeFry);
    assert_eq!(
        g.restore(threefry.state().clone()),
        Err(TfRandomError::AlgorithmMismatch {
            expected: Algorithm::Philox,
            got: Algorithm::ThreeFry
        })
    );
    assert_eq!(
        Algorithm::from_id(4),
        Err(TfRandomError::UnknownAlgorithm { id: 4 })
    );
    assert_eq!(Algorithm::from_id(1), Ok(Algorithm::Philox));
}

#[test]
fn split_zero() {
    let mut g = Generator::from_seed(1);
    assert!(g.split(0).unwrap().is_empty());
    assert_eq!(g.state().words(), &[1, 0, 0]);
}

#[test]
fn shape_overflow() {
    let huge = [usize::MAX, 2];
    assert!(matches!(
        stateless_normal::<f32, i32>(&huge, &[1, 2], 0.0, 1.0),
        Err(TfRandomError::ShapeOverflow { .. })
    ));
    let mut g = Generator::from_seed(1);
    assert!(matches!(
        g.normal(&huge),
        Err(TfRandomError::ShapeOverflow { .. })
    ));
    assert_eq!(g.state().words(), &[1, 0, 0]);
}

#[test]
fn errors_display() {
    let msg = TfRandomError::SeedShape { len: 3 }.to_string();
    assert!(msg.contains("[2]"), "{msg}");
    let msg = TfRandomError::UnsignedRange { dtype: "uint32" }.to_string();
    assert!(msg.contains("uint32"), "{msg}");
}
