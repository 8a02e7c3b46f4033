//! The envelope's one validating pass and the hand-written `evidence_query`
//! call reader against the `serde_json` paths they shortcut (exposed by the
//! core's `differential` feature, for this target only).
//!
//! Every input is read two ways:
//! - raw: the bytes are a frame body, under four policies (MCP, JSON-RPC
//!   with batches, strict, MCP with a depth limit picked by the length);
//!   and, when they are one JSON value, the params of a `tools/call`;
//! - structured: the bytes after the first go into one hole (picked by the
//!   first byte, whose top bits pick the depth limit) of a plausible
//!   envelope or `evidence_query` call, so the mutations land where the
//!   fast paths decide things.
//!
//! Checked each time: [`validate`], the server's validation that may leave
//! a call's params to the hand read ([`validate_reading_call`]) and the
//! reference give the same outcome (`Debug` of the result, as the unit
//! proptests compare) and the same member spans (params, result, error
//! data: the same bytes of the body, not just equal text); when a request
//! carries params, the hand read of them is either `None` (left to the
//! fallback) or exactly the reference read, and a call read during
//! validation is the reference read of the request's params. And every
//! body that mentions `tools/call` (valid or not) goes to two fresh
//! servers, one taking the one-pass call read (the default
//! configuration) and one whose `evidence_query` definition was set again
//! to the built-in one (which turns that read off: the full path, schema
//! and all), as `core/tests/it/server_arguments.rs` does: every event and
//! every answer byte must be the same. Never a panic, on any path.
#![no_main]

use evidence_wire::differential::{
    read_call_by_hand, read_call_reference, validate_reading_call, validate_reference,
};
use evidence_wire::envelope::{Incoming, Message, Policy, Rejection, validate};
use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
use evidence_wire::server::{Server, ServerConfig, ServerEvent, ToolDefinition};
use serde_json::value::RawValue;

/// Depth limits for the fourth policy: the edges of the pass's own bit
/// stack (511 the deepest it settles, 512 left to the other path).
const DEPTHS: [usize; 8] = [0, 1, 2, 3, 4, 8, 511, 512];

/// Where the structured mode puts the bytes: each template has one `@`.
const TEMPLATES: [&str; 16] = [
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":@}"#,
    r#"{"jsonrpc":"2.0","id":@,"method":"m","params":{}}"#,
    r#"{"jsonrpc":"2.0","id":"a","result":@}"#,
    r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"m","data":@}}"#,
    r#"{"jsonrpc":"2.0",@}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":@,"arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":1}}}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":@}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":@,"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":1}}}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":@}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":@,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":1}}}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":@}}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":@}}}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":1},"correlation_id":@}}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c","params":@},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":1}}}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":@,"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":1}}}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":@,"check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":1}}}}}"#,
];

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let selector = data.first().copied().unwrap_or(0);
    // A body's first byte is almost always `{`, `[` or whitespace: its
    // depth limit comes from its length instead.
    let policies = |depth: usize| {
        [
            Policy::mcp(),
            Policy::jsonrpc().max_batch_len(8),
            Policy::strict(),
            Policy::mcp().max_depth(DEPTHS[depth % DEPTHS.len()]),
        ]
    };

    // Raw: the bytes as a frame body, and as a call's params.
    compare_bodies(data, &policies(data.len()));
    if let Ok(raw) = serde_json::from_slice::<&RawValue>(data) {
        compare_calls(raw, usize::from(selector));
    }

    // Structured: the bytes in one hole of a plausible message.
    let rest = data.get(1..).unwrap_or_default();
    let template = TEMPLATES[usize::from(selector % 16)];
    let (before, after) = template.split_once('@').expect("one hole");
    let mut body = Vec::with_capacity(template.len() + rest.len());
    body.extend_from_slice(before.as_bytes());
    body.extend_from_slice(rest);
    body.extend_from_slice(after.as_bytes());
    compare_bodies(&body, &policies(usize::from(selector >> 5)));
});

