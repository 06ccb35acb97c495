//! oneDNN's matrix-vector kernel (`jit_avx_gemv_t_f32_kern`), the order in
//! which XLA:CPU (jaxlib 0.10.2) sums a convolution's outputs when Eigen's
//! generic convolution hands oneDNN a contraction with one output column:
//! the forward pass and kernel gradient of a convolution with one output
//! feature per group, and the input gradient of one with one input
//! feature per group (a convolution of the cotangent with the flipped
//! kernel), with at most 16 input features per group (a 2-D convolution
//! with 17 or more features either way goes to YNNPACK instead, see
//! [`super::ynn_conv`]).
//!
//! Measured with a helper's probe against JAX on the AMD EPYC (2 CPUs):
//! 0 of the outputs of 24 cases differ. Up to 96 terms every way Eigen
//! blocks the contraction gives this one sum; longer ones it splits
//! (into blocks summed apart when the work is large, into pieces of a
//! chain otherwise), as [`super::eigen_conv`] decides.

/// `((a0 + a1) + (a4 + a5)) + ((a2 + a3) + (a6 + a7))`: the eight lanes of
/// a 256-bit register reduced by `vhaddps`, `vperm2f128`, `vaddps` and
/// `vhaddps`.
fn lanes_sum(a: [f32; 8]) -> f32 {
    ((a[0] + a[1]) + (a[4] + a[5])) + ((a[2] + a[3]) + (a[6] + a[7]))
}

/// The most terms whose sum this module models (see the module's doc).
pub(crate) const GEMV_MAX_TERMS: usize = 96;

/// `sum_k a_k * w_k` over the `n` terms `term(k) = (a_k, w_k)`, from `+0`,
/// in the kernel's order: the first `16 * (n / 16)` terms in eight lanes
/// of fused multiply-adds (term `k` in lane `k % 8`), the lanes reduced
/// ([`lanes_sum`]) and added; then the rest in pieces of 8, 4, 2 and 1
/// terms, each piece's products rounded, reduced as eight lanes (zeros
/// beyond the piece) and added.
#[inline(always)]
pub(crate) fn gemv_t_sum(n: usize, term: impl Fn(usize) -> (f32, f32)) -> f32 {
    gemv_t_sum_onto(0.0, n, term)
}

/// [`gemv_t_sum`] continued from `y` instead of `+0`: one call with
/// `beta = 1`, as Eigen makes for every range of terms after the first
/// (the lanes start from zeros, their sum and each piece are added to
/// `y`).
#[inline(always)]
pub(crate) fn gemv_t_sum_onto(y: f32, n: usize, term: impl Fn(usize) -> (f32, f32)) -> f32 {
    let n16 = n - n % 16;
    let mut acc = [0.0f32; 8];
    for j in (0..n16).step_by(8) {
        for (l, a) in acc.iter_mut().enumerate() {
            let (x, w) = term(j + l);
            *a = x.mul_add(w, *a);
        }
    }
    let mut y = y;
    if n16 > 0 {
        y += lanes_sum(acc);
    }
    let mut off = n16;
    for u in [8, 4, 2, 1] {
        if (n % 16) & u != 0 {
            let mut p = [0.0f32; 8];
            for (l, v) in p.iter_mut().enumerate().take(u) {
                let (x, w) = term(off + l);
                *v = x * w;
            }
            y += lanes_sum(p);
            off += u;
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order, on terms whose rounding shows it: sixteen products of
    /// `1` and a large value cancelling across lanes, then the tail.
    #[test]
    fn lanes_then_rounded_pieces() {
        // 16 terms: lanes l and l + 8 hold 2^24 and -2^24 + l (exact);
        // then one more term of 0.5 rounds against 2^24-sized partials.
        let big = 16_777_216.0f32;
        let vals: Vec<f32> = (0..16)
            .map(|k| if k < 8 { big } else { -big + (k - 8) as f32 })
            .chain([0.5])
            .collect();
        let y = gemv_t_sum(vals.len(), |k| (vals[k], 1.0));
        // Lanes: l = 0..7 hold l; reduced ((0+1)+(4+5)) + ((2+3)+(6+7)) = 28.
        assert_eq!(y, 28.5);
        assert_eq!(gemv_t_sum(0, |_| (1.0, 1.0)), 0.0);
        // Three terms: pieces of 2 then 1, each rounded then added.
        assert_eq!(gemv_t_sum(3, |k| ([1.0, 2.0, 4.0][k], 0.5)), 3.5);
    }
}
