//! The blocking server's threading: queries the handler marks inline are
//! answered on the reading thread and others on workers; a slow worker
//! query does not hold back a later quick one; end of input flushes every
//! answer in flight; a failed write returns promptly although the input
//! never ends; reading stops while `MAX_OUTSTANDING_JOBS` queries wait.
//!
//! Every `serve` runs on its own thread and is awaited with a timeout, so a
//! hang fails the test instead of stalling the run.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::{self, Cursor, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use evidence_wire::evidence::{
    EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::{self, Decoder, Framing, Limits};
use evidence_wire::server::ServerConfig;
use evidence_wire_blocking::{Answer, Handler, MAX_OUTSTANDING_JOBS, ServeError, Service, serve};
use serde_json::{Value, json};

/// Longest a `serve` call may take in these tests.
const SERVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Shared between the test and its handler.
#[derive(Default)]
struct Probe {
    /// (request id, check id, thread that answered).
    answered_on: Mutex<Vec<(u64, String, ThreadId)>>,
    /// Closed until the test opens it (`gated` queries wait on it).
    gate: Mutex<bool>,
    gate_opened: Condvar,
    /// `gated` queries that have started.
    gated_started: AtomicUsize,
}

impl Probe {
    fn open_gate(&self) {
        *self.gate.lock().unwrap() = true;
        self.gate_opened.notify_all();
    }

    /// Waits for the gate, at most 30 s (a broken test must not hang).
    fn wait_gate(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut open = self.gate.lock().unwrap();
        while !*open {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            open = self.gate_opened.wait_timeout(open, left).unwrap().0;
        }
        true
    }
}

/// Checks: `quick` (inline), `slow` (worker, sleeps `params.ms`), `gated`
/// (worker, waits for the probe's gate). Answers `{"id": params.id}`.
struct ProbeHandler(Arc<Probe>);

impl Handler for ProbeHandler {
    /// `quick` is answered where it is read (ready), the rest on a worker.
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        _context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        if query.check_id == "quick" {
            return Answer::ready(probe_answer(&self.0, &query));
        }
        let probe = Arc::clone(&self.0);
        Answer::blocking(move || probe_answer(&probe, &query))
    }
}

fn probe_answer(probe: &Probe, query: &EvidenceQuery) -> EvidenceResult {
    let params = query.params.clone().unwrap_or(Value::Null);
    let id = params["id"].as_u64().unwrap_or(0);
    match query.check_id.as_str() {
        "slow" => thread::sleep(Duration::from_millis(params["ms"].as_u64().unwrap_or(0))),
        "gated" => {
            probe.gated_started.fetch_add(1, Ordering::SeqCst);
            if !probe.wait_gate() {
                return EvidenceResult::with_error(EvidenceError::new(
                    "gate_timeout",
                    "the test never opened the gate",
                ));
            }
        }
        _ => {}
    }
    probe
        .answered_on
        .lock()
        .unwrap()
        .push((id, query.check_id.clone(), thread::current().id()));
    EvidenceResult::with_value(EvidenceValue::json(&json!({"id": id})).unwrap())
}

/// One newline-delimited `evidence_query` call with JSON-RPC id `id`.
fn request(id: u64, check: &str, ms: u64) -> Vec<u8> {
    let context = EvidenceContext::adhoc(TriggerTime::Logical(1));
    let query =
        EvidenceQuery::new("threading-test", check).with_params(json!({"id": id, "ms": ms}));
    let body = serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {"query": query, "context": context}},
    }))
    .unwrap();
    let mut out = Vec::new();
    frame::encode(Framing::NewlineDelimited, &body, &mut out).unwrap();
    out
}

/// (JSON-RPC id, `params.id` echoed or the error code) per answer, in
/// output order.
fn answers(output: &[u8]) -> Vec<(u64, Value)> {
    let mut decoder = Decoder::new(Limits::default());
    decoder.push(output);
    decoder.finish().unwrap();
    let mut answers = Vec::new();
    while let Some(frame) = decoder.poll_frame() {
        let message: Value = serde_json::from_slice(&frame.unwrap().body).unwrap();
        let id = message["id"].as_u64().unwrap_or(u64::MAX);
        let result = &message["result"]["content"][0]["json"];
        let answer = if result["value"].is_object() {
            result["value"]["value"]["id"].clone()
        } else if result["error"].is_object() {
            result["error"]["code"].clone()
        } else {
            message["error"].clone()
        };
        answers.push((id, answer));
    }
    answers
}

