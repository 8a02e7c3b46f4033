//! `evidence-wire-cli`: the `evidence-wire` command line, built by this
//! package so that its tests find it as `CARGO_BIN_EXE_evidence-wire-cli`,
//! compiled by `cargo test` with the workspace's features. It only calls
//! `evidence_wire_cli::run` (the `query` command re-runs this executable as
//! its bundled provider).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

// The same allocator as the `evidence-wire` binary (adapters/cli/src/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    evidence_wire_cli::run()
}
