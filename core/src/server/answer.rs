//! What happens to an answer before it goes out: the result is sealed
//! (its `evidence_hash` computed under the profile the caller verifies
//! with, and signed when a key is configured), and an answer the caller
//! would drop (larger than its frame limit, nested deeper than it parses,
//! a value that cannot be hashed) is replaced by an `EvidenceResult` error
//! that names the limit.
//!
//! Limits: the frame limit of [`super::ServerConfig::limits`], the depth of
//! the envelope policy (at most [`SERDE_JSON_MAX_DEPTH`]). A batch's answer
//! is one message, so the frame limit is the budget of all its members
//! together: an evidence answer that would take the batch's answer past it
//! is replaced by the size error, however small it is alone (64 answers of
//! a quarter of the limit each would otherwise make one of 16 times it),
//! and room (2 KiB each) is kept for the members still unanswered, so that
//! their own answers, size errors at worst, fit too. A frame limit smaller
//! than 2 KiB per member can still be passed by a batch of errors alone:
//! no member goes unanswered.

use alloc::format;
use alloc::vec::Vec;

use serde_json::json;

use super::{CallKind, RespondError, Server, Ticket};
use crate::dialect::{self, Dialect, Speech};
use crate::envelope;
use crate::evidence::{EvidenceError, EvidenceResult, EvidenceValue};
use crate::id::Id;

/// The `error.code` of an answer that would be larger than the frame limit.
pub const ANSWER_SIZE_LIMIT_EXCEEDED: &str = "size_limit_exceeded";
/// The `error.code` of an answer that would nest deeper than the envelope depth limit.
pub const ANSWER_DEPTH_LIMIT_EXCEEDED: &str = "depth_limit_exceeded";
/// The `error.code` of a value that cannot be canonicalized under the
/// connection's hash profile (e.g. an integer beyond ±(2^53 − 1) under RFC 8785).
pub const VALUE_NOT_CANONICALIZABLE: &str = "value_not_canonicalizable";

/// The room kept in a batch's answer for each member not answered yet: a
/// size error (in MCP's speech carried twice) fits in it.
const BATCH_MEMBER_RESERVE: usize = 2048;

/// The deepest nesting serde_json parses (its recursion limit refuses the
/// 128th level): no answer may nest deeper, whatever the envelope policy.
pub(crate) const SERDE_JSON_MAX_DEPTH: usize = 127;

impl Server {
    /// Answer the evidence query of `ticket`.
    ///
    /// The server seals the result before sending it: a result with a
    /// value gets its `evidence_hash` computed under the profile the
    /// connection needs ([`ServerConfig::hash_profile`](crate::server::ServerConfig::hash_profile); any hash the
    /// embedder set is replaced) and, when a [`ServerConfig::signer`](crate::server::ServerConfig::signer) is
    /// set, a signature. A result the embedder already signed is sent as
    /// given. An answer its own caller would drop is replaced by an
    /// `EvidenceResult` error saying why: a value that cannot be
    /// canonicalized under the profile (`value_not_canonicalizable`), an
    /// answer larger than the frame limit (`size_limit_exceeded`) or nested
    /// deeper than the envelope depth limit (`depth_limit_exceeded`).
    pub fn respond(&mut self, ticket: Ticket, result: EvidenceResult) -> Result<(), RespondError> {
        let pending = self.take_pending(ticket, CallKind::Evidence)?;
        let result = self.seal(result, pending.speech.dialect);
        let body = self.encode_evidence_answer(&pending.id, pending.speech, pending.batch, &result);
        self.reply(pending.batch, body);
        self.resume();
        Ok(())
    }

    /// `result` as it goes on the wire: hashed under the connection's
    /// profile and signed when a signer is configured (see [`Server::respond`]).
    fn seal(&self, mut result: EvidenceResult, dialect: Dialect) -> EvidenceResult {
        if result.value.is_none() || result.signature.is_some() {
            return result;
        }
        let profile = self.config.hash_profile.for_dialect(dialect);
        #[cfg(feature = "signatures")]
        if let Some(signer) = &self.config.signer {
            return match signer.seal(result.clone(), profile) {
                Ok(sealed) => sealed,
                Err(error) => uncanonicalizable(result, profile, &error),
            };
        }
        match result.value.as_ref().map(|value| value.digest(profile)) {
            Some(Ok(digest)) => {
                result.evidence_hash = Some(digest);
                result
            }
            Some(Err(error)) => uncanonicalizable(result, profile, &error),
            None => result,
        }
    }

    /// The JSON-RPC answer carrying `result` in `dialect`, or, when that
    /// answer would break the caller's own limits (frame size, envelope
    /// depth), the answer carrying an `EvidenceResult` error that names
    /// the limit instead.
    fn encode_evidence_answer(
        &self,
        id: &Id<'static>,
        speech: Speech,
        batch: Option<u64>,
        result: &EvidenceResult,
    ) -> Vec<u8> {
        let encode = |result: &EvidenceResult| dialect::encode_evidence_reply(id, result, speech);
        let body = encode(result);
        match self.answer_limit_broken(&body, result, batch) {
            None => body,
            Some(error) => {
                let mut refused = EvidenceResult::with_error(error);
                refused.evidence_ref = result.evidence_ref.clone();
                refused.evidence_anchor = result.evidence_anchor.clone();
                encode(&refused)
            }
        }
    }

