//! The server's reading side fails closed (issue 20, items 4, 9 and 11):
//!
//! - a member named twice is refused in every object the server reads
//!   (`tools/call` params, the tool's arguments, the query, its context, the
//!   check's params at any depth, and the params of `initialize`,
//!   `resources/read` and `notifications/cancelled`), answered
//!   `INVALID_TOOL_INPUT` (-32602) with the member's JSON pointer; before,
//!   the last one silently won;
//! - an id of `-0` is echoed as `-0` (before: `0`);
//! - `spec/framing.md`'s error table says what the server actually answers
//!   for each framing error.

use evidence_wire::frame::{Decoder, Framing, Limits};
use evidence_wire::server::{Server, ServerConfig, ServerEvent, ToolDefinition};
use proptest::prelude::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------- helpers

fn nl(body: &str) -> Vec<u8> {
    let mut out = body.as_bytes().to_vec();
    out.push(b'\n');
    out
}

const CONTEXT: &str = r#"{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000}}"#;

/// A `tools/call` of `evidence_query` (id 1) whose arguments are `arguments` as written.
fn call_with_arguments(arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"evidence_query","arguments":{arguments}}}}}"#
    )
}

/// Arguments with `query` written as given.
fn arguments_with_query(query: &str) -> String {
    format!(r#"{{"query":{query},"context":{CONTEXT}}}"#)
}

/// The answers (newline-delimited bodies) and the events of one exchange.
fn exchange(server: &mut Server, input: &[u8]) -> (Vec<Value>, Vec<ServerEvent>) {
    server.handle_input(input);
    let mut answers = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        let mut decoder = Decoder::with_framing(Framing::NewlineDelimited, Limits::default());
        decoder.push(&bytes);
        while let Some(frame) = decoder.poll_frame() {
            let frame = frame.expect("well framed");
            answers.push(serde_json::from_slice(&frame.body).expect("JSON answer"));
        }
    }
    let events = std::iter::from_fn(|| server.poll_event()).collect();
    (answers, events)
}

fn queries(events: &[ServerEvent]) -> usize {
    events
        .iter()
        .filter(|event| matches!(event, ServerEvent::EvidenceQuery { .. }))
        .count()
}

/// Asserts `answer` refuses a duplicate `name` at `pointer` as invalid tool input.
fn assert_duplicate_refused(answer: &Value, name: &str, pointer: &str) {
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["data"]["pointer"], pointer, "{answer}");
    let detail = answer["error"]["data"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        detail.contains(&format!("member `{name}` appears more than once")),
        "{detail}"
    );
    assert!(detail.contains(pointer), "{detail}");
}

// ------------------------------------------------- duplicates, level by level

