//! `nn.tabulate`: a table of a model's module calls — paths, module types,
//! input and output shapes, the variables each module owns per collection
//! with their counts and bytes — and the totals.

use std::cell::RefCell;
use std::fmt;

use indexmap::IndexMap;

use crate::core::{Result, Rngs};
use crate::random::{Key, KeyArray};
use crate::tensor::{Array, LeafRef, Tensor, Tree};

use super::module::Module;

/// How a value shows in `tabulate`'s `inputs` and `outputs` columns, as
/// Flax shows it: arrays as `float32[6,4]`, tuples comma-separated, plain
/// values as themselves.
pub trait Shapes {
    /// The value's description.
    fn shapes(&self) -> String;
}

fn dims(shape: &[usize]) -> String {
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl Shapes for Tensor {
    fn shapes(&self) -> String {
        format!("float32[{}]", dims(self.shape()))
    }
}

impl Shapes for Array {
    fn shapes(&self) -> String {
        format!("{}[{}]", self.dtype(), dims(self.shape()))
    }
}

impl Shapes for Tree {
    fn shapes(&self) -> String {
        let leaves: Vec<String> = self
            .leaf_paths()
            .into_iter()
            .map(|(p, leaf)| match leaf {
                LeafRef::Tensor(t) if p.is_empty() => t.shapes(),
                LeafRef::Array(a) if p.is_empty() => a.shapes(),
                leaf => format!("{p}: {}", leaf.type_name()),
            })
            .collect();
        leaves.join(", ")
    }
}

impl Shapes for Key {
    fn shapes(&self) -> String {
        "key<fry>[]".into()
    }
}

impl Shapes for KeyArray {
    fn shapes(&self) -> String {
        format!("key<fry>[{}]", dims(self.shape()))
    }
}

impl<T: Shapes> Shapes for ndarray::ArrayD<T> {
    fn shapes(&self) -> String {
        format!("array[{}]", dims(self.shape()))
    }
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl Shapes for $t {
            fn shapes(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
plain!(bool, f32, f64, i32, i64, u32, u64, usize);

impl Shapes for () {
    fn shapes(&self) -> String {
        String::new()
    }
}

impl<T: Shapes> Shapes for Option<T> {
    fn shapes(&self) -> String {
        self.as_ref().map_or_else(|| "None".into(), Shapes::shapes)
    }
}

impl<T: Shapes> Shapes for Vec<T> {
    fn shapes(&self) -> String {
        self.iter()
            .map(Shapes::shapes)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl<T: Shapes + ?Sized> Shapes for &T {
    fn shapes(&self) -> String {
        (**self).shapes()
    }
}

macro_rules! tuple {
    ($($n:ident),*) => {
        impl<$($n: Shapes),*> Shapes for ($($n,)*) {
            #[allow(non_snake_case)]
            fn shapes(&self) -> String {
                let ($($n,)*) = self;
                [$($n.shapes()),*]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        }
    };
}
tuple!(A);
tuple!(A, B);
tuple!(A, B, C);
tuple!(A, B, C, D);
tuple!(A, B, C, D, E);
tuple!(A, B, C, D, E, F);

/// One variable of a row: its name, type and size.
#[derive(Clone, Debug, PartialEq)]
pub struct VariableSummary {
    /// The variable's name inside its module (`kernel`).
    pub name: String,
    /// Its type as JAX prints it (`float32[4,8]`).
    pub type_name: String,
    /// Elements.
    pub count: usize,
    /// Bytes.
    pub bytes: usize,
}

/// One module call of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryRow {
    /// The module path (`Dense_0`, `Block_0/Dense_1`; empty for the model).
    pub path: String,
    /// The module's type name.
    pub module: String,
    /// The input, described (see [`Shapes`]; empty when the module does not
    /// describe its input, see [`Module::tabulate_input`]).
    pub inputs: String,
    /// The output, described.
    pub outputs: String,
    /// The variables the module owns directly, per collection.
    pub variables: IndexMap<String, Vec<VariableSummary>>,
}

/// What [`tabulate`] returns: the rows and the collections, printed (with
/// `Display`) as Flax's table.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// The model's type name.
    pub model: String,
    /// The collections, in the order `init` created them.
    pub collections: Vec<String>,
    /// The module calls in the order they ran.
    pub rows: Vec<SummaryRow>,
}

impl Summary {
    /// Elements and bytes of a collection over every row.
    pub fn total(&self, collection: &str) -> (usize, usize) {
        self.rows
            .iter()
            .flat_map(|r| r.variables.get(collection).into_iter().flatten())
            .fold((0, 0), |(c, b), v| (c + v.count, b + v.bytes))
    }
}

/// A recorded call while a table is being made.
struct Call {
    path: Vec<String>,
    module: String,
    inputs: String,
    outputs: String,
}

thread_local! {
    static RECORDING: RefCell<Option<Vec<Call>>> = const { RefCell::new(None) };
}

/// Whether a table is being made on this thread.
pub(crate) fn recording() -> bool {
    RECORDING.with(|r| r.borrow().is_some())
}

/// Records the start of a module call; returns its row.
pub(crate) fn enter(path: &[String], module: &str, inputs: String) -> Option<usize> {
    RECORDING.with(|r| {
        r.borrow_mut().as_mut().map(|calls| {
            calls.push(Call {
                path: path.to_vec(),
                module: module.to_string(),
                inputs,
                outputs: String::new(),
            });
            calls.len() - 1
        })
    })
}

/// Records the output of the call of row `row`.
pub(crate) fn exit(row: usize, outputs: String) {
    RECORDING.with(|r| {
        if let Some(call) = r.borrow_mut().as_mut().and_then(|c| c.get_mut(row)) {
            call.outputs = outputs;
        }
    });
}

/// Stops recording when dropped (also on error or panic).
struct Recording;

impl Recording {
    fn start() -> Recording {
        RECORDING.with(|r| *r.borrow_mut() = Some(Vec::new()));
        Recording
    }

    fn calls(&self) -> Vec<Call> {
        RECORDING.with(|r| r.borrow_mut().replace(Vec::new()).unwrap_or_default())
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        RECORDING.with(|r| *r.borrow_mut() = None);
    }
}

fn leaf_size(leaf: &LeafRef<'_>) -> (usize, usize) {
    match leaf {
        LeafRef::Tensor(t) => (t.size(), 4 * t.size()),
        LeafRef::Array(a) => {
            let n: usize = a.shape().iter().product();
            let per = match a {
                Array::Bool(_) => 1,
                Array::Key { .. } => 8,
                _ => 4,
            };
            (n, n * per)
        }
    }
}

/// `nn.tabulate(model, rngs)(input)`: runs `init` and returns the table of
/// module calls (print it with `{}`).
///
/// ```
/// use flaxen::core::{Result, Scope};
/// use flaxen::nn::{tabulate, Dense, Module};
/// use flaxen::{random, tensor::Tensor};
///
/// struct Mlp;
/// impl Module for Mlp {
///     type Input = Tensor;
///     type Output = Tensor;
///     fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
///         let x = s.call(Dense::new(4), x)?.relu();
///         s.call(Dense::new(1), x)
///     }
/// }
/// let summary = tabulate(&Mlp, random::key(0), Tensor::ones(&[2, 3]))?;
/// assert_eq!(summary.rows[1].path, "Dense_0");
/// assert_eq!(summary.rows[1].outputs, "float32[2,4]");
/// assert_eq!(summary.total("params"), (21, 84));
/// println!("{summary}");
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn tabulate<M>(model: &M, rngs: impl Into<Rngs>, input: M::Input) -> Result<Summary>
where
    M: Module,
    M::Input: Shapes,
    M::Output: Shapes,
{
    let recording = Recording::start();
    let root = enter(&[], model.type_name(), input.shapes()).expect("recording");
    let (output, variables) = model.init_with_output(rngs, input)?;
    exit(root, output.shapes());
    let calls = recording.calls();
    drop(recording);
    let collections: Vec<String> = variables.collection_names().map(String::from).collect();
    let rows = calls
        .into_iter()
        .map(|c| {
            let mut vars = IndexMap::new();
            for name in &collections {
                let Some(tree) = variables
                    .collection(name)
                    .and_then(|t| t.subtree(&c.path.join("/")))
                else {
                    continue;
                };
                let mut own: Vec<VariableSummary> = tree
                    .entries()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(_, t)| t.is_leaf())
                    .map(|(n, t)| {
                        let leaf = t.leaf_paths().into_iter().next().expect("a leaf").1;
                        let (count, bytes) = leaf_size(&leaf);
                        VariableSummary {
                            name: n,
                            type_name: leaf.type_name(),
                            count,
                            bytes,
                        }
                    })
                    .collect();
                own.sort_by(|a, b| a.name.cmp(&b.name));
                if !own.is_empty() {
                    vars.insert(name.clone(), own);
                }
            }
            SummaryRow {
                path: c.path.join("/"),
                module: c.module,
                inputs: c.inputs,
                outputs: c.outputs,
                variables: vars,
            }
        })
        .collect();
    Ok(Summary {
        model: model.type_name().to_string(),
        collections,
        rows,
    })
}

/// `1,234`.
fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `364 B`, `5.2 KB`, as Flax's `_bytes_repr` (powers of 1000).
fn bytes_repr(n: usize) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1000.0 && u + 1 < units.len() {
        x /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{x:.1} {}", units[u])
    }
}

fn count_repr((count, bytes): (usize, usize)) -> String {
    format!("{} ({})", thousands(count), bytes_repr(bytes))
}

impl fmt::Display for Summary {
    /// The table as Flax draws it (with `rich`'s heavy header).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut header = vec![
            "path".to_string(),
            "module".into(),
            "inputs".into(),
            "outputs".into(),
        ];
        header.extend(self.collections.iter().cloned());
        // Each cell is a list of lines.
        let mut body: Vec<Vec<Vec<String>>> = Vec::new();
        for r in &self.rows {
            let mut row = vec![
                vec![r.path.clone()],
                vec![r.module.clone()],
                vec![r.inputs.clone()],
                vec![r.outputs.clone()],
            ];
            for c in &self.collections {
                let cell = match r.variables.get(c) {
                    None => vec![String::new()],
                    Some(vars) => {
                        let mut lines: Vec<String> = vars
                            .iter()
                            .map(|v| format!("{}: {}", v.name, v.type_name))
                            .collect();
                        lines.push(String::new());
                        lines.push(count_repr(
                            vars.iter()
                                .fold((0, 0), |(n, b), v| (n + v.count, b + v.bytes)),
                        ));
                        lines
                    }
                };
                row.push(cell);
            }
            body.push(row);
        }
        let mut total = vec![
            vec![String::new()],
            vec![String::new()],
            vec![String::new()],
            vec!["Total".to_string()],
        ];
        for c in &self.collections {
            total.push(vec![count_repr(self.total(c))]);
        }
        let ncol = header.len();
        let width: Vec<usize> = (0..ncol)
            .map(|i| {
                body.iter()
                    .chain(std::iter::once(&total))
                    .flat_map(|row| row[i].iter())
                    .chain(std::iter::once(&header[i]))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |l: &str, fill: &str, mid: &str, r: &str| -> String {
            let parts: Vec<String> = width.iter().map(|w| fill.repeat(w + 2)).collect();
            format!("{l}{}{r}", parts.join(mid))
        };
        let cells = |f: &mut fmt::Formatter<'_>,
                     row: &[Vec<String>],
                     bar: &str,
                     right_align: usize|
         -> fmt::Result {
            let height = row.iter().map(Vec::len).max().unwrap_or(1);
            for k in 0..height {
                let texts: Vec<String> = row
                    .iter()
                    .enumerate()
                    .map(|(i, cell)| {
                        let s = cell.get(k).map(String::as_str).unwrap_or("");
                        if i == right_align {
                            format!(" {s:>w$} ", w = width[i])
                        } else {
                            format!(" {s:<w$} ", w = width[i])
                        }
                    })
                    .collect();
                writeln!(f, "{bar}{}{bar}", texts.join(bar))?;
            }
            Ok(())
        };
        let full = line("┏", "━", "┳", "┓").chars().count();
        let title = format!("{} Summary", self.model);
        writeln!(f, "{}", format!("{title:^full$}").trim_end())?;
        writeln!(f, "{}", line("┏", "━", "┳", "┓"))?;
        let head: Vec<Vec<String>> = header.iter().map(|h| vec![h.clone()]).collect();
        cells(f, &head, "┃", usize::MAX)?;
        writeln!(f, "{}", line("┡", "━", "╇", "┩"))?;
        for (i, row) in body.iter().enumerate() {
            if i > 0 {
                writeln!(f, "{}", line("├", "─", "┼", "┤"))?;
            }
            cells(f, row, "│", usize::MAX)?;
        }
        writeln!(f, "{}", line("├", "─", "┼", "┤"))?;
        cells(f, &total, "│", 3)?;
        writeln!(f, "{}", line("└", "─", "┴", "┘"))?;
        let all = self
            .collections
            .iter()
            .map(|c| self.total(c))
            .fold((0, 0), |(n, b), (c, by)| (n + c, b + by));
        let caption = format!("Total Parameters: {}", count_repr(all));
        writeln!(f)?;
        write!(f, "{}", format!("{caption:^full$}").trim_end())
    }
}
