//! The lanes with which LLVM vectorizes the loop nest of a reduce whose
//! reduced axes are followed by kept ones (`jnp.sum(x, axis=(0, 1))` of a
//! `[a, b, c]` array): the loads of one iteration of the vectorized loop
//! then leave gaps, and LLVM's cost model (jaxlib 0.10.2, x86-64,
//! 256-bit vectors) decides otherwise than for contiguous rows
//! ([`super::reduce::vector_factor`]).

/// How LLVM compiles the second-innermost loop of a reduce's loop nest
/// (`b` iterations, `f` elements apart in memory) around an innermost loop
/// of `c` elements, when the loads leave gaps (`f` is not `c`, or the `c`
/// elements are not adjacent): `(lanes, scalar_epilogue)`, `lanes` 0 when
/// the loop is summed left to right.
///
/// Measured against `jnp.sum` for every `b` from 2 to 32, `c` from 2 to 8
/// and gaps between and after the `c` elements up to 8 elements
/// (`tools/oracle/generate_full_sums.py`). Two regimes:
///
/// * `b` of 2, 4 or 8: the loop is unrolled and its iterations packed into
///   one vector of `b` lanes, only for two elements per iteration and rows
///   a power of two apart (as in [`super::reduce_window`]).
/// * `b` from 16: LLVM's loop vectorizer with interleaved loads, for rows
///   of 4, 6 or 8 elements of which 2, 3 or 4 are read. A load of the last
///   group of lanes would read past the last element read, so a whole
///   group of lanes is always left to the scalar loop (`scalar_epilogue`:
///   16 iterations run 8 vectorized and 8 in order).
pub(crate) fn gapped_vector_factor(b: usize, c: usize, f: usize) -> (usize, bool) {
    match b {
        2 | 4 | 8 if c == 2 && f.is_power_of_two() => (b, false),
        16..=32 => match (f, c) {
            // Lanes alternate between 8 and 4 with each 4 more iterations.
            (4, 2) => (if (b / 4).is_multiple_of(2) { 8 } else { 4 }, true),
            (6, 2 | 3) => (if (20..=23).contains(&b) { 4 } else { 8 }, true),
            (8, 2 | 4) => (4, true),
            _ => (0, false),
        },
        _ => (0, false),
    }
}
