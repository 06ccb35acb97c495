//! `Scan`: a module applied step by step with a carry (`flax.linen.scan`).

use crate::core::lift::{
    carry_mismatch, Carry, MapIn, Mapping, ScanConfig, StackOut, VariableAxis,
};
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
///
/// The carry may be any [`Carry`] (tensors, arrays, trees, tuples, `Vec`s,
/// maps, plain values); a step that returns a carry of another structure,
/// shape or dtype is an error, as in JAX. `xs` and the `y`s may be nested
/// the same way ([`MapIn`], [`StackOut`]); [`Scan::in_axes`] with `None`
/// passes an input whole to every step (Flax's `nn.broadcast`).
pub struct Scan<M: Module>
where
    M: Module,
    M::Input: ScanInput,
    M::Output: ScanOutput,
{
    module: M,
    config: ScanConfig,
    length: Option<usize>,
    in_axes: <<M::Input as ScanInput>::Xs as MapIn>::Axes,
    out_axes: <<M::Output as ScanOutput>::Ys as StackOut>::Axes,
}

/// A scanned module's input: `(carry, x)`.
pub trait ScanInput {
    /// The per-step input.
    type Xs: MapIn;
}

impl<C, X: MapIn> ScanInput for (C, X) {
    type Xs = X;
}

/// A scanned module's output: `(carry, y)`.
pub trait ScanOutput {
    /// The per-step output.
    type Ys: StackOut;
}

impl<C, Y: StackOut> ScanOutput for (C, Y) {
    type Ys = Y;
}

impl<M, C, X, Y> Scan<M>
where
    M: Module<Input = (C, X), Output = (C, Y)>,
    X: MapIn,
    Y: StackOut,
    C: Carry,
{
    /// Scans `module`, over axis 0 of every tensor in `xs`, with no lifted
    /// collection or stream.
    pub fn new(module: M) -> Scan<M> {
        Scan {
            module,
            config: ScanConfig::default(),
            length: None,
            in_axes: X::default_axes(),
            out_axes: Y::default_axes(),
        }
    }

    /// The axes of `xs` to scan over (`Some(axis)`), or `None` for inputs
    /// every step sees whole (Flax's `nn.broadcast`); a tuple for tuple
    /// inputs.
    pub fn in_axes(mut self, axes: X::Axes) -> Self {
        self.in_axes = axes;
        self
    }

    /// The axes along which the steps' `y`s are stacked.
    pub fn out_axes(mut self, axes: Y::Axes) -> Self {
        self.out_axes = axes;
        self
    }

    /// Stacks the collections selected by `filter` per step, on `axis`, or
    /// shares them between all steps ([`VariableAxis::Broadcast`], as
    /// [`Scan::variable_broadcast`]).
    pub fn variable_axes(
        mut self,
        filter: impl Into<Filter>,
        axis: impl Into<VariableAxis>,
    ) -> Self {
        match axis.into() {
            VariableAxis::Axis(a) => self.config.variable_axes.push((filter.into(), a)),
            VariableAxis::Broadcast => {
                let f = &self.config.variable_broadcast;
                self.config.variable_broadcast = f.union(&filter.into());
            }
        }
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
    C: Carry,
{
    type Input = (C, X);
    type Output = (C, Y);

    fn type_name(&self) -> &'static str {
        super::vmap::prefixed_type_name("Scan", self.module.type_name())
    }

    fn call(&self, s: &Scope<'_>, (carry, xs): (C, X)) -> Result<(C, Y)> {
        let mut mapped = Vec::new();
        xs.mapped_axes(&self.in_axes, "", &mut mapped);
        let lift_error = |message: String| Error::Lift {
            path: s.path_text(),
            transform: "scan",
            message,
        };
        // A scalar (or an axis it does not have) cannot be scanned over:
        // Flax raises an index error.
        if let Some(m) = mapped.iter().find(|m| m.size().is_none()) {
            return Err(lift_error(format!(
                "xs{} of shape {:?} has no axis {} to scan over",
                m.path, m.shape, m.axis
            )));
        }
        let sizes: Vec<usize> = mapped.iter().filter_map(|m| m.size()).collect();
        let n = match (sizes.first(), self.length) {
            (Some(&n), _) => n,
            (None, Some(n)) => n,
            (None, None) => {
                return Err(lift_error(
                    "nothing is scanned over: give length, or xs with a leading axis".to_string(),
                ))
            }
        };
        if sizes.iter().any(|&m| m != n) || self.length.is_some_and(|m| m != n) {
            let listed: Vec<String> = mapped
                .iter()
                .map(|m| {
                    format!(
                        "xs{} of shape {:?} has {} steps",
                        m.path,
                        m.shape,
                        m.size().unwrap_or(0)
                    )
                })
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
            let x = xs.item(&self.in_axes, i, Mapping::Scan)?;
            let mut before = Vec::new();
            c.carry_types("carry", &mut before);
            let (c, y) = self.module.call(step_scope, (c, x))?;
            if let Some(message) = carry_mismatch("scan", &before, &c) {
                return Err(lift_error(message));
            }
            Ok((c, y))
        })?;
        let ys = Y::stack(ys, &self.out_axes, "").map_err(|e| match e {
            Error::Lift { message, .. } => lift_error(message),
            e => e,
        })?;
        Ok((carry, ys))
    }
}
