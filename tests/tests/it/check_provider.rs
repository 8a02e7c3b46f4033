//! `evidence-wire check-provider` (issue 26) against real providers:
//!
//! - the bundled provider, in an environment where its contract's examples
//!   can come true (a root holding `report.json`, `DEPLOY_ENV` allowed, the
//!   two HTTP examples pointed at a loopback server): every line passes;
//! - the bundled provider signing with a key, checked with `--key`: the
//!   signature lines pass with its key and fail with another;
//! - the bundled provider over HTTP (`--url`): no line fails;
//! - the Decision Gate-style Python peer: no line fails, and the warnings
//!   are exactly what is true of it (no hash on `no_hash`, no
//!   newline-delimited JSON, no MCP handshake);
//! - the misbehaving test provider, one run per misbehaviour: exactly the
//!   lines the misbehaviour breaks fail (or warn), each with the right
//!   reason;
//! - launchers and leftovers (issue 38): a launcher that does not `exec`,
//!   a grandchild sleeping on the provider's pipes, a provider that exits
//!   under such a grandchild, a process outside the provider's process
//!   group holding its pipes, and Ctrl-C in the middle: each run ends in
//!   bounded time, the report names what held on, and no process of the
//!   provider's group survives.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![cfg(unix)]

use crate::interop_support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use interop_support::{Output, cli_binary, peer_script, repo_root, run, system_python};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const MISBEHAVE: &str = env!("CARGO_BIN_EXE_misbehave");

/// The longest one check-provider run may take before it is killed.
const RUN_DEADLINE: Duration = Duration::from_secs(30);

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-check-provider-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).expect("write fixture");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn data(name: &str) -> String {
    repo_root()
        .join("tests/data/check-provider")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Runs `check-provider ARGS --json` and returns the run and its report.
fn check_provider(args: &[&str], env: &[(&str, &str)], dir: Option<&Path>) -> (Output, Value) {
    let mut command = Command::new(cli_binary());
    command
        .arg("check-provider")
        .arg("--json")
        .args(args)
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .env_remove("EVIDENCE_WIRE_BEARER_TOKEN");
    for (key, value) in env {
        command.env(key, value);
    }
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let output = run(&mut command, b"", RUN_DEADLINE);
    let report: Value = serde_json::from_str(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "check-provider {args:?} printed no JSON report ({error}; status {:?}):\n{}\n{}",
            output.status, output.stdout, output.stderr
        )
    });
    (output, report)
}

