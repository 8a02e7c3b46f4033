//! Shared plumbing of the interop tests (`tests/tests/interop_*.rs`):
//! where the peers and our CLI are, and running a peer with a hard timeout.
//!
//! Peers are installed by `scripts/peers` into the git-ignored `.peers/`
//! folder at the repository root. A missing peer fails the test with the
//! command that installs it, unless `EVIDENCE_WIRE_SKIP_INTEROP=1` is set
//! (offline work), in which case the test returns early and says so.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The repository root (the workspace holding this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The folder of the peer scripts (`tests/peers`).
pub fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// A script in `tests/peers`, as a string argument.
pub fn peer_script(name: &str) -> String {
    peers_dir().join(name).to_string_lossy().into_owned()
}

/// Whether interop tests are switched off (`EVIDENCE_WIRE_SKIP_INTEROP=1`).
pub fn skipping() -> bool {
    std::env::var("EVIDENCE_WIRE_SKIP_INTEROP").is_ok_and(|value| value == "1")
}

/// `path` if it exists. Otherwise: `None` when interop is switched off
/// (the caller returns early), else a panic naming the install command.
pub fn require(path: PathBuf, what: &str) -> Option<String> {
    if path.exists() {
        return Some(path.to_string_lossy().into_owned());
    }
    if skipping() {
        eprintln!("EVIDENCE_WIRE_SKIP_INTEROP=1: {what} not installed, test skipped");
        return None;
    }
    panic!(
        "{what} is not installed ({} is missing): run scripts/peers, or set \
         EVIDENCE_WIRE_SKIP_INTEROP=1 to skip the interop tests offline",
        path.display()
    );
}

/// The folder `scripts/peers` installs into: `EVIDENCE_WIRE_PEERS`, or
/// `.peers` at the repository root.
pub fn peers_base() -> PathBuf {
    std::env::var_os("EVIDENCE_WIRE_PEERS")
        .map_or_else(|| repo_root().join(".peers"), PathBuf::from)
}

/// The Python of the peers' virtualenv (with the official `mcp` SDK).
pub fn venv_python() -> Option<String> {
    let base = peers_base();
    require(
        base.join("venv/bin/python"),
        "the Python peers' virtualenv (.peers/venv)",
    )
}

/// Node 22 from the npm peers (`node@22`), which also runs the other npm peers.
pub fn peers_node() -> Option<String> {
    let base = peers_base();
    let node_modules = base.join("node/node_modules");
    for package in [
        "@modelcontextprotocol/sdk",
        "vscode-jsonrpc",
        "@modelcontextprotocol/conformance",
    ] {
        require(node_modules.join(package), &format!("npm peer {package}"))?;
    }
    require(
        node_modules.join(".bin/node"),
        "Node 22 from the npm package node@22 (.peers/node)",
    )
}

/// The Python of the old-generation peers' virtualenv (`mcp` 1.9.x).
pub fn venv_old_python() -> Option<String> {
    require(
        peers_base().join("venv-old/bin/python"),
        "the old-generation Python peers' virtualenv (.peers/venv-old)",
    )
}

/// The npm folder of the old-generation TypeScript SDK (`.peers/node-old`),
/// for `EVIDENCE_WIRE_PEERS_NODE` of `mcp_ts_client.mjs`.
pub fn peers_node_old() -> Option<String> {
    let folder = peers_base().join("node-old");
    require(
        folder.join("node_modules/@modelcontextprotocol/sdk/package.json"),
        "the old-generation npm peer @modelcontextprotocol/sdk (.peers/node-old)",
    )?;
    Some(folder.to_string_lossy().into_owned())
}

/// The MCP Inspector's launcher script (`@modelcontextprotocol/inspector`).
pub fn inspector_launcher() -> Option<String> {
    require(
        peers_base().join(
            "node/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
        ),
        "npm peer @modelcontextprotocol/inspector (.peers/node)",
    )
}

