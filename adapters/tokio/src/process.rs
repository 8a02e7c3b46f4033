//! A child-process provider client on tokio.
//!
//! One supervisor task owns the child and the core's sans-IO restart
//! supervisor ([`evidence_wire::supervisor::Supervisor`], which owns the
//! [`Client`](evidence_wire::client::Client) state machine). In one
//! `select!` it takes queries from [`ProcessProvider::query`], writes
//! framed requests to the child's stdin, reads its stdout, and sleeps until
//! the earliest deadline the core reports (a query's timeout, a deferred
//! query's timeout, the next restart). A child that stops reading its stdin
//! therefore never blocks anything: its requests time out and it is
//! restarted. The child's stderr is read by its own task, one line (at most
//! [`MAX_LOG_LINE`] bytes) at a time, into a [`StderrRelay`] that passes a
//! bounded, rate-limited excerpt to the [`LogSink`] from a thread of its
//! own and drops the rest, so neither a flooding child nor a sink that
//! blocks (a stderr nobody reads) can stall a query, its timeout or a
//! runtime worker; the supervisor's notes take the same way. This file is
//! plumbing only: the restart policy lives in the core, the settings,
//! errors and the mapping of the supervisor's actions in
//! [`evidence_wire_provider::caller`].
//!
//! When the child exits, closes its output, desynchronizes its stream or
//! leaves a request unanswered past its timeout without answering anything
//! since it was sent (it looks hung), the affected requests fail
//! with a typed error ([`QueryError::ConnectionLost`] or
//! [`QueryError::Timeout`]) and the child is restarted with bounded
//! exponential backoff (reset by any answer of the child). Queries asked
//! while the child is down wait for the restart, but never longer than
//! their own timeout (then they fail with [`QueryError::Timeout`]). If the
//! child cannot be started, the waiting queries fail with
//! [`ProviderError::Spawn`]. Every call of [`ProcessProvider::query`] gets
//! exactly one outcome.
//!
//! Limits: the child's output is read in 64 KiB chunks straight into the
//! client's frame decoder (so at most one chunk plus
//! [`ClientConfig::limits`] is buffered, whatever the child writes);
//! stderr is read in lines of at most [`MAX_LOG_LINE`] and relayed under
//! [`ProcessConfig::stderr_limits`] (default: 16 KiB at once, then 2 KiB/s,
//! lines cut at 1 KiB, the rest dropped and summarised); at most
//! [`MAX_SKIPPED_LOGGED`] ignored messages are logged per child.
//!
//! [`QueryError::ConnectionLost`]: evidence_wire::client::QueryError::ConnectionLost
//! [`QueryError::Timeout`]: evidence_wire::client::QueryError::Timeout
//! [`MAX_SKIPPED_LOGGED`]: evidence_wire::supervisor::MAX_SKIPPED_LOGGED

use std::future::pending;
use std::io;
use std::process::Stdio;
use std::time::Duration;

use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use evidence_wire_provider::caller::relay::StderrRelay;
use evidence_wire_provider::caller::{
    MAX_STDERR_LINE, ProcessConfig, ProcessCore, ProviderError, SpawnError, Step,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

#[cfg(doc)]
use evidence_wire::client::ClientConfig;

/// Longest stderr line read in one piece; longer lines are split (and
/// each piece excerpted by the relay).
pub const MAX_LOG_LINE: usize = MAX_STDERR_LINE;

const READ_CHUNK: usize = 64 * 1024;

type Reply = oneshot::Sender<Result<VerifiedEvidence, ProviderError>>;

struct Request {
    query: EvidenceQuery,
    context: EvidenceContext,
    reply: Reply,
}

/// A provider running as a child process. Cheap to clone; every clone
/// talks to the same child. Dropping the last clone stops the supervisor
/// and kills the child.
#[derive(Clone, Debug)]
pub struct ProcessProvider {
    requests: mpsc::UnboundedSender<Box<Request>>,
}

impl ProcessProvider {
    /// Start the supervisor task and the child. Must be called inside a
    /// tokio runtime; fails when there is none or when the child cannot be
    /// started the first time.
    pub fn spawn(config: ProcessConfig) -> Result<Self, ProviderError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|error| ProviderError::Spawn {
                command: config.command.clone(),
                source: io::Error::other(format!(
                    "ProcessProvider::spawn must run inside a tokio runtime: {error}"
                )),
            })?;
        let (requests, receiver) = mpsc::unbounded_channel();
        let mut supervisor = Supervisor::new(&config, receiver);
        let _enter = runtime.enter();
        supervisor.start_first_child()?;
        runtime.spawn(supervisor.run());
        Ok(ProcessProvider { requests })
    }

    /// Ask one query and wait for its verified answer (or its typed failure).
    ///
    /// Dropping the returned future abandons the wait; the provider still
    /// answers (the answer is discarded).
    pub async fn query(
        &self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
    ) -> Result<VerifiedEvidence, ProviderError> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Box::new(Request {
                query: query.clone(),
                context: context.clone(),
                reply,
            }))
            .map_err(|_| ProviderError::ShutDown)?;
        answer.await.unwrap_or(Err(ProviderError::ShutDown))
    }
}

struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
}

/// The plumbing around the core supervisor (which decides about deferred
/// queries, timeouts, restarts and backoff): the child process, its pipes,
/// the clock, and the reply channels.
struct Supervisor {
    core: ProcessCore<Reply>,
    requests: mpsc::UnboundedReceiver<Box<Request>>,
    running: Option<Running>,
    outgoing: Vec<u8>,
    written: usize,
    epoch: Instant,
}

