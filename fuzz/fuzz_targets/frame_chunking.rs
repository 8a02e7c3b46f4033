//! Any chunking of the same bytes gives the same frames, offsets and errors
//! as feeding them whole (and byte by byte). The first input byte seeds the
//! chunk sizes. The checks are in `common/frame.rs`, shared with the corpus
//! replay in `core/tests/it/fuzz_corpus.rs`.
#![no_main]

#[path = "common/frame.rs"]
#[allow(dead_code)] // each frame target uses one of the two entry points
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::run_chunking(data));
