//! `tf.random.Generator` under `MirroredStrategy`: every number the
//! TensorFlow guide (`004_e3198094d06a8083.txt`, "Interaction with
//! distribution strategies", "Checkpoint", "SavedModel") prints in these
//! sections, and the replica rules of `../shared/spec/tf-random.md`
//! ("Replica contexts", verified against TF 2.21).

use flaxen::random::tf::{Algorithm, Generator, MirroredStrategy, TfRandomError};
use flaxen::sharding::{create_device_mesh, Mesh};
use ndarray::ArrayD;

type R<T> = Result<T, TfRandomError>;

fn two() -> MirroredStrategy {
    MirroredStrategy::new(&["cpu:0", "cpu:1"]).unwrap()
}

fn draw(g: &mut Generator) -> R<f32> {
    Ok(g.normal(&[])?[[]])
}

#[test]
fn generator_created_outside_is_shared_in_turn() {
    let mut g = Generator::from_seed(1);
    let strat = two();
    let out = strat.scope(|| strat.run(|| draw(&mut g))).unwrap();
    // The guide prints replica 0's 0.43842274, then replica 1's 1.6272374.
    assert_eq!(out.values(), &[0.43842274, 1.6272374]);
    assert!(!g.is_distributed());
}

#[test]
fn generator_created_in_scope_mixes_the_replica_id() {
    let strat = two();
    let mut g = strat.scope(|| Generator::from_seed(1));
    assert!(g.is_distributed());
    let a = strat.run(|| draw(&mut g)).unwrap();
    assert_eq!(a.values(), &[-0.87930447, 0.020661574]);
    assert_eq!(
        a.to_string(),
        "PerReplica:{ 0: -0.87930447, 1: 0.020661574 }"
    );
    // The replicas share the counter: the state moved on once.
    assert_eq!(g.state().words(), &[257, 0, 0]);
    let b = strat.run(|| draw(&mut g)).unwrap();
    assert_eq!(b.values(), &[-1.5822568, 0.77539235]);
    // Outside a replica context, no mixing (spec: from_seed(0) gives the
    // plain stream's draws).
    let mut g0 = strat.scope(|| Generator::from_seed(0));
    let _ = strat.run(|| draw(&mut g0)).unwrap();
    assert_eq!(draw(&mut g0).unwrap(), -1.0359411);
}

#[test]
fn generator_created_inside_run() {
    let strat = two();
    for _ in 0..2 {
        let out = strat
            .scope(|| {
                strat.run(|| {
                    let mut g = Generator::from_seed(1);
                    Ok::<_, TfRandomError>([draw(&mut g)?, draw(&mut g)?])
                })
            })
            .unwrap();
        // The guide prints [-0.87930447 -1.5822568 ] and [0.02066157 0.77539235].
        assert_eq!(
            out.values(),
            &[[-0.87930447, -1.5822568], [0.020661574, 0.77539235]]
        );
    }
}

#[test]
fn checkpoints_inside_a_strategy_and_into_another() {
    let strat = two();
    let mut g = strat.scope(|| Generator::from_seed(1));
    let first = strat.run(|| draw(&mut g)).unwrap();
    assert_eq!(first.values(), &[-0.87930447, 0.020661574]);
    let checkpoint = g.state().clone();
    let saving = [
        strat.run(|| draw(&mut g)).unwrap(),
        strat.run(|| draw(&mut g)).unwrap(),
    ];
    assert_eq!(saving[0].values(), &[-1.5822568, 0.77539235]);
    assert_eq!(saving[1].values(), &[-0.5039703, 0.1251838]);
    g.restore(checkpoint.clone()).unwrap();
    assert_eq!(strat.run(|| draw(&mut g)).unwrap(), saving[0]);
    assert_eq!(strat.run(|| draw(&mut g)).unwrap(), saving[1]);

    // Restored into a strategy of three replicas: the first two continue
    // as before, the third has its own stream.
    let strat2 = MirroredStrategy::new(&["cpu:0", "cpu:1", "cpu:2"]).unwrap();
    let mut g2 = strat2.scope(|| Generator::from_seed(1));
    g2.restore(checkpoint).unwrap();
    let a = strat2.run(|| draw(&mut g2)).unwrap();
    let b = strat2.run(|| draw(&mut g2)).unwrap();
    assert_eq!(a.values(), &[-1.5822568, 0.77539235, 0.6851049]);
    assert_eq!(b.values(), &[-0.5039703, 0.1251838, -0.58519536]);

    // A checkpoint of another algorithm is refused.
    let three_fry = Generator::from_seed_with(1, Algorithm::ThreeFry)
        .state()
        .clone();
    assert!(matches!(
        g2.restore(three_fry),
        Err(TfRandomError::AlgorithmMismatch { .. })
    ));
}

