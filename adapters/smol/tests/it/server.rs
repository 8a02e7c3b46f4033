//! The smol stdio server on in-memory pipes, each case run on smol and on
//! async-std: both framings, concurrent (out-of-order) answers, every
//! answer flushed at end of input, a panicking handler answered with an
//! error, a fatal framing error reported after answering what was in flight.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use std::future::Future;
use std::time::Duration;

use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::{self, Decoder, Framing, Limits};
use evidence_wire::server::ServerConfig;
use evidence_wire_smol::{Answer, Handler, ServeError, Service, serve};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
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
        Answer::future(async move {
            let n = query
                .params
                .as_ref()
                .and_then(|params| params.get("n"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            assert_ne!(n, 99, "the handler panics on purpose for n = 99");
            let wait = delay_ms.saturating_mul(8u64.saturating_sub(n));
            async_io::Timer::after(Duration::from_millis(wait)).await;
            EvidenceResult::with_value(EvidenceValue::json(&json!({"n": n})).unwrap())
        })
    }
}

fn request(id: u64, n: u64) -> Vec<u8> {
    let context = EvidenceContext::adhoc(TriggerTime::Logical(1));
    let query = EvidenceQuery::new("smol-test", "echo").with_params(json!({"n": n}));
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {"query": query, "context": context}},
    }))
    .unwrap()
}

fn framed(framing: Framing, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode(framing, body, &mut out).unwrap();
    out
}

/// Runs `serve` with `input` written then closed; returns its outcome and
/// the answers as (id, n or the error code), in output order.
async fn exchange(input: Vec<u8>, delay_ms: u64) -> (Result<(), ServeError>, Vec<u8>) {
    let (reader, mut writer) = piper::pipe(1024);
    let (out_reader, out_writer) = piper::pipe(64 * 1024);
    let feed = async move {
        writer.write_all(&input).await.unwrap();
        writer.close().await.unwrap();
    };
    let service = Service::new(ServerConfig::default(), Echo { delay_ms });
    let serving = serve(service, reader, out_writer);
    let collect = async move {
        let mut out_reader = out_reader;
        let mut output = Vec::new();
        out_reader.read_to_end(&mut output).await.unwrap();
        output
    };
    let ((outcome, ()), output) =
        futures_lite::future::zip(futures_lite::future::zip(serving, feed), collect).await;
    (outcome, output)
}

fn answers(output: &[u8]) -> Vec<(u64, Value)> {
    let mut decoder = Decoder::new(Limits::default());
    decoder.push(output);
    decoder.finish().unwrap();
    let mut answers = Vec::new();
    while let Some(frame) = decoder.poll_frame() {
        let message: Value = serde_json::from_slice(&frame.unwrap().body).unwrap();
        let id = message["id"].as_u64().unwrap_or(0);
        let result = &message["result"]["content"][0]["json"];
        // A json value is `{"kind": "json", "value": <the value>}`.
        let answer = if result["value"].is_object() {
            result["value"]["value"]["n"].clone()
        } else if result["error"].is_object() {
            result["error"]["code"].clone()
        } else {
            message["error"]["code"].clone()
        };
        answers.push((id, answer));
    }
    answers
}

async fn pipelined_answers_come_concurrently(framing: Framing) {
    let input: Vec<u8> = (1..=8)
        .flat_map(|n| framed(framing, &request(n, n)))
        .collect();
    let (outcome, output) = exchange(input, 20).await;
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
    // Query n waits (8 - n) * 20 ms: run concurrently, the last comes first.
    assert_eq!(got.first().map(|(id, _)| *id), Some(8), "answers: {got:?}");
    got.sort_by_key(|(id, _)| *id);
    let expected: Vec<(u64, Value)> = (1..=8).map(|n| (n, json!(n))).collect();
    assert_eq!(got, expected);
}

async fn end_of_input_flushes_answers_in_flight() {
    // The input ends at once; the answer is ready only 140 ms later.
    let input = framed(Framing::NewlineDelimited, &request(5, 1));
    let (outcome, output) = exchange(input, 20).await;
    outcome.unwrap();
    assert_eq!(answers(&output), vec![(5, json!(1))]);
}

