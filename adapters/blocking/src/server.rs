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
//!   holds the lock while blocked in `read`. Calls are handed to the
//!   handler ([`dispatch_from`](evidence_wire_provider::dispatch_from)) outside the lock: an [`Answer::Ready`] answer
//!   (an inline check) is given right there and written by the io thread,
//!   so one request at a time costs no thread hand-off at all. Every other
//!   call goes to the job queue.
//! - **`workers` worker threads** (the blocking pool) take jobs from the
//!   queue and run them to the end ([`Job::run_blocking`]: blocking work is
//!   called, async work driven to completion on the worker); a worker that
//!   finishes one locks the shared state, answers it and writes and flushes
//!   the output itself (one hand-off per query, none back). A thread cannot
//!   be aborted: a call the peer cancels is cancelled
//!   ([`evidence_wire_provider::cancel`]): still queued, it never starts;
//!   running, its check sees it and may stop early; either way the server
//!   drops its answer. So the workers never spend time on calls nobody
//!   waits for, beyond what a running check does before it looks.
//! - **The calling thread** only waits until the server is finished (end of
//!   input, every answer written) or a write fails, then returns. Because
//!   the io thread is detached, a write failure returns promptly even while
//!   the io thread is blocked reading an input that never ends; that thread
//!   and the workers stop on their own afterwards (the io thread when its
//!   `read` returns). This is why the input and output must be `'static`.
//!
//! On end of input the server stops reading, the answers in flight are
//! written as they come, and [`serve`] returns once the last one is
//! flushed. [`serve_until`] also drains on request (a [`Shutdown`], e.g.
//! from a SIGTERM handler): it stops reading, answers every message already
//! read (new calls with the retryable `OVERLOADED` error), lets the queries
//! in flight finish within a drain timeout, answers those still running at
//! the deadline with the same retryable error (and cancels them), and
//! returns. The deadline bounds the whole shutdown, writes included: a peer
//! that stopped reading leaves a thread blocked in a write, and
//! [`serve_until`] then returns [`ServeError::Write`] (timed out)
//! [`WRITE_GRACE`] after the drain deadline instead of waiting for it.
//!
//! A handler that panics gets its query answered with an
//! `internal_error` result (the panic message goes to stderr through the
//! default hook).
//!
//! # Limits
//!
//! Input is read in chunks of at most 64 KiB, each handled before the next
//! is read, so read-ahead is one chunk plus what the server buffers. A peer
//! that writes faster than answers are produced is slowed down, not
//! refused: at the core's in-flight cap (`ServerConfig::max_in_flight`)
//! the server holds the next message and the io thread reads nothing
//! until an answer frees a slot ([`Server::wants_input`]); independently,
//! it stops reading while [`MAX_OUTSTANDING_JOBS`] or more queries sit in
//! the job queue or run on workers, and resumes when the count drops below
//! it. Output is buffered: a batch's answers are framed into one 64 KiB
//! buffer (written whenever it fills; one answer larger than that grows it
//! for that write only) and written and flushed once per batch.
//!
//! [`serve_with_log`] also makes one validation log record per message
//! (`evidence_wire_log`; the log's writer thread writes them, within its
//! flush interval, and they are all written before `serve_with_log`
//! returns); [`serve`] makes none.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use evidence_wire::server::{Server, ServerEvent, Ticket};
use evidence_wire_log::{StdioLog, ValidationLog};
use evidence_wire_provider::stdout::unbuffered_stdout;
use evidence_wire_provider::{
    CallSource, CancelReason, Cancellation, Completion, Handler, IntoService, Job, ServeError,
    Transport, Work, complete, dispatch_from,
};
use std::collections::HashMap;

#[cfg(doc)]
use evidence_wire_provider::Answer;

/// Queries waiting in the job queue or running on workers, at most, before
/// the io thread stops reading input (it resumes when the count drops
/// below). One chunk of input read before the limit was reached can add the
/// queries it holds on top.
pub const MAX_OUTSTANDING_JOBS: usize = 1024;

/// Bytes read from the input at once.
const READ_CHUNK: usize = 64 * 1024;

/// Capacity of the output buffer (written and flushed after every batch
/// of answers; a larger batch grows it, and it shrinks back after).
const OUTPUT_BUFFER: usize = 64 * 1024;

