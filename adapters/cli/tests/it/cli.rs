//! End-to-end tests of the `evidence-wire` binary: every bundled check's
//! success and documented failures through `query` (the provider is the
//! binary's own `serve`, spawned over stdio), `hash` on the wire-facts
//! examples, `verify` on good and tampered evidence, `config check`,
//! `contract`, `--help`, and the exit codes 0 / 1 / 2. Also `allow_raw`
//! enforcement and `query --url https://… --ca-cert` against loopback
//! servers built on the core `Server` state machine.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    run_in(args, stdin, None, &[])
}

fn run_in(args: &[&str], stdin: Option<&[u8]>, cwd: Option<&Path>, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("spawn evidence-wire");
    {
        let mut input = child.stdin.take().expect("stdin");
        if let Some(bytes) = stdin {
            input.write_all(bytes).expect("write stdin");
        }
    }
    child.wait_with_output().expect("wait evidence-wire")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited normally")
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is not JSON ({error}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `query` against the bundled provider with the fixed context.
fn query(root: Option<&Path>, config: Option<&Path>, check: &str, params: Option<Value>) -> Output {
    let mut args: Vec<String> = Vec::new();
    if let Some(config) = config {
        args.push("--config".into());
        args.push(config.display().to_string());
    }
    args.extend([
        "query".into(),
        "--check".into(),
        check.into(),
        "--context".into(),
        CONTEXT.into(),
    ]);
    if let Some(params) = params {
        args.push("--params".into());
        args.push(params.to_string());
    }
    if let Some(root) = root {
        args.push("--root".into());
        args.push(root.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args, None)
}

fn sha256_hex(bytes: &[u8]) -> String {
    let output = run(&["hash", "--bytes"], Some(bytes));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    stdout_json(&output)["value"]
        .as_str()
        .expect("hex")
        .to_owned()
}

/// Asserts a successful result with `value` and a hash that `hash` agrees with.
fn assert_evidence(output: &Output, value: &Value) -> Value {
    assert_eq!(code(output), 0, "stderr: {}", stderr(output));
    let result = stdout_json(output);
    assert_eq!(result["error"], Value::Null);
    assert_eq!(result["value"], json!({"kind": "json", "value": value}));
    let canonical = run(&["hash"], Some(value.to_string().as_bytes()));
    assert_eq!(result["evidence_hash"], stdout_json(&canonical));
    result
}

fn assert_error(output: &Output, expected_code: &str) -> Value {
    assert_eq!(
        code(output),
        1,
        "stdout: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    let result = stdout_json(output);
    assert_eq!(result["error"]["code"], expected_code, "{result}");
    assert_eq!(result["value"], Value::Null);
    result
}

#[test]
fn time_now_is_the_trigger_time() {
    let output = query(None, None, "time_now", None);
    let result = assert_evidence(&output, &json!(1_710_000_000_000_i64));
    // The worked example of wire-facts §1.
    assert_eq!(
        result["evidence_hash"]["value"],
        "8e3359f0c6a336723783a5550104e05046b7caa8ab214fdf0c891bea1ad97083"
    );
    assert_eq!(result["content_type"], "application/json");
}

#[test]
fn time_after_and_before_compare_the_trigger_time() {
    let cases = [
        (
            "time_after",
            json!({"timestamp": "2024-01-01T00:00:00Z"}),
            true,
        ),
        (
            "time_after",
            json!({"timestamp": 1_710_000_000_000_i64}),
            false,
        ),
        (
            "time_before",
            json!({"timestamp": "2030-01-01T00:00:00Z"}),
            true,
        ),
        ("time_before", json!({"timestamp": 1_000_i64}), false),
    ];
    for (check, params, expected) in cases {
        let output = query(None, None, check, Some(params));
        assert_evidence(&output, &json!(expected));
    }
    let output = query(
        None,
        None,
        "time_after",
        Some(json!({"timestamp": "yesterday"})),
    );
    assert_error(&output, "invalid_params");
}

#[test]
fn time_checks_refuse_a_logical_trigger_time() {
    let context = CONTEXT.replace("unix_millis", "logical");
    let output = run(
        &[
            "query",
            "--check",
            "time_after",
            "--params",
            r#"{"timestamp":1}"#,
            "--context",
            &context,
        ],
        None,
    );
    assert_error(&output, "unsupported_trigger_time");
}

#[test]
fn env_get_is_denied_by_default_and_reads_allow_listed_keys() {
    let output = run_in(
        &[
            "query",
            "--check",
            "env_get",
            "--params",
            r#"{"key":"EW_CLI_TEST"}"#,
        ],
        None,
        None,
        &[("EW_CLI_TEST", "production")],
    );
    assert_error(&output, "env_key_denied");

    let dir = TempDir::new();
    let config = dir.write(
        "ew.toml",
        "[bundled.env]\nallow = [\"EW_CLI_TEST\", \"EW_CLI_UNSET\"]\nmax_value_bytes = 16\n",
    );
    let config = config.display().to_string();
    let ask = |key: &str, value: &str| {
        run_in(
            &[
                "--config",
                &config,
                "query",
                "--check",
                "env_get",
                "--params",
                &json!({"key": key}).to_string(),
            ],
            None,
            None,
            &[("EW_CLI_TEST", value)],
        )
    };
    let result = assert_evidence(&ask("EW_CLI_TEST", "production"), &json!("production"));
    assert_eq!(
        result["evidence_hash"]["value"],
        "80be2eb0944c0453a6ad339a56e1c8f39f8cc57a4e627758246ccfd274176fd8"
    );
    assert_error(
        &ask("EW_CLI_TEST", "a value longer than sixteen bytes"),
        "env_value_too_large",
    );
    assert_error(&ask("EW_CLI_UNSET", "x"), "env_not_set");
}

#[test]
fn file_size_reports_the_seed_anchor() {
    let dir = TempDir::new();
    dir.write("reports/report.json", r#"{"status":"approved","count":42}"#);
    let output = query(
        Some(&dir.0),
        None,
        "file_size",
        Some(json!({"path": "reports/report.json"})),
    );
    let result = assert_evidence(&output, &json!(32));
    assert_eq!(
        result["evidence_ref"],
        json!({"uri": "dg+file://evidence-root/reports/report.json"})
    );
    assert_eq!(
        result["evidence_anchor"],
        json!({
            "anchor_type": "file_path_rooted",
            "anchor_value": r#"{"path":"reports/report.json","root_id":"evidence-root","size":32}"#
        })
    );
}

#[test]
fn json_path_reads_files_under_the_root_only() {
    let dir = TempDir::new();
    dir.write("report.json", r#"{"status":"approved","count":42}"#);
    dir.write("broken.json", "{not json");
    let root = Some(dir.0.as_path());

    let whole = query(
        root,
        None,
        "json_path",
        Some(json!({"file": "report.json"})),
    );
    let result = assert_evidence(&whole, &json!({"status": "approved", "count": 42}));
    assert_eq!(
        result["evidence_hash"]["value"],
        "c831e95a8fc9805621f8ae15b07b11ebae6d9d1cece66d891bf3152bf6cf2ed7"
    );
    assert_eq!(
        result["evidence_anchor"]["anchor_value"],
        r#"{"path":"report.json","root_id":"evidence-root"}"#
    );

    let status = query(
        root,
        None,
        "json_path",
        Some(json!({"file": "report.json", "jsonpath": "$.status"})),
    );
    assert_evidence(&status, &json!("approved"));

    let cases = [
        (
            json!({"file": "report.json", "jsonpath": "$.missing"}),
            "jsonpath_not_found",
        ),
        (
            json!({"file": "report.json", "jsonpath": "$[?"}),
            "invalid_jsonpath",
        ),
        (json!({"file": "broken.json"}), "invalid_json"),
        (json!({"file": "absent.json"}), "file_not_found"),
        (json!({"file": "../report.json"}), "path_outside_root"),
        (json!({"file": "/etc/passwd"}), "path_outside_root"),
    ];
    for (params, expected) in cases {
        let output = query(root, None, "json_path", Some(params));
        assert_error(&output, expected);
    }
}

#[cfg(unix)]
#[test]
fn json_path_refuses_a_symlink_out_of_the_root() {
    let outside = TempDir::new();
    outside.write("secret.json", r#"{"secret":true}"#);
    let dir = TempDir::new();
    std::os::unix::fs::symlink(outside.0.join("secret.json"), dir.0.join("link.json"))
        .expect("symlink");
    let output = query(
        Some(&dir.0),
        None,
        "json_path",
        Some(json!({"file": "link.json"})),
    );
    assert_error(&output, "path_outside_root");
}

#[test]
fn json_path_refuses_files_over_the_size_limit() {
    let dir = TempDir::new();
    dir.write("big.json", format!("[{}]", vec!["1"; 200].join(",")));
    let config = dir.write(
        "ew.toml",
        format!(
            "[bundled]\nroot = {:?}\n[bundled.json]\nmax_file_bytes = 64\n",
            dir.0.display().to_string()
        ),
    );
    let output = query(
        None,
        Some(&config),
        "json_path",
        Some(json!({"file": "big.json"})),
    );
    assert_error(&output, "file_too_large");
}

/// A one-shot-per-connection HTTP server on loopback answering every
/// request with `status`, `headers` and `body`, for at most `requests`
/// connections.
fn http_server(
    status: &'static str,
    headers: &'static str,
    body: &'static str,
    requests: usize,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if line == "\r\n" {
                    break;
                }
                line.clear();
            }
            let answer = format!(
                "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    port
}

/// `[bundled.http]` allowing `host` (with its port: a bare host allows only
/// the default port), loopback destinations included.
fn http_config(dir: &TempDir, insecure: bool, host: &str) -> PathBuf {
    dir.write(
        "http.toml",
        format!(
            "[bundled.http]\nallow_hosts = [{host:?}]\nallow_insecure_http = {insecure}\nallow_private_addresses = true\ntimeout_ms = 2000\nmax_body_bytes = 64\n"
        ),
    )
}

#[test]
fn http_status_and_body_hash_on_loopback() {
    let dir = TempDir::new();
    let port = http_server("200 OK", "", "hello", 2);
    let config = http_config(&dir, true, &format!("127.0.0.1:{port}"));
    let url = format!("http://127.0.0.1:{port}/health");

    let status = query(
        None,
        Some(&config),
        "http_status",
        Some(json!({"url": url})),
    );
    let result = assert_evidence(&status, &json!(200));
    assert_eq!(result["evidence_ref"]["uri"], url);

    let hash = query(
        None,
        Some(&config),
        "http_body_hash",
        Some(json!({"url": url})),
    );
    assert_evidence(
        &hash,
        &json!({"algorithm": "sha256", "value": sha256_hex(b"hello")}),
    );
}

#[test]
fn http_checks_do_not_follow_redirects() {
    let dir = TempDir::new();
    let port = http_server(
        "302 Found",
        "Location: http://127.0.0.1:9/elsewhere\r\n",
        "",
        2,
    );
    let config = http_config(&dir, true, &format!("127.0.0.1:{port}"));
    let url = format!("http://127.0.0.1:{port}/");
    let status = query(
        None,
        Some(&config),
        "http_status",
        Some(json!({"url": url})),
    );
    assert_evidence(&status, &json!(302));
    let hash = query(
        None,
        Some(&config),
        "http_body_hash",
        Some(json!({"url": url})),
    );
    assert_error(&hash, "http_status_not_success");
}

#[test]
fn http_checks_refuse_plain_http_other_hosts_and_big_bodies() {
    let dir = TempDir::new();
    let secure_only = http_config(&dir, false, "127.0.0.1");
    let output = query(
        None,
        Some(&secure_only),
        "http_status",
        Some(json!({"url": "http://127.0.0.1:9/"})),
    );
    assert_error(&output, "http_insecure_refused");

    let other = TempDir::new();
    let other_host = http_config(&other, true, "example.com");
    let output = query(
        None,
        Some(&other_host),
        "http_status",
        Some(json!({"url": "http://127.0.0.1:9/"})),
    );
    assert_error(&output, "http_host_not_allowed");

    let big = TempDir::new();
    let port = http_server(
        "200 OK",
        "",
        "this body is longer than the sixty-four byte limit set in the configuration",
        1,
    );
    let config = http_config(&big, true, &format!("127.0.0.1:{port}"));
    let output = query(
        None,
        Some(&config),
        "http_body_hash",
        Some(json!({"url": format!("http://127.0.0.1:{port}/")})),
    );
    assert_error(&output, "http_body_too_large");
}

#[test]
fn bad_requests_are_usage_errors() {
    // Unknown check: refused before the provider is called.
    let output = query(None, None, "no_such_check", None);
    assert_eq!(code(&output), 2);
    assert!(stderr(&output).contains("time_now"), "{}", stderr(&output));
    // Params that do not match the check's params_schema.
    let output = query(None, None, "file_size", Some(json!({"pth": "x"})));
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("params_schema"),
        "{}",
        stderr(&output)
    );
    // Params that are not JSON.
    let output = run(&["query", "--check", "time_now", "--params", "{"], None);
    assert_eq!(code(&output), 2);
    // A missing config file.
    let output = run(
        &[
            "--config",
            "/nonexistent/ew.toml",
            "query",
            "--check",
            "time_now",
        ],
        None,
    );
    assert_eq!(code(&output), 2);
    // An unknown subcommand.
    let output = run(&["frobnicate"], None);
    assert_eq!(code(&output), 2);
    assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
}

#[test]
fn query_an_ad_hoc_command_in_both_framings() {
    for (framing, handshake) in [
        ("content-length", false),
        ("ndjson", true),
        ("ndjson", false),
    ] {
        let mut args = vec![
            "query",
            "--check",
            "time_now",
            "--context",
            CONTEXT,
            "--framing",
            framing,
        ];
        if handshake {
            args.push("--handshake");
        }
        args.extend(["--command", BIN, "--", "serve"]);
        let output = run(&args, None);
        assert_evidence(&output, &json!(1_710_000_000_000_i64));
    }
}

#[test]
fn query_command_is_one_program_with_its_arguments_after_double_dash() {
    // Issue 21 item 6: `--command` used to swallow every later argument,
    // so the documented order (`--command PROGRAM` then other options)
    // exited 2.
    let expected = json!(1_710_000_000_000_i64);
    let output = run(
        &[
            "query",
            "--command",
            BIN,
            "--check",
            "time_now",
            "--context",
            CONTEXT,
            "--",
            "serve",
        ],
        None,
    );
    assert_evidence(&output, &expected);
    // Without --command, everything after `--` is the command line.
    let output = run(
        &[
            "query",
            "--check",
            "time_now",
            "--context",
            CONTEXT,
            "--framing",
            "ndjson",
            "--handshake",
            "--",
            BIN,
            "serve",
            "--provider-id",
            "evidence-wire",
        ],
        None,
    );
    assert_evidence(&output, &expected);
    // A provider command line and a URL or a configured provider conflict.
    for conflicting in [
        &["--url", "https://localhost:1/rpc"][..],
        &["--provider", "git"][..],
    ] {
        let mut args = vec!["query", "--check", "time_now"];
        args.extend_from_slice(conflicting);
        args.extend(["--", BIN, "serve"]);
        let output = run(&args, None);
        assert_eq!(code(&output), 2, "{conflicting:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("cannot be used with"),
            "{}",
            stderr(&output)
        );
    }
}

#[test]
fn query_a_provider_that_is_not_there() {
    let output = run(
        &[
            "query",
            "--check",
            "time_now",
            "--timeout-ms",
            "2000",
            "--command",
            "/nonexistent/provider",
        ],
        None,
    );
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("/nonexistent/provider"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn hash_reproduces_the_wire_facts_examples() {
    let cases: [(&[&str], &str, &str); 6] = [
        (
            &[],
            r#""hello""#,
            "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a",
        ),
        (
            &[],
            r#"{"status":"approved","count":42}"#,
            "c831e95a8fc9805621f8ae15b07b11ebae6d9d1cece66d891bf3152bf6cf2ed7",
        ),
        (
            &[],
            r#"{"b":[1,2.5,{"z":null,"a":"x"}],"a":{"d":1e2,"c":-0}}"#,
            "f9c76828f16f72ed31412d253cd4db6441bcd562b8a42f2c11a70a26e31956ed",
        ),
        (
            &[],
            "1.0",
            "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b",
        ),
        (
            &["--bytes"],
            "hello",
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
        ),
        (
            &["--profile", "decision-gate"],
            r#"{"a b":1,"a":2,"n":9007199254740993}"#,
            "d8a324fae07e90e275c3c73412629b2e8c2cdb23f2465e6f666658524285d74d",
        ),
    ];
    for (flags, input, expected) in cases {
        let mut args = vec!["hash"];
        args.extend_from_slice(flags);
        let output = run(&args, Some(input.as_bytes()));
        assert_eq!(code(&output), 0, "{input}: {}", stderr(&output));
        assert_eq!(
            stdout_json(&output),
            json!({"algorithm": "sha256", "value": expected}),
            "{input}"
        );
    }
    let output = run(
        &["hash", "--canonical"],
        Some(br#"{"b":[1,2.5,{"z":null,"a":"x"}],"a":{"d":1e2,"c":-0}}"#),
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "{\"a\":{\"c\":0,\"d\":100},\"b\":[1,2.5,{\"a\":\"x\",\"z\":null}]}\n"
    );
    let output = run(
        &["hash", "--canonical", "--profile", "decision-gate"],
        Some(br#"{"a":1,"a b":2,"a!":3,"ab":4}"#),
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "{\"a b\":2,\"a!\":3,\"a\":1,\"ab\":4}\n"
    );
    // I-JSON: duplicate names are refused, with exit 1 and one line.
    let output = run(&["hash"], Some(br#"{"a":1,"a":2}"#));
    assert_eq!(code(&output), 1);
    assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
}

/// RFC 8785 would hash `9007199254740993` as `9007199254740992`: `hash`
/// refuses it under the default profile (exit 1, one line naming the
/// value's JSON pointer and the profile that keeps it exact), in both
/// modes; `--profile decision-gate` hashes it; a fraction keeps double
/// semantics.
#[test]
fn hash_refuses_integers_outside_the_i_json_range() {
    let input = br#"{"a":[1,{"n":-9007199254740993}]}"#;
    for flags in [&["hash"][..], &["hash", "--canonical"]] {
        let output = run(flags, Some(input));
        assert_eq!(code(&output), 1, "{flags:?}: {}", stderr(&output));
        let message = stderr(&output);
        assert_eq!(message.lines().count(), 1, "{message}");
        for needle in [
            "-9007199254740993",
            "\"/a/1/n\"",
            "decision-gate",
            "--profile decision-gate",
        ] {
            assert!(
                message.contains(needle),
                "{flags:?}: {needle} missing: {message}"
            );
        }
        assert!(output.stdout.is_empty(), "{flags:?}: printed a hash anyway");
    }
    let output = run(
        &["hash", "--profile", "decision-gate", "--canonical"],
        Some(input),
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "{\"a\":[1,{\"n\":-9007199254740993}]}\n"
    );
    let output = run(
        &["hash", "--canonical"],
        Some(b"[9007199254740993.0, 9007199254740991]"),
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "[9007199254740992,9007199254740991]\n"
    );
}

fn signed_hello() -> Value {
    let signature = "e4285475a284b843913b0a8d21709cd9d5e709f9a3ecc5c7a774fb31ba6f7c13587f6d247e8869fe7c693513911fc1755a9d8fb07ebf437e1ba81de36318190f";
    let bytes: Vec<u8> = (0..64)
        .map(|i| u8::from_str_radix(&signature[i * 2..i * 2 + 2], 16).expect("hex"))
        .collect();
    json!({
        "value": {"kind": "json", "value": "hello"},
        "lane": "verified",
        "error": null,
        "evidence_hash": {"algorithm": "sha256", "value": "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a"},
        "evidence_ref": null,
        "evidence_anchor": null,
        "signature": {"scheme": "ed25519", "key_id": "k1", "signature": bytes},
        "content_type": "application/json"
    })
}

const PUBLIC_KEY: &str = "k1=ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c";

#[test]
fn verify_accepts_good_evidence_and_refuses_tampering() {
    let dir = TempDir::new();
    let good = dir.write("good.json", signed_hello().to_string());
    let good = good.display().to_string();
    let output = run(&["verify", &good, "--key", PUBLIC_KEY], None);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout_json(&output)["value"]["value"], "hello");

    let mut tampered_value = signed_hello();
    tampered_value["value"]["value"] = json!("hellO");
    let mut tampered_hash = signed_hello();
    tampered_hash["evidence_hash"]["value"] = json!("0".repeat(64));
    let mut truncated = signed_hello();
    truncated["signature"]["signature"]
        .as_array_mut()
        .expect("array")
        .pop();
    let mut unsigned = signed_hello();
    unsigned["signature"] = Value::Null;
    let cases = [
        (tampered_value, PUBLIC_KEY, "value_mismatch"),
        (tampered_hash, PUBLIC_KEY, "hash_mismatch"),
        (truncated, PUBLIC_KEY, "invalid_signature_bytes"),
        (unsigned, PUBLIC_KEY, "missing_signature"),
        (
            signed_hello(),
            "k2=ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c",
            "key_not_authorized",
        ),
    ];
    for (index, (result, key, kind)) in cases.into_iter().enumerate() {
        let path = dir.write(&format!("bad{index}.json"), result.to_string());
        let output = run(&["verify", &path.display().to_string(), "--key", key], None);
        assert_eq!(code(&output), 1, "case {index}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(kind),
            "case {index}: {}",
            stderr(&output)
        );
        assert!(
            output.stdout.is_empty(),
            "case {index}: nothing printed on failure"
        );
    }
    // Without --key, a hash-only audit; the tampered value still fails.
    let mut tampered = signed_hello();
    tampered["value"]["value"] = json!("bye");
    let path = dir.write("audit.json", tampered.to_string());
    let output = run(&["verify", &path.display().to_string()], None);
    assert_eq!(code(&output), 1);
    let output = run(&["verify", "-"], Some(b"not json"));
    assert_eq!(code(&output), 2);
}

/// One spelling of key options (issue 41 item 6): `--key-file FILE` for a
/// public key file and `--key KEY_ID=HEX` inline, on verify, query and
/// check-provider alike; a file given to `--key` is refused with the
/// spelling that takes it.
#[test]
fn every_command_takes_key_file_for_a_file_and_key_inline() {
    let dir = TempDir::new();
    let result = dir.write("result.json", signed_hello().to_string());
    let result = result.display().to_string();
    let public: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&PUBLIC_KEY[3 + i * 2..5 + i * 2], 16).expect("hex"))
        .collect();
    let key_file = dir.write("k1.pub", public);
    let key_file = key_file.display().to_string();

    let output = run(&["verify", &result, "--key-file", &key_file], None);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("signed by key"),
        "{}",
        stderr(&output)
    );
    let output = run(&["verify", &result, "--key", PUBLIC_KEY], None);
    assert_eq!(code(&output), 0, "{}", stderr(&output));

    for command in [
        vec!["verify", result.as_str()],
        vec!["query", "--check", "time_now"],
        vec!["check-provider"],
    ] {
        let mut args = command.clone();
        args.extend(["--key", key_file.as_str()]);
        let output = run(&args, None);
        assert_eq!(code(&output), 2, "{command:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(&format!("give a public key file as --key-file {key_file}")),
            "{command:?}: {}",
            stderr(&output)
        );
    }

    // query --key-file requires the signature: the bundled provider
    // without a key answers unsigned, which is refused.
    let output = run(
        &["query", "--check", "time_now", "--key-file", &key_file],
        None,
    );
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(stderr(&output).contains("signature"), "{}", stderr(&output));
}

#[test]
fn config_check_passes_the_example_and_fails_a_bad_file() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/evidence-wire.toml"
    );
    let output = run(&["config", "check", example], None);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("ok"));

    let dir = TempDir::new();
    let bad = dir.write("bad.toml", "[[providers]]\nname = \"time\"\ntype = \"mcp\"\ncommand = [\"x\"]\ncapabilities_path = \"c.json\"\n");
    let output = run(&["config", "check", &bad.display().to_string()], None);
    assert_eq!(code(&output), 2);
    assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
    assert!(stderr(&output).contains("time"), "{}", stderr(&output));

    let unknown = dir.write("unknown.toml", "[server]\nbnid = \"127.0.0.1:1\"\n");
    let output = run(&["config", "check", &unknown.display().to_string()], None);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("bnid") && stderr(&output).contains("line 2"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn contract_is_a_valid_capabilities_contract_for_every_check() {
    let output = run(&["contract", "--provider-id", "bundled"], None);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let contract =
        evidence_wire::contract::ProviderContract::from_json_str(&text).expect("contract parses");
    contract.validate("bundled").expect("contract validates");
    let ids: Vec<&str> = contract
        .checks
        .iter()
        .map(|check| check.check_id.as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "time_now",
            "time_after",
            "time_before",
            "env_get",
            "json_path",
            "file_size",
            "http_status",
            "http_body_hash"
        ]
    );
    // Every example's params pass the check's own params schema.
    for check in &contract.checks {
        for example in &check.examples {
            check
                .validate_params(&example.params)
                .unwrap_or_else(|error| panic!("{}: {error}", check.check_id));
        }
    }
}

#[test]
fn every_command_has_help_with_an_example() {
    for command in [
        &["--help"][..],
        &["serve", "--help"],
        &["query", "--help"],
        &["hash", "--help"],
        &["verify", "--help"],
        &["contract", "--help"],
        &["config", "--help"],
        &["config", "check", "--help"],
        &["docs", "--help"],
        &["docs", "list", "--help"],
        &["docs", "search", "--help"],
        &["docs", "read", "--help"],
    ] {
        let output = run(command, None);
        assert_eq!(code(&output), 0, "{command:?}");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("Example"),
            "{command:?} has no example:\n{text}"
        );
    }
}

#[test]
fn serve_exits_cleanly_on_end_of_input() {
    let request = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}
"#;
    let output = run(&["serve"], Some(request));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let mut answer = String::new();
    output
        .stdout
        .as_slice()
        .read_to_string(&mut answer)
        .expect("utf-8");
    assert_eq!(answer, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
}

/// JSON-RPC echoes ids as sent: `serve` over stdio answers a request with
/// id `-0` with id `-0` (before: `0`), in results and in errors.
#[test]
fn serve_echoes_an_id_of_minus_zero_as_sent() {
    let request = br#"{"jsonrpc":"2.0","id":-0,"method":"ping"}
{"jsonrpc":"2.0","id":-0,"method":"no/such/method"}
{"jsonrpc":"2.0","id":0,"method":"ping"}
"#;
    let output = run(&["serve"], Some(request));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let answer = String::from_utf8(output.stdout).expect("utf-8");
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(lines.len(), 3, "{answer}");
    assert_eq!(lines[0], r#"{"jsonrpc":"2.0","id":-0,"result":{}}"#);
    assert!(
        lines[1].starts_with(r#"{"jsonrpc":"2.0","id":-0,"error":{"code":-32601"#),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains(r#""request_id":-0"#), "{}", lines[1]);
    assert_eq!(lines[2], r#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
}

#[test]
fn serve_http_answers_query_url() {
    let dir = TempDir::new();
    let child = Command::new(BIN)
        .args(["serve", "--http", "127.0.0.1:0"])
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .current_dir(&dir.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve --http");
    let mut child = KillOnDrop(child);
    let mut stderr = BufReader::new(child.0.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr
        .read_line(&mut line)
        .expect("the server announces its address");
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let url = format!("http://{address}/rpc");

    let output = run(
        &[
            "query",
            "--url",
            &url,
            "--allow-insecure-http",
            "--check",
            "time_now",
            "--context",
            CONTEXT,
        ],
        None,
    );
    assert_evidence(&output, &json!(1_710_000_000_000_i64));

    // Plain http:// is refused without the flag, before anything is sent.
    let output = run(&["query", "--url", &url, "--check", "time_now"], None);
    assert_ne!(code(&output), 0);
    assert!(
        stderr_text(&output).contains("allow_insecure_http"),
        "{}",
        stderr_text(&output)
    );

    // A non-loopback bind without authentication is refused at start-up.
    let output = run(&["serve", "--http", "0.0.0.0:0"], None);
    assert_eq!(code(&output), 2, "{}", stderr_text(&output));
    assert!(
        stderr_text(&output).contains("auth"),
        "{}",
        stderr_text(&output)
    );
}

fn stderr_text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn http_timeout_when_the_server_accepts_and_never_answers() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    // Accept and hold the connection open without answering, for a bounded time.
    thread::spawn(move || {
        let mut held = Vec::new();
        held.extend(listener.incoming().take(2).flatten());
        thread::sleep(Duration::from_secs(10));
        drop(held);
    });
    let dir = TempDir::new();
    let config = dir.write(
        "timeout.toml",
        format!(
            "[bundled.http]\nallow_hosts = [\"127.0.0.1:{port}\"]\nallow_insecure_http = true\nallow_private_addresses = true\ntimeout_ms = 300\n"
        ),
    );
    let started = std::time::Instant::now();
    let output = query(
        None,
        Some(&config),
        "http_status",
        Some(json!({"url": format!("http://127.0.0.1:{port}/slow")})),
    );
    let result = assert_error(&output, "http_timeout");
    assert!(
        result["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("300 ms")),
        "{result}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the timeout did not bound the request: {:?}",
        started.elapsed()
    );
}

#[test]
fn file_size_failures_are_evidence_errors() {
    let dir = TempDir::new();
    dir.write("sub/inner.txt", "x");
    for (path, code) in [
        // A directory is not a file.
        ("sub", "not_a_file"),
        // A missing file.
        ("sub/absent.txt", "file_not_found"),
        // A path that climbs out of the root.
        ("../outside.txt", "path_outside_root"),
    ] {
        let output = query(Some(&dir.0), None, "file_size", Some(json!({"path": path})));
        assert_error(&output, code);
    }
    // The same root still answers for a real file.
    let output = query(
        Some(&dir.0),
        None,
        "file_size",
        Some(json!({"path": "sub/inner.txt"})),
    );
    assert_evidence(&output, &json!(1));
}

/// Answers one JSON-RPC body through a fresh core `Server`, every evidence
/// query with `value` (the hash is filled in by the client's verification).
fn rpc_answer(body: &[u8], value: &evidence_wire::evidence::EvidenceValue) -> Vec<u8> {
    use evidence_wire::evidence::EvidenceResult;
    use evidence_wire::server::{Server, ServerConfig, ServerEvent};
    let mut server = Server::new(ServerConfig::default());
    let mut line = body.to_vec();
    line.push(b'\n');
    server.handle_input(&line);
    server.handle_end_of_input();
    while let Some(event) = server.poll_event() {
        if let ServerEvent::EvidenceQuery { ticket, .. } = event {
            server
                .respond(ticket, EvidenceResult::with_value(value.clone()))
                .expect("known ticket");
        }
    }
    let mut out = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        out.extend_from_slice(&bytes);
    }
    while out.last() == Some(&b'\n') {
        out.pop();
    }
    out
}

/// Reads one HTTP/1.1 request (headers, then a Content-Length body) and
/// answers it with `rpc_answer`.
fn serve_one_request(stream: &mut dyn ReadWrite, value: &evidence_wire::evidence::EvidenceValue) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
        .min(1024 * 1024);
    let mut body = vec![0u8; length];
    if stream.read_exact(&mut body).is_err() {
        return;
    }
    let answer = rpc_answer(&body, value);
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        answer.len()
    )
    .into_bytes();
    response.extend_from_slice(&answer);
    let _ = stream.write_all(&response);
    let _ = stream.flush();
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A plain-HTTP JSON-RPC provider on loopback answering every query with
/// `value`, for at most `requests` connections.
fn rpc_server(value: evidence_wire::evidence::EvidenceValue, requests: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            serve_one_request(&mut stream, &value);
        }
    });
    port
}

#[test]
fn allow_raw_false_refuses_bytes_evidence_from_a_configured_provider() {
    use evidence_wire::evidence::EvidenceValue;
    let port = rpc_server(EvidenceValue::Bytes(b"hello".to_vec()), 4);
    let dir = TempDir::new();
    let contract = run(&["contract", "--provider-id", "raw"], None);
    assert_eq!(code(&contract), 0, "{}", stderr(&contract));
    std::fs::write(dir.0.join("raw.json"), &contract.stdout).expect("contract");
    let config_for = |allow_raw: bool| {
        dir.write(
            &format!("raw-{allow_raw}.toml"),
            format!(
                "[[providers]]\nname = \"raw\"\ntype = \"mcp\"\nurl = \"http://127.0.0.1:{port}/rpc\"\nallow_insecure_http = true\ncapabilities_path = \"raw.json\"\nallow_raw = {allow_raw}\n"
            ),
        )
    };
    let ask = |config: &Path| {
        let config = config.display().to_string();
        run(
            &[
                "--config",
                &config,
                "query",
                "--provider",
                "raw",
                "--check",
                "time_now",
                "--context",
                CONTEXT,
            ],
            None,
        )
    };

    // allow_raw = false (the default): refused, exit 1, value withheld.
    let refused = ask(&config_for(false));
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("allow_raw"),
        "{}",
        stderr(&refused)
    );
    let result = stdout_json(&refused);
    assert_eq!(result["error"]["code"], "raw_value_refused", "{result}");
    assert_eq!(result["value"], Value::Null, "{result}");
    // The hash of the withheld bytes is kept (wire-facts: raw `hello`).
    assert_eq!(
        result["evidence_hash"]["value"],
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
        "{result}"
    );

    // allow_raw = true: the same answer is accepted.
    let accepted = ask(&config_for(true));
    assert_eq!(code(&accepted), 0, "{}", stderr(&accepted));
    let result = stdout_json(&accepted);
    assert_eq!(
        result["value"],
        json!({"kind": "bytes", "value": [104, 101, 108, 108, 111]}),
        "{result}"
    );
    assert_eq!(result["error"], Value::Null);
}

#[test]
fn allow_raw_false_lets_json_evidence_through() {
    use evidence_wire::evidence::EvidenceValue;
    let value = EvidenceValue::json(&json!({"ok": true})).expect("json");
    let port = rpc_server(value, 2);
    let dir = TempDir::new();
    let contract = run(&["contract", "--provider-id", "plain"], None);
    std::fs::write(dir.0.join("plain.json"), &contract.stdout).expect("contract");
    let config = dir.write(
        "plain.toml",
        format!(
            "[[providers]]\nname = \"plain\"\ntype = \"mcp\"\nurl = \"http://127.0.0.1:{port}/rpc\"\nallow_insecure_http = true\ncapabilities_path = \"plain.json\"\n"
        ),
    );
    let config = config.display().to_string();
    let output = run(
        &[
            "--config",
            &config,
            "query",
            "--provider",
            "plain",
            "--check",
            "time_now",
            "--context",
            CONTEXT,
        ],
        None,
    );
    assert_evidence(&output, &json!({"ok": true}));
}

/// A loopback HTTPS JSON-RPC provider with a self-signed certificate for
/// `localhost`; returns its port and the certificate as PEM.
fn https_rpc_server(requests: usize) -> (u16, String) {
    use std::sync::Arc;
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let issued =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(issued.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![issued.cert.der().clone()], key)
            .expect("server certificate"),
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    let value = evidence_wire::evidence::EvidenceValue::json(&json!("over tls")).expect("json");
    thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let Ok(tcp) = stream else { continue };
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = tcp.set_write_timeout(Some(Duration::from_secs(5)));
            let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&server)) else {
                continue;
            };
            // A client that refuses the certificate ends the handshake here.
            let mut tls = rustls::StreamOwned::new(connection, tcp);
            serve_one_request(&mut tls, &value);
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    (port, issued.cert.pem())
}

#[test]
fn query_https_url_with_ca_cert() {
    let (port, pem) = https_rpc_server(4);
    let dir = TempDir::new();
    let cert = dir.write("provider-cert.pem", &pem);
    let cert = cert.display().to_string();
    let url = format!("https://localhost:{port}/rpc");

    let trusted = run(
        &[
            "query",
            "--url",
            &url,
            "--ca-cert",
            &cert,
            "--check",
            "time_now",
            "--context",
            CONTEXT,
        ],
        None,
    );
    assert_evidence(&trusted, &json!("over tls"));

    // Without --ca-cert the self-signed certificate is unknown: exit 1, a TLS message.
    let untrusted = run(
        &[
            "query",
            "--url",
            &url,
            "--check",
            "time_now",
            "--context",
            CONTEXT,
        ],
        None,
    );
    assert_eq!(code(&untrusted), 1, "{}", stderr(&untrusted));
    let message = stderr(&untrusted).to_ascii_lowercase();
    assert!(
        message.contains("tls") || message.contains("certificate"),
        "{message}"
    );
    assert!(!message.contains("panicked"), "{message}");

    // A --ca-cert that is not a certificate is a usage error.
    let not_pem = dir.write("not.pem", "hello");
    let not_pem = not_pem.display().to_string();
    let bad = run(
        &[
            "query",
            "--url",
            &url,
            "--ca-cert",
            &not_pem,
            "--check",
            "time_now",
        ],
        None,
    );
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
    assert!(stderr(&bad).contains("--ca-cert"), "{}", stderr(&bad));
}

#[test]
fn configured_https_provider_uses_tls_ca_certs() {
    let (port, pem) = https_rpc_server(2);
    let dir = TempDir::new();
    dir.write("certs/provider.pem", &pem);
    let contract = run(&["contract", "--provider-id", "secure"], None);
    std::fs::write(dir.0.join("secure.json"), &contract.stdout).expect("contract");
    let config = dir.write(
        "secure.toml",
        format!(
            "[[providers]]\nname = \"secure\"\ntype = \"mcp\"\nurl = \"https://localhost:{port}/rpc\"\ncapabilities_path = \"secure.json\"\ntls = {{ ca_certs = [\"certs/provider.pem\"] }}\n"
        ),
    );
    let check = run(&["config", "check", &config.display().to_string()], None);
    assert_eq!(code(&check), 0, "{}", stderr(&check));
    let output = run(
        &[
            "--config",
            &config.display().to_string(),
            "query",
            "--provider",
            "secure",
            "--check",
            "time_now",
            "--context",
            CONTEXT,
        ],
        None,
    );
    assert_evidence(&output, &json!("over tls"));

    // A missing certificate file fails `config check` with exit 2 naming the field.
    let missing = dir.write(
        "missing.toml",
        format!(
            "[[providers]]\nname = \"secure\"\ntype = \"mcp\"\nurl = \"https://localhost:{port}/rpc\"\ncapabilities_path = \"secure.json\"\ntls = {{ ca_certs = [\"certs/absent.pem\"] }}\n"
        ),
    );
    let check = run(&["config", "check", &missing.display().to_string()], None);
    assert_eq!(code(&check), 2, "{}", stderr(&check));
    assert!(
        stderr(&check).contains("providers[0].tls.ca_certs[0]"),
        "{}",
        stderr(&check)
    );
}

/// Bytes and count of the validation log's run files in `dir` (`.latest`
/// aside).
fn run_files(dir: &Path) -> (u64, Vec<PathBuf>) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("log dir")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    files.sort();
    let total = files
        .iter()
        .map(|path| std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
        .sum();
    (total, files)
}

#[test]
fn serve_log_max_bytes_caps_a_flood_of_empty_objects() {
    // Issue 20 item 6: 1.05 MB of `{}` lines made a 154 MB log. 5000 lines
    // (15 KB) make about 1.7 MB of records; the directory stays under the
    // cap plus one record, rotated, with .latest on the newest file.
    const CAP: u64 = 16_384;
    let dir = TempDir::new();
    let logs = dir.0.join("logs");
    let flood = "{}\n".repeat(5000);
    let output = run_in(
        &[
            "serve",
            "--deterministic-log",
            "--log-dir",
            &logs.display().to_string(),
            "--log-max-bytes",
            &CAP.to_string(),
        ],
        Some(flood.as_bytes()),
        Some(&dir.0),
        &[],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        output.stdout.iter().filter(|byte| **byte == b'\n').count(),
        5000,
        "every message was answered"
    );
    let (total, files) = run_files(&logs);
    assert!(
        total <= CAP + 4096,
        "{total} bytes of log for a {CAP}-byte cap: {files:?}"
    );
    assert!(files.len() >= 2, "no rotation: {files:?}");
    assert!(
        !files.iter().any(|path| path.ends_with("run-000001.jsonl")),
        "the oldest file was not deleted: {files:?}"
    );
    let newest = files.last().expect("a run file");
    let latest = std::fs::canonicalize(logs.join(".latest")).expect(".latest resolves");
    assert_eq!(latest, std::fs::canonicalize(newest).expect("newest"));
    // The newest record is the last message's.
    let text = std::fs::read_to_string(newest).expect("newest file");
    let last: Value = serde_json::from_str(text.lines().last().expect("a record")).expect("JSON");
    assert_eq!(
        last["correlationId"],
        "00000000-0000-4000-8000-000000001388"
    );

    // A cap under the minimum is a usage error naming the range.
    let output = run_in(
        &["serve", "--log-max-bytes", "1000"],
        Some(b""),
        Some(&dir.0),
        &[],
    );
    assert_eq!(code(&output), 2);
    assert!(stderr(&output).contains("16384"), "{}", stderr(&output));
}

#[test]
fn serve_loses_no_validation_record_of_an_answered_query_on_sigterm() {
    // Issue 25 target 3: records are batched (one write per batch of input),
    // and each batch's records are written before its answers; on SIGTERM
    // serve drains (issue 27), flushes the log and exits 0. After N answers
    // the run file holds the initialize and notification records and the N
    // call records.
    const QUERIES: u64 = 40;
    let dir = TempDir::new();
    let logs = dir.0.join("logs");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--deterministic-log",
            "--log-dir",
            &logs.display().to_string(),
        ])
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .current_dir(&dir.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn evidence-wire serve");
    let mut input = child.stdin.take().expect("stdin");
    let mut output = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    input
        .write_all(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
"#,
        )
        .expect("write handshake");
    output.read_line(&mut line).expect("initialize answer");
    assert!(line.contains("\"result\""), "{line}");
    for id in 1..=QUERIES {
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"evidence_query","arguments":{{"query":{{"provider_id":"evidence-wire","check_id":"time_now"}},"context":{CONTEXT}}}}}}}"#
        );
        writeln!(input, "{request}").expect("write query");
        line.clear();
        output.read_line(&mut line).expect("an answer");
        assert!(line.contains("evidence_hash"), "{line}");
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exit = child.wait().expect("wait serve");
    drop(input);
    assert_eq!(
        exit.code(),
        Some(0),
        "serve drains on SIGTERM and exits 0: {exit:?}"
    );
    let (_, files) = run_files(&logs);
    let records: usize = files
        .iter()
        .map(|path| {
            std::fs::read_to_string(path)
                .expect("run file")
                .lines()
                .count()
        })
        .sum();
    assert_eq!(
        records as u64,
        QUERIES + 2,
        "one record per message answered or read: {files:?}"
    );
}

