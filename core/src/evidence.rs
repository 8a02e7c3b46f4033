//! The evidence model: queries, contexts, results, and their verification.
//!
//! Decision Gate asks a provider an [`EvidenceQuery`] within an
//! [`EvidenceContext`] and gets back an [`EvidenceResult`]. A result is only
//! trusted once [`verify`] has checked it and turned it into a
//! [`VerifiedEvidence`]: its `evidence_hash` must be the SHA-256 of the
//! canonical JSON of the inner `value` (the raw bytes for `kind = bytes`), and
//! under [`TrustPolicy::RequireSignature`] an ed25519 signature over the
//! digest object must come from an authorized key. A present hash that does
//! not match is rejected (fail closed); a missing one is computed.
//!
//! JSON values inside results are kept as the exact text the peer sent
//! ([`serde_json::value::RawValue`]) so that hashing never loses precision
//! (an integer above 2^53 is hashed as the profile says, not as whatever a
//! float round-trip makes of it).
//!
//! Limits: this module works on values already bounded by the frame limits;
//! canonicalization depth is bounded by [`canonical::Options::max_depth`].

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::num::NonZeroU64;

use serde::de::{self, Deserializer};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::canonical::{self, CanonicalizeError, Options, Profile};

/// The name of the one tool every evidence provider exposes.
pub const EVIDENCE_QUERY_TOOL: &str = "evidence_query";

/// The content type of JSON evidence.
pub const CONTENT_TYPE_JSON: &str = "application/json";

/// What Decision Gate asks: which check of which provider, with which params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceQuery {
    /// The provider's name in the caller's configuration.
    pub provider_id: String,
    /// The provider's check (capability) name; the older `predicate` is
    /// accepted as an alias on input.
    #[serde(alias = "predicate")]
    pub check_id: String,
    /// Check-specific parameters; omitted on the wire when absent (`null`
    /// reads as absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl EvidenceQuery {
    /// A query without params.
    pub fn new(provider_id: impl Into<String>, check_id: impl Into<String>) -> Self {
        EvidenceQuery {
            provider_id: provider_id.into(),
            check_id: check_id.into(),
            params: None,
        }
    }

    /// The same query with `params`.
    pub fn with_params(mut self, params: Value) -> Self {
        self.params = if params.is_null() { None } else { Some(params) };
        self
    }
}

/// When the question is asked: a point on the caller's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum TriggerTime {
    /// Milliseconds since the Unix epoch.
    UnixMillis(i64),
    /// A logical clock tick.
    Logical(i64),
}

/// The run a query belongs to, supplied by Decision Gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceContext {
    /// The tenant (an integer >= 1; a string of digits is accepted on input).
    #[serde(deserialize_with = "positive_id")]
    pub tenant_id: NonZeroU64,
    /// The namespace (an integer >= 1; a string of digits is accepted on input).
    #[serde(deserialize_with = "positive_id")]
    pub namespace_id: NonZeroU64,
    /// The run.
    pub run_id: String,
    /// The scenario.
    pub scenario_id: String,
    /// The stage.
    pub stage_id: String,
    /// The trigger.
    pub trigger_id: String,
    /// When the trigger fired; time-based checks use this, never a wall clock.
    pub trigger_time: TriggerTime,
    /// The caller's correlation id, if any.
    #[serde(default)]
    pub correlation_id: Option<String>,
}

impl EvidenceContext {
    /// A context for ad-hoc queries (tenant 1, namespace 1, the given time).
    pub fn adhoc(trigger_time: TriggerTime) -> Self {
        EvidenceContext {
            tenant_id: NonZeroU64::MIN,
            namespace_id: NonZeroU64::MIN,
            run_id: "adhoc".to_owned(),
            scenario_id: "adhoc".to_owned(),
            stage_id: "adhoc".to_owned(),
            trigger_id: "adhoc".to_owned(),
            trigger_time,
            correlation_id: None,
        }
    }
}

