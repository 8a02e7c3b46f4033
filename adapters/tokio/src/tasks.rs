//! Handler calls as tokio tasks, shared by the stdio and HTTP servers.
//!
//! [`Tasks::run`] does the [`Work`] of one event: a ready answer is handed
//! back at once, blocking work goes to tokio's blocking pool
//! (`spawn_blocking`), async work becomes a task. [`Tasks::next`] yields
//! each finished call exactly once: a handler that panicked still yields an
//! answer (an `internal_error` result), so no query is left unanswered.
//!
//! **Work is counted, not callers.** Blocking work needs one of the
//! [`Slots`] (a semaphore), and the slot is tied to the work itself
//! ([`Job::hold`]): it is given back when the work really ends, not when
//! its caller leaves. A call whose caller is gone is cancelled
//! ([`Job::cancellation`]): work not started yet never starts (the job
//! checks before it runs, and a queued task is aborted), async work is
//! dropped, and blocking work that has started sees the cancellation in its
//! check's context and may stop early; until it does, it keeps its slot.
//! So however many callers come and go, at most the slots' number of blocking
//! calls run at once (and as many blocking-pool threads do their work).
//! When every slot is taken, stdio waits for one (the call is queued, and
//! never starts if cancelled meanwhile), HTTP answers the call with the
//! retryable `OVERLOADED` error.
//!
//! [`RequestTasks`] does the same for one HTTP request, whose body almost
//! always holds one call: that call is held on its own (no task set, no
//! maps from task to ticket), and its async work is polled right in the
//! request's task instead of a task of its own (the request waits for
//! that answer anyway; a task would cost an allocation, a schedule and a
//! wake-up per request); a second call in the same body (a batch) and the
//! ones after it go to a [`Tasks`]. The request's own call slot, taken when
//! it was admitted, goes to its first blocking call.

use std::collections::HashMap;
use std::sync::Arc;

use evidence_wire::server::{Server, Ticket};
use evidence_wire_provider::{Answer, CallKind, CancelReason, Cancellation, Completion, Job, Work};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{AbortHandle, Id, JoinSet};
#[cfg(feature = "http-server")]
use {evidence_wire_provider::BoxFuture, tokio::task::JoinHandle};

/// What running one event's [`Work`] came to.
#[derive(Debug)]
pub(crate) enum Ran {
    /// A call answered at once (a ready answer): hand it to the server.
    Ready(Ticket, Completion),
    /// The call was started, cancelled, refused or the event observed:
    /// nothing to do now.
    Nothing,
    /// The input stream broke beyond repair (the stdio loop reports the
    /// error itself; HTTP has none).
    Fatal,
}

/// What blocking work does when every slot is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WhenFull {
    /// Wait for a slot (stdio: the call is queued).
    Wait,
    /// Answer the call with the retryable `OVERLOADED` error (HTTP).
    Refuse,
}

/// The slots blocking work runs in: a semaphore, how many it holds, and
/// what a call does when none is free.
#[derive(Clone, Debug)]
pub(crate) struct Slots {
    semaphore: Arc<Semaphore>,
    limit: usize,
    when_full: WhenFull,
}

impl Slots {
    /// `limit` slots (at least one) of their own.
    pub(crate) fn new(limit: usize, when_full: WhenFull) -> Self {
        let limit = limit.max(1);
        Slots::shared(Arc::new(Semaphore::new(limit)), limit, when_full)
    }

    /// The slots of `semaphore`, which holds `limit`.
    pub(crate) fn shared(semaphore: Arc<Semaphore>, limit: usize, when_full: WhenFull) -> Self {
        Slots {
            semaphore,
            limit,
            when_full,
        }
    }

    fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.semaphore).try_acquire_owned().ok()
    }

    /// What a call refused for want of a slot is told.
    fn full_detail(&self) -> String {
        format!(
            "the provider already runs its limit of {} checks at once; send the call again shortly",
            self.limit
        )
    }
}

