//! Interop with Decision Gate as it is written down and as it behaves:
//!
//! - `tests/peers/dg_provider.py`, a Decision Gate-style provider written
//!   from the seeds' protocol text with the Python standard library only
//!   (its own Content-Length framing and its own RFC 8785 canonicalizer),
//!   queried through our Rust client (`ProcessProvider`) and our CLI
//!   (`evidence-wire query --command ...`). Expected hashes are the worked
//!   examples of wire-facts §1, computed by Decision Gate's own code.
//! - Decision Gate's real first request (wire-facts §2), byte for byte,
//!   written to the real `evidence-wire serve` binary: the answer must be
//!   the one Content-Length frame Decision Gate can read (`content[0]` a
//!   `json` item holding an EvidenceResult). The sans-IO replay of the same
//!   bytes lives in `core/tests/it/server_transcripts.rs`; this is end to end.
//!
//! Needs only `python3` (standard library), so these tests never skip.

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
use interop_support::{Output, cli_binary, peer_script, run, system_python};
use serde_json::{Value, json};

/// Decision Gate's first and only message (wire-facts §2), byte for byte.
const DG_FIRST_REQUEST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"stub","check_id":"probe","params":{"mode":"plain"}},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000},"correlation_id":null}}}}"#;

/// wire-facts §1: sha256 of canonical JSON, computed by Decision Gate's code.
const HASH_PRODUCTION: &str = "80be2eb0944c0453a6ad339a56e1c8f39f8cc57a4e627758246ccfd274176fd8";
const HASH_OBJECT: &str = "c831e95a8fc9805621f8ae15b07b11ebae6d9d1cece66d891bf3152bf6cf2ed7";
const HASH_NUMBERS: &str = "f9c76828f16f72ed31412d253cd4db6441bcd562b8a42f2c11a70a26e31956ed";
const HASH_HELLO_JSON: &str = "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a";
const HASH_HELLO_BYTES: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
const HASH_1710000000000: &str = "8e3359f0c6a336723783a5550104e05046b7caa8ab214fdf0c891bea1ad97083";

fn dg_provider_command() -> Vec<String> {
    vec![system_python(), peer_script("dg_provider.py")]
}

fn context() -> EvidenceContext {
    EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000))
}

fn provider() -> ProcessProvider {
    let mut client = ClientConfig::default();
    client.framing = Framing::ContentLength;
    client.handshake = false;
    client.request_timeout_ms = 20_000;
    ProcessProvider::spawn(ProcessConfig::new(dg_provider_command()).with_client(client))
        .unwrap_or_else(|error| panic!("cannot start the Python provider: {error}"))
}

fn ask(
    provider: &ProcessProvider,
    check: &str,
    params: Option<Value>,
) -> Result<Value, ProviderError> {
    let mut query = EvidenceQuery::new("dg-python", check);
    if let Some(params) = params {
        query = query.with_params(params);
    }
    provider.query(query, context()).map(|verified| {
        serde_json::to_value(verified.result()).unwrap_or_else(|error| panic!("{error}"))
    })
}

fn hash_of(result: &Value) -> &str {
    result
        .pointer("/evidence_hash/value")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no evidence_hash in {result}"))
}

