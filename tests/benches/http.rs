//! HTTP on loopback, two parts.
//!
//! **Servers**: requests per second with 1 and 64 keep-alive connections,
//! each sending `POST /mcp` `tools/call evidence_query` (check `time_now`)
//! one request at a time, to:
//! - `evidence-wire`: `bench-http-server`, evidence-wire-tokio's `serve_http`;
//! - `evidence-wire-axum`: `bench-http-server --axum`, the same provider's
//!   tower service (`ProviderService`) mounted in an axum `Router`;
//! - `rmcp`: rmcp's streamable-HTTP server in stateless JSON-response mode
//!   (`bench-rmcp-stdio --http`);
//! - `jsonrpsee`: jsonrpsee's HTTP server with an equivalent `tools/call`
//!   method (`jsonrpsee-server`, built from `tests/peers/jsonrpsee` by
//!   scripts/bench; skipped when absent).
//!
//! Each server is a child process, run on a multi-thread and on a
//! current-thread tokio runtime (`--current-thread`; the report compares
//! each one's best); the client is one single-threaded tokio runtime with
//! a minimal keep-alive HTTP/1.1 client per connection (`connection`), the
//! same for all. Every answer must be
//! `200` with an `evidence_hash` in it (the first is parsed fully).
//!
//! **Clients**: calls per second of a provider client calling one server
//! (`bench-http-server --current-thread --roomy`, our server on its best
//! runtime with room for every client's idle pooled connections, `POST
//! /rpc`), one caller calling one query after another (as `query
//! --url` does) and 64 callers at once, every answer verified (hash
//! checked) before it counts:
//! - `evidence-wire`: `bench-http-client`, evidence-wire-tokio's pooled
//!   `HttpProvider`; `evidence-wire-unpooled`: the same with
//!   `pool_max_idle` 0 (a connection per query: the client before pooling);
//! - `jsonrpsee`: jsonrpsee's `HttpClient` (`jsonrpsee-client`).
//!
//! Each client is a child process on a multi-thread and (except the
//! unpooled one) a current-thread runtime, driven over stdin
//! (`evidence_wire_tests::bench_client_loop`).
//!
//! **Instructions**: each server under valgrind's callgrind on a
//! current-thread runtime, answering 200 then 1200 requests one after
//! another on one keep-alive connection: `(run of 1200 - run of 200) /
//! 1000` instructions per request (start-up cancels out), steady where the
//! rates are not. Skipped without valgrind.
//!
//! In the first two parts every process runs at once (idle while another is
//! measured); for 1, then 64 connections (callers): a 0.5 s warm-up of
//! each, then 9 rounds of 1.2 s, interleaved (round 1 of every one, then
//! round 2 of every one in the opposite order, ...), so a slow spell of
//! this shared VM lands on every one alike; each one's median round's rate
//! is reported, with the CPU time (user and system, every thread, from
//! `/proc/PID/stat`) the server (or client) process used per request over
//! the measured rounds: steadier than the rate when the machine is shared.
//! Every wait is bounded: a request taking over 10 s fails the
//! configuration, as does any failed call of a client.
//!
//! Arguments: a name filter (only servers and clients whose name contains
//! it, or one of its comma-separated parts, run; `client` runs the client
//! part alone; e.g. `evidence-wire,jsonrpsee`). The jsonrpsee binaries are
//! looked for in `$EW_BENCH_JSONRPSEE_DIR`, else next to this package's
//! binaries (scripts/bench builds them into the same target directory).
//!
//! Output: tables on stderr and JSON lines in `$EW_BENCH_RESULTS/http.jsonl`
//! (servers), `http-clients.jsonl` (clients) and `http-instructions.jsonl`
//! (callgrind; its output files stay beside them, `http-callgrind-*.out`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// The request every connection sends, head and body, as one buffer.
fn request_bytes(port: u16) -> Vec<u8> {
    format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-06-18\r\n\
         content-length: {}\r\n\r\n{BODY}",
        BODY.len()
    )
    .into_bytes()
}

/// Most bytes an answer may take.
const MAX_ANSWER: usize = 64 * 1024;

