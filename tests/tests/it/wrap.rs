//! `evidence-wire wrap` (issue 42) in front of providers written from the
//! protocol text in other languages: the repository's Python Decision
//! Gate-style provider (`tests/peers/dg_provider.py`, standard library only,
//! so those tests never skip) and a TypeScript one
//! (`tests/peers/dg_provider.ts`, run by the peers' Node 22 with type
//! stripping; skipped with a note under `EVIDENCE_WIRE_SKIP_INTEROP=1` when
//! it is not installed).
//!
//! What a Decision Gate-style caller (our core client: Content-Length, no
//! handshake, a trust policy requiring the signature) sees through `wrap`:
//!
//! - over stdio and over HTTP, signed evidence that verifies, with the
//!   hashes Decision Gate's own code computes (wire-facts §1), also for an
//!   answer the provider sent without a hash;
//! - a wrong hash from the provider becomes an error, never a signed result;
//! - a check the contract does not declare, and params that fail the
//!   check's `params_schema`, are refused without reaching the provider
//!   (the provider writes what it received to a file, checked here);
//! - a value outside the check's `result_schema` is sent, and the
//!   validation log says so;
//! - a provider killed between two queries is restarted, and the second
//!   query is answered;
//! - pipelined queries to a provider that answers one at a time are all
//!   answered, none lost, also when stdin ends right after them;
//! - an HTTP provider (`serve --http`) wrapped with `--url`, facing the
//!   caller on stdio and on HTTP, gives signed evidence, and `wrap --http`
//!   exits cleanly on SIGTERM;
//! - `evidence-wire check-provider -- evidence-wire wrap … -- python3
//!   dg_provider.py` passes with no warning, signatures included;
//! - bad command lines (no contract, another provider id, an unreadable
//!   key, no provider) exit 2 with a one-line reason.
//!
//! Every child runs under a hard timeout; everything is on loopback; the
//! files are in a temporary directory.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![cfg(unix)]

use crate::interop_support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceSigner, KeySet, TriggerTime, TrustPolicy,
    VerifiedEvidence,
};
use evidence_wire::frame::Framing;
use evidence_wire_blocking::{ProcessConfig, ProcessProvider, ProviderError};
use interop_support::{
    cli_binary, peer_script, peers_base, repo_root, require, run, system_python,
};
use serde_json::{Value, json};

/// wire-facts §1: sha256 of canonical JSON, computed by Decision Gate's code.
const HASH_PRODUCTION: &str = "80be2eb0944c0453a6ad339a56e1c8f39f8cc57a4e627758246ccfd274176fd8";
const HASH_OBJECT: &str = "c831e95a8fc9805621f8ae15b07b11ebae6d9d1cece66d891bf3152bf6cf2ed7";
const HASH_NUMBERS: &str = "f9c76828f16f72ed31412d253cd4db6441bcd562b8a42f2c11a70a26e31956ed";
const HASH_HELLO_JSON: &str = "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a";
const HASH_HELLO_BYTES: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

/// The provider id of the test contract.
const PROVIDER_ID: &str = "dg-style";

/// The key id Decision Gate would authorize: the public key's path as
/// written in its configuration.
const KEY_ID: &str = "keys/provider.pub";

/// The longest one command-line run may take.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-wrap-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The contract every peer is wrapped with (both peers answer the same checks).
fn contract() -> String {
    repo_root()
        .join("tests/data/wrap/dg_style.contract.json")
        .to_string_lossy()
        .into_owned()
}

/// A signing key in `dir`: the seed at `keys/provider` (mode 0600), and
/// the public key.
fn signing_key(dir: &TempDir) -> (String, [u8; 32]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let seed = [42u8; 32];
    std::fs::create_dir_all(dir.0.join("keys")).expect("keys dir");
    let path = dir.0.join("keys/provider");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("key file");
    file.write_all(&seed).expect("write key");
    let public = EvidenceSigner::from_seed(KEY_ID, &seed).public_key();
    (path.to_string_lossy().into_owned(), public)
}

