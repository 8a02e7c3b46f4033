//! The docs surface through `core::server::Server`, bytes in and bytes
//! out: each `[docs]` toggle's effect on `tools/list`, `tools/call` and
//! `resources/*`, and search answers on the wire.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::sync::Arc;

use evidence_wire::server::{Server, ServerConfig};
use evidence_wire_config::DocsConfig;
use evidence_wire_docs::{DocsLimits, DocsRegistry, DocsSurface, SEARCH_TOOL_NAME};
use serde_json::{Value, json};

/// A server with the docs surface `docs` describes.
fn server_with(docs: &DocsConfig) -> Server {
    let (surface, warnings) = DocsSurface::from_config(docs).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let mut config = ServerConfig::default();
    surface.install(&mut config);
    Server::new(config)
}

fn docs_config(enabled: bool, search: bool, resources: bool) -> DocsConfig {
    let mut docs = DocsConfig::default();
    docs.enabled = enabled;
    docs.enable_search = search;
    docs.enable_resources = resources;
    docs
}

/// Sends one newline-delimited request and returns the raw answer bytes.
/// The answer is returned as text (JSON is UTF-8), compared byte for byte.
fn exchange(server: &mut Server, request: &Value) -> String {
    let mut line = serde_json::to_vec(request).unwrap();
    line.push(b'\n');
    server.handle_input(&line);
    let mut out = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        out.extend_from_slice(&bytes);
    }
    assert_eq!(out.last(), Some(&b'\n'), "one framed answer");
    String::from_utf8(out).unwrap()
}

