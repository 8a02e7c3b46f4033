//! Replays the checked-in corpus of the `envelope` fuzz target
//! (`fuzz/corpus/envelope/`) through the target's own checks
//! (`fuzz/fuzz_targets/common/envelope.rs`), so
//! `cargo test` guards every input a fuzzer has found, and pins the outcome
//! of a few named seeds.

#[path = "../../fuzz/fuzz_targets/common/envelope.rs"]
mod checks;

use evidence_wire::envelope::{Id, Incoming, Message, Policy, validate};
use evidence_wire::error::CanonicalError;
use std::path::Path;

fn corpus_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/envelope")
}

#[test]
fn envelope_corpus_replays() {
    let dir = corpus_dir();
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        checks::run(&std::fs::read(&path).unwrap());
        count += 1;
    }
    assert!(
        count >= 60,
        "the seeds: 15 JSON-RPC examples, MCP messages, hostile cases"
    );
}

#[test]
fn named_seeds_have_their_outcomes() {
    let read = |name: &str| std::fs::read(corpus_dir().join(name)).unwrap();
    let mcp = Policy::mcp();
    let code = |name: &str, policy: &Policy| validate(&read(name), policy).err().map(|r| r.error);
    assert_eq!(
        code("deep_129", &mcp),
        Some(CanonicalError::InvalidEnvelope)
    );
    assert_eq!(
        code("deep_open_brackets", &Policy::jsonrpc()),
        Some(CanonicalError::InvalidEnvelope)
    );
    assert_eq!(
        code("duplicate_id", &mcp),
        Some(CanonicalError::InvalidEnvelope)
    );
    assert_eq!(code("invalid_utf8", &mcp), Some(CanonicalError::ParseError));
    assert_eq!(code("empty", &mcp), Some(CanonicalError::ParseError));
    // The frame layer strips a BOM; a body that still has one is not JSON.
    assert_eq!(code("bom_prefixed", &mcp), Some(CanonicalError::ParseError));
    assert_eq!(code("strict_uuid", &Policy::strict().uuid_ids(true)), None);
    assert_eq!(code("mcp_call-tool-request", &mcp), None);
    // DG's real first message (the body of its first frame) is a request.
    let dg_first = read("dg_first_message");
    let Ok(Incoming::Single(Message::Request(first))) = validate(&dg_first, &mcp) else {
        panic!("dg_first_message is a request")
    };
    assert_eq!(first.method, "tools/call");
    assert_eq!(first.id, Id::from(1_i64));
    let escaped = read("escaped_strings");
    let Ok(Incoming::Single(Message::Request(request))) = validate(&escaped, &mcp) else {
        panic!("escaped_strings is a request")
    };
    assert_eq!(request.id, Id::from("a\"b\u{1f600}"));
    assert_eq!(request.method, "t/x");
    // A lone surrogate is not a readable string id.
    let rejection = validate(&read("lone_surrogate"), &mcp).unwrap_err();
    assert!(matches!(
        rejection.error,
        CanonicalError::InvalidEnvelope | CanonicalError::ParseError
    ));
    assert_eq!(rejection.id, None);
}