fn require_signature(public: [u8; 32]) -> TrustPolicy {
    let mut keys = KeySet::new();
    keys.insert_bytes(KEY_ID, &public)
        .expect("a valid public key");
    TrustPolicy::RequireSignature { keys }
}

/// A provider peer: its command line, and its name for messages.
#[derive(Clone)]
struct Peer {
    name: &'static str,
    command: Vec<String>,
}

fn python_peer() -> Peer {
    Peer {
        name: "Python",
        command: vec![system_python(), peer_script("dg_provider.py")],
    }
}

/// The TypeScript peer on the peers' Node 22 (type stripping), or `None`
/// (with a note) when interop is switched off and it is not installed.
fn typescript_peer() -> Option<Peer> {
    // Only the runtime is needed (no npm package): Node 22 of `node@22`.
    let node = require(
        peers_base().join("node/node_modules/.bin/node"),
        "Node 22 from the npm package node@22 (.peers/node), which runs tests/peers/dg_provider.ts",
    )?;
    Some(Peer {
        name: "TypeScript",
        command: vec![
            node,
            "--experimental-strip-types".to_owned(),
            "--disable-warning=ExperimentalWarning".to_owned(),
            peer_script("dg_provider.ts"),
        ],
    })
}

/// `wrap`'s arguments in front of `peer`: the test contract, the key, the
/// validation log in `dir/log`, then `extra`, then `-- <peer>`.
fn wrap_args(peer: &Peer, dir: &TempDir, key: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "wrap",
        "--contract",
        &contract(),
        "--signing-key",
        key,
        "--key-id",
        KEY_ID,
        "--log-dir",
        &dir.path("log"),
    ]
    .iter()
    .map(|arg| (*arg).to_owned())
    .collect();
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    args.push("--".to_owned());
    args.extend(peer.command.iter().cloned());
    args
}

/// Our client, Decision Gate's way (Content-Length, no handshake), to
/// `wrap` in front of `peer`, under `trust`; the provider writes what it
/// receives to `dir/received.jsonl`.
fn wrapped(peer: &Peer, dir: &TempDir, key: &str, trust: TrustPolicy) -> ProcessProvider {
    let mut command = vec![cli_binary()];
    command.extend(wrap_args(peer, dir, key, &[]));
    let mut client = ClientConfig::default();
    client.framing = Framing::ContentLength;
    client.handshake = false;
    client.request_timeout_ms = 30_000;
    client.trust = trust;
    let config =
        ProcessConfig::new(env_command(&command, &dir.path("received.jsonl"))).with_client(client);
    ProcessProvider::spawn(config)
        .unwrap_or_else(|error| panic!("cannot start wrap in front of {}: {error}", peer.name))
}

/// `command` run through `env DG_PROVIDER_RECEIVED=FILE` (so the peer
/// behind `wrap` inherits it without touching this process's environment).
fn env_command(command: &[String], received: &str) -> Vec<String> {
    let mut line = vec![
        "env".to_owned(),
        "-u".to_owned(),
        "EVIDENCE_WIRE_CONFIG".to_owned(),
        format!("DG_PROVIDER_RECEIVED={received}"),
    ];
    line.extend(command.iter().cloned());
    line
}

fn context() -> EvidenceContext {
    EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000))
}

fn query(check: &str, params: Option<Value>) -> EvidenceQuery {
    let query = EvidenceQuery::new(PROVIDER_ID, check);
    match params {
        Some(params) => query.with_params(params),
        None => query,
    }
}

fn ask(
    provider: &ProcessProvider,
    check: &str,
    params: Option<Value>,
) -> Result<VerifiedEvidence, ProviderError> {
    provider.query(query(check, params), context())
}

fn as_json(verified: &VerifiedEvidence) -> Value {
    serde_json::to_value(verified.result()).expect("serializable")
}

