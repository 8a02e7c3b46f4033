//! What a provider is to an adapter, and how a call and its answer flow.
//!
//! Every adapter (blocking std, tokio, smol/async-std) runs the same loop
//! around the core [`Server`]: bytes in, events out, answers in, bytes out.
//! This module is the part of that loop that does not depend on the
//! runtime, so each adapter keeps only its plumbing:
//!
//! - a [`Handler`] answers `evidence_query` and tool calls with an
//!   [`Answer`] that says *where* the work runs: [`Answer::Ready`] (already
//!   computed), [`Answer::Blocking`] (a thread of the blocking pool) or
//!   [`Answer::Async`] (a task of the executor);
//! - [`dispatch`] turns one [`ServerEvent`] into [`Work`] for the adapter:
//!   a [`Job`] to run for a ticket, a ticket to cancel, a fatal stream
//!   error, or nothing (the event was handed to [`Handler::observe`]);
//! - a [`Job`] runs to a [`Completion`], and a handler that panics still
//!   completes, with an `internal_error` result (in [`dispatch`] itself,
//!   [`Job::run_blocking`], [`Job::into_future`], [`Job::catch_blocking`],
//!   [`Job::catch_async`]), so no call is left unanswered;
//! - [`complete`] hands a completion to the server (a stdio connection's
//!   [`Server`], or the one an HTTP request's exchange lends).
//!
//! Where each kind of answer runs, in every adapter: [`Answer::Ready`] is
//! answered where the event was read, with no hand-off;
//! [`Answer::Blocking`] on the runtime's blocking pool (the blocking
//! adapter's worker threads, tokio's `spawn_blocking`, smol's `blocking`
//! pool); [`Answer::Async`] on the executor: a task of its own, or, for
//! the call of an HTTP request on tokio, polled in the request's task that
//! waits for it (the blocking adapter drives it to the end on a worker). A
//! cancelled call's work is stopped (its task aborted, its future dropped)
//! where the runtime can.
//!
//! Every call carries a [`CallContext`] whose [`Cancellation`] the adapter
//! cancels when nobody waits for the answer any more (the peer cancelled,
//! the client went away, the drain deadline passed): a [`Job`] whose call
//! is cancelled before it starts never runs its work, and blocking work
//! that has started can see it ([`Cancellation::is_cancelled`],
//! [`Cancellation::on_cancel`]). An adapter that bounds how much work runs
//! at once ties the slot to the work itself with [`Job::hold`], so a slot
//! is given back when the work really ends, not when its caller leaves.
//!
//! Every call gets one `tracing` span, `evidence_wire::call` (fields
//! `transport`, `method`, `id`, `ticket`, `tool`, `check_id`, `trace_id`,
//! `parent_id`, `outcome`, `duration_ms`): the job's work runs inside it
//! (on the blocking pool or as a task) and it closes when the work has
//! produced the answer, with `outcome` and `duration_ms` recorded then.
//! Refusals, cancellations and fatal stream errors are events. With no
//! subscriber installed the span is disabled and costs a few branches.
//! See [`crate::trace`] for every span, event and field, and for the W3C
//! trace context a call carries ([`CallContext::trace`]).
//!
//! A [`Service`] is a server configuration and a handler, built once and
//! shared by every connection; a [`crate::Provider`] is the usual handler,
//! and turns into a service with its contract installed ([`IntoService`]).

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use std::time::{Duration, Instant};

use evidence_wire::Transport;
use evidence_wire::dialect::Dialect;
use evidence_wire::error::CanonicalError;
use evidence_wire::evidence::EVIDENCE_QUERY_TOOL;
use evidence_wire::evidence::{EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult};
use evidence_wire::frame::FrameError;
use evidence_wire::server::{
    CallInfo, Outcome, RespondError, Server, ServerConfig, ServerEvent, Ticket, ToolFailure,
};
use evidence_wire::trace::TraceContext;
use futures_lite::FutureExt as _;
use serde_json::{Map, Value};

use crate::cancel::Cancellation;

