//! The exact-product limit (`set_exact_matmul_limit`): above it `matmul`
//! takes the `gemm` crate's faster kernels. Its own test binary, since the
//! limit is process-wide.

use flaxen::tensor::{
    exact_matmul_limit, set_exact_matmul_limit, Tensor, DEFAULT_EXACT_MATMUL_LIMIT,
};

#[test]
fn products_above_the_limit_take_the_fast_kernels() {
    assert_eq!(exact_matmul_limit(), DEFAULT_EXACT_MATMUL_LIMIT);
    // Powers of two times small integers: every order of summation gives
    // the same, exact result, so both paths must agree bit for bit.
    let (m, k, n) = (64, 96, 80);
    let a: Vec<f32> = (0..m * k).map(|i| ((i % 7) as f32 - 3.0) * 0.5).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i % 5) as f32 - 2.0) * 0.25).collect();
    let a = Tensor::from_vec(a, &[m, k]).unwrap();
    let b = Tensor::from_vec(b, &[k, n]).unwrap();
    let exact = a.matmul(&b).unwrap();
    set_exact_matmul_limit(0);
    let fast = a.matmul(&b).unwrap();
    set_exact_matmul_limit(DEFAULT_EXACT_MATMUL_LIMIT);
    assert_eq!(exact.to_vec(), fast.to_vec());
    // And through the vector branches.
    let v = Tensor::from_vec((0..k).map(|i| (i % 3) as f32).collect(), &[k]).unwrap();
    let exact = v.matmul(&b).unwrap();
    set_exact_matmul_limit(0);
    let fast = v.matmul(&b).unwrap();
    set_exact_matmul_limit(usize::MAX);
    assert_eq!(exact.to_vec(), fast.to_vec());
    assert_eq!(exact_matmul_limit(), usize::MAX);
}
