//! W3C trace context over HTTP, end to end: a request's `traceparent`
//! (and `tracestate`) header reaches the check (`CheckContext::trace`)
//! and the call's `evidence_wire::call` span (`trace_id`, `parent_id`); a
//! `_meta.traceparent` in the message wins over the header; an invalid
//! header is ignored; refusals are `evidence_wire::refusal` events; and
//! `HttpProvider::query_traced` sends the context as a header and in
//! `_meta`, while `query` sends neither.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::common::{Running, context, dg_result, query};
use evidence_wire_provider::TraceContext;
use evidence_wire_tokio::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(10);
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

/// What a span or an event of an `evidence_wire` target said.
#[derive(Clone, Debug, Default)]
struct Record {
    name: String,
    target: String,
    fields: BTreeMap<String, String>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// A global subscriber (a scoped one would not see the spans the
/// server's tasks open) that keeps the spans and events of the
/// `evidence_wire` targets; tests tell theirs apart by a field.
#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<Record>>>,
    events: Arc<Mutex<Vec<Record>>>,
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target().starts_with("evidence_wire")
    }

    fn new_span(&self, attributes: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut record = Record {
            name: attributes.metadata().name().to_owned(),
            target: attributes.metadata().target().to_owned(),
            ..Record::default()
        };
        attributes.record(&mut Fields(&mut record.fields));
        let mut spans = self.spans.lock().unwrap();
        spans.push(record);
        tracing::span::Id::from_u64(spans.len() as u64)
    }

    fn record(&self, id: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut spans = self.spans.lock().unwrap();
        let index = usize::try_from(id.into_u64() - 1).unwrap();
        values.record(&mut Fields(&mut spans[index].fields));
    }

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut record = Record {
            target: event.metadata().target().to_owned(),
            ..Record::default()
        };
        event.record(&mut Fields(&mut record.fields));
        self.events.lock().unwrap().push(record);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        tracing::subscriber::set_global_default(capture.clone()).expect("the only one");
        capture
    })
}

/// The call spans whose `check_id` is `check` (each test asks its own).
fn call_spans(check: &str) -> Vec<Record> {
    let spans = capture().spans.lock().unwrap();
    spans
        .iter()
        .filter(|span| span.name == "evidence_wire::call")
        .filter(|span| span.fields.get("check_id").map(String::as_str) == Some(check))
        .cloned()
        .collect()
}

/// A provider whose checks (one per test, so their spans are told apart)
/// answer what trace context and `_meta` they saw.
fn traced_provider() -> Provider {
    let mut provider = Provider::new("test", "Reports the trace context it sees.");
    for id in ["header", "invalid", "meta_wins", "client", "refused"] {
        provider = provider.check(
            Check::new(
                id,
                "The trace context and _meta the check saw.",
                |_: NoParams, context: &CheckContext| {
                    Ok(json!({
                        "traceparent": context.trace().map(TraceContext::traceparent),
                        "tracestate": context.trace().and_then(TraceContext::tracestate),
                        "meta": context.meta(),
                    }))
                },
            )
            .inline(),
        );
    }
    provider
}

/// The `tools/call` of `check`, with `meta` as its `_meta` when given.
fn traced_call(check: &str, meta: Option<Value>) -> Value {
    let mut call = json!({
        "jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "evidence_query",
            "arguments": {"query": query(check, Value::Null), "context": context()}}
    });
    if let Some(meta) = meta {
        call["params"]["_meta"] = meta;
    }
    call
}

