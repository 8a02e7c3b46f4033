//! The provider-side state machine under arbitrary operation sequences
//! (chunked input, answers in any order, repeated answers, end of input).
//! The interpreter and its invariants are in `common/server_ops.rs`.
#![no_main]

#[path = "common/server_ops.rs"]
mod ops;

libfuzzer_sys::fuzz_target!(|data: &[u8]| ops::run(data));
