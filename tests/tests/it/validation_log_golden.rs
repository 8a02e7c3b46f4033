//! Validation logs with transport parity (issue 12, spec/logging.md).
//!
//! The same scripted traffic (valid calls, an invalid envelope, unparseable
//! JSON, invalid tool input, an unknown tool, an internal error, a
//! notification, an unknown method) goes over stdio (blocking adapter) and
//! over HTTP `POST /rpc` (tokio adapter), into one deterministic log. The
//! records of each message must agree except `transport`, `route` and
//! `correlationId`; every record must match
//! `spec/schemas/validation-log.schema.json`; and the whole file must equal
//! `tests/data/validation_log.golden.jsonl` byte for byte. Set
//! `EVIDENCE_WIRE_BLESS=1` to rewrite the golden file after a deliberate
//! format change (and review the diff).
//!
//! Also: `.latest` names the newest run after two runs, and a log directory
//! that cannot be created does not stop the server.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::io::{Cursor, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue};
use evidence_wire::server::{ServerConfig, ToolDefinition, ToolFailure};
use evidence_wire_blocking::log::{LogSettings, ValidationLog};
use evidence_wire_provider::{Answer, Handler, Service};
use serde_json::{Map, Value, json};

const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/validation_log.golden.jsonl"
);
const SCHEMA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../spec/schemas/validation-log.schema.json"
);

/// The scripted traffic: one JSON-RPC message per entry.
const SCRIPT: &[&str] = &[
    // Valid calls.
    r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    r#"{"jsonrpc":"2.0","id":"list-1","method":"tools/list"}"#,
    r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"golden","check_id":"answer","params":{}},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"scenario-1","stage_id":"stage-1","trigger_id":"trigger-1","trigger_time":{"kind":"logical","value":1},"correlation_id":null}}}}"#,
    // An invalid envelope (wrong jsonrpc version).
    r#"{"jsonrpc":"1.0","id":4,"method":"ping"}"#,
    // Not JSON at all.
    r#"{"jsonrpc":"2.0","id":5,"method""#,
    // Invalid tool input.
    r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":5}}}"#,
    // An unknown tool.
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}"#,
    // An internal error: the tool's output fails its own output schema.
    r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"broken_echo","arguments":{}}}"#,
    // A notification (no answer) and an unknown method.
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    r#"{"jsonrpc":"2.0","id":10,"method":"no/such/method"}"#,
];

/// A provider that answers every evidence query with the same value.
#[derive(Clone, Copy)]
struct Golden;

fn answer() -> EvidenceResult {
    let value = serde_json::value::to_raw_value(&json!({"answer": 42})).expect("raw value");
    EvidenceResult::with_value(EvidenceValue::Json(value))
}

/// One handler for both transports (the SDK's vocabulary).
impl Handler for Golden {
    fn evidence_query(
        &self,
        _query: EvidenceQuery,
        _context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        Answer::Ready(answer())
    }
}

/// Both transports' servers: the bundled `evidence_query` plus an inline
/// tool whose output never matches its output schema (an internal error).
fn golden_config() -> ServerConfig {
    let mut config = ServerConfig::default();
    let definition = ToolDefinition {
        name: "broken_echo".to_owned(),
        description: "Returns output outside its own schema (for tests).".to_owned(),
        input_schema: json!({"type": "object"}),
        output_schema: Some(json!({
            "type": "object",
            "required": ["answer"],
            "properties": {"answer": {"type": "integer"}}
        })),
    };
    config.add_inline_tool(
        definition,
        Arc::new(|_arguments: &Value| -> Result<Value, ToolFailure> { Ok(json!({})) }),
    );
    config
}

fn new_service() -> Service {
    Service::new(golden_config(), Golden)
}

