//! The restart supervisor of a child-process provider, driven by hand:
//! no threads, no sleeps, no processes. A fake child reads what the
//! supervisor transmits and answers when a test says so; time is a number.

use evidence_wire::canonical::Profile;
use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::Framing;
use evidence_wire::supervisor::{
    Action, Failure, QueryTicket, RestartPolicy, Supervisor, SupervisorConfig,
};
use serde_json::{Value, json};

const TIMEOUT: u64 = 100;

/// What the supervisor told the adapter, sorted by kind.
#[derive(Debug, Default)]
struct Drained {
    spawns: usize,
    kills: usize,
    answers: Vec<(u32, Result<Value, Failure>)>,
    logs: Vec<String>,
    /// `tools/call` ids written to the child.
    calls: Vec<i64>,
    /// Other methods written to the child (notifications).
    notes: Vec<String>,
}

struct Harness {
    sup: Supervisor<u32>,
}

impl Harness {
    fn new(initial: u64, max: u64) -> Self {
        let mut config = ClientConfig::default();
        config.framing = Framing::NewlineDelimited;
        config.request_timeout_ms = TIMEOUT;
        Harness {
            sup: Supervisor::new(config, RestartPolicy::new(initial, max)),
        }
    }

    /// A harness whose first child is up at time 0.
    fn up(initial: u64, max: u64) -> Self {
        let mut harness = Harness::new(initial, max);
        harness.sup.child_started(0);
        let drained = harness.drain();
        assert_eq!(drained.spawns + drained.kills + drained.answers.len(), 0);
        harness
    }

    fn ask(&mut self, payload: u32, now: u64) -> QueryTicket {
        let query = EvidenceQuery::new("test", "probe");
        let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1));
        self.sup.query(query, context, payload, now)
    }

    fn drain(&mut self) -> Drained {
        let mut drained = Drained::default();
        while let Some(action) = self.sup.poll_action() {
            match action {
                Action::Spawn => drained.spawns += 1,
                Action::Kill => drained.kills += 1,
                Action::Answer { payload, outcome } => drained.answers.push((
                    payload,
                    outcome.map(|verified| {
                        let result = verified.result();
                        serde_json::to_value(result.value.as_ref()).unwrap()
                    }),
                )),
                Action::Log(line) => drained.logs.push(line),
                other => panic!("unknown action {other:?}"),
            }
        }
        while let Some(bytes) = self.sup.poll_transmit() {
            for line in bytes.split(|byte| *byte == b'\n').filter(|l| !l.is_empty()) {
                let message: Value = serde_json::from_slice(line).unwrap();
                match message["method"].as_str() {
                    Some("tools/call") => drained.calls.push(message["id"].as_i64().unwrap()),
                    Some(other) => drained.notes.push(other.to_owned()),
                    None => {}
                }
            }
        }
        drained
    }
}

/// A good answer to request `id`, newline-delimited.
fn good_answer(id: i64) -> Vec<u8> {
    let evidence = EvidenceResult::with_value(EvidenceValue::json(&json!({"n": id})).unwrap())
        .with_computed_hash(Profile::Rfc8785)
        .unwrap();
    let mut body = json!({"jsonrpc":"2.0","id":id,
        "result":{"content":[{"type":"json","json":evidence}]}})
    .to_string()
    .into_bytes();
    body.push(b'\n');
    body
}

fn is_timeout(outcome: &Result<Value, Failure>) -> bool {
    matches!(outcome, Err(Failure::Query(QueryError::Timeout(TIMEOUT))))
}

fn is_lost(outcome: &Result<Value, Failure>) -> bool {
    matches!(outcome, Err(Failure::Query(QueryError::ConnectionLost(_))))
}

#[test]
fn backoff_doubles_and_is_capped() {
    let policy = RestartPolicy::new(10, 100);
    let delays: Vec<u64> = (0..6).map(|failures| policy.delay_ms(failures)).collect();
    assert_eq!(delays, vec![10, 20, 40, 80, 100, 100]);
    assert_eq!(policy.delay_ms(u32::MAX), 100);
    let huge = RestartPolicy::new(u64::MAX / 2, u64::MAX);
    assert_eq!(huge.delay_ms(40), u64::MAX, "saturates, never overflows");
    assert_eq!(RestartPolicy::new(0, 100).delay_ms(3), 0);
}