/// The messages the provider received (`DG_PROVIDER_RECEIVED`), and the
/// pids of its starts.
fn received(dir: &TempDir) -> (Vec<Value>, Vec<u64>) {
    let text = std::fs::read_to_string(dir.0.join("received.jsonl")).unwrap_or_default();
    let mut messages = Vec::new();
    let mut starts = Vec::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line).expect("one JSON line per entry");
        if entry["started"] == true {
            starts.push(entry["pid"].as_u64().expect("pid"));
        } else {
            messages.push(entry["message"].clone());
        }
    }
    (messages, starts)
}

/// The check ids of the evidence queries the provider received.
fn received_checks(dir: &TempDir) -> Vec<String> {
    received(dir)
        .0
        .iter()
        .filter_map(|message| {
            message
                .pointer("/params/arguments/query/check_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

/// Every record of the validation log in `dir/log`.
fn log_records(dir: &TempDir) -> Vec<Value> {
    let mut records = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir.0.join("log")) else {
        return records;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
            records.push(serde_json::from_str(line).expect("a JSON record"));
        }
    }
    records
}

/// Waits (bounded) until `ready` holds.
fn eventually(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn kill(pid: u64, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

// ---------------------------------------------------------------------------
// Over stdio.

/// Signed evidence that verifies under a policy requiring the key, with
/// Decision Gate's hashes; refusals that never reach the provider; a wrong
/// hash refused; a result_schema mismatch logged.
fn signed_verified_and_checked(peer: &Peer) {
    let dir = TempDir::new();
    let (key, public) = signing_key(&dir);
    let signed = wrapped(peer, &dir, &key, require_signature(public));
    let what = peer.name;

    for (check, params, hash) in [
        ("get", Some(json!({"key": "DEPLOY_ENV"})), HASH_PRODUCTION),
        ("object", None, HASH_OBJECT),
        ("numbers", None, HASH_NUMBERS),
        ("bytes", None, HASH_HELLO_BYTES),
        // The provider sends no hash: the wrapper computes and signs one.
        ("no_hash", None, HASH_HELLO_JSON),
    ] {
        let verified = ask(&signed, check, params)
            .unwrap_or_else(|error| panic!("{what}: {check}: not verified: {error}"));
        assert_eq!(verified.signer(), Some(KEY_ID), "{what}: {check}");
        let result = as_json(&verified);
        assert_eq!(result["evidence_hash"]["value"], hash, "{what}: {check}");
        assert_eq!(result["signature"]["key_id"], KEY_ID, "{what}: {check}");
        assert_eq!(result["error"], Value::Null, "{what}: {check}");
    }
    let file_size = as_json(&ask(&signed, "file_size", Some(json!({}))).expect("file_size"));
    assert_eq!(file_size["value"]["value"], 1024, "{what}");
    assert_eq!(
        file_size["evidence_ref"]["uri"], "dg+file://evidence-root/report.json",
        "{what}: the reference is passed on"
    );
    assert_eq!(
        file_size["evidence_anchor"]["anchor_type"], "file_path_rooted",
        "{what}: the anchor is passed on"
    );

    // A wrong hash is an error, never a signed result: a caller requiring
    // the signature gets no evidence, ...
    match ask(&signed, "bad_hash", None) {
        Err(ProviderError::Query(QueryError::Verification(error))) => {
            assert_eq!(error.kind(), "missing_signature", "{what}: {error}");
        }
        other => panic!("{what}: bad_hash: {:?}", other.map(|v| as_json(&v))),
    }
    // ... and an auditing caller sees why.
    let audit = wrapped(peer, &dir, &key, TrustPolicy::Audit);
    let refused = as_json(&ask(&audit, "bad_hash", None).expect("an error result"));
    assert_eq!(refused["value"], Value::Null, "{what}: {refused}");
    assert_eq!(refused["signature"], Value::Null, "{what}: {refused}");
    assert_eq!(
        refused["error"]["code"], "hash_mismatch",
        "{what}: {refused}"
    );

    // Expected failures and provider errors come back as errors.
    let missing = as_json(&ask(&audit, "missing", None).expect("an error result"));
    assert_eq!(missing["error"]["code"], "not_found", "{what}: {missing}");
    let rpc = as_json(&ask(&audit, "rpc_error", None).expect("an error result"));
    assert_eq!(rpc["error"]["code"], "provider_error", "{what}: {rpc}");

    // What the contract refuses never reaches the provider.
    let before = received_checks(&dir);
    let unknown = as_json(&ask(&audit, "nope", None).expect("an error result"));
    assert_eq!(
        unknown["error"]["code"], "unknown_check",
        "{what}: {unknown}"
    );
    let invalid = as_json(&ask(&audit, "get", Some(json!({"key": 5}))).expect("an error result"));
    assert_eq!(
        invalid["error"]["code"], "invalid_params",
        "{what}: {invalid}"
    );
    let extra = as_json(
        &ask(&audit, "object", Some(json!({"unexpected": true}))).expect("an error result"),
    );
    assert_eq!(extra["error"]["code"], "invalid_params", "{what}: {extra}");
    let slow = as_json(&ask(&audit, "slow", Some(json!({"ms": 999_999}))).expect("an error"));
    assert_eq!(slow["error"]["code"], "invalid_params", "{what}: {slow}");
    let mut other_provider = query("get", Some(json!({"key": "DEPLOY_ENV"})));
    other_provider.provider_id = "someone-else".to_owned();
    let mismatch = serde_json::to_value(
        audit
            .query(other_provider, context())
            .expect("an error result")
            .result(),
    )
    .unwrap();
    assert_eq!(
        mismatch["error"]["code"], "provider_mismatch",
        "{what}: {mismatch}"
    );
    // A query the contract allows goes through, after them.
    ask(&audit, "get", Some(json!({"key": "DEPLOY_ENV"}))).expect("get");
    let after = received_checks(&dir);
    assert_eq!(
        after[before.len()..],
        ["get".to_owned()],
        "{what}: only the allowed query reached the provider; it received {:?}",
        received(&dir).0
    );
    assert!(
        received(&dir).0.iter().all(|message| {
            let text = message.to_string();
            !text.contains("\"nope\"") && !text.contains("unexpected") && !text.contains("999999")
        }),
        "{what}: a refused query reached the provider: {:?}",
        received(&dir).0
    );

    // A value outside result_schema is sent (signed), and the log says so.
    let mistyped = ask(&signed, "mistyped", None).expect("sent anyway");
    assert_eq!(
        as_json(&mistyped)["value"]["value"],
        "not a number",
        "{what}"
    );
    eventually("the result_schema record", || {
        log_records(&dir).iter().any(|record| {
            record["route"] == "wrap:result_schema"
                && record["error"]["code"] == "INTERNAL_ERROR"
                && record["error"]["detail"]
                    .as_str()
                    .is_some_and(|detail| detail.contains("mistyped"))
        })
    });
    // Only that one: the conforming answers left no such record.
    let mismatches = log_records(&dir)
        .into_iter()
        .filter(|record| record["route"] == "wrap:result_schema")
        .count();
    assert_eq!(mismatches, 1, "{what}");
    // The queries themselves are in the validation log, as `serve` logs them.
    assert!(
        log_records(&dir)
            .iter()
            .any(|record| record["route"] == "stdio:content-length"
                && record["tool"] == "evidence_query"),
        "{what}"
    );
}

#[test]
fn the_python_provider_wrapped_gives_signed_verified_checked_evidence() {
    signed_verified_and_checked(&python_peer());
}

#[test]
fn the_typescript_provider_wrapped_gives_signed_verified_checked_evidence() {
    let Some(peer) = typescript_peer() else {
        return;
    };
    signed_verified_and_checked(&peer);
}

/// A provider killed between two queries is restarted; the second query
/// is answered by the new process.
fn restarted_after_a_kill(peer: &Peer) {
    let dir = TempDir::new();
    let (key, public) = signing_key(&dir);
    let provider = wrapped(peer, &dir, &key, require_signature(public));
    let what = peer.name;
    ask(&provider, "get", Some(json!({"key": "DEPLOY_ENV"}))).expect("first query");
    let (_, starts) = received(&dir);
    assert_eq!(starts.len(), 1, "{what}: one provider process so far");
    kill(starts[0], "KILL");
    let verified = ask(&provider, "object", None)
        .unwrap_or_else(|error| panic!("{what}: after the kill: {error}"));
    assert_eq!(verified.signer(), Some(KEY_ID), "{what}");
    assert_eq!(as_json(&verified)["evidence_hash"]["value"], HASH_OBJECT);
    let (_, starts) = received(&dir);
    assert_eq!(starts.len(), 2, "{what}: restarted once");
    assert_ne!(starts[0], starts[1], "{what}: a new process");
}

#[test]
fn a_killed_python_provider_is_restarted() {
    restarted_after_a_kill(&python_peer());
}

#[test]
fn a_killed_typescript_provider_is_restarted() {
    let Some(peer) = typescript_peer() else {
        return;
    };
    restarted_after_a_kill(&peer);
}

/// One Content-Length frame of an `evidence_query` call.
fn frame(id: usize, check: &str, params: Value) -> Vec<u8> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {
            "query": {"provider_id": PROVIDER_ID, "check_id": check, "params": params},
            "context": serde_json::to_value(context()).unwrap()}}
    })
    .to_string();
    let mut bytes = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// The JSON bodies of a Content-Length stream.
fn frames(mut bytes: &[u8]) -> Vec<Value> {
    let mut bodies = Vec::new();
    while let Some(end) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .expect("a Content-Length header");
        let body = &bytes[end + 4..end + 4 + length];
        bodies.push(serde_json::from_slice(body).expect("a JSON body"));
        bytes = &bytes[end + 4 + length..];
    }
    bodies
}