/// `(check, status, reason)` of every line.
fn lines(report: &Value) -> Vec<(String, String, String)> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|line| {
            (
                line["check"].as_str().unwrap_or_default().to_owned(),
                line["status"].as_str().unwrap_or_default().to_owned(),
                line["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The checks of the lines with `status`.
fn with_status(report: &Value, status: &str) -> BTreeSet<String> {
    lines(report)
        .into_iter()
        .filter(|(_, got, _)| got == status)
        .map(|(check, _, _)| check)
        .collect()
}

fn table(report: &Value) -> String {
    lines(report)
        .iter()
        .map(|(check, status, reason)| format!("{status:<5} {check:<34} {reason}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The bundled provider's contract, as `evidence-wire contract` prints it.
fn bundled_contract() -> Value {
    let output = run(
        Command::new(cli_binary())
            .arg("contract")
            .env_remove("EVIDENCE_WIRE_CONFIG"),
        b"",
        RUN_DEADLINE,
    );
    assert!(output.success(), "contract: {}", output.stderr);
    serde_json::from_str(&output.stdout).expect("contract JSON")
}

/// A loopback HTTP server answering every GET with `200 ok` (at most
/// `connections` connections, each on a thread): its port.
fn loopback_http(connections: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        for stream in listener.incoming().take(connections) {
            let Ok(mut stream) = stream else { continue };
            thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(&stream);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|read| read > 2) {
                    line.clear();
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            });
        }
    });
    port
}

#[test]
fn the_bundled_provider_passes_every_check_where_its_examples_can_come_true() {
    let dir = TempDir::new();
    // json_path's example reads `$.status` of report.json ("approved"),
    // file_size's says report.json has 1024 bytes: one file does both.
    let mut report = br#"{"status":"approved","padding":""#.to_vec();
    report.resize(1024 - 2, b'x');
    report.extend_from_slice(b"\"}");
    dir.write("report.json", &report);
    // The HTTP examples, pointed at a loopback server (the contract's own
    // hosts are on the internet, which tests do not reach).
    let port = loopback_http(256);
    let mut contract = bundled_contract();
    let ok_hash = format!("{:x}", Sha256::digest(b"ok"));
    for check in contract["checks"].as_array_mut().expect("checks") {
        match check["check_id"].as_str() {
            Some("http_status") => {
                check["examples"][0]["params"]["url"] =
                    json!(format!("http://127.0.0.1:{port}/healthz"));
                check["examples"][0]["result"] = json!(200);
            }
            Some("http_body_hash") => {
                check["examples"][0]["params"]["url"] =
                    json!(format!("http://127.0.0.1:{port}/manifest"));
                check["examples"][0]["result"] = json!({"algorithm": "sha256", "value": ok_hash});
            }
            _ => {}
        }
    }
    let contract_path = dir.write("contract.json", contract.to_string().as_bytes());
    let config = dir.write(
        "evidence-wire.toml",
        format!(
            "[bundled]\nroot = \"{}\"\n\n[bundled.env]\nallow = [\"DEPLOY_ENV\"]\n\n[bundled.http]\nallow_hosts = [\"127.0.0.1:{port}\"]\nallow_insecure_http = true\nallow_private_addresses = true\n",
            dir.0.display()
        )
        .as_bytes(),
    );
    let started = Instant::now();
    let (output, report) = check_provider(
        &[
            "--config",
            &config.to_string_lossy(),
            "--contract",
            &contract_path.to_string_lossy(),
        ],
        &[("DEPLOY_ENV", "production")],
        Some(&dir.0),
    );
    let took = started.elapsed();
    let all = table(&report);
    assert_eq!(output.code(), Some(0), "{all}\n{}", output.stderr);
    assert_eq!(with_status(&report, "fail"), BTreeSet::new(), "{all}");
    assert_eq!(with_status(&report, "warn"), BTreeSet::new(), "{all}");
    // Every part of the battery ran.
    let checks: BTreeSet<String> = lines(&report)
        .into_iter()
        .map(|(check, _, _)| check)
        .collect();
    for expected in [
        "transport.first_message",
        "transport.tools_list",
        "transport.ndjson",
        "transport.mcp_handshake",
        "transport.stdout",
        "contract.source",
        "contract.valid",
        "contract.rules",
        "check.time_now.example[0]",
        "check.env_get.example[0]",
        "check.json_path.result_schema",
        "check.file_size.hash",
        "check.http_body_hash.example[0]",
        "check.time_after.params",
        "check.http_status.latency",
        "unknown_check",
        "robustness.pipelined",
        "robustness.oversized_frame",
        "robustness.garbage_line",
        "robustness.truncated_frame",
        "robustness.stderr",
    ] {
        assert!(checks.contains(expected), "no {expected} line:\n{all}");
    }
    assert_eq!(report["passed"], true);
    // Fast: the whole battery in a few seconds of a debug build.
    assert!(took < Duration::from_secs(10), "the battery took {took:?}");
}

/// The bundled provider signing with the worked-example key (seed 32 × 0x07).
fn signing_command(dir: &TempDir) -> Vec<String> {
    let seed = dir.write("signing.key", &[7u8; 32]);
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&seed, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    vec![
        cli_binary(),
        "serve".to_owned(),
        "--no-log".to_owned(),
        "--signing-key".to_owned(),
        seed.to_string_lossy().into_owned(),
        "--key-id".to_owned(),
        "k1".to_owned(),
    ]
}

/// The bundled contract with its three time checks only (every other
/// check answers an error without a configured environment).
fn time_contract(dir: &TempDir) -> PathBuf {
    let mut contract = bundled_contract();
    contract["checks"]
        .as_array_mut()
        .expect("checks")
        .retain(|check| {
            check["check_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("time_"))
        });
    dir.write("time.contract.json", contract.to_string().as_bytes())
}

#[test]
fn signatures_verify_with_the_providers_key_and_fail_with_another() {
    let dir = TempDir::new();
    let contract = time_contract(&dir);
    let command = signing_command(&dir);
    let mut args = vec![
        "--contract".to_owned(),
        contract.to_string_lossy().into_owned(),
        "--samples".to_owned(),
        "3".to_owned(),
        "--key".to_owned(),
        "k1=ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c".to_owned(),
        "--".to_owned(),
    ];
    args.extend(command.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (output, report) = check_provider(&refs, &[], None);
    let all = table(&report);
    assert_eq!(output.code(), Some(0), "{all}");
    let signature_lines: Vec<_> = lines(&report)
        .into_iter()
        .filter(|(check, _, _)| check.ends_with(".signature"))
        .collect();
    assert_eq!(signature_lines.len(), 3, "{all}");
    for (check, status, reason) in &signature_lines {
        assert_eq!(status, "pass", "{check}: {reason}");
        assert!(reason.contains("by key k1"), "{check}: {reason}");
    }

    // Another key (the worked example's public key with one bit flipped).
    let wrong = "k1=ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22d";
    let position = args
        .iter()
        .position(|arg| arg.starts_with("k1="))
        .expect("--key");
    args[position] = wrong.to_owned();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (output, report) = check_provider(&refs, &[], None);
    let all = table(&report);
    assert_eq!(output.code(), Some(1), "{all}");
    let failing = with_status(&report, "fail");
    assert_eq!(
        failing,
        [
            "check.time_after.signature",
            "check.time_before.signature",
            "check.time_now.signature"
        ]
        .map(str::to_owned)
        .into_iter()
        .collect(),
        "{all}"
    );
    assert!(
        lines(&report)
            .iter()
            .any(|(check, _, reason)| check.ends_with(".signature")
                && reason.contains("signature_verification_failed")),
        "{all}"
    );
}

#[test]
fn the_bundled_provider_over_http_fails_nothing() {
    let dir = TempDir::new();
    let contract = time_contract(&dir);
    let mut server = Command::new(cli_binary())
        .args(["serve", "--no-log", "--http", "127.0.0.1:0"])
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve --http");
    let stderr = server.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut first = String::new();
        let _ = reader.read_line(&mut first);
        let _ = tx.send(first);
        // Keep draining, so the server never blocks on its stderr.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let announced = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let address = announced
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned);
    let result = address.map(|address| {
        let url = format!("http://{address}/rpc");
        check_provider(
            &[
                "--url",
                &url,
                "--allow-insecure-http",
                "--samples",
                "3",
                "--contract",
                &contract.to_string_lossy(),
            ],
            &[],
            None,
        )
    });
    let _ = server.kill();
    let _ = server.wait();
    let (output, report) = result.unwrap_or_else(|| panic!("no address announced: {announced:?}"));
    let all = table(&report);
    assert_eq!(output.code(), Some(0), "{all}\n{}", output.stderr);
    assert_eq!(with_status(&report, "fail"), BTreeSet::new(), "{all}");
    // Over HTTP: a body over the limit is refused with 413, and the next query is answered.
    let oversized = lines(&report)
        .into_iter()
        .find(|(check, _, _)| check == "robustness.oversized_frame")
        .expect("oversized line");
    assert!(oversized.2.contains("HTTP 413"), "{all}");
    // Stdio-only lines are not run.
    let checks: BTreeSet<String> = lines(&report)
        .into_iter()
        .map(|(check, _, _)| check)
        .collect();
    assert!(
        !checks.contains("transport.ndjson") && !checks.contains("robustness.stderr"),
        "{all}"
    );
}

#[test]
fn the_decision_gate_style_python_peer_passes_with_the_warnings_true_of_it() {
    let python = system_python();
    let script = peer_script("dg_provider.py");
    let contract = data("dg_provider.contract.json");
    let (output, report) = check_provider(
        &[
            "--contract",
            &contract,
            "--samples",
            "5",
            "--",
            &python,
            &script,
        ],
        &[],
        None,
    );
    let all = table(&report);
    assert_eq!(output.code(), Some(0), "{all}\n{}", output.stderr);
    assert_eq!(with_status(&report, "fail"), BTreeSet::new(), "{all}");
    // No hash (on its no_hash check), no newline-delimited JSON, no handshake.
    assert_eq!(
        with_status(&report, "warn"),
        [
            "check.no_hash.hash",
            "transport.mcp_handshake",
            "transport.ndjson"
        ]
        .map(str::to_owned)
        .into_iter()
        .collect(),
        "{all}"
    );
    let reason = |check: &str| {
        lines(&report)
            .into_iter()
            .find(|(name, _, _)| name == check)
            .map(|(_, _, reason)| reason)
            .unwrap_or_default()
    };
    assert!(
        reason("transport.mcp_handshake").contains("-32601"),
        "{all}"
    );
    assert!(
        reason("check.no_hash.hash").contains("no evidence_hash"),
        "{all}"
    );
    // Its hashes are RFC 8785; on its values that is Decision Gate's too.
    assert!(
        with_status(&report, "pass").contains("check.numbers.hash"),
        "{all}"
    );
}

/// One misbehaviour: the mode's arguments, the lines that must fail, the
/// lines that must warn, and a reason substring for the first failing (or
/// warning) line.
struct Row {
    args: &'static [&'static str],
    fail: &'static [&'static str],
    warn: &'static [&'static str],
    reason: (&'static str, &'static str),
}