/// The `error.code` of an answer the provider itself failed to give: its
/// handler panicked or was aborted, or its result cannot be encoded as JSON.
pub const INTERNAL_ERROR: &str = "internal_error";

/// A boxed future that can move between threads.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How a handler answers one call, and where the work runs.
pub enum Answer<T> {
    /// Already computed (cheap work done where the call was read).
    Ready(T),
    /// Blocking work (files, processes, blocking network clients): run on
    /// a thread of the adapter's blocking pool.
    Blocking(Box<dyn FnOnce() -> T + Send + 'static>),
    /// Async work: a task of the adapter's executor. It must not block.
    Async(BoxFuture<T>),
}

impl<T> fmt::Debug for Answer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Answer::Ready(_) => "Answer::Ready",
            Answer::Blocking(_) => "Answer::Blocking",
            Answer::Async(_) => "Answer::Async",
        })
    }
}

impl<T: Send + 'static> Answer<T> {
    /// An answer that is ready.
    pub fn ready(value: T) -> Self {
        Answer::Ready(value)
    }

    /// An answer computed by blocking `work` on the blocking pool.
    pub fn blocking(work: impl FnOnce() -> T + Send + 'static) -> Self {
        Answer::Blocking(Box::new(work))
    }

    /// An answer computed by `future` on the executor.
    pub fn future(future: impl Future<Output = T> + Send + 'static) -> Self {
        Answer::Async(Box::pin(future))
    }

    fn map<U: Send + 'static>(self, map: fn(T) -> U) -> Answer<U> {
        match self {
            Answer::Ready(value) => Answer::Ready(map(value)),
            Answer::Blocking(work) => Answer::Blocking(Box::new(move || map(work()))),
            Answer::Async(future) => Answer::Async(Box::pin(async move { map(future.await) })),
        }
    }
}

/// Who asked: the dialect the request was spoken in, the transport it came
/// over, and whether the transport authenticated the caller.
///
/// HTTP's bearer tokens are anonymous (one shared secret, no name): an
/// authenticated caller is one that presented the configured token, and
/// the token itself is never shown here. On stdio the caller is whoever
/// started the process ([`Caller::is_authenticated`] is false: nothing
/// was checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    dialect: Dialect,
    transport: Option<Transport>,
    authenticated: bool,
}

impl Caller {
    /// A caller speaking `dialect` over `transport` (`None`: in this
    /// process, without a transport), not authenticated.
    pub fn new(dialect: Dialect, transport: Option<Transport>) -> Self {
        Caller {
            dialect,
            transport,
            authenticated: false,
        }
    }

    /// The same caller, authenticated by its transport or not.
    pub fn authenticated(mut self, authenticated: bool) -> Self {
        self.authenticated = authenticated;
        self
    }

    /// Decision Gate (no handshake, the `decision-gate` hash profile) or
    /// an MCP client.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// True when the caller speaks Decision Gate's dialect.
    pub fn is_decision_gate(&self) -> bool {
        self.dialect == Dialect::DecisionGate
    }

    /// Stdio or HTTP; `None` for a call made in this process without a
    /// transport (a test client, a handler called directly).
    pub fn transport(&self) -> Option<Transport> {
        self.transport
    }

    /// True when the transport checked who is calling: over HTTP, the
    /// request carried the configured bearer token.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }
}

impl Default for Caller {
    /// Decision Gate's dialect, in this process, not authenticated.
    fn default() -> Self {
        Caller::new(Dialect::DecisionGate, None)
    }
}

/// What an adapter knows about where its calls come from, given to
/// [`dispatch_from`] so that every call's [`CallContext`] says it: the
/// transport, whether it authenticated the caller, and how long a call
/// may take ([`ServerConfig::call_timeout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSource {
    transport: Option<Transport>,
    authenticated: bool,
    timeout: Option<Duration>,
}

impl CallSource {
    /// Calls arriving over `transport` (`None`: made in this process),
    /// unauthenticated, without a timeout.
    pub fn new(transport: Option<Transport>) -> Self {
        CallSource {
            transport,
            authenticated: false,
            timeout: None,
        }
    }

