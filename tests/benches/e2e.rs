//! End to end over a pipe: a child process answering `tools/call
//! evidence_query` (check `time_now`) on newline-delimited stdio, with 1
//! and with 64 requests in flight.
//!
//! Servers: `evidence-wire serve` (the CLI, blocking adapter, 4 workers)
//! with `--no-log` and with its validation log on (the default, written to a
//! scratch directory), each over newline-delimited and Content-Length
//! framing; `bench-rmcp-stdio` (rmcp with an equivalent tool) over its
//! default `stdio()` transport and over `stdio_pipes()` on a current-thread
//! runtime (`--pipes`, its best setup); `bench-echo` (copies its input
//! back: the floor, a pipe round trip with no protocol work); and
//! `bench-echo --answer` ("canned": answers every request with the answer
//! `serve --no-log` gave to one, taken at start, with the request's id
//! spliced in: the floor for any server that sends our answer, since it
//! moves the same bytes and computes nothing). Every server gets the MCP
//! handshake first (`initialize`, `notifications/initialized`; echo just
//! reflects it).
//!
//! One in flight is measured twice: unpinned, and with the driver and the
//! server pinned to one CPU (Linux; the driver sets its own affinity before
//! it starts the server, which inherits it). Unpinned, a request-answer
//! ping-pong on a small VM lands in one of two modes from run to run: both
//! processes woken on one CPU (a few µs per round trip) or woken across
//! CPUs through the hypervisor (~80 µs), for every server alike, so the
//! ratios there mostly measure where the scheduler put the processes.
//! Pinned, every server gets the same one-CPU ping-pong and the ratios show
//! the per-request work. Both are reported.
//!
//! Each configuration (in flight and pinning) runs every server at once:
//! each gets 200 warm-up requests and one sizing round of N requests
//! (N = 2000 one at a time, 10000 with 64 in flight), then 9 rounds of
//! about 0.4 s each, interleaved across the servers (round 1 of each, then
//! round 2 of each in the opposite order, ...: each server's neighbours in
//! time alternate, so a drift of the machine's speed favours none of two
//! neighbours, and a slow spell of this shared machine lands on every server
//! alike, not on whichever ran then) (at least N, at most 400000 requests: at
//! hundreds of thousands of requests per second a round of N lasts a few
//! milliseconds, short enough for one scheduler hiccup to move it by a
//! quarter); the median round's requests per second is reported. A round
//! (and the sizing round) sends no more after 1.6 s and counts what was
//! answered: unpinned, a round sized in the fast wake-up mode (below) can
//! land in the slow one, ~100x slower, and would otherwise run for minutes.
//! Every answer is checked for a JSON-RPC error or `isError`; the first
//! one's `structuredContent` must hold an `evidence_hash` of
//! `common::E2E_EVIDENCE` (the bytes the `e2e_floor` bench hashes). A watchdog kills
//! a server that takes over 120 s.
//!
//! CPU time (Linux): around every round the driver reads its own thread's
//! and the server process's user and system time (`/proc/.../stat`, in
//! clock ticks, summed over the rounds and divided by their requests),
//! so the report can split a pinned round trip, where the driver and the
//! server share one CPU, into the driver's work and the server's. Ticks
//! are sampled (a 100 Hz tick charges a whole tick to whoever runs), so
//! these are estimates good to a few percent over ~200 ticks, not exact.
//!
//! The CLI binary: `$EW_BENCH_CLI`, or `evidence-wire` next to this bench's
//! directory (scripts/bench builds it with `--profile bench`).
//! A quick run: a server-name filter as the argument (`-- evidence-wire`:
//! our four rows) and `EW_BENCH_E2E_ONLY` naming the configurations to run
//! (`64`, `1`, `1-pinned`, comma-separated; all three by default), e.g.
//! the validation log's rows at 64 in flight:
//! `EW_BENCH_E2E_ONLY=64 cargo bench -p evidence-wire-tests --features bench-peers --bench e2e -- evidence-wire`.
//! Output: a table on stderr and JSON lines in `$EW_BENCH_RESULTS/e2e.jsonl`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