/// The SavedModel flow: a module's generator made inside the strategy,
/// saved there, loaded outside (no replica context: no mixing).
#[test]
fn saved_model_inside_loaded_outside() {
    let strat = two();
    let mut m = strat.scope(|| Generator::from_seed(0));
    let out = strat.run(|| draw(&mut m)).unwrap();
    assert_eq!(out.values(), &[-1.4154755, -0.11388441]);
    assert_eq!(m.state().words(), &[256, 0, 0]);
    let saved = m.state().clone();
    let a = strat.run(|| draw(&mut m)).unwrap();
    assert_eq!(a.values(), &[-0.68758255, 0.8084062]);
    assert_eq!(m.state().words(), &[512, 0, 0]);
    let b = strat.run(|| draw(&mut m)).unwrap();
    assert_eq!(b.values(), &[-0.27342677, -0.53093255]);
    assert_eq!(m.state().words(), &[768, 0, 0]);

    let mut imported = Generator::from_generator_state(saved);
    assert!(!imported.is_distributed());
    assert_eq!(imported.state().words(), &[256, 0, 0]);
    assert_eq!(draw(&mut imported).unwrap(), -1.0359411);
    assert_eq!(imported.state().words(), &[512, 0, 0]);
    // The guide prints -0.06425078; TF 2.21 gives -0.064250775 (the spec).
    assert_eq!(draw(&mut imported).unwrap(), -0.064250775);
    assert_eq!(imported.state().words(), &[768, 0, 0]);
}

#[test]
fn strategies_over_a_mesh_and_bad_input() {
    let mesh = Mesh::new(create_device_mesh(&[3]).unwrap(), &["data"]).unwrap();
    let strat = MirroredStrategy::from_mesh(&mesh);
    assert_eq!(strat.num_replicas_in_sync(), 3);
    assert_eq!(strat.devices(), &["cpu:0", "cpu:1", "cpu:2"]);
    let mut g = strat.scope(|| Generator::from_seed(1));
    let _ = strat.run(|| draw(&mut g)).unwrap();
    let out = strat.run(|| draw(&mut g)).unwrap();
    // Replica 2's second draw (spec: 0.6851049).
    assert_eq!(*out.get(2).unwrap(), 0.6851049);
    assert_eq!(
        out.get(3).unwrap_err(),
        TfRandomError::ReplicaOutOfRange {
            replica: 3,
            replicas: 3
        }
    );
    assert!(matches!(
        MirroredStrategy::new(&[]),
        Err(TfRandomError::StrategyDevices { .. })
    ));
    assert!(MirroredStrategy::new(&["cpu:0", "cpu:0"]).is_err());
    // An error in a replica stops the run.
    let mut calls = 0;
    let e = strat.run(|| {
        calls += 1;
        g.uniform_int::<i32>(&[2], 5, 5)
            .map(|a: ArrayD<i32>| a.len())
    });
    assert!(matches!(e, Err(TfRandomError::EmptyRange { .. })));
    assert_eq!(calls, 1);
}
