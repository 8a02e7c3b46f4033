//! A child-process provider client on tokio.
//!
//! One supervisor task owns the [`Client`] state machine and the child. In
//! one `select!` it takes queries from [`ProcessProvider::query`], writes
//! framed requests to the child's stdin, reads its stdout, and sleeps until
//! the earliest deadline the client reports ([`Client::poll_timeout`]) or
//! the next restart. A child that stops reading its stdin therefore never
//! blocks anything: its requests time out and it is restarted. The child's
//! stderr is read by its own task, one line (at most [`MAX_LOG_LINE`]
//! bytes) at a time, into the [`LogSink`].
//!
//! When the child exits, closes its output, desynchronizes its stream or
//! leaves a request unanswered past its timeout, the affected requests fail
//! with a typed error ([`QueryError::ConnectionLost`] or
//! [`QueryError::Timeout`]) and the child is restarted with bounded
//! exponential backoff. Queries asked while the child is down wait for the
//! restart, but never longer than their own timeout (then they fail with
//! [`QueryError::Timeout`]). If the child cannot be started, the waiting
//! queries fail with [`ProviderError::Spawn`]. Every call of
//! [`ProcessProvider::query`] gets exactly one outcome.
//!
//! Limits: the child's output is read in 64 KiB chunks straight into the
//! client's frame decoder (so at most one chunk plus
//! [`ClientConfig::limits`] is buffered, whatever the child writes);
//! stderr lines are cut at [`MAX_LOG_LINE`]; at most
//! [`MAX_SKIPPED_LOGGED`] ignored messages are logged per child.
//!
//! [`QueryError::Timeout`]: evidence_wire::client::QueryError::Timeout

use std::collections::HashMap;
use std::future::pending;
use std::io;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::ProviderError;

/// Where the child's stderr lines and the supervisor's notes go.
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Longest stderr line passed to the log in one piece; longer lines are
/// split.
pub const MAX_LOG_LINE: usize = 64 * 1024;

/// Ignored (unparsable, unknown) provider messages logged per child; the
/// rest are counted, so a child flooding its output with junk cannot flood
/// the log.
pub const MAX_SKIPPED_LOGGED: u32 = 16;

const READ_CHUNK: usize = 64 * 1024;

/// How to run a provider process.
#[derive(Clone)]
#[non_exhaustive]
pub struct ProcessConfig {
    /// The program and its arguments (no shell).
    pub command: Vec<String>,
    /// The protocol settings (framing, timeouts, trust, handshake).
    pub client: ClientConfig,
    /// First restart delay; doubles after each consecutive failure.
    pub restart_backoff_initial: Duration,
    /// Largest restart delay.
    pub restart_backoff_max: Duration,
    /// Where stderr lines of the child go (default: this process's stderr,
    /// prefixed with the program name).
    pub log: LogSink,
}

impl ProcessConfig {
    /// Run `command` with default settings.
    pub fn new(command: Vec<String>) -> Self {
        let name = command.first().cloned().unwrap_or_default();
        ProcessConfig {
            command,
            client: ClientConfig::default(),
            restart_backoff_initial: Duration::from_millis(50),
            restart_backoff_max: Duration::from_secs(5),
            log: Arc::new(move |line: &str| eprintln!("[{name}] {line}")),
        }
    }

    /// The same settings with `client`.
    pub fn with_client(mut self, client: ClientConfig) -> Self {
        self.client = client;
        self
    }

    /// The same settings with `log`.
    pub fn with_log(mut self, log: LogSink) -> Self {
        self.log = log;
        self
    }

    /// The same settings with restart delays from `initial` doubling up to `max`.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.restart_backoff_initial = initial;
        self.restart_backoff_max = max.max(initial);
        self
    }
}

impl std::fmt::Debug for ProcessConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessConfig")
            .field("command", &self.command)
            .field("client", &self.client)
            .field("restart_backoff_initial", &self.restart_backoff_initial)
            .field("restart_backoff_max", &self.restart_backoff_max)
            .finish_non_exhaustive()
    }
}

type Reply = oneshot::Sender<Result<VerifiedEvidence, ProviderError>>;

struct Request {
    query: EvidenceQuery,
    context: EvidenceContext,
    reply: Reply,
}