fn positive_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<NonZeroU64, D::Error> {
    struct PositiveId;

    impl de::Visitor<'_> for PositiveId {
        type Value = NonZeroU64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer >= 1 (or a string of its decimal digits)")
        }

        fn visit_u64<E: de::Error>(self, number: u64) -> Result<NonZeroU64, E> {
            NonZeroU64::new(number).ok_or_else(|| E::custom("expected an integer >= 1, found 0"))
        }

        fn visit_i64<E: de::Error>(self, number: i64) -> Result<NonZeroU64, E> {
            u64::try_from(number)
                .ok()
                .and_then(NonZeroU64::new)
                .ok_or_else(|| E::custom(format!("expected an integer >= 1, found {number}")))
        }

        fn visit_f64<E: de::Error>(self, number: f64) -> Result<NonZeroU64, E> {
            Err(E::custom(format!(
                "expected an integer >= 1, found the non-integer number {number}"
            )))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<NonZeroU64, E> {
            text.trim()
                .parse::<u64>()
                .ok()
                .and_then(NonZeroU64::new)
                .ok_or_else(|| {
                    E::custom(format!(
                        "expected an integer >= 1 (or a string of its digits), found {text:?}"
                    ))
                })
        }
    }

    deserializer.deserialize_any(PositiveId)
}

/// The arguments of a `tools/call` of `evidence_query`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceQueryArguments {
    /// The question.
    pub query: EvidenceQuery,
    /// Its context.
    pub context: EvidenceContext,
}

/// The evidence itself: JSON, or raw bytes.
#[derive(Clone, Debug)]
pub enum EvidenceValue {
    /// A JSON value, kept as the exact text received (or produced).
    Json(Box<RawValue>),
    /// Raw bytes (a JSON array of integers 0..=255 on the wire).
    Bytes(Vec<u8>),
}

impl EvidenceValue {
    /// A JSON value from anything serializable (written compactly).
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(EvidenceValue::Json)
    }

    /// A JSON value from its text; fails when the text is not JSON.
    pub fn json_text(text: &str) -> Result<Self, serde_json::Error> {
        let raw: Box<RawValue> = serde_json::from_str(text)?;
        Ok(EvidenceValue::Json(raw))
    }

    /// The value parsed into a [`Value`] (bytes become an array of
    /// integers). Fails only for JSON that [`Value`] cannot hold, such as a
    /// number outside the IEEE-754 double range.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        match self {
            EvidenceValue::Json(raw) => serde_json::from_str(raw.get()),
            EvidenceValue::Bytes(bytes) => Ok(Value::Array(
                bytes.iter().map(|byte| Value::from(*byte)).collect(),
            )),
        }
    }

    /// The SHA-256 of this value as the protocol defines it: canonical JSON
    /// for `json` (under `profile`), the raw bytes for `bytes`.
    pub fn digest(&self, profile: Profile) -> Result<HashDigest, CanonicalizeError> {
        let bytes = match self {
            EvidenceValue::Json(raw) => {
                canonical::sha256(raw.get().as_bytes(), &Options::with_profile(profile))?
            }
            EvidenceValue::Bytes(bytes) => {
                let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
                sha2::Digest::update(&mut hasher, bytes);
                sha2::Digest::finalize(hasher).into()
            }
        };
        Ok(HashDigest::sha256(&bytes))
    }
}

impl PartialEq for EvidenceValue {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (EvidenceValue::Json(a), EvidenceValue::Json(b)) => a.get() == b.get(),
            (EvidenceValue::Bytes(a), EvidenceValue::Bytes(b)) => a == b,
            _ => false,
        }
    }
}

impl Serialize for EvidenceValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("EvidenceValue", 2)?;
        match self {
            EvidenceValue::Json(raw) => {
                state.serialize_field("kind", "json")?;
                state.serialize_field("value", raw)?;
            }
            EvidenceValue::Bytes(bytes) => {
                state.serialize_field("kind", "bytes")?;
                state.serialize_field("value", bytes)?;
            }
        }
        state.end()
    }
}

impl<'de> Deserialize<'de> for EvidenceValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Kind {
            Json,
            Bytes,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            kind: Kind,
            value: Box<RawValue>,
        }
        let wire = Wire::deserialize(deserializer)?;
        match wire.kind {
            Kind::Json => Ok(EvidenceValue::Json(wire.value)),
            Kind::Bytes => {
                let bytes: Vec<u8> = serde_json::from_str(wire.value.get()).map_err(|_| {
                    de::Error::custom("a bytes value must be an array of integers 0..=255")
                })?;
                Ok(EvidenceValue::Bytes(bytes))
            }
        }
    }
}