    /// The same source, whose callers the transport authenticated (or not).
    pub fn authenticated(mut self, authenticated: bool) -> Self {
        self.authenticated = authenticated;
        self
    }

    /// The same source, each call getting a deadline `timeout` after it is
    /// handed out (`None`: no deadline). Adapters pass the service's
    /// [`ServerConfig::call_timeout`].
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The context of one call from this source, spoken as `info` says.
    pub fn call(&self, info: CallInfo) -> CallContext {
        let deadline = self
            .timeout
            .and_then(|timeout| Instant::now().checked_add(timeout));
        CallContext {
            cancellation: Cancellation::new(),
            deadline,
            caller: Caller::new(info.dialect, self.transport).authenticated(self.authenticated),
            meta: info.meta.map(Arc::new),
            trace: info.trace.map(Arc::new),
        }
    }
}

/// What an adapter knows about one call besides its arguments: how it
/// learns that nobody waits for the answer any more, when the answer is
/// due, who asked, and the request's `_meta`.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct CallContext {
    cancellation: Cancellation,
    deadline: Option<Instant>,
    caller: Caller,
    meta: Option<Arc<Map<String, Value>>>,
    trace: Option<Arc<TraceContext>>,
}

impl CallContext {
    /// The context of a call that is not cancelled (yet), made in this
    /// process ([`Caller::default`]), without a deadline or `_meta`.
    pub fn new() -> Self {
        CallContext::default()
    }

    /// The same call, due at `deadline`.
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The same call, asked by `caller`.
    pub fn with_caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }

    /// The same call, whose request carried `meta` as its `_meta`.
    pub fn with_meta(mut self, meta: Map<String, Value>) -> Self {
        self.meta = Some(Arc::new(meta));
        self
    }

    /// The call's cancellation (see [`crate::cancel`]).
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// When the answer is due (`None`: the server sets no limit; see
    /// [`ServerConfig::call_timeout`]).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Who asked.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The `_meta` of the request's params, when it sent one (an object).
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.meta.as_deref()
    }

    /// The same call, carrying the caller's W3C trace context `trace`.
    pub fn with_trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(Arc::new(trace));
        self
    }

    /// The caller's W3C trace context, when it sent a valid one: the
    /// request's `_meta.traceparent` (and `tracestate`), else over HTTP
    /// its `traceparent` (and `tracestate`) headers. See [`crate::trace`].
    pub fn trace(&self) -> Option<&TraceContext> {
        self.trace.as_deref()
    }
}

/// Answers the calls of a provider: the one vocabulary every adapter
/// serves. Expected failures (a missing file, bad params) are results
/// carrying an error, never panics; a handler that panics anyway is
/// answered with an `internal_error` result.
pub trait Handler: Send + Sync + 'static {
    /// Answer one `evidence_query` (already checked against the contract
    /// when the server has one); `call` says when nobody waits for the
    /// answer any more.
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        call: CallContext,
    ) -> Answer<EvidenceResult>;

    /// Answer a call of a tool registered on the server (not
    /// `evidence_query`). The default refuses every call.
    fn tool_call(
        &self,
        name: &str,
        arguments: Value,
        call: CallContext,
    ) -> Answer<Result<Value, ToolFailure>> {
        let _ = (arguments, call);
        Answer::Ready(Err(ToolFailure::Failed(format!(
            "tool {name:?} has no handler"
        ))))
    }

    /// Every event that is not a call (validation outcomes, framing errors,
    /// cancellations): the place for diagnostics (stderr, never stdout).
    /// The default ignores them.
    fn observe(&self, event: &ServerEvent) {
        let _ = event;
    }
}

impl<H: Handler + ?Sized> Handler for Arc<H> {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        call: CallContext,
    ) -> Answer<EvidenceResult> {
        (**self).evidence_query(query, context, call)
    }

    fn tool_call(
        &self,
        name: &str,
        arguments: Value,
        call: CallContext,
    ) -> Answer<Result<Value, ToolFailure>> {
        (**self).tool_call(name, arguments, call)
    }

    fn observe(&self, event: &ServerEvent) {
        (**self).observe(event);
    }
}

