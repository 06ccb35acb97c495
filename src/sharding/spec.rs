//! `PartitionSpec`: which mesh axes each dimension of an array is split
//! over.

use std::fmt;

/// One dimension's entry of a [`PartitionSpec`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecEntry {
    /// Not split: every device holds the whole dimension (`None`).
    Replicated,
    /// Split over one mesh axis (`'data'`).
    Axis(String),
    /// Split over several mesh axes, major first (`('x', 'y')`).
    Axes(Vec<String>),
}

impl SpecEntry {
    /// The mesh axes this dimension is split over, major first.
    pub fn axes(&self) -> Vec<&str> {
        match self {
            SpecEntry::Replicated => Vec::new(),
            SpecEntry::Axis(a) => vec![a.as_str()],
            SpecEntry::Axes(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

impl From<&str> for SpecEntry {
    fn from(name: &str) -> SpecEntry {
        SpecEntry::Axis(name.to_string())
    }
}

impl From<Option<&str>> for SpecEntry {
    fn from(name: Option<&str>) -> SpecEntry {
        name.map_or(SpecEntry::Replicated, SpecEntry::from)
    }
}

impl From<Vec<&str>> for SpecEntry {
    fn from(names: Vec<&str>) -> SpecEntry {
        SpecEntry::Axes(names.iter().map(|s| s.to_string()).collect())
    }
}

impl<const N: usize> From<[&str; N]> for SpecEntry {
    fn from(names: [&str; N]) -> SpecEntry {
        SpecEntry::Axes(names.iter().map(|s| s.to_string()).collect())
    }
}

/// How an array is laid out over a mesh: entry `d` names the mesh axes that
/// dimension `d` is split over (`jax.sharding.PartitionSpec`). Dimensions
/// past the last entry are replicated, and so is the array over mesh axes
/// no entry names.
///
/// ```
/// use flaxen::sharding::PartitionSpec;
///
/// assert_eq!(PartitionSpec::new(["data"]).to_string(), "PartitionSpec('data',)");
/// assert_eq!(PartitionSpec::replicated().to_string(), "PartitionSpec()");
/// assert_eq!(
///     PartitionSpec::new([Some("x"), None]).to_string(),
///     "PartitionSpec('x', None)"
/// );
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionSpec {
    entries: Vec<SpecEntry>,
}

impl PartitionSpec {
    /// A spec from one entry per leading dimension.
    pub fn new<E: Into<SpecEntry>>(entries: impl IntoIterator<Item = E>) -> PartitionSpec {
        PartitionSpec {
            entries: entries.into_iter().map(Into::into).collect(),
        }
    }

    /// The spec of a fully replicated array (`PartitionSpec()`).
    pub fn replicated() -> PartitionSpec {
        PartitionSpec::default()
    }

    /// The entries, one per leading dimension.
    pub fn entries(&self) -> &[SpecEntry] {
        &self.entries
    }

    /// The entry of dimension `d` (replicated past the last entry).
    pub fn entry(&self, d: usize) -> &SpecEntry {
        self.entries.get(d).unwrap_or(&SpecEntry::Replicated)
    }
}

/// Python's `repr` of a string, as JAX prints axis names.
pub(crate) fn quoted(name: &str) -> String {
    format!("'{name}'")
}

impl fmt::Display for PartitionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `PartitionSpec` + the repr of a Python tuple.
        let items: Vec<String> = self
            .entries
            .iter()
            .map(|e| match e {
                SpecEntry::Replicated => "None".to_string(),
                SpecEntry::Axis(a) => quoted(a),
                SpecEntry::Axes(v) => tuple(v.iter().map(|a| quoted(a)).collect()),
            })
            .collect();
        write!(f, "PartitionSpec{}", tuple(items))
    }
}

/// The repr of a Python tuple of already-printed items.
pub(crate) fn tuple(items: Vec<String>) -> String {
    match items.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", items.join(", ")),
    }
}
