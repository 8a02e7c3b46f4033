//! Framing and envelope throughput, ours against the peers, on the same
//! deterministic, structured `tools/call` bodies (see `common/mod.rs`) of
//! about 100 B (1000 per iteration), 10 KB (20) and 1 MB (1), fed whole, in
//! 4 KiB chunks and in 1-byte chunks.
//!
//! What each side parses (benchmark ids `<side>/<feeding>`):
//! - `ours-cl-frame`: Content-Length framing only (body located, zero-copy).
//! - `ours-cl-envelope`: Content-Length framing, then `envelope::validate`
//!   under `Policy::mcp()`: the message checked and split into id, method and
//!   raw (unparsed) params, which is all a server needs to dispatch.
//! - `ours-nd-envelope`: the same over newline-delimited framing.
//! - `lsp-server`: `Message::read` (Content-Length): framing plus a full
//!   parse into `serde_json::Value` params; allocates the declared length up
//!   front; reads from a `BufRead` fed by a reader returning at most
//!   `chunk` bytes per `read`.
//! - `rmcp`: rmcp's stdio codec `JsonRpcMessageCodec<ClientJsonRpcMessage>`
//!   (newline-delimited, tokio-util `Decoder`): framing plus a full typed
//!   parse (tool arguments into a `serde_json::Map`).
//! - `lines-serde`: tokio-util `LinesCodec` (UTF-8 checked `String` per line)
//!   + serde_json into `{id: Value, method: String, params: &RawValue}`, the
//!     same envelope split as ours, hand-rolled.
//! - `ignoredany/bodies`: serde_json validate-only (`IgnoredAny`) over the
//!   already-split bodies, no framing: the floor of any correct JSON parse
//!   (the ">= 70 %" reference).
//!
//! `e2e_floor`: two steps every correct server takes for the end-to-end
//! bench's request (`common::e2e_request`), timed alone in a hot loop:
//! `ignoredany/request` checks that the request is JSON at serde_json's
//! validate-only floor, `sha256/evidence` hashes the evidence `time_now`
//! answers it with (`common::E2E_EVIDENCE`, one SHA-256 block). With warm
//! caches and no framing, reading or answering, they are a lower bound on
//! a server's own work per request, which `bench-report` holds against
//! what the end-to-end floors leave for that work.
//!
//! Medians land in `target/criterion/frame_<size>/...` and
//! `target/criterion/e2e_floor/...`; `bench-report` turns them into ratios
//! in BENCHMARKS.md.

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

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use evidence_wire::frame::Framing;
use framing::{FEEDINGS, ignored_any, lines_serde, lsp, ours, rmcp_codec, stream};

fn bench(c: &mut Criterion) {
    for (label, size, copies) in common::SIZES {
        let body = common::request(size);
        let cl = stream(Framing::ContentLength, &body, copies);
        let nd = stream(Framing::NewlineDelimited, &body, copies);
        let bodies = vec![body.clone(); copies];
        // Every side must see every message, or the comparison is void.
        assert_eq!(ours(Framing::ContentLength, &cl, 4096, true), copies);
        assert_eq!(ours(Framing::NewlineDelimited, &nd, 4096, true), copies);
        assert_eq!(lsp(&cl, 4096), copies);
        assert_eq!(rmcp_codec(&nd, 4096), copies);
        assert_eq!(lines_serde(&nd, 4096), copies);
        eprintln!(
            "frame_{label}: body {} bytes x {copies}, {} bytes per iteration (Content-Length)",
            body.len(),
            cl.len()
        );

        let mut group = c.benchmark_group(format!("frame_{label}"));
        group.throughput(Throughput::Elements(copies as u64));
        group.sample_size(10);
        if size >= 1_000_000 {
            group.sampling_mode(SamplingMode::Flat);
        }
        for (feeding, chunk) in FEEDINGS {
            group.bench_with_input(BenchmarkId::new("ours-cl-frame", feeding), &cl, |b, i| {
                b.iter(|| ours(Framing::ContentLength, i, chunk, false))
            });
            group.bench_with_input(
                BenchmarkId::new("ours-cl-envelope", feeding),
                &cl,
                |b, i| b.iter(|| ours(Framing::ContentLength, i, chunk, true)),
            );
            group.bench_with_input(
                BenchmarkId::new("ours-nd-envelope", feeding),
                &nd,
                |b, i| b.iter(|| ours(Framing::NewlineDelimited, i, chunk, true)),
            );
            group.bench_with_input(BenchmarkId::new("lsp-server", feeding), &cl, |b, i| {
                b.iter(|| lsp(i, chunk))
            });
            group.bench_with_input(BenchmarkId::new("rmcp", feeding), &nd, |b, i| {
                b.iter(|| rmcp_codec(i, chunk))
            });
            group.bench_with_input(BenchmarkId::new("lines-serde", feeding), &nd, |b, i| {
                b.iter(|| lines_serde(i, chunk))
            });
        }
        group.bench_with_input(BenchmarkId::new("ignoredany", "bodies"), &bodies, |b, i| {
            b.iter(|| ignored_any(i))
        });
        group.finish();
    }

    let request = common::e2e_request(1);
    let request = request.trim_end().as_bytes();
    serde_json::from_slice::<serde::de::IgnoredAny>(request).expect("the e2e request is JSON");
    let mut group = c.benchmark_group("e2e_floor");
    group.throughput(Throughput::Elements(1));
    group.bench_with_input(
        BenchmarkId::new("ignoredany", "request"),
        request,
        |b, i| b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(i).is_ok()),
    );
    group.bench_with_input(
        BenchmarkId::new("sha256", "evidence"),
        common::E2E_EVIDENCE,
        |b, i| b.iter(|| <sha2::Sha256 as sha2::Digest>::digest(i)),
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
