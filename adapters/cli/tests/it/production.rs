//! Issue 27, against the real binary: `evidence-wire serve` in production.
//!
//! - Graceful drain on SIGTERM (`serve --http` and `serve` on stdio): slow
//!   queries in flight (an `http_status` check against a loopback server
//!   that answers after a delay) all complete; meanwhile `/readyz` is `503`
//!   and a new call is `503 OVERLOADED` with `Retry-After`; the process
//!   exits 0. At the drain deadline the queries still running are answered
//!   with the retryable error instead.
//! - `GET /metrics` off by default, behind the bearer token when enabled.
//! - No loopback trust behind a proxy: without a bearer token, a request
//!   carrying `X-Forwarded-For` or `Forwarded` is refused `403`, and
//!   `--behind-proxy` refuses to start.
//!
//! - HTTPS (issue 40): `serve --http --tls-cert --tls-key` answers
//!   `query --url https://… --ca-cert` with verified evidence; a renewed
//!   certificate is served after SIGHUP without a restart (and one that
//!   cannot be used keeps the working one); TLS without HTTP is refused.
//!
//! Bounded: every wait has a timeout, everything runs on loopback.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TOKEN: &str = "test-token-0123456789";

impl KillOnDrop {
    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.0.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits at most `limit` for the child to exit.
    fn wait_for_exit(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "the server did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A loopback HTTP server that answers `200 OK` after `delay`, one thread
/// per connection; counts the requests it has received.
fn slow_server(delay: Duration) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let received = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let counter = Arc::clone(&counter);
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                    if line == "\r\n" {
                        break;
                    }
                    line.clear();
                }
                counter.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(delay);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            });
        }
    });
    (port, received)
}

/// Waits (at most 10 s) until `counter` reaches `count`.
fn wait_for(counter: &AtomicUsize, count: usize) {
    let start = Instant::now();
    while counter.load(Ordering::SeqCst) < count {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "only {} of {count} slow requests arrived",
            counter.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A configuration letting `http_status` reach the slow server, plus `extra`.
fn config(dir: &TempDir, port: u16, extra: &str) -> PathBuf {
    dir.write(
        "evidence-wire.toml",
        format!(
            "{extra}\n[bundled.http]\nallow_hosts = [\"127.0.0.1:{port}\"]\nallow_insecure_http = true\nallow_private_addresses = true\ntimeout_ms = 10000\n"
        ),
    )
}

fn call(id: u64, port: u16) -> Value {
    let context: Value = serde_json::from_str(CONTEXT).expect("context");
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {
            "query": {"provider_id": "evidence-wire", "check_id": "http_status",
                "params": {"url": format!("http://127.0.0.1:{port}/slow/{id}")}},
            "context": context,
        }},
    })
}

/// The EvidenceResult inside a Decision Gate answer.
fn evidence(answer: &Value) -> &Value {
    &answer["result"]["content"][0]["json"]
}

/// `serve` with `args` and the configuration `config`; the child and, for
/// `--http`, its address (from the first stderr line).
fn spawn_serve(config: &PathBuf, args: &[&str], stdin: Stdio) -> (KillOnDrop, String) {
    let child = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(["serve", "--no-log"])
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let mut child = KillOnDrop(child);
    let mut stderr = BufReader::new(child.0.stderr.take().expect("stderr"));
    let mut line = String::new();
    if args.contains(&"--http") {
        stderr
            .read_line(&mut line)
            .expect("the server announces its address");
    }
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = stderr.read_to_end(&mut sink);
    });
    let address = line
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_owned();
    (child, address)
}

/// One HTTP/1.1 request on a fresh connection; (status, head, body).
fn request(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("send head");
    stream.write_all(body).expect("send body");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read the answer");
    let split = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(&answer)));
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let body = answer[split + 4..].to_vec();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("status");
    (status, head, body)
}

fn post_call(address: &str, body: &Value, token: Option<&str>) -> (u16, String, Value) {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    let (status, head, body) = request(
        address,
        "POST",
        "/rpc",
        &headers,
        body.to_string().as_bytes(),
    );
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (status, head, body)
}

