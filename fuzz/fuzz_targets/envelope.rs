//! Envelope validation on raw bytes under four policies: messages or a
//! canonical rejection, never a panic. The checks are in
//! `common/envelope.rs`, shared with the corpus replay in
//! `core/tests/it/fuzz_corpus.rs`.
#![no_main]

#[path = "common/envelope.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::run(data);
});
