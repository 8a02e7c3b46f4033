//! Framing throughput, ours against `lsp-server` (`Message::read`), on the
//! same deterministic, structured JSON-RPC messages (nested objects, numbers,
//! short strings) of about 100 B, 10 KB and 1 MB.
//!
//! What each side parses:
//! - `ours/frame`: Content-Length framing only (body located, zero-copy).
//! - `ours/frame+validate`: framing, then serde_json validates the body
//!   (`IgnoredAny`), the floor of any envelope parse.
//! - `lsp-server`: framing plus a full parse into `serde_json::Value`-based
//!   `Message`; it allocates the declared length up front and has no limits.
//!
//! Inputs are fed whole, in 4 KiB chunks and in 1-byte chunks (ours; lsp-server
//! reads from a `BufRead`, so chunking does not apply to it).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use evidence_wire::frame::{Decoder, Framing, Limits, encode};
use std::hint::black_box;

/// A deterministic `tools/call` message of roughly `target` bytes.
fn message(target: usize) -> Vec<u8> {
    let mut checks = Vec::new();
    let mut i = 0u64;
    loop {
        let item = serde_json::json!({
            "check_id": format!("check_{i}"),
            "params": {"path": format!("reports/{i}/summary.json"), "limit": i * 7 % 1000, "ratio": (i as f64) / 7.0},
            "tags": ["ci", "gate", format!("t{}", i % 13)],
            "nested": {"a": {"b": {"c": [i, i + 1, {"d": i % 2 == 0}]}}}
        });
        checks.push(item);
        i += 1;
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "evidence_query", "arguments": {"batch": checks}}
        });
        let bytes = serde_json::to_vec(&body).unwrap();
        if bytes.len() >= target || target < 200 {
            return bytes;
        }
    }
}

fn stream(body: &[u8], copies: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..copies {
        encode(Framing::ContentLength, body, &mut out).unwrap();
    }
    out
}

fn ours(input: &[u8], chunk: usize, validate: bool) -> usize {
    let limits = Limits {
        max_header_bytes: 8 * 1024,
        max_body_bytes: 2 * 1024 * 1024,
    };
    let mut decoder = Decoder::with_framing(Framing::ContentLength, limits);
    let mut frames = 0;
    for piece in input.chunks(chunk) {
        decoder.push(piece);
        while let Some(frame) = decoder.poll_frame() {
            let frame = frame.unwrap();
            if validate {
                serde_json::from_slice::<serde::de::IgnoredAny>(&frame.body).unwrap();
            }
            frames += 1;
        }
    }
    frames
}

fn lsp(input: &[u8]) -> usize {
    let mut reader = std::io::BufReader::new(input);
    let mut frames = 0;
    while let Some(message) = lsp_server::Message::read(&mut reader).unwrap() {
        black_box(message);
        frames += 1;
    }
    frames
}

fn bench(c: &mut Criterion) {
    for (label, size, copies) in [
        ("100B", 100, 1000),
        ("10KB", 10_000, 20),
        ("1MB", 1_000_000, 1),
    ] {
        let body = message(size);
        let input = stream(&body, copies);
        assert_eq!(ours(&input, usize::MAX, true), copies);
        assert_eq!(lsp(&input), copies);
        let mut group = c.benchmark_group(format!("frame/{label}"));
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.sample_size(20);
        for (name, chunk) in [("whole", usize::MAX), ("4KiB", 4096), ("1B", 1)] {
            if chunk == 1 && size > 10_000 {
                continue; // 1-byte feeding of 1 MB is covered by the 10 KB case
            }
            group.bench_with_input(BenchmarkId::new("ours/frame", name), &input, |b, i| {
                b.iter(|| ours(i, chunk, false))
            });
            group.bench_with_input(
                BenchmarkId::new("ours/frame+validate", name),
                &input,
                |b, i| b.iter(|| ours(i, chunk, true)),
            );
        }
        group.bench_with_input(
            BenchmarkId::new("lsp-server/read", "bufread"),
            &input,
            |b, i| b.iter(|| lsp(i)),
        );
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
