//! Scripted transcripts of the provider-side state machine: bytes in,
//! events and bytes out, in both dialects and both framings.
//!
//! The byte-exact goldens live in `tests/data/transcripts/server_*.json`
//! (format in that folder's README); the cases below script the rest:
//! version negotiation, protocol chores, malformed input, cancellation and
//! ticket misuse, batches, fatal framing errors.

use evidence_wire::dialect::from_tool_result;
use evidence_wire::evidence::{EvidenceResult, EvidenceValue, verify};
use evidence_wire::frame::{Decoder, Framing, Limits};
use evidence_wire::server::{
    Dialect, DialectChoice, Overload, RespondError, Server, ServerConfig, ServerEvent, Ticket,
    ToolDefinition, ToolFailure,
};
use evidence_wire::{canonical::Profile, envelope::Policy, evidence::TrustPolicy};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------- helpers

fn cl(body: &str) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

fn nl(body: &str) -> Vec<u8> {
    let mut out = body.as_bytes().to_vec();
    out.push(b'\n');
    out
}

fn frame(framing: Framing, body: &str) -> Vec<u8> {
    match framing {
        Framing::ContentLength => cl(body),
        Framing::NewlineDelimited => nl(body),
    }
}

fn context() -> Value {
    json!({"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st",
           "trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000_i64},
           "correlation_id":null})
}

fn call(id: Value, check: &str) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"evidence_query",
        "arguments":{"query":{"provider_id":"p","check_id":check},"context":context()}}})
    .to_string()
}

fn initialize(id: Value, version: &str) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{"protocolVersion":version,
        "capabilities":{},"clientInfo":{"name":"test","version":"1"}}})
    .to_string()
}

fn new_server() -> Server {
    Server::new(ServerConfig::default())
}

fn server_with(configure: impl FnOnce(&mut ServerConfig)) -> Server {
    let mut config = ServerConfig::default();
    configure(&mut config);
    Server::new(config)
}

/// Every event, `Handled` records included.
fn all_events(server: &mut Server) -> Vec<ServerEvent> {
    std::iter::from_fn(|| server.poll_event()).collect()
}

/// Events without the `Handled` log records.
fn events(server: &mut Server) -> Vec<ServerEvent> {
    all_events(server)
        .into_iter()
        .filter(|event| !matches!(event, ServerEvent::Handled(_)))
        .collect()
}

fn tickets(events: &[ServerEvent]) -> Vec<Ticket> {
    events
        .iter()
        .filter_map(|event| match event {
            ServerEvent::EvidenceQuery { ticket, .. } | ServerEvent::ToolCall { ticket, .. } => {
                Some(*ticket)
            }
            _ => None,
        })
        .collect()
}

fn raw_out(server: &mut Server) -> Vec<u8> {
    std::iter::from_fn(|| server.poll_transmit())
        .flatten()
        .collect()
}

/// Each transmit is exactly one frame in `framing`; their bodies as JSON.
fn out_json(server: &mut Server, framing: Framing) -> Vec<Value> {
    let mut values = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        let mut decoder = Decoder::with_framing(framing, Limits::default());
        decoder.push(&bytes);
        let frame = decoder
            .poll_frame()
            .expect("a transmit holds a frame")
            .expect("a transmit is well framed");
        assert!(decoder.poll_frame().is_none(), "one frame per transmit");
        assert_eq!(decoder.finish(), Ok(()), "nothing after the frame");
        values.push(serde_json::from_slice(&frame.body).expect("a transmit holds JSON"));
    }
    values
}

fn hello() -> EvidenceResult {
    EvidenceResult::with_value(EvidenceValue::json(&"hello").unwrap())
        .with_computed_hash(Profile::Rfc8785)
        .unwrap()
}

fn error_code(reply: &Value) -> i64 {
    reply["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error reply: {reply}"))
}

// ------------------------------------------------------ data transcripts

fn transcripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/transcripts")
}

fn expand(text: &str) -> String {
    text.replace("$VERSION", env!("CARGO_PKG_VERSION"))
}

fn expand_json(value: &Value) -> Value {
    serde_json::from_str(&expand(&value.to_string())).unwrap()
}

fn event_json(event: &ServerEvent) -> Value {
    match event {
        ServerEvent::EvidenceQuery { ticket, query, .. } => {
            json!({"evidence_query": {"ticket": ticket.get(), "check_id": query.check_id}})
        }
        ServerEvent::Initialized {
            protocol_version, ..
        } => json!({"initialized": protocol_version}),
        ServerEvent::Cancelled { ticket, .. } => json!({"cancelled": ticket.get()}),
        ServerEvent::FramingError(_) => json!({"framing_error": true}),
        other => json!({"other": format!("{other:?}")}),
    }
}

