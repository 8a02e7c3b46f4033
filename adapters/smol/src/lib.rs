//! # evidence-wire-smol
//!
//! A provider on stdio whose check is an async function
//! (`examples/smol_provider.rs` is a complete one):
//!
//! ```no_run
//! use evidence_wire_smol::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct File {
//!     /// A text file on this machine.
//!     path: String,
//! }
//!
//! async fn line_count(file: File, _: CheckContext) -> Result<u64, CheckError> {
//!     let text = smol::fs::read_to_string(&file.path)
//!         .await
//!         .map_err(|error| CheckError::new("file_unreadable", error.to_string()))?;
//!     Ok(text.lines().count() as u64)
//! }
//!
//! fn main() -> Result<(), ServeError> {
//!     let provider = Provider::new("text", "Facts about text files.")
//!         .check(Check::new_async("line_count", "Lines of params.path.", line_count));
//!     smol::block_on(serve_stdio(provider))
//! }
//! ```
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
//! use evidence_wire_smol::wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
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
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub use evidence_wire as wire;

mod process;
mod server;

pub use evidence_wire_log as log;
pub use evidence_wire_provider as provider;
pub use evidence_wire_provider::caller::{LogSink, ProcessConfig, ProviderError};
pub use evidence_wire_provider::{Answer, Handler, IntoService, Provider, ServeError, Service};
pub use process::ProcessProvider;
pub use server::{serve, serve_stdio, serve_stdio_with_log, serve_with_log};

/// One `use` line to write a provider or a caller on this adapter: the
/// SDK's prelude ([`Provider`], [`Check`](evidence_wire_provider::Check),
/// [`CheckContext`](evidence_wire_provider::CheckContext), ...) and this
/// adapter's entry points.
pub mod prelude {
    pub use crate::{ProcessConfig, ProcessProvider, ProviderError, serve_stdio};
    pub use evidence_wire::evidence::{EvidenceQuery, VerifiedEvidence};
    pub use evidence_wire_provider::prelude::*;
}
