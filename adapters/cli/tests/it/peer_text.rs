//! Issue 38 item 10: what a peer wrote reaches the terminal escaped. A
//! provider's stderr (relayed with its `[program]` prefix while `query`
//! runs it), its JSON-RPC error message, an HTTP provider's error body, a
//! contract's text and, in `serve`'s diagnostics, a client's method used
//! to be printed raw, so a peer could erase the prefix (`ESC[2K`, CR) and
//! print a line of its own, such as a fake "evidence_hash verified". Now every terminal control (C0 but the tab,
//! DEL, C1, the bidirectional overrides) is printed as an escape (`\r`,
//! `\u{1b}`), and the JSON on stdout stays the same value.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![cfg(unix)]

use crate::common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The forged line: erase the line, return to its start, claim success.
const FORGED: &str = "\u{1b}[2K\rfake: evidence_hash verified";

/// Runs the binary with `args`, killed (and the test failed) after 60 s.
fn run(args: &[&str]) -> Output {
    let child = Command::new(BIN)
        .args(args)
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn evidence-wire");
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.expect("wait evidence-wire"),
        Err(_) => {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            panic!("evidence-wire {args:?} did not finish within 60 s");
        }
    }
}

/// Asserts that `text` holds no raw terminal control (the tab and the
/// newlines ending lines aside).
fn assert_no_controls(what: &str, text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|c| {
            (c.is_control() && !matches!(c, '\n' | '\t'))
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect();
    assert!(
        raw.is_empty(),
        "{what} holds raw terminal controls {raw:?}:\n{text}"
    );
}

/// A provider (`sh -c`, newline-delimited JSON) that writes the forged
/// line to its stderr, then answers the query (id 1) with a JSON-RPC
/// error whose message forges it too and carries a C1 CSI (U+009B).
const FORGING_PROVIDER: &str = r#"IFS= read -r line
printf '\033[2K\rfake: evidence_hash verified\n' >&2
sleep 0.3
printf '{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"\\u001b[2K\\rfake: evidence_hash verified \\u009b31m"}}\n'
sleep 0.3
"#;

#[test]
fn query_escapes_a_providers_stderr_and_its_error_message() {
    let output = run(&[
        "query",
        "--check",
        "probe",
        "--context",
        CONTEXT,
        "--timeout-ms",
        "5000",
        "--framing",
        "ndjson",
        "--command",
        "sh",
        "--",
        "-c",
        FORGING_PROVIDER,
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_no_controls("query's stderr", &stderr);
    assert_no_controls("query's stdout", &stdout);
    // The relayed stderr line, under its prefix, shows the escapes.
    assert!(
        stderr.contains("[sh] \\u{1b}[2K\\rfake: evidence_hash verified"),
        "{stderr}"
    );
    // So does the error message `query` reports.
    assert!(
        stderr.contains("evidence-wire: provider error -32000: \\u{1b}[2K\\rfake: evidence_hash verified \\u{9b}31m"),
        "{stderr}"
    );
    // The result on stdout is the same JSON value, its C1 escaped as JSON.
    let result: Value = serde_json::from_str(&stdout).expect("the result is JSON");
    assert_eq!(
        result["error"]["details"]["message"],
        format!("{FORGED} \u{9b}31m")
    );
    assert!(stdout.contains("\\u009b31m"), "{stdout}");
}

/// A loopback HTTP server answering one request with `500` and `body`.
fn failing_http_server(body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let Some(Ok(mut stream)) = listener.incoming().next() else {
            return;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut length = 0usize;
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
            line.clear();
        }
        let mut request = vec![0u8; length];
        let _ = reader.read_exact(&mut request);
        let answer = format!(
            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(answer.as_bytes());
    });
    port
}

#[test]
fn query_escapes_an_http_providers_error_body() {
    let port = failing_http_server("\u{1b}[2K\rfake: evidence_hash verified\u{1b}]0;owned\u{7}");
    let url = format!("http://127.0.0.1:{port}/rpc");
    let output = run(&[
        "query",
        "--check",
        "probe",
        "--context",
        CONTEXT,
        "--timeout-ms",
        "5000",
        "--allow-insecure-http",
        "--url",
        &url,
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_no_controls("query's stderr", &stderr);
    assert_no_controls("query's stdout", &String::from_utf8_lossy(&output.stdout));
    assert!(
        stderr.contains("HTTP 500")
            && stderr.contains("\\u{1b}[2K\\rfake: evidence_hash verified\\u{1b}]0;owned\\u{7}"),
        "{stderr}"
    );
}

#[test]
fn contract_check_escapes_the_contracts_text() {
    // A contract (a provider's file) whose check id carries the forged
    // line: `contract --check` quotes it in the problems it lists.
    let dir = TempDir::new();
    let contract = dir.write(
        "forged.contract.json",
        serde_json::json!({
            "provider_id": "forged",
            "name": "forged",
            "description": "a contract forging terminal output",
            "transport": "mcp",
            "notes": [],
            "config_schema": {"type": "object"},
            "checks": [{
                "check_id": FORGED,
                "description": FORGED,
                "determinism": "external",
                "params_required": false,
                "params_schema": {"type": "null"},
                "result_schema": {},
                "allowed_comparators": ["equals"],
                "anchor_types": [],
                "content_types": ["application/json"],
                "examples": []
            }]
        })
        .to_string(),
    );
    let output = run(&["contract", "--check", contract.to_str().expect("path")]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    assert_no_controls("contract --check's stdout", &stdout);
    assert_no_controls("contract --check's stderr", &stderr);
    assert!(stdout.contains("\\u{1b}[2K\\rfake"), "{stdout}");
}

/// A provider (`sh -c`, Content-Length) answering its first request (id 1)
/// with a JSON-RPC error forging a line, which `check-provider` quotes in
/// its reasons, and writing one to its stderr; it then ends.
const FORGING_FRAMED_PROVIDER: &str = r#"body='{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"\u001b[2K\rfake pass \u009b31m"}}'
printf 'Content-Length: %s\r\n\r\n%s' "${#body}" "$body"
printf '\033[2K\rfake pass\n' >&2
exec sleep 1
"#;

#[test]
fn check_provider_escapes_what_the_provider_wrote_in_its_report() {
    for json in [false, true] {
        let mut args = vec!["check-provider", "--timeout-ms", "300", "--samples", "1"];
        if json {
            args.push("--json");
        }
        args.extend(["--command", "sh", "--", "-c", FORGING_FRAMED_PROVIDER]);
        let output = run(&args);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
        assert_no_controls("check-provider's report", &stdout);
        assert_no_controls("check-provider's stderr", &stderr);
        // The reason quoting the provider's error shows the escapes (the
        // CR, whitespace, became a space).
        let quoted = "JSON-RPC error -32000 (\\u{1b}[2K fake pass \\u{9b}31m)";
        if json {
            let report: Value = serde_json::from_str(&stdout).expect("the report is JSON");
            let reasons: Vec<&str> = report["checks"]
                .as_array()
                .expect("checks")
                .iter()
                .filter_map(|line| line["reason"].as_str())
                .collect();
            assert!(
                reasons.iter().any(|reason| reason.contains(quoted)),
                "{reasons:#?}"
            );
        } else {
            assert!(stdout.contains(quoted), "{stdout}");
        }
    }
}

#[test]
fn serve_escapes_a_clients_method_in_its_diagnostics() {
    // `serve`'s stderr diagnostics quote the client's method; `tracing`
    // escapes ESC itself but passes CR and C1 through.
    let dir = TempDir::new();
    let mut child = Command::new(BIN)
        .args(["serve", "--log-dir"])
        .arg(&dir.0)
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .env("EVIDENCE_WIRE_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\\u001b[2K\\rfake: evidence_hash verified\\u009b\",\"params\":{}}\n",
        )
        .expect("write the request");
    let output = child.wait_with_output().expect("serve output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_no_controls("serve's diagnostics", &stderr);
    assert!(
        stderr.contains(
            "rejected \\u{1b}[2K\\rfake: evidence_hash verified\\u{9b}: METHOD_NOT_FOUND"
        ),
        "{stderr}"
    );
}
