//! The tokio stdio server on an in-memory duplex pipe: both framings,
//! pipelined queries answered concurrently, end of input flushes every
//! answer in flight, a fatal framing error still answers what is in flight.

use std::time::Duration;

use crate::common::{TestHandler, call, content_length, dg_result, frames, ndjson};
use evidence_wire::server::ServerConfig;
use evidence_wire_tokio::{ServeError, Service, serve};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `input` then closes it; returns what the server wrote and how
/// `serve` ended.
async fn exchange(input: Vec<u8>) -> (Vec<u8>, Result<(), ServeError>) {
    exchange_with(input, false).await
}

/// As [`exchange`]; with `read_after_write` the client writes all its input
/// before it reads a single answer byte.
async fn exchange_with(
    input: Vec<u8>,
    read_after_write: bool,
) -> (Vec<u8>, Result<(), ServeError>) {
    let (client, server_side) = tokio::io::duplex(1024);
    let (server_read, server_write) = tokio::io::split(server_side);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let serving = tokio::spawn(serve(
        Service::new(ServerConfig::default(), TestHandler),
        server_read,
        server_write,
    ));
    let writer = tokio::spawn(async move {
        client_write.write_all(&input).await.expect("write");
        client_write.shutdown().await.expect("close input");
        client_write
    });
    let writer = if read_after_write {
        let written = tokio::time::timeout(Duration::from_secs(10), writer)
            .await
            .expect("the server keeps reading while its answers wait")
            .expect("writer");
        tokio::spawn(async move { written })
    } else {
        writer
    };
    let mut output = Vec::new();
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        client_read.read_to_end(&mut output),
    );
    read.await
        .expect("server closed its output in time")
        .expect("read");
    let _keep_open = writer.await.expect("writer");
    let outcome = tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .expect("serve returned")
        .expect("serve task");
    (output, outcome)
}

fn ids(answers: &[Value]) -> Vec<i64> {
    answers
        .iter()
        .filter_map(|answer| answer["id"].as_i64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_pipelined_queries_answer_concurrently() {
    let mut input = Vec::new();
    input.extend(content_length(&call(1, "slow", json!({"ms": 600}))));
    input.extend(content_length(&call(2, "slow", json!({"ms": 300}))));
    input.extend(content_length(&call(3, "echo", json!({"n": 3}))));
    let (output, outcome) = exchange(input).await;
    outcome.expect("clean end");
    assert!(output.starts_with(b"Content-Length: "), "framing mirrored");
    let answers = frames(&output);
    // Answered as they finish, not in request order: they ran concurrently.
    assert_eq!(ids(&answers), vec![3, 2, 1]);
    assert_eq!(
        dg_result(&answers[0])["value"]["value"]["params"],
        json!({"n": 3})
    );
    assert_eq!(dg_result(&answers[2])["value"]["value"]["slept_ms"], 600);
}

#[tokio::test]
async fn newline_delimited_mcp_session() {
    let mut input = Vec::new();
    input.extend(ndjson(&json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    })));
    input.extend(ndjson(
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ));
    input.extend(ndjson(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ));
    input.extend(ndjson(&call(2, "echo", json!("x"))));
    let (output, outcome) = exchange(input).await;
    outcome.expect("clean end");
    assert!(output.starts_with(b"{"), "newline-delimited output");
    let lines: Vec<Value> = output
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).expect("one JSON message per line"))
        .collect();
    assert_eq!(ids(&lines), vec![0, 1, 2]);
    assert_eq!(lines[0]["result"]["protocolVersion"], "2025-06-18");
    assert!(lines[1]["result"]["tools"][0]["inputSchema"].is_object());
    assert_eq!(lines[2]["result"]["content"][0]["type"], "text");
    assert_eq!(
        lines[2]["result"]["structuredContent"]["value"]["value"]["params"],
        "x"
    );
}

#[tokio::test]
async fn end_of_input_flushes_answers_in_flight() {
    // The input ends right after a slow query: serve must wait for it.
    let input = content_length(&call(7, "slow", json!({"ms": 300})));
    let started = std::time::Instant::now();
    let (output, outcome) = exchange(input).await;
    outcome.expect("clean end");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let answers = frames(&output);
    assert_eq!(ids(&answers), vec![7]);
    assert_eq!(dg_result(&answers[0])["value"]["value"]["slept_ms"], 300);
}

