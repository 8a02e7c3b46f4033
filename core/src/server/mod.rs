//! The provider-side connection state machine (sans-IO).
//!
//! A [`Server`] takes the bytes a caller sent ([`Server::handle_input`]),
//! answers the protocol's chores itself (`initialize`, `ping`,
//! `tools/list`, `resources/*`, errors for anything malformed) and hands the
//! embedding code one [`ServerEvent::EvidenceQuery`] per `evidence_query`
//! call. The embedder answers whenever it likes with [`Server::respond`];
//! many queries may be in flight and answers may come in any order. Framed
//! output bytes come out of [`Server::poll_transmit`].
//!
//! Tool arguments are read in one parse that refuses any object naming a
//! member twice, at any depth (`unique::from_str`: `query`, `context`, a
//! check's `params`; so are the params of `initialize`, `resources/read`
//! and `notifications/cancelled`), answered `INVALID_TOOL_INPUT` with the
//! member's JSON pointer in `data.pointer` (a notification is only
//! recorded); `tools/call`'s own `name` and `arguments` are read by a typed
//! parse that refuses them twice too. They are then checked against the
//! tool's input schema in the [`crate::schema::SchemaRegistry`] (with
//! `std`; a failure is answered `INVALID_TOOL_INPUT` with `data.pointer`). The built-in `evidence_query`
//! tool uses, and `tools/list` shows, exactly the schemas of
//! `spec/schemas/evidence_query.{input,output}.schema.json`, compiled once
//! per process; its arguments are then read into their typed form.
//!
//! With a capabilities contract ([`ServerConfig::with_contract`],
//! [`ServerContract`]) one definition drives three things: `tools/list`
//! shows `evidence_query` with the contract's checks in its description and
//! its input schema narrowed to them (`query.check_id` an `enum`,
//! `query.provider_id` a `const`); every query is checked against the
//! contract after the schema and before an event, and a refused one (unknown
//! check, another provider's id, params outside the check's `params_schema`)
//! is answered at once as an `EvidenceResult` error (`unknown_check`,
//! `provider_mismatch`, `invalid_params`), never reaching the embedder; and
//! [`Server::contract_json`] is the `capabilities_path` JSON.
//!
//! Framing is detected from the first byte of input and mirrored on
//! output. The dialect (Decision Gate or MCP) is chosen per connection: MCP
//! once the peer sends `initialize`, Decision Gate otherwise, unless
//! [`DialectChoice`] forces one.
//!
//! The server does no I/O, reads no clock and spawns nothing. Every
//! malformed message gets a JSON-RPC error and the connection goes on while
//! the stream is in sync; after a fatal framing error the connection is
//! closed for input and says so ([`Server::is_input_closed`]). Limits: frame
//! limits from [`frame::Limits`], envelope nesting from the
//! [`envelope::Policy`], and at most [`ServerConfig::max_in_flight`] queries
//! waiting for an answer. Past that cap a framed connection holds the next
//! message unread and asks for no more input ([`Server::wants_input`]) until
//! an answer frees a slot ([`Overload::Backpressure`], the default), or
//! answers calls `OVERLOADED` at once ([`Overload::Refuse`]); an unframed
//! message (HTTP) is always refused.
//!
//! Shutting down: [`Server::drain`] takes no new calls (every message
//! already received is still answered, a call with the retryable
//! `OVERLOADED` error) while the queries in flight run on; at the
//! embedder's deadline, [`Server::expire_in_flight`] answers those still
//! running with the same retryable error, so none is dropped silently.
//!
//! # Driving it
//!
//! A [`ServerConfig`] is built once (limits, contract, tools, signing key)
//! and shared; each connection is a `Server` made from it. The calls fall in
//! three groups, and the poll order matters:
//!
//! 1. **Inputs.** [`Server::handle_input`] with the bytes read (framed, the
//!    framing detected from the first byte) while [`Server::wants_input`],
//!    or [`Server::handle_message`] with one whole message (HTTP);
//!    [`Server::handle_end_of_input`] once the peer closed its side (the
//!    one way to say end of input).
//! 2. **Events, until `None`.** [`Server::poll_event`] after every input
//!    and every answer: each [`ServerEvent::EvidenceQuery`] is answered,
//!    now or later, with [`Server::respond`] (a tool call with
//!    [`Server::respond_tool`]); every complete message already received has
//!    produced its events before `handle_input` returns, except those held
//!    at the in-flight cap, which an answer resumes (so an answer can
//!    produce new events).
//! 3. **Output, until `None`.** [`Server::poll_transmit`] (framed bytes) or
//!    [`Server::poll_message`] (one message each) after every input and
//!    every answer; write everything before reading more.
//!
//! The connection is done when [`Server::is_finished`]: input closed, every
//! query answered, every byte taken. The server reads no clock: a caller
//! that wants deadlines keeps them itself.
//!
//! ```
//! use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
//! use evidence_wire::server::{Server, ServerConfig, ServerEvent};
//!
//! let mut server = Server::new(ServerConfig::default());
//! let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"answer"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":0}}}}}"#;
//! let mut output = Vec::new();
//! // 1. input: one newline-delimited message, then the end of input.
//! server.handle_input(call);
//! server.handle_input(b"\n");
//! server.handle_end_of_input();
//! loop {
//!     // 2. events: answer each query (here at once, from this thread).
//!     while let Some(event) = server.poll_event() {
//!         if let ServerEvent::EvidenceQuery { ticket, .. } = event {
//!             let value = EvidenceValue::json(&42)?;
//!             server.respond(ticket, EvidenceResult::with_value(value)).expect("in flight");
//!         }
//!     }
//!     // 3. output: everything there is.
//!     while let Some(bytes) = server.poll_transmit() {
//!         output.extend_from_slice(&bytes);
//!     }
//!     if server.is_finished() {
//!         break;
//!     }
//! }
//! let answer: serde_json::Value = serde_json::from_slice(&output)?;
//! assert_eq!(answer["result"]["content"][0]["json"]["value"]["value"], 42);
//! # Ok::<(), serde_json::Error>(())
//! ```

