//! The one-pass read of `evidence_query` arguments (issue 25) against the
//! full path it shortcuts (the duplicate-refusing parse into a value, the
//! input schema, the typed read): two servers get the same calls, one on
//! the default configuration (shortcut on) and one whose `evidence_query`
//! definition was set again to the built-in one (which turns the shortcut
//! off and validates with the same schema); every event and every answer
//! byte must be the same, for generated arguments both valid and broken in
//! every way the shortcut must leave to the full path.

use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
use evidence_wire::server::{Server, ServerConfig, ServerEvent, ToolDefinition};
use proptest::prelude::*;

/// Both servers' events (as text) and answers for `calls`.
fn run(server: &mut Server, mcp: bool, calls: &[String]) -> (Vec<String>, Vec<String>) {
    let mut events = Vec::new();
    let mut answers = Vec::new();
    if mcp {
        server.handle_message(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        );
    }
    for call in calls {
        server.handle_message(call.as_bytes());
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
            answers.push(String::from_utf8_lossy(&message).into_owned());
        }
    }
    (events, answers)
}

fn servers() -> (Server, Server) {
    servers_nesting(ServerConfig::default().policy.depth_limit())
}

/// [`servers`] whose envelope nesting limit is `max_depth`.
fn servers_nesting(max_depth: usize) -> (Server, Server) {
    let mut shortcut = ServerConfig::default();
    shortcut.policy = shortcut.policy.max_depth(max_depth);
    let mut full = shortcut.clone();
    full.set_evidence_tool(ToolDefinition::evidence_query());
    (Server::new(shortcut), Server::new(full))
}

fn call(id: usize, arguments: &str) -> String {
    call_shaped(id, arguments, 0)
}

