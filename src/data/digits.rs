//! The UCI / scikit-learn handwritten digits: 1,797 images of 8×8 pixels
//! (0..16) and their labels, in scikit-learn's order
//! (`sklearn.datasets.load_digits()`). Provenance and licence (CC BY 4.0):
//! `data/digits/README.md`.

use std::io::Read;

use flate2::read::GzDecoder;
use ndarray::{Array1, Array2};

use super::error::DataError;

/// The compressed file, embedded in the library.
const DIGITS_GZ: &[u8] = include_bytes!("../../data/digits/digits.csv.gz");

/// Number of images.
pub const EXAMPLES: usize = 1797;
/// Pixels per image (8 × 8).
pub const PIXELS: usize = 64;
/// The largest pixel value.
pub const MAX_PIXEL: u8 = 16;

/// A decompressed file larger than this is refused (the real one is
/// about 270 KB), so a hostile file cannot make the loader allocate without
/// bound.
const MAX_DECOMPRESSED: u64 = 4 << 20;

/// The digits: pixels and labels in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct Digits {
    /// Pixel values 0..=16, one row of 64 per image (row-major 8×8).
    pub pixels: Array2<u8>,
    /// Labels 0..=9.
    pub labels: Array1<i32>,
}

impl Digits {
    /// The images as float32 `pixels / 16`, shape `(1797, 64)`, as the
    /// usual preprocessing (`x.astype(np.float32) / 16`) computes them.
    pub fn images_f32(&self) -> Array2<f32> {
        self.pixels.mapv(|p| f32::from(p) / 16.0)
    }
}

/// Loads the shipped data set.
///
/// ```
/// let digits = flaxen::data::digits::load()?;
/// assert_eq!(digits.pixels.dim(), (1797, 64));
/// assert_eq!(digits.labels[0], 0);
/// # Ok::<(), flaxen::data::DataError>(())
/// ```
pub fn load() -> Result<Digits, DataError> {
    from_gzip(DIGITS_GZ)
}

/// Decodes a gzip-compressed CSV in the shipped file's format: 1,797 rows
/// of 64 pixels (0..=16) and a label (0..=9). Fails with a typed error for
/// anything else (truncated, corrupt or oversized files, bad rows).
pub fn from_gzip(bytes: &[u8]) -> Result<Digits, DataError> {
    let mut text = Vec::new();
    GzDecoder::new(bytes)
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut text)
        .map_err(|e| DataError::Compressed {
            message: e.to_string(),
        })?;
    if text.len() as u64 > MAX_DECOMPRESSED {
        return Err(DataError::Compressed {
            message: format!("decompresses to more than {MAX_DECOMPRESSED} bytes"),
        });
    }
    from_csv(&text)
}

/// Decodes the CSV text itself (see [`from_gzip`]).
pub fn from_csv(text: &[u8]) -> Result<Digits, DataError> {
    let text = std::str::from_utf8(text).map_err(|e| DataError::Row {
        line: 1 + text[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
        message: "not UTF-8 text".to_string(),
    })?;
    let mut pixels = Vec::with_capacity(EXAMPLES * PIXELS);
    let mut labels = Vec::with_capacity(EXAMPLES);
    let mut rows = 0;
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        rows += 1;
        if rows > EXAMPLES {
            return Err(DataError::RowCount {
                expected: EXAMPLES,
                found: rows,
            });
        }
        let bad = |message: String| DataError::Row {
            line: i + 1,
            message,
        };
        let fields: Vec<&str> = line.trim_end_matches('\r').split(',').collect();
        if fields.len() != PIXELS + 1 {
            return Err(bad(format!(
                "{} fields, expected {} (64 pixels and a label)",
                fields.len(),
                PIXELS + 1
            )));
        }
        for f in &fields[..PIXELS] {
            match f.trim().parse::<u8>() {
                Ok(p) if p <= MAX_PIXEL => pixels.push(p),
                _ => return Err(bad(format!("pixel {f:?} is not an integer in 0..=16"))),
            }
        }
        match fields[PIXELS].trim().parse::<i32>() {
            Ok(l) if (0..10).contains(&l) => labels.push(l),
            _ => {
                return Err(bad(format!(
                    "label {:?} is not an integer in 0..=9",
                    fields[PIXELS]
                )))
            }
        }
    }
    if rows != EXAMPLES {
        return Err(DataError::RowCount {
            expected: EXAMPLES,
            found: rows,
        });
    }
    Ok(Digits {
        pixels: Array2::from_shape_vec((EXAMPLES, PIXELS), pixels).expect("rows counted"),
        labels: Array1::from(labels),
    })
}