enum Wake {
    Request(Option<Box<Request>>),
    Read(io::Result<usize>),
    Written(io::Result<usize>),
    Timer,
}

impl Supervisor {
    fn new(config: &ProcessConfig, requests: mpsc::UnboundedReceiver<Box<Request>>) -> Self {
        Supervisor {
            core: ProcessCore::new(config),
            requests,
            running: None,
            outgoing: Vec::new(),
            written: 0,
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Start the first child (before the supervisor task runs).
    fn start_first_child(&mut self) -> Result<(), ProviderError> {
        self.start_child()?;
        let now = self.now();
        self.core.child_started(now);
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
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_stderr(stderr, self.core.relay().clone()));
        }
        self.running = Some(Running {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
        });
        self.outgoing.clear();
        self.written = 0;
        Ok(())
    }

    async fn stop_child(&mut self) {
        if let Some(mut running) = self.running.take() {
            drop(running.stdin.take());
            let _ = running.child.kill().await;
        }
        self.outgoing.clear();
        self.written = 0;
    }

    async fn run(mut self) {
        let mut buffer = vec![0u8; READ_CHUNK];
        // Actions of the first child's start (none expected) come first.
        self.perform().await;
        loop {
            self.collect_output();
            let deadline = self
                .core
                .poll_timeout()
                .map(|at| self.epoch + Duration::from_millis(at));
            let unwritten = self.outgoing.get(self.written..).unwrap_or_default();
            let (stdin, stdout) = match self.running.as_mut() {
                Some(running) => (running.stdin.as_mut(), running.stdout.as_mut()),
                None => (None, None),
            };
            let wake = tokio::select! {
                request = self.requests.recv() => Wake::Request(request),
                read = read_some(stdout, &mut buffer) => Wake::Read(read),
                written = write_some(stdin, unwritten) => Wake::Written(written),
                () = sleep_until(deadline) => Wake::Timer,
            };
            let now = self.now();
            match wake {
                Wake::Request(Some(request)) => {
                    let Request {
                        query,
                        context,
                        reply,
                    } = *request;
                    self.core.query(query, context, reply, now);
                }
                Wake::Request(None) => {
                    self.core.shutdown();
                    self.perform().await;
                    self.stop_child().await;
                    return;
                }
                Wake::Read(Ok(0)) => {
                    if let Some(running) = self.running.as_mut() {
                        running.stdout = None;
                    }
                    self.core.handle_end_of_input(now);
                }
                Wake::Read(Ok(count)) => {
                    self.core
                        .handle_input(buffer.get(..count).unwrap_or_default(), now);
                }
                Wake::Read(Err(error)) => {
                    if let Some(running) = self.running.as_mut() {
                        running.stdout = None;
                    }
                    self.core
                        .note(&format!("cannot read the provider's output: {error}"));
                    self.core.handle_end_of_input(now);
                }
                Wake::Written(Ok(count)) => {
                    self.written = self.written.saturating_add(count).min(self.outgoing.len());
                    if self.written == self.outgoing.len() {
                        self.outgoing.clear();
                        self.written = 0;
                    }
                }
                Wake::Written(Err(error)) => {
                    // The child closed its stdin: its end of output (or the
                    // request timeouts) will restart it.
                    self.core
                        .note(&format!("cannot write to the provider: {error}"));
                    if let Some(running) = self.running.as_mut() {
                        running.stdin = None;
                    }
                    self.outgoing.clear();
                    self.written = 0;
                }
                Wake::Timer => self.core.handle_timeout(now),
            }
            self.perform().await;
        }
    }

    /// Do what the core supervisor asks, in order.
    async fn perform(&mut self) {
        while let Some(step) = self.core.poll() {
            match step {
                Step::Spawn => {
                    self.stop_child().await;
                    let started = self.start_child();
                    if started.is_ok() {
                        // Queries whose caller gave up are not sent.
                        self.core.cancel_deferred_if(|reply| reply.is_closed());
                    }
                    let now = self.now();
                    self.core.started(now, started);
                }
                Step::Kill => self.stop_child().await,
                Step::Answer(reply, outcome) => {
                    let _ = reply.send(outcome);
                }
            }
        }
    }

    fn collect_output(&mut self) {
        if self.running.is_none() {
            // Nothing to write to: the restart clears what the client holds.
            return;
        }
        while let Some(bytes) = self.core.poll_transmit() {
            self.outgoing.extend_from_slice(&bytes);
        }
    }
}

async fn read_some(stdout: Option<&mut ChildStdout>, buffer: &mut [u8]) -> io::Result<usize> {
    match stdout {
        Some(stdout) => stdout.read(buffer).await,
        None => pending().await,
    }
}

async fn write_some(stdin: Option<&mut ChildStdin>, bytes: &[u8]) -> io::Result<usize> {
    match stdin {
        Some(stdin) if !bytes.is_empty() => {
            let count = stdin.write(bytes).await?;
            if count == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "the provider accepts no more input",
                ));
            }
            Ok(count)
        }
        _ => pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => pending().await,
    }
}

/// Drains the child's stderr into the relay, one line (or piece) at a time,
/// until its end; the relay never blocks, so neither does this task.
async fn forward_stderr(stderr: ChildStderr, relay: StderrRelay) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_LOG_LINE).unwrap_or(u64::MAX);
    loop {
        line.clear();
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => relay.line(&line),
        }
    }
    relay.end_of_stream();
}