/// What the io thread, the workers and the caller share behind one lock.
struct State<W: Write> {
    server: Server,
    output: W,
    /// The framed answers of one batch, written at once.
    outgoing: Vec<u8>,
    log: StdioLog,
    /// The first read, fatal-framing or hook failure (reported once the
    /// answers in flight are written).
    failure: Option<ServeError>,
    /// The first write failure: serving stops at once.
    write_error: Option<io::Error>,
    /// A server thread died of a panic outside a handler.
    broken: bool,
    /// The io thread waits on `input_wanted` (held at the in-flight cap).
    /// Only then is it notified: `Condvar::notify_one` is a `futex` system
    /// call even with no waiter, and a pump without one per answer saves
    /// two system calls per request at one in flight.
    input_waiting: bool,
}

impl<W: Write> State<W> {
    /// True when the caller may return.
    fn is_done(&self) -> bool {
        self.write_error.is_some() || self.broken || self.server.is_finished()
    }

    fn answer(&mut self, ticket: Ticket, completion: Completion) {
        // A cancelled or unknown ticket is dropped: nothing to send.
        let _ = complete(&mut self.server, ticket, completion);
    }
}

/// The job queue and its counters.
#[derive(Default)]
struct Jobs {
    queue: VecDeque<(Ticket, Job)>,
    /// The cancellation of every job queued or running, by ticket.
    calls: HashMap<Ticket, Cancellation>,
    /// Jobs queued or running on a worker.
    outstanding: usize,
    /// Workers waiting for a job.
    idle: usize,
    /// The io thread waits for `outstanding` to drop.
    reader_waiting: bool,
    /// The caller has returned: workers and the io thread stop.
    closed: bool,
}

struct Shared<W: Write> {
    handler: Arc<dyn Handler>,
    /// What every call's context says of its caller (stdio, the timeout).
    source: CallSource,
    state: Mutex<State<W>>,
    /// Set (under its own lock, never the state's) once [`State::is_done`]:
    /// the caller waits for it without the state lock, which a thread
    /// blocked in a write to a peer that stopped reading may hold forever.
    finished: Mutex<bool>,
    /// The caller waits here for `finished`.
    done: Condvar,
    /// The caller has returned: every other thread stops (an atomic, so
    /// the caller sets it without the state lock).
    stopped: AtomicBool,
    /// The io thread waits here while the server wants no input (held at
    /// its in-flight cap).
    input_wanted: Condvar,
    jobs: Mutex<Jobs>,
    /// Idle workers wait here for a job.
    work: Condvar,
    /// The io thread waits here for room under [`MAX_OUTSTANDING_JOBS`].
    room: Condvar,
}

impl<W: Write> Shared<W> {
    /// The shared state; a lock poisoned by a panicking hook is taken
    /// anyway (the panic is reported through [`State::broken`]).
    fn lock_state(&self) -> MutexGuard<'_, State<W>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_jobs(&self) -> MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tell the caller that serving is over.
    fn finish(&self) {
        *self.finished.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.done.notify_all();
    }

    /// Cancels the job of `ticket`, queued or running.
    fn cancel(&self, ticket: Ticket, reason: CancelReason) {
        let cancellation = self.lock_jobs().calls.remove(&ticket);
        if let Some(cancellation) = cancellation {
            cancellation.cancel(reason);
        }
    }

    /// Cancels every job queued or running.
    fn cancel_all(&self, reason: CancelReason) {
        let calls = std::mem::take(&mut self.lock_jobs().calls);
        for cancellation in calls.values() {
            cancellation.cancel(reason);
        }
    }