/// A query waiting for a child (during restart backoff), with its own
/// deadline: it never waits longer than its timeout.
struct Deferred {
    request: Request,
    deadline: Instant,
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
        let mut supervisor = Supervisor::new(config, receiver);
        let _enter = runtime.enter();
        supervisor.start_child()?;
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

struct Supervisor {
    config: ProcessConfig,
    client: Client,
    requests: mpsc::UnboundedReceiver<Box<Request>>,
    running: Option<Running>,
    waiting: HashMap<RequestId, Reply>,
    deferred: Vec<Deferred>,
    outgoing: Vec<u8>,
    written: usize,
    epoch: Instant,
    failures: u32,
    restart_at: Option<Instant>,
    skipped: u32,
}

enum Wake {
    Request(Option<Box<Request>>),
    Read(io::Result<usize>),
    Written(io::Result<usize>),
    Timer,
}

impl Supervisor {
    fn new(config: ProcessConfig, requests: mpsc::UnboundedReceiver<Box<Request>>) -> Self {
        Supervisor {
            client: Client::new(config.client.clone()),
            config,
            requests,
            running: None,
            waiting: HashMap::new(),
            deferred: Vec::new(),
            outgoing: Vec::new(),
            written: 0,
            epoch: Instant::now(),
            failures: 0,
            restart_at: None,
            skipped: 0,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn log(&self, line: &str) {
        (self.config.log)(line);
    }

    fn start_child(&mut self) -> Result<(), ProviderError> {
        let spawn_error = |source| ProviderError::Spawn {
            command: self.config.command.clone(),
            source,
        };
        let Some((program, args)) = self.config.command.split_first() else {
            return Err(spawn_error(io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty command: give the program and its arguments",
            )));
        };
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(spawn_error)?;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_stderr(stderr, Arc::clone(&self.config.log)));
        }
        self.running = Some(Running {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
        });
        self.outgoing.clear();
        self.written = 0;
        self.skipped = 0;
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
        loop {
            self.collect_output();
            let deadline = self.next_deadline();
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
            match wake {
                Wake::Request(Some(request)) => {
                    // While the child is down (backoff), queries wait here
                    // and go to the fresh child, but never past their own
                    // timeout (`expire_deferred`).
                    let deadline = Instant::now()
                        + Duration::from_millis(self.config.client.request_timeout_ms);
                    self.deferred.push(Deferred {
                        request: *request,
                        deadline,
                    });
                    if self.running.is_none() && self.restart_at.is_none() {
                        self.restart_now().await;
                    }
                    self.submit_deferred();
                }
                Wake::Request(None) => {
                    self.shut_down().await;
                    return;
                }
                Wake::Read(Ok(0)) => {
                    if let Some(running) = self.running.as_mut() {
                        running.stdout = None;
                    }
                    self.client.handle_input(&[]);
                }
                Wake::Read(Ok(count)) => {
                    self.client
                        .handle_input(buffer.get(..count).unwrap_or_default());
                }
                Wake::Read(Err(error)) => {
                    if let Some(running) = self.running.as_mut() {
                        running.stdout = None;
                    }
                    self.log(&format!("cannot read the provider's output: {error}"));
                    self.client.handle_input(&[]);
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
                    self.log(&format!("cannot write to the provider: {error}"));
                    if let Some(running) = self.running.as_mut() {
                        running.stdin = None;
                    }
                    self.outgoing.clear();
                    self.written = 0;
                }
                Wake::Timer => {}
            }
            self.after_wake().await;
        }
    }

    async fn after_wake(&mut self) {
        let now = self.now();
        let before = self.client.in_flight();
        self.client.handle_timeout(now);
        let timed_out = self.client.in_flight() < before;
        self.dispatch();
        self.expire_deferred();
        if timed_out {
            // A hung child may be wedged: restart it so later queries get a
            // fresh process.
            self.log("provider did not answer in time; restarting it");
            self.schedule_restart().await;
        }
        if self.client.needs_restart() {
            self.schedule_restart().await;
        }
        if self
            .restart_at
            .is_some_and(|restart_at| Instant::now() >= restart_at)
        {
            self.restart_now().await;
            self.submit_deferred();
        }
    }

