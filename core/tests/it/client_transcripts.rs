//! Scripted transcripts of the caller-side state machine: queries in,
//! bytes out, provider bytes in, events out.
//!
//! The byte-exact goldens live in `tests/data/transcripts/client_*.json`
//! (format in that folder's README); the cases below script the rest:
//! id uniqueness, cancellation, timeouts and late answers, the handshake,
//! restarts, malformed answers and signatures.

use evidence_wire::canonical::Profile;
use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId, Skipped};
use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime, TrustPolicy,
};
use evidence_wire::frame::{Decoder, Framing, Limits};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------- helpers

fn cl(body: &str) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

fn nl(body: &str) -> Vec<u8> {
    let mut out = body.as_bytes().to_vec();
    out.push(b'\n');
    out
}

fn config(configure: impl FnOnce(&mut ClientConfig)) -> ClientConfig {
    let mut config = ClientConfig::default();
    configure(&mut config);
    config
}

fn query(check: &str) -> EvidenceQuery {
    EvidenceQuery::new("p", check)
}

fn context() -> EvidenceContext {
    EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000))
}

fn events(client: &mut Client) -> Vec<ClientEvent> {
    std::iter::from_fn(|| client.poll_event()).collect()
}

fn out_json(client: &mut Client, framing: Framing) -> Vec<Value> {
    let mut values = Vec::new();
    while let Some(bytes) = client.poll_transmit() {
        let mut decoder = Decoder::with_framing(framing, Limits::default());
        decoder.push(&bytes);
        let frame = decoder.poll_frame().expect("a frame").expect("well framed");
        assert!(decoder.poll_frame().is_none(), "one frame per transmit");
        values.push(serde_json::from_slice(&frame.body).unwrap());
    }
    values
}

fn raw_out(client: &mut Client) -> Vec<u8> {
    std::iter::from_fn(|| client.poll_transmit())
        .flatten()
        .collect()
}

/// A Decision Gate-shaped answer holding `value` with its correct hash.
fn good_answer(id: i64, value: Value) -> String {
    let result = EvidenceResult::with_value(EvidenceValue::json(&value).unwrap())
        .with_computed_hash(Profile::Rfc8785)
        .unwrap();
    json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"json","json":result}]}})
        .to_string()
}

fn answers(events: &[ClientEvent]) -> Vec<(RequestId, Result<Value, String>)> {
    events
        .iter()
        .filter_map(|event| match event {
            ClientEvent::Answer { id, outcome } => Some((
                *id,
                outcome
                    .as_ref()
                    .map(|evidence| {
                        evidence
                            .result()
                            .value
                            .as_ref()
                            .map_or(Value::Null, |value| value.to_value().unwrap())
                    })
                    .map_err(|error| error.code().to_owned()),
            )),
            _ => None,
        })
        .collect()
}

// ------------------------------------------------------ data transcripts

fn expand(text: &str) -> String {
    text.replace("$VERSION", env!("CARGO_PKG_VERSION"))
}

fn event_json(event: &ClientEvent) -> Value {
    match event {
        ClientEvent::Answer {
            id,
            outcome: Ok(evidence),
        } => json!({
            "answer": id.get(),
            "ok": evidence.result().value.as_ref().map_or(Value::Null, |value| value.to_value().unwrap()),
        }),
        ClientEvent::Answer {
            id,
            outcome: Err(error),
        } => {
            json!({"answer": id.get(), "error": error.code()})
        }
        ClientEvent::Skipped(skipped) => json!({"skipped": match skipped {
            Skipped::Notification { .. } => "notification",
            Skipped::UnknownId(_) => "unknown_id",
            Skipped::LateAnswer(_) => "late_answer",
            Skipped::ProviderRequest { .. } => "provider_request",
            Skipped::Invalid(_) => "invalid",
            _ => "other",
        }}),
        ClientEvent::Initialized { protocol_version } => json!({"initialized": protocol_version}),
        ClientEvent::Fatal(_) => json!({"fatal": true}),
        _ => json!({"other": format!("{event:?}")}),
    }
}

