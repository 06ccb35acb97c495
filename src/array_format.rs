//! NumPy-style printing of arrays, so examples print as the documents do.
//!
//! [`format_array`] reproduces NumPy's `str()` of an array (what `print`
//! shows for a JAX array) and [`format_array_repr`] the body of its `repr`
//! (`Array([...], dtype=float32)`): NumPy's default options, i.e. at most 8
//! fractional digits of the shortest round-trip representation, one common
//! width, scientific notation when magnitudes call for it, lines wrapped at
//! 75 characters, and `...` summaries past 1000 elements.
//!
//! ```
//! use flaxen::array_format::format_array;
//! use ndarray::array;
//!
//! let a = array![[-1.6185919f32, 0.700908], [-1.3146383, -0.79342234]].into_dyn();
//! assert_eq!(
//!     format_array(&a.view()),
//!     "[[-1.6185919   0.700908  ]\n [-1.3146383  -0.79342234]]"
//! );
//! ```

use ndarray::{ArrayViewD, Axis};

/// NumPy's default line width.
const LINE_WIDTH: usize = 75;
/// Arrays with more elements than this are summarized with `...`.
const THRESHOLD: usize = 1000;
/// Items kept at each edge of a summarized axis.
const EDGE_ITEMS: usize = 3;

/// An element type NumPy knows how to print.
pub trait NumpyElement: Copy {
    /// Formats all `values` of one array consistently (same width), as
    /// NumPy's per-dtype formatter does.
    fn format_all(values: &[Self]) -> Vec<String>;
}

impl NumpyElement for f32 {
    fn format_all(values: &[f32]) -> Vec<String> {
        FloatFormat::new(values).format_all(values)
    }
}

macro_rules! integer_element {
    ($($t:ty),*) => {$(
        impl NumpyElement for $t {
            fn format_all(values: &[$t]) -> Vec<String> {
                let strs: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                let w = strs.iter().map(String::len).max().unwrap_or(0);
                strs.into_iter().map(|s| format!("{s:>w$}")).collect()
            }
        }
    )*};
}
integer_element!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

impl NumpyElement for bool {
    fn format_all(values: &[bool]) -> Vec<String> {
        // NumPy pads `True` to the width of `False` inside arrays.
        values
            .iter()
            .map(|&b| if b { " True" } else { "False" }.to_string())
            .collect()
    }
}

/// NumPy's `str(array)`.
pub fn format_array<T: NumpyElement>(array: &ArrayViewD<'_, T>) -> String {
    format_with(array, " ", "")
}

/// What NumPy's `repr` adds after the values of an empty array:
/// `, shape=(0, 1)` (nothing for other arrays).
///
/// ```
/// use flaxen::array_format::empty_shape_suffix;
/// assert_eq!(empty_shape_suffix(&[0, 1]), ", shape=(0, 1)");
/// assert_eq!(empty_shape_suffix(&[0]), ", shape=(0,)");
/// assert_eq!(empty_shape_suffix(&[2]), "");
/// ```
pub fn empty_shape_suffix(shape: &[usize]) -> String {
    if shape.is_empty() || shape.iter().product::<usize>() > 0 {
        return String::new();
    }
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    if let [one] = dims.as_slice() {
        format!(", shape=({one},)")
    } else {
        format!(", shape=({})", dims.join(", "))
    }
}

/// The bracketed part of NumPy's `repr(array)`, with `, ` between elements
/// and continuation lines indented by `prefix_len` spaces (the length of
/// whatever text precedes the opening bracket, e.g. 6 for `Array(`).
pub fn format_array_repr<T: NumpyElement>(array: &ArrayViewD<'_, T>, prefix_len: usize) -> String {
    format_with(array, ", ", &" ".repeat(prefix_len))
}

fn format_with<T: NumpyElement>(
    array: &ArrayViewD<'_, T>,
    separator: &str,
    prefix: &str,
) -> String {
    if array.is_empty() && array.ndim() > 0 {
        // NumPy prints any empty array as `[]` (its repr adds the shape).
        return "[]".to_string();
    }
    let summarize = array.len() > THRESHOLD;
    // NumPy fixes the common width from the elements that are shown.
    let shown = shown_elements(array, summarize);
    let strs = T::format_all(&shown);
    if array.ndim() == 0 {
        return strs.into_iter().next().unwrap_or_default();
    }
    let mut words = strs.into_iter();
    let next_line_prefix = format!("{prefix} ");
    recurse(
        array,
        &mut words,
        &next_line_prefix,
        LINE_WIDTH.saturating_sub(prefix.len()),
        separator,
        summarize,
    )
}

