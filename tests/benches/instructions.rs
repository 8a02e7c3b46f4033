//! Instruction counts (valgrind callgrind) of the framing and canonical
//! paths, ours against the peers: stable on a noisy, shared machine where
//! wall-clock timings drift.
//!
//! How: this binary re-runs itself under `valgrind --tool=callgrind` once
//! with a case's workload repeated 0 times and once repeated `K` times, and
//! reports `(total(K) - total(0)) / K` instructions per operation, so the
//! process start-up and the input generation cancel out. No extra tool to
//! install beyond valgrind (iai-callgrind would need its runner binary).
//!
//! Cases: framing + envelope of 1000 x ~100 B and 20 x ~10 KB messages fed
//! in 4 KiB chunks (the sides of `frame.rs`), and 20 x ~10 KB "dense"
//! messages (`common::dense_request`: more opening brackets than the depth
//! limit, so ours takes the exact depth scan); canonical JSON + SHA-256 of a
//! ~100 B and a ~10 KB evidence value (ours, serde_json_canonicalizer +
//! sha2, raw sha2 over the same bytes).
//!
//! And `serve` answering `time_now` (issue 25 target 4): the CLI binary
//! (`$EW_BENCH_CLI`, as `e2e.rs` finds it) under callgrind, driven one
//! request at a time, `(run of 2000 - run of 200) / 1800` per request,
//! counted in the io thread's loop, where every request is read, answered
//! and written, and wherever the validation log writes its records
//! (`Disk::write_batch`: the JSON lines, rotation and the `write`s, on the
//! log's writer thread or in a flush) (callgrind `--toggle-collect`);
//! once with `--no-log` (side `evidence-wire`) and once writing the
//! validation log (the default; side `evidence-wire-log`, into a scratch
//! directory under the results directory) for target 3.
//!
//! Output: a table on stderr and JSON lines in
//! `$EW_BENCH_RESULTS/instructions.jsonl` (default `target/bench-results`).
//! Without valgrind on PATH it says so and writes nothing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

#[path = "common/mod.rs"]
mod common;
#[path = "common/framing.rs"]
mod framing;

use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use evidence_wire::canonical::{self, Options};
use evidence_wire::frame::Framing;
use sha2::Digest;

const CASE_ENV: &str = "EW_CALLGRIND_CASE";
const REPEAT: u64 = 8;

/// (group, size label, side)
const CASES: &[(&str, &str, &str)] = &[
    ("frame+envelope", "100B", "ours-cl-envelope"),
    ("frame+envelope", "100B", "ours-nd-envelope"),
    ("frame+envelope", "100B", "lsp-server"),
    ("frame+envelope", "100B", "rmcp"),
    ("frame+envelope", "100B", "lines-serde"),
    ("frame+envelope", "100B", "ignoredany"),
    ("frame+envelope", "10KB", "ours-cl-frame"),
    ("frame+envelope", "10KB", "ours-cl-envelope"),
    ("frame+envelope", "10KB", "ours-nd-envelope"),
    ("frame+envelope", "10KB", "lsp-server"),
    ("frame+envelope", "10KB", "rmcp"),
    ("frame+envelope", "10KB", "lines-serde"),
    ("frame+envelope", "10KB", "ignoredany"),
    ("frame+envelope", "10KB-dense", "ours-cl-envelope"),
    ("frame+envelope", "10KB-dense", "lsp-server"),
    ("frame+envelope", "10KB-dense", "lines-serde"),
    ("frame+envelope", "10KB-dense", "ignoredany"),
    ("canonical+sha256", "100B", "ours"),
    ("canonical+sha256", "100B", "serde_json_canonicalizer+sha2"),
    ("canonical+sha256", "100B", "raw-sha2"),
    ("canonical+sha256", "10KB", "ours"),
    ("canonical+sha256", "10KB", "serde_json_canonicalizer+sha2"),
    ("canonical+sha256", "10KB", "raw-sha2"),
];