/// POSTs `body` to `/rpc` with `headers`; the status and the body.
async fn post(address: SocketAddr, headers: &[(&str, &str)], body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let mut request = format!(
        "POST /rpc HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut reply = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut reply))
        .await
        .expect("in time")
        .expect("read");
    let reply = String::from_utf8(reply).expect("utf-8");
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_traceparent_header_reaches_the_check_and_the_span() {
    capture();
    let server = Running::start(traced_provider(), HttpServerConfig::default()).await;
    let (status, answer) = post(
        server.address,
        &[
            ("traceparent", PARENT),
            ("tracestate", "rojo=00f067aa0ba902b7"),
        ],
        &traced_call("header", None),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let seen = &dg_result(&answer)["value"]["value"];
    assert_eq!(seen["traceparent"], PARENT, "{answer}");
    assert_eq!(seen["tracestate"], "rojo=00f067aa0ba902b7", "{answer}");
    let spans = call_spans("header");
    assert_eq!(spans.len(), 1, "{spans:?}");
    let span = &spans[0].fields;
    assert_eq!(span["trace_id"], TRACE_ID, "{span:?}");
    assert_eq!(span["parent_id"], "00f067aa0ba902b7", "{span:?}");
    assert_eq!(span["transport"], "http", "{span:?}");
    assert_eq!(span["id"], "41", "the JSON-RPC id: {span:?}");
    assert_eq!(span["outcome"], "ok", "{span:?}");
    assert!(span.contains_key("duration_ms"), "{span:?}");
    server.stop().await.expect("stopped");
}

#[tokio::test]
async fn an_invalid_traceparent_header_is_ignored() {
    capture();
    let server = Running::start(traced_provider(), HttpServerConfig::default()).await;
    // Uppercase hex is not a traceparent.
    let invalid = PARENT.to_ascii_uppercase();
    let (status, answer) = post(
        server.address,
        &[("traceparent", invalid.as_str()), ("tracestate", "a=b")],
        &traced_call("invalid", None),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let seen = &dg_result(&answer)["value"]["value"];
    assert_eq!(seen["traceparent"], Value::Null, "{answer}");
    assert_eq!(seen["tracestate"], Value::Null, "{answer}");
    let spans = call_spans("invalid");
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert!(!spans[0].fields.contains_key("trace_id"), "{spans:?}");
    assert_eq!(spans[0].fields["outcome"], "ok", "{spans:?}");
    server.stop().await.expect("stopped");
}

#[tokio::test]
async fn the_messages_own_meta_wins_over_the_header() {
    capture();
    let server = Running::start(traced_provider(), HttpServerConfig::default()).await;
    let (status, answer) = post(
        server.address,
        &[("traceparent", PARENT)],
        &traced_call("meta_wins", Some(json!({"traceparent": OTHER}))),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let seen = &dg_result(&answer)["value"]["value"];
    assert_eq!(seen["traceparent"], OTHER, "{answer}");
    assert_eq!(seen["meta"], json!({"traceparent": OTHER}), "{answer}");
    let spans = call_spans("meta_wins");
    assert_eq!(
        spans[0].fields["trace_id"], "0af7651916cd43dd8448eb211c80319c",
        "{spans:?}"
    );
    // An invalid `_meta.traceparent` is ignored: the header's applies.
    let (_, answer) = post(
        server.address,
        &[("traceparent", PARENT)],
        &traced_call("meta_wins", Some(json!({"traceparent": "00-nope"}))),
    )
    .await;
    assert_eq!(
        dg_result(&answer)["value"]["value"]["traceparent"],
        PARENT,
        "{answer}"
    );
    server.stop().await.expect("stopped");
}

#[tokio::test]
async fn refusals_are_events_carrying_the_trace_id() {
    capture();
    let server = Running::start(traced_provider(), HttpServerConfig::default()).await;
    // Params the check does not take: refused by the contract.
    let mut call = traced_call("refused", Some(json!({"traceparent": PARENT})));
    call["params"]["arguments"]["query"]["params"] = json!({"unexpected": 1});
    call["id"] = json!("refused-1");
    let (status, answer) = post(server.address, &[], &call).await;
    assert_eq!(status, 200, "{answer}");
    let events = capture().events.lock().unwrap().clone();
    let refusal = events
        .iter()
        .find(|event| {
            event.target == "evidence_wire::refusal"
                && event.fields.get("id").map(String::as_str) == Some("\"refused-1\"")
        })
        .unwrap_or_else(|| panic!("a refusal event: {events:?}"));
    assert_eq!(refusal.fields["transport"], "http", "{refusal:?}");
    assert_eq!(refusal.fields["trace_id"], TRACE_ID, "{refusal:?}");
    assert_eq!(refusal.fields["method"], "tools/call", "{refusal:?}");
    assert!(
        refusal.fields["detail"].contains("capabilities contract"),
        "{refusal:?}"
    );
    // Refused at admission (no bearer token where one is required).
    let guarded = Running::start(
        traced_provider(),
        HttpServerConfig::default().with_bearer_token("secret"),
    )
    .await;
    let (status, _) = post(guarded.address, &[], &traced_call("refused", None)).await;
    assert_eq!(status, 401);
    let events = capture().events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|event| event.target == "evidence_wire::refusal"
                && event.fields.get("status").map(String::as_str) == Some("401")),
        "{events:?}"
    );
    guarded.stop().await.expect("stopped");
    server.stop().await.expect("stopped");
}

/// A raw HTTP server answering each request with `response`; every
/// request (head and body, read to its Content-Length) is kept.
async fn recording(response: &'static [u8]) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let address = listener.local_addr().expect("address");
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&requests);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut bytes = Vec::new();
                let mut buffer = [0u8; 4096];
                loop {
                    if let Some(end) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
                        let length = head
                            .lines()
                            .find_map(|line| line.strip_prefix("content-length:"))
                            .and_then(|value| value.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if bytes.len() >= end + 4 + length {
                            break;
                        }
                    }
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(count) => bytes.extend_from_slice(&buffer[..count]),
                    }
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&bytes).into_owned());
                let _ = stream.write_all(response).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (address, requests)
}

