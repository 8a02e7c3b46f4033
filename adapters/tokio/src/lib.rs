//! # evidence-wire-tokio
//!
//! A provider on stdio, its contract derived from the code (more in
//! `examples/`: HTTP with a bearer token, a caller that verifies):
//!
//! ```no_run
//! use evidence_wire_tokio::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct File {
//!     /// A path on this machine.
//!     path: String,
//! }
//!
//! fn file_exists(file: File, _: &CheckContext) -> Result<bool, CheckError> {
//!     Ok(std::path::Path::new(&file.path).exists())
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), ServeError> {
//!     let provider = Provider::new("files", "Facts about files.")
//!         .check(Check::new("file_exists", "Whether params.path exists.", file_exists));
//!     serve_stdio(provider).await
//! }
//! ```
//!
//! Runtime adapter binding the sans-IO [`evidence_wire`] core to tokio I/O.
//!
//! - [`serve`] / [`serve_stdio`]: a provider server on any `AsyncRead` /
//!   `AsyncWrite` pair (stdin/stdout) serving a [`Provider`] or a
//!   [`Service`] (the SDK's [`Handler`] vocabulary), answering queries
//!   concurrently (blocking checks on tokio's blocking pool, async ones as
//!   tasks; at most `ServerConfig::max_in_flight`, past which input is not
//!   read until an answer frees a slot) and returning on end of input once every
//!   answer in flight is written and flushed.
//! - [`ProcessProvider`]: a child-process provider client with per-request
//!   timeouts, the child's stderr forwarded to a [`LogSink`], and restarts
//!   with bounded exponential backoff when the child dies, hangs or
//!   desynchronizes its stream.
//! - [`serve_http`]: the HTTP server on hyper (`POST /rpc`, `POST /mcp`,
//!   probes), feeding the same core pipeline as stdio.
//! - [`HttpProvider`]: the HTTP provider client (`https://` over rustls with
//!   the bundled public roots plus configured extra roots; plain `http://`
//!   only with `allow_insecure_http`).
//! - `testing` (feature `testing`, for dev-dependencies): the in-process
//!   test client on a tokio runtime and `check-provider`'s battery as a
//!   library (`testing::CheckProvider`), for a provider's own `cargo test`.
//!
//! Adapters are plumbing only: they move bytes between the core and the
//! runtime, sleep until the core's deadline, and own processes and sockets.
//! Every protocol and HTTP decision lives in the core
//! ([`evidence_wire::server`], [`evidence_wire::client`],
//! [`evidence_wire_http`]). Nothing here writes to stdout except the
//! protocol stream of [`serve_stdio`]; diagnostics go to the [`LogSink`] or
//! to the handler's `observe`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use evidence_wire as wire;

#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod cli;
mod compat;
#[cfg(feature = "http-client")]
mod http_client;
#[cfg(feature = "http-server")]
mod http_server;
mod process;
#[cfg(feature = "http-server")]
mod service;
mod stdio;
mod tasks;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
#[cfg(feature = "tls")]
mod tls;

#[cfg(feature = "http-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "http-server")))]
pub use evidence_wire_http as http;
pub use evidence_wire_log as log;
#[cfg(feature = "http-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "http-server")))]
pub use evidence_wire_metrics as metrics;
#[cfg(feature = "http-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "http-server")))]
pub use evidence_wire_metrics::Metrics;
pub use evidence_wire_provider as provider;
pub use evidence_wire_provider::caller::{LogSink, ProcessConfig, ProviderError};
pub use evidence_wire_provider::{Answer, Handler, IntoService, Provider, ServeError, Service};
#[cfg(feature = "http-client")]
#[cfg_attr(docsrs, doc(cfg(feature = "http-client")))]
pub use http_client::{HttpProvider, HttpProviderConfig};
#[cfg(feature = "http-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "http-server")))]
pub use http_server::{HttpServeError, HttpServerConfig, LISTEN_BACKLOG, bind_http, serve_http};
pub use process::ProcessProvider;
#[cfg(feature = "http-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "http-server")))]
pub use service::ProviderService;
pub use stdio::{serve, serve_stdio, serve_stdio_with_log, serve_with_log};
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use tls::{MAX_PEM_BYTES, TlsError, TlsFiles};

/// One `use` line to write a provider or a caller on tokio: the SDK's
/// prelude ([`Provider`], [`Check`](evidence_wire_provider::Check),
/// [`CheckContext`](evidence_wire_provider::CheckContext), ...) and this
/// adapter's entry points.
pub mod prelude {
    #[cfg(feature = "cli")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
    pub use crate::cli::{RunProvider, Runner};
    #[cfg(feature = "http-client")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http-client")))]
    pub use crate::{HttpProvider, HttpProviderConfig};
    #[cfg(feature = "http-server")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http-server")))]
    pub use crate::{HttpServerConfig, ProviderService, bind_http, serve_http};
    pub use crate::{ProcessConfig, ProcessProvider, ProviderError, serve_stdio};
    pub use evidence_wire::evidence::{EvidenceQuery, VerifiedEvidence};
    pub use evidence_wire_provider::prelude::*;
}
