//! The in-flight cap on a framed connection (backpressure) and graceful
//! shutdown (drain, then expiry at the deadline), on the sans-IO server.
//!
//! At the cap the server holds the next message unread and asks for no
//! more input (`wants_input` false) until an answer frees a slot; nothing
//! is refused, ids and answers keep their pairing, and the read-ahead is
//! bounded by what the adapter fed. Draining answers every message already
//! received (new calls with the retryable `OVERLOADED` error) while the
//! queries in flight run on; `expire_in_flight` answers the rest.

use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
use evidence_wire::frame::{Decoder, Framing, Limits};
use evidence_wire::server::{Overload, Server, ServerConfig, ServerEvent, Ticket};
use serde_json::{Value, json};

fn call(id: u64) -> Vec<u8> {
    let mut line = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "name":"evidence_query","arguments":{
            "query":{"provider_id":"p","check_id":"c","params":{"n":id}},
            "context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s",
                "stage_id":"st","trigger_id":"t",
                "trigger_time":{"kind":"unix_millis","value":0}}}}})
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

fn server(max_in_flight: usize, overload: Overload) -> Server {
    let mut config = ServerConfig::default();
    config.max_in_flight = max_in_flight;
    config.overload = overload;
    Server::new(config)
}

/// The queries handed out since the last call, with the `n` each carries.
fn queries(server: &mut Server) -> Vec<(Ticket, u64)> {
    std::iter::from_fn(|| server.poll_event())
        .filter_map(|event| match event {
            ServerEvent::EvidenceQuery { ticket, query, .. } => {
                let n = query.params.as_ref().and_then(|p| p["n"].as_u64())?;
                Some((ticket, n))
            }
            _ => None,
        })
        .collect()
}

fn answers(server: &mut Server) -> Vec<Value> {
    let mut decoder = Decoder::with_framing(Framing::NewlineDelimited, Limits::default());
    while let Some(bytes) = server.poll_transmit() {
        decoder.push(&bytes);
    }
    std::iter::from_fn(|| decoder.poll_frame())
        .map(|frame| serde_json::from_slice(&frame.expect("framed").body).expect("JSON"))
        .collect()
}

fn answer_with(n: u64) -> EvidenceResult {
    EvidenceResult::with_value(EvidenceValue::json(&n).expect("a number"))
}

/// The value an answer carries (Decision Gate dialect: a json content item).
fn value_of(answer: &Value) -> u64 {
    answer["result"]["content"][0]["json"]["value"]["value"]
        .as_u64()
        .unwrap_or_else(|| panic!("no value in {answer}"))
}

/// 1,000 calls fed at once to a server capped at 8: no refusal, every
/// call answered with its own value, and at no time more than the cap in
/// flight; `wants_input` is false exactly while calls are held.
#[test]
fn a_pipelining_peer_is_held_at_the_cap_not_refused() {
    const CALLS: u64 = 1000;
    let mut server = server(8, Overload::Backpressure);
    let input: Vec<u8> = (1..=CALLS).flat_map(call).collect();
    assert!(server.wants_input());
    server.handle_input(&input);
    server.handle_end_of_input();
    let mut seen = Vec::new();
    let mut in_flight = queries(&mut server);
    assert_eq!(in_flight.len(), 8, "only the cap is handed out");
    assert!(!server.wants_input(), "held at the cap: read nothing more");
    assert!(!server.is_input_closed(), "held messages are still to come");
    while let Some((ticket, n)) = in_flight.pop() {
        assert!(server.in_flight() <= 8);
        server.respond(ticket, answer_with(n)).expect("in flight");
        in_flight.extend(queries(&mut server));
        for answer in answers(&mut server) {
            assert_eq!(answer["id"].as_u64(), Some(value_of(&answer)), "{answer}");
            seen.push(value_of(&answer));
        }
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        (1..=CALLS).collect::<Vec<_>>(),
        "each call answered once"
    );
    assert!(server.is_finished());
}

/// With refusal chosen, the same peer gets `OVERLOADED` past the cap (the
/// old behaviour, kept as a configuration choice).
#[test]
fn refusal_is_still_a_choice() {
    let mut server = server(2, Overload::Refuse);
    server.handle_input(&[call(1), call(2), call(3)].concat());
    assert!(server.wants_input(), "refusing never stops reading");
    assert_eq!(queries(&mut server).len(), 2);
    let refused = answers(&mut server);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["id"], 3);
    assert_eq!(refused[0]["error"]["code"], -32072);
}

