//! # evidence-wire
//!
//! The sans-IO core of the Decision Gate evidence-provider protocol.
//!
//! Decision Gate asks external *evidence providers* questions by calling one
//! JSON-RPC 2.0 tool, `evidence_query`, over stdio (Content-Length framed, or
//! one JSON message per line as standard MCP clients send it) or HTTP, and
//! verifies the answer by a SHA-256 hash of canonical JSON.
//!
//! This crate does no I/O, reads no clock and spawns nothing: it turns bytes
//! into events and events into bytes. Runtime adapters (`evidence-wire-blocking`,
//! `evidence-wire-tokio`, `evidence-wire-smol`) move the bytes.
//!
//! It is `#![no_std]` + `alloc`; the `std` feature (on by default) adds
//! `std::error::Error` impls and JSON Schema validation; the `signatures`
//! feature (on by default) adds ed25519 evidence signatures.
//!
//! | module | job |
//! | --- | --- |
//! | [`frame`] | Content-Length and newline-delimited codecs, auto-detection, limits |
//! | [`envelope`] | JSON-RPC 2.0 message types, validation policies, batch rules |
//! | [`error`] | the closed canonical error table (HTTP status, JSON-RPC code, message) |
//! | [`canonical`] | RFC 8785 canonical JSON, streaming from bytes into any sink |
//! | `unique` (private) | JSON values whose objects name each member once (peer input the server reads) |
//! | [`evidence`] | query, context and result types; hash and signature verification |
//! | [`schema`] | tool I/O schema registry, cached by fingerprint |
//! | [`dialect`] | Decision Gate vs MCP: the two wire dialects and the hash profile each verifies with |
//! | [`contract`] | the Decision Gate capabilities contract of a provider: types and validation |
//! | [`server`] | provider-side connection state machine; a contract drives its `tools/list` and query checks |
//! | [`client`] | caller-side connection state machine: ids, deadlines, result verification |
//! | [`text`] | bounded excerpts of text a peer wrote |
//! | [`transport`] | the transports the protocol runs over (stdio, HTTP): one name for adapters, configuration, metrics and logs |
//! | [`supervisor`] | restart supervision of a child-process provider: backoff, deferred queries |

#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod canonical;
pub mod client;
pub mod contract;
pub mod dialect;
#[cfg(feature = "differential")]
#[doc(hidden)]
pub mod differential;
pub mod envelope;
pub mod error;
pub mod evidence;
pub mod frame;
pub mod id;
pub mod schema;
pub mod server;
pub mod supervisor;
pub mod text;
pub mod trace;
pub mod transport;
mod unique;

// The types most code needs, at the root: a provider or a caller starts
// with these; everything else is in its room.
pub use canonical::Profile;
pub use client::{Client, ClientConfig, ClientEvent, QueryError};
pub use contract::{CheckContract, Comparator, Determinism, ProviderContract};
pub use dialect::{Dialect, McpRevision};
pub use error::CanonicalError;
pub use evidence::{
    EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
    VerifiedEvidence,
};
pub use frame::{Decoder, Framing};
pub use id::Id;
pub use server::{Server, ServerConfig, ServerContract, ServerEvent, Ticket};
pub use supervisor::{Supervisor, SupervisorConfig};
pub use transport::Transport;

/// The JSON crate the core's types are made of (`Value` in params,
/// contracts and tool arguments, `RawValue` in results): the same version,
/// so an embedder needs no dependency of its own to build them.
pub use serde_json;
