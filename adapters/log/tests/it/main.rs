//! The log crate's integration tests, one binary: records of deferred
//! tool outcomes over stdio and HTTP, and request ids kept as sent.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

mod deferred_outcomes;

use evidence_wire::id::Id;
use evidence_wire::server::Outcome;
use evidence_wire_log::record::{Channel, RecordFacts, Recorder};

/// A request id of `-0` (which JSON-RPC keeps apart from `0`) is recorded
/// as it was sent.
#[test]
fn a_request_id_of_minus_zero_is_recorded_as_sent() {
    let mut recorder = Recorder::new(true);
    let facts = RecordFacts {
        transport: Channel::Stdio,
        route: "stdio:newline-delimited",
        status: 200,
        duration_micros: 0,
    };
    let outcome = Outcome {
        id: Some(Id::NegativeZero),
        method: Some("ping".into()),
        tool: None,
        error: None,
        detail: None,
        stateless: false,
        trace_id: None,
    };
    let line = recorder
        .record(&outcome, &facts, Default::default())
        .to_json_line();
    let line = String::from_utf8(line).unwrap();
    assert!(line.contains(r#""requestId":-0,"#), "{line}");
}
