//! Peak memory (RSS high-water mark, `VmHWM`) under hostile input, ours
//! against `lsp-server`, each scenario in a fresh process (this binary
//! re-runs itself), so one scenario's peak cannot hide another's; the
//! high-water mark is reset (`/proc/self/clear_refs`) once the input is
//! generated, so "grown" is what the parser itself took.
//!
//! Scenarios (the input is generated on the fly by a `Read`, never held in
//! memory, so the peak is what the parser keeps):
//! - `huge-length`: `Content-Length: 268435456` (256 MiB), then 16 MiB of
//!   body and the end of input, read in 64 KiB pieces;
//! - `endless-header`: a header line of 64 MiB without a newline;
//! - `trickle`: one valid ~1 MB message delivered 1 byte per `read`.
//!
//! Ours: `frame::Decoder` with the default limits (8 KiB of headers, 1 MiB
//! of body), read through a fixed 64 KiB buffer, as the adapters do, and
//! `envelope::validate` on every frame. lsp-server: `Message::read` on a
//! `BufReader` (8 KiB), which also parses params into a `Value`.
//!
//! Output: a table on stderr and JSON lines in
//! `$EW_BENCH_RESULTS/hostile.jsonl` (default `target/bench-results`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

#[path = "common/mod.rs"]
mod common;

use std::io::{BufReader, Read, Write};
use std::path::PathBuf;
use std::process::Command;

use evidence_wire::envelope::{Policy, validate};
use evidence_wire::frame::{Decoder, Limits};

const CASE_ENV: &str = "EW_HOSTILE_CASE";
const DECLARED: u64 = 256 * 1024 * 1024;
const BODY_SENT: u64 = 16 * 1024 * 1024;
const HEADER_LINE: u64 = 64 * 1024 * 1024;

/// A generated stream: `prefix`, then `filler` repeated `fill` times, then
/// `suffix`; at most `chunk` bytes per `read`.
struct Generated {
    prefix: Vec<u8>,
    fill: u64,
    filler: u8,
    suffix: Vec<u8>,
    chunk: usize,
    at: u64,
}

impl Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = buf.len().min(self.chunk);
        let mut n = 0;
        while n < want {
            let prefix = self.prefix.len() as u64;
            let byte = if self.at < prefix {
                self.prefix[self.at as usize]
            } else if self.at < prefix + self.fill {
                self.filler
            } else if let Some(byte) = self.suffix.get((self.at - prefix - self.fill) as usize) {
                *byte
            } else {
                break;
            };
            buf[n] = byte;
            n += 1;
            self.at += 1;
        }
        Ok(n)
    }
}

fn scenario(name: &str) -> Generated {
    match name {
        "huge-length" => Generated {
            prefix: format!("Content-Length: {DECLARED}\r\n\r\n").into_bytes(),
            fill: BODY_SENT,
            filler: b' ',
            suffix: Vec::new(),
            chunk: 64 * 1024,
            at: 0,
        },
        "endless-header" => Generated {
            prefix: b"Content-Length: 2\r\nX-Padding: ".to_vec(),
            fill: HEADER_LINE,
            filler: b'a',
            suffix: Vec::new(),
            chunk: 64 * 1024,
            at: 0,
        },
        _ => {
            let body = common::request(1_000_000);
            Generated {
                prefix: format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes(),
                fill: 0,
                filler: b' ',
                suffix: body,
                chunk: 1,
                at: 0,
            }
        }
    }
}

/// `VmHWM` of this process, in KiB.
fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmHWM:")
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|kib| kib.parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Ours: returns (frames, errors) seen.
fn ours(mut input: Generated) -> (u64, u64) {
    let mut decoder = Decoder::new(Limits::default());
    let mut buffer = vec![0u8; 64 * 1024];
    let (mut frames, mut errors) = (0, 0);
    loop {
        let n = input.read(&mut buffer).expect("generated input");
        if n == 0 {
            if decoder.finish().is_err() {
                errors += 1;
            }
            break;
        }
        decoder.push(&buffer[..n]);
        while let Some(frame) = decoder.poll_frame() {
            match frame {
                Ok(frame) => {
                    // Like a server: the envelope is checked too.
                    let _ = std::hint::black_box(validate(&frame.body, &Policy::mcp()).is_ok());
                    frames += 1;
                }
                Err(error) => {
                    errors += 1;
                    if error.is_fatal() {
                        return (frames, errors);
                    }
                }
            }
        }
    }
    (frames, errors)
}

fn lsp(input: Generated) -> (u64, u64) {
    let mut reader = BufReader::new(input);
    let mut frames = 0;
    loop {
        match lsp_server::Message::read(&mut reader) {
            Ok(Some(_)) => frames += 1,
            Ok(None) => return (frames, 0),
            Err(_) => return (frames, 1),
        }
    }
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
        let (side, name) = spec.split_once('|').expect("side|scenario");
        let input = scenario(name);
        // Generating the input (the trickle's 1 MB message) raised the
        // high-water mark; reset it to the current RSS so the peak measured
        // is the parser's alone (Linux >= 4.0; if refused, `before` still
        // bounds what is attributed to the scenario).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let before = vm_hwm_kib();
        let (frames, errors) = if side == "ours" {
            ours(input)
        } else {
            lsp(input)
        };
        let after = vm_hwm_kib();
        println!("{before} {after} {frames} {errors}");
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("results directory");
    let mut lines = String::new();
    for name in ["huge-length", "endless-header", "trickle"] {
        for side in ["ours", "lsp-server"] {
            let output = Command::new(&exe)
                .env(CASE_ENV, format!("{side}|{name}"))
                .output()
                .expect("run a scenario");
            let text = String::from_utf8_lossy(&output.stdout);
            let fields: Vec<u64> = text
                .split_whitespace()
                .filter_map(|field| field.parse().ok())
                .collect();
            let [before, after, frames, errors] = fields[..] else {
                eprintln!("{side} {name}: no result ({})", output.status);
                continue;
            };
            let grown = after.saturating_sub(before);
            eprintln!(
                "{name:15} {side:11} peak {after:>8} KiB (start {before:>6} KiB, +{grown:>8} KiB), frames {frames}, errors {errors}"
            );
            lines.push_str(
                &serde_json::json!({
                    "scenario": name, "side": side, "start_kib": before, "peak_kib": after,
                    "grown_kib": grown, "frames": frames, "errors": errors,
                })
                .to_string(),
            );
            lines.push('\n');
        }
    }
    let path = dir.join("hostile.jsonl");
    let mut file = std::fs::File::create(&path).expect("results file");
    file.write_all(lines.as_bytes()).expect("write results");
    eprintln!("hostile: wrote {}", path.display());
}
