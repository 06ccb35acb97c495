//! The digits loader survives bad files: truncated, bit-flipped and
//! garbage gzip streams, and malformed CSV rows, give typed errors — never
//! a panic or an unbounded allocation. Batching errors too.

use flaxen::data::{digits, Batches, DataError};
use flaxen::random;
use ndarray::{Array1, Array2};

const FILE: &[u8] = include_bytes!("../data/digits/digits.csv.gz");

#[test]
fn the_shipped_file_loads() {
    let d = digits::from_gzip(FILE).unwrap();
    assert_eq!(d.pixels.dim(), (1797, 64));
    assert!(d.pixels.iter().all(|&p| p <= 16));
    assert!(d.labels.iter().all(|&l| (0..10).contains(&l)));
    assert_eq!(d, digits::load().unwrap());
}

#[test]
fn truncated_files_are_typed_errors() {
    // Every cut point in the first 2 KB, then every 97th byte.
    let cuts = (0..2048).chain((2048..FILE.len()).step_by(97));
    for cut in cuts {
        let err = digits::from_gzip(&FILE[..cut]).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::Compressed { .. } | DataError::RowCount { .. } | DataError::Row { .. }
            ),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn mutated_files_never_panic() {
    // Deterministic bit flips all over the file (a small LCG).
    let mut s = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..3000 {
        let mut bytes = FILE.to_vec();
        for _ in 0..1 + (s % 4) {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (s >> 33) as usize % bytes.len();
            bytes[at] ^= 1 << ((s >> 29) % 8);
        }
        // Ok (a flip the checksum misses is still well-formed data) or a
        // typed error; a panic fails the test.
        let _ = digits::from_gzip(&bytes);
    }
    for garbage in [&b""[..], b"\x1f\x8b", b"not gzip at all", &[0u8; 100]] {
        assert!(digits::from_gzip(garbage).is_err());
    }
}

#[test]
fn malformed_rows_are_typed_errors() {
    let good_row = format!("{},3\n", vec!["0"; 64].join(","));
    let cases: Vec<(String, &str)> = vec![
        (good_row.repeat(3), "expected 1797 rows"),
        (format!("{},3\n", vec!["0"; 63].join(",")), "fields"),
        (format!("{},17,3\n", vec!["0"; 63].join(",")), "pixel"),
        (format!("{},10\n", vec!["0"; 64].join(",")), "label"),
        (format!("{},x\n", vec!["0"; 64].join(",")), "label"),
        (good_row.repeat(1798), "more than 1797"),
    ];
    for (text, expected) in cases {
        let err = digits::from_csv(text.as_bytes()).unwrap_err();
        assert!(err.to_string().contains(expected), "{expected}: {err}");
    }
    assert!(digits::from_csv(&[0xff, 0xfe, b'\n']).is_err());
}

#[test]
fn batching_errors() {
    let x = Array2::<f32>::zeros((10, 2));
    let y = Array1::<i32>::zeros(10);
    for bs in [0, 11] {
        let err = Batches::shuffled(x.view(), y.view(), bs, random::key(0)).unwrap_err();
        assert!(
            err.to_string().contains(&format!("batch size {bs}")),
            "{err}"
        );
    }
    let short = Array1::<i32>::zeros(9);
    assert!(Batches::shuffled(x.view(), short.view(), 2, random::key(0)).is_err());
    assert!(Batches::in_order(x.view(), y.view(), 2, vec![0; 10]).is_err());
    let batches = Batches::in_order(x.view(), y.view(), 4, (0..10).collect()).unwrap();
    assert_eq!(batches.len(), 2);
    let kept = Batches::in_order(x.view(), y.view(), 4, (0..10).collect())
        .unwrap()
        .keep_last(true);
    assert_eq!(kept.map(|b| b.y.len()).collect::<Vec<_>>(), [4, 4, 2]);
}
