//! The checks of the `canonical` fuzz target, shared with
//! `core/tests/canonical_fuzz_corpus.rs` (which replays the corpus through
//! them).
//!
//! Differential against `serde_json_canonicalizer` (RFC 8785): whatever one
//! accepts the other accepts with the same bytes, and
//! `canonical(canonical(x)) == canonical(x)` under both profiles, which also
//! validate alike. Where the two may rightly disagree: we reject duplicate
//! member names (serde_json keeps the last one), and serde_json stops at 127
//! levels of nesting (we bound ours at 100 here).

use evidence_wire::canonical::{CanonicalizeErrorKind, Options, Profile, to_vec_with};

/// Runs the checks on one input; panics when one fails. Returns whether the
/// input was accepted.
pub fn run(data: &[u8]) -> bool {
    let rfc = Options::with_profile(Profile::Rfc8785).with_max_depth(100);
    let dg = Options::with_profile(Profile::DecisionGate).with_max_depth(100);
    let ours = to_vec_with(data, &rfc);
    let oracle = serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|value| serde_json_canonicalizer::to_vec(&value).ok());
    match &ours {
        Ok(canonical) => {
            assert_eq!(
                Some(canonical),
                oracle.as_ref(),
                "differs from serde_json_canonicalizer"
            );
            let again = to_vec_with(canonical, &rfc);
            assert_eq!(again.as_ref().ok(), Some(canonical), "not idempotent");
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
    assert_eq!(
        ours.is_ok(),
        decision_gate.is_ok(),
        "the two profiles validate differently"
    );
    if let Ok(canonical) = decision_gate {
        let again = to_vec_with(&canonical, &dg);
        assert_eq!(again.ok(), Some(canonical), "DG profile not idempotent");
    }
    ours.is_ok()
}