const SLOW: Duration = Duration::from_secs(2);
const IN_FLIGHT: u64 = 8;

#[test]
fn serve_http_drains_on_sigterm_every_call_in_flight_completes() {
    let dir = TempDir::new();
    let (port, received) = slow_server(SLOW);
    let config = config(&dir, port, "");
    let (mut child, address) = spawn_serve(&config, &["--http", "127.0.0.1:0"], Stdio::null());
    let (status, _, _) = request(&address, "GET", "/readyz", &[], b"");
    assert_eq!(status, 200, "ready before the signal");

    let (answers, answered) = mpsc::channel();
    for id in 1..=IN_FLIGHT {
        let answers = answers.clone();
        let address = address.clone();
        std::thread::spawn(move || {
            let _ = answers.send((id, post_call(&address, &call(id, port), None)));
        });
    }
    wait_for(&received, IN_FLIGHT as usize);
    let signalled = Instant::now();
    child.signal("TERM");

    // Not ready while draining, and new calls are refused retryably.
    let start = Instant::now();
    loop {
        let (status, _, body) = request(&address, "GET", "/readyz", &[], b"");
        if status == 503 {
            assert_eq!(
                serde_json::from_slice::<Value>(&body).expect("json"),
                json!({"status": "draining"})
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "/readyz still {status} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, head, body) = post_call(&address, &call(100, port), None);
    assert_eq!(status, 503, "a new call while draining: {body}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: "),
        "{head}"
    );
    assert_eq!(body["error"]["code"], -32072, "{body}");
    assert!(
        signalled.elapsed() < SLOW,
        "the checks were still running when this was checked"
    );

    // Every call in flight completes with its own evidence.
    let mut got = Vec::new();
    for _ in 0..IN_FLIGHT {
        let (id, (status, _, body)) = answered
            .recv_timeout(Duration::from_secs(15))
            .expect("every call in flight is answered");
        assert_eq!(status, 200, "call {id}: {body}");
        assert_eq!(body["id"], json!(id));
        assert_eq!(evidence(&body)["value"]["value"], json!(200), "{body}");
        got.push(id);
    }
    got.sort_unstable();
    assert_eq!(got, (1..=IN_FLIGHT).collect::<Vec<_>>());
    let status = child.wait_for_exit(Duration::from_secs(15));
    let drain = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "exit status after draining");
    eprintln!(
        "drain: {IN_FLIGHT} calls in flight at SIGTERM, all answered, exit 0 after {} ms",
        drain.as_millis()
    );
}

#[test]
fn serve_http_answers_what_still_runs_at_the_drain_deadline_retryably() {
    let dir = TempDir::new();
    let (port, received) = slow_server(Duration::from_secs(8));
    let config = config(&dir, port, "");
    let (mut child, address) = spawn_serve(
        &config,
        &["--http", "127.0.0.1:0", "--drain-timeout-ms", "300"],
        Stdio::null(),
    );
    let (answers, answered) = mpsc::channel();
    for id in 1..=2 {
        let answers = answers.clone();
        let address = address.clone();
        std::thread::spawn(move || {
            let _ = answers.send(post_call(&address, &call(id, port), None));
        });
    }
    wait_for(&received, 2);
    let signalled = Instant::now();
    child.signal("TERM");
    for _ in 0..2 {
        let (status, head, body) = answered
            .recv_timeout(Duration::from_secs(6))
            .expect("answered at the deadline, not dropped");
        assert_eq!(status, 503, "{head}\n{body}");
        assert_eq!(body["error"]["code"], -32072, "{body}");
        assert_eq!(body["error"]["data"]["retryable"], json!(true), "{body}");
        let detail = body["error"]["data"]["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("drain deadline"), "{body}");
    }
    let status = child.wait_for_exit(Duration::from_secs(6));
    assert_eq!(status.code(), Some(0));
    assert!(signalled.elapsed() < Duration::from_secs(6));
}

#[test]
fn serve_on_stdio_answers_every_query_read_on_sigterm() {
    let dir = TempDir::new();
    let (port, received) = slow_server(SLOW);
    let config = config(&dir, port, "");
    let (mut child, _) = spawn_serve(&config, &["--workers", "16"], Stdio::piped());
    let mut stdin = child.0.stdin.take().expect("stdin");
    let stdout = child.0.stdout.take().expect("stdout");
    let (lines, answered) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    for id in 1..=IN_FLIGHT {
        writeln!(stdin, "{}", call(id, port)).expect("write a call");
    }
    stdin.flush().expect("flush");
    wait_for(&received, IN_FLIGHT as usize);
    let signalled = Instant::now();
    child.signal("TERM");
    let mut got = Vec::new();
    for _ in 0..IN_FLIGHT {
        let line = answered
            .recv_timeout(Duration::from_secs(15))
            .expect("every query read is answered");
        let answer: Value = serde_json::from_str(&line).expect("JSON answer");
        assert_eq!(evidence(&answer)["value"]["value"], json!(200), "{answer}");
        got.push(answer["id"].as_u64().expect("id"));
    }
    got.sort_unstable();
    assert_eq!(got, (1..=IN_FLIGHT).collect::<Vec<_>>());
    // stdin is still open: the signal alone ends the server.
    let status = child.wait_for_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    eprintln!(
        "stdio drain: {IN_FLIGHT} queries answered, exit 0 after {} ms",
        signalled.elapsed().as_millis()
    );
    drop(stdin);
}

#[test]
fn metrics_are_off_by_default_and_behind_the_token_when_enabled() {
    let dir = TempDir::new();
    let (port, _) = slow_server(Duration::ZERO);
    let off = config(&dir, port, "");
    let (_child, address) = spawn_serve(&off, &["--http", "127.0.0.1:0"], Stdio::null());
    let (status, _, _) = request(&address, "GET", "/metrics", &[], b"");
    assert_eq!(status, 404, "metrics are off by default");

    let on_dir = TempDir::new();
    let on = config(
        &on_dir,
        port,
        &format!(
            "[server.auth]\nmode = \"bearer_token\"\nbearer_tokens = [\"{TOKEN}\"]\n[server.metrics]\nenabled = true\n"
        ),
    );
    let (_child, address) = spawn_serve(&on, &["--http", "127.0.0.1:0"], Stdio::null());
    let (status, _, body) = post_call(&address, &call(1, port), Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = request(&address, "GET", "/metrics", &[], b"");
    assert_eq!(status, 401, "metrics ask for the token");
    let bearer = format!("Bearer {TOKEN}");
    let (status, head, body) = request(
        &address,
        "GET",
        "/metrics",
        &[("Authorization", &bearer)],
        b"",
    );
    assert_eq!(status, 200);
    assert!(head.contains("openmetrics-text"), "{head}");
    let text = String::from_utf8(body).expect("text");
    for expected in [
        r#"evidence_wire_requests_total{transport="http",method="tools/call",tool="evidence_query",outcome="ok"} 1"#,
        r#"evidence_wire_queries_total{transport="http",check="http_status",outcome="ok"} 1"#,
        r#"evidence_wire_check_duration_seconds_count{check="http_status"} 1"#,
        r#"evidence_wire_in_flight{transport="http"} 0"#,
    ] {
        assert!(text.contains(expected), "{expected}\nin\n{text}");
    }
}

#[test]
fn without_a_token_proxied_requests_are_refused_and_behind_proxy_does_not_start() {
    let dir = TempDir::new();
    let (port, _) = slow_server(Duration::ZERO);
    let config = config(&dir, port, "");
    let (_child, address) = spawn_serve(&config, &["--http", "127.0.0.1:0"], Stdio::null());
    let body = call(1, port).to_string();
    for header in [
        ("X-Forwarded-For", "203.0.113.7"),
        ("Forwarded", "for=203.0.113.7;proto=http"),
    ] {
        let (status, _, answer) = request(
            &address,
            "POST",
            "/rpc",
            &[("Content-Type", "application/json"), header],
            body.as_bytes(),
        );
        let answer = String::from_utf8_lossy(&answer);
        assert_eq!(status, 403, "{header:?}: {answer}");
        assert!(answer.contains("bearer token"), "{answer}");
    }
    // The same call without the header is served (loopback, no token).
    let (status, _, _) = request(
        &address,
        "POST",
        "/rpc",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(status, 200);

    // --behind-proxy without a token refuses to start.
    let output = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args([
            "serve",
            "--no-log",
            "--http",
            "127.0.0.1:0",
            "--behind-proxy",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run serve");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("server.behind_proxy") && stderr.contains("bearer_token"),
        "{stderr}"
    );
}

/// Issue 38 item 9: every answered query is counted, whatever path answered
/// it: the inline checks (`time_now`, `env_get`, including a denied read)
/// are in `queries_total` and `check_duration_seconds` like the others, and
/// every check's series is there at zero before the first request.
#[test]
fn metrics_count_inline_checks_and_show_every_series_from_the_start() {
    let dir = TempDir::new();
    let (port, _) = slow_server(Duration::ZERO);
    let on = config(
        &dir,
        port,
        &format!(
            "[server.auth]\nmode = \"bearer_token\"\nbearer_tokens = [\"{TOKEN}\"]\n[server.metrics]\nenabled = true\n"
        ),
    );
    let (_child, address) = spawn_serve(&on, &["--http", "127.0.0.1:0"], Stdio::null());
    let bearer = format!("Bearer {TOKEN}");
    let metrics = || {
        let (status, _, body) = request(
            &address,
            "GET",
            "/metrics",
            &[("Authorization", &bearer)],
            b"",
        );
        assert_eq!(status, 200);
        String::from_utf8(body).expect("text")
    };
    let before = metrics();
    for check in ["time_now", "env_get", "json_path", "http_status"] {
        let zero = format!(
            r#"evidence_wire_queries_total{{transport="http",check="{check}",outcome="ok"}} 0"#
        );
        assert!(before.contains(&zero), "{zero}\nin\n{before}");
    }
    assert!(
        before.contains(r#"evidence_wire_in_flight{transport="http"} 0"#),
        "{before}"
    );
    let context: Value = serde_json::from_str(CONTEXT).expect("context");
    let inline = |id: u64, check: &str, params: Value| {
        json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "evidence_query", "arguments": {
                "query": {"provider_id": "evidence-wire", "check_id": check, "params": params},
                "context": context,
            }},
        })
    };
    for (id, check, params) in [
        (1, "time_now", json!({})),
        (2, "env_get", json!({"key": "HOME"})),
    ] {
        let (status, _, body) = post_call(&address, &inline(id, check, params), Some(TOKEN));
        assert_eq!(status, 200, "{body}");
    }
    let after = metrics();
    for expected in [
        r#"evidence_wire_queries_total{transport="http",check="time_now",outcome="ok"} 1"#,
        r#"evidence_wire_check_duration_seconds_count{check="time_now"} 1"#,
        r#"evidence_wire_check_duration_seconds_count{check="env_get"} 1"#,
        r#"evidence_wire_in_flight{transport="http"} 0"#,
    ] {
        assert!(after.contains(expected), "{expected}\nin\n{after}");
    }
    // The denied read (env_get is deny-by-default) is counted by its code.
    let denied = after
        .lines()
        .find(|line| {
            line.starts_with(
                r#"evidence_wire_queries_total{transport="http",check="env_get",outcome=""#,
            ) && !line.contains(r#"outcome="ok""#)
        })
        .unwrap_or_else(|| panic!("no env_get refusal counted in\n{after}"));
    assert!(denied.ends_with(" 1"), "{denied}");
}

/// Issue 38 item 5: `serve` on stdio ends on SIGTERM even when its peer
/// stopped reading (a thread blocked writing answers into a full pipe): the
/// drain deadline bounds the whole shutdown, writes included.
#[test]
fn serve_on_stdio_ends_on_sigterm_when_its_peer_stopped_reading() {
    let dir = TempDir::new();
    let (port, _) = slow_server(Duration::ZERO);
    let config = config(&dir, port, "");
    // An answer of ~200 KB: three fill any pipe.
    dir.write(
        "big.json",
        format!("[{}]", vec!["\"0123456789abcdef\""; 11_000].join(",")),
    );
    let root = dir.0.to_string_lossy().into_owned();
    let (mut child, _) = spawn_serve(
        &config,
        &["--root", &root, "--drain-timeout-ms", "300"],
        Stdio::piped(),
    );
    let mut stdin = child.0.stdin.take().expect("stdin");
    // stdout is never read.
    let _stdout = child.0.stdout.take().expect("stdout");
    let context: Value = serde_json::from_str(CONTEXT).expect("context");
    for id in 1..=8 {
        let request = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "evidence_query", "arguments": {
                "query": {"provider_id": "evidence-wire", "check_id": "json_path",
                    "params": {"file": "big.json"}},
                "context": context,
            }},
        });
        writeln!(stdin, "{request}").expect("write a call");
    }
    stdin.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(800));
    let signalled = Instant::now();
    child.signal("TERM");
    // 300 ms of drain, then 5 s for the writes, then it gives up on them.
    let status = child.wait_for_exit(Duration::from_secs(10));
    eprintln!(
        "stdio, peer not reading: exit {status} {} ms after SIGTERM",
        signalled.elapsed().as_millis()
    );
    assert!(signalled.elapsed() < Duration::from_secs(8));
    drop(stdin);
}

