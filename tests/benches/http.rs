//! HTTP requests per second on loopback, 1 and 64 keep-alive connections,
//! each sending `POST /mcp` `tools/call evidence_query` (check `time_now`)
//! one request at a time: ours (`bench-http-server`, evidence-wire-tokio's
//! `serve_http`) against rmcp's streamable-HTTP server in stateless
//! JSON-response mode (`bench-rmcp-stdio --http`). Both servers are child
//! processes, each run on a multi-thread and on a current-thread tokio
//! runtime (`--current-thread`; the report compares each one's best); the client is one
//! single-threaded tokio runtime with hyper HTTP/1.1 connections, the same
//! for both.
//!
//! Every server runs at once (idle while another is measured); for 1, then
//! 64 connections: a 0.5 s warm-up of each, then 9 rounds of 1.2 s,
//! interleaved (round 1 of every server, then round 2 of every server in
//! the opposite order, ...), so a slow
//! spell of this shared VM lands on every server alike; each server's
//! median round's requests per second is reported. Every answer must be `200`
//! with an `evidence_hash` in it (the first is parsed fully). Every wait
//! is bounded: a request taking over 10 s fails the configuration.
//!
//! Output: a table on stderr and JSON lines in `$EW_BENCH_RESULTS/http.jsonl`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;

const ROUNDS: usize = 9;
const ROUND: Duration = Duration::from_millis(1200);
const WARM_UP: Duration = Duration::from_millis(500);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const BODY: &str = concat!(
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","#,
    r#""arguments":{"query":{"provider_id":"evidence-wire","check_id":"time_now"},"#,
    r#""context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","#,
    r#""stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000},"#,
    r#""correlation_id":null}}}}"#
);

/// One connection's loop: requests until `until`, counting answers.
async fn connection(port: u16, until: Instant, done: Arc<AtomicU64>) -> Result<(), String> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|error| format!("connect: {error}"))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| format!("handshake: {error}"))?;
    let driver = tokio::spawn(conn);
    let mut first = true;
    while Instant::now() < until {
        let request = Request::post("/mcp")
            .header("host", format!("127.0.0.1:{port}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
            .map_err(|error| format!("request: {error}"))?;
        let exchange = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|error| format!("send: {error}"))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|error| format!("body: {error}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| "request timed out".to_string())??;
        let text = String::from_utf8_lossy(&body);
        if status != 200 || !text.contains("evidence_hash") {
            return Err(format!("answer {status}: {text}"));
        }
        if first {
            let value: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|error| format!("not JSON ({error}): {text}"))?;
            if value
                .pointer("/result/structuredContent/evidence_hash")
                .is_none()
            {
                return Err(format!("no structuredContent.evidence_hash: {text}"));
            }
            first = false;
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
    driver.abort();
    Ok(())
}

/// Requests per second of one round with `connections` connections.
async fn round(port: u16, connections: usize, length: Duration) -> Result<f64, String> {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + length;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        tasks.push(tokio::spawn(connection(port, until, Arc::clone(&done))));
    }
    for task in tasks {
        task.await.map_err(|error| format!("task: {error}"))??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok(done.load(Ordering::Relaxed) as f64 / elapsed)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn results_dir() -> PathBuf {
    std::env::var_os("EW_BENCH_RESULTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../target/bench-results"
            ))
        })
}

/// One server process, listening.
struct Running {
    name: &'static str,
    runtime: &'static str,
    child: Child,
    /// Closed to stop the server (it stops at the end of its input).
    stdin: Option<ChildStdin>,
    port: u16,
}

impl Running {
    fn start(
        name: &'static str,
        runtime: &'static str,
        command: &mut Command,
    ) -> Result<Self, String> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("cannot start {command:?}: {error}"))?;
        let stdin = child.stdin.take();
        let mut line = String::new();
        let port = child
            .stdout
            .take()
            .and_then(|out| BufReader::new(out).read_line(&mut line).ok())
            .and_then(|_| line.trim().strip_prefix("listening ")?.parse::<u16>().ok());
        let mut running = Running {
            name,
            runtime,
            child,
            stdin,
            port: 0,
        };
        match port {
            Some(port) => {
                running.port = port;
                Ok(running)
            }
            None => {
                running.stop();
                Err(format!("server printed no port: {line:?}"))
            }
        }
    }

    fn stop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every server's rounds with `connections` connections, interleaved: a
/// warm-up each, then round 1 of every server, round 2 of every server,
/// ... A slow spell of the machine then lands on every server alike
/// instead of on whichever one ran at the time. The rounds of each
/// server, or why it failed.
async fn measure_interleaved(
    servers: &[Running],
    connections: usize,
) -> Vec<Result<Vec<f64>, String>> {
    let mut outcomes: Vec<Result<Vec<f64>, String>> = Vec::new();
    for server in servers {
        outcomes.push(
            round(server.port, connections, WARM_UP)
                .await
                .map(|_| Vec::new()),
        );
    }
    for round_number in 0..ROUNDS {
        // Every other round backwards, so no server always follows another.
        let mut order: Vec<_> = servers.iter().zip(outcomes.iter_mut()).collect();
        if round_number % 2 == 1 {
            order.reverse();
        }
        for (server, outcome) in order {
            let Ok(rates) = outcome else {
                continue;
            };
            match round(server.port, connections, ROUND).await {
                Ok(rate) => rates.push(rate),
                Err(error) => *outcome = Err(error),
            }
        }
    }
    outcomes
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    // Every server on both tokio runtimes: each one's best is compared.
    let server = |name: &'static str, runtime: &'static str| {
        let mut command = match name {
            "rmcp" => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_bench-rmcp-stdio"));
                command.arg("--http");
                command
            }
            _ => Command::new(env!("CARGO_BIN_EXE_bench-http-server")),
        };
        if runtime == "current-thread" {
            command.arg("--current-thread");
        }
        (name, runtime, command)
    };
    let servers = [
        server("evidence-wire", "multi-thread"),
        server("evidence-wire", "current-thread"),
        server("rmcp", "multi-thread"),
        server("rmcp", "current-thread"),
    ];
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("results directory");
    let mut running = Vec::new();
    for (name, runtime, mut command) in servers {
        if filter
            .as_deref()
            .is_some_and(|filter| !name.contains(filter))
        {
            continue;
        }
        match Running::start(name, runtime, &mut command) {
            Ok(server) => running.push(server),
            Err(error) => eprintln!("{name} {runtime}: FAILED: {error}"),
        }
    }
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let mut lines = String::new();
    for connections in [1usize, 64] {
        let outcomes = client.block_on(measure_interleaved(&running, connections));
        for (server, outcome) in running.iter().zip(outcomes) {
            let (name, runtime) = (server.name, server.runtime);
            match outcome {
                Ok(rates) => {
                    let median = median(rates.clone());
                    eprintln!(
                        "{name:14} {runtime:14} connections {connections:>2}: {median:>10.0} requests/s (rounds {:?})",
                        rates.iter().map(|rate| rate.round()).collect::<Vec<_>>()
                    );
                    lines.push_str(
                        &serde_json::json!({"server": name, "runtime": runtime, "connections": connections, "median_rps": median, "rounds": rates})
                            .to_string(),
                    );
                    lines.push('\n');
                }
                Err(error) => {
                    eprintln!("{name} {runtime} connections {connections}: FAILED: {error}");
                }
            }
        }
    }
    for server in &mut running {
        server.stop();
    }
    let path = dir.join("http.jsonl");
    let mut file = std::fs::File::create(&path).expect("results file");
    file.write_all(lines.as_bytes()).expect("write results");
    eprintln!("http: wrote {}", path.display());
}
