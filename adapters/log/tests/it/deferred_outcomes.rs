//! The validation record (`ServerEvent::Handled`) of a tool call the
//! embedder answers later (`Server::respond_tool`) carries the answer
//! actually sent: an output outside the tool's output schema is recorded
//! (and answered) `INTERNAL_ERROR`, never as accepted. Every call gets
//! exactly one record, also when it is cancelled; evidence queries keep
//! their record at validation time. Over the HTTP exchange the reply's
//! status follows the same outcome.

use evidence_wire::error::CanonicalError;
use evidence_wire::id::Id;
use evidence_wire::server::{
    Outcome, Server, ServerConfig, ServerEvent, Ticket, ToolDefinition, ToolFailure,
};
use evidence_wire_http::{Admission, Exchange, HttpPolicy, RequestHead, admit};
use evidence_wire_log::record::{self as log, Channel, ClockReading, RecordFacts, Recorder};
use serde_json::{Value, json};

/// A tool whose result must be `{"answer": <integer>}`.
fn strict_tool() -> ToolDefinition {
    ToolDefinition {
        name: "strict_answer".to_owned(),
        description: "Answers with an integer (for tests).".to_owned(),
        input_schema: json!({"type": "object"}),
        output_schema: Some(json!({
            "type": "object",
            "required": ["answer"],
            "properties": {"answer": {"type": "integer"}}
        })),
    }
}

fn server() -> Server {
    let mut config = ServerConfig::default();
    config.add_tool(strict_tool());
    Server::new(config)
}

fn call_line(id: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "strict_answer", "arguments": {}}
    }))
    .unwrap();
    line.push(b'\n');
    line
}

/// Splits the pending events into tool-call tickets and `Handled` outcomes.
fn drain(server: &mut Server) -> (Vec<Ticket>, Vec<Outcome>) {
    let (mut tickets, mut outcomes) = (Vec::new(), Vec::new());
    while let Some(event) = server.poll_event() {
        match event {
            ServerEvent::ToolCall { ticket, .. } | ServerEvent::EvidenceQuery { ticket, .. } => {
                tickets.push(ticket);
            }
            ServerEvent::Handled(outcome) => outcomes.push(outcome),
            _ => {}
        }
    }
    (tickets, outcomes)
}

fn replies(server: &mut Server) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        out.extend_from_slice(&bytes);
    }
    out.split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).unwrap())
        .collect()
}

/// Calls the tool with `id`, answers with `result`, and returns the one
/// outcome recorded for the call and the one reply sent.
fn answered(id: Value, result: Result<Value, ToolFailure>) -> (Outcome, Value) {
    let mut server = server();
    server.handle_input(&call_line(&id));
    let (tickets, outcomes) = drain(&mut server);
    assert_eq!(tickets.len(), 1);
    assert!(
        outcomes.is_empty(),
        "the call is recorded when answered, not before: {outcomes:?}"
    );
    server.respond_tool(tickets[0], result).unwrap();
    let (_, mut outcomes) = drain(&mut server);
    assert_eq!(outcomes.len(), 1, "exactly one record per call");
    let mut sent = replies(&mut server);
    assert_eq!(sent.len(), 1);
    (outcomes.remove(0), sent.remove(0))
}

#[test]
fn output_outside_the_schema_is_recorded_as_the_internal_error_sent() {
    let (outcome, reply) = answered(json!(8), Ok(json!({"answer": "not a number"})));
    assert_eq!(reply["id"], 8);
    assert_eq!(reply["error"]["code"], -32603);
    assert_eq!(reply["error"]["data"]["pointer"], "/answer");
    assert!(reply.get("result").is_none(), "never sent as a success");
    assert_eq!(outcome.id, Some(Id::Number(8)));
    assert_eq!(outcome.method.as_deref(), Some("tools/call"));
    assert_eq!(outcome.tool.as_deref(), Some("strict_answer"));
    assert_eq!(outcome.error, Some(CanonicalError::InternalError));
    let detail = outcome.detail.clone().unwrap();
    assert!(detail.contains("output schema"), "{detail}");
    assert_eq!(
        reply["error"]["data"]["detail"], detail,
        "the record holds the detail that was sent"
    );

    // As a log record: status 500 and the canonical payload, like the
    // same failure from an inline tool.
    let mut recorder = Recorder::new(true);
    let record = recorder.record(
        &outcome,
        &RecordFacts {
            transport: Channel::Stdio,
            route: log::stdio_route(None),
            status: log::stdio_status(&outcome),
            duration_micros: 0,
        },
        ClockReading::default(),
    );
    assert_eq!(record.status, 500);
    assert!(!record.is_accepted());
    assert_eq!(record.error.unwrap().code, "INTERNAL_ERROR");
}

#[test]
fn a_valid_answer_is_recorded_as_accepted() {
    let (outcome, reply) = answered(json!("ok-1"), Ok(json!({"answer": 42})));
    assert_eq!(reply["result"]["content"][0]["json"], json!({"answer": 42}));
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.id, Some(Id::from("ok-1")));
    assert_eq!(outcome.tool.as_deref(), Some("strict_answer"));
    assert_eq!(log::stdio_status(&outcome), 200);
}