/// Pipelined queries, more than the provider takes at once and more than
/// `--max-in-flight`, written at once and followed by the end of input: each
/// is answered, once, with its evidence.
#[test]
fn pipelined_queries_to_a_provider_that_answers_one_at_a_time_are_all_answered() {
    let dir = TempDir::new();
    let (key, _) = signing_key(&dir);
    let peer = python_peer();
    let mut input = Vec::new();
    let count = 24;
    for id in 0..count {
        input.extend(frame(id, "slow", json!({"ms": 10})));
    }
    let mut command = Command::new(cli_binary());
    command
        .args(wrap_args(&peer, &dir, &key, &["--max-in-flight", "4"]))
        .env_remove("EVIDENCE_WIRE_CONFIG");
    let output = run(&mut command, &input, RUN_DEADLINE);
    assert!(output.success(), "wrap failed: {}", output.stderr);
    let answers = frames(&output.stdout_bytes);
    let mut ids: Vec<u64> = answers
        .iter()
        .map(|answer| answer["id"].as_u64().expect("an id"))
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..count as u64).collect::<Vec<_>>(),
        "{}",
        output.stderr
    );
    for answer in &answers {
        let result = &answer["result"]["content"][0]["json"];
        assert_eq!(result["value"]["value"]["slept_ms"], 10, "{answer}");
        assert_eq!(result["signature"]["key_id"], KEY_ID, "{answer}");
    }
}