use alloc::borrow::{Cow, ToOwned};
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::dialect::{McpRevision, Speech};
use crate::envelope::{self, Id, Incoming, Message};
use crate::error::CanonicalError;
use crate::evidence::EvidenceQueryArguments;
use crate::frame::{self, Decoder, FrameError, Framing};
use crate::trace::TraceId;
use crate::unique::{self, Duplicate, UniqueError};

mod answer;
pub(crate) mod arguments;
mod call;
mod config;
mod contract;
mod events;
mod methods;
mod speech;
mod tools;

pub use crate::dialect::{Dialect, DialectChoice, HashProfile};
pub use answer::{
    ANSWER_DEPTH_LIMIT_EXCEEDED, ANSWER_SIZE_LIMIT_EXCEEDED, VALUE_NOT_CANONICALIZABLE,
};
pub use config::{
    DEFAULT_DRAIN_TIMEOUT_MS, DEFAULT_MAX_IN_FLIGHT, Overload, ServerConfig, ServerInfo,
};
pub use events::{CallInfo, MessageHeaders, Outcome, RespondError, ServerEvent, Ticket};

pub use contract::{INVALID_PARAMS, PROVIDER_MISMATCH, ServerContract, UNKNOWN_CHECK};
use tools::ToolKind;
pub use tools::{InlineTool, Resource, ToolDefinition, ToolFailure, ToolFilter};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CallKind {
    Evidence,
    Tool,
}

#[derive(Debug)]
struct Pending {
    id: Id<'static>,
    kind: CallKind,
    /// How the call was spoken: its answer is shaped the same way.
    speech: Speech,
    batch: Option<u64>,
    tool: Cow<'static, str>,
    /// The call's trace id, for its deferred record.
    trace_id: Option<TraceId>,
}

/// What the deferred record of a call keeps of it.
struct DeferredCall {
    id: Id<'static>,
    speech: Speech,
    trace_id: Option<TraceId>,
}

impl DeferredCall {
    fn of(call: &Pending) -> Self {
        DeferredCall {
            id: call.id.clone(),
            speech: call.speech,
            trace_id: call.trace_id,
        }
    }
}

#[derive(Debug, Default)]
struct Batch {
    replies: Vec<Vec<u8>>,
    /// The bytes of `replies` so far: with a comma between replies and the
    /// two brackets, the size of the batch's answer.
    bytes: usize,
    outstanding: usize,
    sealed: bool,
}

impl Batch {
    /// The size of the batch's answer with one more reply of `len` bytes.
    fn answer_bytes_with(&self, len: usize) -> usize {
        self.bytes
            .saturating_add(len)
            .saturating_add(self.replies.len())
            .saturating_add(2)
    }
}