fn scratch(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "evidence-wire-validation-log-{name}-{}-{nanos}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `messages` through the blocking stdio server (newline-delimited)
/// and returns what it wrote.
fn run_stdio(messages: &[&str], log: &ValidationLog) -> Vec<u8> {
    let mut input = Vec::new();
    for message in messages {
        input.extend_from_slice(message.as_bytes());
        input.push(b'\n');
    }
    /// The server needs a `'static` writer: the bytes land here.
    #[derive(Clone, Default)]
    struct Output(Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Output {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("output lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let output = Output::default();
    evidence_wire_blocking::serve_with_log(
        new_service(),
        2,
        Cursor::new(input),
        output.clone(),
        log,
    )
    .expect("the stdio server serves the script");
    output.0.lock().expect("output lock").clone()
}

/// Posts each message alone to `/rpc` of a tokio HTTP server logging to
/// `log`, in order; returns the statuses.
fn run_http(messages: &[&str], log: &ValidationLog) -> Vec<u16> {
    let (address_tx, address_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let log = log.clone();
    let server = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let config = evidence_wire_tokio::HttpServerConfig::default().with_validation_log(log);
            let address = SocketAddr::from(([127, 0, 0, 1], 0));
            let listener = evidence_wire_tokio::bind_http(address, &config)
                .await
                .expect("bind 127.0.0.1");
            address_tx
                .send(listener.local_addr().expect("local address"))
                .expect("report the address");
            evidence_wire_tokio::serve_http(listener, new_service(), config, async move {
                let _ = stop_rx.await;
            })
            .await
            .expect("the HTTP server runs");
        });
    });
    let address = address_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the HTTP server starts");
    let statuses = messages
        .iter()
        .map(|message| post(address, "/rpc", message))
        .collect();
    let _ = stop_tx.send(());
    server.join().expect("the HTTP server thread ends");
    statuses
}

/// One HTTP/1.1 request on its own connection; returns the status.
fn post(address: SocketAddr, path: &str, body: &str) -> u16 {
    let mut stream =
        TcpStream::connect_timeout(&address, Duration::from_secs(10)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).expect("read the reply");
    let reply = String::from_utf8_lossy(&reply);
    reply
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {reply:?}"))
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("the run's log file")
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is one JSON record"))
        .collect()
}

/// The record without the fields that may differ between transports.
fn comparable(record: &Value) -> Map<String, Value> {
    let mut object = record.as_object().cloned().expect("a record is an object");
    for field in ["transport", "route", "correlationId"] {
        object.remove(field);
    }
    object
}

#[test]
fn stdio_and_http_records_agree_and_match_the_golden_file() {
    let dir = scratch("golden");
    let log = ValidationLog::try_open(&LogSettings::new(&dir).deterministic(true))
        .expect("the log directory is writable");
    let path = log.path().expect("a run file");

    let stdio_output = run_stdio(SCRIPT, &log);
    // Every request was answered (the notification was not).
    let answers = stdio_output
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty());
    assert_eq!(answers.count(), SCRIPT.len() - 1);
    let statuses = run_http(SCRIPT, &log);

    let records = records(&path);
    let (stdio, http): (Vec<&Value>, Vec<&Value>) = records
        .iter()
        .partition(|record| record["transport"] == "stdio");
    assert_eq!(stdio.len(), SCRIPT.len(), "one stdio record per message");
    assert_eq!(http.len(), SCRIPT.len(), "one HTTP record per message");
    for (index, (stdio, http)) in stdio.iter().zip(&http).enumerate() {
        assert_eq!(stdio["route"], "stdio:newline-delimited");
        assert_eq!(http["transport"], "http");
        assert_eq!(http["route"], "/rpc");
        assert_eq!(
            comparable(stdio),
            comparable(http),
            "message {index} ({}) is recorded differently on stdio and HTTP",
            SCRIPT[index]
        );
        assert_eq!(
            http["status"],
            json!(statuses[index]),
            "the HTTP record carries the status actually sent for message {index}"
        );
    }
    // The script covers the seed's four codes, plus accepted messages.
    let codes: Vec<&str> = stdio
        .iter()
        .map(|record| record["error"]["code"].as_str().unwrap_or("accepted"))
        .collect();
    assert_eq!(
        codes,
        [
            "accepted",
            "accepted",
            "accepted",
            "INVALID_ENVELOPE",
            "PARSE_ERROR",
            "INVALID_TOOL_INPUT",
            "TOOL_NOT_FOUND",
            "INTERNAL_ERROR",
            "accepted",
            "METHOD_NOT_FOUND",
        ]
    );
    let stdio_statuses: Vec<u64> = stdio
        .iter()
        .map(|record| record["status"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(
        stdio_statuses,
        [200, 200, 200, 400, 400, 422, 404, 500, 202, 404]
    );

    let written = std::fs::read(&path).expect("the run's log file");
    if std::env::var_os("EVIDENCE_WIRE_BLESS").is_some() {
        std::fs::create_dir_all(Path::new(GOLDEN).parent().expect("data dir")).expect("data dir");
        std::fs::write(GOLDEN, &written).expect("bless the golden file");
    }
    let golden = std::fs::read(GOLDEN).expect("tests/data/validation_log.golden.jsonl");
    assert!(
        written == golden,
        "the deterministic log differs from the golden file.\n--- written\n{}\n--- golden\n{}",
        String::from_utf8_lossy(&written),
        String::from_utf8_lossy(&golden)
    );

    // A second deterministic run of the same traffic writes the same bytes.
    let again =
        ValidationLog::try_open(&LogSettings::new(&dir).deterministic(true)).expect("second run");
    run_stdio(SCRIPT, &again);
    run_http(SCRIPT, &again);
    let second = again.path().expect("second run file");
    assert_ne!(second, path);
    assert_eq!(std::fs::read(&second).expect("second run"), written);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_record_has_every_required_field_and_matches_the_schema() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(SCHEMA).expect("the schema")).expect("JSON");
    let validator = jsonschema::draft202012::options()
        .build(&schema)
        .expect("the schema compiles");
    let required: Vec<&str> = schema["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(required.len() >= 10, "{required:?}");

    // A non-deterministic run, so real timestamps and UUIDs are checked too.
    let dir = scratch("schema");
    let log = ValidationLog::try_open(&LogSettings::new(&dir)).expect("writable");
    run_stdio(SCRIPT, &log);
    run_http(SCRIPT, &log);
    let golden: Vec<Value> = std::fs::read_to_string(GOLDEN)
        .expect("golden file")
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    let all = records(&log.path().expect("run file"));
    assert_eq!(all.len(), 2 * SCRIPT.len());
    for record in all.iter().chain(&golden) {
        for field in &required {
            assert!(
                record.get(*field).is_some(),
                "`{field}` is missing from {record}"
            );
        }
        let errors: Vec<String> = validator
            .iter_errors(record)
            .map(|error| format!("{} at {}", error, error.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{record} fails the schema: {errors:?}");
        assert!(
            !record["metadata"]["schemaVersion"]
                .as_str()
                .unwrap_or("")
                .is_empty()
        );
    }
    assert!(
        all.iter()
            .all(|record| record["metadata"]["deterministic"] == false)
    );
    assert!(
        golden
            .iter()
            .all(|record| record["metadata"]["deterministic"] == true)
    );
    // The schema is not a rubber stamp: a record missing a field fails it.
    let mut broken = all[0].clone();
    broken.as_object_mut().expect("object").remove("status");
    assert!(!validator.is_valid(&broken));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn latest_points_at_the_newest_run_after_two_runs() {
    let dir = scratch("latest");
    let settings = LogSettings::new(&dir);
    let first = ValidationLog::open(&settings);
    run_stdio(&SCRIPT[..1], &first);
    let second = ValidationLog::open(&settings);
    run_stdio(&SCRIPT[..2], &second);
    let (first, second) = (
        first.path().expect("first run"),
        second.path().expect("second run"),
    );
    assert_ne!(first, second);
    let latest = dir.join(".latest");
    let target = std::fs::read_link(&latest).expect(".latest is a symlink");
    assert_eq!(
        Some(target.as_os_str()),
        second.file_name(),
        ".latest must name the newest run"
    );
    assert_eq!(records(&latest).len(), 2, ".latest reads as the second run");
    assert_eq!(records(&first).len(), 1, "the first run's file is kept");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_log_directory_does_not_stop_the_server() {
    let dir = scratch("unwritable");
    // A regular file where a directory is needed: nothing can be created
    // under it, whoever runs the test (root ignores permission bits).
    std::fs::create_dir_all(dir.parent().expect("temp")).expect("temp dir");
    std::fs::write(&dir, b"in the way").expect("blocker");
    let log = ValidationLog::open(&LogSettings::new(dir.join("logs")));
    assert!(log.path().is_none());
    let output = run_stdio(SCRIPT, &log);
    let answers: Vec<Value> = output
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).expect("JSON answer"))
        .collect();
    assert_eq!(answers.len(), SCRIPT.len() - 1);
    assert_eq!(answers[0], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    // HTTP too.
    let statuses = run_http(&SCRIPT[..1], &log);
    assert_eq!(statuses, [200]);
    assert_eq!(log.written(), 0);
    let _ = std::fs::remove_file(&dir);
}

/// A call that carries a W3C trace context is recorded with its trace id
/// (`traceId`), on stdio from its `_meta.traceparent` and over HTTP from
/// the `traceparent` header too (the message's own `_meta` wins); the
/// records of everything else have no `traceId` (the golden file above is
/// unchanged), and every record matches the schema.
#[test]
fn a_traced_call_is_recorded_with_its_trace_id() {
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let call = |id: u32, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"evidence_query",{meta}"arguments":{{"query":{{"provider_id":"golden","check_id":"answer","params":{{}}}},"context":{{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"scenario-1","stage_id":"stage-1","trigger_id":"trigger-1","trigger_time":{{"kind":"logical","value":1}},"correlation_id":null}}}}}}}}"#
        )
    };
    let traced = call(1, &format!(r#""_meta":{{"traceparent":"{PARENT}"}},"#));
    let invalid = call(2, r#""_meta":{"traceparent":"00-not-a-trace"},"#);
    let plain = call(3, "");
    // A refused call (an unknown tool) is recorded with its trace id too.
    let refused = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"no_such_tool","_meta":{{"traceparent":"{PARENT}"}},"arguments":{{}}}}}}"#
    );
    let messages = [
        traced.as_str(),
        invalid.as_str(),
        plain.as_str(),
        refused.as_str(),
    ];

    let dir = scratch("traced");
    let log = ValidationLog::try_open(&LogSettings::new(&dir).deterministic(true))
        .expect("the log directory is writable");
    run_stdio(&messages, &log);
    log.flush();
    let stdio = records(&log.path().expect("a run file"));
    let trace_ids = |records: &[Value]| -> Vec<Value> {
        records
            .iter()
            .map(|record| record.get("traceId").cloned().unwrap_or(Value::Null))
            .collect()
    };
    let id = "4bf92f3577b34da6a3ce929d0e0e4736";
    assert_eq!(
        trace_ids(&stdio),
        [json!(id), Value::Null, Value::Null, json!(id)],
        "{stdio:?}"
    );

    // Over HTTP the header gives the messages without a valid `_meta`
    // context theirs; `_meta` wins where it has one.
    let http_log = ValidationLog::try_open(&LogSettings::new(dir.join("http")).deterministic(true))
        .expect("writable");
    let (address_tx, address_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server_log = http_log.clone();
    let server = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let config =
                evidence_wire_tokio::HttpServerConfig::default().with_validation_log(server_log);
            let listener =
                evidence_wire_tokio::bind_http(SocketAddr::from(([127, 0, 0, 1], 0)), &config)
                    .await
                    .expect("bind");
            address_tx
                .send(listener.local_addr().expect("address"))
                .expect("report");
            evidence_wire_tokio::serve_http(listener, new_service(), config, async move {
                let _ = stop_rx.await;
            })
            .await
            .expect("serves");
        });
    });
    let address = address_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("started");
    for message in messages {
        let mut stream =
            TcpStream::connect_timeout(&address, Duration::from_secs(10)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let request = format!(
            "POST /rpc HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\ntraceparent: {OTHER}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{message}",
            message.len()
        );
        stream.write_all(request.as_bytes()).expect("send");
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).expect("reply");
    }
    let _ = stop_tx.send(());
    server.join().expect("server thread");
    let http = records(&http_log.path().expect("a run file"));
    let other = "0af7651916cd43dd8448eb211c80319c";
    assert_eq!(
        trace_ids(&http),
        [json!(id), json!(other), json!(other), json!(id)],
        "{http:?}"
    );

    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(SCHEMA).expect("the schema")).expect("JSON");
    let validator = jsonschema::draft202012::options()
        .build(&schema)
        .expect("the schema compiles");
    for record in stdio.iter().chain(&http) {
        let errors: Vec<String> = validator
            .iter_errors(record)
            .map(|error| format!("{} at {}", error, error.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{record} fails the schema: {errors:?}");
    }
    let mut broken = stdio[0].clone();
    broken["traceId"] = json!("not-hex");
    assert!(!validator.is_valid(&broken), "traceId is checked");
    let _ = std::fs::remove_dir_all(&dir);
}