/// Held messages are bounded by what the adapter fed: the server takes no
/// bytes it was not given, and keeps its place when fed in pieces.
#[test]
fn input_fed_in_pieces_resumes_where_it_stopped() {
    let mut server = server(1, Overload::Backpressure);
    let input: Vec<u8> = (1..=3).flat_map(call).collect();
    let (first, rest) = input.split_at(input.len() / 2);
    server.handle_input(first);
    let mut got = queries(&mut server);
    assert_eq!(got.len(), 1);
    // The adapter read one chunk too many: it is kept, not lost.
    server.handle_input(rest);
    assert!(queries(&mut server).is_empty());
    assert!(!server.wants_input());
    for expected in 2..=3 {
        let (ticket, n) = got.pop().expect("one in flight");
        server.respond(ticket, answer_with(n)).expect("in flight");
        got = queries(&mut server);
        assert_eq!(got.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [expected]);
    }
    assert!(
        server.wants_input(),
        "nothing held once the last one started"
    );
}

/// At the cap a cancellation is not held behind the busy slots: it is
/// acted on as it arrives (freeing its query's slot), and the call after
/// it then starts; events keep the order of the input.
#[test]
fn at_the_cap_a_cancellation_frees_its_slot_for_the_next_call() {
    let mut server = server(2, Overload::Backpressure);
    let cancel =
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;
    let cancel = [cancel.as_slice(), b"\n"].concat();
    server.handle_input(&[call(1), call(2), cancel, call(3)].concat());
    let events: Vec<ServerEvent> = std::iter::from_fn(|| server.poll_event())
        .filter(|event| !matches!(event, ServerEvent::Handled(_)))
        .collect();
    let n = |query: &evidence_wire::evidence::EvidenceQuery| {
        query.params.as_ref().and_then(|p| p["n"].as_u64())
    };
    match &events[..] {
        [
            ServerEvent::EvidenceQuery {
                ticket: first,
                query: q1,
                ..
            },
            ServerEvent::EvidenceQuery { query: q2, .. },
            ServerEvent::Cancelled { ticket, .. },
            ServerEvent::EvidenceQuery { query: q3, .. },
        ] => {
            assert_eq!((n(q1), n(q2), n(q3)), (Some(1), Some(2), Some(3)));
            assert_eq!(ticket, first, "call 1 is the one cancelled");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        server.in_flight(),
        2,
        "call 1 cancelled, calls 2 and 3 running"
    );
    assert!(
        server.wants_input(),
        "nothing is held: the next message is read"
    );
}

/// End of input closes input only once the held messages are handled.
#[test]
fn end_of_input_waits_for_held_messages_then_closes() {
    let mut server = server(1, Overload::Backpressure);
    server.handle_input(&[call(1), call(2)].concat());
    server.handle_end_of_input();
    let (ticket, n) = queries(&mut server)[0];
    assert!(!server.is_input_closed(), "call 2 is still to be handled");
    server.respond(ticket, answer_with(n)).expect("in flight");
    let next = queries(&mut server);
    assert_eq!(next.len(), 1);
    assert!(server.is_input_closed(), "nothing held after end of input");
    server
        .respond(next[0].0, answer_with(2))
        .expect("in flight");
    assert_eq!(answers(&mut server).len(), 2);
    assert!(server.is_finished());
}

/// Draining: the calls in flight run on and are answered; every message
/// already received is answered too, a call with the retryable
/// `OVERLOADED` error; nothing more is read.
#[test]
fn draining_answers_what_was_received_and_lets_the_rest_finish() {
    let mut server = server(2, Overload::Backpressure);
    let ping = b"{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}\n".to_vec();
    server.handle_input(&[call(1), call(2), call(3), ping, call(4)].concat());
    let running = queries(&mut server);
    assert_eq!(running.len(), 2);
    server.drain();
    assert!(server.is_draining());
    assert!(!server.wants_input());
    assert!(server.is_input_closed());
    assert!(queries(&mut server).is_empty(), "no new query starts");
    let refused = answers(&mut server);
    let ids: Vec<&Value> = refused.iter().map(|answer| &answer["id"]).collect();
    assert_eq!(ids, [&json!(3), &json!("p"), &json!(4)]);
    for answer in [&refused[0], &refused[2]] {
        assert_eq!(answer["error"]["code"], -32072, "{answer}");
        assert_eq!(answer["error"]["data"]["retryable"], true, "{answer}");
    }
    assert!(refused[1]["result"].is_object(), "a ping is still answered");
    // More input is ignored.
    server.handle_input(&call(5));
    assert!(queries(&mut server).is_empty());
    assert!(answers(&mut server).is_empty());
    // The ones in flight finish normally.
    for (ticket, n) in running {
        server
            .respond(ticket, answer_with(n))
            .expect("still in flight");
    }
    let finished = answers(&mut server);
    assert_eq!(finished.iter().map(value_of).collect::<Vec<_>>(), [1, 2]);
    assert!(server.is_finished());
}

/// At the deadline the queries still running are answered with the
/// retryable error; a late answer is refused and sends nothing.
#[test]
fn expiry_answers_what_is_still_running() {
    let mut server = server(4, Overload::Backpressure);
    server.handle_input(&[call(1), call(2)].concat());
    let running = queries(&mut server);
    server.drain();
    server
        .respond(running[0].0, answer_with(1))
        .expect("in flight");
    assert_eq!(server.expire_in_flight(), 1);
    let out = answers(&mut server);
    assert_eq!(value_of(&out[0]), 1);
    assert_eq!(out[1]["id"], 2);
    assert_eq!(out[1]["error"]["code"], -32072);
    assert_eq!(out[1]["error"]["data"]["retryable"], true);
    assert!(server.respond(running[1].0, answer_with(2)).is_err());
    assert!(answers(&mut server).is_empty());
    assert!(server.is_finished());
}

/// Every slot is taken by a call that will not finish on its own: the
/// peer's cancellation and its ping are still read and acted on (only a
/// message that may start a call waits for a slot).
#[test]
fn at_the_cap_a_cancellation_and_a_ping_still_get_through() {
    let mut server = server(1, Overload::Backpressure);
    server.handle_input(&call(1));
    assert_eq!(queries(&mut server).len(), 1);
    assert_eq!(server.in_flight(), 1);
    let ping = b"{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}\n";
    server.handle_input(ping);
    let out = answers(&mut server);
    assert_eq!(out.len(), 1, "the ping is answered at the cap: {out:?}");
    assert_eq!(out[0]["id"], "p");
    let cancel = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}\n";
    server.handle_input(cancel);
    let cancelled = std::iter::from_fn(|| server.poll_event())
        .any(|event| matches!(event, ServerEvent::Cancelled { .. }));
    assert!(cancelled, "the cancellation reached the stuck call");
    assert_eq!(server.in_flight(), 0, "its slot is free");
    assert!(server.wants_input());
}

