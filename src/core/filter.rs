//! Collection filters, as Flax's `CollectionFilter`: which variable
//! collections (or RNG streams) a rule applies to.

/// Selects collections or RNG streams by name.
///
/// ```
/// use flaxen::core::Filter;
/// assert!(Filter::from(["batch_stats"]).matches("batch_stats"));
/// assert!(!Filter::from(false).matches("params"));
/// assert!(Filter::deny(["intermediates"]).matches("params"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Every name (`True` in Flax).
    All,
    /// No name (`False` in Flax).
    Nothing,
    /// Exactly these names.
    Names(Vec<String>),
    /// Everything the inner filter does not select (`flax.core.DenyList`).
    DenyList(Box<Filter>),
}

impl Filter {
    /// Everything but `names`.
    pub fn deny<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Filter {
        Filter::DenyList(Box::new(Filter::Names(
            names.into_iter().map(Into::into).collect(),
        )))
    }

    /// Whether `name` is selected.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Filter::All => true,
            Filter::Nothing => false,
            Filter::Names(names) => names.iter().any(|n| n == name),
            Filter::DenyList(inner) => !inner.matches(name),
        }
    }
}

impl From<bool> for Filter {
    fn from(all: bool) -> Filter {
        if all {
            Filter::All
        } else {
            Filter::Nothing
        }
    }
}

impl From<&str> for Filter {
    fn from(name: &str) -> Filter {
        Filter::Names(vec![name.to_string()])
    }
}

impl<const N: usize> From<[&str; N]> for Filter {
    fn from(names: [&str; N]) -> Filter {
        Filter::Names(names.iter().map(|s| s.to_string()).collect())
    }
}

impl From<&[&str]> for Filter {
    fn from(names: &[&str]) -> Filter {
        Filter::Names(names.iter().map(|s| s.to_string()).collect())
    }
}

impl From<Vec<String>> for Filter {
    fn from(names: Vec<String>) -> Filter {
        Filter::Names(names)
    }
}