    /// Drain the server's events (calls into `found`, the rest to the
    /// validation log and the handler's observer), then write and flush
    /// what it has to send. Wakes the caller when serving is over.
    fn pump(&self, state: &mut State<W>, found: &mut Vec<ServerEvent>) {
        while let Some(event) = state.server.poll_event() {
            state.log.observe(&event, state.server.framing());
            match event {
                ServerEvent::EvidenceQuery { .. } | ServerEvent::ToolCall { .. } => {
                    found.push(event);
                }
                other => {
                    // Observed here, under the lock, in the order of events.
                    // A thread cannot be aborted: a cancelled job is told
                    // (queued, it never starts).
                    match dispatch_from(self.handler.as_ref(), other, &self.source) {
                        Work::Fatal(error) => {
                            state
                                .failure
                                .get_or_insert(ServeError::Fatal(error.to_string()));
                        }
                        Work::Cancel { ticket } => self.cancel(ticket, CancelReason::Peer),
                        _ => {}
                    }
                }
            }
        }
        // The batch's records are left to the log's writer thread.
        state.log.end_batch();
        if state.write_error.is_none() {
            // The batch's answers framed into one buffer, then one write.
            let State {
                server,
                output,
                outgoing,
                ..
            } = &mut *state;
            let mut wrote = false;
            let mut written = Ok(());
            while written.is_ok() && server.poll_transmit_into(outgoing) {
                wrote = true;
                // Like a buffered writer: written whenever it is full.
                if outgoing.len() >= OUTPUT_BUFFER {
                    written = output.write_all(outgoing);
                    outgoing.clear();
                }
            }
            if wrote && written.is_ok() {
                written = output.write_all(outgoing).and_then(|()| output.flush());
            }
            outgoing.clear();
            if outgoing.capacity() > OUTPUT_BUFFER.saturating_mul(2) {
                outgoing.shrink_to(OUTPUT_BUFFER);
            }
            if let Err(error) = written {
                state.write_error = Some(error);
            }
        }
        if state.is_done() {
            self.finish();
        }
        if state.input_waiting && (state.server.wants_input() || state.is_done()) {
            self.input_wanted.notify_one();
        }
    }

    /// Hand the calls in `found` to the handler (outside the lock), queue
    /// the jobs that must run on a worker and answer the ready ones here,
    /// until answering finds no new call.
    fn settle(&self, found: &mut Vec<ServerEvent>) {
        // The usual round answers one query at once: it is kept in `first`,
        // so that no vector is allocated for it.
        let mut first = None;
        let mut ready = Vec::new();
        let mut queued = Vec::new();
        while !found.is_empty() {
            for event in found.drain(..) {
                if let Work::Run { ticket, job } =
                    dispatch_from(self.handler.as_ref(), event, &self.source)
                {
                    match job.into_ready() {
                        Ok(completion) if first.is_none() && ready.is_empty() => {
                            first = Some((ticket, completion));
                        }
                        Ok(completion) => ready.push((ticket, completion)),
                        Err(job) => queued.push((ticket, job)),
                    }
                }
            }
            if !queued.is_empty() {
                let mut jobs = self.lock_jobs();
                jobs.outstanding = jobs.outstanding.saturating_add(queued.len());
                for (ticket, job) in &queued {
                    jobs.calls.insert(*ticket, job.cancellation().clone());
                }
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
            if first.is_none() && ready.is_empty() {
                return;
            }
            let mut state = self.lock_state();
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            // In the order they were made: `first` before the others.
            for (ticket, completion) in first.take().into_iter().chain(ready.drain(..)) {
                state.answer(ticket, completion);
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
        drop(state);
        self.finish();
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
            {
                // Held at the in-flight cap: read nothing until an answer
                // frees a slot (a worker's pump wakes this thread).
                let mut state = self.lock_state();
                while !state.server.wants_input()
                    && !self.stopped.load(Ordering::Acquire)
                    && !state.is_done()
                {
                    if state.server.is_input_closed() {
                        return;
                    }
                    state.input_waiting = true;
                    state = self
                        .input_wanted
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                    state.input_waiting = false;
                }
                if self.stopped.load(Ordering::Acquire) || state.is_done() {
                    return;
                }
            }
            let read = input.read(&mut buffer);
            let mut state = self.lock_state();
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            let mut ended = false;
            match read {
                Ok(0) => {
                    state.log.bytes_received();
                    state.server.handle_end_of_input();
                    ended = true;
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
                    ended = true;
                }
            }
            self.pump(&mut state, &mut found);
            let closed = ended || state.server.is_input_closed() || state.is_done();
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
            let (ticket, job) = job;
            // Cancelled while queued: returns at once, the work not started.
            let completion = job.run_blocking();
            self.lock_jobs().calls.remove(&ticket);
            let mut state = self.lock_state();
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            state.answer(ticket, completion);
            self.pump(&mut state, &mut found);
            drop(state);
            self.settle(&mut found);
            finished_one = true;
        }
    }

    /// Stop every thread: the caller is returning.
    fn close(&self) {
        self.stopped.store(true, Ordering::Release);
        // The io thread checks `stopped` and waits on `input_wanted` under
        // the state lock: taking it once (when it is free; a thread blocked
        // in a write may hold it) orders this store before such a check or
        // after its wait began, so the notification below is not lost.
        drop(self.state.try_lock());
        self.lock_jobs().closed = true;
        self.work.notify_all();
        self.room.notify_all();
        self.input_wanted.notify_all();
    }
}

/// Asks a server started with [`serve_until`] to drain and return. Cheap
/// to clone; [`Shutdown::request`] may be called from any thread (a
/// signal handler's thread, say).
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    requested: Arc<AtomicBool>,
}

impl Shutdown {
    /// A handle nobody has triggered yet.
    pub fn new() -> Self {
        Shutdown::default()
    }