/// What a finished call produced.
#[derive(Debug)]
pub enum Completion {
    /// The answer to an evidence query.
    Evidence(Box<EvidenceResult>),
    /// The answer to a tool call.
    Tool(Result<Value, ToolFailure>),
}

impl Completion {
    fn evidence(result: EvidenceResult) -> Self {
        Completion::Evidence(Box::new(result))
    }

    /// The answer of a call of `kind` whose task was aborted because the
    /// peer cancelled it (the server drops it: nothing is sent).
    pub fn cancelled(kind: CallKind) -> Self {
        Completion::failed(kind, CANCELLED)
    }

    /// The answer of a call of `kind` whose handler did not finish: it
    /// panicked, or its task was aborted.
    pub fn failed(kind: CallKind, reason: &str) -> Self {
        match kind {
            CallKind::Evidence => Completion::evidence(EvidenceResult::with_error(
                EvidenceError::new(INTERNAL_ERROR, reason),
            )),
            CallKind::Tool => Completion::Tool(Err(ToolFailure::Failed(reason.to_owned()))),
        }
    }
}

/// Which kind of call a job answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// `evidence_query`.
    Evidence,
    /// Another tool.
    Tool,
}

/// The work of one call: where it runs, what it answers, and the call's
/// cancellation.
#[derive(Debug)]
pub struct Job {
    kind: CallKind,
    answer: Answer<Completion>,
    cancellation: Cancellation,
    span: tracing::Span,
}

/// The reason of the `internal_error` answer to a call whose handler panicked.
const PANICKED: &str = "the provider's handler panicked while answering; see its log";

/// The reason of the answer to a call whose task was aborted.
const CANCELLED: &str = "the call was cancelled";

impl Job {
    /// The job of a call of `kind` whose answer `start` builds (given the
    /// call's context); a panic while building it makes the job an
    /// `internal_error` answer.
    ///
    /// `span` is the call's span: the answer is built inside it, the work
    /// runs inside it, and `outcome`/`duration_ms` are recorded on it when
    /// the work has produced the completion (nothing is done when no
    /// subscriber wants it).
    fn guarded(
        kind: CallKind,
        span: tracing::Span,
        call: CallContext,
        start: impl FnOnce(CallContext) -> Answer<Completion>,
    ) -> Self {
        let cancellation = call.cancellation.clone();
        let started = (!span.is_disabled()).then(Instant::now);
        let answer = span
            .in_scope(|| std::panic::catch_unwind(AssertUnwindSafe(move || start(call))))
            .unwrap_or_else(|_| Answer::Ready(Completion::failed(kind, PANICKED)));
        let answer = match started {
            None => answer,
            Some(started) => Job::traced(kind, answer, span.clone(), started),
        };
        Job {
            kind,
            answer,
            cancellation,
            span,
        }
    }

    /// `answer` running inside `span`, recording its outcome and duration
    /// there when it completes (a panic of the work is answered here, so
    /// it is recorded too). Only called when the span is enabled.
    fn traced(
        kind: CallKind,
        answer: Answer<Completion>,
        span: tracing::Span,
        started: Instant,
    ) -> Answer<Completion> {
        match answer {
            Answer::Ready(completion) => {
                record_completion(&span, &completion, started);
                Answer::Ready(completion)
            }
            Answer::Blocking(work) => Answer::Blocking(Box::new(move || {
                let completion = span.in_scope(|| Job::catch_blocking(kind, work));
                record_completion(&span, &completion, started);
                completion
            })),
            Answer::Async(future) => {
                let inner = span.clone();
                let future = tracing::Instrument::instrument(Job::catch_async(kind, future), inner);
                Answer::Async(Box::pin(async move {
                    let completion = future.await;
                    record_completion(&span, &completion, started);
                    completion
                }))
            }
        }
    }

    /// The call's `evidence_wire::call` span (disabled when no subscriber
    /// wants it): an adapter may enter it or record on it.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Which kind of call it answers.
    pub fn kind(&self) -> CallKind {
        self.kind
    }