fn answer(server: &mut Server, request: &Value) -> Value {
    serde_json::from_str(&exchange(server, request)).unwrap()
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn tool_names(server: &mut Server) -> Vec<String> {
    let listing = answer(server, &request(1, "tools/list", json!({})));
    listing["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

fn search_call(id: u64, arguments: Value) -> Value {
    request(
        id,
        "tools/call",
        json!({"name": SEARCH_TOOL_NAME, "arguments": arguments}),
    )
}

fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

#[test]
fn default_config_serves_search_and_resources() {
    let mut server = server_with(&DocsConfig::default());
    assert_eq!(
        tool_names(&mut server),
        ["evidence_query", SEARCH_TOOL_NAME]
    );

    let result = answer(
        &mut server,
        &search_call(2, json!({"query": "framing limits"})),
    );
    let content = &result["result"]["content"][0];
    assert_eq!(
        content["type"], "json",
        "Decision Gate dialect before initialize"
    );
    let sections = content["json"]["sections"].as_array().unwrap();
    assert_eq!(sections.len(), 3);

    let listed = answer(&mut server, &request(3, "resources/list", json!({})));
    let resources = listed["result"]["resources"].as_array().unwrap();
    let registry = DocsRegistry::with_default_corpus(DocsLimits::default()).unwrap();
    assert_eq!(resources.len(), registry.docs().len());
    for (entry, doc) in resources.iter().zip(registry.docs()) {
        assert_eq!(entry["uri"], doc.uri());
        assert_eq!(entry["name"], doc.id());
        assert_eq!(entry["mimeType"], "text/markdown");
    }

    let read = answer(
        &mut server,
        &request(
            4,
            "resources/read",
            json!({"uri": "decision-gate://docs/framing"}),
        ),
    );
    let framing = registry.doc("framing").unwrap();
    assert_eq!(read["result"]["contents"][0]["text"], framing.body());

    let missing = answer(
        &mut server,
        &request(
            5,
            "resources/read",
            json!({"uri": "decision-gate://docs/../secrets"}),
        ),
    );
    assert_eq!(error_code(&missing), -32002, "RESOURCE_NOT_FOUND");
}

#[test]
fn search_answers_are_identical_bytes_every_time() {
    let call = search_call(
        7,
        json!({"query": "which dialect should a caller speak", "max_sections": 4}),
    );
    let mut first = server_with(&DocsConfig::default());
    let mut second = server_with(&DocsConfig::default());
    let a = exchange(&mut first, &call);
    let b = exchange(&mut first, &call);
    let c = exchange(&mut second, &call);
    assert_eq!(a, b);
    assert_eq!(a, c);
}

#[test]
fn mcp_dialect_carries_structured_content() {
    let mut server = server_with(&DocsConfig::default());
    let init = answer(
        &mut server,
        &request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        ),
    );
    assert!(init["result"]["capabilities"]["resources"].is_object());
    let result = answer(&mut server, &search_call(2, json!({"query": ""})));
    let structured = &result["result"]["structuredContent"];
    assert_eq!(structured["sections"].as_array().unwrap().len(), 4);
    let text = result["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(text).unwrap(), *structured);
    assert_eq!(result["result"]["isError"], false);
}

#[test]
fn invalid_search_arguments_are_invalid_tool_input() {
    let mut server = server_with(&DocsConfig::default());
    for arguments in [
        json!({}),
        json!({"query": 1}),
        json!({"query": "x", "max_sections": 0}),
        json!({"query": "x", "max_sections": 11}),
        json!({"query": "x", "extra": true}),
        json!({"query": "x".repeat(1025)}),
    ] {
        let reply = answer(&mut server, &search_call(9, arguments.clone()));
        assert_eq!(error_code(&reply), -32602, "{arguments}");
    }
}

#[test]
fn disabled_search_removes_the_tool() {
    let mut server = server_with(&docs_config(true, false, true));
    assert_eq!(tool_names(&mut server), ["evidence_query"]);
    let call = search_call(3, json!({"query": "framing"}));
    let hidden = exchange(&mut server, &call);
    // Exactly what a server that never had the tool answers.
    let mut bare = Server::new(ServerConfig::default());
    let unknown = exchange(&mut bare, &call);
    assert_eq!(hidden, unknown);
    let reply: Value = serde_json::from_str(&hidden).unwrap();
    assert_eq!(error_code(&reply), -32001, "TOOL_NOT_FOUND");
    // Resources are still served.
    let listed = answer(&mut server, &request(4, "resources/list", json!({})));
    assert!(!listed["result"]["resources"].as_array().unwrap().is_empty());
}

#[test]
fn disabled_resources_answer_method_not_found() {
    let mut server = server_with(&docs_config(true, true, false));
    assert_eq!(
        tool_names(&mut server),
        ["evidence_query", SEARCH_TOOL_NAME]
    );
    for (method, params) in [
        ("resources/list", json!({})),
        (
            "resources/read",
            json!({"uri": "decision-gate://docs/framing"}),
        ),
    ] {
        let reply = answer(&mut server, &request(5, method, params));
        assert_eq!(error_code(&reply), -32601, "{method} is METHOD_NOT_FOUND");
    }
    let init = answer(
        &mut server,
        &request(
            6,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
        ),
    );
    assert!(init["result"]["capabilities"].get("resources").is_none());
    // Search still works.
    let result = answer(&mut server, &search_call(7, json!({"query": "framing"})));
    assert_eq!(result["result"]["isError"], false);
}

#[test]
fn disabled_docs_remove_everything() {
    // The master switch wins over the two others.
    let mut server = server_with(&docs_config(false, true, true));
    assert_eq!(tool_names(&mut server), ["evidence_query"]);
    let hidden = exchange(&mut server, &search_call(8, json!({"query": "x"})));
    let mut bare = Server::new(ServerConfig::default());
    assert_eq!(
        hidden,
        exchange(&mut bare, &search_call(8, json!({"query": "x"})))
    );
    for method in ["resources/list", "resources/read"] {
        let reply = answer(
            &mut server,
            &request(9, method, json!({"uri": "decision-gate://docs/framing"})),
        );
        assert_eq!(error_code(&reply), -32601, "{method}");
    }
}

#[test]
fn both_toggles_off_equal_docs_off() {
    let calls = [
        request(1, "tools/list", json!({})),
        search_call(2, json!({"query": "framing"})),
        request(3, "resources/list", json!({})),
        request(
            4,
            "resources/read",
            json!({"uri": "decision-gate://docs/framing"}),
        ),
    ];
    let mut off = server_with(&docs_config(false, true, true));
    let mut both_off = server_with(&docs_config(true, false, false));
    for call in &calls {
        assert_eq!(
            exchange(&mut off, call),
            exchange(&mut both_off, call),
            "{call}"
        );
    }
}

#[test]
fn max_sections_config_caps_tool_answers() {
    let mut docs = DocsConfig::default();
    docs.max_sections = 2;
    let mut server = server_with(&docs);
    let result = answer(
        &mut server,
        &search_call(
            1,
            json!({"query": "error frame message provider", "max_sections": 10}),
        ),
    );
    assert_eq!(
        result["result"]["content"][0]["json"]["sections"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn without_default_docs_only_extra_documents_are_served() {
    let mut docs = DocsConfig::default();
    docs.include_default_docs = false;
    let (surface, _) = DocsSurface::from_config(&docs).unwrap();
    assert!(surface.registry().docs().is_empty());
    let mut config = ServerConfig::default();
    surface.install(&mut config);
    let mut server = Server::new(config);
    let listed = answer(&mut server, &request(1, "resources/list", json!({})));
    assert_eq!(listed["result"]["resources"], json!([]));
    let result = answer(&mut server, &search_call(2, json!({"query": "framing"})));
    assert_eq!(
        result["result"]["content"][0]["json"]["sections"],
        json!([])
    );
}

#[test]
fn one_registry_backs_many_servers() {
    // The docs are installed once, into a shared configuration; every
    // connection of it shares the one registry (one more reference, held by
    // the search tool, however many connections there are).
    let (surface, _) = DocsSurface::from_config(&DocsConfig::default()).unwrap();
    let before = Arc::strong_count(surface.registry());
    let mut config = ServerConfig::default();
    surface.install(&mut config);
    let config = Arc::new(config);
    let mut servers: Vec<Server> = (0..3).map(|_| Server::new(Arc::clone(&config))).collect();
    assert_eq!(Arc::strong_count(surface.registry()), before + 1);
    let call = search_call(1, json!({"query": "canonical errors"}));
    let answers: Vec<String> = servers
        .iter_mut()
        .map(|server| exchange(server, &call))
        .collect();
    assert!(answers.windows(2).all(|pair| pair[0] == pair[1]));
}

#[test]
fn content_length_framing_gets_the_same_answers() {
    let calls = [
        request(1, "tools/list", json!({})),
        search_call(2, json!({"query": "framing limits"})),
        request(
            3,
            "resources/read",
            json!({"uri": "decision-gate://docs/errors"}),
        ),
    ];
    for docs in [
        docs_config(true, true, true),
        docs_config(true, false, false),
    ] {
        let mut lines = server_with(&docs);
        let mut framed = server_with(&docs);
        for call in &calls {
            let line = exchange(&mut lines, call);
            let body = serde_json::to_vec(call).unwrap();
            let mut input = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
            input.extend_from_slice(&body);
            framed.handle_input(&input);
            let mut out = Vec::new();
            while let Some(bytes) = framed.poll_transmit() {
                out.extend_from_slice(&bytes);
            }
            let out = String::from_utf8(out).unwrap();
            let expected = line.trim_end_matches('\n');
            assert_eq!(
                out,
                format!("Content-Length: {}\r\n\r\n{expected}", expected.len()),
                "{call}"
            );
        }
    }
}
