//! Tool visibility (`[server.tools]`) and authorization
//! (`[server.auth] allowed_tools`) through `evidence_wire::server::Server`, bytes in
//! and bytes out: filter vs passthrough, allowlist and denylist, hidden
//! tools answered byte-for-byte like unknown ones, `FORBIDDEN` only for
//! visible tools.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use evidence_wire::server::{Server, ServerConfig, ServerEvent, ToolDefinition};
use evidence_wire_config::Config;
use evidence_wire_config::policy::{Decision, PolicyError, ToolPolicy, VisibilityMode};
use evidence_wire_docs::{DocsSurface, SEARCH_TOOL_NAME};
use serde_json::{Value, json};

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|name| (*name).to_owned()).collect()
}

fn tool(name: &str) -> ToolDefinition {
    ToolDefinition {
        name: name.to_owned(),
        description: format!("The {name} tool."),
        input_schema: json!({"type": "object"}),
        output_schema: None,
    }
}

/// A server with `evidence_query`, the docs search tool and the tools
/// `registered`, under `policy`.
fn server(policy: &ToolPolicy, registered: &[&str]) -> Server {
    let mut config = ServerConfig::default();
    policy.apply(&mut config);
    let (docs, _) = DocsSurface::from_config(&Default::default()).unwrap();
    docs.install(&mut config);
    for name in registered {
        config.add_tool(tool(name));
    }
    Server::new(config)
}

/// The answer is returned as text (JSON is UTF-8), compared byte for byte.
fn exchange(server: &mut Server, request: &Value) -> String {
    let mut line = serde_json::to_vec(request).unwrap();
    line.push(b'\n');
    server.handle_input(&line);
    let mut out = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        out.extend_from_slice(&bytes);
    }
    String::from_utf8(out).unwrap()
}

fn answer(server: &mut Server, request: &Value) -> Value {
    serde_json::from_str(&exchange(server, request)).unwrap()
}

