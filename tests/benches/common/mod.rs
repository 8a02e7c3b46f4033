//! Inputs shared by the benchmarks: deterministic, realistic, structured
//! JSON (nested objects, integers, decimals, short strings, a few escapes),
//! never one long padded string, which would flatter every parser.
//!
//! Everything here is generated from a fixed xorshift seed, so every run and
//! every peer sees the same bytes.

#![allow(dead_code)] // each bench uses a subset

/// A deterministic pseudo-random source (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `bound` (> 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    /// One of `words` (non-empty).
    pub fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        let at = self.below(words.len() as u64) as usize;
        words.get(at).copied().unwrap_or("x")
    }
}

const WORDS: &[&str] = &[
    "report", "build", "deploy", "release", "artifact", "scan", "policy", "stage", "main",
    "coverage", "license", "résumé", "naïve", "東京", "données", "config", "sbom", "unit",
];

/// One evidence record as compact JSON: members in a provider's order (not
/// sorted), integers, decimals, booleans, null, nested array and object,
/// and an escaped string one time in four.
pub fn record(rng: &mut Rng, out: &mut String) {
    use std::fmt::Write;
    let digest: String = (0..2).map(|_| format!("{:016x}", rng.next())).collect();
    let note = if rng.below(4) == 0 {
        format!("line one\\nline \\\"two\\\" \\u00e9 {}", rng.pick(WORDS))
    } else {
        format!("{} {} ok", rng.pick(WORDS), rng.pick(WORDS))
    };
    let tags: Vec<String> = (0..rng.below(4))
        .map(|_| format!("\"{}\"", rng.pick(WORDS)))
        .collect();
    let _ = write!(
        out,
        concat!(
            r#"{{"status":"{}","path":"{}/{}-{}.json","size":{},"sha256":"{}","#,
            r#""id":{},"passed":{},"ratio":{},"tags":[{}],"#,
            r#""owner":{{"team":"{}","oncall":null,"level":{}}},"note":"{}"}}"#
        ),
        if rng.below(5) == 0 {
            "failed"
        } else {
            "approved"
        },
        rng.pick(WORDS),
        rng.pick(WORDS),
        rng.below(100),
        rng.below(10_000_000_000),
        digest,
        rng.below(1_000_000),
        rng.below(2) == 0,
        rng.below(1_000_000) as f64 / 997.0,
        tags.join(","),
        rng.pick(WORDS),
        rng.below(5),
        note,
    );
}

/// An evidence value of about `target` bytes (at least one record): an
/// object holding an array of records.
pub fn evidence(target: usize) -> String {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = String::from(r#"{"provider":"file","check_id":"scan","records":["#);
    let close = r#"],"complete":true}"#;
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
    }
    out.push_str(close);
    out
}

/// A `tools/call evidence_query` request body of about `target` bytes
/// (compact, one line, no newline): the query's params carry an evidence
/// value of the remaining size. Below ~250 bytes the params are a small
/// flat object and the message is ~100 to 200 bytes.
pub fn request(target: usize) -> Vec<u8> {
    const SMALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"evidence_query","arguments":{"check_id":"time_now","n":1}}}"#;
    if target < 250 {
        return SMALL.as_bytes().to_vec();
    }
    let head = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"file","check_id":"scan","params":"#;
    let tail = r#"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","trigger_time":{"kind":"unix_millis","value":1710000000000}}}}}"#;
    let value = evidence(target.saturating_sub(head.len() + tail.len()));
    format!("{head}{value}{tail}").into_bytes()
}

/// A `tools/call evidence_query` request of about `target` bytes whose
/// evidence is a long array of small objects (`{"id":N,"ok":true,"n":N}`):
/// one opening bracket every ~25 bytes, so a 10 KB body holds several
/// hundred, more than the default depth limit of 128. Such a body takes the
/// exact depth scan of `envelope::validate`, which `request` bodies (about
/// one bracket per 80 bytes) skip; the instruction bench reports both.
pub fn dense_request(target: usize) -> Vec<u8> {
    let head = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"file","check_id":"scan","params":{"results":["#;
    let tail = r#"]}},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","trigger_time":{"kind":"unix_millis","value":1710000000000}}}}}"#;
    let mut rng = Rng(0x243f_6a88_85a3_08d3);
    let mut items = String::new();
    let mut index = 0u64;
    while head.len() + items.len() + tail.len() < target {
        if index > 0 {
            items.push(',');
        }
        items.push_str(&format!(
            r#"{{"id":{index},"ok":{},"n":{}}}"#,
            rng.below(2) == 0,
            rng.below(100_000)
        ));
        index += 1;
    }
    format!("{head}{items}{tail}").into_bytes()
}

/// The request of the end-to-end bench (`tests/benches/e2e.rs`) and of the
/// instruction bench's `serve` rows (`tests/benches/instructions.rs`): `tools/call
/// evidence_query` for the bundled `time_now` check with JSON-RPC id `id`,
/// Decision Gate's context, one line ending in a newline.
pub fn e2e_request(id: u64) -> String {
    format!(
        concat!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"evidence_query","#,
            r#""arguments":{{"query":{{"provider_id":"evidence-wire","check_id":"time_now"}},"#,
            r#""context":{{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","#,
            r#""stage_id":"st","trigger_id":"t","trigger_time":{{"kind":"unix_millis","value":1710000000000}},"#,
            r#""correlation_id":null}}}}}}}}"#,
            "\n"
        ),
        id
    )
}

/// The bytes `time_now` hashes for [`e2e_request`]: the canonical JSON of
/// its evidence value, the trigger time (Decision Gate hashes the inner
/// value, `spec/evidence.md`).
pub const E2E_EVIDENCE: &[u8] = b"1710000000000";

/// The sizes every table reports: label, target body size, messages per
/// iteration (so that one iteration is ~100 KB to 1 MB of input).
pub const SIZES: [(&str, usize, usize); 3] = [
    ("100B", 100, 1000),
    ("10KB", 10_000, 20),
    ("1MB", 1_000_000, 1),
];
