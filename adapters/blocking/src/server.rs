//! The stdio provider server on blocking I/O.
//!
//! # Threads
//!
//! The [`Server`] state machine, the output and the validation log state
//! live together behind one mutex (the *shared state*). Three kinds of
//! thread touch it, each for as short a time as it can:
//!
//! - **The io thread** (spawned and detached; it owns the input) reads up
//!   to 64 KiB, then, holding the lock, feeds the bytes to the server,
//!   drains its events (observers and the validation log are called here,
//!   in order) and writes and flushes what the server has to send. It never
//!   holds the lock while blocked in `read`. Queries whose handler hint
//!   ([`Handler::answer_inline`], [`Handler::answer_tool_inline`]) says they
//!   are quick are answered right there, outside the lock, and their answers
//!   written by the io thread: one request at a time costs no thread
//!   hand-off at all. Every other query goes to the job queue.
//! - **`workers` worker threads** take jobs from the queue; a worker that
//!   finishes one locks the shared state, answers it and writes and flushes
//!   the output itself (one hand-off per query, none back).
//! - **The calling thread** only waits until the server is finished (end of
//!   input, every answer written) or a write fails, then returns. Because
//!   the io thread is detached, a write failure returns promptly even while
//!   the io thread is blocked reading an input that never ends; that thread
//!   and the workers stop on their own afterwards (the io thread when its
//!   `read` returns). This is why the input and output must be `'static`.
//!
//! On end of input the server stops reading, the answers in flight are
//! written as they come, and [`serve`] returns once the last one is
//! flushed. A handler that panics gets its query answered with an error
//! (the panic message goes to stderr through the default hook).
//!
//! # Limits
//!
//! Input is read in chunks of at most 64 KiB, each handled before the next
//! is read, so read-ahead is one chunk plus what the server buffers. A peer
//! that writes faster than answers are produced is slowed down: the io
//! thread stops reading while [`MAX_OUTSTANDING_JOBS`] or more queries sit
//! in the job queue or run on workers, and resumes when the count drops
//! below it (one chunk can add the queries it holds on top of that). Output
//! is buffered (64 KiB) and flushed once per batch of answers.
//!
//! [`serve_with_log`] also writes one validation log record per message
//! (`evidence_wire_log`); [`serve`] writes none.

use std::collections::VecDeque;
use std::io::{self, BufWriter, Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;

use evidence_wire::evidence::{EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult};
use evidence_wire::server::{Server, ServerEvent, Ticket, ToolFailure};
use evidence_wire_log::{StdioLog, ValidationLog};
use serde_json::Value;

/// Answers the queries of a provider.
///
/// Queries run on worker threads, or on the thread that reads the input
/// when the hints [`Handler::answer_inline`] / [`Handler::answer_tool_inline`]
/// say so.
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
    /// logs. Called with the server's lock held, in the order of events:
    /// keep it short. The default ignores them.
    fn observe(&self, event: &ServerEvent) {
        let _ = event;
    }

    /// Hint: true when answering `query` is quick and does no blocking I/O
    /// (no files, no network, no sleeping, no waiting on locks held long).
    ///
    /// Such queries are answered on the thread that reads the input, without
    /// a hand-off to a worker: the fastest path for one request at a time.
    /// A slow inline answer delays reading (and so every later request);
    /// when in doubt, return false. Called for every query before it is
    /// answered, so it must itself be cheap. The default is false: every
    /// query runs on a worker.
    fn answer_inline(&self, query: &EvidenceQuery) -> bool {
        let _ = query;
        false
    }

    /// Hint: true when a call of tool `name` is quick and does no blocking
    /// I/O; such calls are answered on the reading thread, without a
    /// hand-off (see [`Handler::answer_inline`] for the trade-off). The
    /// default is false.
    fn answer_tool_inline(&self, name: &str) -> bool {
        let _ = name;
        false
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
    /// A server thread could not be started (the system is out of threads
    /// or memory); nothing was served.
    #[error("cannot start a server thread: {0}")]
    Spawn(#[source] io::Error),
    /// A handler hook called with the server's lock held
    /// ([`Handler::observe`]) panicked; serving stopped because the
    /// server's state can no longer be trusted. Fix the hook.
    #[error("a handler hook panicked, serving stopped: {0}")]
    HookPanicked(String),
}

/// Queries waiting in the job queue or running on workers, at most, before
/// the io thread stops reading input (it resumes when the count drops
/// below). One chunk of input read before the limit was reached can add the
/// queries it holds on top.
pub const MAX_OUTSTANDING_JOBS: usize = 1024;

/// Bytes read from the input at once.
const READ_CHUNK: usize = 64 * 1024;

/// Capacity of the output buffer (flushed after every batch of answers).
const OUTPUT_BUFFER: usize = 64 * 1024;

/// A query to answer.
enum Job {
    Evidence(Ticket, EvidenceQuery, EvidenceContext),
    Tool(Ticket, String, Value),
}

/// The answer to a [`Job`]. Moved once, from the handler to the server:
/// boxing the evidence result would cost an allocation per query.
#[allow(clippy::large_enum_variant)]
enum Answer {
    Evidence(Ticket, EvidenceResult),
    Tool(Ticket, Result<Value, ToolFailure>),
}

/// Run one job; a handler that panics gets its query answered with an
/// error instead of leaving it unanswered forever.
fn run_job<H: Handler>(handler: &H, job: Job) -> Answer {
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
            Answer::Evidence(ticket, result)
        }
        Job::Tool(ticket, name, arguments) => {
            let result =
                panic::catch_unwind(AssertUnwindSafe(|| handler.tool_call(&name, arguments)))
                    .unwrap_or_else(|_| {
                        Err(ToolFailure::Failed(format!(
                            "the handler of tool {name:?} panicked; see the provider's log"
                        )))
                    });
            Answer::Tool(ticket, result)
        }
    }
}