/// Runs one case `repeat` times (the child side).
fn run_case(group: &str, size: &str, side: &str, repeat: u64) {
    if group == "canonical+sha256" {
        let json = match size {
            "100B" => br#"{"status":"approved","count":42,"ratio":0.875,"root_id":"evidence-root","ok":true,"t":1710000000000}"#.to_vec(),
            _ => common::evidence(10 * 1024).into_bytes(),
        };
        for _ in 0..repeat {
            let digest: [u8; 32] = match side {
                "ours" => canonical::sha256(black_box(&json), &Options::default())
                    .expect("benchmark input is I-JSON"),
                "serde_json_canonicalizer+sha2" => {
                    let value: serde_json::Value =
                        serde_json::from_slice(black_box(&json)).expect("JSON");
                    let bytes = serde_json_canonicalizer::to_vec(&value).expect("canonical");
                    sha2::Sha256::digest(&bytes).into()
                }
                _ => sha2::Sha256::digest(black_box(&json)).into(),
            };
            black_box(digest);
        }
        return;
    }
    let (body, copies) = if size == "10KB-dense" {
        (common::dense_request(10_000), 20)
    } else {
        let (_, target, copies) = common::SIZES
            .iter()
            .copied()
            .find(|(label, _, _)| *label == size)
            .expect("known size");
        (common::request(target), copies)
    };
    let cl = framing::stream(Framing::ContentLength, &body, copies);
    let nd = framing::stream(Framing::NewlineDelimited, &body, copies);
    let bodies = vec![body; copies];
    for _ in 0..repeat {
        let seen = match side {
            "ours-cl-frame" => framing::ours(Framing::ContentLength, &cl, 4096, false),
            "ours-cl-envelope" => framing::ours(Framing::ContentLength, &cl, 4096, true),
            "ours-nd-envelope" => framing::ours(Framing::NewlineDelimited, &nd, 4096, true),
            "lsp-server" => framing::lsp(&cl, 4096),
            "rmcp" => framing::rmcp_codec(&nd, 4096),
            "lines-serde" => framing::lines_serde(&nd, 4096),
            _ => framing::ignored_any(&bodies),
        };
        assert_eq!(seen, copies, "{side} saw every message");
    }
}

/// Total instructions (`Ir`) of one callgrind run of this binary.
fn callgrind(case: &str, repeat: u64, out: &std::path::Path) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|error| format!("current_exe: {error}"))?;
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .env(CASE_ENV, format!("{case}|{repeat}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|error| format!("cannot run valgrind: {error}"))?;
    if !status.success() {
        return Err(format!("valgrind run of {case} failed: {status}"));
    }
    total_instructions(out)
}

/// The CLI binary: `$EW_BENCH_CLI`, or `evidence-wire` in this bench's
/// target profile directory (scripts/bench builds it).
fn cli_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("EW_BENCH_CLI") {
        // Relative to the workspace root (cargo runs benches in the package's directory).
        return Some(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(path));
    }
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("evidence-wire");
    path.exists().then_some(path)
}

/// Total instructions of `evidence-wire serve` under callgrind answering
/// `queries` `time_now` calls one at a time (newline-delimited, after the
/// MCP handshake), every answer checked; with `--no-log`, or writing the
/// validation log to `log_dir`.
fn serve_run(
    cli: &std::path::Path,
    queries: u64,
    out: &std::path::Path,
    log_dir: Option<&std::path::Path>,
) -> Result<u64, String> {
    use std::io::{BufRead, BufReader};
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        // Count the io thread's loop only (it reads, answers inline and
        // writes every request here): start-up and teardown are left
        // out by construction. Counting the whole process let a teardown
        // race into the figure: whichever thread lets go of the server
        // last frees its configuration (the docs index, ~4 M
        // instructions) unless the process exits first, which moved a
        // run by ~2 k per request.
        .arg("--toggle-collect=*::read_loop")
        // And the validation log's writing of the records the io thread
        // made (their JSON lines, rotation and `write`s), on its writer
        // thread or in the flush at the end: all of it, whoever writes
        // (counting the writer thread's loop instead left out the records
        // a final flush wrote, a varying share of the run, since the
        // writer thread formats them).
        .arg("--toggle-collect=*::write_batch")
        .arg(cli)
        .arg("serve");
    match log_dir {
        Some(dir) => command.arg("--log-dir").arg(dir),
        None => command.arg("--no-log"),
    };
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|error| format!("cannot run valgrind: {error}"))?;
    let mut input = child.stdin.take().ok_or("no stdin")?;
    let mut output = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    let mut exchange = |message: &str, answer: bool, line: &mut String| -> Result<(), String> {
        input
            .write_all(message.as_bytes())
            .and_then(|()| input.flush())
            .map_err(|error| format!("write: {error}"))?;
        if answer {
            line.clear();
            output
                .read_line(line)
                .map_err(|error| format!("read: {error}"))?;
        }
        Ok(())
    };
    exchange(
        concat!(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","#,
            r#""capabilities":{},"clientInfo":{"name":"instructions","version":"0"}}}"#,
            "\n"
        ),
        true,
        &mut line,
    )?;
    exchange(
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
        false,
        &mut line,
    )?;
    for id in 1..=queries {
        let request = common::e2e_request(id);
        exchange(&request, true, &mut line)?;
        if !line.contains("evidence_hash") || line.contains("\"isError\":true") {
            return Err(format!("unexpected answer: {}", line.trim_end()));
        }
    }
    drop(input);
    let status = child.wait().map_err(|error| format!("wait: {error}"))?;
    if !status.success() {
        return Err(format!("valgrind run of serve failed: {status}"));
    }
    total_instructions(out)
}

