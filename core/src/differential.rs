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

/// The hand-written read of a `tools/call`'s params as the usual
/// `evidence_query` call (`None`: left to the fallback).
pub fn read_call_by_hand(raw: &RawValue) -> Option<EvidenceQueryArguments> {
    crate::server::arguments::checked::call(raw)
}

/// The `serde_json` typed read of the same params: the hand read's
/// reference and fallback. Whenever [`read_call_by_hand`] answers `Some`,
/// this must answer the same.
pub fn read_call_reference(text: &str) -> Option<EvidenceQueryArguments> {
    crate::server::arguments::read_call_serde(text)
}
