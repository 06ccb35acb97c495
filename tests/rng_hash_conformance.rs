//! The make_rng hash against Flax 0.12.8's own `_fold_in_static`
//! (tools/oracle/generate_random.py), with and without the separator.

mod common;

use common::load_fixture;
use flaxen::core::rng_hash::{path_hash, PathElement};
use flaxen::random;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct Case {
    path: Vec<Value>,
    separator: bool,
    hash: u32,
    folded_key0: Vec<u32>,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[test]
fn hashes_and_folded_keys_match_flax() {
    let fixture: Fixture = load_fixture("rng_hash.json");
    assert!(!fixture.cases.is_empty());
    for case in &fixture.cases {
        let path: Vec<PathElement<'_>> = case
            .path
            .iter()
            .map(|v| match v {
                Value::String(s) => PathElement::Name(s),
                Value::Number(n) => PathElement::Count(n.as_u64().unwrap()),
                other => panic!("bad path element {other}"),
            })
            .collect();
        let h = path_hash(&path, case.separator);
        assert_eq!(h, case.hash, "{:?} separator={}", case.path, case.separator);
        let folded = random::fold_in(random::key(0), h);
        assert_eq!(folded.data().to_vec(), case.folded_key0, "{:?}", case.path);
    }
}
