//! A child-process provider client on `futures-io` traits.
//!
//! [`ProcessProvider::spawn`] starts one supervisor thread that owns the
//! child (via `async-process`) and the core's sans-IO restart supervisor
//! ([`evidence_wire::supervisor::Supervisor`], which owns the
//! [`Client`](evidence_wire::client::Client) state machine), and runs a
//! small local executor (`async-executor` on `async-io`): three pumps per
//! child move its stdout into the supervisor, its stderr lines into a
//! [`StderrRelay`] (a bounded, rate-limited excerpt reaches the [`LogSink`]
//! from the relay's own thread; the rest is dropped), and queued requests
//! into its stdin, so a child that stops reading can never block the
//! supervisor, and neither can a flooding child or a sink that blocks (a
//! stderr nobody reads); the supervisor's notes take the same way. [`ProcessProvider::query`] is an
//! ordinary future that only waits on a channel: it runs on smol, async-std,
//! tokio or any other executor. This file is plumbing only: the restart
//! policy lives in the core, the settings, errors and the mapping of the
//! supervisor's actions in [`evidence_wire_provider::caller`].
//!
//! When the child exits, closes its output, desynchronizes its stream or
//! leaves a request unanswered past its timeout without answering anything
//! since it was sent (it looks hung), the affected requests fail
//! with a typed error and the child is restarted with bounded exponential
//! backoff (reset by any answer of the child). Queries that arrive while the
//! child is down wait for the fresh child, but never longer than their own
//! timeout; when the child cannot be started they fail with
//! [`ProviderError::Spawn`]. No request is silently lost or answered twice:
//! every call of [`ProcessProvider::query`] gets exactly one outcome.
//! Dropping a query future cancels the query (the provider is sent
//! `notifications/cancelled`; a query still waiting for a child is never
//! sent).
//!
//! Limits: stderr is read in lines of at most 64 KiB and relayed under
//! [`ProcessConfig::stderr_limits`] (default: 16 KiB at once, then 2 KiB/s,
//! lines cut at 1 KiB, the rest dropped and summarised); output is read in 64 KiB chunks
//! through a bounded queue (a chatty child is slowed down, not buffered
//! without end); frame limits come from [`ClientConfig::limits`]; at most
//! [`MAX_SKIPPED_LOGGED`] ignored messages are logged per child.
//!
//! [`MAX_SKIPPED_LOGGED`]: evidence_wire::supervisor::MAX_SKIPPED_LOGGED

use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use async_channel::{Receiver, Sender};
use async_executor::{LocalExecutor, Task};
use async_io::Timer;
use async_process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use evidence_wire::supervisor::QueryTicket;
use evidence_wire_provider::caller::relay::StderrRelay;
use evidence_wire_provider::caller::{
    MAX_STDERR_LINE, ProcessConfig, ProcessCore, ProviderError, SpawnError, Step as Do,
};
use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

#[cfg(doc)]
use evidence_wire::client::ClientConfig;

/// Bytes read from the child's stdout at once.
const READ_CHUNK: usize = 64 * 1024;
/// Output chunks queued between the stdout pump and the supervisor.
const OUTPUT_QUEUE: usize = 16;

type Reply = Sender<Result<VerifiedEvidence, ProviderError>>;

enum Command_ {
    Query {
        token: u64,
        request: Box<(EvidenceQuery, EvidenceContext)>,
        reply: Reply,
    },
    Cancel(u64),
}

enum Event {
    Output(u64, Vec<u8>),
    OutputEnd(u64),
}

struct Shared {
    commands: Sender<Command_>,
    next_token: AtomicU64,
}

/// A provider running as a child process. Cheap to clone; every clone
/// talks to the same child. Dropping the last clone stops the child.
#[derive(Clone)]
pub struct ProcessProvider {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ProcessProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessProvider").finish_non_exhaustive()
    }
}