/// A verified answer to the client's first request (id 1).
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 112\r\nConnection: close\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"json\",\"json\":{\"value\":{\"kind\":\"json\",\"value\":\"hello\"}}}]}}";

#[tokio::test]
async fn http_provider_sends_the_trace_context_only_when_given_one() {
    let (address, requests) = recording(ANSWER).await;
    let provider = HttpProvider::new(
        HttpProviderConfig::new(format!("http://{address}/rpc")).with_insecure_http(true),
    )
    .expect("provider");
    let trace = TraceContext::parse(PARENT, Some("rojo=1")).expect("valid");
    let ask = |trace: Option<TraceContext>| {
        let provider = provider.clone();
        async move {
            tokio::time::timeout(
                LIMIT,
                provider.query_traced(&query("echo", Value::Null), &context(), trace.as_ref()),
            )
            .await
            .expect("in time")
            .expect("verified")
        }
    };
    ask(Some(trace)).await;
    ask(None).await;
    tokio::time::timeout(
        LIMIT,
        provider.query(&query("echo", Value::Null), &context()),
    )
    .await
    .expect("in time")
    .expect("verified");
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "{requests:?}");
    let split = |request: &str| {
        let (head, body) = request.split_once("\r\n\r\n").expect("a head");
        (head.to_ascii_lowercase(), body.to_owned())
    };
    let (head, body) = split(&requests[0]);
    assert!(head.contains(&format!("traceparent: {PARENT}")), "{head}");
    assert!(head.contains("tracestate: rojo=1"), "{head}");
    let body: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        body["params"]["_meta"],
        json!({"traceparent": PARENT, "tracestate": "rojo=1"}),
        "{body}"
    );
    // Without a context: neither, and the very bytes `query` sends.
    let (head, untraced) = split(&requests[1]);
    assert!(
        !head.contains("traceparent") && !head.contains("tracestate"),
        "{head}"
    );
    assert!(!untraced.contains("_meta"), "{untraced}");
    assert_eq!(untraced, split(&requests[2]).1);
}