/// The length of the answer at the start of `buffer`, head and body, once
/// its head is in (`None` before). Every server measured answers with a
/// `Content-Length` (hyper writes one for a whole body); an answer without
/// one is an error.
fn answer_length(buffer: &[u8]) -> Result<Option<usize>, String> {
    let Some(end) = memchr::memmem::find(buffer, b"\r\n\r\n") else {
        return if buffer.len() >= MAX_ANSWER {
            Err(format!("an answer head over {MAX_ANSWER} bytes"))
        } else {
            Ok(None)
        };
    };
    let head = &buffer[..end];
    let length = head
        .split(|byte| *byte == b'\n')
        .find_map(|line| {
            let (name, value) = line.split_at(line.iter().position(|b| *b == b':')?);
            name.eq_ignore_ascii_case(b"content-length").then(|| {
                std::str::from_utf8(&value[1..])
                    .ok()?
                    .trim()
                    .parse::<usize>()
                    .ok()
            })?
        })
        .ok_or_else(|| {
            format!(
                "an answer without Content-Length: {}",
                String::from_utf8_lossy(head)
            )
        })?;
    if length > MAX_ANSWER {
        return Err(format!("an answer of {length} bytes"));
    }
    Ok(Some(end + 4 + length))
}

/// Whether `buffer` holds exactly one whole answer, which is then
/// `(where its body starts)`; an error past its end (nothing was asked).
fn answer_complete(buffer: &[u8]) -> Result<Option<usize>, String> {
    match answer_length(buffer)? {
        Some(total) if buffer.len() == total => {
            Ok(memchr::memmem::find(buffer, b"\r\n\r\n").map(|end| end + 4))
        }
        Some(total) if buffer.len() > total => Err("the server sent more than one answer".into()),
        _ => Ok(None),
    }
}

/// Reads one answer into `buffer` (emptied first): its head up to the
/// blank line, then exactly the `Content-Length` bytes of its body.
/// Returns where the body starts.
async fn read_answer(
    stream: &mut tokio::net::TcpStream,
    buffer: &mut Vec<u8>,
) -> Result<usize, String> {
    use tokio::io::AsyncReadExt;
    buffer.clear();
    loop {
        let read = stream
            .read_buf(buffer)
            .await
            .map_err(|error| format!("read: {error}"))?;
        if read == 0 {
            return Err("the server closed the connection".into());
        }
        if let Some(body) = answer_complete(buffer)? {
            return Ok(body);
        }
    }
}