// ---------------------------------------------------------------------------
// Over HTTP.

/// `wrap --http 127.0.0.1:0`: its child and the address it announced.
fn wrap_http(peer: &Peer, dir: &TempDir, key: &str) -> (Child, String) {
    let mut command = Command::new("env");
    command
        .args(["-u", "EVIDENCE_WIRE_CONFIG"])
        .arg(format!(
            "DG_PROVIDER_RECEIVED={}",
            dir.path("received.jsonl")
        ))
        .arg(cli_binary())
        .args(wrap_args(peer, dir, key, &["--http", "127.0.0.1:0"]));
    announced_http(command)
}

fn signed_over_http(peer: &Peer) {
    use evidence_wire_tokio::{HttpProvider, HttpProviderConfig};
    let dir = TempDir::new();
    let (key, public) = signing_key(&dir);
    let (mut child, address) = wrap_http(peer, &dir, &key);
    let what = peer.name;
    let mut client = ClientConfig::default();
    client.request_timeout_ms = 30_000;
    client.trust = require_signature(public);
    let provider = HttpProvider::new(
        HttpProviderConfig::new(format!("http://{address}/rpc"))
            .with_insecure_http(true)
            .with_client(client),
    )
    .expect("provider URL");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let ask_http = |check: &str, params: Option<Value>| {
        runtime.block_on(provider.query(&query(check, params), &context()))
    };
    for (check, params, hash) in [
        ("get", Some(json!({"key": "DEPLOY_ENV"})), HASH_PRODUCTION),
        ("numbers", None, HASH_NUMBERS),
        ("no_hash", None, HASH_HELLO_JSON),
    ] {
        let verified = ask_http(check, params)
            .unwrap_or_else(|error| panic!("{what}: {check} over HTTP: {error}"));
        assert_eq!(verified.signer(), Some(KEY_ID), "{what}: {check}");
        assert_eq!(
            as_json(&verified)["evidence_hash"]["value"],
            hash,
            "{what}: {check}"
        );
    }
    // A wrong hash: no signed result.
    assert!(
        ask_http("bad_hash", None).is_err(),
        "{what}: bad_hash over HTTP was accepted"
    );
    // Invalid params never reach the provider.
    let before = received_checks(&dir).len();
    let _ = ask_http("get", Some(json!({"key": 5})));
    let _ = ask_http("nope", None);
    assert_eq!(received_checks(&dir).len(), before, "{what}");
    // A killed provider is restarted.
    let (_, starts) = received(&dir);
    kill(*starts.last().expect("a start"), "KILL");
    ask_http("object", None).unwrap_or_else(|error| panic!("{what}: after the kill: {error}"));
    // SIGTERM drains and exits 0.
    kill(u64::from(child.id()), "TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: wrap --http did not exit after SIGTERM");
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{what}: exit {status:?} after SIGTERM");
}

