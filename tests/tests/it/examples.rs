//! Every cargo example of the family answers a real query (issue 23 item 4).
//!
//! The examples are the ones `cargo test --workspace` builds into
//! `target/debug/examples/` (cargo builds every example of the packages it
//! tests, to prove they compile); this test runs those binaries. Run alone
//! (`cargo test -p evidence-wire-tests --test it examples::`), it needs them built
//! first: `cargo build --examples -p evidence-wire -p evidence-wire-tokio
//! -p evidence-wire-blocking -p evidence-wire-smol`, and says so.
//!
//! - `git_provider` (tokio, stdio): `head_commit` equals `git rev-parse
//!   HEAD`, `is_clean` flips when a file appears, params outside the derived
//!   schema (a wrong type, a missing or an unknown member) never reach the
//!   function; its source is at most 30 lines and is the README's "Write
//!   your own provider" listing, byte for byte. Its ready command line
//!   (issue 41): `contract` (Decision Gate's rules hold), `--provider-id`
//!   changing the contract's id, `--help` and every example line of its
//!   help run as written, a bad flag refused with exit 2, `serve` on stdio
//!   answering `evidence-wire query --key-file` with evidence signed by the
//!   key `keygen` wrote, `serve --http` under a second id, SIGTERM ending
//!   both cleanly.
//! - `blocking_provider`, `smol_provider`: a typed check each, queried
//!   through our client (hash verified).
//! - `http_provider`: bearer token required (401 without it), answered with
//!   it, through `evidence-wire query --url`.
//! - `axum_app` (tokio, issue 40): the provider mounted in an axum `Router`
//!   at `/evidence` answers `evidence-wire query --url` (Decision Gate's
//!   exchange, hash verified) and the official MCP Python SDK (both
//!   handshakes), while the app's own `GET /hello` is the app's; Ctrl-C
//!   (SIGINT) stops it promptly.
//! - `release_readiness` (issue 41, "measured, not asserted"): its
//!   `contract` meets Decision Gate's rules; `check-provider`'s battery,
//!   requiring signatures by the key `keygen` wrote, fails nothing on stdio
//!   and on HTTP against a fake tracker on loopback, every check's example
//!   value answered and signed; a wrong tracker token is a
//!   `tracker_unauthorized` result.
//! - `caller`: spawns the bundled provider and the git provider, prints
//!   verified evidence, names the profile it verified.
//! - `by_hand`: the core's own output, two Content-Length frames whose hash
//!   verifies.
//! - The README's example command lines, run as written.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use evidence_wire::canonical::Profile;
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult, TriggerTime};
use evidence_wire_blocking::{ProcessConfig, ProcessProvider};
use serde_json::{Value, json};