fn run_transcript(path: &Path) {
    let name = path.display();
    let script: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let dialect = match script["dialect"].as_str().unwrap_or("auto") {
        "auto" => DialectChoice::Auto,
        "decision_gate" => DialectChoice::Fixed(Dialect::DecisionGate),
        "mcp" => DialectChoice::Fixed(Dialect::Mcp),
        other => panic!("{name}: unknown dialect {other}"),
    };
    let mut server = server_with(|config| config.dialect = dialect);
    let mut tickets_seen: Vec<Ticket> = Vec::new();
    for (index, step) in script["steps"].as_array().unwrap().iter().enumerate() {
        let at = format!("{name} step {index}");
        if let Some(send) = step.get("send") {
            let bytes = send.as_str().unwrap().as_bytes();
            let chunk = step["chunk"].as_u64().map_or(usize::MAX, |n| n as usize);
            for piece in bytes.chunks(chunk.min(bytes.len().max(1))) {
                server.handle_input(piece);
            }
        } else if let Some(expected) = step.get("expect_events") {
            let got = events(&mut server);
            tickets_seen.extend(tickets(&got));
            let got: Vec<Value> = got.iter().map(event_json).collect();
            assert_eq!(Value::Array(got), *expected, "{at}: events");
        } else if let Some(expected) = step.get("expect_out") {
            let got = String::from_utf8(raw_out(&mut server)).unwrap();
            assert_eq!(got, expand(expected.as_str().unwrap()), "{at}: bytes out");
        } else if let Some(expected) = step.get("expect_out_json") {
            let framing = match step["framing"].as_str() {
                Some("content_length") => Framing::ContentLength,
                Some("newline") => Framing::NewlineDelimited,
                other => panic!("{at}: framing {other:?}"),
            };
            let got = out_json(&mut server, framing);
            assert_eq!(Value::Array(got), expand_json(expected), "{at}: frames out");
        } else if let Some(respond) = step.get("respond") {
            let number = respond["ticket"].as_u64().unwrap();
            let ticket = tickets_seen
                .iter()
                .copied()
                .find(|ticket| ticket.get() == number)
                .unwrap_or_else(|| panic!("{at}: ticket {number} was never issued"));
            let result: EvidenceResult = serde_json::from_value(respond["result"].clone()).unwrap();
            let outcome = server.respond(ticket, result);
            match step["expect_error"].as_str() {
                None => assert_eq!(outcome, Ok(()), "{at}"),
                Some("cancelled") => {
                    assert_eq!(outcome, Err(RespondError::Cancelled(ticket)), "{at}");
                }
                Some("unknown_ticket") => {
                    assert_eq!(outcome, Err(RespondError::UnknownTicket(ticket)), "{at}");
                }
                Some(other) => panic!("{at}: unknown expect_error {other}"),
            }
        } else {
            panic!("{at}: unknown step {step}");
        }
    }
    assert!(events(&mut server).is_empty(), "{name}: unchecked events");
    assert!(raw_out(&mut server).is_empty(), "{name}: unchecked output");
}

#[test]
fn data_transcripts_replay() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(transcripts_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("server_") && name.ends_with(".json"))
        })
        .collect();
    paths.sort();
    assert!(paths.len() >= 5, "the server transcripts are present");
    for path in paths {
        run_transcript(&path);
    }
}

// ------------------------------------------- Decision Gate's first message

const DG_FIRST_MESSAGE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"stub","check_id":"probe","params":{"mode":"plain"}},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000},"correlation_id":null}}}}"#;

/// What Decision Gate does with the answer: read one Content-Length frame,
/// take `content[0]`, which must be a json item, and read an
/// EvidenceResult from it; then verify its hash.
#[test]
fn decision_gate_first_message_gets_an_answer_decision_gate_accepts() {
    let mut server = new_server();
    server.handle_input(&cl(DG_FIRST_MESSAGE));
    let got = events(&mut server);
    let [
        ServerEvent::EvidenceQuery {
            ticket,
            query,
            context,
            call,
        },
    ] = got.as_slice()
    else {
        panic!("one query expected, got {got:?}");
    };
    // The call is spoken in Decision Gate's dialect and carries no `_meta`.
    assert_eq!(call.dialect, Dialect::DecisionGate);
    assert_eq!(call.meta, None);
    assert_eq!(query.provider_id, "stub");
    assert_eq!(query.check_id, "probe");
    assert_eq!(query.params, Some(json!({"mode": "plain"})));
    assert_eq!(context.run_id, "run-1");
    assert_eq!(context.correlation_id, None);
    assert_eq!(server.dialect(), Dialect::DecisionGate);
    assert_eq!(server.framing(), Some(Framing::ContentLength));

    server.respond(*ticket, hello()).unwrap();
    let out = raw_out(&mut server);
    let text = std::str::from_utf8(&out).unwrap();
    // DG: name exactly `Content-Length:`, then \r\n\r\n, then compact JSON.
    let (header, body) = text.split_once("\r\n\r\n").expect("a header block");
    assert_eq!(header, format!("Content-Length: {}", body.len()));
    let reply: Value = serde_json::from_str(body).unwrap();
    assert_eq!(reply["jsonrpc"], "2.0");
    assert_eq!(reply["id"], 1);
    let item = &reply["result"]["content"][0];
    assert_eq!(item["type"], "json");
    // Every EvidenceResult field is written, as the seed's example shows.
    for field in [
        "value",
        "lane",
        "error",
        "evidence_hash",
        "evidence_ref",
        "evidence_anchor",
        "signature",
        "content_type",
    ] {
        assert!(item["json"].get(field).is_some(), "field {field} missing");
    }
    assert_eq!(
        item["json"]["evidence_hash"]["value"],
        "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a"
    );
    let raw = serde_json::value::to_raw_value(&reply["result"]).unwrap();
    let (result, shape) = from_tool_result(&raw).unwrap();
    assert_eq!(shape, evidence_wire::dialect::ToolResultShape::JsonItem);
    verify(result, &TrustPolicy::Audit, Profile::Rfc8785).expect("the hash verifies");
}

