//! The Flax randomness guide's `nn.scan` section (separator on, as the
//! notebook ran): the two printed variable trees, verbatim. The kernels come
//! from `make_rng` count 3, because Flax's scan runs its body once before
//! the real run (see `ScanConfig::check_constancy_invariants`).

#[allow(dead_code)]
#[path = "../examples/guide_scan.rs"]
mod example;

use example::ResidualMLPBlock;
use flaxen::core::Rngs;
use flaxen::nn::{Module, Scan};
use flaxen::random;
use flaxen::tensor::Tensor;

/// The guide's printed outputs: `split_rngs` True, then False.
const GUIDE: [&str; 2] = [
    r#"{'params': {'Dense_0': {'bias': Array([[0., 0.],
          [0., 0.],
          [0., 0.]], dtype=float32),
   'kernel': Array([[[-0.07838312, -0.7422982 ],
           [ 0.87488323,  0.13773395]],
   
          [[ 0.97309333,  0.9087693 ],
           [-0.12564984, -1.0920651 ]],
   
          [[-0.99055105,  1.1499453 ],
           [-0.15721127, -0.62520015]]], dtype=float32)}}}"#,
    r#"{'params': {'Dense_0': {'bias': Array([[0., 0.],
          [0., 0.],
          [0., 0.]], dtype=float32),
   'kernel': Array([[[-0.66715515, -0.0484313 ],
           [ 0.9867164 ,  0.75408363]],
   
          [[-0.66715515, -0.0484313 ],
           [ 0.9867164 ,  0.75408363]],
   
          [[-0.66715515, -0.0484313 ],
           [ 0.9867164 ,  0.75408363]]], dtype=float32)}}}"#,
];

#[test]
fn scanned_blocks_print_as_the_guide() {
    let x = Tensor::ones(&[3, 2]);
    for (split, want) in [true, false].into_iter().zip(GUIDE) {
        let scan_mlp = Scan::new(ResidualMLPBlock)
            .variable_axes("params", 0)
            .variable_broadcast(false)
            .split_rngs("params", split)
            .length(3);
        let v = scan_mlp
            .init(
                Rngs::from(random::key(0)).fix_separator(true),
                (x.clone(), ()),
            )
            .unwrap();
        assert_eq!(v.pretty(), want);
    }
}