fn run_transcript(path: &Path) {
    let name = path.display();
    let script: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let framing = match script["framing"].as_str().unwrap_or("content_length") {
        "content_length" => Framing::ContentLength,
        "newline" => Framing::NewlineDelimited,
        other => panic!("{name}: framing {other}"),
    };
    let mut client = Client::new(config(|config| {
        config.framing = framing;
        config.handshake = script["handshake"].as_bool().unwrap_or(false);
        if let Some(ms) = script["timeout_ms"].as_u64() {
            config.request_timeout_ms = ms;
        }
    }));
    for (index, step) in script["steps"].as_array().unwrap().iter().enumerate() {
        let at = format!("{name} step {index}");
        if let Some(send) = step.get("send") {
            let bytes = send.as_str().unwrap().as_bytes();
            let chunk = step["chunk"].as_u64().map_or(usize::MAX, |n| n as usize);
            for piece in bytes.chunks(chunk.min(bytes.len().max(1))) {
                client.handle_input(piece);
            }
        } else if let Some(expected) = step.get("expect_events") {
            let got: Vec<Value> = events(&mut client).iter().map(event_json).collect();
            assert_eq!(Value::Array(got), *expected, "{at}: events");
        } else if let Some(expected) = step.get("expect_out") {
            let got = String::from_utf8(raw_out(&mut client)).unwrap();
            assert_eq!(got, expand(expected.as_str().unwrap()), "{at}: bytes out");
        } else if let Some(expected) = step.get("expect_out_json") {
            let expected: Value = serde_json::from_str(&expand(&expected.to_string())).unwrap();
            let got = out_json(&mut client, framing);
            assert_eq!(Value::Array(got), expected, "{at}: frames out");
        } else if let Some(arguments) = step.get("query") {
            let query: EvidenceQuery = serde_json::from_value(arguments["query"].clone()).unwrap();
            let context: EvidenceContext =
                serde_json::from_value(arguments["context"].clone()).unwrap();
            let id = client.query(&query, &context, step["now"].as_u64().unwrap());
            assert_eq!(
                Some(id.get()),
                step["expect_id"].as_i64(),
                "{at}: request id"
            );
        } else if let Some(now) = step.get("timeout") {
            client.handle_timeout(now.as_u64().unwrap());
        } else {
            panic!("{at}: unknown step {step}");
        }
    }
    assert!(events(&mut client).is_empty(), "{name}: unchecked events");
    assert!(raw_out(&mut client).is_empty(), "{name}: unchecked output");
}

#[test]
fn data_transcripts_replay() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/transcripts");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("client_") && name.ends_with(".json"))
        })
        .collect();
    paths.sort();
    assert!(paths.len() >= 3, "the client transcripts are present");
    for path in paths {
        run_transcript(&path);
    }
}

// ----------------------------------------------------------- the basics

#[test]
fn ids_are_unique_and_many_queries_fly_at_once() {
    let mut client = Client::new(ClientConfig::default());
    let ids: Vec<RequestId> = (0..50)
        .map(|n| client.query(&query(&format!("c{n}")), &context(), 0))
        .collect();
    let mut sorted: Vec<i64> = ids.iter().map(|id| id.get()).collect();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 50);
    assert_eq!(client.in_flight(), 50);
    let sent = out_json(&mut client, Framing::ContentLength);
    assert_eq!(sent.len(), 50);
    for (id, request) in ids.iter().zip(&sent) {
        assert_eq!(request["id"], id.get());
        assert_eq!(request["method"], "tools/call");
        assert_eq!(request["params"]["name"], "evidence_query");
    }
    // The same correlation id on two queries does not alias them.
    let mut context = context();
    context.correlation_id = Some("same".to_owned());
    let a = client.query(&query("x"), &context, 0);
    let b = client.query(&query("x"), &context, 0);
    assert_ne!(a, b);
    // Answer in reverse order: each id gets its own value.
    let mut input = Vec::new();
    for id in ids.iter().rev() {
        input.extend(cl(&good_answer(id.get(), json!(id.get()))));
    }
    client.handle_input(&input);
    let got = answers(&events(&mut client));
    assert_eq!(got.len(), 50);
    for (id, outcome) in got {
        assert_eq!(outcome, Ok(json!(id.get())));
    }
    assert_eq!(client.in_flight(), 2);
}