/// A Python 3 with only the standard library, for the Decision Gate-style
/// provider: `python3` on the PATH (the venv's Python is a fallback).
pub fn system_python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// The `evidence-wire` CLI binary: `EVIDENCE_WIRE_CLI` if set (to test
/// another build of it), otherwise this package's `evidence-wire-cli`
/// binary, the same program (`evidence_wire_cli::run`) built by `cargo test`.
pub fn cli_binary() -> String {
    std::env::var("EVIDENCE_WIRE_CLI")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_evidence-wire-cli").to_owned())
}

/// What a finished (or killed) child left behind.
#[derive(Debug)]
pub struct Output {
    /// Its exit status; `None` when it was killed at the timeout.
    pub status: Option<ExitStatus>,
    /// Everything it wrote to stdout (lossy UTF-8).
    pub stdout: String,
    /// Everything it wrote to stderr (lossy UTF-8).
    pub stderr: String,
    /// The raw stdout bytes.
    pub stdout_bytes: Vec<u8>,
}

impl Output {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|status| status.success())
    }

    /// Its exit code, if it exited.
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|status| status.code())
    }

    /// The last stdout line parsed as JSON (the peers' report), or a panic
    /// showing everything the peer wrote.
    pub fn report(&self, what: &str) -> Value {
        assert!(
            self.success(),
            "{what} failed (status {:?}):\n--- stdout\n{}\n--- stderr\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        let line = self
            .stdout
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty());
        line.and_then(|line| serde_json::from_str(line).ok())
            .unwrap_or_else(|| {
                panic!(
                    "{what} printed no JSON report:\n--- stdout\n{}\n--- stderr\n{}",
                    self.stdout, self.stderr
                )
            })
    }
}

/// Run `command` with `stdin` as its input and a hard `timeout`: a child
/// still running then is killed (status `None`). Output is read on threads,
/// so a chatty child cannot block on a full pipe.
pub fn run(command: &mut Command, stdin: &[u8], timeout: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {command:?}: {error}"));
    let input = stdin.to_vec();
    let mut child_stdin = child.stdin.take();
    let writer = thread::spawn(move || {
        if let Some(pipe) = child_stdin.as_mut() {
            let _ = pipe.write_all(&input);
        }
        drop(child_stdin);
    });
    let stdout = collect(child.stdout.take());
    let stderr = collect(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let _ = writer.join();
    // A grandchild may still hold a pipe open: wait for the rest a little, not forever.
    let stdout_bytes = stdout
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_default();
    let stderr_bytes = stderr
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_default();
    let mut stderr = String::from_utf8_lossy(&stderr_bytes).into_owned();
    if status.is_none() {
        stderr.push_str(&format!("\n[killed after the {timeout:?} timeout]"));
    }
    Output {
        status,
        stdout: String::from_utf8_lossy(&stdout_bytes).into_owned(),
        stderr,
        stdout_bytes,
    }
}

/// Read `pipe` to its end on a thread; the bytes arrive on the channel.
fn collect<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Vec<u8>> {
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        let _ = sender.send(bytes);
    });
    receiver
}

/// Timeout for one peer script run (spawning interpreters on a loaded
/// 2-core machine can take seconds).
pub const PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// The trigger time every MCP peer script puts in its query context.
pub const TRIGGER_TIME: i64 = 1_710_000_000_000;

/// wire-facts §1: sha256 of the canonical JSON `1710000000000`, computed by
/// Decision Gate's own code.
pub const HASH_OF_TRIGGER_TIME: &str =
    "8e3359f0c6a336723783a5550104e05046b7caa8ab214fdf0c891bea1ad97083";

/// The query context of the MCP peer scripts, as JSON.
pub fn peer_context() -> Value {
    serde_json::json!({
        "tenant_id": 1, "namespace_id": 1, "run_id": "run-1", "scenario_id": "s",
        "stage_id": "st", "trigger_id": "t",
        "trigger_time": {"kind": "unix_millis", "value": TRIGGER_TIME},
        "correlation_id": null
    })
}