/// A query times out: the child is killed, the restart waits 10, 20,
/// then 35 ms (capped) for consecutive failures; a good answer resets it.
#[test]
fn timeouts_restart_with_doubling_backoff_reset_by_a_good_answer() {
    let mut h = Harness::up(10, 35);
    let mut now = 0;
    let mut restarts = Vec::new();
    for payload in 0..3 {
        h.ask(payload, now);
        let sent = h.drain();
        assert_eq!(sent.calls.len(), 1, "the query goes to the child at once");
        assert_eq!(h.sup.poll_timeout(), Some(now + TIMEOUT));
        now += TIMEOUT - 1;
        h.sup.handle_timeout(now);
        assert!(h.drain().answers.is_empty(), "not due yet");
        now += 1;
        h.sup.handle_timeout(now);
        let drained = h.drain();
        assert_eq!(drained.kills, 1, "a timeout kills the child");
        assert_eq!(drained.spawns, 0, "the restart waits for its backoff");
        assert_eq!(drained.answers.len(), 1);
        assert_eq!(drained.answers[0].0, payload);
        assert!(is_timeout(&drained.answers[0].1), "{drained:?}");
        assert!(
            drained
                .logs
                .iter()
                .any(|l| l.contains("did not answer in time")),
            "{:?}",
            drained.logs
        );
        assert!(!h.sup.is_up());
        let restart_at = h.sup.restart_at().unwrap();
        assert_eq!(h.sup.poll_timeout(), Some(restart_at));
        restarts.push(restart_at - now);
        h.sup.handle_timeout(restart_at - 1);
        assert_eq!(h.drain().spawns, 0);
        now = restart_at;
        h.sup.handle_timeout(now);
        assert_eq!(h.drain().spawns, 1, "the restart is due");
        h.sup.child_started(now);
        assert!(h.sup.is_up());
    }
    assert_eq!(restarts, vec![10, 20, 35]);
    // A good answer resets the count: the next failure waits 10 ms again.
    h.ask(10, now);
    let sent = h.drain();
    h.sup.handle_input(&good_answer(sent.calls[0]), now + 1);
    let drained = h.drain();
    assert_eq!(drained.answers.len(), 1);
    let expected =
        serde_json::to_value(EvidenceValue::json(&json!({"n": sent.calls[0]})).unwrap()).unwrap();
    assert_eq!(drained.answers[0].1.as_ref().unwrap(), &expected);
    assert_eq!(h.sup.failures(), 0);
    h.ask(11, now + 1);
    h.drain();
    h.sup.handle_timeout(now + 1 + TIMEOUT);
    assert_eq!(h.drain().kills, 1);
    assert_eq!(h.sup.restart_at(), Some(now + 1 + TIMEOUT + 10));
}

