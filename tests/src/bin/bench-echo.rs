//! `bench-echo`: the floor of the end-to-end stdio benchmark. Copies stdin
//! to stdout as bytes arrive (one `read`, one `write`, no parsing), so a
//! driver that writes one request line gets the same line back: what a pipe
//! round trip between two processes costs with no protocol work at all.
//!
//! Limits: one 64 KiB buffer; ends at end of input or on the first write
//! error (the driver went away).

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

fn main() {
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