// ------------------------------------------------ handshake and chores

#[test]
fn initialize_echoes_each_supported_version() {
    for version in ["2025-06-18", "2025-11-25"] {
        for framing in [Framing::NewlineDelimited, Framing::ContentLength] {
            let mut server = new_server();
            server.handle_input(&frame(framing, &initialize(json!(0), version)));
            let replies = out_json(&mut server, framing);
            assert_eq!(replies.len(), 1);
            assert_eq!(replies[0]["id"], 0);
            assert_eq!(replies[0]["result"]["protocolVersion"], version);
            assert_eq!(
                replies[0]["result"]["capabilities"]["tools"]["listChanged"],
                false
            );
            assert!(replies[0]["result"]["capabilities"]["resources"].is_object());
            assert_eq!(replies[0]["result"]["serverInfo"]["name"], "evidence-wire");
            assert_eq!(server.dialect(), Dialect::Mcp);
            assert!(matches!(
                events(&mut server).as_slice(),
                [ServerEvent::Initialized { protocol_version, client_info: Some(_) }]
                    if protocol_version == version
            ));
        }
    }
}

#[test]
fn initialize_with_an_unknown_version_gets_the_latest() {
    for requested in ["2024-10-07", "2099-01-01", ""] {
        let mut server = new_server();
        server.handle_input(&nl(&initialize(json!("init"), requested)));
        let replies = out_json(&mut server, Framing::NewlineDelimited);
        assert_eq!(replies[0]["id"], "init");
        assert_eq!(replies[0]["result"]["protocolVersion"], "2025-11-25");
    }
    // No params at all: still answered, with the latest.
    let mut server = new_server();
    server.handle_input(&nl(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#));
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies[0]["result"]["protocolVersion"], "2025-11-25");
}

#[test]
fn server_discover_without_stateless_meta_is_refused_so_clients_fall_back() {
    // Only a stateless request (revision 2026-07-28 in its `_meta`) may
    // discover; anything else is an error, and a client falls back to the
    // handshake (the Python SDK on any error, rmcp on most).
    let mut server = new_server();
    server.handle_input(&nl(
        r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}"#,
    ));
    server.handle_input(&nl(&initialize(json!(2), "2025-06-18")));
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0]["id"], 1);
    assert_eq!(error_code(&replies[0]), -32602);
    assert_eq!(replies[1]["result"]["protocolVersion"], "2025-06-18");
}

