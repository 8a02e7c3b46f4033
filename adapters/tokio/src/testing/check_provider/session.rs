//! One connection to the provider under test, driven through the core
//! sans-IO [`Client`]: a child process on stdio (spawned fresh for every
//! session, so that a probe that breaks the stream cannot spoil the next),
//! an HTTP endpoint, or a service in this process (served afresh for every
//! session by [`crate::serve`] over an in-memory pipe: the stdio bytes,
//! without a process).
//!
//! Every request goes through the client's raw entry points
//! ([`Client::query_raw`], [`Client::request`], [`Client::expect_reply`]
//! with [`Client::send_raw`]), so the battery sees each answer as the
//! provider wrote it, with the client's id matching, deadlines and
//! dropped-answer rules, and asks [`Client::verify_answer`] for the
//! client's own verdict. Nothing here judges: it records what happened
//! (each outcome with its latency, the messages the client skipped, a
//! fatal stream error, the provider's stderr) for the battery to grade.
//!
//! A child's pipes are read on threads of their own, and nothing here
//! waits for them without a deadline: a pipe ends only when every process
//! holding it has closed it, and a process the provider started may hold
//! it after the provider is gone (issue 38).
//!
//! Limits: every wait for an answer is bounded by the client's request
//! deadline; when the session ends, the provider's whole process group is
//! ended ([`super::process`]), then its stdout and stderr get at most
//! [`PIPE_CLOSE_DEADLINE`] to close (less once a session's pipes were
//! found held: [`HELD_PIPE_CHECK`]) and how it all ended goes to the
//! session's [`ExitLog`]; an unread stderr is read after the group ended,
//! at most [`UNREAD_STDERR_CAP`] bytes until it closes or
//! [`PIPE_CLOSE_DEADLINE`] passes. The child's output is read in 64 KiB
//! chunks of which at most [`OUTPUT_QUEUE`] wait to be decoded; of its
//! stderr only counts and the first [`STDERR_SAMPLE_LINES`] lines (cut at
//! [`STDERR_SAMPLE_BYTES`]) are kept; at most [`MAX_NOTES`] skipped
//! messages are described (the rest counted).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId, Skipped};
use evidence_wire::envelope::{self, Id};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery};
use evidence_wire::frame::Framing;
use evidence_wire_provider::Service;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{HttpProvider, ProviderError};
use serde_json::Value;
use serde_json::value::RawValue;

use super::process::{Ending, Tree};

/// Output chunks read from the child but not yet decoded, at most.
pub const OUTPUT_QUEUE: usize = 64;
/// Bytes read from the child's stdout at once.
const READ_CHUNK: usize = 64 * 1024;
/// Lines of the provider's stderr kept as evidence.
pub const STDERR_SAMPLE_LINES: usize = 5;
/// Longest stderr line kept (the rest is cut).
pub const STDERR_SAMPLE_BYTES: usize = 200;
/// Skipped messages described per session (the rest only counted).
pub const MAX_NOTES: usize = 16;
/// The most of an unread stderr pipe read after the session, to measure it.
pub const UNREAD_STDERR_CAP: u64 = 1024 * 1024;
/// Once the provider's process group has ended (or the provider exited),
/// how long its stdout and stderr may take to close. Only a process
/// outside the group can hold them longer.
pub const PIPE_CLOSE_DEADLINE: Duration = Duration::from_secs(2);
/// How long a session's pipes may take to close once an earlier session's
/// were found held past [`PIPE_CLOSE_DEADLINE`] (the battery does not pay
/// that deadline again for every session).
pub const HELD_PIPE_CHECK: Duration = Duration::from_millis(100);
/// How long a question about a provider that exited waits for its stdout
/// to reach its end (it may have exited a moment ago).
pub const EXIT_NOTE_WAIT: Duration = Duration::from_millis(250);

/// Where the provider is.
#[derive(Clone)]
pub enum Endpoint {
    /// A program and its arguments, spawned without a shell.
    Command(Vec<String>),
    /// An HTTP provider (already configured: URL, token, roots).
    Http(HttpProvider),
    /// A service in this process, served on an in-memory stream as stdio
    /// would serve it.
    Service(Service),
}