    /// The earliest of the client's deadline, a deferred query's deadline
    /// and the planned restart.
    fn next_deadline(&self) -> Option<Instant> {
        let query = self
            .client
            .poll_timeout()
            .map(|deadline| self.epoch + Duration::from_millis(deadline));
        let deferred = self.deferred.iter().map(|deferred| deferred.deadline).min();
        [query, deferred, self.restart_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Fail the deferred queries whose own timeout has passed while they
    /// waited for a restart.
    fn expire_deferred(&mut self) {
        let now = Instant::now();
        let timeout = self.config.client.request_timeout_ms;
        let (expired, kept): (Vec<Deferred>, Vec<Deferred>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|deferred| deferred.deadline <= now);
        self.deferred = kept;
        for deferred in expired {
            let _ = deferred
                .request
                .reply
                .send(Err(ProviderError::Query(QueryError::Timeout(timeout))));
        }
    }

    fn collect_output(&mut self) {
        if self.running.is_none() {
            // Nothing to write to: the restart clears what the client holds.
            return;
        }
        while let Some(bytes) = self.client.poll_transmit() {
            self.outgoing.extend_from_slice(&bytes);
        }
    }

    fn submit_deferred(&mut self) {
        if self.running.is_none() {
            return;
        }
        let now = self.now();
        for Deferred { request, .. } in std::mem::take(&mut self.deferred) {
            if request.reply.is_closed() {
                continue;
            }
            let id = self.client.query(&request.query, &request.context, now);
            self.waiting.insert(id, request.reply);
        }
    }

    async fn schedule_restart(&mut self) {
        if self.restart_at.is_some() {
            return;
        }
        self.stop_child().await;
        // Queries still in flight cannot be answered by the stopped child.
        self.client
            .connection_lost("the provider is being restarted");
        self.dispatch();
        let exponent = self.failures.min(16);
        let delay = self
            .config
            .restart_backoff_initial
            .saturating_mul(1u32 << exponent)
            .min(self.config.restart_backoff_max);
        self.failures = self.failures.saturating_add(1);
        self.restart_at = Some(Instant::now() + delay);
    }

    async fn restart_now(&mut self) {
        self.restart_at = None;
        self.stop_child().await;
        let now = self.now();
        self.client.restart(now);
        self.dispatch();
        if let Err(error) = self.start_child() {
            self.log(&error.to_string());
            // Fail the waiting queries now rather than keep them forever;
            // the next query tries again after the backoff.
            for deferred in std::mem::take(&mut self.deferred) {
                let _ = deferred.request.reply.send(Err(copy_spawn_error(&error)));
            }
            self.schedule_restart().await;
        }
    }

    async fn shut_down(&mut self) {
        self.client
            .connection_lost("the provider client was shut down");
        self.dispatch();
        for deferred in std::mem::take(&mut self.deferred) {
            let _ = deferred.request.reply.send(Err(ProviderError::ShutDown));
        }
        for (_, reply) in self.waiting.drain() {
            let _ = reply.send(Err(ProviderError::ShutDown));
        }
        self.stop_child().await;
    }

    fn dispatch(&mut self) {
        while let Some(event) = self.client.poll_event() {
            match event {
                ClientEvent::Answer { id, outcome } => {
                    if outcome.is_ok() {
                        self.failures = 0;
                    }
                    if let Some(reply) = self.waiting.remove(&id) {
                        let _ = reply.send(outcome.map_err(ProviderError::Query));
                    }
                }
                ClientEvent::Skipped(skipped) => {
                    self.skipped = self.skipped.saturating_add(1);
                    if self.skipped <= MAX_SKIPPED_LOGGED {
                        self.log(&format!("ignored a provider message: {skipped:?}"));
                    }
                    if self.skipped == MAX_SKIPPED_LOGGED {
                        self.log(&format!(
                            "more ignored provider messages are not logged until the provider restarts (at most {MAX_SKIPPED_LOGGED} per process)"
                        ));
                    }
                }
                ClientEvent::Fatal(reason) => {
                    self.log(&format!("provider connection broken: {reason}"));
                }
                _ => {}
            }
        }
    }
}

fn copy_spawn_error(error: &ProviderError) -> ProviderError {
    match error {
        ProviderError::Spawn { command, source } => ProviderError::Spawn {
            command: command.clone(),
            source: io::Error::new(source.kind(), source.to_string()),
        },
        _ => ProviderError::ShutDown,
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

async fn forward_stderr(stderr: ChildStderr, log: LogSink) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = u64::try_from(MAX_LOG_LINE).unwrap_or(u64::MAX);
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                log(text.trim_end());
            }
        }
    }
}
