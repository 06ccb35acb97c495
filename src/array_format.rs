//! NumPy-style printing of arrays, so examples print as the documents do.