impl Endpoint {
    /// True for an HTTP provider.
    pub fn is_http(&self) -> bool {
        matches!(self, Endpoint::Http(_))
    }

    /// True for a provider program (its processes, stderr and pipes can
    /// be checked).
    pub fn is_process(&self) -> bool {
        matches!(self, Endpoint::Command(_))
    }
}

/// What happens to the child's stderr during a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StderrMode {
    /// Read as it comes (counted and sampled): the provider never blocks on it.
    Drain,
    /// A pipe nobody reads until the session ends (as a careless caller does).
    Unread,
}

/// How to open one session.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// What the session is for (names it in the report).
    pub label: &'static str,
    /// Where the session records how its provider ended.
    pub exits: ExitLog,
    /// Framing of what the checker writes.
    pub framing: Framing,
    /// Run the MCP `initialize` handshake first.
    pub handshake: bool,
    /// How long each request may wait for its answer.
    pub timeout_ms: u64,
    /// The provider's stderr.
    pub stderr: StderrMode,
}

/// One request's outcome as the session saw it.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The `result` as written, or why there is none.
    pub result: Result<Box<RawValue>, QueryError>,
    /// From the request's send to its outcome.
    pub latency: Duration,
    /// The HTTP status of a failed exchange (HTTP sessions only).
    pub http_status: Option<u16>,
}

/// What the provider wrote to its stderr.
#[derive(Clone, Debug, Default)]
pub struct StderrSummary {
    /// Bytes read.
    pub bytes: u64,
    /// Lines read.
    pub lines: u64,
    /// The first lines, cut.
    pub sample: Vec<String>,
    /// The stream has ended (the provider closed it or exited), or, for
    /// an unread pipe, as much of it as is measured was read.
    pub ended: bool,
}

/// How one stdio session's provider ended.
#[derive(Clone, Debug)]
pub struct Exit {
    /// The session's label.
    pub session: &'static str,
    /// How its processes ended.
    pub ending: Ending,
    /// Its pipes still open when the wait for them ended (`stdout`,
    /// `stderr`).
    pub open: Vec<&'static str>,
    /// How long they had to close (the wait ended sooner when they did).
    pub pipe_deadline: Duration,
}

/// How every stdio session's provider ended, in order (shared by the
/// battery's sessions).
#[derive(Clone, Debug, Default)]
pub struct ExitLog(Arc<Mutex<Vec<Exit>>>);

impl ExitLog {
    fn record(&self, exit: Exit) {
        if let Ok(mut exits) = self.0.lock() {
            exits.push(exit);
        }
    }

    /// Every session's end so far.
    pub fn all(&self) -> Vec<Exit> {
        self.0.lock().map(|exits| exits.clone()).unwrap_or_default()
    }

    /// True once a session's pipes stayed open past their deadline.
    fn pipes_held(&self) -> bool {
        self.0
            .lock()
            .is_ok_and(|exits| exits.iter().any(|exit| !exit.open.is_empty()))
    }
}

/// Messages of the provider the client did not take as answers.
#[derive(Clone, Debug, Default)]
pub struct Notes {
    /// Output that is not a frame or not JSON-RPC (described, capped).
    pub invalid: Vec<String>,
    /// How many of those in all.
    pub invalid_count: usize,
    /// Answers carrying an id no request of this session had.
    pub unknown_ids: Vec<Value>,
    /// Answers carrying the id of a request already answered or expired.
    pub repeated_ids: Vec<i64>,
    /// The stream broke (and why).
    pub fatal: Option<String>,
    /// The protocol version the MCP handshake ended with.
    pub initialized: Option<String>,
    /// HTTP exchanges that failed for a body carrying no request id (a
    /// broken body): their status (0: no status, the exchange itself failed).
    pub http_failures: Vec<u16>,
}