#[tokio::test]
async fn a_panicking_handler_is_answered_as_internal_error() {
    let mut input = content_length(&call(1, "panic", Value::Null));
    input.extend(content_length(&call(2, "echo", json!(2))));
    let (output, outcome) = exchange(input).await;
    outcome.expect("clean end");
    let answers = frames(&output);
    let mut by_id: Vec<(i64, &Value)> = answers
        .iter()
        .map(|answer| (answer["id"].as_i64().expect("id"), answer))
        .collect();
    by_id.sort_by_key(|(id, _)| *id);
    assert_eq!(by_id.len(), 2, "both queries answered exactly once");
    assert_eq!(dg_result(by_id[0].1)["error"]["code"], "internal_error");
    assert_eq!(dg_result(by_id[1].1)["value"]["value"]["params"], 2);
}

#[tokio::test]
async fn malformed_frames_are_answered_and_the_stream_goes_on() {
    let mut input = b"Content-Length: 5\r\n\r\nnope!".to_vec();
    input.extend(content_length(&call(4, "echo", json!(4))));
    let (output, outcome) = exchange(input).await;
    outcome.expect("clean end");
    let answers = frames(&output);
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0]["error"]["code"], -32700);
    assert_eq!(answers[0]["id"], Value::Null);
    assert_eq!(answers[1]["id"], 4);
}

#[tokio::test]
async fn fatal_framing_error_still_answers_what_is_in_flight() {
    let mut input = content_length(&call(1, "slow", json!({"ms": 200})));
    input.extend(b"Content-Length: 999999999999999999999999999\r\n\r\n");
    input.extend(content_length(&call(2, "echo", json!(2))));
    let (output, outcome) = exchange(input).await;
    assert!(
        matches!(outcome, Err(ServeError::Fatal(_))),
        "a broken stream is reported: {outcome:?}"
    );
    let answers = frames(&output);
    assert_eq!(
        ids(&answers),
        vec![1],
        "the query in flight is answered; nothing after the break is read"
    );
}

#[tokio::test]
async fn a_slow_reader_does_not_block_reading() {
    // Many answers, and the client reads only after writing everything:
    // the server must keep reading while its output backs up.
    let mut input = Vec::new();
    for id in 1..=200 {
        input.extend(content_length(&call(id, "echo", json!("x".repeat(200)))));
    }
    let (output, outcome) = exchange_with(input, true).await;
    outcome.expect("clean end");
    let answers = frames(&output);
    let mut seen = ids(&answers);
    seen.sort_unstable();
    assert_eq!(seen, (1..=200).collect::<Vec<_>>());
}

/// Blocking work that ignores its cancellation (as a check that never
/// looks would): counts how many calls started.
struct Stubborn(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl evidence_wire_tokio::Handler for Stubborn {
    fn evidence_query(
        &self,
        _query: evidence_wire::evidence::EvidenceQuery,
        _context: evidence_wire::evidence::EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> evidence_wire_tokio::Answer<evidence_wire::evidence::EvidenceResult> {
        let started = std::sync::Arc::clone(&self.0);
        evidence_wire_tokio::Answer::blocking(move || {
            started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(400));
            crate::common::json_result(&json!("done"))
        })
    }
}

/// Issue 38 item 2 on tokio: cancelling calls frees the core's slots, but
/// blocking work that ignores its cancellation keeps its slot until it
/// ends, so the calls taken in meanwhile wait for one, and those cancelled
/// while they wait never start. With 2 slots: calls 1 and 2 run, are
/// cancelled, 3 and 4 wait and are cancelled, 5 runs once a slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_blocking_calls_waiting_for_a_slot_never_start() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let started = Arc::new(AtomicUsize::new(0));
    let mut config = ServerConfig::default();
    config.max_in_flight = 2;
    let (client, server_side) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_side);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let serving = tokio::spawn(serve(
        Service::new(config, Stubborn(Arc::clone(&started))),
        server_read,
        server_write,
    ));
    let cancel = |id: i64| {
        crate::common::ndjson(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}),
        )
    };
    let block = |id: i64| ndjson(&call(id, "block", json!({})));
    let mut send = async |bytes: Vec<u8>| client_write.write_all(&bytes).await.expect("write");
    send([block(1), block(2)].concat()).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    send([cancel(1), cancel(2), block(3), block(4)].concat()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    send([cancel(3), cancel(4), block(5)].concat()).await;
    client_write.shutdown().await.expect("close input");
    let mut output = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        client_read.read_to_end(&mut output),
    )
    .await
    .expect("answered in time")
    .expect("read");
    serving.await.expect("join").expect("served");
    let answers = frames(&output);
    let ids: Vec<i64> = answers
        .iter()
        .filter_map(|answer| answer["id"].as_i64())
        .collect();
    assert_eq!(
        ids,
        [5],
        "only the call not cancelled is answered: {answers:?}"
    );
    assert_eq!(
        started.load(Ordering::SeqCst),
        3,
        "calls 3 and 4 were cancelled while they waited for a slot: they must not start"
    );
}