impl ProcessProvider {
    /// Start the supervisor thread and the child. Fails when the child
    /// cannot be started the first time.
    pub fn spawn(config: ProcessConfig) -> Result<Self, ProviderError> {
        let (commands, receiver) = async_channel::unbounded();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let command = config.command.clone();
        thread::Builder::new()
            .name("evidence-wire-provider".into())
            .spawn(move || {
                let executor = Rc::new(LocalExecutor::new());
                let mut supervisor = Supervisor::new(&config, Rc::clone(&executor));
                let started = supervisor.start_first_child();
                let ok = started.is_ok();
                let _ = started_tx.send(started);
                if ok {
                    async_io::block_on(executor.run(supervisor.run(receiver)));
                }
            })
            .map_err(|source| ProviderError::Spawn {
                command: command.clone(),
                source,
            })?;
        started_rx.recv().unwrap_or_else(|_| {
            Err(ProviderError::Spawn {
                command,
                source: io::Error::other("the supervisor thread stopped while starting"),
            })
        })?;
        Ok(ProcessProvider {
            shared: Arc::new(Shared {
                commands,
                next_token: AtomicU64::new(0),
            }),
        })
    }

    /// Ask one query and wait for its verified answer (or its typed failure).
    ///
    /// Dropping the future before it finishes cancels the query.
    pub async fn query(
        &self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
    ) -> Result<VerifiedEvidence, ProviderError> {
        let token = self.shared.next_token.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = async_channel::bounded(1);
        self.shared
            .commands
            .try_send(Command_::Query {
                token,
                request: Box::new((query.clone(), context.clone())),
                reply,
            })
            .map_err(|_| ProviderError::ShutDown)?;
        let mut guard = CancelOnDrop {
            commands: &self.shared.commands,
            token,
            armed: true,
        };
        let outcome = answer.recv().await.unwrap_or(Err(ProviderError::ShutDown));
        guard.armed = false;
        outcome
    }
}

struct CancelOnDrop<'a> {
    commands: &'a Sender<Command_>,
    token: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.try_send(Command_::Cancel(self.token));
        }
    }
}

struct Running {
    child: Child,
    generation: u64,
    stdin: Sender<Vec<u8>>,
    _pumps: Vec<Task<()>>,
}

/// What the core supervisor carries for each query: the caller's token
/// (to cancel it) and where its outcome goes.
struct Waiting {
    token: u64,
    reply: Reply,
}

enum Step {
    Command(Command_),
    Closed,
    Event(Event),
    Tick,
}

/// The plumbing around the core supervisor (which decides about deferred
/// queries, timeouts, restarts and backoff): the child process, its pumps,
/// the clock, and the reply channels.
struct Supervisor {
    core: ProcessCore<Waiting>,
    executor: Rc<LocalExecutor<'static>>,
    events_tx: Sender<Event>,
    events: Receiver<Event>,
    running: Option<Running>,
    generation: u64,
    /// The core's ticket of each query not answered yet, by caller token.
    tickets: HashMap<u64, QueryTicket>,
    epoch: Instant,
}