/// The same, blocking.
fn read_answer_blocking(
    stream: &mut std::net::TcpStream,
    buffer: &mut Vec<u8>,
) -> Result<usize, String> {
    use std::io::Read;
    buffer.clear();
    let mut chunk = [0u8; 8192];
    loop {
        let read = stream
            .read(&mut chunk)
            .map_err(|error| format!("read: {error}"))?;
        if read == 0 {
            return Err("the server closed the connection".into());
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(body) = answer_complete(buffer)? {
            return Ok(body);
        }
    }
}

/// One connection's loop: requests until `until`, counting answers. A
/// minimal keep-alive HTTP/1.1 client (the request written as one buffer,
/// the answer read up to its `Content-Length`), so that the client, which
/// shares the machine's two cores with the server, takes as little of
/// them as it can (its CPU time per request is reported beside the
/// server's). Every answer must be `200` with an `evidence_hash` in its
/// body; the first is parsed fully.
async fn connection(port: u16, until: Instant, done: Arc<AtomicU64>) -> Result<(), String> {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|error| format!("connect: {error}"))?;
    let _ = stream.set_nodelay(true);
    let request = request_bytes(port);
    let mut buffer = Vec::with_capacity(8192);
    let mut first = true;
    while Instant::now() < until {
        let exchange = async {
            stream
                .write_all(&request)
                .await
                .map_err(|error| format!("write: {error}"))?;
            read_answer(&mut stream, &mut buffer).await
        };
        let body = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| "request timed out".to_string())??;
        let (head, body) = buffer.split_at(body);
        if !head.starts_with(b"HTTP/1.1 200 ")
            || memchr::memmem::find(body, b"\"evidence_hash\"").is_none()
        {
            return Err(format!("answer: {}", String::from_utf8_lossy(&buffer)));
        }
        if first {
            let value: serde_json::Value = serde_json::from_slice(body).map_err(|error| {
                format!("not JSON ({error}): {}", String::from_utf8_lossy(body))
            })?;
            if value
                .pointer("/result/structuredContent/evidence_hash")
                .is_none()
            {
                return Err(format!(
                    "no structuredContent.evidence_hash: {}",
                    String::from_utf8_lossy(body)
                ));
            }
            first = false;
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Requests answered and seconds taken by one round with `connections`
/// connections.
async fn round(port: u16, connections: usize, length: Duration) -> Result<(u64, f64), String> {
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
    Ok((
        done.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
    ))
}

/// Clock ticks (user, system) the process `pid` has used so far, from
/// `/proc` (every thread); `None` where it cannot be read.
fn cpu_ticks(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (which may hold spaces): utime is the 14th
    // field of the line, stime the 15th.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

#[cfg(target_os = "linux")]
fn ticks_per_second() -> Option<f64> {
    Some(rustix::param::clock_ticks_per_second() as f64).filter(|ticks| *ticks > 0.0)
}

#[cfg(not(target_os = "linux"))]
fn ticks_per_second() -> Option<f64> {
    None
}

/// The CPU time one process used over the measured rounds, and what it
/// answered (or called) in them.
#[derive(Default, Clone, Copy)]
struct CpuUse {
    user: u64,
    system: u64,
    done: u64,
    readable: bool,
}

impl CpuUse {
    /// Measures `work` (which gives what it answered and how long it
    /// took) on process `pid`, adding to this tally when `counted`.
    fn measure(
        &mut self,
        pid: u32,
        counted: bool,
        work: impl FnOnce() -> Result<(u64, f64), String>,
    ) -> Result<(u64, f64), String> {
        let before = cpu_ticks(pid);
        let (done, seconds) = work()?;
        if counted {
            match (before, cpu_ticks(pid)) {
                (Some(before), Some(after)) => {
                    self.user += after.0.saturating_sub(before.0);
                    self.system += after.1.saturating_sub(before.1);
                    self.done += done;
                    self.readable = true;
                }
                _ => self.readable = false,
            }
        }
        Ok((done, seconds))
    }

    /// The JSON fields of microseconds per request (user, system, total),
    /// their names starting with `prefix`.
    fn fields(&self, prefix: &str) -> serde_json::Value {
        let Some(ticks) = ticks_per_second().filter(|_| self.readable && self.done > 0) else {
            return serde_json::json!({});
        };
        let us = |ticks_used: u64| ticks_used as f64 * 1e6 / ticks / self.done as f64;
        let mut fields = serde_json::Map::new();
        for (name, ticks_used) in [
            ("cpu_user_us", self.user),
            ("cpu_system_us", self.system),
            ("cpu_us", self.user + self.system),
        ] {
            fields.insert(format!("{prefix}{name}"), serde_json::json!(us(ticks_used)));
        }
        serde_json::Value::Object(fields)
    }
}

/// Requests (calls) per second of a round's outcome.
fn rate(outcome: Result<(u64, f64), String>) -> Result<f64, String> {
    outcome.map(|(done, seconds)| done as f64 / seconds.max(1e-9))
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
        self.stop_within(Duration::from_secs(5));
    }

    /// Closes its stdin, waits up to `grace` for it to end, then kills it.
    fn stop_within(&mut self, grace: Duration) {
        drop(self.stdin.take());
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `name` is selected by the command line's filter: no filter, or
/// one of its comma-separated parts is in the name.
fn wanted(filter: Option<&str>, name: &str) -> bool {
    filter.is_none_or(|filter| filter.split(',').any(|part| name.contains(part)))
}

/// Every measured thing's rounds, interleaved: a warm-up each, then
/// round 1 of every one, round 2 of every one (in the opposite order),
/// ... A slow spell of the machine then lands on every one alike instead
/// of on whichever one ran at the time. `round(i, length, counted)`
/// measures thing `i` for `length` and gives its rate (`counted`: a
/// measured round, not the warm-up). The rounds of each, or why it failed.
fn interleaved(
    count: usize,
    mut round: impl FnMut(usize, Duration, bool) -> Result<f64, String>,
) -> Vec<Result<Vec<f64>, String>> {
    let mut outcomes: Vec<Result<Vec<f64>, String>> = (0..count)
        .map(|index| round(index, WARM_UP, false).map(|_| Vec::new()))
        .collect();
    for round_number in 0..ROUNDS {
        // Every other round backwards, so no one always follows another.
        let mut order: Vec<usize> = (0..count).collect();
        if round_number % 2 == 1 {
            order.reverse();
        }
        for index in order {
            let Some(Ok(_)) = outcomes.get(index) else {
                continue;
            };
            match round(index, ROUND, true) {
                Ok(rate) => {
                    if let Some(Ok(rates)) = outcomes.get_mut(index) {
                        rates.push(rate);
                    }
                }
                Err(error) => outcomes[index] = Err(error),
            }
        }
    }
    outcomes
}

/// Prints each one's median and rounds, and appends its JSON line to
/// `lines` (`fields` plus the median under `median_key` and the rounds).
fn report(
    lines: &mut String,
    label: &str,
    unit: &str,
    fields: serde_json::Value,
    median_key: &str,
    outcome: Result<Vec<f64>, String>,
) {
    match outcome {
        Ok(rates) => {
            let median = median(rates.clone());
            eprintln!(
                "{label}: {median:>10.0} {unit} (rounds {:?})",
                rates.iter().map(|rate| rate.round()).collect::<Vec<_>>()
            );
            let mut fields = fields;
            for (key, whose) in [("cpu", "its"), ("driver_cpu", "the driver's")] {
                let Some(cpu) = fields.get(key).cloned() else {
                    continue;
                };
                if let Some(us) = cpu[format!("{key}_us")].as_f64() {
                    eprintln!(
                        "{label}: {us:>10.1} µs of {whose} CPU per {}",
                        unit.trim_end_matches("/s")
                    );
                }
                if let (Some(fields), Some(cpu)) = (fields.as_object_mut(), cpu.as_object()) {
                    fields.remove(key);
                    fields.extend(cpu.clone());
                }
            }
            fields[median_key] = serde_json::json!(median);
            fields["rounds"] = serde_json::json!(rates);
            lines.push_str(&fields.to_string());
            lines.push('\n');
        }
        Err(error) => eprintln!("{label}: FAILED: {error}"),
    }
}

/// One client process (`bench_client_loop`), ready for rounds.
struct ClientProcess {
    name: &'static str,
    runtime: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl ClientProcess {
    fn start(
        name: &'static str,
        runtime: &'static str,
        command: &mut Command,
    ) -> Result<Self, String> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| format!("cannot start {command:?}: {error}"))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut client = ClientProcess {
            name,
            runtime,
            child,
            stdin,
            stdout,
        };
        match client.stdout.next() {
            Some(Ok(line)) if line == "ready" => Ok(client),
            other => {
                client.stop();
                Err(format!("client did not say ready: {other:?}"))
            }
        }
    }

    /// Calls made and seconds taken by `callers` callers over `length`;
    /// any failed call fails the round.
    fn round(&mut self, callers: usize, length: Duration) -> Result<(u64, f64), String> {
        let stdin = self.stdin.as_mut().ok_or("client stopped")?;
        writeln!(stdin, "round {callers} {}", length.as_millis())
            .and_then(|()| stdin.flush())
            .map_err(|error| format!("client gone: {error}"))?;
        let line = self
            .stdout
            .next()
            .ok_or("client ended")?
            .map_err(|error| format!("client output: {error}"))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let ["done", calls, failures, seconds] = words.as_slice() else {
            return Err(format!("client said {line:?}"));
        };
        let (Ok(calls), Ok(failures), Ok(seconds)) = (
            calls.parse::<u64>(),
            failures.parse::<u64>(),
            seconds.parse::<f64>(),
        ) else {
            return Err(format!("client said {line:?}"));
        };
        if failures > 0 {
            return Err(format!("{failures} calls failed (of {})", calls + failures));
        }
        Ok((calls, seconds))
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

/// Where the jsonrpsee peers' binaries are: `$EW_BENCH_JSONRPSEE_DIR`, else
/// next to this package's binaries (scripts/bench builds them there).
fn jsonrpsee_binary(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("EW_BENCH_JSONRPSEE_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            PathBuf::from(env!("CARGO_BIN_EXE_bench-http-server"))
                .parent()
                .map(PathBuf::from)
        })?;
    let path = dir.join(name);
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "http: {} not found: build tests/peers/jsonrpsee (scripts/bench does) or set EW_BENCH_JSONRPSEE_DIR; its rows are skipped",
            path.display()
        );
        None
    }
}

const RUNTIMES: [&str; 2] = ["multi-thread", "current-thread"];

/// The servers' part: every server on both runtimes, 1 and 64 connections.
fn servers(filter: Option<&str>, client: &tokio::runtime::Runtime, lines: &mut String) {
    let jsonrpsee = jsonrpsee_binary("jsonrpsee-server");
    let mut running = Vec::new();
    for name in ["evidence-wire", "evidence-wire-axum", "rmcp", "jsonrpsee"] {
        if !wanted(filter, name) {
            continue;
        }
        for runtime in RUNTIMES {
            let mut command = match name {
                "rmcp" => {
                    let mut command = Command::new(env!("CARGO_BIN_EXE_bench-rmcp-stdio"));
                    command.arg("--http");
                    command
                }
                "jsonrpsee" => match &jsonrpsee {
                    Some(path) => Command::new(path),
                    None => continue,
                },
                "evidence-wire-axum" => {
                    let mut command = Command::new(env!("CARGO_BIN_EXE_bench-http-server"));
                    command.arg("--axum");
                    command
                }
                _ => Command::new(env!("CARGO_BIN_EXE_bench-http-server")),
            };
            if runtime == "current-thread" {
                command.arg("--current-thread");
            }
            match Running::start(name, runtime, &mut command) {
                Ok(server) => running.push(server),
                Err(error) => eprintln!("{name} {runtime}: FAILED: {error}"),
            }
        }
    }
    if running.is_empty() {
        return;
    }
    for connections in [1usize, 64] {
        let mut cpu = vec![CpuUse::default(); running.len()];
        let mut driver_cpu = vec![CpuUse::default(); running.len()];
        let outcomes = interleaved(running.len(), |index, length, counted| {
            let server = &running[index];
            let server_cpu = &mut cpu[index];
            rate(driver_cpu[index].measure(std::process::id(), counted, || {
                server_cpu.measure(server.child.id(), counted, || {
                    client.block_on(round(server.port, connections, length))
                })
            }))
        });
        for (((server, outcome), cpu), driver_cpu) in
            running.iter().zip(outcomes).zip(&cpu).zip(&driver_cpu)
        {
            let (name, runtime) = (server.name, server.runtime);
            report(
                lines,
                &format!("{name:18} {runtime:14} connections {connections:>2}"),
                "requests/s",
                serde_json::json!({"server": name, "runtime": runtime, "connections": connections, "cpu": cpu.fields(""), "driver_cpu": driver_cpu.fields("driver_")}),
                "median_rps",
                outcome,
            );
        }
    }
    for server in &mut running {
        server.stop();
    }
}

/// The clients' part: every client calling one server (ours, on a current
/// thread), one caller and 64.
fn clients(filter: Option<&str>, lines: &mut String) {
    let jsonrpsee = jsonrpsee_binary("jsonrpsee-client");
    let mut selected = Vec::new();
    for (name, runtimes) in [
        ("evidence-wire", &RUNTIMES[..]),
        ("evidence-wire-unpooled", &RUNTIMES[..1]),
        ("jsonrpsee", &RUNTIMES[..]),
    ] {
        let label = format!("{name}-client");
        if !wanted(filter, &label) {
            continue;
        }
        for &runtime in runtimes {
            selected.push((name, runtime));
        }
    }
    if selected.is_empty() {
        return;
    }
    let mut server = match Running::start(
        "evidence-wire",
        "current-thread",
        Command::new(env!("CARGO_BIN_EXE_bench-http-server")).args(["--current-thread", "--roomy"]),
    ) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("clients: the server failed to start: {error}");
            return;
        }
    };
    let url = format!("http://127.0.0.1:{}/rpc", server.port);
    let mut running = Vec::new();
    for (name, runtime) in selected {
        let mut command = match name {
            "jsonrpsee" => match &jsonrpsee {
                Some(path) => Command::new(path),
                None => continue,
            },
            _ => Command::new(env!("CARGO_BIN_EXE_bench-http-client")),
        };
        command.arg(&url);
        if name == "evidence-wire-unpooled" {
            command.arg("--unpooled");
        }
        if runtime == "current-thread" {
            command.arg("--current-thread");
        }
        match ClientProcess::start(name, runtime, &mut command) {
            Ok(client) => running.push(client),
            Err(error) => eprintln!("{name} client {runtime}: FAILED: {error}"),
        }
    }
    for callers in [1usize, 64] {
        let mut cpu = vec![CpuUse::default(); running.len()];
        let outcomes = interleaved(running.len(), |index, length, counted| {
            let client = &mut running[index];
            let pid = client.child.id();
            rate(cpu[index].measure(pid, counted, || client.round(callers, length)))
        });
        for ((client, outcome), cpu) in running.iter().zip(outcomes).zip(&cpu) {
            let (name, runtime) = (client.name, client.runtime);
            report(
                lines,
                &format!("{name:22} client {runtime:14} callers {callers:>2}"),
                "calls/s",
                serde_json::json!({"client": name, "runtime": runtime, "callers": callers, "cpu": cpu.fields("")}),
                "median_cps",
                outcome,
            );
        }
    }
    for client in &mut running {
        client.stop();
    }
    server.stop();
}

