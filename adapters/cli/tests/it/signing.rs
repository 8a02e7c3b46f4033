//! `evidence-wire serve` as Decision Gate's provider: answers carry the
//! `evidence_hash` Decision Gate computes (its own canonicalization on a
//! Decision Gate connection, RFC 8785 after the MCP handshake) and, with a
//! signing key, the signature Decision Gate verifies under
//! `require_signature`. Also `keygen`, the key file rules, `query` and
//! `verify` naming the profile they checked, and key ids matched by file
//! stem or by the path as written.
//!
//! Expected hashes and signatures are Decision Gate's own (the worked
//! examples of `spec/evidence.md` and `spec/guides/decision-gate.md`; seed = 32 bytes
//! of 0x07).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::common;
use common::*;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

/// Decision Gate's hash of `"hello"` and its signature by the 0x07 seed.
const HELLO_HASH: &str = "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a";
const HELLO_SIGNATURE: &str = "e4285475a284b843913b0a8d21709cd9d5e709f9a3ecc5c7a774fb31ba6f7c13587f6d247e8869fe7c693513911fc1755a9d8fb07ebf437e1ba81de36318190f";
const PUBLIC_KEY_HEX: &str = "ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c";

/// A value on which the two profiles differ in member order and in the
/// integer beyond 2^53, and Decision Gate's hash of it.
const DG_ONLY: &str = r#"{"a b":1,"a":2,"n":9007199254740993}"#;
const DG_ONLY_HASH: &str = "d8a324fae07e90e275c3c73412629b2e8c2cdb23f2465e6f666658524285d74d";
/// Differs in member order only; Decision Gate's hash.
const KEY_ORDER: &str = r#"{"a":1,"a b":2,"a!":3,"ab":4}"#;
const KEY_ORDER_DG_HASH: &str = "89ed29440c9fd56dfbfe957bfe2126ad4c4059916d27ffa8ad15b6bdaeaf92ba";

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn run(args: &[&str], stdin: &[u8], cwd: &Path) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn evidence-wire");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited normally")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Decision Gate's first message, as it sends it (Content-Length, no
/// handshake), asking the bundled `json_path` check for `file`.
fn decision_gate_call(id: u64, file: &str) -> Vec<u8> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {
            "query": {"provider_id": "evidence-wire", "check_id": "json_path", "params": {"file": file}},
            "context": {"tenant_id": 1, "namespace_id": 1, "run_id": "run-1", "scenario_id": "s",
                "stage_id": "st", "trigger_id": "t",
                "trigger_time": {"kind": "unix_millis", "value": 1710000000000_i64},
                "correlation_id": null}
        }}
    })
    .to_string();
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// The EvidenceResults in `serve`'s Content-Length framed output, in the
/// order of their request ids (answers may come in any order).
fn served_results(output: &Output) -> Vec<Value> {
    let text = String::from_utf8_lossy(&output.stdout);
    let mut results = Vec::new();
    let mut rest = text.as_ref();
    while let Some((head, after)) = rest.split_once("\r\n\r\n") {
        let length: usize = head
            .trim()
            .strip_prefix("Content-Length: ")
            .expect("a Content-Length header")
            .parse()
            .expect("a length");
        let body: Value = serde_json::from_str(&after[..length]).expect("JSON body");
        let id = body["id"].as_u64().expect("an integer id");
        results.push((id, body["result"]["content"][0]["json"].clone()));
        rest = &after[length..];
    }
    results.sort_by_key(|(id, _)| *id);
    results.into_iter().map(|(_, result)| result).collect()
}

fn signature_hex(result: &Value) -> String {
    result["signature"]["signature"]
        .as_array()
        .expect("signature bytes")
        .iter()
        .map(|byte| format!("{:02x}", byte.as_u64().expect("a byte")))
        .collect()
}