    /// Why `body` (the answer carrying `result`, inside `batch` if any)
    /// would be dropped by a caller with this server's own limits, if it
    /// would: larger than the frame limit, or nested deeper than the
    /// envelope depth limit.
    fn answer_limit_broken(
        &self,
        body: &[u8],
        result: &EvidenceResult,
        batch: Option<u64>,
    ) -> Option<EvidenceError> {
        // A batch reply is one array around the replies: one level more,
        // and every member shares the one message's size budget.
        let in_batch = usize::from(batch.is_some());
        let size_limit = self.config.limits.max_body_bytes;
        // Room is kept for the members still unanswered: each may need a
        // size error of its own, and no member goes unanswered.
        let batch_bytes = batch
            .and_then(|batch| self.batches.get(&batch))
            .map(|batch| {
                let others = batch.outstanding.saturating_sub(1);
                batch
                    .answer_bytes_with(body.len())
                    .saturating_add(others.saturating_mul(BATCH_MEMBER_RESERVE))
            });
        if body.len().saturating_add(in_batch.saturating_mul(2)) > size_limit {
            return Some(
                EvidenceError::new(
                    ANSWER_SIZE_LIMIT_EXCEEDED,
                    format!(
                        "the answer would be {} bytes, more than the {size_limit}-byte frame limit a caller accepts; narrow the query (e.g. a more specific JSONPath) or raise [server.limits] max_body_bytes on both sides",
                        body.len()
                    ),
                )
                .with_details(json!({"limit_bytes": size_limit, "answer_bytes": body.len()})),
            );
        }
        if let Some(batch_bytes) = batch_bytes.filter(|bytes| *bytes > size_limit) {
            return Some(
                EvidenceError::new(
                    ANSWER_SIZE_LIMIT_EXCEEDED,
                    format!(
                        "this answer ({} bytes) would make the batch's answer {batch_bytes} bytes, more than the {size_limit}-byte frame limit a caller accepts for one message; send the call on its own, narrow the query, or raise [server.limits] max_body_bytes on both sides",
                        body.len()
                    ),
                )
                .with_details(json!({
                    "limit_bytes": size_limit,
                    "answer_bytes": body.len(),
                    "batch_answer_bytes": batch_bytes,
                })),
            );
        }
        // serde_json (which every caller here parses with) refuses a 128th
        // level whatever the envelope policy allows.
        let depth_limit = self
            .config
            .policy
            .depth_limit()
            .min(SERDE_JSON_MAX_DEPTH)
            .saturating_sub(in_batch);
        // Only the value and an error's details nest freely; when they
        // leave room for the fixed wrapping, the answer cannot be too deep
        // and the whole body need not be scanned.
        if !nests_within(result, depth_limit)
            && envelope::nesting_exceeds(body, depth_limit).is_some()
        {
            return Some(
                EvidenceError::new(
                    ANSWER_DEPTH_LIMIT_EXCEEDED,
                    format!(
                        "the answer would nest deeper than the {depth_limit}-level envelope depth limit a caller accepts (the value itself is nested too deeply); select a shallower part of it"
                    ),
                )
                .with_details(json!({"limit_depth": depth_limit})),
            );
        }
        None
    }
}

/// How many levels enclose the JSON of an evidence answer's value, in
/// either dialect (the most of the two). Decision Gate's answer: the body,
/// `result`, `content`, its item, the result object and the tagged value
/// (`{"kind":"json","value":…}`); MCP's: the body, `result`,
/// `structuredContent` and the tagged value. The fixed objects of the
/// result (hash, reference, anchor, signature, error) reach no deeper than
/// this, the byte arrays (a signature, a bytes value) one level deeper.
const ANSWER_WRAPPING_DEPTH: usize = 6;

/// True when the answer carrying `result` certainly nests no deeper than
/// `depth_limit`: no error details (not measured here) and a value whose
/// own nesting fits in what the wrapping leaves. False means "not known",
/// and the whole body is scanned. The `answer_depth` tests hold it to the
/// scan of the encoded answer in every speech.
fn nests_within(result: &EvidenceResult, depth_limit: usize) -> bool {
    let room = depth_limit.saturating_sub(ANSWER_WRAPPING_DEPTH);
    // A byte array needs one level of room.
    if room == 0
        || result
            .error
            .as_ref()
            .is_some_and(|error| error.details.is_some())
    {
        return false;
    }
    match &result.value {
        None | Some(EvidenceValue::Bytes(_)) => true,
        Some(EvidenceValue::Json(raw)) => {
            envelope::nesting_exceeds(raw.get().as_bytes(), room).is_none()
        }
    }
}

