//! Every worked hash and signature example of wire-facts §1 (computed by
//! Decision Gate's own code), under both canonicalization profiles, and the
//! profile departures checked against `serde_jcs` 0.1.0 (the library Decision
//! Gate hashes with).

use evidence_wire::canonical::{
    self, CanonicalizeErrorKind, Options, Profile, hex_lower, to_vec_with,
};
use evidence_wire::evidence::{
    EvidenceResult, EvidenceValue, HashDigest, KeySet, TrustPolicy, sign, verify,
};

const PROFILES: [Profile; 2] = [Profile::Rfc8785, Profile::DecisionGate];

/// (value on the wire, canonical bytes, sha256 hex) — wire-facts §1 table.
const HASH_TABLE: [(&str, &[u8], &str); 9] = [
    (
        r#"{"kind":"json","value":"hello"}"#,
        br#""hello""#,
        "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a",
    ),
    (
        r#"{"kind":"json","value":"production"}"#,
        br#""production""#,
        "80be2eb0944c0453a6ad339a56e1c8f39f8cc57a4e627758246ccfd274176fd8",
    ),
    (
        r#"{"kind":"json","value":{"status":"approved","count":42}}"#,
        br#"{"count":42,"status":"approved"}"#,
        "c831e95a8fc9805621f8ae15b07b11ebae6d9d1cece66d891bf3152bf6cf2ed7",
    ),
    (
        r#"{"kind":"json","value":{"b":[1,2.5,{"z":null,"a":"x"}],"a":{"d":1e2,"c":-0}}}"#,
        br#"{"a":{"c":0,"d":100},"b":[1,2.5,{"a":"x","z":null}]}"#,
        "f9c76828f16f72ed31412d253cd4db6441bcd562b8a42f2c11a70a26e31956ed",
    ),
    (
        r#"{"kind":"json","value":1.0}"#,
        b"1",
        "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b",
    ),
    (
        r#"{"kind":"json","value":true}"#,
        b"true",
        "b5bea41b6c623f7c09f1bf24dcae58ebab3c0cdd90ad966bc43a45b44867e12b",
    ),
    (
        r#"{"kind":"json","value":1710000000000}"#,
        b"1710000000000",
        "8e3359f0c6a336723783a5550104e05046b7caa8ab214fdf0c891bea1ad97083",
    ),
    (
        r#"{"kind":"bytes","value":[104,101,108,108,111]}"#,
        b"hello",
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
    ),
    (
        r#"{"kind":"bytes","value":[0,255]}"#,
        &[0x00, 0xff],
        "06eb7d6a69ee19e5fbdf749018d3d2abfa04bcbd1365db312eb86dc7169389b8",
    ),
];

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex_lower(&sha2::Sha256::digest(bytes))
}

