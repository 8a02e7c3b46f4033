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
//! - ignored provider messages are logged at most [`MAX_SKIPPED_LOGGED`]
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
//! Limits: the supervisor buffers nothing the client does not (frame limits
//! from [`ClientConfig::limits`]); the deferred queue holds what callers
//! asked while the child was down, each for at most its timeout; log lines
//! about ignored messages are capped per child.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId};
use crate::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};

/// Ignored (unparsable, unknown, late) provider messages logged per child;
/// the rest are counted, so a child flooding its output with junk cannot
/// flood the log.
pub const MAX_SKIPPED_LOGGED: u32 = 16;

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

/// Identifies one query of a [`Supervisor`] (to cancel it); unique per
/// supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

impl Ticket {
    /// The ticket as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// Why a supervised query produced no evidence.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// The query itself failed (provider error, bad answer, verification,
    /// timeout, lost connection, cancelled).
    #[error(transparent)]
    Query(QueryError),
    /// The child it waited for could not be started; the message is the
    /// one given to [`Supervisor::spawn_failed`].
    #[error("{0}")]
    Spawn(String),
    /// The supervisor was shut down before the query was sent.
    #[error("the provider client has shut down")]
    ShutDown,
}

/// What the adapter must do next, in order.
#[derive(Debug)]
#[non_exhaustive]
// `Answer` is the common action and is moved once to its waiter; boxing it
// would cost an allocation per answer for no gain.
#[allow(clippy::large_enum_variant)]
pub enum Action<T> {
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
        outcome: Result<VerifiedEvidence, Failure>,
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
    ticket: Ticket,
    query: EvidenceQuery,
    context: EvidenceContext,
    payload: T,
    deadline: u64,
}

/// Supervises one child-process provider. See the module docs.
#[derive(Debug)]
pub struct Supervisor<T> {
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
    waiting: BTreeMap<RequestId, (Ticket, T, u64)>,
    sent: BTreeMap<Ticket, RequestId>,
    deferred: VecDeque<Deferred<T>>,
    actions: VecDeque<Action<T>>,
    shut_down: bool,
}

impl<T> Supervisor<T> {
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
    ) -> Ticket {
        let ticket = Ticket(self.next_ticket);
        self.next_ticket = self.next_ticket.wrapping_add(1);
        if self.shut_down {
            self.answer(payload, Err(Failure::ShutDown));
            return ticket;
        }
        if self.child == Child::Up {
            let id = self.client.query(&query, &context, now);
            self.sent.insert(ticket, id);
            self.events += 1;
            self.waiting.insert(id, (ticket, payload, self.events));
        } else {
            self.deferred.push_back(Deferred {
                ticket,
                query,
                context,
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
    pub fn cancel(&mut self, ticket: Ticket) -> bool {
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
            let id = self.client.query(&deferred.query, &deferred.context, now);
            self.sent.insert(deferred.ticket, id);
            self.events += 1;
            self.waiting
                .insert(id, (deferred.ticket, deferred.payload, self.events));
        }
        self.step(now);
    }

    /// The child asked for by [`Action::Spawn`] could not be started:
    /// `message` is logged, the deferred queries fail with
    /// [`Failure::Spawn`], and the next attempt is scheduled with backoff.
    pub fn spawn_failed(&mut self, now: u64, message: &str) {
        self.child = Child::Down;
        self.log(String::from(message));
        // Queries waiting for this child learn why it is not there.
        while let Some(deferred) = self.deferred.pop_front() {
            self.answer(deferred.payload, Err(Failure::Spawn(String::from(message))));
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

    /// Feed bytes the current child wrote; empty input means it closed its
    /// output. Ignored while no child is up (output of a stopped child).
    pub fn handle_input(&mut self, input: &[u8], now: u64) {
        if self.child != Child::Up {
            return;
        }
        self.client.handle_input(input);
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
    pub fn poll_action(&mut self) -> Option<Action<T>> {
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
                    if self.skipped <= MAX_SKIPPED_LOGGED {
                        self.log(format!("ignored a provider message: {skipped:?}"));
                    }
                    if self.skipped == MAX_SKIPPED_LOGGED {
                        self.log(format!(
                            "more ignored provider messages are not logged until the provider restarts (at most {MAX_SKIPPED_LOGGED} per process)"
                        ));
                    }
                }
                ClientEvent::Fatal(reason) => {
                    self.log(format!("provider connection broken: {reason}"));
                }
                _ => {}
            }
        }
        // Answers of this batch count too: they came after every send.
        timed_out_sent.is_some_and(|sent| self.last_answer.is_none_or(|answered| answered < sent))
    }

    fn answer(&mut self, payload: T, outcome: Result<VerifiedEvidence, Failure>) {
        self.actions.push_back(Action::Answer { payload, outcome });
    }

    fn log(&mut self, line: String) {
        self.actions.push_back(Action::Log(line));
    }
}