    /// True when the work is [`Answer::Blocking`]: it needs a thread of the
    /// blocking pool, and nothing can stop it from outside once it runs.
    pub fn is_blocking(&self) -> bool {
        matches!(self.answer, Answer::Blocking(_))
    }

    /// The call's cancellation: cancel it when nobody waits for the answer
    /// any more. Work not started yet then never starts (it completes as
    /// [`Completion::cancelled`]); started blocking work can see it.
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// Ties `guard` to the work: it is dropped when the work really ends
    /// (blocking work returns, async work completes or is dropped), or at
    /// once for a ready answer. What an adapter uses to count running
    /// work rather than waiting callers: a slot held this way stays taken
    /// while a check whose caller left still runs.
    pub fn hold<G: Send + 'static>(self, guard: G) -> Job {
        let answer = match self.answer {
            Answer::Ready(completion) => {
                drop(guard);
                Answer::Ready(completion)
            }
            Answer::Blocking(work) => Answer::Blocking(Box::new(move || {
                let _guard = guard;
                work()
            })),
            Answer::Async(future) => Answer::Async(Box::pin(async move {
                let _guard = guard;
                future.await
            })),
        };
        Job { answer, ..self }
    }

    /// Where the work runs; the adapter matches on it once.
    pub fn into_answer(self) -> Answer<Completion> {
        self.answer
    }

    /// The completion, when the job is [`Answer::Ready`] (answer it where
    /// the call was read); else the job back, to run elsewhere.
    pub fn into_ready(self) -> Result<Completion, Job> {
        match self.answer {
            Answer::Ready(completion) => Ok(completion),
            answer => Err(Job { answer, ..self }),
        }
    }

    /// Where the work runs, each kind already answering a panic with an
    /// `internal_error` result and never starting once the call is
    /// cancelled: what an adapter hands to its blocking pool
    /// ([`Answer::Blocking`]) or executor ([`Answer::Async`]).
    pub fn into_guarded(self) -> Answer<Completion> {
        let kind = self.kind;
        let cancellation = self.cancellation;
        match self.answer {
            Answer::Ready(completion) => Answer::Ready(completion),
            Answer::Blocking(work) => Answer::Blocking(Box::new(move || {
                if cancellation.is_cancelled() {
                    return Completion::cancelled(kind);
                }
                Job::catch_blocking(kind, work)
            })),
            Answer::Async(future) => Answer::Async(Box::pin(async move {
                if cancellation.is_cancelled() {
                    return Completion::cancelled(kind);
                }
                Job::catch_async(kind, future).await
            })),
        }
    }

    /// Runs the job on this thread to its completion: blocking work is
    /// called, async work is driven to the end here (a cancelled call's
    /// work is not started). A panic is caught and answered as a failure.
    pub fn run_blocking(self) -> Completion {
        let kind = self.kind;
        if self.cancellation.is_cancelled() {
            return Completion::cancelled(kind);
        }
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(move || match self.answer {
            Answer::Ready(completion) => completion,
            Answer::Blocking(work) => work(),
            Answer::Async(future) => futures_lite::future::block_on(future),
        }));
        outcome.unwrap_or_else(|_| Completion::failed(kind, PANICKED))
    }

    /// The job as a future for the executor. A panic while it is polled is
    /// caught and answered as a failure. Blocking work belongs on the
    /// blocking pool: an adapter matches [`Job::into_answer`] first and
    /// only turns [`Answer::Async`] work into a task.
    pub fn into_future(self) -> BoxFuture<Completion> {
        let kind = self.kind;
        match self.answer {
            Answer::Ready(completion) => Box::pin(std::future::ready(completion)),
            Answer::Blocking(work) => Box::pin(async move {
                std::panic::catch_unwind(AssertUnwindSafe(work))
                    .unwrap_or_else(|_| Completion::failed(kind, PANICKED))
            }),
            Answer::Async(future) => Box::pin(async move {
                AssertUnwindSafe(future)
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Completion::failed(kind, PANICKED))
            }),
        }
    }

    /// Catches a panic of blocking work (for adapters that run
    /// [`Answer::Blocking`] on their own pool).
    pub fn catch_blocking(
        kind: CallKind,
        work: Box<dyn FnOnce() -> Completion + Send + 'static>,
    ) -> Completion {
        std::panic::catch_unwind(AssertUnwindSafe(work))
            .unwrap_or_else(|_| Completion::failed(kind, PANICKED))
    }

    /// Catches a panic of async work while it is polled.
    pub fn catch_async(kind: CallKind, future: BoxFuture<Completion>) -> BoxFuture<Completion> {
        Box::pin(async move {
            AssertUnwindSafe(future)
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Completion::failed(kind, PANICKED))
        })
    }
}

