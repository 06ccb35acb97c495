//! A scan body's parameters as eager JAX's scan sees them: constants whose
//! cotangents accumulate from `+0` (see `Tensor::scan_const`).

use super::scope::{put_at, Scope};
use crate::error::Result;
use crate::tensor::{in_compiled_region, Tree};

impl Scope<'_> {
    /// Runs `body` with the parameters under this scope's child `child`
    /// replaced by scan constants (`Tensor::scan_const`), then puts the
    /// originals back. Only an eager scan's backward pass adds the `+0`:
    /// inside a compiled region, while initializing, with `params`
    /// writable or nothing traced, `body` sees the parameters as they are.
    pub(crate) fn with_scan_consts<T>(
        &self,
        child: &str,
        body: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let mut path: Vec<&str> = self.path().iter().map(String::as_str).collect();
        path.push(child);
        let original = {
            let st = self.state().borrow();
            if in_compiled_region() || st.initializing || st.writable("params") {
                None
            } else {
                st.variables
                    .collection("params")
                    .and_then(|c| c.subtree(&path.join("/")))
                    .filter(|t| t.leaves().iter().any(|l| l.is_traced()))
            }
        };
        let Some(original) = original else {
            return body();
        };
        let consts: Tree = crate::tensor::tree_map(&original, |t| {
            if t.is_traced() {
                t.scan_const()
            } else {
                t.clone()
            }
        });
        let put = |tree: Tree| {
            let mut st = self.state().borrow_mut();
            put_at(st.variables.collection_mut("params"), &path, tree)
                .expect("the subtree was read at this path");
        };
        put(consts);
        let out = body();
        put(original);
        out
    }
}