const CLI: &str = env!("CARGO_BIN_EXE_evidence-wire-cli");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `target/debug` (or wherever cargo put this test binary's profile).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/debug/deps/examples-HASH -> target/debug
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

fn example(name: &str) -> PathBuf {
    let path = profile_dir().join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo test --workspace` builds every example; run alone, first run \
         `cargo build --examples -p evidence-wire -p evidence-wire-tokio -p evidence-wire-blocking -p evidence-wire-smol`",
        path.display()
    );
    path
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-examples-{what}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git is needed by this test (and by the example it runs)");
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8(output.stdout)
        .expect("UTF-8")
        .trim()
        .to_owned()
}

/// Commits what is staged in `dir`, as a throwaway author.
fn commit(dir: &Path, message: &str) {
    let author = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"];
    let mut args = author.to_vec();
    args.extend(["commit", "-q", "-m", message]);
    git(dir, &args);
}

/// A repository with one commit, clean.
fn git_repo() -> TempDir {
    let dir = TempDir::new("repo");
    git(&dir.0, &["init", "-q"]);
    std::fs::write(dir.0.join("README"), "hello\n").expect("write");
    git(&dir.0, &["add", "README"]);
    commit(&dir.0, "first");
    dir
}

fn context() -> EvidenceContext {
    EvidenceContext::adhoc(TriggerTime::Logical(1))
}

fn provider(program: &Path) -> ProcessProvider {
    ProcessProvider::spawn(ProcessConfig::new(vec![program.display().to_string()]))
        .expect("spawn the example")
}

fn ask(
    provider: &ProcessProvider,
    provider_id: &str,
    check_id: &str,
    params: Value,
) -> EvidenceResult {
    let query = EvidenceQuery::new(provider_id, check_id).with_params(params);
    provider
        .query(query, context())
        .unwrap_or_else(|error| panic!("{provider_id}/{check_id}: {error}"))
        .into_result()
}

fn value(result: &EvidenceResult) -> Value {
    let json = serde_json::to_value(result).expect("serialize");
    assert!(json["error"].is_null(), "an error: {json:#}");
    assert!(
        json["evidence_hash"]["value"].is_string(),
        "the server fills the hash: {json:#}"
    );
    json["value"]["value"].clone()
}

fn error_code(result: &EvidenceResult) -> String {
    let json = serde_json::to_value(result).expect("serialize");
    json["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {json:#}"))
        .to_owned()
}

#[test]
fn git_provider_answers_head_commit_and_is_clean() {
    let repo = git_repo();
    let path = repo.0.display().to_string();
    let provider = provider(&example("git_provider"));

    let head = ask(&provider, "git", "head_commit", json!({"path": path}));
    assert_eq!(value(&head), json!(git(&repo.0, &["rev-parse", "HEAD"])));
    let clean = ask(&provider, "git", "is_clean", json!({"path": path}));
    assert_eq!(value(&clean), json!(true));

    std::fs::write(repo.0.join("new-file"), "x").expect("write");
    let dirty = ask(&provider, "git", "is_clean", json!({"path": path}));
    assert_eq!(value(&dirty), json!(false));

    // The function's own failure, as the author wrote it.
    let outside = TempDir::new("not-a-repo");
    let failed = ask(
        &provider,
        "git",
        "head_commit",
        json!({"path": outside.0.display().to_string()}),
    );
    assert_eq!(error_code(&failed), "git_failed");
    // Params outside the derived schema never reach the function.
    let invalid = ask(&provider, "git", "head_commit", json!({"path": 7}));
    assert_eq!(error_code(&invalid), "invalid_params");
    let missing = ask(&provider, "git", "is_clean", json!({}));
    assert_eq!(error_code(&missing), "invalid_params");
    // An unknown (misspelt) member too: params are strict by default.
    let unknown = ask(
        &provider,
        "git",
        "is_clean",
        json!({"path": path, "pth": "."}),
    );
    assert_eq!(error_code(&unknown), "invalid_params");
}

#[test]
fn git_provider_is_at_most_30_lines_and_is_the_readme_listing() {
    let source =
        std::fs::read_to_string(repo_root().join("adapters/tokio/examples/git_provider.rs"))
            .expect("the example");
    let lines = source.lines().count();
    assert!(
        lines <= 30,
        "git_provider.rs has {lines} lines; the SDK promises at most 30"
    );
    assert!(
        !source.contains("json!") && !source.contains("serde_json"),
        "no hand-written JSON: the contract is derived"
    );

    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let listing = rust_blocks(&readme)
        .into_iter()
        .find(|block| block.contains("head_commit"))
        .expect("README's \"Write your own provider\" shows the git provider");
    assert_eq!(
        listing.trim(),
        source.trim(),
        "README's listing and adapters/tokio/examples/git_provider.rs differ: copy the example into the README"
    );
}

#[test]
fn readme_example_table_names_every_example_with_its_line_count() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let mut named = 0;
    for row in readme
        .lines()
        .filter(|line| line.starts_with("| `") && line.contains("/examples/"))
    {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let path = cells[1].trim_matches('`');
        let source = std::fs::read_to_string(repo_root().join(path))
            .unwrap_or_else(|error| panic!("README names {path}: {error}"));
        assert_eq!(
            cells[2],
            source.lines().count().to_string(),
            "README's line count of {path} is stale"
        );
        named += 1;
    }
    let on_disk = [
        "core",
        "adapters/tokio",
        "adapters/blocking",
        "adapters/smol",
    ]
    .iter()
    .filter_map(|dir| std::fs::read_dir(repo_root().join(dir).join("examples")).ok())
    .flat_map(|entries| entries.filter_map(Result::ok))
    .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "rs"))
    .count();
    assert_eq!(named, on_disk, "every example has a README row");
}

fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start().starts_with("```")) {
            (None, true) if line.trim() == "```rust" => current = Some(String::new()),
            (Some(block), true) => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), false) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

#[test]
fn blocking_provider_measures_a_file() {
    let dir = TempDir::new("blocking");
    let file = dir.0.join("data.bin");
    std::fs::write(&file, [0u8; 1234]).expect("write");
    let provider = provider(&example("blocking_provider"));
    let result = ask(
        &provider,
        "disk",
        "file_size",
        json!({"path": file.display().to_string()}),
    );
    assert_eq!(value(&result), json!(1234));
    assert_eq!(
        result.evidence_ref.as_ref().map(|r| r.uri.clone()),
        Some(format!("file://{}", file.display()))
    );
    let missing = ask(
        &provider,
        "disk",
        "file_size",
        json!({"path": dir.0.join("absent").display().to_string()}),
    );
    assert_eq!(error_code(&missing), "file_unreadable");
}

#[test]
fn smol_provider_counts_lines_with_an_async_check() {
    let dir = TempDir::new("smol");
    let file = dir.0.join("text.txt");
    std::fs::write(&file, "one\ntwo\nthree\n").expect("write");
    let provider = provider(&example("smol_provider"));
    let result = ask(
        &provider,
        "text",
        "line_count",
        json!({"path": file.display().to_string()}),
    );
    assert_eq!(value(&result), json!(3));
}

/// Kills the child when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

use crate::interop_support;

/// The first stderr line of `child`, `listening on http://ADDR/PATH`: the URL.
fn announced_url(child: &mut Child) -> String {
    let stderr = child.stderr.take().expect("stderr");
    let mut first = String::new();
    BufReader::new(stderr)
        .read_line(&mut first)
        .expect("read the announced address");
    first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no address announced: {first:?}"))
        .to_owned()
}