/// Runs blocking `work` from a task (the slow path, after waiting for a
/// slot): a task aborted meanwhile drops the handle, but the work has been
/// cancelled first and so does not start.
async fn blocking_in_task(answer: Answer<Completion>, kind: CallKind) -> Completion {
    match answer {
        Answer::Ready(completion) => completion,
        Answer::Blocking(work) => tokio::task::spawn_blocking(work)
            .await
            .unwrap_or_else(|_| Completion::cancelled(kind)),
        Answer::Async(future) => future.await,
    }
}

/// The handler calls in flight for one connection or request.
pub(crate) struct Tasks {
    set: JoinSet<Completion>,
    by_task: HashMap<Id, (Ticket, CallKind)>,
    by_ticket: HashMap<Ticket, (AbortHandle, Cancellation)>,
    slots: Slots,
}

impl Tasks {
    pub(crate) fn new(slots: Slots) -> Self {
        Tasks {
            set: JoinSet::new(),
            by_task: HashMap::new(),
            by_ticket: HashMap::new(),
            slots,
        }
    }

    /// True when no call is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Do the work of one event: hand back a ready answer, start the
    /// other calls (or refuse one when every slot is taken and the slots
    /// say so), cancel and abort a call the peer cancelled.
    pub(crate) fn run(&mut self, work: Work, server: &mut Server) -> Ran {
        match work {
            Work::Run { ticket, job } => match job.into_ready() {
                Ok(completion) => return Ran::Ready(ticket, completion),
                Err(job) => self.start(ticket, job, server),
            },
            Work::Cancel { ticket } => {
                if let Some((abort, cancellation)) = self.by_ticket.remove(&ticket) {
                    cancellation.cancel(CancelReason::Peer);
                    abort.abort();
                }
            }
            Work::Fatal(_) => return Ran::Fatal,
            _ => {}
        }
        Ran::Nothing
    }

    fn start(&mut self, ticket: Ticket, job: Job, server: &mut Server) {
        let kind = job.kind();
        let cancellation = job.cancellation().clone();
        let abort = if job.is_blocking() {
            match self.slots.try_take() {
                Some(slot) => match job.hold(slot).into_guarded() {
                    Answer::Blocking(work) => self.set.spawn_blocking(work),
                    other => self.set.spawn(blocking_in_task(other, kind)),
                },
                None if self.slots.when_full == WhenFull::Refuse => {
                    let _ = server.expire(ticket, &self.slots.full_detail());
                    return;
                }
                None => {
                    // Queued: started once a slot is free, never if the
                    // call is cancelled first (the task is aborted).
                    let semaphore = Arc::clone(&self.slots.semaphore);
                    self.set.spawn(async move {
                        let Ok(slot) = semaphore.acquire_owned().await else {
                            return Completion::cancelled(kind);
                        };
                        blocking_in_task(job.hold(slot).into_guarded(), kind).await
                    })
                }
            }
        } else {
            match job.into_guarded() {
                Answer::Ready(completion) => self.set.spawn(std::future::ready(completion)),
                Answer::Blocking(work) => self.set.spawn_blocking(work),
                Answer::Async(future) => self.set.spawn(future),
            }
        };
        self.by_task.insert(abort.id(), (ticket, kind));
        self.by_ticket.insert(ticket, (abort, cancellation));
    }

    #[cfg(feature = "http-server")]
    /// Cancels every call in flight (their answers will reach nobody):
    /// what is queued never starts, async work is aborted, blocking work
    /// sees it.
    pub(crate) fn cancel_all(&mut self, reason: CancelReason) {
        for (abort, cancellation) in self.by_ticket.values() {
            cancellation.cancel(reason);
            abort.abort();
        }
    }

    /// The next finished call, or `None` when none is in flight. A call
    /// that was aborted yields a failure answer (the core drops the answer
    /// of a cancelled ticket, and forgets the ticket).
    pub(crate) async fn next(&mut self) -> Option<(Ticket, Completion)> {
        loop {
            let joined = self.set.join_next_with_id().await?;
            let (id, outcome) = match joined {
                Ok((id, done)) => (id, Ok(done)),
                Err(error) => (error.id(), Err(error)),
            };
            let Some((ticket, kind)) = self.by_task.remove(&id) else {
                continue;
            };
            self.by_ticket.remove(&ticket);
            let completion = outcome.unwrap_or_else(|_| Completion::cancelled(kind));
            return Some((ticket, completion));
        }
    }
}

