//! Every MCP revision from 2024-11-05 to the stateless 2026-07-28 gets the
//! answers it knows (issue 22): the handshake echoes the client's revision,
//! results carry `structuredContent`/`outputSchema` only where the revision
//! has them, tool-input errors become tool results from 2025-11-25 on
//! (SEP-1303), a stateless request is served from its `_meta` alone (with
//! `server/discover`, `resultType`, cache hints and the unsupported-version
//! error), and Decision Gate's first message is still Decision Gate.

use evidence_wire::envelope::Policy;
use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
use evidence_wire::frame::Framing;
use evidence_wire::server::{Server, ServerConfig, ServerEvent};
use serde_json::{Value, json};

const CONTEXT: &str = r#"{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000}}"#;

fn line(message: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(message).unwrap();
    bytes.push(b'\n');
    bytes
}

fn initialize(id: i64, revision: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": revision, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
}

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

/// Sends `messages`, answers every evidence query with `"hello"`, and
/// returns every reply (newline-delimited).
fn run(config: ServerConfig, messages: &[Value]) -> Vec<Value> {
    let mut server = Server::new(config);
    for message in messages {
        server.handle_input(&line(message));
        while let Some(event) = server.poll_event() {
            if let ServerEvent::EvidenceQuery { ticket, .. } = event {
                let value = EvidenceValue::json(&"hello").unwrap();
                server
                    .respond(ticket, EvidenceResult::with_value(value))
                    .unwrap();
            }
        }
    }
    let mut replies = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        assert!(server.framing() == Some(Framing::NewlineDelimited));
        replies.push(serde_json::from_slice(&bytes).unwrap());
    }
    replies
}

#[test]
fn the_handshake_echoes_every_revision_it_speaks() {
    for revision in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let replies = run(ServerConfig::default(), &[initialize(1, revision)]);
        assert_eq!(replies[0]["result"]["protocolVersion"], revision);
        assert_eq!(
            replies[0]["result"]["capabilities"]["tools"]["listChanged"],
            false
        );
    }
    // A revision it does not negotiate gets its newest handshake revision.
    let replies = run(ServerConfig::default(), &[initialize(1, "2026-07-28")]);
    assert_eq!(replies[0]["result"]["protocolVersion"], "2025-11-25");
}

#[test]
fn each_revision_gets_only_the_fields_it_knows() {
    for (revision, structured) in [
        ("2024-11-05", false),
        ("2025-03-26", false),
        ("2025-06-18", true),
        ("2025-11-25", true),
    ] {
        let replies = run(
            ServerConfig::default(),
            &[
                initialize(0, revision),
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
                evidence_call(2, good_arguments(), None),
            ],
        );
        let tool = &replies[1]["result"]["tools"][0];
        assert!(tool["inputSchema"].is_object());
        assert_eq!(tool.get("outputSchema").is_some(), structured, "{revision}");
        let result = &replies[2]["result"];
        assert_eq!(result["content"][0]["type"], "text", "{revision}");
        assert_eq!(result["isError"], false);
        assert_eq!(
            result.get("structuredContent").is_some(),
            structured,
            "{revision}: {result}"
        );
        assert!(result.get("resultType").is_none());
        // The text item carries the canonical JSON of the result either way.
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text["value"]["value"], "hello");
        if structured {
            assert_eq!(text, result["structuredContent"]);
        }
    }
}

#[test]
fn decision_gates_first_message_is_still_decision_gate() {
    let replies = run(
        ServerConfig::default(),
        &[evidence_call(1, good_arguments(), None)],
    );
    let result = &replies[0]["result"];
    assert_eq!(result["content"][0]["type"], "json");
    assert!(result.get("structuredContent").is_none());
    assert!(result.get("resultType").is_none());
}

