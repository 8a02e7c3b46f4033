//! The envelope rules one by one: nesting limit, duplicate members, ids,
//! `jsonrpc`, `method`, `params`, responses, batches and their limits, the
//! encoders, and the agreement of `Policy::strict` with
//! `spec/schemas/envelope.schema.json`.

use evidence_wire::envelope::{
    DEFAULT_MAX_DEPTH, Id, Incoming, Message, Policy, Rejection, encode_batch, encode_error,
    encode_notification, encode_request, encode_result, validate,
};
use evidence_wire::error::CanonicalError;
use evidence_wire::schema::{CompiledSchema, ENVELOPE_SCHEMA};
use serde_json::{Value, json};

fn reject(body: &[u8], policy: &Policy) -> Rejection {
    match validate(body, policy) {
        Err(rejection) => rejection,
        Ok(incoming) => panic!(
            "{}: accepted as {incoming:?}",
            String::from_utf8_lossy(body)
        ),
    }
}

fn request(body: &[u8], policy: &Policy) -> (Id<'static>, String, Option<String>) {
    match validate(body, policy) {
        Ok(Incoming::Single(Message::Request(request))) => (
            request.id.into_owned(),
            request.method.into_owned(),
            request.params.map(|raw| raw.get().to_owned()),
        ),
        other => panic!(
            "{}: not a request: {other:?}",
            String::from_utf8_lossy(body)
        ),
    }
}

/// A request whose `params` hold `extra` nested arrays, so the body is
/// nested `extra + 2` deep (envelope object, params object, arrays).
fn nested_request(extra: usize) -> Vec<u8> {
    let mut body = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"deep":"#.to_vec();
    body.extend(std::iter::repeat_n(b'[', extra));
    body.extend(std::iter::repeat_n(b']', extra));
    body.extend_from_slice(b"}}");
    body
}

#[test]
fn nesting_up_to_the_default_limit_is_accepted_and_one_more_is_rejected() {
    assert_eq!(DEFAULT_MAX_DEPTH, 128);
    let policy = Policy::mcp();
    assert_eq!(policy.depth_limit(), 128);
    let (id, _, params) = request(&nested_request(126), &policy);
    assert_eq!(id, Id::Number(1));
    assert!(params.unwrap().starts_with(r#"{"deep":[[["#));
    let rejection = reject(&nested_request(127), &policy);
    assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
    assert_eq!(
        rejection.id, None,
        "the limit is checked before anything is read"
    );
    assert!(rejection.detail.contains("128"), "{}", rejection.detail);
    // A configured limit applies the same way.
    let tight = Policy::mcp().max_depth(4);
    assert!(validate(&nested_request(2), &tight).is_ok());
    assert!(validate(&nested_request(3), &tight).is_err());
}

#[test]
fn hostile_nesting_is_rejected_not_a_stack_overflow() {
    // One megabyte of brackets, in a small stack, under every policy.
    let handle = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            for opener in [b'[', b'{'] {
                let body = vec![opener; 1 << 20];
                for policy in [Policy::mcp(), Policy::jsonrpc(), Policy::strict()] {
                    let rejection = reject(&body, &policy);
                    assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
                }
            }
            // Even with the limit lifted, nothing recurses: params stay unparsed.
            let lifted = Policy::mcp().max_depth(usize::MAX);
            let (_, _, params) = request(&nested_request(200_000), &lifted);
            assert_eq!(params.map(|p| p.len()), Some(400_000 + 9));
            // Brackets inside strings do not count.
            let mut body = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":""#.to_vec();
            body.extend(std::iter::repeat_n(b'[', 1000));
            body.extend_from_slice(br#"\"{{"}}"#);
            request(&body, &Policy::mcp());
        })
        .unwrap();
    handle.join().unwrap();
}

#[test]
fn duplicate_members_are_rejected_whatever_the_policy() {
    let bodies: [&[u8]; 5] = [
        br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}"#,
        br#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"m"}"#,
        br#"{"jsonrpc":"2.0","id":1,"\u0069d":1,"method":"m"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"m","x":1,"x":1}"#,
    ];
    for body in bodies {
        for policy in [Policy::mcp(), Policy::jsonrpc(), Policy::strict()] {
            let rejection = reject(body, &policy);
            assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
            assert!(
                rejection.detail.contains("more than once"),
                "{}",
                rejection.detail
            );
            assert!(rejection.answerable);
        }
    }
    let rejection = reject(bodies[0], &Policy::mcp());
    assert!(rejection.detail.contains("`id`"), "{}", rejection.detail);
    // Duplicates inside params are the handler's business, not the envelope's.
    request(
        br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"a":2}}"#,
        &Policy::mcp(),
    );
    // So are duplicates among responses' members.
    let rejection = reject(
        br#"{"jsonrpc":"2.0","id":1,"result":1,"result":2}"#,
        &Policy::mcp(),
    );
    assert!(
        !rejection.answerable,
        "a broken response is logged, not answered"
    );
}

