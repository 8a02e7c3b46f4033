//! The caller-side state machine under arbitrary operation sequences
//! (queries, cancellations, clock jumps, provider bytes in any chunks, end
//! of output, restarts). The interpreter and its invariants are in
//! `common/client_ops.rs`.
#![no_main]

#[path = "common/client_ops.rs"]
mod ops;

libfuzzer_sys::fuzz_target!(|data: &[u8]| ops::run(data));
