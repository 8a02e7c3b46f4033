//! The MCP handshake refused with a JSON-RPC error (issue 21 item 6):
//! the failure names the error the provider sent, not a missing
//! `protocolVersion`; a result without one is still reported as such.

use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
use evidence_wire::frame::{Decoder, Framing, Limits};
use serde_json::{Value, json};

fn handshaking_client() -> (Client, Value) {
    let mut config = ClientConfig::default();
    config.handshake = true;
    config.framing = Framing::NewlineDelimited;
    let mut client = Client::new(config);
    let bytes = client.poll_transmit().expect("initialize is queued");
    let mut decoder = Decoder::with_framing(Framing::NewlineDelimited, Limits::default());
    decoder.push(&bytes);
    let frame = decoder.poll_frame().expect("a frame").expect("well framed");
    let initialize: Value = serde_json::from_slice(&frame.body).expect("JSON");
    assert_eq!(initialize["method"], "initialize");
    (client, initialize["id"].clone())
}

/// The reasons the query failed with and the fatal event carried.
fn answer_initialize(answer: &Value) -> (String, String) {
    let (mut client, id) = handshaking_client();
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    let _ = client.query(&EvidenceQuery::new("p", "probe"), &context, 0);
    let mut message = answer.clone();
    message["id"] = id;
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    client.handle_input(&line);
    let mut failed = None;
    let mut fatal = None;
    while let Some(event) = client.poll_event() {
        match event {
            ClientEvent::Answer {
                outcome: Err(QueryError::ConnectionLost(reason)),
                ..
            } => failed = Some(reason),
            ClientEvent::Fatal(reason) => fatal = Some(reason),
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert!(client.needs_restart());
    (
        failed.expect("the held query failed"),
        fatal.expect("a fatal event"),
    )
}

#[test]
fn a_json_rpc_error_to_initialize_is_reported_as_such() {
    let (failed, fatal) = answer_initialize(&json!({
        "jsonrpc": "2.0",
        "error": {"code": -32601, "message": "Method not found: initialize"}
    }));
    for reason in [&failed, &fatal] {
        assert_eq!(
            reason,
            "the provider refused initialize with JSON-RPC error -32601: Method not found: initialize"
        );
    }
    // The query error a person reads names it too.
    assert!(
        QueryError::ConnectionLost(failed)
            .to_string()
            .contains("JSON-RPC error -32601")
    );
}

#[test]
fn a_huge_error_message_is_excerpted() {
    let (failed, _) = answer_initialize(&json!({
        "jsonrpc": "2.0",
        "error": {"code": -32000, "message": "x".repeat(100_000)}
    }));
    assert!(failed.len() < 400, "{} bytes", failed.len());
    assert!(failed.ends_with("… (100000 bytes)"), "{failed}");
}

#[test]
fn a_result_without_a_protocol_version_is_still_named() {
    let (failed, fatal) = answer_initialize(&json!({"jsonrpc": "2.0", "result": {}}));
    assert_eq!(
        failed,
        "the provider answered initialize without a protocolVersion"
    );
    assert_eq!(fatal, failed);
}