/// How much the caller should trust the evidence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// Produced by a trusted provider from a verifiable source.
    #[default]
    Verified,
    /// Asserted by the caller or a party without verification.
    Asserted,
}

/// An expected failure reported inside a result (a missing file, bad params).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceError {
    /// A stable machine-readable code, e.g. `file_not_found`.
    pub code: String,
    /// A human explanation.
    pub message: String,
    /// Structured details, or `null`.
    #[serde(default)]
    pub details: Option<Value>,
}

impl EvidenceError {
    /// An error without details.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        EvidenceError {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }

    /// The same error with `details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The error a provider answers instead of a value it cannot hash under
    /// `profile` ([`EvidenceResult::with_computed_hash`] failed): code
    /// `value_not_canonicalizable` (the kind a verifier reports for the
    /// same value), the canonicalization error as the message, and in
    /// `details` the profile, the byte offset and, for an integer outside
    /// the I-JSON safe range, its JSON pointer. Such a value must not be
    /// sent with a hash that does not say which value it asserts; the
    /// message tells the operator to use the `decision-gate` profile or to
    /// send the number as a string.
    pub fn unhashable(error: &CanonicalizeError, profile: Profile) -> Self {
        let mut details = serde_json::Map::new();
        details.insert("profile".to_owned(), Value::from(profile.name()));
        details.insert("offset".to_owned(), Value::from(error.offset));
        if let canonical::CanonicalizeErrorKind::UnsafeInteger { pointer, .. } = &error.kind {
            details.insert("pointer".to_owned(), Value::from(pointer.as_str()));
        }
        EvidenceError::new(
            "value_not_canonicalizable",
            format!(
                "the evidence value cannot be hashed under the {} profile: {error}",
                profile.name()
            ),
        )
        .with_details(Value::Object(details))
    }
}

/// The hash algorithm of an evidence hash (only SHA-256 exists).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HashAlgorithm {
    /// SHA-256, lowercase hex.
    #[default]
    Sha256,
}

/// A hash on the wire: `{"algorithm":"sha256","value":"<64 lowercase hex>"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashDigest {
    /// Always SHA-256.
    pub algorithm: HashAlgorithm,
    /// The digest in lowercase hex.
    pub value: String,
}

impl HashDigest {
    /// The digest object of raw SHA-256 output.
    pub fn sha256(digest: &[u8; 32]) -> Self {
        HashDigest {
            algorithm: HashAlgorithm::Sha256,
            value: canonical::hex_lower(digest),
        }
    }

    /// The canonical JSON of this digest object: the bytes that are signed.
    pub fn signing_message(&self) -> Vec<u8> {
        // Keys "algorithm" < "value" and a hex string need no escaping, so
        // this is the canonical form under both profiles.
        let mut out = Vec::with_capacity(40 + self.value.len());
        out.extend_from_slice(b"{\"algorithm\":\"sha256\",\"value\":");
        let quoted = serde_json::to_string(&self.value).unwrap_or_default();
        out.extend_from_slice(quoted.as_bytes());
        out.push(b'}');
        out
    }
}

/// Where the evidence came from, as a URI (e.g. `dg+file://root/path`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceRef {
    /// The URI.
    pub uri: String,
}

/// A stable anchor for the evidence; `anchor_value` is a string (canonical
/// JSON when structured).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceAnchor {
    /// The anchor type, e.g. `file_path_rooted`.
    pub anchor_type: String,
    /// The anchor value; canonical JSON text for structured anchors.
    pub anchor_value: String,
}

impl EvidenceAnchor {
    /// A `file_path_rooted` anchor: canonical JSON `{"path","root_id","size"?}`.
    pub fn file_path_rooted(root_id: &str, path: &str, size: Option<u64>) -> Self {
        let mut object = serde_json::Map::new();
        object.insert("path".to_owned(), Value::from(path));
        object.insert("root_id".to_owned(), Value::from(root_id));
        if let Some(size) = size {
            object.insert("size".to_owned(), Value::from(size));
        }
        let value = Value::Object(object);
        let anchor_value = canonical::value_to_vec(&value, &Options::default())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .unwrap_or_else(|| value.to_string());
        EvidenceAnchor {
            anchor_type: "file_path_rooted".to_owned(),
            anchor_value,
        }
    }
}

