//! A child-process provider client on `futures-io` traits.
//!
//! [`ProcessProvider::spawn`] starts one thread that runs the SDK's
//! [`ChildLoop`] (the loop around the core's sans-IO restart supervisor,
//! [`evidence_wire::supervisor::Supervisor`], which owns the
//! [`Client`](evidence_wire::client::Client) state machine) on a small
//! executor of its own (`async-executor` on `async-io`), together with the
//! child's three pumps (`async-process` pipes): its stdout into the loop,
//! queued requests into its stdin, and its stderr lines into the
//! never-blocking [`StderrRelay`], so a child that stops reading can never
//! block the loop, and neither can a flooding child or a sink that blocks.
//! [`ProcessProvider::query`] is an ordinary future that only waits for its
//! outcome: it runs on smol, async-std, tokio or any other executor. This
//! file is plumbing only ([`Smol`], the runtime the loop runs on): the
//! restart policy lives in the core, the settings, errors, the loop and
//! the ending of a child's process group in
//! [`evidence_wire_provider::caller`].
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
//! sent). Each child leads a process group of its own, ended as a whole
//! (SIGTERM, grace, SIGKILL) when it is restarted or the provider dropped.
//!
//! Limits: those of [`evidence_wire_provider::caller::child_loop`] (stderr
//! in lines of at most 64 KiB relayed under [`ProcessConfig::stderr_limits`],
//! output in 64 KiB chunks of which at most 16 wait, frame limits from
//! [`ClientConfig::limits`]); at most [`MAX_SKIPPED_LOGGED`] ignored
//! messages are logged per child.
//!
//! [`MAX_SKIPPED_LOGGED`]: evidence_wire::supervisor::SupervisorConfig::MAX_SKIPPED_LOGGED
//! [`StderrRelay`]: evidence_wire_provider::caller::relay::StderrRelay
//! [`ClientConfig::limits`]: evidence_wire::client::ClientConfig::limits

use std::future::Future;
use std::io;
use std::process::ExitStatus;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use async_executor::Executor;
use async_process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use evidence_wire::trace::TraceContext;
use evidence_wire_provider::caller::child_loop::{ChildLoop, LoopHandle};
use evidence_wire_provider::caller::runtime::{AsyncRuntime, Piped, Runtime};
use evidence_wire_provider::caller::{ProcessConfig, ProviderError};

/// A provider running as a child process. Cheap to clone; every clone
/// talks to the same child. Dropping the last clone stops the child.
#[derive(Clone, Debug)]
pub struct ProcessProvider {
    handle: LoopHandle,
}

impl ProcessProvider {
    /// Ask one query and wait for its verified answer (or its typed failure).
    ///
    /// Dropping the future before it finishes cancels the query.
    pub async fn query(
        &self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
    ) -> Result<VerifiedEvidence, ProviderError> {
        let answer = self.handle.ask(query.clone(), context.clone())?;
        answer.cancel_on_drop().await
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
        let answer = self
            .handle
            .ask_traced(query.clone(), context.clone(), trace.cloned())?;
        answer.cancel_on_drop().await
    }

    /// Start the loop's thread and the child. Fails when the child cannot
    /// be started the first time.
    pub fn spawn(config: ProcessConfig) -> Result<Self, ProviderError> {
        let executor = Arc::new(Executor::new());
        let (child_loop, handle) = ChildLoop::start(&config, Smol(Arc::clone(&executor)))?;
        thread::Builder::new()
            .name("evidence-wire-provider".into())
            .spawn(move || async_io::block_on(executor.run(child_loop.run())))
            .map_err(|source| ProviderError::Spawn {
                command: config.command,
                source,
            })?;
        Ok(ProcessProvider { handle })
    }
}

/// `async-process` children, tasks on the loop thread's executor, the
/// `blocking` crate's pool and `async-io`'s timers.
struct Smol(Arc<Executor<'static>>);

impl Runtime for Smol {
    type Child = Child;
    type Stdin = ChildStdin;
    type Stdout = ChildStdout;
    type Stderr = ChildStderr;

    fn spawn_child(&self, command: std::process::Command) -> io::Result<Piped<Self>> {
        let mut child = Command::from(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let (id, stdin) = (Some(child.id()), child.stdin.take());
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        Piped::new(child, id, stdin, stdout, stderr)
    }

    fn try_wait(child: &mut Child) -> io::Result<Option<ExitStatus>> {
        child.try_status()
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(task).detach();
    }

    fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
        blocking::unblock(work).detach();
    }
}

impl AsyncRuntime for Smol {
    async fn sleep_until(&self, at: Instant) {
        async_io::Timer::at(at).await;
    }
}