async fn a_panicking_handler_is_answered_with_an_error() {
    let mut input = framed(Framing::NewlineDelimited, &request(1, 99));
    input.extend(framed(Framing::NewlineDelimited, &request(2, 7)));
    let (outcome, output) = exchange(input, 1).await;
    outcome.unwrap();
    let mut got = answers(&output);
    got.sort_by_key(|(id, _)| *id);
    assert_eq!(got, vec![(1, json!("internal_error")), (2, json!(7))]);
}

async fn a_fatal_framing_error_stops_reading_but_answers_in_flight() {
    let mut input = framed(Framing::ContentLength, &request(1, 4));
    input.extend_from_slice(b"Content-Length: 99999999999999999999999999\r\n\r\n");
    input.extend(framed(Framing::ContentLength, &request(2, 4)));
    let (outcome, output) = exchange(input, 1).await;
    assert!(
        matches!(outcome, Err(ServeError::Fatal(_))),
        "expected a fatal error, got {outcome:?}"
    );
    assert_eq!(answers(&output), vec![(1, json!(4))]);
}

fn on_both_runtimes<F: Future<Output = ()>>(case: impl Fn() -> F) {
    smol::block_on(case());
    async_std::task::block_on(case());
}

#[test]
fn pipelined_ndjson() {
    on_both_runtimes(|| pipelined_answers_come_concurrently(Framing::NewlineDelimited));
}

#[test]
fn pipelined_content_length() {
    on_both_runtimes(|| pipelined_answers_come_concurrently(Framing::ContentLength));
}

#[test]
fn end_of_input_flushes() {
    on_both_runtimes(end_of_input_flushes_answers_in_flight);
}

#[test]
fn handler_panic() {
    on_both_runtimes(a_panicking_handler_is_answered_with_an_error);
}

#[test]
fn fatal_framing_error() {
    on_both_runtimes(a_fatal_framing_error_stops_reading_but_answers_in_flight);
}

/// Sets its flag when dropped: the future holding it was dropped.
struct DropFlag(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Never answers; records when its future is dropped.
struct Never(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Handler for Never {
    fn evidence_query(
        &self,
        _query: EvidenceQuery,
        _context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        let guard = DropFlag(std::sync::Arc::clone(&self.0));
        Answer::future(async move {
            let _guard = guard;
            std::future::pending::<EvidenceResult>().await
        })
    }
}

/// A call the peer cancels has its future dropped at once, while the
/// input is still open (it used to run until the server returned).
async fn a_cancelled_call_is_dropped() {
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (reader, mut writer) = piper::pipe(1024);
    let (out_reader, out_writer) = piper::pipe(64 * 1024);
    let service = Service::new(
        ServerConfig::default(),
        Never(std::sync::Arc::clone(&dropped)),
    );
    let serving = serve(service, reader, out_writer);
    let flag = std::sync::Arc::clone(&dropped);
    let peer = async move {
        let mut input = framed(Framing::NewlineDelimited, &request(1, 1));
        let cancel = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 1, "reason": "the gate gave up"}
        });
        input.extend(framed(
            Framing::NewlineDelimited,
            &serde_json::to_vec(&cancel).unwrap(),
        ));
        writer.write_all(&input).await.unwrap();
        // Bounded: at most 5 s for the drop, with the input still open.
        let mut dropped_in_time = false;
        for _ in 0..500 {
            if flag.load(std::sync::atomic::Ordering::SeqCst) {
                dropped_in_time = true;
                break;
            }
            async_io::Timer::after(Duration::from_millis(10)).await;
        }
        writer.close().await.unwrap();
        dropped_in_time
    };
    let collect = async move {
        let mut out_reader = out_reader;
        let mut output = Vec::new();
        out_reader.read_to_end(&mut output).await.unwrap();
        output
    };
    let ((outcome, dropped_in_time), output) =
        futures_lite::future::zip(futures_lite::future::zip(serving, peer), collect).await;
    outcome.unwrap();
    assert!(
        dropped_in_time,
        "the cancelled call's future was not dropped while the input was open"
    );
    assert_eq!(answers(&output), vec![], "a cancelled call gets no answer");
}

#[test]
fn cancelled_call_dropped() {
    on_both_runtimes(a_cancelled_call_is_dropped);
}