/// The elements NumPy prints, in printing order.
fn shown_elements<T: NumpyElement>(array: &ArrayViewD<'_, T>, summarize: bool) -> Vec<T> {
    if array.ndim() == 0 {
        return array.iter().copied().collect();
    }
    let mut out = Vec::new();
    for i in shown_indices(array.shape()[0], summarize) {
        let sub = array.index_axis(Axis(0), i);
        if sub.ndim() == 0 {
            out.extend(sub.iter().copied());
        } else {
            out.extend(shown_elements(&sub, summarize));
        }
    }
    out
}

fn shown_indices(len: usize, summarize: bool) -> Vec<usize> {
    if summarize && len > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS).chain(len - EDGE_ITEMS..len).collect()
    } else {
        (0..len).collect()
    }
}

/// NumPy's `_formatArray` recursion, consuming pre-formatted words in order.
fn recurse<T: NumpyElement>(
    array: &ArrayViewD<'_, T>,
    words: &mut impl Iterator<Item = String>,
    hanging_indent: &str,
    width: usize,
    separator: &str,
    summarize: bool,
) -> String {
    let len = array.shape()[0];
    let indices = shown_indices(len, summarize);
    let gap_after = if indices.len() < len {
        Some(EDGE_ITEMS - 1)
    } else {
        None
    };
    let next_indent = format!("{hanging_indent} ");
    let next_width = width.saturating_sub(1);
    let mut s = String::new();
    if array.ndim() == 1 {
        let sep_trim = separator.trim_end();
        let elem_width = width.saturating_sub(sep_trim.len().max(1));
        let mut line = hanging_indent.to_string();
        for (k, _) in indices.iter().enumerate() {
            let last = k + 1 == indices.len();
            let word = words.next().unwrap_or_default();
            extend_line(&mut s, &mut line, &word, elem_width, hanging_indent);
            if !last {
                line.push_str(separator);
            }
            if gap_after == Some(k) {
                extend_line(&mut s, &mut line, "...", elem_width, hanging_indent);
                line.push_str(separator);
            }
        }
        s.push_str(&line);
    } else {
        let line_sep = format!("{}{}", separator.trim_end(), "\n".repeat(array.ndim() - 1));
        for (k, &i) in indices.iter().enumerate() {
            let sub = array.index_axis(Axis(0), i);
            let nested = recurse(&sub, words, &next_indent, next_width, separator, summarize);
            s.push_str(hanging_indent);
            s.push_str(&nested);
            if k + 1 != indices.len() {
                s.push_str(&line_sep);
            }
            if gap_after == Some(k) {
                s.push_str(hanging_indent);
                s.push_str("...");
                s.push_str(&line_sep);
            }
        }
    }
    format!("[{}]", &s[hanging_indent.len()..])
}

fn extend_line(s: &mut String, line: &mut String, word: &str, width: usize, next_prefix: &str) {
    let needs_wrap = line.len() + word.len() > width && line.len() > next_prefix.len();
    if needs_wrap {
        s.push_str(line.trim_end());
        s.push('\n');
        *line = next_prefix.to_string();
    }
    line.push_str(word);
}

/// NumPy's `FloatingFormat` for the default options (`precision=8`,
/// `floatmode='maxprec'`, `suppress=False`).
struct FloatFormat {
    scientific: bool,
    pad_left: usize,
    pad_right: usize,
    exp_size: usize,
}

const PRECISION: usize = 8;

impl FloatFormat {
    fn new(values: &[f32]) -> FloatFormat {
        let finite: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let nonzero: Vec<f32> = finite
            .iter()
            .map(|v| v.abs())
            .filter(|&v| v != 0.0)
            .collect();
        let scientific = match (
            nonzero.iter().copied().reduce(f32::max),
            nonzero.iter().copied().reduce(f32::min),
        ) {
            (Some(max), Some(min)) => max >= 1e8 || min < 1e-4 || max / min > 1e3,
            _ => false,
        };
        let mut f = FloatFormat {
            scientific,
            pad_left: 0,
            pad_right: 0,
            exp_size: 0,
        };
        for &v in &finite {
            let (int, frac, exp) = f.parts(v);
            f.pad_left = f.pad_left.max(int.len());
            f.pad_right = f.pad_right.max(frac.len());
            f.exp_size = f.exp_size.max(exp.len());
        }
        if finite.len() != values.len() {
            // Room for `nan`, `inf` and `-inf`, aligned as NumPy aligns them.
            let neg_inf = values.iter().any(|v| v.is_infinite() && *v < 0.0);
            let offset = if f.scientific {
                f.pad_right + f.exp_size + 2
            } else {
                f.pad_right + 1
            };
            f.pad_left = f
                .pad_left
                .max(3usize.saturating_sub(offset))
                .max((3 + usize::from(neg_inf)).saturating_sub(offset));
        }
        f
    }