/// An output the test reads while and after `serve` runs.
#[derive(Clone, Default)]
struct SharedOutput(Arc<Mutex<Vec<u8>>>);

impl SharedOutput {
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

impl Write for SharedOutput {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A reader that records the thread reading it.
struct RecordingReader {
    inner: Cursor<Vec<u8>>,
    thread: Arc<Mutex<Option<ThreadId>>>,
}

impl Read for RecordingReader {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        *self.thread.lock().unwrap() = Some(thread::current().id());
        self.inner.read(buffer)
    }
}

/// Runs `serve` on its own thread; the receiver gets its outcome.
fn spawn_serve<R, W>(
    config: ServerConfig,
    probe: &Arc<Probe>,
    workers: usize,
    input: R,
    output: W,
) -> mpsc::Receiver<Result<(), ServeError>>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let (done_tx, done_rx) = mpsc::channel();
    let handler = ProbeHandler(Arc::clone(probe));
    thread::spawn(move || {
        let outcome = serve(Service::new(config, handler), workers, input, output);
        let _ = done_tx.send(outcome);
    });
    done_rx
}

/// Serves `input` to the end; returns the output and the serving thread.
fn serve_all(probe: &Arc<Probe>, workers: usize, input: Vec<u8>) -> (Vec<u8>, ThreadId) {
    let output = SharedOutput::default();
    let reader_thread = Arc::new(Mutex::new(None));
    let reader = RecordingReader {
        inner: Cursor::new(input),
        thread: Arc::clone(&reader_thread),
    };
    let done = spawn_serve(
        ServerConfig::default(),
        probe,
        workers,
        reader,
        output.clone(),
    );
    done.recv_timeout(SERVE_TIMEOUT)
        .expect("serve returns")
        .expect("serve succeeds");
    let reader_thread = reader_thread.lock().unwrap().expect("the input was read");
    (output.bytes(), reader_thread)
}

#[test]
fn inline_queries_run_on_the_reading_thread_others_on_workers() {
    let probe = Arc::new(Probe::default());
    let mut input = request(1, "quick", 0);
    input.extend(request(2, "slow", 0));
    input.extend(request(3, "quick", 0));
    let (output, reader_thread) = serve_all(&probe, 2, input);

    let mut got = answers(&output);
    got.sort_by_key(|(id, _)| *id);
    assert_eq!(got, vec![(1, json!(1)), (2, json!(2)), (3, json!(3))]);

    let answered_on: HashMap<u64, ThreadId> = probe
        .answered_on
        .lock()
        .unwrap()
        .iter()
        .map(|(id, _, thread)| (*id, *thread))
        .collect();
    assert_eq!(answered_on.get(&1), Some(&reader_thread), "quick query 1");
    assert_eq!(answered_on.get(&3), Some(&reader_thread), "quick query 3");
    let worker = answered_on.get(&2).expect("slow query answered");
    assert_ne!(
        *worker, reader_thread,
        "the slow query ran on the io thread"
    );
    assert_ne!(*worker, thread::current().id(), "ran on the test thread");
}

#[test]
fn a_slow_query_does_not_hold_back_a_later_quick_one() {
    // Quick inline query after a slow one.
    let probe = Arc::new(Probe::default());
    let mut input = request(1, "slow", 400);
    input.extend(request(2, "quick", 0));
    let (output, _) = serve_all(&probe, 1, input);
    assert_eq!(answers(&output), vec![(2, json!(2)), (1, json!(1))]);

    // Quick query on a second worker after a slow one.
    let probe = Arc::new(Probe::default());
    let mut input = request(1, "slow", 400);
    input.extend(request(2, "slow", 0));
    let (output, _) = serve_all(&probe, 2, input);
    assert_eq!(answers(&output), vec![(2, json!(2)), (1, json!(1))]);
}

#[test]
fn end_of_input_flushes_every_answer_in_flight() {
    let probe = Arc::new(Probe::default());
    let mut input = Vec::new();
    for id in 1..=16 {
        let check = if id % 4 == 0 { "quick" } else { "slow" };
        input.extend(request(id, check, 30));
    }
    // Input ends at once; 12 slow queries of 30 ms on 2 workers are still
    // running when the end is read.
    let (output, _) = serve_all(&probe, 2, input);
    let mut got = answers(&output);
    got.sort_by_key(|(id, _)| *id);
    let expected: Vec<(u64, Value)> = (1..=16).map(|id| (id, json!(id))).collect();
    assert_eq!(got, expected);
}

