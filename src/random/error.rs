//! The error type of `flaxen::random` and `flaxen::init`.

use std::fmt;

/// Everything a caller can get wrong when drawing random numbers.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RandomError {
    /// The shape's element count does not fit in memory addresses.
    ShapeOverflow {
        /// The function that was called.
        function: &'static str,
        /// The requested shape.
        shape: Vec<usize>,
    },
    /// An interval whose lower end is not below its upper end.
    EmptyRange {
        /// The function that was called.
        function: &'static str,
        /// The lower end, printed.
        low: String,
        /// The upper end, printed.
        high: String,
    },
    /// A probability outside `[0, 1]`, or NaN.
    Probability {
        /// The function that was called.
        function: &'static str,
        /// The offending value.
        p: f32,
    },
    /// More draws without replacement than there are items.
    TooManyDraws {
        /// The function that was called.
        function: &'static str,
        /// How many items were asked for.
        draws: usize,
        /// How many items there are.
        items: usize,
    },
    /// An argument's shape does not fit the call.
    Shape {
        /// The function that was called.
        function: &'static str,
        /// What is wrong, with the shapes involved.
        message: String,
    },
    /// An invalid parameter value, described.
    Parameter {
        /// The function that was called.
        function: &'static str,
        /// What is wrong, with the value involved.
        message: String,
    },
    /// A key array of the wrong length was unpacked.
    KeyCount {
        /// The length asked for.
        expected: usize,
        /// The array's length.
        found: usize,
    },
}

impl fmt::Display for RandomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RandomError::ShapeOverflow { function, shape } => write!(
                f,
                "{function}: shape {shape:?} has more elements than fit in memory"
            ),
            RandomError::EmptyRange {
                function,
                low,
                high,
            } => write!(
                f,
                "{function}: the lower bound {low} must be less than the upper bound {high}"
            ),
            RandomError::Probability { function, p } => {
                write!(f, "{function}: probability {p} is not in [0, 1]")
            }
            RandomError::TooManyDraws {
                function,
                draws,
                items,
            } => write!(
                f,
                "{function}: cannot take {draws} samples without replacement from {items} items"
            ),
            RandomError::Shape { function, message } => write!(f, "{function}: {message}"),
            RandomError::Parameter { function, message } => write!(f, "{function}: {message}"),
            RandomError::KeyCount { expected, found } => write!(
                f,
                "cannot unpack a key array of {found} keys into {expected} keys"
            ),
        }
    }
}

impl std::error::Error for RandomError {}

/// The element count of `shape`, or an error when it overflows.
pub(crate) fn element_count(function: &'static str, shape: &[usize]) -> Result<usize, RandomError> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize / 4)
        .ok_or_else(|| RandomError::ShapeOverflow {
            function,
            shape: shape.to_vec(),
        })
}