#[test]
fn all_three_result_shapes_are_accepted() {
    let result = EvidenceResult::with_value(EvidenceValue::json(&json!({"n": 1})).unwrap());
    let text = String::from_utf8(result.to_json_vec()).unwrap();
    let shapes = [
        json!({"content":[{"type":"json","json":result}]}),
        json!({"content":[],"structuredContent":result}),
        json!({"content":[{"type":"text","text":text}]}),
        json!({"content":[{"type":"text","text":"not json"},{"type":"text","text":text}],"isError":false}),
    ];
    for shape in shapes {
        for framing in [Framing::ContentLength, Framing::NewlineDelimited] {
            let mut client = Client::new(ClientConfig::default());
            let id = client.query(&query("c"), &context(), 0);
            let body = json!({"jsonrpc":"2.0","id":id.get(),"result":shape}).to_string();
            client.handle_input(&match framing {
                Framing::ContentLength => cl(&body),
                Framing::NewlineDelimited => nl(&body),
            });
            let got = events(&mut client);
            let [
                ClientEvent::Answer {
                    outcome: Ok(evidence),
                    ..
                },
            ] = got.as_slice()
            else {
                panic!("{shape}: {got:?}");
            };
            // A missing hash is computed: sha256 of `{"n":1}`.
            assert_eq!(
                evidence.hash().map(|hash| hash.value.as_str()),
                Some("2bfd14f43d17fc7cea24e0917a8879b4b2f880b8baeec1b9d90fbaad655e71bd")
            );
        }
    }
}

#[test]
fn a_json_rpc_error_becomes_a_provider_error_result() {
    let mut client = Client::new(ClientConfig::default());
    let id = client.query(&query("c"), &context(), 0);
    client.handle_input(&cl(&json!({"jsonrpc":"2.0","id":id.get(),
        "error":{"code":-32602,"message":"unknown check","data":{"check":"c"}}})
    .to_string()));
    let got = events(&mut client);
    let [
        ClientEvent::Answer {
            outcome: Err(error),
            ..
        },
    ] = got.as_slice()
    else {
        panic!("{got:?}");
    };
    assert_eq!(
        *error,
        QueryError::Provider {
            code: -32602,
            message: "unknown check".to_owned(),
            data: Some(json!({"check": "c"})),
        }
    );
    let result = error.to_evidence_result();
    assert!(result.value.is_none());
    let evidence_error = result.error.unwrap();
    assert_eq!(evidence_error.code, "provider_error");
    assert_eq!(evidence_error.details.as_ref().unwrap()["code"], -32602);
    assert_eq!(
        evidence_error.details.as_ref().unwrap()["message"],
        "unknown check"
    );
}

#[test]
fn wrong_hash_is_rejected_and_unreadable_results_are_bad_results() {
    let mut client = Client::new(ClientConfig::default());
    let a = client.query(&query("a"), &context(), 0);
    let b = client.query(&query("b"), &context(), 0);
    let c = client.query(&query("c"), &context(), 0);
    let tampered = json!({"value":{"kind":"json","value":"production"},
        "evidence_hash":{"algorithm":"sha256",
            "value":"5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a"}});
    let mut input = cl(&json!({"jsonrpc":"2.0","id":a.get(),
        "result":{"content":[{"type":"json","json":tampered}]}})
    .to_string());
    input.extend(cl(
        &json!({"jsonrpc":"2.0","id":b.get(),"result":{"nothing":1}}).to_string(),
    ));
    input.extend(cl(&json!({"jsonrpc":"2.0","id":c.get(),
        "result":{"content":[{"type":"text","text":"disk on fire"}],"isError":true}})
    .to_string()));
    client.handle_input(&input);
    let got = answers(&events(&mut client));
    assert_eq!(
        got,
        [
            (a, Err("hash_mismatch".to_owned())),
            (b, Err("invalid_provider_result".to_owned())),
            (c, Err("invalid_provider_result".to_owned())),
        ]
    );
}