#[test]
fn tools_list_uses_the_dialect_key() {
    let mut server = new_server();
    server.handle_input(&cl(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
    let dg = out_json(&mut server, Framing::ContentLength);
    let tool = &dg[0]["result"]["tools"][0];
    assert_eq!(tool["name"], "evidence_query");
    assert_eq!(tool["input_schema"]["type"], "object");
    assert!(tool.get("inputSchema").is_none());

    let mut server = new_server();
    server.handle_input(&nl(&initialize(json!(0), "2025-06-18")));
    server.handle_input(&nl(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
    let mcp = out_json(&mut server, Framing::NewlineDelimited);
    let tool = &mcp[1]["result"]["tools"][0];
    assert_eq!(tool["inputSchema"]["type"], "object");
    assert!(tool.get("input_schema").is_none());
    assert!(tool["description"].as_str().is_some_and(|d| !d.is_empty()));
}

fn spec_schema(which: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../spec/schemas/evidence_query.{which}.schema.json"
    ));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn tools_list_shows_exactly_the_spec_schemas_of_evidence_query() {
    let input = spec_schema("input");
    let output = spec_schema("output");
    assert_ne!(
        input,
        json!({"type": "object"}),
        "the spec schema is the real one"
    );

    let mut server = new_server();
    server.handle_input(&cl(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
    let dg = out_json(&mut server, Framing::ContentLength);
    let tool = &dg[0]["result"]["tools"][0];
    assert_eq!(tool["name"], "evidence_query");
    assert_eq!(tool["input_schema"], input);
    // Decision Gate's tools/list carries no output schema.
    assert_eq!(tool.as_object().map(|tool| tool.len()), Some(3), "{tool}");

    let mut server = new_server();
    server.handle_input(&nl(&initialize(json!(0), "2025-06-18")));
    server.handle_input(&nl(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
    let mcp = out_json(&mut server, Framing::NewlineDelimited);
    let tool = &mcp[1]["result"]["tools"][0];
    assert_eq!(tool["inputSchema"], input);
    assert_eq!(tool["outputSchema"], output);
}

/// Sends `evidence_query` with `arguments` and returns the one reply.
fn evidence_call_reply(arguments: &Value) -> (Value, Vec<ServerEvent>) {
    let mut server = new_server();
    let body = json!({"jsonrpc":"2.0","id":"q","method":"tools/call",
        "params":{"name":"evidence_query","arguments":arguments}});
    server.handle_input(&nl(&body.to_string()));
    let mut replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies.len(), 1, "{replies:?}");
    (replies.remove(0), events(&mut server))
}

fn arguments_with(pointer: &str, value: Value) -> Value {
    let mut arguments = json!({"query":{"provider_id":"p","check_id":"c","params":{"x":1}},
        "context":context()});
    *arguments
        .pointer_mut(pointer)
        .expect("pointer into the good arguments") = value;
    arguments
}

#[cfg(feature = "json-schema")]
#[test]
fn invalid_evidence_query_input_reports_the_json_pointer() {
    let mut with_extra = arguments_with("/query/provider_id", json!("p"));
    with_extra["query"]["unexpected"] = json!(true);
    let mut without_context = arguments_with("/query/provider_id", json!("p"));
    without_context.as_object_mut().unwrap().remove("context");
    let cases: [(Value, &str); 8] = [
        (
            arguments_with("/context/tenant_id", json!(0)),
            "/context/tenant_id",
        ),
        (
            arguments_with("/context/namespace_id", json!("x7")),
            "/context/namespace_id",
        ),
        (
            arguments_with("/context/trigger_time/kind", json!("wall_clock")),
            "/context/trigger_time/kind",
        ),
        (
            arguments_with("/context/trigger_time/value", json!(1.5)),
            "/context/trigger_time/value",
        ),
        (
            arguments_with("/query/provider_id", json!("")),
            "/query/provider_id",
        ),
        (
            arguments_with("/context/run_id", json!(7)),
            "/context/run_id",
        ),
        (with_extra, "/query"),
        (without_context, ""),
    ];
    for (arguments, pointer) in cases {
        let (reply, seen) = evidence_call_reply(&arguments);
        assert_eq!(error_code(&reply), -32602, "{arguments}: {reply}");
        assert_eq!(reply["id"], "q");
        let data = &reply["error"]["data"];
        assert_eq!(data["kind"], "invalid_tool_input", "{reply}");
        assert_eq!(data["pointer"], pointer, "{arguments}: {reply}");
        assert!(
            data["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains(&format!("`{pointer}`"))),
            "the detail names the place: {reply}"
        );
        assert!(seen.is_empty(), "no query reaches the embedder: {seen:?}");
    }
}

#[test]
fn evidence_query_input_the_schema_allows_is_still_read_into_its_typed_form() {
    // Accepted by the schema (a string of digits, at most 20 long), refused
    // by the typed form (it does not fit in 64 bits): INVALID_TOOL_INPUT
    // without a pointer, since serde does not say where.
    let too_big = arguments_with("/context/tenant_id", json!("99999999999999999999"));
    let (reply, seen) = evidence_call_reply(&too_big);
    assert_eq!(error_code(&reply), -32602, "{reply}");
    assert!(reply["error"]["data"].get("pointer").is_none(), "{reply}");
    assert!(seen.is_empty());

    // The older `predicate` and string ids still read as before.
    let mut legacy = arguments_with("/context/tenant_id", json!("12"));
    let query = legacy["query"].as_object_mut().unwrap();
    query.remove("check_id");
    query.insert("predicate".into(), json!("legacy"));
    let mut server = new_server();
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"evidence_query","arguments":legacy}});
    server.handle_input(&nl(&body.to_string()));
    assert!(
        raw_out(&mut server).is_empty(),
        "accepted: nothing answered yet"
    );
    match events(&mut server).as_slice() {
        [ServerEvent::EvidenceQuery { query, context, .. }] => {
            assert_eq!(query.check_id, "legacy");
            assert_eq!(query.params, Some(json!({"x": 1})));
            assert_eq!(context.tenant_id.get(), 12);
        }
        other => panic!("expected one EvidenceQuery, got {other:?}"),
    }
}

#[cfg(feature = "json-schema")]
#[test]
fn a_replaced_evidence_tool_is_validated_against_its_own_schema() {
    let schema = json!({"type": "object", "required": ["query", "context"],
        "properties": {"query": {"type": "object",
            "properties": {"check_id": {"enum": ["only"]}}}}});
    let mut server = server_with(|config| {
        config.set_evidence_tool(ToolDefinition {
            name: "ignored: the name stays evidence_query".into(),
            description: "Checks of this provider: only.".into(),
            input_schema: schema.clone(),
            output_schema: None,
        })
    });
    server.handle_input(&nl(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
    server.handle_input(&nl(&call(json!(2), "other")));
    server.handle_input(&nl(&call(json!(3), "only")));
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies.len(), 2, "{replies:?}");
    let tool = &replies[0]["result"]["tools"][0];
    assert_eq!(tool["name"], "evidence_query");
    assert_eq!(tool["input_schema"], schema);
    assert_eq!(error_code(&replies[1]), -32602);
    assert_eq!(replies[1]["error"]["data"]["pointer"], "/query/check_id");
    assert!(
        matches!(events(&mut server).as_slice(), [ServerEvent::EvidenceQuery { query, .. }] if query.check_id == "only")
    );
}

#[test]
fn forced_dialect_ignores_the_handshake() {
    let mut server = server_with(|config| {
        config.dialect = DialectChoice::Fixed(Dialect::DecisionGate);
    });
    server.handle_input(&nl(&initialize(json!(0), "2025-06-18")));
    server.handle_input(&nl(&call(json!(1), "c")));
    assert_eq!(server.dialect(), Dialect::DecisionGate);
    let ticket = tickets(&events(&mut server))[0];
    server.respond(ticket, hello()).unwrap();
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies[1]["result"]["content"][0]["type"], "json");

    let mut server = server_with(|config| config.dialect = DialectChoice::Fixed(Dialect::Mcp));
    server.handle_input(&cl(&call(json!(1), "c")));
    let ticket = tickets(&events(&mut server))[0];
    server.respond(ticket, hello()).unwrap();
    let replies = out_json(&mut server, Framing::ContentLength);
    assert_eq!(replies[0]["result"]["content"][0]["type"], "text");
    assert_eq!(replies[0]["result"]["isError"], false);
    assert_eq!(
        replies[0]["result"]["structuredContent"]["value"]["value"],
        "hello"
    );
}

#[test]
fn mcp_error_result_sets_is_error_and_text_is_canonical_json() {
    let mut server = server_with(|config| config.dialect = DialectChoice::Fixed(Dialect::Mcp));
    server.handle_input(&nl(&call(json!(9), "c")));
    let ticket = tickets(&events(&mut server))[0];
    let failed = EvidenceResult::with_error(evidence_wire::evidence::EvidenceError::new(
        "file_not_found",
        "no such file",
    ));
    server.respond(ticket, failed.clone()).unwrap();
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    let result = &replies[0]["result"];
    assert_eq!(result["isError"], true);
    let text = result["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        text.as_bytes(),
        failed.to_canonical_vec().unwrap().as_slice()
    );
    assert_eq!(
        result["structuredContent"]["error"]["code"],
        "file_not_found"
    );
}

#[test]
fn ping_and_resources() {
    let mut server = server_with(|config| {
        config.add_resource(evidence_wire::server::Resource {
            uri: "docs://protocol".to_owned(),
            name: "protocol".to_owned(),
            title: None,
            description: Some("the protocol".to_owned()),
            mime_type: "text/markdown".to_owned(),
            text: "# The protocol".into(),
        })
    });
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"docs://protocol"}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"docs://nope"}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{}}"#,
    ] {
        server.handle_input(&nl(body));
    }
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies[0]["result"], json!({}));
    assert_eq!(
        replies[1]["result"]["resources"][0]["uri"],
        "docs://protocol"
    );
    assert_eq!(
        replies[1]["result"]["resources"][0]["mimeType"],
        "text/markdown"
    );
    assert_eq!(
        replies[2]["result"]["contents"][0]["text"],
        "# The protocol"
    );
    assert_eq!(error_code(&replies[3]), -32002);
    assert_eq!(error_code(&replies[4]), -32602);

    let mut server = server_with(|config| config.resources_enabled = false);
    server.handle_input(&nl(r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#));
    assert_eq!(
        error_code(&out_json(&mut server, Framing::NewlineDelimited)[0]),
        -32601
    );
}

// ------------------------------------------------------ notifications

#[test]
fn notifications_are_never_answered() {
    for framing in [Framing::ContentLength, Framing::NewlineDelimited] {
        let mut server = new_server();
        for body in [
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/unknown","params":{"x":1}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"evidence_query","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{"deep":[1]}}}"#,
        ] {
            server.handle_input(&frame(framing, body));
        }
        assert!(raw_out(&mut server).is_empty(), "{framing:?}");
        assert!(events(&mut server).is_empty(), "{framing:?}");
        // The connection is still fine.
        server.handle_input(&frame(
            framing,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        ));
        assert_eq!(out_json(&mut server, framing)[0]["id"], 1);
    }
}

