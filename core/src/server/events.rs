//! What the server tells the embedder ([`ServerEvent`], with the
//! [`Outcome`] record of every message), the [`Ticket`] a call is answered
//! by, and why an answer can be refused ([`RespondError`]); the HTTP
//! headers a stateless request's body must agree with ([`MessageHeaders`]).

#[cfg(doc)]
use super::{Server, ServerConfig};
use alloc::borrow::Cow;
use alloc::string::String;
use core::fmt;

use serde_json::{Map, Value};

use crate::dialect::Dialect;
use crate::envelope::Id;
use crate::error::CanonicalError;
use crate::evidence::{EvidenceContext, EvidenceQuery};
use crate::frame::FrameError;
use crate::trace::{TraceContext, TraceId};

/// A handle on one query in flight, given with its event and used to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub(super) u64);

impl Ticket {
    /// The ticket's number (unique per connection).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ticket {}", self.0)
    }
}

/// What the server tells the embedding code.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServerEvent {
    /// An `evidence_query` call: answer it with [`Server::respond`].
    EvidenceQuery {
        /// Use it to answer.
        ticket: Ticket,
        /// The question.
        query: EvidenceQuery,
        /// Its context.
        context: EvidenceContext,
        /// How it was asked: the dialect, the `_meta` of its params.
        call: CallInfo,
    },
    /// A call of a tool registered with [`ServerConfig::add_tool`]: answer it
    /// with [`Server::respond_tool`].
    ToolCall {
        /// Use it to answer.
        ticket: Ticket,
        /// The tool.
        name: String,
        /// Its arguments (validated against its input schema when the
        /// schema registry is available).
        arguments: Value,
        /// How it was asked: the dialect, the `_meta` of its params.
        call: CallInfo,
    },
    /// The peer cancelled a query; its ticket is now dead (an answer for
    /// it is refused with [`RespondError::Cancelled`] and nothing is sent).
    /// A query and its cancellation that arrive in the same input both come
    /// out, in order: the [`ServerEvent::EvidenceQuery`] first, then this;
    /// an embedder that has not started the work yet can skip it.
    Cancelled {
        /// The cancelled ticket.
        ticket: Ticket,
        /// The peer's reason, if given.
        reason: Option<String>,
    },
    /// The peer finished the MCP handshake.
    Initialized {
        /// The negotiated protocol version.
        protocol_version: String,
        /// The peer's `clientInfo`, if sent.
        client_info: Option<Value>,
    },
    /// One message was handled; the record a validation log keeps. Made
    /// when the message is validated, except for a call handed out as
    /// [`ServerEvent::ToolCall`]: its record waits for
    /// [`Server::respond_tool`] (or the peer's cancellation) and carries the
    /// answer actually sent, e.g. `INTERNAL_ERROR` when the result fails
    /// the tool's output schema. `evidence_query` calls are recorded when
    /// validated: their answers are typed evidence results, sent as given.
    Handled(Outcome),
    /// A framing error; the stream is still in sync and an error was answered.
    FramingError(FrameError),
    /// A fatal framing error: no more input is read; answer what is in
    /// flight and close.
    Fatal(FrameError),
}

/// What the server knows about one call besides its arguments: the
/// dialect the request was spoken in (the connection's, or a stateless
/// request's own), the request's JSON-RPC id, the `_meta` member of its
/// `tools/call` params (MCP's request metadata: a progress token, a trace
/// context, whatever the client sends), as the client sent it, and the
/// W3C trace context the call carries.
///
/// Limits: `_meta` is part of the request, bounded by the frame and
/// envelope limits before it is read; it is read only when the params hold
/// the bytes `_meta` (or an escape that may spell them), and a `_meta` that
/// is not an object reads as none.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CallInfo {
    /// Decision Gate or MCP.
    pub dialect: Dialect,
    /// `params._meta` of the `tools/call`, when it is an object.
    pub meta: Option<Map<String, Value>>,
    /// The request's JSON-RPC id (`None` for a call made without a
    /// request, in this process).
    pub id: Option<Id<'static>>,
    /// The call's trace context: `_meta.traceparent` (and
    /// `_meta.tracestate`) when valid, else, over HTTP, the request's
    /// `traceparent` (and `tracestate`) headers when valid
    /// ([`MessageHeaders::with_trace`]): the message's own `_meta` wins.
    pub trace: Option<TraceContext>,
}

impl CallInfo {
    /// A call spoken in `dialect`, without `_meta`, id or trace context.
    pub fn new(dialect: Dialect) -> Self {
        CallInfo {
            dialect,
            meta: None,
            id: None,
            trace: None,
        }
    }

    /// The same call with `trace` as its trace context.
    pub fn with_trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }

    /// The same call with `meta` as its `_meta`.
    pub fn with_meta(mut self, meta: Map<String, Value>) -> Self {
        self.meta = Some(meta);
        self
    }
}

/// The outcome of one incoming message, for validation logs.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The request id, when it was readable.
    pub id: Option<Id<'static>>,
    /// The method, when it was readable (borrowed for the methods this
    /// server knows, so the usual record allocates no name).
    pub method: Option<Cow<'static, str>>,
    /// The tool called, for `tools/call`.
    pub tool: Option<Cow<'static, str>>,
    /// The canonical error answered, or `None` when the message was accepted.
    pub error: Option<CanonicalError>,
    /// What was wrong, for a person.
    pub detail: Option<String>,
    /// True when the message was a stateless MCP request (revision
    /// 2026-07-28 in its `_meta`): over HTTP its errors carry their own
    /// status (400, 404) rather than 200.
    pub stateless: bool,
    /// The trace id of the `tools/call`'s W3C trace context, when it
    /// carried a valid one (see [`CallInfo::trace`]); `None` for any other
    /// message.
    pub trace_id: Option<TraceId>,
}

/// What an HTTP request's headers say about the message in its body,
/// checked against a stateless MCP request (revision 2026-07-28 requires
/// `MCP-Protocol-Version`, `Mcp-Method` and, for `tools/call` and
/// `resources/read`, `Mcp-Name`, each equal to what the body says).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessageHeaders {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<String>,
    /// `Mcp-Method`.
    pub method: Option<String>,
    /// `Mcp-Name`.
    pub name: Option<String>,
    /// The W3C trace context of the `traceparent` and `tracestate`
    /// headers, when valid: the trace context of each call in the body
    /// whose `_meta` carries none of its own.
    pub trace: Option<TraceContext>,
}

impl MessageHeaders {
    /// The headers of one request, as received.
    pub fn new(
        protocol_version: Option<String>,
        method: Option<String>,
        name: Option<String>,
    ) -> Self {
        MessageHeaders {
            protocol_version,
            method,
            name,
            trace: None,
        }
    }

    /// The same headers, whose `traceparent` (and `tracestate`) gave
    /// `trace` (`None`: absent or invalid).
    pub fn with_trace(mut self, trace: Option<TraceContext>) -> Self {
        self.trace = trace;
        self
    }
}

/// Why [`Server::respond`] refused an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RespondError {
    /// No query in flight has this ticket (never issued, or already answered).
    #[error("{0} is not in flight (never issued, or already answered)")]
    UnknownTicket(Ticket),
    /// The peer cancelled this query; nothing is sent.
    #[error("{0} was cancelled by the peer; the answer is dropped")]
    Cancelled(Ticket),
    /// The ticket belongs to another kind of call (a tool call answered
    /// with an evidence result, or the reverse).
    #[error("{0} belongs to a different kind of call")]
    WrongKind(Ticket),
}