#[test]
fn a_stateless_request_is_served_from_its_meta() {
    let replies = run(
        ServerConfig::default(),
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta("2026-07-28")}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": modern_meta("2026-07-28")}}),
            evidence_call(3, good_arguments(), Some(modern_meta("2026-07-28"))),
            json!({"jsonrpc": "2.0", "id": 4, "method": "resources/list", "params": {"_meta": modern_meta("2026-07-28")}}),
            json!({"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"_meta": modern_meta("2026-07-28")}}),
        ],
    );
    let discover = &replies[0]["result"];
    assert_eq!(discover["resultType"], "complete");
    assert!(
        discover["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    assert_eq!(discover["capabilities"]["tools"]["listChanged"], false);
    assert_eq!(discover["ttlMs"], 0);
    assert_eq!(discover["cacheScope"], "private");
    assert_eq!(
        discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "evidence-wire"
    );
    let tools = &replies[1]["result"];
    assert_eq!(tools["resultType"], "complete");
    assert_eq!(tools["ttlMs"], 0);
    assert!(tools["tools"][0]["outputSchema"].is_object());
    let call = &replies[2]["result"];
    assert_eq!(call["resultType"], "complete");
    assert_eq!(call["content"][0]["type"], "text");
    assert_eq!(call["structuredContent"]["value"]["value"], "hello");
    assert_eq!(replies[3]["result"]["cacheScope"], "private");
    // ping was removed in 2026-07-28.
    assert_eq!(replies[4]["error"]["code"], -32601);
}

#[test]
fn a_stateless_request_with_an_unknown_revision_names_the_supported_ones() {
    let replies = run(
        ServerConfig::default(),
        &[
            evidence_call(1, good_arguments(), Some(modern_meta("1900-01-01"))),
            // A handshake revision is not spoken without the handshake.
            evidence_call(2, good_arguments(), Some(modern_meta("2025-11-25"))),
        ],
    );
    for (reply, requested) in replies.iter().zip(["1900-01-01", "2025-11-25"]) {
        assert_eq!(reply["error"]["code"], -32022, "{reply}");
        assert_eq!(reply["error"]["message"], "Unsupported protocol version");
        assert_eq!(reply["error"]["data"]["requested"], requested);
        let supported = reply["error"]["data"]["supported"].as_array().unwrap();
        assert_eq!(supported[0], "2026-07-28");
        assert!(supported.contains(&json!("2024-11-05")));
    }
}

#[test]
fn a_malformed_stateless_meta_is_invalid_params() {
    let no_capabilities = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    let not_a_string = json!({"io.modelcontextprotocol/protocolVersion": 20260728, "io.modelcontextprotocol/clientCapabilities": {}});
    let replies = run(
        ServerConfig::default(),
        &[
            evidence_call(1, good_arguments(), Some(no_capabilities)),
            evidence_call(2, good_arguments(), Some(not_a_string)),
        ],
    );
    for reply in &replies {
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
    }
    // `_meta` without a revision (a progress token) is not stateless.
    let replies = run(
        ServerConfig::default(),
        &[evidence_call(
            1,
            good_arguments(),
            Some(json!({"progressToken": 1})),
        )],
    );
    assert_eq!(replies[0]["result"]["content"][0]["type"], "json");
}

fn bad_arguments() -> Value {
    json!({"query": {"provider_id": "p", "check_id": 5}, "context": serde_json::from_str::<Value>(CONTEXT).unwrap()})
}

#[cfg(feature = "json-schema")]
#[test]
fn tool_input_errors_are_tool_results_from_2025_11_25_on() {
    for (revision, as_result) in [
        ("2024-11-05", false),
        ("2025-06-18", false),
        ("2025-11-25", true),
    ] {
        let replies = run(
            ServerConfig::default(),
            &[
                initialize(0, revision),
                evidence_call(1, bad_arguments(), None),
            ],
        );
        let reply = &replies[1];
        if as_result {
            let result = &reply["result"];
            assert_eq!(result["isError"], true, "{reply}");
            let error: Value =
                serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(error["code"], -32602);
            assert_eq!(error["message"], "Invalid tool input");
            assert_eq!(error["data"]["pointer"], "/query/check_id");
        } else {
            assert_eq!(reply["error"]["code"], -32602, "{revision}: {reply}");
            assert_eq!(reply["error"]["data"]["pointer"], "/query/check_id");
        }
    }
    // Stateless too.
    let replies = run(
        ServerConfig::default(),
        &[evidence_call(
            1,
            bad_arguments(),
            Some(modern_meta("2026-07-28")),
        )],
    );
    assert_eq!(replies[0]["result"]["isError"], true);
    assert_eq!(replies[0]["result"]["resultType"], "complete");
    // A member named twice is tool input too.
    let duplicate = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c","check_id":"d"},"context":{}}}}"#;
    let mut server = Server::new(ServerConfig::default());
    server.handle_input(&line(&initialize(0, "2025-11-25")));
    let mut framed = duplicate.to_vec();
    framed.push(b'\n');
    server.handle_input(&framed);
    let _ = server.poll_transmit();
    let reply: Value = serde_json::from_slice(&server.poll_transmit().unwrap()).unwrap();
    assert_eq!(reply["result"]["isError"], true, "{reply}");
}

#[test]
fn decision_gate_and_the_strict_policy_keep_the_jsonrpc_error() {
    let replies = run(
        ServerConfig::default(),
        &[evidence_call(1, bad_arguments(), None)],
    );
    assert_eq!(replies[0]["error"]["code"], -32602);
    let mut strict = ServerConfig::default();
    strict.policy = Policy::strict();
    let mut server = Server::new(strict);
    let call = json!({"jsonrpc": "2.0", "id": "a", "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    server.handle_input(&line(&call));
    let call = json!({"jsonrpc": "2.0", "id": "b", "method": "tools/call", "params": {"name": "evidence_query", "arguments": bad_arguments()}});
    server.handle_input(&line(&call));
    let _ = server.poll_transmit();
    let reply: Value = serde_json::from_slice(&server.poll_transmit().unwrap()).unwrap();
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
}

#[test]
fn resource_templates_and_cursors() {
    let replies = run(
        ServerConfig::default(),
        &[
            initialize(0, "2025-11-25"),
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/templates/list"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "abc"}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list", "params": {"cursor": "abc"}}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "resources/templates/list", "params": {"cursor": 1}}),
            json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": "x://nothing"}}),
        ],
    );
    assert_eq!(replies[1]["result"]["resourceTemplates"], json!([]));
    for reply in &replies[2..5] {
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert!(
            reply["error"]["data"]["detail"]
                .as_str()
                .unwrap()
                .contains("cursor")
        );
    }
    assert_eq!(replies[5]["error"]["code"], -32002);
    // Unknown resources are -32602 in the stateless revision.
    let replies = run(
        ServerConfig::default(),
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "x://nothing", "_meta": modern_meta("2026-07-28")}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "resources/templates/list", "params": {"_meta": modern_meta("2026-07-28")}}),
        ],
    );
    assert_eq!(replies[0]["error"]["code"], -32602);
    assert_eq!(replies[1]["result"]["resultType"], "complete");
    assert_eq!(replies[1]["result"]["ttlMs"], 0);
}
