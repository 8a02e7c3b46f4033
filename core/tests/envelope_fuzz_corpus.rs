//! Replays the checked-in corpus of the `envelope` fuzz target
//! (`fuzz/corpus/envelope/`) with the same checks the target makes, so
//! `cargo test` guards every input a fuzzer has found, and pins the outcome
//! of a few named seeds.

use evidence_wire::envelope::{Id, Incoming, Message, Policy, Rejection, encode_result, validate};
use evidence_wire::error::CanonicalError;
use serde_json::Value;
use std::path::Path;

fn check_rejection(rejection: &Rejection) {
    assert!(matches!(
        rejection.error,
        CanonicalError::ParseError | CanonicalError::InvalidEnvelope
    ));
    let reply: Value = serde_json::from_slice(&rejection.to_response()).expect("JSON reply");
    let id = rejection.id.as_ref().map_or(Value::Null, Id::to_value);
    assert_eq!(reply["id"], id);
    assert_eq!(reply["error"]["code"], rejection.error.jsonrpc_code());
}

/// The fuzz target's body.
fn run(data: &[u8]) {
    for policy in [
        Policy::mcp(),
        Policy::jsonrpc().max_batch_len(8),
        Policy::strict().uuid_ids(true),
        Policy::mcp().max_depth(4),
    ] {
        match validate(data, &policy) {
            Ok(Incoming::Single(Message::Request(request))) => {
                let reply = encode_result(&request.id, &0).expect("a result encodes");
                let reply: Value = serde_json::from_slice(&reply).expect("JSON reply");
                assert_eq!(reply["id"], request.id.to_value());
            }
            Ok(Incoming::Single(_)) => {}
            Ok(Incoming::Batch(entries)) => {
                assert!(!entries.is_empty() && entries.len() <= policy.batch_len_limit());
                for rejection in entries.iter().filter_map(|entry| entry.as_ref().err()) {
                    assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
                    check_rejection(rejection);
                }
            }
            Err(rejection) => check_rejection(&rejection),
        }
    }
}

fn corpus_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/envelope")
}

#[test]
fn envelope_corpus_replays() {
    let dir = corpus_dir();
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        run(&std::fs::read(&path).unwrap());
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
