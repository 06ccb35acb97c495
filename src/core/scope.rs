//! `Scope`: where a module's variables, RNG streams and call counters live
//! during one `init` or `apply` (Flax's `flax.core.Scope`).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ndarray::ArrayD;

use super::filter::Filter;
use super::rng_hash::{path_hash, PathElement};
use super::rngs::Rngs;
use super::variables::Variables;
use crate::error::{Error, Result};
use crate::init::Initializer;
use crate::random::{self, Key, RandomError};
use crate::tensor::{Leaf, Tensor, Tree};

/// The state one `init`/`apply` call shares between all its scopes.
#[derive(Clone, Debug)]
pub(crate) struct State {
    pub(crate) variables: Variables,
    /// Shared between the items of lifted transforms, which never change it.
    pub(crate) mutable: Arc<Filter>,
    pub(crate) rngs: Rngs,
    /// `make_rng` counters, per scope path and stream; a child's counters
    /// outlive its calls, so calling the same child again continues them.
    pub(crate) counters: HashMap<(Vec<String>, String), u64>,
    pub(crate) initializing: bool,
    /// Inside lifted transforms: the variable groups of each enclosing
    /// transform; a collection is usable only if every level lifted it.
    pub(crate) lifted: Arc<Vec<Vec<Filter>>>,
    /// Named mapped axes of enclosing `vmap`s, innermost last.
    pub(crate) axes: Vec<super::lift::AxisContext>,
    /// RNG streams an enclosing transform did not take (not in its
    /// `split_rngs`): stream, transform, the transform's module path.
    pub(crate) hidden_streams: Arc<Vec<(String, &'static str, String)>>,
    /// How many leading path elements `make_rng` leaves out of its hash:
    /// inside a jitted module (`nn.jit`) the streams are keys forked at
    /// the module's own path, from which the body's keys hang as if the
    /// module were the root (0 elsewhere).
    pub(crate) rng_root: usize,
}

impl State {
    pub(crate) fn new(
        variables: Variables,
        rngs: Rngs,
        mutable: Arc<Filter>,
        initializing: bool,
    ) -> State {
        State {
            variables,
            mutable,
            rngs,
            counters: HashMap::new(),
            initializing,
            lifted: Arc::default(),
            axes: Vec::new(),
            hidden_streams: Arc::default(),
            rng_root: 0,
        }
    }

    /// Whether an enclosing lifted transform left `collection` out.
    pub(crate) fn not_lifted(&self, collection: &str) -> bool {
        !self
            .lifted
            .iter()
            .all(|groups| groups.iter().any(|g| g.matches(collection)))
    }

    /// Whether `collection` may be written: mutable in this call, and
    /// lifted into every enclosing transform.
    pub(crate) fn writable(&self, collection: &str) -> bool {
        self.mutable.matches(collection)
            && self
                .lifted
                .iter()
                .all(|groups| groups.iter().any(|g| g.matches(collection)))
    }
}

/// Names given out inside one call of one module: auto-name counters per
/// type, and every name taken (Flax resets these at each call, which is
/// what makes a module called twice find the same submodules).
#[derive(Debug, Default)]
struct Frame {
    type_counts: HashMap<String, usize>,
    /// Each name taken, with the collections it was taken in (`None`: a
    /// submodule), as Flax's `Scope.reservations`.
    reservations: HashMap<String, HashSet<Option<String>>>,
    /// The type of the module running in this scope, for messages.
    module_type: Option<&'static str>,
}

/// A module's view of the variables and RNG streams of the running
/// `init`/`apply`: its path, and the methods of Flax's `Module`/`Scope`
/// (`make_rng`, `param`, `variable`, ...).
///
/// A scope exists only while `init` or `apply` runs: only they create one,
/// and a module receives it as an argument of `call`. So Flax's error "can
/// only call make_rng on a bound module" cannot happen in flaxen — calling
/// `make_rng` or `param` outside `init`/`apply` does not compile:
///
/// ```compile_fail
/// use flaxen::core::Scope;
/// // There is no way to make a scope outside init/apply.
/// let scope = Scope::root();
/// let key = scope.make_rng("params");
/// ```
///
/// and a scope cannot escape the call that lent it:
///
/// ```compile_fail
/// use flaxen::core::{Result, Scope};
/// use flaxen::nn::Module;
///
/// struct Leak;
/// impl Module for Leak {
///     type Input = ();
///     type Output = &'static Scope<'static>;
///     fn call(&self, s: &Scope<'_>, _: ()) -> Result<&'static Scope<'static>> {
///         Ok(s) // borrowed for the call only
///     }
/// }
/// ```
pub struct Scope<'s> {
    state: &'s RefCell<State>,
    path: Vec<String>,
    frame: RefCell<Frame>,
}