/// What an adapter does about one server event.
#[derive(Debug)]
#[non_exhaustive]
pub enum Work {
    /// Run `job` and answer `ticket` with its completion ([`complete`]).
    Run {
        /// The call's ticket.
        ticket: Ticket,
        /// Its work.
        job: Job,
    },
    /// The peer cancelled `ticket`: cancel its job's [`Job::cancellation`]
    /// (with [`crate::CancelReason::Peer`]) and abort it if the runtime can (the
    /// server drops a late answer for it anyway).
    Cancel {
        /// The cancelled ticket.
        ticket: Ticket,
    },
    /// The input stream broke beyond repair: stop reading, answer what is
    /// in flight, then stop.
    Fatal(FrameError),
    /// Nothing to do: the event went to [`Handler::observe`].
    Observed,
}

/// Turns one server event into work: calls go to the handler (which says
/// where their work runs), every other event to [`Handler::observe`]
/// (cancellations and fatal errors are observed too). Each call's
/// [`CallContext`] says it was made in this process (no transport),
/// without a deadline: an adapter uses [`dispatch_from`].
///
/// A handler method that panics while it builds its answer (an inline
/// check computes its result right here) still yields a job: its answer is
/// an `internal_error` result. [`Handler::observe`] is not guarded: a hook
/// that panics is the adapter's to report.
pub fn dispatch<H: Handler + ?Sized>(handler: &H, event: ServerEvent) -> Work {
    dispatch_from(handler, event, &CallSource::new(None))
}

/// [`dispatch`], each call's [`CallContext`] made by `source`: its
/// transport and authentication, its deadline (from the source's timeout),
/// and what the server read from the request (the dialect, `_meta`).
pub fn dispatch_from<H: Handler + ?Sized>(
    handler: &H,
    event: ServerEvent,
    source: &CallSource,
) -> Work {
    match event {
        ServerEvent::EvidenceQuery {
            ticket,
            query,
            context,
            call,
        } => Work::Run {
            ticket,
            job: Job::guarded(
                CallKind::Evidence,
                call_span(
                    source,
                    ticket,
                    &call,
                    EVIDENCE_QUERY_TOOL,
                    Some(&query.check_id),
                ),
                source.call(call),
                |call| {
                    handler
                        .evidence_query(query, context, call)
                        .map(Completion::evidence)
                },
            ),
        },
        ServerEvent::ToolCall {
            ticket,
            name,
            arguments,
            call,
        } => Work::Run {
            ticket,
            job: Job::guarded(
                CallKind::Tool,
                call_span(source, ticket, &call, &name, None),
                source.call(call),
                |call| {
                    handler
                        .tool_call(&name, arguments, call)
                        .map(Completion::Tool)
                },
            ),
        },
        ServerEvent::Cancelled { ticket, reason } => {
            tracing::debug!(
                target: "evidence_wire::call",
                transport = source.transport.map(Transport::as_str),
                ticket = ticket.get(),
                reason = reason.as_deref(),
                "the peer cancelled a call",
            );
            let event = ServerEvent::Cancelled { ticket, reason };
            handler.observe(&event);
            Work::Cancel { ticket }
        }
        ServerEvent::Fatal(error) => {
            tracing::warn!(
                target: "evidence_wire::stream",
                transport = source.transport.map(Transport::as_str),
                error = %error,
                "the input stream broke beyond repair: answering what is in flight, then stopping",
            );
            let work = Work::Fatal(error.clone());
            handler.observe(&ServerEvent::Fatal(error));
            work
        }
        other => {
            if let ServerEvent::Handled(outcome) = &other {
                // Answered with an error, or with a note (a call the
                // contract refused is answered with an evidence error).
                if outcome.error.is_some() || outcome.detail.is_some() {
                    refused(source, outcome);
                }
            }
            handler.observe(&other);
            Work::Observed
        }
    }
}