#[path = "common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 9;
const WARM_UP: u64 = 200;
/// How long a measured round lasts, about (see the module docs).
const ROUND_TIME: Duration = Duration::from_millis(400);
/// The most requests in one round.
const MAX_ROUND: u64 = 400_000;
/// The longest a round (or the sizing round) sends for: a round sized
/// while the machine was fast ends here if it turned slow, with what it
/// got answered (see the module docs).
const ROUND_LIMIT: Duration = Duration::from_millis(1600);
const DEADLINE: Duration = Duration::from_secs(120);

struct Session {
    /// Content-Length framing instead of newline-delimited.
    content_length: bool,
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    line: String,
    next_id: u64,
    checked: bool,
    echo: bool,
}

impl Session {
    fn start(command: &mut Command, echo: bool, content_length: bool) -> Result<Session, String> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("cannot start {command:?}: {error}"))?;
        let input = child.stdin.take().ok_or("no stdin")?;
        let output = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut session = Session {
            content_length,
            child,
            input,
            output,
            line: String::new(),
            next_id: 1,
            checked: false,
            echo,
        };
        session.send(
            concat!(
                r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","#,
                r#""capabilities":{},"clientInfo":{"name":"evidence-wire-bench","version":"0"}}}"#,
                "\n"
            ),
        )?;
        session.receive()?;
        if !echo && !session.line.contains("\"result\"") {
            return Err(format!("initialize failed: {}", session.line.trim_end()));
        }
        session.send("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")?;
        if echo {
            session.receive()?; // echo reflects the notification too
        }
        Ok(session)
    }

    /// Writes newline-terminated messages, each framed as the session says.
    fn send(&mut self, lines: &str) -> Result<(), String> {
        let framed;
        let bytes = if self.content_length {
            let mut out = String::with_capacity(lines.len() + 64);
            for line in lines.lines() {
                out.push_str(&format!("Content-Length: {}\r\n\r\n{line}", line.len()));
            }
            framed = out;
            framed.as_bytes()
        } else {
            lines.as_bytes()
        };
        self.input
            .write_all(bytes)
            .map_err(|error| format!("write: {error}"))
    }

    fn receive(&mut self) -> Result<(), String> {
        self.line.clear();
        if self.content_length {
            let mut length = None;
            loop {
                let mut header = String::new();
                match self.output.read_line(&mut header) {
                    Ok(0) => return Err("the server closed its output".into()),
                    Ok(_) => {}
                    Err(error) => return Err(format!("read: {error}")),
                }
                let header = header.trim_end();
                if header.is_empty() {
                    if length.is_some() {
                        break;
                    }
                    continue;
                }
                if let Some((name, value)) = header.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse::<usize>().ok();
                    }
                }
            }
            let mut body = vec![0u8; length.unwrap_or(0)];
            std::io::Read::read_exact(&mut self.output, &mut body)
                .map_err(|error| format!("read: {error}"))?;
            self.line = String::from_utf8(body).map_err(|error| format!("answer: {error}"))?;
            return Ok(());
        }
        match self.output.read_line(&mut self.line) {
            Ok(0) => Err("the server closed its output".into()),
            Ok(_) => Ok(()),
            Err(error) => Err(format!("read: {error}")),
        }
    }

    fn check(&mut self) -> Result<(), String> {
        let line = self.line.as_str();
        if line.contains("\"error\":{\"code\"") || line.contains("\"isError\":true") {
            return Err(format!("error answer: {}", line.trim_end()));
        }
        if !self.checked && !self.echo {
            let value: serde_json::Value =
                serde_json::from_str(line).map_err(|error| format!("answer not JSON: {error}"))?;
            let Some(hash) = value
                .pointer("/result/structuredContent/evidence_hash/value")
                .and_then(serde_json::Value::as_str)
            else {
                return Err(format!("answer without evidence_hash: {}", line.trim_end()));
            };
            // The bytes the `e2e_floor` bench hashes must be the ones
            // every server here hashes for this request.
            let expected: String = <sha2::Sha256 as sha2::Digest>::digest(common::E2E_EVIDENCE)
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            if hash != expected {
                return Err(format!(
                    "evidence_hash {hash} is not the SHA-256 of common::E2E_EVIDENCE ({expected})"
                ));
            }
            self.checked = true;
        }
        Ok(())
    }

    /// `count` requests with at most `window` in flight, sending no more
    /// once `ROUND_LIMIT` has passed (checked every 64 answers) and
    /// waiting for those in flight: how many were answered, and the
    /// elapsed time.
    fn run(&mut self, mut count: u64, window: u64) -> Result<(u64, Duration), String> {
        let started = Instant::now();
        let mut sent = 0;
        let mut received = 0;
        let mut batch = String::new();
        while sent < count.min(window) {
            batch.push_str(&common::e2e_request(self.next_id));
            self.next_id += 1;
            sent += 1;
        }
        self.send(&batch)?;
        while received < count {
            self.receive()?;
            self.check()?;
            received += 1;
            if received % 64 == 0 && sent < count && started.elapsed() > ROUND_LIMIT {
                count = sent;
            }
            if sent < count {
                let line = common::e2e_request(self.next_id);
                self.next_id += 1;
                self.send(&line)?;
                sent += 1;
            }
        }
        Ok((received, started.elapsed()))
    }

    fn stop(mut self) {
        drop(self.input);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills process `pid` unless told to stand down within `DEADLINE`.
fn watchdog(pid: u32) -> mpsc::Sender<()> {
    let (done, wait) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(DEADLINE) {
            eprintln!("e2e: server {pid} over {DEADLINE:?}; killing it");
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    done
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

fn cli_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("EW_BENCH_CLI") {
        // Relative to the workspace root (cargo runs benches in the package's directory).
        return PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(path);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/e2e-<hash> -> target/<profile>/evidence-wire
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("evidence-wire"))
        .expect("a target directory")
}

/// Restores the driver's CPU affinity when dropped.
struct Pin {
    #[cfg(target_os = "linux")]
    before: rustix::thread::CpuSet,
}

impl Pin {
    /// Pins the calling thread (and so the children it starts from now on)
    /// to the first CPU it may run on; `None` where that is not possible.
    #[cfg(target_os = "linux")]
    fn first_cpu() -> Option<Pin> {
        use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
        let before = sched_getaffinity(None).ok()?;
        let cpu = (0..CpuSet::MAX_CPU).find(|&cpu| before.is_set(cpu))?;
        let mut one = CpuSet::new();
        one.set(cpu);
        sched_setaffinity(None, &one).ok()?;
        Some(Pin { before })
    }

    #[cfg(not(target_os = "linux"))]
    fn first_cpu() -> Option<Pin> {
        None
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        let _ = rustix::thread::sched_setaffinity(None, &self.before);
    }
}

/// Clock ticks (user, system) used so far by the process `pid` (`None`:
/// the calling thread), from `/proc`; `None` where it cannot be read.
fn cpu_ticks(pid: Option<u32>) -> Option<(u64, u64)> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/thread-self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may hold spaces): state is the
    // 3rd field of the line, utime the 14th, stime the 15th.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let user = fields.next()?.parse().ok()?;
    let system = fields.next()?.parse().ok()?;
    Some((user, system))
}

