//! `tokio-test-provider`: a provider for the tokio process client's tests
//! (tests/it/tokio_process.rs), served with the tokio adapter's stdio server:
//! each `check_id` picks a behaviour (`echo`, `slow`, `stderr`, `crash`,
//! `hang`, `garbage`, `wrong_id`, `panic`). Framing is detected from the
//! input. Not for production use.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use std::io::Write;
use std::time::Duration;

use evidence_wire::evidence::{
    EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, EvidenceValue,
};
use evidence_wire::server::ServerConfig;
use evidence_wire_tokio::{Answer, Handler, Service, serve_stdio};
use serde_json::{Value, json};

struct TestProvider;

fn raw_stdout(bytes: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(bytes);
    let _ = stdout.flush();
}

fn value(value: &Value) -> EvidenceResult {
    match EvidenceValue::json(value) {
        Ok(value) => EvidenceResult::with_value(value),
        Err(error) => {
            EvidenceResult::with_error(EvidenceError::new("internal_error", error.to_string()))
        }
    }
}

impl Handler for TestProvider {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        Answer::future(answer(query, context))
    }
}

async fn answer(query: EvidenceQuery, context: EvidenceContext) -> EvidenceResult {
    let params = query.params.clone().unwrap_or(Value::Null);
    match query.check_id.as_str() {
        "echo" => value(&json!({"params": params, "run_id": context.run_id})),
        "slow" => {
            let ms = params.get("ms").and_then(Value::as_u64).unwrap_or(100);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            value(&json!({"slept_ms": ms}))
        }
        "stderr" => {
            eprintln!("test-provider: note from stderr");
            value(&json!("logged"))
        }
        "crash" => std::process::exit(3),
        "hang" => std::future::pending().await,
        "garbage" => {
            // A Content-Length that fits no integer: the stream cannot be resynchronized.
            raw_stdout(b"Content-Length: 999999999999999999999999999\r\n\r\n");
            std::future::pending().await
        }
        "wrong_id" => {
            let body = br#"{"jsonrpc":"2.0","id":987654321,"result":{"content":[]}}"#;
            let mut framed = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
            framed.extend_from_slice(body);
            raw_stdout(&framed);
            std::future::pending().await
        }
        "panic" => panic!("test provider asked to panic"),
        other => EvidenceResult::with_error(EvidenceError::new(
            "unknown_check",
            format!("no check named {other:?}"),
        )),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|error| {
            eprintln!("test-provider: cannot start the runtime: {error}");
            std::process::exit(1);
        });
    let service = Service::new(ServerConfig::default(), TestProvider);
    if let Err(error) = runtime.block_on(serve_stdio(service)) {
        eprintln!("test-provider: {error}");
        std::process::exit(1);
    }
}