#[test]
fn wrong_ids_notifications_and_broken_messages_are_never_answers() {
    let mut client = Client::new(ClientConfig::default());
    let id = client.query(&query("c"), &context(), 0);
    let mut input = Vec::new();
    for body in [
        good_answer(id.get() + 1000, json!("wrong id")),
        json!({"jsonrpc":"2.0","id":format!("{}", id.get()),"result":{}}).to_string(),
        json!({"jsonrpc":"2.0","method":"notifications/message","params":{"data":"hi"}})
            .to_string(),
        // `jsonrpc` is checked: a 1.0 answer is not taken. (Had it carried
        // the id of a query in flight, that query would fail at once:
        // `client_fail_closed.rs`.)
        json!({"jsonrpc":"1.0","id":id.get() + 1,"result":{}}).to_string(),
        json!({"id":id.get() + 1,"result":{}}).to_string(),
        "{broken".to_owned(),
        json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}})
            .to_string(),
    ] {
        input.extend(cl(&body));
    }
    client.handle_input(&input);
    let got = events(&mut client);
    assert!(answers(&got).is_empty(), "{got:?}");
    let kinds: Vec<Value> = got.iter().map(event_json).collect();
    assert_eq!(
        kinds,
        [
            json!({"skipped":"unknown_id"}),
            json!({"skipped":"unknown_id"}),
            json!({"skipped":"notification"}),
            json!({"skipped":"invalid"}),
            json!({"skipped":"invalid"}),
            json!({"skipped":"invalid"}),
            json!({"skipped":"unknown_id"}),
        ]
    );
    assert_eq!(client.in_flight(), 1);
    assert!(!client.needs_restart());
    // The real answer still lands.
    client.handle_input(&cl(&good_answer(id.get(), json!(7))));
    assert_eq!(answers(&events(&mut client)), [(id, Ok(json!(7)))]);
}

