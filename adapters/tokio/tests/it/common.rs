//! Shared helpers for this crate's integration tests: a handler with a few
//! behaviours, request builders, and a frame reader.

use std::net::SocketAddr;
use std::time::Duration;

use evidence_wire::evidence::{
    EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::{Decoder, Limits};
use evidence_wire_provider::IntoService;
use evidence_wire_tokio::{
    Answer, Handler, HttpServeError, HttpServerConfig, bind_http, serve_http,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Answers `echo` (its params), `slow` (after `params.ms`), `panic`, and
/// anything else with an `unknown_check` error result.
pub struct TestHandler;

impl Handler for TestHandler {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        Answer::future(test_answer(query, context))
    }
}

/// The answer of [`TestHandler`], as a future.
pub async fn test_answer(query: EvidenceQuery, context: EvidenceContext) -> EvidenceResult {
    let params = query.params.clone().unwrap_or(Value::Null);
    match query.check_id.as_str() {
        "echo" => json_result(&json!({"params": params, "run_id": context.run_id})),
        "slow" => {
            let ms = params.get("ms").and_then(Value::as_u64).unwrap_or(100);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            json_result(&json!({"slept_ms": ms}))
        }
        "panic" => panic!("asked to panic"),
        other => EvidenceResult::with_error(EvidenceError::new(
            "unknown_check",
            format!("no check {other:?}"),
        )),
    }
}

pub fn json_result(value: &Value) -> EvidenceResult {
    EvidenceResult::with_value(EvidenceValue::json(value).expect("serializable"))
}

pub fn context() -> EvidenceContext {
    let mut context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    context.run_id = "run-1".to_owned();
    context
}

pub fn query(check: &str, params: Value) -> EvidenceQuery {
    EvidenceQuery::new("test", check).with_params(params)
}

/// The JSON-RPC `tools/call` of `evidence_query` with `id`.
pub fn call(id: i64, check: &str, params: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {
            "name": "evidence_query",
            "arguments": {"query": query(check, params), "context": context()}
        }
    })
}

pub fn content_length(message: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(message).expect("json");
    let mut framed = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    framed.extend_from_slice(&body);
    framed
}

pub fn ndjson(message: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).expect("json");
    line.push(b'\n');
    line
}

/// Every frame body in `bytes`, parsed.
pub fn frames(bytes: &[u8]) -> Vec<Value> {
    let mut decoder = Decoder::new(Limits::default());
    decoder.push(bytes);
    let mut out = Vec::new();
    while let Some(frame) = decoder.poll_frame() {
        let frame = frame.expect("well-framed output");
        out.push(serde_json::from_slice(&frame.body).expect("JSON body"));
    }
    assert_eq!(decoder.finish(), Ok(()), "output ends on a frame boundary");
    out
}

/// The EvidenceResult inside a Decision Gate style answer.
pub fn dg_result(answer: &Value) -> &Value {
    &answer["result"]["content"][0]["json"]
}

/// How long a test server may take to stop.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// A `serve_http` server on a loopback port, as the HTTP tests start it;
/// [`Running::stop`] ends it and reports how it ended.
pub struct Running {
    /// Where it listens.
    pub address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), HttpServeError>>,
}

impl Running {
    /// `service` served over HTTP with `config` on `bind` (port 0 picks one).
    pub async fn start_on(
        bind: SocketAddr,
        service: impl IntoService + Send + 'static,
        config: HttpServerConfig,
    ) -> Running {
        let listener = bind_http(bind, &config).await.expect("bind");
        let address = listener.local_addr().expect("address");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_http(listener, service, config, async move {
            let _ = stopped.await;
        }));
        Running {
            address,
            stop: Some(stop),
            task,
        }
    }

    /// `service` served over HTTP with `config` on a loopback port.
    pub async fn start(
        service: impl IntoService + Send + 'static,
        config: HttpServerConfig,
    ) -> Running {
        Running::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), service, config).await
    }

    /// `http://` URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Stops the server: how it ended (it must end within 10 s).
    pub async fn stop(mut self) -> Result<(), HttpServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(STOP_LIMIT, self.task)
            .await
            .expect("shut down in time")
            .expect("server task")
    }
}
