//! A child-process provider client on blocking I/O.
//!
//! The loop around the core's sans-IO restart supervisor
//! ([`evidence_wire::supervisor::Supervisor`], which owns the
//! [`Client`](evidence_wire::client::Client) state machine) is the SDK's
//! [`ChildLoop`]: it runs on a thread of its own and waits for its events
//! with the supervisor's next deadline. This file is plumbing only:
//! [`Threads`], the runtime the loop runs on here, gives every pump a
//! thread of its own (the child's stdout, stdin and stderr each have one),
//! so a child that stops reading can never block the loop: the request
//! times out and the child is restarted. Neither can the log sink: stderr
//! lines go through the never-blocking [`StderrRelay`] to the
//! [`LogSink`](evidence_wire_provider::caller::LogSink). The restart policy
//! lives in the core, the settings, errors, the loop and the ending of a
//! child's process group in [`evidence_wire_provider::caller`].
//!
//! When the child exits, closes its output, desynchronizes its stream or
//! leaves a request unanswered past its timeout without answering anything
//! since it was sent (it looks hung), the affected requests fail
//! with a typed error and the child is restarted with bounded exponential
//! backoff (reset by any answer of the child). Queries that arrive while the
//! child is down wait for the fresh child, but never longer than their own
//! timeout; when the child cannot be started they fail with
//! [`ProviderError::Spawn`]. No request is silently lost or answered twice:
//! every call of [`ProcessProvider::query`] gets exactly one outcome. Each
//! child leads a process group of its own, ended as a whole (SIGTERM,
//! [`TERM_GRACE`], SIGKILL) when it is restarted or the provider dropped.
//!
//! Limits: stderr is read in lines of at most 64 KiB and relayed under
//! [`ProcessConfig::stderr_limits`] (default: 16 KiB at once, then 2 KiB/s,
//! lines cut at 1 KiB, the rest dropped and summarised); the child's output
//! is read in 64 KiB chunks of which at most [`OUTPUT_QUEUE`] wait for the
//! loop (a child writing faster than it is decoded is slowed down, never
//! buffered without end); frame limits come from [`ClientConfig::limits`];
//! at most [`MAX_SKIPPED_LOGGED`] ignored messages are logged per child.
//!
//! [`MAX_SKIPPED_LOGGED`]: evidence_wire::supervisor::SupervisorConfig::MAX_SKIPPED_LOGGED
//! [`StderrRelay`]: evidence_wire_provider::caller::relay::StderrRelay
//! [`TERM_GRACE`]: evidence_wire_provider::caller::TERM_GRACE
//! [`ClientConfig::limits`]: evidence_wire::client::ClientConfig::limits
//! [`OUTPUT_QUEUE`]: evidence_wire_provider::caller::child_loop::OUTPUT_QUEUE

use std::future::Future;
use std::io;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus};
use std::thread;

use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use evidence_wire::trace::TraceContext;
use evidence_wire_provider::caller::child_loop::{ChildLoop, LoopHandle};
use evidence_wire_provider::caller::runtime::{Piped, Runtime};
use evidence_wire_provider::caller::{ProcessConfig, ProviderError};
use futures_lite::io::AssertAsync;

#[cfg(doc)]
use {
    evidence_wire::client::ClientConfig, evidence_wire_provider::caller::child_loop::OUTPUT_QUEUE,
};

/// A provider running as a child process. Cheap to clone; every clone
/// talks to the same child. Dropping the last clone stops the child.
#[derive(Clone, Debug)]
pub struct ProcessProvider {
    handle: LoopHandle,
}

impl ProcessProvider {
    /// Start the loop's thread and the child. Fails when the child cannot
    /// be started the first time.
    pub fn spawn(config: ProcessConfig) -> Result<Self, ProviderError> {
        let (child_loop, handle) = ChildLoop::start(&config, Threads)?;
        thread::Builder::new()
            .name("evidence-wire-provider".into())
            .spawn(move || child_loop.run_blocking())
            .map_err(|source| ProviderError::Spawn {
                command: config.command,
                source,
            })?;
        Ok(ProcessProvider { handle })
    }

    /// Ask one query and wait for its verified answer (or its typed failure).
    pub fn query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
    ) -> Result<VerifiedEvidence, ProviderError> {
        self.handle.ask(query, context)?.wait()
    }

    /// [`ProcessProvider::query`] continuing the caller's W3C trace: with
    /// `trace`, the request carries it in `params._meta.traceparent` (and
    /// `tracestate`); without one the request is exactly
    /// [`ProcessProvider::query`]'s.
    pub fn query_traced(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        trace: Option<TraceContext>,
    ) -> Result<VerifiedEvidence, ProviderError> {
        self.handle.ask_traced(query, context, trace)?.wait()
    }
}

/// Threads and `std::process`: every task runs on a thread of its own
/// under `block_on`, its pipes' reads and writes blocking that thread only.
#[derive(Clone, Copy, Debug)]
struct Threads;

/// A std child, killed when dropped (a reaped one is not signalled).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
    }
}

impl Runtime for Threads {
    type Child = Killed;
    type Stdin = AssertAsync<ChildStdin>;
    type Stdout = AssertAsync<ChildStdout>;
    type Stderr = AssertAsync<ChildStderr>;

    fn spawn_child(&self, mut command: Command) -> io::Result<Piped<Self>> {
        let mut child = command.spawn()?;
        let id = Some(child.id());
        let stdin = child.stdin.take().map(AssertAsync::new);
        let stdout = child.stdout.take().map(AssertAsync::new);
        let stderr = child.stderr.take().map(AssertAsync::new);
        Piped::new(Killed(child), id, stdin, stdout, stderr)
    }

    fn try_wait(child: &mut Killed) -> io::Result<Option<ExitStatus>> {
        child.0.try_wait()
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.spawn_blocking(move || futures_lite::future::block_on(task));
    }

    fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
        // Without a thread (resources exhausted) the work is dropped undone:
        // a child without its pumps looks hung and is restarted.
        let _ = thread::Builder::new()
            .name("evidence-wire-provider-io".into())
            .spawn(work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_command_is_a_spawn_error() {
        let error = ProcessProvider::spawn(ProcessConfig::new(Vec::new()))
            .err()
            .map(|error| matches!(error, ProviderError::Spawn { .. }));
        assert_eq!(error, Some(true));
    }
}