    /// Drain and return (see [`serve_until`]). Idempotent.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
    }

    /// True once [`Shutdown::request`] was called.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

/// How often the waiting caller looks at its [`Shutdown`] and deadline.
const SHUTDOWN_POLL: Duration = Duration::from_millis(50);

/// How long [`serve_until`] waits past its drain deadline for the last
/// answers to be written (a peer that stopped reading never takes them)
/// before it returns [`ServeError::Write`] anyway.
pub const WRITE_GRACE: Duration = Duration::from_secs(5);

/// Default drain timeout of [`serve_until`]'s callers (the CLI's
/// `[server] drain_timeout_ms`): 25 s, under the usual 30 s grace period.
pub const DEFAULT_DRAIN_TIMEOUT: Duration =
    Duration::from_millis(evidence_wire::server::DEFAULT_DRAIN_TIMEOUT_MS);

/// Serve `service` (a [`evidence_wire_provider::Provider`] or a
/// [`evidence_wire_provider::Service`]) on stdin/stdout with `workers`
/// worker threads (at least one).
pub fn serve_stdio(service: impl IntoService, workers: usize) -> Result<(), ServeError> {
    serve(service, workers, io::stdin(), unbuffered_stdout())
}

/// Serve `service` on `input`/`output` until end of input, then flush
/// every answer still in flight and return. See the module docs for the
/// threads and limits.
pub fn serve<R, W>(
    service: impl IntoService,
    workers: usize,
    input: R,
    output: W,
) -> Result<(), ServeError>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    serve_with_log(service, workers, input, output, &ValidationLog::disabled())
}

/// [`serve_stdio`] writing one validation log record per message to `log`.
pub fn serve_stdio_with_log(
    service: impl IntoService,
    workers: usize,
    log: &ValidationLog,
) -> Result<(), ServeError> {
    serve_with_log(service, workers, io::stdin(), unbuffered_stdout(), log)
}

/// [`serve`] writing one validation log record per message to `log`
/// (a failing log never stops the server; see `evidence_wire_log`).
pub fn serve_with_log<R, W>(
    service: impl IntoService,
    workers: usize,
    input: R,
    output: W,
    log: &ValidationLog,
) -> Result<(), ServeError>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    serve_until(
        service,
        workers,
        input,
        output,
        log,
        &Shutdown::new(),
        DEFAULT_DRAIN_TIMEOUT,
    )
}