impl Drop for Tasks {
    /// The connection or request is gone: so are the callers of what
    /// still runs (the set aborts its tasks; blocking work is told).
    fn drop(&mut self) {
        for (_, cancellation) in self.by_ticket.values() {
            cancellation.cancel(CancelReason::CallerGone);
        }
    }
}

#[cfg(feature = "http-server")]
/// The handler calls of one HTTP request: the first call that is not
/// ready at once is held on its own ([`OneWork`]); any more go to a
/// [`Tasks`] (made only then). Behaves as one [`Tasks`] would: ready
/// answers are handed back, a cancelled call is stopped and yields a
/// failure answer, a panicked one its `internal_error`, and dropping it
/// cancels every call.
pub(crate) struct RequestTasks {
    one: Option<OneCall>,
    more: Option<Tasks>,
    slots: Slots,
    /// The request's call slot, until its first blocking call takes it.
    slot: Option<OwnedSemaphorePermit>,
}

#[cfg(feature = "http-server")]
/// A call's work with the ticket and kind it answers.
struct OneCall {
    ticket: Ticket,
    kind: CallKind,
    cancellation: Cancellation,
    work: OneWork,
}

#[cfg(feature = "http-server")]
/// Where the held call's work runs.
enum OneWork {
    /// Async work, polled in the request's own task by
    /// [`RequestTasks::next`] (its panic is caught by the guard
    /// [`Job::into_guarded`] puts around it). Dropped with the request,
    /// as an aborted task would be.
    Inline(BoxFuture<Completion>),
    /// Blocking work, on tokio's blocking pool.
    Blocking(JoinHandle<Completion>),
    /// Cancelled by the peer: yields its failure answer once.
    Cancelled,
}

#[cfg(feature = "http-server")]
impl OneCall {
    fn cancel(&mut self, reason: CancelReason) {
        self.cancellation.cancel(reason);
        match &self.work {
            OneWork::Blocking(handle) => handle.abort(),
            OneWork::Inline(_) | OneWork::Cancelled => self.work = OneWork::Cancelled,
        }
    }
}

#[cfg(feature = "http-server")]
impl Drop for OneCall {
    fn drop(&mut self) {
        // Its caller is gone (or it finished: then nothing waits on the
        // cancellation). A JoinHandle dropped does not stop its task, and
        // a started blocking task cannot be stopped: it is told.
        self.cancellation.cancel(CancelReason::CallerGone);
        if let OneWork::Blocking(handle) = &self.work {
            handle.abort();
        }
    }
}

#[cfg(feature = "http-server")]
impl RequestTasks {
    /// The calls of a request admitted with `slot`, one of `slots`.
    pub(crate) fn new(slots: Slots, slot: OwnedSemaphorePermit) -> Self {
        RequestTasks {
            one: None,
            more: None,
            slots,
            slot: Some(slot),
        }
    }

    /// As [`Tasks::run`].
    pub(crate) fn run(&mut self, work: Work, server: &mut Server) -> Ran {
        match work {
            Work::Run { ticket, job } => match job.into_ready() {
                Ok(completion) => return Ran::Ready(ticket, completion),
                Err(job) if self.one.is_none() => {
                    let kind = job.kind();
                    let cancellation = job.cancellation().clone();
                    let job = if job.is_blocking() {
                        match self.slot.take().or_else(|| self.slots.try_take()) {
                            Some(slot) => job.hold(slot),
                            None => {
                                let _ = server.expire(ticket, &self.slots.full_detail());
                                return Ran::Nothing;
                            }
                        }
                    } else {
                        job
                    };
                    let work = match job.into_guarded() {
                        Answer::Ready(completion) => return Ran::Ready(ticket, completion),
                        Answer::Blocking(work) => {
                            OneWork::Blocking(tokio::task::spawn_blocking(work))
                        }
                        Answer::Async(future) => OneWork::Inline(future),
                    };
                    self.one = Some(OneCall {
                        ticket,
                        kind,
                        cancellation,
                        work,
                    });
                }
                Err(job) => {
                    let slots = self.slots.clone();
                    let work = Work::Run { ticket, job };
                    return self
                        .more
                        .get_or_insert_with(|| Tasks::new(slots))
                        .run(work, server);
                }
            },
            Work::Cancel { ticket } => match &mut self.one {
                // Stopped, it still yields its failure answer once.
                Some(one) if one.ticket == ticket => one.cancel(CancelReason::Peer),
                _ => {
                    if let Some(more) = &mut self.more {
                        return more.run(Work::Cancel { ticket }, server);
                    }
                }
            },
            Work::Fatal(_) => return Ran::Fatal,
            _ => {}
        }
        Ran::Nothing
    }

