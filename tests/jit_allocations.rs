//! A compiled step replays without allocating per operation: a call
//! allocates only its results (the loss and the gradient tree), so deeper
//! models with more operations allocate no more per call. Counted by a
//! counting allocator (deterministic, unlike timings).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use flaxen::core::{Rngs, Scope, Variables};
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::random::{self, Key};
use flaxen::tensor::{jit_value_and_grad_with, jit_value_and_grad_with_keys, Tensor, Tree};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the counter only observes calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Held by each test while it counts: the counter is global, and the
/// tests run on parallel threads.
static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn filled(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// Allocations of one compiled call of a ReLU MLP with `sizes`, batch 8,
/// after the trace (the results of the previous call dropped).
fn allocations_per_call(sizes: &[usize]) -> usize {
    let mut params = Tree::new();
    for (i, w) in sizes.windows(2).enumerate() {
        let layer = Tree::new()
            .with("kernel", filled(&[w[0], w[1]], 2 * i as u32))
            .with("bias", filled(&[w[1]], 2 * i as u32 + 1));
        params.insert(format!("Dense_{i}"), layer).unwrap();
    }
    let batch = Tree::new()
        .with("x", filled(&[8, sizes[0]], 100))
        .with("y", filled(&[8, *sizes.last().unwrap()], 101));
    let layers = sizes.len() - 1;
    let mut step = jit_value_and_grad_with(move |p: &Tree, b: &Tree| {
        let mut h = b.tensor("x")?.clone();
        for i in 0..layers {
            let layer = p.subtree(&format!("Dense_{i}")).expect("a layer");
            h = h
                .matmul(layer.tensor("kernel")?)?
                .add(layer.tensor("bias")?)?;
            if i + 1 < layers {
                h = h.relu();
            }
        }
        Ok(h.sub(b.tensor("y")?)?.square().mean_all())
    });
    drop(step.call_with(&params, &batch).unwrap());
    drop(step.call_with(&params, &batch).unwrap());
    assert!(step.is_compiled());
    let before = ALLOCATIONS.load(Relaxed);
    let out = step.call_with(&params, &batch).unwrap();
    let after = ALLOCATIONS.load(Relaxed);
    drop(out);
    after - before
}

#[test]
fn compiled_replay_allocates_only_its_results() {
    let _alone = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let shallow = allocations_per_call(&[2, 3, 2]);
    let deep = allocations_per_call(&[2, 3, 3, 3, 3, 3, 2]);
    // Small products summed per output and larger ones through the blocked
    // kernels (B packed for the input gradients) reuse the plan's buffers.
    let wide = allocations_per_call(&[40, 64, 64, 10]);
    assert_eq!(
        shallow, deep,
        "allocations grow with the number of operations"
    );
    assert_eq!(shallow, wide, "allocations depend on the products' sizes");
    assert!(shallow <= 2, "{shallow} allocations per call");
}

/// `layers` ReLU layers of width 16 without biases, each followed by
/// `Dropout(0.25)`.
struct Dropped {
    layers: usize,
}

impl Module for Dropped {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> flaxen::core::Result<Tensor> {
        let mut h = x;
        for _ in 0..self.layers {
            h = s.child(Dense::new(16).use_bias(false))?.call(h)?.relu();
            h = s.child(Dropout::new(0.25))?.call(h)?;
        }
        Ok(h)
    }
}

/// Allocations of one compiled call of a [`Dropped`] model's step, after
/// the trace (the results of the previous call dropped): the keep masks
/// are drawn again into the plan's buffers.
fn dropout_allocations_per_call(layers: usize) -> usize {
    let model = Dropped { layers };
    let x = filled(&[8, 16], 100);
    let params = model.init(random::key(0), x.clone()).unwrap().params();
    let batch = Tree::new().with("x", x).with("y", filled(&[8, 16], 101));
    let mut step = jit_value_and_grad_with_keys(move |p: &Tree, b: &Tree, keys: &[Key]| {
        let v = Variables::new().with("params", p.clone());
        let rngs = Rngs::none().with("dropout", keys[0].clone());
        let out = model.apply(&v, b.tensor("x")?.clone(), rngs)?;
        Ok(out.sub(b.tensor("y")?)?.square().mean_all())
    });
    let keys = |t: u32| [random::fold_in(random::key(1), t)];
    drop(step.call_with_keys(&params, &batch, &keys(0)).unwrap());
    drop(step.call_with_keys(&params, &batch, &keys(1)).unwrap());
    assert!(step.is_compiled());
    let keys = keys(2);
    let before = ALLOCATIONS.load(Relaxed);
    let out = step.call_with_keys(&params, &batch, &keys).unwrap();
    let after = ALLOCATIONS.load(Relaxed);
    drop(out);
    after - before
}

#[test]
fn compiled_dropout_draws_its_masks_without_allocating() {
    let _alone = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let shallow = dropout_allocations_per_call(1);
    let deep = dropout_allocations_per_call(3);
    assert_eq!(shallow, deep, "allocations grow with the number of masks");
    assert!(shallow <= 2, "{shallow} allocations per call");
}
