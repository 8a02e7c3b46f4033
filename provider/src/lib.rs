//! # evidence-wire-provider
//!
//! Write a Decision Gate evidence provider in Rust: one typed function per
//! check, the capabilities contract derived from the code, and one
//! provider value that every evidence-wire adapter serves unchanged
//! (blocking std, tokio on stdio and HTTP, smol and async-std).
//!
//! ```
//! use evidence_wire_provider::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Greeting {
//!     /// Whom to greet.
//!     name: String,
//! }
//!
//! fn greet(params: Greeting, _: &CheckContext) -> Result<String, CheckError> {
//!     Ok(format!("hello, {}", params.name))
//! }
//!
//! let provider = Provider::new("greeter", "Greets people.")
//!     .check(Check::new("greet", "A greeting for params.name.", greet).inline());
//! // Serve it with an adapter, e.g. `evidence_wire_tokio::serve_stdio(provider).await`.
//! let contract = provider.contract();
//! assert_eq!(contract.checks[0].params_schema["required"][0], "name");
//! ```
//!
//! What the crate does for the author:
//! - **Contract from code.** Params and result JSON Schemas come from the
//!   types (`schemars`), comparators default from the result type by
//!   Decision Gate's rules, and [`Provider::contract`] is the
//!   `capabilities_path` JSON. Nothing is written by hand.
//! - **Validation before the function runs.** The server checks every
//!   query against the contract (unknown check, another provider's id,
//!   params outside the schema) and answers a refusal itself.
//! - **Hashing and signing.** The server fills `evidence_hash` with the
//!   canonicalization profile the caller verifies with and signs when a key
//!   is set (`Provider::signing_key_file` reads the key
//!   `evidence-wire keygen` writes; see the `signing` module).
//! - **Runtime-neutral answers.** Sync checks run on the adapter's
//!   blocking pool (or inline, [`Check::inline`]), async checks
//!   ([`Check::new_async`]) on its executor; a panic is answered as an
//!   `internal_error` result.
//! - **Files under a root.** [`EvidenceRoot`] resolves a check's paths
//!   inside the operator's directory (refusing escapes and special files
//!   with the bundled provider's codes), reads within a size limit, and
//!   names the file in the answer (`dg+file://` reference,
//!   `file_path_rooted` anchor); [`Provider::root`] gives it to every check.
//! - **The call's context.** A check's [`CheckContext`] says whether anybody
//!   still waits (cancellation), when the answer is due (the server's
//!   `call_timeout`), who asked ([`Caller`]: dialect, transport,
//!   authenticated) and the request's `_meta`.
//! - **Tests.** With the feature `testing`, `testing::TestClient` asks the
//!   provider in-process as Decision Gate and as an MCP client do, and
//!   verifies every answer.
//!
//! Adapters use [`handler`]: the [`Handler`] trait, [`dispatch`] of
//! server events, [`Job`]s and [`complete`]; their process clients share
//! [`caller`]: [`caller::ProcessConfig`], [`caller::ProviderError`] and
//! the loop around the core's supervisor
//! ([`caller::child_loop::ChildLoop`], over a
//! [`caller::runtime::Runtime`]); the async ones serve streams with
//! [`serve::serve_stream`] (over their [`serve::Calls`]); their stdio
//! servers write to [`stdout::unbuffered_stdout`].

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod caller;
pub mod cancel;
pub mod check;
pub mod handler;
mod provider;
pub mod root;
pub mod serve;
#[cfg(feature = "signatures")]
#[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
pub mod signing;
pub mod stdout;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod trace;

pub use cancel::{CancelReason, Cancellation, OnCancel};
pub use check::{Check, CheckContext, CheckError, NoParams, default_comparators};
pub use evidence_wire::Transport;
pub use evidence_wire::contract::{Comparator, Determinism};
pub use handler::{
    Answer, BoxFuture, CallContext, CallKind, CallSource, Caller, Completion, Handler, IntoService,
    Job, ServeError, Service, Work, complete, dispatch, dispatch_from,
};
pub use provider::Provider;
pub use root::{EvidenceRoot, RootError, RootedPath};
pub use trace::TraceContext;

/// One `use` line for a provider author.
pub mod prelude {
    pub use crate::check::{Check, CheckContext, CheckError, NoParams};
    pub use crate::handler::{Caller, IntoService, ServeError, Service};
    pub use crate::provider::Provider;
    pub use crate::root::EvidenceRoot;
    #[cfg(feature = "signatures")]
    #[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
    pub use crate::signing::{EvidenceSigner, SigningKeyError};
    pub use evidence_wire::Transport;
    pub use evidence_wire::contract::{Comparator, Determinism};
    pub use evidence_wire::evidence::{EvidenceAnchor, EvidenceContext, TriggerTime};
}
