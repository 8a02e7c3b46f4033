//! The client's raw entry points (issue 26): what a conformance checker
//! needs beyond verified queries. `request` and `query_raw` answers come
//! back unverified as `ClientEvent::Reply`, exactly once, with the same id
//! matching, deadlines and dropped-answer rules as queries; `verify_answer`
//! is the verdict a query's answer gets; `send_raw` writes bytes verbatim
//! and in order; `expect_reply` matches the answer to a request written
//! that way; `detected_framing` tells the provider's framing.

use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId, Skipped};
use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::Framing;
use serde_json::{Value, json};

/// Decision Gate's first message, byte for byte (reference/wire-facts.md §2).
const DECISION_GATE_FIRST_MESSAGE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"stub","check_id":"probe","params":{"mode":"plain"}},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000},"correlation_id":null}}}}"#;

fn decision_gate_context() -> EvidenceContext {
    let mut context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    context.run_id = "run-1".to_owned();
    context.scenario_id = "s".to_owned();
    context.stage_id = "st".to_owned();
    context.trigger_id = "t".to_owned();
    context
}

fn probe() -> EvidenceQuery {
    EvidenceQuery::new("stub", "probe").with_params(json!({"mode": "plain"}))
}

fn framed(body: &str) -> Vec<u8> {
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fn events(client: &mut Client) -> Vec<ClientEvent> {
    std::iter::from_fn(|| client.poll_event()).collect()
}

fn reply(
    events: &[ClientEvent],
    id: RequestId,
) -> Option<&Result<Box<serde_json::value::RawValue>, QueryError>> {
    events.iter().find_map(|event| match event {
        ClientEvent::Reply {
            id: answered,
            outcome,
        } if *answered == id => Some(outcome),
        _ => None,
    })
}

/// A tools/call result carrying `result` as a json item.
fn tool_result(id: i64, result: &EvidenceResult) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "json", "json": result}]}})
        .to_string()
}

#[test]
fn query_raw_writes_decision_gates_first_message_byte_for_byte() {
    let mut client = Client::new(ClientConfig::default());
    let id = client.query_raw(&probe(), &decision_gate_context(), 0);
    assert_eq!(id.get(), 1);
    let sent = client.poll_transmit().expect("the request");
    assert_eq!(sent, framed(DECISION_GATE_FIRST_MESSAGE));
    // `query` writes the same bytes.
    let mut client = Client::new(ClientConfig::default());
    client.query(&probe(), &decision_gate_context(), 0);
    assert_eq!(
        client.poll_transmit().expect("the request"),
        framed(DECISION_GATE_FIRST_MESSAGE)
    );
}

#[test]
fn a_raw_answer_is_reported_as_written_and_verify_answer_gives_the_querys_verdict() {
    let mut client = Client::new(ClientConfig::default());
    let id = client.query_raw(&probe(), &decision_gate_context(), 0);
    let _ = client.poll_transmit();
    // A wrong hash: a query would be refused; the raw reply is not judged.
    let mut result = EvidenceResult::with_value(EvidenceValue::json(&"hello").expect("json"));
    result.evidence_hash = Some(
        EvidenceValue::json(&"other")
            .expect("json")
            .digest(evidence_wire::canonical::Profile::DecisionGate)
            .expect("digest"),
    );
    let answer = tool_result(id.get(), &result);
    client.handle_input(&framed(&answer));
    let got = events(&mut client);
    let raw = reply(&got, id)
        .expect("a reply")
        .as_ref()
        .expect("a result");
    let written: Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(
        serde_json::from_str::<Value>(raw.get()).expect("json"),
        written["result"]
    );
    assert!(matches!(
        client.verify_answer(raw),
        Err(QueryError::Verification(_))
    ));
    assert_eq!(got.len(), 1, "exactly one event: {got:?}");
    assert_eq!(client.detected_framing(), Some(Framing::ContentLength));
}

#[test]
fn request_sends_any_method_and_its_error_is_a_provider_error() {
    let mut client = Client::new(ClientConfig::default());
    let list = client.request("tools/list", None, 0);
    let read = client.request(
        "resources/read",
        Some(&json!({"uri": "decision-gate://contract"})),
        0,
    );
    let first = client.poll_transmit().expect("tools/list");
    assert_eq!(
        first,
        framed(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/list"}}"#,
            list.get()
        ))
    );
    let second = client.poll_transmit().expect("resources/read");
    assert!(
        String::from_utf8_lossy(&second).contains(r#""params":{"uri":"decision-gate://contract"}"#)
    );
    client.handle_input(&framed(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32601,"message":"method not found"}}}}"#,
        read.get()
    )));
    client.handle_input(&framed(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"tools":[]}}}}"#,
        list.get()
    )));
    let got = events(&mut client);
    assert!(matches!(
        reply(&got, read),
        Some(Err(QueryError::Provider { code: -32601, .. }))
    ));
    assert_eq!(
        reply(&got, list)
            .and_then(|r| r.as_ref().ok())
            .map(|raw| raw.get().to_owned()),
        Some(r#"{"tools":[]}"#.to_owned())
    );
}