/// The provider side of one connection. See the module docs.
pub struct Server {
    config: Arc<ServerConfig>,
    decoder: Decoder,
    /// The connection's dialect (MCP after `initialize`).
    dialect: Dialect,
    /// The connection's MCP revision (negotiated by `initialize`).
    revision: McpRevision,
    /// How the request being handled is spoken (the connection's, or a
    /// stateless request's own).
    speech: Speech,
    /// The HTTP headers of the message being handled, when it came over HTTP.
    headers: Option<MessageHeaders>,
    pending: BTreeMap<Ticket, Pending>,
    cancelled: BTreeSet<Ticket>,
    cancelled_order: VecDeque<Ticket>,
    batches: BTreeMap<u64, Batch>,
    next_ticket: u64,
    next_batch: u64,
    events: VecDeque<ServerEvent>,
    transmits: VecDeque<Vec<u8>>,
    input_closed: bool,
    /// A complete frame that arrived at the in-flight cap, waiting for a
    /// slot ([`Overload::Backpressure`]); the bytes after it stay in the
    /// decoder.
    held: Option<frame::Frame>,
    /// The peer ended its input (or the server drains) while a frame was
    /// held: input closes once the held frames are handled.
    end_pending: bool,
    /// [`Server::drain`] was called: new calls are refused, retryably.
    draining: bool,
    /// The trace id of the `tools/call` being handled, when it carries a
    /// valid trace context: its record's `trace_id`.
    call_trace: Option<TraceId>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("dialect", &self.dialect)
            .field("in_flight", &self.pending.len())
            .field("input_closed", &self.input_closed)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// How many cancelled tickets a connection remembers (to refuse a late
    /// answer for one with [`RespondError::Cancelled`] rather than
    /// [`RespondError::UnknownTicket`]).
    pub const CANCELLED_MEMORY: usize = 1024;

    /// A connection of the server `config` describes. The configuration
    /// is shared: make it once, and a connection costs only its own state.
    pub fn new(config: impl Into<Arc<ServerConfig>>) -> Self {
        let config = config.into();
        let decoder = match config.framing {
            Some(framing) => Decoder::with_framing(framing, config.limits),
            None => Decoder::new(config.limits),
        };
        let dialect = match config.dialect {
            DialectChoice::Fixed(dialect) => dialect,
            DialectChoice::Auto => Dialect::DecisionGate,
        };
        Server {
            config,
            decoder,
            dialect,
            revision: McpRevision::LATEST_HANDSHAKE,
            speech: Speech {
                dialect,
                revision: McpRevision::LATEST_HANDSHAKE,
            },
            headers: None,
            pending: BTreeMap::new(),
            cancelled: BTreeSet::new(),
            cancelled_order: VecDeque::new(),
            batches: BTreeMap::new(),
            next_ticket: 0,
            next_batch: 0,
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            input_closed: false,
            held: None,
            end_pending: false,
            draining: false,
            call_trace: None,
        }
    }

    /// Speak `dialect` on this connection from now on, whatever the
    /// configuration's [`DialectChoice`] (HTTP decides it per request,
    /// from the endpoint and headers). Call it before the first message.
    pub fn set_dialect(&mut self, dialect: Dialect) {
        self.dialect = dialect;
    }

    /// Speak MCP `revision` on this connection, as if `initialize` had
    /// negotiated it (HTTP decides it per request from the
    /// `MCP-Protocol-Version` header). Call it before the first message.
    pub fn set_revision(&mut self, revision: McpRevision) {
        self.revision = revision;
    }

    /// The MCP revision the connection negotiated (by default the newest
    /// with a handshake).
    pub fn revision(&self) -> McpRevision {
        self.revision
    }

    /// The HTTP headers of the next message ([`Server::handle_message`]),
    /// which a stateless request's body must agree with.
    pub fn set_message_headers(&mut self, headers: MessageHeaders) {
        self.headers = Some(headers);
    }

    /// The configuration this connection serves.
    pub fn config(&self) -> &Arc<ServerConfig> {
        &self.config
    }

    /// The capabilities contract this server enforces, if any.
    pub fn contract(&self) -> Option<&ServerContract> {
        self.config.contract.as_ref()
    }

    /// The contract JSON for Decision Gate's `capabilities_path` (what
    /// `evidence-wire contract` prints), if a contract is set.
    pub fn contract_json(&self) -> Option<String> {
        self.config
            .contract
            .as_ref()
            .map(ServerContract::contract_json)
    }

    /// The dialect answers currently get.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The framing of the input (and output), once detected.
    pub fn framing(&self) -> Option<Framing> {
        self.decoder.framing()
    }

    /// How many queries are waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// True after a fatal framing error or the end of input: no more
    /// messages will be read.
    pub fn is_input_closed(&self) -> bool {
        self.input_closed
    }

    /// True when input is closed, nothing is in flight and every output
    /// byte has been *handed out* ([`Server::poll_transmit`] returned
    /// `None`). It says nothing of what the embedder has written yet: with
    /// non-blocking I/O, write out (and flush) everything taken before
    /// closing the connection, or a slow reader loses its last answers.
    pub fn is_finished(&self) -> bool {
        self.input_closed && self.pending.is_empty() && self.transmits.is_empty()
    }

    /// True while the server takes more input: input is open, and no
    /// message waits for a slot under the in-flight cap
    /// ([`Overload::Backpressure`]). A stdio adapter reads only while this
    /// holds, so a peer that pipelines more calls than the cap is slowed
    /// by its pipe filling up instead of being refused; an answer
    /// ([`Server::respond`], [`Server::respond_tool`]) makes it true again
    /// once the held messages fit. Bytes fed while it is false are still
    /// taken (they wait in the decoder), so reading one chunk too many
    /// costs only that chunk's memory.
    pub fn wants_input(&self) -> bool {
        !self.input_closed && !self.end_pending && self.held.is_none()
    }

