//! Model-based property test of the provider-side state machine.
//!
//! A generated peer script (evidence queries, pings, `initialize`,
//! notifications, cancellations of earlier queries, garbage) is framed in
//! either framing, cut into random chunks and fed in between random
//! embedder operations (answer the oldest, newest or any open ticket,
//! answer a ticket again). Whatever the order, the server must never
//! panic, never answer a request twice, never answer a notification, and
//! never lose a request: each one gets exactly one reply, or (for a
//! cancelled query) a `Cancelled` event and no reply. Each answer must carry
//! the evidence the embedder gave for *that* request.

use std::collections::{BTreeMap, BTreeSet};

use evidence_wire::dialect::from_tool_result;
use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
use evidence_wire::frame::{Decoder, Framing, Limits};
use evidence_wire::server::{RespondError, Server, ServerConfig, ServerEvent, Ticket};
use proptest::prelude::*;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
enum Item {
    Query,
    Ping,
    Initialize,
    Notification,
    /// Cancel the query made by the n-th earlier item (if it was a query).
    Cancel(usize),
    Garbage,
}

#[derive(Clone, Debug)]
enum Op {
    /// Feed the next n bytes (at least 1).
    Feed(usize),
    RespondOldest,
    RespondNewest,
    RespondAt(usize),
    /// Answer a ticket that was already answered or cancelled.
    RespondAgain(usize),
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        6 => Just(Item::Query),
        1 => Just(Item::Ping),
        1 => Just(Item::Initialize),
        1 => Just(Item::Notification),
        2 => (0usize..64).prop_map(Item::Cancel),
        1 => Just(Item::Garbage),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..200).prop_map(Op::Feed),
        2 => Just(Op::RespondOldest),
        2 => Just(Op::RespondNewest),
        2 => (0usize..16).prop_map(Op::RespondAt),
        1 => (0usize..16).prop_map(Op::RespondAgain),
    ]
}

/// The request id of item `index`: integers and strings alternate.
fn id_of(index: usize) -> Value {
    if index % 2 == 0 {
        json!(index)
    } else {
        json!(format!("r{index}"))
    }
}

fn body_of(index: usize, item: &Item) -> String {
    let id = id_of(index);
    match item {
        Item::Query => json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
            "name":"evidence_query","arguments":{
                "query":{"provider_id":"p","check_id":format!("q{index}")},
                "context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s",
                           "stage_id":"st","trigger_id":"t",
                           "trigger_time":{"kind":"logical","value":index}}}}})
        .to_string(),
        Item::Ping => json!({"jsonrpc":"2.0","id":id,"method":"ping"}).to_string(),
        Item::Initialize => json!({"jsonrpc":"2.0","id":id,"method":"initialize",
            "params":{"protocolVersion":"2025-06-18","capabilities":{},
                      "clientInfo":{"name":"model","version":"0"}}})
        .to_string(),
        Item::Notification => {
            json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"n":index}})
                .to_string()
        }
        Item::Cancel(back) => {
            let target = index.saturating_sub(back + 1);
            json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                   "params":{"requestId":id_of(target),"reason":"model"}})
            .to_string()
        }
        Item::Garbage => format!("{{garbage {index}"),
    }
}

fn encode(framing: Framing, body: &str, out: &mut Vec<u8>) {
    evidence_wire::frame::encode(framing, body.as_bytes(), out).unwrap();
}

/// The evidence the embedder gives for the query of item `index`.
fn answer_for(index: usize) -> EvidenceResult {
    EvidenceResult::with_value(EvidenceValue::json(&index).unwrap())
}

struct Model {
    server: Server,
    /// Open tickets, oldest first, with the item index of their query.
    open: Vec<(Ticket, usize)>,
    /// Tickets answered or cancelled.
    closed: Vec<Ticket>,
    cancelled: BTreeSet<Ticket>,
    /// Item index of each query that was cancelled (by event).
    cancelled_items: BTreeSet<usize>,
    queries_seen: BTreeSet<usize>,
}

impl Model {
    fn drain_events(&mut self) {
        while let Some(event) = self.server.poll_event() {
            match event {
                ServerEvent::EvidenceQuery { ticket, query, .. } => {
                    let index: usize = query.check_id[1..].parse().unwrap();
                    assert!(
                        self.queries_seen.insert(index),
                        "query {index} delivered twice"
                    );
                    assert!(
                        !self.open.iter().any(|(open, _)| *open == ticket)
                            && !self.closed.contains(&ticket),
                        "ticket {ticket} issued twice"
                    );
                    self.open.push((ticket, index));
                }
                ServerEvent::Cancelled { ticket, .. } => {
                    let position = self
                        .open
                        .iter()
                        .position(|(open, _)| *open == ticket)
                        .expect("only an open ticket can be cancelled");
                    let (_, index) = self.open.remove(position);
                    self.cancelled.insert(ticket);
                    self.cancelled_items.insert(index);
                    self.closed.push(ticket);
                }
                ServerEvent::Fatal(error) => panic!("no fatal error expected: {error}"),
                _ => {}
            }
        }
        assert_eq!(self.server.in_flight(), self.open.len());
    }

    fn respond_at(&mut self, position: usize) {
        if self.open.is_empty() {
            return;
        }
        let (ticket, index) = self.open.remove(position % self.open.len());
        assert_eq!(self.server.respond(ticket, answer_for(index)), Ok(()));
        self.closed.push(ticket);
    }