/// A signature over the digest object: `{"scheme":"ed25519","key_id","signature":[64 ints]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceSignature {
    /// The scheme; only `ed25519` is supported.
    pub scheme: String,
    /// Which key signed.
    pub key_id: String,
    /// The signature bytes.
    pub signature: Vec<u8>,
}

/// A provider's answer. Every field is written, `null` when absent, as the
/// seeds show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceResult {
    /// The evidence, or `null` when there is none (see `error`).
    #[serde(default)]
    pub value: Option<EvidenceValue>,
    /// The trust lane (`verified` when absent on input).
    #[serde(default)]
    pub lane: Lane,
    /// An expected failure, or `null`.
    #[serde(default)]
    pub error: Option<EvidenceError>,
    /// The hash of `value`, or `null` (the caller computes it).
    #[serde(default)]
    pub evidence_hash: Option<HashDigest>,
    /// Where the evidence came from.
    #[serde(default)]
    pub evidence_ref: Option<EvidenceRef>,
    /// A stable anchor.
    #[serde(default)]
    pub evidence_anchor: Option<EvidenceAnchor>,
    /// A signature over the digest object.
    #[serde(default)]
    pub signature: Option<EvidenceSignature>,
    /// The media type of `value`.
    #[serde(default)]
    pub content_type: Option<String>,
}

impl EvidenceResult {
    /// A successful result holding `value`, content type `application/json`
    /// for JSON values.
    pub fn with_value(value: EvidenceValue) -> Self {
        let content_type = match value {
            EvidenceValue::Json(_) => Some(CONTENT_TYPE_JSON.to_owned()),
            EvidenceValue::Bytes(_) => Some("application/octet-stream".to_owned()),
        };
        EvidenceResult {
            value: Some(value),
            lane: Lane::Verified,
            error: None,
            evidence_hash: None,
            evidence_ref: None,
            evidence_anchor: None,
            signature: None,
            content_type,
        }
    }

    /// A failed result: no value, the error set.
    pub fn with_error(error: EvidenceError) -> Self {
        EvidenceResult {
            value: None,
            lane: Lane::Verified,
            error: Some(error),
            evidence_hash: None,
            evidence_ref: None,
            evidence_anchor: None,
            signature: None,
            content_type: None,
        }
    }

    /// Fill in `evidence_hash` from `value` (no-op without a value).
    pub fn with_computed_hash(mut self, profile: Profile) -> Result<Self, CanonicalizeError> {
        if let Some(value) = &self.value {
            self.evidence_hash = Some(value.digest(profile)?);
        }
        Ok(self)
    }

    /// The compact JSON text of this result.
    pub fn to_json_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The canonical JSON text of this result (RFC 8785).
    pub fn to_canonical_vec(&self) -> Result<Vec<u8>, CanonicalizeError> {
        canonical::to_vec(&self.to_json_vec())
    }
}

/// The public keys a caller trusts, by `key_id`.
#[cfg(feature = "signatures")]
#[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
#[derive(Clone, Debug, Default)]
pub struct KeySet {
    keys: alloc::collections::BTreeMap<String, ed25519_dalek::VerifyingKey>,
}

#[cfg(feature = "signatures")]
impl KeySet {
    /// An empty key set.
    pub fn new() -> Self {
        KeySet::default()
    }

    /// Trust `key` under `key_id` (replacing an earlier key of that id).
    pub fn insert(&mut self, key_id: impl Into<String>, key: ed25519_dalek::VerifyingKey) {
        self.keys.insert(key_id.into(), key);
    }

    /// Trust the 32-byte public key `key` under `key_id`; fails when the
    /// bytes are not a valid ed25519 point.
    pub fn insert_bytes(
        &mut self,
        key_id: impl Into<String>,
        key: &[u8; 32],
    ) -> Result<(), VerifyError> {
        let key =
            ed25519_dalek::VerifyingKey::from_bytes(key).map_err(|_| VerifyError::InvalidKey)?;
        self.insert(key_id, key);
        Ok(())
    }

