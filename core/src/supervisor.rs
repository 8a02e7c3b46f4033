//! Restart supervision of a child-process provider (sans-IO).
//!
//! A [`Supervisor`] owns the caller-side [`Client`] of one provider that
//! runs as a child process, and the policy around it that every runtime
//! adapter shares:
//!
//! - a query asked while the child is up goes to the client; one asked
//!   while it is down (restart backoff, spawn in progress) is *deferred*
//!   and goes to the fresh child when it starts, but never waits past its
//!   own deadline (`now + request_timeout_ms`): then it fails with
//!   [`QueryError::Timeout`];
//! - a query that times out fails with [`QueryError::Timeout`] (the child
//!   is told with `notifications/cancelled`). If the child has answered
//!   nothing since that query was sent it looks hung: like a broken stream
//!   (end of output, fatal framing error, refused handshake), this stops
//!   the child ([`Action::Kill`]), fails what it still owed with
//!   [`QueryError::ConnectionLost`], and schedules a restart after a
//!   bounded exponential backoff ([`RestartPolicy::delay_ms`]:
//!   `initial * 2^failures`, at most `max`). If it has answered other
//!   queries since, it is alive and only that check was slow: it keeps
//!   running, and the queries in flight keep waiting for their answers;
//! - the count of consecutive failures is reset by any answer the child
//!   gives (evidence, a provider error, even an unverifiable result or one
//!   dropped unread for a limit but carrying the query's id: the child is
//!   alive and in sync);
//! - when the child cannot be started ([`Supervisor::spawn_failed`]), the
//!   deferred queries fail with that reason and the next attempt is
//!   scheduled with backoff;
//! - ignored provider messages are logged at most [`SupervisorConfig::MAX_SKIPPED_LOGGED`]
//!   times per child, the rest only counted.
//!
//! The adapter keeps only plumbing. Each query carries an opaque payload
//! `T` (the adapter's reply channel) that comes back exactly once, in an
//! [`Action::Answer`]. The adapter feeds what happens ([`Supervisor::query`],
//! [`Supervisor::cancel`], [`Supervisor::handle_input`],
//! [`Supervisor::handle_timeout`], [`Supervisor::child_started`],
//! [`Supervisor::spawn_failed`], [`Supervisor::child_exited`],
//! [`Supervisor::shutdown`]), then drains [`Supervisor::poll_action`]
//! (spawning, killing, answering, logging as told, in order) and
//! [`Supervisor::poll_transmit`] (bytes for the child's stdin), and sleeps
//! until [`Supervisor::poll_timeout`].
//!
//! Time is injected as milliseconds of any monotonic clock, the same one
//! for every call. Nothing here spawns, reads a clock or blocks.
//!
//! The protocol settings of a process provider ([`SupervisorConfig`]: the
//! client settings and the restart backoff) and the mapping of a
//! [`Failure`] to the `EvidenceResult` Decision Gate records
//! ([`Failure::to_evidence_result`]) live here too, so every adapter shares
//! them. The adapter's own spawn error `E` travels in [`Failure::Spawn`]
//! to every query that waited for the child that could not be started
//! (default: its message as a `String`).
//!
//! Limits: the supervisor buffers nothing the client does not (frame limits
//! from [`ClientConfig::limits`]); the deferred queue holds what callers
//! asked while the child was down, each for at most its timeout; log lines
//! about ignored messages are capped per child.
//!
//! # Driving it
//!
//! One loop per provider process, the poll order fixed:
//!
//! 1. **Feed** what happened: [`Supervisor::query`] for a new question;
//!    after an [`Action::Spawn`], [`Supervisor::child_started`] or
//!    [`Supervisor::spawn_failed`]; the child's stdout bytes with
//!    [`Supervisor::handle_input`] ([`Supervisor::handle_end_of_input`] when
//!    it closes, [`Supervisor::child_exited`] when it exits);
//!    [`Supervisor::handle_timeout`] once [`Supervisor::poll_timeout`]'s
//!    deadline has passed.
//! 2. **Act, until `None`:** [`Supervisor::poll_action`], in order (spawn,
//!    kill, answer a waiter, log).
//! 3. **Write, until `None`:** [`Supervisor::poll_transmit`] to the child's
//!    stdin.
//! 4. **Sleep** until the next input or [`Supervisor::poll_timeout`].
//!
//! The "child" below is an in-memory [`Server`](crate::server::Server), so
//! the run needs no process; an adapter spawns a real one on
//! [`Action::Spawn`] and moves the same bytes over pipes.
//!
//! ```
//! use evidence_wire::client::ClientConfig;
//! use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime};
//! use evidence_wire::server::{Server, ServerConfig, ServerEvent};
//! use evidence_wire::supervisor::{Action, RestartPolicy, Supervisor};
//!
//! let mut supervisor: Supervisor<&str> =
//!     Supervisor::new(ClientConfig::default(), RestartPolicy::new(100, 5_000));
//! let mut child: Option<Server> = None;
//! let query = EvidenceQuery::new("p", "answer");
//! let context = EvidenceContext::adhoc(TriggerTime::Logical(1));
//! // 1. feed: the child is down, so the supervisor asks for one.
//! supervisor.query(query, context, "the caller's reply channel", 0);
//! let mut answer = None;
//! for now in 0..10 {
//!     // 2. act on every action, in order.
//!     while let Some(action) = supervisor.poll_action() {
//!         match action {
//!             Action::Spawn => {
//!                 child = Some(Server::new(ServerConfig::default()));
//!                 supervisor.child_started(now);
//!             }
//!             Action::Kill => child = None,
//!             Action::Answer { payload, outcome } => answer = Some((payload, outcome)),
//!             Action::Log(line) => eprintln!("{line}"),
//!             _ => {}
//!         }
//!     }
//!     let Some(server) = child.as_mut() else { continue };
//!     // 3. write to the child's stdin (here: straight into the server) ...
//!     while let Some(bytes) = supervisor.poll_transmit() {
//!         server.handle_input(&bytes);
//!     }
//!     // ... which answers, and its stdout is fed back (1. again).
//!     while let Some(event) = server.poll_event() {
//!         if let ServerEvent::EvidenceQuery { ticket, .. } = event {
//!             let value = EvidenceValue::json(&42)?;
//!             server.respond(ticket, EvidenceResult::with_value(value)).expect("in flight");
//!         }
//!     }
//!     while let Some(bytes) = server.poll_transmit() {
//!         supervisor.handle_input(&bytes, now);
//!     }
//! }
//! let (payload, outcome) = answer.expect("answered within the loop");
//! assert_eq!(payload, "the caller's reply channel");
//! let evidence = outcome.expect("verified evidence");
//! assert_eq!(evidence.result().value, Some(EvidenceValue::json(&42)?));
//! assert!(evidence.hash().is_some());
//! # Ok::<(), serde_json::Error>(())
//! ```

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use crate::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId};
use crate::evidence::{
    EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, VerifiedEvidence,
};
use crate::trace::TraceContext;