#[test]
fn provider_requests_are_answered() {
    let mut client = Client::new(ClientConfig::default());
    client.handle_input(&cl(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#));
    client.handle_input(&cl(
        r#"{"jsonrpc":"2.0","id":"s","method":"sampling/createMessage","params":{}}"#,
    ));
    let replies = out_json(&mut client, Framing::ContentLength);
    assert_eq!(replies[0], json!({"jsonrpc":"2.0","id":5,"result":{}}));
    assert_eq!(replies[1]["id"], "s");
    assert_eq!(replies[1]["error"]["code"], -32601);
}

// ------------------------------------------------- cancel, time, late

#[test]
fn cancellation_fails_the_query_tells_the_provider_and_drops_the_late_answer() {
    let mut client = Client::new(ClientConfig::default());
    let a = client.query(&query("a"), &context(), 0);
    let b = client.query(&query("b"), &context(), 0);
    let _ = raw_out(&mut client);
    assert!(client.cancel(a));
    assert!(!client.cancel(a), "already cancelled");
    assert_eq!(
        answers(&events(&mut client)),
        [(a, Err("cancelled".to_owned()))]
    );
    let sent = out_json(&mut client, Framing::ContentLength);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["method"], "notifications/cancelled");
    assert_eq!(sent[0]["params"]["requestId"], a.get());
    assert!(sent[0].get("id").is_none(), "a notification");
    let mut input = cl(&good_answer(a.get(), json!("late")));
    input.extend(cl(&good_answer(b.get(), json!("b"))));
    client.handle_input(&input);
    let got = events(&mut client);
    assert!(matches!(&got[0], ClientEvent::Skipped(Skipped::LateAnswer(id)) if *id == a));
    assert_eq!(answers(&got), [(b, Ok(json!("b")))]);
    assert!(!client.cancel(b), "answered queries cannot be cancelled");
}

#[test]
fn deadlines_expire_exactly_and_late_answers_are_dropped() {
    let mut client = Client::new(config(|config| config.request_timeout_ms = 500));
    assert_eq!(client.poll_timeout(), None);
    let a = client.query(&query("a"), &context(), 1_000);
    let b = client.query(&query("b"), &context(), 1_200);
    assert_eq!(client.poll_timeout(), Some(1_500));
    client.handle_timeout(1_499);
    assert!(events(&mut client).is_empty());
    client.handle_timeout(1_500);
    assert_eq!(
        answers(&events(&mut client)),
        [(a, Err("provider_timeout".to_owned()))]
    );
    assert_eq!(client.poll_timeout(), Some(1_700));
    client.handle_input(&cl(&good_answer(a.get(), json!(1))));
    let got = events(&mut client);
    assert!(matches!(got.as_slice(), [ClientEvent::Skipped(Skipped::LateAnswer(id))] if *id == a));
    client.handle_input(&cl(&good_answer(b.get(), json!(2))));
    assert_eq!(answers(&events(&mut client)), [(b, Ok(json!(2)))]);
    assert_eq!(client.poll_timeout(), None);
    // Time far in the future expires nothing more and never overflows.
    client.handle_timeout(u64::MAX);
    assert!(events(&mut client).is_empty());
    let c = client.query(&query("c"), &context(), u64::MAX - 1);
    assert_eq!(client.poll_timeout(), Some(u64::MAX));
    client.handle_timeout(u64::MAX);
    assert_eq!(
        answers(&events(&mut client)),
        [(c, Err("provider_timeout".to_owned()))]
    );
}

#[test]
fn late_answer_memory_is_bounded() {
    let mut client = Client::new(config(|config| {
        config.request_timeout_ms = 1;
        config.late_answer_memory = 4;
    }));
    let ids: Vec<RequestId> = (0..10)
        .map(|_| client.query(&query("c"), &context(), 0))
        .collect();
    client.handle_timeout(1);
    assert_eq!(answers(&events(&mut client)).len(), 10);
    let mut input = Vec::new();
    for id in &ids {
        input.extend(cl(&good_answer(id.get(), json!(0))));
    }
    client.handle_input(&input);
    let got = events(&mut client);
    let late = got
        .iter()
        .filter(|event| matches!(event, ClientEvent::Skipped(Skipped::LateAnswer(_))))
        .count();
    let unknown = got
        .iter()
        .filter(|event| matches!(event, ClientEvent::Skipped(Skipped::UnknownId(_))))
        .count();
    assert_eq!((late, unknown), (4, 6));
    assert!(answers(&got).is_empty());
}

// ------------------------------------------------------------ handshake

#[test]
fn handshake_holds_queries_and_cancel_before_it_sends_nothing() {
    let mut client = Client::new(config(|config| {
        config.handshake = true;
        config.framing = Framing::NewlineDelimited;
    }));
    let sent = out_json(&mut client, Framing::NewlineDelimited);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["method"], "initialize");
    assert_eq!(sent[0]["params"]["protocolVersion"], "2025-11-25");
    let init_id = sent[0]["id"].as_i64().unwrap();
    let a = client.query(&query("a"), &context(), 0);
    let b = client.query(&query("b"), &context(), 0);
    assert!(
        raw_out(&mut client).is_empty(),
        "queries wait for the handshake"
    );
    assert!(client.cancel(a));
    assert!(
        raw_out(&mut client).is_empty(),
        "a query never sent is not cancelled on the wire"
    );
    client.handle_input(&nl(&json!({"jsonrpc":"2.0","id":init_id,
        "result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"x","version":"1"}}})
    .to_string()));
    let sent = out_json(&mut client, Framing::NewlineDelimited);
    let methods: Vec<&Value> = sent.iter().map(|message| &message["method"]).collect();
    assert_eq!(
        methods,
        [&json!("notifications/initialized"), &json!("tools/call")]
    );
    assert_eq!(
        sent[1]["id"],
        b.get(),
        "only the query not cancelled goes out"
    );
    let got = events(&mut client);
    assert!(
        matches!(&got[0], ClientEvent::Answer { id, outcome: Err(QueryError::Cancelled) } if *id == a)
    );
    assert!(
        matches!(&got[1], ClientEvent::Initialized { protocol_version } if protocol_version == "2025-06-18")
    );
}

#[test]
fn handshake_deadline_follows_the_callers_clock() {
    // The clock need not start at 0: a client made at t = 1_000_000 does
    // not time out its handshake at once.
    let mut client = Client::new(config(|config| {
        config.handshake = true;
        config.request_timeout_ms = 100;
    }));
    assert_eq!(client.poll_timeout(), None, "no query waits yet");
    let a = client.query(&query("a"), &context(), 1_000_000);
    assert_eq!(client.poll_timeout(), Some(1_000_100));
    client.handle_timeout(1_000_050);
    assert!(events(&mut client).is_empty());
    assert!(!client.needs_restart());
    // No answer to initialize: the provider is declared dead.
    client.handle_timeout(1_000_100);
    let got = events(&mut client);
    assert_eq!(answers(&got), [(a, Err("provider_unavailable".to_owned()))]);
    assert!(matches!(got.last(), Some(ClientEvent::Fatal(_))));
    assert!(client.needs_restart());
    // Restart: a fresh initialize with a fresh id, then the handshake works.
    let _ = raw_out(&mut client);
    client.restart(2_000_000);
    assert!(!client.needs_restart());
    let sent = out_json(&mut client, Framing::ContentLength);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["method"], "initialize");
    assert!(
        sent[0]["id"].as_i64().unwrap() > a.get(),
        "ids keep counting"
    );
    assert_eq!(client.poll_timeout(), None, "an idle client keeps no timer");
    let b = client.query(&query("b"), &context(), 2_000_000);
    assert_eq!(client.poll_timeout(), Some(2_000_100));
    client.handle_input(&cl(&json!({"jsonrpc":"2.0","id":sent[0]["id"],
        "result":{"protocolVersion":"2025-11-25"}})
    .to_string()));
    assert_eq!(client.poll_timeout(), Some(2_000_100), "b's own deadline");
    let sent = out_json(&mut client, Framing::ContentLength);
    assert_eq!(sent[1]["id"], b.get());
}

#[test]
fn a_refused_handshake_is_fatal() {
    let mut client = Client::new(config(|config| config.handshake = true));
    let init = out_json(&mut client, Framing::ContentLength);
    let a = client.query(&query("a"), &context(), 0);
    client.handle_input(&cl(&json!({"jsonrpc":"2.0","id":init[0]["id"],
        "error":{"code":-32601,"message":"no"}})
    .to_string()));
    let got = events(&mut client);
    assert_eq!(answers(&got), [(a, Err("provider_unavailable".to_owned()))]);
    assert!(matches!(got.last(), Some(ClientEvent::Fatal(_))));
    assert!(client.needs_restart());
    assert!(
        raw_out(&mut client).is_empty(),
        "the held query is never sent"
    );
}

// --------------------------------------------------- broken streams

#[test]
fn fatal_framing_error_fails_everything_and_asks_for_a_restart() {
    let mut client = Client::new(ClientConfig::default());
    let a = client.query(&query("a"), &context(), 0);
    let b = client.query(&query("b"), &context(), 0);
    let mut input = cl(&good_answer(a.get(), json!(1)));
    input.extend(b"Content-Length: 99999999999999999999999\r\n\r\n");
    input.extend(cl(&good_answer(b.get(), json!(2))));
    client.handle_input(&input);
    let got = events(&mut client);
    assert_eq!(
        answers(&got),
        [
            (a, Ok(json!(1))),
            (b, Err("provider_unavailable".to_owned()))
        ],
        "what came before the break counts; nothing after it"
    );
    assert!(matches!(got.last(), Some(ClientEvent::Fatal(_))));
    assert!(client.needs_restart());
    client.handle_input(&cl(&good_answer(b.get(), json!(2))));
    assert!(
        events(&mut client).is_empty(),
        "input is ignored until restart"
    );
    let _ = raw_out(&mut client);
    client.restart(0);
    let c = client.query(&query("c"), &context(), 0);
    assert!(c.get() > b.get());
    // A late answer for b from the old provider cannot alias c.
    client.handle_input(&cl(&good_answer(b.get(), json!(2))));
    client.handle_input(&cl(&good_answer(c.get(), json!(3))));
    let got = events(&mut client);
    assert!(matches!(&got[0], ClientEvent::Skipped(Skipped::LateAnswer(id)) if *id == b));
    assert_eq!(answers(&got), [(c, Ok(json!(3)))]);
}

#[test]
fn end_of_output_loses_the_connection() {
    let mut client = Client::new(ClientConfig::default());
    let a = client.query(&query("a"), &context(), 0);
    client.handle_input(b"Content-Length: 10\r\n\r\n{\"js");
    client.handle_end_of_input();
    let got = events(&mut client);
    assert_eq!(answers(&got), [(a, Err("provider_unavailable".to_owned()))]);
    let Some(ClientEvent::Fatal(reason)) = got.last() else {
        panic!("{got:?}")
    };
    assert!(reason.contains("mid-message"), "{reason}");
    assert!(client.needs_restart());
}

/// A provider that ends its output at a message boundary (it exited
/// cleanly) is `Closed`, not a broken stream; the query in flight is still
/// lost and a restart is needed.
#[test]
fn a_clean_end_of_output_is_closed_not_fatal() {
    let mut client = Client::new(ClientConfig::default());
    let a = client.query(&query("a"), &context(), 0);
    client.handle_end_of_input();
    let got = events(&mut client);
    assert_eq!(answers(&got), [(a, Err("provider_unavailable".to_owned()))]);
    assert!(matches!(got.last(), Some(ClientEvent::Closed)), "{got:?}");
    assert!(client.needs_restart());
}

/// The appending transmit path writes the same bytes as `poll_transmit`,
/// after what the buffer already holds.
#[test]
fn poll_transmit_into_appends_what_poll_transmit_returns() {
    let mut one = Client::new(ClientConfig::default());
    let mut other = Client::new(ClientConfig::default());
    for client in [&mut one, &mut other] {
        client.query(&query("a"), &context(), 0);
        client.query(&query("b"), &context(), 0);
    }
    let mut expected = b"kept".to_vec();
    while let Some(bytes) = one.poll_transmit() {
        expected.extend_from_slice(&bytes);
    }
    let mut appended = b"kept".to_vec();
    let mut count = 0;
    while other.poll_transmit_into(&mut appended) {
        count += 1;
    }
    assert_eq!(count, 2);
    assert_eq!(appended, expected);
}

#[test]
fn recoverable_framing_errors_are_skipped() {
    let mut client = Client::new(config(|config| {
        config.limits = Limits {
            max_header_bytes: 128,
            max_body_bytes: 64,
        }
    }));
    let a = client.query(&query("a"), &context(), 0);
    // Over the limit, for an id not in flight (one in flight would fail at
    // once: `client_fail_closed.rs`).
    let big = good_answer(a.get() + 1000, json!("x".repeat(200)));
    let mut input = cl(&big);
    input.extend(b"Content-Length: abc\r\n\r\n");
    client.handle_input(&input);
    let got = events(&mut client);
    assert!(answers(&got).is_empty());
    assert!(
        got.iter()
            .all(|event| matches!(event, ClientEvent::Skipped(Skipped::Invalid(_))))
    );
    assert!(!got.is_empty());
    assert!(!client.needs_restart());
    assert_eq!(client.in_flight(), 1);
}

/// An answer over the frame limit whose id cannot be found (it comes after
/// a `result` longer than the bytes the client keeps of a skipped message)
/// is dropped; the query it answered then times out saying so, and a query
/// asked after the drop times out plainly. (With the id near the start the
/// query fails at once: `client_fail_closed.rs`.)
#[test]
fn a_dropped_answer_is_named_by_the_timeout() {
    let mut client = Client::new(config(|config| {
        config.request_timeout_ms = 100;
        config.limits = Limits {
            max_header_bytes: 128,
            max_body_bytes: 64,
        }
    }));
    let a = client.query(&query("a"), &context(), 0);
    let result = json!({"content":[{"type":"text","text":"x".repeat(2000)}]});
    let id_last = format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{}}}"#, a.get());
    assert!(id_last.find("\"id\"").unwrap() > evidence_wire::client::Client::DROPPED_PREFIX_BYTES);
    client.handle_input(&cl(&id_last));
    let b = client.query(&query("b"), &context(), 10);
    let got = events(&mut client);
    assert!(
        matches!(got[..], [ClientEvent::Skipped(Skipped::Invalid(_))]),
        "{got:?}"
    );
    client.handle_timeout(110);
    let got = events(&mut client);
    let outcomes: Vec<(RequestId, &QueryError)> = got
        .iter()
        .filter_map(|event| match event {
            ClientEvent::Answer {
                id,
                outcome: Err(error),
            } => Some((*id, error)),
            _ => None,
        })
        .collect();
    assert_eq!(outcomes.len(), 2, "{got:?}");
    let (first, error) = outcomes[0];
    assert_eq!(first, a);
    let QueryError::TimeoutAfterDrop {
        timeout_ms: 100,
        dropped,
    } = error
    else {
        panic!("{error:?}")
    };
    assert!(dropped.contains("64"), "names the limit: {dropped}");
    assert_eq!(error.code(), "provider_timeout");
    assert_eq!(
        error.to_evidence_result().error.unwrap().details.unwrap()["dropped"],
        dropped.as_str()
    );
    assert_eq!(outcomes[1], (b, &QueryError::Timeout(100)));
    assert!(!client.needs_restart());
}

