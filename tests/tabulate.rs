//! `nn::tabulate` against Flax's `nn.tabulate` for the same model
//! (tests/fixtures/tabulate_net.txt, written by
//! tools/oracle/generate_tabulate.py with ANSI styling stripped).

use flaxen::core::{Result, Scope};
use flaxen::nn::{tabulate, BatchNorm, Dense, Module};
use flaxen::random;
use flaxen::tensor::Tensor;

struct Net {
    train: bool,
}

impl Module for Net {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(8), x)?;
        let x = s
            .call(BatchNorm::new().use_running_average(!self.train), x)?
            .relu();
        s.call(Dense::new(3), x)
    }
}

#[test]
fn the_table_is_flax_s() {
    let x = Tensor::from_array(random::normal(random::key(1), &[6, 4]).unwrap());
    let summary = tabulate(&Net { train: false }, random::key(0), x).unwrap();
    let ours: Vec<String> = summary
        .to_string()
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect();
    let flax = std::fs::read_to_string(format!(
        "{}/tests/fixtures/tabulate_net.txt",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let flax: Vec<&str> = flax.lines().collect();
    assert_eq!(ours, flax, "\n{}", ours.join("\n"));
    assert_eq!(summary.total("params"), (83, 332));
    assert_eq!(summary.total("batch_stats"), (16, 64));
    let bn = &summary.rows[2];
    assert_eq!(
        (bn.path.as_str(), bn.module.as_str()),
        ("BatchNorm_0", "BatchNorm")
    );
    assert_eq!(bn.variables["batch_stats"][1].type_name, "float32[8]");
}

/// A module whose input is not described shows empty cells; an error
/// inside stops the table and leaves nothing recording.
#[test]
fn undescribed_inputs_and_errors() {
    struct Quiet;
    impl Module for Quiet {
        type Input = Tensor;
        type Output = Tensor;
        fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
            s.call(Dense::new(2), x)
        }
    }
    struct Outer;
    impl Module for Outer {
        type Input = Tensor;
        type Output = Tensor;
        fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
            s.call(Quiet, x)
        }
    }
    let t = tabulate(&Outer, random::key(0), Tensor::ones(&[1, 3])).unwrap();
    assert_eq!(t.rows[1].path, "Quiet_0");
    assert_eq!(t.rows[1].inputs, "");
    assert_eq!(t.rows[2].path, "Quiet_0/Dense_0");
    assert_eq!(t.rows[2].inputs, "float32[1,3]");
    // Dense(2) of a 0-d input fails inside init: the error comes back.
    assert!(tabulate(&Outer, random::key(0), Tensor::scalar(1.0)).is_err());
    // Nothing is left recording: a plain init afterwards works as before.
    assert!(Outer.init(random::key(0), Tensor::ones(&[1, 3])).is_ok());
}
