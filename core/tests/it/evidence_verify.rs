//! Evidence verification: tampering is caught, each failure has its own
//! error kind, the check order is Decision Gate's, and only `verify` makes a
//! `VerifiedEvidence`.

use std::collections::BTreeSet;

use evidence_wire::canonical::{CanonicalizeErrorKind, Profile};
use evidence_wire::evidence::{
    EvidenceError, EvidenceResult, EvidenceSignature, EvidenceValue, HashDigest, KeySet,
    TrustPolicy, VerifyError, sign, verify,
};

fn key(seed: u8) -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
}

fn policy() -> TrustPolicy {
    let mut keys = KeySet::new();
    keys.insert("release-signer", key(7).verifying_key());
    keys.insert("other-signer", key(9).verifying_key());
    TrustPolicy::RequireSignature { keys }
}

fn approved(count: u32) -> EvidenceValue {
    EvidenceValue::json_text(&format!(r#"{{"status":"approved","count":{count}}}"#)).unwrap()
}

/// A result with value, hash and signature, as an honest provider sends it.
fn signed() -> EvidenceResult {
    sign(
        EvidenceResult::with_value(approved(42)),
        "release-signer",
        &key(7),
        Profile::Rfc8785,
    )
    .unwrap()
}

fn check(result: EvidenceResult, policy: &TrustPolicy) -> Result<(), VerifyError> {
    verify(result, policy, Profile::Rfc8785).map(|_| ())
}

#[test]
fn an_honest_signed_result_verifies() {
    let verified = verify(signed(), &policy(), Profile::Rfc8785).unwrap();
    assert_eq!(verified.signer(), Some("release-signer"));
    assert_eq!(verified.result(), &signed());
    assert!(verify(signed(), &TrustPolicy::Audit, Profile::Rfc8785).is_ok());
}

#[test]
fn tampered_value_is_a_value_mismatch() {
    let mut result = signed();
    result.value = Some(approved(43));
    let error = check(result.clone(), &policy()).unwrap_err();
    let VerifyError::ValueMismatch {
        declared,
        computed,
        key_id,
        profile,
    } = &error
    else {
        panic!("expected ValueMismatch, got {error:?}");
    };
    assert_eq!(declared, &signed().evidence_hash.unwrap().value);
    assert_eq!(
        computed,
        &approved(43).digest(Profile::Rfc8785).unwrap().value
    );
    assert_eq!(key_id, "release-signer");
    assert_eq!(*profile, Profile::Rfc8785);
    assert!(error.to_string().contains("rfc8785 profile"), "{error}");
    assert_eq!(error.kind(), "value_mismatch");
    // Without a signature to vouch for the hash, the same tampering is a
    // plain hash mismatch.
    assert_eq!(
        check(result, &TrustPolicy::Audit).unwrap_err().kind(),
        "hash_mismatch"
    );
}

#[test]
fn tampered_value_without_a_declared_hash_fails_signature_verification() {
    let mut result = signed();
    result.evidence_hash = None;
    result.value = Some(approved(43));
    assert_eq!(
        check(result, &policy()).unwrap_err(),
        VerifyError::VerificationFailed("release-signer".to_owned())
    );
}

#[test]
fn tampered_hash_is_a_hash_mismatch() {
    let mut result = signed();
    let forged = approved(43).digest(Profile::Rfc8785).unwrap();
    result.evidence_hash = Some(forged.clone());
    let error = check(result.clone(), &policy()).unwrap_err();
    assert_eq!(
        error,
        VerifyError::HashMismatch {
            declared: forged.value.clone(),
            computed: signed().evidence_hash.unwrap().value,
            profile: Profile::Rfc8785,
        }
    );
    assert_eq!(error.kind(), "hash_mismatch");
    assert_eq!(
        check(result, &TrustPolicy::Audit).unwrap_err().kind(),
        "hash_mismatch"
    );

    // A hash that is not even hex, or upper-case hex, fails closed too.
    for declared in [
        "not-a-hash".to_owned(),
        signed().evidence_hash.unwrap().value.to_uppercase(),
    ] {
        let mut result = signed();
        result.evidence_hash = Some(HashDigest {
            value: declared,
            ..HashDigest::sha256(&[0; 32])
        });
        assert_eq!(
            check(result, &TrustPolicy::Audit).unwrap_err().kind(),
            "hash_mismatch"
        );
    }
}

#[test]
fn wrong_key_id_is_not_authorized() {
    let mut result = signed();
    result.signature.as_mut().unwrap().key_id = "unknown-signer".to_owned();
    let error = check(result, &policy()).unwrap_err();
    assert_eq!(
        error,
        VerifyError::KeyNotAuthorized("unknown-signer".to_owned())
    );
    assert_eq!(error.kind(), "key_not_authorized");
}

#[test]
fn authorized_but_different_key_fails_verification() {
    let mut result = signed();
    result.signature.as_mut().unwrap().key_id = "other-signer".to_owned();
    assert_eq!(
        check(result, &policy()).unwrap_err(),
        VerifyError::VerificationFailed("other-signer".to_owned())
    );
}

#[test]
fn truncated_signature_is_invalid_signature_bytes() {
    let mut result = signed();
    result.signature.as_mut().unwrap().signature.truncate(63);
    let error = check(result, &policy()).unwrap_err();
    assert_eq!(error, VerifyError::InvalidSignatureBytes(63));
    assert_eq!(error.kind(), "invalid_signature_bytes");

    let mut empty = signed();
    empty.signature.as_mut().unwrap().signature.clear();
    assert_eq!(
        check(empty, &policy()).unwrap_err(),
        VerifyError::InvalidSignatureBytes(0)
    );
}

#[test]
fn flipped_signature_bit_fails_verification() {
    for index in [0, 31, 32, 63] {
        let mut result = signed();
        result.signature.as_mut().unwrap().signature[index] ^= 0x01;
        let error = check(result, &policy()).unwrap_err();
        assert_eq!(
            error.kind(),
            "signature_verification_failed",
            "byte {index}"
        );
    }
}

#[test]
fn the_four_tamperings_have_four_distinct_kinds() {
    let mut tampered_value = signed();
    tampered_value.value = Some(approved(43));
    let mut tampered_hash = signed();
    tampered_hash.evidence_hash = Some(approved(43).digest(Profile::Rfc8785).unwrap());
    let mut wrong_key = signed();
    wrong_key.signature.as_mut().unwrap().key_id = "nobody".to_owned();
    let mut truncated = signed();
    truncated.signature.as_mut().unwrap().signature.pop();
    let kinds: BTreeSet<&str> = [tampered_value, tampered_hash, wrong_key, truncated]
        .into_iter()
        .map(|result| check(result, &policy()).unwrap_err().kind())
        .collect();
    assert_eq!(kinds.len(), 4, "{kinds:?}");
}

#[test]
fn missing_signature_unsupported_scheme_and_missing_value() {
    let mut unsigned = signed();
    unsigned.signature = None;
    assert_eq!(
        check(unsigned.clone(), &policy()).unwrap_err(),
        VerifyError::MissingSignature
    );
    assert!(check(unsigned, &TrustPolicy::Audit).is_ok());

    let mut scheme = signed();
    scheme.signature.as_mut().unwrap().scheme = "rsa".to_owned();
    assert_eq!(
        check(scheme, &policy()).unwrap_err(),
        VerifyError::UnsupportedScheme("rsa".to_owned())
    );

    let mut no_value = signed();
    no_value.value = None;
    assert_eq!(
        check(no_value.clone(), &policy()).unwrap_err(),
        VerifyError::MissingValue
    );
    // A hash without a value is refused under audit as well.
    assert_eq!(
        check(no_value, &TrustPolicy::Audit).unwrap_err(),
        VerifyError::MissingValue
    );
}

#[test]
fn checks_run_in_decision_gate_order() {
    // Each case breaks two things; the earlier check in DG's order wins.
    let mut scheme_and_key = signed();
    let signature = scheme_and_key.signature.as_mut().unwrap();
    signature.scheme = "rsa".to_owned();
    signature.key_id = "nobody".to_owned();
    assert_eq!(
        check(scheme_and_key, &policy()).unwrap_err().kind(),
        "unsupported_signature_scheme"
    );

    let mut key_and_value = signed();
    key_and_value.signature.as_mut().unwrap().key_id = "nobody".to_owned();
    key_and_value.value = None;
    assert_eq!(
        check(key_and_value, &policy()).unwrap_err().kind(),
        "key_not_authorized"
    );

    let mut value_and_bytes = signed();
    value_and_bytes.value = None;
    value_and_bytes.signature.as_mut().unwrap().signature.pop();
    assert_eq!(
        check(value_and_bytes, &policy()).unwrap_err().kind(),
        "missing_value"
    );

    let mut hash_and_bytes = signed();
    hash_and_bytes.evidence_hash = Some(approved(1).digest(Profile::Rfc8785).unwrap());
    hash_and_bytes.signature.as_mut().unwrap().signature.pop();
    assert_eq!(
        check(hash_and_bytes, &policy()).unwrap_err().kind(),
        "hash_mismatch"
    );

    let mut missing_and_scheme = signed();
    missing_and_scheme.signature = None;
    missing_and_scheme.value = None;
    assert_eq!(
        check(missing_and_scheme, &policy()).unwrap_err().kind(),
        "missing_signature"
    );
}

#[test]
fn audit_fills_in_a_missing_hash_and_accepts_error_results() {
    let mut result = signed();
    result.evidence_hash = None;
    result.signature = None;
    let verified = verify(result, &TrustPolicy::Audit, Profile::Rfc8785).unwrap();
    assert_eq!(verified.hash(), signed().evidence_hash.as_ref());
    assert_eq!(verified.signer(), None);

    let failure = EvidenceResult::with_error(EvidenceError::new("file_not_found", "no such file"));
    let verified = verify(failure.clone(), &TrustPolicy::Audit, Profile::Rfc8785).unwrap();
    assert_eq!(verified.hash(), None);
    assert_eq!(verified.into_result(), failure);
}

#[test]
fn a_value_that_is_not_i_json_cannot_be_verified() {
    let result = EvidenceResult::with_value(EvidenceValue::json_text(r#"{"a":1,"a":2}"#).unwrap());
    let error = check(result, &TrustPolicy::Audit).unwrap_err();
    let VerifyError::Canonicalize(inner) = &error else {
        panic!("expected Canonicalize, got {error:?}");
    };
    assert_eq!(
        inner.kind,
        CanonicalizeErrorKind::DuplicateKey("a".to_owned())
    );
    assert_eq!(error.kind(), "value_not_canonicalizable");
}

#[test]
fn profiles_disagree_on_big_integers_and_verification_says_so() {
    let value = EvidenceValue::json_text(r#"{"n":9007199254740993}"#).unwrap();
    let result = sign(
        EvidenceResult::with_value(value),
        "release-signer",
        &key(7),
        Profile::DecisionGate,
    )
    .unwrap();
    assert!(verify(result.clone(), &policy(), Profile::DecisionGate).is_ok());
    // Under RFC 8785 the value holds an integer past 2^53 − 1, which that
    // profile cannot hash unambiguously: refused, naming where and what to do.
    for policy in [policy(), TrustPolicy::Audit] {
        let error = verify(result.clone(), &policy, Profile::Rfc8785).unwrap_err();
        assert_eq!(error.kind(), "value_not_canonicalizable");
        let message = error.to_string();
        for needle in ["9007199254740993", "\"/n\"", "`decision-gate` profile"] {
            assert!(message.contains(needle), "{needle} missing: {message}");
        }
    }
}

/// Before: a value asserting `9007199254740993` verified under RFC 8785
/// against the hash of `9007199254740992` (RFC 8785 reads both as the same
/// double), so the evidence did not say which value it asserted. Now it is
/// refused, and so is the hash's "own" value spelled as an integer.
#[test]
fn an_ambiguous_integer_never_verifies_under_rfc_8785() {
    let asserted = EvidenceValue::json_text(r#"{"n":9007199254740993}"#).unwrap();
    let mut result = EvidenceResult::with_value(asserted);
    result.evidence_hash = Some(HashDigest::sha256(&sha256_of(br#"{"n":9007199254740992}"#)));
    let error = verify(result, &TrustPolicy::Audit, Profile::Rfc8785).unwrap_err();
    assert!(
        matches!(
            &error,
            VerifyError::Canonicalize(inner)
                if matches!(&inner.kind, CanonicalizeErrorKind::UnsafeInteger { pointer, .. } if pointer == "/n")
        ),
        "{error:?}"
    );
    // Written with a fraction, the double is what the value says it is.
    let double = EvidenceValue::json_text(r#"{"n":9007199254740992.0}"#).unwrap();
    let mut result = EvidenceResult::with_value(double);
    result.evidence_hash = Some(HashDigest::sha256(&sha256_of(br#"{"n":9007199254740992}"#)));
    assert!(verify(result, &TrustPolicy::Audit, Profile::Rfc8785).is_ok());
}

fn sha256_of(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// A provider that cannot hash its value answers an EvidenceResult error
/// saying so (`EvidenceError::unhashable`), with the pointer in `details`.
#[test]
fn an_unhashable_value_becomes_an_evidence_error() {
    let value = EvidenceValue::json_text(r#"{"ids":[1,18446744073709551615]}"#).unwrap();
    let error = EvidenceResult::with_value(value)
        .with_computed_hash(Profile::Rfc8785)
        .unwrap_err();
    let evidence_error = EvidenceError::unhashable(&error, Profile::Rfc8785);
    assert_eq!(evidence_error.code, "value_not_canonicalizable");
    assert!(
        evidence_error.message.contains("rfc8785 profile"),
        "{}",
        evidence_error.message
    );
    assert!(
        evidence_error.message.contains("decision-gate"),
        "{}",
        evidence_error.message
    );
    assert_eq!(
        evidence_error.details,
        Some(serde_json::json!({"profile": "rfc8785", "offset": 10, "pointer": "/ids/1"}))
    );
}

#[test]
fn verify_strict_rejects_a_small_order_key() {
    // The identity point as a public key with R = identity, s = 0 satisfies
    // the plain ed25519 equation for every message; `verify_strict` must not
    // accept it.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let mut keys = KeySet::new();
    keys.insert_bytes("weak", &identity).unwrap();
    let mut forged = EvidenceResult::with_value(approved(42))
        .with_computed_hash(Profile::Rfc8785)
        .unwrap();
    let mut signature = vec![0u8; 64];
    signature[0] = 1;
    forged.signature = Some(EvidenceSignature {
        scheme: "ed25519".to_owned(),
        key_id: "weak".to_owned(),
        signature,
    });
    let error = check(forged, &TrustPolicy::RequireSignature { keys }).unwrap_err();
    assert_eq!(error, VerifyError::VerificationFailed("weak".to_owned()));
}

#[test]
fn every_error_message_says_what_to_do_or_what_was_found() {
    let errors = [
        VerifyError::MissingSignature,
        VerifyError::UnsupportedScheme("rsa".to_owned()),
        VerifyError::KeyNotAuthorized("k".to_owned()),
        VerifyError::MissingValue,
        VerifyError::HashMismatch {
            declared: "aa".to_owned(),
            computed: "bb".to_owned(),
            profile: Profile::DecisionGate,
        },
        VerifyError::ValueMismatch {
            declared: "aa".to_owned(),
            computed: "bb".to_owned(),
            key_id: "k".to_owned(),
            profile: Profile::Rfc8785,
        },
        VerifyError::InvalidSignatureBytes(63),
        VerifyError::VerificationFailed("k".to_owned()),
        VerifyError::InvalidKey,
    ];
    let kinds: BTreeSet<&str> = errors.iter().map(VerifyError::kind).collect();
    assert_eq!(kinds.len(), errors.len(), "kinds must be distinct");
    for error in &errors {
        assert!(error.to_string().len() > 20, "{error:?}: {error}");
    }
}