const FIRST: &[&str] = &["transport.first_message", "battery"];

const ROWS: &[Row] = &[
    Row {
        args: &["good"],
        fail: &[],
        warn: &[],
        reason: ("contract.source", "served by the provider"),
    },
    Row {
        args: &["params-rpc-error"],
        fail: &["check.echo.params"],
        warn: &[],
        reason: ("check.echo.params", "answered JSON-RPC error -32602"),
    },
    Row {
        args: &["params-accepted"],
        fail: &["check.echo.params"],
        warn: &[],
        reason: (
            "check.echo.params",
            "although the params violate params_schema",
        ),
    },
    Row {
        args: &["unknown-check-ok"],
        fail: &["unknown_check"],
        warn: &[],
        reason: ("unknown_check", "an unknown check must be an error"),
    },
    Row {
        args: &["nondeterministic"],
        fail: &[
            "check.echo.deterministic",
            "check.echo.example[0]",
            "check.echo.result_schema",
            "check.keys.deterministic",
            "robustness.pipelined",
        ],
        warn: &[],
        reason: ("check.echo.deterministic", "the same query twice gave"),
    },
    Row {
        args: &["wrong-value"],
        fail: &[
            "check.echo.example[0]",
            "check.echo.result_schema",
            "check.keys.example[0]",
            "check.keys.result_schema",
        ],
        warn: &[],
        reason: (
            "check.echo.example[0]",
            "answered \"wrong\" where the example says",
        ),
    },
    Row {
        args: &["rfc8785-hash"],
        fail: &[],
        warn: &["check.keys.hash"],
        reason: (
            "check.keys.hash",
            "matches the RFC 8785 canonical JSON of the value but not Decision Gate's",
        ),
    },
    Row {
        args: &["bad-hash"],
        fail: &["check.echo.hash", "check.keys.hash"],
        warn: &[],
        reason: (
            "check.echo.hash",
            "under neither Decision Gate's canonicalization nor RFC 8785",
        ),
    },
    Row {
        args: &["no-hash"],
        fail: &[],
        warn: &["check.echo.hash", "check.keys.hash"],
        reason: ("check.echo.hash", "no evidence_hash"),
    },
    Row {
        args: &["dup-answer"],
        fail: &["robustness.pipelined"],
        warn: &[],
        reason: ("robustness.pipelined", "more than once"),
    },
    Row {
        args: &["text-content"],
        fail: &["transport.first_message"],
        warn: &[],
        reason: ("transport.first_message", "content[0] of type \"text\""),
    },
    Row {
        args: &["no-tools-list"],
        fail: &["transport.tools_list"],
        warn: &["transport.mcp_handshake"],
        reason: ("transport.tools_list", "Method not found: tools/list"),
    },
    Row {
        args: &["fragile"],
        fail: &[
            "robustness.garbage_line",
            "robustness.oversized_frame",
            "robustness.truncated_frame",
        ],
        warn: &[],
        reason: (
            "robustness.oversized_frame",
            "the provider closed its output",
        ),
    },
    Row {
        args: &["banner"],
        fail: &["transport.stdout"],
        warn: &[],
        reason: ("transport.stdout", "not a protocol message"),
    },
    Row {
        args: &["stderr-flood", "--bytes", "200000"],
        fail: &["robustness.stderr"],
        warn: &[],
        reason: ("robustness.stderr", "a full pipe"),
    },
    Row {
        args: &["refuse-initialize"],
        fail: &[],
        warn: &["transport.mcp_handshake"],
        reason: (
            "transport.mcp_handshake",
            "refused initialize with JSON-RPC error -32601",
        ),
    },
    Row {
        // No contract anywhere: the per-check battery runs on the check
        // ids of tools/list alone, and contract.source says so.
        args: &["unserved-contract"],
        fail: &[],
        warn: &["contract.source"],
        reason: (
            "check.keys.answer",
            "known from tools/list only; asked without params, it answered the value",
        ),
    },
    Row {
        args: &["crash-request"],
        fail: FIRST,
        warn: &[],
        reason: ("transport.first_message", "the provider closed its output"),
    },
    Row {
        args: &["crash-half"],
        fail: FIRST,
        warn: &[],
        reason: ("transport.first_message", "closed its output mid-message"),
    },
    Row {
        args: &["hang"],
        fail: FIRST,
        warn: &[],
        reason: ("transport.first_message", "no answer within 500 ms"),
    },
    Row {
        args: &["wrong-id"],
        fail: FIRST,
        warn: &[],
        reason: (
            "transport.first_message",
            "id 1000001, which was never sent",
        ),
    },
    Row {
        args: &["garbage"],
        fail: FIRST,
        warn: &[],
        reason: ("transport.first_message", "not a protocol message"),
    },
    Row {
        args: &["desync"],
        fail: FIRST,
        warn: &[],
        reason: ("transport.first_message", "desynchronized"),
    },
    Row {
        args: &["big-answer"],
        fail: FIRST,
        warn: &[],
        reason: ("transport.first_message", "over the limit of 1048576"),
    },
    Row {
        args: &["deep-answer"],
        fail: FIRST,
        warn: &[],
        reason: ("transport.first_message", "nested deeper than 128"),
    },
];

