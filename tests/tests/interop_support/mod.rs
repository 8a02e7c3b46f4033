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

use serde_json::Value;

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

/// Check the report of `mcp_python_client.py` / `mcp_ts_client.mjs` (the
/// same sequence through an official MCP SDK) against independent
/// expectations: wire-facts hashes, our own client's view of the same
/// query, and the docs registry the server embeds.
pub fn check_mcp_sdk_report(report: &Value) {
    use evidence_wire_docs::{DocsLimits, DocsRegistry, SEARCH_TOOL_NAME};
    let context = |what: &str| format!("{what}\nreport: {report:#}");

    assert_eq!(
        report["server_name"],
        "evidence-wire",
        "{}",
        context("serverInfo.name")
    );
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        tools.contains(&"evidence_query"),
        "{}",
        context("tools/list")
    );
    assert!(
        tools.contains(&SEARCH_TOOL_NAME),
        "{}",
        context("tools/list lacks docs search")
    );

    // tools/call evidence_query: parsed by the SDK, structuredContent equal
    // to the text item and to what our own client sees.
    let evidence = &report["evidence"]["structured_content"];
    assert_time_now_evidence(evidence, &context("structuredContent"));
    assert_eq!(
        report["computed_hash"],
        HASH_OF_TRIGGER_TIME,
        "{}",
        context("the SDK side's own hash of the value")
    );
    assert_eq!(
        report["evidence"]["content_types"],
        serde_json::json!(["text"])
    );
    let text: Value = report["evidence"]["text"]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_else(|| panic!("{}", context("the text item is not JSON")));
    assert_eq!(
        &text,
        evidence,
        "{}",
        context("text item vs structuredContent")
    );

    // Docs search: exactly what the embedded registry answers.
    let registry = DocsRegistry::with_default_corpus(DocsLimits::default())
        .unwrap_or_else(|error| panic!("default docs corpus: {error}"));
    let expected_search = registry
        .call_search(&serde_json::json!({"query": "evidence hash", "max_sections": 2}))
        .unwrap_or_else(|error| panic!("docs search: {error:?}"));
    let search = &report["docs_search"]["structured_content"];
    assert_eq!(
        search,
        &expected_search,
        "{}",
        context("docs search result")
    );
    let sections = search["sections"].as_array().map_or(0, Vec::len);
    assert!(
        (1..=2).contains(&sections),
        "{}",
        context("docs search sections")
    );

    // Resources: the registry's documents, read back byte for byte.
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

    // Unknown resource and unknown tool: JSON-RPC errors the SDK surfaces.
    assert_eq!(
        report["unknown_resource_error"],
        -32002,
        "{}",
        context("unknown resource")
    );
    assert_eq!(
        report["unknown_tool"]["error_code"],
        -32001,
        "{}",
        context("unknown tool (TOOL_NOT_FOUND)")
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