/// A handle on one variable (`self.variable(...)` in Flax): read it with
/// [`Variable::value`], write it with [`Variable::set`].
pub struct Variable<'a, 's, T = Tensor> {
    scope: &'a Scope<'s>,
    collection: String,
    name: String,
    kind: std::marker::PhantomData<T>,
}

/// Anything that can initialize a parameter: an [`Initializer`], or a
/// function of a key and a shape such as [`random::normal`].
pub trait ParamInit {
    /// Draws the initial value.
    fn init_param(
        &self,
        key: Key,
        shape: &[usize],
    ) -> std::result::Result<ArrayD<f32>, RandomError>;
}

impl ParamInit for Initializer {
    fn init_param(
        &self,
        key: Key,
        shape: &[usize],
    ) -> std::result::Result<ArrayD<f32>, RandomError> {
        self.init(key, shape)
    }
}

impl ParamInit for &Initializer {
    fn init_param(
        &self,
        key: Key,
        shape: &[usize],
    ) -> std::result::Result<ArrayD<f32>, RandomError> {
        self.init(key, shape)
    }
}

impl<F> ParamInit for F
where
    F: Fn(Key, &[usize]) -> std::result::Result<ArrayD<f32>, RandomError>,
{
    fn init_param(
        &self,
        key: Key,
        shape: &[usize],
    ) -> std::result::Result<ArrayD<f32>, RandomError> {
        self(key, shape)
    }
}

impl<'s> Scope<'s> {
    /// The root scope of a call.
    pub(crate) fn root(state: &'s RefCell<State>) -> Scope<'s> {
        Scope {
            state,
            path: Vec::new(),
            frame: RefCell::default(),
        }
    }

    /// A scope at `path` on another call's state (for lifted transforms).
    pub(crate) fn at(state: &'s RefCell<State>, path: Vec<String>) -> Scope<'s> {
        Scope {
            state,
            path,
            frame: RefCell::default(),
        }
    }

    /// The shared state of this call.
    pub(crate) fn state(&self) -> &'s RefCell<State> {
        self.state
    }

    /// A child scope named `name` (a fresh call frame).
    pub(crate) fn push(&self, name: &str) -> Scope<'s> {
        let mut path = self.path.clone();
        path.push(name.to_string());
        Scope {
            state: self.state,
            path,
            frame: RefCell::default(),
        }
    }

    /// Records the type of the module that runs in this scope (named in
    /// messages such as "Could not create param ... in Module Dense").
    pub(crate) fn set_module_type(&self, type_name: &'static str) {
        self.frame.borrow_mut().module_type = Some(type_name);
    }

    /// The module path: the names from the root (empty for the root).
    pub fn path(&self) -> &[String] {
        &self.path
    }

    /// The path as Flax prints it: `/` for the root, `/Dense_0/inner` below.
    pub fn path_text(&self) -> String {
        format!("/{}", self.path.join("/"))
    }

    /// Whether this call is `init` (Flax's `is_initializing`).
    pub fn is_initializing(&self) -> bool {
        self.state.borrow().initializing
    }

