//! The operation interpreter of the `client_ops` fuzz target, shared with
//! `core/tests/it/fuzz_corpus.rs` (which replays the corpus through it).
//!
//! Input: one configuration byte (framing, handshake), then operation
//! bytes. `op % 8`: 0 starts a query; 1 cancels the `op / 8`-th query
//! issued; 2 advances the clock by `op / 8 * 16` ms and handles timeouts;
//! 3..=5 feed the next `op / 8 + 1` input bytes as provider output; 6 ends
//! the provider's output; 7 restarts. Like an adapter, a client that needs
//! a restart is restarted at once. Invariants: no panic, no outcome for a
//! query never made, never two outcomes for one query, `in_flight` counts
//! the queries without an outcome, and once the clock runs past every
//! deadline no query is left without an outcome.

use std::collections::BTreeSet;

use evidence_wire::client::{Client, ClientConfig, ClientEvent, RequestId};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
use evidence_wire::frame::{Framing, Limits};

/// Runs one fuzz input; panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let Some((&setup, mut rest)) = data.split_first() else {
        return;
    };
    let mut config = ClientConfig::default();
    config.framing = if setup & 1 == 0 {
        Framing::ContentLength
    } else {
        Framing::NewlineDelimited
    };
    config.handshake = setup & 2 != 0;
    config.request_timeout_ms = 100;
    config.late_answer_memory = usize::from(setup >> 4);
    config.limits = Limits {
        max_header_bytes: 128,
        max_body_bytes: 4096,
    };
    let mut client = Client::new(config);
    let mut now: u64 = 0;
    let mut issued: Vec<RequestId> = Vec::new();
    let mut answered: BTreeSet<RequestId> = BTreeSet::new();
    let query = EvidenceQuery::new("p", "c");
    let context = EvidenceContext::adhoc(TriggerTime::Logical(0));

    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 8 {
            0 => {
                let id = client.query(&query, &context, now);
                assert!(!issued.contains(&id), "{id} issued twice");
                issued.push(id);
            }
            1 => {
                if let Some(&id) = issued.get(usize::from(op / 8) % issued.len().max(1)) {
                    let open = !answered.contains(&id);
                    assert_eq!(client.cancel(id), open);
                }
            }
            2 => {
                now += u64::from(op / 8) * 16;
                client.handle_timeout(now);
            }
            3..=5 => {
                let n = usize::from(op / 8) + 1;
                let (chunk, tail) = rest.split_at(n.min(rest.len()));
                rest = tail;
                if !chunk.is_empty() {
                    client.handle_input(chunk);
                }
            }
            6 => client.handle_end_of_input(),
            _ => client.restart(now),
        }
        drain(&mut client, &issued, &mut answered);
        if client.needs_restart() {
            client.restart(now);
            drain(&mut client, &issued, &mut answered);
        }
        while client.poll_transmit().is_some() {}
        assert_eq!(client.in_flight(), issued.len() - answered.len());
    }
    now = now.saturating_add(1_000);
    client.handle_timeout(now);
    drain(&mut client, &issued, &mut answered);
    assert_eq!(client.in_flight(), 0);
    assert_eq!(answered.len(), issued.len(), "a query was lost");
}

fn drain(client: &mut Client, issued: &[RequestId], answered: &mut BTreeSet<RequestId>) {
    while let Some(event) = client.poll_event() {
        if let ClientEvent::Answer { id, .. } = event {
            assert!(issued.contains(&id), "outcome for {id}, never issued");
            assert!(answered.insert(id), "two outcomes for {id}");
        }
    }
}
