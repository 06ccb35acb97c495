//! `nn.jit`'s options: which arguments are static (`static_argnums`) and
//! which methods are compiled (`methods`), checked as typed errors; and
//! the compiled programs of each method.

use std::any::Any;
use std::sync::{Arc, Mutex};

use crate::core::lift::JitCache;
use crate::core::{Error, Result};
use crate::tensor::Tensors;

/// Flax's name for `call`.
pub(super) const CALL: &str = "__call__";

/// What `Jit::static_argnums` and `Jit::methods` set.
#[derive(Clone, Debug, Default)]
pub(super) struct JitOptions {
    /// `None`: every argument that holds no tensor is static (flaxen's
    /// default, as Rust's types tell values from tensors); `Some`: Flax's
    /// `static_argnums`, `self` being argument 0.
    pub(super) static_argnums: Option<Vec<usize>>,
    /// The compiled methods (`None`: `__call__` only, as Flax).
    pub(super) methods: Option<Vec<String>>,
    /// Methods with static arguments of their own (Flax's `methods` as a
    /// dict), before `static_argnums`.
    pub(super) method_argnums: Vec<(String, Vec<usize>)>,
}

fn jit_error(path: String, message: String) -> Error {
    Error::Lift {
        path,
        transform: "jit",
        message,
    }
}

impl JitOptions {
    /// Whether method `name` is compiled.
    pub(super) fn jits(&self, name: &str) -> bool {
        match &self.methods {
            None => name == CALL,
            Some(names) => names.iter().any(|n| n == name),
        }
    }

    /// Method `name`'s static arguments, if any were set.
    fn argnums(&self, name: &str) -> Option<&[usize]> {
        self.method_argnums
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| &a[..])
            .or(self.static_argnums.as_deref())
    }

    /// Method `name` compiled with static arguments `argnums` of its own.
    pub(super) fn with_method_argnums(
        self,
        type_name: &str,
        known: &[&str],
        name: String,
        argnums: Vec<usize>,
    ) -> Result<JitOptions> {
        let mut names = self.methods.clone().unwrap_or_default();
        if !names.contains(&name) {
            names.push(name.clone());
        }
        let mut options = self.with_methods(type_name, known, names)?;
        options.method_argnums.retain(|(n, _)| *n != name);
        options.method_argnums.push((name, argnums));
        Ok(options)
    }

    /// `names` checked against the module's methods (`type_name` and
    /// `known`, besides `__call__`): Flax raises for a method the class
    /// does not have.
    pub(super) fn with_methods(
        mut self,
        type_name: &str,
        known: &[&str],
        names: Vec<String>,
    ) -> Result<JitOptions> {
        for name in &names {
            if name != CALL && !known.contains(&name.as_str()) {
                let mut all = vec![CALL];
                all.extend_from_slice(known);
                return Err(jit_error(
                    String::new(),
                    format!(
                        "methods names {name:?}, which {type_name} does not have \
                         (its methods: {}; see Module::method_names)",
                        all.join(", ")
                    ),
                ));
            }
        }
        self.methods = Some(names);
        Ok(self)
    }

    /// Checks a call of method `method` with `input` against
    /// `static_argnums`: every index names a positional argument (1 to
    /// their number; 0 is `self`, as Flax ignores it), static arguments
    /// hold no tensor (JAX hashes them, and arrays are not hashable), and
    /// the other arguments hold no value JAX could not trace.
    pub(super) fn check_arguments<I: Tensors>(
        &self,
        path: &str,
        method: &str,
        input: &I,
    ) -> Result<()> {
        let Some(argnums) = self.argnums(method) else {
            return Ok(());
        };
        let args = input.positional_arguments();
        let error = |message: String| Err(jit_error(path.to_string(), message));
        for &i in argnums.iter().filter(|&&i| i > 0) {
            let Some(&(tensors, _)) = args.get(i - 1) else {
                return error(format!(
                    "static_argnums names argument {i} of {method}, which takes {} \
                     positional argument(s) after self",
                    args.len()
                ));
            };
            if tensors > 0 {
                return error(format!(
                    "static argument {i} of {method} holds {tensors} tensor(s): static \
                     arguments are part of the compile cache key, and arrays are not \
                     hashable"
                ));
            }
        }
        for (j, &(_, statics)) in args.iter().enumerate() {
            if statics && !argnums.contains(&(j + 1)) {
                return error(format!(
                    "argument {} of {method} holds values that are not tensors (flags, \
                     sizes) but is not in static_argnums {argnums:?}: a compiled \
                     function cannot trace them; mark it static",
                    j + 1
                ));
            }
        }
        Ok(())
    }
}

/// One method's compiled programs, whatever its output type.
pub(super) trait MethodCache: Send + Sync {
    fn counts(&self) -> (usize, usize);
    fn eager_reasons(&self) -> Vec<String>;
    fn as_any(&self) -> &dyn Any;
}

impl<O: Send + 'static> MethodCache for JitCache<O> {
    fn counts(&self) -> (usize, usize) {
        JitCache::counts(self)
    }

    fn eager_reasons(&self) -> Vec<String> {
        JitCache::eager_reasons(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The compiled programs of a jitted module's methods other than
/// `__call__`, by name (shared by the module's clones).
#[derive(Default)]
pub(super) struct MethodCaches {
    caches: Mutex<Vec<(&'static str, Arc<dyn MethodCache>)>>,
}

impl MethodCaches {
    /// Method `name`'s programs (made on first use).
    pub(super) fn get<O: Send + 'static>(&self, name: &'static str) -> Arc<dyn MethodCache> {
        let mut caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = caches.iter().find(|(n, _)| *n == name) {
            return Arc::clone(c);
        }
        let cache: Arc<dyn MethodCache> = Arc::new(JitCache::<O>::default());
        caches.push((name, Arc::clone(&cache)));
        cache
    }

    /// Method `name`'s programs, if it was called.
    pub(super) fn find(&self, name: &str) -> Option<Arc<dyn MethodCache>> {
        let caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
        caches
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| Arc::clone(c))
    }

    /// Every method's programs.
    pub(super) fn all(&self) -> Vec<Arc<dyn MethodCache>> {
        let caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
        caches.iter().map(|(_, c)| Arc::clone(c)).collect()
    }
}
