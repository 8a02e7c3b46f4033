//! Interop with rmcp, the official Rust MCP SDK (crates.io, a dependency of
//! this crate), both ways:
//!
//! - an rmcp client (`TokioChildProcess`, rmcp's own newline-delimited
//!   stdio transport) calling `evidence-wire serve`: the legacy `initialize`
//!   handshake and rmcp's `Auto` lifecycle (probe `server/discover`, fall
//!   back to `initialize`), `tools/list`, `tools/call evidence_query`, docs
//!   search, `resources/list` / `resources/read`, an unknown tool;
//! - our client (`ProcessProvider`, MCP handshake, newline framing) calling
//!   `src/bin/rmcp-provider.rs`, an rmcp stdio server that hashes with
//!   crates independent of ours.
//!
//! Nothing to install: rmcp is built by cargo, and `cargo test` builds the
//! `rmcp-provider` and `evidence-wire-cli` binaries of this package.

mod interop_support;

use std::time::{Duration, Instant};

use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
use evidence_wire::frame::Framing;
use evidence_wire_blocking::{ProcessConfig, ProcessProvider, ProviderError};
use evidence_wire_docs::{DocsLimits, DocsRegistry, SEARCH_TOOL_NAME};
use interop_support::{
    TRIGGER_TIME, assert_time_now_evidence, cli_binary, expected_time_now_evidence, peer_context,
};
use rmcp::model::{
    CallToolRequestParams, ClientConfig as RmcpClientConfig, ProtocolVersion,
    ReadResourceRequestParams,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceError, ServiceExt};
use serde_json::{Map, Value, json};

const HASH_OBJECT: &str = "c831e95a8fc9805621f8ae15b07b11ebae6d9d1cece66d891bf3152bf6cf2ed7";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|error| panic!("tokio runtime: {error}"))
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// The checks every rmcp session against our server runs.
/// Returns the `structuredContent` of the evidence call.
async fn exercise(client: &RunningService<RoleClient, ()>) -> Option<Value> {
    let info = client.peer_info().expect("rmcp saw the initialize result");
    let name = info.server_info.as_ref().map(|server| server.name.as_str());
    assert_eq!(name, Some("evidence-wire"));

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert!(names.contains(&"evidence_query"), "{names:?}");
    assert!(names.contains(&SEARCH_TOOL_NAME), "{names:?}");
    for tool in &tools {
        assert_eq!(
            tool.input_schema.get("type"),
            Some(&json!("object")),
            "{}",
            tool.name
        );
        assert!(
            tool.description
                .as_deref()
                .is_some_and(|text| !text.is_empty())
        );
    }

    let arguments = json!({
        "query": {"provider_id": "evidence-wire", "check_id": "time_now"},
        "context": peer_context()
    });
    let result = client
        .call_tool(CallToolRequestParams::new("evidence_query").with_arguments(object(arguments)))
        .await
        .expect("tools/call evidence_query");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let structured = result
        .structured_content
        .clone()
        .expect("structuredContent");
    assert_time_now_evidence(&structured, "rmcp structuredContent");
    let text = result
        .content
        .first()
        .and_then(|item| item.as_text())
        .map(|text| text.text.clone())
        .expect("a text item");
    assert_eq!(
        serde_json::from_str::<Value>(&text).ok(),
        Some(structured.clone())
    );

    let registry = DocsRegistry::with_default_corpus(DocsLimits::default()).expect("docs corpus");
    let search_arguments = json!({"query": "evidence hash", "max_sections": 2});
    let search = client
        .call_tool(
            CallToolRequestParams::new(SEARCH_TOOL_NAME)
                .with_arguments(object(search_arguments.clone())),
        )
        .await
        .expect("docs search");
    assert_eq!(
        search.structured_content,
        Some(
            registry
                .call_search(&search_arguments)
                .expect("registry search")
        )
    );

    let resources = client.list_all_resources().await.expect("resources/list");
    assert_eq!(resources.len(), registry.docs().len());
    let first = resources.first().expect("at least one resource");
    let read = client
        .read_resource(ReadResourceRequestParams::new(first.uri.clone()))
        .await
        .expect("resources/read");
    let contents = serde_json::to_value(&read.contents).expect("json");
    let doc = registry
        .docs()
        .iter()
        .find(|doc| doc.uri() == first.uri)
        .expect("listed uri is in the registry");
    assert_eq!(contents[0]["text"].as_str(), Some(doc.body()));
    assert_eq!(contents[0]["mimeType"], "text/markdown");

    match client
        .call_tool(CallToolRequestParams::new("no_such_tool").with_arguments(Map::new()))
        .await
    {
        Err(ServiceError::McpError(error)) => assert_eq!(error.code.0, -32001, "{error:?}"),
        other => panic!("an unknown tool must be a JSON-RPC error, got {other:?}"),
    }
    Some(structured)
}

