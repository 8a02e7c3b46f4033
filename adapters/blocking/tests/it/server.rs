//! The blocking stdio server on in-memory input/output: both framings,
//! concurrent (out-of-order) answers on the worker pool, every answer
//! flushed at end of input, a panicking handler answered with an error, a
//! fatal framing error reported after answering what was in flight.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use std::io::{Cursor, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::{self, Decoder, Framing, Limits};
use evidence_wire::server::ServerConfig;
use evidence_wire_blocking::{Answer, Handler, ServeError, Service, serve};
use serde_json::{Value, json};

/// Answers `{"n": n}` after `delay_ms * (8 - n)` ms; panics for `n == 99`.
struct Echo {
    delay_ms: u64,
}

impl Handler for Echo {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        _context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        let delay_ms = self.delay_ms;
        Answer::blocking(move || {
            let n = query
                .params
                .as_ref()
                .and_then(|params| params.get("n"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            assert_ne!(n, 99, "the handler panics on purpose for n = 99");
            std::thread::sleep(Duration::from_millis(
                delay_ms.saturating_mul(8u64.saturating_sub(n)),
            ));
            EvidenceResult::with_value(EvidenceValue::json(&json!({"n": n})).unwrap())
        })
    }
}

fn request(framing: Framing, id: u64, n: u64) -> Vec<u8> {
    let context = EvidenceContext::adhoc(TriggerTime::Logical(1));
    let query = EvidenceQuery::new("blocking-test", "echo").with_params(json!({"n": n}));
    let body = serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {"query": query, "context": context}},
    }))
    .unwrap();
    let mut out = Vec::new();
    frame::encode(framing, &body, &mut out).unwrap();
    out
}

/// An output the test can read after `serve` returns (`serve` needs a
/// `'static` writer).
#[derive(Clone, Default)]
struct SharedOutput(Arc<Mutex<Vec<u8>>>);

impl Write for SharedOutput {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn exchange(input: Vec<u8>, delay_ms: u64, workers: usize) -> (Result<(), ServeError>, Vec<u8>) {
    let output = SharedOutput::default();
    let service = Service::new(ServerConfig::default(), Echo { delay_ms });
    let outcome = serve(service, workers, Cursor::new(input), output.clone());
    let written = output.0.lock().unwrap().clone();
    (outcome, written)
}

/// (id, n or error code) per answer, in output order.
fn answers(output: &[u8]) -> Vec<(u64, Value)> {
    let mut decoder = Decoder::new(Limits::default());
    decoder.push(output);
    decoder.finish().unwrap();
    let mut answers = Vec::new();
    while let Some(frame) = decoder.poll_frame() {
        let message: Value = serde_json::from_slice(&frame.unwrap().body).unwrap();
        let id = message["id"].as_u64().unwrap_or(0);
        let result = &message["result"]["content"][0]["json"];
        let answer = if result["value"].is_object() {
            result["value"]["value"]["n"].clone()
        } else {
            result["error"]["code"].clone()
        };
        answers.push((id, answer));
    }
    answers
}

fn pipelined(framing: Framing) {
    let input: Vec<u8> = (1..=8).flat_map(|n| request(framing, n, n)).collect();
    let (outcome, output) = exchange(input, 20, 8);
    outcome.unwrap();
    let prefix: &[u8] = match framing {
        Framing::ContentLength => b"Content-Length:",
        Framing::NewlineDelimited => b"{",
    };
    assert!(
        output.starts_with(prefix),
        "output framing does not mirror the input"
    );
    let mut got = answers(&output);
    // Query n waits (8 - n) * 20 ms: on 8 workers, the last comes first.
    assert_eq!(got.first().map(|(id, _)| *id), Some(8), "answers: {got:?}");
    got.sort_by_key(|(id, _)| *id);
    let expected: Vec<(u64, Value)> = (1..=8).map(|n| (n, json!(n))).collect();
    assert_eq!(got, expected);
}

#[test]
fn pipelined_ndjson() {
    pipelined(Framing::NewlineDelimited);
}

#[test]
fn pipelined_content_length() {
    pipelined(Framing::ContentLength);
}

#[test]
fn end_of_input_flushes_answers_in_flight() {
    let (outcome, output) = exchange(request(Framing::NewlineDelimited, 5, 1), 20, 1);
    outcome.unwrap();
    assert_eq!(answers(&output), vec![(5, json!(1))]);
}

#[test]
fn a_panicking_handler_is_answered_with_an_error() {
    let mut input = request(Framing::NewlineDelimited, 1, 99);
    input.extend(request(Framing::NewlineDelimited, 2, 7));
    // One worker: the panic must not kill it, or query 2 is never answered.
    let (outcome, output) = exchange(input, 1, 1);
    outcome.unwrap();
    let mut got = answers(&output);
    got.sort_by_key(|(id, _)| *id);
    assert_eq!(got, vec![(1, json!("internal_error")), (2, json!(7))]);
}

#[test]
fn a_fatal_framing_error_stops_reading_but_answers_in_flight() {
    let mut input = request(Framing::ContentLength, 1, 4);
    input.extend_from_slice(b"Content-Length: 99999999999999999999999999\r\n\r\n");
    input.extend(request(Framing::ContentLength, 2, 4));
    let (outcome, output) = exchange(input, 1, 2);
    assert!(
        matches!(outcome, Err(ServeError::Fatal(_))),
        "expected a fatal error, got {outcome:?}"
    );
    assert_eq!(answers(&output), vec![(1, json!(4))]);
}
