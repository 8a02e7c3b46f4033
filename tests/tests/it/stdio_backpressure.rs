//! Backpressure on stdio (issue 27): a peer that pipelines far more calls
//! than the in-flight cap is slowed, not refused. 1,000 calls written at
//! once to each stdio server (blocking, tokio, smol on smol and on
//! async-std), capped at 16 in flight: 1,000 answers, each with its own id
//! and value, no `-32072`, and never more than the cap running at once.
//!
//! The calls run on the blocking pool (so they stay in flight while the
//! reader goes on): before the fix, every chunk of input (about 180 calls
//! per 64 KiB) overran the cap and all but 16 were answered `OVERLOADED`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::{self, Decoder, Framing, Limits};
use evidence_wire::server::ServerConfig;
use evidence_wire_provider::{Answer, Handler, Service};
use serde_json::{Value, json};

const CALLS: u64 = 1000;
const CAP: usize = 16;

/// Answers `{"n": n}` from the blocking pool after a short sleep, and
/// records how many run at once.
#[derive(Default)]
struct Counted {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Handler for Counted {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        _: EvidenceContext,
        _: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        let running = Arc::clone(&self.running);
        let most = Arc::clone(&self.most);
        Answer::blocking(move || {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(300));
            let n = query
                .params
                .as_ref()
                .and_then(|params| params.get("n"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            running.fetch_sub(1, Ordering::SeqCst);
            EvidenceResult::with_value(EvidenceValue::json(&json!({"n": n})).expect("json"))
        })
    }
}

fn service() -> (Service, Arc<AtomicUsize>) {
    let mut config = ServerConfig::default();
    config.max_in_flight = CAP;
    let handler = Counted::default();
    let most = Arc::clone(&handler.most);
    (Service::new(config, handler), most)
}

/// 1,000 newline-delimited calls, id = n.
fn input() -> Vec<u8> {
    let context = EvidenceContext::adhoc(TriggerTime::Logical(1));
    let mut out = Vec::new();
    for n in 1..=CALLS {
        let query = EvidenceQuery::new("p", "echo").with_params(json!({"n": n}));
        let body = serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "evidence_query", "arguments": {"query": query, "context": context}},
        }))
        .expect("json");
        frame::encode(Framing::NewlineDelimited, &body, &mut out).expect("framed");
    }
    out
}

/// Every answer has its own id, carries its own value, and none is an error.
fn assert_all_answered(adapter: &str, output: &[u8], most: &AtomicUsize) {
    let mut decoder = Decoder::with_framing(Framing::NewlineDelimited, Limits::default());
    decoder.push(output);
    let mut ids = BTreeSet::new();
    let mut refused = 0;
    while let Some(frame) = decoder.poll_frame() {
        let answer: Value = serde_json::from_slice(&frame.expect("framed").body).expect("json");
        if answer["error"]["code"] == -32072 {
            refused += 1;
            continue;
        }
        let id = answer["id"].as_u64().expect("an id");
        let n = &answer["result"]["content"][0]["json"]["value"]["value"]["n"];
        assert_eq!(
            n.as_u64(),
            Some(id),
            "{adapter}: answer {answer} carries its own value"
        );
        assert!(ids.insert(id), "{adapter}: id {id} answered twice");
    }
    assert_eq!(
        refused, 0,
        "{adapter}: calls refused OVERLOADED instead of slowed"
    );
    assert_eq!(ids.len() as u64, CALLS, "{adapter}: every call answered");
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= CAP,
        "{adapter}: {most} ran at once, over the cap of {CAP}"
    );
}

#[derive(Clone, Default)]
struct SharedOutput(Arc<Mutex<Vec<u8>>>);

impl Write for SharedOutput {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How long one adapter may take to answer every call (a few hundred
/// milliseconds when it works): a server that stops waking its reader
/// fails the test instead of hanging it.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs `serve` on its own thread and returns what it returned, or fails
/// when it takes longer than [`DEADLINE`].
fn within_deadline<T: Send + 'static>(
    adapter: &str,
    serve: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(serve());
    });
    outcome.recv_timeout(DEADLINE).unwrap_or_else(|_| {
        panic!("{adapter}: not every call was answered within {DEADLINE:?}: the server hangs")
    })
}

#[test]
fn blocking_server_slows_a_pipelining_peer() {
    let (service, most) = service();
    let output = SharedOutput::default();
    let written = output.clone();
    within_deadline("blocking", move || {
        evidence_wire_blocking::serve(service, 4, std::io::Cursor::new(input()), written)
            .expect("served");
    });
    let bytes = output.0.lock().expect("lock").clone();
    assert_all_answered("blocking", &bytes, &most);
}

#[cfg(feature = "tokio-row")]
#[test]
fn tokio_server_slows_a_pipelining_peer() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (service, most) = service();
    let output = within_deadline("tokio", move || {
        let input = input();
        let mut output = Vec::new();
        runtime
            .block_on(evidence_wire_tokio::serve(
                service,
                input.as_slice(),
                &mut output,
            ))
            .expect("served");
        output
    });
    assert_all_answered("tokio", &output, &most);
}

#[test]
fn smol_server_slows_a_pipelining_peer() {
    for (executor, run) in [
        ("smol", run_on_smol as fn(Service, Vec<u8>) -> Vec<u8>),
        ("async-std", run_on_async_std),
    ] {
        let (service, most) = service();
        let output = within_deadline(executor, move || run(service, input()));
        assert_all_answered(executor, &output, &most);
    }
}

fn run_on_smol(service: Service, input: Vec<u8>) -> Vec<u8> {
    smol::block_on(async move {
        let mut output = Vec::new();
        evidence_wire_smol::serve(service, smol::io::Cursor::new(input), &mut output)
            .await
            .expect("served");
        output
    })
}

fn run_on_async_std(service: Service, input: Vec<u8>) -> Vec<u8> {
    async_std::task::block_on(async move {
        let mut output = Vec::new();
        evidence_wire_smol::serve(service, smol::io::Cursor::new(input), &mut output)
            .await
            .expect("served");
        output
    })
}