/// What the io thread, the workers and the caller share behind one lock.
struct State<W: Write> {
    server: Server,
    output: BufWriter<W>,
    log: StdioLog,
    /// The first read, fatal-framing or hook failure (reported once the
    /// answers in flight are written).
    failure: Option<ServeError>,
    /// The first write failure: serving stops at once.
    write_error: Option<io::Error>,
    /// A server thread died of a panic outside a handler.
    broken: bool,
    /// The caller has returned: every other thread stops.
    stopped: bool,
}

impl<W: Write> State<W> {
    /// True when the caller may return.
    fn is_done(&self) -> bool {
        self.write_error.is_some() || self.broken || self.server.is_finished()
    }

    fn answer(&mut self, answer: Answer) {
        // A cancelled or unknown ticket is dropped: nothing to send.
        match answer {
            Answer::Evidence(ticket, result) => {
                let _ = self.server.respond(ticket, result);
            }
            Answer::Tool(ticket, result) => {
                let _ = self.server.respond_tool(ticket, result);
            }
        }
    }
}

/// The job queue and its counters.
#[derive(Default)]
struct Jobs {
    queue: VecDeque<Job>,
    /// Jobs queued or running on a worker.
    outstanding: usize,
    /// Workers waiting for a job.
    idle: usize,
    /// The io thread waits for `outstanding` to drop.
    reader_waiting: bool,
    /// The caller has returned: workers and the io thread stop.
    closed: bool,
}

struct Shared<H, W: Write> {
    handler: H,
    state: Mutex<State<W>>,
    /// The caller waits here for [`State::is_done`].
    done: Condvar,
    jobs: Mutex<Jobs>,
    /// Idle workers wait here for a job.
    work: Condvar,
    /// The io thread waits here for room under [`MAX_OUTSTANDING_JOBS`].
    room: Condvar,
}