/// A query times out while the child keeps answering others: only that
/// check was slow. The child keeps running and the queries in flight keep
/// waiting; a later timeout with the child silent since that query was sent
/// restarts it.
#[test]
fn a_timeout_restarts_only_a_child_silent_since_the_query_was_sent() {
    let mut h = Harness::up(10, 1000);
    h.ask(1, 0);
    h.ask(2, 10);
    h.ask(3, 30);
    let sent = h.drain();
    assert_eq!(sent.calls.len(), 3);
    h.sup.handle_input(&good_answer(sent.calls[1]), 20);
    let drained = h.drain();
    assert_eq!(drained.answers.len(), 1);
    assert_eq!(drained.answers[0].0, 2);
    assert!(drained.answers[0].1.is_ok(), "{drained:?}");

    // Query 1 (sent at 0) expires; the child answered at 20, after it.
    h.sup.handle_timeout(TIMEOUT);
    let drained = h.drain();
    assert_eq!(drained.answers.len(), 1, "{drained:?}");
    assert_eq!(drained.answers[0].0, 1);
    assert!(is_timeout(&drained.answers[0].1), "{drained:?}");
    assert_eq!(drained.kills, 0, "an answering child is not killed");
    assert_eq!(drained.notes, vec!["notifications/cancelled".to_owned()]);
    assert!(h.sup.is_up());
    assert_eq!(h.sup.restart_at(), None);
    assert_eq!(h.sup.in_flight(), 1, "query 3 still waits");

    // Query 3 is answered normally.
    h.sup
        .handle_input(&good_answer(sent.calls[2]), TIMEOUT + 10);
    let drained = h.drain();
    assert_eq!(drained.answers.len(), 1);
    assert_eq!(drained.answers[0].0, 3);
    assert!(drained.answers[0].1.is_ok(), "{drained:?}");

    // Query 4 is sent after the last answer and never answered: the child
    // looks hung, so it is killed and restarted.
    h.ask(4, TIMEOUT + 20);
    h.drain();
    h.sup.handle_timeout(2 * TIMEOUT + 20);
    let drained = h.drain();
    assert!(is_timeout(&drained.answers[0].1), "{drained:?}");
    assert_eq!(drained.kills, 1, "a silent child is killed");
    assert!(h.sup.restart_at().is_some());
}

/// "Since" is the order of sends and answers, not the clock: within one
/// millisecond an answer after the send keeps the child, and an answer
/// before it does not.
#[test]
fn the_hung_rule_holds_within_one_millisecond() {
    let mut h = Harness::up(10, 1000);
    h.ask(1, 0);
    h.ask(2, 0);
    let sent = h.drain();
    h.sup.handle_input(&good_answer(sent.calls[1]), 0);
    h.drain();
    h.sup.handle_timeout(TIMEOUT);
    let drained = h.drain();
    assert!(is_timeout(&drained.answers[0].1), "{drained:?}");
    assert_eq!(drained.kills, 0, "answered after query 1 was sent");

    h.ask(3, TIMEOUT);
    let third = h.drain().calls[0];
    h.sup.handle_input(&good_answer(third), TIMEOUT);
    h.ask(4, TIMEOUT);
    h.drain();
    h.sup.handle_timeout(2 * TIMEOUT);
    let drained = h.drain();
    assert!(is_timeout(&drained.answers[0].1), "{drained:?}");
    assert_eq!(drained.kills, 1, "nothing answered after query 4 was sent");
}

/// A message the client dropped without a readable id is not an answer: a
/// child that wrote only that since the query was sent is restarted, and
/// the query says why.
#[test]
fn a_dropped_message_alone_does_not_keep_the_child() {
    let mut h = Harness::up(10, 1000);
    h.ask(1, 0);
    h.drain();
    h.sup
        .handle_input(b"{\"jsonrpc\":\"1.0\",\"id\":1.5,\"result\":{}}\n", 1);
    let drained = h.drain();
    assert!(drained.answers.is_empty(), "{drained:?}");
    h.sup.handle_timeout(TIMEOUT);
    let drained = h.drain();
    assert!(
        matches!(
            drained.answers[0].1,
            Err(Failure::Query(QueryError::TimeoutAfterDrop {
                timeout_ms: TIMEOUT,
                ..
            }))
        ),
        "{drained:?}"
    );
    assert_eq!(drained.kills, 1);
}

/// A dropped message that carries the query's id fails that query at
/// once (not at its timeout), and counts as an answer: the child wrote a
/// whole message for it, so it is alive and in sync, and is not restarted.
#[test]
fn a_dropped_answer_carrying_the_id_fails_at_once_and_keeps_the_child() {
    let mut h = Harness::up(10, 1000);
    h.ask(1, 0);
    let id = h.drain().calls[0];
    h.sup.handle_input(
        format!("{{\"jsonrpc\":\"1.0\",\"id\":{id},\"result\":{{}}}}\n").as_bytes(),
        1,
    );
    let drained = h.drain();
    assert!(
        matches!(
            &drained.answers[..],
            [(_, Err(Failure::Query(QueryError::AnswerDropped(reason))))] if reason.contains("2.0")
        ),
        "{drained:?}"
    );
    assert_eq!(drained.kills, 0);
    h.sup.handle_timeout(TIMEOUT);
    assert_eq!(h.drain().kills, 0, "nothing left to time out");
    assert_eq!(h.sup.failures(), 0);
}