/// Issue 38 item 5: a second SIGTERM during a drain ends the process at
/// once (exit 143), on stdio and on HTTP, however long the drain would
/// still take.
#[test]
fn a_second_signal_during_a_drain_ends_the_process_at_once() {
    for http in [false, true] {
        let dir = TempDir::new();
        let (port, received) = slow_server(Duration::from_secs(8));
        let config = config(&dir, port, "");
        let mut args = vec!["--drain-timeout-ms", "30000"];
        if http {
            args.extend(["--http", "127.0.0.1:0"]);
        }
        let (mut child, address) = spawn_serve(&config, &args, Stdio::piped());
        let mut stdin = child.0.stdin.take().expect("stdin");
        if http {
            std::thread::spawn(move || post_call(&address, &call(1, port), None));
        } else {
            writeln!(stdin, "{}", call(1, port)).expect("write a call");
            stdin.flush().expect("flush");
        }
        wait_for(&received, 1);
        child.signal("TERM");
        std::thread::sleep(Duration::from_millis(300));
        let second = Instant::now();
        child.signal("TERM");
        let status = child.wait_for_exit(Duration::from_secs(3));
        assert_eq!(status.code(), Some(143), "http {http}: {status}");
        assert!(second.elapsed() < Duration::from_secs(2), "http {http}");
        drop(stdin);
    }
}