fn list(server: &mut Server) -> Vec<String> {
    let reply = answer(
        server,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    reply["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

fn call(id: u64, name: &str) -> Value {
    let arguments = if name == SEARCH_TOOL_NAME {
        json!({"query": "framing"})
    } else if name == "evidence_query" {
        json!({
            "query": {"provider_id": "p", "check_id": "c"},
            "context": {
                "tenant_id": 1, "namespace_id": 1, "run_id": "r", "scenario_id": "s",
                "stage_id": "st", "trigger_id": "t",
                "trigger_time": {"kind": "unix_millis", "value": 0}
            }
        })
    } else {
        json!({})
    };
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

/// True when calling `name` was accepted (an event or a result came out).
/// Each call gets a fresh id: accepted calls stay in flight.
fn accepted(server: &mut Server, name: &str) -> bool {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1000);
    let reply = exchange(server, &call(NEXT_ID.fetch_add(1, Ordering::Relaxed), name));
    let mut event = false;
    while let Some(next) = server.poll_event() {
        if matches!(
            next,
            ServerEvent::ToolCall { .. } | ServerEvent::EvidenceQuery { .. }
        ) {
            event = true;
        }
    }
    if event {
        return true;
    }
    let reply: Value = serde_json::from_str(&reply).unwrap();
    reply.get("result").is_some()
}

const ALL: [&str; 4] = ["evidence_query", SEARCH_TOOL_NAME, "alpha", "beta"];

#[test]
fn decision_table() {
    let policy = ToolPolicy::new(
        VisibilityMode::Filter,
        &[],
        &names(&["beta"]),
        Some(&names(&["evidence_query"])),
    )
    .unwrap();
    assert_eq!(policy.decide("nope", false), Decision::NotFound);
    assert_eq!(policy.decide("beta", true), Decision::NotFound);
    assert_eq!(policy.decide("alpha", true), Decision::Forbidden);
    assert_eq!(policy.decide("evidence_query", true), Decision::Allow);
    assert_eq!(
        Decision::NotFound.error().map(|error| error.jsonrpc_code()),
        Some(-32001)
    );
    assert_eq!(
        Decision::Forbidden
            .error()
            .map(|error| error.jsonrpc_code()),
        Some(-32003)
    );
    assert_eq!(Decision::Allow.error(), None);
}

#[test]
fn default_policy_shows_and_allows_everything() {
    let policy = ToolPolicy::allow_all();
    let mut server = server(&policy, &["alpha", "beta"]);
    assert_eq!(list(&mut server), ALL);
    for name in ALL {
        assert!(accepted(&mut server, name), "{name}");
    }
}

#[test]
fn allowlist_defines_the_visible_set() {
    let policy = ToolPolicy::new(
        VisibilityMode::Filter,
        &names(&["evidence_query", "alpha"]),
        &[],
        None,
    )
    .unwrap();
    let mut server = server(&policy, &["alpha", "beta"]);
    assert_eq!(list(&mut server), ["evidence_query", "alpha"]);
    assert!(accepted(&mut server, "alpha"));
    assert!(accepted(&mut server, "evidence_query"));
    assert!(!accepted(&mut server, "beta"));
    assert!(!accepted(&mut server, SEARCH_TOOL_NAME));
}

#[test]
fn denylist_wins_over_allowlist() {
    let policy = ToolPolicy::new(
        VisibilityMode::Filter,
        &names(&["alpha", "beta"]),
        &names(&["beta"]),
        None,
    )
    .unwrap();
    let mut server = server(&policy, &["alpha", "beta"]);
    assert_eq!(list(&mut server), ["alpha"]);
    assert!(!accepted(&mut server, "beta"));
    assert!(!accepted(&mut server, "evidence_query"));

    let deny_only = ToolPolicy::new(
        VisibilityMode::Filter,
        &[],
        &names(&[SEARCH_TOOL_NAME]),
        None,
    )
    .unwrap();
    let mut server = self::server(&deny_only, &["alpha", "beta"]);
    assert_eq!(list(&mut server), ["evidence_query", "alpha", "beta"]);
    assert!(!accepted(&mut server, SEARCH_TOOL_NAME));
}

#[test]
fn hidden_tool_is_answered_exactly_like_an_unknown_tool() {
    let hiding = ToolPolicy::new(VisibilityMode::Filter, &[], &names(&["beta"]), None).unwrap();
    let mut hidden = server(&hiding, &["alpha", "beta"]);
    let mut absent = server(&ToolPolicy::allow_all(), &["alpha"]);
    for request in [
        call(3, "beta"),
        call(4, "beta"),
        json!({"jsonrpc": "2.0", "id": "s", "method": "tools/call", "params": {"name": "beta"}}),
    ] {
        let a = exchange(&mut hidden, &request);
        let b = exchange(&mut absent, &request);
        assert!(!a.is_empty());
        assert_eq!(a, b, "{request}");
        let reply: Value = serde_json::from_str(&a).unwrap();
        assert_eq!(reply["error"]["code"], -32001);
    }
    // The listing is also the one of a server without the tool.
    assert_eq!(list(&mut hidden), list(&mut absent));

    // A hidden docs search tool is the same as a disabled one.
    let deny_search = ToolPolicy::new(
        VisibilityMode::Filter,
        &[],
        &names(&[SEARCH_TOOL_NAME]),
        None,
    )
    .unwrap();
    let mut hidden = server(&deny_search, &[]);
    let mut config = ServerConfig::default();
    let mut docs = evidence_wire_config::DocsConfig::default();
    docs.enable_search = false;
    let (surface, _) = DocsSurface::from_config(&docs).unwrap();
    surface.install(&mut config);
    let mut disabled = Server::new(config);
    let request = call(5, SEARCH_TOOL_NAME);
    assert_eq!(
        exchange(&mut hidden, &request),
        exchange(&mut disabled, &request)
    );
}

#[test]
fn passthrough_shows_and_allows_the_full_registry() {
    let policy = ToolPolicy::new(VisibilityMode::Passthrough, &[], &[], None).unwrap();
    let mut server = server(&policy, &["alpha", "beta"]);
    assert_eq!(list(&mut server), ALL);
    for name in ALL {
        assert!(accepted(&mut server, name), "{name}");
    }
    assert_eq!(
        ToolPolicy::new(VisibilityMode::Passthrough, &[], &names(&["beta"]), None),
        Err(PolicyError::PassthroughWithList {
            list: "server.tools.denylist"
        })
    );
    assert_eq!(
        ToolPolicy::new(VisibilityMode::Passthrough, &names(&["beta"]), &[], None),
        Err(PolicyError::PassthroughWithList {
            list: "server.tools.allowlist"
        })
    );
}

#[test]
fn filter_and_passthrough_differ_only_in_visibility() {
    let filter = ToolPolicy::new(VisibilityMode::Filter, &names(&["alpha"]), &[], None).unwrap();
    let passthrough = ToolPolicy::new(VisibilityMode::Passthrough, &[], &[], None).unwrap();
    assert!(!filter.is_visible("beta"));
    assert!(passthrough.is_visible("beta"));
    assert_eq!(filter.visible(ALL), ["alpha"]);
    assert_eq!(passthrough.visible(ALL), ALL);
}

#[test]
fn authorization_forbids_only_visible_tools() {
    let policy = ToolPolicy::new(
        VisibilityMode::Filter,
        &[],
        &names(&["beta"]),
        Some(&names(&["evidence_query", SEARCH_TOOL_NAME])),
    )
    .unwrap();
    let mut server = server(&policy, &["alpha", "beta"]);
    // allowed_tools does not change tools/list.
    assert_eq!(
        list(&mut server),
        ["evidence_query", SEARCH_TOOL_NAME, "alpha"]
    );
    assert!(accepted(&mut server, "evidence_query"));
    assert!(accepted(&mut server, SEARCH_TOOL_NAME));

    // Visible but not allowed: FORBIDDEN.
    let forbidden = answer(&mut server, &call(6, "alpha"));
    assert_eq!(forbidden["error"]["code"], -32003);
    assert_eq!(forbidden["error"]["data"]["kind"], "forbidden");

    // Hidden and not allowed: unknown, byte for byte.
    let hidden = exchange(&mut server, &call(7, "beta"));
    let mut without_beta = self::server(
        &ToolPolicy::new(
            VisibilityMode::Filter,
            &[],
            &[],
            Some(&names(&["evidence_query", SEARCH_TOOL_NAME])),
        )
        .unwrap(),
        &["alpha"],
    );
    assert_eq!(hidden, exchange(&mut without_beta, &call(7, "beta")));
    // Unknown and not allowed: unknown too.
    let unknown: Value = serde_json::from_str(&exchange(&mut server, &call(8, "gamma"))).unwrap();
    assert_eq!(unknown["error"]["code"], -32001);
}

#[test]
fn empty_allowed_tools_authorizes_every_visible_tool() {
    let policy = ToolPolicy::new(VisibilityMode::Filter, &[], &[], Some(&[])).unwrap();
    let mut server = server(&policy, &["alpha"]);
    assert!(accepted(&mut server, "alpha"));
    assert!(policy.is_authorized("anything"));
}

#[test]
fn blank_names_are_refused() {
    for list in [names(&[""]), names(&[" alpha"]), names(&["alpha "])] {
        assert!(matches!(
            ToolPolicy::new(VisibilityMode::Filter, &list, &[], None),
            Err(PolicyError::BlankName { .. })
        ));
        assert!(matches!(
            ToolPolicy::new(VisibilityMode::Filter, &[], &list, None),
            Err(PolicyError::BlankName { .. })
        ));
        assert!(matches!(
            ToolPolicy::new(VisibilityMode::Filter, &[], &[], Some(&list)),
            Err(PolicyError::BlankName { .. })
        ));
    }
    // Names are exact: case matters.
    let policy = ToolPolicy::new(VisibilityMode::Filter, &names(&["Alpha"]), &[], None).unwrap();
    assert!(!policy.is_visible("alpha"));
}

#[test]
fn policy_from_config_file() {
    let text = r#"
[server.tools]
mode = "filter"
allowlist = ["evidence_query", "decision_gate_docs_search", "alpha"]
denylist = ["decision_gate_docs_search"]

[server.auth]
allowed_tools = ["evidence_query"]
"#;
    let config = Config::from_toml_str(text, Path::new(".")).unwrap();
    let policy = config.server.tool_policy().unwrap();
    assert_eq!(policy.mode(), VisibilityMode::Filter);
    let mut server = server(&policy, &["alpha", "beta"]);
    assert_eq!(list(&mut server), ["evidence_query", "alpha"]);
    assert_eq!(
        answer(&mut server, &call(1, "alpha"))["error"]["code"],
        -32003
    );
    assert_eq!(
        answer(&mut server, &call(2, "beta"))["error"]["code"],
        -32001
    );
    assert_eq!(
        answer(&mut server, &call(3, SEARCH_TOOL_NAME))["error"]["code"],
        -32001
    );
    assert!(accepted(&mut server, "evidence_query"));

    let passthrough = r#"
[server.tools]
mode = "passthrough"
denylist = ["alpha"]
"#;
    let config = Config::from_toml_str(passthrough, Path::new("."));
    let refused = match config {
        Err(error) => error.to_string(),
        Ok(config) => config.server.tool_policy().unwrap_err().to_string(),
    };
    assert!(refused.contains("passthrough"), "{refused}");
}