#[test]
fn responses_from_the_peer_are_ignored() {
    let mut server = new_server();
    server.handle_input(&nl(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
    server.handle_input(&nl(
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"x"}}"#,
    ));
    // A broken response is not answered either (no error ping-pong).
    server.handle_input(&nl(r#"{"jsonrpc":"1.0","id":3,"result":{}}"#));
    assert!(raw_out(&mut server).is_empty());
}

// ------------------------------------------------------ malformed input

#[test]
fn malformed_messages_get_errors_and_the_connection_goes_on() {
    for framing in [Framing::ContentLength, Framing::NewlineDelimited] {
        let mut server = new_server();
        let cases: [(&str, i64, Value); 9] = [
            ("{not json", -32700, Value::Null),
            ("[]", -32600, Value::Null),
            ("42", -32600, Value::Null),
            (
                r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#,
                -32600,
                json!(7),
            ),
            (r#"{"jsonrpc":"2.0","id":8,"method":""}"#, -32600, json!(8)),
            (
                r#"{"jsonrpc":"2.0","id":9,"method":"ping","params":[1]}"#,
                -32600,
                json!(9),
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                -32600,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                -32600,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{}}}}"#,
                -32602,
                json!(10),
            ),
        ];
        for (body, _, _) in &cases {
            server.handle_input(&frame(framing, body));
        }
        server.handle_input(&frame(
            framing,
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#,
        ));
        server.handle_input(&frame(framing, &call(json!(12), "still-works")));
        let replies = out_json(&mut server, framing);
        assert_eq!(replies.len(), cases.len() + 1, "{framing:?}: {replies:?}");
        for ((body, code, id), reply) in cases.iter().zip(&replies) {
            assert_eq!(error_code(reply), *code, "{framing:?} {body}");
            assert_eq!(reply["id"], *id, "{framing:?} {body}");
            assert!(
                reply["error"]["data"]["detail"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{body}: errors say what was wrong"
            );
        }
        assert_eq!(error_code(&replies[cases.len()]), -32001, "unknown tool");
        let got = events(&mut server);
        assert!(
            matches!(got.as_slice(), [ServerEvent::EvidenceQuery { query, .. }] if query.check_id == "still-works"),
            "{got:?}"
        );
    }
}

#[test]
fn hidden_tools_answer_like_unknown_ones() {
    let mut server = server_with(|config| {
        config.tool_filter = Some(std::sync::Arc::new(|name: &str| name != "evidence_query"));
    });
    server.handle_input(&nl(&call(json!(1), "c")));
    server.handle_input(&nl(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}"#,
    ));
    server.handle_input(&nl(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#));
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies[0]["error"]["code"], replies[1]["error"]["code"]);
    assert_eq!(
        replies[0]["error"]["message"],
        replies[1]["error"]["message"]
    );
    assert_eq!(replies[2]["result"]["tools"], json!([]));
}

#[test]
fn recoverable_framing_errors_are_answered_and_the_stream_goes_on() {
    let mut server = server_with(|config| {
        config.limits = Limits {
            max_header_bytes: 256,
            max_body_bytes: 512,
        };
    });
    let mut input = b"Content-Length: 100000\r\n\r\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 100_000));
    input.extend(b"Content-Length: abc\r\n\r\n");
    input.extend(cl(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#));
    for piece in input.chunks(4096) {
        server.handle_input(piece);
    }
    let replies = out_json(&mut server, Framing::ContentLength);
    assert_eq!(replies.len(), 3, "{replies:?}");
    assert_eq!(error_code(&replies[0]), -32070, "payload too large");
    assert_eq!(replies[0]["id"], Value::Null);
    assert!(replies[1]["error"].is_object());
    assert_eq!(replies[2], json!({"jsonrpc":"2.0","id":1,"result":{}}));
    let got = events(&mut server);
    assert_eq!(
        got.iter()
            .filter(|e| matches!(e, ServerEvent::FramingError(_)))
            .count(),
        2
    );
    assert!(!server.is_input_closed());
}

#[test]
fn fatal_framing_error_closes_input_but_queries_in_flight_are_answered() {
    let mut server = new_server();
    server.handle_input(&cl(&call(json!(1), "c")));
    server.handle_input(b"Content-Length: 99999999999999999999999\r\n\r\n");
    let got = events(&mut server);
    assert!(matches!(got.last(), Some(ServerEvent::Fatal(_))), "{got:?}");
    assert!(server.is_input_closed());
    // Input after the fatal error is not read.
    server.handle_input(&cl(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#));
    assert!(events(&mut server).is_empty());
    assert!(raw_out(&mut server).is_empty());
    assert!(!server.is_finished(), "a query is still in flight");
    server.respond(tickets(&got)[0], hello()).unwrap();
    let replies = out_json(&mut server, Framing::ContentLength);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0]["id"], 1);
    assert!(server.is_finished());
    // End of input after a fatal error reports nothing more.
    server.handle_end_of_input();
    assert!(events(&mut server).is_empty());
}

#[test]
fn end_of_input_mid_frame_is_reported_once_and_in_flight_survives() {
    let mut server = new_server();
    server.handle_input(&nl(&call(json!("x"), "c")));
    server.handle_input(br#"{"jsonrpc":"2.0","id":2,"met"#);
    server.handle_end_of_input();
    let got = events(&mut server);
    assert_eq!(
        got.iter()
            .filter(|e| matches!(e, ServerEvent::FramingError(_)))
            .count(),
        1,
        "{got:?}"
    );
    assert!(server.is_input_closed());
    server.handle_end_of_input();
    assert!(events(&mut server).is_empty());
    server.respond(tickets(&got)[0], hello()).unwrap();
    assert_eq!(
        out_json(&mut server, Framing::NewlineDelimited)[0]["id"],
        "x"
    );
    assert!(server.is_finished());
}

// ---------------------------------------------------- tickets and answers

#[test]
fn unknown_and_repeated_tickets_are_typed_errors() {
    let mut server = new_server();
    server.handle_input(&cl(&call(json!(1), "c")));
    let ticket = tickets(&events(&mut server))[0];
    let bogus = {
        // A ticket from another connection was never issued here.
        let mut other = new_server();
        other.handle_input(&cl(&call(json!(1), "a")));
        other.handle_input(&cl(&call(json!(2), "b")));
        tickets(&events(&mut other))[1]
    };
    assert_eq!(
        server.respond(bogus, hello()),
        Err(RespondError::UnknownTicket(bogus))
    );
    assert_eq!(server.in_flight(), 1);
    server.respond(ticket, hello()).unwrap();
    assert_eq!(
        server.respond(ticket, hello()),
        Err(RespondError::UnknownTicket(ticket))
    );
    assert_eq!(
        out_json(&mut server, Framing::ContentLength).len(),
        1,
        "answered once"
    );
}

#[cfg(feature = "json-schema")]
#[test]
fn a_tool_ticket_answered_as_evidence_is_refused_and_stays_answerable() {
    let mut server = server_with(|config| {
        config.add_tool(ToolDefinition {
        name: "echo".to_owned(),
        description: "Echo the arguments.".to_owned(),
        input_schema: json!({"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}),
        output_schema: None,
    })
    });
    server.handle_input(&nl(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"x":1}}}"#,
    ));
    server.handle_input(&nl(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"x":"no"}}}"#,
    ));
    let got = events(&mut server);
    let ticket = tickets(&got)[0];
    assert!(
        matches!(&got[0], ServerEvent::ToolCall { name, arguments, .. }
        if name == "echo" && arguments == &json!({"x": 1}))
    );
    assert_eq!(
        server.respond(ticket, hello()),
        Err(RespondError::WrongKind(ticket))
    );
    server.respond_tool(ticket, Ok(json!({"x": 1}))).unwrap();
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies.len(), 2);
    assert_eq!(
        error_code(&replies[0]),
        -32602,
        "schema violation answered at once"
    );
    assert_eq!(replies[0]["id"], 2);
    assert_eq!(replies[1]["id"], 1);
    assert_eq!(replies[1]["result"]["content"][0]["json"], json!({"x": 1}));
}