impl<H: Handler, W: Write> Shared<H, W> {
    /// The shared state; a lock poisoned by a panicking hook is taken
    /// anyway (the panic is reported through [`State::broken`]).
    fn lock_state(&self) -> MutexGuard<'_, State<W>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_jobs(&self) -> MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drain the server's events (queries into `found`, the rest to the
    /// observers), then write and flush what it has to send. Wakes the
    /// caller when serving is over.
    fn pump(&self, state: &mut State<W>, found: &mut Vec<Job>) {
        while let Some(event) = state.server.poll_event() {
            match event {
                ServerEvent::EvidenceQuery {
                    ticket,
                    query,
                    context,
                } => found.push(Job::Evidence(ticket, query, context)),
                ServerEvent::ToolCall {
                    ticket,
                    name,
                    arguments,
                } => found.push(Job::Tool(ticket, name, arguments)),
                ServerEvent::Fatal(error) => {
                    self.handler.observe(&ServerEvent::Fatal(error.clone()));
                    state
                        .failure
                        .get_or_insert(ServeError::Fatal(error.to_string()));
                }
                other => {
                    state.log.observe(&other, state.server.framing());
                    self.handler.observe(&other);
                }
            }
        }
        if state.write_error.is_none() {
            let mut wrote = false;
            while let Some(bytes) = state.server.poll_transmit() {
                if let Err(error) = state.output.write_all(&bytes) {
                    state.write_error = Some(error);
                    break;
                }
                wrote = true;
            }
            if wrote && state.write_error.is_none() {
                if let Err(error) = state.output.flush() {
                    state.write_error = Some(error);
                }
            }
        }
        if state.is_done() {
            self.done.notify_all();
        }
    }

    /// True when the handler says `job` may run on the current thread; a
    /// panicking hint counts as false.
    fn is_inline(&self, job: &Job) -> bool {
        panic::catch_unwind(AssertUnwindSafe(|| match job {
            Job::Evidence(_, query, _) => self.handler.answer_inline(query),
            Job::Tool(_, name, _) => self.handler.answer_tool_inline(name),
        }))
        .unwrap_or(false)
    }

    /// Queue the jobs in `found` that must run on a worker and answer the
    /// inline ones here, until answering finds no new query.
    fn settle(&self, found: &mut Vec<Job>) {
        let mut inline = Vec::new();
        let mut queued = Vec::new();
        while !found.is_empty() {
            for job in found.drain(..) {
                if self.is_inline(&job) {
                    inline.push(job);
                } else {
                    queued.push(job);
                }
            }
            if !queued.is_empty() {
                let mut jobs = self.lock_jobs();
                jobs.outstanding = jobs.outstanding.saturating_add(queued.len());
                let wake = queued.len().min(jobs.idle);
                // The woken workers are no longer idle (a spurious wake-up
                // only makes this count too high: a spare notify, no loss).
                jobs.idle -= wake;
                jobs.queue.extend(queued.drain(..));
                drop(jobs);
                for _ in 0..wake {
                    self.work.notify_one();
                }
            }
            if inline.is_empty() {
                return;
            }
            let answers: Vec<Answer> = inline
                .drain(..)
                .map(|job| run_job(&self.handler, job))
                .collect();
            let mut state = self.lock_state();
            if state.stopped {
                return;
            }
            for answer in answers {
                state.answer(answer);
            }
            self.pump(&mut state, found);
        }
    }

    /// Record that a server thread died of a panic and wake the caller.
    fn mark_broken(&self, what: &str) {
        let mut state = self.lock_state();
        state.broken = true;
        state.failure = Some(ServeError::HookPanicked(format!(
            "the {what} panicked (in Handler::observe or the validation log)"
        )));
        self.done.notify_all();
    }

    /// The io thread: read, handle, answer inline queries, repeat until the
    /// server's input is closed or the caller has returned.
    fn read_loop<R: Read>(&self, mut input: R) {
        let mut buffer = vec![0u8; READ_CHUNK];
        let mut found = Vec::new();
        loop {
            {
                let mut jobs = self.lock_jobs();
                while jobs.outstanding >= MAX_OUTSTANDING_JOBS && !jobs.closed {
                    jobs.reader_waiting = true;
                    jobs = self.room.wait(jobs).unwrap_or_else(PoisonError::into_inner);
                }
                jobs.reader_waiting = false;
                if jobs.closed {
                    return;
                }
            }
            let read = input.read(&mut buffer);
            let mut state = self.lock_state();
            if state.stopped {
                return;
            }
            match read {
                Ok(0) => {
                    state.log.bytes_received();
                    state.server.handle_end_of_input();
                }
                Ok(count) => {
                    state.log.bytes_received();
                    state
                        .server
                        .handle_input(buffer.get(..count).unwrap_or_default());
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    state.server.handle_end_of_input();
                    state.failure.get_or_insert(ServeError::Read(error));
                }
            }
            self.pump(&mut state, &mut found);
            let closed = state.server.is_input_closed() || state.is_done();
            drop(state);
            self.settle(&mut found);
            if closed {
                return;
            }
        }
    }

    /// A worker: take a job, answer it, write the answer, repeat until the
    /// caller has returned.
    fn work_loop(&self) {
        let mut finished_one = false;
        let mut found = Vec::new();
        loop {
            let job = {
                let mut jobs = self.lock_jobs();
                if finished_one {
                    jobs.outstanding = jobs.outstanding.saturating_sub(1);
                    if jobs.reader_waiting && jobs.outstanding < MAX_OUTSTANDING_JOBS {
                        jobs.reader_waiting = false;
                        self.room.notify_one();
                    }
                }
                loop {
                    if jobs.closed {
                        return;
                    }
                    if let Some(job) = jobs.queue.pop_front() {
                        break job;
                    }
                    // Whoever wakes this worker takes it off `idle`.
                    jobs.idle += 1;
                    jobs = self.work.wait(jobs).unwrap_or_else(PoisonError::into_inner);
                }
            };
            let answer = run_job(&self.handler, job);
            let mut state = self.lock_state();
            if state.stopped {
                return;
            }
            state.answer(answer);
            self.pump(&mut state, &mut found);
            drop(state);
            self.settle(&mut found);
            finished_one = true;
        }
    }

    /// Stop every thread: the caller is returning.
    fn close(&self) {
        self.lock_state().stopped = true;
        self.lock_jobs().closed = true;
        self.work.notify_all();
        self.room.notify_all();
    }
}

/// Serve `handler` on stdin/stdout with `workers` worker threads (at least one).
pub fn serve_stdio<H: Handler>(
    server: Server,
    handler: H,
    workers: usize,
) -> Result<(), ServeError> {
    serve(server, handler, workers, io::stdin(), io::stdout())
}

/// Serve `handler` on `input`/`output` until end of input, then flush
/// every answer still in flight and return. See the module docs for the
/// threads and limits.
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
    W: Write + Send + 'static,
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
    serve_with_log(server, handler, workers, io::stdin(), io::stdout(), log)
}

