//! Frame decoder on raw bytes under every framing choice: never panics,
//! never holds more than one frame's worth of bytes, `finish` always
//! answers. The checks are in `common/frame.rs`, shared with the corpus
//! replay in `core/tests/it/fuzz_corpus.rs`.
#![no_main]

#[path = "common/frame.rs"]
#[allow(dead_code)] // each frame target uses one of the two entry points
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::run_decoder(data));
