//! Which computation XLA:CPU runs for each of a convolution's three passes
//! (the forward pass and the two cotangents), decided once when the
//! convolution is recorded, and the convolution as a [`Kernel`], so that a
//! compiled step replays it with the same routes.
//!
//! The routes, in the order XLA picks them (see each module):
//! YNNPACK ([`conv_ynn`]) for 2-D convolutions with 17 or more features;
//! Eigen's transposed convolution ([`scattered_conv`]) where a pass has an
//! input dilation; Eigen's generic convolution with cut sums
//! ([`conv_eigen`]); oneDNN's matrix-vector kernel for one feature per
//! group; XLA's own loop where it swaps a cotangent's operands; else one
//! chain per output (the register tiles of `conv_fast`, or plain loops).

use std::sync::{Arc, OnceLock};

use super::conv::{self, ConvSpec, Dims, Swaps};
use super::conv_eigen::{self, EigenRoutes};
use super::conv_fast::Isa;
use super::conv_ynn::{self, YnnRoutes};
use crate::tensor::kernel::Kernel;
use crate::xla::eigen_conv::EigenConvPlan;

/// How the forward pass is summed.
enum Forward {
    Ynn,
    /// Eigen's transposed convolution (an input dilation).
    Scatter,
    Eigen(Arc<EigenConvPlan>),
    Gemv,
    Chains,
}

/// How the input's cotangent is summed.
enum InputGrad {
    Ynn,
    /// Eigen's transposed convolution (a strided forward pass).
    Scatter,
    Eigen(Arc<EigenConvPlan>),
    Gemv,
    /// XLA's loop over the swapped operands.
    Swapped,
    Chains,
}

/// How the kernel's cotangent is summed.
enum KernelGrad {
    Ynn,
    /// Eigen's 3-D convolution of a grouped one.
    EigenGrouped(Arc<EigenConvPlan>),
    Eigen(Arc<EigenConvPlan>),
    Gemv,
    /// XLA's loop over the swapped operands (a grouped convolution's are
    /// decided before Eigen's route, an ungrouped one's after).
    Swapped,
    Chains,
}

/// What the cotangents' routes are decided from: all but Eigen's plans
/// are known when the convolution is recorded; the plans are made (or
/// looked up) when a cotangent is first taken.
#[derive(Clone, Copy)]
struct Decisions {
    ynn: YnnRoutes,
    eigen: EigenRoutes,
    swaps: Swaps,
    grouped_swapped: bool,
    scatter_input_grad: bool,
    input_gemv: bool,
    kernel_gemv: bool,
}

/// A convolution of fixed shapes with its routes (see the module).
pub(crate) struct Conv {
    d: Dims,
    /// `idx[m * t + tap]`: the input position output `m` reads through
    /// `tap` (`None`: padding); `inv[s * t + tap]`: the output position
    /// reading input `s` through `tap`.
    idx: Vec<Option<usize>>,
    inv: Vec<Option<usize>>,
    spatial: Vec<usize>,
    window: Vec<usize>,
    out_spatial: Vec<usize>,
    /// The output's shape `[n, out_spatial…, o]`.
    shape: Vec<usize>,
    forward: Forward,
    decisions: Decisions,
    input_grad: OnceLock<InputGrad>,
    kernel_grad: OnceLock<KernelGrad>,
}

