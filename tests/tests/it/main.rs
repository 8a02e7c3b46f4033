//! Cross-adapter, conformance and interop tests of the whole family.
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

mod adapter_matrix;
mod check_provider;
mod cli_documented;
mod closed_tables;
mod examples;
mod interop_conformance;
mod interop_dg_provider;
mod interop_inspector;
mod interop_mcp_python;
mod interop_mcp_typescript;
mod interop_rmcp;
mod interop_support;
mod interop_vscode_jsonrpc;
mod one_provider_everywhere;
mod scale_out_nginx;
mod self_contained;
mod stdio_backpressure;
#[cfg(feature = "tokio-row")]
mod tokio_process;
mod validation_log_golden;
mod wrap;
