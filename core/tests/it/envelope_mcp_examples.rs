//! The official MCP example messages (`core/tests/vectors/mcp/schema/2026-07-28/examples/`)
//! through `envelope::validate`.
//!
//! Every example that is a whole JSON-RPC message (it has a `jsonrpc` member)
//! must parse as the kind its folder names: `*Request` → request,
//! `*Notification` → notification, `*ResultResponse` → success response,
//! `*Error` → error response, with the file's own id, method, code. The
//! 2026-07-28 schema also shows server-to-client requests in their embedded
//! form (inside `InputRequests`, no `jsonrpc`, sometimes no `id`): those are
//! not envelopes and must be rejected as `INVALID_ENVELOPE`, answered with the
//! id when one was readable. Bare error objects (`{code, message, data?}`)
//! must read as the `error` member of an error response.

use evidence_wire::envelope::{Id, Incoming, Message, Policy, validate};
use evidence_wire::error::CanonicalError;
use serde_json::{Value, json};

/// (folder, file name, raw text, parsed JSON) for every example, sorted.
fn examples() -> Vec<(String, String, String, Value)> {
    let root = crate::vectors_dir().join("mcp/schema/2026-07-28/examples");
    let mut out = Vec::new();
    for folder in std::fs::read_dir(&root).unwrap_or_else(|e| panic!("{root:?}: {e}")) {
        let folder = folder.unwrap().path();
        let folder_name = folder.file_name().unwrap().to_string_lossy().into_owned();
        for file in std::fs::read_dir(&folder).unwrap() {
            let file = file.unwrap().path();
            let text = std::fs::read_to_string(&file).unwrap();
            let value: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file:?}: {e}"));
            let file_name = file.file_name().unwrap().to_string_lossy().into_owned();
            out.push((folder_name.clone(), file_name, text, value));
        }
    }
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert!(
        out.len() >= 120,
        "the vector set holds 129 examples, found {}",
        out.len()
    );
    out
}

/// The JSON value of an envelope id.
fn id_json(id: &Id<'_>) -> Value {
    id.to_value()
}

#[derive(Default, Debug)]
struct Counts {
    requests: usize,
    notifications: usize,
    results: usize,
    errors: usize,
    embedded: usize,
    bare_errors: usize,
}

#[test]
fn whole_messages_parse_as_the_kind_their_folder_names() {
    let mut counts = Counts::default();
    let policy = Policy::mcp();
    for (folder, file, text, value) in examples() {
        let name = format!("{folder}/{file}");
        let Some(object) = value.as_object() else {
            continue;
        };
        if !object.contains_key("jsonrpc") {
            continue;
        }
        let incoming = validate(text.as_bytes(), &policy)
            .unwrap_or_else(|rejection| panic!("{name}: rejected: {rejection}"));
        let Incoming::Single(message) = incoming else {
            panic!("{name}: not a single message")
        };
        match message {
            Message::Request(request) => {
                assert!(folder.ends_with("Request"), "{name} parsed as a request");
                assert_eq!(id_json(&request.id), object["id"], "{name}");
                assert_eq!(request.method, object["method"].as_str().unwrap(), "{name}");
                let params: Value = request.parse_params().unwrap().unwrap_or(Value::Null);
                assert_eq!(
                    params,
                    object.get("params").cloned().unwrap_or(Value::Null),
                    "{name}"
                );
                counts.requests += 1;
            }
            Message::Notification(notification) => {
                assert!(
                    folder.ends_with("Notification"),
                    "{name} parsed as a notification"
                );
                assert!(!object.contains_key("id"), "{name}");
                assert_eq!(
                    notification.method,
                    object["method"].as_str().unwrap(),
                    "{name}"
                );
                counts.notifications += 1;
            }
            Message::Response(response) => {
                assert_eq!(id_json(&response.id), object["id"], "{name}");
                match response.outcome {
                    Ok(result) => {
                        assert!(
                            folder.ends_with("ResultResponse"),
                            "{name} parsed as a result"
                        );
                        let result: Value = serde_json::from_str(result.get()).unwrap();
                        assert_eq!(result, object["result"], "{name}");
                        counts.results += 1;
                    }
                    Err(error) => {
                        assert!(folder.ends_with("Error"), "{name} parsed as an error");
                        assert_eq!(
                            error.code,
                            object["error"]["code"].as_i64().unwrap(),
                            "{name}"
                        );
                        assert_eq!(error.message, object["error"]["message"].as_str().unwrap());
                        assert_eq!(error.data.is_some(), object["error"].get("data").is_some());
                        counts.errors += 1;
                    }
                }
            }
        }
    }
    // Every folder of the set that names a whole message was seen.
    assert_eq!(counts.requests, 10, "{counts:?}");
    assert_eq!(counts.notifications, 8, "{counts:?}");
    assert_eq!(counts.results, 11, "{counts:?}");
    assert_eq!(counts.errors, 3, "{counts:?}");
}