/// A `tools/call` of `evidence_query` whose params are shaped by `shape`:
/// the usual object, or one the one-pass read must leave to the full path
/// (or read the same way: extra members, members in another order).
fn call_shaped(id: usize, arguments: &str, shape: usize) -> String {
    let params = match shape {
        1 => format!(r#"{{"x":[1,{{"y":2}}],"name":"evidence_query","arguments":{arguments}}}"#),
        2 => format!(
            r#"{{"name":"evidence_query","name":"evidence_query","arguments":{arguments}}}"#
        ),
        3 => format!(r#"{{"name":"evidence_querY","arguments":{arguments}}}"#),
        4 => format!(
            r#"{{"name":"evidence_query","arguments":{arguments},"arguments":{arguments}}}"#
        ),
        5 => format!(r#"{{"arguments":{arguments},"name":"evidence_que\u0072y"}}"#),
        6 => r#"{"name":"evidence_query","arguments":null}"#.to_owned(),
        7 => format!(r#"["evidence_query",{arguments}]"#),
        8 => format!(r#"{{"name":7,"arguments":{arguments}}}"#),
        _ => format!(r#"{{"name":"evidence_query","arguments":{arguments}}}"#),
    };
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
}

fn object(members: &[(String, String)]) -> String {
    let inner: Vec<String> = members
        .iter()
        .map(|(name, value)| format!("{name}:{value}"))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// A member value: mostly right, sometimes wrong in one of many ways.
fn id_value() -> impl Strategy<Value = String> {
    prop_oneof![
        40 => (1u64..=u64::MAX).prop_map(|n| n.to_string()),
        1 => Just("0".to_owned()),
        1 => Just("-3".to_owned()),
        1 => Just("1.0".to_owned()),
        1 => Just("2e3".to_owned()),
        1 => Just("18446744073709551616".to_owned()),
        1 => Just(r#""42""#.to_owned()),
        1 => Just(r#""0042""#.to_owned()),
        1 => Just(r#""0""#.to_owned()),
        1 => Just(r#"" 7""#.to_owned()),
        1 => Just("null".to_owned()),
        1 => Just("[1]".to_owned()),
        // Not JSON: the envelope pass may leave these to the call reader,
        // which must refuse them as the full pass does.
        1 => Just("01".to_owned()),
        1 => Just("1.".to_owned()),
        1 => Just("+1".to_owned()),
        1 => Just("1e".to_owned()),
    ]
}

fn text_value() -> impl Strategy<Value = String> {
    prop_oneof![
        40 => "[a-z0-9_-]{1,12}".prop_map(|s| format!("\"{s}\"")),
        1 => Just(r#""""#.to_owned()),
        1 => Just(r#""esc\"aped\u00e9\n""#.to_owned()),
        1 => Just("null".to_owned()),
        1 => Just("5".to_owned()),
        1 => Just(r#"{"a":1}"#.to_owned()),
        1 => Just(r#""bad\q""#.to_owned()),
        1 => Just("\"raw\u{1}\"".to_owned()),
        1 => Just("tru".to_owned()),
    ]
}

fn params_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_owned()),
        Just(r#"{"timestamp":1710000000000}"#.to_owned()),
        Just(r#"{"a":1,"a":2}"#.to_owned()),
        Just(r#"{"deep":{"x":[1,{"y":null,"y":true}]}}"#.to_owned()),
        Just("[1,2.5,\"x\",true,null]".to_owned()),
        Just("1e400".to_owned()),
        Just("\"text\"".to_owned()),
        Just("-0".to_owned()),
        Just("[1,]".to_owned()),
        Just(r#"{"a"}"#.to_owned()),
        Just("[[[[[[[[1]]]]]]]]".to_owned()),
    ]
}

fn trigger_time() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        20 => Just(r#""unix_millis""#.to_owned()),
        20 => Just(r#""logical""#.to_owned()),
        1 => Just(r#""Logical""#.to_owned()),
        1 => Just(r#"{"logical":null}"#.to_owned()),
        1 => Just("null".to_owned()),
        1 => Just("1".to_owned()),
    ];
    let value = prop_oneof![
        30 => any::<i64>().prop_map(|n| n.to_string()),
        1 => Just("9223372036854775808".to_owned()),
        1 => Just("1.5".to_owned()),
        1 => Just("1.0".to_owned()),
        1 => Just(r#""17""#.to_owned()),
        1 => Just("null".to_owned()),
        1 => Just("-01".to_owned()),
        1 => Just("00".to_owned()),
        1 => Just("-".to_owned()),
    ];
    (kind, value, 0usize..16).prop_map(|(kind, value, shape)| match shape {
        0 => format!("[{kind},{value}]"),
        1 => format!(r#"{{"kind":{kind},"value":{value},"extra":1}}"#),
        2 => format!(r#"{{"kind":{kind},"kind":{kind},"value":{value}}}"#),
        3 => format!(r#"{{"value":{value}}}"#),
        _ => format!(r#"{{"value":{value},"kind":{kind}}}"#),
    })
}

/// A member list with optional deletion, duplication, an unknown member,
/// shuffled; or (rarely) the object written as an array of its values.
fn shaped(members: Vec<(String, String)>) -> impl Strategy<Value = String> {
    let count = members.len();
    (0usize..40, 0..count, Just(members).prop_shuffle()).prop_map(
        move |(mutation, pick, mut members)| {
            match mutation {
                0 => {
                    members.remove(pick % members.len().max(1));
                }
                1 => {
                    let copy = members[pick % members.len()].clone();
                    members.push(copy);
                }
                2 => members.push(("\"unknown\"".to_owned(), "1".to_owned())),
                3 => {
                    let values: Vec<String> = members.iter().map(|(_, v)| v.clone()).collect();
                    return format!("[{}]", values.join(","));
                }
                _ => {}
            }
            object(&members)
        },
    )
}

fn query() -> impl Strategy<Value = String> {
    (
        text_value(),
        text_value(),
        prop::option::of(params_value()),
        0usize..8,
    )
        .prop_flat_map(|(provider, check, params, naming)| {
            let check_name = match naming {
                0 => "\"predicate\"",
                1 => "\"check\\u005fid\"",
                _ => "\"check_id\"",
            };
            let mut members = vec![
                ("\"provider_id\"".to_owned(), provider),
                (check_name.to_owned(), check.clone()),
            ];
            if naming == 2 {
                members.push(("\"predicate\"".to_owned(), check));
            }
            if let Some(params) = params {
                members.push(("\"params\"".to_owned(), params));
            }
            shaped(members)
        })
}

fn context() -> impl Strategy<Value = String> {
    (
        id_value(),
        id_value(),
        prop::collection::vec(text_value(), 4),
        trigger_time(),
        prop::option::of(prop_oneof![
            Just("null".to_owned()),
            Just(r#""corr-1""#.to_owned()),
            Just("3".to_owned()),
        ]),
    )
        .prop_flat_map(|(tenant, namespace, texts, trigger, correlation)| {
            let mut members = vec![
                ("\"tenant_id\"".to_owned(), tenant),
                ("\"namespace_id\"".to_owned(), namespace),
                ("\"run_id\"".to_owned(), texts[0].clone()),
                ("\"scenario_id\"".to_owned(), texts[1].clone()),
                ("\"stage_id\"".to_owned(), texts[2].clone()),
                ("\"trigger_id\"".to_owned(), texts[3].clone()),
                ("\"trigger_time\"".to_owned(), trigger),
            ];
            if let Some(correlation) = correlation {
                members.push(("\"correlation_id\"".to_owned(), correlation));
            }
            shaped(members)
        })
}

fn arguments() -> impl Strategy<Value = String> {
    (query(), context()).prop_flat_map(|(query, context)| {
        shaped(vec![
            ("\"query\"".to_owned(), query),
            ("\"context\"".to_owned(), context),
        ])
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The shortcut and the full path answer every call alike, in both
    /// dialects (MCP 2025-11-25 answers refused input as a tool result).
    #[test]
    fn the_one_pass_read_answers_exactly_as_the_full_path(
        calls in prop::collection::vec((arguments(), 0usize..16), 1..6),
        mcp in any::<bool>(),
    ) {
        let calls: Vec<String> = calls
            .iter()
            .enumerate()
            .map(|(index, (arguments, shape))| call_shaped(index + 1, arguments, *shape))
            .collect();
        let (mut shortcut, mut full) = servers();
        let fast = run(&mut shortcut, mcp, &calls);
        let slow = run(&mut full, mcp, &calls);
        prop_assert_eq!(fast, slow, "calls: {:#?}", calls);
    }
}

/// Bytes a mutation puts in: structure, escapes, number parts, control and
/// non-ASCII bytes.
const MUTANTS: &[u8] = &[
    b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'0', b'1', b'-', b'.', b'e', b'u', b' ',
    0x01, 0xC3,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A call whose params the envelope pass leaves to the call reader
    /// (`method` before `params`, `params` last), with one byte replaced,
    /// inserted or removed anywhere: both servers answer alike, so the
    /// reader refuses every syntax error, too deep a nesting and any text
    /// around the params that the full pass would refuse (under the default
    /// nesting limit and limits just around the call's own depth).
    #[test]
    fn mutated_calls_answer_exactly_as_the_full_path(
        arguments in arguments(),
        shape in 0usize..16,
        at in any::<prop::sample::Index>(),
        byte in prop::sample::select(MUTANTS),
        how in 0usize..3,
        mcp in any::<bool>(),
        max_depth in prop::sample::select(&[128usize, 6, 5, 4][..]),
    ) {
        let mut body = call_shaped(1, &arguments, shape).into_bytes();
        let at = at.index(body.len() + 1);
        match how {
            0 if at < body.len() => body[at] = byte,
            1 if at < body.len() => {
                body.remove(at);
            }
            _ => body.insert(at, byte),
        }
        let calls = [String::from_utf8_lossy(&body).into_owned()];
        let (mut shortcut, mut full) = servers_nesting(max_depth);
        let fast = run(&mut shortcut, mcp, &calls);
        let slow = run(&mut full, mcp, &calls);
        prop_assert_eq!(fast, slow, "call: {}", calls[0]);
    }
}

/// Arguments of the usual shape reach the embedder with every field as
/// sent (the shortcut's own reading, checked field by field).
#[test]
fn usual_arguments_reach_the_embedder_as_sent() {
    let arguments = r#"{"query":{"provider_id":"p","check_id":"time_now","params":{"k":[1,"é"]}},"context":{"tenant_id":3,"namespace_id":18446744073709551615,"run_id":"r\"1","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":-5},"correlation_id":"c"}}"#;
    let (mut shortcut, _) = servers();
    shortcut.handle_message(call(1, arguments).as_bytes());
    let event = shortcut.poll_event().expect("an event");
    let ServerEvent::EvidenceQuery { query, context, .. } = event else {
        panic!("not a query: {event:?}");
    };
    assert_eq!(query.provider_id, "p");
    assert_eq!(query.check_id, "time_now");
    assert_eq!(query.params, Some(serde_json::json!({"k": [1, "é"]})));
    assert_eq!(context.tenant_id.get(), 3);
    assert_eq!(context.namespace_id.get(), u64::MAX);
    assert_eq!(context.run_id, "r\"1");
    assert_eq!(
        context.trigger_time,
        evidence_wire::evidence::TriggerTime::Logical(-5)
    );
    assert_eq!(context.correlation_id.as_deref(), Some("c"));
}

/// A stateless request is recognised by its `_meta` member however the
/// name is spelled (`\u005fmeta` is `_meta` too): the shortcut that skips
/// reading params without those bytes must not miss an escaped one.
#[test]
fn an_escaped_meta_member_is_read_as_meta() {
    let arguments = r#"{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":0}}}"#;
    let meta = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
    let answers: Vec<String> = ["_meta", "\\u005fmeta", "\\u005f\\u006deta"]
        .iter()
        .map(|name| {
            let mut server = Server::new(ServerConfig::default());
            let request = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"evidence_query","arguments":{arguments},"{name}":{meta}}}}}"#
            );
            server.handle_message(request.as_bytes());
            while let Some(event) = server.poll_event() {
                if let ServerEvent::EvidenceQuery { ticket, .. } = event {
                    let value = EvidenceValue::json(&1).expect("a value");
                    server
                        .respond(ticket, EvidenceResult::with_value(value))
                        .expect("in flight");
                }
            }
            String::from_utf8(server.poll_message().expect("an answer")).expect("UTF-8")
        })
        .collect();
    assert!(
        answers[0].contains(r#""resultType":"complete""#),
        "{}",
        answers[0]
    );
    assert_eq!(answers[1], answers[0]);
    assert_eq!(answers[2], answers[0]);
}