    /// True after [`Server::drain`].
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Stop taking calls, to shut down gracefully: input closes (read
    /// nothing more), every message already received is still handled and
    /// answered (a call that would wait for the embedder is answered with
    /// the retryable `OVERLOADED` error, saying that the server is
    /// shutting down; pings, `initialize` and inline tools as usual), and
    /// the queries in flight run on: answer them as usual, then the
    /// connection is [`Server::is_finished`]. A partial frame left in the
    /// buffer is dropped without an error (the peer did nothing wrong).
    /// At the embedder's deadline, [`Server::expire_in_flight`] answers
    /// the queries still running.
    pub fn drain(&mut self) {
        if self.draining {
            return;
        }
        self.draining = true;
        if self.input_closed {
            return;
        }
        self.end_pending = true;
        self.drain_frames();
    }

    /// Answers every query still in flight with the retryable `OVERLOADED`
    /// error (503 / -32072), saying that the server shut down before it
    /// finished, and forgets them (a later answer is refused as
    /// [`RespondError::UnknownTicket`]): what an embedder calls when its
    /// drain deadline passes, so that no caller waits for an answer that
    /// will never come. Returns how many were answered.
    pub fn expire_in_flight(&mut self) -> usize {
        let tickets: Vec<Ticket> = self.pending.keys().copied().collect();
        let detail = "the server shut down before this call finished (drain deadline); send it again, to another instance or after the restart";
        for ticket in &tickets {
            let _ = self.expire(*ticket, detail);
        }
        tickets.len()
    }

    /// Answers the call of `ticket` with the retryable `OVERLOADED` error
    /// (503 / -32072) carrying `detail`, and forgets it (a later answer is
    /// refused as [`RespondError::UnknownTicket`]): what an embedder does
    /// with a call it will not run after all (its own limit on running
    /// work is reached, the drain deadline passed) so that its caller does
    /// not wait for an answer that will never come. A ticket the peer
    /// cancelled is refused as [`RespondError::Cancelled`] (nothing is
    /// sent).
    pub fn expire(&mut self, ticket: Ticket, detail: &str) -> Result<(), RespondError> {
        if self.cancelled.remove(&ticket) {
            self.cancelled_order
                .retain(|cancelled| *cancelled != ticket);
            return Err(RespondError::Cancelled(ticket));
        }
        let call = self
            .pending
            .remove(&ticket)
            .ok_or(RespondError::UnknownTicket(ticket))?;
        let deferred = DeferredCall::of(&call);
        let outcome = self.reply_error(
            &call.id,
            call.batch,
            CanonicalError::Overloaded,
            detail.to_owned(),
            Some(call.tool),
        );
        // A tool call's record waits for its answer: this is it. An
        // evidence query was recorded when it was accepted.
        if call.kind == CallKind::Tool {
            self.push_deferred_outcome(deferred, outcome);
        }
        // A slot is free: what was held at the cap goes on.
        self.resume();
        Ok(())
    }

    /// Feed bytes read from the peer (empty input changes nothing: the
    /// end of input is [`Server::handle_end_of_input`], the one way to say it).
    ///
    /// Every complete message in the buffer is handled before this returns,
    /// except at the in-flight cap under [`Overload::Backpressure`]: then
    /// the rest waits, unread, for an answer to free a slot (see
    /// [`Server::wants_input`]).
    pub fn handle_input(&mut self, input: &[u8]) {
        if self.input_closed || self.end_pending || input.is_empty() {
            return;
        }
        self.decoder.push(input);
        self.drain_frames();
    }

    /// The peer closed its side: check for a truncated last frame, then
    /// stop reading. Queries in flight may still be answered; messages
    /// held at the in-flight cap are handled as answers free slots, and
    /// input counts as closed once they all are.
    pub fn handle_end_of_input(&mut self) {
        if self.input_closed || self.end_pending {
            return;
        }
        self.end_pending = true;
        self.drain_frames();
    }

    /// Input is over and nothing is held: check for a truncated last frame
    /// (unless draining: then a partial frame is not the peer's fault) and
    /// close input.
    fn close_input(&mut self) {
        if self.input_closed {
            return;
        }
        if !self.draining {
            if let Err(error) = self.decoder.finish() {
                self.events.push_back(ServerEvent::FramingError(error));
            }
        }
        self.input_closed = true;
    }

    /// True when a message must wait for a slot before it is handled.
    fn must_hold(&self) -> bool {
        !self.draining
            && self.config.overload == Overload::Backpressure
            && self.pending.len() >= self.config.max_in_flight.max(1)
    }

    /// An answer freed a slot: handle the messages held for one.
    fn resume(&mut self) {
        if self.held.is_some() {
            self.drain_frames();
        }
    }

    /// The next event for the embedding code.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// The next framed bytes to write to the peer.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.poll_transmit_into(&mut out).then_some(out)
    }