/// A plain `GET` over HTTP/1.1: the status line and the body.
fn http_get(address: &str, path: &str) -> (String, String) {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

#[test]
fn axum_app_serves_decision_gate_and_mcp_clients_beside_its_own_routes() {
    let mut child = Killed(
        Command::new(example("axum_app"))
            .env("EW_ADDR", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn axum_app"),
    );
    let url = announced_url(&mut child.0);
    let address = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/evidence"))
        .unwrap_or_else(|| panic!("{url}"))
        .to_owned();

    // The application's own route.
    let (status, body) = http_get(&address, "/hello");
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(body, "hello from the app");
    // The provider's path answers calls only.
    let (status, _) = http_get(&address, "/evidence");
    assert!(status.contains(" 405 "), "{status}");

    // Decision Gate's exchange, verified as Decision Gate verifies it.
    let answered = Command::new(CLI)
        .args(["query", "--url", &url, "--allow-insecure-http"])
        .args(["--provider-id", "greeter", "--check", "greeting"])
        .args(["--params", r#"{"name":"Ada"}"#, "--timeout-ms", "5000"])
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .env_remove("EVIDENCE_WIRE_BEARER_TOKEN")
        .output()
        .expect("run evidence-wire query");
    assert!(answered.status.success(), "{answered:?}");
    let result: Value = serde_json::from_slice(&answered.stdout).expect("JSON");
    assert_eq!(result["value"]["value"], json!("hello, Ada"), "{result:#}");
    assert!(result["evidence_hash"]["value"].is_string(), "{result:#}");

    // An MCP host: the official Python SDK, with either handshake.
    if let Some(python) = interop_support::venv_python() {
        for mode in ["auto", "legacy"] {
            let mut command = Command::new(&python);
            command
                .arg(interop_support::peer_script("mcp_python_query.py"))
                .args(["--mode", mode, "--http", &url, "--query"])
                .arg(
                    r#"{"provider_id":"greeter","check_id":"greeting","params":{"name":"Grace"}}"#,
                );
            let output = interop_support::run(&mut command, b"", interop_support::PEER_TIMEOUT);
            let report = output.report(&format!("mcp_python_query.py ({mode})"));
            assert_eq!(report["tools"], json!(["evidence_query"]), "{report:#}");
            assert_eq!(report["is_error"], json!(false), "{report:#}");
            let evidence: Value =
                serde_json::from_str(report["text"].as_str().expect("a text item"))
                    .expect("the text item is the EvidenceResult");
            let evidence: EvidenceResult = serde_json::from_value(evidence).expect("result");
            assert_eq!(
                evidence
                    .value
                    .as_ref()
                    .map(|value| serde_json::to_value(value).expect("JSON")),
                Some(json!({"kind": "json", "value": "hello, Grace"})),
                "{report:#}"
            );
            let recomputed = evidence
                .clone()
                .with_computed_hash(Profile::DecisionGate)
                .expect("hash");
            assert!(evidence.evidence_hash.is_some(), "{report:#}");
            assert_eq!(
                evidence.evidence_hash, recomputed.evidence_hash,
                "{report:#}"
            );
        }
    }

    // Ctrl-C: the provider drains, the app stops, promptly.
    let pid = child.0.id().to_string();
    let interrupted = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(interrupted.success());
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "axum_app still runs 10 s after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn http_provider_requires_its_bearer_token() {
    let mut child = Killed(
        Command::new(example("http_provider"))
            .arg("127.0.0.1:0")
            .env("EVIDENCE_WIRE_TOKEN", "s3cret-token")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn http_provider"),
    );
    let stderr = child.0.stderr.take().expect("stderr");
    let mut first = String::new();
    BufReader::new(stderr)
        .read_line(&mut first)
        .expect("read the announced address");
    let url = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no address announced: {first:?}"))
        .to_owned();

    let query = |token: Option<&str>| -> Output {
        let mut command = Command::new(CLI);
        command.args([
            "query",
            "--url",
            &url,
            "--allow-insecure-http",
            "--provider-id",
            "files",
            "--check",
            "file_exists",
            "--params",
            r#"{"path":"/"}"#,
            "--timeout-ms",
            "5000",
        ]);
        if let Some(token) = token {
            command.args(["--bearer-token", token]);
        }
        command
            .env_remove("EVIDENCE_WIRE_CONFIG")
            .env_remove("EVIDENCE_WIRE_BEARER_TOKEN")
            .output()
            .expect("run evidence-wire query")
    };
    let answered = query(Some("s3cret-token"));
    assert!(answered.status.success(), "{answered:?}");
    let result: Value = serde_json::from_slice(&answered.stdout).expect("JSON");
    assert_eq!(result["value"]["value"], json!(true), "{result:#}");

    let refused = query(None);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("401"), "no token, 401: {stderr}");
    let wrong = query(Some("not-the-token"));
    assert_eq!(wrong.status.code(), Some(1), "{wrong:?}");

    // Without a token the example refuses to start, saying why.
    let refused_start = Command::new(example("http_provider"))
        .arg("127.0.0.1:0")
        .env_remove("EVIDENCE_WIRE_TOKEN")
        .output()
        .expect("run http_provider");
    assert!(!refused_start.status.success());
    assert!(
        String::from_utf8_lossy(&refused_start.stderr).contains("EVIDENCE_WIRE_TOKEN"),
        "{refused_start:?}"
    );
}

fn run_with_deadline(mut command: Command, deadline: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            panic!("{command:?} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

#[test]
fn caller_spawns_queries_and_verifies() {
    let dir = TempDir::new("caller");
    let mut command = Command::new(example("caller"));
    command
        .args(["evidence-wire", "time_now", "--", CLI, "serve", "--no-log"])
        .current_dir(&dir.0)
        .env_remove("EVIDENCE_WIRE_CONFIG");
    let output = run_with_deadline(command, Duration::from_secs(20));
    assert!(output.status.success(), "{output:?}");
    let result: Value = serde_json::from_slice(&output.stdout).expect("JSON evidence");
    assert!(result["value"]["value"].is_i64(), "{result:#}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("verified: sha256 ") && stderr.contains("decision-gate profile"),
        "the caller names what it verified: {stderr}"
    );

    // An unknown check is the provider's answer, not a crash of the caller.
    let mut command = Command::new(example("caller"));
    command
        .args([
            "evidence-wire",
            "no_such_check",
            "--",
            CLI,
            "serve",
            "--no-log",
        ])
        .current_dir(&dir.0)
        .env_remove("EVIDENCE_WIRE_CONFIG");
    let output = run_with_deadline(command, Duration::from_secs(20));
    let result: Value = serde_json::from_slice(&output.stdout).expect("JSON evidence");
    assert_eq!(result["error"]["code"], "unknown_check", "{result:#}");

    // A usage mistake says how to call it.
    let output = run_with_deadline(Command::new(example("caller")), Duration::from_secs(20));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("usage: caller"));
}

/// The readiness-loop example serves 1,000 pipelined calls to a slow reader
/// and closes only once every byte is written.
#[test]
fn nonblocking_serves_a_slow_reader_every_answer() {
    let output = run_with_deadline(
        Command::new(example("nonblocking")),
        Duration::from_secs(60),
    );
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with("1000 answers over 1 connection(s)"),
        "{stdout}"
    );
}

#[test]
fn by_hand_writes_two_framed_answers_whose_hash_verifies() {
    let output = run_with_deadline(Command::new(example("by_hand")), Duration::from_secs(20));
    assert!(output.status.success(), "{output:?}");
    let mut decoder = evidence_wire::frame::Decoder::new(evidence_wire::frame::Limits::default());
    decoder.push(&output.stdout);
    let mut answers = Vec::new();
    while let Some(frame) = decoder.poll_frame() {
        let frame = frame.expect("a well-formed frame");
        answers.push(serde_json::from_slice::<Value>(&frame.body).expect("JSON"));
    }
    assert_eq!(answers.len(), 2, "{output:?}");
    assert_eq!(
        decoder.framing(),
        Some(evidence_wire::frame::Framing::ContentLength)
    );
    let first = &answers[0]["result"]["content"][0]["json"];
    let result: EvidenceResult = serde_json::from_value(first.clone()).expect("EvidenceResult");
    let recomputed = result
        .clone()
        .with_computed_hash(Profile::DecisionGate)
        .expect("hash");
    assert_eq!(result.evidence_hash, recomputed.evidence_hash, "{first:#}");
    assert!(result.evidence_hash.is_some());
    assert_eq!(
        answers[1]["result"]["content"][0]["json"]["error"]["code"],
        "unknown_check"
    );
}

/// README lines that build or run the examples (`tests/it/cli_documented.rs`
/// leaves these to this test).
fn readme_example_lines() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && trimmed == "```sh";
            continue;
        }
        let command = trimmed.split("  #").next().unwrap_or_default().trim();
        if in_sh
            && (command.starts_with("cargo build") || command.starts_with("target/debug/examples/"))
        {
            lines.push(command.to_owned());
        }
    }
    lines
}

