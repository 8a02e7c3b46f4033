//! # evidence-wire-blocking
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
#![deny(missing_docs)]

pub use evidence_wire as core;

mod process;
mod server;

pub use evidence_wire_log as log;
pub use evidence_wire_provider as provider;
pub use evidence_wire_provider::caller::{LogSink, ProcessConfig, ProviderError};
pub use evidence_wire_provider::{Answer, Handler, IntoService, Provider, ServeError, Service};
pub use process::ProcessProvider;
pub use server::{MAX_OUTSTANDING_JOBS, serve, serve_stdio, serve_stdio_with_log, serve_with_log};
