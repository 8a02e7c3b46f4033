//! Replays the checked-in corpus of the `canonical` fuzz target
//! (`fuzz/corpus/canonical/`, seeded from the JCS vectors) with the same
//! checks the target makes: agreement with `serde_json_canonicalizer`,
//! idempotence under both profiles, and both profiles validating alike.

use std::path::Path;

use evidence_wire::canonical::{CanonicalizeErrorKind, Options, Profile, to_vec_with};

/// The fuzz target's checks; returns whether the input was accepted.
fn check(data: &[u8]) -> bool {
    let rfc = Options::with_profile(Profile::Rfc8785).with_max_depth(100);
    let dg = Options::with_profile(Profile::DecisionGate).with_max_depth(100);
    let ours = to_vec_with(data, &rfc);
    let oracle = serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|value| serde_json_canonicalizer::to_vec(&value).ok());
    match &ours {
        Ok(canonical) => {
            assert_eq!(Some(canonical), oracle.as_ref());
            assert_eq!(&to_vec_with(canonical, &rfc).unwrap(), canonical);
        }
        Err(error) => match error.kind {
            CanonicalizeErrorKind::DuplicateKey(_) | CanonicalizeErrorKind::TooDeep(_) => {}
            _ => assert!(
                oracle.is_none(),
                "we reject what the oracle accepts: {error}"
            ),
        },
    }
    let decision_gate = to_vec_with(data, &dg);
    assert_eq!(ours.is_ok(), decision_gate.is_ok());
    if let Ok(canonical) = decision_gate {
        assert_eq!(to_vec_with(&canonical, &dg).unwrap(), canonical);
    }
    ours.is_ok()
}

#[test]
fn canonical_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/canonical");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    let (mut accepted, mut rejected) = (0, 0);
    for path in &entries {
        let data = std::fs::read(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        let ok = check(&data);
        // Seeds named after a must-error vector must be rejected.
        if name.starts_with("edge_err_") {
            assert!(!ok, "{name} must be rejected");
        }
        if ok {
            accepted += 1;
        } else {
            rejected += 1;
        }
    }
    assert!(
        accepted >= 40 && rejected >= 8,
        "corpus holds the JCS vectors: {accepted} accepted, {rejected} rejected"
    );
}
