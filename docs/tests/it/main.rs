//! Integration tests of the docs crate.
//!
//! One test binary for the crate (each binary is a link step): every
//! module below was a test binary of its own; run one with
//! `cargo test -p <crate> --test it <module>::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

mod docs_extra;
mod docs_resources;
mod docs_search;
mod docs_server;
mod embedded_copies;
mod policy_tools;
