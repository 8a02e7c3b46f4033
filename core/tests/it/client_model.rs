//! Model-based property test of the caller-side state machine.
//!
//! A fake provider reads what the client sends and, when the generated
//! script says so, writes answers of every kind (good in any of the three
//! shapes, wrong hash, JSON-RPC error, unreadable result, wrong id),
//! notifications, requests, garbage and broken frames; its bytes reach the
//! client in random chunks, between queries, cancellations, clock jumps,
//! end of output and restarts. Whatever happens, the client must never
//! panic, never report two outcomes for one query, never lose a query
//! (each gets exactly one outcome once time runs out), and every outcome
//! must be explained by what the provider actually did.

use std::collections::{BTreeMap, BTreeSet};

use evidence_wire::canonical::Profile;
use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId};
use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::{Decoder, Framing, Limits};
use proptest::prelude::*;
use serde_json::{Value, json};

const TIMEOUT: u64 = 100;

/// What the provider writes for [`Op::Garbage`]: not JSON, so the client
/// drops it.
const GARBAGE: &str = "{not json";

/// What the provider writes for [`Op::Break`]: a Content-Length that
/// overflows.
const BREAK: &str = "Content-Length: 99999999999999999999999\r\n\r\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply {
    Good,
    WrongHash,
    RpcError,
    Unreadable,
    /// A good answer carrying an id nobody asked for.
    WrongId,
    /// An answer the client must drop (not JSON-RPC 2.0, or nested past
    /// the envelope limit) that carries the query's id: it fails at once.
    Dropped,
}

#[derive(Clone, Debug)]
enum Op {
    Query,
    Cancel(usize),
    Advance(u64),
    /// The provider answers the n-th request it has read (in any order).
    Answer(usize, Reply, u8),
    AnswerInitialize,
    Notify,
    ProviderPing,
    Garbage,
    /// Deliver the next n bytes the provider wrote.
    Deliver(usize),
    /// The provider closes its output mid-stream; the adapter restarts it.
    EndAndRestart,
    /// A fatal framing error (a Content-Length that overflows).
    Break,
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        5 => Just(Reply::Good),
        1 => Just(Reply::WrongHash),
        1 => Just(Reply::RpcError),
        1 => Just(Reply::Unreadable),
        1 => Just(Reply::WrongId),
        1 => Just(Reply::Dropped),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Query),
        1 => (0usize..8).prop_map(Op::Cancel),
        2 => (0u64..80).prop_map(Op::Advance),
        5 => (0usize..8, reply(), any::<u8>()).prop_map(|(n, r, s)| Op::Answer(n, r, s)),
        1 => Just(Op::AnswerInitialize),
        1 => Just(Op::Notify),
        1 => Just(Op::ProviderPing),
        1 => Just(Op::Garbage),
        6 => (1usize..300).prop_map(Op::Deliver),
        1 => Just(Op::EndAndRestart),
        1 => Just(Op::Break),
    ]
}

/// The value the provider puts in its answer for request `id`.
fn value_for(id: i64) -> Value {
    json!({"id": id})
}

/// The outcomes the script allows for one query, learned as it runs.
#[derive(Debug, Default)]
struct Allowed {
    issued_at: u64,
    /// Kinds of answers the provider wrote for this id.
    replies: BTreeSet<&'static str>,
    cancelled: bool,
    connection_lost: bool,
    /// Garbage (a message the client must drop) reached or may reach the
    /// client after this query was issued.
    garbage_after: bool,
}

struct Provider {
    framing: Framing,
    /// What the client wrote, decoded.
    decoder: Decoder,
    /// Ids of `tools/call` requests read, in order.
    calls: Vec<i64>,
    initialize: Option<i64>,
    /// Bytes written, not yet delivered.
    to_client: Vec<u8>,
    /// One past the last byte of the last junk (garbage, a broken header)
    /// in `to_client`, while that byte is undelivered.
    junk_end: Option<usize>,
}

impl Provider {
    fn new(framing: Framing) -> Self {
        Provider {
            framing,
            decoder: Decoder::with_framing(framing, Limits::default()),
            calls: Vec::new(),
            initialize: None,
            to_client: Vec::new(),
            junk_end: None,
        }
    }

