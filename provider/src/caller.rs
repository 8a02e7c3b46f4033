//! The caller's side, whatever the runtime: how to run a provider process
//! ([`ProcessConfig`]), why a query through a provider client failed
//! ([`ProviderError`]), and the runtime-neutral half of a process client
//! ([`child_loop::ChildLoop`] over [`ProcessCore`]).
//!
//! Every adapter's child-process client is the core's sans-IO
//! [`Supervisor`] plus plumbing. What does not depend on the runtime lives
//! here once: the settings, the error type, the child's stderr relay, the
//! spawn error that reaches every query waiting for a child that could not
//! be started, the mapping of the supervisor's actions to what must be
//! done ([`ProcessCore::poll`]), and the loop that does it
//! ([`child_loop`]: the clock, the first child and its restarts, the pumps
//! of its stdio, the deadlines, the end of its process group). Each
//! adapter keeps only a [`runtime::Runtime`] (spawning a child, a task and
//! blocking work, and a timer) and its public client type.
//!
//! Limits: stderr is relayed under [`ProcessConfig::stderr_limits`]
//! (default: 16 KiB at once, then 2 KiB/s, lines cut at 1 KiB, the rest
//! dropped and summarised), read in pieces of at most [`MAX_STDERR_LINE`];
//! frame limits come from the client settings
//! ([`evidence_wire::client::ClientConfig::limits`]).

use std::fmt;
use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::evidence::{EvidenceError, EvidenceResult, VerifiedEvidence};
use evidence_wire::supervisor::{
    Action, Failure, PROVIDER_UNAVAILABLE, Supervisor, SupervisorConfig,
};
pub mod child_loop;
mod group;
mod queue;
pub mod relay;
pub mod runtime;

pub use group::{REAP_DEADLINE, TERM_GRACE};
use relay::{RelayLimits, StderrRelay};
use serde_json::json;

/// Where the child's stderr lines and the supervisor's notes go.
pub use relay::LogSink;

/// Called each time the supervisor restarts the child (every start after
/// the first): a counter for metrics (`evidence_wire_metrics::Metrics::restart_hook`).
/// It runs on the supervisor's thread or task: keep it cheap.
pub type RestartHook = Arc<dyn Fn() + Send + Sync>;

/// Longest piece of a stderr line read at once; longer lines are split
/// (and each piece excerpted by the relay).
pub const MAX_STDERR_LINE: usize = 64 * 1024;

/// How to run a provider process.
#[derive(Clone)]
#[non_exhaustive]
pub struct ProcessConfig {
    /// The program and its arguments (no shell).
    pub command: Vec<String>,
    /// The protocol settings and the restart backoff.
    pub supervisor: SupervisorConfig,
    /// Where stderr lines of the child go (default: this process's stderr,
    /// prefixed with the program name). Called from the relay's own
    /// thread; it may block without blocking anything else. Lines arrive
    /// with their terminal controls escaped
    /// ([`evidence_wire::text::printable`]).
    pub log: LogSink,
    /// How much of the child's stderr is relayed to `log`.
    pub stderr_limits: RelayLimits,
    /// Called on every restart of the child (default: none).
    pub restart_hook: Option<RestartHook>,
}

impl ProcessConfig {
    /// Run `command` with default settings.
    pub fn new(command: Vec<String>) -> Self {
        let name = command.first().cloned().unwrap_or_default();
        ProcessConfig {
            command,
            supervisor: SupervisorConfig::default(),
            log: Arc::new(move |line: &str| eprintln!("[{name}] {line}")),
            stderr_limits: RelayLimits::default(),
            restart_hook: None,
        }
    }

    /// The same settings calling `hook` on every restart of the child.
    pub fn with_restart_hook(mut self, hook: RestartHook) -> Self {
        self.restart_hook = Some(hook);
        self
    }

    /// The same settings with `limits` on the relayed stderr.
    pub fn with_stderr_limits(mut self, limits: RelayLimits) -> Self {
        self.stderr_limits = limits;
        self
    }

    /// The same settings with `client`.
    pub fn with_client(mut self, client: ClientConfig) -> Self {
        self.supervisor = self.supervisor.with_client(client);
        self
    }

    /// The same settings with `log`.
    pub fn with_log(mut self, log: LogSink) -> Self {
        self.log = log;
        self
    }

    /// The same settings with restart delays from `initial` doubling up to
    /// `max` (a `max` below `initial` counts as `initial`).
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.supervisor = self.supervisor.with_backoff(initial, max);
        self
    }
}

impl fmt::Debug for ProcessConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessConfig")
            .field("command", &self.command)
            .field("supervisor", &self.supervisor)
            .field("stderr_limits", &self.stderr_limits)
            .field("restart_hook", &self.restart_hook.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a provider process could not be started: the command and the
/// system's reason. It reaches every query that waited for that child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnError {
    command: Vec<String>,
    kind: io::ErrorKind,
    message: String,
}

impl SpawnError {
    /// `command` could not be started because of `error`.
    pub fn new(command: &[String], error: &io::Error) -> Self {
        SpawnError {
            command: command.to_vec(),
            kind: error.kind(),
            message: error.to_string(),
        }
    }