    /// Whether `collection` may be written in this call.
    pub fn is_mutable_collection(&self, collection: &str) -> bool {
        self.state.borrow().writable(collection)
    }

    /// Whether a seed was given for RNG stream `stream`.
    pub fn has_rng(&self, stream: &str) -> bool {
        self.state.borrow().rngs.contains(stream)
    }

    /// A fresh key from RNG stream `stream` (Flax's `make_rng`): the scope's
    /// call counter for the stream is incremented, then
    /// `hash(path..., count)` is folded into the stream's seed. A stream
    /// without a seed falls back to `params`.
    pub fn make_rng(&self, stream: &str) -> Result<Key> {
        let mut st = self.state.borrow_mut();
        let name = if st.rngs.contains(stream) {
            stream
        } else if st.rngs.contains("params") {
            "params"
        } else if let Some((_, transform, at)) =
            st.hidden_streams.iter().find(|(name, ..)| name == stream)
        {
            return Err(Error::Lift {
                path: self.path_text(),
                transform,
                message: format!(
                    "make_rng(\"{stream}\"): the {transform} at {at} does not pass RNG stream \
                     \"{stream}\" in; add it to its split_rngs (true to split it per item, \
                     false to share it)"
                ),
            });
        } else {
            return Err(Error::MissingRng {
                path: self.path_text(),
                stream: stream.to_string(),
                available: st.rngs.names().map(str::to_string).collect(),
            });
        };
        let counter = st
            .counters
            .entry((self.path.clone(), name.to_string()))
            .or_insert(0);
        *counter += 1;
        let count = *counter;
        let separator = st.rngs.separator_flag();
        let seed = random::clone(&st.rngs.streams[name]);
        let relative = &self.path[st.rng_root.min(self.path.len())..];
        let mut data: Vec<PathElement<'_>> = relative.iter().map(|s| s.as_str().into()).collect();
        data.push(count.into());
        let hash = path_hash(&data, separator);
        let derived = random::fold_in(seed.clone(), hash);
        // A compiled step with keys learns how to derive this key again.
        crate::tensor::sampled::note_derived(&seed, hash, &derived);
        Ok(derived)
    }

    /// `make_rng()` with Flax's default stream, `params`.
    pub fn make_rng_default(&self) -> Result<Key> {
        self.make_rng("params")
    }

    /// The full path of a variable inside its collection's tree.
    fn var_path(&self, name: &str) -> String {
        let mut p = self.path.join("/");
        if !p.is_empty() {
            p.push('/');
        }
        p.push_str(name);
        p
    }

    /// Whether variable `name` exists in `collection` for this module.
    pub fn has_variable(&self, collection: &str, name: &str) -> bool {
        self.get_tree(collection, name).is_some()
    }

    /// The stored value (a tensor, an array or a tree) of variable `name`.
    fn get_tree(&self, collection: &str, name: &str) -> Option<Tree> {
        let st = self.state.borrow();
        st.variables
            .collection(collection)?
            .subtree(&self.var_path(name))
    }

    /// The value of variable `name` in `collection` as a `T` (a [`Tensor`]
    /// or an [`Array`](crate::tensor::Array)), if it exists and is one.
    ///
    /// ```
    /// use flaxen::core;
    /// use flaxen::random;
    /// use flaxen::tensor::Array;
    /// use ndarray::arr0;
    ///
    /// let (_, v) = core::init(random::key(0), |s| {
    ///     s.variable("counter", "count", || Ok(Array::from(arr0(0i32).into_dyn())))?;
    ///     let count: Option<Array> = s.get_value("counter", "count");
    ///     assert_eq!(count.unwrap().to_string(), "0");
    ///     Ok(())
    /// })?;
    /// # Ok::<(), flaxen::Error>(())
    /// ```
    pub fn get_value<T: Leaf>(&self, collection: &str, name: &str) -> Option<T> {
        T::from_tree(&self.get_tree(collection, name)?)
    }