/// The EvidenceResult our own client gets for the peers' query (`time_now`
/// at [`TRIGGER_TIME`]) from the bundled provider over Content-Length in the
/// Decision Gate dialect, through the CLI: what an MCP SDK must see as
/// `structuredContent` over the other framing and dialect.
pub fn expected_time_now_evidence() -> Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED
        .get_or_init(|| {
            let mut command = Command::new(cli_binary());
            command
                .args(["query", "--check", "time_now", "--context"])
                .arg(peer_context().to_string());
            let output = run(&mut command, b"", Duration::from_secs(60));
            assert!(output.success(), "evidence-wire query failed: {output:?}");
            serde_json::from_str(&output.stdout)
                .unwrap_or_else(|error| panic!("query printed no JSON ({error}): {output:?}"))
        })
        .clone()
}

/// Check an EvidenceResult a peer received for the `time_now` query at
/// [`TRIGGER_TIME`]: the value, a hash (when the server sent one) equal to
/// the wire-facts hash, and every field equal to what our own client gets
/// ([`expected_time_now_evidence`]; our client computes the hash when the
/// provider sends none, and that computed hash must be the wire-facts one).
pub fn assert_time_now_evidence(actual: &Value, what: &str) {
    assert_eq!(
        actual["value"],
        serde_json::json!({"kind": "json", "value": TRIGGER_TIME}),
        "{what}: value"
    );
    let digest = serde_json::json!({"algorithm": "sha256", "value": HASH_OF_TRIGGER_TIME});
    assert!(
        actual["evidence_hash"].is_null() || actual["evidence_hash"] == digest,
        "{what}: evidence_hash {} is not the wire-facts hash",
        actual["evidence_hash"]
    );
    let mut expected = expected_time_now_evidence();
    assert_eq!(
        expected["evidence_hash"], digest,
        "our client's verified hash"
    );
    let mut actual = actual.clone();
    if actual["evidence_hash"].is_null() {
        if let (Some(expected), Some(actual)) = (expected.as_object_mut(), actual.as_object_mut()) {
            expected.remove("evidence_hash");
            actual.remove("evidence_hash");
        }
    }
    assert_eq!(
        actual, expected,
        "{what}: differs from our client's EvidenceResult"
    );
}
/// An MCP revision and what its specification says a server sends under it.
/// Written from the revisions' schemas and changelogs (the MCP repository,
/// `docs/specification/<revision>/`), not from the code under test, so a
/// server that shapes a revision wrongly fails here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Revision(pub &'static str);

impl Revision {
    /// 2025-03-26, what the old-generation SDKs (TypeScript 1.12, Python 1.9) speak.
    pub const V2025_03_26: Revision = Revision("2025-03-26");
    /// 2025-11-25, the newest revision with the `initialize` handshake.
    pub const V2025_11_25: Revision = Revision("2025-11-25");
    /// 2026-07-28, the stateless revision (`server/discover`, per-request `_meta`).
    pub const V2026_07_28: Revision = Revision("2026-07-28");

    /// `structuredContent` and `outputSchema` exist (since 2025-06-18).
    pub fn has_structured_content(self) -> bool {
        self >= Revision("2025-06-18")
    }

    /// Arguments that fail the input schema are a tool result with
    /// `isError: true` rather than JSON-RPC -32602 (SEP-1303, 2025-11-25).
    pub fn input_errors_as_results(self) -> bool {
        self >= Revision::V2025_11_25
    }

    /// No handshake; every result carries `resultType`, the cacheable ones
    /// `ttlMs` and `cacheScope` (2026-07-28).
    pub fn is_stateless(self) -> bool {
        self >= Revision::V2026_07_28
    }

    /// The code of an unknown resource: -32002 until 2025-11-25; 2026-07-28
    /// requires -32602 and forbids -32002.
    pub fn unknown_resource_code(self) -> i64 {
        if self.is_stateless() { -32602 } else { -32002 }
    }

