//! A child-process provider client on tokio.
//!
//! One task runs the SDK's [`ChildLoop`]: the loop around the core's
//! sans-IO restart supervisor ([`evidence_wire::supervisor::Supervisor`],
//! which owns the [`Client`](evidence_wire::client::Client) state machine).
//! It takes queries from [`ProcessProvider::query`], queues framed requests
//! for the child's stdin, takes its output, and sleeps until the earliest
//! deadline the core reports (a query's timeout, a deferred query's
//! timeout, the next restart). The child's stdout, stdin and stderr each
//! have a task of their own, so a child that stops reading its stdin never
//! blocks anything: its requests time out and it is restarted. Its stderr
//! lines (at most [`MAX_STDERR_LINE`] bytes each) go to the never-blocking
//! [`StderrRelay`], so neither a flooding child nor a sink that blocks can
//! stall a query, its timeout or a runtime worker. This file is plumbing
//! only ([`Tokio`], the runtime the loop runs on): the restart policy lives
//! in the core, the settings, errors, the loop and the ending of a child's
//! process group in [`evidence_wire_provider::caller`].
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
//! exactly one outcome. Each child leads a process group of its own, ended
//! as a whole (SIGTERM, grace, SIGKILL, on tokio's blocking pool) when it
//! is restarted or the provider dropped.
//!
//! Limits: those of [`evidence_wire_provider::caller::child_loop`] (output
//! in 64 KiB chunks of which at most 16 wait, frame limits from
//! [`ClientConfig::limits`], stderr relayed under
//! [`ProcessConfig::stderr_limits`]); at most [`MAX_SKIPPED_LOGGED`]
//! ignored messages are logged per child.
//!
//! [`QueryError::ConnectionLost`]: evidence_wire::client::QueryError::ConnectionLost
//! [`QueryError::Timeout`]: evidence_wire::client::QueryError::Timeout
//! [`MAX_SKIPPED_LOGGED`]: evidence_wire::supervisor::SupervisorConfig::MAX_SKIPPED_LOGGED
//! [`MAX_STDERR_LINE`]: evidence_wire_provider::caller::MAX_STDERR_LINE
//! [`StderrRelay`]: evidence_wire_provider::caller::relay::StderrRelay
//! [`ClientConfig::limits`]: evidence_wire::client::ClientConfig::limits

use std::future::Future;
use std::io;
use std::process::ExitStatus;
use std::time::Instant;

use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use evidence_wire::trace::TraceContext;
use evidence_wire_provider::caller::child_loop::{ChildLoop, LoopHandle};
use evidence_wire_provider::caller::runtime::{AsyncRuntime, Piped, Runtime};
use evidence_wire_provider::caller::{ProcessConfig, ProviderError};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::runtime::Handle;

use crate::compat::Compat;

/// A provider running as a child process. Cheap to clone; every clone
/// talks to the same child. Dropping the last clone stops the loop and
/// ends the child's process group.
#[derive(Clone, Debug)]
pub struct ProcessProvider {
    handle: LoopHandle,
}

impl ProcessProvider {
    /// Start the loop's task and the child. Must be called inside a tokio
    /// runtime; fails when there is none or when the child cannot be
    /// started the first time.
    pub fn spawn(config: ProcessConfig) -> Result<Self, ProviderError> {
        let runtime = Handle::try_current().map_err(|error| ProviderError::Spawn {
            command: config.command.clone(),
            source: io::Error::other(format!(
                "ProcessProvider::spawn must run inside a tokio runtime: {error}"
            )),
        })?;
        let (child_loop, handle) = ChildLoop::start(&config, Tokio(runtime.clone()))?;
        runtime.spawn(child_loop.run());
        Ok(ProcessProvider { handle })
    }

    /// Ask one query and wait for its verified answer (or its typed failure).
    ///
    /// Dropping the returned future abandons the wait; the provider still
    /// answers (the answer is discarded), unless the query still waited for
    /// a child (then it is never sent).
    pub async fn query(
        &self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
    ) -> Result<VerifiedEvidence, ProviderError> {
        self.handle.ask(query.clone(), context.clone())?.await
    }

    /// [`ProcessProvider::query`] continuing the caller's W3C trace: with
    /// `trace`, the request carries it in `params._meta.traceparent` (and
    /// `tracestate`); without one the request is exactly
    /// [`ProcessProvider::query`]'s.
    pub async fn query_traced(
        &self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
        trace: Option<&TraceContext>,
    ) -> Result<VerifiedEvidence, ProviderError> {
        self.handle
            .ask_traced(query.clone(), context.clone(), trace.cloned())?
            .await
    }
}

/// `tokio::process` children (killed when dropped), tasks and the blocking
/// pool of one runtime, and its timer.
struct Tokio(Handle);

impl Runtime for Tokio {
    type Child = Child;
    type Stdin = Compat<ChildStdin>;
    type Stdout = Compat<ChildStdout>;
    type Stderr = Compat<ChildStderr>;

    fn spawn_child(&self, command: std::process::Command) -> io::Result<Piped<Self>> {
        let _runtime = self.0.enter();
        let mut child = Command::from(command).kill_on_drop(true).spawn()?;
        let id = child.id();
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (stdin, stdout, stderr) = (
            pipes.0.map(Compat),
            pipes.1.map(Compat),
            pipes.2.map(Compat),
        );
        Piped::new(child, id, stdin, stdout, stderr)
    }

    fn try_wait(child: &mut Child) -> io::Result<Option<ExitStatus>> {
        child.try_wait()
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(task);
    }

    fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
        self.0.spawn_blocking(work);
    }
}

impl AsyncRuntime for Tokio {
    async fn sleep_until(&self, at: Instant) {
        tokio::time::sleep_until(at.into()).await;
    }
}