#[test]
fn hash_table_under_both_profiles() {
    for (wire, canonical_bytes, hash) in HASH_TABLE {
        let value: EvidenceValue = serde_json::from_str(wire).unwrap();
        for profile in PROFILES {
            assert_eq!(
                value.digest(profile).unwrap(),
                HashDigest {
                    algorithm: Default::default(),
                    value: hash.to_owned()
                },
                "{wire} under {profile:?}"
            );
        }
        assert_eq!(sha256_hex(canonical_bytes), hash, "{wire}: table row");
        if wire.contains(r#""kind":"json""#) {
            // The canonical bytes themselves, from the inner value's text.
            let inner = serde_json::from_str::<serde_json::Value>(wire).unwrap();
            let text = serde_json::value::RawValue::from_string(
                serde_json::to_string(&inner["value"]).unwrap(),
            )
            .unwrap();
            for profile in PROFILES {
                let options = Options::with_profile(profile);
                assert_eq!(
                    to_vec_with(text.get().as_bytes(), &options).unwrap(),
                    canonical_bytes,
                    "{wire} under {profile:?}"
                );
            }
            // The exact wire text (not a re-serialization) hashes the same:
            // `1.0`, `1e2` and `-0` reach the canonicalizer as sent.
            let raw_inner = wire
                .strip_prefix(r#"{"kind":"json","value":"#)
                .and_then(|rest| rest.strip_suffix('}'))
                .unwrap();
            assert_eq!(
                hex_lower(&canonical::sha256(raw_inner.as_bytes(), &Options::default()).unwrap()),
                hash
            );
        }
    }
}

#[test]
fn verify_fills_in_the_missing_hash_of_each_table_row() {
    for (wire, _, hash) in HASH_TABLE {
        let value: EvidenceValue = serde_json::from_str(wire).unwrap();
        let verified = verify(
            EvidenceResult::with_value(value),
            &TrustPolicy::Audit,
            Profile::Rfc8785,
        )
        .unwrap();
        assert_eq!(verified.hash().unwrap().value, hash, "{wire}");
    }
}

/// Decision Gate's `serde_jcs` 0.1.0, applied the way Decision Gate applies
/// it (to a parsed `serde_json::Value`).
fn serde_jcs_01(json: &str) -> Vec<u8> {
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    serde_jcs_01::to_vec(&value).unwrap()
}

#[test]
fn decision_gate_key_order_departure() {
    let json = br#"{"a":1,"a b":2,"a!":3,"ab":4}"#;
    let dg = to_vec_with(json, &Options::with_profile(Profile::DecisionGate)).unwrap();
    assert_eq!(dg, br#"{"a b":2,"a!":3,"a":1,"ab":4}"#);
    assert_eq!(
        sha256_hex(&dg),
        "89ed29440c9fd56dfbfe957bfe2126ad4c4059916d27ffa8ad15b6bdaeaf92ba"
    );
    assert_eq!(dg, serde_jcs_01(std::str::from_utf8(json).unwrap()));
    let rfc = to_vec_with(json, &Options::default()).unwrap();
    assert_eq!(rfc, br#"{"a":1,"a b":2,"a!":3,"ab":4}"#);
    assert_eq!(
        rfc,
        serde_json_canonicalizer::to_vec(
            &serde_json::from_slice::<serde_json::Value>(json).unwrap()
        )
        .unwrap()
    );
}

#[test]
fn decision_gate_big_integer_departure() {
    let json = r#"{"a b":1,"a":2,"n":9007199254740993}"#;
    let value = EvidenceValue::json_text(json).unwrap();
    let dg = value.digest(Profile::DecisionGate).unwrap();
    assert_eq!(
        dg.value,
        "d8a324fae07e90e275c3c73412629b2e8c2cdb23f2465e6f666658524285d74d"
    );
    assert_eq!(dg.value, sha256_hex(&serde_jcs_01(json)));
    assert_eq!(
        to_vec_with(
            json.as_bytes(),
            &Options::with_profile(Profile::DecisionGate)
        )
        .unwrap(),
        br#"{"a b":1,"a":2,"n":9007199254740993}"#
    );
    // RFC 8785 would print (and hash) `9007199254740992`, the value of a
    // different integer: under that profile the value is refused (I-JSON).
    let refused = value.digest(Profile::Rfc8785).unwrap_err();
    assert_eq!(
        refused.kind,
        CanonicalizeErrorKind::UnsafeInteger {
            literal: "9007199254740993".to_owned(),
            pointer: "/n".to_owned(),
        }
    );
    assert!(to_vec_with(json.as_bytes(), &Options::default()).is_err());
}

#[test]
fn decision_gate_profile_other_departures_match_serde_jcs_01() {
    // Keys with escapes compare by their escapes; supplementary-plane keys in
    // UTF-8 order; 64-bit integers verbatim; floats as RFC 8785.
    for json in [
        r#"{"a\"":1,"a":2,"a\\":3,"a\u0001":4,"a\n":5,"a~":6}"#,
        r#"{"\ufb33":1,"\ud83d\ude00":2,"\uffff":3,"\ue000":4}"#,
        r#"[18446744073709551615,-9223372036854775808,9223372036854775808,-9223372036854775809]"#,
        r#"[18446744073709551616,1e2,-0,0.1,1e21,1e-7,5e-324]"#,
        r#"{"":0,"\u0000":1," ":2,"!":3}"#,
    ] {
        let ours = to_vec_with(
            json.as_bytes(),
            &Options::with_profile(Profile::DecisionGate),
        )
        .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&serde_jcs_01(json)),
            "{json}"
        );
    }
}

/// The signing key of the vector: 32 bytes of 0x07.
fn vector_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[7; 32])
}

fn vector_keys() -> KeySet {
    let mut keys = KeySet::new();
    keys.insert("vector", vector_key().verifying_key());
    keys
}

#[test]
fn signature_vector_public_key() {
    assert_eq!(
        hex_lower(vector_key().verifying_key().as_bytes()),
        "ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c"
    );
}

#[test]
fn signature_vectors_json_and_bytes() {
    let cases = [
        (
            EvidenceValue::json(&"hello").unwrap(),
            "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a",
            "e4285475a284b843913b0a8d21709cd9d5e709f9a3ecc5c7a774fb31ba6f7c13587f6d247e8869fe7c693513911fc1755a9d8fb07ebf437e1ba81de36318190f",
        ),
        (
            EvidenceValue::Bytes(b"hello".to_vec()),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
            "c5755f265bf56529c52c1dab058d80e2f887ec8eaf9f283be89ef5351268619210504cded322e1dd39b9da0cf47dfeb266c3431a0033cd83d292cc5638f75807",
        ),
    ];
    for (value, hash, signature_hex) in cases {
        for profile in PROFILES {
            let signed = sign(
                EvidenceResult::with_value(value.clone()),
                "vector",
                &vector_key(),
                profile,
            )
            .unwrap();
            let digest = signed.evidence_hash.clone().unwrap();
            assert_eq!(digest.value, hash);
            assert_eq!(
                digest.signing_message(),
                format!(r#"{{"algorithm":"sha256","value":"{hash}"}}"#).into_bytes()
            );
            let signature = signed.signature.clone().unwrap();
            assert_eq!(signature.scheme, "ed25519");
            assert_eq!(signature.key_id, "vector");
            assert_eq!(hex_lower(&signature.signature), signature_hex);

            // The wire form: the signature as a JSON array of 64 integers.
            let wire: serde_json::Value = serde_json::from_slice(&signed.to_json_vec()).unwrap();
            let array = wire["signature"]["signature"].as_array().unwrap();
            assert_eq!(array.len(), 64);
            assert_eq!(array[0], u64::from(signature.signature[0]));

            // It verifies, and so does the same result read back from JSON.
            let policy = TrustPolicy::RequireSignature {
                keys: vector_keys(),
            };
            let verified = verify(signed.clone(), &policy, profile).unwrap();
            assert_eq!(verified.signer(), Some("vector"));
            let reread: EvidenceResult = serde_json::from_slice(&signed.to_json_vec()).unwrap();
            assert_eq!(
                verify(reread, &policy, profile).unwrap().signer(),
                Some("vector")
            );
        }
    }
}