impl Conv {
    /// The convolution of an input with spatial sizes `spatial` and a
    /// kernel with `window`, sizes `d`, read positions `idx` (from
    /// `conv::window_indices`, with the output's spatial sizes `out`).
    pub(crate) fn new(
        d: Dims,
        idx: Vec<Option<usize>>,
        (spatial, window, out_spatial): (Vec<usize>, Vec<usize>, Vec<usize>),
        spec: &ConvSpec,
    ) -> Conv {
        let sd = spatial.len();
        let swaps = Swaps::of(&spatial, &window, &out_spatial, spec);
        let all_one = |v: &[usize]| v.iter().all(|&r| r == 1);
        let eigen_2d = sd == 2 && d.groups == 1 && !spec.circular && all_one(&spec.rhs_dilation);
        // Eigen's transposed path: the forward pass with input dilation
        // (unless XLA swaps its operands: a window larger than the input),
        // and the input's cotangent of a strided convolution.
        let scatter_forward = eigen_2d
            && all_one(&spec.strides)
            && !all_one(&spec.lhs_dilation)
            && window.iter().product::<usize>() <= spatial.iter().product::<usize>();
        let scatter_input_grad =
            eigen_2d && all_one(&spec.lhs_dilation) && !all_one(&spec.strides) && !swaps.input_grad;
        // oneDNN's matrix-vector kernel: one output feature per group (the
        // forward pass, the kernel's cotangent of one group), one input
        // feature per group (the input's cotangent).
        let forward_gemv = d.og() == 1 && conv::gemv_fits(spec, d.cg, d.t * d.cg);
        let input_gemv =
            d.cg == 1 && !swaps.input_grad && conv::gemv_fits(spec, d.og(), d.t * d.og());
        let kernel_gemv = d.groups == 1
            && d.o == 1
            && !swaps.kernel_grad
            && conv::gemv_fits(spec, d.n, d.p * d.n);
        // YNNPACK: 2-D convolutions with 17 or more features either way.
        let ynn = YnnRoutes::of(
            &d,
            (&spatial, &out_spatial, &window),
            all_one(&spec.lhs_dilation),
            all_one(&spec.strides),
            (swaps.input_grad, swaps.kernel_grad),
        );
        // Eigen's generic convolution (1-D run as 2-D), where its
        // contraction cuts the sums: the rest of the 2-D and 1-D ones
        // without input dilation (XLA's own loop when it swaps a
        // cotangent's operands; the input's cotangent of a strided one has
        // an input dilation; a grouped kernel cotangent is 3-D to XLA).
        // A grouped kernel cotangent whose operands XLA swaps: its own loop.
        let grouped_swapped = sd == 2
            && d.groups > 1
            && !(d.cg == 1 && d.og() == 1)
            && all_one(&spec.lhs_dilation)
            && conv::grouped_kernel_grad_swaps(&spatial, &window, &out_spatial, spec);
        let eigen_side = (1..=2).contains(&sd) && all_one(&spec.lhs_dilation);
        let eigen = EigenRoutes::of(
            &d,
            (
                eigen_side && !ynn.forward,
                eigen_side && all_one(&spec.strides) && !ynn.input_grad && !swaps.input_grad,
                eigen_side && !ynn.kernel_grad && !swaps.kernel_grad,
            ),
            all_one(&spec.strides) && all_one(&spec.rhs_dilation),
            // A grouped kernel cotangent: a 3-D convolution (input
            // dilation on the groups' axis), which XLA keeps on Eigen
            // unless it swaps the operands (then its own loop).
            sd == 2 && all_one(&spec.lhs_dilation) && !grouped_swapped,
        );
        let forward = if ynn.forward {
            Forward::Ynn
        } else if scatter_forward {
            Forward::Scatter
        } else if let Some(plan) = eigen.forward() {
            Forward::Eigen(plan)
        } else if forward_gemv {
            Forward::Gemv
        } else {
            Forward::Chains
        };
        // Which output position reads input `s` through each tap.
        let mut inv = vec![None; d.s * d.t];
        for (i, src) in idx.iter().enumerate() {
            if let Some(s) = src {
                inv[s * d.t + i % d.t] = Some(i / d.t);
            }
        }
        let mut shape = vec![d.n];
        shape.extend(&out_spatial);
        shape.push(d.o);
        Conv {
            d,
            idx,
            inv,
            spatial,
            window,
            out_spatial,
            shape,
            forward,
            decisions: Decisions {
                ynn,
                eigen,
                swaps,
                grouped_swapped,
                scatter_input_grad,
                input_gemv,
                kernel_gemv,
            },
            input_grad: OnceLock::new(),
            kernel_grad: OnceLock::new(),
        }
    }

    fn input_grad_route(&self) -> &InputGrad {
        self.input_grad.get_or_init(|| {
            let c = &self.decisions;
            if c.ynn.input_grad {
                InputGrad::Ynn
            } else if c.scatter_input_grad {
                InputGrad::Scatter
            } else if let Some(plan) = c.eigen.input_grad() {
                InputGrad::Eigen(plan)
            } else if c.input_gemv {
                InputGrad::Gemv
            } else if c.swaps.input_grad {
                InputGrad::Swapped
            } else {
                InputGrad::Chains
            }
        })
    }

