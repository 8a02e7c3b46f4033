//! The core's tests, one test binary (each module a former test file):
//! one link step instead of one per file.
//!
//! Modules are named `<room>_<kind>` (`_props` property tests, `_vectors`
//! conformance data, `_transcripts` byte-exact exchanges, `_model` model
//! checks); `fuzz_corpus` replays every fuzz target's corpus.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
// test code may panic
// Without JSON Schema validation its tests are compiled out, and so are the
// helpers only they use.
#![cfg_attr(not(feature = "json-schema"), allow(unused_imports, dead_code))]

/// The vendored conformance vectors (`core/tests/vectors/`, sources and
/// licences in its README), inside the crate so a packaged copy finds them.
fn vectors_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

mod canonical_integers;
mod canonical_props;
mod canonical_vectors;
mod client_fail_closed;
mod client_handshake_refused;
mod client_model;
mod client_raw;
mod client_transcripts;
mod contract_rules;
mod embedded_schemas;
mod envelope_depth;
mod envelope_mcp_examples;
mod envelope_props;
mod envelope_rules;
mod envelope_spec_examples;
mod error_table;
mod evidence_model;
mod evidence_verify;
mod evidence_worked_examples;
mod frame_props;
mod frame_vectors;
mod fuzz_corpus;
#[cfg(feature = "json-schema")]
mod schema_registry;
mod server_arguments;
mod server_backpressure;
mod server_contract;
mod server_fail_closed;
mod server_model;
mod server_revisions;
mod server_sealing;
mod server_transcripts;
mod supervisor;
mod unframed;
