//! Bad input never panics, hangs or lies (the classes of the robustness
//! issue): empty arrays print as NumPy prints them, a NaN clip bound gives
//! NaN as `jnp.clip`, a `grad` inside a `grad` is a typed error instead of
//! silent zeros, names that are not path elements are refused instead of
//! aliasing variables, impossible sizes are typed errors, collectives over
//! many items finish, deep models do not overflow the stack.
//!
//! Probes that could abort the process (allocation failure, stack
//! overflow) or hang run in a child process under a watchdog
//! ([`isolated`]), so that such a failure fails its test only.

use flaxen::core::{self, Variables};
use flaxen::nn::{Dense, Module};
use flaxen::tensor::{grad, jit_value_and_grad, Tensor, Tree};
use flaxen::{init, random, Error};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child process that [`isolated`] starts.
const CHILD: &str = "FLAXEN_ISOLATED_PROBE";

/// Runs `body` as test `test` of this binary in a child process, so that
/// an abort or a stack overflow fails this test instead of killing the
/// whole run, and a hang longer than `limit` is killed and fails it. In
/// the child, runs `body` directly.
fn isolated(test: &str, limit: Duration, body: impl FnOnce()) {
    if std::env::var_os(CHILD).is_some() {
        body();
        return;
    }
    if let Err(e) = run_child(test, limit) {
        panic!("{e}");
    }
}

/// Runs test `test` of this binary (ignored or not) in a child process;
/// kills it after `limit`.
fn run_child(test: &str, limit: Duration) -> std::result::Result<(), String> {
    let log = std::env::temp_dir().join(format!("flaxen-probe-{test}-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&log);
            return Err(format!("probe {test} hung: killed after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    if !status.success() {
        return Err(format!("probe {test} failed ({status}):\n{output}"));
    }
    // The child must have run exactly this test.
    if !output.contains("1 passed") {
        return Err(format!("probe {test} did not run:\n{output}"));
    }
    Ok(())
}

/// Run only by [`the_probe_harness_catches_aborts_and_hangs`], in a child.
#[test]
#[ignore = "aborts the process: run in a child by the harness's own test"]
fn probe_that_aborts() {
    if std::env::var_os(CHILD).is_some() {
        std::process::abort();
    }
}

/// Run only by [`the_probe_harness_catches_aborts_and_hangs`], in a child.
#[test]
#[ignore = "hangs: run in a child by the harness's own test"]
fn probe_that_hangs() {
    if std::env::var_os(CHILD).is_some() {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[test]
fn the_probe_harness_catches_aborts_and_hangs() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let e = run_child("probe_that_aborts", Duration::from_secs(60)).unwrap_err();
    assert!(e.contains("probe probe_that_aborts failed"), "{e}");
    let e = run_child("probe_that_hangs", Duration::from_millis(500)).unwrap_err();
    assert!(e.contains("probe probe_that_hangs hung"), "{e}");
    run_child("clip_with_a_nan_bound_is_nan", Duration::from_secs(60)).unwrap();
}

#[test]
fn empty_arrays_print_as_numpy() {
    // jax 0.10.2: str() is `[]`; repr adds the shape.
    for shape in [&[0usize, 1][..], &[1, 0, 2], &[0]] {
        assert_eq!(Tensor::zeros(shape).to_string(), "[]");
    }
    let v = Variables::from_flat([("params/e", Tensor::zeros(&[0, 1]))]).unwrap();
    assert_eq!(
        v.to_string(),
        "{'params': {'e': Array([], shape=(0, 1), dtype=float32)}}"
    );
    let v = Variables::from_flat([("params/e", Tensor::zeros(&[0]))]).unwrap();
    assert_eq!(
        v.to_string(),
        "{'params': {'e': Array([], shape=(0,), dtype=float32)}}"
    );
}

#[test]
fn clip_with_a_nan_bound_is_nan() {
    // jnp.clip(jnp.array([1., 2.]), jnp.nan, 1.) is [nan nan] in jax 0.10.2.
    let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap();
    assert!(x
        .clip(f32::NAN, 1.0)
        .unwrap()
        .to_vec()
        .iter()
        .all(|v| v.is_nan()));
    assert!(x
        .clip(0.0, f32::NAN)
        .unwrap()
        .to_vec()
        .iter()
        .all(|v| v.is_nan()));
}

#[test]
fn grad_inside_grad_is_a_typed_error() {
    let p = Tree::from(Tensor::scalar(3.0));
    let err = grad(
        |p| {
            let x = p.as_tensor().unwrap().clone();
            let inner = grad(
                |q| Ok(q.as_tensor().unwrap().mul(&x)?.sum_all()),
                &Tree::from(x.clone()),
            )?;
            Ok(inner.as_tensor().unwrap().sum_all())
        },
        &p,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("higher-order derivatives"),
        "{err}"
    );
    // A compiled step inside a grad too.
    let mut step = jit_value_and_grad(|q: &Tree| Ok(q.as_tensor().unwrap().square().sum_all()));
    let err = grad(|p| Ok(step.call(p)?.0), &p).unwrap_err();
    assert!(
        err.to_string().contains("higher-order derivatives"),
        "{err}"
    );
    // After the failure, differentiation works again on this thread.
    assert!(grad(|p| Ok(p.as_tensor().unwrap().square()), &p).is_ok());
}

#[test]
fn names_are_path_elements() {
    for name in ["a/b", "", "/"] {
        let err = core::init(random::key(0), |s| {
            s.param(name, init::zeros(), &[1]).map(|_| ())
        })
        .unwrap_err();
        assert!(
            matches!(err, Error::InvalidName { kind: "param", .. }),
            "{name:?}: {err}"
        );
        let err = core::init(random::key(0), |s| {
            s.variable("stats", name, || Ok(Tensor::zeros(&[1])))
                .map(|_| ())
        })
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidName {
                    kind: "variable",
                    ..
                }
            ),
            "{name:?}: {err}"
        );
        let err = core::init(random::key(0), |s| {
            s.put_variable("stats", name, Tensor::zeros(&[1]))
        })
        .unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{name:?}: {err}");
        let err = core::init(random::key(0), |s| {
            s.call_named(name, Dense::new(1), Tensor::ones(&[1, 2]))
                .map(|_| ())
        })
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidName {
                    kind: "submodule",
                    ..
                }
            ),
            "{name:?}: {err}"
        );
    }
    // The message names the module and the name.
    let err = core::init(random::key(0), |s| {
        s.param("a/b", init::zeros(), &[1]).map(|_| ())
    })
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "module /: param name \"a/b\" is not a valid path element (names must be non-empty and may not contain '/')"
    );
    let _ = Dense::new(1)
        .init(random::key(0), Tensor::ones(&[1, 1]))
        .unwrap();
}