    fn kernel_grad_route(&self) -> &KernelGrad {
        self.kernel_grad.get_or_init(|| {
            let c = &self.decisions;
            if c.ynn.kernel_grad {
                KernelGrad::Ynn
            } else if let Some(plan) = c.eigen.grouped_kernel_grad() {
                KernelGrad::EigenGrouped(plan)
            } else if c.grouped_swapped {
                KernelGrad::Swapped
            } else if let Some(plan) = c.eigen.kernel_grad() {
                KernelGrad::Eigen(plan)
            } else if c.kernel_gemv {
                KernelGrad::Gemv
            } else if c.swaps.kernel_grad {
                KernelGrad::Swapped
            } else {
                KernelGrad::Chains
            }
        })
    }

    /// The output `[n, p, o]` of input `x` and kernel `k`.
    fn output(&self, x: &[f32], k: &[f32]) -> Vec<f32> {
        let (d, idx) = (self.d, &self.idx);
        match &self.forward {
            Forward::Ynn => conv_ynn::forward(x, k, idx, d, Isa::detect(), &self.out_spatial),
            // Each output reads its inputs in increasing order with the tap.
            Forward::Scatter => {
                conv::scattered_conv(x, (d.n, d.s, d.c), idx, (d.p, d.t, d.o), k, false)
            }
            Forward::Eigen(plan) => conv_eigen::forward(x, k, idx, d, plan),
            Forward::Gemv => conv::conv_forward_gemv(x, k, idx, d),
            Forward::Chains => conv::conv_forward_fast(x, k, idx, d)
                .unwrap_or_else(|| conv::conv_forward(x, k, idx, d)),
        }
    }

    /// The input's cotangent from the output's `g`.
    fn input_cotangent(&self, g: &[f32], k: &[f32]) -> Vec<f32> {
        let (d, inv) = (self.d, &self.inv);
        match self.input_grad_route() {
            InputGrad::Ynn => conv_ynn::input_grad(g, k, inv, d, Isa::detect(), &self.spatial),
            InputGrad::Scatter => {
                // Each input reads the cotangent's positions (`inv`) in
                // decreasing order with the tap, through the kernel as
                // `[tap, out, in]` (one group).
                let kt = conv::kernel_by_output(k, d);
                conv::scattered_conv(g, (d.n, d.p, d.o), inv, (d.s, d.t, d.c), &kt, true)
            }
            InputGrad::Eigen(plan) => conv_eigen::input_grad(g, k, inv, d, plan),
            InputGrad::Gemv => conv::conv_input_grad_gemv(g, k, inv, d),
            InputGrad::Swapped => conv::conv_input_grad(g, k, inv, d, true),
            InputGrad::Chains => conv::conv_input_grad_fast(g, k, inv, d)
                .unwrap_or_else(|| conv::conv_input_grad(g, k, inv, d, false)),
        }
    }

    /// The kernel's cotangent from the input `x` and the output's `g`.
    fn kernel_cotangent(&self, x: &[f32], g: &[f32]) -> Vec<f32> {
        let (d, idx) = (self.d, &self.idx);
        match self.kernel_grad_route() {
            KernelGrad::Ynn => conv_ynn::kernel_grad(x, g, idx, d, Isa::detect(), &self.window),
            KernelGrad::EigenGrouped(plan) => conv_eigen::grouped_kernel_grad(x, g, idx, d, plan),
            KernelGrad::Eigen(plan) => conv_eigen::kernel_grad(x, g, idx, d, plan),
            KernelGrad::Gemv => conv::conv_kernel_grad_gemv(x, g, idx, d),
            KernelGrad::Swapped => conv::swapped_kernel_grad(x, g, idx, d),
            KernelGrad::Chains => conv::conv_kernel_grad_fast(x, g, idx, d)
                .unwrap_or_else(|| conv::conv_kernel_grad(x, g, idx, d)),
        }
    }
}

impl Kernel for Conv {
    fn name(&self) -> &'static str {
        "conv_general_dilated"
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    // (The routes return new vectors, copied into the buffers given:
    // their own scratch is allocated inside each route.)
    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], _: &mut [f32]) {
        out.copy_from_slice(&self.output(ins[0], ins[1]))
    }

    fn backward_into(
        &self,
        input: usize,
        g: &[f32],
        ins: &[&[f32]],
        dst: &mut [f32],
        _: &mut [f32],
    ) {
        dst.copy_from_slice(&match input {
            0 => self.input_cotangent(g, ins[1]),
            _ => self.kernel_cotangent(ins[0], g),
        })
    }
}
