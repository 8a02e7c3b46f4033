//! The child-process client's loop, written once for every runtime.
//!
//! A [`ChildLoop`] owns the core's sans-IO restart supervisor (through
//! [`ProcessCore`]) and the child process, and does for it what every
//! adapter used to do by itself: read the clock, start the first child,
//! feed it the callers' queries and cancellations and the child's output,
//! perform the supervisor's actions in order (start a child, stop one,
//! answer a caller), hand the requests to the child's stdin, and wake at the
//! supervisor's next deadline. The runtime supplies only plumbing
//! ([`Runtime`]: spawn a child, a task, blocking work; [`AsyncRuntime`]: a
//! timer).
//!
//! Three pumps per child run as tasks of the runtime (a thread each on
//! the blocking one), so neither a child that stops reading its stdin nor
//! one that floods its output can block the loop: the stdout pump reads
//! [`READ_CHUNK`] bytes at a time and queues them for the loop, at most
//! [`OUTPUT_QUEUE`] chunks ahead (a child writing faster than its output
//! is decoded is slowed down, never buffered without end); the stdin pump
//! writes what the loop queued; the stderr pump hands each line (or piece
//! of at most [`MAX_STDERR_LINE`] bytes) to the [`StderrRelay`], which
//! never blocks, and outlives the child so its last lines reach the log.
//!
//! Each child leads a process group of its own; stopping it (a restart, a
//! kill, the last [`LoopHandle`] dropped) ends the whole group in the
//! background: SIGTERM, [`TERM_GRACE`](super::TERM_GRACE), SIGKILL. Output of a stopped child
//! is ignored (each child has a generation).
//!
//! Callers talk to the loop through a [`LoopHandle`]: [`LoopHandle::ask`]
//! queues a query and gives a [`PendingAnswer`] to wait on (on this
//! thread, or as a future). Every query gets exactly one outcome; one
//! asked after the loop ended gets [`ProviderError::ShutDown`].
//!
//! Limits: output as above, plus the client's frame limits
//! ([`ClientConfig::limits`](evidence_wire::client::ClientConfig::limits));
//! requests wait for the child's stdin without bound (the supervisor
//! times them out and restarts a child that does not read).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use evidence_wire::supervisor::QueryTicket;
use evidence_wire::trace::TraceContext;
use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::group;
use super::queue::{Popped, Queue};
use super::relay::StderrRelay;
use super::runtime::{AsyncRead, AsyncRuntime, AsyncWrite, Piped, Runtime};
use super::{MAX_STDERR_LINE, ProcessConfig, ProcessCore, ProviderError, SpawnError, Step};

/// Bytes read from the child's stdout at once.
pub const READ_CHUNK: usize = 64 * 1024;
/// Output chunks read from the child but not yet decoded, at most.
pub const OUTPUT_QUEUE: usize = 16;

/// The outcome of one query.
type Outcome = Result<VerifiedEvidence, ProviderError>;

/// What reaches the loop: from the callers and from the stdout pumps.
enum Event {
    Query {
        token: u64,
        request: Box<(EvidenceQuery, EvidenceContext, Option<TraceContext>)>,
        reply: Reply,
    },
    Cancel(u64),
    Output {
        generation: u64,
        bytes: Vec<u8>,
    },
    OutputEnd {
        generation: u64,
        error: Option<std::io::Error>,
    },
}

/// Where a query's one outcome goes; dropping it unanswered tells the
/// caller the loop is gone.
struct Reply(Queue<Outcome>);

impl Reply {
    fn send(self, outcome: Outcome) {
        let _ = self.0.push(outcome);
    }

    /// True once the caller stopped waiting.
    fn is_abandoned(&self) -> bool {
        self.0.is_closed()
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// What the supervisor carries for each query: the caller's token (to
/// cancel it) and where its outcome goes.
struct Waiting {
    token: u64,
    reply: Reply,
}

/// The callers' side of a [`ChildLoop`]: cheap to clone; every clone asks
/// the same child. Dropping the last clone shuts the loop down (its child
/// is stopped; queries still waiting get [`ProviderError::ShutDown`]).
#[derive(Clone)]
pub struct LoopHandle {
    callers: Arc<Callers>,
}

struct Callers {
    inbox: Queue<Event>,
    next_token: AtomicU64,
}

impl Drop for Callers {
    fn drop(&mut self) {
        self.inbox.close();
    }
}

impl fmt::Debug for LoopHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopHandle").finish_non_exhaustive()
    }
}

