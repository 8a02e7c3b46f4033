//! Interop with vscode-jsonrpc (npm; Microsoft's implementation of the LSP
//! base protocol, the reference Content-Length framing), both ways:
//!
//! - as a client (`tests/peers/vscode_client.mjs`) driving `evidence-wire
//!   serve` over Content-Length: Decision Gate dialect with pipelined calls,
//!   errors, a notification and a clean exit at end of input; then the MCP
//!   dialect after `initialize`;
//! - as a server (`tests/peers/vscode_server.mjs`) that our client queries
//!   through `ProcessProvider` and the CLI, in all three result shapes our
//!   client accepts (json item, structuredContent, JSON text), with and
//!   without the MCP handshake.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::interop_support;

use std::process::Command;
use std::time::Duration;

use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
use evidence_wire::frame::Framing;
use evidence_wire_blocking::{ProcessConfig, ProcessProvider, ProviderError};
use interop_support::{
    HASH_OF_TRIGGER_TIME, PEER_TIMEOUT, TRIGGER_TIME, assert_time_now_evidence, cli_binary,
    peer_script, peers_node, run,
};
use serde_json::{Value, json};

/// wire-facts §1 (computed by Decision Gate's code).
const HASH_HELLO_JSON: &str = "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a";
const HASH_HELLO_BYTES: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
const HASH_OBJECT: &str = "c831e95a8fc9805621f8ae15b07b11ebae6d9d1cece66d891bf3152bf6cf2ed7";

#[test]
fn vscode_jsonrpc_client_drives_our_server() {
    let Some(node) = peers_node() else { return };
    let mut command = Command::new(node);
    command
        .arg(peer_script("vscode_client.mjs"))
        .args([&cli_binary(), "serve"]);
    let output = run(&mut command, b"", PEER_TIMEOUT);
    let report = output.report("the vscode-jsonrpc client");

    let dg = &report["decision_gate"];
    let times: Vec<Value> = dg["pipelined"]
        .as_array()
        .map(|answers| {
            answers
                .iter()
                .map(|answer| answer["evidence"]["value"]["value"].clone())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        times,
        vec![
            json!(TRIGGER_TIME),
            json!(1_710_000_000_001_i64),
            json!(1_700_000_000_000_i64)
        ],
        "pipelined answers matched to their requests: {report:#}"
    );
    assert_eq!(dg["pipelined"][0]["computed_hash"], HASH_OF_TRIGGER_TIME);
    assert_time_now_evidence(
        &dg["pipelined"][0]["evidence"],
        "Decision Gate dialect json item",
    );
    assert_eq!(
        dg["unknown_tool"]["code"], -32001,
        "TOOL_NOT_FOUND: {report:#}"
    );
    assert_eq!(
        dg["unknown_method"]["code"], -32601,
        "method not found: {report:#}"
    );
    assert_eq!(
        dg["after_notification"]["result"],
        json!({}),
        "ping after a notification: {report:#}"
    );
    assert_eq!(
        dg["exit"],
        json!({"code": 0, "signal": null}),
        "clean exit at end of input"
    );
    assert_eq!(
        dg["unexpected"],
        json!([]),
        "nothing unasked-for on the stream: {report:#}"
    );

    let mcp = &report["mcp"];
    assert_eq!(mcp["initialize"]["protocolVersion"], "2025-06-18");
    assert_eq!(mcp["initialize"]["serverInfo"]["name"], "evidence-wire");
    assert_eq!(mcp["content_types"], json!(["text"]));
    assert_time_now_evidence(&mcp["evidence"], "MCP dialect structuredContent");
    assert_eq!(mcp["exit"], json!({"code": 0, "signal": null}));
    assert_eq!(mcp["unexpected"], json!([]), "{report:#}");
}

fn vscode_provider(node: &str, shape: &str, handshake: bool) -> ProcessProvider {
    let mut client = ClientConfig::default();
    client.framing = Framing::ContentLength;
    client.handshake = handshake;
    client.request_timeout_ms = 30_000;
    let command = vec![
        node.to_owned(),
        peer_script("vscode_server.mjs"),
        "--shape".to_owned(),
        shape.to_owned(),
    ];
    ProcessProvider::spawn(ProcessConfig::new(command).with_client(client))
        .unwrap_or_else(|error| panic!("cannot start the vscode-jsonrpc provider: {error}"))
}

fn ask(provider: &ProcessProvider, check: &str, params: Value) -> Result<Value, ProviderError> {
    let query = EvidenceQuery::new("vscode", check).with_params(params);
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(TRIGGER_TIME));
    provider
        .query(query, context)
        .map(|verified| serde_json::to_value(verified.result()).unwrap_or_default())
}

