//! The checks of the `envelope` fuzz target, shared with
//! `core/tests/it/fuzz_corpus.rs` (which replays the corpus through
//! them).
//!
//! Envelope validation on raw bytes, under four policies (MCP, JSON-RPC with
//! batches of at most 8, strict with UUID ids, MCP with depth 4): never
//! panics, and always yields either messages or a canonical rejection
//! (`PARSE_ERROR` or `INVALID_ENVELOPE`) whose error response is JSON echoing
//! the rejection's id with the right code; a request's result echoes its id;
//! a batch is never empty nor over the policy's limit.

use evidence_wire::envelope::{Id, Incoming, Message, Policy, Rejection, encode_result, validate};
use evidence_wire::error::CanonicalError;
use serde_json::Value;

fn check_rejection(rejection: &Rejection) {
    assert!(matches!(
        rejection.error,
        CanonicalError::ParseError | CanonicalError::InvalidEnvelope
    ));
    let reply: Value = serde_json::from_slice(&rejection.to_response()).expect("JSON reply");
    let id = rejection.id.as_ref().map_or(Value::Null, Id::to_value);
    assert_eq!(reply["jsonrpc"], "2.0");
    assert_eq!(reply["id"], id);
    assert_eq!(reply["error"]["code"], rejection.error.jsonrpc_code());
}

/// Runs the checks on one input; panics when one fails.
pub fn run(data: &[u8]) {
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
