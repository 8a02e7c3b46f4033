//! Canonical JSON on raw bytes, differential against
//! `serde_json_canonicalizer` (RFC 8785), plus idempotence under both
//! profiles. The checks are in `common/canonical.rs`, shared with the corpus
//! replay in `core/tests/it/fuzz_corpus.rs`.
#![no_main]

#[path = "common/canonical.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::run(data);
});