/// Issue 38 item 2: a call the peer cancels while it waits for a worker
/// never starts. One worker busy with a slow `http_status` call; nine more
/// queued behind it, then cancelled: the upstream sees only the first
/// (before, the workers went on to make all nine requests nobody waited
/// for), and a fresh call is answered as soon as the worker is free.
#[test]
fn cancelled_stdio_calls_still_queued_never_start() {
    let dir = TempDir::new();
    let (port, received) = slow_server(Duration::from_millis(1500));
    let config = config(&dir, port, "");
    let (mut child, _) = spawn_serve(&config, &["--workers", "1"], Stdio::piped());
    let mut stdin = child.0.stdin.take().expect("stdin");
    let stdout = child.0.stdout.take().expect("stdout");
    let (lines, answered) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    for id in 1..=10 {
        writeln!(stdin, "{}", call(id, port)).expect("write a call");
    }
    stdin.flush().expect("flush");
    wait_for(&received, 1);
    for id in 2..=10 {
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}})
        )
        .expect("write a cancellation");
    }
    writeln!(stdin, "{}", call(11, port)).expect("write a call");
    stdin.flush().expect("flush");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let line = answered
            .recv_timeout(Duration::from_secs(10))
            .expect("calls 1 and 11 are answered");
        let answer: Value = serde_json::from_str(&line).expect("JSON answer");
        ids.push(answer["id"].as_u64().expect("id"));
    }
    ids.sort_unstable();
    assert_eq!(ids, [1, 11], "cancelled calls get no answer");
    assert_eq!(
        received.load(Ordering::SeqCst),
        2,
        "the upstream saw requests for cancelled calls"
    );
    drop(stdin);
    let status = child.wait_for_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
}