/// The `error.code` of a query that got no answer because the provider is
/// not there: its process could not be started, or the client was shut
/// down ([`Failure::to_evidence_result`]).
pub const PROVIDER_UNAVAILABLE: &str = "provider_unavailable";

/// When to restart a child that failed: after `backoff_initial_ms`,
/// doubling after each consecutive failure, at most `backoff_max_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestartPolicy {
    /// First restart delay in milliseconds.
    pub backoff_initial_ms: u64,
    /// Largest restart delay in milliseconds.
    pub backoff_max_ms: u64,
}

impl RestartPolicy {
    /// Delays from `backoff_initial_ms` doubling up to `backoff_max_ms`.
    pub fn new(backoff_initial_ms: u64, backoff_max_ms: u64) -> Self {
        RestartPolicy {
            backoff_initial_ms,
            backoff_max_ms,
        }
    }

    /// The delay before the restart that follows `failures` consecutive
    /// failures: `initial * 2^failures` (the exponent capped at 16), at
    /// most `max`, without overflow.
    pub fn delay_ms(&self, failures: u32) -> u64 {
        self.backoff_initial_ms
            .saturating_mul(1u64 << failures.min(16))
            .min(self.backoff_max_ms)
    }
}

impl Default for RestartPolicy {
    /// 50 ms doubling to 5 s.
    fn default() -> Self {
        RestartPolicy::new(50, 5_000)
    }
}