/// Requests per run of the instruction counts: `(run of LONG - run of
/// SHORT) / (LONG - SHORT)` per request, so start-up cancels out.
const SHORT: u64 = 200;
const LONG: u64 = 1200;

/// Total instructions callgrind counted, from its output file.
fn callgrind_total(out: &std::path::Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(out)
        .map_err(|error| format!("cannot read {}: {error}", out.display()))?;
    text.lines()
        .find_map(|line| {
            line.strip_prefix("totals:")
                .or_else(|| line.strip_prefix("summary:"))
        })
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no totals in {}", out.display()))
}

/// Instructions of one server process (under callgrind, on a current
/// thread) answering `requests` requests one after another on one
/// keep-alive connection, start-up and shutdown included.
fn callgrind_run(
    name: &'static str,
    program: &std::path::Path,
    args: &[&str],
    requests: u64,
    dir: &std::path::Path,
) -> Result<u64, String> {
    let out = dir.join(format!("http-callgrind-{name}-{requests}.out"));
    let _ = std::fs::remove_file(&out);
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(program)
        .args(args)
        .arg("--current-thread");
    let mut server = Running::start(name, "current-thread", &mut command)?;
    let exchanged = (|| {
        use std::io::Write as _;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port))
            .map_err(|error| format!("connect: {error}"))?;
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
        let request = request_bytes(server.port);
        let mut buffer = Vec::with_capacity(8192);
        for _ in 0..requests {
            stream
                .write_all(&request)
                .map_err(|error| format!("write: {error}"))?;
            let body = read_answer_blocking(&mut stream, &mut buffer)?;
            if !buffer.starts_with(b"HTTP/1.1 200 ")
                || memchr::memmem::find(&buffer[body..], b"\"evidence_hash\"").is_none()
            {
                return Err(format!("answer: {}", String::from_utf8_lossy(&buffer)));
            }
        }
        Ok(())
    })();
    // Callgrind writes its counts as the server exits.
    server.stop_within(Duration::from_secs(60));
    exchanged?;
    callgrind_total(&out)
}

