//! `evidence-wire`: the command line (see the `evidence_wire_cli` library,
//! which holds all of it, for the commands and exit codes).
//!
//! The binary picks two things a library leaves to its embedder: the
//! allocator (mimalloc: a request's dozen small allocations cost about a
//! quarter of what glibc's malloc takes, `BENCHMARKS.md`) and, through
//! `Cargo.toml` on x86 and x86-64 outside Windows, sha2's assembly SHA-256
//! for CPUs without the SHA extensions (CPUs with them use those either
//! way).

#![forbid(unsafe_code)]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    evidence_wire_cli::run()
}
