//! The Flax randomness guide's `nn.vmap` section (run with the separator
//! flag on, as the notebook did): the six printed variable trees, verbatim.

#[allow(dead_code)]
#[path = "../examples/guide_vmap.rs"]
mod example;

use example::Model;
use flaxen::core::Rngs;
use flaxen::nn::{Dense, Module, Vmap};
use flaxen::random;
use flaxen::tensor::Tensor;

/// The guide's printed outputs, in order.
const GUIDE: [&str; 6] = [
    r#"{'params': {'bias': Array([0., 0.], dtype=float32),
  'kernel': Array([[-1.2488099 , -0.6127134 ],
         [-0.07084481,  0.60130936]], dtype=float32)}}"#,
    r#"{'params': {'bias': Array([[0., 0.],
         [0., 0.],
         [0., 0.]], dtype=float32),
  'kernel': Array([[[-1.2488099 , -0.6127134 ],
          [-0.07084481,  0.60130936]],
  
         [[-1.2488099 , -0.6127134 ],
          [-0.07084481,  0.60130936]],
  
         [[-1.2488099 , -0.6127134 ],
          [-0.07084481,  0.60130936]]], dtype=float32)}}"#,
    r#"{'params': {'bias': Array([[0., 0.],
         [0., 0.],
         [0., 0.]], dtype=float32),
  'kernel': Array([[[-0.2526208 , -0.15088455],
          [-1.1987205 , -0.40843305]],
  
         [[-0.7064888 , -1.108805  ],
          [-0.938775  ,  1.4812315 ]],
  
         [[-0.59468937, -0.2502723 ],
          [-1.33515   ,  0.5067442 ]]], dtype=float32)}}"#,
    r#"{'params': {'Dense_0': {'bias': Array([[0., 0.],
          [0., 0.],
          [0., 0.]], dtype=float32),
   'kernel': Array([[[-0.9079084 ,  0.76390624],
           [-0.01285526,  0.4320353 ]],
   
          [[ 0.12398645,  0.7884565 ],
           [ 1.5344163 ,  1.3186085 ]],
   
          [[-0.44171348,  0.43430036],
           [-0.40732604,  0.29774475]]], dtype=float32)}},
 'other_collection': {'kernel': Array([[-0.8193048 ,  0.711106  ],
         [-0.37802765, -0.66705877],
         [-0.44808003,  0.93031347]], dtype=float32)}}"#,
    r#"{'params': {'Dense_0': {'bias': Array([[0., 0.],
          [0., 0.],
          [0., 0.]], dtype=float32),
   'kernel': Array([[[-0.9079084 ,  0.76390624],
           [-0.01285526,  0.4320353 ]],
   
          [[ 0.12398645,  0.7884565 ],
           [ 1.5344163 ,  1.3186085 ]],
   
          [[-0.44171348,  0.43430036],
           [-0.40732604,  0.29774475]]], dtype=float32)}},
 'other_collection': {'kernel': Array([[ 0.44956833, -1.1854612 ],
         [ 0.44956833, -1.1854612 ],
         [ 0.44956833, -1.1854612 ]], dtype=float32)}}"#,
    r#"{'params': {'Dense_0': {'bias': Array([[0., 0.],
          [0., 0.],
          [0., 0.]], dtype=float32),
   'kernel': Array([[[-0.9079084 ,  0.76390624],
           [-0.01285526,  0.4320353 ]],
   
          [[ 0.12398645,  0.7884565 ],
           [ 1.5344163 ,  1.3186085 ]],
   
          [[-0.44171348,  0.43430036],
           [-0.40732604,  0.29774475]]], dtype=float32)}},
 'other_collection': {'kernel': Array([ 0.44956833, -1.1854612 ], dtype=float32)}}"#,
];

#[test]
fn batched_dense_and_model_print_as_the_guide() {
    let x = Tensor::ones(&[3, 2]);
    let params = || Rngs::from(random::key(0)).fix_separator(true);
    let both =
        || Rngs::from([("params", random::key(0)), ("other", random::key(1))]).fix_separator(true);
    let mut printed = Vec::new();
    for (variable_axis, split) in [(None, false), (Some(0), false), (Some(0), true)] {
        let m = Vmap::new(Dense::new(2))
            .variable_axes("params", variable_axis)
            .split_rngs("params", split);
        printed.push(m.init(params(), x.clone()).unwrap().pretty());
    }
    for (other_axis, split_other) in [(Some(0), true), (Some(0), false), (None, false)] {
        let m = Vmap::new(Model)
            .variable_axes("params", Some(0))
            .variable_axes("other_collection", other_axis)
            .split_rngs("params", true)
            .split_rngs("other", split_other);
        printed.push(m.init(both(), x.clone()).unwrap().pretty());
    }
    for (got, want) in printed.iter().zip(GUIDE) {
        assert_eq!(got, want);
    }
}