/// `validate` and the reference agree on `body` under every policy; the
/// params of every request then go through [`compare_calls`].
fn compare_bodies(body: &[u8], policies: &[Policy]) {
    for policy in policies {
        let fast = validate(body, policy);
        let slow = validate_reference(body, policy);
        let (fast_text, slow_text) = (format!("{fast:?}"), format!("{slow:?}"));
        assert_eq!(
            fast_text,
            slow_text,
            "validate and its serde reference differ on {:?} under {policy:?}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(
            spans(body, &fast),
            spans(body, &slow),
            "member spans differ on {:?}",
            String::from_utf8_lossy(body)
        );
        let (reading, read) = validate_reading_call(body, policy);
        assert_eq!(
            format!("{reading:?}"),
            slow_text,
            "the server's validation and the serde reference differ on {:?} under {policy:?}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(spans(body, &reading), spans(body, &slow));
        if let Some(read) = read {
            let params = match &slow {
                Ok(Incoming::Single(Message::Request(request))) => request.params,
                _ => None,
            };
            let reference = params.and_then(|raw| read_call_reference(raw.get()));
            assert_eq!(
                Some(read),
                reference,
                "a call read during validation differs from serde's on {:?}",
                String::from_utf8_lossy(body)
            );
        }
        let messages: Vec<&Message<'_>> = match &fast {
            Ok(Incoming::Single(message)) => vec![message],
            Ok(Incoming::Batch(entries)) => {
                entries.iter().filter_map(|e| e.as_ref().ok()).collect()
            }
            Err(_) => Vec::new(),
        };
        for message in messages {
            if let Message::Request(request) = message
                && let Some(params) = request.params
            {
                compare_calls(params, policy.depth_limit());
            }
        }
    }
    // Once per body (the servers use the default MCP policy); invalid
    // bodies too, which the one-pass read must refuse as the full path does.
    if body.windows(10).any(|window| window == b"tools/call") {
        compare_servers(body);
    }
}

/// A server with the one-pass call read and one without give the same
/// events and answers for `body`.
fn compare_servers(body: &[u8]) {
    let shortcut = Server::new(ServerConfig::default());
    let mut config = ServerConfig::default();
    config.set_evidence_tool(ToolDefinition::evidence_query());
    let full = Server::new(config);
    let (fast, slow) = (serve(shortcut, body), serve(full, body));
    assert_eq!(
        fast,
        slow,
        "the one-pass call read and the full path answer differently on {:?}",
        String::from_utf8_lossy(body)
    );
}

/// Every event (as text) and answer of `server` for `body`, each query
/// answered with the value 7.
fn serve(mut server: Server, body: &[u8]) -> (Vec<String>, Vec<Vec<u8>>) {
    let mut events = Vec::new();
    let mut answers = Vec::new();
    server.handle_message(body);
    while let Some(event) = server.poll_event() {
        events.push(format!("{event:?}"));
        if let ServerEvent::EvidenceQuery { ticket, .. } = event {
            let value = EvidenceValue::json(&7).expect("a value");
            server
                .respond(ticket, EvidenceResult::with_value(value))
                .expect("in flight");
        }
    }
    while let Some(message) = server.poll_message() {
        answers.push(message);
    }
    (events, answers)
}

/// The hand read of `raw` as an `evidence_query` call (under the nesting
/// limit `max_depth`) is `None` or the reference read.
fn compare_calls(raw: &RawValue, max_depth: usize) {
    if let Some(hand) = read_call_by_hand(raw, max_depth) {
        let reference = read_call_reference(raw.get());
        assert_eq!(
            Some(&hand),
            reference.as_ref(),
            "the hand read of the call differs from serde's on {:?}",
            raw.get()
        );
    }
}

/// Byte offsets and lengths of every raw member the outcome kept, so that
/// equal text at another place of the body does not pass.
fn spans(body: &[u8], outcome: &Result<Incoming<'_>, Rejection>) -> Vec<(usize, usize)> {
    let base = body.as_ptr() as usize;
    let mut out = Vec::new();
    let mut push = |raw: Option<&RawValue>| {
        if let Some(raw) = raw {
            out.push((
                (raw.get().as_ptr() as usize).wrapping_sub(base),
                raw.get().len(),
            ));
        }
    };
    let mut message = |message: &Message<'_>| match message {
        Message::Request(request) => push(request.params),
        Message::Notification(notification) => push(notification.params),
        Message::Response(response) => match &response.outcome {
            Ok(result) => push(Some(result)),
            Err(error) => push(error.data),
        },
    };
    match outcome {
        Ok(Incoming::Single(single)) => message(single),
        Ok(Incoming::Batch(entries)) => entries.iter().flatten().for_each(&mut message),
        Err(_) => {}
    }
    out
}
