//! For differential tests only: the `serde_json` reference paths that the
//! hand-written fast paths are held to, for the `envelope_differential`
//! fuzz target (`fuzz/fuzz_targets/envelope_differential.rs`).
//!
//! Not an API: hidden from the docs, compiled only with the non-default
//! `differential` feature (which only the fuzz crate turns on), and free to
//! change at any time. Limits: those of the paths it exposes.

use serde_json::value::RawValue;

use crate::envelope::{Incoming, Policy, Rejection};
use crate::evidence::EvidenceQueryArguments;

/// [`crate::envelope::validate`] without its one validating pass: the depth
/// pre-scan, then `serde_json` (the reference the pass must agree with, in
/// outcome, words and member spans).
pub fn validate_reference<'a>(body: &'a [u8], policy: &Policy) -> Result<Incoming<'a>, Rejection> {
    crate::envelope::validate_with_serde(body, policy)
}

/// The hand-written read of a `tools/call`'s params (an object at nesting
/// level 2 under the limit `max_depth`) as the usual `evidence_query` call
/// (`None`: left to the fallback). `Some` also says the text is valid JSON
/// within the limit.
pub fn read_call_by_hand(raw: &RawValue, max_depth: usize) -> Option<EvidenceQueryArguments> {
    crate::server::arguments::checked::call(raw, max_depth).map(|read| read.arguments)
}

/// [`crate::envelope::validate`] as the server runs it with the built-in
/// `evidence_query` schema: the params of a `tools/call` may be left to
/// [`read_call_by_hand`] (then read beside the outcome). The outcome must
/// be [`validate_reference`]'s, and a call read only beside a valid request
/// whose params the reference reads the same.
pub fn validate_reading_call<'a>(
    body: &'a [u8],
    policy: &Policy,
) -> (
    Result<Incoming<'a>, Rejection>,
    Option<EvidenceQueryArguments>,
) {
    let max_depth = policy.depth_limit();
    crate::envelope::validate_reading_call(body, policy, |raw| read_call_by_hand(raw, max_depth))
}

/// The `serde_json` typed read of the same params: the hand read's
/// reference and fallback. Whenever [`read_call_by_hand`] answers `Some`,
/// this must answer the same.
pub fn read_call_reference(text: &str) -> Option<EvidenceQueryArguments> {
    crate::server::arguments::read_call_serde(text)
}