/// A `time_now` call (id 1) carrying a trace context in
/// `_meta.traceparent`: trace id `4bf92f35…4736`, parent `00f067aa0ba902b7`.
fn traced_time_now_call() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "evidence_query",
            "_meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
            "arguments": {
                "query": {"provider_id": "evidence-wire", "check_id": "time_now"},
                "context": serde_json::from_str::<Value>(CONTEXT).expect("context"),
            }
        }
    })
}

/// `RUST_LOG=debug evidence-wire serve` on stdio: each call's
/// `evidence_wire::call` span goes to stderr when it closes (with its
/// check, outcome and the caller's trace id from `_meta.traceparent`),
/// refusals are events there too, and stdout holds the protocol answers
/// and nothing else.
#[test]
fn rust_log_sends_spans_to_stderr_and_stdout_stays_the_protocol() {
    let call = traced_time_now_call();
    let unknown = json!({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"});
    let input = format!("{call}\n{unknown}\n");
    let output = run_in(
        &["serve", "--no-log"],
        Some(input.as_bytes()),
        None,
        &[("RUST_LOG", "debug")],
    );
    let stderr = stderr(&output);
    assert_eq!(code(&output), 0, "{stderr}");
    let stdout = String::from_utf8(output.stdout.clone()).expect("utf-8");
    let answers: Vec<Value> = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("stdout line is not JSON ({error}): {line:?}"))
        })
        .collect();
    assert_eq!(answers.len(), 2, "{stdout}");
    assert!(
        answers.iter().all(|answer| answer["jsonrpc"] == "2.0"),
        "{stdout}"
    );
    // Answers go out as they are ready: find each by its id.
    let by_id = |id: i64| {
        answers
            .iter()
            .find(|answer| answer["id"] == id)
            .unwrap_or_else(|| panic!("no answer {id}: {stdout}"))
    };
    assert!(by_id(1)["result"].is_object(), "{stdout}");
    assert_eq!(by_id(2)["error"]["code"], -32601, "{stdout}");
    // The span, closed, with its fields.
    let span = stderr
        .lines()
        .find(|line| line.contains("evidence_wire::call{") && line.contains("close"))
        .unwrap_or_else(|| panic!("no closed call span on stderr: {stderr}"));
    for field in [
        "transport=\"stdio\"",
        "check_id=\"time_now\"",
        "trace_id=4bf92f3577b34da6a3ce929d0e0e4736",
        "parent_id=00f067aa0ba902b7",
        "outcome=\"ok\"",
        "duration_ms=",
    ] {
        assert!(span.contains(field), "{field} missing from {span}");
    }
    assert!(
        stderr.contains("evidence_wire::refusal") && stderr.contains("no/such/method"),
        "{stderr}"
    );
    // Without RUST_LOG (and at the default level) no span is written.
    let quiet = run_in(&["serve", "--no-log"], Some(input.as_bytes()), None, &[]);
    let quiet_stderr = String::from_utf8_lossy(&quiet.stderr);
    assert!(
        !quiet_stderr.contains("evidence_wire::call"),
        "{quiet_stderr}"
    );
    let lines = |bytes: &[u8]| {
        let mut lines: Vec<String> = String::from_utf8_lossy(bytes)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(
        lines(&quiet.stdout),
        lines(&output.stdout),
        "the same answers"
    );
}

