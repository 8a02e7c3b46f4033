//! Handler calls as tokio tasks, shared by the stdio and HTTP servers.
//!
//! [`Tasks::offer`] spawns one task per evidence query or tool call the
//! core reports, aborts the task of a query the peer cancelled, and hands
//! every other event back for `observe`. [`Tasks::next`] yields each
//! finished call exactly once: a handler that panicked still yields an
//! answer (an error result), so no query is left unanswered. How many tasks
//! run at once is bounded by the core (`ServerConfig::max_in_flight`).

use std::collections::HashMap;
use std::sync::Arc;

use evidence_wire::evidence::{EvidenceError, EvidenceResult};
use evidence_wire::server::{ServerEvent, Ticket, ToolFailure};
use serde_json::Value;
use tokio::task::{AbortHandle, Id, JoinSet};

use crate::stdio::Handler;

/// What a finished handler call produced.
pub(crate) enum Completion {
    /// The answer to an evidence query.
    Evidence(Box<EvidenceResult>),
    /// The answer to a tool call.
    Tool(Result<Value, ToolFailure>),
}

struct Running {
    ticket: Ticket,
    tool: bool,
}

/// The handler calls in flight for one connection or request.
pub(crate) struct Tasks<H> {
    handler: Arc<H>,
    set: JoinSet<Completion>,
    by_task: HashMap<Id, Running>,
    by_ticket: HashMap<Ticket, AbortHandle>,
}

impl<H: Handler> Tasks<H> {
    pub(crate) fn new(handler: Arc<H>) -> Self {
        Tasks {
            handler,
            set: JoinSet::new(),
            by_task: HashMap::new(),
            by_ticket: HashMap::new(),
        }
    }

    /// True when no call is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Start the call an event asks for; any other event is observed by
    /// the handler (a cancellation also aborts its task).
    pub(crate) fn offer(&mut self, event: ServerEvent) {
        match event {
            ServerEvent::EvidenceQuery {
                ticket,
                query,
                context,
            } => {
                let handler = Arc::clone(&self.handler);
                let abort = self.set.spawn(async move {
                    Completion::Evidence(Box::new(handler.evidence_query(query, context).await))
                });
                self.track(ticket, false, abort);
            }
            ServerEvent::ToolCall {
                ticket,
                name,
                arguments,
            } => {
                let handler = Arc::clone(&self.handler);
                let abort = self.set.spawn(async move {
                    Completion::Tool(handler.tool_call(&name, arguments).await)
                });
                self.track(ticket, true, abort);
            }
            ServerEvent::Cancelled { ticket, reason } => {
                if let Some(abort) = self.by_ticket.remove(&ticket) {
                    abort.abort();
                }
                self.handler
                    .observe(&ServerEvent::Cancelled { ticket, reason });
            }
            other => self.handler.observe(&other),
        }
    }

    fn track(&mut self, ticket: Ticket, tool: bool, abort: AbortHandle) {
        self.by_task.insert(abort.id(), Running { ticket, tool });
        self.by_ticket.insert(ticket, abort);
    }

    /// The next finished call, or `None` when none is in flight. A call
    /// that panicked or was aborted yields an error answer.
    pub(crate) async fn next(&mut self) -> Option<(Ticket, Completion)> {
        loop {
            let joined = self.set.join_next_with_id().await?;
            let (id, outcome) = match joined {
                Ok((id, done)) => (id, Ok(done)),
                Err(error) => (error.id(), Err(error)),
            };
            let Some(running) = self.by_task.remove(&id) else {
                continue;
            };
            self.by_ticket.remove(&running.ticket);
            let completion = match outcome {
                Ok(completion) => completion,
                Err(error) => {
                    // A cancelled call is answered too: the core drops the
                    // answer of a cancelled ticket (and forgets the ticket).
                    let reason = if error.is_cancelled() {
                        "the call was cancelled"
                    } else {
                        "the provider's handler panicked while answering"
                    };
                    if running.tool {
                        Completion::Tool(Err(ToolFailure::Failed(reason.to_owned())))
                    } else {
                        Completion::Evidence(Box::new(EvidenceResult::with_error(
                            EvidenceError::new("internal_error", reason),
                        )))
                    }
                }
            };
            return Some((running.ticket, completion));
        }
    }
}