/// [`serve`] writing one validation log record per message to `log`
/// (a failing log never stops the server; see `evidence_wire_log`).
pub fn serve_with_log<H, R, W>(
    server: Server,
    handler: H,
    workers: usize,
    input: R,
    output: W,
    log: &ValidationLog,
) -> Result<(), ServeError>
where
    H: Handler,
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let shared = Arc::new(Shared {
        handler,
        state: Mutex::new(State {
            server,
            output: BufWriter::with_capacity(OUTPUT_BUFFER, output),
            log: log.stdio(),
            failure: None,
            write_error: None,
            broken: false,
            stopped: false,
        }),
        done: Condvar::new(),
        jobs: Mutex::new(Jobs::default()),
        work: Condvar::new(),
        room: Condvar::new(),
    });

    for index in 0..workers.max(1) {
        let worker = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("evidence-wire-worker-{index}"))
            .spawn(move || {
                if panic::catch_unwind(AssertUnwindSafe(|| worker.work_loop())).is_err() {
                    worker.mark_broken("worker thread");
                }
            });
        if let Err(error) = spawned {
            shared.close();
            return Err(ServeError::Spawn(error));
        }
    }
    let reader = Arc::clone(&shared);
    let spawned = thread::Builder::new()
        .name("evidence-wire-io".into())
        .spawn(move || {
            if panic::catch_unwind(AssertUnwindSafe(|| reader.read_loop(input))).is_err() {
                reader.mark_broken("io thread");
            }
        });
    if let Err(error) = spawned {
        shared.close();
        return Err(ServeError::Spawn(error));
    }

    let outcome = {
        let mut state = shared.lock_state();
        while !state.is_done() {
            state = shared
                .done
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        match (state.write_error.take(), state.failure.take()) {
            (Some(error), _) => Err(ServeError::Write(error)),
            (None, Some(failure)) => Err(failure),
            (None, None) => Ok(()),
        }
    };
    shared.close();
    outcome
}