    /// The key of `key_id`.
    pub fn get(&self, key_id: &str) -> Option<&ed25519_dalek::VerifyingKey> {
        self.keys.get(key_id)
    }

    /// How many keys are trusted.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// What a caller requires of evidence before trusting it.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum TrustPolicy {
    /// Check the hash only (the default).
    #[default]
    Audit,
    /// Check the hash and require an ed25519 signature by one of `keys`.
    #[cfg(feature = "signatures")]
    RequireSignature {
        /// The authorized keys.
        keys: KeySet,
    },
}

/// Why evidence was not trusted. Each kind has a stable [`VerifyError::kind`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The policy requires a signature and there is none.
    #[error("evidence is not signed, but the trust policy requires a signature")]
    MissingSignature,
    /// The signature scheme is not ed25519.
    #[error("unsupported signature scheme {0:?}; only \"ed25519\" is supported")]
    UnsupportedScheme(String),
    /// The signing key is not in the trusted key set.
    #[error("signature key {0:?} is not authorized; add its public key to the trust policy")]
    KeyNotAuthorized(String),
    /// A signature or hash is present but there is no value to check it against.
    #[error("evidence carries a hash or signature but no value")]
    MissingValue,
    /// The value cannot be canonicalized (not I-JSON; under the RFC 8785
    /// profile this includes an integer outside ±(2^53 − 1), whose hash
    /// would not say which value it asserts: the message names its JSON
    /// pointer and the `decision-gate` profile).
    #[error(
        "evidence value cannot be canonicalized with the verifier's profile, so its hash cannot be checked: {0}"
    )]
    Canonicalize(CanonicalizeError),
    /// The declared hash differs from the value's hash, and no valid
    /// signature vouches for the declared hash: the hash was altered (or
    /// the provider computed it wrongly).
    #[error(
        "evidence hash mismatch under the {profile} profile: declared {declared}, computed \
         {computed} from the value; the evidence was altered, or the provider hashes with \
         another profile (configure the provider's hash_profile, or --profile)"
    )]
    HashMismatch {
        /// The hash the provider sent.
        declared: String,
        /// The hash of the value received.
        computed: String,
        /// The canonicalization profile the value was hashed with.
        profile: Profile,
    },
    /// The declared hash carries a valid signature of an authorized key, but
    /// the value does not hash to it: the value was altered after signing.
    #[error(
        "evidence value does not match its signed hash: key {key_id:?} signed {declared}, \
         but the value hashes to {computed} under the {profile} profile; the value was \
         altered after signing, or the provider canonicalizes with another profile"
    )]
    ValueMismatch {
        /// The signed hash the provider sent.
        declared: String,
        /// The hash of the value received.
        computed: String,
        /// The key whose signature covers `declared`.
        key_id: String,
        /// The canonicalization profile the value was hashed with.
        profile: Profile,
    },
    /// The signature is not 64 bytes.
    #[error("signature must be 64 bytes, found {0}")]
    InvalidSignatureBytes(usize),
    /// The signature does not verify against the key.
    #[error("signature verification failed for key {0:?}")]
    VerificationFailed(String),
    /// A configured public key is not a valid ed25519 key.
    #[error("public key is not a valid ed25519 key")]
    InvalidKey,
}

impl VerifyError {
    /// A stable machine-readable name of the failure.
    pub fn kind(&self) -> &'static str {
        match self {
            VerifyError::MissingSignature => "missing_signature",
            VerifyError::UnsupportedScheme(_) => "unsupported_signature_scheme",
            VerifyError::KeyNotAuthorized(_) => "key_not_authorized",
            VerifyError::MissingValue => "missing_value",
            VerifyError::Canonicalize(_) => "value_not_canonicalizable",
            VerifyError::HashMismatch { .. } => "hash_mismatch",
            VerifyError::ValueMismatch { .. } => "value_mismatch",
            VerifyError::InvalidSignatureBytes(_) => "invalid_signature_bytes",
            VerifyError::VerificationFailed(_) => "signature_verification_failed",
            VerifyError::InvalidKey => "invalid_key",
        }
    }
}