/// The parser differential of the review: `check_id`, `provider_id`, a
/// check param and a context member named twice; before, the last one won
/// and the query reached the embedder.
#[test]
fn a_duplicate_in_evidence_query_arguments_is_refused_at_every_level() {
    let cases: Vec<(String, &str, &str)> = vec![
        (
            arguments_with_query(r#"{"provider_id":"p","check_id":"file_exists","check_id":"env_var"}"#),
            "check_id",
            "/query/check_id",
        ),
        (
            arguments_with_query(r#"{"provider_id":"files","check_id":"c","provider_id":"other"}"#),
            "provider_id",
            "/query/provider_id",
        ),
        (
            arguments_with_query(
                r#"{"provider_id":"p","check_id":"file_exists","params":{"path":"a.json","path":"/etc/shadow"}}"#,
            ),
            "path",
            "/query/params/path",
        ),
        (
            arguments_with_query(
                r#"{"provider_id":"p","check_id":"json_path","params":{"path":"a","query":[1,{"x":{"key":"a","key":"b"}}]}}"#,
            ),
            "key",
            "/query/params/query/1/x/key",
        ),
        (
            r#"{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1},"tenant_id":2}}"#
                .to_owned(),
            "tenant_id",
            "/context/tenant_id",
        ),
        (
            format!(
                r#"{{"query":{{"provider_id":"p","check_id":"c"}},"context":{CONTEXT},"query":{{"provider_id":"p","check_id":"d"}}}}"#
            ),
            "query",
            "/query",
        ),
        (
            arguments_with_query(r#"{"provider_id":"p","check_id":"c","params":{"a/b~":1,"a/b~":2}}"#),
            "a/b~",
            "/query/params/a~1b~0",
        ),
        (
            // Escaped spellings of one name are the same name.
            arguments_with_query(r#"{"provider_id":"p","check_id":"c","\u0063heck_id":"d"}"#),
            "check_id",
            "/query/check_id",
        ),
    ];
    for (arguments, name, pointer) in cases {
        let mut server = Server::new(ServerConfig::default());
        let (answers, events) = exchange(&mut server, &nl(&call_with_arguments(&arguments)));
        assert_eq!(answers.len(), 1, "{arguments}");
        assert_duplicate_refused(&answers[0], name, pointer);
        assert_eq!(answers[0]["id"], 1);
        assert_eq!(queries(&events), 0, "{arguments}: reached the embedder");
        // The connection goes on.
        let (answers, _) = exchange(
            &mut server,
            &nl(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#),
        );
        assert_eq!(answers[0]["result"], json!({}));
    }
}

#[test]
fn the_same_arguments_without_the_duplicate_are_accepted() {
    let arguments = arguments_with_query(
        r#"{"provider_id":"p","check_id":"json_path","params":{"path":"a","query":[1,{"x":{"key":"a","other":"b"}}]}}"#,
    );
    let mut server = Server::new(ServerConfig::default());
    let (answers, events) = exchange(&mut server, &nl(&call_with_arguments(&arguments)));
    assert!(answers.is_empty(), "{answers:?}");
    assert_eq!(queries(&events), 1);
}

#[test]
fn tools_call_params_naming_name_or_arguments_twice_are_refused() {
    for params in [
        r#"{"name":"evidence_query","name":"other","arguments":{}}"#,
        r#"{"name":"evidence_query","arguments":{},"arguments":{}}"#,
    ] {
        let mut server = Server::new(ServerConfig::default());
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
        let (answers, events) = exchange(&mut server, &nl(&body));
        assert_eq!(answers[0]["error"]["code"], -32602, "{params}");
        let detail = answers[0]["error"]["data"]["detail"].as_str().unwrap();
        assert!(detail.contains("duplicate field"), "{detail}");
        assert_eq!(queries(&events), 0);
    }
}

#[test]
fn a_duplicate_in_another_tools_arguments_is_refused() {
    let mut config = ServerConfig::default();
    config.add_tool(ToolDefinition {
        name: "echo".to_owned(),
        description: "Echoes.".to_owned(),
        input_schema: json!({"type": "object"}),
        output_schema: None,
    });
    let mut server = Server::new(config);
    let body = r#"{"jsonrpc":"2.0","id":"e","method":"tools/call","params":{"name":"echo","arguments":{"list":[{"v":1,"v":2}]}}}"#;
    let (answers, events) = exchange(&mut server, &nl(body));
    assert_duplicate_refused(&answers[0], "v", "/list/0/v");
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, ServerEvent::ToolCall { .. })),
        "{events:?}"
    );
}

#[test]
fn initialize_and_resources_read_params_naming_a_member_twice_are_refused() {
    let mut server = Server::new(ServerConfig::default());
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","name":"b"},"protocolVersion":"2025-11-25"}}"#;
    let (answers, events) = exchange(&mut server, &nl(body));
    assert_duplicate_refused(&answers[0], "name", "/clientInfo/name");
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, ServerEvent::Initialized { .. })),
        "{events:?}"
    );
    let body =
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"a","uri":"b"}}"#;
    let (answers, _) = exchange(&mut server, &nl(body));
    assert_duplicate_refused(&answers[0], "uri", "/uri");
}

