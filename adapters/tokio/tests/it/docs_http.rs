//! The `[docs]`, `[server.tools]` and `[server.auth]` toggles over HTTP
//! (issue 8), with the same configuration files as the stdio side
//! (`docs/tests/it/docs_server.rs`, `docs/tests/it/policy_tools.rs`): each flag's
//! effect on `tools/list`, `tools/call` and `resources/*` on `POST /rpc`; a
//! hidden tool answered byte for byte like an unknown one (body and
//! status); `FORBIDDEN` from `allowed_tools` only for visible tools. Every
//! answer the stdio pipeline gives at once (everything but calls handed to
//! the handler) must also be byte-identical to the HTTP body, so both
//! transports are held to one behaviour. Every network wait is bounded.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::common::{Running, TestHandler};
use evidence_wire::server::{Server, ServerConfig, ToolDefinition};
use evidence_wire_config::{Config, ServerAuthMode};
use evidence_wire_docs::{DocsSurface, SEARCH_TOOL_NAME};
use evidence_wire_tokio::{HttpServerConfig, Service};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMIT: Duration = Duration::from_secs(10);
const TOKEN: &str = "docs-http-test-token";

/// A registered tool answered by the handler (`TestHandler` refuses it with
/// an `isError` result, which still counts as a call that went through).
fn tool(name: &str) -> ToolDefinition {
    ToolDefinition {
        name: name.to_owned(),
        description: format!("The {name} tool."),
        input_schema: json!({"type": "object"}),
        output_schema: None,
    }
}

/// One configuration, served both ways: a stdio [`Server`] (the core
/// pipeline, bytes in and out) and an HTTP server on 127.0.0.1.
struct Setup {
    server_config: ServerConfig,
    docs: DocsSurface,
    token: Option<String>,
}

impl Setup {
    /// What `evidence-wire serve` builds from `toml`: the tool policy and
    /// the docs surface applied to the server configuration, the docs
    /// installed and `registered` tools added on every server.
    fn new(toml: &str, registered: &[&str]) -> Setup {
        let config = Config::from_toml_str(toml, Path::new(".")).expect("a valid configuration");
        let mut server_config = ServerConfig::default();
        config
            .server
            .tool_policy()
            .expect("a valid tool policy")
            .apply(&mut server_config);
        let (docs, warnings) = DocsSurface::from_config(&config.docs).expect("the docs load");
        assert!(warnings.is_empty(), "{warnings:?}");
        docs.install(&mut server_config);
        for name in registered {
            server_config.add_tool(tool(name));
        }
        let token = (config.server.auth.mode == ServerAuthMode::BearerToken)
            .then(|| config.server.auth.bearer_tokens.first().cloned())
            .flatten();
        Setup {
            server_config,
            docs,
            token,
        }
    }

    fn stdio(&self) -> Server {
        Server::new(self.server_config.clone())
    }

    async fn http(&self) -> DocsServer {
        let mut config = HttpServerConfig::default();
        if let Some(token) = &self.token {
            config = config.with_bearer_token(token.clone());
        }
        let service = Service::new(self.server_config.clone(), TestHandler);
        DocsServer {
            server: Running::start(service, config).await,
            token: self.token.clone(),
        }
    }
}

/// The docs surface served over HTTP, with the token its callers send.
struct DocsServer {
    server: Running,
    token: Option<String>,
}

impl DocsServer {
    async fn stop(self) {
        self.server.stop().await.expect("the server stops cleanly");
    }

    /// `POST /rpc` with `message` (with the bearer token when one is
    /// configured); the status and the body.
    async fn post(&self, message: &Value) -> (u16, Vec<u8>) {
        self.post_as(message, self.token.as_deref()).await
    }

    async fn post_as(&self, message: &Value, token: Option<&str>) -> (u16, Vec<u8>) {
        let body = serde_json::to_vec(message).expect("json");
        let mut head = format!(
            "POST /rpc HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            self.server.address,
            body.len()
        );
        if let Some(token) = token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(&body);
        let address = self.server.address;
        let exchange = async move {
            let mut stream = TcpStream::connect(address).await.expect("connect");
            stream.write_all(&request).await.expect("send");
            let mut bytes = Vec::new();
            stream
                .read_to_end(&mut bytes)
                .await
                .expect("read the reply");
            bytes
        };
        let bytes = tokio::time::timeout(LIMIT, exchange)
            .await
            .expect("a reply in time");
        let split = bytes
            .windows(4)
            .position(|window| window == b"\r\n\r\n")
            .expect("a complete response head");
        let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .expect("a status line");
        (status, bytes[split + 4..].to_vec())
    }
}

