//! Test support for a provider's own `cargo test` (feature `testing`):
//! ask it questions in this process as its callers do, and run
//! `check-provider`'s battery against it.
//!
//! - [`decision_gate`] and [`mcp`]: the SDK's in-process [`TestClient`]
//!   (no process, no socket) asking as Decision Gate does (Content-Length,
//!   no handshake, its hash profile) or as an MCP client does (the
//!   `initialize` handshake, RFC 8785), each answer's hash (and signature,
//!   [`TestClient::require_signature`]) verified by the core's client, the
//!   contract held to Decision Gate's rules
//!   ([`TestClient::check_contract`]); async checks run on a tokio runtime
//!   of the client's own, so they may use tokio's timers and sockets.
//! - [`CheckProvider`]: the whole `check-provider` battery against the
//!   provider in this process, its binary or its URL, as a [`Report`] to
//!   assert ([`Report::assert_clean`], or [`Report::assert_passed`] to
//!   let warnings through).
//!
//! ```no_run
//! use evidence_wire_tokio::prelude::*;
//! use evidence_wire_tokio::testing;
//! use serde_json::json;
//!
//! # fn files() -> Provider { unimplemented!() }
//! #[test]
//! fn line_count_counts_lines() {
//!     let mut client = testing::decision_gate(files()).unwrap();
//!     let answer = client.query("line_count", json!({"path": "a.txt"})).unwrap();
//!     assert_eq!(answer.value(), Some(json!(3)));
//! }
//!
//! #[test]
//! fn passes_check_provider() {
//!     testing::CheckProvider::service(files()).unwrap().run().assert_clean();
//! }
//! ```
//!
//! Use them from plain `#[test]` functions: the test client runs its own
//! runtime, which cannot be started inside another one.

pub mod check_provider;

use evidence_wire_provider::{Answer, Completion, IntoService, Job, ServeError};

pub use check_provider::{CheckProvider, Line, Report, Status};
pub use evidence_wire_provider::testing::{
    ContractProblems, Evidence, TestClient, decision_gate_context,
};

/// A test client asking `service` as Decision Gate does (see
/// [`TestClient::decision_gate`]), its async checks run on a tokio runtime.
pub fn decision_gate(service: impl IntoService) -> Result<TestClient, ServeError> {
    Ok(TestClient::decision_gate(service)?.with_runner(tokio_runner()?))
}

/// A test client asking `service` as an MCP client does (see
/// [`TestClient::mcp`]), its async checks run on a tokio runtime.
pub fn mcp(service: impl IntoService) -> Result<TestClient, ServeError> {
    Ok(TestClient::mcp(service)?.with_runner(tokio_runner()?))
}

/// Runs each call on this thread inside a current-thread tokio runtime of
/// its own: blocking work with the runtime entered (a check may take
/// `Handle::current()`), async work driven by `block_on`. A panic or a
/// cancelled call is answered as [`Job::into_guarded`] answers it.
pub fn tokio_runner() -> Result<impl FnMut(Job) -> Completion + Send + 'static, ServeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Spawn)?;
    Ok(move |job: Job| match job.into_guarded() {
        Answer::Ready(completion) => completion,
        Answer::Blocking(work) => {
            let _entered = runtime.enter();
            work()
        }
        Answer::Async(future) => runtime.block_on(future),
    })
}
