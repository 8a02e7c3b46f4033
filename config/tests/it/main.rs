//! Integration tests of the configuration crate.
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

mod config_mapping;
mod config_schema;
mod config_validation;
mod not_regular_files;