#[test]
fn readme_example_lines_run_as_written() {
    let lines = readme_example_lines();
    assert!(
        lines.len() >= 2,
        "README shows how to build and run the examples: {lines:?}"
    );
    // Run in a git repository whose `target` is this build's, so
    // `target/debug/examples/...` and `"path":"."` mean what they say.
    let repo = git_repo();
    let target = profile_dir().parent().expect("target dir").to_path_buf();
    std::os::unix::fs::symlink(&target, repo.0.join("target")).expect("symlink target");
    std::fs::write(repo.0.join(".gitignore"), "target\n").expect("write");
    git(&repo.0, &["add", ".gitignore"]);
    commit(&repo.0, "ignore target");
    for line in &lines {
        let words = shell_words(line);
        if words.first().map(String::as_str) == Some("cargo") {
            // `cargo build --examples`: `cargo test` already built them (a
            // nested cargo would wait on this run's own build lock); what
            // the line promises is that the binaries are there.
            assert!(
                line.contains("--examples"),
                "{line}: only `cargo build ... --examples` is understood"
            );
            for name in ["git_provider", "http_provider", "caller"] {
                example(name);
            }
            continue;
        }
        let mut command = Command::new(repo.0.join(&words[0]));
        command.args(&words[1..]).current_dir(&repo.0);
        let output = run_with_deadline(command, Duration::from_secs(20));
        assert!(output.status.success(), "README `{line}`: {output:?}");
        let result: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|error| panic!("README `{line}`: not JSON ({error}): {output:?}"));
        assert_eq!(
            result["value"]["value"],
            json!(git(&repo.0, &["rev-parse", "HEAD"])),
            "README `{line}`"
        );
    }
}

/// Splits a line the way sh does for the quoting the README uses (single
/// quotes, plain words).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(current);
    }
    words
}

// ---------------------------------------------------------------------------
// The git example's ready command line (issue 41 item 1): `main` is
// `provider().run()`, and the binary has `serve` (stdio, --http,
// --signing-key, --provider-id), `contract` and `--help`.

/// Runs the git example with `args` in `dir`, stdin closed.
fn git_provider_in(dir: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(example("git_provider"));
    command.args(args).current_dir(dir);
    run_with_deadline(command, Duration::from_secs(20))
}

/// `evidence-wire keygen --out DIR/signing-key`: the seed and the `.pub`.
fn keygen(dir: &Path) -> (PathBuf, PathBuf) {
    let out = dir.join("signing-key");
    let output = Command::new(CLI)
        .arg("keygen")
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run evidence-wire keygen");
    assert!(output.status.success(), "{output:?}");
    (out.clone(), dir.join("signing-key.pub"))
}