/// A provider whose stdout starts with a banner line: a newline-delimited
/// client drops that line and reads the answers after it; a Content-Length
/// client skips to the next header as before.
#[test]
fn a_banner_line_before_the_answers_is_dropped() {
    let cases = [
        (
            Framing::NewlineDelimited,
            "provider v1.2 listening on stdio",
        ),
        (Framing::NewlineDelimited, "Connected to the store"),
        (Framing::ContentLength, "provider v1.2 listening on stdio"),
    ];
    for (framing, banner) in cases {
        let mut client = Client::new(config(|config| config.framing = framing));
        let a = client.query(&query("a"), &context(), 0);
        let mut input = format!("{banner}\n").into_bytes();
        match framing {
            Framing::NewlineDelimited => {
                input.extend(good_answer(a.get(), json!("hello")).as_bytes());
                input.push(b'\n');
            }
            Framing::ContentLength => input.extend(cl(&good_answer(a.get(), json!("hello")))),
        }
        client.handle_input(&input);
        let got = events(&mut client);
        assert!(
            matches!(got.first(), Some(ClientEvent::Skipped(Skipped::Invalid(_)))),
            "{framing:?}: {got:?}"
        );
        assert_eq!(answers(&got), [(a, Ok(json!("hello")))], "{framing:?}");
        assert!(!client.needs_restart());
        // A banner is not taken for a dropped answer.
        let b = client.query(&query("b"), &context(), 0);
        client.handle_timeout(u64::MAX);
        let got = events(&mut client);
        assert_eq!(answers(&got), [(b, Err("provider_timeout".to_owned()))]);
        assert!(
            got.iter().any(|event| matches!(
                event,
                ClientEvent::Answer {
                    outcome: Err(QueryError::Timeout(_)),
                    ..
                }
            )),
            "{framing:?}: {got:?}"
        );
    }
}

