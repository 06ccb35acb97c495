//! Bad input to `flaxen::random` is a typed error, never a panic, an abort
//! or a silently wrong (wrapped) result: huge shapes are refused before
//! anything is allocated, in every dtype; `split` of huge counts does not
//! wrap to empty; seeds outside JAX's range, unknown dtype names, reshapes
//! to another size and invalid dtype parameters are errors naming what is
//! wrong.

use flaxen::random::{self, bf16, f16, FloatDType, Key, RandomError, ThreefryMode, UIntDType, X64};

fn keys() -> [Key; 2] {
    [
        random::key(0),
        random::key(0).with_mode(ThreefryMode::NonPartitionable),
    ]
}

/// A shape whose element count wraps `usize`, one whose bytes overflow
/// `isize`, and one that fits the address space but not any memory
/// (`normal(key, &[1 << 40])` aborted the process before).
const HUGE: [&[usize]; 3] = [&[1 << 62, 8], &[1 << 62], &[1 << 40]];

fn assert_size_error<T: std::fmt::Debug>(what: &str, shape: &[usize], r: Result<T, RandomError>) {
    match r {
        Err(RandomError::ShapeOverflow { shape: s, .. })
        | Err(RandomError::OutOfMemory { shape: s, .. }) => {
            assert_eq!(s, shape, "{what}")
        }
        other => panic!("{what} {shape:?}: expected a size error, got {other:?}"),
    }
}

#[test]
fn huge_shapes_are_refused_before_allocating() {
    for k in keys() {
        for shape in HUGE {
            let c = || k.clone();
            assert_size_error("bits", shape, random::bits(c(), shape));
            assert_size_error("uniform", shape, random::uniform(c(), shape));
            assert_size_error("normal", shape, random::normal(c(), shape));
            assert_size_error("gumbel", shape, random::gumbel(c(), shape));
            assert_size_error("exponential", shape, random::exponential(c(), shape));
            assert_size_error("bernoulli", shape, random::bernoulli(c(), 0.5, shape));
            assert_size_error("randint", shape, random::randint(c(), shape, 0, 9));
            assert_size_error(
                "truncated_normal",
                shape,
                random::truncated_normal(c(), -1.0, 1.0, shape),
            );
            assert_size_error("choice", shape, random::choice(c(), 10, shape, true, None));
            assert_size_error("bits_as u8", shape, random::bits_as::<u8>(c(), shape));
            assert_size_error("bits_as u64", shape, random::bits_as::<u64>(c(), shape));
            assert_size_error(
                "uniform_as f16",
                shape,
                random::uniform_as::<f16>(c(), shape),
            );
            assert_size_error(
                "normal_as bf16",
                shape,
                random::normal_as::<bf16>(c(), shape),
            );
            assert_size_error("normal_as f64", shape, random::normal_as::<f64>(c(), shape));
            assert_size_error(
                "normal_dtype",
                shape,
                random::normal_dtype(c(), shape, FloatDType::Float64, X64::Enabled),
            );
            assert_size_error(
                "bits_dtype",
                shape,
                random::bits_dtype(c(), shape, UIntDType::UInt16, X64::Disabled),
            );
            assert_size_error(
                "categorical",
                shape,
                random::categorical(
                    c(),
                    &ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[2])).view(),
                    -1,
                    Some(&[shape, &[2][..]].concat()[..shape.len()]),
                ),
            );
        }
    }
}

#[test]
fn a_zero_dimension_makes_a_shape_empty() {
    // Empty whatever the other dimensions, as long as ndarray can hold the
    // shape (the product of the non-zero dimensions must fit isize).
    for k in keys() {
        let shape = [0, 1 << 62, 1];
        assert_eq!(random::normal(k.clone(), &shape).unwrap().shape(), &shape);
        assert_eq!(random::bits_as::<u8>(k.clone(), &shape).unwrap().len(), 0);
        assert_eq!(
            random::uniform_as::<f64>(k.clone(), &shape).unwrap().len(),
            0
        );
        assert_eq!(
            random::choice(k.clone(), 3, &shape, true, None)
                .unwrap()
                .len(),
            0
        );
        let logits = ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[0, 3]));
        assert_eq!(
            random::categorical(k.clone(), &logits.view(), -1, Some(&[1 << 62, 0]))
                .unwrap()
                .shape(),
            &[1 << 62, 0]
        );
        // A shape ndarray cannot represent is an error, not a panic.
        assert_size_error(
            "normal",
            &[0, 1 << 62, 4],
            random::normal(k, &[0, 1 << 62, 4]),
        );
    }
}

#[test]
fn huge_splits_are_errors_not_empty() {
    for k in keys() {
        // 2^63 keys: 2n wrapped to 0 in the non-partitionable layout, which
        // returned an empty array; the allocation aborted in the other.
        for n in [1usize << 63, usize::MAX, 1 << 40] {
            assert_size_error("split", &[n], random::split(k.clone(), n));
        }
        assert_size_error(
            "split",
            &[1 << 32, 1 << 32],
            random::split(k.clone(), [1 << 32, 1 << 32]),
        );
        assert!(random::split(k.clone(), 0).unwrap().is_empty());
        assert!(random::split(k, [3, 0]).unwrap().is_empty());
    }
}