#[test]
fn a_cancellation_naming_request_id_twice_cancels_nothing() {
    let mut server = Server::new(ServerConfig::default());
    let arguments = arguments_with_query(r#"{"provider_id":"p","check_id":"c"}"#);
    let (_, events) = exchange(&mut server, &nl(&call_with_arguments(&arguments)));
    assert_eq!(queries(&events), 1);
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"requestId":1}}"#;
    let (answers, events) = exchange(&mut server, &nl(cancel));
    assert!(answers.is_empty(), "a notification is never answered");
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, ServerEvent::Cancelled { .. })),
        "{events:?}"
    );
    let recorded = events.iter().find_map(|event| match event {
        ServerEvent::Handled(outcome) => outcome.detail.clone(),
        _ => None,
    });
    assert!(
        recorded.is_some_and(|detail| detail.contains("requestId")),
        "{events:?}"
    );
    assert_eq!(server.in_flight(), 1);
}

// -------------------------------------- a duplicate anywhere (property test)

/// A JSON value whose objects name distinct members.
#[derive(Clone, Debug)]
enum Json {
    Null,
    Number(i64),
    Text(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Number(number) => out.push_str(&number.to_string()),
            Json::Text(text) => out.push_str(&serde_json::to_string(text).unwrap()),
            Json::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (index, (name, value)) in members.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(name).unwrap());
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }

    /// The paths (member names and array indexes) of every object inside.
    fn object_paths(&self, here: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match self {
            Json::Object(members) => {
                out.push(here.clone());
                for (name, value) in members {
                    here.push(name.clone());
                    value.object_paths(here, out);
                    here.pop();
                }
            }
            Json::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    here.push(index.to_string());
                    item.object_paths(here, out);
                    here.pop();
                }
            }
            _ => {}
        }
    }

    fn at_mut(&mut self, path: &[String]) -> &mut Json {
        let Some((first, rest)) = path.split_first() else {
            return self;
        };
        match self {
            Json::Object(members) => members
                .iter_mut()
                .find(|(name, _)| name == first)
                .map(|(_, value)| value.at_mut(rest))
                .unwrap(),
            Json::Array(items) => items[first.parse::<usize>().unwrap()].at_mut(rest),
            _ => unreachable!("paths lead through containers"),
        }
    }
}

fn name() -> impl Strategy<Value = String> {
    "[a-c/~é]{0,3}"
}

fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<i64>().prop_map(Json::Number),
        "[a-z]{0,4}".prop_map(Json::Text),
    ];
    leaf.prop_recursive(5, 48, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Json::Array),
            proptest::collection::vec((name(), inner), 0..5).prop_map(|members| {
                let mut seen = std::collections::HashSet::new();
                Json::Object(
                    members
                        .into_iter()
                        .filter(|(name, _)| seen.insert(name.clone()))
                        .collect(),
                )
            }),
        ]
    })
}

/// Valid `evidence_query` arguments holding `params`.
fn arguments(params: Json) -> Json {
    let context: Value = serde_json::from_str(CONTEXT).unwrap();
    let context = Json::Object(
        context
            .as_object()
            .unwrap()
            .iter()
            .map(|(name, value)| {
                let value = match value {
                    Value::Number(number) => Json::Number(number.as_i64().unwrap()),
                    Value::String(text) => Json::Text(text.clone()),
                    Value::Object(time) => Json::Object(vec![
                        (
                            "kind".to_owned(),
                            Json::Text(time["kind"].as_str().unwrap().to_owned()),
                        ),
                        (
                            "value".to_owned(),
                            Json::Number(time["value"].as_i64().unwrap()),
                        ),
                    ]),
                    other => panic!("{other}"),
                };
                (name.clone(), value)
            })
            .collect(),
    );
    Json::Object(vec![
        (
            "query".to_owned(),
            Json::Object(vec![
                ("provider_id".to_owned(), Json::Text("p".to_owned())),
                ("check_id".to_owned(), Json::Text("c".to_owned())),
                ("params".to_owned(), params),
            ]),
        ),
        ("context".to_owned(), context),
    ])
}