#[test]
fn python_provider_values_and_hashes_match_decision_gate() {
    let provider = provider();

    let env = ask(&provider, "get", Some(json!({"key": "DEPLOY_ENV"}))).expect("get");
    assert_eq!(env["value"], json!({"kind": "json", "value": "production"}));
    assert_eq!(hash_of(&env), HASH_PRODUCTION);

    let object = ask(&provider, "object", None).expect("object");
    assert_eq!(
        object["value"]["value"],
        json!({"status": "approved", "count": 42})
    );
    assert_eq!(hash_of(&object), HASH_OBJECT);

    // Floats: the provider hashed {"a":{"c":0,"d":100},...}; our verifier
    // recomputes the same digest or the query fails.
    let numbers = ask(&provider, "numbers", None).expect("numbers");
    assert_eq!(hash_of(&numbers), HASH_NUMBERS);

    let bytes = ask(&provider, "bytes", None).expect("bytes");
    assert_eq!(
        bytes["value"],
        json!({"kind": "bytes", "value": [104, 101, 108, 108, 111]})
    );
    assert_eq!(hash_of(&bytes), HASH_HELLO_BYTES);

    // No hash on the wire: the client computes it.
    let unhashed = ask(&provider, "no_hash", None).expect("no_hash");
    assert_eq!(hash_of(&unhashed), HASH_HELLO_JSON);

    let file =
        ask(&provider, "file_size", Some(json!({"path": "report.json"}))).expect("file_size");
    assert_eq!(file["value"]["value"], json!(1024));
    assert_eq!(
        file["evidence_ref"]["uri"],
        json!("dg+file://evidence-root/report.json")
    );
    assert_eq!(
        file["evidence_anchor"]["anchor_type"],
        json!("file_path_rooted")
    );
    assert_eq!(
        file["evidence_anchor"]["anchor_value"],
        json!(r#"{"path":"report.json","root_id":"evidence-root","size":1024}"#)
    );
}

#[test]
fn python_provider_failures_are_typed() {
    let provider = provider();

    match ask(&provider, "bad_hash", None) {
        Err(ProviderError::Query(QueryError::Verification(error))) => {
            assert_eq!(error.kind(), "hash_mismatch", "{error}");
        }
        other => panic!("a wrong evidence_hash must be rejected, got {other:?}"),
    }

    match ask(&provider, "rpc_error", None) {
        Err(ProviderError::Query(error @ QueryError::Provider { code: -32000, .. })) => {
            assert_eq!(error.code(), "provider_error");
        }
        other => panic!("a JSON-RPC error must come back as provider_error, got {other:?}"),
    }

    match ask(&provider, "no_such_check", None) {
        Err(ProviderError::Query(QueryError::Provider { code, message, .. })) => {
            assert_eq!(code, -32602);
            assert!(message.contains("no_such_check"), "{message}");
        }
        other => panic!("an unsupported check is a JSON-RPC error, got {other:?}"),
    }

    // An expected failure is an EvidenceResult carrying an error, not a
    // transport failure; the stream stays usable afterwards.
    match ask(&provider, "missing", None) {
        Ok(result) => {
            assert_eq!(result["error"]["code"], json!("not_found"), "{result}");
            assert_eq!(result["value"], Value::Null);
        }
        Err(ProviderError::Query(error)) => {
            let result = serde_json::to_value(error.to_evidence_result()).expect("json");
            assert_ne!(
                result["error"]["code"],
                json!("provider_unavailable"),
                "{result}"
            );
        }
        Err(other) => panic!("missing evidence broke the connection: {other}"),
    }
    let after = ask(&provider, "object", None).expect("the provider still answers");
    assert_eq!(hash_of(&after), HASH_OBJECT);
}

fn cli_query(check: &str, params: Option<&str>) -> Output {
    let cli = cli_binary();
    let context = json!({
        "tenant_id": 1, "namespace_id": 1, "run_id": "run-1", "scenario_id": "s",
        "stage_id": "st", "trigger_id": "t",
        "trigger_time": {"kind": "unix_millis", "value": 1_710_000_000_000_i64},
        "correlation_id": null
    });
    let mut command = Command::new(cli);
    command.args(["query", "--provider-id", "dg-python", "--check", check]);
    command.args(["--framing", "content-length", "--timeout-ms", "20000"]);
    command.arg("--context").arg(context.to_string());
    if let Some(params) = params {
        command.args(["--params", params]);
    }
    // The provider's command line, program first, after `--`.
    command.arg("--").args(dg_provider_command());
    run(&mut command, b"", Duration::from_secs(60))
}

fn printed(output: &Output) -> Value {
    serde_json::from_str(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "the CLI did not print an EvidenceResult ({error}):\n--- stdout\n{}\n--- stderr\n{}",
            output.stdout, output.stderr
        )
    })
}