/// With the `otlp` feature (not built by default or by CI: run
/// `cargo test -p evidence-wire-cli --features otlp --test it otlp`), a
/// call's span is exported as OTLP/HTTP protobuf to the collector
/// `OTEL_EXPORTER_OTLP_ENDPOINT` names, in the caller's trace (the trace id
/// and the caller's span id of `_meta.traceparent` are in the export), and
/// stderr stays quiet at the default level.
#[cfg(feature = "otlp")]
#[test]
fn otlp_exports_the_call_span_in_the_callers_trace() {
    use std::net::TcpListener;

    let collector = TcpListener::bind("127.0.0.1:0").expect("bind the collector");
    let endpoint = format!("http://{}", collector.local_addr().expect("address"));
    // One request at a time, each answered 200: the bodies sent to /v1/traces.
    let received = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        collector.set_nonblocking(false).expect("blocking");
        for stream in collector.incoming().take(4) {
            let Ok(stream) = stream else { break };
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .expect("timeout");
            let mut reader = BufReader::new(stream);
            let (mut path, mut length) = (String::new(), 0usize);
            reader.read_line(&mut path).expect("request line");
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("header");
                if line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().expect("length");
                    }
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).expect("body");
            reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .expect("answer");
            let done = path.contains("/v1/traces") && !body.is_empty();
            bodies.push((path, body));
            if done {
                break;
            }
        }
        bodies
    });
    let call = traced_time_now_call();
    let output = run_in(
        &["serve", "--no-log"],
        Some(format!("{call}\n").as_bytes()),
        None,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(output.stderr.is_empty(), "{}", stderr(&output));
    let bodies = received.join().expect("collector");
    let (path, body) = bodies
        .iter()
        .find(|(path, _)| path.contains("/v1/traces"))
        .unwrap_or_else(|| panic!("nothing exported to /v1/traces: {bodies:?}"));
    let has = |needle: &[u8]| body.windows(needle.len()).any(|window| window == needle);
    assert!(has(b"evidence_wire::call"), "{path}: no call span");
    let trace_id = [
        0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47,
        0x36,
    ];
    assert!(has(&trace_id), "the span is not in the caller's trace");
    let parent_id = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];
    assert!(
        has(&parent_id),
        "the span's parent is not the caller's span"
    );
}

/// `evidence-wire serve` has the ready command line's `--call-timeout-ms`
/// (one ServeArgs definition), documented with its configuration key;
/// zero is refused as a usage error saying why.
#[test]
fn serve_takes_call_timeout_ms_and_refuses_zero() {
    let help = run(&["serve", "--help"], None);
    assert_eq!(code(&help), 0, "{}", stderr(&help));
    let text = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(text.contains("--call-timeout-ms <MS>"), "{text}");
    assert!(text.contains("[server] call_timeout_ms"), "{text}");
    let zero = run(&["serve", "--call-timeout-ms", "0"], Some(b""));
    assert_eq!(code(&zero), 2, "{}", stderr(&zero));
    assert!(
        stderr(&zero).contains("no time at all"),
        "{}",
        stderr(&zero)
    );
}