/// A fresh request id for every request: calls handed to the handler stay
/// in flight on the stdio server, and ids may not be reused while they do.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn request(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": next_id(), "method": method, "params": params})
}

fn call(name: &str) -> Value {
    let arguments = if name == SEARCH_TOOL_NAME {
        json!({"query": "framing limits"})
    } else if name == "evidence_query" {
        json!({
            "query": {"provider_id": "p", "check_id": "echo"},
            "context": {
                "tenant_id": 1, "namespace_id": 1, "run_id": "r", "scenario_id": "s",
                "stage_id": "st", "trigger_id": "t",
                "trigger_time": {"kind": "unix_millis", "value": 0}
            }
        })
    } else {
        json!({})
    };
    request("tools/call", json!({"name": name, "arguments": arguments}))
}

/// The request over HTTP and over the stdio pipeline of the same setup.
/// When stdio answers at once, the HTTP body must be exactly its bytes.
/// Returns the HTTP status and the answer.
async fn both(stdio: &mut Server, http: &DocsServer, message: &Value) -> (u16, Value) {
    let (status, body) = http.post(message).await;
    let mut line = serde_json::to_vec(message).expect("json");
    line.push(b'\n');
    stdio.handle_input(&line);
    let mut out = Vec::new();
    while let Some(bytes) = stdio.poll_transmit() {
        out.extend_from_slice(&bytes);
    }
    if !out.is_empty() {
        assert_eq!(out.pop(), Some(b'\n'));
        assert_eq!(
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&out),
            "HTTP and stdio answer {message} differently"
        );
    }
    let answer = serde_json::from_slice(&body).unwrap_or_else(|error| {
        panic!(
            "a JSON answer to {message} ({error}): {:?}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, answer)
}

fn names(listing: &Value) -> Vec<String> {
    listing["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a tool listing: {listing}"))
        .iter()
        .map(|tool| tool["name"].as_str().expect("a name").to_owned())
        .collect()
}

fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

/// True when the call went through: a result (the handler's answer, a
/// search result, or the handler's refusal as an `isError` result).
fn went_through(answer: &Value) -> bool {
    answer.get("result").is_some()
}

const ALL: [&str; 4] = ["evidence_query", SEARCH_TOOL_NAME, "alpha", "beta"];

/// Runs `check` against both transports of the setup `toml` makes.
async fn with_setup<F>(toml: &str, registered: &[&str], check: F)
where
    F: AsyncFnOnce(&Setup, &mut Server, &DocsServer),
{
    let setup = Setup::new(toml, registered);
    let mut stdio = setup.stdio();
    let http = setup.http().await;
    check(&setup, &mut stdio, &http).await;
    http.stop().await;
}

#[tokio::test]
async fn default_docs_serve_search_and_resources_over_http() {
    with_setup("", &["alpha", "beta"], async |setup, stdio, http| {
        let (status, listing) = both(stdio, http, &request("tools/list", json!({}))).await;
        assert_eq!(status, 200);
        assert_eq!(names(&listing), ALL);
        for name in ALL {
            let (status, answer) = both(stdio, http, &call(name)).await;
            assert_eq!(status, 200, "{name}: {answer}");
            assert!(went_through(&answer), "{name}: {answer}");
        }
        let (_, search) = both(stdio, http, &call(SEARCH_TOOL_NAME)).await;
        let sections = &search["result"]["content"][0]["json"]["sections"];
        assert_eq!(sections.as_array().map(Vec::len), Some(3), "{search}");

        let (status, listed) = both(stdio, http, &request("resources/list", json!({}))).await;
        assert_eq!(status, 200);
        let resources = listed["result"]["resources"].as_array().expect("resources");
        assert_eq!(resources.len(), setup.docs.registry().docs().len());
        let (status, read) = both(
            stdio,
            http,
            &request(
                "resources/read",
                json!({"uri": "decision-gate://docs/framing"}),
            ),
        )
        .await;
        assert_eq!(status, 200);
        let framing = setup
            .docs
            .registry()
            .doc("framing")
            .expect("the framing doc");
        assert_eq!(read["result"]["contents"][0]["text"], framing.body());
        let (status, missing) = both(
            stdio,
            http,
            &request(
                "resources/read",
                json!({"uri": "decision-gate://docs/../secrets"}),
            ),
        )
        .await;
        assert_eq!(error_code(&missing), -32002, "RESOURCE_NOT_FOUND");
        assert_eq!(status, 404);
    })
    .await;
}

#[tokio::test]
async fn disabled_search_makes_the_tool_unknown_over_http() {
    let toml = "[docs]\nenable_search = false\n";
    let search = call(SEARCH_TOOL_NAME);
    // A server that never had docs at all answers the same call.
    let never = Setup::new("[docs]\nenabled = false\n", &["alpha", "beta"]);
    let never = never.http().await;
    let (never_status, never_body) = never.post(&search).await;
    never.stop().await;
    with_setup(toml, &["alpha", "beta"], async |_setup, stdio, http| {
        let (_, listing) = both(stdio, http, &request("tools/list", json!({}))).await;
        assert_eq!(names(&listing), ["evidence_query", "alpha", "beta"]);
        let (status, body) = http.post(&search).await;
        assert_eq!(
            (status, &body),
            (never_status, &never_body),
            "byte for byte"
        );
        let (status, answer) = both(stdio, http, &search).await;
        assert_eq!(error_code(&answer), -32001, "TOOL_NOT_FOUND");
        assert_eq!(status, 404);
        // Resources are still served.
        let (status, listed) = both(stdio, http, &request("resources/list", json!({}))).await;
        assert_eq!(status, 200);
        assert!(
            !listed["result"]["resources"]
                .as_array()
                .expect("list")
                .is_empty()
        );
    })
    .await;
}

#[tokio::test]
async fn disabled_resources_answer_method_not_found_over_http() {
    with_setup(
        "[docs]\nenable_resources = false\n",
        &[],
        async |_setup, stdio, http| {
            for (method, params) in [
                ("resources/list", json!({})),
                (
                    "resources/read",
                    json!({"uri": "decision-gate://docs/framing"}),
                ),
            ] {
                let (status, answer) = both(stdio, http, &request(method, params)).await;
                assert_eq!(error_code(&answer), -32601, "{method}: METHOD_NOT_FOUND");
                assert_eq!(status, 404, "{method}");
            }
            let (_, init) = both(
                stdio,
                http,
                &request(
                    "initialize",
                    json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
                ),
            )
            .await;
            assert!(
                init["result"]["capabilities"]["tools"].is_object(),
                "{init}"
            );
            assert!(
                init["result"]["capabilities"].get("resources").is_none(),
                "{init}"
            );
            // Search still works (a fresh HTTP exchange speaks Decision Gate).
            let (status, answer) = http.post(&call(SEARCH_TOOL_NAME)).await;
            assert_eq!(status, 200);
            let answer: Value = serde_json::from_slice(&answer).expect("json");
            assert!(
                answer["result"]["content"][0]["json"]["sections"].is_array(),
                "{answer}"
            );
        },
    )
    .await;
}

#[tokio::test]
async fn disabled_docs_remove_the_tool_and_the_resources_over_http() {
    // The master switch wins over the two others.
    let toml = "[docs]\nenabled = false\nenable_search = true\nenable_resources = true\n";
    with_setup(toml, &["alpha"], async |_setup, stdio, http| {
        let (_, listing) = both(stdio, http, &request("tools/list", json!({}))).await;
        assert_eq!(names(&listing), ["evidence_query", "alpha"]);
        let (status, answer) = both(stdio, http, &call(SEARCH_TOOL_NAME)).await;
        assert_eq!((status, error_code(&answer)), (404, -32001));
        for method in ["resources/list", "resources/read"] {
            let params = json!({"uri": "decision-gate://docs/framing"});
            let (status, answer) = both(stdio, http, &request(method, params)).await;
            assert_eq!((status, error_code(&answer)), (404, -32601), "{method}");
        }
    })
    .await;
}

#[tokio::test]
async fn allowlist_and_denylist_filter_tools_over_http() {
    let allow = "[server.tools]\nmode = \"filter\"\nallowlist = [\"evidence_query\", \"alpha\"]\n";
    with_setup(allow, &["alpha", "beta"], async |_setup, stdio, http| {
        let (_, listing) = both(stdio, http, &request("tools/list", json!({}))).await;
        assert_eq!(names(&listing), ["evidence_query", "alpha"]);
        for (name, visible) in [
            ("evidence_query", true),
            ("alpha", true),
            ("beta", false),
            (SEARCH_TOOL_NAME, false),
        ] {
            let (status, answer) = both(stdio, http, &call(name)).await;
            if visible {
                assert!(went_through(&answer), "{name}: {answer}");
            } else {
                assert_eq!((status, error_code(&answer)), (404, -32001), "{name}");
            }
        }
    })
    .await;

    // The denylist wins over the allowlist.
    let deny = "[server.tools]\nallowlist = [\"alpha\", \"beta\"]\ndenylist = [\"beta\"]\n";
    with_setup(deny, &["alpha", "beta"], async |_setup, stdio, http| {
        let (_, listing) = both(stdio, http, &request("tools/list", json!({}))).await;
        assert_eq!(names(&listing), ["alpha"]);
        let (status, answer) = both(stdio, http, &call("beta")).await;
        assert_eq!((status, error_code(&answer)), (404, -32001));
        let (_, answer) = both(stdio, http, &call("alpha")).await;
        assert!(went_through(&answer), "{answer}");
    })
    .await;
}

#[tokio::test]
async fn passthrough_shows_and_serves_the_full_registry_over_http() {
    with_setup(
        "[server.tools]\nmode = \"passthrough\"\n",
        &["alpha", "beta"],
        async |_setup, stdio, http| {
            let (_, listing) = both(stdio, http, &request("tools/list", json!({}))).await;
            assert_eq!(names(&listing), ALL);
            for name in ALL {
                let (status, answer) = both(stdio, http, &call(name)).await;
                assert_eq!(status, 200, "{name}");
                assert!(went_through(&answer), "{name}: {answer}");
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_hidden_tool_is_answered_byte_for_byte_like_an_unknown_one_over_http() {
    let hiding = Setup::new(
        "[server.tools]\ndenylist = [\"beta\"]\n",
        &["alpha", "beta"],
    );
    let absent = Setup::new("", &["alpha"]);
    let hiding = hiding.http().await;
    let absent = absent.http().await;
    for message in [
        call("beta"),
        json!({"jsonrpc": "2.0", "id": "s", "method": "tools/call", "params": {"name": "beta"}}),
        request("tools/list", json!({})),
    ] {
        let hidden = hiding.post(&message).await;
        let unknown = absent.post(&message).await;
        assert_eq!(
            (hidden.0, String::from_utf8_lossy(&hidden.1)),
            (unknown.0, String::from_utf8_lossy(&unknown.1)),
            "{message}"
        );
    }
    let (status, body) = hiding.post(&call("beta")).await;
    let answer: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!((status, error_code(&answer)), (404, -32001));
    hiding.stop().await;
    absent.stop().await;
}

#[tokio::test]
async fn allowed_tools_forbid_only_visible_tools_over_http() {
    let toml = format!(
        "[server.tools]\ndenylist = [\"beta\"]\n\n[server.auth]\nmode = \"bearer_token\"\nbearer_tokens = [\"{TOKEN}\"]\nallowed_tools = [\"evidence_query\", \"{SEARCH_TOOL_NAME}\"]\n"
    );
    let without_beta = format!(
        "[server.auth]\nmode = \"bearer_token\"\nbearer_tokens = [\"{TOKEN}\"]\nallowed_tools = [\"evidence_query\", \"{SEARCH_TOOL_NAME}\"]\n"
    );
    let absent = Setup::new(&without_beta, &["alpha"]);
    let absent = absent.http().await;
    let hidden_call = call("beta");
    let (unknown_status, unknown_body) = absent.post(&hidden_call).await;
    absent.stop().await;
    with_setup(&toml, &["alpha", "beta"], async |_setup, stdio, http| {
        // allowed_tools does not change tools/list.
        let (_, listing) = both(stdio, http, &request("tools/list", json!({}))).await;
        assert_eq!(
            names(&listing),
            ["evidence_query", SEARCH_TOOL_NAME, "alpha"]
        );
        for name in ["evidence_query", SEARCH_TOOL_NAME] {
            let (status, answer) = both(stdio, http, &call(name)).await;
            assert_eq!(status, 200, "{name}");
            assert!(went_through(&answer), "{name}: {answer}");
        }
        // Visible but not allowed: FORBIDDEN, 403.
        let (status, forbidden) = both(stdio, http, &call("alpha")).await;
        assert_eq!(
            (status, error_code(&forbidden)),
            (403, -32003),
            "{forbidden}"
        );
        assert_eq!(forbidden["error"]["data"]["kind"], "forbidden");
        // Hidden and not allowed: unknown, byte for byte.
        let (status, body) = http.post(&hidden_call).await;
        assert_eq!(
            (status, String::from_utf8_lossy(&body)),
            (unknown_status, String::from_utf8_lossy(&unknown_body))
        );
        let (status, answer) = both(stdio, http, &call("beta")).await;
        assert_eq!((status, error_code(&answer)), (404, -32001));
        // Unknown and not allowed: unknown too.
        let (status, answer) = both(stdio, http, &call("gamma")).await;
        assert_eq!((status, error_code(&answer)), (404, -32001));
        // Without the token nothing gets that far: 401 for every tool.
        for name in ["alpha", "beta", "evidence_query"] {
            let (status, body) = http.post_as(&call(name), None).await;
            let answer: Value = serde_json::from_slice(&body).expect("json");
            assert_eq!(status, 401, "{name}: {answer}");
        }
    })
    .await;
}
