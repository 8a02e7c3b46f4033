//! The 15 examples of JSON-RPC 2.0 section 7 (`core/tests/vectors/jsonrpc/spec_examples.json`),
//! answered by a tiny server built on `envelope::validate`, under the
//! `jsonrpc` policy (exact codes and ids against the file) and under `mcp`
//! and `strict` (their own outcomes, asserted here).

use evidence_wire::envelope::{
    Id, Incoming, Message, Policy, Rejection, Request, encode_batch, encode_error, encode_result,
    validate,
};
use evidence_wire::error::CanonicalError;
use serde_json::{Value, json};

fn examples() -> Vec<Value> {
    let path = crate::vectors_dir().join("jsonrpc/spec_examples.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let file: Value = serde_json::from_str(&text).unwrap();
    let examples = file["examples"].as_array().unwrap().clone();
    assert_eq!(examples.len(), 15, "the spec has 15 examples");
    examples
}

/// The methods the spec's examples assume.
fn answer(request: &Request<'_>) -> Vec<u8> {
    let params: Value = request.parse_params().unwrap().unwrap_or(Value::Null);
    let result = match (request.method.as_ref(), &params) {
        ("subtract", Value::Array(args)) => {
            json!(args[0].as_i64().unwrap() - args[1].as_i64().unwrap())
        }
        ("subtract", Value::Object(args)) => {
            json!(args["minuend"].as_i64().unwrap() - args["subtrahend"].as_i64().unwrap())
        }
        ("sum", Value::Array(args)) => json!(args.iter().map(|v| v.as_i64().unwrap()).sum::<i64>()),
        ("get_data", _) => json!(["hello", 5]),
        _ => {
            return encode_error(
                Some(&request.id),
                CanonicalError::MethodNotFound,
                Some("no such method"),
            );
        }
    };
    encode_result(&request.id, &result).unwrap()
}

fn reply_to(entry: Result<Message<'_>, Rejection>) -> Option<Vec<u8>> {
    match entry {
        Ok(Message::Request(request)) => Some(answer(&request)),
        Ok(Message::Notification(_)) => None,
        Ok(Message::Response(_)) => panic!("the examples hold no responses"),
        Err(rejection) => {
            assert!(rejection.answerable, "{rejection}");
            Some(rejection.to_response())
        }
    }
}

/// What the server sends for one frame body: `None` = nothing at all.
fn serve(body: &str, policy: &Policy) -> Option<Value> {
    let bytes = match validate(body.as_bytes(), policy) {
        Err(rejection) => Some(rejection.to_response()),
        Ok(Incoming::Single(message)) => reply_to(Ok(message)),
        Ok(incoming @ Incoming::Batch(_)) => {
            let needs_reply = incoming.needs_reply();
            let Incoming::Batch(entries) = incoming else {
                unreachable!()
            };
            let replies: Vec<Vec<u8>> = entries.into_iter().filter_map(reply_to).collect();
            let joined = encode_batch(&replies);
            assert_eq!(needs_reply, joined.is_some());
            joined
        }
    };
    bytes.map(|bytes| {
        assert!(!bytes.contains(&b'\n'), "compact output");
        serde_json::from_slice(&bytes).unwrap()
    })
}

/// Keeps what is normative: jsonrpc, id, result, error.code; also checks
/// that `error.data.request_id` mirrors the id.
fn normalize(response: &Value) -> Value {
    let object = response.as_object().expect("a response object");
    assert_eq!(object["jsonrpc"], "2.0");
    let id = object
        .get("id")
        .cloned()
        .expect("every response has an id member");
    match (object.get("result"), object.get("error")) {
        (Some(result), None) => json!({"id": id, "result": result}),
        (None, Some(error)) => {
            if let Some(data) = error.get("data") {
                assert_eq!(data["request_id"], id, "data.request_id mirrors the id");
            }
            assert!(error["message"].is_string());
            json!({"id": id, "code": error["code"]})
        }
        other => panic!("not a response: {other:?}"),
    }
}

/// Normalizes a reply; a batch becomes a sorted list (order is not significant).
fn normalize_reply(reply: &Value) -> Value {
    match reply {
        Value::Array(items) => {
            let mut items: Vec<Value> = items.iter().map(normalize).collect();
            items.sort_by_key(|item| item.to_string());
            Value::Array(items)
        }
        single => normalize(single),
    }
}

#[test]
fn all_fifteen_examples_under_the_jsonrpc_policy() {
    for example in examples() {
        let name = example["id"].as_str().unwrap();
        let request = example["request"].as_str().unwrap();
        let actual = serve(request, &Policy::jsonrpc());
        let expected = example["expected_response"]
            .as_str()
            .map(|text| serde_json::from_str::<Value>(text).unwrap());
        match (&actual, &expected) {
            (None, None) => {}
            (Some(actual), Some(expected)) => {
                assert_eq!(normalize_reply(actual), normalize_reply(expected), "{name}");
                // The codes, in the file's own list, are exactly those sent.
                let mut codes: Vec<i64> = match actual {
                    Value::Array(items) => items
                        .iter()
                        .filter_map(|i| i["error"]["code"].as_i64())
                        .collect(),
                    single => single["error"]["code"].as_i64().into_iter().collect(),
                };
                let mut listed: Vec<i64> = example["expected_error_codes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_i64().unwrap())
                    .collect();
                codes.sort();
                listed.sort();
                assert_eq!(codes, listed, "{name}");
            }
            _ => panic!("{name}: got {actual:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn jsonrpc_policy_message_kinds() {
    let examples = examples();
    let body = |name: &str| {
        examples.iter().find(|e| e["id"] == name).unwrap()["request"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let policy = Policy::jsonrpc();
    let text = body("positional_1");
    let Ok(Incoming::Single(Message::Request(request))) = validate(text.as_bytes(), &policy) else {
        panic!("positional_1 is a request")
    };
    assert_eq!(request.id, Id::Number(1));
    assert_eq!(request.params.unwrap().get(), "[42, 23]");
    let text = body("method_not_found");
    let Ok(Incoming::Single(Message::Request(request))) = validate(text.as_bytes(), &policy) else {
        panic!("method_not_found is a request")
    };
    assert_eq!(request.id, Id::String("1".into()));
    let text = body("notification_2");
    assert!(matches!(
        validate(text.as_bytes(), &policy),
        Ok(Incoming::Single(Message::Notification(n))) if n.method == "foobar" && n.params.is_none()
    ));
    let text = body("batch_all_notifications");
    let incoming = validate(text.as_bytes(), &policy).unwrap();
    assert!(!incoming.needs_reply());
    let Incoming::Batch(entries) = incoming else {
        panic!("a batch")
    };
    assert_eq!(entries.len(), 2);
    let text = body("batch_mixed");
    let Ok(Incoming::Batch(entries)) = validate(text.as_bytes(), &policy) else {
        panic!()
    };
    assert_eq!(entries.len(), 6);
    let rejection = entries[3].as_ref().unwrap_err();
    assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
    assert_eq!(rejection.id, None);
    assert!(
        rejection.detail.starts_with("batch entry 3:"),
        "{}",
        rejection.detail
    );
    for (name, code) in [
        ("invalid_json", -32700),
        ("batch_invalid_json", -32700),
        ("batch_empty", -32600),
        ("invalid_request_object", -32600),
    ] {
        let text = body(name);
        let rejection = validate(text.as_bytes(), &policy).unwrap_err();
        assert_eq!(rejection.error.jsonrpc_code(), code, "{name}");
        assert_eq!(rejection.id, None, "{name}");
    }
}

/// What a policy other than `jsonrpc` answers to each example.
enum Expect {
    /// No reply at all.
    Nothing,
    /// A success result with this id.
    Result(Value, Value),
    /// An error with this code and id.
    Error(i64, Value),
}

fn check_policy(policy: &Policy, table: &[(&str, Expect)]) {
    let examples = examples();
    assert_eq!(
        table.len(),
        examples.len(),
        "every example has an expectation"
    );
    for (name, expect) in table {
        let example = examples
            .iter()
            .find(|e| e["id"] == *name)
            .unwrap_or_else(|| panic!("{name}"));
        let actual =
            serve(example["request"].as_str().unwrap(), policy).map(|r| normalize_reply(&r));
        let expected = match expect {
            Expect::Nothing => None,
            Expect::Result(result, id) => Some(json!({"id": id, "result": result})),
            Expect::Error(code, id) => Some(json!({"id": id, "code": code})),
        };
        assert_eq!(actual, expected, "{name}");
    }
}

#[test]
fn examples_under_the_mcp_policy() {
    use Expect::*;
    check_policy(
        &Policy::mcp(),
        &[
            // Positional (array) params are not MCP: rejected, id echoed.
            ("positional_1", Error(-32600, json!(1))),
            ("positional_2", Error(-32600, json!(2))),
            ("named_1", Result(json!(19), json!(3))),
            ("named_2", Result(json!(19), json!(4))),
            // A malformed notification is answered with id null.
            ("notification_1", Error(-32600, Value::Null)),
            ("notification_2", Nothing),
            ("method_not_found", Error(-32601, json!("1"))),
            ("invalid_json", Error(-32700, Value::Null)),
            ("invalid_request_object", Error(-32600, Value::Null)),
            // Not JSON comes first, batch or not.
            ("batch_invalid_json", Error(-32700, Value::Null)),
            // MCP has no batches: every array is one -32600.
            ("batch_empty", Error(-32600, Value::Null)),
            ("batch_invalid_not_empty", Error(-32600, Value::Null)),
            ("batch_invalid", Error(-32600, Value::Null)),
            ("batch_mixed", Error(-32600, Value::Null)),
            ("batch_all_notifications", Error(-32600, Value::Null)),
        ],
    );
}

#[test]
fn examples_under_the_strict_policy() {
    use Expect::*;
    check_policy(
        &Policy::strict(),
        &[
            // Integer ids are refused (echoed, since they were readable).
            ("positional_1", Error(-32600, json!(1))),
            ("positional_2", Error(-32600, json!(2))),
            ("named_1", Error(-32600, json!(3))),
            ("named_2", Error(-32600, json!(4))),
            // No id: strict requires one.
            ("notification_1", Error(-32600, Value::Null)),
            ("notification_2", Error(-32600, Value::Null)),
            // String id, but params are required.
            ("method_not_found", Error(-32600, json!("1"))),
            ("invalid_json", Error(-32700, Value::Null)),
            ("invalid_request_object", Error(-32600, Value::Null)),
            ("batch_invalid_json", Error(-32700, Value::Null)),
            ("batch_empty", Error(-32600, Value::Null)),
            ("batch_invalid_not_empty", Error(-32600, Value::Null)),
            ("batch_invalid", Error(-32600, Value::Null)),
            ("batch_mixed", Error(-32600, Value::Null)),
            ("batch_all_notifications", Error(-32600, Value::Null)),
        ],
    );
}

#[test]
fn strict_accepts_the_seed_contract_and_checks_uuids_when_deterministic() {
    let good = br#"{"jsonrpc":"2.0","id":"6f1c2a9e-3b7d-4c1e-9a2f-0d4b5e6f7a8b","method":"tools/call","params":{}}"#;
    let text_id = br#"{"jsonrpc":"2.0","id":"call-1","method":"tools/call","params":{}}"#;
    assert!(matches!(
        validate(good, &Policy::strict()),
        Ok(Incoming::Single(Message::Request(_)))
    ));
    assert!(matches!(
        validate(text_id, &Policy::strict()),
        Ok(Incoming::Single(Message::Request(_)))
    ));
    let deterministic = Policy::strict().uuid_ids(true);
    assert!(validate(good, &deterministic).is_ok());
    let rejection = validate(text_id, &deterministic).unwrap_err();
    assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
    assert_eq!(rejection.id, Some(Id::String("call-1".into())));
    assert!(rejection.detail.contains("UUID"), "{}", rejection.detail);
}