    /// The command.
    pub fn command(&self) -> &[String] {
        &self.command
    }

    /// The kind of the system's error.
    pub fn kind(&self) -> io::ErrorKind {
        self.kind
    }
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot start provider {:?}: {}",
            self.command, self.message
        )
    }
}

impl std::error::Error for SpawnError {}

/// Why a query through a provider client (a child process or an HTTP
/// provider) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The query failed (provider error, bad answer, verification, timeout,
    /// lost connection).
    #[error(transparent)]
    Query(QueryError),
    /// The child could not be started (check the command and its
    /// permissions).
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
    /// The provider URL cannot be used (malformed, `http://` without
    /// `allow_insecure_http`, unusable extra root certificates).
    #[error("provider URL {url:?} refused: {reason}")]
    Url {
        /// The URL as configured.
        url: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The HTTP provider could not be reached.
    #[error("cannot connect to {address}: {reason}")]
    Connect {
        /// `host:port`.
        address: String,
        /// Why (refused, unresolvable, timed out).
        reason: String,
    },
    /// The TLS handshake with an `https://` provider failed (certificate
    /// not trusted or not naming the host, no common protocol, timeout).
    #[error("TLS with {address} failed: {reason}")]
    Tls {
        /// `host:port`.
        address: String,
        /// The cause and what to do.
        reason: String,
    },
    /// The HTTP provider answered with a status other than 2xx. Redirects
    /// (3xx) are never followed and land here with their `Location`.
    #[error("provider answered HTTP {status}{}: {detail}", location.as_ref().map(|l| format!(" (redirect to {l:?}, not followed)")).unwrap_or_default())]
    HttpStatus {
        /// The status code.
        status: u16,
        /// The `Location` header of a redirect.
        location: Option<String>,
        /// The JSON-RPC error message when the body held one, else the
        /// start of the body.
        detail: String,
    },
    /// The HTTP answer is larger than the configured cap.
    #[error(
        "provider answer is larger than the limit of {limit} bytes; raise max_response_bytes if such answers are legitimate"
    )]
    ResponseTooLarge {
        /// The cap.
        limit: usize,
    },
    /// The HTTP answer held no response to the query (empty, wrong id,
    /// not JSON-RPC).
    #[error("provider answer holds no response to the query: {0}")]
    UnexpectedResponse(String),
}

impl ProviderError {
    /// A stable machine-readable name of the failure (the `error.code` of
    /// [`ProviderError::to_evidence_result`]).
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::Query(error) => error.code(),
            ProviderError::Spawn { .. }
            | ProviderError::ShutDown
            | ProviderError::Connect { .. }
            | ProviderError::Tls { .. } => PROVIDER_UNAVAILABLE,
            ProviderError::Url { .. } => "provider_misconfigured",
            ProviderError::HttpStatus { .. } => "provider_error",
            ProviderError::ResponseTooLarge { .. } | ProviderError::UnexpectedResponse(_) => {
                "invalid_provider_result"
            }
        }
    }

    /// The failure as an EvidenceResult carrying an error (what Decision
    /// Gate records).
    pub fn to_evidence_result(&self) -> EvidenceResult {
        match self {
            ProviderError::Query(error) => error.to_evidence_result(),
            ProviderError::HttpStatus { status, .. } => EvidenceResult::with_error(
                EvidenceError::new(self.code(), self.to_string())
                    .with_details(json!({ "status": status })),
            ),
            other => {
                EvidenceResult::with_error(EvidenceError::new(other.code(), other.to_string()))
            }
        }
    }
}

impl From<SpawnError> for ProviderError {
    fn from(error: SpawnError) -> Self {
        ProviderError::Spawn {
            source: io::Error::new(error.kind, error.message),
            command: error.command,
        }
    }
}

impl From<Failure<SpawnError>> for ProviderError {
    fn from(failure: Failure<SpawnError>) -> Self {
        match failure {
            Failure::Query(error) => ProviderError::Query(error),
            Failure::Spawn(error) => error.into(),
            _ => ProviderError::ShutDown,
        }
    }
}

/// What a process adapter must do next ([`ProcessCore::poll`]).
#[derive(Debug)]
// `Answer` is the common step and is moved once to its waiter, as the
// core's `Action::Answer` is; boxing it would cost an allocation per answer.
#[allow(clippy::large_enum_variant)]
pub enum Step<T> {
    /// Stop the current child if any, start a new one, and report the
    /// outcome with [`ProcessCore::started`] before anything else.
    Spawn,
    /// Stop the current child (kill it; its output is ignored from now on).
    Kill,
    /// The one outcome of the query that carried this payload.
    Answer(T, Result<VerifiedEvidence, ProviderError>),
}

/// The runtime-neutral half of a child-process client: the core
/// [`Supervisor`] (reachable through `Deref`: feed it queries, output and
/// timeouts as its docs say), the child's stderr relay, and the command.
/// `T` is the adapter's reply channel.
pub struct ProcessCore<T> {
    supervisor: Supervisor<T, SpawnError>,
    relay: StderrRelay,
    command: Vec<String>,
    restart_hook: Option<RestartHook>,
    /// A child has run: the next one started is a restart (counted by
    /// `restart_hook` once it is up; failed attempts are not counted).
    spawned: bool,
}