    /// The value of variable `name` in `collection`, if it exists.
    pub fn get_variable(&self, collection: &str, name: &str) -> Option<Tensor> {
        let st = self.state.borrow();
        st.variables
            .collection(collection)?
            .tensor(&self.var_path(name))
            .ok()
            .cloned()
    }

    /// Sets variable `name` of `collection` (Flax's `put_variable`); the
    /// collection must be mutable.
    ///
    /// `value` is a [`Tensor`] or an [`Array`](crate::tensor::Array); an
    /// existing variable keeps its kind (writing an array over a tensor is
    /// [`Error::VariableType`]).
    pub fn put_variable(&self, collection: &str, name: &str, value: impl Leaf) -> Result<()> {
        self.check_name("variable", name)?;
        if let Some(old) = self.get_tree(collection, name) {
            let new = value.clone().into();
            if old.is_leaf() && (old.as_tensor().is_some() != new.as_tensor().is_some()) {
                return Err(self.type_error(collection, name, &old, value.kind()));
            }
            return self.put_tree(collection, name, new);
        }
        self.put_tree(collection, name, value.into())
    }

    /// The error for variable `name` holding `found` where a `wanted` is
    /// asked for.
    fn type_error(
        &self,
        collection: &str,
        name: &str,
        found: &Tree,
        wanted: &'static str,
    ) -> Error {
        let found = match (found.as_tensor(), found.as_array()) {
            (Some(_), _) => Tensor::KIND,
            (_, Some(a)) => a.dtype(),
            _ => "tree",
        };
        Error::VariableType {
            path: self.path_text(),
            collection: collection.to_string(),
            name: name.to_string(),
            expected: wanted,
            found,
        }
    }

    /// Sets variable `name` of `collection` to a tree (see
    /// [`Scope::param_tree`]); the collection must be mutable.
    fn put_tree(&self, collection: &str, name: &str, value: Tree) -> Result<()> {
        let mut st = self.state.borrow_mut();
        if st.not_lifted(collection) {
            return Err(not_lifted(self, collection));
        }
        if !st.writable(collection) {
            return Err(Error::ImmutableCollection {
                path: self.path_text(),
                collection: collection.to_string(),
                name: name.to_string(),
            });
        }
        let mut path: Vec<&str> = self.path.iter().map(String::as_str).collect();
        path.push(name);
        crate::tensor::batched::note_written(collection, &value);
        let tree = st.variables.collection_mut(collection);
        put_at(tree, &path, value).map_err(|_| Error::Config {
            path: self.path_text(),
            message: format!(
                "collection \"{collection}\" holds a value where module {} keeps its variables",
                self.path_text()
            ),
        })
    }

    /// A parameter (Flax's `self.param(name, init_fn, shape)`): during
    /// `init` it is created in `params` from `make_rng("params")` (which
    /// consumes a count even for constant initializers, as in Flax); during
    /// `apply` the stored value is returned after checking its shape.
    pub fn param(&self, name: &str, init: impl ParamInit, shape: &[usize]) -> Result<Tensor> {
        self.reserve_as("param", name, Some("params"))?;
        if let Some(value) = self.get_variable("params", name) {
            if value.shape() != shape {
                return Err(Error::ShapeMismatch {
                    path: self.path_text(),
                    collection: "params".to_string(),
                    name: name.to_string(),
                    expected: shape.to_vec(),
                    found: value.shape().to_vec(),
                });
            }
            return Ok(value);
        }
        self.check_creatable("params", name)?;
        let key = self.make_rng("params")?;
        let value = init
            .init_param(key, shape)
            .map_err(|e| Error::from(e).at(&self.path_text()))?;
        let value = Tensor::from_array(value);
        self.put_variable("params", name, value.clone())?;
        Ok(value)
    }