#[test]
fn git_provider_prints_its_contract_help_and_refuses_a_bad_flag() {
    let dir = TempDir::new("git-cli");
    let help = git_provider_in(&dir.0, &["--help"]);
    assert!(help.status.success(), "{help:?}");
    let text = String::from_utf8_lossy(&help.stdout);
    for expected in [
        "Facts about a git working tree.",
        "serve",
        "contract",
        "--version",
    ] {
        assert!(text.contains(expected), "--help names {expected}: {text}");
    }
    let serve_help = git_provider_in(&dir.0, &["serve", "--help"]);
    let text = String::from_utf8_lossy(&serve_help.stdout);
    for flag in [
        "--http <ADDR>",
        "--tls-cert <FILE>",
        "--tls-key <FILE>",
        "--root <DIR>",
        "--signing-key <FILE>",
        "--key-id <ID>",
        "--provider-id <ID>",
        "--log-dir <DIR>",
        "--no-log",
        "--drain-timeout-ms <MS>",
    ] {
        assert!(text.contains(flag), "serve --help has {flag}: {text}");
    }

    let contract = git_provider_in(&dir.0, &["contract"]);
    assert!(contract.status.success(), "{contract:?}");
    let json: Value = serde_json::from_slice(&contract.stdout).expect("contract JSON");
    assert_eq!(json["provider_id"], "git");
    let ids: Vec<&str> = json["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter_map(|check| check["check_id"].as_str())
        .collect();
    assert_eq!(ids, ["head_commit", "is_clean"]);
    // Strict params by default (issue 41 item 6).
    assert_eq!(
        json["checks"][0]["params_schema"]["additionalProperties"],
        false
    );
    std::fs::write(dir.0.join("git.contract.json"), &contract.stdout).expect("write");
    let checked = Command::new(CLI)
        .args(["contract", "--check", "git.contract.json"])
        .current_dir(&dir.0)
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .output()
        .expect("run contract --check");
    assert!(
        checked.status.success(),
        "Decision Gate's rules: {checked:?}"
    );

    let second = git_provider_in(&dir.0, &["contract", "--provider-id", "git-http"]);
    let json: Value = serde_json::from_slice(&second.stdout).expect("contract JSON");
    assert_eq!(
        json["provider_id"], "git-http",
        "--provider-id changes the id"
    );

    let bad = git_provider_in(&dir.0, &["serve", "--signing-kee", "k"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("unexpected argument '--signing-kee'")
            && stderr.contains("--signing-key")
            && stderr.contains("Usage: git_provider serve"),
        "a clear usage error, with the flag it resembles: {stderr}"
    );
    let missing = git_provider_in(&dir.0, &["serve", "--signing-key", "no-such-key"]);
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .starts_with("git_provider: --signing-key: signing key file no-such-key: "),
        "{missing:?}"
    );
    let version = git_provider_in(&dir.0, &["--version"]);
    assert!(version.status.success(), "{version:?}");
    // Reachable from other machines without a token: refused, saying how.
    let exposed = git_provider_in(&dir.0, &["serve", "--http", "0.0.0.0:0"]);
    assert_eq!(exposed.status.code(), Some(2), "{exposed:?}");
    assert!(
        String::from_utf8_lossy(&exposed.stderr).contains("--bearer-token-file"),
        "{exposed:?}"
    );
}

#[test]
fn git_provider_serves_signed_evidence_on_stdio_verified_with_the_public_key() {
    let repo = git_repo();
    let keys = TempDir::new("git-keys");
    let (seed, public) = keygen(&keys.0);
    let query = |serve: &[&str], provider_id: &str| -> Output {
        let mut command = Command::new(CLI);
        command
            .args([
                "query",
                "--provider-id",
                provider_id,
                "--check",
                "head_commit",
            ])
            .arg("--params")
            .arg(json!({"path": repo.0.display().to_string()}).to_string())
            .arg("--key-file")
            .arg(&public)
            .arg("--")
            .arg(example("git_provider"))
            .args(serve)
            .current_dir(&repo.0)
            .env_remove("EVIDENCE_WIRE_CONFIG");
        run_with_deadline(command, Duration::from_secs(20))
    };
    let key_id = public.display().to_string();
    let signed = query(
        &[
            "serve",
            "--signing-key",
            &seed.display().to_string(),
            "--key-id",
            &key_id,
            "--provider-id",
            "git-stdio",
        ],
        "git-stdio",
    );
    assert!(signed.status.success(), "{signed:?}");
    let result: Value = serde_json::from_slice(&signed.stdout).expect("JSON");
    assert_eq!(
        result["value"]["value"],
        json!(git(&repo.0, &["rev-parse", "HEAD"]))
    );
    assert_eq!(result["signature"]["key_id"], key_id.as_str());
    let stderr = String::from_utf8_lossy(&signed.stderr);
    assert!(stderr.contains("signed by key"), "{stderr}");
    // The provider left nothing in the working tree (no log by default).
    assert_eq!(git(&repo.0, &["status", "-s"]), "");

    // Unsigned, the same key requirement refuses it.
    let unsigned = query(&["serve"], "git");
    assert_eq!(unsigned.status.code(), Some(1), "{unsigned:?}");
    assert!(
        String::from_utf8_lossy(&unsigned.stderr).contains("signature"),
        "{unsigned:?}"
    );
}

/// Sends SIGTERM to `child`.
fn terminate(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Waits up to `deadline` for `child` to exit; its exit code.
fn exit_within(child: &mut Child, deadline: Duration) -> Option<i32> {
    let started = std::time::Instant::now();
    while started.elapsed() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn git_provider_serves_http_under_a_second_id_with_a_token_and_drains_on_sigterm() {
    let repo = git_repo();
    let secrets = TempDir::new("git-token");
    let token_file = secrets.0.join("token");
    std::fs::write(&token_file, "s3cret-token\n").expect("write the token");
    let mut child = Killed(
        Command::new(example("git_provider"))
            .args(["serve", "--http", "127.0.0.1:0", "--provider-id"])
            .args(["git-http", "--bearer-token-file"])
            .arg(&token_file)
            .current_dir(&repo.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn git_provider serve --http"),
    );
    let url = announced_url(&mut child.0);
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/rpc"),
        "{url}"
    );
    let query = |token: Option<&str>| -> Output {
        let mut command = Command::new(CLI);
        command
            .args(["query", "--url", &url, "--allow-insecure-http"])
            .args(["--provider-id", "git-http", "--check", "is_clean"])
            .arg("--params")
            .arg(json!({"path": repo.0.display().to_string()}).to_string())
            .env_remove("EVIDENCE_WIRE_CONFIG")
            .env_remove("EVIDENCE_WIRE_BEARER_TOKEN");
        if let Some(token) = token {
            command.args(["--bearer-token", token]);
        }
        command.output().expect("run evidence-wire query --url")
    };
    // --bearer-token-file: no token, 401.
    let refused = query(None);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("401"),
        "{refused:?}"
    );
    let output = query(Some("s3cret-token"));
    assert!(output.status.success(), "{output:?}");
    let result: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(result["value"]["value"], json!(true), "{result:#}");
    terminate(&child.0);
    assert_eq!(exit_within(&mut child.0, Duration::from_secs(10)), Some(0));
}

#[test]
fn git_provider_on_stdio_exits_cleanly_on_sigterm() {
    let dir = TempDir::new("git-term");
    let mut child = Killed(
        Command::new(example("git_provider"))
            .current_dir(&dir.0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn git_provider"),
    );
    // stdin stays open: only the signal ends it.
    std::thread::sleep(Duration::from_millis(300));
    terminate(&child.0);
    assert_eq!(exit_within(&mut child.0, Duration::from_secs(10)), Some(0));
    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert!(stderr.contains("shutting down"), "{stderr}");
}

/// Every example line of the git example's `--help` texts, run as written
/// (in a directory holding the `signing-key` they name; `--http` on port 0).
#[test]
fn git_provider_help_examples_run_as_written() {
    let mut lines = Vec::new();
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["contract", "--help"],
    ] {
        let output = git_provider_in(&std::env::temp_dir(), args);
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        lines.extend(
            text.lines()
                .filter_map(|line| line.strip_prefix("  git_provider "))
                .map(str::to_owned),
        );
    }
    lines.sort();
    lines.dedup();
    assert!(lines.len() >= 5, "{lines:?}");
    for line in &lines {
        let dir = TempDir::new("git-help");
        let (seed, _) = keygen(&dir.0);
        assert_eq!(seed, dir.0.join("signing-key"));
        let (words, redirect) = match line.split_once(" > ") {
            Some((words, file)) => (words, Some(file.trim())),
            None => (line.as_str(), None),
        };
        let mut args: Vec<String> = words.split_whitespace().map(str::to_owned).collect();
        if let Some(at) = args.iter().position(|arg| arg == "--http") {
            let address: std::net::SocketAddr = args[at + 1].parse().expect("ADDR");
            args[at + 1] = format!("{}:0", address.ip());
            let mut child = Killed(
                Command::new(example("git_provider"))
                    .args(&args)
                    .current_dir(&dir.0)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn"),
            );
            let url = announced_url(&mut child.0);
            let (status, _) = http_get(
                url.trim_start_matches("http://").trim_end_matches("/rpc"),
                "/healthz",
            );
            assert!(status.contains("200"), "`{line}`: {status}");
            continue;
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = git_provider_in(&dir.0, &refs);
        assert!(output.status.success(), "`{line}`: {output:?}");
        match redirect {
            Some(file) => {
                let json: Value = serde_json::from_slice(&output.stdout)
                    .unwrap_or_else(|error| panic!("`{line}`: {error}"));
                let id = file.trim_end_matches(".contract.json");
                assert_eq!(json["provider_id"], id, "`{line}`");
            }
            // `serve` on stdio with nothing to read: nothing written.
            None => assert!(output.stdout.is_empty(), "`{line}`: {output:?}"),
        }
    }
}

// ---------------------------------------------------------------------------
// The examples against check-provider's battery, as a library
// (`evidence_wire_tokio::testing`, issue 41 item 5): what a provider's own
// `cargo test` runs against its binary or its URL.
// ---------------------------------------------------------------------------

#[path = "../../../adapters/tokio/examples/files_provider.rs"]
#[allow(dead_code)] // its `main` is the example's, not this test's
mod files_provider;

use evidence_wire_tokio::testing::{self as provider_testing, CheckProvider, Report, Status};

/// An evidence root for the files example: `notes.txt`, the file its
/// contract's examples read.
fn notes_root() -> TempDir {
    let dir = TempDir::new("files-root");
    std::fs::write(dir.0.join("notes.txt"), "one\ntwo\nthree").expect("write");
    dir
}

/// The files example's binary, spawned as Decision Gate spawns it, held
/// to its own contract: every line passes (examples, schemas, hashes,
/// transport, robustness, shutdown), and the caller example reads the
/// same verified answer from it as the in-process test client.
#[test]
fn files_provider_binary_passes_check_provider_and_the_caller_agrees() {
    let root = notes_root();
    let program = example("files_provider").display().to_string();
    let root_arg = root.0.display().to_string();
    let serve = [
        program.clone(),
        "serve".into(),
        "--root".into(),
        root_arg.clone(),
    ];
    let report = CheckProvider::command(serve.clone())
        .contract(files_provider::files().contract())
        .samples(3)
        .run();
    report.assert_clean();
    assert!(
        report.line("transport.shutdown").is_some(),
        "{}",
        report.table()
    );

    let mut command = Command::new(example("caller"));
    command.args(["files", "line_count", r#"{"path":"notes.txt"}"#, "--"]);
    command.args(&serve);
    let output = run_with_deadline(command, Duration::from_secs(20));
    assert!(output.status.success(), "{output:?}");
    let printed: Value = serde_json::from_slice(&output.stdout).expect("JSON evidence");
    let provider = files_provider::files()
        .root(evidence_wire_provider::EvidenceRoot::open(&root.0).expect("the root"));
    let mut client = provider_testing::decision_gate(provider).expect("a test client");
    let expected = client
        .query("line_count", json!({"path": "notes.txt"}))
        .expect("verified");
    assert_eq!(Some(printed["value"]["value"].clone()), expected.value());
    assert_eq!(
        printed["evidence_ref"]["uri"].as_str(),
        expected.evidence_ref()
    );
}

/// The git example's binary: its contract is not served, so the battery
/// reads its checks from `tools/list`; nothing fails.
#[test]
fn git_provider_binary_fails_nothing_in_check_provider() {
    let report = CheckProvider::command([example("git_provider").display().to_string()])
        .samples(3)
        .run();
    report.assert_passed();
    let source = report.line("contract.source").expect("contract.source");
    assert_eq!(source.status, Status::Warn, "{}", report.table());
}

/// Spawns an HTTP example and returns it with the URL it announced.
fn spawn_http_example(name: &str, command: &mut Command) -> (Killed, String) {
    let mut child = Killed(
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("spawn {name}: {error}")),
    );
    let url = announced_url(&mut child.0);
    (child, url)
}

fn http_battery(url: &str, token: Option<&str>) -> Report {
    let mut config =
        evidence_wire_tokio::HttpProviderConfig::new(url.to_owned()).with_insecure_http(true);
    if let Some(token) = token {
        config = config.with_bearer_token(token.to_owned());
    }
    let provider = evidence_wire_tokio::HttpProvider::new(config).expect("an HTTP client");
    CheckProvider::http(provider, url).samples(3).run()
}

/// The HTTP example behind its bearer token: the battery with the token
/// fails nothing.
#[test]
fn http_provider_fails_nothing_in_check_provider() {
    let mut command = Command::new(example("http_provider"));
    command
        .arg("127.0.0.1:0")
        .env("EVIDENCE_WIRE_TOKEN", "s3cret-token");
    let (_child, url) = spawn_http_example("http_provider", &mut command);
    http_battery(&url, Some("s3cret-token")).assert_passed();
}

/// The provider mounted in the axum example: the battery against its
/// `/evidence` path fails nothing.
#[test]
fn axum_app_fails_nothing_in_check_provider() {
    let mut command = Command::new(example("axum_app"));
    command.env("EW_ADDR", "127.0.0.1:0");
    let (_child, url) = spawn_http_example("axum_app", &mut command);
    http_battery(&url, None).assert_passed();
}

/// The rate tool against a provider answering the bundled `time_now` over
/// HTTP in this process, one the battery passes first: every query it
/// asks verifies.
#[test]
fn http_client_rate_measures_a_provider_the_battery_passes() {
    use evidence_wire_tokio::prelude::*;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let provider = Provider::new("evidence-wire", "The clock.").check(
        Check::new(
            "time_now",
            "The trigger time.",
            |_: NoParams, context: &CheckContext| match context.context().trigger_time {
                TriggerTime::UnixMillis(millis) => Ok(millis),
                TriggerTime::Logical(tick) => Ok(tick),
            },
        )
        .determinism(Determinism::TimeDependent)
        .inline(),
    );
    let config = HttpServerConfig::default();
    let (address, stop, served) = runtime.block_on(async {
        let listener = bind_http("127.0.0.1:0".parse().expect("address"), &config)
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(serve_http(listener, provider, config, async move {
            let _ = stopped.await;
        }));
        (address, stop, served)
    });
    let url = format!("http://{address}/rpc");
    http_battery(&url, None).assert_passed();

    let mut command = Command::new(example("http_client_rate"));
    command.args([url.as_str(), "0.2", "4"]);
    let output = run_with_deadline(command, Duration::from_secs(30));
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert!(rows[0].starts_with("sequential(1) ") && rows[1].starts_with("concurrent(4) "));
    for row in rows {
        assert!(row.ends_with(" 0 failures"), "{row}");
        assert!(!row.contains(" 0 calls "), "{row}");
    }
    let _ = stop.send(());
    runtime
        .block_on(served)
        .expect("the server task")
        .expect("a clean stop");
}

// ---------------------------------------------------------------------------
// The release-readiness example (issue 41, "measured, not asserted"): the
// newcomer's three-check provider rewritten on the SDK, its binary served
// on stdio and on HTTP, signed, against a fake tracker on loopback.
// ---------------------------------------------------------------------------

#[path = "../../../adapters/tokio/tests/it/fake_tracker.rs"]
mod fake_tracker;

/// An evidence root for the release example: what its contract's examples
/// read (`coverage.json` at 87.5 %, a `CHANGELOG.md` with 1.4.0).
fn release_root() -> TempDir {
    let dir = TempDir::new("release-root");
    let summary = json!({"data": [{"totals": {"lines": {"percent": 87.5}}}]});
    std::fs::write(dir.0.join("coverage.json"), summary.to_string()).expect("write");
    std::fs::write(dir.0.join("CHANGELOG.md"), "## [1.4.0] - 2026-11-28\n").expect("write");
    dir
}

/// `report` fails nothing, and every check of the release example answered
/// its contract's example with a value signed by the required key.
fn values_signed(report: &Report) {
    report.assert_clean();
    for check in ["line_coverage", "changelog_has_entry", "open_blockers"] {
        for line in ["example[0]", "signature"] {
            let line = format!("check.{check}.{line}");
            assert!(report.line(&line).is_some(), "{line}: {}", report.table());
        }
    }
}

/// The release example's binary with a key `keygen` wrote: its contract
/// (printed by `contract`) meets Decision Gate's rules, and `check-provider`'s
/// battery, requiring every result signed by the public key, fails nothing
/// on stdio (token as a flag) and on HTTP (token from `TRACKER_TOKEN`); the
/// contract's examples ran, so every check's value is checked on both.
/// With a wrong token, the tracker's 401 is a clear error result.
#[test]
fn release_readiness_binary_serves_signed_evidence_on_stdio_and_http() {
    use evidence_wire::contract::ProviderContract;
    let root = release_root();
    let tracker = fake_tracker::start();
    let keys = TempDir::new("release-keys");
    let (seed, public) = keygen(&keys.0);
    let key_id = public.display().to_string();
    let program = example("release_readiness");

    let printed = run_with_deadline(
        {
            let mut command = Command::new(&program);
            command.arg("contract");
            command
        },
        Duration::from_secs(20),
    );
    assert!(printed.status.success(), "{printed:?}");
    let contract: ProviderContract = serde_json::from_slice(&printed.stdout).expect("a contract");
    let violations = contract.check_decision_gate_rules();
    assert!(violations.is_empty(), "{violations:?}");

    let serve: Vec<String> = [
        program.display().to_string(),
        "serve".into(),
        "--root".into(),
        root.0.display().to_string(),
        "--tracker-url".into(),
        tracker.clone(),
        "--signing-key".into(),
        seed.display().to_string(),
        "--key-id".into(),
        key_id.clone(),
    ]
    .into();
    let mut stdio = serve.clone();
    stdio.extend(["--tracker-token".into(), fake_tracker::TOKEN.into()]);
    let report = CheckProvider::command(stdio)
        .contract(contract.clone())
        .require_signature_file(&public)
        .expect("the key")
        .samples(2)
        .run();
    values_signed(&report);

    let mut command = Command::new(&program);
    command
        .args(&serve[1..])
        .args(["--http", "127.0.0.1:0"])
        .env("TRACKER_TOKEN", fake_tracker::TOKEN);
    let (_child, url) = spawn_http_example("release_readiness", &mut command);
    let client = evidence_wire_tokio::HttpProvider::new(
        evidence_wire_tokio::HttpProviderConfig::new(url.clone()).with_insecure_http(true),
    )
    .expect("an HTTP client");
    let report = CheckProvider::http(client, &url)
        .contract(contract)
        .require_signature_file(&public)
        .expect("the key")
        .samples(2)
        .run();
    values_signed(&report);

    // A wrong token: the tracker's 401, answered as an error result.
    let mut wrong = serve;
    wrong.extend(["--tracker-token".into(), "not-the-token".into()]);
    let unauthorized =
        ProcessProvider::spawn(ProcessConfig::new(wrong)).expect("spawn the example");
    let refused = ask(
        &unauthorized,
        "release",
        "open_blockers",
        json!({"label": "release-blocker"}),
    );
    assert_eq!(error_code(&refused), "tracker_unauthorized");
}

/// `serve --call-timeout-ms` gives every call of the ready command line a
/// deadline: the release example's tracker check bounds its request with
/// `CheckContext::remaining()`, so a tracker that stalls (10 s) is given up
/// within the 300 ms (without the flag the check waits its own 10 s).
/// Zero is refused as a usage error that says why.
#[test]
fn release_readiness_binary_gives_every_call_the_call_timeout_as_its_deadline() {
    let root = release_root();
    let tracker = fake_tracker::start();
    let program = example("release_readiness");
    let serve: Vec<String> = [
        program.display().to_string(),
        "serve".into(),
        "--root".into(),
        root.0.display().to_string(),
        "--tracker-url".into(),
        tracker,
        "--tracker-token".into(),
        fake_tracker::TOKEN.into(),
        "--call-timeout-ms".into(),
        "300".into(),
    ]
    .into();
    let provider = ProcessProvider::spawn(ProcessConfig::new(serve)).expect("spawn the example");
    let started = std::time::Instant::now();
    let stalled = ask(
        &provider,
        "release",
        "open_blockers",
        json!({"label": "stall"}),
    );
    let elapsed = started.elapsed();
    assert_eq!(error_code(&stalled), "tracker_timeout", "{stalled:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    let message = stalled.error.as_ref().map(|error| error.message.clone());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("ms") && !m.contains("10s")),
        "the deadline, not the 10 s fallback: {message:?}"
    );

    let zero = run_with_deadline(
        {
            let mut command = Command::new(&program);
            command.args(["serve", "--call-timeout-ms", "0"]);
            command
        },
        Duration::from_secs(20),
    );
    assert_eq!(zero.status.code(), Some(2), "{zero:?}");
    let stderr = String::from_utf8_lossy(&zero.stderr);
    assert!(stderr.contains("no time at all"), "{stderr}");
}