    fn read(&mut self, bytes: &[u8]) {
        self.decoder.push(bytes);
        while let Some(frame) = self.decoder.poll_frame() {
            let message: Value = serde_json::from_slice(&frame.unwrap().body).unwrap();
            assert_eq!(message["jsonrpc"], "2.0", "the client writes JSON-RPC 2.0");
            match message["method"].as_str() {
                Some("tools/call") => {
                    let id = message["id"].as_i64().expect("an integer id");
                    assert!(!self.calls.contains(&id), "request id {id} reused");
                    assert_eq!(message["params"]["name"], "evidence_query");
                    self.calls.push(id);
                }
                Some("initialize") => self.initialize = message["id"].as_i64(),
                Some("notifications/initialized" | "notifications/cancelled") => {
                    assert!(message.get("id").is_none(), "notifications carry no id");
                }
                Some(other) => panic!("unexpected method {other}"),
                None => assert!(message.get("result").is_some() || message.get("error").is_some()),
            }
        }
    }

    fn write(&mut self, body: &str) {
        evidence_wire::frame::encode(self.framing, body.as_bytes(), &mut self.to_client).unwrap();
    }
}

fn answer_body(id: i64, reply: Reply, shape: u8) -> String {
    let good = EvidenceResult::with_value(EvidenceValue::json(&value_for(id)).unwrap())
        .with_computed_hash(Profile::Rfc8785)
        .unwrap();
    let evidence = match reply {
        Reply::WrongHash => {
            let mut wrong = good;
            wrong.value = Some(EvidenceValue::json(&value_for(id + 1)).unwrap());
            wrong
        }
        _ => good,
    };
    let text = String::from_utf8(evidence.to_json_vec()).unwrap();
    let result = match shape % 3 {
        0 => json!({"content":[{"type":"json","json":evidence}]}),
        1 => {
            json!({"content":[{"type":"text","text":text}],"structuredContent":evidence,"isError":false})
        }
        _ => json!({"content":[{"type":"text","text":text}]}),
    };
    match reply {
        Reply::Good | Reply::WrongHash => {
            json!({"jsonrpc":"2.0","id":id,"result":result}).to_string()
        }
        Reply::RpcError => json!({"jsonrpc":"2.0","id":id,
            "error":{"code":-32602,"message":"bad params"}})
        .to_string(),
        Reply::Unreadable => {
            json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"image"}]}}).to_string()
        }
        Reply::WrongId => json!({"jsonrpc":"2.0","id":id + 1_000_000,"result":result}).to_string(),
        Reply::Dropped if shape % 2 == 0 => {
            json!({"jsonrpc":"1.0","id":id,"result":result}).to_string()
        }
        Reply::Dropped => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{}1{}}}"#,
            "[".repeat(130),
            "]".repeat(130)
        ),
    }
}

struct Run {
    client: Client,
    provider: Provider,
    now: u64,
    allowed: BTreeMap<i64, Allowed>,
    outcomes: BTreeMap<i64, Result<Value, QueryError>>,
    ids: Vec<RequestId>,
}