#[test]
fn tool_answers_keep_the_dialect_of_their_call() {
    // A tool call made before the handshake is answered in the Decision
    // Gate shape even if the peer switched the connection to MCP since.
    let mut server = server_with(|config| {
        config.add_tool(ToolDefinition {
            name: "echo".to_owned(),
            description: "Echo.".to_owned(),
            input_schema: json!({"type":"object"}),
            output_schema: None,
        })
    });
    server.handle_input(&nl(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
    ));
    server.handle_input(&nl(&call(json!(2), "c")));
    server.handle_input(&nl(&initialize(json!(3), "2025-06-18")));
    let got = tickets(&events(&mut server));
    server
        .respond_tool(got[0], Ok(json!({"ok": true})))
        .unwrap();
    server.respond(got[1], hello()).unwrap();
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies[0]["id"], 3);
    assert_eq!(replies[1]["result"]["content"][0]["type"], "json");
    assert_eq!(replies[2]["result"]["content"][0]["type"], "json");
}

#[test]
fn inline_tool_failures() {
    let mut server = server_with(|config| {
        config.max_in_flight = 1;
        // Refusal at the cap (the default holds messages instead: see
        // tests/server_backpressure.rs).
        config.overload = Overload::Refuse;
        config.add_inline_tool(
            ToolDefinition {
                name: "inline".to_owned(),
                description: "Answered in the core.".to_owned(),
                input_schema: json!({"type":"object"}),
                output_schema: None,
            },
            std::sync::Arc::new(|arguments: &Value| match arguments.get("mode") {
                Some(mode) if mode == "bad" => {
                    Err(ToolFailure::InvalidInput("bad mode".to_owned()))
                }
                Some(mode) if mode == "fail" => Err(ToolFailure::Failed("it broke".to_owned())),
                _ => Ok(json!({"fine": true})),
            }),
        );
    });
    // One evidence query fills the in-flight limit...
    server.handle_input(&nl(&call(json!(1), "c")));
    // ...but inline tools hold no ticket, so they are still served.
    for (id, mode) in [(2, "ok"), (3, "bad"), (4, "fail")] {
        server.handle_input(&nl(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
            "params":{"name":"inline","arguments":{"mode":mode}}})
        .to_string()));
    }
    // A second waiting query is over the limit.
    server.handle_input(&nl(&call(json!(5), "c")));
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies.len(), 4, "{replies:?}");
    assert_eq!(
        replies[0]["result"]["content"][0]["json"],
        json!({"fine": true})
    );
    assert_eq!(error_code(&replies[1]), -32602);
    assert_eq!(replies[2]["result"]["isError"], true);
    assert_eq!(replies[2]["result"]["content"][0]["text"], "it broke");
    assert_eq!(error_code(&replies[3]), -32072, "overloaded");
    assert_eq!(server.in_flight(), 1);
}

