//! What happens to an answer before it goes out: the result is sealed
//! (its `evidence_hash` computed under the profile the caller verifies
//! with, and signed when a key is configured), and an answer the caller
//! would drop (larger than its frame limit, nested deeper than it parses,
//! a value that cannot be hashed) is replaced by an `EvidenceResult` error
//! that names the limit.
//!
//! Limits: the frame limit of [`super::ServerConfig::limits`], the depth of
//! the envelope policy (at most [`SERDE_JSON_MAX_DEPTH`]).

use alloc::format;
use alloc::vec::Vec;

use serde_json::json;

use super::{CallKind, RespondError, Server, Ticket};
use crate::dialect::{self, Dialect, Speech};
use crate::envelope;
use crate::evidence::{EvidenceError, EvidenceResult};
use crate::id::Id;

/// The `error.code` of an answer that would be larger than the frame limit.
pub const ANSWER_SIZE_LIMIT_EXCEEDED: &str = "size_limit_exceeded";
/// The `error.code` of an answer that would nest deeper than the envelope depth limit.
pub const ANSWER_DEPTH_LIMIT_EXCEEDED: &str = "depth_limit_exceeded";
/// The `error.code` of a value that cannot be canonicalized under the
/// connection's hash profile (e.g. an integer beyond ±(2^53 − 1) under RFC 8785).
pub const VALUE_NOT_CANONICALIZABLE: &str = "value_not_canonicalizable";

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
        match self.answer_limit_broken(&body, batch) {
            None => body,
            Some(error) => {
                let mut refused = EvidenceResult::with_error(error);
                refused.evidence_ref = result.evidence_ref.clone();
                refused.evidence_anchor = result.evidence_anchor.clone();
                encode(&refused)
            }
        }
    }

    /// Why `body` (an answer, inside `batch` if any) would be dropped by a
    /// caller with this server's own limits, if it would: larger than the
    /// frame limit, or nested deeper than the envelope depth limit.
    fn answer_limit_broken(&self, body: &[u8], batch: Option<u64>) -> Option<EvidenceError> {
        // A batch reply is one array around the replies: one level and a
        // few bytes more.
        let in_batch = usize::from(batch.is_some());
        let size_limit = self.config.limits.max_body_bytes;
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
        // serde_json (which every caller here parses with) refuses a 128th
        // level whatever the envelope policy allows.
        let depth_limit = self
            .config
            .policy
            .depth_limit()
            .min(SERDE_JSON_MAX_DEPTH)
            .saturating_sub(in_batch);
        if envelope::nesting_exceeds(body, depth_limit).is_some() {
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