/// The `evidence_wire::refusal` event of a message answered with an error
/// (or, as a call the contract refused, with an evidence error): INFO when
/// a limit was reached (the server is overloaded or draining), DEBUG when
/// the message itself was refused.
fn refused(source: &CallSource, outcome: &Outcome) {
    macro_rules! refusal {
        ($level:expr, $message:literal) => {
            tracing::event!(
                target: "evidence_wire::refusal",
                $level,
                transport = source.transport.map(Transport::as_str),
                id = outcome.id.as_ref().map(tracing::field::display),
                method = outcome.method.as_deref(),
                tool = outcome.tool.as_deref(),
                error = outcome.error.map(CanonicalError::name),
                detail = outcome.detail.as_deref(),
                trace_id = outcome.trace_id.map(tracing::field::display),
                $message,
            )
        };
    }
    if outcome.error == Some(CanonicalError::Overloaded) {
        refusal!(tracing::Level::INFO, "call refused: a limit was reached");
    } else {
        refusal!(tracing::Level::DEBUG, "message refused");
    }
}

/// The `evidence_wire::call` span of the call `ticket` of `tool` (and of
/// `check_id` for an evidence query) from `source`, as `call` describes
/// it. The fields are only captured when a subscriber enables the span
/// (and only then is it linked to the caller's trace,
/// [`crate::trace::set_remote_parent`]); `outcome` and `duration_ms` are
/// recorded later.
fn call_span(
    source: &CallSource,
    ticket: Ticket,
    call: &CallInfo,
    tool: &str,
    check_id: Option<&str>,
) -> tracing::Span {
    let trace = call.trace.as_ref();
    let span = tracing::info_span!(
        target: "evidence_wire::call",
        "evidence_wire::call",
        transport = source.transport.map(Transport::as_str),
        method = "tools/call",
        id = call.id.as_ref().map(tracing::field::display),
        ticket = ticket.get(),
        tool = tool,
        check_id = check_id,
        trace_id = trace.map(|trace| tracing::field::display(trace.trace_id())),
        parent_id = trace.map(|trace| tracing::field::display(trace.parent_id())),
        outcome = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    );
    if let Some(trace) = trace {
        if !span.is_disabled() {
            crate::trace::link_remote_parent(&span, trace);
        }
    }
    span
}

/// Records on `span` how the call ended (`ok`, `error`: the answer
/// carries an error) and how long its work took.
fn record_completion(span: &tracing::Span, completion: &Completion, started: Instant) {
    let outcome = match completion {
        Completion::Evidence(result) if result.error.is_none() => "ok",
        Completion::Tool(Ok(_)) => "ok",
        Completion::Evidence(_) | Completion::Tool(Err(_)) => "error",
    };
    span.record("outcome", outcome);
    let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    span.record("duration_ms", millis);
}

/// Hands `completion` to the server as the answer of `ticket` (over HTTP,
/// the exchange's server). A ticket the peer cancelled (or an unknown one)
/// is refused: nothing is sent.
pub fn complete(
    server: &mut Server,
    ticket: Ticket,
    completion: Completion,
) -> Result<(), RespondError> {
    match completion {
        Completion::Evidence(result) => server.respond(ticket, *result),
        Completion::Tool(result) => server.respond_tool(ticket, result),
    }
}

/// A server configuration and the handler that answers its calls: what an
/// adapter serves. Built once; every connection shares it.
#[derive(Clone)]
pub struct Service {
    config: Arc<ServerConfig>,
    handler: Arc<dyn Handler>,
}