impl Supervisor {
    fn new(config: &ProcessConfig, executor: Rc<LocalExecutor<'static>>) -> Self {
        let (events_tx, events) = async_channel::bounded(OUTPUT_QUEUE);
        Supervisor {
            core: ProcessCore::new(config),
            executor,
            events_tx,
            events,
            running: None,
            generation: 0,
            tickets: HashMap::new(),
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Start the first child (before the supervisor runs).
    fn start_first_child(&mut self) -> Result<(), ProviderError> {
        self.start_child()?;
        let now = self.now();
        self.core.child_started(now);
        self.perform();
        Ok(())
    }

    fn start_child(&mut self) -> Result<(), SpawnError> {
        let (program, args) = self.core.program()?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| self.core.spawn_error(&error))?;
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let mut pumps = Vec::with_capacity(2);
        if let Some(stdout) = child.stdout.take() {
            let events = self.events_tx.clone();
            pumps.push(self.executor.spawn(stdout_pump(stdout, generation, events)));
        }
        if let Some(stderr) = child.stderr.take() {
            // Detached: it outlives a stop of the child, so the last lines a
            // dying child wrote still reach the log; it ends at end of file.
            let relay = self.core.relay().clone();
            self.executor.spawn(stderr_pump(stderr, relay)).detach();
        }
        let (stdin_tx, stdin_rx) = async_channel::unbounded();
        if let Some(stdin) = child.stdin.take() {
            pumps.push(self.executor.spawn(stdin_pump(stdin, stdin_rx)));
        }
        self.running = Some(Running {
            child,
            generation,
            stdin: stdin_tx,
            _pumps: pumps,
        });
        Ok(())
    }

    fn stop_child(&mut self) {
        if let Some(mut running) = self.running.take() {
            // SIGKILL; async-process reaps the child in the background.
            let _ = running.child.kill();
        }
    }

    async fn run(mut self, commands: Receiver<Command_>) {
        loop {
            self.flush();
            let wake = self
                .core
                .poll_timeout()
                .map(|at| self.epoch + Duration::from_millis(at));
            let step = {
                let command = async {
                    match commands.recv().await {
                        Ok(command) => Step::Command(command),
                        Err(_) => Step::Closed,
                    }
                };
                let event = async {
                    match self.events.recv().await {
                        Ok(event) => Step::Event(event),
                        Err(_) => futures_lite::future::pending().await,
                    }
                };
                let timer = async {
                    match wake {
                        Some(at) => {
                            Timer::at(at).await;
                        }
                        None => futures_lite::future::pending::<()>().await,
                    }
                    Step::Tick
                };
                futures_lite::future::or(command, futures_lite::future::or(event, timer)).await
            };
            let now = self.now();
            match step {
                Step::Command(Command_::Query {
                    token,
                    request,
                    reply,
                }) => {
                    let (query, context) = *request;
                    let ticket = self
                        .core
                        .query(query, context, Waiting { token, reply }, now);
                    self.tickets.insert(token, ticket);
                }
                Step::Command(Command_::Cancel(token)) => {
                    if let Some(ticket) = self.tickets.get(&token).copied() {
                        // The Cancelled answer goes to a reply nobody reads.
                        self.core.cancel(ticket);
                    }
                }
                Step::Event(Event::Output(generation, bytes)) => {
                    if self.is_current(generation) {
                        self.core.handle_input(&bytes, now);
                    }
                }
                Step::Event(Event::OutputEnd(generation)) => {
                    if self.is_current(generation) {
                        self.core.handle_end_of_input(now);
                    }
                }
                Step::Closed => {
                    self.core.shutdown();
                    self.perform();
                    self.stop_child();
                    return;
                }
                Step::Tick => self.core.handle_timeout(now),
            }
            self.perform();
        }
    }

    /// Do what the core supervisor asks, in order.
    fn perform(&mut self) {
        while let Some(step) = self.core.poll() {
            match step {
                Do::Spawn => {
                    self.stop_child();
                    let started = self.start_child();
                    let now = self.now();
                    self.core.started(now, started);
                }
                Do::Kill => self.stop_child(),
                Do::Answer(waiting, outcome) => {
                    self.tickets.remove(&waiting.token);
                    let _ = waiting.reply.try_send(outcome);
                }
            }
        }
    }

    fn is_current(&self, generation: u64) -> bool {
        self.running
            .as_ref()
            .is_some_and(|running| running.generation == generation)
    }

    fn flush(&mut self) {
        let Some(running) = &self.running else {
            // Nothing to write to: the client is reset before the next child.
            return;
        };
        while let Some(bytes) = self.core.poll_transmit() {
            if running.stdin.try_send(bytes).is_err() {
                break;
            }
        }
    }
}

async fn stdout_pump(mut stdout: ChildStdout, generation: u64, events: Sender<Event>) {
    let mut buffer = vec![0u8; READ_CHUNK];
    loop {
        match stdout.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                let _ = events.send(Event::OutputEnd(generation)).await;
                return;
            }
            Ok(read) => {
                let bytes = buffer.get(..read).unwrap_or_default().to_vec();
                if events.send(Event::Output(generation, bytes)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Drains the child's stderr into the relay, one line (or piece of at most
/// [`MAX_STDERR_LINE`]) at a time, until its end; the relay never blocks, so
/// neither does this pump (nor the executor it runs on).
async fn stderr_pump(stderr: ChildStderr, relay: StderrRelay) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        let available = match reader.fill_buf().await {
            Ok(available) if !available.is_empty() => available,
            _ => break,
        };
        let (take, ends_line) = match available.iter().position(|byte| *byte == b'\n') {
            Some(index) => (index.saturating_add(1), true),
            None => (available.len(), false),
        };
        let room = MAX_STDERR_LINE.saturating_sub(line.len());
        let piece = take.min(room);
        line.extend_from_slice(available.get(..piece).unwrap_or_default());
        reader.consume(piece);
        if (ends_line && piece == take) || line.len() >= MAX_STDERR_LINE {
            relay.line(&line);
            line.clear();
        }
    }
    if !line.is_empty() {
        relay.line(&line);
    }
    relay.end_of_stream();
}

async fn stdin_pump(mut stdin: ChildStdin, chunks: Receiver<Vec<u8>>) {
    while let Ok(chunk) = chunks.recv().await {
        if stdin.write_all(&chunk).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
}