#[test]
fn cli_queries_python_provider() {
    let good = cli_query("get", Some(r#"{"key":"DEPLOY_ENV"}"#));
    assert_eq!(good.code(), Some(0), "{good:?}");
    let result = printed(&good);
    assert_eq!(result["value"]["value"], json!("production"));
    assert_eq!(hash_of(&result), HASH_PRODUCTION);

    let bytes = cli_query("bytes", None);
    assert_eq!(bytes.code(), Some(0), "{bytes:?}");
    assert_eq!(hash_of(&printed(&bytes)), HASH_HELLO_BYTES);

    let rejected = cli_query("bad_hash", None);
    assert_eq!(
        rejected.code(),
        Some(1),
        "a wrong hash must fail the CLI: {rejected:?}"
    );
    assert_eq!(printed(&rejected)["error"]["code"], json!("hash_mismatch"));

    let refused = cli_query("rpc_error", None);
    assert_eq!(refused.code(), Some(1), "{refused:?}");
    assert_eq!(printed(&refused)["error"]["code"], json!("provider_error"));
}

#[test]
fn python_canonicalizer_agrees_with_the_jcs_vectors() {
    // The Python provider's hashes are only an independent oracle if its
    // canonical JSON is right: check it on the upstream JCS vectors.
    let vectors = evidence_wire_tests::vectors_dir().join("jcs");
    for name in [
        "arrays",
        "french",
        "structures",
        "unicode",
        "values",
        "weird",
    ] {
        let input = std::fs::read(vectors.join(format!("input/{name}.json")))
            .unwrap_or_else(|error| panic!("vector {name}: {error}"));
        let expected = std::fs::read(vectors.join(format!("output/{name}.json")))
            .unwrap_or_else(|error| panic!("vector {name}: {error}"));
        let mut command = Command::new(system_python());
        command
            .arg(peer_script("dg_provider.py"))
            .arg("--canonical");
        let output = run(&mut command, &input, Duration::from_secs(30));
        assert!(output.success(), "{output:?}");
        assert_eq!(
            output.stdout_bytes,
            expected.strip_suffix(b"\n").unwrap_or(&expected),
            "vector {name}"
        );
    }
}

/// Split `Content-Length: N\r\n\r\n<body>` frames, strictly as Decision Gate
/// reads them (exact header name, CRLF).
fn split_frames(mut bytes: &[u8]) -> Vec<Value> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        let text = String::from_utf8_lossy(bytes);
        let header_end = text
            .find("\r\n\r\n")
            .unwrap_or_else(|| panic!("no complete header in {text:?}"));
        let header = &text[..header_end];
        let length: usize = header
            .strip_prefix("Content-Length: ")
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("Decision Gate cannot read the header {header:?}"));
        let body = &bytes[header_end + 4..header_end + 4 + length];
        assert!(!body.contains(&b'\n'), "body is not compact JSON");
        frames.push(serde_json::from_slice(body).unwrap_or_else(|error| panic!("{error}")));
        bytes = &bytes[header_end + 4 + length..];
    }
    frames
}

#[test]
fn decision_gate_first_request_replayed_against_the_binary() {
    let second = DG_FIRST_REQUEST.replace(r#""id":1"#, r#""id":2"#).replace(
        r#""provider_id":"stub","check_id":"probe","params":{"mode":"plain"}"#,
        r#""provider_id":"evidence-wire","check_id":"time_now""#,
    );
    let mut input = format!(
        "Content-Length: {}\r\n\r\n{DG_FIRST_REQUEST}",
        DG_FIRST_REQUEST.len()
    )
    .into_bytes();
    assert_eq!(DG_FIRST_REQUEST.len(), 364, "the replayed bytes changed");
    input.extend_from_slice(format!("Content-Length: {}\r\n\r\n{second}", second.len()).as_bytes());

    let mut command = Command::new(cli_binary());
    command.arg("serve");
    let output = run(&mut command, &input, Duration::from_secs(60));
    assert_eq!(
        output.code(),
        Some(0),
        "serve must exit 0 at end of input: {output:?}"
    );
    let frames = split_frames(&output.stdout_bytes);
    assert_eq!(frames.len(), 2, "one answer per request: {frames:?}");

    for frame in &frames {
        assert_eq!(frame["jsonrpc"], json!("2.0"));
        let item = &frame["result"]["content"][0];
        assert_eq!(
            item["type"],
            json!("json"),
            "Decision Gate reads only a json item: {frame}"
        );
        for field in [
            "value",
            "lane",
            "error",
            "evidence_hash",
            "evidence_ref",
            "evidence_anchor",
            "signature",
            "content_type",
        ] {
            assert!(
                item["json"].get(field).is_some(),
                "EvidenceResult lacks {field}: {frame}"
            );
        }
    }
    let first = frames
        .iter()
        .find(|frame| frame["id"] == json!(1))
        .expect("answer to id 1");
    // The bundled provider has no `probe` check: an expected failure, as an
    // EvidenceResult error (fail closed), not a JSON-RPC error.
    assert_eq!(
        first["result"]["content"][0]["json"]["value"],
        Value::Null,
        "{first}"
    );
    assert_eq!(
        first["result"]["content"][0]["json"]["error"]["code"],
        json!("unknown_check")
    );

    let time = frames
        .iter()
        .find(|frame| frame["id"] == json!(2))
        .expect("answer to id 2");
    let evidence = &time["result"]["content"][0]["json"];
    assert_eq!(
        evidence["value"],
        json!({"kind": "json", "value": 1_710_000_000_000_i64})
    );
    // Decision Gate computes a missing hash; a present one must be right.
    assert!(
        evidence["evidence_hash"].is_null()
            || evidence["evidence_hash"]
                == json!({"algorithm": "sha256", "value": HASH_1710000000000}),
        "{time}"
    );
}
