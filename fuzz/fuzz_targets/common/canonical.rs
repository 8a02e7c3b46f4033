//! The checks of the `canonical` fuzz target, shared with
//! `core/tests/it/fuzz_corpus.rs` (which replays the corpus through
//! them).
//!
//! Differential against `serde_json_canonicalizer` (RFC 8785): whatever one
//! accepts the other accepts with the same bytes, and
//! `canonical(canonical(x)) == canonical(x)` under both profiles, which also
//! validate alike. Where the two may rightly disagree: we reject duplicate
//! member names (serde_json keeps the last one), serde_json stops at 127
//! levels of nesting (we bound ours at 100 here), and the RFC 8785 profile
//! refuses integer literals past ±(2^53 − 1) (I-JSON), which the Decision
//! Gate profile accepts; so ECMAScript's plain printing of a double below
//! 1e21 (`1e20` → `100000000000000000000`) is refused when read again.

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
            match to_vec_with(canonical, &rfc) {
                Ok(again) => assert_eq!(&again, canonical, "not idempotent"),
                Err(error) => assert!(
                    matches!(error.kind, CanonicalizeErrorKind::UnsafeInteger { .. }),
                    "canonical output refused: {error}"
                ),
            }
        }
        Err(error) => match &error.kind {
            CanonicalizeErrorKind::UnsafeInteger { literal, .. } => {
                // The named literal is in the input, digit for digit
                // (shortened ones end in their length).
                let shown = literal.split('…').next().unwrap_or_default();
                assert!(
                    data.windows(shown.len().max(1))
                        .any(|window| window == shown.as_bytes()),
                    "unsafe integer {literal} is not in the input"
                );
            }
            CanonicalizeErrorKind::DuplicateKey(_) | CanonicalizeErrorKind::TooDeep(_) => {}
            _ => assert!(
                oracle.is_none(),
                "we reject what the oracle accepts: {error}"
            ),
        },
    }
    let decision_gate = to_vec_with(data, &dg);
    let unsafe_integer = matches!(
        &ours,
        Err(error) if matches!(error.kind, CanonicalizeErrorKind::UnsafeInteger { .. })
    );
    if !unsafe_integer {
        assert_eq!(
            ours.is_ok(),
            decision_gate.is_ok(),
            "the two profiles validate differently"
        );
    }
    if let Ok(canonical) = decision_gate {
        let again = to_vec_with(&canonical, &dg);
        assert_eq!(again.ok(), Some(canonical), "DG profile not idempotent");
    }
    ours.is_ok()
}