    /// Integer part (with sign), fractional digits, exponent digits.
    fn parts(&self, v: f32) -> (String, String, String) {
        if self.scientific {
            let s = shortest_scientific(v);
            let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
            let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
            let exp_digits = exp.trim_start_matches('-').to_string();
            (int.to_string(), frac.to_string(), exp_digits)
        } else {
            let s = shortest_positional(v);
            let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
            (int.to_string(), frac.to_string(), String::new())
        }
    }

    fn format_all(&self, values: &[f32]) -> Vec<String> {
        values.iter().map(|&v| self.format(v)).collect()
    }

    fn format(&self, v: f32) -> String {
        if !v.is_finite() {
            let s = if v.is_nan() {
                "nan"
            } else if v > 0.0 {
                "inf"
            } else {
                "-inf"
            };
            let width = self.pad_left
                + self.pad_right
                + 1
                + if self.scientific {
                    self.exp_size + 2
                } else {
                    0
                };
            return format!("{s:>width$}");
        }
        let (int, frac, exp) = self.parts(v);
        let mut out = format!(
            "{int:>w$}.{frac:<p$}",
            w = self.pad_left,
            p = self.pad_right
        );
        if self.scientific {
            // Exponents are padded to a common number of digits with zeros.
            let sign = if shortest_scientific(v).contains("e-") {
                '-'
            } else {
                '+'
            };
            let digits = self.exp_size.max(2);
            // Keep the padding spaces of the mantissa after the exponent.
            let trimmed = out.trim_end().len();
            let pad = out.len() - trimmed;
            out.truncate(trimmed);
            out.push_str(&format!("e{sign}{exp:0>digits$}"));
            out.push_str(&" ".repeat(pad));
        }
        out
    }
}

/// Shortest round-trip digits in positional form, at most 8 after the
/// point, trailing zeros dropped but the point kept (`1.`, `0.5`).
fn shortest_positional(v: f32) -> String {
    let mut s = format!("{v}");
    if let Some((_, frac)) = s.split_once('.') {
        if frac.len() > PRECISION {
            s = format!("{v:.PRECISION$}");
        }
    }
    if !s.contains('.') {
        s.push('.');
    }
    s.trim_end_matches('0').to_string()
}

/// Shortest round-trip digits in scientific form, at most 8 after the point.
fn shortest_scientific(v: f32) -> String {
    let mut s = format!("{v:e}");
    if let Some((mantissa, _)) = s.split_once('e') {
        if let Some((_, frac)) = mantissa.split_once('.') {
            if frac.len() > PRECISION {
                s = format!("{v:.PRECISION$e}");
            }
        }
    }
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let mut mantissa = mantissa.to_string();
    if !mantissa.contains('.') {
        mantissa.push('.');
    }
    let mantissa = mantissa.trim_end_matches('0');
    format!("{mantissa}e{exp}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, ArrayD, IxDyn};

    fn f(a: ArrayD<f32>) -> String {
        format_array(&a.view())
    }

    #[test]
    fn guide_arrays() {
        // Printed arrays from the Flax randomness guide.
        assert_eq!(
            f(array![[0.0761425f32, -1.6157459], [-1.6857724, 0.7126891]].into_dyn()),
            "[[ 0.0761425 -1.6157459]\n [-1.6857724  0.7126891]]"
        );
        assert_eq!(
            f(array![[1.582462f32, 0.15216611]].into_dyn()),
            "[[1.582462   0.15216611]]"
        );
        assert_eq!(
            f(array![[1.6249592f32, 0.30813068], [1.6613585, 1.0404155]].into_dyn()),
            "[[1.6249592  0.30813068]\n [1.6613585  1.0404155 ]]"
        );
    }

    #[test]
    fn repr_body_and_zeros() {
        let a = array![[-1.2488099f32, -0.6127134], [-0.07084481, 0.60130936]].into_dyn();
        assert_eq!(
            format_array_repr(&a.view(), 6),
            "[[-1.2488099 , -0.6127134 ],\n       [-0.07084481,  0.60130936]]"
        );
        let z = ArrayD::<f32>::zeros(IxDyn(&[2]));
        assert_eq!(format_array_repr(&z.view(), 6), "[0., 0.]");
    }

    #[test]
    fn integers_and_scalars() {
        let a = array![1883912375u32, 2292451390, 1915204986, 1882898417].into_dyn();
        assert_eq!(
            format_array(&a.view()),
            "[1883912375 2292451390 1915204986 1882898417]"
        );
        let s = ndarray::arr0(2.518454f32).into_dyn();
        assert_eq!(format_array(&s.view()), "2.518454");
    }
}