/// A provider's JSON-RPC error is an answer too: the child is alive.
#[test]
fn a_provider_error_resets_the_backoff() {
    let mut h = Harness::up(10, 1000);
    h.ask(1, 0);
    h.drain();
    h.sup.handle_timeout(TIMEOUT);
    h.drain();
    let at = h.sup.restart_at().unwrap();
    h.sup.handle_timeout(at);
    h.drain();
    h.sup.child_started(at);
    assert_eq!(h.sup.failures(), 1);
    h.ask(2, at);
    let id = h.drain().calls[0];
    let error = format!(
        "{}\n",
        json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"bad"}})
    );
    h.sup.handle_input(error.as_bytes(), at + 1);
    let drained = h.drain();
    assert!(matches!(
        drained.answers[0].1,
        Err(Failure::Query(QueryError::Provider { code: -32602, .. }))
    ));
    assert_eq!(h.sup.failures(), 0);
    assert_eq!(
        drained.kills, 0,
        "an error answer does not restart the child"
    );
}

/// While the child is down each deferred query keeps its own deadline.
#[test]
fn deferred_queries_expire_at_their_own_deadline() {
    let mut h = Harness::up(1000, 1000);
    h.sup.handle_end_of_input(0);
    let drained = h.drain();
    assert_eq!(drained.kills, 1, "end of output restarts the child");
    assert!(drained.logs.iter().any(|l| l.contains("stream broke")));
    assert_eq!(h.sup.restart_at(), Some(1000));
    h.ask(1, 50);
    h.ask(2, 60);
    let drained = h.drain();
    assert_eq!(drained.spawns, 0, "a restart is already planned");
    assert_eq!(h.sup.deferred(), 2);
    assert_eq!(h.sup.poll_timeout(), Some(150));
    h.sup.handle_timeout(149);
    assert!(h.drain().answers.is_empty());
    h.sup.handle_timeout(150);
    let drained = h.drain();
    assert_eq!(drained.answers.len(), 1);
    assert_eq!(drained.answers[0].0, 1);
    assert!(is_timeout(&drained.answers[0].1));
    assert_eq!(h.sup.poll_timeout(), Some(160));
    h.sup.handle_timeout(160);
    let drained = h.drain();
    assert_eq!(drained.answers.len(), 1);
    assert_eq!(drained.answers[0].0, 2);
    assert_eq!(h.sup.poll_timeout(), Some(1000), "only the restart is left");
    assert_eq!(drained.kills + drained.spawns, 0);
}

/// Queries asked while the child is down go to the fresh child, in order.
#[test]
fn deferred_queries_are_sent_when_the_child_starts() {
    let mut h = Harness::up(20, 20);
    h.sup.handle_end_of_input(0);
    h.drain();
    h.ask(1, 5);
    h.ask(2, 6);
    assert!(h.drain().calls.is_empty(), "nothing is written while down");
    h.sup.handle_timeout(20);
    let drained = h.drain();
    assert_eq!(drained.spawns, 1);
    h.ask(3, 21);
    assert_eq!(h.drain().spawns, 0, "a child is already being started");
    assert_eq!(h.sup.deferred(), 3);
    h.sup.child_started(22);
    let sent = h.drain();
    assert_eq!(sent.calls.len(), 3);
    assert_eq!(h.sup.deferred(), 0);
    assert_eq!(h.sup.in_flight(), 3);
    // Deadlines of sent queries start when they are sent.
    assert_eq!(h.sup.poll_timeout(), Some(22 + TIMEOUT));
    let mut answers = Vec::new();
    for id in sent.calls.iter().rev() {
        answers.extend(good_answer(*id));
    }
    h.sup.handle_input(&answers, 23);
    let mut payloads: Vec<u32> = h
        .drain()
        .answers
        .into_iter()
        .map(|(payload, outcome)| {
            assert!(outcome.is_ok(), "{outcome:?}");
            payload
        })
        .collect();
    payloads.sort_unstable();
    assert_eq!(payloads, vec![1, 2, 3]);
    assert_eq!(h.sup.poll_timeout(), None, "nothing waits");
}

