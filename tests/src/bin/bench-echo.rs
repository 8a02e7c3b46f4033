//! `bench-echo`: the floors of the end-to-end stdio benchmark.
//!
//! - `bench-echo` copies stdin to stdout as bytes arrive (one `read`, one
//!   `write`, no parsing), so a driver that writes one request line gets the
//!   same line back: what a pipe round trip between two processes costs with
//!   no protocol work at all.
//! - `bench-echo --answer FILE` answers every input line that has an
//!   `"id":` followed by digits with FILE's bytes (one answer line, as
//!   `evidence-wire serve` wrote it), the request's id spliced in place of
//!   the answer's own; lines without one (notifications) get no answer. It
//!   reads, finds line ends and ids (memchr), and writes every answer a read
//!   completed in one `write`: what a round trip costs a server that already
//!   knows the answer, so it moves our answer's bytes and does no other
//!   work. The benchmark gives it `serve`'s real answer to `time_now`: its
//!   time per request is the floor for any server answering that request.
//!
//! Limits: reads 64 KiB at a time; a line without its end is kept until the
//! end arrives (the driver sends whole lines), up to 16 MiB (then exit 2). Ends at end of input or on the
//! first write error (the driver went away); `--answer` exits with 2 when
//! FILE cannot be read or has no `"id":` with digits.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

// The benchmarks give every program the allocator the `evidence-wire`
// binary links (adapters/cli/src/main.rs): the comparison is of the
// protocol code, not of malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{Read, Write};

const ID: &[u8] = b"\"id\":";
/// The longest line `--answer` keeps while waiting for its end.
const MAX_LINE: usize = 16 * 1024 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => echo(),
        [flag, file] if flag == "--answer" => {
            let answer = std::fs::read(file).unwrap_or_else(|error| {
                eprintln!("bench-echo: cannot read {file}: {error}");
                std::process::exit(2)
            });
            let Some((before, after)) = split_at_id(&answer) else {
                eprintln!("bench-echo: {file} has no \"id\": with digits");
                std::process::exit(2)
            };
            canned(before, after);
        }
        _ => {
            eprintln!("usage: bench-echo [--answer FILE]");
            std::process::exit(2)
        }
    }
}

fn echo() {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match input.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let Some(bytes) = buffer.get(..n) else { return };
        if output
            .write_all(bytes)
            .and_then(|()| output.flush())
            .is_err()
        {
            return;
        }
    }
}

/// Where the digits after the first `"id":` are: (start, end).
fn id_digits(bytes: &[u8]) -> Option<(usize, usize)> {
    let start = memchr::memmem::find(bytes, ID)? + ID.len();
    let length = bytes[start..]
        .iter()
        .take_while(|byte| byte.is_ascii_digit())
        .count();
    (length > 0).then_some((start, start + length))
}

/// The answer around its id's digits.
fn split_at_id(answer: &[u8]) -> Option<(&[u8], &[u8])> {
    let (start, end) = id_digits(answer)?;
    Some((&answer[..start], &answer[end..]))
}

fn canned(before: &[u8], after: &[u8]) {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut answers: Vec<u8> = Vec::new();
    loop {
        let n = match input.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buffer[..n]);
        let mut start = 0;
        while let Some(end) = memchr::memchr(b'\n', &pending[start..]) {
            let line = &pending[start..start + end];
            if let Some((from, to)) = id_digits(line) {
                answers.extend_from_slice(before);
                answers.extend_from_slice(&line[from..to]);
                answers.extend_from_slice(after);
            }
            start += end + 1;
        }
        pending.drain(..start);
        if pending.len() > MAX_LINE {
            eprintln!("bench-echo: a line of over {MAX_LINE} bytes without its end");
            std::process::exit(2)
        }
        if !answers.is_empty() {
            if output
                .write_all(&answers)
                .and_then(|()| output.flush())
                .is_err()
            {
                return;
            }
            answers.clear();
        }
    }
}