/// The instructions part: every server's instructions per request under
/// callgrind, on a current-thread runtime, one keep-alive connection.
fn instructions(filter: Option<&str>, lines: &mut String) {
    let has_valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_valgrind {
        eprintln!("http: valgrind not found; no instruction counts");
        return;
    }
    let dir = results_dir();
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_bench-http-server"));
    let rmcp = PathBuf::from(env!("CARGO_BIN_EXE_bench-rmcp-stdio"));
    let jsonrpsee = jsonrpsee_binary("jsonrpsee-server");
    let servers: [(&'static str, Option<&PathBuf>, &[&str]); 4] = [
        ("evidence-wire", Some(&ours), &[]),
        ("evidence-wire-axum", Some(&ours), &["--axum"]),
        ("rmcp", Some(&rmcp), &["--http"]),
        ("jsonrpsee", jsonrpsee.as_ref(), &[]),
    ];
    for (name, program, args) in servers {
        let Some(program) = program else { continue };
        if !wanted(filter, name) {
            continue;
        }
        let counted = callgrind_run(name, program, args, SHORT, &dir).and_then(|short| {
            let long = callgrind_run(name, program, args, LONG, &dir)?;
            Ok(long.saturating_sub(short) as f64 / (LONG - SHORT) as f64)
        });
        match counted {
            Ok(per_request) => {
                eprintln!(
                    "{name:18} current-thread: {per_request:>10.0} instructions per request (callgrind)"
                );
                lines.push_str(
                    &serde_json::json!({"server": name, "runtime": "current-thread", "instructions": per_request})
                        .to_string(),
                );
                lines.push('\n');
            }
            Err(error) => eprintln!("{name} instructions: FAILED: {error}"),
        }
    }
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("results directory");
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let mut server_lines = String::new();
    servers(filter.as_deref(), &client, &mut server_lines);
    let mut client_lines = String::new();
    clients(filter.as_deref(), &mut client_lines);
    let mut instruction_lines = String::new();
    instructions(filter.as_deref(), &mut instruction_lines);
    for (file, lines) in [
        ("http.jsonl", server_lines),
        ("http-clients.jsonl", client_lines),
        ("http-instructions.jsonl", instruction_lines),
    ] {
        let path = dir.join(file);
        let mut out = std::fs::File::create(&path).expect("results file");
        out.write_all(lines.as_bytes()).expect("write results");
        eprintln!("http: wrote {}", path.display());
    }
}