/// A query on a supervisor with no child and no planned restart asks for
/// one at once.
#[test]
fn a_query_without_a_child_asks_for_a_spawn() {
    let mut h = Harness::new(10, 10);
    h.ask(7, 0);
    let drained = h.drain();
    assert_eq!((drained.spawns, drained.kills), (1, 0));
    assert!(drained.answers.is_empty());
    h.sup.child_started(1);
    assert_eq!(h.drain().calls.len(), 1);
}

#[test]
fn a_spawn_failure_fails_deferred_queries_and_retries_with_backoff() {
    let mut h = Harness::new(10, 100);
    h.ask(1, 0);
    h.ask(2, 0);
    assert_eq!(h.drain().spawns, 1);
    h.sup
        .spawn_failed(3, "cannot start provider [\"nope\"]: not found");
    let drained = h.drain();
    assert_eq!(drained.kills, 0, "no child to kill");
    assert_eq!(drained.answers.len(), 2);
    for (_, outcome) in &drained.answers {
        assert!(
            matches!(outcome, Err(Failure::Spawn(message)) if message.contains("not found")),
            "{outcome:?}"
        );
    }
    assert!(drained.logs.iter().any(|l| l.contains("not found")));
    assert!(
        drained
            .logs
            .iter()
            .any(|l| l.contains("could not be started"))
    );
    assert_eq!(h.sup.restart_at(), Some(13));
    h.sup.handle_timeout(13);
    assert_eq!(h.drain().spawns, 1);
    h.sup.spawn_failed(13, "still not found");
    h.drain();
    assert_eq!(
        h.sup.restart_at(),
        Some(33),
        "the second attempt waits 20 ms"
    );
}