#[test]
fn serve_signs_what_decision_gate_verifies() {
    let dir = TempDir::new();
    dir.write("hello.json", b"\"hello\"");
    dir.write("dg-only.json", DG_ONLY.as_bytes());
    dir.write("key-order.json", KEY_ORDER.as_bytes());
    let key = seed(&dir, "provider.key");
    let mut input = decision_gate_call(1, "hello.json");
    input.extend(decision_gate_call(2, "dg-only.json"));
    input.extend(decision_gate_call(3, "key-order.json"));
    let output = run(
        &[
            "serve",
            "--no-log",
            "--root",
            ".",
            "--signing-key",
            &key.display().to_string(),
            "--key-id",
            "keys/provider.pub",
        ],
        &input,
        &dir.0,
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let results = served_results(&output);
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0]["evidence_hash"]["value"], HELLO_HASH);
    assert_eq!(results[0]["signature"]["scheme"], "ed25519");
    assert_eq!(results[0]["signature"]["key_id"], "keys/provider.pub");
    assert_eq!(signature_hex(&results[0]), HELLO_SIGNATURE);
    // Where Decision Gate's canonicalization departs from RFC 8785, the
    // hash is Decision Gate's (an RFC 8785 hash is refused there).
    assert_eq!(results[1]["evidence_hash"]["value"], DG_ONLY_HASH);
    assert_eq!(results[2]["evidence_hash"]["value"], KEY_ORDER_DG_HASH);
    for result in &results {
        assert_eq!(result["signature"]["key_id"], "keys/provider.pub");
        assert_eq!(signature_hex(result).len(), 128);
    }
}

