//! What a `scan` carries from step to step: any nesting of tensors,
//! arrays, trees, tuples, `Vec`s, maps and plain values, whose structure,
//! shapes and dtypes must stay the same from step to step (JAX: "carry
//! input and carry output must have equal types").

use std::collections::BTreeMap;

use crate::tensor::{Array, LeafRef, Tensor, Tree};

/// A value a `Scan` threads through its steps.
///
/// [`Carry::carry_types`] lists the type of every leaf; a step whose output
/// carry lists other types than its input carry is an error naming the
/// first leaf that differs.
pub trait Carry: Clone {
    /// Appends `(path, type)` for every leaf, the path as JAX prints key
    /// paths under `path` (`carry[0]['h']`), the type as JAX prints it
    /// (`float32[3]`; Rust values by their type name).
    fn carry_types(&self, path: &str, out: &mut Vec<(String, String)>);
}

impl Carry for Tensor {
    fn carry_types(&self, path: &str, out: &mut Vec<(String, String)>) {
        out.push((path.to_string(), LeafRef::Tensor(self).type_name()));
    }
}

impl Carry for Array {
    fn carry_types(&self, path: &str, out: &mut Vec<(String, String)>) {
        out.push((path.to_string(), LeafRef::Array(self).type_name()));
    }
}

impl Carry for Tree {
    fn carry_types(&self, path: &str, out: &mut Vec<(String, String)>) {
        // The keys are part of the type, even for a tree without leaves.
        out.push((path.to_string(), format!("tree{:?}", self.keys())));
        for (p, leaf) in self.leaf_paths() {
            let key: String = p
                .split('/')
                .filter(|s| !s.is_empty())
                .map(|s| format!("['{s}']"))
                .collect();
            out.push((format!("{path}{key}"), leaf.type_name()));
        }
    }
}

impl<T: Carry> Carry for Vec<T> {
    fn carry_types(&self, path: &str, out: &mut Vec<(String, String)>) {
        out.push((path.to_string(), format!("list of {}", self.len())));
        for (k, x) in self.iter().enumerate() {
            x.carry_types(&format!("{path}[{k}]"), out);
        }
    }
}

impl<T: Carry> Carry for BTreeMap<String, T> {
    fn carry_types(&self, path: &str, out: &mut Vec<(String, String)>) {
        out.push((
            path.to_string(),
            format!("dict{:?}", self.keys().collect::<Vec<_>>()),
        ));
        for (k, x) in self {
            x.carry_types(&format!("{path}['{k}']"), out);
        }
    }
}

impl<T: Carry> Carry for Option<T> {
    fn carry_types(&self, path: &str, out: &mut Vec<(String, String)>) {
        match self {
            None => out.push((path.to_string(), "None".to_string())),
            Some(x) => x.carry_types(path, out),
        }
    }
}

macro_rules! plain_carry {
    ($($t:ty),*) => {$(
        impl Carry for $t {
            fn carry_types(&self, path: &str, out: &mut Vec<(String, String)>) {
                out.push((path.to_string(), stringify!($t).to_string()));
            }
        }
    )*};
}
plain_carry!((), bool, i32, i64, u32, u64, usize, f32, f64);

macro_rules! tuple_carry {
    ($(($($name:ident : $idx:tt),+)),*) => {$(
        impl<$($name: Carry),+> Carry for ($($name,)+) {
            fn carry_types(&self, path: &str, out: &mut Vec<(String, String)>) {
                $(self.$idx.carry_types(&format!("{path}[{}]", $idx), out);)+
            }
        }
    )*};
}
tuple_carry!((A: 0), (A: 0, B: 1), (A: 0, B: 1, C: 2), (A: 0, B: 1, C: 2, D: 3));

/// JAX 0.10.2's error for a step of `transform` (`"scan"`,
/// `"while_loop"`) whose output carry differs from its input carry (whose
/// [`Carry::carry_types`] under `"carry"` are `a`), naming the first leaf
/// that differs; `None` when they agree.
pub(crate) fn carry_mismatch<C: Carry>(
    transform: &str,
    a: &[(String, String)],
    output: &C,
) -> Option<String> {
    let mut b = Vec::new();
    output.carry_types("carry", &mut b);
    if a == b {
        return None;
    }
    let detail = match a.iter().zip(&b).find(|(x, y)| x != y) {
        Some(((pa, ta), (pb, tb))) if pa == pb => format!(
            // JAX: "component" only for a leaf inside the carry.
            "the input carry {}{pa} has type {ta} but the corresponding output carry \
             component has type {tb}{}",
            if pa == "carry" { "" } else { "component " },
            what_differs(ta, tb)
        ),
        Some(((pa, ta), (pb, tb))) => format!(
            "the input carry has {pa} of type {ta} where the output carry has {pb} of type {tb}"
        ),
        None => format!(
            "the input carry has {} leaves, the output carry {}",
            a.len(),
            b.len()
        ),
    };
    Some(format!(
        "{transform} body function carry input and carry output must have equal types, but \
         they differ: {detail}"
    ))
}

/// JAX's `aval_mismatch_extra` for two types written `float32[2,3]`:
/// `", so the dtypes do not match"`, `", so the shapes do not match"`,
/// both, or nothing.
fn what_differs(a: &str, b: &str) -> String {
    let split = |t: &str| {
        t.split_once('[')
            .map_or((t.to_owned(), String::new()), |(d, s)| {
                (d.to_owned(), s.to_owned())
            })
    };
    let ((da, sa), (db, sb)) = (split(a), split(b));
    match (da != db, sa != sb) {
        (true, true) => ", so the dtypes do not match, and the shapes do not match".into(),
        (true, false) => ", so the dtypes do not match".into(),
        (false, true) => ", so the shapes do not match".into(),
        (false, false) => String::new(),
    }
}
