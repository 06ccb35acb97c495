//! `Scan`: a module applied step by step with a carry (`flax.linen.scan`).

use crate::core::lift::{MapIn, ScanConfig, StackOut};
use crate::core::{Error, Filter, Result, Scope};

use super::module::Module;

/// `nn.scan(Target, variable_axes=..., variable_broadcast=...,
/// split_rngs=..., length=...)`: `module` maps `(carry, x)` to
/// `(carry, y)`; `Scan` runs it over the steps of `xs` (or `length` steps),
/// threading the carry, and stacks the `y`s. Per-step variables
/// (`variable_axes`) are stacked, so a scan over 3 `Dense` layers holds
/// kernels of shape `(3, in, out)`.
///
/// As Flax's (`check_constancy_invariants`), the body first runs once to
/// create the broadcast variables, and its `make_rng` counts carry into the
/// real run.
pub struct Scan<M: Module> {
    module: M,
    config: ScanConfig,
    length: Option<usize>,
}

impl<M, C, X, Y> Scan<M>
where
    M: Module<Input = (C, X), Output = (C, Y)>,
    X: MapIn,
    Y: StackOut,
    C: Clone,
{
    /// Scans `module`, over axis 0 of every tensor in `xs`, with no lifted
    /// collection or stream.
    pub fn new(module: M) -> Scan<M> {
        Scan {
            module,
            config: ScanConfig::default(),
            length: None,
        }
    }

    /// Stacks the collections selected by `filter` per step, on `axis`.
    pub fn variable_axes(mut self, filter: impl Into<Filter>, axis: usize) -> Self {
        self.config.variable_axes.push((filter.into(), axis));
        self
    }

    /// Shares the collections selected by `filter` between all steps.
    pub fn variable_broadcast(mut self, filter: impl Into<Filter>) -> Self {
        self.config.variable_broadcast = filter.into();
        self
    }

    /// Carries the collections selected by `filter` from step to step.
    pub fn variable_carry(mut self, filter: impl Into<Filter>) -> Self {
        self.config.variable_carry = filter.into();
        self
    }

    /// A key per step for the selected streams (`true`), or one shared key.
    pub fn split_rngs(mut self, filter: impl Into<Filter>, split: bool) -> Self {
        self.config.split_rngs.push((filter.into(), split));
        self
    }

    /// The number of steps, for when `xs` maps nothing.
    pub fn length(mut self, n: usize) -> Self {
        self.length = Some(n);
        self
    }

    /// Runs the steps last to first.
    pub fn reverse(mut self, reverse: bool) -> Self {
        self.config.reverse = reverse;
        self
    }

    /// Flax's `check_constancy_invariants` (default true).
    pub fn check_constancy_invariants(mut self, on: bool) -> Self {
        self.config.check_constancy_invariants = on;
        self
    }
}

impl<M, C, X, Y> Module for Scan<M>
where
    M: Module<Input = (C, X), Output = (C, Y)>,
    X: MapIn,
    Y: StackOut,
    C: Clone,
{
    type Input = (C, X);
    type Output = (C, Y);

    fn type_name(&self) -> &'static str {
        super::vmap::prefixed_type_name("Scan", self.module.type_name())
    }

    fn call(&self, s: &Scope<'_>, (carry, xs): (C, X)) -> Result<(C, Y)> {
        let axes = X::default_axes();
        let mut sizes = Vec::new();
        xs.mapped_sizes(&axes, &mut sizes);
        let lift_error = |message: String| Error::Lift {
            path: s.path_text(),
            transform: "scan",
            message,
        };
        // A scalar (or an axis it does not have) cannot be scanned over:
        // Flax raises an index error.
        if let Some((axis, shape, _)) = sizes.iter().find(|&&(_, _, m)| m == usize::MAX) {
            return Err(lift_error(format!(
                "xs of shape {shape:?} has no axis {axis} to scan over"
            )));
        }
        let n = match (sizes.first(), self.length) {
            (Some(&(_, _, n)), _) => n,
            (None, Some(n)) => n,
            (None, None) => {
                return Err(lift_error(
                    "nothing is scanned over: give length, or xs with a leading axis".to_string(),
                ))
            }
        };
        if sizes.iter().any(|&(_, _, m)| m != n) || self.length.is_some_and(|m| m != n) {
            let listed: Vec<String> = sizes
                .iter()
                .map(|(_, shape, m)| format!("{shape:?} has {m} steps"))
                .collect();
            return Err(lift_error(format!(
                "inconsistent scan lengths: {}{}",
                listed.join(", "),
                self.length
                    .map(|m| format!(", length is {m}"))
                    .unwrap_or_default()
            )));
        }
        if n == 0 {
            return Err(lift_error("cannot scan over 0 steps".to_string()));
        }
        let (carry, ys) = s.scan_steps(n, &self.config, carry, |step_scope, i, c| {
            let x = xs.item(&axes, i)?;
            self.module.call(step_scope, (c, x))
        })?;
        Ok((carry, Y::stack(ys, &Y::default_axes())?))
    }
}
