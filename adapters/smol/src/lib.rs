//! # evidence-wire-smol
//!
//! Runtime adapter binding the sans-IO [`evidence_wire`] core to smol I/O.
//! Adapters are plumbing only: they move bytes between the core and the
//! runtime, sleep until the core's deadline, and own processes and sockets.
//! No protocol rule lives here.
//!
//! Status: the stdio server, child-process client and HTTP pieces land with
//! the runtime-adapters work; today this crate only re-exports the core.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use evidence_wire as core;
