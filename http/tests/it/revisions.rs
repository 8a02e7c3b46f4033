//! The same over Streamable HTTP: which `MCP-Protocol-Version` values
//! are accepted, the stateless revision's header checks and statuses.
use std::sync::Arc;

use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
use evidence_wire::server::{ServerConfig, ServerEvent};
use evidence_wire_http::{
    Admission, Exchange, HeaderField, HttpPolicy, HttpReply, RequestHead, admit,
};
use serde_json::{Value, json};

const CONTEXT: &str = r#"{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000}}"#;

/// The `_meta` a stateless client puts on every request.
fn modern_meta(revision: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": revision,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    })
}

fn evidence_call(id: i64, arguments: Value, meta: Option<Value>) -> Value {
    let mut params = json!({"name": "evidence_query", "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

fn good_arguments() -> Value {
    json!({"query": {"provider_id": "p", "check_id": "c"}, "context": serde_json::from_str::<Value>(CONTEXT).unwrap()})
}

/// POSTs `body` to `/mcp` with `headers` (name, value) and answers
/// evidence queries with `"hello"`.
fn post(headers: &[(&str, &str)], body: &Value) -> HttpReply {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map_or(HeaderField::Absent, |(_, value)| {
                HeaderField::One(value.as_bytes())
            })
    };
    let head = RequestHead {
        method: "POST",
        path: "/mcp",
        protocol_version: header("mcp-protocol-version"),
        mcp_method: header("mcp-method"),
        mcp_name: header("mcp-name"),
        ..RequestHead::default()
    };
    let plan = match admit(&HttpPolicy::default(), &head) {
        Admission::Reply(reply) => return reply,
        Admission::Call(plan) => plan,
        other => panic!("a POST to /mcp is a call: {other:?}"),
    };
    let body = serde_json::to_vec(body).unwrap();
    let mut exchange = Exchange::start(&Arc::new(ServerConfig::default()), plan, &body);
    while let Some(event) = exchange.poll_event() {
        if let ServerEvent::EvidenceQuery { ticket, .. } = event {
            let value = EvidenceValue::json(&"hello").unwrap();
            exchange
                .server_mut()
                .respond(ticket, EvidenceResult::with_value(value))
                .unwrap();
        }
    }
    exchange.into_reply()
}

fn json(reply: &HttpReply) -> Value {
    serde_json::from_slice(&reply.body).unwrap()
}

fn stateless_call() -> Value {
    evidence_call(1, good_arguments(), Some(modern_meta("2026-07-28")))
}

#[test]
fn every_revision_is_an_accepted_header() {
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    for revision in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let reply = post(&[("MCP-Protocol-Version", revision)], &list);
        assert_eq!(reply.status, 200, "{revision}");
        let has_output = json(&reply)["result"]["tools"][0]
            .get("outputSchema")
            .is_some();
        assert_eq!(has_output, revision >= "2025-06-18", "{revision}");
    }
    let reply = post(&[("MCP-Protocol-Version", "1999-01-01")], &list);
    assert_eq!(reply.status, 400);
    let body = json(&reply);
    assert_eq!(body["error"]["code"], -32022);
    assert_eq!(body["error"]["data"]["requested"], "1999-01-01");
    assert_eq!(body["error"]["data"]["supported"][0], "2026-07-28");
}

#[test]
fn a_stateless_request_needs_headers_that_agree_with_its_body() {
    let good = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "evidence_query"),
    ];
    let reply = post(&good, &stateless_call());
    assert_eq!(reply.status, 200);
    let result = &json(&reply)["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["structuredContent"]["value"]["value"], "hello");
    for bad in [
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
            ("Mcp-Name", "evidence_query"),
        ][..],
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
        ][..],
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "evidence_query")][..],
    ] {
        let reply = post(bad, &stateless_call());
        assert_eq!(reply.status, 400, "{bad:?}");
        assert_eq!(json(&reply)["error"]["code"], -32020, "{bad:?}");
    }
}

#[test]
fn stateless_errors_carry_their_status_and_handshake_errors_200() {
    let unknown = json!({"jsonrpc": "2.0", "id": 1, "method": "nope/nothing", "params": {"_meta": modern_meta("2026-07-28")}});
    let reply = post(
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "nope/nothing"),
        ],
        &unknown,
    );
    assert_eq!(reply.status, 404);
    let unsupported = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta("2030-01-01")}});
    let reply = post(
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
        ],
        &unsupported,
    );
    assert_eq!(reply.status, 400);
    assert_eq!(json(&reply)["error"]["code"], -32022);
    let legacy = json!({"jsonrpc": "2.0", "id": 1, "method": "nope/nothing"});
    let reply = post(&[("MCP-Protocol-Version", "2025-11-25")], &legacy);
    assert_eq!(
        reply.status, 200,
        "handshake clients read errors only on 200"
    );
    assert_eq!(json(&reply)["error"]["code"], -32601);
}