/// Evidence that passed [`verify`]: its hash is present and correct, and
/// its signature (when the policy asked for one) is valid.
///
/// It can only be made by [`verify`], so code that takes a
/// `VerifiedEvidence` cannot be handed unchecked evidence.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifiedEvidence {
    result: EvidenceResult,
    signer: Option<String>,
    profile: Profile,
}

impl VerifiedEvidence {
    /// The verified result (with `evidence_hash` filled in when it has a value).
    pub fn result(&self) -> &EvidenceResult {
        &self.result
    }

    /// The verified result, by value.
    pub fn into_result(self) -> EvidenceResult {
        self.result
    }

    /// The hash of the value, when there is one.
    pub fn hash(&self) -> Option<&HashDigest> {
        self.result.evidence_hash.as_ref()
    }

    /// The `key_id` whose signature was verified, if a signature was required.
    pub fn signer(&self) -> Option<&str> {
        self.signer.as_deref()
    }

    /// The canonicalization profile the hash was checked (or computed) under.
    pub fn profile(&self) -> Profile {
        self.profile
    }
}

impl fmt::Display for VerifiedEvidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match core::str::from_utf8(&self.result.to_json_vec()) {
            Ok(text) => f.write_str(text),
            Err(_) => Err(fmt::Error),
        }
    }
}

/// Check `result` under `policy`, hashing with `profile`.
///
/// The order of checks is Decision Gate's. Under `RequireSignature`: missing
/// signature, unsupported scheme, key not authorized, missing value, hash
/// mismatch, invalid signature bytes, verification failed. A hash mismatch is
/// reported as [`VerifyError::ValueMismatch`] when the signature is valid for
/// the declared hash (the value was altered after signing) and as
/// [`VerifyError::HashMismatch`] otherwise. Under `Audit` only the hash is
/// checked (signatures are not looked at), and a result without a value (an
/// error result) passes as long as it claims no hash.
///
/// A missing `evidence_hash` is filled in from the value, so the
/// [`VerifiedEvidence`] always carries the hash of its value.
pub fn verify(
    mut result: EvidenceResult,
    policy: &TrustPolicy,
    profile: Profile,
) -> Result<VerifiedEvidence, VerifyError> {
    #[cfg(feature = "signatures")]
    let signer = match policy {
        TrustPolicy::Audit => None,
        TrustPolicy::RequireSignature { keys } => Some(Signer::authorized(&result, keys)?),
    };
    #[cfg(not(feature = "signatures"))]
    let TrustPolicy::Audit = policy;

    let computed = match &result.value {
        Some(value) => Some(value.digest(profile).map_err(VerifyError::Canonicalize)?),
        None => None,
    };
    match (&result.evidence_hash, &computed) {
        (Some(declared), Some(computed)) if declared != computed => {
            #[cfg(feature = "signatures")]
            if let Some(signer) = &signer {
                if signer.signs(declared) {
                    return Err(VerifyError::ValueMismatch {
                        declared: declared.value.clone(),
                        computed: computed.value.clone(),
                        key_id: signer.key_id.clone(),
                        profile,
                    });
                }
            }
            return Err(VerifyError::HashMismatch {
                declared: declared.value.clone(),
                computed: computed.value.clone(),
                profile,
            });
        }
        (Some(_), None) => return Err(VerifyError::MissingValue),
        _ => {}
    }
    result.evidence_hash = computed;

    #[cfg(feature = "signatures")]
    if let Some(signer) = signer {
        let signature = signer.signature()?;
        let message = result
            .evidence_hash
            .as_ref()
            .map(HashDigest::signing_message)
            .ok_or(VerifyError::MissingValue)?;
        signer
            .key
            .verify_strict(&message, &signature)
            .map_err(|_| VerifyError::VerificationFailed(signer.key_id.clone()))?;
        return Ok(VerifiedEvidence {
            result,
            signer: Some(signer.key_id),
            profile,
        });
    }
    Ok(VerifiedEvidence {
        result,
        signer: None,
        profile,
    })
}

/// The signature of a result whose scheme and key passed the policy.
#[cfg(feature = "signatures")]
struct Signer {
    key: ed25519_dalek::VerifyingKey,
    key_id: String,
    bytes: Vec<u8>,
}