impl Run {
    fn pump(&mut self) {
        while let Some(bytes) = self.client.poll_transmit() {
            self.provider.read(&bytes);
        }
        while let Some(event) = self.client.poll_event() {
            match event {
                ClientEvent::Answer { id, outcome } => {
                    let id = id.get();
                    let allowed = self
                        .allowed
                        .get(&id)
                        .unwrap_or_else(|| panic!("outcome for {id}, never queried"));
                    let outcome = outcome.map(|evidence| {
                        evidence
                            .result()
                            .value
                            .as_ref()
                            .map_or(Value::Null, |value| value.to_value().unwrap())
                    });
                    match &outcome {
                        Ok(value) => {
                            assert!(allowed.replies.contains("good"), "{id}: ok from nothing");
                            assert_eq!(*value, value_for(id), "{id}: someone else's evidence");
                        }
                        Err(QueryError::Verification(_)) => {
                            assert!(allowed.replies.contains("wrong_hash"), "{id}");
                        }
                        Err(QueryError::Provider { code, .. }) => {
                            assert_eq!(*code, -32602);
                            assert!(allowed.replies.contains("rpc_error"), "{id}");
                        }
                        Err(QueryError::BadResult(_)) => {
                            assert!(allowed.replies.contains("unreadable"), "{id}");
                        }
                        Err(QueryError::AnswerDropped(_)) => {
                            assert!(allowed.replies.contains("dropped"), "{id}: dropped nothing");
                        }
                        Err(QueryError::Timeout(ms)) => {
                            assert_eq!(*ms, TIMEOUT);
                            assert!(
                                self.now >= allowed.issued_at + TIMEOUT,
                                "{id}: early timeout"
                            );
                        }
                        Err(QueryError::TimeoutAfterDrop {
                            timeout_ms,
                            dropped,
                        }) => {
                            assert_eq!(*timeout_ms, TIMEOUT);
                            assert!(
                                self.now >= allowed.issued_at + TIMEOUT,
                                "{id}: early timeout"
                            );
                            assert!(
                                allowed.garbage_after,
                                "{id}: a dropped message nobody wrote: {dropped}"
                            );
                        }
                        Err(QueryError::Cancelled) => assert!(allowed.cancelled, "{id}"),
                        Err(QueryError::ConnectionLost(_)) => {
                            assert!(allowed.connection_lost, "{id}: lost without a cause");
                        }
                        Err(other) => panic!("{id}: unexpected {other}"),
                    }
                    assert!(
                        self.outcomes.insert(id, outcome).is_none(),
                        "{id}: two outcomes"
                    );
                }
                ClientEvent::Fatal(_) | ClientEvent::Closed => {
                    assert!(self.client.needs_restart());
                    // Every query in flight was failed with the fatal error.
                    assert_eq!(self.client.in_flight(), 0);
                }
                ClientEvent::Skipped(_) | ClientEvent::Initialized { .. } => {}
                other => panic!("unexpected event {other:?}"),
            }
        }
        assert_eq!(
            self.client.in_flight(),
            self.allowed.len() - self.outcomes.len(),
            "in_flight counts the queries without an outcome"
        );
    }