struct Step;

impl flaxen::nn::Module for Step {
    type Input = (Tensor, Tensor);
    type Output = (Tensor, Tensor);
    fn call(
        &self,
        _s: &flaxen::core::Scope<'_>,
        (c, x): (Tensor, Tensor),
    ) -> flaxen::core::Result<(Tensor, Tensor)> {
        Ok((c.add(&x)?, x))
    }
}

#[test]
fn degenerate_shapes() {
    // Dense over zero input features: an empty kernel, the bias as output.
    let x = Tensor::zeros(&[2, 0]);
    let v = Dense::new(3).init(random::key(0), x.clone()).unwrap();
    assert_eq!(v.tensor("params/kernel").unwrap().shape(), &[0, 3]);
    let y = Dense::new(3).apply(&v, x, ()).unwrap();
    assert_eq!(y.to_vec(), [0.0; 6]);
    // Products with a zero-length contraction, rows or columns.
    let p = Tensor::zeros(&[3, 0])
        .matmul(&Tensor::zeros(&[0, 2]))
        .unwrap();
    assert_eq!(p.to_vec(), [0.0; 6]);
    assert_eq!(
        Tensor::zeros(&[0, 4])
            .matmul(&Tensor::zeros(&[4, 2]))
            .unwrap()
            .shape(),
        &[0, 2]
    );
    // The same on the shapes of the few-row, narrow and matrix-vector
    // kernels.
    for (m, k, n) in [
        (1, 0, 40),
        (3, 0, 100),
        (8, 0, 48),
        (5, 0, 1),
        (0, 100, 40),
        (2, 64, 0),
    ] {
        let p = Tensor::zeros(&[m, k])
            .matmul(&Tensor::zeros(&[k, n]))
            .unwrap();
        assert_eq!(p.shape(), &[m, n]);
        assert!(p.to_vec().iter().all(|v| v.to_bits() == 0), "{m}x{k}x{n}");
    }
    // Circular padding around a spatial axis of length 0: JAX's
    // `jnp.pad(mode="wrap")` raises, flaxen returns a typed error naming
    // the module; and a wrap with the wrong number of pairs.
    let conv = flaxen::nn::Conv::new(2, &[3]).padding(flaxen::nn::Padding::Circular);
    let err = conv
        .init(random::key(0), Tensor::zeros(&[1, 0, 2]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("module /") && err.contains("axis 1 of length 0"),
        "{err}"
    );
    let err = Tensor::zeros(&[2, 3]).pad_wrap(&[(1, 1)]).unwrap_err();
    assert!(err.to_string().contains("1 (before, after) pairs"), "{err}");
    assert_eq!(
        Tensor::zeros(&[0, 3])
            .pad_wrap(&[(0, 0), (1, 2)])
            .unwrap()
            .shape(),
        &[0, 6]
    );
    // Scan over a scalar: Flax raises an index error; flaxen a lift error.
    let err = flaxen::nn::Scan::new(Step)
        .init(random::key(0), (Tensor::zeros(&[]), Tensor::scalar(1.0)))
        .unwrap_err();
    assert!(
        err.to_string().contains("has no axis 0 to scan over"),
        "{err}"
    );
}

#[test]
fn element_counts_that_wrap_are_refused() {
    isolated(
        "element_counts_that_wrap_are_refused",
        Duration::from_secs(60),
        || {
            let err = Tensor::zeros(&[4])
                .reshape(&[(1isize << 62) + 1, 4])
                .unwrap_err();
            assert!(
                matches!(err, flaxen::tensor::TensorError::Reshape { .. }),
                "{err}"
            );
            let err = Tensor::zeros(&[0])
                .reshape(&[0, 1 << 62, 4, 1 << 10])
                .unwrap_err();
            assert!(
                matches!(err, flaxen::tensor::TensorError::Reshape { .. }),
                "{err}"
            );
        },
    );
}

#[test]
fn shapes_too_large_to_allocate_are_typed_errors() {
    isolated(
        "shapes_too_large_to_allocate_are_typed_errors",
        Duration::from_secs(60),
        || {
            // A count that overflows, and one that passes the count but cannot be
            // served: typed errors, not an aborted process.
            for shape in [&[1usize << 62, 8][..], &[1 << 40, 1 << 10]] {
                let err = Tensor::try_full(shape, 0.0).unwrap_err();
                assert!(
                    matches!(err, flaxen::tensor::TensorError::Argument { .. }),
                    "{err}"
                );
            }
            let err = Tensor::zeros(&[1])
                .broadcast_to(&[1 << 40, 1 << 4])
                .unwrap_err();
            assert!(err.to_string().contains("broadcast_to"), "{err}");
            // A zero before huge lengths is an empty array, as in NumPy.
            assert_eq!(Tensor::try_full(&[0, 1 << 40, 4], 1.0).unwrap().size(), 0);
        },
    );
}

#[test]
fn the_gradient_of_x_to_the_zero_is_jaxs() {
    // jax 0.10.2: jax.grad(lambda x: x ** 0.0)(0.0) is nan (0 * 0^-1), and
    // 0.0 at 2.0.
    let at = |x: f32| {
        grad(
            |p| Ok(p.as_tensor().unwrap().powf(0.0)),
            &Tree::from(Tensor::scalar(x)),
        )
        .unwrap()
        .as_tensor()
        .unwrap()
        .item()
        .unwrap()
    };
    assert!(at(0.0).is_nan());
    assert_eq!(at(2.0), 0.0);
}

#[test]
fn compiled_steps_that_branch_on_values_are_not_replayed() {
    // The step branches on a traced value: replaying the first trace would
    // bake in its branch (JAX raises a concretization error). flaxen runs
    // such a step eagerly on every call instead.
    let mut step = jit_value_and_grad(|p: &Tree| {
        let x = p.as_tensor().unwrap();
        if x.item()? > 0.0 {
            Ok(x.square())
        } else {
            Ok(x * 3.0)
        }
    });
    let g = |v: f32, step: &mut flaxen::tensor::JitValueAndGrad<_>| {
        let (_, g) = step.call(&Tree::from(Tensor::scalar(v))).unwrap();
        g.as_tensor().unwrap().item().unwrap()
    };
    assert_eq!(g(2.0, &mut step), 4.0);
    assert_eq!(g(-1.0, &mut step), 3.0);
    assert!(!step.is_compiled());
}

/// Each item minus the mean over the items.
struct Center;

impl Module for Center {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &core::Scope<'_>, x: Tensor) -> core::Result<Tensor> {
        Ok(x.sub(&s.pmean("batch", &x)?)?)
    }
}

