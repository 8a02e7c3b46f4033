//! The bundled provider's checks on arbitrary params: JSONPath expressions
//! (against a small, a deep and a wide document), file paths under a
//! temporary root, timestamps as text and as integers, and any params for
//! any check, each through the contract check and `BundledProvider::answer`.
//! The checks are in `common/bundled_params.rs`, shared with the corpus
//! replay in `bundled/tests/it/bundled_fuzz_corpus.rs`.
#![no_main]

#[path = "common/bundled_params.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::run(data);
});