    /// [`Server::poll_transmit`] appending the framed bytes to `out`
    /// instead of returning them (an adapter that writes a batch of answers
    /// at once keeps one buffer and copies each answer once); true when a
    /// message was appended, false when there is nothing to send (or, as
    /// [`Server::poll_transmit`] answers `None`, when even the internal
    /// error that replaces an answer that cannot be framed cannot be).
    pub fn poll_transmit_into(&mut self, out: &mut Vec<u8>) -> bool {
        let Some(body) = self.transmits.pop_front() else {
            return false;
        };
        let framing = self
            .decoder
            .framing()
            .or(self.config.framing)
            .unwrap_or(Framing::ContentLength);
        let start = out.len();
        if frame::encode(framing, &body, out).is_err() {
            // Only a body with a raw newline fails, and serde_json never
            // writes one; answer an internal error rather than break the stream.
            out.truncate(start);
            let fallback = envelope::encode_error(
                None,
                CanonicalError::InternalError,
                Some("answer could not be framed"),
            );
            if frame::encode(framing, &fallback, out).is_err() {
                out.truncate(start);
                return false;
            }
        }
        true
    }

    /// The next message to send, unframed: one JSON-RPC body (an object,
    /// or a batch's array). The unframed twin of [`Server::poll_transmit`],
    /// for transports that carry one message per unit (an HTTP body).
    pub fn poll_message(&mut self) -> Option<Vec<u8>> {
        self.transmits.pop_front()
    }

    /// Feed one whole message, unframed (an HTTP request body): the
    /// unframed twin of [`Server::handle_input`]. Every answer it produces
    /// comes out of [`Server::poll_message`]. Surrounding whitespace is
    /// fine; an empty body is answered as unreadable JSON. Call
    /// [`Server::handle_end_of_input`] once no more messages will come.
    pub fn handle_message(&mut self, body: &[u8]) {
        if self.input_closed {
            return;
        }
        if body.len() > self.config.limits.max_body_bytes {
            self.refuse_frame(FrameError::BodyTooLarge {
                declared: u64::try_from(body.len()).unwrap_or(u64::MAX),
                limit: self.config.limits.max_body_bytes,
                offset: 0,
            });
            return;
        }
        self.handle_body(body);
    }

    /// Answer the tool call of `ticket` with a structured result or a failure.
    pub fn respond_tool(
        &mut self,
        ticket: Ticket,
        result: Result<Value, ToolFailure>,
    ) -> Result<(), RespondError> {
        let pending = self.take_pending(ticket, CallKind::Tool)?;
        let deferred = DeferredCall::of(&pending);
        // The call's record was held back until now (see `handle_message`):
        // it carries what was actually sent, an error included.
        let outcome = self.answer_tool(
            &pending.id,
            pending.batch,
            pending.speech,
            pending.tool,
            result,
        );
        self.push_deferred_outcome(deferred, outcome);
        self.resume();
        Ok(())
    }

    /// The `Handled` record of a call answered after it was validated.
    fn push_deferred_outcome(&mut self, call: DeferredCall, outcome: RequestOutcome) {
        self.events.push_back(ServerEvent::Handled(Outcome {
            id: Some(call.id),
            method: Some(Cow::Borrowed(TOOLS_CALL)),
            tool: outcome.tool,
            error: outcome.error,
            detail: outcome.detail,
            stateless: call.speech.is_stateless(),
            trace_id: call.trace_id,
        }));
    }

    fn take_pending(&mut self, ticket: Ticket, kind: CallKind) -> Result<Pending, RespondError> {
        if self.cancelled.remove(&ticket) {
            self.cancelled_order
                .retain(|cancelled| *cancelled != ticket);
            return Err(RespondError::Cancelled(ticket));
        }
        match self.pending.get(&ticket) {
            None => Err(RespondError::UnknownTicket(ticket)),
            Some(pending) if pending.kind != kind => Err(RespondError::WrongKind(ticket)),
            Some(_) => self
                .pending
                .remove(&ticket)
                .ok_or(RespondError::UnknownTicket(ticket)),
        }
    }

    /// Handles every complete frame received (a held one first), stopping
    /// at one that must wait for a slot; closes input once it has ended
    /// and nothing is held.
    fn drain_frames(&mut self) {
        loop {
            let next = match self.held.take() {
                Some(frame) => Ok(frame),
                None => match self.decoder.poll_frame() {
                    Some(next) => next,
                    None => break,
                },
            };
            match next {
                Ok(frame) if self.must_hold() && may_take_slot(&self.config, &frame.body) => {
                    self.held = Some(frame);
                    return;
                }
                Ok(frame) => self.handle_body(&frame.body),
                Err(error) if error.is_fatal() => {
                    self.events.push_back(ServerEvent::Fatal(error));
                    self.input_closed = true;
                    return;
                }
                Err(error) => self.refuse_frame(error),
            }
        }
        if self.end_pending {
            self.close_input();
        }
    }

