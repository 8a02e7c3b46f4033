//! The operation interpreter of the `server_ops` fuzz target, shared with
//! `core/tests/it/fuzz_corpus.rs` (which replays the corpus through it).
//!
//! Input: one configuration byte (framing, dialect, envelope policy), then
//! operation bytes. `op % 8` in 0..=3 feeds the next `op / 8 + 1` input
//! bytes to the server; 4 answers the oldest open ticket, 5 the newest, 6
//! answers an already closed ticket again, 7 signals end of input. After
//! each operation the events and bytes out are checked: no panic, tickets
//! open exactly as the events say, a closed ticket is never answered twice,
//! every transmit is one well-formed frame holding a JSON-RPC response.

use evidence_wire::envelope::Policy;
use evidence_wire::evidence::{EvidenceError, EvidenceResult, EvidenceValue};
use evidence_wire::frame::{Decoder, Framing, Limits};
use evidence_wire::server::{
    Dialect, DialectChoice, RespondError, Server, ServerConfig, ServerEvent, Ticket,
};

/// Runs one fuzz input; panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let Some((&setup, mut rest)) = data.split_first() else {
        return;
    };
    let mut config = ServerConfig::default();
    config.framing = match setup & 3 {
        1 => Some(Framing::ContentLength),
        2 => Some(Framing::NewlineDelimited),
        _ => None,
    };
    config.dialect = match (setup >> 2) & 3 {
        1 => DialectChoice::Fixed(Dialect::DecisionGate),
        2 => DialectChoice::Fixed(Dialect::Mcp),
        _ => DialectChoice::Auto,
    };
    config.policy = if setup & 16 != 0 {
        Policy::jsonrpc()
    } else {
        Policy::mcp()
    };
    config.limits = Limits {
        max_header_bytes: 128,
        max_body_bytes: 2048,
    };
    config.max_in_flight = 8;
    let configured_framing = config.framing;
    let mut server = Server::new(config);
    let mut open: Vec<Ticket> = Vec::new();
    let mut closed: Vec<Ticket> = Vec::new();
    let mut cancelled: Vec<Ticket> = Vec::new();
    let mut ended = false;

    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 8 {
            0..=3 => {
                let n = usize::from(op / 8) + 1;
                let (chunk, tail) = rest.split_at(n.min(rest.len()));
                rest = tail;
                if !chunk.is_empty() {
                    server.handle_input(chunk);
                }
            }
            4 | 5 => {
                if !open.is_empty() {
                    let ticket = if op % 8 == 4 {
                        open.remove(0)
                    } else {
                        open.remove(open.len() - 1)
                    };
                    assert_eq!(server.respond(ticket, result(ticket)), Ok(()));
                    closed.push(ticket);
                }
            }
            6 => {
                if let Some(&ticket) = closed.get(usize::from(op / 8) % closed.len().max(1)) {
                    let outcome = server.respond(ticket, result(ticket));
                    if let Some(position) = cancelled.iter().position(|t| *t == ticket) {
                        cancelled.remove(position);
                        assert_eq!(outcome, Err(RespondError::Cancelled(ticket)));
                    } else {
                        assert_eq!(outcome, Err(RespondError::UnknownTicket(ticket)));
                    }
                }
            }
            _ => {
                server.handle_end_of_input();
                ended = true;
            }
        }
        drain(&mut server, &mut open, &mut closed, &mut cancelled);
        check_output(&mut server, configured_framing);
        assert_eq!(server.in_flight(), open.len());
    }
    server.handle_end_of_input();
    drain(&mut server, &mut open, &mut closed, &mut cancelled);
    for ticket in std::mem::take(&mut open) {
        assert_eq!(server.respond(ticket, result(ticket)), Ok(()));
    }
    drain(&mut server, &mut open, &mut closed, &mut cancelled);
    check_output(&mut server, configured_framing);
    assert!(server.is_input_closed());
    assert!(server.is_finished(), "ended={ended}");
}

fn result(ticket: Ticket) -> EvidenceResult {
    if ticket.get() % 3 == 2 {
        EvidenceResult::with_error(EvidenceError::new("failed", "on purpose"))
    } else {
        EvidenceResult::with_value(EvidenceValue::json(&ticket.get()).expect("a u64 is JSON"))
    }
}

fn drain(
    server: &mut Server,
    open: &mut Vec<Ticket>,
    closed: &mut Vec<Ticket>,
    cancelled: &mut Vec<Ticket>,
) {
    while let Some(event) = server.poll_event() {
        match event {
            ServerEvent::EvidenceQuery { ticket, .. } | ServerEvent::ToolCall { ticket, .. } => {
                assert!(!open.contains(&ticket) && !closed.contains(&ticket));
                open.push(ticket);
            }
            ServerEvent::Cancelled { ticket, .. } => {
                let position = open
                    .iter()
                    .position(|t| *t == ticket)
                    .expect("only an open ticket is cancelled");
                open.remove(position);
                closed.push(ticket);
                cancelled.push(ticket);
            }
            _ => {}
        }
    }
}

fn check_output(server: &mut Server, configured: Option<Framing>) {
    let framing = server
        .framing()
        .or(configured)
        .unwrap_or(Framing::ContentLength);
    while let Some(bytes) = server.poll_transmit() {
        let mut decoder = Decoder::with_framing(framing, Limits::default());
        decoder.push(&bytes);
        let frame = decoder
            .poll_frame()
            .expect("a transmit holds a frame")
            .expect("a transmit is well framed");
        assert!(decoder.poll_frame().is_none(), "one frame per transmit");
        let reply: serde_json::Value =
            serde_json::from_slice(&frame.body).expect("a transmit holds JSON");
        let replies = match reply {
            serde_json::Value::Array(batch) => batch,
            single => vec![single],
        };
        assert!(!replies.is_empty());
        for reply in replies {
            assert_eq!(reply["jsonrpc"], "2.0");
            assert!(reply.get("method").is_none());
            assert!(reply.get("result").is_some() != reply.get("error").is_some());
        }
    }
}