/// The error result sent instead of `result` when its value cannot be
/// canonicalized (and so hashed) under `profile`; reference and anchor are kept.
fn uncanonicalizable(
    result: EvidenceResult,
    profile: crate::canonical::Profile,
    error: &crate::canonical::CanonicalizeError,
) -> EvidenceResult {
    use crate::canonical::CanonicalizeErrorKind;
    let refusal = match &error.kind {
        CanonicalizeErrorKind::TooDeep(limit) => EvidenceError::new(
            ANSWER_DEPTH_LIMIT_EXCEEDED,
            format!(
                "the value nests deeper than the {limit} levels canonical JSON accepts, so it cannot be hashed; select a shallower part of it"
            ),
        )
        .with_details(json!({"limit_depth": limit})),
        CanonicalizeErrorKind::TooLarge(limit) => EvidenceError::new(
            ANSWER_SIZE_LIMIT_EXCEEDED,
            format!(
                "the value is larger than the {limit} bytes canonical JSON accepts, so it cannot be hashed"
            ),
        )
        .with_details(json!({"limit_bytes": limit})),
        _ => EvidenceError::unhashable(error, profile),
    };
    let mut refused = EvidenceResult::with_error(refusal);
    refused.evidence_ref = result.evidence_ref;
    refused.evidence_anchor = result.evidence_anchor;
    refused
}

#[cfg(test)]
mod answer_depth {
    use alloc::string::String;
    use alloc::vec;

    use super::*;
    use crate::dialect::McpRevision;
    use crate::evidence::{EvidenceAnchor, EvidenceRef, EvidenceSignature, HashDigest};

    /// Values of every nesting from 0 to 24 in three shapes, and bytes.
    fn values() -> Vec<Option<EvidenceValue>> {
        let mut values = vec![None, Some(EvidenceValue::Bytes(vec![1, 2, 3]))];
        for depth in 0..=24 {
            let arrays = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            let objects = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
            // Brackets inside strings do not nest.
            let mixed = format!("{}\"[{{[\"{}", "[{\"k\":".repeat(depth), "}]".repeat(depth));
            for text in [arrays, objects, mixed] {
                values.push(Some(EvidenceValue::json_text(&text).expect("valid JSON")));
            }
        }
        values
    }

    fn results() -> Vec<EvidenceResult> {
        let mut results = Vec::new();
        for value in values() {
            let mut plain = EvidenceResult::with_value(EvidenceValue::Bytes(vec![]));
            plain.value = value;
            let mut full = plain.clone();
            full.evidence_hash = Some(HashDigest::sha256(&[7; 32]));
            full.evidence_ref = Some(EvidenceRef {
                uri: String::from("dg+file://root/a.json"),
            });
            full.evidence_anchor = Some(EvidenceAnchor {
                anchor_type: String::from("file_path_rooted"),
                anchor_value: String::from("{}"),
            });
            let mut signed = full.clone();
            signed.signature = Some(EvidenceSignature {
                scheme: String::from("ed25519"),
                key_id: String::from("k"),
                signature: vec![9; 64],
            });
            let mut failed = plain.clone();
            failed.error = Some(EvidenceError::new("code", "message"));
            let mut detailed = plain.clone();
            detailed.error =
                Some(EvidenceError::new("code", "message").with_details(json!({"a": [[1]]})));
            results.extend([plain, full, signed, failed, detailed]);
        }
        results
    }

    #[test]
    fn a_result_said_to_fit_never_encodes_deeper_than_the_limit() {
        let mut speeches = vec![Speech::DECISION_GATE];
        speeches.extend(McpRevision::ALL.map(Speech::mcp));
        let id = Id::Number(1);
        let mut fast = 0usize;
        for result in results() {
            for speech in &speeches {
                let body = dialect::encode_evidence_reply(&id, &result, *speech);
                for limit in (0..=32).chain([SERDE_JSON_MAX_DEPTH]) {
                    if nests_within(&result, limit) {
                        fast += 1;
                        assert!(
                            envelope::nesting_exceeds(&body, limit).is_none(),
                            "limit {limit}, {speech:?}: {}",
                            String::from_utf8_lossy(&body)
                        );
                    }
                }
            }
        }
        // The shortcut is taken where it matters (most shallow answers).
        assert!(fast > 1000, "{fast}");
    }

    #[test]
    fn the_wrapping_is_exact_for_decision_gate() {
        // A value one level deeper than the room left is too deep in
        // Decision Gate's answer: the constant is not larger than needed.
        let limit = 12;
        let depth = limit - ANSWER_WRAPPING_DEPTH + 1;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let result = EvidenceResult::with_value(EvidenceValue::json_text(&text).expect("JSON"));
        let body = dialect::encode_evidence_reply(&Id::Number(1), &result, Speech::DECISION_GATE);
        assert!(!nests_within(&result, limit));
        assert!(envelope::nesting_exceeds(&body, limit).is_some());
        let shallower = EvidenceResult::with_value(
            EvidenceValue::json_text(&text[1..text.len() - 1]).expect("JSON"),
        );
        assert!(nests_within(&shallower, limit));
    }
}