#[test]
fn seeds_outside_the_range_of_jax_are_errors() {
    for seed in [
        1i128 << 63,
        (1i128 << 64) - 1,
        -(1i128 << 63) - 1,
        i128::MAX,
    ] {
        let err = random::try_key(seed).unwrap_err();
        assert!(matches!(err, RandomError::Seed { .. }), "{err:?}");
        assert!(err.to_string().contains(&seed.to_string()), "{err}");
    }
    assert!(random::try_key(u64::MAX).is_err());
    assert!(random::try_key(usize::MAX).is_err());
    assert!(random::try_key(1u64 << 63).is_err());
    assert_eq!(
        random::key_data(&random::try_key((1u64 << 63) - 1).unwrap()),
        [0, u32::MAX]
    );
}

#[test]
fn unknown_dtype_names_are_errors() {
    for name in ["float8", "int32", "f16", "", "Float32", "uint128"] {
        let err = name.parse::<FloatDType>().unwrap_err();
        assert!(matches!(err, RandomError::DType { .. }), "{err:?}");
        assert!(err.to_string().contains(&format!("{name:?}")), "{err}");
        let err = name.parse::<UIntDType>().unwrap_err();
        assert!(err.to_string().contains("uint8"), "{err}");
    }
    for d in [
        FloatDType::Float16,
        FloatDType::BFloat16,
        FloatDType::Float32,
        FloatDType::Float64,
    ] {
        assert_eq!(d.name().parse::<FloatDType>().unwrap(), d);
    }
}

#[test]
fn invalid_parameters_in_every_dtype() {
    let k = random::key(0);
    assert!(matches!(
        random::uniform_range_as(k.clone(), &[2], f16::ONE, f16::ZERO),
        Err(RandomError::EmptyRange { .. })
    ));
    assert!(matches!(
        random::uniform_range_as(k.clone(), &[2], f64::NAN, 1.0),
        Err(RandomError::EmptyRange { .. })
    ));
    assert!(matches!(
        random::truncated_normal_as(k.clone(), bf16::from_f32(2.0), bf16::from_f32(1.0), &[2]),
        Err(RandomError::EmptyRange { .. })
    ));
    assert!(matches!(
        random::truncated_normal_dtype(
            k.clone(),
            1.0,
            1.0,
            &[2],
            FloatDType::Float64,
            X64::Enabled
        ),
        Err(RandomError::EmptyRange { .. })
    ));
    for p in [-0.5, 1.5, f64::NAN] {
        assert!(matches!(
            random::bernoulli_as(k.clone(), p, &[2]),
            Err(RandomError::Probability { .. })
        ));
        assert!(matches!(
            random::bernoulli_as(k.clone(), f16::from_f64(p), &[2]),
            Err(RandomError::Probability { .. })
        ));
    }
    // A range that rounds to empty in the dtype is refused there.
    assert!(random::uniform_range_dtype(
        k.clone(),
        &[2],
        FloatDType::Float16,
        X64::Disabled,
        1.0,
        1.0001
    )
    .is_err());
}

#[test]
fn key_arrays_reshape_only_to_their_size() {
    let keys = random::split(random::key(0), 6).unwrap();
    let grid = keys.clone().reshape(&[2, 3]).unwrap();
    assert_eq!(grid.shape(), &[2, 3]);
    assert_eq!(grid.data(), keys.data());
    assert_eq!(grid, random::split(random::key(0), [2, 3]).unwrap());
    for bad in [&[4, 2][..], &[7], &[usize::MAX, 2]] {
        let err = keys.clone().reshape(bad).unwrap_err();
        assert!(matches!(err, RandomError::Shape { .. }), "{err:?}");
    }
    assert!(matches!(
        keys.into_array::<2>(),
        Err(RandomError::KeyCount {
            expected: 2,
            found: 6
        })
    ));
}

#[test]
fn probabilities_that_are_all_subnormal_sum_to_zero() {
    let p = [1e-40f32, 2e-40];
    for replace in [true, false] {
        let err = random::choice(random::key(0), 2, &[2], replace, Some(&p)).unwrap_err();
        assert!(err.to_string().contains("subnormal"), "{err}");
    }
}

/// `categorical` over logits with no categories: JAX's `argmax` refuses an
/// empty axis ("attempt to get argmax of an empty sequence"); so do we,
/// whatever the other dimensions.
#[test]
fn categorical_over_an_empty_axis_is_an_error() {
    for shape in [vec![2, 0], vec![0, 0], vec![0]] {
        let logits = ndarray::ArrayD::<f32>::zeros(shape.clone());
        let e = random::categorical(random::key(0), &logits.view(), -1, None).unwrap_err();
        assert!(
            matches!(
                e,
                RandomError::Shape {
                    function: "categorical",
                    ..
                }
            ),
            "{shape:?}: {e:?}"
        );
        assert!(e.to_string().contains("no categories"), "{e}");
    }
    // An empty batch with categories is fine (an empty result).
    let logits = ndarray::ArrayD::<f32>::zeros(vec![0, 3]);
    let c = random::categorical(random::key(0), &logits.view(), -1, None).unwrap();
    assert_eq!(c.shape(), &[0]);
}
