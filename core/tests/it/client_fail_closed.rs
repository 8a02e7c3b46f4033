//! The caller side fails closed, and fails fast (issue 20, items 7 and 11):
//!
//! - a provider message the client must drop (over a frame limit, nested
//!   past the envelope limit, not JSON, not JSON-RPC, a refused charset)
//!   that carries the id of a query in flight fails that query at once with
//!   `QueryError::AnswerDropped` naming the limit; before, the query waited
//!   for its full timeout (`provider_timeout`);
//! - a `tools/call` result whose shapes (`json` item, `structuredContent`,
//!   JSON text item) carry different EvidenceResults is refused; before, the
//!   first shape won.

use evidence_wire::canonical::Profile;
use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId};
use evidence_wire::dialect::{
    McpRevision, Speech, ToolResultError, ToolResultShape, evidence_tool_result, from_tool_result,
};
use evidence_wire::envelope::{Id, find_id};
use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::{Decoder, FrameError, Framing, Limits};
use proptest::prelude::*;
use serde_json::value::RawValue;
use serde_json::{Value, json};

// ---------------------------------------------------------------- helpers

fn frame(framing: Framing, body: &str) -> Vec<u8> {
    let mut out = Vec::new();
    evidence_wire::frame::encode(framing, body.as_bytes(), &mut out).unwrap();
    out
}

/// A client with default limits and a 100 ms timeout.
fn default_client(framing: Framing) -> Client {
    let mut config = ClientConfig::default();
    config.framing = framing;
    config.request_timeout_ms = 100;
    Client::new(config)
}

/// A client with a 100 ms timeout and a 512-byte body limit.
fn small_client(framing: Framing) -> Client {
    let mut config = ClientConfig::default();
    config.framing = framing;
    config.request_timeout_ms = 100;
    config.limits = Limits {
        max_header_bytes: 256,
        max_body_bytes: 512,
    };
    Client::new(config)
}

fn ask(client: &mut Client, check: &str) -> RequestId {
    let id = client.query(
        &EvidenceQuery::new("p", check),
        &EvidenceContext::adhoc(TriggerTime::Logical(1)),
        0,
    );
    while client.poll_transmit().is_some() {}
    id
}

fn evidence(value: Value) -> EvidenceResult {
    EvidenceResult::with_value(EvidenceValue::json(&value).unwrap())
        .with_computed_hash(Profile::Rfc8785)
        .unwrap()
}

/// A good Decision Gate-shaped answer to `id`.
fn answer(id: i64, value: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"json","json":evidence(value)}]}})
        .to_string()
}

/// The outcomes reported so far, by id.
fn outcomes(client: &mut Client) -> Vec<(RequestId, Result<(), QueryError>)> {
    std::iter::from_fn(|| client.poll_event())
        .filter_map(|event| match event {
            ClientEvent::Answer { id, outcome } => Some((id, outcome.map(|_| ()))),
            _ => None,
        })
        .collect()
}