#[test]
fn a_request_id_in_flight_cannot_be_reused_but_can_after_its_answer() {
    let mut server = new_server();
    server.handle_input(&nl(&call(json!("dup"), "first")));
    server.handle_input(&nl(&call(json!("dup"), "second")));
    let got = tickets(&events(&mut server));
    assert_eq!(got.len(), 1, "the duplicate made no query");
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(error_code(&replies[0]), -32600);
    assert_eq!(replies[0]["id"], "dup");
    server.respond(got[0], hello()).unwrap();
    server.handle_input(&nl(&call(json!("dup"), "third")));
    assert_eq!(tickets(&events(&mut server)).len(), 1);
    // Integer 1 and string "1" are different ids.
    server.handle_input(&nl(&call(json!(1), "int")));
    server.handle_input(&nl(&call(json!("1"), "str")));
    assert_eq!(tickets(&events(&mut server)).len(), 2);
}

#[test]
fn cancelled_tickets_are_remembered_within_a_bound() {
    let mut server = server_with(|config| config.max_in_flight = 4);
    let total = evidence_wire::server::Server::CANCELLED_MEMORY + 10;
    let mut all = Vec::new();
    for id in 0..total {
        server.handle_input(&nl(&call(json!(id), "c")));
        server.handle_input(&nl(
            &json!({"jsonrpc":"2.0","method":"notifications/cancelled",
            "params":{"requestId": id}})
            .to_string(),
        ));
        let got = events(&mut server);
        assert!(matches!(got.last(), Some(ServerEvent::Cancelled { .. })));
        all.extend(tickets(&got));
    }
    assert_eq!(all.len(), total);
    assert_eq!(server.in_flight(), 0);
    assert!(
        raw_out(&mut server).is_empty(),
        "cancelled requests get no answer"
    );
    let newest = *all.last().unwrap();
    assert_eq!(
        server.respond(newest, hello()),
        Err(RespondError::Cancelled(newest))
    );
    // The oldest ones were forgotten: still refused, as unknown.
    assert_eq!(
        server.respond(all[0], hello()),
        Err(RespondError::UnknownTicket(all[0]))
    );
    assert!(raw_out(&mut server).is_empty());
}

