//! The numbers printed by TensorFlow's random number guide
//! (/work/shared/seeds/004, "Random number generation"), reproduced.
//!
//! The guide prints float32 at numpy's shortest precision. Four of its values
//! differ from TensorFlow 2.21 by 1–2 ulp (the guide was made with another
//! math library or build; see book/src/tf_random.md). For those, the tests
//! check TF 2.21's value and the ulp distance to the printed one.

use flaxen::random::tf::{stateless_fold_in, stateless_normal, stateless_split, Generator};

/// The float32 nearest to the printed decimal.
fn doc(s: &str) -> f32 {
    s.parse().unwrap()
}

/// The distance in ulps between two finite floats of the same sign.
fn ulps(a: f32, b: f32) -> u32 {
    assert_eq!(a.is_sign_negative(), b.is_sign_negative());
    a.to_bits().abs_diff(b.to_bits())
}

fn n(g: &mut Generator) -> f32 {
    g.normal(&[]).unwrap()[[]]
}

#[test]
fn from_seed_1_normal_2x3() {
    let x = Generator::from_seed(1).normal(&[2, 3]).unwrap();
    let printed = [
        "0.43842277",
        "-0.53439844",
        "-0.07710262",
        "1.5658046",
        "-0.1012345",
        "-0.2744976",
    ];
    for (i, (&got, p)) in x.iter().zip(printed).enumerate() {
        if i == 0 {
            // TF 2.21 (and the guide's own distribution-strategy cell) give 0.43842274.
            assert_eq!(got, doc("0.43842274"));
            assert_eq!(ulps(got, doc(p)), 1);
        } else {
            assert_eq!(got, doc(p), "element {i}");
        }
    }
}

#[test]
fn successive_normals_and_reset() {
    let mut g = Generator::from_seed(1);
    assert_eq!(n(&mut g), doc("0.43842274"));
    assert_eq!(n(&mut g), doc("1.6272374"));
    g.reset_from_seed(1);
    assert_eq!(n(&mut g), doc("0.43842274"));
}

#[test]
fn split_children() {
    let mut g = Generator::from_seed(1);
    assert_eq!(n(&mut g), doc("0.43842274"));
    let children = g.split(3).unwrap();
    let got: Vec<f32> = children.into_iter().map(|mut c| n(&mut c)).collect();
    assert_eq!(
        got,
        [doc("2.536413"), doc("0.33186463"), doc("-0.07144657")]
    );
    assert_eq!(n(&mut g), doc("-0.79253083"));
}

#[test]
fn checkpoint_save_and_restore() {
    let mut g = Generator::from_seed(1);
    assert_eq!(n(&mut g), doc("0.43842274"));
    let saved = g.state().clone();
    assert_eq!(n(&mut g), doc("1.6272374"));
    assert_eq!(n(&mut g), doc("1.6307176"));
    g.restore(saved).unwrap();
    assert_eq!(n(&mut g), doc("1.6272374"));
    assert_eq!(n(&mut g), doc("1.6307176"));
}

#[test]
fn stateless_normal_seed_1_2() {
    let x = stateless_normal::<f32, i32>(&[2, 3], &[1, 2], 0.0, 1.0).unwrap();
    // (printed, TF 2.21, ulps apart)
    let want = [
        ("0.5441101", "0.5441101", 0),
        ("0.20738031", "0.20738031", 0),
        ("0.07356433", "0.07356432", 1),
        ("0.04643455", "0.04643455", 0),
        ("-1.30159", "-1.3015898", 1),
        ("-0.95385665", "-0.9538565", 2),
    ];
    for (&got, (printed, tf, d)) in x.iter().zip(want) {
        assert_eq!(got, doc(tf));
        assert_eq!(ulps(got, doc(printed)), d, "{printed}");
    }
    assert_eq!(
        x,
        stateless_normal::<f32, i64>(&[2, 3], &[1, 2], 0.0, 1.0).unwrap()
    );
}

#[test]
fn spec_split_and_fold_in_examples() {
    // /work/shared/spec/tf-random.md §5.
    let s = stateless_split(&[1i32, 2], 3).unwrap();
    assert_eq!(
        s.into_raw_vec_and_offset().0,
        [1105988140, 1738052849, -335576002, 370444179, 10670227, -246211131]
    );
    assert_eq!(
        stateless_fold_in(&[1i32, 2], 3i32).unwrap(),
        [1105988140, 3]
    );
}

#[test]
fn state_moves_256_per_element() {
    // The spec's example: [1,0,0] -> normal([2,3]) -> [1537,0,0].
    let mut g = Generator::from_seed(1);
    g.normal(&[2, 3]).unwrap();
    assert_eq!(g.state().words(), &[1537, 0, 0]);
}
