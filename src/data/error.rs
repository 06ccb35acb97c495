//! The error type of `flaxen::data`.

use std::fmt;

/// A data file that cannot be read, or a batching request that cannot be
/// met.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DataError {
    /// The file is not valid gzip, or ends early.
    Compressed {
        /// The decoder's message.
        message: String,
    },
    /// A row of the file is malformed.
    Row {
        /// The 1-based line number.
        line: usize,
        /// What is wrong, with the value.
        message: String,
    },
    /// The file holds another number of rows than the data set has.
    RowCount {
        /// Rows expected.
        expected: usize,
        /// Rows found (counting stops one past `expected`).
        found: usize,
    },
    /// A batch size of zero, or larger than the data set.
    BatchSize {
        /// The batch size asked for.
        batch_size: usize,
        /// The number of examples.
        examples: usize,
    },
    /// Features and labels of different lengths, or a permutation that is
    /// not one of the examples.
    Shape {
        /// What is wrong, with the values.
        message: String,
    },
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::Compressed { message } => {
                write!(f, "data file: not a valid gzip stream ({message})")
            }
            DataError::Row { line, message } => write!(f, "data file, line {line}: {message}"),
            DataError::RowCount { expected, found } => write!(
                f,
                "data file: expected {expected} rows, found {}",
                if found > expected {
                    format!("more than {expected}")
                } else {
                    found.to_string()
                }
            ),
            DataError::BatchSize {
                batch_size,
                examples,
            } => write!(
                f,
                "batch size {batch_size} is not in 1..={examples} (the number of examples)"
            ),
            DataError::Shape { message } => write!(f, "batches: {message}"),
        }
    }
}

impl std::error::Error for DataError {}

impl From<DataError> for crate::Error {
    fn from(source: DataError) -> crate::Error {
        crate::Error::Data { source }
    }
}