/// One connection to the provider under test.
pub struct Session {
    label: &'static str,
    exits: ExitLog,
    client: Client,
    epoch: Instant,
    io: Io,
    sent_at: BTreeMap<i64, (RequestId, Instant)>,
    outcomes: BTreeMap<i64, Outcome>,
    http_failures: BTreeMap<i64, (u16, String)>,
    notes: Notes,
}

enum Io {
    Child(ChildIo),
    Http(HttpIo),
    Service(ServiceIo),
}

/// A service served in this process on an in-memory stream.
struct ServiceIo {
    runtime: Option<tokio::runtime::Runtime>,
    /// What the client writes, in order.
    input: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    output: Receiver<Input>,
    closed: bool,
}

impl Drop for ServiceIo {
    fn drop(&mut self) {
        // A check still running is not waited for (its caller is gone).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Serves `service` on an in-memory stream: the bytes written go to its
/// input, what it writes comes back as [`Input`].
fn serve_in_process(service: &Service) -> Result<ServiceIo, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime to serve the provider: {error}"))?;
    let (client, server) = tokio::io::duplex(READ_CHUNK);
    let (server_read, server_write) = tokio::io::split(server);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (input, mut inputs) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let (sender, output) = mpsc::channel();
    runtime.spawn(crate::serve(service.clone(), server_read, server_write));
    runtime.spawn(async move {
        while let Some(bytes) = inputs.recv().await {
            if client_write.write_all(&bytes).await.is_err() {
                return;
            }
        }
        // The session ended: the end of the provider's input.
        let _ = client_write.shutdown().await;
    });
    runtime.spawn(async move {
        let mut buffer = vec![0u8; READ_CHUNK];
        loop {
            match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => {
                    let _ = sender.send(Input::End);
                    return;
                }
                Ok(read) => {
                    let bytes = buffer.get(..read).unwrap_or_default().to_vec();
                    if sender.send(Input::Bytes(bytes)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    Ok(ServiceIo {
        runtime: Some(runtime),
        input,
        output,
        closed: false,
    })
}

struct ChildIo {
    tree: Tree,
    stdin: Sender<Vec<u8>>,
    output: Receiver<Input>,
    /// Taken back from the reader so that it may queue the next chunk.
    credit: Receiver<()>,
    stderr: Arc<Mutex<StderrSummary>>,
    unread_stderr: Option<std::process::ChildStderr>,
    closed: bool,
}

impl ChildIo {
    /// Waits at most `wait` for stdout and stderr to reach their end
    /// (what stdout still brings is dropped: the session is over); returns
    /// those still open.
    fn await_pipes(&mut self, wait: Duration) -> Vec<&'static str> {
        let until = Instant::now() + wait;
        while !self.closed {
            let now = Instant::now();
            if now >= until {
                break;
            }
            match self.output.recv_timeout(until - now) {
                Ok(Input::End) | Err(RecvTimeoutError::Disconnected) => self.closed = true,
                Ok(_) => {
                    let _ = self.credit.try_recv();
                }
                Err(RecvTimeoutError::Timeout) => break,
            }
        }
        let stderr_closed = loop {
            // An unread pipe (a probe that never measured it) is not waited for.
            let ended = self.unread_stderr.is_some()
                || self.stderr.lock().map_or(true, |summary| summary.ended);
            if ended || Instant::now() >= until {
                break ended;
            }
            thread::sleep(Duration::from_millis(10));
        };
        let mut open = Vec::new();
        if !self.closed {
            open.push("stdout");
        }
        if !stderr_closed {
            open.push("stderr");
        }
        open
    }
}

struct HttpIo {
    provider: HttpProvider,
    /// Each exchange's deadline (the request timeout): past it the client
    /// has timed the request out, and the exchange gives its connection back.
    deadline: Duration,
    runtime: tokio::runtime::Runtime,
    answers: Receiver<Input>,
    sender: Sender<Input>,
}

enum Input {
    Bytes(Vec<u8>),
    End,
    Http {
        id: Option<i64>,
        answer: Result<Vec<u8>, ProviderError>,
    },
}

impl Io {
    /// The provider's output reached its end.
    fn close(&mut self) {
        match self {
            Io::Child(child) => child.closed = true,
            Io::Service(service) => service.closed = true,
            Io::Http(_) => {}
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Io::Child(child) => child.closed,
            Io::Service(service) => service.closed,
            Io::Http(_) => false,
        }
    }
}

impl Session {
    /// Opens a session: spawns the program, serves the service, or
    /// prepares the HTTP client.
    pub fn open(endpoint: &Endpoint, config: &SessionConfig) -> Result<Session, String> {
        let mut settings = ClientConfig::default();
        settings.framing = config.framing;
        settings.handshake = config.handshake;
        settings.request_timeout_ms = config.timeout_ms;
        let io = match endpoint {
            Endpoint::Command(command) => Io::Child(spawn(command, config.stderr)?),
            Endpoint::Service(service) => Io::Service(serve_in_process(service)?),
            Endpoint::Http(provider) => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|error| format!("cannot start the HTTP runtime: {error}"))?;
                let (sender, answers) = mpsc::channel();
                Io::Http(HttpIo {
                    provider: provider.clone(),
                    deadline: Duration::from_millis(config.timeout_ms),
                    runtime,
                    answers,
                    sender,
                })
            }
        };
        Ok(Session {
            label: config.label,
            exits: config.exits.clone(),
            client: Client::new(settings),
            epoch: Instant::now(),
            io,
            sent_at: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            http_failures: BTreeMap::new(),
            notes: Notes::default(),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Sends an `evidence_query` (the bytes of [`Client::query`]).
    pub fn query(&mut self, query: &EvidenceQuery, context: &EvidenceContext) -> RequestId {
        let now = self.now();
        let id = self.client.query_raw(query, context, now);
        self.sent(id);
        id
    }

    /// Sends any request.
    pub fn request(&mut self, method: &str, params: Option<&Value>) -> RequestId {
        let now = self.now();
        let id = self.client.request(method, params, now);
        self.sent(id);
        id
    }

    /// Reserves the id of a request written raw by [`Session::send_raw`].
    pub fn expect_reply(&mut self) -> RequestId {
        let now = self.now();
        let id = self.client.expect_reply(now);
        self.sent(id);
        id
    }

    /// Stops waiting for `id` (its outcome becomes `Cancelled` if it had none).
    pub fn cancel(&mut self, id: RequestId) {
        self.client.cancel(id);
        self.collect();
    }

    /// Writes `bytes` as they are.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.client.send_raw(bytes);
    }

    fn sent(&mut self, id: RequestId) {
        self.sent_at.insert(id.get(), (id, Instant::now()));
    }

    /// The outcome of `id`, once it has one.
    pub fn outcome(&self, id: RequestId) -> Option<&Outcome> {
        self.outcomes.get(&id.get())
    }

    /// What the provider wrote that answered nothing.
    pub fn notes(&self) -> &Notes {
        &self.notes
    }

    /// The framing the provider answered in, once seen.
    pub fn answer_framing(&self) -> Option<Framing> {
        self.client.detected_framing()
    }

    /// Sends what is queued and waits until every one of `ids` has its
    /// outcome (each does by its deadline).
    pub fn wait(&mut self, ids: &[RequestId]) {
        loop {
            self.flush();
            self.collect();
            if ids.iter().all(|id| self.outcomes.contains_key(&id.get())) {
                return;
            }
            if self.client.needs_restart() && self.client.in_flight() > 0 {
                // The stream is broken: what still waits can never be answered.
                let reason = self
                    .notes
                    .fatal
                    .clone()
                    .unwrap_or_else(|| "the provider's stream broke".to_owned());
                self.client.connection_lost(&reason);
                continue;
            }
            let wait = match self.client.poll_timeout() {
                Some(deadline) => Duration::from_millis(deadline.saturating_sub(self.now())),
                // Nothing can end the wait: every request has an outcome or
                // was never made.
                None => return,
            };
            self.step(wait);
        }
    }

    /// Keeps reading for `duration` (to see what else the provider writes:
    /// a second answer to a request already answered).
    pub fn linger(&mut self, duration: Duration) {
        let until = Instant::now() + duration;
        loop {
            self.flush();
            self.collect();
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            self.step(left);
        }
    }

    /// Waits at most `wait` for input and feeds it to the client.
    fn step(&mut self, wait: Duration) {
        let received = match &self.io {
            Io::Child(child) if child.closed => {
                thread::sleep(wait.min(Duration::from_millis(50)));
                Err(RecvTimeoutError::Timeout)
            }
            Io::Child(child) => child.output.recv_timeout(wait),
            Io::Http(http) => http.answers.recv_timeout(wait),
            Io::Service(service) if service.closed => {
                thread::sleep(wait.min(Duration::from_millis(50)));
                Err(RecvTimeoutError::Timeout)
            }
            Io::Service(service) => service.output.recv_timeout(wait),
        };
        let now = self.now();
        match received {
            Ok(Input::Bytes(bytes)) => {
                if let Io::Child(child) = &self.io {
                    let _ = child.credit.try_recv();
                }
                self.client.handle_input(&bytes);
            }
            Ok(Input::End) => {
                self.io.close();
                self.client.handle_end_of_input();
            }
            Ok(Input::Http { id, answer }) => match answer {
                Ok(body) if body.is_empty() => {}
                Ok(body) => self.client.handle_message(&body),
                Err(error) => {
                    let status = match &error {
                        ProviderError::HttpStatus { status, .. } => *status,
                        _ => 0,
                    };
                    match id.and_then(|id| self.sent_at.get(&id).copied()) {
                        Some((request, _)) => {
                            self.http_failures
                                .insert(request.get(), (status, error.to_string()));
                            self.client.cancel(request);
                        }
                        None => self.notes.http_failures.push(status),
                    }
                }
            },
            Err(RecvTimeoutError::Timeout) => self.client.handle_timeout(now),
            Err(RecvTimeoutError::Disconnected) => {
                self.io.close();
                self.client.handle_end_of_input();
            }
        }
    }

    /// Moves what the client queued to the provider.
    fn flush(&mut self) {
        match &self.io {
            Io::Child(child) => {
                while let Some(bytes) = self.client.poll_transmit() {
                    if child.stdin.send(bytes).is_err() {
                        break;
                    }
                }
            }
            Io::Service(service) => {
                while let Some(bytes) = self.client.poll_transmit() {
                    if service.input.send(bytes).is_err() {
                        break;
                    }
                }
            }
            Io::Http(http) => {
                while let Some(body) = self.client.poll_message() {
                    let id = match envelope::find_id(body.get(..1024).unwrap_or(&body)) {
                        Some(Id::Number(id)) => Some(id),
                        _ => None,
                    };
                    let provider = http.provider.clone();
                    let sender = http.sender.clone();
                    let deadline = http.deadline;
                    http.runtime.spawn(async move {
                        let exchange = provider.post_message(body, None);
                        // Past the deadline the client has already timed the
                        // request out: nothing to report, the connection is freed.
                        if let Ok(answer) = tokio::time::timeout(deadline, exchange).await {
                            let _ = sender.send(Input::Http { id, answer });
                        }
                    });
                }
            }
        }
    }

    /// Records the client's events.
    fn collect(&mut self) {
        while let Some(event) = self.client.poll_event() {
            match event {
                ClientEvent::Reply { id, outcome } => {
                    let latency = self
                        .sent_at
                        .get(&id.get())
                        .map(|(_, sent)| sent.elapsed())
                        .unwrap_or_default();
                    let failure = self.http_failures.remove(&id.get());
                    let (result, http_status) = match (outcome, failure) {
                        (Err(QueryError::Cancelled), Some((status, message))) => (
                            Err(QueryError::ConnectionLost(message)),
                            (status != 0).then_some(status),
                        ),
                        (outcome, _) => (outcome, None),
                    };
                    self.outcomes.insert(
                        id.get(),
                        Outcome {
                            result,
                            latency,
                            http_status,
                        },
                    );
                }
                ClientEvent::Skipped(skipped) => match skipped {
                    Skipped::UnknownId(id) => match id.as_i64() {
                        Some(number) if self.sent_at.contains_key(&number) => {
                            self.notes.repeated_ids.push(number);
                        }
                        _ => self.notes.unknown_ids.push(id),
                    },
                    Skipped::LateAnswer(id) => self.notes.repeated_ids.push(id.get()),
                    Skipped::Invalid(reason) => {
                        self.notes.invalid_count += 1;
                        if self.notes.invalid.len() < MAX_NOTES {
                            self.notes.invalid.push(reason);
                        }
                    }
                    _ => {}
                },
                ClientEvent::Fatal(reason) => {
                    self.notes.fatal.get_or_insert(reason);
                }
                ClientEvent::Initialized { protocol_version } => {
                    self.notes.initialized = Some(protocol_version);
                }
                _ => {}
            }
        }
    }

    /// What the provider wrote to stderr so far (a drained session), or,
    /// for an unread one, after ending the provider's process group: what
    /// its pipe held, read until it closes, [`UNREAD_STDERR_CAP`] bytes
    /// are read, or [`PIPE_CLOSE_DEADLINE`] passes (`ended` is false then:
    /// a process outside the group still holds the pipe).
    pub fn stderr(&mut self) -> StderrSummary {
        let Io::Child(child) = &mut self.io else {
            return StderrSummary::default();
        };
        if let Some(unread) = child.unread_stderr.take() {
            child.tree.end();
            let summary = Arc::new(Mutex::new(StderrSummary::default()));
            let reader = Arc::clone(&summary);
            let spawned = thread::Builder::new()
                .name("check-provider-stderr".into())
                .spawn(move || drain_stderr(unread.take(UNREAD_STDERR_CAP), &reader));
            child.stderr = Arc::clone(&summary);
            let until = Instant::now() + PIPE_CLOSE_DEADLINE;
            while spawned.is_ok() && Instant::now() < until {
                if summary.lock().map_or(true, |summary| summary.ended) {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
        child
            .stderr
            .lock()
            .map(|summary| summary.clone())
            .unwrap_or_default()
    }

    /// What the provider wrote to stderr before it ended, waiting at most
    /// `wait` for the end of the stream (of a provider that exited).
    pub fn last_words(&mut self, wait: Duration) -> StderrSummary {
        let until = Instant::now() + wait;
        loop {
            let summary = self.stderr();
            if summary.ended || Instant::now() >= until {
                return summary;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The child's exit status once it has exited (stdio sessions).
    pub fn exited(&mut self) -> Option<String> {
        let Io::Child(child) = &mut self.io else {
            return None;
        };
        child.tree.exited().map(|status| status.to_string())
    }

    /// When the provider has exited but its stdout has not reached its
    /// end (after at most [`EXIT_NOTE_WAIT`] more): why no answer can come,
    /// nor the end of the stream. `None` otherwise.
    pub fn exit_note(&mut self) -> Option<String> {
        let status = self.exited()?;
        let until = Instant::now() + EXIT_NOTE_WAIT;
        loop {
            if self.io.is_closed() {
                return None;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.step(left);
            self.collect();
        }
        Some(format!(
            "the provider exited ({status}) but its stdout is still open: a process it started holds it (a launcher that does not exec?)"
        ))
    }
}

impl Drop for Session {
    /// Ends the provider's process group, gives its pipes their deadline to
    /// close, and records how it went.
    fn drop(&mut self) {
        let Io::Child(child) = &mut self.io else {
            return;
        };
        let ending = child.tree.end();
        let wait = if self.exits.pipes_held() {
            HELD_PIPE_CHECK
        } else {
            PIPE_CLOSE_DEADLINE
        };
        let open = child.await_pipes(wait);
        self.exits.record(Exit {
            session: self.label,
            ending,
            open,
            pipe_deadline: wait,
        });
    }
}

fn spawn(command: &[String], stderr_mode: StderrMode) -> Result<ChildIo, String> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| "the provider command is empty".to_owned())?;
    let mut tree = Tree::spawn(
        Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .map_err(|error| format!("cannot start provider {command:?}: {error}"))?;
    let child = tree.child();
    let stdout = child.stdout.take();
    let stdin = child.stdin.take();
    let stderr = child.stderr.take();
    let (output_tx, output) = mpsc::sync_channel(OUTPUT_QUEUE);
    let (credit_tx, credit) = mpsc::sync_channel::<()>(OUTPUT_QUEUE);
    if let Some(stdout) = stdout {
        thread::Builder::new()
            .name("check-provider-stdout".into())
            .spawn(move || read_loop(stdout, &output_tx, &credit_tx))
            .map_err(|error| format!("cannot start a reader thread: {error}"))?;
    }
    let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>();
    if let Some(mut stdin) = stdin {
        thread::Builder::new()
            .name("check-provider-stdin".into())
            .spawn(move || {
                while let Ok(bytes) = stdin_rx.recv() {
                    if stdin
                        .write_all(&bytes)
                        .and_then(|()| stdin.flush())
                        .is_err()
                    {
                        return;
                    }
                }
            })
            .map_err(|error| format!("cannot start a writer thread: {error}"))?;
    }
    let summary = Arc::new(Mutex::new(StderrSummary::default()));
    let mut unread_stderr = None;
    if let Some(stderr) = stderr {
        match stderr_mode {
            StderrMode::Unread => unread_stderr = Some(stderr),
            StderrMode::Drain => {
                let summary = Arc::clone(&summary);
                thread::Builder::new()
                    .name("check-provider-stderr".into())
                    .spawn(move || drain_stderr(stderr, &summary))
                    .map_err(|error| format!("cannot start a stderr thread: {error}"))?;
            }
        }
    }
    Ok(ChildIo {
        tree,
        stdin: stdin_tx,
        output,
        credit,
        stderr: summary,
        unread_stderr,
        closed: false,
    })
}

fn read_loop(
    mut stdout: std::process::ChildStdout,
    output: &SyncSender<Input>,
    credit: &SyncSender<()>,
) {
    let mut buffer = vec![0u8; READ_CHUNK];
    loop {
        match stdout.read(&mut buffer) {
            Ok(0) | Err(_) => {
                let _ = output.send(Input::End);
                return;
            }
            Ok(read) => {
                if credit.send(()).is_err() {
                    return;
                }
                let bytes = buffer.get(..read).unwrap_or_default().to_vec();
                if output.send(Input::Bytes(bytes)).is_err() {
                    return;
                }
            }
        }
    }
}

fn drain_stderr(mut stderr: impl Read, summary: &Mutex<StderrSummary>) {
    let mut buffer = vec![0u8; READ_CHUNK];
    loop {
        match stderr.read(&mut buffer) {
            Ok(0) | Err(_) => {
                if let Ok(mut summary) = summary.lock() {
                    summary.ended = true;
                }
                return;
            }
            Ok(read) => {
                if let Ok(mut summary) = summary.lock() {
                    tally(&mut summary, buffer.get(..read).unwrap_or_default());
                }
            }
        }
    }
}

/// Counts `bytes` into `summary` and keeps the first lines.
fn tally(summary: &mut StderrSummary, bytes: &[u8]) {
    summary.bytes = summary
        .bytes
        .saturating_add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
    for line in bytes.split_inclusive(|byte| *byte == b'\n') {
        let complete = line.ends_with(b"\n");
        if summary.sample.len() < STDERR_SAMPLE_LINES {
            let text = String::from_utf8_lossy(line);
            let text = text.trim_end();
            let cut: String = text.chars().take(STDERR_SAMPLE_BYTES).collect();
            if !cut.is_empty() {
                summary.sample.push(cut);
            }
        }
        if complete {
            summary.lines = summary.lines.saturating_add(1);
        }
    }
}