/// CPU time of a server's measured rounds, in clock ticks, and the
/// requests they answered.
#[derive(Default, Clone, Copy)]
struct CpuUse {
    driver: u64,
    server_user: u64,
    server_system: u64,
    requests: u64,
}

impl CpuUse {
    /// Microseconds per request: (driver, server user, server system).
    fn per_request(&self) -> Option<(f64, f64, f64)> {
        let ticks_per_second = ticks_per_second()?;
        if self.requests == 0 {
            return None;
        }
        let us = |ticks: u64| ticks as f64 * 1e6 / ticks_per_second / self.requests as f64;
        Some((
            us(self.driver),
            us(self.server_user),
            us(self.server_system),
        ))
    }
}

#[cfg(target_os = "linux")]
fn ticks_per_second() -> Option<f64> {
    Some(rustix::param::clock_ticks_per_second() as f64).filter(|ticks| *ticks > 0.0)
}

#[cfg(not(target_os = "linux"))]
fn ticks_per_second() -> Option<f64> {
    None
}

/// A server's median rate, its rounds and the CPU they took, or why it
/// could not be measured.
type Outcome = Result<(f64, Vec<f64>, Option<CpuUse>), String>;

/// One server under measurement in [`measure_all`].
struct Measured<'a> {
    name: &'a str,
    session: Session,
    /// Stands the watchdog down when sent to (or dropped).
    done: mpsc::Sender<()>,
    /// Requests per round (sized to ~[`ROUND_TIME`]).
    count: u64,
    rates: Vec<f64>,
    /// CPU time of the rounds so far (`None` once a reading failed).
    cpu: Option<CpuUse>,
    error: Option<String>,
}