    /// A parameter whose initializer returns a whole tree (Flax's
    /// `self.param(name, init_fn)` with an `init_fn` that returns a pytree,
    /// as the lifting note's `ManualVmapMLP` does with the parameters of a
    /// separately initialized module). During `init`, `init` receives
    /// `make_rng("params")` and its tree is stored under `params/.../name`;
    /// during `apply` the stored tree is returned. Unlike [`Scope::param`]
    /// no shape is checked on `apply` (there is no shape to compare without
    /// running `init`).
    ///
    /// ```
    /// use flaxen::core::{self, Variables};
    /// use flaxen::random;
    /// use flaxen::tensor::{Tensor, Tree};
    ///
    /// let (tree, v) = core::init(random::key(0), |s| {
    ///     s.param_tree("pair", |_key| {
    ///         Ok(Tree::new()
    ///             .with("a", Tensor::zeros(&[2]))
    ///             .with("b", Tensor::ones(&[3])))
    ///     })
    /// })?;
    /// assert_eq!(v.tensor("params/pair/b").unwrap().shape(), &[3]);
    /// assert_eq!(tree.keys(), ["a", "b"]);
    /// # Ok::<(), flaxen::core::Error>(())
    /// ```
    pub fn param_tree(&self, name: &str, init: impl FnOnce(Key) -> Result<Tree>) -> Result<Tree> {
        self.reserve_as("param", name, Some("params"))?;
        let stored = {
            let st = self.state.borrow();
            st.variables
                .collection("params")
                .and_then(|t| t.subtree(&self.var_path(name)))
        };
        if let Some(tree) = stored {
            return Ok(tree);
        }
        self.check_creatable("params", name)?;
        let key = self.make_rng("params")?;
        let value = init(key).map_err(|e| e.at(&self.path_text()))?;
        self.put_tree("params", name, value.clone())?;
        Ok(value)
    }