#[test]
fn the_python_provider_wrapped_over_http_gives_signed_verified_evidence() {
    signed_over_http(&python_peer());
}

#[test]
fn the_typescript_provider_wrapped_over_http_gives_signed_verified_evidence() {
    let Some(peer) = typescript_peer() else {
        return;
    };
    signed_over_http(&peer);
}

// ---------------------------------------------------------------------------
// check-provider through wrap.

fn check_provider_through_wrap(peer: &Peer) {
    let dir = TempDir::new();
    let (key, public) = signing_key(&dir);
    // The contract check-provider already holds the bare peers to.
    let contract = repo_root()
        .join("tests/data/check-provider/dg_provider.contract.json")
        .to_string_lossy()
        .into_owned();
    let hex: String = public.iter().map(|byte| format!("{byte:02x}")).collect();
    let mut command = Command::new(cli_binary());
    command
        .args(["check-provider", "--json", "--contract", &contract])
        .arg("--key")
        .arg(format!("{KEY_ID}={hex}"))
        .args(["--samples", "5", "--"])
        .arg(cli_binary())
        .args([
            "wrap",
            "--no-log",
            "--contract",
            &contract,
            "--signing-key",
            &key,
            "--key-id",
            KEY_ID,
            "--",
        ])
        .args(&peer.command)
        .env_remove("EVIDENCE_WIRE_CONFIG");
    let output = run(&mut command, b"", RUN_DEADLINE);
    let report: Value = serde_json::from_str(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "check-provider printed no JSON report ({error}):\n{}\n{}",
            output.stdout, output.stderr
        )
    });
    let not_passed: Vec<&Value> = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|line| line["status"] != "pass")
        .collect();
    assert_eq!(
        output.code(),
        Some(0),
        "{}: {not_passed:#?}\n{}",
        peer.name,
        output.stderr
    );
    // Wrapped, the bare peer's warnings are gone: every answer carries a
    // hash (and a signature), and MCP clients are served too.
    assert!(not_passed.is_empty(), "{}: {not_passed:#?}", peer.name);
}

#[test]
fn check_provider_passes_the_wrapped_python_provider() {
    check_provider_through_wrap(&python_peer());
}