#[test]
fn connection_lost_fails_queries_once() {
    let mut client = Client::new(ClientConfig::default());
    let a = client.query(&query("a"), &context(), 0);
    client.connection_lost("the child exited");
    client.connection_lost("again");
    let got = answers(&events(&mut client));
    assert_eq!(got, [(a, Err("provider_unavailable".to_owned()))]);
    assert_eq!(client.poll_timeout(), None);
}

#[cfg(feature = "signatures")]
#[test]
fn require_signature_accepts_a_signed_answer_and_rejects_an_unsigned_one() {
    use evidence_wire::evidence::{KeySet, sign};
    let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let mut keys = KeySet::new();
    keys.insert("k1", key.verifying_key());
    let mut client = Client::new(config(|config| {
        config.trust = TrustPolicy::RequireSignature { keys };
    }));
    let a = client.query(&query("a"), &context(), 0);
    let b = client.query(&query("b"), &context(), 0);
    let signed = sign(
        EvidenceResult::with_value(EvidenceValue::json(&"hello").unwrap()),
        "k1",
        &key,
        Profile::Rfc8785,
    )
    .unwrap();
    let mut input = cl(&json!({"jsonrpc":"2.0","id":a.get(),
        "result":{"content":[{"type":"json","json":signed}]}})
    .to_string());
    input.extend(cl(&good_answer(b.get(), json!("hello"))));
    client.handle_input(&input);
    let got = events(&mut client);
    assert_eq!(
        answers(&got),
        [
            (a, Ok(json!("hello"))),
            (b, Err("missing_signature".to_owned()))
        ]
    );
    let ClientEvent::Answer {
        outcome: Ok(evidence),
        ..
    } = &got[0]
    else {
        panic!()
    };
    assert_eq!(evidence.signer(), Some("k1"));
}