#[cfg(feature = "signatures")]
impl Signer {
    /// The first four checks of `RequireSignature`: a signature is present,
    /// its scheme is ed25519, its key is authorized, and there is a value.
    fn authorized(result: &EvidenceResult, keys: &KeySet) -> Result<Self, VerifyError> {
        let signature = result
            .signature
            .as_ref()
            .ok_or(VerifyError::MissingSignature)?;
        if signature.scheme != "ed25519" {
            return Err(VerifyError::UnsupportedScheme(signature.scheme.clone()));
        }
        let key = keys
            .get(&signature.key_id)
            .ok_or_else(|| VerifyError::KeyNotAuthorized(signature.key_id.clone()))?;
        if result.value.is_none() {
            return Err(VerifyError::MissingValue);
        }
        Ok(Signer {
            key: *key,
            key_id: signature.key_id.clone(),
            bytes: signature.signature.clone(),
        })
    }

    /// The signature, if it has the 64 bytes of an ed25519 signature.
    fn signature(&self) -> Result<ed25519_dalek::Signature, VerifyError> {
        let bytes: [u8; 64] = self
            .bytes
            .as_slice()
            .try_into()
            .map_err(|_| VerifyError::InvalidSignatureBytes(self.bytes.len()))?;
        Ok(ed25519_dalek::Signature::from_bytes(&bytes))
    }

    /// Whether the signature is valid for `digest`.
    fn signs(&self, digest: &HashDigest) -> bool {
        self.signature().is_ok_and(|signature| {
            self.key
                .verify_strict(&digest.signing_message(), &signature)
                .is_ok()
        })
    }
}

/// Hash (with `profile`) and sign `result` with `key` under `key_id`.
/// A result without a value is returned unchanged.
#[cfg(feature = "signatures")]
#[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
pub fn sign(
    result: EvidenceResult,
    key_id: &str,
    key: &ed25519_dalek::SigningKey,
    profile: Profile,
) -> Result<EvidenceResult, CanonicalizeError> {
    use ed25519_dalek::Signer;
    let mut result = result.with_computed_hash(profile)?;
    if let Some(hash) = &result.evidence_hash {
        let signature = key.sign(&hash.signing_message());
        result.signature = Some(EvidenceSignature {
            scheme: "ed25519".to_owned(),
            key_id: key_id.to_owned(),
            signature: signature.to_bytes().to_vec(),
        });
    }
    Ok(result)
}

/// A provider's signing key: what a server signs every successful result
/// with ([`EvidenceSigner::seal`]).
///
/// `key_id` is what the caller looks the key up by. Decision Gate
/// authorizes a signature only when `key_id` equals the path of the public
/// key file *exactly as written in its configuration*
/// (`trust = { require_signature = { keys = ["<path>"] } }`), so set it to
/// that string when Decision Gate is the caller; evidence-wire's own client
/// accepts the file stem or that path.
#[cfg(feature = "signatures")]
#[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
#[derive(Clone)]
pub struct EvidenceSigner {
    key_id: String,
    key: ed25519_dalek::SigningKey,
}

#[cfg(feature = "signatures")]
impl fmt::Debug for EvidenceSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EvidenceSigner")
            .field("key_id", &self.key_id)
            .field(
                "public_key",
                &canonical::hex_lower(self.key.verifying_key().as_bytes()),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "signatures")]
impl EvidenceSigner {
    /// A signer for the ed25519 secret `seed` (32 bytes), signing as `key_id`.
    pub fn from_seed(key_id: impl Into<String>, seed: &[u8; 32]) -> Self {
        EvidenceSigner {
            key_id: key_id.into(),
            key: ed25519_dalek::SigningKey::from_bytes(seed),
        }
    }

    /// The key id written into every signature.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The 32-byte public key a caller must trust.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// `result` hashed under `profile` and signed, ready to send. A result
    /// without a value (an error) is returned unchanged; a value that
    /// cannot be canonicalized under `profile` is an error.
    pub fn seal(
        &self,
        result: EvidenceResult,
        profile: Profile,
    ) -> Result<EvidenceResult, CanonicalizeError> {
        sign(result, &self.key_id, &self.key, profile)
    }
}