/// Writes a fresh self-signed certificate for 127.0.0.1 and its key as
/// `cert.pem` and `key.pem` in `dir` (each written beside and renamed over
/// the old one, as renewal tools do); returns the certificate file a
/// client trusts (`ca-N.pem`, a copy).
fn issue(dir: &TempDir, serial: usize) -> PathBuf {
    let issued = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("cert");
    for (name, pem) in [
        ("cert.pem", issued.cert.pem()),
        ("key.pem", issued.signing_key.serialize_pem()),
    ] {
        let fresh = dir.write(&format!("{name}.new"), pem);
        std::fs::rename(&fresh, dir.0.join(name)).expect("rename");
    }
    dir.write(&format!("ca-{serial}.pem"), issued.cert.pem())
}

/// `query --url https://{address}/rpc --check time_now`, trusting `ca`.
fn query_https(address: &str, ca: Option<&PathBuf>) -> std::process::Output {
    let mut command = Command::new(BIN);
    command.args([
        "query",
        "--url",
        &format!("https://{address}/rpc"),
        "--check",
        "time_now",
        "--timeout-ms",
        "5000",
    ]);
    if let Some(ca) = ca {
        command.arg("--ca-cert").arg(ca);
    }
    command
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .env_remove("EVIDENCE_WIRE_BEARER_TOKEN")
        .output()
        .expect("run query")
}

