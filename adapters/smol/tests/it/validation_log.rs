//! Validation logs on the smol stdio server (issue 12): `serve_with_log`
//! writes one record per message, the same bytes the blocking stdio server
//! writes for the same traffic (the stdio half of
//! `tests/data/validation_log.golden.jsonl`); a tool call answered later by
//! the handler is recorded with the answer actually sent (`INTERNAL_ERROR`
//! when its output fails the tool's output schema); and a log directory
//! that cannot be created does not stop the server. Each case runs on smol
//! and on async-std.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue};
use evidence_wire::server::{ServerConfig, ToolDefinition, ToolFailure};
use evidence_wire_smol::log::{LogSettings, ValidationLog};
use evidence_wire_smol::{Answer, Handler, Service, serve_with_log};
use futures_lite::io::Cursor;
use serde_json::{Value, json};

/// The golden file of the cross-transport test (`tests/` crate).
const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/validation_log.golden.jsonl"
);

/// The scripted traffic of the golden test, in the same order.
const SCRIPT: &[&str] = &[
    r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    r#"{"jsonrpc":"2.0","id":"list-1","method":"tools/list"}"#,
    r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"golden","check_id":"answer","params":{}},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"scenario-1","stage_id":"stage-1","trigger_id":"trigger-1","trigger_time":{"kind":"logical","value":1},"correlation_id":null}}}}"#,
    r#"{"jsonrpc":"1.0","id":4,"method":"ping"}"#,
    r#"{"jsonrpc":"2.0","id":5,"method""#,
    r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":5}}}"#,
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}"#,
    r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"broken_echo","arguments":{}}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    r#"{"jsonrpc":"2.0","id":10,"method":"no/such/method"}"#,
];

/// Answers every evidence query with `{"answer": 42}` and the external
/// tool `strict_answer` with what its `reply` argument holds.
struct Golden;

impl Handler for Golden {
    fn evidence_query(
        &self,
        _query: EvidenceQuery,
        _context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        Answer::future(async {
            let value = serde_json::value::to_raw_value(&json!({"answer": 42})).expect("raw value");
            EvidenceResult::with_value(EvidenceValue::Json(value))
        })
    }

    fn tool_call(
        &self,
        _name: &str,
        arguments: Value,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<Result<Value, ToolFailure>> {
        Answer::future(async move { Ok(arguments.get("reply").cloned().unwrap_or(Value::Null)) })
    }
}

fn output_schema() -> Value {
    json!({
        "type": "object",
        "required": ["answer"],
        "properties": {"answer": {"type": "integer"}}
    })
}

/// The golden test's server: `evidence_query` plus the inline tool
/// `broken_echo` whose output never fits its schema; here also the
/// external tool `strict_answer` (answered by the handler).
fn new_service() -> Service {
    let mut config = ServerConfig::default();
    config.add_inline_tool(
        ToolDefinition {
            name: "broken_echo".to_owned(),
            description: "Returns output outside its own schema (for tests).".to_owned(),
            input_schema: json!({"type": "object"}),
            output_schema: Some(output_schema()),
        },
        Arc::new(|_arguments: &Value| -> Result<Value, ToolFailure> { Ok(json!({})) }),
    );
    config.add_tool(ToolDefinition {
        name: "strict_answer".to_owned(),
        description: "Answered by the handler (for tests).".to_owned(),
        input_schema: json!({"type": "object"}),
        output_schema: Some(output_schema()),
    });
    Service::new(config, Golden)
}

fn scratch(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "evidence-wire-smol-log-{name}-{}-{nanos}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Serves `messages` (newline-delimited) to end of input; returns the
/// answers written.
async fn run(messages: &[&str], log: &ValidationLog) -> Vec<Value> {
    let mut input = Vec::new();
    for message in messages {
        input.extend_from_slice(message.as_bytes());
        input.push(b'\n');
    }
    let mut output = Cursor::new(Vec::new());
    serve_with_log(new_service(), Cursor::new(input), &mut output, log)
        .await
        .expect("the smol server serves the script");
    output
        .into_inner()
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).expect("one JSON answer per line"))
        .collect()
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("the run's log file")
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON record per line"))
        .collect()
}

fn on_both_runtimes<F: Future<Output = ()>>(case: impl Fn() -> F) {
    smol::block_on(case());
    async_std::task::block_on(case());
}

#[test]
fn records_equal_the_stdio_half_of_the_golden_file() {
    on_both_runtimes(|| async {
        let dir = scratch("golden");
        let log = ValidationLog::try_open(&LogSettings::new(&dir).deterministic(true))
            .expect("the log directory is writable");
        let answers = run(SCRIPT, &log).await;
        assert_eq!(
            answers.len(),
            SCRIPT.len() - 1,
            "the notification is not answered"
        );
        let written =
            std::fs::read_to_string(log.path().expect("a run file")).expect("the run's log");
        let golden = std::fs::read_to_string(GOLDEN).expect("the golden file");
        let stdio_half: String = golden
            .lines()
            .filter(|line| line.contains(r#""transport":"stdio""#))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(stdio_half.lines().count(), SCRIPT.len());
        assert_eq!(
            written, stdio_half,
            "the smol server logs the golden traffic differently from the blocking one"
        );
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_deferred_answer_is_recorded_as_sent() {
    on_both_runtimes(|| async {
        let dir = scratch("deferred");
        let log = ValidationLog::try_open(&LogSettings::new(&dir).deterministic(true))
            .expect("the log directory is writable");
        let answers = run(
            &[
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"strict_answer","arguments":{"reply":{"answer":"not a number"}}}}"#,
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"strict_answer","arguments":{"reply":{"answer":7}}}}"#,
            ],
            &log,
        )
        .await;
        let bad = answers
            .iter()
            .find(|answer| answer["id"] == 1)
            .expect("an answer to 1");
        assert_eq!(bad["error"]["code"], -32603, "{bad}");
        assert_eq!(bad["error"]["data"]["pointer"], "/answer");
        let good = answers
            .iter()
            .find(|answer| answer["id"] == 2)
            .expect("an answer to 2");
        assert_eq!(good["result"]["content"][0]["json"]["answer"], 7);

        let records = records(&log.path().expect("a run file"));
        assert_eq!(records.len(), 2, "one record per call: {records:?}");
        let record = |id: i64| {
            records
                .iter()
                .find(|record| record["requestId"] == id)
                .unwrap_or_else(|| panic!("no record of {id}"))
        };
        let failed = record(1);
        assert_eq!(failed["status"], 500);
        assert_eq!(failed["tool"], "strict_answer");
        assert_eq!(failed["error"]["code"], "INTERNAL_ERROR");
        assert_eq!(failed["error"]["detail"], bad["error"]["data"]["detail"]);
        let accepted = record(2);
        assert_eq!(accepted["status"], 200);
        assert!(accepted["error"].is_null());
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn an_unusable_log_directory_does_not_stop_the_server() {
    on_both_runtimes(|| async {
        let blocker = scratch("unusable");
        std::fs::write(&blocker, b"a file where the directory should be").expect("temp file");
        let reporter: evidence_wire_smol::log::Reporter = Arc::new(|_message: &str| {});
        let log =
            ValidationLog::open_with_reporter(&LogSettings::new(blocker.join("nested")), reporter);
        assert!(log.path().is_none());
        let answers = run(&SCRIPT[..2], &log).await;
        assert_eq!(answers.len(), 2, "the server answered anyway");
        assert_eq!(log.written(), 0);
        let _ = std::fs::remove_file(&blocker);
    });
}