/// `expire_in_flight` frees every slot, so a call held at the cap goes on
/// (without a drain, nothing else would ever resume it).
#[test]
fn expiry_resumes_what_was_held_at_the_cap() {
    let mut server = server(1, Overload::Backpressure);
    server.handle_input(&[call(1), call(2)].concat());
    assert_eq!(queries(&mut server).len(), 1);
    assert!(!server.wants_input(), "call 2 is held");
    assert_eq!(server.expire_in_flight(), 1);
    let started = queries(&mut server);
    assert_eq!(started.len(), 1, "call 2 started once call 1 expired");
    assert_eq!(started[0].1, 2);
    assert!(server.wants_input());
}

/// `poll_transmit_into` appends exactly the bytes `poll_transmit` returns,
/// message by message, in both framings (answers, a parse error, a ping).
#[test]
fn transmit_into_appends_what_poll_transmit_returns() {
    for framing in [Framing::NewlineDelimited, Framing::ContentLength] {
        let mut input = Vec::new();
        for id in 1..=5 {
            let body = call(id);
            let body = body.strip_suffix(b"\n").unwrap_or(&body);
            match framing {
                Framing::NewlineDelimited => {
                    input.extend_from_slice(body);
                    input.push(b'\n');
                }
                Framing::ContentLength => {
                    input.extend_from_slice(
                        format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                    );
                    input.extend_from_slice(body);
                }
            }
        }
        let extra: &[&[u8]] = match framing {
            Framing::NewlineDelimited => &[
                b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}\n",
                b"{not json\n",
            ],
            Framing::ContentLength => &[b"Content-Length: 9\r\n\r\n{not json"],
        };
        for bytes in extra {
            input.extend_from_slice(bytes);
        }
        let run = |server: &mut Server| {
            server.handle_input(&input);
            for (ticket, n) in queries(server) {
                server.respond(ticket, answer_with(n)).expect("answered");
            }
        };
        let (mut returned, mut appended) = (
            server(64, Overload::Backpressure),
            server(64, Overload::Backpressure),
        );
        run(&mut returned);
        run(&mut appended);
        let mut expected = b"kept".to_vec();
        let mut messages = 0;
        while let Some(bytes) = returned.poll_transmit() {
            expected.extend_from_slice(&bytes);
            messages += 1;
        }
        let mut out = b"kept".to_vec();
        let mut appends = 0;
        while appended.poll_transmit_into(&mut out) {
            appends += 1;
        }
        assert!(messages >= 6, "{framing:?}: {messages} messages");
        assert_eq!(appends, messages, "{framing:?}");
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&expected),
            "{framing:?}"
        );
    }
}