#[test]
fn serve_without_a_key_still_sends_decision_gates_hash() {
    let dir = TempDir::new();
    dir.write("key-order.json", KEY_ORDER.as_bytes());
    let output = run(
        &["serve", "--no-log", "--root", "."],
        &decision_gate_call(1, "key-order.json"),
        &dir.0,
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let results = served_results(&output);
    assert_eq!(results[0]["evidence_hash"]["value"], KEY_ORDER_DG_HASH);
    assert!(results[0]["signature"].is_null());
    // A fixed profile overrides the dialect's.
    let output = run(
        &[
            "serve",
            "--no-log",
            "--root",
            ".",
            "--hash-profile",
            "rfc8785",
        ],
        &decision_gate_call(1, "key-order.json"),
        &dir.0,
    );
    let results = served_results(&output);
    assert_ne!(results[0]["evidence_hash"]["value"], KEY_ORDER_DG_HASH);
}

#[test]
fn the_signing_key_comes_from_the_configuration_too() {
    let dir = TempDir::new();
    dir.write("hello.json", b"\"hello\"");
    seed(&dir, "signer.key");
    dir.write(
        "evidence-wire.toml",
        b"[bundled]\nroot = \".\"\n\n[bundled.signing]\nkey_file = \"signer.key\"\nkey_id = \"keys/signer.pub\"\n",
    );
    let output = run(
        &["--config", "evidence-wire.toml", "serve", "--no-log"],
        &decision_gate_call(1, "hello.json"),
        &dir.0,
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let results = served_results(&output);
    assert_eq!(results[0]["signature"]["key_id"], "keys/signer.pub");
    assert_eq!(signature_hex(&results[0]), HELLO_SIGNATURE);
    // Without key_id, the key id is the file stem.
    dir.write(
        "stem.toml",
        b"[bundled]\nroot = \".\"\n\n[bundled.signing]\nkey_file = \"signer.key\"\n",
    );
    let output = run(
        &["--config", "stem.toml", "serve", "--no-log"],
        &decision_gate_call(1, "hello.json"),
        &dir.0,
    );
    assert_eq!(served_results(&output)[0]["signature"]["key_id"], "signer");
}

#[test]
fn an_exposed_or_malformed_signing_key_is_refused() {
    let dir = TempDir::new();
    let key = dir.write("open.key", [7u8; 32]);
    chmod(&key, 0o644);
    let output = run(
        &["serve", "--no-log", "--signing-key", "open.key"],
        b"",
        &dir.0,
    );
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(stderr(&output).contains("chmod 600"), "{}", stderr(&output));
    let short = dir.write("short.key", [7u8; 16]);
    chmod(&short, 0o600);
    let output = run(
        &["serve", "--no-log", "--signing-key", "short.key"],
        b"",
        &dir.0,
    );
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(stderr(&output).contains("keygen"), "{}", stderr(&output));
    // The same key through the configuration fails `config check`.
    dir.write("open.toml", b"[bundled.signing]\nkey_file = \"open.key\"\n");
    let output = run(&["config", "check", "open.toml"], b"", &dir.0);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(stderr(&output).contains("bundled.signing.key_file"));
}

#[test]
fn keygen_writes_a_private_seed_and_a_raw_public_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new();
    let output = run(&["keygen", "--out", "provider"], b"", &dir.0);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let printed: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let secret = std::fs::metadata(dir.0.join("provider")).expect("secret file");
    assert_eq!(secret.permissions().mode() & 0o777, 0o600);
    assert_eq!(secret.len(), 32);
    let public = std::fs::read(dir.0.join("provider.pub")).expect("public file");
    assert_eq!(public.len(), 32);
    let hex: String = public.iter().map(|byte| format!("{byte:02x}")).collect();
    assert_eq!(printed["public_key_hex"], hex);
    // Never overwrites.
    let again = run(&["keygen", "--out", "provider"], b"", &dir.0);
    assert_eq!(code(&again), 2);
    assert!(
        stderr(&again).contains("never overwrites"),
        "{}",
        stderr(&again)
    );
    // Two runs make two different keys; a missing directory is created.
    let nested = run(&["keygen", "--out", "keys/nested"], b"", &dir.0);
    assert_eq!(code(&nested), 0, "{}", stderr(&nested));
    assert!(dir.0.join("keys/nested.pub").is_file());
    let other = run(&["keygen", "--out", "other"], b"", &dir.0);
    assert_eq!(code(&other), 0);
    assert_ne!(std::fs::read(dir.0.join("other.pub")).unwrap(), public);

    // The pair works end to end: serve signs, verify checks with the .pub
    // file, naming the key by stem or by the path as written.
    dir.write("hello.json", b"\"hello\"");
    let output = run(
        &[
            "serve",
            "--no-log",
            "--root",
            ".",
            "--signing-key",
            "provider",
            "--key-id",
            "provider.pub",
        ],
        &decision_gate_call(1, "hello.json"),
        &dir.0,
    );
    let result = served_results(&output).remove(0);
    dir.write("result.json", result.to_string().as_bytes());
    let verified = run(
        &["verify", "result.json", "--key-file", "provider.pub"],
        b"",
        &dir.0,
    );
    assert_eq!(code(&verified), 0, "{}", stderr(&verified));
    assert!(
        stderr(&verified).contains("decision-gate profile"),
        "{}",
        stderr(&verified)
    );
    let wrong = run(
        &["verify", "result.json", "--key-file", "other.pub"],
        b"",
        &dir.0,
    );
    assert_eq!(code(&wrong), 1, "{}", stderr(&wrong));
}

#[test]
fn verify_reads_public_keys_as_raw_hex_or_base64() {
    let dir = TempDir::new();
    let key = hex_bytes(PUBLIC_KEY_HEX);
    dir.write("raw.pub", &key);
    dir.write("hex.pub", format!("{PUBLIC_KEY_HEX}\n").as_bytes());
    dir.write("b64.pub", b"6kpsY+KcUgq+9VB7Ey7F+ZVHdq6+vnuSQh7qaRRG0iw=\n");
    for (file, key_id) in [
        ("raw.pub", "raw"),
        ("hex.pub", "hex.pub"),
        ("b64.pub", "b64"),
    ] {
        let result = signed_hello(key_id);
        dir.write("result.json", result.to_string().as_bytes());
        let output = run(&["verify", "result.json", "--key-file", file], b"", &dir.0);
        assert_eq!(code(&output), 0, "{file}: {}", stderr(&output));
    }
}

#[test]
fn query_checks_the_hash_under_the_profile_the_connection_uses() {
    let dir = TempDir::new();
    dir.write("key-order.json", KEY_ORDER.as_bytes());
    let params = r#"{"file":"key-order.json"}"#;
    // Without the handshake: a Decision Gate connection, Decision Gate's hash.
    let output = run(
        &[
            "query",
            "--check",
            "json_path",
            "--params",
            params,
            "--root",
            ".",
        ],
        b"",
        &dir.0,
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let printed: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(printed["evidence_hash"]["value"], KEY_ORDER_DG_HASH);
    assert!(
        stderr(&output).contains("decision-gate profile"),
        "{}",
        stderr(&output)
    );
    // With it: MCP, RFC 8785.
    let output = run(
        &[
            "query",
            "--handshake",
            "--check",
            "json_path",
            "--params",
            params,
            "--root",
            ".",
        ],
        b"",
        &dir.0,
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let printed: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_ne!(printed["evidence_hash"]["value"], KEY_ORDER_DG_HASH);
    assert!(
        stderr(&output).contains("rfc8785 profile"),
        "{}",
        stderr(&output)
    );
    // Forcing the other profile makes the mismatch visible, naming it.
    let output = run(
        &[
            "query",
            "--profile",
            "rfc8785",
            "--check",
            "json_path",
            "--params",
            params,
            "--root",
            ".",
        ],
        b"",
        &dir.0,
    );
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("under the rfc8785 profile"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_trusted_key_matches_by_stem_or_by_the_path_as_written() {
    // One signed stream satisfies Decision Gate's configuration (key_id =
    // the path as written) and ours (the stem, or that path).
    let dir = TempDir::new();
    dir.write("hello.json", b"\"hello\"");
    std::fs::create_dir_all(dir.0.join("keys")).unwrap();
    dir.write("keys/provider.pub", hex_bytes(PUBLIC_KEY_HEX));
    seed(&dir, "provider.key");
    let exe = std::fs::canonicalize(BIN).unwrap();
    for key_id in ["keys/provider.pub", "provider"] {
        let config = format!(
            "[[providers]]\nname = \"signed\"\ntype = \"mcp\"\ncommand = [{exe:?}, \"serve\", \"--no-log\", \"--root\", \".\", \"--provider-id\", \"signed\", \"--signing-key\", \"provider.key\", \"--key-id\", {key_id:?}]\ncapabilities_path = \"contract.json\"\ntrust = {{ require_signature = {{ keys = [\"keys/provider.pub\"] }} }}\n",
            exe = exe.display().to_string()
        );
        dir.write("evidence-wire.toml", config.as_bytes());
        let contract = run(&["contract", "--provider-id", "signed"], b"", &dir.0);
        dir.write("contract.json", &contract.stdout);
        let output = run(
            &[
                "--config",
                "evidence-wire.toml",
                "query",
                "--provider",
                "signed",
                "--check",
                "json_path",
                "--params",
                r#"{"file":"hello.json"}"#,
            ],
            b"",
            &dir.0,
        );
        assert_eq!(code(&output), 0, "{key_id}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(&format!("signed by key {key_id:?}")),
            "{}",
            stderr(&output)
        );
    }
    // Another key id is not authorized.
    let config = format!(
        "[[providers]]\nname = \"signed\"\ntype = \"mcp\"\ncommand = [{exe:?}, \"serve\", \"--no-log\", \"--root\", \".\", \"--provider-id\", \"signed\", \"--signing-key\", \"provider.key\", \"--key-id\", \"someone-else\"]\ncapabilities_path = \"contract.json\"\ntrust = {{ require_signature = {{ keys = [\"keys/provider.pub\"] }} }}\n",
        exe = exe.display().to_string()
    );
    dir.write("evidence-wire.toml", config.as_bytes());
    let output = run(
        &[
            "--config",
            "evidence-wire.toml",
            "query",
            "--provider",
            "signed",
            "--check",
            "json_path",
            "--params",
            r#"{"file":"hello.json"}"#,
        ],
        b"",
        &dir.0,
    );
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("not authorized"),
        "{}",
        stderr(&output)
    );
}

fn signed_hello(key_id: &str) -> Value {
    json!({
        "value": {"kind": "json", "value": "hello"},
        "lane": "verified", "error": null,
        "evidence_hash": {"algorithm": "sha256", "value": HELLO_HASH},
        "evidence_ref": null, "evidence_anchor": null,
        "signature": {"scheme": "ed25519", "key_id": key_id, "signature": hex_bytes(HELLO_SIGNATURE)},
        "content_type": "application/json"
    })
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|index| u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).expect("hex"))
        .collect()
}

/// The 0x07 seed in `dir`, private (mode 0600) as a signing key must be.
fn seed(dir: &TempDir, name: &str) -> PathBuf {
    let path = dir.write(name, [7u8; 32]);
    chmod(&path, 0o600);
    path
}
