//! Envelope validation on raw bytes, under every policy: never panics, and
//! always yields either messages or a canonical rejection (`PARSE_ERROR` or
//! `INVALID_ENVELOPE`) whose error response is JSON echoing the rejection's id.
#![no_main]

use evidence_wire::envelope::{Id, Incoming, Message, Policy, Rejection, encode_result, validate};
use evidence_wire::error::CanonicalError;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

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

fuzz_target!(|data: &[u8]| {
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
});
