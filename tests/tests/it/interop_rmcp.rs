//! Interop with rmcp, the official Rust MCP SDK (crates.io, a dependency of
//! this crate), both ways:
//!
//! - an rmcp client (`TokioChildProcess`, rmcp's own newline-delimited
//!   stdio transport) calling `evidence-wire serve` in each of rmcp's three
//!   lifecycles: `Initialize` (the handshake, negotiated at 2025-11-25),
//!   `Auto` (probe `server/discover`, which our server answers, so rmcp speaks
//!   the stateless 2026-07-28 without falling back) and `Discover` (a client
//!   that speaks only 2026-07-28). Each session runs `tools/list`,
//!   `tools/call evidence_query`, docs search, `resources/list`,
//!   `resources/read`, `resources/templates/list`, an unknown resource, bad
//!   arguments and an unknown tool, checked against what the negotiated
//!   revision prescribes (`interop_support::Revision`);
//! - our client (`ProcessProvider`, MCP handshake, newline framing) calling
//!   `src/bin/rmcp-provider.rs`, an rmcp stdio server that hashes with
//!   crates independent of ours.
//!
//! Nothing to install: rmcp is built by cargo, and `cargo test` builds the
//! `rmcp-provider` and `evidence-wire-cli` binaries of this package.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::interop_support;

use std::time::Duration;

use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
use evidence_wire::frame::Framing;
use evidence_wire_blocking::{ProcessConfig, ProcessProvider, ProviderError};
use evidence_wire_docs::{DocsLimits, DocsRegistry, SEARCH_TOOL_NAME};
use interop_support::{
    BAD_ARGUMENTS_POINTER, INVALID_TOOL_INPUT, Revision, TOOL_NOT_FOUND, TRIGGER_TIME,
    assert_time_now_evidence, cli_binary, expected_time_now_evidence, peer_context,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig as RmcpClientConfig, ProtocolVersion,
    ReadResourceRequestParams, ResultType,
};
use rmcp::service::{Peer, RoleClient};
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

/// The result fields of 2026-07-28 as rmcp read them off the wire (rmcp
/// leaves an absent field `None`): `resultType` on every result, `ttlMs` and
/// `cacheScope` on the cacheable ones; none of them in earlier revisions.
fn assert_result_fields<C, S>(
    revision: Revision,
    what: &str,
    result_type: &Option<ResultType>,
    cache: Option<(&Option<C>, &Option<S>)>,
) {
    if revision.is_stateless() {
        assert_eq!(
            result_type,
            &Some(ResultType::COMPLETE),
            "{what}: resultType"
        );
        if let Some((ttl, scope)) = cache {
            assert!(
                ttl.is_some() && scope.is_some(),
                "{what}: ttlMs and cacheScope"
            );
        }
    } else {
        assert_eq!(result_type, &None, "{what}: resultType in {}", revision.0);
        if let Some((ttl, scope)) = cache {
            assert!(
                ttl.is_none() && scope.is_none(),
                "{what}: cache hints in {}",
                revision.0
            );
        }
    }
}

/// The one text item of a tool result, parsed as JSON.
fn text_json(result: &CallToolResult, what: &str) -> Value {
    assert_eq!(result.content.len(), 1, "{what}: {result:?}");
    let text = result.content[0]
        .as_text()
        .map(|text| text.text.clone())
        .unwrap_or_else(|| panic!("{what}: not a text item: {result:?}"));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{what}: {error}: {text}"))
}

fn evidence_call(tenant_id: u64) -> CallToolRequestParams {
    let mut context = peer_context();
    context["tenant_id"] = json!(tenant_id);
    let arguments = json!({
        "query": {"provider_id": "evidence-wire", "check_id": "time_now"},
        "context": context
    });
    CallToolRequestParams::new("evidence_query").with_arguments(object(arguments))
}

