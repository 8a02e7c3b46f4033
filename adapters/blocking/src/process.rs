//! A child-process provider client on blocking I/O.
//!
//! One supervisor thread owns the [`Client`] state machine and the child.
//! The child's stdout is read by a reader thread, its stderr by a log
//! thread (each line goes to the [`LogSink`]), and its stdin is written by a
//! writer thread, so a child that stops reading can never block the
//! supervisor: the request times out and the child is restarted.
//!
//! When the child exits, closes its output, desynchronizes its stream or
//! leaves a request unanswered past its timeout, the affected requests fail
//! with a typed error and the child is restarted with bounded exponential
//! backoff. Queries that arrive while the child is down wait for the fresh
//! child, but never longer than their own timeout; when the child cannot be
//! started they fail with [`ProviderError::Spawn`]. No request is silently
//! lost or answered twice: every call of [`ProcessProvider::query`] gets
//! exactly one outcome.
//!
//! Limits: stderr lines are cut at 64 KiB; the child's output is read in
//! 64 KiB chunks of which at most [`OUTPUT_QUEUE`] wait for the supervisor
//! (a child writing faster than it is decoded is slowed down, never
//! buffered without end); frame limits come from [`ClientConfig::limits`];
//! at most [`MAX_SKIPPED_LOGGED`] ignored messages are logged per child.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::thread;
use std::time::{Duration, Instant};

use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};

/// Bytes read from the child's stdout at once.
const READ_CHUNK: usize = 64 * 1024;
/// Output chunks read from the child but not yet decoded, at most.
pub const OUTPUT_QUEUE: usize = 16;
/// Ignored (unparsable, unknown) provider messages logged per child; the
/// rest are counted, so a child flooding its output with junk cannot flood
/// the log.
pub const MAX_SKIPPED_LOGGED: u32 = 16;

/// Where the child's stderr lines and the supervisor's notes go.
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

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
        self.restart_backoff_max = max;
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

/// Why a query through a [`ProcessProvider`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The query failed (provider error, bad answer, verification, timeout,
    /// lost connection).
    #[error(transparent)]
    Query(QueryError),
    /// The child could not be started.
    #[error("cannot start provider {command:?}: {source}")]
    Spawn {
        /// The command.
        command: Vec<String>,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The provider client was shut down.
    #[error("the provider client has shut down")]
    ShutDown,
}

impl ProviderError {
    /// The failure as an EvidenceResult carrying an error.
    pub fn to_evidence_result(&self) -> evidence_wire::evidence::EvidenceResult {
        match self {
            ProviderError::Query(error) => error.to_evidence_result(),
            other => evidence_wire::evidence::EvidenceResult::with_error(
                evidence_wire::evidence::EvidenceError::new(
                    "provider_unavailable",
                    other.to_string(),
                ),
            ),
        }
    }
}

type Reply = Sender<Result<VerifiedEvidence, ProviderError>>;

enum Command_ {
    Query(Box<(EvidenceQuery, EvidenceContext)>, Reply),
    Output(u64, Vec<u8>),
    OutputEnd(u64),
    Shutdown,
}

/// A provider running as a child process. Cheap to clone; every clone
/// talks to the same child. Dropping the last clone stops the child.
#[derive(Clone)]
pub struct ProcessProvider {
    commands: Sender<Command_>,
    _guard: Arc<ShutdownGuard>,
}

struct ShutdownGuard(Sender<Command_>);

impl Drop for ShutdownGuard {
    fn drop(&mut self) {
        let _ = self.0.send(Command_::Shutdown);
    }
}

impl ProcessProvider {
    /// Start the supervisor and the child. Fails when the child cannot be
    /// started the first time.
    pub fn spawn(config: ProcessConfig) -> Result<Self, ProviderError> {
        let (commands, receiver) = mpsc::channel();
        let command = config.command.clone();
        let mut supervisor = Supervisor::new(config, commands.clone());
        supervisor.start_child()?;
        thread::Builder::new()
            .name("evidence-wire-provider".into())
            .spawn(move || supervisor.run(receiver))
            .map_err(|source| ProviderError::Spawn { command, source })?;
        Ok(ProcessProvider {
            _guard: Arc::new(ShutdownGuard(commands.clone())),
            commands,
        })
    }