    /// The members a `Tool` of `tools/list` may have in this revision.
    pub fn tool_members(self) -> Vec<&'static str> {
        let mut members = vec!["name", "description", "inputSchema"];
        if self >= Revision::V2025_03_26 {
            members.push("annotations");
        }
        if self.has_structured_content() {
            members.extend(["title", "outputSchema", "_meta"]);
        }
        if self >= Revision::V2025_11_25 {
            members.push("icons");
        }
        if self == Revision::V2025_11_25 {
            members.push("execution"); // moved to an extension in 2026-07-28
        }
        members
    }

    /// The members a `tools/call` result may have in this revision.
    pub fn call_result_members(self) -> Vec<&'static str> {
        let mut members = vec!["content", "isError", "_meta"];
        if self.has_structured_content() {
            members.push("structuredContent");
        }
        if self.is_stateless() {
            members.push("resultType");
        }
        members
    }
}

/// The methods whose 2026-07-28 results must carry `ttlMs` and `cacheScope`.
const CACHEABLE: [&str; 5] = [
    "server/discover",
    "tools/list",
    "resources/list",
    "resources/read",
    "resources/templates/list",
];

/// `INVALID_TOOL_INPUT` of the canonical error table (`spec/errors.md`).
pub const INVALID_TOOL_INPUT: (i64, &str) = (-32602, "invalid_tool_input");

/// `TOOL_NOT_FOUND` of the canonical error table (`spec/errors.md`).
pub const TOOL_NOT_FOUND: i64 = -32001;

/// Where the peer scripts' bad-arguments call fails the input schema
/// (`tenant_id` 0; ids are integers >= 1).
pub const BAD_ARGUMENTS_POINTER: &str = "/context/tenant_id";

/// A schema file of `spec/schemas/`, read from disk.
pub fn spec_schema(file: &str) -> Value {
    let path = repo_root().join("spec/schemas").join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The exchanges of a peer report (`exchanges`: each request as sent, with
/// the response the SDK received for it, recorded below the SDK).
struct Exchanges<'a>(Vec<&'a Value>);

impl<'a> Exchanges<'a> {
    fn of(report: &'a Value) -> Self {
        Exchanges(
            report["exchanges"]
                .as_array()
                .map(|all| all.iter().collect())
                .unwrap_or_default(),
        )
    }

    /// Requests (not notifications) of `method`.
    fn requests(&self, method: &str) -> Vec<&'a Value> {
        self.0
            .iter()
            .copied()
            .filter(|exchange| exchange["method"] == method && exchange.get("id").is_some())
            .collect()
    }

    /// The one `tools/call` of `tool` whose arguments satisfy `pick`.
    fn call(&self, tool: &str, pick: impl Fn(&Value) -> bool) -> Option<&'a Value> {
        self.requests("tools/call").into_iter().find(|exchange| {
            exchange["params"]["name"] == tool && pick(&exchange["params"]["arguments"])
        })
    }
}

/// Whether `a` and `b` are the same JSON, numbers compared as doubles: a
/// JavaScript peer's report holds the schemas' `18446744073709551615` as the
/// nearest double.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_json(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, a)| b.get(key).is_some_and(|b| same_json(a, b)))
        }
        _ => a == b,
    }
}

/// The JSON in a text item.
fn parse_text(text: &Value, what: &str) -> Value {
    text.as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_else(|| panic!("{what}: not a JSON text: {text}"))
}

