//! The stdio provider server on blocking I/O.
//!
//! One thread reads input, `workers` threads run the handler, and the
//! calling thread owns the [`Server`] state machine and the output: it feeds
//! input, hands queries to the workers, writes every answer and flushes.
//! On end of input it stops reading, waits for the answers in flight,
//! flushes them, and returns. A handler that panics gets its query
//! answered with an error (the panic message goes to stderr through the
//! default hook). Input is read ahead by at most 16 chunks of 64 KiB.
//! [`serve_with_log`] also writes one validation log record per message
//! (`evidence_wire_log`); [`serve`] writes none.

use std::io::{self, Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;

use evidence_wire::evidence::{EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult};
use evidence_wire::server::{Server, ServerEvent, Ticket, ToolFailure};
use evidence_wire_log::ValidationLog;
use serde_json::Value;

/// Answers the queries of a provider. Called from worker threads.
pub trait Handler: Send + Sync + 'static {
    /// Answer one `evidence_query`. Expected failures (a missing file, bad
    /// params) are results carrying an error, not panics.
    fn evidence_query(&self, query: EvidenceQuery, context: EvidenceContext) -> EvidenceResult;

    /// Answer a call of a tool registered on the server with
    /// `Server::register_tool`. The default refuses every call.
    fn tool_call(&self, name: &str, arguments: Value) -> Result<Value, ToolFailure> {
        let _ = arguments;
        Err(ToolFailure::Failed(format!("tool {name:?} has no handler")))
    }

    /// Called for every event the server reports that is not a query
    /// (validation outcomes, framing errors, cancellations): the place for
    /// logs. The default ignores them.
    fn observe(&self, event: &ServerEvent) {
        let _ = event;
    }
}