/// A writer whose every write fails, as a pipe whose reader has gone.
struct BrokenPipe;

impl Write for BrokenPipe {
    fn write(&mut self, _bytes: &[u8]) -> io::Result<usize> {
        Err(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the peer is gone",
        ))
    }

    fn flush(&mut self) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the peer is gone",
        ))
    }
}

/// Input fed through a channel: `read` blocks until the sender sends or
/// is dropped (then end of input).
struct ChannelReader {
    chunks: mpsc::Receiver<Vec<u8>>,
    pending: Cursor<Vec<u8>>,
}

impl Read for ChannelReader {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        loop {
            let read = self.pending.read(buffer)?;
            if read > 0 {
                return Ok(read);
            }
            match self.chunks.recv() {
                Ok(chunk) => self.pending = Cursor::new(chunk),
                Err(_) => return Ok(0),
            }
        }
    }
}

fn write_failure_returns_promptly(check: &str) {
    let probe = Arc::new(Probe::default());
    let (chunks_tx, chunks_rx) = mpsc::channel();
    let reader = ChannelReader {
        chunks: chunks_rx,
        pending: Cursor::new(Vec::new()),
    };
    chunks_tx.send(request(1, check, 0)).unwrap();
    let started = Instant::now();
    let done = spawn_serve(ServerConfig::default(), &probe, 2, reader, BrokenPipe);
    // The sender stays alive: the input never ends, the io thread blocks
    // in `read` after the first chunk.
    let outcome = done.recv_timeout(Duration::from_secs(10));
    let elapsed = started.elapsed();
    match outcome {
        Ok(Err(ServeError::Write(error))) => {
            assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
        }
        other => panic!("expected Err(ServeError::Write) for {check:?}, got {other:?}"),
    }
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    // Ends the detached io thread.
    drop(chunks_tx);
}

#[test]
fn a_write_failure_on_a_worker_returns_while_input_never_ends() {
    write_failure_returns_promptly("slow");
}

#[test]
fn a_write_failure_on_the_io_thread_returns_while_input_never_ends() {
    write_failure_returns_promptly("quick");
}

/// Hands out one request per `read` (then end of input) and counts them.
struct OneAtATime {
    next: u64,
    total: u64,
    reads: Arc<AtomicUsize>,
}

impl Read for OneAtATime {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if self.next > self.total {
            return Ok(0);
        }
        let bytes = request(self.next, "gated", 0);
        let target = buffer
            .get_mut(..bytes.len())
            .ok_or_else(|| io::Error::other("read buffer smaller than one request"))?;
        target.copy_from_slice(&bytes);
        self.next += 1;
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(bytes.len())
    }
}

#[test]
fn reading_stops_while_too_many_queries_wait() {
    let probe = Arc::new(Probe::default());
    let total = MAX_OUTSTANDING_JOBS as u64 + 200;
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = OneAtATime {
        next: 1,
        total,
        reads: Arc::clone(&reads),
    };
    // The server's own in-flight limit must not be what stops the reader.
    let mut config = ServerConfig::default();
    config.max_in_flight = MAX_OUTSTANDING_JOBS * 4;
    let output = SharedOutput::default();
    let done = spawn_serve(config, &probe, 4, reader, output.clone());

    let deadline = Instant::now() + Duration::from_secs(30);
    while reads.load(Ordering::SeqCst) < MAX_OUTSTANDING_JOBS && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    // Give a reader that ignores the limit time to run past it.
    thread::sleep(Duration::from_millis(300));
    let read_while_closed = reads.load(Ordering::SeqCst);
    let started_while_closed = probe.gated_started.load(Ordering::SeqCst);
    probe.open_gate();
    let outcome = done.recv_timeout(SERVE_TIMEOUT).expect("serve returns");

    assert_eq!(
        read_while_closed, MAX_OUTSTANDING_JOBS,
        "requests read while every query was blocked"
    );
    assert_eq!(started_while_closed, 4, "one blocked query per worker");
    outcome.expect("serve succeeds");
    let mut got = answers(&output.bytes());
    got.sort_by_key(|(id, _)| *id);
    let expected: Vec<(u64, Value)> = (1..=total).map(|id| (id, json!(id))).collect();
    assert_eq!(got, expected);
}