    fn respond_again(&mut self, position: usize) {
        if self.closed.is_empty() {
            return;
        }
        let ticket = self.closed[position % self.closed.len()];
        let outcome = self.server.respond(ticket, answer_for(0));
        if self.cancelled.remove(&ticket) {
            assert_eq!(outcome, Err(RespondError::Cancelled(ticket)));
        } else {
            assert_eq!(outcome, Err(RespondError::UnknownTicket(ticket)));
        }
    }
}

fn check(framing: Framing, items: &[Item], ops: &[Op]) {
    let mut stream = Vec::new();
    for (index, item) in items.iter().enumerate() {
        encode(framing, &body_of(index, item), &mut stream);
    }
    let mut model = Model {
        server: Server::new(ServerConfig::default()),
        open: Vec::new(),
        closed: Vec::new(),
        cancelled: BTreeSet::new(),
        cancelled_items: BTreeSet::new(),
        queries_seen: BTreeSet::new(),
    };
    let mut fed: usize = 0;
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::Feed(n) => {
                let end = fed.saturating_add(*n).min(stream.len());
                if end > fed {
                    model.server.handle_input(&stream[fed..end]);
                    fed = end;
                }
            }
            Op::RespondOldest => model.respond_at(0),
            Op::RespondNewest => model.respond_at(model.open.len().saturating_sub(1)),
            Op::RespondAt(position) => model.respond_at(*position),
            Op::RespondAgain(position) => model.respond_again(*position),
        }
        model.drain_events();
        while let Some(bytes) = model.server.poll_transmit() {
            out.extend(bytes);
        }
    }
    // Feed the rest, close the input, answer everything still open.
    if fed < stream.len() {
        model.server.handle_input(&stream[fed..]);
    }
    model.server.handle_end_of_input();
    model.drain_events();
    while !model.open.is_empty() {
        model.respond_at(0);
    }
    model.drain_events();
    while let Some(bytes) = model.server.poll_transmit() {
        out.extend(bytes);
    }
    assert!(model.server.is_finished());

    // Every byte out is a frame in the input's framing holding a response.
    let mut decoder = Decoder::with_framing(framing, Limits::default());
    decoder.push(&out);
    let mut replies: BTreeMap<String, Value> = BTreeMap::new();
    let mut null_id_errors = 0;
    while let Some(frame) = decoder.poll_frame() {
        let reply: Value = serde_json::from_slice(&frame.unwrap().body).unwrap();
        assert_eq!(reply["jsonrpc"], "2.0");
        assert!(
            reply.get("method").is_none(),
            "the server sends no requests"
        );
        assert!(reply.get("result").is_some() != reply.get("error").is_some());
        if reply["id"].is_null() {
            null_id_errors += 1;
            assert!(reply["error"].is_object());
            continue;
        }
        let key = reply["id"].to_string();
        assert!(
            replies.insert(key.clone(), reply).is_none(),
            "request {key} answered twice"
        );
    }
    assert_eq!(decoder.finish(), Ok(()));

    let garbage = items
        .iter()
        .filter(|item| matches!(item, Item::Garbage))
        .count();
    assert_eq!(
        null_id_errors, garbage,
        "each garbage message gets one error"
    );
    let mut expected_replies = 0;
    for (index, item) in items.iter().enumerate() {
        let reply = replies.get(&id_of(index).to_string());
        match item {
            Item::Query if model.cancelled_items.contains(&index) => {
                assert!(reply.is_none(), "cancelled query {index} was answered");
            }
            Item::Query => {
                expected_replies += 1;
                assert!(model.queries_seen.contains(&index), "query {index} lost");
                let reply = reply.unwrap_or_else(|| panic!("query {index} never answered"));
                let raw = serde_json::value::to_raw_value(&reply["result"]).unwrap();
                let (result, _) = from_tool_result(&raw).unwrap();
                assert_eq!(
                    result.value.map(|value| value.to_value().unwrap()),
                    Some(json!(index)),
                    "query {index} got another query's answer"
                );
            }
            Item::Ping | Item::Initialize => {
                expected_replies += 1;
                let reply = reply.unwrap_or_else(|| panic!("request {index} never answered"));
                assert!(reply["result"].is_object());
            }
            Item::Notification | Item::Cancel(_) | Item::Garbage => {}
        }
    }
    assert_eq!(
        replies.len(),
        expected_replies,
        "a reply answers nothing sent"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn content_length_never_loses_or_duplicates(
        items in prop::collection::vec(item(), 0..40),
        ops in prop::collection::vec(op(), 0..120),
    ) {
        check(Framing::ContentLength, &items, &ops);
    }

    #[test]
    fn newline_never_loses_or_duplicates(
        items in prop::collection::vec(item(), 0..40),
        ops in prop::collection::vec(op(), 0..120),
    ) {
        check(Framing::NewlineDelimited, &items, &ops);
    }
}

#[test]
fn a_fixed_interleaving_exercises_every_path() {
    // Deterministic: queries, a cancel of an open query, a cancel of an
    // answered one, garbage, pings; answered newest first in 1-byte feeds.
    let items = [
        Item::Initialize,
        Item::Query,
        Item::Query,
        Item::Cancel(0),
        Item::Garbage,
        Item::Query,
        Item::Ping,
        Item::Notification,
        Item::Query,
        Item::Cancel(7),
    ];
    let mut ops = Vec::new();
    for _ in 0..4000 {
        ops.push(Op::Feed(1));
        ops.push(Op::RespondNewest);
        ops.push(Op::RespondAgain(3));
    }
    for framing in [Framing::ContentLength, Framing::NewlineDelimited] {
        check(framing, &items, &ops);
    }
}