#[test]
fn whole_messages_under_the_jsonrpc_and_strict_policies() {
    for (folder, file, text, value) in examples() {
        let name = format!("{folder}/{file}");
        let Some(object) = value.as_object() else {
            continue;
        };
        if !object.contains_key("jsonrpc") {
            continue;
        }
        // JSON-RPC is a superset of MCP here: everything parses.
        assert!(
            validate(text.as_bytes(), &Policy::jsonrpc()).is_ok(),
            "{name}"
        );
        let strict = validate(text.as_bytes(), &Policy::strict());
        let is_call = object.contains_key("method");
        let has_string_id = object.get("id").is_some_and(Value::is_string);
        if is_call && has_string_id && object.get("params").is_some_and(Value::is_object) {
            assert!(
                matches!(strict, Ok(Incoming::Single(Message::Request(_)))),
                "{name}: strict accepts a request with a string id and params"
            );
        } else if is_call {
            // Notifications (no id) are refused by strict; answered with id null.
            let rejection = strict.expect_err(&name);
            assert_eq!(rejection.error, CanonicalError::InvalidEnvelope, "{name}");
            assert!(rejection.answerable, "{name}");
            assert_eq!(rejection.id, None, "{name}");
        } else if has_string_id {
            assert!(strict.is_ok(), "{name}: a response with a string id");
        } else {
            // The error examples use integer ids, which strict refuses; a
            // broken response is logged, never answered.
            let rejection = strict.expect_err(&name);
            assert!(!rejection.answerable, "{name}");
        }
        // Deterministic ids: none of the example ids is a UUID.
        if is_call && has_string_id {
            let rejection =
                validate(text.as_bytes(), &Policy::strict().uuid_ids(true)).expect_err(&name);
            assert_eq!(
                rejection.id.map(|id| id.to_value()),
                Some(object["id"].clone())
            );
        }
    }
}

#[test]
fn embedded_requests_are_not_envelopes() {
    let mut counts = Counts::default();
    for (folder, file, text, value) in examples() {
        let name = format!("{folder}/{file}");
        let Some(object) = value.as_object() else {
            continue;
        };
        if !folder.ends_with("Request") || object.contains_key("jsonrpc") {
            continue;
        }
        let rejection = validate(text.as_bytes(), &Policy::mcp()).expect_err(&name);
        assert_eq!(rejection.error, CanonicalError::InvalidEnvelope, "{name}");
        assert_eq!(rejection.error.jsonrpc_code(), -32600);
        assert!(
            rejection.detail.contains("jsonrpc"),
            "{name}: {}",
            rejection.detail
        );
        assert_eq!(
            rejection.id.as_ref().map(Id::to_value),
            object.get("id").cloned(),
            "{name}: the id is echoed when readable"
        );
        let reply: Value = serde_json::from_slice(&rejection.to_response()).unwrap();
        assert_eq!(
            reply["id"],
            object.get("id").cloned().unwrap_or(Value::Null)
        );
        assert_eq!(reply["error"]["code"], -32600);
        // Put into an envelope, the same object is a valid request.
        let mut wrapped = object.clone();
        wrapped.insert("jsonrpc".into(), json!("2.0"));
        wrapped.entry("id").or_insert(json!(41));
        let bytes = serde_json::to_vec(&wrapped).unwrap();
        let Ok(Incoming::Single(Message::Request(request))) = validate(&bytes, &Policy::mcp())
        else {
            panic!("{name}: wrapped, it is a request")
        };
        assert_eq!(request.method, object["method"].as_str().unwrap());
        counts.embedded += 1;
    }
    // sampling/createMessage, elicitation/create, roots/list.
    assert_eq!(counts.embedded, 3, "{counts:?}");
}

#[test]
fn bare_error_objects_read_as_error_members() {
    let mut counts = Counts::default();
    for (folder, file, _text, value) in examples() {
        let name = format!("{folder}/{file}");
        let Some(object) = value.as_object() else {
            continue;
        };
        if !folder.ends_with("Error") || object.contains_key("jsonrpc") {
            continue;
        }
        let code = object["code"].as_i64().unwrap();
        let envelope = json!({"jsonrpc": "2.0", "id": "e-1", "error": value});
        let bytes = serde_json::to_vec(&envelope).unwrap();
        let Ok(Incoming::Single(Message::Response(response))) = validate(&bytes, &Policy::mcp())
        else {
            panic!("{name}: an error response")
        };
        assert_eq!(response.id, Id::from("e-1"));
        let error = response.outcome.expect_err(&name);
        assert_eq!(error.code, code, "{name}");
        // The standard codes map onto our table; the rest are the peer's own.
        let canonical = i32::try_from(code)
            .ok()
            .and_then(CanonicalError::from_jsonrpc_code);
        let expected = match code {
            -32700 => Some(CanonicalError::ParseError),
            -32601 => Some(CanonicalError::MethodNotFound),
            -32602 => Some(CanonicalError::InvalidToolInput),
            -32603 => Some(CanonicalError::InternalError),
            _ => None,
        };
        assert_eq!(canonical, expected, "{name}");
        counts.bare_errors += 1;
    }
    assert!(counts.bare_errors >= 7, "{counts:?}");
}