fn run_row(row: &Row) -> Result<(), String> {
    let contract = data("misbehave.contract.json");
    let mut args = vec!["--timeout-ms", "500", "--samples", "2", "--", MISBEHAVE];
    args.extend_from_slice(row.args);
    args.extend_from_slice(&["--contract", &contract]);
    let (output, report) = check_provider(&args, &[], None);
    let all = table(&report);
    let context = |problem: String| format!("misbehave {:?}: {problem}\n{all}", row.args);
    let expected =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| (*n).to_owned()).collect() };
    if with_status(&report, "fail") != expected(row.fail) {
        return Err(context(format!("failing lines are not {:?}", row.fail)));
    }
    if with_status(&report, "warn") != expected(row.warn) {
        return Err(context(format!("warning lines are not {:?}", row.warn)));
    }
    let code = if row.fail.is_empty() { 0 } else { 1 };
    if output.code() != Some(code) {
        return Err(context(format!(
            "exit {:?}, expected {code}",
            output.code()
        )));
    }
    let (check, needle) = row.reason;
    let found = lines(&report)
        .into_iter()
        .any(|(name, _, reason)| name == check && reason.contains(needle));
    if !found {
        return Err(context(format!("no {check} line says {needle:?}")));
    }
    Ok(())
}

/// Runs `rows` four at a time (most of a run is waiting) and reports
/// every row that went wrong.
fn run_rows(rows: &[&Row]) {
    let failures: Vec<String> = thread::scope(|scope| {
        let mut failures = Vec::new();
        for group in rows.chunks(4) {
            let handles: Vec<_> = group
                .iter()
                .map(|row| scope.spawn(move || run_row(row)))
                .collect();
            for handle in handles {
                match handle.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(problem)) => failures.push(problem),
                    Err(_) => failures.push("a row panicked".to_owned()),
                }
            }
        }
        failures
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn each_misbehaviour_fails_the_lines_it_breaks_with_the_right_reason() {
    let rows: Vec<&Row> = ROWS.iter().filter(|row| row.fail != FIRST).collect();
    run_rows(&rows);
}

#[test]
fn a_provider_that_cannot_answer_decision_gates_first_message_fails_it_with_the_cause() {
    let rows: Vec<&Row> = ROWS.iter().filter(|row| row.fail == FIRST).collect();
    assert_eq!(rows.len(), 8);
    run_rows(&rows);
}

/// A contract that breaks Decision Gate's rules (a reserved provider id, a
/// comparator the check's result type cannot use), checked against a
/// provider that honours the contract it serves: the contract lines fail,
/// each naming the field and the rule, and nothing else does.
#[test]
fn a_contract_that_breaks_decision_gates_rules_fails_naming_the_field_and_the_rule() {
    let broken = data("misbehave-broken-rules.contract.json");
    let served = data("misbehave.contract.json");
    let (output, report) = check_provider(
        &[
            "--timeout-ms",
            "1000",
            "--samples",
            "2",
            "--contract",
            &broken,
            // The provider enforces its own (valid) contract, id `misbehave`.
            "--provider-id",
            "misbehave",
            "--",
            MISBEHAVE,
            "good",
            "--contract",
            &served,
        ],
        &[],
        None,
    );
    let all = table(&report);
    assert_eq!(output.code(), Some(1), "{all}\n{}", output.stderr);
    assert_eq!(
        with_status(&report, "fail"),
        ["contract.rules", "contract.valid"]
            .map(str::to_owned)
            .into_iter()
            .collect(),
        "{all}"
    );
    let rules: Vec<String> = lines(&report)
        .into_iter()
        .filter(|(check, status, _)| check == "contract.rules" && status == "fail")
        .map(|(_, _, reason)| reason)
        .collect();
    assert_eq!(rules.len(), 2, "{all}");
    assert!(
        rules
            .iter()
            .any(|reason| reason.starts_with("provider_id: reserved_provider_id: `time`")),
        "{all}"
    );
    assert!(
        rules.iter().any(|reason| reason
            .starts_with("checks[0].allowed_comparators[0]: comparator_for_type: `greater_than`")),
        "{all}"
    );
    // Its evidence names the rule for CI.
    let evidence: Vec<&Value> = report["checks"]
        .as_array()
        .map(|checks| {
            checks
                .iter()
                .filter(|line| line["check"] == "contract.rules")
                .map(|line| &line["evidence"]["rule"])
                .collect()
        })
        .unwrap_or_default();
    assert!(evidence.contains(&&json!("comparator_for_type")), "{all}");
    assert!(evidence.contains(&&json!("reserved_provider_id")), "{all}");
}

/// The table mode's text output: a header, one line per check, a summary;
/// and `fail` lines make exit 1 with a one-line note on stderr.
#[test]
fn the_table_names_every_line_and_a_failure_exits_1() {
    let contract = data("misbehave.contract.json");
    let mut command = Command::new(cli_binary());
    command
        .args([
            "check-provider",
            "--samples",
            "2",
            "--timeout-ms",
            "1000",
            "--",
            MISBEHAVE,
            "bad-hash",
            "--contract",
        ])
        .arg(&contract)
        .env_remove("EVIDENCE_WIRE_CONFIG");
    let output = run(&mut command, b"", RUN_DEADLINE);
    assert_eq!(
        output.code(),
        Some(1),
        "{}\n{}",
        output.stdout,
        output.stderr
    );
    let text = &output.stdout;
    let mut rows = text.lines();
    assert!(
        rows.next()
            .is_some_and(|line| line.starts_with("check-provider: ")),
        "{text}"
    );
    assert!(
        rows.next().is_some_and(|line| line.starts_with("STATUS")
            && line.contains("CHECK")
            && line.contains("REASON")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|line| line.starts_with("fail   check.echo.hash ")),
        "{text}"
    );
    assert!(
        text.lines()
            .last()
            .is_some_and(|line| line.starts_with("summary: ") && line.contains(" fail in ")),
        "{text}"
    );
    assert!(
        output.stderr.contains("check-provider:"),
        "{}",
        output.stderr
    );
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
}

/// A file the processes of a test append their pids to (`misbehave
/// --pid-file`, `--leave-behind`, or `echo $!` in a launcher). Whatever of
/// them still runs when it is dropped is killed: cleanup after a failed
/// assertion, never what a test asserts.
struct PidFile(PathBuf);

impl PidFile {
    fn new(dir: &TempDir, name: &str) -> PidFile {
        PidFile(dir.0.join(name))
    }

    fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }

    fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(&self.0)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    }

    /// The pids that still run, each with its command line.
    fn running(&self) -> Vec<String> {
        self.pids()
            .into_iter()
            .filter(|pid| running(*pid))
            .map(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                format!(
                    "{pid} ({})",
                    String::from_utf8_lossy(&cmdline).replace('\0', " ")
                )
            })
            .collect()
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        for pid in self.pids() {
            if running(pid) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// True while `pid` runs. A zombie (dead, not yet reaped: in a container
/// whose init does not reap orphans it stays one) does not count.
fn running(pid: u32) -> bool {
    if Path::new("/proc/self/stat").exists() {
        return std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        });
    }
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// How long a run against a launcher may take: `check_provider` kills it
/// at `RUN_DEADLINE` (and then finds no report); a run that ends its
/// sessions cleanly takes a few seconds.
const LAUNCHER_RUN_BOUND: Duration = Duration::from_secs(20);

