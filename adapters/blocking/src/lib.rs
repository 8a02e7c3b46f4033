//! # evidence-wire-blocking
//!
//! A provider on stdio with four worker threads, its contract derived from
//! the code (`examples/blocking_provider.rs` is a complete one):
//!
//! ```no_run
//! use evidence_wire_blocking::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct File {
//!     /// A path on this machine.
//!     path: String,
//! }
//!
//! fn file_size(file: File, _: &CheckContext) -> Result<u64, CheckError> {
//!     let metadata = std::fs::metadata(&file.path)
//!         .map_err(|error| CheckError::new("file_unreadable", error.to_string()))?;
//!     Ok(metadata.len())
//! }
//!
//! fn main() -> Result<(), ServeError> {
//!     let provider = Provider::new("disk", "Facts about files.")
//!         .check(Check::new("file_size", "The size of params.path.", file_size));
//!     serve_stdio(provider, 4)
//! }
//! ```
//!
//! Runtime adapter binding the sans-IO [`evidence_wire`] core to blocking
//! `std` I/O: threads, `std::process` and `std::sync::mpsc`.
//!
//! - [`serve`] / [`serve_stdio`]: a provider server on any reader/writer
//!   pair (stdin/stdout) serving a [`Provider`] or a [`Service`] (the SDK's
//!   [`Handler`] vocabulary), answering queries concurrently on a small
//!   worker pool and exiting cleanly on end of input after flushing every
//!   answer. One io thread reads, feeds the state machine and writes;
//!   ready answers ([`Answer::Ready`], an inline check) are given on that
//!   thread without any hand-off, the others on a worker, which writes
//!   its answer itself; the calling thread only waits for the end (or a
//!   failed write, which returns at once even if input never ends). Input
//!   is read 64 KiB at a time and reading pauses while
//!   [`MAX_OUTSTANDING_JOBS`] queries wait or run; output is flushed once
//!   per batch of answers.
//! - [`ProcessProvider`]: a child-process provider client that enforces
//!   per-request timeouts, forwards the child's stderr to a log callback,
//!   and restarts the child with bounded exponential backoff when it dies,
//!   hangs or desynchronizes its stream.
//!
//! Adapters are plumbing only: they move bytes between the core and the
//! runtime, sleep until the core's deadline, and own processes. No protocol
//! rule lives here.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub use evidence_wire as wire;

mod process;
mod server;

pub use evidence_wire_log as log;
pub use evidence_wire_provider as provider;
pub use evidence_wire_provider::caller::{LogSink, ProcessConfig, ProviderError};
pub use evidence_wire_provider::stdout::{UnbufferedStdout, unbuffered_stdout};
pub use evidence_wire_provider::{Answer, Handler, IntoService, Provider, ServeError, Service};
pub use process::ProcessProvider;
pub use server::{
    DEFAULT_DRAIN_TIMEOUT, MAX_OUTSTANDING_JOBS, Shutdown, serve, serve_stdio,
    serve_stdio_with_log, serve_until, serve_with_log,
};

/// One `use` line to write a provider or a caller on this adapter: the
/// SDK's prelude ([`Provider`], [`Check`](evidence_wire_provider::Check),
/// [`CheckContext`](evidence_wire_provider::CheckContext), ...) and this
/// adapter's entry points.
pub mod prelude {
    pub use crate::{ProcessConfig, ProcessProvider, ProviderError, serve_stdio};
    pub use evidence_wire::evidence::{EvidenceQuery, VerifiedEvidence};
    pub use evidence_wire_provider::prelude::*;
}
