//! Canonical JSON on raw bytes, differential against
//! `serde_json_canonicalizer` (RFC 8785), plus idempotence:
//! `canonical(canonical(x)) == canonical(x)` under both profiles.
//!
//! Where the two may rightly disagree: we reject duplicate member names
//! (serde_json keeps the last one), and serde_json stops at 127 levels of
//! nesting (we bound ours at 100 here). `core/tests/canonical_fuzz_corpus.rs`
//! replays the corpus with the same checks.
#![no_main]

use evidence_wire::canonical::{CanonicalizeErrorKind, Options, Profile, to_vec_with};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
            assert_eq!(
                &to_vec_with(canonical, &rfc).unwrap(),
                canonical,
                "not idempotent"
            );
        }
        Err(error) => match error.kind {
            CanonicalizeErrorKind::DuplicateKey(_) | CanonicalizeErrorKind::TooDeep(_) => {}
            _ => assert!(
                oracle.is_none(),
                "we reject what the oracle accepts: {error}"
            ),
        },
    }
    // The Decision Gate profile validates exactly like RFC 8785 and is
    // idempotent too.
    let decision_gate = to_vec_with(data, &dg);
    assert_eq!(ours.is_ok(), decision_gate.is_ok());
    if let Ok(canonical) = decision_gate {
        assert_eq!(
            to_vec_with(&canonical, &dg).unwrap(),
            canonical,
            "DG not idempotent"
        );
    }
});