fn pointer(path: &[String]) -> String {
    path.iter()
        .map(|segment| format!("/{}", segment.replace('~', "~0").replace('/', "~1")))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Valid arguments are accepted; the same arguments with one member of
    /// any object (query, context, trigger time, the params at any depth)
    /// written twice are refused, naming that member's pointer.
    #[test]
    fn a_duplicate_anywhere_in_the_arguments_is_refused(
        params in json(),
        which_object in any::<prop::sample::Index>(),
        which_member in any::<prop::sample::Index>(),
        position in any::<prop::sample::Index>(),
        replacement in json(),
        fresh_name in name(),
    ) {
        let base = arguments(params);
        let mut text = String::new();
        base.write(&mut text);
        let mut server = Server::new(ServerConfig::default());
        let (answers, events) = exchange(&mut server, &nl(&call_with_arguments(&text)));
        prop_assert!(answers.is_empty(), "{:?}", answers);
        prop_assert_eq!(queries(&events), 1);

        let mut paths = Vec::new();
        base.object_paths(&mut Vec::new(), &mut paths);
        let path = which_object.get(&paths).clone();
        let mut twice = base.clone();
        let Json::Object(members) = twice.at_mut(&path) else {
            unreachable!("an object path");
        };
        let name = if members.is_empty() {
            members.push((fresh_name.clone(), Json::Null));
            fresh_name
        } else {
            which_member.get(members).0.clone()
        };
        let at = position.index(members.len() + 1);
        members.insert(at, (name.clone(), replacement));
        let mut text = String::new();
        twice.write(&mut text);
        let mut server = Server::new(ServerConfig::default());
        let (answers, events) = exchange(&mut server, &nl(&call_with_arguments(&text)));
        prop_assert_eq!(queries(&events), 0, "{}", text);
        prop_assert_eq!(answers.len(), 1);
        let mut member_path = path.clone();
        member_path.push(name.clone());
        let expected = pointer(&member_path);
        prop_assert_eq!(&answers[0]["error"]["code"], &json!(-32602), "{}", text);
        prop_assert_eq!(
            answers[0]["error"]["data"]["pointer"].as_str(),
            Some(expected.as_str()),
            "{}",
            text
        );
    }
}

// ------------------------------------------------------------ the id `-0`