#[test]
fn serve_https_answers_verified_and_picks_up_a_renewed_certificate_on_sighup() {
    let dir = TempDir::new();
    let first = issue(&dir, 1);
    let config = dir.write("evidence-wire.toml", "");
    let cert = dir.0.join("cert.pem");
    let key = dir.0.join("key.pem");
    let (server, address) = spawn_serve(
        &config,
        &[
            "--http",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        Stdio::null(),
    );
    assert!(!address.is_empty(), "the server announced no address");

    let answered = query_https(&address, Some(&first));
    assert!(answered.status.success(), "{answered:?}");
    let result: Value = serde_json::from_slice(&answered.stdout).expect("JSON");
    assert_eq!(result["evidence_hash"]["algorithm"], "sha256", "{result}");
    // Not trusted without the certificate: a TLS failure, exit 1.
    let untrusted = query_https(&address, None);
    assert_eq!(untrusted.status.code(), Some(1), "{untrusted:?}");

    // Renewed on disk, then SIGHUP: the next connection gets it.
    let second = issue(&dir, 2);
    server.signal("HUP");
    let started = Instant::now();
    loop {
        if query_https(&address, Some(&second)).status.success() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the renewed certificate is not served"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let stale = query_https(&address, Some(&first));
    assert_eq!(stale.status.code(), Some(1), "{stale:?}");

    // A renewal that cannot be used (a key that is not the certificate's)
    // leaves the working pair in place.
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    dir.write("key.pem", other.signing_key.serialize_pem());
    server.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    let kept = query_https(&address, Some(&second));
    assert!(kept.status.success(), "{kept:?}");
    drop(server);
}

#[test]
fn tls_without_http_is_refused_saying_what_to_add() {
    let dir = TempDir::new();
    issue(&dir, 1);
    let config = dir.write("evidence-wire.toml", "");
    let output = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["serve", "--no-log", "--tls-cert"])
        .arg(dir.0.join("cert.pem"))
        .arg("--tls-key")
        .arg(dir.0.join("key.pem"))
        .stdin(Stdio::null())
        .output()
        .expect("run serve");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--http ADDR"), "{stderr}");
    // A key file that does not exist: refused before serving, naming it.
    let output = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["serve", "--no-log", "--http", "127.0.0.1:0", "--tls-cert"])
        .arg(dir.0.join("cert.pem"))
        .arg("--tls-key")
        .arg(dir.0.join("missing-key.pem"))
        .stdin(Stdio::null())
        .output()
        .expect("run serve");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("missing-key.pem"), "{stderr}");
}