/// The content of a tool result that must be exactly one text item.
fn single_text(result: &Value, what: &str) -> Value {
    let content = result["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(content.len(), 1, "{what}: content {result}");
    assert_eq!(content[0]["type"], "text", "{what}: content {result}");
    parse_text(&content[0]["text"], what)
}

/// Check the report of an MCP SDK peer script (`mcp_python_client.py`,
/// `mcp_python_old_client.py`, `mcp_ts_client.mjs`: the same sequence through
/// an official MCP SDK) for a session that must have negotiated `revision`.
/// Both views are checked: what the SDK made of each answer (it parsed and
/// accepted it) and the answers as they went over the wire, against
/// independent expectations: the spec's rules for `revision` ([`Revision`]),
/// wire-facts hashes, our own client's view of the same query, the docs
/// registry the server embeds and the schema files of `spec/schemas/`.
pub fn check_mcp_sdk_report(report: &Value, revision: Revision) {
    use evidence_wire_docs::{DocsLimits, DocsRegistry, SEARCH_TOOL_NAME};
    let who = format!(
        "{} {} (mode {}) expecting {}",
        report["sdk"].as_str().unwrap_or("?"),
        report["sdk_version"].as_str().unwrap_or("?"),
        report["mode"].as_str().unwrap_or("?"),
        revision.0
    );
    let context = |what: &str| format!("{who}: {what}\nreport: {report:#}");
    let exchanges = Exchanges::of(report);

    // The negotiated revision, as the SDK sees it.
    assert_eq!(
        report["protocol_version"],
        revision.0,
        "{}",
        context("negotiated revision")
    );
    assert_eq!(
        report["server_name"],
        "evidence-wire",
        "{}",
        context("server name")
    );

    // Initialize or discover, on the wire.
    if revision.is_stateless() {
        assert!(
            exchanges.requests("initialize").is_empty(),
            "{}",
            context("a stateless session sends no initialize")
        );
        let discover = exchanges.requests("server/discover");
        assert!(!discover.is_empty(), "{}", context("no server/discover"));
        for exchange in discover {
            let result = &exchange["result"];
            let versions = result["supportedVersions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                versions.contains(&json!(revision.0)),
                "{}",
                context("server/discover supportedVersions")
            );
            assert!(
                result["capabilities"]["tools"].is_object(),
                "{}",
                context("discover tools")
            );
            assert!(
                result["capabilities"]["resources"].is_object(),
                "{}",
                context("discover resources")
            );
            assert_eq!(
                result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
                "evidence-wire",
                "{}",
                context("discover serverInfo")
            );
        }
        // Every request spoke the revision in its own _meta.
        for exchange in exchanges
            .0
            .iter()
            .filter(|exchange| exchange.get("id").is_some())
        {
            assert_eq!(
                exchange["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
                revision.0,
                "{}",
                context(&format!(
                    "request without the revision in _meta: {exchange}"
                ))
            );
        }
    } else {
        let initialize = exchanges.requests("initialize");
        assert_eq!(initialize.len(), 1, "{}", context("one initialize"));
        let result = &initialize[0]["result"];
        assert_eq!(
            result["protocolVersion"],
            revision.0,
            "{}",
            context("initialize result")
        );
        assert_eq!(
            result["serverInfo"]["name"],
            "evidence-wire",
            "{}",
            context("serverInfo")
        );
        assert!(
            result["capabilities"]["tools"].is_object(),
            "{}",
            context("tools capability")
        );
        assert!(
            result["capabilities"]["resources"].is_object(),
            "{}",
            context("resources capability")
        );
    }

    // Every result carries exactly the revision's result fields.
    for exchange in &exchanges.0 {
        let Some(result) = exchange.get("result") else {
            continue;
        };
        let method = exchange["method"].as_str().unwrap_or_default();
        if revision.is_stateless() {
            assert_eq!(result["resultType"], "complete", "{}", context(method));
            if CACHEABLE.contains(&method) {
                assert!(
                    result["ttlMs"].is_u64(),
                    "{}",
                    context(&format!("{method} ttlMs"))
                );
                assert!(
                    matches!(result["cacheScope"].as_str(), Some("public" | "private")),
                    "{}",
                    context(&format!("{method} cacheScope"))
                );
            }
        } else {
            for member in ["resultType", "ttlMs", "cacheScope"] {
                assert!(
                    result.get(member).is_none(),
                    "{}",
                    context(&format!(
                        "{method} result has {member}, unknown to {}",
                        revision.0
                    ))
                );
            }
        }
    }

    // tools/list: the revision's Tool members; the schemas are spec/schemas/.
    let listed = exchanges.requests("tools/list");
    let tools = listed
        .first()
        .and_then(|exchange| exchange["result"]["tools"].as_array())
        .unwrap_or_else(|| panic!("{}", context("no tools/list result on the wire")));
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(
        names.contains(&"evidence_query"),
        "{}",
        context("tools/list")
    );
    assert!(
        names.contains(&SEARCH_TOOL_NAME),
        "{}",
        context("tools/list lacks docs search")
    );
    let allowed = revision.tool_members();
    for tool in tools {
        for member in tool
            .as_object()
            .map(|tool| tool.keys().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            assert!(
                allowed.contains(&member.as_str()),
                "{}",
                context(&format!(
                    "tool {} has `{member}`, unknown to {}",
                    tool["name"], revision.0
                ))
            );
        }
        assert_eq!(
            tool["inputSchema"]["type"],
            "object",
            "{}",
            context("inputSchema")
        );
        assert_eq!(
            tool.get("outputSchema").is_some(),
            revision.has_structured_content(),
            "{}",
            context(&format!("outputSchema of {}", tool["name"]))
        );
        if tool["name"] == "evidence_query" {
            // The bundled provider narrows `EvidenceQuery` to its own
            // provider id and checks; everything else is the spec file.
            let without_query = |schema: &Value| {
                let mut schema = schema.clone();
                if let Some(defs) = schema["$defs"].as_object_mut() {
                    defs.remove("EvidenceQuery");
                }
                schema
            };
            let spec_input = spec_schema("evidence_query.input.schema.json");
            assert!(
                same_json(
                    &without_query(&tool["inputSchema"]),
                    &without_query(&spec_input)
                ),
                "{}",
                context("evidence_query inputSchema differs from spec/schemas")
            );
            assert_eq!(
                tool["inputSchema"]["$defs"]["EvidenceQuery"]["properties"]["params"],
                spec_input["$defs"]["EvidenceQuery"]["properties"]["params"],
                "{}",
                context("evidence_query inputSchema params")
            );
            if revision.has_structured_content() {
                assert_eq!(
                    tool["outputSchema"],
                    spec_schema("evidence_query.output.schema.json"),
                    "{}",
                    context("evidence_query outputSchema")
                );
            }
        }
    }

    // tools/call evidence_query: on the wire, one text item with the
    // EvidenceResult, and structuredContent (the same) where the revision
    // has it; the SDK's view agrees.
    let call = exchanges
        .call("evidence_query", |arguments| {
            arguments["context"]["tenant_id"] == 1
        })
        .unwrap_or_else(|| panic!("{}", context("no evidence_query call on the wire")));
    let result = &call["result"];
    for member in result
        .as_object()
        .map(|result| result.keys().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        assert!(
            revision.call_result_members().contains(&member.as_str()),
            "{}",
            context(&format!(
                "tools/call result has `{member}`, unknown to {}",
                revision.0
            ))
        );
    }
    assert_ne!(
        result["isError"],
        true,
        "{}",
        context("evidence_query failed")
    );
    let from_text = single_text(result, &context("evidence_query text item"));
    assert_time_now_evidence(&from_text, &context("the text item's EvidenceResult"));
    if revision.has_structured_content() {
        assert_eq!(
            result["structuredContent"],
            from_text,
            "{}",
            context("structuredContent")
        );
        assert_time_now_evidence(
            &report["evidence"]["structured_content"],
            &context("the SDK's structuredContent"),
        );
    } else {
        assert!(
            report["evidence"]["structured_content"].is_null(),
            "{}",
            context("structuredContent where the revision has none")
        );
    }
    assert_eq!(
        parse_text(&report["evidence"]["text"], "the SDK's text item"),
        from_text,
        "{}",
        context("the SDK's text item")
    );
    assert_eq!(
        report["evidence"]["content_types"],
        json!(["text"]),
        "{}",
        context("content")
    );
    assert_eq!(
        report["computed_hash"],
        HASH_OF_TRIGGER_TIME,
        "{}",
        context("the SDK side's own hash of the value")
    );

    // Docs search: exactly what the embedded registry answers.
    let registry = DocsRegistry::with_default_corpus(DocsLimits::default())
        .unwrap_or_else(|error| panic!("default docs corpus: {error}"));
    let expected_search = registry
        .call_search(&json!({"query": "evidence hash", "max_sections": 2}))
        .unwrap_or_else(|error| panic!("docs search: {error:?}"));
    let search = &report["docs_search"];
    assert_eq!(
        parse_text(&search["text"], "docs search text"),
        expected_search,
        "{}",
        context("docs search result (text)")
    );
    let expected_structured = if revision.has_structured_content() {
        expected_search.clone()
    } else {
        Value::Null
    };
    assert_eq!(
        search["structured_content"],
        expected_structured,
        "{}",
        context("docs search result (structuredContent)")
    );
    let sections = expected_search["sections"].as_array().map_or(0, Vec::len);
    assert!(
        (1..=2).contains(&sections),
        "{}",
        context("docs search sections")
    );

    // Resources: the registry's documents, read back byte for byte; no templates.
    let resources = report["resources"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        resources.len(),
        registry.docs().len(),
        "{}",
        context("resources/list")
    );
    for resource in &resources {
        let uri = resource["uri"].as_str().unwrap_or_default();
        assert!(uri.starts_with("decision-gate://docs/"), "{}", context(uri));
        assert_eq!(resource["mimeType"], "text/markdown", "{}", context(uri));
    }
    let read = &report["resource_read"];
    let first = registry
        .docs()
        .iter()
        .find(|doc| Some(doc.uri()) == read["uri"].as_str())
        .unwrap_or_else(|| panic!("{}", context("resources/read returned an unknown uri")));
    assert_eq!(read["mime_type"], "text/markdown");
    assert_eq!(
        read["text"].as_str(),
        Some(first.body()),
        "{}",
        context("resources/read text")
    );
    assert_eq!(
        report["resource_templates"],
        json!([]),
        "{}",
        context("templates (SDK)")
    );
    let templates = exchanges.requests("resources/templates/list");
    assert_eq!(
        templates.len(),
        1,
        "{}",
        context("one resources/templates/list")
    );
    assert_eq!(
        templates[0]["result"]["resourceTemplates"],
        json!([]),
        "{}",
        context("resources/templates/list on the wire")
    );

    // An unknown resource: the revision's code, as the SDK sees it and on the wire.
    let code = revision.unknown_resource_code();
    assert_eq!(
        report["unknown_resource_error"],
        code,
        "{}",
        context("unknown resource")
    );
    let unknown_read = exchanges
        .requests("resources/read")
        .into_iter()
        .find(|exchange| exchange["params"]["uri"] == "decision-gate://docs/no-such-document")
        .unwrap_or_else(|| panic!("{}", context("no read of the unknown resource")));
    assert_eq!(
        unknown_read["error"]["code"],
        code,
        "{}",
        context("unknown resource (wire)")
    );

    // Bad arguments: a tool result carrying the canonical error (SEP-1303)
    // from 2025-11-25 on, JSON-RPC -32602 before; the pointer either way.
    let bad = exchanges
        .call("evidence_query", |arguments| {
            arguments["context"]["tenant_id"] == 0
        })
        .unwrap_or_else(|| panic!("{}", context("no bad-arguments call on the wire")));
    let sdk_bad = &report["bad_arguments"];
    let (code, kind) = INVALID_TOOL_INPUT;
    if revision.input_errors_as_results() {
        let result = &bad["result"];
        assert_eq!(
            result["isError"],
            true,
            "{}",
            context("bad arguments: isError")
        );
        assert!(
            result.get("structuredContent").is_none(),
            "{}",
            context("bad arguments: a failed call has no EvidenceResult")
        );
        let error = single_text(result, &context("bad arguments text item"));
        assert_eq!(error["code"], code, "{}", context("bad arguments: code"));
        assert_eq!(
            error["data"]["kind"],
            kind,
            "{}",
            context("bad arguments: kind")
        );
        assert_eq!(
            error["data"]["pointer"],
            BAD_ARGUMENTS_POINTER,
            "{}",
            context("bad arguments: pointer")
        );
        assert_eq!(
            sdk_bad["is_error"],
            true,
            "{}",
            context("bad arguments (SDK)")
        );
        assert_eq!(
            sdk_bad["texts"].as_array().map(Vec::len),
            Some(1),
            "{}",
            context("bad arguments (SDK)")
        );
        assert_eq!(
            parse_text(&sdk_bad["texts"][0], "bad arguments (SDK)"),
            error,
            "{}",
            context("bad arguments (SDK text)")
        );
    } else {
        assert!(
            bad.get("result").is_none(),
            "{}",
            context("bad arguments: a result")
        );
        assert_eq!(
            bad["error"]["code"],
            code,
            "{}",
            context("bad arguments: code")
        );
        assert_eq!(
            bad["error"]["data"]["kind"],
            kind,
            "{}",
            context("bad arguments: kind")
        );
        assert_eq!(
            bad["error"]["data"]["pointer"],
            BAD_ARGUMENTS_POINTER,
            "{}",
            context("bad arguments: pointer")
        );
        assert_eq!(
            sdk_bad["error_code"],
            code,
            "{}",
            context("bad arguments (SDK)")
        );
        assert_eq!(
            sdk_bad["error_data"]["pointer"],
            BAD_ARGUMENTS_POINTER,
            "{}",
            context("bad arguments (SDK pointer)")
        );
    }

    // An unknown tool: a JSON-RPC error (TOOL_NOT_FOUND) in every revision.
    assert_eq!(
        report["unknown_tool"]["error_code"],
        TOOL_NOT_FOUND,
        "{}",
        context("unknown tool (TOOL_NOT_FOUND)")
    );
    let unknown_tool = exchanges
        .call("no_such_tool", |_| true)
        .unwrap_or_else(|| panic!("{}", context("no unknown-tool call on the wire")));
    assert_eq!(
        unknown_tool["error"]["code"],
        TOOL_NOT_FOUND,
        "{}",
        context("unknown tool (wire)")
    );
}

/// `evidence-wire serve --http 127.0.0.1:0` running for one test; killed
/// when dropped.
pub struct HttpServer {
    child: std::process::Child,
    /// The base URL, `http://127.0.0.1:PORT`.
    pub base: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl HttpServer {
    /// Start the server on a free loopback port and wait (at most 60 s)
    /// until it says where it listens.
    pub fn start() -> HttpServer {
        let mut child = Command::new(cli_binary())
            .args(["serve", "--http", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start evidence-wire serve --http: {error}"));
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (address_tx, address_rx) = mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            let log = std::sync::Arc::clone(&log);
            thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stderr).lines() {
                    let Ok(line) = line else { return };
                    if let Some(start) = line.find("http://127.0.0.1:") {
                        let address: String = line[start..]
                            .chars()
                            .take_while(|c| !c.is_whitespace())
                            .collect();
                        let _ = address_tx.send(address);
                    }
                    if let Ok(mut log) = log.lock() {
                        log.push_str(&line);
                        log.push('\n');
                    }
                }
            });
        }
        match address_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(base) => HttpServer { child, base, log },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let log = log.lock().map(|log| log.clone()).unwrap_or_default();
                panic!("evidence-wire serve --http did not report its address:\n{log}");
            }
        }
    }

    /// The MCP endpoint (`POST /mcp`).
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().map(|log| log.clone()).unwrap_or_default()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