    /// Ask one query and wait for its verified answer (or its typed failure).
    pub fn query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
    ) -> Result<VerifiedEvidence, ProviderError> {
        let (reply, answer) = mpsc::channel();
        self.commands
            .send(Command_::Query(Box::new((query, context)), reply))
            .map_err(|_| ProviderError::ShutDown)?;
        answer.recv().unwrap_or(Err(ProviderError::ShutDown))
    }
}

struct Running {
    child: Child,
    generation: u64,
    stdin: Sender<Vec<u8>>,
    /// One token per output chunk queued by the reader thread; taken back
    /// when the chunk is decoded. Dropping it stops the reader.
    output_credit: Receiver<()>,
}

struct Deferred {
    request: Box<(EvidenceQuery, EvidenceContext)>,
    reply: Reply,
    deadline: Instant,
}

struct Supervisor {
    config: ProcessConfig,
    client: Client,
    commands: Sender<Command_>,
    running: Option<Running>,
    generation: u64,
    waiting: HashMap<RequestId, Reply>,
    deferred: Vec<Deferred>,
    epoch: Instant,
    failures: u32,
    restart_at: Option<Instant>,
    skipped: u32,
}

impl Supervisor {
    fn new(config: ProcessConfig, commands: Sender<Command_>) -> Self {
        Supervisor {
            client: Client::new(config.client.clone()),
            config,
            commands,
            running: None,
            generation: 0,
            waiting: HashMap::new(),
            deferred: Vec::new(),
            epoch: Instant::now(),
            failures: 0,
            restart_at: None,
            skipped: 0,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn start_child(&mut self) -> Result<(), ProviderError> {
        let Some((program, args)) = self.config.command.split_first() else {
            return Err(ProviderError::Spawn {
                command: self.config.command.clone(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "empty command"),
            });
        };
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| ProviderError::Spawn {
                command: self.config.command.clone(),
                source,
            })?;
        self.generation += 1;
        let generation = self.generation;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let stdin = child.stdin.take();
        let (credit_tx, output_credit) = mpsc::sync_channel::<()>(OUTPUT_QUEUE);
        if let Some(stdout) = stdout {
            let commands = self.commands.clone();
            let _ = thread::Builder::new()
                .name("evidence-wire-provider-stdout".into())
                .spawn(move || read_loop(stdout, generation, &commands, &credit_tx));
        }
        if let Some(stderr) = stderr {
            let log = Arc::clone(&self.config.log);
            let _ = thread::Builder::new()
                .name("evidence-wire-provider-stderr".into())
                .spawn(move || {
                    let mut reader = BufReader::new(stderr.take(u64::MAX));
                    let mut line = Vec::new();
                    loop {
                        line.clear();
                        // Lines are capped so a child cannot exhaust memory.
                        match (&mut reader).take(64 * 1024).read_until(b'\n', &mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {
                                let text = String::from_utf8_lossy(&line);
                                log(text.trim_end());
                            }
                        }
                    }
                });
        }
        let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>();
        if let Some(stdin) = stdin {
            let _ = thread::Builder::new()
                .name("evidence-wire-provider-stdin".into())
                .spawn(move || write_loop(stdin, stdin_rx));
        }
        self.running = Some(Running {
            child,
            generation,
            stdin: stdin_tx,
            output_credit,
        });
        self.skipped = 0;
        Ok(())
    }

    fn stop_child(&mut self) {
        if let Some(mut running) = self.running.take() {
            let _ = running.child.kill();
            let _ = running.child.wait();
        }
    }

    fn run(mut self, commands: Receiver<Command_>) {
        loop {
            self.flush();
            let command = match self.next_wake() {
                Some(at) => commands.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => commands.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match command {
                Ok(Command_::Query(request, reply)) => {
                    // While the child is down (backoff), queries wait here and
                    // go to the fresh child, but never past their own timeout.
                    let deadline = Instant::now()
                        + Duration::from_millis(self.config.client.request_timeout_ms);
                    self.deferred.push(Deferred {
                        request,
                        reply,
                        deadline,
                    });
                    if self.running.is_none() && self.restart_at.is_none() {
                        self.restart_now();
                    }
                    self.submit_deferred();
                }
                Ok(Command_::Output(generation, bytes)) => {
                    if let Some(running) = self
                        .running
                        .as_ref()
                        .filter(|running| running.generation == generation)
                    {
                        // The chunk is out of the queue: the reader may read
                        // the next one.
                        let _ = running.output_credit.try_recv();
                        self.client.handle_input(&bytes);
                    }
                }
                Ok(Command_::OutputEnd(generation)) => {
                    if self.is_current(generation) {
                        self.client.handle_input(&[]);
                    }
                }
                Ok(Command_::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                    self.client
                        .connection_lost("the provider client was shut down");
                    self.dispatch();
                    for deferred in std::mem::take(&mut self.deferred) {
                        let _ = deferred.reply.send(Err(ProviderError::ShutDown));
                    }
                    self.stop_child();
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.after_step();
        }
    }

    /// Timeouts, answers and restarts after anything happened.
    fn after_step(&mut self) {
        let now = self.now();
        self.client.handle_timeout(now);
        let timed_out = self.dispatch();
        self.expire_deferred();
        if timed_out && self.running.is_some() {
            // A hung child may be wedged: later queries get a fresh process.
            self.schedule_restart("the provider did not answer in time");
        }
        if self.client.needs_restart() {
            self.schedule_restart("the provider's stream broke");
        }
        if let Some(restart_at) = self.restart_at {
            if Instant::now() >= restart_at {
                self.restart_now();
                self.submit_deferred();
            }
        }
    }

    /// The earliest of the client's deadline, a deferred query's deadline
    /// and the planned restart.
    fn next_wake(&self) -> Option<Instant> {
        let client = self
            .client
            .poll_timeout()
            .map(|deadline| self.epoch + Duration::from_millis(deadline));
        let deferred = self.deferred.iter().map(|deferred| deferred.deadline).min();
        [client, deferred, self.restart_at]
            .into_iter()
            .flatten()
            .min()
    }

    fn expire_deferred(&mut self) {
        let now = Instant::now();
        let timeout = self.config.client.request_timeout_ms;
        let (expired, kept): (Vec<Deferred>, Vec<Deferred>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|deferred| deferred.deadline <= now);
        self.deferred = kept;
        for deferred in expired {
            let _ = deferred
                .reply
                .send(Err(ProviderError::Query(QueryError::Timeout(timeout))));
        }
    }

    fn submit_deferred(&mut self) {
        if self.running.is_none() {
            return;
        }
        for deferred in std::mem::take(&mut self.deferred) {
            let (query, context) = &*deferred.request;
            let id = self.client.query(query, context, self.now());
            self.waiting.insert(id, deferred.reply);
        }
    }

    fn is_current(&self, generation: u64) -> bool {
        self.running
            .as_ref()
            .is_some_and(|running| running.generation == generation)
    }

    /// Stop the child now, fail what it still owed, and start a fresh one
    /// after the backoff delay.
    fn schedule_restart(&mut self, reason: &str) {
        if self.restart_at.is_some() {
            return;
        }
        self.stop_child();
        self.client
            .connection_lost(&format!("{reason}; the provider is being restarted"));
        self.dispatch();
        let delay = backoff(
            self.config.restart_backoff_initial,
            self.config.restart_backoff_max,
            self.failures,
        );
        self.failures = self.failures.saturating_add(1);
        (self.config.log)(&format!(
            "{reason}; restarting it in {} ms",
            delay.as_millis()
        ));
        self.restart_at = Some(Instant::now() + delay);
    }

    fn restart_now(&mut self) {
        self.restart_at = None;
        self.stop_child();
        let now = self.now();
        self.client.restart(now);
        self.dispatch();
        if let Err(error) = self.start_child() {
            (self.config.log)(&error.to_string());
            // Queries waiting for this child learn why it is not there.
            for deferred in std::mem::take(&mut self.deferred) {
                let error = match &error {
                    ProviderError::Spawn { command, source } => ProviderError::Spawn {
                        command: command.clone(),
                        source: io::Error::new(source.kind(), source.to_string()),
                    },
                    _ => ProviderError::ShutDown,
                };
                let _ = deferred.reply.send(Err(error));
            }
            self.schedule_restart("the provider could not be started");
        }
    }

    /// Deliver the client's answers. True when one of them was a timeout.
    fn dispatch(&mut self) -> bool {
        let mut timed_out = false;
        while let Some(event) = self.client.poll_event() {
            match event {
                ClientEvent::Answer { id, outcome } => {
                    match &outcome {
                        Err(QueryError::Timeout(_)) => timed_out = true,
                        // The child answered: it is alive and in sync.
                        Ok(_)
                        | Err(QueryError::Provider { .. })
                        | Err(QueryError::BadResult(_))
                        | Err(QueryError::Verification(_)) => self.failures = 0,
                        Err(_) => {}
                    }
                    if let Some(reply) = self.waiting.remove(&id) {
                        let _ = reply.send(outcome.map_err(ProviderError::Query));
                    }
                }
                ClientEvent::Skipped(skipped) => {
                    self.skipped = self.skipped.saturating_add(1);
                    if self.skipped <= MAX_SKIPPED_LOGGED {
                        (self.config.log)(&format!("ignored a provider message: {skipped:?}"));
                    }
                    if self.skipped == MAX_SKIPPED_LOGGED {
                        (self.config.log)(&format!(
                            "more ignored provider messages are not logged until the provider restarts (at most {MAX_SKIPPED_LOGGED} per process)"
                        ));
                    }
                }
                ClientEvent::Fatal(reason) => {
                    (self.config.log)(&format!("provider connection broken: {reason}"));
                }
                _ => {}
            }
        }
        timed_out
    }

    fn flush(&mut self) {
        let Some(running) = &self.running else {
            // Nothing to write to: the client is reset before the next child.
            return;
        };
        while let Some(bytes) = self.client.poll_transmit() {
            if running.stdin.send(bytes).is_err() {
                break;
            }
        }
    }
}

/// `initial * 2^failures`, at most `max`.
fn backoff(initial: Duration, max: Duration, failures: u32) -> Duration {
    initial.saturating_mul(1u32 << failures.min(16)).min(max)
}

/// Moves the child's stdout to the supervisor in chunks; waits for a
/// credit before queuing each, so at most [`OUTPUT_QUEUE`] chunks wait.
/// Ends at the child's end of output, or when the supervisor no longer
/// listens to this child (its credit receiver was dropped).
fn read_loop(
    mut stdout: std::process::ChildStdout,
    generation: u64,
    commands: &Sender<Command_>,
    credit: &SyncSender<()>,
) {
    let mut buffer = vec![0u8; READ_CHUNK];
    loop {
        match stdout.read(&mut buffer) {
            Ok(0) | Err(_) => {
                let _ = commands.send(Command_::OutputEnd(generation));
                return;
            }
            Ok(read) => {
                if credit.send(()).is_err() {
                    return;
                }
                let bytes = buffer.get(..read).unwrap_or_default().to_vec();
                if commands.send(Command_::Output(generation, bytes)).is_err() {
                    return;
                }
            }
        }
    }
}

fn write_loop(mut stdin: ChildStdin, bytes: Receiver<Vec<u8>>) {
    while let Ok(chunk) = bytes.recv() {
        if stdin.write_all(&chunk).is_err() || stdin.flush().is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let initial = Duration::from_millis(10);
        let max = Duration::from_millis(100);
        let delays: Vec<u128> = (0..6)
            .map(|failures| backoff(initial, max, failures).as_millis())
            .collect();
        assert_eq!(delays, vec![10, 20, 40, 80, 100, 100]);
        assert_eq!(backoff(initial, max, u32::MAX), max);
    }

    #[test]
    fn an_empty_command_is_a_spawn_error() {
        let error = ProcessProvider::spawn(ProcessConfig::new(Vec::new()))
            .err()
            .map(|error| matches!(error, ProviderError::Spawn { .. }));
        assert_eq!(error, Some(true));
    }
}