impl<T> fmt::Debug for ProcessCore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessCore")
            .field("command", &self.command)
            .finish_non_exhaustive()
    }
}

impl<T> ProcessCore<T> {
    /// The supervisor and relay of `config`; no child yet.
    pub fn new(config: &ProcessConfig) -> Self {
        ProcessCore {
            supervisor: Supervisor::with_config(&config.supervisor),
            relay: StderrRelay::new(Arc::clone(&config.log), config.stderr_limits),
            command: config.command.clone(),
            restart_hook: config.restart_hook.clone(),
            spawned: false,
        }
    }

    /// The program to run and its arguments, or the spawn error of an empty
    /// command.
    pub fn program(&self) -> Result<(&str, &[String]), SpawnError> {
        match self.command.split_first() {
            Some((program, args)) => Ok((program, args)),
            None => Err(self.spawn_error(&io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty command: give the program and its arguments",
            ))),
        }
    }

    /// The command the child runs (program and arguments).
    pub fn command(&self) -> &[String] {
        &self.command
    }

    /// The spawn error of this command for the system's `error`.
    pub fn spawn_error(&self, error: &io::Error) -> SpawnError {
        SpawnError::new(&self.command, error)
    }

    /// The relay the child's stderr goes through (clone it for a pump).
    pub fn relay(&self) -> &StderrRelay {
        &self.relay
    }

    /// A note of the adapter's for the log (through the relay, like the
    /// supervisor's own).
    pub fn note(&self, line: &str) {
        self.relay.note(line);
    }

    /// Report how the start asked for by [`Step::Spawn`] went.
    pub fn started(&mut self, now: u64, outcome: Result<(), SpawnError>) {
        match outcome {
            Ok(()) => {
                // A child ran before this one: this start is a restart.
                if core::mem::replace(&mut self.spawned, true) {
                    if let Some(hook) = &self.restart_hook {
                        hook();
                    }
                }
                self.supervisor.child_started(now);
            }
            Err(error) => self.supervisor.spawn_failed(now, error),
        }
    }

    /// The next thing to do. The supervisor's log lines go to the relay
    /// here; failures become [`ProviderError`]s.
    pub fn poll(&mut self) -> Option<Step<T>> {
        // The first child is started by the adapter itself (through the
        // supervisor's `child_started`): note that one has run.
        self.spawned |= self.supervisor.is_up();
        loop {
            match self.supervisor.poll_action()? {
                Action::Spawn => return Some(Step::Spawn),
                Action::Kill => return Some(Step::Kill),
                Action::Answer { payload, outcome } => {
                    return Some(Step::Answer(payload, outcome.map_err(ProviderError::from)));
                }
                Action::Log(line) => {
                    tracing::info!(target: "evidence_wire::child", note = line.as_str(), "supervisor note");
                    self.relay.note(&line);
                }
                _ => {}
            }
        }
    }
}

impl<T> Deref for ProcessCore<T> {
    type Target = Supervisor<T, SpawnError>;

    fn deref(&self) -> &Self::Target {
        &self.supervisor
    }
}

impl<T> DerefMut for ProcessCore<T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.supervisor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_results() {
        let status = ProviderError::HttpStatus {
            status: 302,
            location: Some("http://elsewhere".to_owned()),
            detail: String::new(),
        };
        assert!(status.to_string().contains("not followed"));
        let result = status.to_evidence_result();
        let error = result.error.expect("error");
        assert_eq!(error.code, "provider_error");
        assert_eq!(error.details, Some(json!({"status": 302})));
        assert_eq!(
            ProviderError::Query(QueryError::Timeout(5)).code(),
            "provider_timeout"
        );
        assert_eq!(ProviderError::ShutDown.code(), "provider_unavailable");
    }

    /// A spawn error keeps its kind and message on the way to every query
    /// that waited for the child, and reads as before.
    #[test]
    fn a_spawn_error_reaches_the_caller_whole() {
        let command = vec!["/no/such/provider".to_owned()];
        let source = io::Error::new(io::ErrorKind::NotFound, "No such file or directory");
        let spawn = SpawnError::new(&command, &source);
        let failure: Failure<SpawnError> = Failure::Spawn(spawn.clone());
        let error = ProviderError::from(failure);
        assert_eq!(
            error.to_string(),
            "cannot start provider [\"/no/such/provider\"]: No such file or directory"
        );
        assert_eq!(error.to_string(), spawn.to_string());
        match error {
            ProviderError::Spawn {
                command: got,
                source,
            } => {
                assert_eq!(got, command);
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("not a spawn error: {other:?}"),
        }
    }

    #[test]
    fn an_empty_command_is_a_spawn_error() {
        let core: ProcessCore<()> = ProcessCore::new(&ProcessConfig::new(Vec::new()));
        let error = core.program().expect_err("no program");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("empty command"), "{error}");
    }
}
