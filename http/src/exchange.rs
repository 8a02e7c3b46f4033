//! One request body through a connection of the server, and the status of
//! its reply; the client-side rule that one request gets one answer.

use alloc::borrow::ToOwned;
use alloc::string::ToString;
use alloc::sync::Arc;
use alloc::vec::Vec;

use evidence_wire::dialect::McpRevision;
use evidence_wire::error::CanonicalError;
use evidence_wire::server::{DialectChoice, Outcome, Server, ServerConfig, ServerEvent};

use crate::admit::*;
use crate::reply::*;
use crate::route::*;

/// An HTTP answer that is a JSON-RPC batch (a JSON array) although one
/// request was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the provider answered one request with a JSON-RPC batch (a JSON array); one request must be answered with one JSON-RPC response object, so the provider's HTTP endpoint is broken or is not a JSON-RPC provider"
)]
pub struct BatchAnswer;

/// Client side: refuses an answer body whose JSON is an array, since one
/// request went out (batches are never sent over HTTP here). Whatever else
/// is wrong with the body is left to the client's parser.
pub fn check_single_answer(body: &[u8]) -> Result<(), BatchAnswer> {
    match body.iter().find(|byte| !byte.is_ascii_whitespace()) {
        Some(b'[') => Err(BatchAnswer),
        _ => Ok(()),
    }
}

/// The HTTP status of a JSON-RPC answer: `handled` says what the
/// [`ServerEvent::Handled`] records of the request body were.
///
/// On `/mcp` a JSON-RPC error to a request of a handshake revision travels
/// with 200 (those clients treat any other status as a transport failure);
/// a stateless request's error carries its own status, as revision
/// 2026-07-28 says: 400 for a malformed request, bad `_meta`, disagreeing
/// headers or an unknown revision, 404 for an unknown method, 200 for the
/// rest.
pub(crate) fn answer_status(endpoint: Endpoint, handled: &Handled) -> u16 {
    let (1, Some(outcome)) = (handled.count, handled.first) else {
        // A batch (or nothing recorded): the body says what failed.
        return 200;
    };
    match (outcome.error, endpoint) {
        (None, _) => 200,
        (Some(error), _) if outcome.stateless => stateless_status(error),
        (Some(_), Endpoint::Mcp) if outcome.has_id => 200,
        (Some(error), _) => status_for(error),
    }
}

/// What the reply's status is decided from ([`answer_status`]): how many
/// messages of the body were handled, and what the first one's outcome
/// says (kept as three facts: a request body is usually one message, and
/// a list of outcomes cost an allocation per request).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Handled {
    count: usize,
    first: Option<StatusFacts>,
}

/// The facts of an [`Outcome`] the status depends on.
#[derive(Clone, Copy, Debug)]
struct StatusFacts {
    error: Option<CanonicalError>,
    stateless: bool,
    has_id: bool,
}

impl Handled {
    fn record(&mut self, outcome: &Outcome) {
        self.count = self.count.saturating_add(1);
        self.first.get_or_insert(StatusFacts {
            error: outcome.error,
            stateless: outcome.stateless,
            has_id: outcome.id.is_some(),
        });
    }
}

/// The HTTP status of a stateless request's JSON-RPC error.
pub(crate) const fn stateless_status(error: CanonicalError) -> u16 {
    match error {
        CanonicalError::ParseError
        | CanonicalError::InvalidEnvelope
        | CanonicalError::InvalidToolInput
        | CanonicalError::HeaderMismatch
        | CanonicalError::UnsupportedProtocolVersion => 400,
        CanonicalError::MethodNotFound => 404,
        _ => 200,
    }
}

/// One HTTP request body through a [`Server`]: the same pipeline as stdio,
/// without framing: the body goes in as one message
/// ([`Server::handle_message`]) and each answer comes out as one
/// ([`Server::poll_message`]), so answers are byte-identical to what stdio
/// would send inside its frames.
///
/// Feed the body with [`Exchange::start`], take events with
/// [`Exchange::poll_event`] (answer queries on [`Exchange::server_mut`])
/// until [`Exchange::is_finished`], then build the reply with
/// [`Exchange::into_reply`].
#[derive(Debug)]
pub struct Exchange {
    server: Server,
    plan: CallPlan,
    handled: Handled,
    /// [`Exchange::expire`] answered what was still running.
    expired: bool,
}