#[test]
fn raw_requests_time_out_and_fail_with_the_connection_as_replies() {
    let mut config = ClientConfig::default();
    config.request_timeout_ms = 100;
    let mut client = Client::new(config);
    let early = client.request("tools/list", None, 0);
    let late = client.query_raw(&probe(), &decision_gate_context(), 50);
    let query = client.query(&probe(), &decision_gate_context(), 50);
    client.handle_timeout(100);
    let got = events(&mut client);
    assert!(matches!(
        reply(&got, early),
        Some(Err(QueryError::Timeout(100)))
    ));
    assert!(reply(&got, late).is_none());
    client.handle_end_of_input();
    let got = events(&mut client);
    assert!(matches!(
        reply(&got, late),
        Some(Err(QueryError::ConnectionLost(_)))
    ));
    // A verified query still gets an Answer, never a Reply.
    assert!(got.iter().any(|event| matches!(event, ClientEvent::Answer { id, outcome: Err(QueryError::ConnectionLost(_)) } if *id == query)));
    assert!(reply(&got, query).is_none());
}

#[test]
fn send_raw_writes_bytes_verbatim_in_order_and_expect_reply_matches_their_answer() {
    let mut client = Client::new(ClientConfig::default());
    let before = client.request("tools/list", None, 0);
    let broken = client.expect_reply(0);
    let garbage = b"garbage line: this is not a frame\r\n";
    client.send_raw(garbage);
    let oversized = format!(
        r#"{{"jsonrpc":"2.0","id":{},"method":"tools/list"}}"#,
        broken.get()
    );
    client.send_raw(&framed(&oversized));
    let after = client.request("tools/list", None, 0);
    let sent: Vec<Vec<u8>> = std::iter::from_fn(|| client.poll_transmit()).collect();
    assert_eq!(sent.len(), 4);
    assert!(String::from_utf8_lossy(&sent[0]).contains(&format!(r#""id":{}"#, before.get())));
    assert_eq!(sent[1], garbage);
    assert_eq!(sent[2], framed(&oversized));
    assert!(String::from_utf8_lossy(&sent[3]).contains(&format!(r#""id":{}"#, after.get())));
    assert!(after.get() > broken.get() && broken.get() > before.get());
    // The provider answers the raw request by its id: matched, once.
    let answer = format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32600,"message":"too large"}}}}"#,
        broken.get()
    );
    client.handle_input(&framed(&answer));
    client.handle_input(&framed(&answer));
    let got = events(&mut client);
    assert!(matches!(
        reply(&got, broken),
        Some(Err(QueryError::Provider { code: -32600, .. }))
    ));
    assert!(got.iter().any(|event| matches!(
        event,
        ClientEvent::Skipped(Skipped::UnknownId(id)) if *id == json!(broken.get())
    )));
}

#[test]
fn a_raw_request_waits_for_the_handshake_like_a_query() {
    let mut config = ClientConfig::default();
    config.handshake = true;
    let mut client = Client::new(config);
    let list = client.request("tools/list", None, 0);
    let initialize = client.poll_transmit().expect("initialize");
    assert!(String::from_utf8_lossy(&initialize).contains("initialize"));
    assert!(
        client.poll_transmit().is_none(),
        "tools/list waits for the handshake"
    );
    client.handle_input(&framed(
        r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18"}}"#,
    ));
    let sent: Vec<String> = std::iter::from_fn(|| client.poll_transmit())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .collect();
    assert!(sent[0].contains("notifications/initialized"));
    assert!(sent[1].contains(&format!(r#""id":{},"method":"tools/list""#, list.get())));
    // poll_message gives the same, unframed.
    let mut client = Client::new(ClientConfig::default());
    client.send_raw(b"not json");
    client.request("ping", None, 0);
    assert_eq!(client.poll_message().as_deref(), Some(&b"not json"[..]));
    assert!(
        client
            .poll_message()
            .is_some_and(|body| body.starts_with(b"{\"jsonrpc\""))
    );
}