#[test]
fn output_ending_mid_message_fails_what_is_in_flight_and_restarts() {
    let mut h = Harness::up(10, 10);
    h.ask(1, 0);
    h.ask(2, 0);
    h.drain();
    h.sup.handle_input(br#"{"jsonrpc":"2.0","id":1,"res"#, 1);
    assert!(
        h.drain().answers.is_empty(),
        "half a message is not an answer"
    );
    h.sup.handle_end_of_input(1);
    let drained = h.drain();
    assert_eq!(drained.kills, 1);
    assert_eq!(drained.answers.len(), 2);
    assert!(drained.answers.iter().all(|(_, outcome)| is_lost(outcome)));
    assert!(
        drained.logs.iter().any(|l| l.contains("mid-message")),
        "{:?}",
        drained.logs
    );
    assert_eq!(h.sup.restart_at(), Some(11));
    // Output of the stopped child is ignored.
    h.sup.handle_input(&good_answer(1), 2);
    assert!(h.drain().answers.is_empty());
}

#[test]
fn next_wake_is_the_earliest_deadline() {
    let mut h = Harness::up(500, 500);
    assert_eq!(h.sup.poll_timeout(), None, "an idle child keeps no timer");
    h.ask(1, 0);
    h.ask(2, 30);
    h.drain();
    assert_eq!(h.sup.poll_timeout(), Some(TIMEOUT), "the client's earliest");
    h.sup.handle_end_of_input(40);
    h.drain();
    assert_eq!(h.sup.poll_timeout(), Some(540), "the restart");
    h.ask(3, 45);
    h.ask(4, 41);
    h.drain();
    assert_eq!(
        h.sup.poll_timeout(),
        Some(41 + TIMEOUT),
        "the earliest deferred"
    );
}

#[test]
fn ignored_messages_are_logged_at_most_16_times_per_child() {
    let mut h = Harness::up(1, 1);
    let mut junk = Vec::new();
    for n in 0..40 {
        junk.extend(format!("{}\n", json!({"jsonrpc":"2.0","id":1000 + n,"result":{}})).bytes());
    }
    h.sup.handle_input(&junk, 1);
    let drained = h.drain();
    let ignored = drained
        .logs
        .iter()
        .filter(|l| l.contains("ignored a provider message"))
        .count();
    assert_eq!(ignored, SupervisorConfig::MAX_SKIPPED_LOGGED as usize);
    assert_eq!(
        drained
            .logs
            .iter()
            .filter(|l| l.contains("not logged"))
            .count(),
        1
    );
    h.sup.handle_input(&junk, 2);
    assert!(h.drain().logs.is_empty(), "the cap holds for this child");
    // A fresh child gets a fresh allowance.
    h.sup.handle_end_of_input(3);
    h.drain();
    h.sup.handle_timeout(4);
    assert_eq!(h.drain().spawns, 1);
    h.sup.child_started(4);
    h.sup.handle_input(
        &junk[..junk.iter().position(|b| *b == b'\n').unwrap() + 1],
        5,
    );
    let drained = h.drain();
    assert_eq!(drained.logs.len(), 1, "{:?}", drained.logs);
}

#[test]
fn cancel_of_a_deferred_query_answers_it_and_never_sends_it() {
    let mut h = Harness::up(10, 10);
    h.sup.handle_end_of_input(0);
    h.drain();
    let kept = h.ask(1, 1);
    let dropped = h.ask(2, 1);
    assert_ne!(kept, dropped);
    assert!(h.sup.cancel(dropped));
    let drained = h.drain();
    assert_eq!(drained.answers.len(), 1);
    assert_eq!(drained.answers[0].0, 2);
    assert!(matches!(
        drained.answers[0].1,
        Err(Failure::Query(QueryError::Cancelled))
    ));
    assert!(!h.sup.cancel(dropped), "already answered");
    h.sup.handle_timeout(10);
    h.drain();
    h.sup.child_started(10);
    assert_eq!(h.drain().calls.len(), 1, "only the kept query is sent");
}

#[test]
fn cancel_of_a_sent_query_tells_the_child() {
    let mut h = Harness::up(10, 10);
    let ticket = h.ask(1, 0);
    h.drain();
    assert!(h.sup.cancel(ticket));
    let drained = h.drain();
    assert!(matches!(
        drained.answers.as_slice(),
        [(1, Err(Failure::Query(QueryError::Cancelled)))]
    ));
    assert_eq!(drained.notes, vec!["notifications/cancelled".to_owned()]);
    assert!(!h.sup.cancel(ticket));
    assert_eq!(h.sup.poll_timeout(), None);
}

#[test]
fn abandoned_deferred_queries_are_dropped() {
    let mut h = Harness::up(10, 10);
    h.sup.handle_end_of_input(0);
    h.drain();
    h.ask(1, 1);
    h.ask(2, 1);
    h.sup.cancel_deferred_if(|payload| *payload == 1);
    let drained = h.drain();
    assert!(matches!(drained.answers.as_slice(), [(1, Err(_))]));
    assert_eq!(h.sup.deferred(), 1);
}

#[test]
fn shutdown_fails_everything_once_and_kills_the_child() {
    let mut h = Harness::up(10, 10);
    h.ask(1, 0);
    h.drain();
    h.sup.shutdown();
    let drained = h.drain();
    assert_eq!(drained.kills, 1);
    assert!(matches!(drained.answers.as_slice(), [(1, outcome)] if is_lost(outcome)));
    h.ask(2, 1);
    let drained = h.drain();
    assert!(matches!(
        drained.answers.as_slice(),
        [(2, Err(Failure::ShutDown))]
    ));
    assert_eq!(drained.spawns, 0, "no restart after shutdown");
    h.sup.handle_timeout(1_000);
    assert_eq!(h.drain().spawns, 0);
}

#[test]
fn a_child_exit_seen_by_the_adapter_restarts_it() {
    let mut h = Harness::up(10, 10);
    h.ask(1, 0);
    h.drain();
    h.sup.child_exited(5, "the provider's stdin is closed");
    let drained = h.drain();
    assert_eq!(drained.kills, 1);
    assert!(matches!(drained.answers.as_slice(), [(1, outcome)] if is_lost(outcome)));
    assert!(drained.logs.iter().any(|l| l.contains("stdin is closed")));
    assert_eq!(h.sup.restart_at(), Some(15));
}