/// [`serve_with_log`] that also drains when `shutdown` is requested: it
/// stops reading, answers every message already read (a new call with the
/// retryable `OVERLOADED` error, saying that the server is shutting
/// down), lets the queries in flight finish, and returns once every answer
/// is written, or at `drain_timeout`, when the queries still running are
/// answered with the same retryable error first. The validation log is
/// flushed before it returns.
pub fn serve_until<R, W>(
    service: impl IntoService,
    workers: usize,
    input: R,
    output: W,
    log: &ValidationLog,
    shutdown: &Shutdown,
    drain_timeout: Duration,
) -> Result<(), ServeError>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let service = service.into_service()?;
    let server = service.connection();
    let handler = Arc::clone(service.handler());
    let shared = Arc::new(Shared {
        handler,
        source: service.call_source(Transport::Stdio),
        finished: Mutex::new(false),
        stopped: AtomicBool::new(false),
        state: Mutex::new(State {
            server,
            output,
            outgoing: Vec::with_capacity(OUTPUT_BUFFER),
            log: log.stdio_batched(),
            failure: None,
            write_error: None,
            broken: false,
            input_waiting: false,
        }),
        done: Condvar::new(),
        input_wanted: Condvar::new(),
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

    let outcome = wait_until_done(&shared, shutdown, drain_timeout);
    shared.close();
    log.flush();
    outcome
}

/// Waits until serving is over (or a shutdown drained it) and says how it
/// ended. The state lock is only tried, never waited for: a thread blocked
/// writing to a peer that stopped reading holds it, and then the drain
/// deadline plus [`WRITE_GRACE`] still ends the wait.
fn wait_until_done<W: Write>(
    shared: &Shared<W>,
    shutdown: &Shutdown,
    drain_timeout: Duration,
) -> Result<(), ServeError> {
    let mut drain_deadline: Option<Instant> = None;
    let mut expired = false;
    let mut found = Vec::new();
    loop {
        let finished = {
            let finished = shared
                .finished
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *finished {
                true
            } else {
                *shared
                    .done
                    .wait_timeout(finished, SHUTDOWN_POLL)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
        };
        if finished {
            break;
        }
        if drain_deadline.is_none() && shutdown.is_requested() {
            drain_deadline = Some(Instant::now() + drain_timeout);
        }
        let Some(deadline) = drain_deadline else {
            continue;
        };
        let now = Instant::now();
        if now >= deadline + WRITE_GRACE {
            shared.cancel_all(CancelReason::Shutdown);
            return Err(ServeError::Write(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the answers could not be written within {} ms of the drain deadline: the peer stopped reading; shutting down without them",
                    WRITE_GRACE.as_millis()
                ),
            )));
        }
        let mut state = match shared.state.try_lock() {
            Ok(state) => state,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => continue,
        };
        if !state.server.is_draining() {
            // Drain: read nothing more, answer what was read, let the
            // queries in flight finish.
            tracing::info!(
                target: "evidence_wire::drain",
                transport = "stdio",
                running = state.server.in_flight(),
                timeout_ms = u64::try_from(drain_timeout.as_millis()).unwrap_or(u64::MAX),
                "drain started: new calls are refused, the calls in flight finish",
            );
            state.server.drain();
            shared.pump(&mut state, &mut found);
            shared.input_wanted.notify_all();
            drop(settle_unlocked(shared, state, &mut found));
        } else if now >= deadline && !expired {
            // Once: answer what still runs, retryably (and cancel it);
            // then wait for the answers to be written.
            expired = true;
            tracing::warn!(
                target: "evidence_wire::drain",
                transport = "stdio",
                running = state.server.in_flight(),
                "drain deadline passed: the calls still running are answered retryably and cancelled",
            );
            state.server.expire_in_flight();
            shared.pump(&mut state, &mut found);
            drop(settle_unlocked(shared, state, &mut found));
            shared.cancel_all(CancelReason::Shutdown);
        }
    }
    let mut state = shared.lock_state();
    match (state.write_error.take(), state.failure.take()) {
        (Some(error), _) => {
            drop(state);
            // The peer is gone: so are the callers of what still runs.
            shared.cancel_all(CancelReason::CallerGone);
            Err(ServeError::Write(error))
        }
        (None, Some(failure)) => Err(failure),
        (None, None) => Ok(()),
    }
}

/// Hands out what `pump` found (queries a drain or an expiry let through,
/// e.g. a message held at the cap) without holding the state lock, which
/// `settle` takes itself; returns the lock taken again.
fn settle_unlocked<'a, W: Write>(
    shared: &'a Shared<W>,
    state: MutexGuard<'a, State<W>>,
    found: &mut Vec<ServerEvent>,
) -> MutexGuard<'a, State<W>> {
    if found.is_empty() {
        return state;
    }
    drop(state);
    shared.settle(found);
    shared.lock_state()
}