    /// As [`Tasks::cancel_all`].
    pub(crate) fn cancel_all(&mut self, reason: CancelReason) {
        if let Some(one) = &mut self.one {
            one.cancel(reason);
        }
        if let Some(more) = &mut self.more {
            more.cancel_all(reason);
        }
    }

    /// As [`Tasks::next`].
    pub(crate) async fn next(&mut self) -> Option<(Ticket, Completion)> {
        let more = async {
            match &mut self.more {
                Some(more) => more.next().await,
                None => None,
            }
        };
        let Some(one) = &mut self.one else {
            return more.await;
        };
        let (ticket, kind) = (one.ticket, one.kind);
        let mine = async {
            match &mut one.work {
                OneWork::Inline(future) => future.as_mut().await,
                OneWork::Blocking(handle) => {
                    handle.await.unwrap_or_else(|_| Completion::cancelled(kind))
                }
                OneWork::Cancelled => Completion::cancelled(kind),
            }
        };
        // Whichever ends first; `more` running dry leaves only `mine`.
        let more = async {
            match more.await {
                Some(finished) => Err(finished),
                None => std::future::pending().await,
            }
        };
        match futures_lite::future::or(async { Ok(mine.await) }, more).await {
            Ok(completion) => {
                self.one = None;
                Some((ticket, completion))
            }
            Err(finished) => Some(finished),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evidence_wire::evidence::{
        EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, EvidenceValue,
    };
    use evidence_wire::server::{Server, ServerConfig, ServerEvent};
    use evidence_wire_provider::{CallContext, Handler, complete, dispatch};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// The `held` call started; its future was dropped.
    static HELD_STARTED: AtomicBool = AtomicBool::new(false);
    static HELD_DROPPED: AtomicBool = AtomicBool::new(false);

    /// Answers by check id: ready, async, blocking, slow (for cancelling)
    /// or a panic.
    struct Mixed;

    impl Handler for Mixed {
        fn evidence_query(
            &self,
            query: EvidenceQuery,
            _context: EvidenceContext,
            _call: CallContext,
        ) -> evidence_wire_provider::Answer<EvidenceResult> {
            let value = || EvidenceResult::with_value(EvidenceValue::json(&1).unwrap());
            match query.check_id.as_str() {
                "ready" => evidence_wire_provider::Answer::ready(value()),
                "async" => evidence_wire_provider::Answer::future(async move {
                    tokio::task::yield_now().await;
                    value()
                }),
                "blocking" => evidence_wire_provider::Answer::blocking(value),
                "slow" => evidence_wire_provider::Answer::future(async move {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    value()
                }),
                "panic" => evidence_wire_provider::Answer::future(async { panic!("boom") }),
                "held" => evidence_wire_provider::Answer::future(async move {
                    struct Held;
                    impl Drop for Held {
                        fn drop(&mut self) {
                            HELD_DROPPED.store(true, Ordering::SeqCst);
                        }
                    }
                    let _held = Held;
                    HELD_STARTED.store(true, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    value()
                }),
                other => evidence_wire_provider::Answer::ready(EvidenceResult::with_error(
                    EvidenceError::new("unsupported_check", other.to_owned()),
                )),
            }
        }
    }

    fn call(id: u64, check: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"evidence_query","arguments":{{"query":{{"provider_id":"p","check_id":"{check}"}},"context":{{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{{"kind":"unix_millis","value":0}}}}}}}}}}"#
        )
    }

    fn cancel(id: u64) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
        )
    }

    /// What one body's calls come to: each finished call as `next` yields
    /// it, and the answers the server then writes, in a stable order.
    macro_rules! outcome {
        ($tasks:expr, $body:expr) => {{
            let mut tasks = $tasks;
            let mut server = Server::new(ServerConfig::default());
            server.handle_input($body.as_bytes());
            server.handle_input(b"\n");
            let mut finished = Vec::new();
            loop {
                while let Some(event) = server.poll_event() {
                    if !matches!(event, ServerEvent::Handled(_)) {
                        if let Ran::Ready(ticket, completion) =
                            tasks.run(dispatch(&Mixed, event), &mut server)
                        {
                            finished.push(format!("{ticket:?} {completion:?}"));
                            let _ = complete(&mut server, ticket, completion);
                        }
                    }
                }
                if server.in_flight() == 0 {
                    break;
                }
                let next = tokio::time::timeout(Duration::from_secs(5), tasks.next());
                let Some((ticket, completion)) = next.await.unwrap() else {
                    break;
                };
                finished.push(format!("{ticket:?} {completion:?}"));
                let _ = complete(&mut server, ticket, completion);
            }
            let mut answers = Vec::new();
            while let Some(message) = server.poll_message() {
                answers.push(String::from_utf8(message).unwrap());
            }
            finished.sort();
            answers.sort();
            (finished, answers)
        }};
    }

    /// `RequestTasks` (one call held alone, the rest in a `Tasks`) yields
    /// the same finished calls and leads to the same answers as `Tasks`,
    /// for single calls of each kind, batches, and cancels of the first
    /// call and of a later one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn request_tasks_behave_as_tasks() {
        let bodies = [
            call(1, "ready"),
            call(1, "async"),
            call(1, "blocking"),
            call(1, "panic"),
            call(1, "nope"),
            format!(
                "[{},{},{}]",
                call(1, "async"),
                call(2, "blocking"),
                call(3, "ready")
            ),
            format!("[{},{},{}]", call(1, "slow"), cancel(1), call(2, "async")),
            format!("[{},{},{}]", call(1, "async"), call(2, "slow"), cancel(2)),
            format!(
                "[{},{},{}]",
                call(1, "panic"),
                call(2, "async"),
                call(3, "panic")
            ),
        ];
        for body in bodies {
            let body = body.replace('\n', "");
            let plain = outcome!(Tasks::new(slots()), body);
            let one = outcome!(RequestTasks::new(slots(), slot()), body);
            assert_eq!(one, plain, "{body}");
            assert!(!plain.0.is_empty() || !plain.1.is_empty(), "{body}");
        }
    }

    fn slots() -> Slots {
        Slots::new(64, WhenFull::Refuse)
    }

    fn slot() -> OwnedSemaphorePermit {
        Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap()
    }

    /// Dropping `RequestTasks` (a client that went away) stops the calls
    /// still running, as dropping a `Tasks` does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_request_tasks_aborts_its_calls() {
        let mut tasks = RequestTasks::new(slots(), slot());
        let mut server = Server::new(ServerConfig::default());
        server.handle_input(format!("{}\n", call(1, "held")).as_bytes());
        while let Some(event) = server.poll_event() {
            let _ = tasks.run(dispatch(&Mixed, event), &mut server);
        }
        assert!(tasks.one.is_some());
        // Async work runs while the request waits for it (polled in the
        // request's task): wait a little, as a request would.
        for _ in 0..500 {
            let _ = tokio::time::timeout(Duration::from_millis(10), tasks.next()).await;
            if HELD_STARTED.load(Ordering::SeqCst) {
                break;
            }
        }
        assert!(
            HELD_STARTED.load(Ordering::SeqCst),
            "the call never started"
        );
        drop(tasks);
        for _ in 0..500 {
            if HELD_DROPPED.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the call's task still runs after its RequestTasks was dropped");
    }
}