#[test]
fn collectives_over_many_items_finish_quickly() {
    isolated(
        "collectives_over_many_items_finish_quickly",
        Duration::from_secs(60),
        || {
            // Items are replayed on the calling thread (no thread per item): 100,000
            // items with a pmean are two rounds over the items.
            let n = 100_000;
            let x = Tensor::from_vec((0..n).map(|i| i as f32).collect(), &[n]).unwrap();
            let start = std::time::Instant::now();
            let y = flaxen::nn::Vmap::new(Center)
                .axis_name("batch")
                .apply(&Default::default(), x.clone(), ())
                .unwrap();
            let elapsed = start.elapsed();
            // Item 0 is 0 minus the mean over the items.
            let mean = x.mean(&[0], false).unwrap().item().unwrap();
            assert_eq!(y.shape(), [n]);
            assert_eq!(y.to_vec()[0], -mean);
            eprintln!("100,000 items with a pmean: {elapsed:?}");
            assert!(elapsed.as_secs_f64() < 10.0, "{elapsed:?}");
        },
    );
}

#[test]
fn collectives_under_grad_wake_only_the_next_item() {
    isolated(
        "collectives_under_grad_wake_only_the_next_item",
        Duration::from_secs(60),
        || {
            // Under grad the items run in lockstep, a thread each; handing the
            // baton on wakes one thread, so 2,000 items take about as long as
            // 2,000 thread starts (it was minutes when every hand-off woke all).
            let n = 2_000;
            let x = Tensor::from_vec((0..n).map(|i| i as f32).collect(), &[n]).unwrap();
            let start = std::time::Instant::now();
            let g = grad(
                |p: &Tree| {
                    let x = p.as_tensor().unwrap().clone();
                    let y = flaxen::nn::Vmap::new(Center).axis_name("batch").apply(
                        &Default::default(),
                        x,
                        (),
                    )?;
                    Ok(y.square().sum_all())
                },
                &Tree::leaf(x),
            )
            .unwrap();
            let elapsed = start.elapsed();
            eprintln!("2,000 items with a pmean under grad: {elapsed:?}");
            assert_eq!(g.as_tensor().unwrap().shape(), [n]);
            assert!(elapsed.as_secs_f64() < 20.0, "{elapsed:?}");
        },
    );
}