/// Asserts `a` failed at once as a dropped answer whose reason holds
/// `needle`, while `b` still waits.
fn assert_dropped_at_once(client: &mut Client, a: RequestId, b: RequestId, needle: &str) {
    let got = outcomes(client);
    assert_eq!(got.len(), 1, "{got:?}");
    let (id, outcome) = &got[0];
    assert_eq!(*id, a);
    match outcome {
        Err(error @ QueryError::AnswerDropped(reason)) => {
            assert!(reason.contains(needle), "{needle:?} missing: {reason}");
            assert_eq!(error.code(), "invalid_provider_result");
            let details = error.to_evidence_result().error.unwrap().details.unwrap();
            assert_eq!(details["dropped"], reason.as_str());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(client.in_flight(), 1, "{b} still waits");
    assert!(!client.needs_restart());
}

// ------------------------------------- a dropped message carrying our id

#[test]
fn an_answer_over_the_frame_limit_fails_its_query_at_once_in_either_framing() {
    for framing in [Framing::ContentLength, Framing::NewlineDelimited] {
        let mut client = small_client(framing);
        let a = ask(&mut client, "a");
        let b = ask(&mut client, "b");
        let big = answer(a.get(), json!("x".repeat(2000)));
        client.handle_input(&frame(framing, &big));
        assert_dropped_at_once(&mut client, a, b, "limit of 512");
        // The stream is in sync: the other query is answered.
        client.handle_input(&frame(framing, &answer(b.get(), json!("ok"))));
        let got = outcomes(&mut client);
        assert!(
            matches!(got[..], [(id, Ok(()))] if id == b),
            "{framing:?}: {got:?}"
        );
    }
}

/// The same, with the oversized frame arriving one byte at a time (its
/// first bytes are kept across reads) and declaring far more than it sends
/// at once (it is never buffered).
#[test]
fn an_oversized_frame_read_byte_by_byte_fails_its_query_at_once() {
    let mut client = small_client(Framing::ContentLength);
    let a = ask(&mut client, "a");
    let b = ask(&mut client, "b");
    let big = answer(a.get(), json!("x".repeat(5000)));
    for byte in frame(Framing::ContentLength, &big) {
        client.handle_input(&[byte]);
    }
    assert_dropped_at_once(&mut client, a, b, "over the limit of 512");
}

#[test]
fn an_answer_nested_past_the_envelope_limit_fails_its_query_at_once() {
    let mut client = default_client(Framing::NewlineDelimited);
    let a = ask(&mut client, "a");
    let b = ask(&mut client, "b");
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"json","json":{{"value":{{"kind":"json","value":{deep}}}}}}}]}}}}"#,
        a.get()
    );
    client.handle_input(&frame(Framing::NewlineDelimited, &body));
    assert_dropped_at_once(&mut client, a, b, "nested deeper than 128 levels");
}

#[test]
fn a_message_that_is_not_json_rpc_fails_its_query_at_once() {
    let mut client = small_client(Framing::NewlineDelimited);
    let a = ask(&mut client, "a");
    let b = ask(&mut client, "b");
    let body = format!(r#"{{"jsonrpc":"1.0","id":{},"result":{{}}}}"#, a.get());
    client.handle_input(&frame(Framing::NewlineDelimited, &body));
    assert_dropped_at_once(&mut client, a, b, r#"it must be the string "2.0""#);
}

#[test]
fn an_answer_that_breaks_off_mid_json_fails_its_query_at_once() {
    let mut client = small_client(Framing::NewlineDelimited);
    let a = ask(&mut client, "a");
    let b = ask(&mut client, "b");
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":["#,
        a.get()
    );
    client.handle_input(&frame(Framing::NewlineDelimited, &body));
    assert_dropped_at_once(&mut client, a, b, "PARSE_ERROR");
}

#[test]
fn an_answer_in_a_refused_charset_fails_its_query_at_once() {
    let mut client = small_client(Framing::ContentLength);
    let a = ask(&mut client, "a");
    let b = ask(&mut client, "b");
    let body = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, a.get());
    let mut input = format!(
        "Content-Length: {}\r\nContent-Type: application/json; charset=latin1\r\n\r\n",
        body.len()
    )
    .into_bytes();
    input.extend_from_slice(body.as_bytes());
    client.handle_input(&input);
    assert_dropped_at_once(&mut client, a, b, "charset");
}