/// `check-provider --json --timeout-ms 500 --samples 2 -- sh -c SCRIPT
/// misbehave CONTRACT PIDS`, with its time; the script finds the provider
/// as `$0`, its contract as `$1` and the pid file as `$2`.
fn check_launcher(script: &str, pids: &PidFile) -> (Output, Value, Duration) {
    let contract = data("misbehave.contract.json");
    let path = pids.path();
    let started = Instant::now();
    let (output, report) = check_provider(
        &[
            "--timeout-ms",
            "500",
            "--samples",
            "2",
            "--",
            "sh",
            "-c",
            script,
            MISBEHAVE,
            &contract,
            &path,
        ],
        &[],
        None,
    );
    let took = started.elapsed();
    assert!(
        output.status.is_some() && took < LAUNCHER_RUN_BOUND,
        "check-provider took {took:?} (bound {LAUNCHER_RUN_BOUND:?}):\n{}\n{}",
        table(&report),
        output.stderr
    );
    (output, report, took)
}

fn reason_of(report: &Value, check: &str) -> String {
    lines(report)
        .into_iter()
        .filter(|(name, _, _)| name == check)
        .map(|(_, _, reason)| reason)
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Issue 38: a launcher that does not `exec` (`sh -c 'provider; true'`,
/// npm-style scripts) is the process check-provider starts; the provider
/// is its child. Killing only the launcher left the provider holding the
/// pipes, and the stderr probe read them to an end that never came. Each
/// session now ends the whole process group: the battery finishes, passes
/// as the provider does, and no provider process survives it.
#[test]
fn a_launcher_that_does_not_exec_is_ended_with_its_provider() {
    let dir = TempDir::new();
    let pids = PidFile::new(&dir, "providers.pids");
    let (output, report, took) =
        check_launcher(r#""$0" good --contract "$1" --pid-file "$2"; true"#, &pids);
    let all = table(&report);
    assert_eq!(output.code(), Some(0), "{all}\n{}", output.stderr);
    assert_eq!(with_status(&report, "fail"), BTreeSet::new(), "{all}");
    assert_eq!(with_status(&report, "warn"), BTreeSet::new(), "{all}");
    assert!(
        reason_of(&report, "transport.shutdown").contains("SIGTERM"),
        "{all}"
    );
    // One provider per stdio session.
    assert!(pids.pids().len() >= 8, "{:?}\n{all}", pids.pids());
    assert_eq!(pids.running(), Vec::<String>::new(), "survivors ({took:?})");
}

/// Issue 38: a launcher that leaves a grandchild sleeping on the
/// provider's stdout and stderr (`sh -c 'sleep 1000 & exec provider'`):
/// the grandchild is in the provider's process group and ends with it, so
/// no pipe stays open and nothing survives.
#[test]
fn a_grandchild_on_the_providers_pipes_is_ended_with_its_process_group() {
    let dir = TempDir::new();
    let pids = PidFile::new(&dir, "sleepers.pids");
    let (output, report, took) = check_launcher(
        r#"sleep 1000 & echo $! >> "$2"; exec "$0" good --contract "$1""#,
        &pids,
    );
    let all = table(&report);
    assert_eq!(output.code(), Some(0), "{all}\n{}", output.stderr);
    assert_eq!(with_status(&report, "fail"), BTreeSet::new(), "{all}");
    assert_eq!(with_status(&report, "warn"), BTreeSet::new(), "{all}");
    assert!(pids.pids().len() >= 8, "{:?}\n{all}", pids.pids());
    assert_eq!(pids.running(), Vec::<String>::new(), "survivors ({took:?})");
}

/// Issue 38: the provider exits (on the first query) while the
/// grandchild its launcher left keeps its stdout open: no end of stream
/// comes, the query waits its deadline, and the report says why (the
/// provider exited, its stdout is still open, a process it started holds
/// it) instead of only "no answer"; `transport.shutdown` says that
/// processes outlived it. None survives the run.
#[test]
fn a_provider_that_exits_under_a_grandchild_holding_its_stdout_is_named() {
    let dir = TempDir::new();
    let pids = PidFile::new(&dir, "sleepers.pids");
    let (output, report, took) = check_launcher(
        r#"sleep 1000 & echo $! >> "$2"; exec "$0" crash-request --contract "$1""#,
        &pids,
    );
    let all = table(&report);
    assert_eq!(output.code(), Some(1), "{all}\n{}", output.stderr);
    assert_eq!(
        with_status(&report, "fail"),
        FIRST.iter().map(|name| (*name).to_owned()).collect(),
        "{all}"
    );
    let first = reason_of(&report, "transport.first_message");
    assert!(first.contains("no answer within 500 ms"), "{all}");
    assert!(
        first.contains("exited (exit status: 3)")
            && first.contains("its stdout is still open")
            && first.contains("a launcher that does not exec"),
        "{all}"
    );
    assert_eq!(
        with_status(&report, "warn"),
        ["transport.shutdown".to_owned()].into_iter().collect(),
        "{all}"
    );
    assert!(
        reason_of(&report, "transport.shutdown").contains("kept running"),
        "{all}"
    );
    assert_eq!(pids.pids().len(), 2, "{:?}\n{all}", pids.pids());
    assert_eq!(pids.running(), Vec::<String>::new(), "survivors ({took:?})");
}

/// Issue 38: a process outside the provider's process group (started in
/// a group of its own, as `setsid` or a daemon does) holds its stdout and
/// stderr: check-provider cannot end it, so no read of those pipes may
/// wait for their end. The stderr probe reads what its pipe held for at
/// most 2 s after the provider was stopped, and the report names the
/// pipes that stayed open, the session and the deadline.
#[test]
fn pipes_held_by_a_process_outside_the_group_are_named_after_their_deadline() {
    let dir = TempDir::new();
    let holders = PidFile::new(&dir, "holders.pids");
    let (output, report, _took) = check_launcher(
        r#"exec "$0" good --contract "$1" --leave-behind "$2""#,
        &holders,
    );
    let all = table(&report);
    assert_eq!(output.code(), Some(0), "{all}\n{}", output.stderr);
    assert_eq!(with_status(&report, "fail"), BTreeSet::new(), "{all}");
    assert_eq!(
        with_status(&report, "warn"),
        ["transport.shutdown".to_owned()].into_iter().collect(),
        "{all}"
    );
    let shutdown = reason_of(&report, "transport.shutdown");
    assert!(
        shutdown.contains("stayed open 2 s after")
            && shutdown.contains("outside its process group"),
        "{all}"
    );
    let stderr = reason_of(&report, "robustness.stderr");
    assert!(
        stderr.contains("answered 16 queries")
            && stderr.contains("its stderr did not close within 2 s"),
        "{all}"
    );
    // The holders are this test's to end (the PidFile does, on drop).
    assert!(holders.pids().len() >= 8, "{:?}\n{all}", holders.pids());
}

/// Issue 38: SIGINT in the middle of a run (the provider hangs, so the
/// main session waits its 60 s deadline) ends every provider process
/// group still running and exits 130: the provider no longer shares the
/// terminal's process group, so Ctrl-C would not reach it otherwise.
#[test]
fn an_interrupted_run_ends_the_providers_processes_and_exits_130() {
    let dir = TempDir::new();
    let pids = PidFile::new(&dir, "interrupted.pids");
    let contract = data("misbehave.contract.json");
    let mut child = Command::new(cli_binary())
        .args(["check-provider", "--timeout-ms", "60000", "--", "sh", "-c"])
        .arg(r#"sleep 1000 & echo $! >> "$2"; "$0" hang --contract "$1" --pid-file "$2"; true"#)
        .arg(MISBEHAVE)
        .arg(&contract)
        .arg(pids.path())
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start check-provider");
    // The served-contract session, then the main one, hanging: two
    // launchers, each with a sleeper and a provider.
    let started = Instant::now();
    while pids.pids().len() < 4 && started.elapsed() < RUN_DEADLINE {
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(200));
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > RUN_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    assert_eq!(
        status.and_then(|status| status.code()),
        Some(130),
        "{status:?} after {:?}: {stderr}",
        started.elapsed()
    );
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_eq!(pids.pids().len(), 4, "{:?}", pids.pids());
    assert_eq!(pids.running(), Vec::<String>::new(), "survivors");
}