impl LoopHandle {
    /// Queues one query; its outcome comes through the [`PendingAnswer`].
    /// Fails with [`ProviderError::ShutDown`] once the loop has ended.
    pub fn ask(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
    ) -> Result<PendingAnswer, ProviderError> {
        self.ask_traced(query, context, None)
    }

    /// [`LoopHandle::ask`] carrying the caller's W3C trace context to the
    /// provider in the request's `params._meta` (`traceparent`,
    /// `tracestate`); `None` sends exactly what [`LoopHandle::ask`] does.
    pub fn ask_traced(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        trace: Option<TraceContext>,
    ) -> Result<PendingAnswer, ProviderError> {
        let token = self.callers.next_token.fetch_add(1, Ordering::Relaxed);
        let reply = Queue::new();
        let event = Event::Query {
            token,
            request: Box::new((query, context, trace)),
            reply: Reply(reply.clone()),
        };
        self.callers
            .inbox
            .push(event)
            .map_err(|_| ProviderError::ShutDown)?;
        Ok(PendingAnswer {
            token,
            reply,
            inbox: self.callers.inbox.clone(),
            cancel_on_drop: false,
            done: false,
        })
    }
}

/// The outcome of one asked query, to come: [`PendingAnswer::wait`] on
/// this thread, or `.await` it. Dropped before its outcome, it is
/// abandoned: the outcome is discarded, a query still waiting for a child
/// is never sent, and with [`PendingAnswer::cancel_on_drop`] the query is
/// cancelled (the provider is sent `notifications/cancelled`).
#[must_use = "the outcome comes through it"]
pub struct PendingAnswer {
    token: u64,
    reply: Queue<Outcome>,
    inbox: Queue<Event>,
    cancel_on_drop: bool,
    done: bool,
}

impl fmt::Debug for PendingAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingAnswer")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl PendingAnswer {
    /// Waits on this thread for the outcome.
    pub fn wait(mut self) -> Outcome {
        self.done = true;
        match self.reply.pop_blocking(None) {
            Popped::Item(outcome) => outcome,
            Popped::Timeout | Popped::Closed => Err(ProviderError::ShutDown),
        }
    }

    /// The same, cancelling the query when dropped before its outcome.
    pub fn cancel_on_drop(mut self) -> Self {
        self.cancel_on_drop = true;
        self
    }
}

impl Future for PendingAnswer {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let outcome = match self.reply.poll_pop(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(outcome)) => outcome,
            Poll::Ready(None) => Err(ProviderError::ShutDown),
        };
        self.done = true;
        Poll::Ready(outcome)
    }
}

impl Drop for PendingAnswer {
    fn drop(&mut self) {
        self.reply.close_and_clear();
        if self.cancel_on_drop && !self.done {
            let _ = self.inbox.push(Event::Cancel(self.token));
        }
    }
}

/// A running child: its process (until it is handed over to be ended),
/// generation, and the queues of its stdin and stdout pumps.
struct Running<R: Runtime> {
    child: Option<R::Child>,
    id: u32,
    generation: u64,
    stdin: Queue<Vec<u8>>,
    /// One token per output chunk the stdout pump may queue; closed, it
    /// stops the pump.
    credits: Queue<()>,
}

impl<R: Runtime> Running<R> {
    /// Stops the pumps and ends the child's process group in the
    /// background.
    fn stop(mut self, runtime: &R) {
        let (id, child) = (self.id, self.child.take());
        if let Some(child) = child {
            runtime.spawn_blocking(move || group::end::<R>(child, id));
        }
    }
}

impl<R: Runtime> Drop for Running<R> {
    fn drop(&mut self) {
        self.stdin.close_and_clear();
        self.credits.close_and_clear();
        if self.child.is_some() {
            // Not ended by `stop`: end the group at once (then the child
            // itself is dropped, so killed).
            group::kill_now(self.id);
        }
    }
}

/// The loop around the core supervisor for one provider process (see the
/// module's docs): start it with [`ChildLoop::start`], then run it as a
/// task ([`ChildLoop::run`]) or on a thread of its own
/// ([`ChildLoop::run_blocking`]) until the last [`LoopHandle`] is dropped.
pub struct ChildLoop<R: Runtime> {
    core: ProcessCore<Waiting>,
    runtime: R,
    inbox: Queue<Event>,
    running: Option<Running<R>>,
    generation: u64,
    /// The core's ticket of each query not answered yet, by caller token.
    tickets: HashMap<u64, QueryTicket>,
    epoch: Instant,
}