impl Exchange {
    /// Runs `body` through a connection of `config` (shared, built once),
    /// speaking the plan's dialect when the endpoint or headers decide it
    /// and the configuration does not force one.
    pub fn start(config: &Arc<ServerConfig>, plan: CallPlan, body: &[u8]) -> Self {
        let mut server = Server::new(Arc::clone(config));
        if let (DialectChoice::Auto, Some(dialect)) = (config.dialect, plan.dialect) {
            server.set_dialect(dialect);
        }
        // Each request is its own connection: what the handshake negotiated
        // comes back in the header on every later request.
        server.set_revision(plan.revision.unwrap_or(McpRevision::HTTP_DEFAULT));
        server.set_message_headers(plan.headers.clone());
        server.handle_message(body);
        server.handle_end_of_input();
        Exchange {
            server,
            plan,
            handled: Handled::default(),
            expired: false,
        }
    }

    /// The server's drain deadline passed: every query still running is
    /// answered with the retryable `OVERLOADED` error
    /// ([`Server::expire_in_flight`]) and the reply is `503` with
    /// `Retry-After`, so a balancer or the client sends the call again
    /// elsewhere. Returns how many were still running.
    pub fn expire(&mut self) -> usize {
        let expired = self.server.expire_in_flight();
        self.expired |= expired > 0;
        expired
    }

    /// The next event; [`ServerEvent::Handled`] records are also kept for
    /// the status decision.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        let event = self.server.poll_event()?;
        if let ServerEvent::Handled(outcome) = &event {
            self.handled.record(outcome);
        }
        Some(event)
    }

    /// The connection the body runs through: answer its calls here
    /// ([`Server::respond`], [`Server::respond_tool`], [`Server::expire`]).
    /// Take events with [`Exchange::poll_event`], not from the server: the
    /// exchange keeps each outcome for the reply's status.
    pub fn server_mut(&mut self) -> &mut Server {
        &mut self.server
    }

    /// Queries still waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.server.in_flight()
    }

    /// True when every query is answered.
    pub fn is_finished(&self) -> bool {
        self.server.in_flight() == 0
    }

    /// The plan this exchange runs.
    pub fn plan(&self) -> &CallPlan {
        &self.plan
    }

    /// The HTTP reply: `202` with no body when nothing is answered, else the
    /// JSON-RPC answer as JSON or one SSE event, with the status of
    /// `answer_status` and the session id echoed.
    pub fn into_reply(mut self) -> HttpReply {
        while let Some(event) = self.server.poll_event() {
            if let ServerEvent::Handled(outcome) = event {
                self.handled.record(&outcome);
            }
        }
        let mut reply = match self.server.poll_message() {
            None => HttpReply {
                status: 202,
                headers: Vec::new(),
                body: Vec::new(),
            },
            Some(first) => {
                // One request body yields one answer (a batch is one array);
                // join defensively if the server ever sends more.
                let body = match self.server.poll_message() {
                    None => first,
                    Some(second) => {
                        let mut joined = first;
                        joined.push(b'\n');
                        joined.extend_from_slice(&second);
                        joined.push(b'\n');
                        while let Some(body) = self.server.poll_message() {
                            joined.extend_from_slice(&body);
                            joined.push(b'\n');
                        }
                        joined
                    }
                };
                if self.plan.sse {
                    let mut event = Vec::new();
                    encode_sse_event(&body, &mut event);
                    HttpReply {
                        status: 200,
                        headers: alloc::vec![
                            ("content-type", CONTENT_TYPE_SSE.to_owned()),
                            ("cache-control", "no-cache".to_owned()),
                        ],
                        body: event,
                    }
                } else {
                    HttpReply::json(answer_status(self.plan.endpoint, &self.handled), body)
                }
            }
        };
        if self.expired {
            // Retryable at the transport level, whatever the endpoint: the
            // caller never got its answer.
            if !self.plan.sse {
                reply.status = status_for(CanonicalError::Overloaded);
            }
            reply
                .headers
                .push(("retry-after", RETRY_AFTER_SECONDS.to_string()));
        }
        if let Some(session) = self.plan.session_id.take() {
            reply.headers.push(("mcp-session-id", session));
        }
        reply
    }
}