    /// A variable in any collection (Flax's `self.variable(collection,
    /// name, init_fn)`): `init` runs only when the variable does not exist
    /// yet and the collection is mutable.
    ///
    /// The value is a [`Tensor`] or any [`Array`](crate::tensor::Array)
    /// (a step counter, a key): its type follows `init`'s.
    ///
    /// ```
    /// use flaxen::core::{self, Variable};
    /// use flaxen::tensor::Array;
    /// use flaxen::random;
    /// use ndarray::arr0;
    ///
    /// let (_, v) = core::init(random::key(0), |s| {
    ///     let count: Variable<'_, '_, Array> =
    ///         s.variable("counter", "count", || Ok(Array::from(arr0(0i32).into_dyn())))?;
    ///     let next = count.value().as_i32().unwrap().map(|c| c + 1);
    ///     count.set(Array::from(next))
    /// })?;
    /// assert_eq!(v.array("counter/count").unwrap().repr(), "Array(1, dtype=int32)");
    /// # Ok::<(), flaxen::Error>(())
    /// ```
    pub fn variable<'a, T: Leaf>(
        &'a self,
        collection: &str,
        name: &str,
        init: impl FnOnce() -> Result<T>,
    ) -> Result<Variable<'a, 's, T>> {
        self.reserve_as("variable", name, Some(collection))?;
        match self.get_tree(collection, name) {
            Some(stored) if T::from_tree(&stored).is_none() => {
                return Err(self.type_error(collection, name, &stored, T::KIND));
            }
            Some(_) => {}
            None => {
                self.check_creatable(collection, name)?;
                let value = init().map_err(|e| e.at(&self.path_text()))?;
                self.put_variable(collection, name, value)?;
            }
        }
        Ok(Variable {
            scope: self,
            collection: collection.to_string(),
            name: name.to_string(),
            kind: std::marker::PhantomData,
        })
    }

    /// Whether variable `name`, which does not exist, may be created here:
    /// its collection must be lifted into every enclosing transform and
    /// mutable (else it is missing).
    fn check_creatable(&self, collection: &str, name: &str) -> Result<()> {
        if self.state.borrow().not_lifted(collection) {
            return Err(not_lifted(self, collection));
        }
        if !self.is_mutable_collection(collection) {
            return Err(Error::MissingVariable {
                path: self.path_text(),
                collection: collection.to_string(),
                name: name.to_string(),
            });
        }
        Ok(())
    }

    /// Names are path elements: an empty one, or one holding the path
    /// separator, would alias another variable or not be found again.
    fn check_name(&self, kind: &'static str, name: &str) -> Result<()> {
        if name.is_empty() || name.contains('/') {
            return Err(Error::InvalidName {
                path: self.path_text(),
                kind,
                name: name.to_string(),
            });
        }
        Ok(())
    }

    /// Reserves a submodule name in this call, or says it is taken.
    pub(crate) fn reserve(&self, name: &str) -> Result<()> {
        self.reserve_as("submodule", name, None)
    }

    /// Reserves `name` for a `kind` (`param`, `variable`, `submodule`) in
    /// `collection` (`None` for a submodule) as Flax's `Scope.reserve`: a
    /// name is taken when a submodule holds it, or when a submodule asks
    /// for it, or when the same collection holds it.
    fn reserve_as(&self, kind: &'static str, name: &str, collection: Option<&str>) -> Result<()> {
        self.check_name(kind, name)?;
        let mut frame = self.frame.borrow_mut();
        let module_type = frame.module_type;
        let taken = frame.reservations.entry(name.to_string()).or_default();
        let collection = collection.map(str::to_string);
        let in_use = taken.contains(&None) || collection.is_none() && !taken.is_empty();
        if in_use || !taken.insert(collection) {
            return Err(Error::NameInUse {
                path: self.path_text(),
                kind,
                name: name.to_string(),
                module: module_type.map_or_else(|| self.path_text(), str::to_string),
            });
        }
        Ok(())
    }

    /// The next auto-name for a submodule of type `type_name`:
    /// `{type_name}_{n}`, `n` counted per type in this call.
    pub(crate) fn auto_name(&self, type_name: &str) -> String {
        let mut frame = self.frame.borrow_mut();
        let n = frame.type_counts.entry(type_name.to_string()).or_insert(0);
        let name = format!("{type_name}_{n}");
        *n += 1;
        name
    }
}

/// The error for a collection that an enclosing transform did not lift.
fn not_lifted(scope: &Scope<'_>, collection: &str) -> Error {
    Error::Lift {
        path: scope.path_text(),
        transform: "lift",
        message: format!(
            "collection \"{collection}\" is not lifted into the enclosing transform; \
             name it in variable_axes (or variable_broadcast / variable_carry)"
        ),
    }
}

/// Sets `value` at `path` inside `tree`, creating maps along the way; fails
/// where a tensor stands on the path.
pub(crate) fn put_at(tree: &mut Tree, path: &[&str], value: Tree) -> std::result::Result<(), ()> {
    match path {
        [] => Err(()),
        [last] => tree.insert(*last, value).map(|_| ()).map_err(|_| ()),
        [first, rest @ ..] => {
            let mut child = tree.subtree(first).unwrap_or_default();
            if child.is_leaf() {
                return Err(());
            }
            put_at(&mut child, rest, value)?;
            tree.insert(*first, child).map(|_| ()).map_err(|_| ())
        }
    }
}

impl<T: Leaf> Variable<'_, '_, T> {
    /// The current value (`.value` in Flax).
    pub fn value(&self) -> T {
        // The handle was made for a stored `T`, and `put_variable` keeps a
        // variable's kind, so the value is there and is a `T`.
        self.scope
            .get_value(&self.collection, &self.name)
            .expect("a variable handle exists only for an existing variable of its kind")
    }

    /// Writes a new value (`.value = ...` in Flax); the collection must be
    /// mutable.
    pub fn set(&self, value: T) -> Result<()> {
        self.scope.put_variable(&self.collection, &self.name, value)
    }

    /// The variable's collection.
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// The variable's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