#[test]
fn our_client_queries_a_vscode_jsonrpc_server() {
    let Some(node) = peers_node() else { return };
    for (shape, handshake) in [
        ("json", false),
        ("structured", true),
        ("text", true),
        ("json", true),
    ] {
        let case = format!("shape {shape}, handshake {handshake}");
        let provider = vscode_provider(&node, shape, handshake);

        let hello = ask(&provider, "echo", json!({"value": "hello"}))
            .unwrap_or_else(|error| panic!("{case}: {error}"));
        assert_eq!(
            hello["value"],
            json!({"kind": "json", "value": "hello"}),
            "{case}"
        );
        assert_eq!(hello["evidence_hash"]["value"], HASH_HELLO_JSON, "{case}");

        let object = ask(
            &provider,
            "echo",
            json!({"value": {"status": "approved", "count": 42}}),
        )
        .unwrap_or_else(|error| panic!("{case}: {error}"));
        assert_eq!(object["evidence_hash"]["value"], HASH_OBJECT, "{case}");

        let bytes = ask(&provider, "echo_bytes", json!({"text": "hello"}))
            .unwrap_or_else(|error| panic!("{case}: {error}"));
        assert_eq!(
            bytes["value"],
            json!({"kind": "bytes", "value": [104, 101, 108, 108, 111]})
        );
        assert_eq!(bytes["evidence_hash"]["value"], HASH_HELLO_BYTES, "{case}");

        match ask(&provider, "bad_hash", json!({"value": "hello"})) {
            Err(ProviderError::Query(QueryError::Verification(error))) => {
                assert_eq!(error.kind(), "hash_mismatch", "{case}");
            }
            other => panic!("{case}: a wrong hash must be rejected, got {other:?}"),
        }
        match ask(&provider, "rpc_error", json!({})) {
            Err(ProviderError::Query(QueryError::Provider { code, .. })) => {
                assert_eq!(code, -32602, "{case}");
            }
            other => panic!("{case}: expected the provider's JSON-RPC error, got {other:?}"),
        }
        // Pipelined: several queries in flight on the one connection.
        let threads: Vec<_> = (0..8)
            .map(|index| {
                let provider = provider.clone();
                std::thread::spawn(move || ask(&provider, "echo", json!({"value": index})))
            })
            .collect();
        for (index, thread) in threads.into_iter().enumerate() {
            let answer = thread
                .join()
                .unwrap_or_else(|_| panic!("{case}: query thread panicked"))
                .unwrap_or_else(|error| panic!("{case}: pipelined query {index}: {error}"));
            assert_eq!(answer["value"]["value"], json!(index), "{case}");
        }
    }
}

#[test]
fn cli_queries_a_vscode_jsonrpc_server() {
    let Some(node) = peers_node() else { return };
    let mut command = Command::new(cli_binary());
    command
        .args(["query", "--provider-id", "vscode", "--check", "echo"])
        .args([
            "--params",
            r#"{"value":"hello"}"#,
            "--handshake",
            "--framing",
            "content-length",
        ])
        .args(["--timeout-ms", "30000", "--command", &node, "--"])
        .arg(peer_script("vscode_server.mjs"));
    let output = run(&mut command, b"", Duration::from_secs(90));
    assert_eq!(output.code(), Some(0), "{output:?}");
    let result: Value = serde_json::from_str(&output.stdout).unwrap_or_default();
    assert_eq!(
        result["evidence_hash"]["value"], HASH_HELLO_JSON,
        "{output:?}"
    );
}