/// Every server in `servers` with at most `window` requests in flight:
/// all are started first, each is warmed up and sized, then their rounds
/// interleave (round 1 of each, then round 2 of each in the opposite
/// order, ...), so a slow spell of
/// the machine lands on every server alike rather than on whichever ran
/// then. Each server's median rate and rounds, or why it failed.
fn measure_all<'a>(
    servers: &mut [(&'a str, Command, bool)],
    window: u64,
    pinned: bool,
) -> Vec<(&'a str, Outcome)> {
    let base = if window == 1 { 2000 } else { 10_000 };
    let mut failed = Vec::new();
    // Children started while the driver is pinned inherit its CPU.
    let _pin = if pinned {
        match Pin::first_cpu() {
            Some(pin) => Some(pin),
            None => {
                return servers
                    .iter()
                    .map(|(name, _, _)| (*name, Err("cannot pin to one CPU here".to_owned())))
                    .collect();
            }
        }
    } else {
        None
    };
    let mut runs = Vec::new();
    for (name, command, content_length) in servers.iter_mut() {
        let name: &'a str = name;
        match Session::start(command, name == "echo", *content_length) {
            Ok(session) => {
                let done = watchdog(session.child.id());
                runs.push(Measured {
                    name,
                    session,
                    done,
                    count: base,
                    rates: Vec::new(),
                    cpu: Some(CpuUse::default()),
                    error: None,
                });
            }
            Err(error) => failed.push((name, Err(error))),
        }
    }
    for run in &mut runs {
        let sized = run.session.run(WARM_UP, window).and_then(|_| {
            let (answered, sizing) = run.session.run(base, window)?;
            let rate = answered as f64 / sizing.as_secs_f64().max(1e-9);
            Ok(((rate * ROUND_TIME.as_secs_f64()) as u64).clamp(base, MAX_ROUND))
        });
        match sized {
            Ok(count) => run.count = count,
            Err(error) => run.error = Some(error),
        }
    }
    for round in 0..ROUNDS {
        // Every other round backwards: a server's neighbour in time runs
        // before it in one round and after it in the next.
        let mut order: Vec<&mut Measured<'a>> = runs.iter_mut().collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for run in order.into_iter().filter(|run| run.error.is_none()) {
            let pid = run.session.child.id();
            let before = cpu_ticks(None).zip(cpu_ticks(Some(pid)));
            let mut answered = 0;
            match run.session.run(run.count, window) {
                Ok((done, elapsed)) => {
                    answered = done;
                    run.rates.push(done as f64 / elapsed.as_secs_f64());
                }
                Err(error) => run.error = Some(error),
            }
            let after = cpu_ticks(None).zip(cpu_ticks(Some(pid)));
            run.cpu = match (run.cpu, before, after) {
                (Some(sum), Some((driver0, server0)), Some((driver1, server1))) => Some(CpuUse {
                    driver: sum.driver
                        + (driver1.0 + driver1.1).saturating_sub(driver0.0 + driver0.1),
                    server_user: sum.server_user + server1.0.saturating_sub(server0.0),
                    server_system: sum.server_system + server1.1.saturating_sub(server0.1),
                    requests: sum.requests + answered,
                }),
                _ => None,
            };
        }
    }
    let mut results = failed;
    for run in runs {
        let _ = run.done.send(());
        run.session.stop();
        let outcome = match run.error {
            Some(error) => Err(error),
            None => Ok((median(run.rates.clone()), run.rates, run.cpu)),
        };
        results.push((run.name, outcome));
    }
    results
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    let cli = cli_binary();
    if !cli.exists() {
        eprintln!(
            "e2e: {} not found; build it (cargo build --profile bench -p evidence-wire-cli) or set EW_BENCH_CLI",
            cli.display()
        );
        std::process::exit(2);
    }
    // The validation log (on by default) goes to a scratch directory.
    let logs = std::env::temp_dir().join(format!("evidence-wire-e2e-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&logs);
    let serve = |extra: &[&str]| {
        let mut command = Command::new(&cli);
        command.arg("serve").args(extra).current_dir(&logs);
        command
    };
    // The canned server's answer: what `serve --no-log` answers to one request.
    let answer = logs.join("answer.json");
    let canned = Session::start(&mut serve(&["--no-log"]), false, false)
        .and_then(|mut session| {
            let answered = session.run(1, 1).map(|_| session.line.clone());
            session.stop();
            answered
        })
        .and_then(|line| std::fs::write(&answer, line).map_err(|error| error.to_string()));
    if let Err(error) = &canned {
        eprintln!("canned: no answer to replay: {error}");
    }
    // (name, command, framing: Content-Length?)
    let servers: Vec<(&str, Command, bool)> = vec![
        ("evidence-wire", serve(&["--no-log"]), false),
        ("evidence-wire-log", serve(&[]), false),
        ("evidence-wire-cl", serve(&["--no-log"]), true),
        ("evidence-wire-log-cl", serve(&[]), true),
        (
            "rmcp",
            Command::new(env!("CARGO_BIN_EXE_bench-rmcp-stdio")),
            false,
        ),
        (
            "rmcp-pipes",
            {
                let mut command = Command::new(env!("CARGO_BIN_EXE_bench-rmcp-stdio"));
                command.arg("--pipes");
                command
            },
            false,
        ),
        (
            "echo",
            Command::new(env!("CARGO_BIN_EXE_bench-echo")),
            false,
        ),
        (
            "canned",
            {
                let mut command = Command::new(env!("CARGO_BIN_EXE_bench-echo"));
                command.arg("--answer").arg(&answer);
                command
            },
            false,
        ),
    ];
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("results directory");
    let mut lines = String::new();
    let mut servers: Vec<_> = servers
        .into_iter()
        .filter(|(name, _, _)| filter.as_deref().is_none_or(|filter| name.contains(filter)))
        .collect();
    let only = std::env::var("EW_BENCH_E2E_ONLY").ok();
    let configurations =
        [(1u64, false), (64, false), (1, true)]
            .into_iter()
            .filter(|(window, pinned)| {
                let name = format!("{window}{}", if *pinned { "-pinned" } else { "" });
                only.as_deref()
                    .is_none_or(|only| only.split(',').any(|wanted| wanted.trim() == name))
            });
    for (window, pinned) in configurations {
        let how = if pinned { " (pinned)" } else { "" };
        for (name, outcome) in measure_all(&mut servers, window, pinned) {
            match outcome {
                Ok((median, rates, cpu)) => {
                    let cpu = cpu.and_then(|cpu| cpu.per_request());
                    eprintln!(
                        "{name:22} in flight {window:>2}{how:9}: {median:>10.0} requests/s (rounds {:?}){}",
                        rates.iter().map(|rate| rate.round()).collect::<Vec<_>>(),
                        cpu.map_or_else(String::new, |(driver, user, system)| format!(
                            "; CPU µs per request: driver {driver:.2}, server user {user:.2}, system {system:.2}"
                        ))
                    );
                    let mut row = serde_json::json!({"server": name, "in_flight": window, "pinned": pinned, "median_rps": median, "rounds": rates});
                    if let Some((driver, user, system)) = cpu {
                        row["cpu_us_per_request"] = serde_json::json!({"driver": driver, "server_user": user, "server_system": system});
                    }
                    lines.push_str(&row.to_string());
                    lines.push('\n');
                }
                Err(error) => eprintln!("{name} in flight {window}{how}: FAILED: {error}"),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&logs);
    let path = dir.join("e2e.jsonl");
    let mut file = std::fs::File::create(&path).expect("results file");
    file.write_all(lines.as_bytes()).expect("write results");
    eprintln!("e2e: wrote {}", path.display());
}
