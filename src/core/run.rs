//! `init` and `apply` on the functional core (`flax.core.init` /
//! `flax.core.apply`): run a function of a root scope.

use std::cell::RefCell;
use std::sync::Arc;

use super::filter::Filter;
use super::rngs::Rngs;
use super::scope::{Scope, State};
use super::variables::Variables;
use crate::error::{Error, Result};

/// Runs `f` on a fresh root scope with every collection mutable, returning
/// its output and all the variables it created (`flax.core.init(fn)`).
///
/// ```
/// use flaxen::core::{self, Scope};
/// use flaxen::{init, random};
///
/// let (w, variables) = core::init(random::key(0), |s: &Scope<'_>| {
///     s.param("w", init::lecun_normal(), &[3, 2])
/// })?;
/// assert_eq!(variables.tensor("params/w").unwrap().shape(), w.shape());
/// # Ok::<(), flaxen::core::Error>(())
/// ```
pub fn init<T>(
    rngs: impl Into<Rngs>,
    f: impl FnOnce(&Scope<'_>) -> Result<T>,
) -> Result<(T, Variables)> {
    let state = RefCell::new(State::new(
        Variables::new(),
        rngs.into(),
        Arc::new(Filter::All),
        true,
    ));
    let _stale = crate::tensor::check_nans();
    let out = f(&Scope::root(&state)).map_err(|e| e.at("/"))?;
    crate::tensor::check_nans()?;
    Ok((out, state.into_inner().variables))
}

/// Runs `f` on a root scope holding `variables`, with the collections
/// selected by `mutable` writable, returning its output and the updated
/// mutable collections (`flax.core.apply(fn, mutable=...)`). The caller's
/// variables are never changed.
pub fn apply<T>(
    variables: &Variables,
    rngs: impl Into<Rngs>,
    mutable: impl Into<Filter>,
    f: impl FnOnce(&Scope<'_>) -> Result<T>,
) -> Result<(T, Variables)> {
    // An extra `params` level is a common slip (passing `{'params':
    // variables}` for variables); Flax refuses it up front.
    let extra_layer = variables
        .collection("params")
        .is_some_and(|params| params.subtree("params").is_some());
    if extra_layer {
        return Err(Error::ExtraParamsLayer);
    }
    let mutable = mutable.into();
    let state = RefCell::new(State::new(
        variables.clone(),
        rngs.into(),
        Arc::new(mutable.clone()),
        false,
    ));
    let _stale = crate::tensor::check_nans();
    let out = f(&Scope::root(&state)).map_err(|e| e.at("/"))?;
    crate::tensor::check_nans()?;
    let updated = state
        .into_inner()
        .variables
        .iter()
        .filter(|(name, _)| mutable.matches(name))
        .map(|(name, tree)| (name.to_string(), tree.clone()))
        .collect();
    Ok((out, updated))
}