/// The instruction total callgrind wrote to `out`.
fn total_instructions(out: &std::path::Path) -> Result<u64, String> {
    let text =
        std::fs::read_to_string(out).map_err(|error| format!("{}: {error}", out.display()))?;
    text.lines()
        .find_map(|line| {
            line.strip_prefix("summary:")
                .or_else(|| line.strip_prefix("totals:"))
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|count| count.parse().ok())
        .ok_or_else(|| format!("no totals in {}", out.display()))
}

/// Instructions per `time_now` request of `serve` (issue 25 target 4):
/// (run of 2000 - run of 200) / 1800, so start-up cancels out. With
/// `log_dir`, the validation log is written there (emptied first and
/// after).
fn serve_per_request(
    out: &std::path::Path,
    log_dir: Option<&std::path::Path>,
) -> Result<u64, String> {
    let cli = cli_binary().ok_or("the CLI binary is not built (set EW_BENCH_CLI)")?;
    let run = |queries| {
        if let Some(dir) = log_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        serve_run(&cli, queries, out, log_dir)
    };
    let base = run(200)?;
    let total = run(2000)?;
    if base < 1_000_000 {
        return Err(format!(
            "only {base} instructions counted in the io thread's read_loop for 200 requests: was it inlined or renamed?"
        ));
    }
    if let Some(dir) = log_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(total.saturating_sub(base) / 1800)
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

fn main() {
    if let Ok(spec) = std::env::var(CASE_ENV) {
        let parts: Vec<&str> = spec.split('|').collect();
        let [group, size, side, repeat] = parts[..] else {
            panic!("bad {CASE_ENV}: {spec}");
        };
        run_case(group, size, side, repeat.parse().expect("repeat count"));
        return;
    }
    // `cargo bench` passes `--bench`; a filter argument selects cases.
    let filter: Option<String> = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("instructions: valgrind is not installed; skipped");
        return;
    }
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("results directory");
    let scratch = dir.join("callgrind.out");
    let mut lines = String::new();
    for (group, size, side) in CASES {
        let case = format!("{group}|{size}|{side}");
        if filter
            .as_deref()
            .is_some_and(|filter| !case.contains(filter))
        {
            continue;
        }
        let counts = callgrind(&case, 0, &scratch)
            .and_then(|base| callgrind(&case, REPEAT, &scratch).map(|total| (base, total)));
        match counts {
            Ok((base, total)) => {
                let per_op = total.saturating_sub(base) / REPEAT;
                eprintln!("{group:18} {size:5} {side:32} {per_op:>14} instructions/op");
                lines.push_str(
                    &serde_json::json!({"group": group, "size": size, "side": side, "instructions": per_op})
                        .to_string(),
                );
                lines.push('\n');
            }
            Err(error) => eprintln!("{group} {size} {side}: {error}"),
        }
    }
    let log_dir = dir.join("serve-validation-log");
    for (side, log_dir) in [
        ("evidence-wire", None),
        ("evidence-wire-log", Some(log_dir.as_path())),
    ] {
        let case = format!("serve|time_now|{side}");
        if filter
            .as_deref()
            .is_some_and(|filter| !case.contains(filter))
        {
            continue;
        }
        match serve_per_request(&scratch, log_dir) {
            Ok(per_request) => {
                eprintln!(
                    "{:18} {:5} {side:32} {per_request:>14} instructions/request",
                    "serve", "time_now"
                );
                lines.push_str(
                    &serde_json::json!({"group": "serve", "size": "time_now", "side": side, "instructions": per_request})
                        .to_string(),
                );
                lines.push('\n');
            }
            Err(error) => eprintln!("serve time_now {side}: {error}"),
        }
    }
    let _ = std::fs::remove_file(&scratch);
    let path = dir.join("instructions.jsonl");
    let mut file = std::fs::File::create(&path).expect("results file");
    file.write_all(lines.as_bytes()).expect("write results");
    eprintln!("instructions: wrote {}", path.display());
}