fn serve_command() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(cli_binary());
    command.arg("serve");
    command
}

#[test]
fn rmcp_client_calls_our_server() {
    expected_time_now_evidence(); // built outside the runtime (it runs the CLI)
    runtime().block_on(async {
        let session = async {
            let transport =
                TokioChildProcess::new(serve_command()).expect("spawn evidence-wire serve");
            let client = ().serve(transport).await.expect("rmcp initialize handshake");
            let first = exercise(&client).await;
            let again = client
                .call_tool(
                    CallToolRequestParams::new("evidence_query").with_arguments(object(json!({
                        "query": {"provider_id": "evidence-wire", "check_id": "time_now"},
                        "context": peer_context()
                    }))),
                )
                .await
                .expect("second call");
            assert_eq!(again.structured_content, first, "same query, same answer");
            client.cancel().await.expect("close");
        };
        tokio::time::timeout(Duration::from_secs(120), session)
            .await
            .expect("the rmcp session finished in time");
    });
}

#[test]
fn rmcp_auto_lifecycle_falls_back_to_initialize() {
    runtime().block_on(async {
        let session = async {
            let transport =
                TokioChildProcess::new(serve_command()).expect("spawn evidence-wire serve");
            let started = Instant::now();
            let lifecycle = ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            };
            let client = RmcpClientConfig::default()
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .expect("server/discover probe, then initialize");
            // rmcp falls back on its own after 10 s of silence; a prompt
            // -32601 to `server/discover` makes the fallback immediate.
            eprintln!("rmcp Auto lifecycle connected in {:?}", started.elapsed());
            let info = client.peer_info().expect("initialize result");
            assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
            let tools = client.list_all_tools().await.expect("tools/list");
            assert!(tools.iter().any(|tool| tool.name == "evidence_query"));
            client.cancel().await.expect("close");
        };
        tokio::time::timeout(Duration::from_secs(120), session)
            .await
            .expect("the rmcp session finished in time");
    });
}

/// The `rmcp-provider` peer (src/bin/rmcp-provider.rs), built by `cargo test`.
fn rmcp_provider() -> String {
    env!("CARGO_BIN_EXE_rmcp-provider").to_owned()
}

fn ask(provider: &ProcessProvider, check: &str, value: Value) -> Result<Value, ProviderError> {
    let query = EvidenceQuery::new("rmcp", check).with_params(json!({"value": value}));
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(TRIGGER_TIME));
    provider
        .query(query, context)
        .map(|verified| serde_json::to_value(verified.result()).unwrap_or_default())
}

#[test]
fn our_client_calls_an_rmcp_server() {
    let mut client = ClientConfig::default();
    client.framing = Framing::NewlineDelimited;
    client.handshake = true;
    client.request_timeout_ms = 30_000;
    let provider =
        ProcessProvider::spawn(ProcessConfig::new(vec![rmcp_provider()]).with_client(client))
            .unwrap_or_else(|error| panic!("cannot start rmcp-provider: {error}"));

    let object = ask(
        &provider,
        "echo",
        json!({"status": "approved", "count": 42}),
    )
    .expect("echo");
    assert_eq!(object["evidence_hash"]["value"], HASH_OBJECT);
    assert_eq!(
        object["value"]["value"],
        json!({"status": "approved", "count": 42})
    );

    match ask(&provider, "bad_hash", json!("hello")) {
        Err(ProviderError::Query(QueryError::Verification(error))) => {
            assert_eq!(error.kind(), "hash_mismatch");
        }
        other => panic!("a wrong hash must be rejected, got {other:?}"),
    }
    match ask(&provider, "nope", json!(null)) {
        Err(ProviderError::Query(QueryError::Provider { code, .. })) => assert_eq!(code, -32602),
        other => panic!("expected rmcp's invalid-params error, got {other:?}"),
    }

    // Several in flight at once on rmcp's transport.
    let threads: Vec<_> = (0..8)
        .map(|index| {
            let provider = provider.clone();
            std::thread::spawn(move || ask(&provider, "echo", json!(index)))
        })
        .collect();
    for (index, thread) in threads.into_iter().enumerate() {
        let answer = thread.join().expect("thread").expect("pipelined echo");
        assert_eq!(answer["value"]["value"], json!(index));
    }
}