/// Why [`serve`] stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Writing answers failed (the peer closed its input).
    #[error("cannot write to the peer: {0}")]
    Write(#[source] io::Error),
    /// Reading input failed.
    #[error("cannot read from the peer: {0}")]
    Read(#[source] io::Error),
    /// The input stream broke beyond repair (a fatal framing error).
    #[error("input stream broken: {0}")]
    Fatal(String),
}

enum Input {
    Bytes(Vec<u8>),
    End,
    Failed(io::Error),
    Evidence(Ticket, Box<EvidenceResult>),
    Tool(Ticket, Result<Value, ToolFailure>),
}

enum Job {
    Evidence(Ticket, EvidenceQuery, EvidenceContext),
    Tool(Ticket, String, Value),
}

/// Chunks read ahead of the state machine (64 KiB each at most).
const INPUT_QUEUE: usize = 16;

/// Run one job; a handler that panics gets its query answered with an
/// error instead of leaving it unanswered forever.
fn run_job<H: Handler>(handler: &H, job: Job) -> Input {
    match job {
        Job::Evidence(ticket, query, context) => {
            let result = panic::catch_unwind(AssertUnwindSafe(|| {
                handler.evidence_query(query, context)
            }))
            .unwrap_or_else(|_| {
                EvidenceResult::with_error(EvidenceError::new(
                    "internal_error",
                    "the provider's handler panicked while answering this query; see its log",
                ))
            });
            Input::Evidence(ticket, Box::new(result))
        }
        Job::Tool(ticket, name, arguments) => {
            let result =
                panic::catch_unwind(AssertUnwindSafe(|| handler.tool_call(&name, arguments)))
                    .unwrap_or_else(|_| {
                        Err(ToolFailure::Failed(format!(
                            "the handler of tool {name:?} panicked; see the provider's log"
                        )))
                    });
            Input::Tool(ticket, result)
        }
    }
}

/// Serve `handler` on stdin/stdout with `workers` worker threads (at least one).
pub fn serve_stdio<H: Handler>(
    server: Server,
    handler: H,
    workers: usize,
) -> Result<(), ServeError> {
    let stdin = io::stdin();
    let stdout = io::stdout();
    serve(server, handler, workers, stdin, stdout.lock())
}

/// Serve `handler` on `input`/`output` until end of input, then flush
/// every answer still in flight and return.
pub fn serve<H, R, W>(
    server: Server,
    handler: H,
    workers: usize,
    input: R,
    output: W,
) -> Result<(), ServeError>
where
    H: Handler,
    R: Read + Send + 'static,
    W: Write,
{
    serve_with_log(
        server,
        handler,
        workers,
        input,
        output,
        &ValidationLog::disabled(),
    )
}

/// [`serve_stdio`] writing one validation log record per message to `log`.
pub fn serve_stdio_with_log<H: Handler>(
    server: Server,
    handler: H,
    workers: usize,
    log: &ValidationLog,
) -> Result<(), ServeError> {
    let stdin = io::stdin();
    let stdout = io::stdout();
    serve_with_log(server, handler, workers, stdin, stdout.lock(), log)
}

/// [`serve`] writing one validation log record per message to `log`
/// (a failing log never stops the server; see `evidence_wire_log`).
pub fn serve_with_log<H, R, W>(
    mut server: Server,
    handler: H,
    workers: usize,
    mut input: R,
    mut output: W,
    log: &ValidationLog,
) -> Result<(), ServeError>
where
    H: Handler,
    R: Read + Send + 'static,
    W: Write,
{
    let mut log = log.stdio();
    let handler = Arc::new(handler);
    // Bounded: a peer that writes faster than answers are produced is
    // slowed down (the reader waits) instead of buffered without end.
    let (events_tx, events_rx) = mpsc::sync_channel::<Input>(INPUT_QUEUE);
    let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
    let jobs_rx = Arc::new(std::sync::Mutex::new(jobs_rx));

    let reader_tx = events_tx.clone();
    thread::Builder::new()
        .name("evidence-wire-reader".into())
        .spawn(move || {
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                match input.read(&mut buffer) {
                    Ok(0) => {
                        let _ = reader_tx.send(Input::End);
                        return;
                    }
                    Ok(read) => {
                        let bytes = buffer.get(..read).unwrap_or_default().to_vec();
                        if reader_tx.send(Input::Bytes(bytes)).is_err() {
                            return;
                        }
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => {
                        let _ = reader_tx.send(Input::Failed(error));
                        return;
                    }
                }
            }
        })
        .map_err(ServeError::Read)?;

    for index in 0..workers.max(1) {
        let jobs = Arc::clone(&jobs_rx);
        let answers = events_tx.clone();
        let handler = Arc::clone(&handler);
        thread::Builder::new()
            .name(format!("evidence-wire-worker-{index}"))
            .spawn(move || {
                loop {
                    let job = match jobs.lock() {
                        Ok(receiver) => receiver.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    let answer = run_job(&*handler, job);
                    if answers.send(answer).is_err() {
                        return;
                    }
                }
            })
            .map_err(ServeError::Read)?;
    }
    drop(events_tx);

    let mut failure = None;
    loop {
        while let Some(event) = server.poll_event() {
            match event {
                ServerEvent::EvidenceQuery {
                    ticket,
                    query,
                    context,
                } => {
                    let _ = jobs_tx.send(Job::Evidence(ticket, query, context));
                }
                ServerEvent::ToolCall {
                    ticket,
                    name,
                    arguments,
                } => {
                    let _ = jobs_tx.send(Job::Tool(ticket, name, arguments));
                }
                ServerEvent::Fatal(error) => {
                    handler.observe(&ServerEvent::Fatal(error.clone()));
                    failure.get_or_insert(ServeError::Fatal(error.to_string()));
                }
                other => {
                    log.observe(&other, server.framing());
                    handler.observe(&other);
                }
            }
        }
        let mut wrote = false;
        while let Some(bytes) = server.poll_transmit() {
            output.write_all(&bytes).map_err(ServeError::Write)?;
            wrote = true;
        }
        if wrote {
            output.flush().map_err(ServeError::Write)?;
        }
        if server.is_finished() {
            break;
        }
        match events_rx.recv() {
            Ok(Input::Bytes(bytes)) => {
                log.bytes_received();
                server.handle_input(&bytes);
            }
            Ok(Input::End) => {
                log.bytes_received();
                server.handle_end_of_input();
            }
            Ok(Input::Failed(error)) => {
                server.handle_end_of_input();
                failure.get_or_insert(ServeError::Read(error));
            }
            Ok(Input::Evidence(ticket, result)) => {
                // A cancelled or unknown ticket is dropped: nothing to send.
                let _ = server.respond(ticket, *result);
            }
            Ok(Input::Tool(ticket, result)) => {
                let _ = server.respond_tool(ticket, result);
            }
            Err(_) => break,
        }
    }
    drop(jobs_tx);
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