impl<R: Runtime> fmt::Debug for ChildLoop<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildLoop")
            .field("core", &self.core)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> ChildLoop<R> {
    /// The loop of `config` on `runtime`, its first child started (its
    /// pumps spawned on `runtime`), and the handle callers ask through.
    /// Fails when the first child cannot be started.
    pub fn start(config: &ProcessConfig, runtime: R) -> Result<(Self, LoopHandle), ProviderError> {
        let inbox = Queue::new();
        let mut child_loop = ChildLoop {
            core: ProcessCore::new(config),
            runtime,
            inbox: inbox.clone(),
            running: None,
            generation: 0,
            tickets: HashMap::new(),
            epoch: Instant::now(),
        };
        child_loop.start_child()?;
        let now = child_loop.now();
        child_loop.core.child_started(now);
        child_loop.perform();
        let callers = Callers {
            inbox,
            next_token: AtomicU64::new(0),
        };
        Ok((
            child_loop,
            LoopHandle {
                callers: Arc::new(callers),
            },
        ))
    }

    /// Runs the loop on this thread until the last [`LoopHandle`] is gone;
    /// it waits for events with a deadline, so any runtime can run it on a
    /// thread of its own.
    pub fn run_blocking(mut self) {
        loop {
            let deadline = self.prepare();
            let popped = self.inbox.pop_blocking(deadline);
            if !self.handle(popped) {
                return;
            }
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Hands the supervisor's requests to the child's stdin pump; the time
    /// of the supervisor's next deadline.
    fn prepare(&mut self) -> Option<Instant> {
        // Without a child, nothing to write to: the client is reset before
        // the next child.
        if let Some(running) = &self.running {
            while let Some(bytes) = self.core.poll_transmit() {
                if running.stdin.push(bytes).is_err() {
                    // The pump is gone (its child stopped reading): the
                    // timeouts restart the child.
                    break;
                }
            }
        }
        self.core
            .poll_timeout()
            .map(|at| self.epoch + Duration::from_millis(at))
    }

    /// Feeds what happened to the supervisor and performs its actions;
    /// false once the loop is over.
    fn handle(&mut self, popped: Popped<Event>) -> bool {
        let now = self.now();
        match popped {
            Popped::Item(Event::Query {
                token,
                request,
                reply,
            }) => {
                let (query, context, trace) = *request;
                let ticket =
                    self.core
                        .query_traced(query, context, trace, Waiting { token, reply }, now);
                self.tickets.insert(token, ticket);
            }
            Popped::Item(Event::Cancel(token)) => {
                if let Some(ticket) = self.tickets.get(&token).copied() {
                    // The Cancelled answer goes to a reply nobody reads.
                    self.core.cancel(ticket);
                }
            }
            Popped::Item(Event::Output { generation, bytes }) => {
                if let Some(running) = self.current(generation) {
                    // The chunk is out of the queue: the pump may read the
                    // next one.
                    let _ = running.credits.push(());
                    self.core.handle_input(&bytes, now);
                }
            }
            Popped::Item(Event::OutputEnd { generation, error }) => {
                if self.current(generation).is_some() {
                    if let Some(error) = error {
                        self.core
                            .note(&format!("cannot read the provider's output: {error}"));
                    }
                    self.core.handle_end_of_input(now);
                }
            }
            Popped::Timeout => self.core.handle_timeout(now),
            Popped::Closed => {
                self.core.shutdown();
                self.perform();
                self.stop_child();
                return false;
            }
        }
        self.perform();
        true
    }

    /// Does what the supervisor asks, in order.
    fn perform(&mut self) {
        while let Some(step) = self.core.poll() {
            match step {
                Step::Spawn => {
                    // The first child is started by `start`: this is a restart.
                    self.stop_child();
                    let started = self.start_child();
                    match &started {
                        Ok(()) => tracing::info!(
                            target: "evidence_wire::child",
                            command = ?self.core.command(),
                            generation = self.generation,
                            "provider process restarted",
                        ),
                        Err(error) => tracing::warn!(
                            target: "evidence_wire::child",
                            command = ?self.core.command(),
                            error = %error,
                            "provider process could not be started",
                        ),
                    }
                    if started.is_ok() {
                        // Queries whose caller gave up are not sent.
                        self.core
                            .cancel_deferred_if(|waiting| waiting.reply.is_abandoned());
                    }
                    let now = self.now();
                    self.core.started(now, started);
                }
                Step::Kill => self.stop_child(),
                Step::Answer(waiting, outcome) => {
                    self.tickets.remove(&waiting.token);
                    waiting.reply.send(outcome);
                }
            }
        }
    }

    fn current(&self, generation: u64) -> Option<&Running<R>> {
        self.running
            .as_ref()
            .filter(|running| running.generation == generation)
    }

    fn start_child(&mut self) -> Result<(), SpawnError> {
        let (program, args) = self.core.program()?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let piped = self
            .runtime
            .spawn_child(command)
            .map_err(|error| self.core.spawn_error(&error))?;
        let Piped {
            child,
            id,
            stdin,
            stdout,
            stderr,
            ..
        } = piped;
        self.generation = self.generation.wrapping_add(1);
        let credits = Queue::new();
        for _ in 0..OUTPUT_QUEUE {
            let _ = credits.push(());
        }
        let chunks = Queue::new();
        let relay = self.core.relay();
        let inbox = self.inbox.clone();
        let output = stdout_pump(stdout, self.generation, credits.clone(), inbox);
        self.runtime.spawn(output);
        self.runtime
            .spawn(stdin_pump(stdin, chunks.clone(), relay.clone()));
        self.runtime.spawn(stderr_pump(stderr, relay.clone()));
        self.running = Some(Running {
            child: Some(child),
            id,
            generation: self.generation,
            stdin: chunks,
            credits,
        });
        Ok(())
    }

    fn stop_child(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop(&self.runtime);
        }
    }
}

impl<R: AsyncRuntime> ChildLoop<R> {
    /// Runs the loop as a task of the runtime until the last
    /// [`LoopHandle`] is gone.
    pub async fn run(mut self) {
        loop {
            let deadline = self.prepare();
            let popped = match deadline {
                None => match self.inbox.pop().await {
                    Some(event) => Popped::Item(event),
                    None => Popped::Closed,
                },
                Some(at) => {
                    let event = async {
                        match self.inbox.pop().await {
                            Some(event) => Popped::Item(event),
                            None => Popped::Closed,
                        }
                    };
                    let timer = async {
                        self.runtime.sleep_until(at).await;
                        Popped::Timeout
                    };
                    futures_lite::future::or(event, timer).await
                }
            };
            if !self.handle(popped) {
                return;
            }
        }
    }
}

impl<R: Runtime> Drop for ChildLoop<R> {
    /// Queries still queued get [`ProviderError::ShutDown`], and so does
    /// any asked from now on.
    fn drop(&mut self) {
        self.inbox.close_and_clear();
    }
}

/// Moves the child's stdout to the loop in chunks, taking a credit before
/// queuing each. Ends at the child's end of output, or when the loop no
/// longer listens to this child (its credits were closed).
async fn stdout_pump(
    mut stdout: impl AsyncRead + Unpin,
    generation: u64,
    credits: Queue<()>,
    inbox: Queue<Event>,
) {
    let mut buffer = vec![0u8; READ_CHUNK];
    loop {
        let event = match stdout.read(&mut buffer).await {
            Ok(0) => Event::OutputEnd {
                generation,
                error: None,
            },
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => Event::OutputEnd {
                generation,
                error: Some(error),
            },
            Ok(read) => {
                if credits.pop().await.is_none() {
                    return;
                }
                let bytes = buffer.get(..read).unwrap_or_default().to_vec();
                Event::Output { generation, bytes }
            }
        };
        let end = matches!(event, Event::OutputEnd { .. });
        if inbox.push(event).is_err() || end {
            return;
        }
    }
}

/// Writes what the loop queued to the child's stdin; ends when the loop
/// stops the child (the queue is closed) or a write fails (noted).
async fn stdin_pump(
    mut stdin: impl AsyncWrite + Unpin,
    chunks: Queue<Vec<u8>>,
    relay: StderrRelay,
) {
    while let Some(chunk) = chunks.pop().await {
        let written = match stdin.write_all(&chunk).await {
            Ok(()) => stdin.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            // The child closed its stdin: its end of output (or the
            // request timeouts) will restart it.
            relay.note(&format!("cannot write to the provider: {error}"));
            break;
        }
    }
    chunks.close_and_clear();
}

/// Drains the child's stderr into the relay, one line (or piece of at most
/// [`MAX_STDERR_LINE`]) at a time, until its end; the relay never blocks,
/// so neither does this pump.
async fn stderr_pump(stderr: impl AsyncRead + Unpin, relay: StderrRelay) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_STDERR_LINE).unwrap_or(u64::MAX);
    loop {
        line.clear();
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => relay.line(&line),
        }
    }
    relay.end_of_stream();
}