/// The protocol settings of a provider run as a child process, whatever
/// the runtime: how to talk to it and how soon to restart it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SupervisorConfig {
    /// The protocol settings (framing, timeouts, trust, handshake).
    pub client: ClientConfig,
    /// First restart delay (default 50 ms); doubles after each consecutive
    /// failure.
    pub restart_backoff_initial: Duration,
    /// Largest restart delay (default 5 s).
    pub restart_backoff_max: Duration,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            client: ClientConfig::default(),
            restart_backoff_initial: Duration::from_millis(50),
            restart_backoff_max: Duration::from_secs(5),
        }
    }
}

impl SupervisorConfig {
    /// Ignored (unparsable, unknown, late) provider messages logged per child;
    /// the rest are counted, so a child flooding its output with junk cannot
    /// flood the log.
    pub const MAX_SKIPPED_LOGGED: u32 = 16;

    /// The same settings with `client`.
    pub fn with_client(mut self, client: ClientConfig) -> Self {
        self.client = client;
        self
    }

    /// The same settings with restart delays from `initial` doubling up to
    /// `max` (a `max` below `initial` counts as `initial`).
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.restart_backoff_initial = initial;
        self.restart_backoff_max = max.max(initial);
        self
    }

    /// The restart backoff in the supervisor's milliseconds (saturating).
    pub fn restart_policy(&self) -> RestartPolicy {
        let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        RestartPolicy::new(
            millis(self.restart_backoff_initial),
            millis(self.restart_backoff_max),
        )
    }
}

/// Identifies one query of a [`Supervisor`] (to cancel it); unique per
/// supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueryTicket(u64);

impl QueryTicket {
    /// The ticket as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// Why a supervised query produced no evidence. `E` is the adapter's spawn
/// error (default: its message).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure<E = String> {
    /// The query itself failed (provider error, bad answer, verification,
    /// timeout, lost connection, cancelled).
    #[error(transparent)]
    Query(QueryError),
    /// The child it waited for could not be started; the error is the one
    /// given to [`Supervisor::spawn_failed`].
    #[error("{0}")]
    Spawn(E),
    /// The supervisor was shut down before the query was sent.
    #[error("the provider client has shut down")]
    ShutDown,
}

impl<E: fmt::Display> Failure<E> {
    /// A stable machine-readable name of the failure: the query error's
    /// code, or [`PROVIDER_UNAVAILABLE`].
    pub fn code(&self) -> &'static str {
        match self {
            Failure::Query(error) => error.code(),
            Failure::Spawn(_) | Failure::ShutDown => PROVIDER_UNAVAILABLE,
        }
    }

    /// The failure as an EvidenceResult carrying an error (what Decision
    /// Gate records), as [`QueryError::to_evidence_result`] does for a
    /// query error.
    pub fn to_evidence_result(&self) -> EvidenceResult {
        match self {
            Failure::Query(error) => error.to_evidence_result(),
            other => {
                EvidenceResult::with_error(EvidenceError::new(other.code(), other.to_string()))
            }
        }
    }
}