/// A dropped message whose id is not in flight (never asked, or already
/// answered) fails nothing; one without a findable id leaves the queries
/// waiting, and their timeout says a message was dropped.
#[test]
fn a_dropped_message_fails_only_the_query_whose_id_it_carries() {
    let mut client = small_client(Framing::NewlineDelimited);
    let a = ask(&mut client, "a");
    for body in [
        r#"{"jsonrpc":"1.0","id":999,"result":{}}"#.to_owned(),
        format!(r#"{{"jsonrpc":"1.0","result":{{"id":{}}}}}"#, a.get()),
        format!(r#"{{"jsonrpc":"1.0","id":"{}","result":{{}}}}"#, a.get()),
    ] {
        client.handle_input(&frame(Framing::NewlineDelimited, &body));
        assert!(outcomes(&mut client).is_empty(), "{body}");
        assert_eq!(client.in_flight(), 1);
    }
    client.handle_timeout(100);
    let got = outcomes(&mut client);
    assert!(
        matches!(&got[..], [(id, Err(QueryError::TimeoutAfterDrop { .. }))] if *id == a),
        "{got:?}"
    );
}

/// A provider that declares an oversized frame and then stalls before the
/// bytes that would hold the id: the query times out saying a message over
/// the limit was being dropped (as it did before the client waited for
/// those bytes).
#[test]
fn an_oversized_frame_that_stalls_before_its_id_times_out_naming_the_limit() {
    let mut client = small_client(Framing::ContentLength);
    let a = ask(&mut client, "a");
    client.handle_input(b"Content-Length: 5000\r\n\r\n{\"js");
    assert!(outcomes(&mut client).is_empty());
    client.handle_timeout(100);
    let got = outcomes(&mut client);
    assert!(
        matches!(&got[..], [(id, Err(QueryError::TimeoutAfterDrop { dropped, .. }))]
            if *id == a && dropped.contains("over the limit of 512")),
        "{got:?}"
    );
}

#[test]
fn a_dropped_answer_to_initialize_fails_the_handshake_at_once() {
    let mut config = ClientConfig::default();
    config.framing = Framing::NewlineDelimited;
    config.handshake = true;
    let mut client = Client::new(config);
    let a = ask(&mut client, "a");
    // The initialize request has id 1; its answer is not JSON-RPC 2.0.
    client.handle_input(&frame(
        Framing::NewlineDelimited,
        r#"{"jsonrpc":"1.0","id":1,"result":{"protocolVersion":"2025-06-18"}}"#,
    ));
    let events: Vec<ClientEvent> = std::iter::from_fn(|| client.poll_event()).collect();
    assert!(client.needs_restart(), "{events:?}");
    assert!(
        events.iter().any(|event| matches!(event,
            ClientEvent::Answer { id, outcome: Err(QueryError::ConnectionLost(reason)) }
                if *id == a && reason.contains("answer to initialize was dropped"))),
        "{events:?}"
    );
}

// ----------------------------------------------------------- find_id

#[test]
fn find_id_reads_the_top_level_id_of_broken_or_cut_messages() {
    for (bytes, expected) in [
        (
            r#"{"jsonrpc":"2.0","id":7,"result":[[["#,
            Some(Id::Number(7)),
        ),
        (r#" { "id" : -12 , "x" : 1"#, Some(Id::Number(-12))),
        (
            r#"{"result":{"id":5,"a":[1,"]}"]},"id":6}"#,
            Some(Id::Number(6)),
        ),
        (
            r#"{"a":"\"id\":3","id":"s\u00e9"}"#,
            Some(Id::from("sé".to_owned())),
        ),
        (r#"{"\u0069d":4}"#, Some(Id::Number(4))),
        (r#"{"id":-0}"#, Some(Id::NegativeZero)),
        (r#"{"id":null}"#, Some(Id::Null)),
        (r#"{"id":1,"id":2}"#, Some(Id::Number(1))),
        (r#"{"id":1.5}"#, None),
        (r#"{"jsonrpc":"2.0","id":12"#, None),
        (r#"{"result":{"id":5}"#, None),
        (r#"[{"id":5}]"#, None),
        (r#"{not json, "id":5}"#, None),
        (r#"{"a" 1, "id":5}"#, None),
        ("", None),
    ] {
        assert_eq!(find_id(bytes.as_bytes()), expected, "{bytes}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// On any complete message, `find_id` agrees with a real parser (the
    /// first of two top-level ids, as the envelope reads it); on any prefix
    /// of it, it finds that id or nothing.
    #[test]
    fn find_id_agrees_with_serde_json(
        before in proptest::collection::vec(
            ("[a-z]{1,3}", prop::sample::select(vec![r#"[1,{"id":2}]"#, r#""x\"y""#, "true", "-3.5e2", r#"{"id":{"id":3}}"#])),
            0..4,
        ),
        id in any::<i64>(),
        after in prop::sample::select(vec!["", r#","z":{"id":9}"#, r#","id":8"#]),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut text = String::from("{");
        for (name, value) in &before {
            if name == "id" { continue; }
            text.push_str(&format!("\"{name}\":{value},"));
        }
        text.push_str(&format!("\"id\":{id}{after}}}"));
        let parsed: Value = serde_json::from_str(&text).unwrap();
        // A second top-level `id`: serde_json keeps the last, the envelope
        // (and `find_id`) the first; otherwise they agree.
        if !after.starts_with(r#","id""#) {
            prop_assert_eq!(parsed["id"].as_i64(), Some(id));
        }
        prop_assert_eq!(find_id(text.as_bytes()), Some(Id::Number(id)));
        let prefix = &text.as_bytes()[..cut.index(text.len() + 1)];
        let found = find_id(prefix);
        prop_assert!(found.is_none() || found == Some(Id::Number(id)), "{:?} in {:?}", found, prefix);
    }
}

// ----------------------------------------- the decoder keeps the prefix

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the chunking, a decoder keeping skipped prefixes reports
    /// the same errors with the same prefixes and the same frames, holds
    /// no more than its limits, and never delivers a skipped body.
    #[test]
    fn skipped_prefixes_do_not_depend_on_chunking(
        sizes in proptest::collection::vec(0usize..200, 1..6),
        keep in 0usize..40,
        framing in prop_oneof![Just(Framing::ContentLength), Just(Framing::NewlineDelimited)],
        chunks in proptest::collection::vec(1usize..17, 1..40),
    ) {
        let limits = Limits { max_header_bytes: 256, max_body_bytes: 64 };
        let bodies: Vec<String> = sizes
            .iter()
            .enumerate()
            .map(|(index, size)| format!(r#"{{"id":{index},"pad":"{}"}}"#, "p".repeat(*size)))
            .collect();
        let mut stream = Vec::new();
        for body in &bodies {
            evidence_wire::frame::encode(framing, body.as_bytes(), &mut stream).unwrap();
        }
        let run = |pieces: &mut dyn Iterator<Item = &[u8]>| {
            let mut decoder = Decoder::with_framing(framing, limits).keep_skipped_prefix(keep);
            let mut seen = Vec::new();
            for piece in pieces {
                decoder.push(piece);
                while let Some(next) = decoder.poll_frame() {
                    match next {
                        Ok(frame) => seen.push(Ok(frame.body.to_vec())),
                        Err(error) => seen.push(Err((format!("{error}"), decoder.skipped_prefix().to_vec()))),
                    }
                }
                assert!(decoder.buffered_len() <= limits.max_body_bytes + 256 + 17);
            }
            seen
        };
        let whole = run(&mut std::iter::once(stream.as_slice()));
        let mut offset = 0;
        let mut pieces = Vec::new();
        for size in chunks.iter().cycle() {
            if offset >= stream.len() { break; }
            let end = (offset + size).min(stream.len());
            pieces.push(&stream[offset..end]);
            offset = end;
        }
        let chunked = run(&mut pieces.into_iter());
        prop_assert_eq!(&whole, &chunked);
        // One item per message, in order: the body, or the error with the
        // body's first `keep` bytes.
        prop_assert_eq!(whole.len(), bodies.len());
        for (item, body) in whole.iter().zip(&bodies) {
            match item {
                Ok(delivered) => prop_assert_eq!(delivered, body.as_bytes()),
                Err((message, prefix)) => {
                    prop_assert!(body.len() > 64, "{}", message);
                    prop_assert_eq!(prefix.as_slice(), &body.as_bytes()[..keep.min(body.len())]);
                }
            }
        }
    }
}

#[test]
fn without_prefixes_an_oversized_frame_is_reported_as_its_header_ends() {
    let mut decoder = Decoder::with_framing(
        Framing::ContentLength,
        Limits {
            max_header_bytes: 256,
            max_body_bytes: 64,
        },
    );
    decoder.push(b"Content-Length: 100\r\n\r\n");
    assert!(matches!(
        decoder.poll_frame(),
        Some(Err(FrameError::BodyTooLarge { declared: 100, .. }))
    ));
    assert!(decoder.skipped_prefix().is_empty());
    let mut keeping = Decoder::with_framing(
        Framing::ContentLength,
        Limits {
            max_header_bytes: 256,
            max_body_bytes: 64,
        },
    )
    .keep_skipped_prefix(8);
    keeping.push(b"Content-Length: 100\r\n\r\n{\"id\"");
    assert!(keeping.poll_frame().is_none(), "waits for 8 body bytes");
    keeping.push(b":12,");
    assert!(matches!(
        keeping.poll_frame(),
        Some(Err(FrameError::BodyTooLarge { declared: 100, .. }))
    ));
    assert_eq!(keeping.skipped_prefix(), b"{\"id\":12");
    assert_eq!(Client::DROPPED_PREFIX_BYTES, 1024);
}

// ------------------------------------- shapes of one result must agree

fn tool_result(value: Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&value).unwrap()
}

#[test]
fn a_json_item_and_structured_content_that_disagree_are_refused() {
    let hello = evidence(json!("hello"));
    let world = evidence(json!("world"));
    let hello_text = String::from_utf8(hello.to_json_vec()).unwrap();
    let world_text = String::from_utf8(world.to_json_vec()).unwrap();
    for (result, shapes) in [
        (
            json!({"content":[{"type":"json","json":hello}],"structuredContent":world}),
            ("the json content item", "structuredContent"),
        ),
        (
            json!({"content":[{"type":"text","text":world_text}],"structuredContent":hello}),
            ("structuredContent", "the JSON text item"),
        ),
        (
            json!({"content":[{"type":"json","json":hello},{"type":"text","text":world_text}]}),
            ("the json content item", "the JSON text item"),
        ),
        (
            json!({"content":[{"type":"json","json":hello},{"type":"json","json":world}]}),
            ("the json content item", "the json content item"),
        ),
        (
            json!({"content":[{"type":"text","text":hello_text},{"type":"text","text":world_text}]}),
            ("the JSON text item", "the JSON text item"),
        ),
    ] {
        let error = from_tool_result(&tool_result(result.clone())).unwrap_err();
        let ToolResultError::Disagreement(detail) = &error else {
            panic!("{result}: {error:?}");
        };
        assert_eq!(*detail, format!("{} and {} differ", shapes.0, shapes.1));
        assert!(error.to_string().contains("refusing it"), "{error}");
    }
}

/// Shapes that spell the same result differently agree: member order,
/// `1.0` against `1`, escapes, fields left to their defaults; and a text
/// item that is not JSON (a message for people) is no shape.
#[test]
fn shapes_that_say_the_same_thing_agree() {
    let result = evidence(json!({"b": 1.0, "a": "é"}));
    let structured = serde_json::to_value(&result).unwrap();
    let canonical_text = String::from_utf8(result.to_canonical_vec().unwrap()).unwrap();
    let respelled = canonical_text.replace('é', "\\u00e9");
    let mut sparse = structured.clone();
    sparse
        .as_object_mut()
        .unwrap()
        .retain(|_, value| !value.is_null());
    sparse.as_object_mut().unwrap().remove("lane");
    for (value, shape) in [
        (
            json!({"content":[{"type":"text","text":canonical_text}],"structuredContent":structured}),
            ToolResultShape::StructuredContent,
        ),
        (
            json!({"content":[{"type":"json","json":sparse},{"type":"text","text":respelled}]}),
            ToolResultShape::JsonItem,
        ),
        (
            json!({"content":[{"type":"text","text":"Evidence follows."},{"type":"text","text":canonical_text}]}),
            ToolResultShape::JsonText,
        ),
    ] {
        let (read, found) = from_tool_result(&tool_result(value.clone()))
            .unwrap_or_else(|error| panic!("{value}: {error}"));
        assert_eq!(found, shape, "{value}");
        assert_eq!(read.evidence_hash, result.evidence_hash);
    }
    // What our own MCP dialect writes reads back.
    let mcp = serde_json::to_value(evidence_tool_result(
        &result,
        Speech::mcp(McpRevision::LATEST_HANDSHAKE),
    ))
    .unwrap();
    assert!(from_tool_result(&tool_result(mcp)).is_ok());
}

#[test]
fn the_client_refuses_a_result_whose_shapes_disagree_at_once() {
    let mut client = default_client(Framing::NewlineDelimited);
    let a = ask(&mut client, "a");
    let body = json!({"jsonrpc":"2.0","id":a.get(),"result":{
        "content":[{"type":"json","json":evidence(json!("approved"))}],
        "structuredContent":evidence(json!("rejected"))}})
    .to_string();
    client.handle_input(&frame(Framing::NewlineDelimited, &body));
    let got = outcomes(&mut client);
    assert!(
        matches!(&got[..], [(id, Err(QueryError::BadResult(ToolResultError::Disagreement(_))))] if *id == a),
        "{got:?}"
    );
}
