//! Canonical JSON + SHA-256 of realistic evidence values at 100 B, 10 KB and
//! 1 MB: our streaming canonicalizer hashing straight into a `Sha256` sink,
//! against `serde_json_canonicalizer` (parse into a `serde_json::Value`,
//! `to_vec`, then `sha2`), against plain `sha2` over the same input bytes
//! (the floor: what hashing alone costs).
//!
//! Run: `cargo bench -p evidence-wire --bench canonical -- --warm-up-time 1 --measurement-time 3`.
//! The inputs are deterministic (a fixed xorshift seed), so runs compare.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use evidence_wire::canonical::{self, Options};
use sha2::Digest;

/// A deterministic pseudo-random source (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[self.below(words.len() as u64) as usize]
    }
}

const WORDS: &[&str] = &[
    "report", "build", "deploy", "release", "artifact", "scan", "policy", "stage", "main",
    "coverage", "license", "résumé", "naïve", "東京", "données", "config", "sbom", "unit",
];

/// One record of the kind a file or CI evidence provider returns: members
/// in the order a provider's struct writes them (not sorted), a few escapes,
/// integers, decimals, booleans, nulls, nested arrays and objects.
fn record(rng: &mut Rng, out: &mut String) {
    let id = rng.below(1_000_000);
    let size = rng.below(10_000_000_000);
    let ratio = rng.below(1_000_000) as f64 / 997.0;
    let digest: String = (0..4).map(|_| format!("{:016x}", rng.next())).collect();
    let path = format!(
        "{}/{}/{}-{}.json",
        rng.pick(WORDS),
        rng.pick(WORDS),
        rng.pick(WORDS),
        rng.below(100)
    );
    let note = if rng.below(4) == 0 {
        format!("line one\\nline \\\"two\\\" \\u00e9 {}", rng.pick(WORDS))
    } else {
        format!("{} {} ok", rng.pick(WORDS), rng.pick(WORDS))
    };
    let tags: Vec<String> = (0..rng.below(4))
        .map(|_| format!("\"{}\"", rng.pick(WORDS)))
        .collect();
    out.push_str(&format!(
        concat!(
            r#"{{"status":"{status}","path":"{path}","size":{size},"sha256":"{digest}","#,
            r#""id":{id},"passed":{passed},"ratio":{ratio},"modified_ms":{modified},"#,
            r#""tags":[{tags}],"owner":{{"team":"{team}","oncall":null,"level":{level}}},"#,
            r#""note":"{note}"}}"#
        ),
        status = if rng.below(5) == 0 {
            "failed"
        } else {
            "approved"
        },
        path = path,
        size = size,
        digest = digest,
        id = id,
        passed = rng.below(2) == 0,
        ratio = ratio,
        modified = 1_700_000_000_000 + rng.below(100_000_000_000),
        tags = tags.join(","),
        team = rng.pick(WORDS),
        level = rng.below(5),
        note = note,
    ));
}

/// Evidence of about `target` bytes: an envelope object with a records array.
fn evidence(target: usize) -> Vec<u8> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = String::from(r#"{"provider":"file","check_id":"scan","records":["#);
    let close = r#"],"complete":true,"count":0}"#;
    let mut first = true;
    loop {
        let mut one = String::new();
        record(&mut rng, &mut one);
        if !first && out.len() + one.len() + close.len() + 1 > target {
            break;
        }
        if !first {
            out.push(',');
        }
        out.push_str(&one);
        first = false;
        if out.len() + close.len() >= target {
            break;
        }
    }
    out.push_str(close);
    out.into_bytes()
}

/// A 100-byte value: a small flat object.
fn small() -> Vec<u8> {
    br#"{"status":"approved","count":42,"ratio":0.875,"root_id":"evidence-root","ok":true,"t":1710000000000}"#
        .to_vec()
}

fn ours(json: &[u8]) -> [u8; 32] {
    canonical::sha256(json, &Options::default()).expect("benchmark input is I-JSON")
}

fn serde_json_canonicalizer_sha2(json: &[u8]) -> [u8; 32] {
    let value: serde_json::Value = serde_json::from_slice(json).expect("benchmark input is JSON");
    let bytes = serde_json_canonicalizer::to_vec(&value).expect("canonicalizable");
    sha2::Sha256::digest(&bytes).into()
}

fn raw_sha2(json: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(json).into()
}

fn bench(c: &mut Criterion) {
    let inputs = [
        ("100B", small()),
        ("10KB", evidence(10 * 1024)),
        ("1MB", evidence(1024 * 1024)),
    ];
    let mut group = c.benchmark_group("canonical_sha256");
    for (name, json) in &inputs {
        // Both canonicalizers must produce the same hash, or the comparison
        // is meaningless.
        assert_eq!(ours(json), serde_json_canonicalizer_sha2(json), "{name}");
        group.throughput(Throughput::Bytes(json.len() as u64));
        group.bench_with_input(BenchmarkId::new("evidence_wire", name), json, |b, json| {
            b.iter(|| ours(black_box(json)))
        });
        group.bench_with_input(
            BenchmarkId::new("serde_json_canonicalizer+sha2", name),
            json,
            |b, json| b.iter(|| serde_json_canonicalizer_sha2(black_box(json))),
        );
        group.bench_with_input(BenchmarkId::new("raw_sha2", name), json, |b, json| {
            b.iter(|| raw_sha2(black_box(json)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