/// What the adapter must do next, in order.
#[derive(Debug)]
#[non_exhaustive]
// `Answer` is the common action and is moved once to its waiter; boxing it
// would cost an allocation per answer for no gain.
#[allow(clippy::large_enum_variant)]
pub enum Action<T, E = String> {
    /// Start a child now, then report [`Supervisor::child_started`] or
    /// [`Supervisor::spawn_failed`] (before feeding anything else).
    Spawn,
    /// Stop the current child (kill it and stop reading its output: the
    /// supervisor ignores whatever it still wrote).
    Kill,
    /// The one outcome of the query that carried `payload`.
    Answer {
        /// The payload given to [`Supervisor::query`].
        payload: T,
        /// Verified evidence, or why there is none.
        outcome: Result<VerifiedEvidence, Failure<E>>,
    },
    /// A line for the adapter's log.
    Log(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Child {
    /// No child; a restart may be scheduled.
    Down,
    /// [`Action::Spawn`] was issued; waiting for the adapter's report.
    Starting,
    /// A child is running.
    Up,
}

#[derive(Debug)]
struct Deferred<T> {
    ticket: QueryTicket,
    query: EvidenceQuery,
    context: EvidenceContext,
    trace: Option<TraceContext>,
    payload: T,
    deadline: u64,
}

/// Supervises one child-process provider. See the module docs. `T` is the
/// payload each query carries back, `E` the adapter's spawn error.
#[derive(Debug)]
pub struct Supervisor<T, E = String> {
    client: Client,
    policy: RestartPolicy,
    request_timeout_ms: u64,
    child: Child,
    restart_at: Option<u64>,
    failures: u32,
    skipped: u32,
    next_ticket: u64,
    /// Counts sends and answers: their order, exact at any clock resolution.
    events: u64,
    /// Position (in `events`) of the current child's last answer (any
    /// answer, even an error: it is reading and writing in sync).
    last_answer: Option<u64>,
    /// Queries sent to the current child: ticket, payload, position of the
    /// send (in `events`).
    waiting: BTreeMap<RequestId, (QueryTicket, T, u64)>,
    sent: BTreeMap<QueryTicket, RequestId>,
    deferred: VecDeque<Deferred<T>>,
    actions: VecDeque<Action<T, E>>,
    shut_down: bool,
}

impl<T, E> Supervisor<T, E> {
    /// A supervisor with no child yet: start the first child yourself and
    /// report [`Supervisor::child_started`], or ask a query (which issues
    /// [`Action::Spawn`]).
    pub fn new(config: ClientConfig, policy: RestartPolicy) -> Self {
        Supervisor {
            request_timeout_ms: config.request_timeout_ms,
            client: Client::new(config),
            policy,
            child: Child::Down,
            restart_at: None,
            failures: 0,
            skipped: 0,
            next_ticket: 0,
            events: 0,
            last_answer: None,
            waiting: BTreeMap::new(),
            sent: BTreeMap::new(),
            deferred: VecDeque::new(),
            actions: VecDeque::new(),
            shut_down: false,
        }
    }

    /// A supervisor with the client settings and restart backoff of `config`.
    pub fn with_config(config: &SupervisorConfig) -> Self {
        Supervisor::new(config.client.clone(), config.restart_policy())
    }

    /// The client state machine (read-only).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// True while a child is running (after [`Supervisor::child_started`],
    /// until the supervisor issues [`Action::Kill`]).
    pub fn is_up(&self) -> bool {
        self.child == Child::Up
    }

    /// When the planned restart is due, if one is planned.
    pub fn restart_at(&self) -> Option<u64> {
        self.restart_at
    }

    /// Consecutive failures so far (the backoff exponent of the next restart).
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Queries waiting for a child.
    pub fn deferred(&self) -> usize {
        self.deferred.len()
    }

    /// Queries sent to the child and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.waiting.len()
    }

    /// Ask a query; its outcome comes back with `payload` in one
    /// [`Action::Answer`]. When the child is down the query waits for the
    /// next one (asking for it at once when no restart is planned), at most
    /// until `now + request_timeout_ms`.
    pub fn query(
        &mut self,
        query: EvidenceQuery,
        context: EvidenceContext,
        payload: T,
        now: u64,
    ) -> QueryTicket {
        self.query_traced(query, context, None, payload, now)
    }

    /// [`Supervisor::query`] carrying the caller's W3C trace context to
    /// the provider (`params._meta`, [`Client::query_traced`]).
    pub fn query_traced(
        &mut self,
        query: EvidenceQuery,
        context: EvidenceContext,
        trace: Option<TraceContext>,
        payload: T,
        now: u64,
    ) -> QueryTicket {
        let ticket = QueryTicket(self.next_ticket);
        self.next_ticket = self.next_ticket.wrapping_add(1);
        if self.shut_down {
            self.answer(payload, Err(Failure::ShutDown));
            return ticket;
        }
        if self.child == Child::Up {
            let id = self
                .client
                .query_traced(&query, &context, trace.as_ref(), now);
            self.sent.insert(ticket, id);
            self.events += 1;
            self.waiting.insert(id, (ticket, payload, self.events));
        } else {
            self.deferred.push_back(Deferred {
                ticket,
                query,
                context,
                trace,
                payload,
                deadline: now.saturating_add(self.request_timeout_ms),
            });
            if self.child == Child::Down && self.restart_at.is_none() {
                self.restart_now(now);
            }
        }
        self.step(now);
        ticket
    }

    /// Cancel a query: it is answered [`QueryError::Cancelled`]; if it was
    /// sent the provider is told (`notifications/cancelled`). False when
    /// the query already has its outcome.
    pub fn cancel(&mut self, ticket: QueryTicket) -> bool {
        if let Some(index) = self.deferred.iter().position(|d| d.ticket == ticket) {
            if let Some(deferred) = self.deferred.remove(index) {
                self.answer(deferred.payload, Err(Failure::Query(QueryError::Cancelled)));
                return true;
            }
        }
        let Some(id) = self.sent.get(&ticket).copied() else {
            return false;
        };
        let cancelled = self.client.cancel(id);
        self.dispatch();
        cancelled
    }

    /// Cancel every deferred query whose payload nobody waits for any more
    /// (for example a closed reply channel), so it is never sent. Each is
    /// answered [`QueryError::Cancelled`].
    pub fn cancel_deferred_if(&mut self, mut abandoned: impl FnMut(&T) -> bool) {
        let mut kept = VecDeque::with_capacity(self.deferred.len());
        while let Some(deferred) = self.deferred.pop_front() {
            if abandoned(&deferred.payload) {
                self.answer(deferred.payload, Err(Failure::Query(QueryError::Cancelled)));
            } else {
                kept.push_back(deferred);
            }
        }
        self.deferred = kept;
    }

    /// The child asked for by [`Action::Spawn`] (or the first one, started
    /// by the adapter) is running: deferred queries are sent to it.
    pub fn child_started(&mut self, now: u64) {
        if self.shut_down {
            self.actions.push_back(Action::Kill);
            return;
        }
        self.child = Child::Up;
        self.restart_at = None;
        self.skipped = 0;
        while let Some(deferred) = self.deferred.pop_front() {
            let id = self.client.query_traced(
                &deferred.query,
                &deferred.context,
                deferred.trace.as_ref(),
                now,
            );
            self.sent.insert(deferred.ticket, id);
            self.events += 1;
            self.waiting
                .insert(id, (deferred.ticket, deferred.payload, self.events));
        }
        self.step(now);
    }

    /// The child asked for by [`Action::Spawn`] could not be started:
    /// `error` is logged, the deferred queries fail with
    /// [`Failure::Spawn`] carrying it, and the next attempt is scheduled
    /// with backoff.
    pub fn spawn_failed(&mut self, now: u64, error: impl Into<E>)
    where
        E: Clone + fmt::Display,
    {
        let error = error.into();
        self.child = Child::Down;
        self.log(error.to_string());
        // Queries waiting for this child learn why it is not there.
        while let Some(deferred) = self.deferred.pop_front() {
            self.answer(deferred.payload, Err(Failure::Spawn(error.clone())));
        }
        if !self.shut_down {
            self.schedule_restart("the provider could not be started", now);
        }
    }

    /// The child is gone or unusable for a reason the adapter saw (it
    /// exited, its stdin broke): what it owed fails and it is restarted
    /// with backoff. End of its output is reported with an empty
    /// [`Supervisor::handle_input`] instead.
    pub fn child_exited(&mut self, now: u64, reason: &str) {
        if self.child != Child::Up {
            return;
        }
        self.schedule_restart(reason, now);
        self.step(now);
    }

    /// Feed bytes the current child wrote. Ignored while no child is up
    /// (output of a stopped child).
    pub fn handle_input(&mut self, input: &[u8], now: u64) {
        if self.child != Child::Up {
            return;
        }
        self.client.handle_input(input);
        self.step(now);
    }

    /// The current child closed its output (end of file on its stdout): it
    /// is treated as gone (see the module docs: what it owed fails, a
    /// restart is scheduled). Ignored while no child is up.
    pub fn handle_end_of_input(&mut self, now: u64) {
        if self.child != Child::Up {
            return;
        }
        self.client.handle_end_of_input();
        self.step(now);
    }

    /// Expire queries and deferred queries due at or before `now`, and
    /// start a planned restart that is due.
    pub fn handle_timeout(&mut self, now: u64) {
        self.step(now);
    }

    /// Stop for good: queries in flight fail with a lost connection,
    /// deferred ones with [`Failure::ShutDown`], the child is killed, and
    /// later queries fail at once.
    pub fn shutdown(&mut self) {
        if self.shut_down {
            return;
        }
        self.shut_down = true;
        self.client
            .connection_lost("the provider client was shut down");
        self.dispatch();
        while let Some(deferred) = self.deferred.pop_front() {
            self.answer(deferred.payload, Err(Failure::ShutDown));
        }
        self.restart_at = None;
        if self.child == Child::Up {
            self.actions.push_back(Action::Kill);
        }
        self.child = Child::Down;
    }

    /// The next thing to do.
    pub fn poll_action(&mut self) -> Option<Action<T, E>> {
        self.actions.pop_front()
    }

    /// The next framed bytes to write to the child's stdin (none while no
    /// child is up: the client is reset before the next child).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if self.child != Child::Up {
            return None;
        }
        self.client.poll_transmit()
    }

    /// When to call [`Supervisor::handle_timeout`] next: the earliest of the
    /// client's deadlines, the deferred queries' deadlines and the planned
    /// restart. None when nothing waits.
    pub fn poll_timeout(&self) -> Option<u64> {
        let deferred = self.deferred.iter().map(|deferred| deferred.deadline).min();
        [self.client.poll_timeout(), deferred, self.restart_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Timeouts, answers and restarts after anything happened.
    fn step(&mut self, now: u64) {
        self.client.handle_timeout(now);
        let hung = self.dispatch();
        self.expire_deferred(now);
        if hung && self.child == Child::Up {
            // A child silent since the query was sent may be wedged: later
            // queries get a fresh process.
            self.schedule_restart("the provider did not answer in time", now);
        }
        if self.client.needs_restart() && self.child == Child::Up {
            self.schedule_restart("the provider's stream broke", now);
        }
        if self.restart_at.is_some_and(|at| at <= now) && !self.shut_down {
            self.restart_now(now);
        }
    }

    fn expire_deferred(&mut self, now: u64) {
        if self.deferred.iter().all(|deferred| deferred.deadline > now) {
            return;
        }
        let mut kept = VecDeque::with_capacity(self.deferred.len());
        while let Some(deferred) = self.deferred.pop_front() {
            if deferred.deadline <= now {
                let timeout = self.request_timeout_ms;
                self.answer(
                    deferred.payload,
                    Err(Failure::Query(QueryError::Timeout(timeout))),
                );
            } else {
                kept.push_back(deferred);
            }
        }
        self.deferred = kept;
    }

    /// Stop the child now, fail what it still owed, and plan a fresh one
    /// after the backoff delay (once: a planned restart is not moved).
    fn schedule_restart(&mut self, reason: &str, now: u64) {
        if self.restart_at.is_some() {
            return;
        }
        if self.child == Child::Up {
            self.actions.push_back(Action::Kill);
        }
        self.child = Child::Down;
        self.client
            .connection_lost(&format!("{reason}; the provider is being restarted"));
        self.dispatch();
        let delay = self.policy.delay_ms(self.failures);
        self.failures = self.failures.saturating_add(1);
        self.log(format!("{reason}; restarting it in {delay} ms"));
        self.restart_at = Some(now.saturating_add(delay));
    }

    /// Reset the client and ask the adapter for a fresh child.
    fn restart_now(&mut self, now: u64) {
        self.restart_at = None;
        self.last_answer = None;
        if self.child == Child::Up {
            self.actions.push_back(Action::Kill);
        }
        self.client.restart(now);
        self.dispatch();
        self.child = Child::Starting;
        self.actions.push_back(Action::Spawn);
    }

    /// Turn the client's events into actions. True when a query timed out
    /// that was sent after the child's last answer (the child looks hung).
    fn dispatch(&mut self) -> bool {
        // The latest send of a query that timed out in this batch.
        let mut timed_out_sent: Option<u64> = None;
        while let Some(event) = self.client.poll_event() {
            match event {
                ClientEvent::Answer { id, outcome } => {
                    let entry = self.waiting.remove(&id);
                    match &outcome {
                        // A dropped message is not an answer (and after a
                        // framing error the decoder may be resynchronizing):
                        // a child that gave nothing else since the send is
                        // restarted.
                        Err(QueryError::Timeout(_) | QueryError::TimeoutAfterDrop { .. }) => {
                            if let Some((_, _, sent)) = &entry {
                                timed_out_sent = timed_out_sent.max(Some(*sent));
                            }
                        }
                        // The child answered: it is alive and in sync.
                        // (A message carrying the query's id that had to be
                        // dropped is an answer too, only an unreadable one.)
                        Ok(_)
                        | Err(QueryError::Provider { .. })
                        | Err(QueryError::BadResult(_))
                        | Err(QueryError::AnswerDropped(_))
                        | Err(QueryError::Verification(_)) => {
                            self.failures = 0;
                            self.events += 1;
                            self.last_answer = Some(self.events);
                        }
                        Err(_) => {}
                    }
                    if let Some((ticket, payload, _)) = entry {
                        self.sent.remove(&ticket);
                        self.answer(payload, outcome.map_err(Failure::Query));
                    }
                }
                ClientEvent::Skipped(skipped) => {
                    self.skipped = self.skipped.saturating_add(1);
                    if self.skipped <= SupervisorConfig::MAX_SKIPPED_LOGGED {
                        self.log(format!("ignored a provider message: {skipped:?}"));
                    }
                    if self.skipped == SupervisorConfig::MAX_SKIPPED_LOGGED {
                        self.log(format!(
                            "more ignored provider messages are not logged until the provider restarts (at most {} per process)",
                            SupervisorConfig::MAX_SKIPPED_LOGGED
                        ));
                    }
                }
                ClientEvent::Fatal(reason) => {
                    self.log(format!("provider connection broken: {reason}"));
                }
                ClientEvent::Closed => self.log(String::from("the provider closed its output")),
                _ => {}
            }
        }
        // Answers of this batch count too: they came after every send.
        timed_out_sent.is_some_and(|sent| self.last_answer.is_none_or(|answered| answered < sent))
    }

    fn answer(&mut self, payload: T, outcome: Result<VerifiedEvidence, Failure<E>>) {
        self.actions.push_back(Action::Answer { payload, outcome });
    }

    fn log(&mut self, line: String) {
        self.actions.push_back(Action::Log(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// The backoff of a config with these delays.
    fn backoff(initial: Duration, max: Duration, failures: u32) -> Duration {
        let config = SupervisorConfig::default().with_backoff(initial, max);
        Duration::from_millis(config.restart_policy().delay_ms(failures))
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let initial = Duration::from_millis(10);
        let max = Duration::from_millis(100);
        let delays: Vec<u128> = (0..6)
            .map(|failures| backoff(initial, max, failures).as_millis())
            .collect();
        assert_eq!(delays, vec![10, 20, 40, 80, 100, 100]);
        assert_eq!(backoff(initial, max, u32::MAX), max);
        // A max below the first delay counts as the first delay.
        assert_eq!(backoff(initial, Duration::ZERO, 3), initial);
        // Durations past u64 milliseconds saturate.
        let config = SupervisorConfig::default().with_backoff(Duration::MAX, Duration::MAX);
        assert_eq!(config.restart_policy().delay_ms(0), u64::MAX);
    }

    #[test]
    fn failures_become_evidence_results() {
        let spawn: Failure = Failure::Spawn("cannot start provider [\"x\"]: not found".into());
        let result = spawn.to_evidence_result();
        let error = result.error.expect("an error");
        assert_eq!(error.code, PROVIDER_UNAVAILABLE);
        assert!(error.message.contains("not found"), "{}", error.message);
        let shut: Failure = Failure::ShutDown;
        assert_eq!(shut.code(), PROVIDER_UNAVAILABLE);
        let timeout: Failure = Failure::Query(QueryError::Timeout(5));
        assert_eq!(timeout.code(), "provider_timeout");
        assert_eq!(
            timeout.to_evidence_result(),
            QueryError::Timeout(5).to_evidence_result()
        );
    }

    /// The adapter's spawn error reaches every query that waited for the
    /// child, whole (not only its message).
    #[test]
    fn a_spawn_error_reaches_the_deferred_queries() {
        #[derive(Clone, Debug, PartialEq)]
        struct NotFound(u32);
        impl fmt::Display for NotFound {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "not found ({})", self.0)
            }
        }
        let mut sup: Supervisor<u8, NotFound> =
            Supervisor::with_config(&SupervisorConfig::default());
        let context = EvidenceContext::adhoc(crate::evidence::TriggerTime::Logical(1));
        sup.query(EvidenceQuery::new("p", "c"), context.clone(), 1, 0);
        sup.query(EvidenceQuery::new("p", "c"), context, 2, 0);
        assert!(matches!(sup.poll_action(), Some(Action::Spawn)));
        sup.spawn_failed(1, NotFound(7));
        let mut answered = Vec::new();
        let mut logged = Vec::new();
        while let Some(action) = sup.poll_action() {
            match action {
                Action::Answer { payload, outcome } => answered.push((payload, outcome.err())),
                Action::Log(line) => logged.push(line),
                _ => {}
            }
        }
        assert_eq!(logged.first().map(String::as_str), Some("not found (7)"));
        assert_eq!(
            answered,
            vec![
                (1, Some(Failure::Spawn(NotFound(7)))),
                (2, Some(Failure::Spawn(NotFound(7))))
            ]
        );
    }
}