#[test]
fn ids_by_policy() {
    let body = |id: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m","params":{{}}}}"#);
    // Readable ids under MCP.
    for (text, id) in [
        ("7", Id::Number(7)),
        ("-7", Id::Number(-7)),
        ("0", Id::Number(0)),
        ("9223372036854775807", Id::Number(i64::MAX)),
        ("-9223372036854775808", Id::Number(i64::MIN)),
        (r#""abc""#, Id::from("abc")),
        (r#""""#, Id::from("")),
        (r#""a\"b\u00e9""#, Id::from("a\"b\u{e9}")),
    ] {
        assert_eq!(
            request(body(text).as_bytes(), &Policy::mcp()).0,
            id,
            "{text}"
        );
    }
    // Unreadable ids: rejected, answered with id null.
    for text in [
        "1.5",
        "1.0",
        "1e3",
        "9223372036854775808",
        "true",
        "{}",
        "[1]",
    ] {
        for policy in [Policy::mcp(), Policy::jsonrpc()] {
            let rejection = reject(body(text).as_bytes(), &policy);
            assert_eq!(rejection.error, CanonicalError::InvalidEnvelope, "{text}");
            assert_eq!(rejection.id, None, "{text}");
            let reply: Value = serde_json::from_slice(&rejection.to_response()).unwrap();
            assert_eq!(reply["id"], Value::Null);
            assert_eq!(reply["error"]["data"]["request_id"], Value::Null);
        }
    }
    // Null: MCP refuses, JSON-RPC accepts.
    assert_eq!(reject(body("null").as_bytes(), &Policy::mcp()).id, None);
    assert_eq!(
        request(body("null").as_bytes(), &Policy::jsonrpc()).0,
        Id::Null
    );
    // Strict: strings only, UUIDs once deterministic ids are on.
    let rejection = reject(body("7").as_bytes(), &Policy::strict());
    assert_eq!(rejection.id, Some(Id::Number(7)), "a readable id is echoed");
    let uuid = r#""6F1C2A9E-3b7d-4c1e-9a2f-0d4b5e6f7a8b""#;
    let (id, _, _) = request(body(uuid).as_bytes(), &Policy::strict().uuid_ids(true));
    assert_eq!(id, Id::from("6F1C2A9E-3b7d-4c1e-9a2f-0d4b5e6f7a8b"));
    for not_uuid in [
        r#""6f1c2a9e3b7d4c1e9a2f0d4b5e6f7a8b""#,
        r#""6f1c2a9e-3b7d-4c1e-9a2f-0d4b5e6f7a8""#,
        r#""6f1c2a9e-3b7d-4c1e-9a2f-0d4b5e6f7a8g""#,
        r#""{6f1c2a9e-3b7d-4c1e-9a2f-0d4b5e6f7a8}""#,
    ] {
        let rejection = reject(body(not_uuid).as_bytes(), &Policy::strict().uuid_ids(true));
        assert!(rejection.detail.contains("UUID"), "{not_uuid}");
        assert!(rejection.id.is_some());
    }
    let (id, _, _) = request(
        body(r#""00000000-0000-0000-0000-000000000000""#).as_bytes(),
        &Policy::strict().uuid_ids(true),
    );
    assert_eq!(id, Id::from("00000000-0000-0000-0000-000000000000"));
    // 36 bytes but not 36 ASCII hex digits and dashes.
    let rejection = reject(
        body(r#""00000000-0000-0000-0000-00000000000\u00e9""#).as_bytes(),
        &Policy::strict().uuid_ids(true),
    );
    assert!(rejection.detail.contains("UUID"));
}

#[test]
fn jsonrpc_member_method_and_params() {
    let mcp = Policy::mcp();
    for bad in [
        r#"{"id":1,"method":"m"}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
        r#"{"jsonrpc":2.0,"id":1,"method":"m"}"#,
        r#"{"jsonrpc":null,"id":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0 ","id":1,"method":"m"}"#,
    ] {
        let rejection = reject(bad.as_bytes(), &mcp);
        assert!(
            rejection.detail.contains("jsonrpc"),
            "{bad}: {}",
            rejection.detail
        );
        assert_eq!(rejection.id, Some(Id::Number(1)), "{bad}");
    }
    // An escaped "2.0" is still "2.0".
    request(br#"{"jsonrpc":"2\u002e0","id":1,"method":"m"}"#, &mcp);
    // Method: a non-empty string under MCP; JSON-RPC allows "".
    let empty = br#"{"jsonrpc":"2.0","id":1,"method":""}"#;
    assert!(reject(empty, &mcp).detail.contains("empty"));
    assert_eq!(request(empty, &Policy::jsonrpc()).1, "");
    for method in ["1", "null", "{}", "[]"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":{method}}}"#);
        assert!(
            reject(text.as_bytes(), &Policy::jsonrpc())
                .detail
                .contains("string")
        );
    }
    assert_eq!(
        request(br#"{"jsonrpc":"2.0","id":1,"method":"a\/b"}"#, &mcp).1,
        "a/b"
    );
    // Params: absent or an object under MCP (with _meta), arrays too under JSON-RPC.
    assert_eq!(
        request(br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#, &mcp).2,
        None
    );
    let meta = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"progressToken":1}}}"#;
    assert_eq!(
        request(meta, &mcp).2.as_deref(),
        Some(r#"{"_meta":{"progressToken":1}}"#)
    );
    let positional = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1,2]}"#;
    assert!(reject(positional, &mcp).detail.contains("object"));
    assert_eq!(
        request(positional, &Policy::jsonrpc()).2.as_deref(),
        Some("[1,2]")
    );
    for params in ["null", "1", r#""s""#, "true"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{params}}}"#);
        for policy in [Policy::mcp(), Policy::jsonrpc(), Policy::strict()] {
            assert_eq!(
                reject(text.as_bytes(), &policy).id,
                Some(Id::Number(1)),
                "{params}"
            );
        }
    }
    // Strict requires params and an id.
    let no_params = br#"{"jsonrpc":"2.0","id":"a","method":"m"}"#;
    assert!(
        reject(no_params, &Policy::strict())
            .detail
            .contains("params")
    );
    let notification = br#"{"jsonrpc":"2.0","method":"m","params":{}}"#;
    assert!(
        reject(notification, &Policy::strict())
            .detail
            .contains("id")
    );
    assert!(matches!(
        validate(notification, &mcp),
        Ok(Incoming::Single(Message::Notification(n))) if n.method == "m"
    ));
    // Unknown members are ignored unless the policy says otherwise.
    let extra = br#"{"jsonrpc":"2.0","id":1,"method":"m","extra":true}"#;
    request(extra, &mcp);
    assert!(
        reject(extra, &mcp.clone().allow_unknown_members(false))
            .detail
            .contains("extra")
    );
}

#[test]
fn bodies_that_are_not_one_envelope_object() {
    for (body, error) in [
        (&b""[..], CanonicalError::ParseError),
        (b"   ", CanonicalError::ParseError),
        (b"{", CanonicalError::ParseError),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"} x",
            CanonicalError::ParseError,
        ),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
            CanonicalError::ParseError,
        ),
        (b"5", CanonicalError::InvalidEnvelope),
        (b"\"text\"", CanonicalError::InvalidEnvelope),
        (b"null", CanonicalError::InvalidEnvelope),
        (b"{}", CanonicalError::InvalidEnvelope),
    ] {
        let rejection = reject(body, &Policy::jsonrpc());
        assert_eq!(
            rejection.error,
            error,
            "{:?}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(rejection.id, None);
        assert!(rejection.answerable);
    }
    // Surrounding whitespace is fine.
    request(
        b" \r\n\t{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}\n ",
        &Policy::mcp(),
    );
}

#[test]
fn responses() {
    let mcp = Policy::mcp();
    let Ok(Incoming::Single(Message::Response(response))) =
        validate(br#"{"jsonrpc":"2.0","id":"r","result":{"ok":true}}"#, &mcp)
    else {
        panic!("a success response")
    };
    assert_eq!(response.id, Id::from("r"));
    assert_eq!(response.outcome.unwrap().get(), r#"{"ok":true}"#);
    // An error response may carry id null (the peer could not read ours), or none.
    for body in [
        &br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#[..],
        br#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error","data":null}}"#,
    ] {
        let Ok(Incoming::Single(Message::Response(response))) = validate(body, &mcp) else {
            panic!("an error response")
        };
        assert_eq!(response.id, Id::Null);
        let error = response.outcome.unwrap_err();
        assert_eq!(
            (error.code, error.message.as_ref()),
            (-32700, "Parse error")
        );
        assert!(error.data.is_none());
        let incoming = validate(body, &mcp).unwrap();
        assert!(!incoming.needs_reply(), "responses are never answered");
    }
    // Broken responses are rejected but never answered.
    for body in [
        &br#"{"jsonrpc":"2.0","id":null,"result":1}"#[..],
        br#"{"jsonrpc":"2.0","result":1}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}"#,
        br#"{"jsonrpc":"2.0","id":1,"error":"oops"}"#,
        br#"{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}"#,
        br#"{"jsonrpc":"2.0","id":1,"error":{"message":"m"}}"#,
        br#"{"id":1,"result":1}"#,
    ] {
        let rejection = reject(body, &mcp);
        assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
        assert!(!rejection.answerable, "{}", String::from_utf8_lossy(body));
    }
    // A message that is both a call and a response is a malformed call: answered.
    let both = reject(br#"{"jsonrpc":"2.0","id":3,"method":"m","result":1}"#, &mcp);
    assert!(both.answerable);
    assert_eq!(both.id, Some(Id::Number(3)));
}

fn batch<'a>(body: &'a [u8], policy: &Policy) -> Vec<Result<Message<'a>, Rejection>> {
    match validate(body, policy) {
        Ok(Incoming::Batch(entries)) => entries,
        other => panic!("not a batch: {other:?}"),
    }
}

#[test]
fn batches_and_their_limits() {
    let three = br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"},{"jsonrpc":"2.0","id":2,"method":"c"}]"#;
    let entries = batch(three, &Policy::jsonrpc());
    assert_eq!(entries.len(), 3);
    assert!(matches!(&entries[0], Ok(Message::Request(r)) if r.id == Id::Number(1)));
    assert!(matches!(&entries[1], Ok(Message::Notification(n)) if n.method == "b"));
    // Exactly at the limit is fine; one over is one rejection for the whole batch.
    assert_eq!(batch(three, &Policy::jsonrpc().max_batch_len(3)).len(), 3);
    let rejection = reject(three, &Policy::jsonrpc().max_batch_len(2));
    assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
    assert!(
        rejection.detail.contains("limit of 2"),
        "{}",
        rejection.detail
    );
    // Policies without batches refuse arrays as one -32600 with id null.
    for policy in [Policy::mcp(), Policy::strict()] {
        let rejection = reject(three, &policy);
        assert_eq!(
            (rejection.error, rejection.id),
            (CanonicalError::InvalidEnvelope, None)
        );
        assert!(!policy.allows_batches());
    }
    assert!(Policy::mcp().allow_batches(true).allows_batches());
    // Entries that are not objects, or are nested batches, get their own -32600.
    let entries = batch(
        br#"[[{"jsonrpc":"2.0","id":1,"method":"a"}], 1, {"jsonrpc":"2.0","id":"x","method":7}]"#,
        &Policy::jsonrpc(),
    );
    assert_eq!(entries.len(), 3);
    for (index, entry) in entries.iter().enumerate() {
        let rejection = entry.as_ref().unwrap_err();
        assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
        assert!(
            rejection
                .detail
                .starts_with(&format!("batch entry {index}:"))
        );
    }
    assert_eq!(entries[2].as_ref().unwrap_err().id, Some(Id::from("x")));
    // A duplicate member inside one entry rejects that entry only.
    let entries = batch(
        br#"[{"jsonrpc":"2.0","id":1,"id":1,"method":"a"},{"jsonrpc":"2.0","id":2,"method":"b"}]"#,
        &Policy::jsonrpc(),
    );
    assert!(entries[0].is_err() && entries[1].is_ok());
    // A batch of responses (what a client receives) needs no reply; a broken
    // response in it is not answered either.
    let responses = br#"[{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","id":2,"result":1,"error":{"code":1,"message":"m"}}]"#;
    let incoming = validate(responses, &Policy::jsonrpc()).unwrap();
    assert!(!incoming.needs_reply());
    let Incoming::Batch(entries) = incoming else {
        panic!()
    };
    assert!(matches!(&entries[0], Ok(Message::Response(r)) if r.id == Id::Number(1)));
    assert!(!entries[1].as_ref().unwrap_err().answerable);
    // Without result or error, an entry is an invalid request: answered.
    let incoming = validate(br#"[{"jsonrpc":"2.0","id":2}]"#, &Policy::jsonrpc()).unwrap();
    assert!(incoming.needs_reply());
    // Broken JSON anywhere in the batch is one parse error.
    let rejection = reject(
        b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"},]",
        &Policy::jsonrpc(),
    );
    assert_eq!(rejection.error, CanonicalError::ParseError);
    assert_eq!(
        reject(b"[] []", &Policy::jsonrpc()).error,
        CanonicalError::ParseError
    );
    assert_eq!(
        reject(b" [ ] ", &Policy::jsonrpc()).detail,
        "empty batch: a batch must hold at least one message"
    );
}

#[test]
fn encoders_round_trip_through_the_validator() {
    let id = Id::from("req-\"1\"");
    let body = encode_request(&id, "tools/call", Some(&json!({"name": "evidence_query"}))).unwrap();
    assert!(!body.contains(&b'\n'));
    let (read_id, method, params) = request(&body, &Policy::strict());
    assert_eq!(
        (read_id, method.as_str()),
        (id.clone().into_owned(), "tools/call")
    );
    assert_eq!(params.as_deref(), Some(r#"{"name":"evidence_query"}"#));
    let body = encode_notification("notifications/initialized", None::<&()>).unwrap();
    assert_eq!(
        body,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
    );
    let body = encode_result(&Id::Number(-3), &json!([1])).unwrap();
    assert_eq!(body, br#"{"jsonrpc":"2.0","id":-3,"result":[1]}"#);
    // Errors echo the id, or null, in the response and in data.request_id.
    for (id, expected) in [
        (Some(Id::Number(9)), json!(9)),
        (Some(Id::from("a")), json!("a")),
        (None, Value::Null),
    ] {
        let body = encode_error(
            id.as_ref(),
            CanonicalError::ToolNotFound,
            Some("no tool `x`"),
        );
        let reply: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            reply,
            json!({"jsonrpc": "2.0", "id": expected, "error": {"code": -32001, "message": "Unknown tool",
                   "data": {"kind": "tool_not_found", "retryable": false, "request_id": expected, "detail": "no tool `x`"}}})
        );
        let Ok(Incoming::Single(Message::Response(response))) = validate(&body, &Policy::mcp())
        else {
            panic!("our own error response reads back")
        };
        assert_eq!(response.outcome.unwrap_err().code, -32001);
    }
    assert_eq!(encode_batch(Vec::<Vec<u8>>::new()), None);
    assert_eq!(
        encode_batch([b"1".to_vec(), b"2".to_vec()]).unwrap(),
        b"[1,2]"
    );
    assert_eq!(Id::from("a\"b").to_string(), r#""a\"b""#);
    assert_eq!(Id::Number(-1).to_string(), "-1");
    assert_eq!(Id::Null.to_string(), "null");
}

/// `Policy::strict` and `spec/schemas/envelope.schema.json` agree on
/// request-shaped envelopes (no `result`/`error`, no duplicates).
#[cfg(feature = "json-schema")]
#[test]
fn envelope_schema_agrees_with_the_strict_policy() {
    let schema: Value = serde_json::from_str(ENVELOPE_SCHEMA).unwrap();
    let envelope = CompiledSchema::compile(&schema).unwrap();
    let uuid_rule = CompiledSchema::compile(&json!({
        "type": "object",
        "properties": schema["$defs"]["deterministicEnvelope"]["properties"].clone()
    }))
    .unwrap();
    let uuid = "6f1c2a9e-3b7d-4c1e-9a2f-0d4b5e6f7a8b";
    let ids = [
        json!("a"),
        json!(uuid),
        json!(""),
        json!(1),
        json!(null),
        json!(1.5),
        json!({}),
    ];
    let versions = [json!("2.0"), json!("1.0"), json!(2.0)];
    let methods = [json!("tools/call"), json!(""), json!(1)];
    let params = [
        json!({}),
        json!({"_meta": {}}),
        json!([1]),
        json!("x"),
        json!(null),
    ];
    let mut checked = 0;
    for drop_member in [
        None,
        Some("id"),
        Some("jsonrpc"),
        Some("method"),
        Some("params"),
    ] {
        for id in &ids {
            for version in &versions {
                for method in &methods {
                    for param in &params {
                        let mut object = serde_json::Map::new();
                        object.insert("jsonrpc".into(), version.clone());
                        object.insert("id".into(), id.clone());
                        object.insert("method".into(), method.clone());
                        object.insert("params".into(), param.clone());
                        object.insert("extra".into(), json!(1));
                        if let Some(member) = drop_member {
                            object.remove(member);
                        }
                        let value = Value::Object(object);
                        let body = serde_json::to_vec(&value).unwrap();
                        let by_schema = envelope.validate(&value).is_ok();
                        let by_policy = validate(&body, &Policy::strict()).is_ok();
                        assert_eq!(by_schema, by_policy, "{value}");
                        let by_schema = by_schema && uuid_rule.validate(&value).is_ok();
                        let by_policy = validate(&body, &Policy::strict().uuid_ids(true)).is_ok();
                        assert_eq!(by_schema, by_policy, "uuid: {value}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 5 * 7 * 3 * 3 * 5);
}