#[test]
fn check_provider_passes_the_wrapped_typescript_provider() {
    let Some(peer) = typescript_peer() else {
        return;
    };
    check_provider_through_wrap(&peer);
}

// ---------------------------------------------------------------------------
// Bad command lines.

fn wrap_fails(args: &[&str], expected: &str) {
    let mut command = Command::new(cli_binary());
    command
        .arg("wrap")
        .args(args)
        .env_remove("EVIDENCE_WIRE_CONFIG");
    let output = run(&mut command, b"", RUN_DEADLINE);
    assert_eq!(output.code(), Some(2), "{args:?}: {}", output.stderr);
    assert!(
        output.stderr.contains(expected),
        "{args:?}: expected {expected:?} in {}",
        output.stderr
    );
    assert!(output.stdout.is_empty(), "{args:?}: {}", output.stdout);
}

#[test]
fn bad_command_lines_are_refused_with_a_reason() {
    let dir = TempDir::new();
    let python = system_python();
    let script = peer_script("dg_provider.py");
    let contract = contract();
    wrap_fails(&["--", &python, &script], "wrap needs --contract FILE");
    wrap_fails(
        &[
            "--contract",
            &dir.path("absent.json"),
            "--",
            &python,
            &script,
        ],
        "absent.json",
    );
    wrap_fails(
        &[
            "--contract",
            &contract,
            "--provider-id",
            "other",
            "--",
            &python,
            &script,
        ],
        "differs from the provider_id \"dg-style\"",
    );
    wrap_fails(
        &[
            "--contract",
            &contract,
            "--signing-key",
            &dir.path("no-key"),
            "--",
            &python,
            &script,
        ],
        "--signing-key",
    );
    wrap_fails(
        &["--contract", &contract],
        "wrap needs the provider to forward to",
    );
    wrap_fails(
        &["--contract", &contract, "--", &dir.path("no-such-program")],
        "cannot start provider",
    );
    let not_a_contract = dir.0.join("not-a-contract.json");
    std::fs::write(&not_a_contract, b"{\"provider_id\": \"x\"}").unwrap();
    wrap_fails(
        &[
            "--contract",
            &not_a_contract.to_string_lossy(),
            "--",
            &python,
            &script,
        ],
        "not-a-contract.json",
    );
}

// ---------------------------------------------------------------------------
// Forwarding to an HTTP provider (--url).

