//! Handler calls as tokio tasks, shared by the stdio and HTTP servers.
//!
//! [`Tasks::run`] does the [`Work`] of one event: a ready answer is given
//! at once, blocking work goes to tokio's blocking pool
//! (`spawn_blocking`), async work becomes a task, and the task of a call
//! the peer cancelled is aborted (blocking work that has started runs to
//! its end; its answer is dropped). [`Tasks::next`] yields each finished
//! call exactly once: a handler that panicked still yields an answer (an
//! `internal_error` result), so no query is left unanswered. How many
//! tasks run at once is bounded by the core (`ServerConfig::max_in_flight`
//! for stdio, the call permits for HTTP).

use std::collections::HashMap;

use evidence_wire::frame::FrameError;
use evidence_wire::server::Ticket;
use evidence_wire_provider::{Answer, CallKind, Completion, Job, Respond, Work, complete};
use tokio::task::{AbortHandle, Id, JoinSet};

/// The handler calls in flight for one connection or request.
pub(crate) struct Tasks {
    set: JoinSet<Completion>,
    by_task: HashMap<Id, (Ticket, CallKind)>,
    by_ticket: HashMap<Ticket, AbortHandle>,
}

impl Tasks {
    pub(crate) fn new() -> Self {
        Tasks {
            set: JoinSet::new(),
            by_task: HashMap::new(),
            by_ticket: HashMap::new(),
        }
    }

    /// True when no call is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Do the work of one event: answer a ready call on `server` now,
    /// start the others, abort a cancelled one. A fatal stream error is
    /// handed back.
    pub(crate) fn run(&mut self, work: Work, server: &mut impl Respond) -> Option<FrameError> {
        match work {
            Work::Run { ticket, job } => match job.into_ready() {
                // A cancelled or unknown ticket is refused: nothing to send.
                Ok(completion) => {
                    let _ = complete(server, ticket, completion);
                }
                Err(job) => self.start(ticket, job),
            },
            Work::Cancel { ticket } => {
                if let Some(abort) = self.by_ticket.remove(&ticket) {
                    abort.abort();
                }
            }
            Work::Fatal(error) => return Some(error),
            _ => {}
        }
        None
    }

    fn start(&mut self, ticket: Ticket, job: Job) {
        let kind = job.kind();
        let abort = match job.into_guarded() {
            Answer::Ready(completion) => self.set.spawn(std::future::ready(completion)),
            Answer::Blocking(work) => self.set.spawn_blocking(work),
            Answer::Async(future) => self.set.spawn(future),
        };
        self.by_task.insert(abort.id(), (ticket, kind));
        self.by_ticket.insert(ticket, abort);
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