    fn restart(&mut self) {
        for (id, allowed) in &mut self.allowed {
            if !self.outcomes.contains_key(id) {
                allowed.connection_lost = true;
            }
        }
        self.client.restart(self.now);
        self.provider = Provider::new(self.provider.framing);
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Query => {
                let query = EvidenceQuery::new("p", "c");
                let context = EvidenceContext::adhoc(TriggerTime::Logical(1));
                let request = self.client.query(&query, &context, self.now);
                self.ids.push(request);
                let id = request.get();
                let fresh = Allowed {
                    issued_at: self.now,
                    // Garbage written earlier but not delivered yet reaches
                    // the client after this query.
                    garbage_after: self.provider.junk_end.is_some(),
                    ..Allowed::default()
                };
                assert!(self.allowed.insert(id, fresh).is_none(), "id {id} reused");
            }
            Op::Cancel(n) => {
                // Any query, open or not: cancel says whether it was open.
                if self.ids.is_empty() {
                    return;
                }
                let id = self.ids[n % self.ids.len()];
                let open = !self.outcomes.contains_key(&id.get());
                if open {
                    if let Some(allowed) = self.allowed.get_mut(&id.get()) {
                        allowed.cancelled = true;
                    }
                }
                assert_eq!(self.client.cancel(id), open);
            }
            Op::Advance(dt) => {
                self.now += dt;
                self.client.handle_timeout(self.now);
            }
            Op::Answer(n, reply, shape) => {
                if self.provider.calls.is_empty() {
                    return;
                }
                let id = self.provider.calls[n % self.provider.calls.len()];
                let kind = match reply {
                    Reply::Good => "good",
                    Reply::WrongHash => "wrong_hash",
                    Reply::RpcError => "rpc_error",
                    Reply::Unreadable => "unreadable",
                    Reply::WrongId => "wrong_id",
                    Reply::Dropped => "dropped",
                };
                if let Some(allowed) = self.allowed.get_mut(&id) {
                    allowed.replies.insert(kind);
                }
                let body = answer_body(id, *reply, *shape);
                self.provider.write(&body);
                if *reply == Reply::Dropped {
                    // If its query no longer waits, it is a dropped message
                    // like garbage for the queries that do.
                    for allowed in self.allowed.values_mut() {
                        allowed.garbage_after = true;
                    }
                    self.provider.junk_end = Some(self.provider.to_client.len());
                }
            }
            Op::AnswerInitialize => {
                if let Some(id) = self.provider.initialize.take() {
                    self.provider.write(
                        &json!({"jsonrpc":"2.0","id":id,"result":{"protocolVersion":"2025-06-18",
                            "capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"0"}}})
                        .to_string(),
                    );
                }
            }
            Op::Notify => self.provider.write(
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#,
            ),
            Op::ProviderPing => self
                .provider
                .write(r#"{"jsonrpc":"2.0","id":"provider-1","method":"ping"}"#),
            Op::Garbage => {
                for allowed in self.allowed.values_mut() {
                    allowed.garbage_after = true;
                }
                self.provider.write(GARBAGE);
                self.provider.junk_end = Some(self.provider.to_client.len());
            }
            Op::Deliver(n) => {
                let n = (*n).min(self.provider.to_client.len());
                let bytes: Vec<u8> = self.provider.to_client.drain(..n).collect();
                self.provider.junk_end = self
                    .provider
                    .junk_end
                    .and_then(|end| end.checked_sub(n))
                    .filter(|end| *end > 0);
                if !bytes.is_empty() {
                    let was_broken = self.client.needs_restart();
                    self.client.handle_input(&bytes);
                    if !was_broken && self.client.needs_restart() {
                        self.mark_lost();
                    }
                }
            }
            Op::EndAndRestart => {
                self.mark_lost();
                self.client.handle_end_of_input();
                self.pump();
                self.restart();
            }
            Op::Break => {
                // Fatal in Content-Length framing; lines the client drops in
                // newline-delimited framing.
                for allowed in self.allowed.values_mut() {
                    allowed.garbage_after = true;
                }
                self.provider.to_client.extend_from_slice(BREAK.as_bytes());
                self.provider.junk_end = Some(self.provider.to_client.len());
            }
        }
        if self.client.needs_restart() {
            // The adapter restarts a broken provider at once.
            self.mark_lost();
            self.pump();
            self.restart();
        }
        self.pump();
    }

    fn mark_lost(&mut self) {
        for (id, allowed) in &mut self.allowed {
            if !self.outcomes.contains_key(id) {
                allowed.connection_lost = true;
            }
        }
    }
}

fn check(framing: Framing, handshake: bool, ops: &[Op]) {
    let mut config = ClientConfig::default();
    config.framing = framing;
    config.handshake = handshake;
    config.request_timeout_ms = TIMEOUT;
    let mut run = Run {
        client: Client::new(config),
        provider: Provider::new(framing),
        now: 0,
        allowed: BTreeMap::new(),
        outcomes: BTreeMap::new(),
        ids: Vec::new(),
    };
    run.pump();
    for op in ops {
        run.step(op);
    }
    // Deliver everything, then let time run out: every query has an outcome.
    let rest = run.provider.to_client.len();
    run.step(&Op::Deliver(rest));
    run.step(&Op::Advance(TIMEOUT * 4));
    assert_eq!(run.client.in_flight(), 0);
    assert_eq!(run.client.poll_timeout(), None);
    let queried: BTreeSet<i64> = run.allowed.keys().copied().collect();
    let answered: BTreeSet<i64> = run.outcomes.keys().copied().collect();
    assert_eq!(queried, answered, "a query was lost");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn decision_gate_style_never_loses_or_duplicates(
        ops in prop::collection::vec(op(), 0..120),
        newline in any::<bool>(),
    ) {
        let framing = if newline { Framing::NewlineDelimited } else { Framing::ContentLength };
        check(framing, false, &ops);
    }

    #[test]
    fn with_handshake_never_loses_or_duplicates(
        ops in prop::collection::vec(op(), 0..120),
        newline in any::<bool>(),
    ) {
        let framing = if newline { Framing::NewlineDelimited } else { Framing::ContentLength };
        check(framing, true, &ops);
    }
}

#[test]
fn every_reply_kind_in_one_script() {
    let mut ops = vec![Op::AnswerInitialize, Op::Deliver(10_000)];
    for n in 0..5 {
        ops.push(Op::Query);
        let reply = [
            Reply::Good,
            Reply::WrongHash,
            Reply::RpcError,
            Reply::Unreadable,
            Reply::WrongId,
        ][n];
        ops.push(Op::Answer(n, reply, n as u8));
    }
    ops.extend([Op::Notify, Op::ProviderPing, Op::Garbage, Op::Deliver(7)]);
    for _ in 0..2000 {
        ops.push(Op::Deliver(3));
    }
    for framing in [Framing::ContentLength, Framing::NewlineDelimited] {
        for handshake in [false, true] {
            check(framing, handshake, &ops);
        }
    }
}
