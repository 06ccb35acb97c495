//! Saving a Generator's state with serde and restoring it (feature `serde`).
#![cfg(feature = "serde")]

use flaxen::random::tf::{Algorithm, Generator, GeneratorState};

#[test]
fn state_round_trips_through_json() {
    let mut g = Generator::from_seed(1);
    g.normal(&[]).unwrap();
    let json = serde_json::to_string(g.state()).unwrap();
    assert_eq!(json, r#"{"alg":"Philox","state":[257,0,0]}"#);
    let expect = g.normal(&[3]).unwrap();
    let state: GeneratorState = serde_json::from_str(&json).unwrap();
    let mut restored = Generator::from_generator_state(state);
    assert_eq!(restored.normal(&[3]).unwrap(), expect);
    // A whole Generator serializes as its state.
    let again: Generator = serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
    assert_eq!(again, g);
}

#[test]
fn bad_saved_states_are_refused() {
    let err =
        serde_json::from_str::<GeneratorState>(r#"{"alg":"Philox","state":[1,2]}"#).unwrap_err();
    assert!(err.to_string().contains("3 elements"), "{err}");
    assert!(
        serde_json::from_str::<GeneratorState>(r#"{"alg":"ThreeFry","state":[1,2,3]}"#).is_err()
    );
    assert!(
        serde_json::from_str::<GeneratorState>(r#"{"alg":"Mersenne","state":[1,2,3]}"#).is_err()
    );
    let tf: GeneratorState = serde_json::from_str(r#"{"alg":"ThreeFry","state":[1,2]}"#).unwrap();
    assert_eq!(tf.algorithm(), Algorithm::ThreeFry);
    assert!(Generator::from_seed(1).restore(tf).is_err());
}
