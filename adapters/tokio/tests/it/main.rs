//! The integration tests of evidence-wire-tokio, one binary (one link, one
//! process; each file is a module named after what it tests).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    dead_code
)] // test code may panic

mod cancellation;
mod common;
mod docs_http;
mod examples;
mod fake_tracker;
mod fault_http;
mod http;
mod http_half_open;
mod http_hardening;
mod http_pool;
mod http_tls;
mod load;
mod mounted;
mod release_readiness;
mod runner;
mod stdio;
mod trace;