impl fmt::Debug for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Service")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// `handler` serving under `config`.
    pub fn new(config: impl Into<Arc<ServerConfig>>, handler: impl Handler) -> Self {
        Service {
            config: config.into(),
            handler: Arc::new(handler),
        }
    }

    /// The server configuration every connection shares.
    pub fn config(&self) -> &Arc<ServerConfig> {
        &self.config
    }

    /// The configuration, to adjust before serving (limits, policy,
    /// signing key, tools and resources); copied first if a connection
    /// already shares it.
    pub fn config_mut(&mut self) -> &mut ServerConfig {
        Arc::make_mut(&mut self.config)
    }

    /// Signs every result that carries a value with the ed25519 secret
    /// seed in the file `path` (what `evidence-wire keygen --out PREFIX`
    /// writes to PREFIX), under `key_id` (for Decision Gate: the public
    /// key's path exactly as its `require_signature` `keys` list writes
    /// it); see [`crate::signing`]. The error names the file and what is
    /// wrong with it.
    #[cfg(feature = "signatures")]
    #[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
    pub fn signing_key_file(
        mut self,
        path: impl AsRef<std::path::Path>,
        key_id: impl Into<String>,
    ) -> Result<Self, crate::signing::SigningKeyError> {
        self.config_mut().signer = Some(crate::signing::signer_from_file(path, key_id)?);
        Ok(self)
    }

    /// [`Service::signing_key_file`] with the key file's contents (32 raw
    /// bytes or 64 hex digits) in `bytes`.
    #[cfg(feature = "signatures")]
    #[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
    pub fn signing_key(
        mut self,
        bytes: &[u8],
        key_id: impl Into<String>,
    ) -> Result<Self, crate::signing::SigningKeyError> {
        self.config_mut().signer = Some(crate::signing::signer_from_bytes(bytes, key_id)?);
        Ok(self)
    }

    /// The handler.
    pub fn handler(&self) -> &Arc<dyn Handler> {
        &self.handler
    }

    /// Where an adapter's calls over `transport` come from: the source
    /// [`dispatch_from`] makes each call's context with, its timeout the
    /// configuration's [`ServerConfig::call_timeout`].
    pub fn call_source(&self, transport: Transport) -> CallSource {
        CallSource::new(Some(transport)).timeout(self.config.call_timeout)
    }

    /// A fresh connection of this service (cheap: the configuration is shared).
    pub fn connection(&self) -> Server {
        Server::new(Arc::clone(&self.config))
    }
}

/// Anything an adapter can serve: a [`Service`], or a
/// [`crate::Provider`] (its contract installed in a default configuration).
pub trait IntoService {
    /// The service, or why it cannot be built (a provider whose declared
    /// contract is invalid).
    fn into_service(self) -> Result<Service, ServeError>;
}

impl IntoService for Service {
    fn into_service(self) -> Result<Service, ServeError> {
        Ok(self)
    }
}

/// Why serving stopped with an error.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The service could not be built (e.g. the provider's contract is
    /// invalid: a check's example does not match its schema).
    Service(String),
    /// Reading input failed.
    Read(std::io::Error),
    /// Writing answers failed (the peer closed its input).
    Write(std::io::Error),
    /// The input stream broke beyond repair (a fatal framing error); the
    /// answers in flight were still written.
    Fatal(String),
    /// A server thread could not be started (the system is out of threads
    /// or memory); nothing was served.
    Spawn(std::io::Error),
    /// A hook called where the server's state is held
    /// ([`Handler::observe`], or the validation log) panicked; serving
    /// stopped because that state can no longer be trusted. Fix the hook.
    HookPanicked(String),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Service(detail) => write!(f, "cannot serve: {detail}"),
            ServeError::Read(error) => write!(f, "cannot read from the peer: {error}"),
            ServeError::Write(error) => write!(f, "cannot write to the peer: {error}"),
            ServeError::Fatal(detail) => write!(f, "input stream broken: {detail}"),
            ServeError::Spawn(error) => write!(f, "cannot start a server thread: {error}"),
            ServeError::HookPanicked(detail) => {
                write!(f, "a handler hook panicked, serving stopped: {detail}")
            }
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Read(error) | ServeError::Write(error) | ServeError::Spawn(error) => {
                Some(error)
            }
            _ => None,
        }
    }
}