// ------------------------------------------------------------- batches

#[test]
fn batches_under_the_jsonrpc_policy_answer_once_all_members_are_done() {
    let mut server = server_with(|config| config.policy = Policy::jsonrpc());
    let batch = format!(
        "[{},{},{},{}]",
        call(json!(1), "a"),
        r#"{"jsonrpc":"2.0","method":"notifications/x"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
        call(json!(3), "b"),
    );
    server.handle_input(&nl(&batch));
    let got = tickets(&events(&mut server));
    assert_eq!(got.len(), 2);
    assert!(
        raw_out(&mut server).is_empty(),
        "the batch waits for its queries"
    );
    server.respond(got[1], hello()).unwrap();
    assert!(raw_out(&mut server).is_empty());
    server.respond(got[0], hello()).unwrap();
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies.len(), 1);
    let ids: Vec<&Value> = replies[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|reply| &reply["id"])
        .collect();
    assert_eq!(ids, [&json!(2), &json!(3), &json!(1)]);

    // A batch whose query is cancelled still gets its other replies.
    let batch = format!(
        "[{},{}]",
        call(json!(7), "a"),
        r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#
    );
    server.handle_input(&nl(&batch));
    server.handle_input(&nl(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
    ));
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(replies, [json!([{"jsonrpc":"2.0","id":8,"result":{}}])]);

    // A batch of notifications only is not answered at all.
    server.handle_input(&nl(
        r#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]"#,
    ));
    assert!(raw_out(&mut server).is_empty());
}

#[test]
fn batches_are_refused_under_the_default_policy() {
    let mut server = new_server();
    server.handle_input(&nl(&format!("[{}]", call(json!(1), "a"))));
    assert!(tickets(&events(&mut server)).is_empty());
    let replies = out_json(&mut server, Framing::NewlineDelimited);
    assert_eq!(error_code(&replies[0]), -32600);
}

#[test]
fn chunking_never_changes_the_outcome() {
    for framing in [Framing::ContentLength, Framing::NewlineDelimited] {
        chunking_never_changes_the_outcome_in(framing);
    }
}

fn chunking_never_changes_the_outcome_in(framing: Framing) {
    let mut input = Vec::new();
    input.extend(frame(framing, &initialize(json!(0), "2025-06-18")));
    input.extend(frame(
        framing,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    ));
    input.extend(frame(framing, &call(json!(1), "a")));
    input.extend(frame(framing, "{bad"));
    input.extend(frame(framing, &call(json!(2), "b")));
    input.extend(frame(
        framing,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
    ));
    let run = |chunk: usize| {
        let mut server = new_server();
        for piece in input.chunks(chunk) {
            server.handle_input(piece);
        }
        let got = events(&mut server);
        for ticket in tickets(&got) {
            server.respond(ticket, hello()).unwrap();
        }
        (format!("{got:?}"), raw_out(&mut server))
    };
    let whole = run(input.len());
    for chunk in [1, 2, 3, 7, 64, 333] {
        assert_eq!(run(chunk), whole, "chunk size {chunk}");
    }
}

/// A call's event says how it was asked: the dialect of the request (MCP
/// after `initialize`) and the `_meta` of its `tools/call` params, as
/// sent; a `_meta` that is not an object, or a tool call without one,
/// carries none.
#[test]
fn calls_carry_their_dialect_and_meta() {
    let mut server = server_with(|config| {
        config.add_tool(ToolDefinition {
            name: "echo".to_owned(),
            description: "echo".to_owned(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
        });
    });
    server.handle_input(&nl(&initialize(json!(0), "2025-06-18")));
    let meta = json!({"progressToken": 7, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
    let mut with_meta: Value = serde_json::from_str(&call(json!(1), "a")).unwrap();
    with_meta["params"]["_meta"] = meta.clone();
    let mut not_object: Value = serde_json::from_str(&call(json!(2), "b")).unwrap();
    not_object["params"]["_meta"] = json!("nope");
    let tool = json!({"jsonrpc":"2.0","id":3,"method":"tools/call",
        "params":{"name":"echo","arguments":{},"_meta":{"k":"v"}}});
    for message in [&with_meta, &not_object, &tool] {
        server.handle_input(&nl(&message.to_string()));
    }
    let got = events(&mut server);
    let calls: Vec<_> = got
        .iter()
        .filter_map(|event| match event {
            ServerEvent::EvidenceQuery { call, .. } | ServerEvent::ToolCall { call, .. } => {
                Some(call.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 3, "{got:?}");
    assert!(calls.iter().all(|call| call.dialect == Dialect::Mcp));
    assert_eq!(calls[0].meta, meta.as_object().cloned());
    assert_eq!(calls[1].meta, None);
    assert_eq!(
        calls[2].meta,
        Some(json!({"k": "v"}).as_object().cloned().unwrap())
    );
}