    /// Answers a message that could not be read as a frame (too large,
    /// bad header) while the stream is still in sync, and records it.
    fn refuse_frame(&mut self, error: FrameError) {
        let canonical = match error {
            FrameError::BodyTooLarge { .. }
            | FrameError::LineTooLong { .. }
            | FrameError::HeaderTooLarge { .. } => CanonicalError::PayloadTooLarge,
            _ => CanonicalError::ParseError,
        };
        let detail = error.to_string();
        let body = envelope::encode_error(None, canonical, Some(&detail));
        self.reply(None, body);
        self.events.push_back(ServerEvent::Handled(Outcome {
            id: None,
            method: None,
            tool: None,
            error: Some(canonical),
            detail: Some(detail),
            stateless: false,
            trace_id: None,
        }));
        self.events.push_back(ServerEvent::FramingError(error));
    }

    fn handle_body(&mut self, body: &[u8]) {
        // With the built-in `evidence_query` schema, the usual call's
        // params are read in the envelope's one pass (checked as they are
        // read; `envelope::validate_reading_call`).
        let policy = &self.config.policy;
        let (validated, ready) = if self.config.registry.evidence_schema_builtin {
            let max_depth = policy.depth_limit();
            envelope::validate_reading_call(body, policy, |raw| {
                arguments::checked::call(raw, max_depth)
            })
        } else {
            (envelope::validate(body, policy), None)
        };
        match validated {
            Err(rejection) => {
                let id = rejection.id.clone();
                if rejection.answerable {
                    let body = envelope::encode_error(
                        id.as_ref(),
                        rejection.error,
                        Some(&rejection.detail),
                    );
                    self.reply(None, body);
                }
                self.events.push_back(ServerEvent::Handled(Outcome {
                    id,
                    method: None,
                    tool: None,
                    error: Some(rejection.error),
                    detail: Some(rejection.detail),
                    stateless: false,
                    trace_id: None,
                }));
            }
            Ok(Incoming::Single(message)) => self.handle_envelope(message, None, ready),
            Ok(Incoming::Batch(entries)) => {
                let batch_id = self.next_batch;
                self.next_batch = self.next_batch.wrapping_add(1);
                self.batches.insert(batch_id, Batch::default());
                for entry in entries {
                    match entry {
                        Ok(message) => self.handle_envelope(message, Some(batch_id), None),
                        Err(rejection) => {
                            let id = rejection.id.clone();
                            if rejection.answerable {
                                let body = envelope::encode_error(
                                    id.as_ref(),
                                    rejection.error,
                                    Some(&rejection.detail),
                                );
                                self.reply(Some(batch_id), body);
                            }
                            self.events.push_back(ServerEvent::Handled(Outcome {
                                id,
                                method: None,
                                tool: None,
                                error: Some(rejection.error),
                                detail: Some(rejection.detail),
                                stateless: false,
                                trace_id: None,
                            }));
                        }
                    }
                }
                if let Some(batch) = self.batches.get_mut(&batch_id) {
                    batch.sealed = true;
                }
                self.flush_batch(batch_id);
            }
        }
    }

    /// `ready`: the `evidence_query` call in the params, when the envelope
    /// pass already read it.
    fn handle_envelope(
        &mut self,
        message: Message<'_>,
        batch: Option<u64>,
        ready: Option<arguments::checked::ReadCall>,
    ) {
        match message {
            Message::Request(request) => {
                let id = request.id.into_owned();
                // Set by a `tools/call` whose trace context is valid.
                self.call_trace = None;
                let method = static_name(request.method);
                // Params read whole without a `_meta` member name no revision.
                let speech = match &ready {
                    Some(read) if !read.has_meta => Ok(self.connection_speech()),
                    _ => self.speech_of(&method, request.params),
                };
                let outcome = match speech {
                    Ok(speech) => {
                        self.speech = speech;
                        let ready = ready.map(|read| read.arguments);
                        self.handle_request(&id, &method, request.params, batch, ready)
                    }
                    Err(refusal) => {
                        self.speech = Speech::mcp(McpRevision::V2026_07_28);
                        self.refuse_stateless(&id, batch, refusal)
                    }
                };
                // A call handed to the embedder is recorded when it is
                // answered (`respond_tool`) or cancelled, with what was
                // actually sent (its trace id kept with it until then).
                let trace_id = self.call_trace.take();
                if outcome.deferred {
                    return;
                }
                self.events.push_back(ServerEvent::Handled(Outcome {
                    id: Some(id),
                    method: Some(method),
                    tool: outcome.tool,
                    error: outcome.error,
                    detail: outcome.detail,
                    stateless: self.speech.is_stateless(),
                    trace_id,
                }));
            }
            Message::Notification(notification) => {
                let refused = self.handle_notification(&notification.method, notification.params);
                self.events.push_back(ServerEvent::Handled(Outcome {
                    id: None,
                    method: Some(static_name(notification.method)),
                    tool: None,
                    error: refused.as_ref().map(|_| CanonicalError::InvalidToolInput),
                    detail: refused,
                    stateless: false,
                    trace_id: None,
                }));
            }
            Message::Response(response) => {
                // This server sends no requests, so a response answers nothing.
                self.events.push_back(ServerEvent::Handled(Outcome {
                    id: Some(response.id.into_owned()),
                    method: None,
                    tool: None,
                    error: None,
                    detail: Some("unsolicited response ignored".to_owned()),
                    stateless: false,
                    trace_id: None,
                }));
            }
        }
    }