/// JSON-RPC echoes the id as sent: `-0` stays `-0` in results, errors and
/// `data.request_id` (before: `0`). `0` stays `0`.
#[test]
fn an_id_of_minus_zero_is_echoed_as_sent() {
    let mut server = Server::new(ServerConfig::default());
    let input = [
        r#"{"jsonrpc":"2.0","id":-0,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":-0,"method":"no/such/method"}"#,
        r#"{"jsonrpc":"2.0","id":-0,"method":"tools/call","params":{"name":"evidence_query","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#,
    ]
    .map(nl)
    .concat();
    server.handle_input(&input);
    let out: Vec<u8> = std::iter::from_fn(|| server.poll_transmit())
        .flatten()
        .collect();
    let lines: Vec<&str> = std::str::from_utf8(&out).unwrap().lines().collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[0], r#"{"jsonrpc":"2.0","id":-0,"result":{}}"#);
    for line in &lines[1..3] {
        assert!(
            line.starts_with(r#"{"jsonrpc":"2.0","id":-0,"error":"#),
            "{line}"
        );
        assert!(line.contains(r#""request_id":-0"#), "{line}");
    }
    assert_eq!(lines[3], r#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
    // (The validation log keeps it as sent too: the log crate's
    // `a_request_id_of_minus_zero_is_recorded_as_sent`.)
}

/// The envelope keeps `-0` apart from `0`, and writes it back as `-0`.
#[test]
fn the_envelope_keeps_the_id_minus_zero() {
    use evidence_wire::envelope::{Id, Incoming, Message, Policy, validate};
    let body = br#"{"jsonrpc":"2.0","id":-0,"method":"ping"}"#;
    let Ok(Incoming::Single(Message::Request(request))) = validate(body, &Policy::mcp()) else {
        panic!("a valid request");
    };
    assert_eq!(request.id, Id::NegativeZero);
    assert_ne!(request.id, Id::Number(0));
    assert_eq!(request.id.to_string(), "-0");
    assert_eq!(serde_json::to_string(&request.id).unwrap(), "-0");
    assert_eq!(
        evidence_wire::envelope::encode_result(&request.id, &json!({})).unwrap(),
        br#"{"jsonrpc":"2.0","id":-0,"result":{}}"#
    );
    // Under the string-only policy it is a number like any other.
    let strict = validate(
        br#"{"jsonrpc":"2.0","id":-0,"method":"ping","params":{}}"#,
        &Policy::strict(),
    );
    assert!(strict.is_err());
}

// ------------------------------------ spec/framing.md's error table is true

/// The rows of the "Errors" table of `spec/framing.md`: error name → the
/// JSON-RPC code in its "what a server answers" column (`None` when the
/// column names none).
fn framing_error_table() -> Vec<(String, Option<i64>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../spec/framing.md");
    let text = std::fs::read_to_string(path).unwrap();
    let section = text
        .split("\n## Errors\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("an Errors section");
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`').to_owned();
            let answer = cells[4];
            let code = answer
                .split(|c: char| !(c.is_ascii_digit() || c == '-'))
                .find(|word| word.starts_with("-32"))
                .map(|word| word.parse().unwrap());
            (name, code)
        })
        .collect()
}

/// Input that makes a fresh server (8 KiB header and 64-byte body limits)
/// meet each recoverable framing error.
fn framing_case(name: &str) -> Option<Vec<u8>> {
    Some(match name {
        "BodyTooLarge" => b"Content-Length: 65\r\n\r\n".to_vec(),
        "UnsupportedCharset" => {
            b"Content-Length: 2\r\nContent-Type: application/json; charset=utf-16\r\n\r\n{}"
                .to_vec()
        }
        "LineTooLong" => {
            let mut line = vec![b'{'];
            line.extend(std::iter::repeat_n(b' ', 80));
            line.extend_from_slice(b"}\n");
            line
        }
        "HeaderTooLarge" => {
            let mut head = b"Content-Length: 2\r\nX-Padding: ".to_vec();
            head.extend(std::iter::repeat_n(b'x', 9000));
            head
        }
        "MalformedHeaderLine" => b"Content-Length 2\r\n\r\n".to_vec(),
        "InvalidContentLength" => b"Content-Length: +2\r\n\r\n".to_vec(),
        "ConflictingContentLength" => b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n".to_vec(),
        "MissingContentLength" => b"Content-Type: application/json\r\n\r\n".to_vec(),
        "ContentLengthOverflow" => b"Content-Length: 99999999999999999999999\r\n\r\n".to_vec(),
        _ => return None,
    })
}

#[test]
fn the_framing_error_table_says_what_the_server_answers() {
    let table = framing_error_table();
    assert!(table.len() >= 11, "{table:?}");
    let mut checked = 0;
    for (name, code) in &table {
        let Some(input) = framing_case(name) else {
            // `InputAfterFinish` and `Truncated` are not answers to input.
            assert!(
                code.is_none(),
                "{name}: no case for a row that names a code"
            );
            continue;
        };
        let mut config = ServerConfig::default();
        config.limits = Limits {
            max_header_bytes: 8 * 1024,
            max_body_bytes: 64,
        };
        let mut server = Server::new(config);
        server.handle_input(&input);
        let events: Vec<ServerEvent> = std::iter::from_fn(|| server.poll_event()).collect();
        let raised = events.iter().find_map(|event| match event {
            ServerEvent::FramingError(error) | ServerEvent::Fatal(error) => {
                Some(format!("{error:?}"))
            }
            _ => None,
        });
        assert!(
            raised
                .as_deref()
                .is_some_and(|debug| debug.starts_with(name.as_str())),
            "{name}: the case raised {raised:?}"
        );
        let out: Vec<u8> = std::iter::from_fn(|| server.poll_transmit())
            .flatten()
            .collect();
        let sent = (!out.is_empty()).then(|| {
            let mut decoder = Decoder::new(Limits::default());
            decoder.push(&out);
            let body = decoder.poll_frame().unwrap().unwrap().body;
            let answer: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(answer["id"], Value::Null, "{name}: {answer}");
            answer["error"]["code"].as_i64().unwrap()
        });
        assert_eq!(
            sent, *code,
            "{name}: spec/framing.md says {code:?}, the server sent {sent:?}"
        );
        checked += 1;
    }
    assert_eq!(
        checked, 9,
        "every recoverable error and the fatal one are checked"
    );
}
