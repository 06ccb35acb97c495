//! The replay's small products summed from gathered operands give the bits
//! of their planned routes.

use super::*;
use crate::xla::dot_tiny::{gathered_body, lanes_body};

/// A small-product kernel's signature.
type Kernel = fn(
    &[f32],
    (usize, usize),
    &[f32],
    (usize, usize),
    (usize, usize, usize),
    TinySum,
    &mut [f32],
    &mut Vec<f32>,
);

/// Every small shape and the three operand layouts of a replayed product
/// (`a @ b`, `g @ b^T`, `a^T @ g`, see [`dot_shapes`]), with values whose
/// sums round differently in other orders, signed zeros included: where
/// [`tiny_sum`] takes a route over, [`gathered_product`] gives the route's
/// bits.
#[test]
fn gathered_products_give_the_routes_bits() {
    let mut seed = 11u64;
    let mut value = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        match seed >> 60 {
            0 => -0.0,
            1 => 0.0,
            _ => ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0,
        }
    };
    let (mut one_chunk, mut chains) = (0, 0);
    for m in [1, 2, 3, 8, 9, 20] {
        for k in 1..=12 {
            for n in [1, 2, 3, 5, 8, 17] {
                for (sa, sb, mkn) in dot_shapes(m, k, n) {
                    let (m, k, n) = mkn;
                    let route = DotRoute::new(sa, sb, mkn, (1, 1));
                    let Some(sum) = route.tiny_sum(mkn) else {
                        continue;
                    };
                    match sum {
                        TinySum::OneChunk(_) => one_chunk += 1,
                        TinySum::Chain { .. } => chains += 1,
                    }
                    // Operands stored as the strides say.
                    let x: Vec<f32> = (0..m * k).map(|_| value()).collect();
                    let y: Vec<f32> = (0..k * n).map(|_| value()).collect();
                    let mut planned = vec![f32::NAN; m * n];
                    route.run(&x, sa, &y, sb, mkn, &mut planned, &mut Vec::new());
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    // The dispatch, and both kernels whatever this CPU has.
                    let kernels: [Kernel; 3] = [gathered_product, gathered_body, lanes_body];
                    for (which, kernel) in kernels.iter().enumerate() {
                        let mut gathered = vec![f32::NAN; m * n];
                        let mut scratch = vec![f32::NAN; 5];
                        kernel(&x, sa, &y, sb, mkn, sum, &mut gathered, &mut scratch);
                        assert_eq!(
                            bits(&gathered),
                            bits(&planned),
                            "kernel {which}: {mkn:?} {sa:?} {sb:?} {route:?}"
                        );
                    }
                }
            }
        }
    }
    assert!(one_chunk > 100 && chains > 100, "{one_chunk} {chains}");
}