/// `depth` levels of nested modules around a Dense.
struct Nest(usize);

impl Module for Nest {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &core::Scope<'_>, x: Tensor) -> core::Result<Tensor> {
        if self.0 == 0 {
            return s.call(Dense::new(2), x);
        }
        s.call(Nest(self.0 - 1), x)
    }
}

#[test]
fn deep_models_run_to_the_documented_depth_on_a_small_stack() {
    isolated(
        "deep_models_run_to_the_documented_depth_on_a_small_stack",
        Duration::from_secs(60),
        || {
            use flaxen::nn::MAX_MODULE_DEPTH;
            // A thread with a 256 KB stack: submodules continue on heap-allocated
            // stack segments, so the depth limit, not the stack, decides.
            let run = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(|| {
                    let x = Tensor::ones(&[1, 2]);
                    // The Dense sits at depth MAX_MODULE_DEPTH: the deepest allowed.
                    let deepest = Nest(MAX_MODULE_DEPTH - 1);
                    let v = deepest.init(random::key(0), x.clone()).unwrap();
                    let y = deepest.apply(&v, x.clone(), ()).unwrap();
                    assert_eq!(y.shape(), [1, 2]);
                    let e = Nest(MAX_MODULE_DEPTH).init(random::key(0), x).unwrap_err();
                    match &e {
                        Error::ModuleDepth { path, limit } => {
                            assert_eq!(*limit, MAX_MODULE_DEPTH);
                            assert!(path.starts_with("/Nest_0/Nest_0/Nest_0/.../"), "{path}");
                        }
                        other => panic!("{other:?}"),
                    }
                    assert!(e.to_string().contains("nested more than 1000 deep"), "{e}");
                })
                .unwrap();
            run.join().unwrap();
        },
    );
}