    /// Acts on a notification; `Some(detail)` when its params were refused
    /// (a notification gets no answer, so this is only recorded).
    fn handle_notification(&mut self, method: &str, params: Option<&RawValue>) -> Option<String> {
        match method {
            "notifications/initialized" => {}
            "notifications/cancelled" => {
                let params = match read_params(params) {
                    Ok(params) => params,
                    Err(duplicate) => {
                        return Some(format!(
                            "notifications/cancelled ignored: its params are refused: {duplicate}"
                        ));
                    }
                };
                let request_id = params.get("requestId")?;
                let reason = params
                    .get("reason")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let found = self
                    .pending
                    .iter()
                    .find(|(_, pending)| Id::from_value(request_id).as_ref() == Some(&pending.id))
                    .map(|(ticket, _)| *ticket);
                if let Some(ticket) = found {
                    if let Some(pending) = self.pending.remove(&ticket) {
                        self.remember_cancelled(ticket);
                        if pending.kind == CallKind::Tool {
                            // Its record was held back for the answer,
                            // which will never be sent.
                            let outcome = RequestOutcome {
                                tool: Some(pending.tool.clone()),
                                error: None,
                                detail: Some(
                                    "cancelled by the peer before it was answered; nothing was sent"
                                        .to_owned(),
                                ),
                                deferred: false,
                            };
                            self.push_deferred_outcome(DeferredCall::of(&pending), outcome);
                        }
                        // A cancelled request gets no answer; a batch stops
                        // waiting for it.
                        if let Some(batch) = pending.batch {
                            if let Some(state) = self.batches.get_mut(&batch) {
                                state.outstanding = state.outstanding.saturating_sub(1);
                            }
                            self.flush_batch(batch);
                        }
                        self.events
                            .push_back(ServerEvent::Cancelled { ticket, reason });
                    }
                }
            }
            _ => {}
        }
        None
    }

    fn handle_request(
        &mut self,
        id: &Id<'static>,
        method: &str,
        params: Option<&RawValue>,
        batch: Option<u64>,
        ready: Option<EvidenceQueryArguments>,
    ) -> RequestOutcome {
        if self.pending.values().any(|pending| &pending.id == id) {
            let detail = format!("request id {id} is already in flight; use a fresh id");
            return self.reply_error(id, batch, CanonicalError::InvalidEnvelope, detail, None);
        }
        let resources = self.config.resources_enabled;
        match method {
            "initialize" => self.initialize(id, params, batch),
            "server/discover" => self.discover(id, batch),
            "ping" => self.ping(id, batch),
            "tools/list" => self.tools_list(id, params, batch),
            "tools/call" => self.handle_tool_call(id, params, batch, ready),
            "resources/list" if resources => self.resources_list(id, params, batch),
            "resources/templates/list" if resources => {
                self.resource_templates_list(id, params, batch)
            }
            "resources/read" if resources => self.resources_read(id, params, batch),
            _ => self.method_not_found(id, batch, method),
        }
    }

    fn issue_ticket(
        &mut self,
        id: &Id<'static>,
        kind: CallKind,
        batch: Option<u64>,
        tool: Cow<'static, str>,
    ) -> Ticket {
        let ticket = Ticket(self.next_ticket);
        self.next_ticket = self.next_ticket.wrapping_add(1);
        if let Some(batch) = batch {
            if let Some(state) = self.batches.get_mut(&batch) {
                state.outstanding = state.outstanding.saturating_add(1);
            }
        }
        self.pending.insert(
            ticket,
            Pending {
                id: id.clone(),
                kind,
                speech: self.speech,
                batch,
                tool,
                trace_id: self.call_trace,
            },
        );
        ticket
    }