/// A traced query carries the caller's W3C trace context as
/// `params._meta` after `arguments`; an untraced one (or `None`) is byte
/// for byte the plain query.
#[test]
fn a_traced_query_carries_its_trace_context_in_meta() {
    use evidence_wire::trace::TraceContext;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let body_of = |trace: Option<&TraceContext>, traced: bool| {
        let mut client = Client::new(config(|config| config.handshake = false));
        if traced {
            client.query_traced(&query("c"), &context(), trace, 0);
        } else {
            client.query(&query("c"), &context(), 0);
        }
        String::from_utf8(client.poll_message().expect("a request")).unwrap()
    };
    let plain = body_of(None, false);
    assert_eq!(body_of(None, true), plain, "no context: the same bytes");
    let trace = TraceContext::parse(PARENT, Some("rojo=1")).unwrap();
    let traced = body_of(Some(&trace), true);
    let meta = format!(r#","_meta":{{"traceparent":"{PARENT}","tracestate":"rojo=1"}}"#);
    // The plain body ends with the closing braces of `arguments`, `params`
    // and the request: the traced one has `_meta` after `arguments`.
    let (head, tail) = plain.split_at(plain.len() - 2);
    assert_eq!(tail, "}}", "{plain}");
    assert_eq!(traced, format!("{head}{meta}{tail}"), "{plain}");
}
