//! # evidence-wire-smol
//!
//! Runtime adapter binding the sans-IO [`evidence_wire`] core to the
//! `futures-io` traits (`AsyncRead`/`AsyncWrite`), built from the smol
//! family of crates (`async-io`, `async-process`, `async-channel`,
//! `blocking`). Nothing here needs a particular executor: it runs on smol,
//! on async-std, and its client futures run on tokio too.
//!
//! - [`serve`] / [`serve_stdio`]: a provider server on any reader/writer
//!   pair (stdin/stdout) serving a [`Provider`] or a [`Service`] (the SDK's
//!   [`Handler`] vocabulary): blocking checks on the `blocking` thread
//!   pool, async ones concurrently inside the serving future, exiting
//!   cleanly on end of input after flushing every answer.
//! - [`ProcessProvider`]: a child-process provider client that enforces
//!   per-request timeouts, forwards the child's stderr to a log callback,
//!   and restarts the child with bounded exponential backoff when it dies,
//!   hangs or desynchronizes its stream.
//!
//! Adapters are plumbing only: they move bytes between the core and the
//! runtime, sleep until the core's deadline, and own processes. No protocol
//! rule lives here.
//!
//! ```no_run
//! use evidence_wire_smol::{ProcessConfig, ProcessProvider};
//! use evidence_wire_smol::core::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let provider = ProcessProvider::spawn(ProcessConfig::new(vec![
//!     "evidence-wire".into(),
//!     "serve".into(),
//! ]))?;
//! let query = EvidenceQuery::new("evidence-wire", "time_now");
//! let context = EvidenceContext::adhoc(TriggerTime::Logical(1));
//! let evidence = smol::block_on(provider.query(&query, &context))?;
//! println!("{evidence}");
//! # Ok(())
//! # }
//! ```

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
pub use server::{serve, serve_stdio, serve_stdio_with_log, serve_with_log};