/// A child that announces `http://ADDR` on stderr (`serve --http`,
/// `wrap --http`): the child and the address.
fn announced_http(mut command: Command) -> (Child, String) {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("EVIDENCE_WIRE_CONFIG");
    let mut child = command.spawn().expect("spawn an HTTP server");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut lines = BufReader::new(stderr).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(address) = line
                .split("http://")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
            {
                let _ = tx.send(address.to_owned());
                break;
            }
        }
        for _ in lines {}
    });
    let address = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the server announced its address");
    (child, address)
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `wrap --url` in front of the bundled provider served over HTTP
/// (`serve --http`), facing the caller on stdio and on HTTP: signed,
/// verified evidence; the contract's refusals are the wrapper's.
#[test]
fn an_http_provider_wrapped_with_url_gives_signed_verified_evidence() {
    use evidence_wire_tokio::{HttpProvider, HttpProviderConfig};
    let dir = TempDir::new();
    let (key, public) = signing_key(&dir);
    let mut serve = Command::new(cli_binary());
    serve.args(["serve", "--no-log", "--http", "127.0.0.1:0"]);
    let (upstream, upstream_address) = announced_http(serve);
    let _upstream = KillOnDrop(upstream);
    let contract_path = dir.path("bundled.contract.json");
    let mut contract = Command::new(cli_binary());
    contract.arg("contract").env_remove("EVIDENCE_WIRE_CONFIG");
    let printed = run(&mut contract, b"", RUN_DEADLINE);
    assert!(printed.success(), "{}", printed.stderr);
    std::fs::write(&contract_path, printed.stdout.as_bytes()).unwrap();
    let url = format!("http://{upstream_address}/rpc");
    let wrap_args = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "wrap",
            "--no-log",
            "--contract",
            &contract_path,
            "--signing-key",
            &key,
            "--key-id",
            KEY_ID,
            "--url",
            &url,
            "--allow-insecure-http",
        ]
        .iter()
        .map(|arg| (*arg).to_owned())
        .collect();
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        args
    };
    let time_now = EvidenceQuery::new("evidence-wire", "time_now");

    // Facing the caller on stdio.
    let mut command = vec![cli_binary()];
    command.extend(wrap_args(&[]));
    let mut client = ClientConfig::default();
    client.request_timeout_ms = 30_000;
    client.trust = require_signature(public);
    let stdio = ProcessProvider::spawn(ProcessConfig::new(command).with_client(client.clone()))
        .expect("wrap --url");
    let verified = stdio
        .query(time_now.clone(), context())
        .expect("signed evidence through wrap --url");
    assert_eq!(verified.signer(), Some(KEY_ID));
    assert_eq!(as_json(&verified)["value"]["value"], 1_710_000_000_000_i64);
    let mut audit = client.clone();
    audit.trust = TrustPolicy::Audit;
    let mut command = vec![cli_binary()];
    command.extend(wrap_args(&[]));
    let auditing =
        ProcessProvider::spawn(ProcessConfig::new(command).with_client(audit)).expect("wrap --url");
    let refused = auditing
        .query(
            EvidenceQuery::new("evidence-wire", "no_such_check"),
            context(),
        )
        .expect("an error result");
    assert_eq!(
        refused
            .result()
            .error
            .as_ref()
            .map(|error| error.code.as_str()),
        Some("unknown_check")
    );

    // Facing the caller on HTTP.
    let mut command = Command::new(cli_binary());
    command.args(wrap_args(&["--http", "127.0.0.1:0"]));
    let (wrapper, address) = announced_http(command);
    let mut wrapper = KillOnDrop(wrapper);
    let provider = HttpProvider::new(
        HttpProviderConfig::new(format!("http://{address}/rpc"))
            .with_insecure_http(true)
            .with_client(client),
    )
    .expect("provider URL");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let verified = runtime
        .block_on(provider.query(&time_now, &context()))
        .expect("signed evidence through wrap --http --url");
    assert_eq!(verified.signer(), Some(KEY_ID));
    // SIGTERM: a clean exit (the HTTP client's runtime is shut down inside
    // the server's without a panic).
    kill(u64::from(wrapper.0.id()), "TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = wrapper.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "wrap --http --url did not exit");
        thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit {status:?} after SIGTERM");
}

/// SIGTERM on stdio drains: the query in flight is answered, then `wrap`
/// exits 0 (as `serve` does).
#[test]
fn sigterm_on_stdio_answers_the_query_in_flight_and_exits() {
    use std::io::{Read, Write};
    let dir = TempDir::new();
    let (key, _) = signing_key(&dir);
    let peer = python_peer();
    let mut child = Command::new("env")
        .args(["-u", "EVIDENCE_WIRE_CONFIG"])
        .arg(format!(
            "DG_PROVIDER_RECEIVED={}",
            dir.path("received.jsonl")
        ))
        .arg(cli_binary())
        .args(wrap_args(&peer, &dir, &key, &[]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn wrap");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        let _ = tx.send(bytes);
    });
    stdin
        .write_all(&frame(7, "slow", json!({"ms": 700})))
        .expect("write the query");
    stdin.flush().expect("flush");
    eventually("the query to reach the provider", || {
        received_checks(&dir).iter().any(|check| check == "slow")
    });
    kill(u64::from(child.id()), "TERM");
    let output = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("wrap closed its output");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("wrap did not exit after SIGTERM");
        }
        thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    assert!(status.success(), "exit {status:?} after SIGTERM");
    let answers = frames(&output);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["id"], 7);
    assert_eq!(
        answers[0]["result"]["content"][0]["json"]["value"]["value"]["slept_ms"], 700,
        "{}",
        answers[0]
    );
}