#[test]
fn failures_of_the_handler_are_recorded_as_sent() {
    // InvalidInput is answered INVALID_TOOL_INPUT, as for an inline tool.
    let (outcome, reply) = answered(
        json!(2),
        Err(ToolFailure::InvalidInput("`x` is missing".into())),
    );
    assert_eq!(reply["error"]["code"], -32602);
    assert_eq!(reply["error"]["data"]["detail"], "`x` is missing");
    assert_eq!(outcome.error, Some(CanonicalError::InvalidToolInput));
    assert_eq!(log::stdio_status(&outcome), 422);

    // A tool that ran and failed answers a result with isError: accepted.
    let (outcome, reply) = answered(json!(3), Err(ToolFailure::Failed("it broke".into())));
    assert_eq!(reply["result"]["isError"], true);
    assert_eq!(outcome.error, None);
}

#[test]
fn a_cancelled_call_still_gets_its_one_record() {
    let mut server = server();
    server.handle_input(&call_line(&json!("c-1")));
    let (tickets, outcomes) = drain(&mut server);
    assert!(outcomes.is_empty());
    server.handle_input(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"c-1\"}}\n",
    );
    let (_, outcomes) = drain(&mut server);
    // The notification's own record and the cancelled call's record.
    let call: Vec<&Outcome> = outcomes
        .iter()
        .filter(|outcome| outcome.id == Some(Id::from("c-1")))
        .collect();
    assert_eq!(call.len(), 1, "{outcomes:?}");
    assert_eq!(call[0].error, None);
    assert_eq!(call[0].tool.as_deref(), Some("strict_answer"));
    assert!(call[0].detail.as_deref().unwrap().contains("cancelled"));
    assert_eq!(outcomes.len(), 2);
    // A late answer is refused and records nothing more.
    assert!(
        server
            .respond_tool(tickets[0], Ok(json!({"answer": 1})))
            .is_err()
    );
    assert!(drain(&mut server).1.is_empty());
    assert!(replies(&mut server).is_empty());
}

#[test]
fn records_of_a_batch_follow_their_answers() {
    let mut config = ServerConfig::default();
    config.policy = evidence_wire::envelope::Policy::jsonrpc();
    config.add_tool(strict_tool());
    let mut server = Server::new(config);
    server.handle_input(
        b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"strict_answer\",\"arguments\":{}}},{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]\n",
    );
    let (tickets, outcomes) = drain(&mut server);
    assert_eq!(tickets.len(), 1);
    assert_eq!(outcomes.len(), 1, "only ping is recorded so far");
    assert_eq!(outcomes[0].method.as_deref(), Some("ping"));
    server.respond_tool(tickets[0], Ok(json!({}))).unwrap();
    let (_, outcomes) = drain(&mut server);
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].error, Some(CanonicalError::InternalError));
    let batch = replies(&mut server);
    assert_eq!(batch.len(), 1);
    let entries = batch[0].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert!(
        entries
            .iter()
            .any(|entry| entry["id"] == 1 && entry["error"]["code"] == -32603)
    );
}

#[test]
fn evidence_queries_are_still_recorded_when_validated() {
    let mut server = server();
    server.handle_input(
        br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":1}}}}}
"#,
    );
    let (tickets, outcomes) = drain(&mut server);
    assert_eq!(tickets.len(), 1);
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].tool.as_deref(), Some("evidence_query"));
    assert_eq!(outcomes[0].error, None);
}

/// The HTTP exchange (the pipeline both HTTP adapters run) records the
/// same outcome and answers `/rpc` with its status.
#[test]
fn over_http_the_status_follows_the_answer_sent() {
    for (answer, status, code) in [
        (json!({"answer": "x"}), 500, Some("INTERNAL_ERROR")),
        (json!({"answer": 1}), 200, None),
    ] {
        let head = RequestHead {
            method: "POST",
            path: "/rpc",
            ..RequestHead::default()
        };
        let Admission::Call(plan) = admit(&HttpPolicy::default(), &head) else {
            panic!("a POST to /rpc is admitted");
        };
        let mut config = ServerConfig::default();
        config.add_tool(strict_tool());
        let body = call_line(&json!(9));
        let mut exchange = Exchange::start(&std::sync::Arc::new(config), plan, &body);
        let mut outcomes = Vec::new();
        while !exchange.is_finished() || outcomes.is_empty() {
            let Some(event) = exchange.poll_event() else {
                panic!("the exchange stalled without a record");
            };
            match event {
                ServerEvent::ToolCall { ticket, .. } => {
                    exchange
                        .server_mut()
                        .respond_tool(ticket, Ok(answer.clone()))
                        .unwrap();
                }
                ServerEvent::Handled(outcome) => outcomes.push(outcome),
                _ => {}
            }
        }
        assert_eq!(outcomes.len(), 1);
        assert_eq!(
            outcomes[0].error.map(|error| error.name()),
            code,
            "{answer}"
        );
        let reply = exchange.into_reply();
        assert_eq!(reply.status, status, "{answer}");
    }
}
