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
    /// Whatever any of the filters selects (Flax's `union_filters`).
    Union(Vec<Filter>),
    /// Whatever every one of the filters selects (Flax's
    /// `intersect_filters`).
    Intersection(Vec<Filter>),
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
            Filter::Union(fs) => fs.iter().any(|f| f.matches(name)),
            Filter::Intersection(fs) => fs.iter().all(|f| f.matches(name)),
        }
    }

    /// What `self` or `other` selects (Flax's `union_filters`), simplified
    /// where both are plain.
    ///
    /// ```
    /// use flaxen::core::Filter;
    /// let f = Filter::from("params").union(&Filter::from("batch_stats"));
    /// assert_eq!(f, Filter::from(["params", "batch_stats"]));
    /// assert_eq!(f.union(&Filter::All), Filter::All);
    /// ```
    pub fn union(&self, other: &Filter) -> Filter {
        match (self, other) {
            (Filter::All, _) | (_, Filter::All) => Filter::All,
            (Filter::Nothing, f) | (f, Filter::Nothing) => f.clone(),
            (Filter::Names(a), Filter::Names(b)) => {
                let mut names = a.clone();
                names.extend(b.iter().filter(|n| !a.contains(n)).cloned());
                Filter::Names(names)
            }
            (a, b) => Filter::Union(vec![a.clone(), b.clone()]),
        }
    }

    /// What both `self` and `other` select (Flax's `intersect_filters`).
    ///
    /// ```
    /// use flaxen::core::Filter;
    /// let f = Filter::from(["params", "cache"]).intersection(&Filter::deny(["cache"]));
    /// assert_eq!(f, Filter::from("params"));
    /// assert!(!Filter::from("a").intersection(&Filter::Nothing).matches("a"));
    /// ```
    pub fn intersection(&self, other: &Filter) -> Filter {
        match (self, other) {
            (Filter::Nothing, _) | (_, Filter::Nothing) => Filter::Nothing,
            (Filter::All, f) | (f, Filter::All) => f.clone(),
            (Filter::Names(a), f) | (f, Filter::Names(a)) => {
                Filter::Names(a.iter().filter(|n| f.matches(n)).cloned().collect())
            }
            (a, b) => Filter::Intersection(vec![a.clone(), b.clone()]),
        }
    }

    /// What `self` selects and `other` does not (Flax's
    /// `subtract_filters`).
    ///
    /// ```
    /// use flaxen::core::Filter;
    /// let f = Filter::All.difference(&Filter::from("params"));
    /// assert!(f.matches("batch_stats") && !f.matches("params"));
    /// ```
    pub fn difference(&self, other: &Filter) -> Filter {
        match other {
            Filter::All => Filter::Nothing,
            Filter::Nothing => self.clone(),
            Filter::DenyList(inner) => self.intersection(inner),
            _ => self.intersection(&Filter::DenyList(Box::new(other.clone()))),
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