    /// Remember a cancelled ticket so that a later answer for it is refused
    /// as [`RespondError::Cancelled`]; only the most recent
    /// [`Server::CANCELLED_MEMORY`] are kept (older ones read as unknown), so a peer
    /// that cancels forever cannot grow this without bound.
    fn remember_cancelled(&mut self, ticket: Ticket) {
        if self.cancelled.insert(ticket) {
            self.cancelled_order.push_back(ticket);
        }
        while self.cancelled_order.len() > Server::CANCELLED_MEMORY {
            if let Some(oldest) = self.cancelled_order.pop_front() {
                self.cancelled.remove(&oldest);
            }
        }
    }

    fn is_visible(&self, tool: &str) -> bool {
        match &self.config.tool_filter {
            Some(filter) => filter(tool),
            None => true,
        }
    }

    fn reply_ok(&mut self, id: &Id<'static>, batch: Option<u64>, result: &Value) -> RequestOutcome {
        let body = envelope::encode_reply(id, result);
        self.reply(batch, body);
        RequestOutcome::accepted(None)
    }

    fn reply_error(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        error: CanonicalError,
        detail: String,
        tool: Option<Cow<'static, str>>,
    ) -> RequestOutcome {
        let body = envelope::encode_error(Some(id), error, Some(&detail));
        self.reply(batch, body);
        RequestOutcome {
            tool,
            error: Some(error),
            detail: Some(detail),
            deferred: false,
        }
    }

    fn reply(&mut self, batch: Option<u64>, body: Vec<u8>) {
        match batch {
            None => self.transmit(body),
            Some(batch_id) => {
                if let Some(batch) = self.batches.get_mut(&batch_id) {
                    batch.bytes = batch.bytes.saturating_add(body.len());
                    batch.replies.push(body);
                    if batch.sealed {
                        batch.outstanding = batch.outstanding.saturating_sub(1);
                    }
                }
                self.flush_batch(batch_id);
            }
        }
    }

    fn flush_batch(&mut self, batch_id: u64) {
        let ready = match self.batches.get(&batch_id) {
            Some(batch) => batch.sealed && batch.outstanding == 0,
            None => false,
        };
        if !ready {
            return;
        }
        let Some(batch) = self.batches.remove(&batch_id) else {
            return;
        };
        // A batch of notifications only gets no reply at all.
        if batch.replies.is_empty() {
            return;
        }
        let mut body = Vec::new();
        body.push(b'[');
        for (index, reply) in batch.replies.iter().enumerate() {
            if index > 0 {
                body.push(b',');
            }
            body.extend_from_slice(reply);
        }
        body.push(b']');
        self.transmit(body);
    }

    /// Queues one answer body (unframed); [`Server::poll_transmit`]
    /// frames it, [`Server::poll_message`] hands it over as it is.
    fn transmit(&mut self, body: Vec<u8>) {
        self.transmits.push_back(body);
    }
}

/// `method` as a record keeps it: the methods this server knows borrow a
/// static name; any other is copied.
fn static_name(method: Cow<'_, str>) -> Cow<'static, str> {
    const KNOWN: [&str; 11] = [
        TOOLS_CALL,
        "tools/list",
        "initialize",
        "notifications/initialized",
        "notifications/cancelled",
        "ping",
        "server/discover",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "notifications/progress",
    ];
    match KNOWN.iter().find(|known| **known == method) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(method.into_owned()),
    }
}

/// What handling one request came to, for its `Handled` record.
pub(crate) struct RequestOutcome {
    tool: Option<Cow<'static, str>>,
    error: Option<CanonicalError>,
    detail: Option<String>,
    /// The call waits for the embedder ([`ServerEvent::ToolCall`]): its
    /// record is made when it is answered or cancelled, not now.
    deferred: bool,
}

impl RequestOutcome {
    pub(crate) fn accepted(tool: Option<Cow<'static, str>>) -> Self {
        RequestOutcome {
            tool,
            error: None,
            detail: None,
            deferred: false,
        }
    }
}

/// The method of every tool call.
const TOOLS_CALL: &str = "tools/call";

/// A method's params as a value (`null` when absent or unreadable, which
/// the envelope check makes rare), refusing a member named twice anywhere.
pub(crate) fn read_params(params: Option<&RawValue>) -> Result<Value, Duplicate> {
    match params.map(|raw| unique::from_str(raw.get())) {
        None | Some(Err(UniqueError::Syntax(_))) => Ok(Value::Null),
        Some(Ok(value)) => Ok(value),
        Some(Err(UniqueError::Duplicate(duplicate))) => Err(duplicate),
    }
}

/// Whether a message that arrives at the in-flight cap might start a call
/// (take a slot): a `tools/call` in its bytes, or an escape that could
/// spell one. Anything else (a cancellation, a ping, a response,
/// `tools/list`) is handled at once, so a peer can still cancel or probe a
/// connection whose slots are all busy; it only waits when it is queued
/// behind a held call (the stream is read in order).
fn may_take_slot(config: &ServerConfig, body: &[u8]) -> bool {
    config.finders.tools_call.find(body).is_some() || memchr::memchr(b'\\', body).is_some()
}