/// The checks every rmcp session against our server runs, for a session
/// that negotiated `revision`. Returns the EvidenceResult of the evidence call.
async fn exercise(client: &Peer<RoleClient>, revision: Revision) -> Value {
    let info = client
        .peer_info()
        .expect("rmcp saw the initialize or discover result");
    assert_eq!(
        info.protocol_version.as_str(),
        revision.0,
        "negotiated revision"
    );
    let name = info.server_info.as_ref().map(|server| server.name.as_str());
    assert_eq!(name, Some("evidence-wire"));

    let page = client.list_tools(None).await.expect("tools/list");
    assert_result_fields(
        revision,
        "tools/list",
        &page.result_type,
        Some((&page.ttl_ms, &page.cache_scope)),
    );
    let names: Vec<&str> = page.tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert!(names.contains(&"evidence_query"), "{names:?}");
    assert!(names.contains(&SEARCH_TOOL_NAME), "{names:?}");
    for tool in &page.tools {
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
        assert_eq!(
            tool.output_schema.is_some(),
            revision.has_structured_content(),
            "outputSchema of {} in {}",
            tool.name,
            revision.0
        );
    }

    let result = client
        .call_tool(evidence_call(1))
        .await
        .expect("tools/call evidence_query");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_result_fields::<(), ()>(revision, "tools/call", &result.result_type, None);
    let evidence = text_json(&result, "evidence_query");
    assert_time_now_evidence(&evidence, "rmcp: the text item's EvidenceResult");
    if revision.has_structured_content() {
        assert_eq!(
            result.structured_content.as_ref(),
            Some(&evidence),
            "structuredContent"
        );
    } else {
        assert_eq!(
            result.structured_content, None,
            "structuredContent in {}",
            revision.0
        );
    }

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
        text_json(&search, "docs search"),
        registry
            .call_search(&search_arguments)
            .expect("registry search")
    );

    let resources = client.list_resources(None).await.expect("resources/list");
    assert_result_fields(
        revision,
        "resources/list",
        &resources.result_type,
        Some((&resources.ttl_ms, &resources.cache_scope)),
    );
    assert_eq!(resources.resources.len(), registry.docs().len());
    let first = resources.resources.first().expect("at least one resource");
    let read = client
        .read_resource(ReadResourceRequestParams::new(first.uri.clone()))
        .await
        .expect("resources/read");
    assert_result_fields(
        revision,
        "resources/read",
        &read.result_type,
        Some((&read.ttl_ms, &read.cache_scope)),
    );
    let contents = serde_json::to_value(&read.contents).expect("json");
    let doc = registry
        .docs()
        .iter()
        .find(|doc| doc.uri() == first.uri)
        .expect("listed uri is in the registry");
    assert_eq!(contents[0]["text"].as_str(), Some(doc.body()));
    assert_eq!(contents[0]["mimeType"], "text/markdown");

    let templates = client
        .list_resource_templates(None)
        .await
        .expect("resources/templates/list");
    assert!(templates.resource_templates.is_empty(), "{templates:?}");
    assert_result_fields(
        revision,
        "resources/templates/list",
        &templates.result_type,
        Some((&templates.ttl_ms, &templates.cache_scope)),
    );

    match client
        .read_resource(ReadResourceRequestParams::new(
            "decision-gate://docs/no-such-document",
        ))
        .await
    {
        Err(ServiceError::McpError(error)) => {
            assert_eq!(
                i64::from(error.code.0),
                revision.unknown_resource_code(),
                "{error:?}"
            );
        }
        other => panic!("an unknown resource must be a JSON-RPC error, got {other:?}"),
    }

    // Bad arguments (`tenant_id` 0): SEP-1303 from 2025-11-25 on.
    let (code, kind) = INVALID_TOOL_INPUT;
    let bad = client.call_tool(evidence_call(0)).await;
    if revision.input_errors_as_results() {
        let bad = bad.expect("bad arguments are a tool result");
        assert_eq!(bad.is_error, Some(true), "{bad:?}");
        assert_eq!(bad.structured_content, None, "{bad:?}");
        assert_result_fields::<(), ()>(revision, "failed tools/call", &bad.result_type, None);
        let error = text_json(&bad, "bad arguments");
        assert_eq!(error["code"], code, "{error}");
        assert_eq!(error["data"]["kind"], kind, "{error}");
        assert_eq!(error["data"]["pointer"], BAD_ARGUMENTS_POINTER, "{error}");
    } else {
        match bad {
            Err(ServiceError::McpError(error)) => {
                assert_eq!(i64::from(error.code.0), code, "{error:?}");
                let data = error.data.clone().unwrap_or_default();
                assert_eq!(data["pointer"], BAD_ARGUMENTS_POINTER, "{error:?}");
            }
            other => panic!(
                "bad arguments must be JSON-RPC -32602 in {}, got {other:?}",
                revision.0
            ),
        }
    }

    match client
        .call_tool(CallToolRequestParams::new("no_such_tool").with_arguments(Map::new()))
        .await
    {
        Err(ServiceError::McpError(error)) => {
            assert_eq!(i64::from(error.code.0), TOOL_NOT_FOUND, "{error:?}");
        }
        other => panic!("an unknown tool must be a JSON-RPC error, got {other:?}"),
    }
    evidence
}

fn serve_command() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(cli_binary());
    command.arg("serve");
    command
}

/// An rmcp session in `lifecycle` against `evidence-wire serve`, exercised
/// for `revision` and asked the same query twice.
fn session(lifecycle: ClientLifecycleMode, revision: Revision) {
    expected_time_now_evidence(); // built outside the runtime (it runs the CLI)
    runtime().block_on(async {
        let session = async {
            let transport =
                TokioChildProcess::new(serve_command()).expect("spawn evidence-wire serve");
            let client = RmcpClientConfig::default()
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .expect("rmcp connects");
            let first = exercise(&client, revision).await;
            let again = client
                .call_tool(evidence_call(1))
                .await
                .expect("second call");
            assert_eq!(
                text_json(&again, "second call"),
                first,
                "same query, same answer"
            );
            client.cancel().await.expect("close");
        };
        tokio::time::timeout(Duration::from_secs(120), session)
            .await
            .expect("the rmcp session finished in time");
    });
}

#[test]
fn rmcp_client_calls_our_server() {
    // rmcp's plain `serve()`: the handshake, asking for its newest revision;
    // the server answers its newest handshake revision, 2025-11-25.
    expected_time_now_evidence();
    runtime().block_on(async {
        let session = async {
            let transport =
                TokioChildProcess::new(serve_command()).expect("spawn evidence-wire serve");
            let client = ().serve(transport).await.expect("rmcp initialize handshake");
            exercise(&client, Revision::V2025_11_25).await;
            client.cancel().await.expect("close");
        };
        tokio::time::timeout(Duration::from_secs(120), session)
            .await
            .expect("the rmcp session finished in time");
    });
}

#[test]
fn rmcp_auto_lifecycle_discovers_2026_07_28() {
    // The probe is answered, so rmcp adopts 2026-07-28 and never sends
    // `initialize` (it would fall back to 2025-11-25 on an error or after
    // 10 s of silence, and the negotiated revision would say so).
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    session(lifecycle, Revision::V2026_07_28);
}

#[test]
fn rmcp_discover_lifecycle_speaks_2026_07_28() {
    // A client that speaks only 2026-07-28: rmcp's `Discover` never falls back.
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    session(lifecycle, Revision::V2026_07_28);
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
