//! The caller-side connection state machine (sans-IO).
//!
//! A [`Client`] talks to one provider. [`Client::query`] queues a framed
//! `tools/call` of `evidence_query` and returns its [`RequestId`]; the
//! adapter writes what [`Client::poll_transmit`] gives, feeds what the
//! provider writes back into [`Client::handle_input`], and reads
//! [`ClientEvent`]s. Any number of queries may be in flight; answers are
//! matched by id, never by order.
//!
//! Every answer is verified before it is reported: the EvidenceResult is
//! read from any of the three result shapes (json item, `structuredContent`,
//! JSON text), its hash checked (and its signature under
//! [`TrustPolicy::RequireSignature`](crate::evidence::TrustPolicy)). A
//! JSON-RPC error from the provider becomes [`QueryError::Provider`].
//!
//! A provider message that must be dropped (over a frame limit, nested
//! deeper than the envelope limit, not JSON to the end, not valid JSON-RPC)
//! but carries the id of a query in flight fails that query at once with
//! [`QueryError::AnswerDropped`], naming the limit: the id is read from
//! the envelope when it could be read, found by [`envelope::find_id`] in
//! the body otherwise, and, for a message skipped for its size or charset,
//! in its first [`Client::DROPPED_PREFIX_BYTES`] bytes (kept by the decoder). When
//! no id can be found the queries keep waiting, and a timeout then says
//! that a message was dropped meanwhile ([`QueryError::TimeoutAfterDrop`]).
//!
//! Time is injected: [`Client::poll_timeout`] says when the next deadline
//! is, [`Client::handle_timeout`] expires queries; a late answer for an
//! expired query is discarded. After a fatal framing error the stream cannot
//! be trusted: every query in flight fails and [`Client::needs_restart`]
//! tells the adapter to restart the provider and call [`Client::restart`].
//!
//! # Raw access (for conformance checkers)
//!
//! Besides verified queries, a caller may look at the wire itself:
//! [`Client::request`] sends any request (`tools/list`, `initialize`,
//! `resources/read`) and [`Client::query_raw`] the same `evidence_query`
//! bytes as [`Client::query`]; their answers come back unverified, as the
//! provider wrote them ([`ClientEvent::Reply`]), with the same id matching,
//! deadlines and dropped-answer rules; [`Client::verify_answer`] then runs
//! exactly the checks a query's answer goes through. [`Client::send_raw`]
//! writes bytes verbatim (a broken frame on purpose), and
//! [`Client::expect_reply`] reserves an id for a request written that way,
//! so that its answer is matched too. [`Client::detected_framing`] says how
//! the provider frames its output.
//!
//! Limits: frame limits from [`frame::Limits`]; the memory of expired ids
//! (to drop late answers) is bounded by [`ClientConfig::late_answer_memory`];
//! of a skipped message at most [`Client::DROPPED_PREFIX_BYTES`] are kept.
//!
//! # Driving it
//!
//! 1. **Inputs.** [`Client::query`] (and [`Client::cancel`]) with the time
//!    `now`; [`Client::handle_input`] with the bytes the provider wrote
//!    (framed), or [`Client::handle_message`] with one whole message (an
//!    HTTP answer body); [`Client::handle_end_of_input`] once the provider
//!    closed its output; [`Client::handle_timeout`] when
//!    [`Client::poll_timeout`]'s deadline has passed.
//! 2. **Output, until `None`.** [`Client::poll_transmit`] (framed in
//!    [`ClientConfig::framing`]) or [`Client::poll_message`] (unframed)
//!    after every input: a query is only sent once its bytes are written.
//! 3. **Events, until `None`.** [`Client::poll_event`]: one
//!    [`ClientEvent::Answer`] per query, exactly once (verified evidence, or
//!    why there is none).
//! 4. **Sleep** until [`Client::poll_timeout`] or the next input.
//!
//! ```
//! use evidence_wire::client::{Client, ClientConfig, ClientEvent};
//! use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime};
//! use evidence_wire::server::{Server, ServerConfig, ServerEvent};
//!
//! let mut client = Client::new(ClientConfig::default());
//! // The provider: a core server in memory (any transport would do).
//! let mut provider = Server::new(ServerConfig::default());
//! let now = 0;
//! let id = client.query(
//!     &EvidenceQuery::new("p", "answer"),
//!     &EvidenceContext::adhoc(TriggerTime::UnixMillis(now as i64)),
//!     now,
//! );
//! let mut answer = None;
//! while answer.is_none() {
//!     // 2. output to the provider; it answers (its own loop, inlined).
//!     while let Some(bytes) = client.poll_transmit() {
//!         provider.handle_input(&bytes);
//!     }
//!     while let Some(event) = provider.poll_event() {
//!         if let ServerEvent::EvidenceQuery { ticket, .. } = event {
//!             let value = EvidenceValue::json(&42)?;
//!             provider.respond(ticket, EvidenceResult::with_value(value)).expect("in flight");
//!         }
//!     }
//!     // 1. input: what the provider wrote.
//!     while let Some(bytes) = provider.poll_transmit() {
//!         client.handle_input(&bytes);
//!     }
//!     // 3. events: the verified answer.
//!     while let Some(event) = client.poll_event() {
//!         if let ClientEvent::Answer { id: answered, outcome } = event {
//!             assert_eq!(answered, id);
//!             answer = Some(outcome);
//!         }
//!     }
//! }
//! let evidence = answer.expect("answered").expect("verified");
//! assert!(evidence.hash().is_some(), "the hash was checked (or computed)");
//! # Ok::<(), serde_json::Error>(())
//! ```

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::dialect::{self, Dialect, HashProfile, McpRevision, ToolResultError};
use crate::envelope::{self, Id, Incoming, Message, Policy};
use crate::error::CanonicalError;
use crate::evidence::{
    self, EVIDENCE_QUERY_TOOL, EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult,
    TrustPolicy, VerifiedEvidence, VerifyError,
};
use crate::frame::{self, Decoder, Framing, Limits};
use crate::trace::TraceContext;

/// The most of a provider's refusal message (escaped, as JSON text) that a
/// handshake error quotes.
const MAX_ERROR_MESSAGE_BYTES: usize = 256;

/// Everything that shapes a client connection.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Frame limits for the provider's answers (default
    /// [`Limits::default`]: 1 MiB bodies, 8 KiB header blocks).
    pub limits: Limits,
    /// Framing of requests (Decision Gate providers: Content-Length; MCP
    /// stdio servers: newline-delimited). Answers are read in either,
    /// detected from the provider's first byte; output that starts with
    /// neither JSON nor a `Content-...` header (a banner line) is read in
    /// this framing ([`Decoder::with_fallback`]). Default Content-Length.
    pub framing: Framing,
    /// Run the MCP `initialize` handshake before the first query (default
    /// off, as Decision Gate calls).
    pub handshake: bool,
    /// How long a query may wait for its answer, in milliseconds (default
    /// 10000).
    pub request_timeout_ms: u64,
    /// What a result must satisfy to be trusted (default
    /// [`TrustPolicy::Audit`]: a present hash must match; no signature
    /// needed).
    pub trust: TrustPolicy,
    /// The canonicalization profile hashes are checked with: by default
    /// the one the connection's dialect uses (`decision-gate` without the
    /// handshake, RFC 8785 after it; see [`crate::dialect`]).
    pub profile: HashProfile,
    /// How many expired request ids are remembered to drop late answers
    /// (default 1024).
    pub late_answer_memory: usize,
    /// `clientInfo` sent in `initialize` (default `evidence-wire`).
    pub client_name: String,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            limits: Limits::default(),
            framing: Framing::ContentLength,
            handshake: false,
            request_timeout_ms: 10_000,
            trust: TrustPolicy::Audit,
            profile: HashProfile::FollowDialect,
            late_answer_memory: 1024,
            client_name: "evidence-wire".to_owned(),
        }
    }
}

/// The JSON-RPC id of one query (unique per client, across restarts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(i64);

impl RequestId {
    /// The id as sent on the wire.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request {}", self.0)
    }
}

/// Why a query produced no trusted evidence.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The provider answered with a JSON-RPC error.
    #[error("provider error {code}: {message}")]
    Provider {
        /// The JSON-RPC error code.
        code: i64,
        /// The provider's message.
        message: String,
        /// The error's `data`, if any.
        data: Option<Value>,
    },
    /// The answer holds no readable EvidenceResult.
    #[error("provider answer unreadable: {0}")]
    BadResult(ToolResultError),
    /// The evidence failed verification.
    #[error("evidence rejected: {0}")]
    Verification(VerifyError),
    /// The provider sent a message carrying this query's id that the
    /// client had to drop: over a frame limit, nested deeper than the
    /// envelope limit, not JSON, or not valid JSON-RPC. The query fails as
    /// soon as the message is seen, rather than at its timeout; the reason
    /// names the limit.
    #[error("the provider's answer was dropped unread: {0}")]
    AnswerDropped(String),
    /// No answer came before the deadline.
    #[error("no answer within {0} ms")]
    Timeout(u64),
    /// No answer came before the deadline, and meanwhile the client had to
    /// drop a provider message that may have been this answer: one over a
    /// frame limit, or JSON that is not valid JSON-RPC. (Lines that are not
    /// JSON at all, such as a banner, do not count.)
    #[error(
        "no answer within {timeout_ms} ms; meanwhile a provider message that may have been this answer was dropped: {dropped}"
    )]
    TimeoutAfterDrop {
        /// The request timeout in milliseconds.
        timeout_ms: u64,
        /// Why the last message dropped while the query waited was dropped.
        dropped: String,
    },
    /// The provider's stream broke (fatal framing error, exit, restart).
    #[error("connection to the provider lost: {0}")]
    ConnectionLost(String),
    /// The query was cancelled by the caller.
    #[error("query cancelled")]
    Cancelled,
}

impl QueryError {
    /// A stable machine-readable name of the failure.
    pub fn code(&self) -> &'static str {
        match self {
            QueryError::Provider { .. } => "provider_error",
            QueryError::BadResult(_) | QueryError::AnswerDropped(_) => "invalid_provider_result",
            QueryError::Verification(error) => error.kind(),
            QueryError::Timeout(_) | QueryError::TimeoutAfterDrop { .. } => "provider_timeout",
            QueryError::ConnectionLost(_) => "provider_unavailable",
            QueryError::Cancelled => "cancelled",
        }
    }

    /// This failure as an EvidenceResult carrying an error (what Decision
    /// Gate records): a JSON-RPC error becomes code `provider_error` with
    /// the provider's code and message in `details`.
    pub fn to_evidence_result(&self) -> EvidenceResult {
        let details = match self {
            QueryError::Provider {
                code,
                message,
                data,
            } => json!({"code": code, "message": message, "data": data}),
            QueryError::Verification(error) => json!({"kind": error.kind()}),
            QueryError::Timeout(ms) => json!({"timeout_ms": ms}),
            QueryError::AnswerDropped(dropped) => json!({"dropped": dropped}),
            QueryError::TimeoutAfterDrop {
                timeout_ms,
                dropped,
            } => json!({"timeout_ms": timeout_ms, "dropped": dropped}),
            _ => Value::Null,
        };
        let mut error = EvidenceError::new(self.code(), self.to_string());
        if !details.is_null() {
            error = error.with_details(details);
        }
        EvidenceResult::with_error(error)
    }
}

/// Why an incoming message was not taken as an answer.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Skipped {
    /// A notification from the provider (logs, progress).
    Notification {
        /// Its method.
        method: String,
    },
    /// A response whose id matches no query in flight.
    UnknownId(Value),
    /// A response for a query that already timed out or was cancelled.
    LateAnswer(RequestId),
    /// A request from the provider; it was answered "method not found"
    /// (or `{}` for `ping`).
    ProviderRequest {
        /// Its method.
        method: String,
    },
    /// A message that is not valid JSON-RPC, or a recoverable framing error.
    Invalid(String),
}

/// What the client tells the adapter.
#[derive(Clone, Debug)]
#[non_exhaustive]
// `Answer` is the common event and is moved once to its waiter; boxing it
// would cost an allocation per answer for no gain.
#[allow(clippy::large_enum_variant)]
pub enum ClientEvent {
    /// The outcome of one query.
    Answer {
        /// The query.
        id: RequestId,
        /// Verified evidence, or why there is none.
        outcome: Result<VerifiedEvidence, QueryError>,
    },
    /// The answer to a request made with [`Client::request`],
    /// [`Client::query_raw`] or [`Client::expect_reply`]: the JSON-RPC
    /// `result` exactly as the provider wrote it, unverified, or why there
    /// is none (a JSON-RPC error is [`QueryError::Provider`]). Exactly once
    /// per request, like [`ClientEvent::Answer`].
    Reply {
        /// The request.
        id: RequestId,
        /// The `result`, or why there is none.
        outcome: Result<Box<RawValue>, QueryError>,
    },
    /// A message that answered nothing (reported, never taken as an answer).
    Skipped(Skipped),
    /// The MCP handshake finished.
    Initialized {
        /// The protocol version the provider chose.
        protocol_version: String,
    },
    /// The stream is broken: restart the provider, then call [`Client::restart`].
    Fatal(String),
    /// The provider closed its output at a message boundary (it exited, or
    /// ended the connection): not a broken stream, but nothing more will
    /// come. Queries still in flight failed with
    /// [`QueryError::ConnectionLost`]; start a fresh provider and call
    /// [`Client::restart`] before asking again.
    Closed,
}

#[derive(Debug)]
struct Pending {
    deadline: u64,
    /// [`Client::dropped`] when the query was asked.
    dropped_before: u64,
    /// Answered as a [`ClientEvent::Reply`] (unverified) rather than an
    /// [`ClientEvent::Answer`].
    raw: bool,
}

/// What waits in the output queue.
#[derive(Debug)]
enum Outgoing {
    /// One message, framed by [`Client::poll_transmit`].
    Message(Vec<u8>),
    /// Bytes written as they are ([`Client::send_raw`]).
    Raw(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handshake {
    NotNeeded,
    Waiting(i64),
    Done,
}

/// The caller side of one provider connection. See the module docs.
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    decoder: Decoder,
    next_id: i64,
    pending: BTreeMap<i64, Pending>,
    expired: BTreeSet<i64>,
    expired_order: VecDeque<i64>,
    handshake: Handshake,
    handshake_deadline: Option<u64>,
    /// Queries waiting for the handshake to finish, with their ids (a
    /// query cancelled or expired before then is never sent).
    held: VecDeque<(i64, Vec<u8>)>,
    events: VecDeque<ClientEvent>,
    transmits: VecDeque<Outgoing>,
    needs_restart: bool,
    policy: Policy,
    /// Provider messages dropped so far that may have been answers (each
    /// query remembers the count when it was asked).
    dropped: u64,
    /// Why the last of them was dropped.
    last_dropped: Option<String>,
}

impl Client {
    /// How many first bytes of a provider message skipped for its size or
    /// charset the client keeps, to find the id of the query it answered
    /// ([`frame::Decoder::keep_skipped_prefix`]). Providers write `id` near the
    /// start (`{"jsonrpc":"2.0","id":7,"result":…}`); one that writes it after
    /// a large `result` is not recognized, and its query times out as
    /// [`QueryError::TimeoutAfterDrop`].
    pub const DROPPED_PREFIX_BYTES: usize = 1024;

    /// A client; with `config.handshake` it queues `initialize` at once.
    ///
    /// The handshake's deadline starts with the first [`Client::query`]
    /// (the first call that tells the time), so any monotonic clock works,
    /// not only one that starts at 0, and an idle client keeps no timer.
    pub fn new(config: ClientConfig) -> Self {
        let mut client = Client {
            decoder: Decoder::with_fallback(config.framing, config.limits)
                .keep_skipped_prefix(Client::DROPPED_PREFIX_BYTES),
            config,
            next_id: 1,
            pending: BTreeMap::new(),
            expired: BTreeSet::new(),
            expired_order: VecDeque::new(),
            handshake: Handshake::NotNeeded,
            handshake_deadline: None,
            held: VecDeque::new(),
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            needs_restart: false,
            policy: Policy::jsonrpc(),
            dropped: 0,
            last_dropped: None,
        };
        client.start_handshake(None);
        client
    }

    fn start_handshake(&mut self, now: Option<u64>) {
        if !self.config.handshake {
            self.handshake = Handshake::NotNeeded;
            return;
        }
        let id = self.take_id();
        let params = json!({
            "protocolVersion": McpRevision::HANDSHAKE[0].as_str(),
            "capabilities": {},
            "clientInfo": {"name": self.config.client_name, "version": env!("CARGO_PKG_VERSION")},
        });
        let body = request_body(id, "initialize", &params);
        self.handshake = Handshake::Waiting(id);
        self.handshake_deadline = now.map(|now| now.saturating_add(self.config.request_timeout_ms));
        self.transmit(body);
    }

    fn take_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        id
    }

    /// Queue a query; `now` is the current time in milliseconds (any
    /// monotonic clock, the same one passed to [`Client::handle_timeout`]).
    pub fn query(
        &mut self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
        now: u64,
    ) -> RequestId {
        self.query_traced(query, context, None, now)
    }

    /// [`Client::query`] carrying the caller's W3C trace context (when
    /// `trace` is given) as `params._meta.traceparent` (and
    /// `params._meta.tracestate`), after `arguments`, so the provider's
    /// work joins the caller's trace. Without one the request is byte for
    /// byte [`Client::query`]'s. (Over HTTP the transport also sends the
    /// `traceparent` header.)
    pub fn query_traced(
        &mut self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
        trace: Option<&TraceContext>,
        now: u64,
    ) -> RequestId {
        let id = self.take_id();
        let body = query_body(id, query, context, trace);
        self.send_request(id, body, false, now)
    }

    /// Queue the same `evidence_query` request as [`Client::query`], but
    /// report its answer unverified, as a [`ClientEvent::Reply`] holding
    /// the `tools/call` result as written: for a caller that inspects the
    /// answer itself (its shape, its hash under several profiles) and then
    /// calls [`Client::verify_answer`] for the client's own verdict.
    pub fn query_raw(
        &mut self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
        now: u64,
    ) -> RequestId {
        let id = self.take_id();
        let body = query_body(id, query, context, None);
        self.send_request(id, body, true, now)
    }

    /// Queue any request (`tools/list`, `resources/read`, `ping`, …; params
    /// omitted when `None`). Its answer comes back as a
    /// [`ClientEvent::Reply`], with the same id matching, deadline and
    /// handshake ordering as a query.
    pub fn request(&mut self, method: &str, params: Option<&Value>, now: u64) -> RequestId {
        let id = self.take_id();
        let body = envelope::encode_request(&Id::Number(id), method, params).unwrap_or_default();
        self.send_request(id, body, true, now)
    }

    /// Reserve the id of a request the caller writes itself with
    /// [`Client::send_raw`] (a frame broken on purpose, still carrying this
    /// id): an answer carrying it is reported as a [`ClientEvent::Reply`],
    /// and without one the request times out like any other.
    pub fn expect_reply(&mut self, now: u64) -> RequestId {
        let id = self.take_id();
        self.track(id, true, now);
        RequestId(id)
    }

    /// Queue `bytes` to be written exactly as given, unframed and
    /// unchecked, after what is already queued (but ahead of requests held
    /// for the handshake): for probing how a provider copes with a broken
    /// frame. [`Client::poll_transmit`] and [`Client::poll_message`] return
    /// them as they are.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.transmits.push_back(Outgoing::Raw(bytes.to_vec()));
        }
    }

    /// The client's verdict on a `tools/call` result (as a
    /// [`ClientEvent::Reply`] holds it): the EvidenceResult read from any of
    /// the three shapes, its hash checked with [`Client::hash_profile`] and
    /// its signature under [`ClientConfig::trust`], exactly as an answer to
    /// [`Client::query`] is checked.
    pub fn verify_answer(&self, result: &RawValue) -> Result<VerifiedEvidence, QueryError> {
        match dialect::from_tool_result(result) {
            Ok((result, _shape)) => {
                evidence::verify(result, &self.config.trust, self.hash_profile())
                    .map_err(QueryError::Verification)
            }
            Err(error) => Err(QueryError::BadResult(error)),
        }
    }

    /// The framing of the provider's output, once its first bytes have
    /// been seen (`None` before that).
    pub fn detected_framing(&self) -> Option<Framing> {
        self.decoder.framing()
    }

    fn track(&mut self, id: i64, raw: bool, now: u64) {
        self.pending.insert(
            id,
            Pending {
                deadline: now.saturating_add(self.config.request_timeout_ms),
                dropped_before: self.dropped,
                raw,
            },
        );
    }

    /// Registers request `id` and sends `body`, or holds it for the handshake.
    fn send_request(&mut self, id: i64, body: Vec<u8>, raw: bool, now: u64) -> RequestId {
        self.track(id, raw, now);
        match self.handshake {
            Handshake::Waiting(_) => {
                if self.handshake_deadline.is_none() && !self.needs_restart {
                    self.handshake_deadline =
                        Some(now.saturating_add(self.config.request_timeout_ms));
                }
                self.held.push_back((id, body));
            }
            Handshake::NotNeeded | Handshake::Done => self.transmit(body),
        }
        RequestId(id)
    }

    /// Cancel a query: it fails with [`QueryError::Cancelled`], the
    /// provider is told (`notifications/cancelled`) if the query was sent,
    /// a query still waiting for the handshake is never sent, and a late
    /// answer is dropped. False when `id` is not in flight.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        let Some(pending) = self.pending.remove(&id.0) else {
            return false;
        };
        self.remember_expired(id.0);
        self.withdraw(id.0, "cancelled by the caller");
        self.fail_request(id.0, pending.raw, QueryError::Cancelled);
        true
    }

    /// Reports that request `id` failed with `error`, as the event its
    /// kind calls for: an [`ClientEvent::Answer`] for a query, a
    /// [`ClientEvent::Reply`] for a raw request.
    fn fail_request(&mut self, id: i64, raw: bool, error: QueryError) {
        let id = RequestId(id);
        self.events.push_back(if raw {
            ClientEvent::Reply {
                id,
                outcome: Err(error),
            }
        } else {
            ClientEvent::Answer {
                id,
                outcome: Err(error),
            }
        });
    }

    /// How many queries wait for an answer.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// True after a fatal stream error: restart the provider and call
    /// [`Client::restart`].
    pub fn needs_restart(&self) -> bool {
        self.needs_restart
    }

    /// The earliest deadline (milliseconds), if any query waits.
    pub fn poll_timeout(&self) -> Option<u64> {
        let earliest = self.pending.values().map(|pending| pending.deadline).min();
        match (earliest, self.handshake_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expire every query whose deadline is at or before `now`.
    pub fn handle_timeout(&mut self, now: u64) {
        if let (Handshake::Waiting(_), Some(deadline)) = (self.handshake, self.handshake_deadline) {
            if deadline <= now {
                // The provider is unresponsive, not one query slow: every
                // query fails as a lost connection and the adapter restarts.
                let reason = format!(
                    "the provider did not answer initialize within {} ms",
                    self.config.request_timeout_ms
                );
                self.fail_all(&QueryError::ConnectionLost(reason.clone()));
                self.needs_restart = true;
                self.events.push_back(ClientEvent::Fatal(reason));
                self.handshake_deadline = None;
                return;
            }
        }
        let expired: Vec<i64> = self
            .pending
            .iter()
            .filter(|(_, pending)| pending.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        // A message being skipped whose first bytes (where its id would be)
        // never came is a dropped message too.
        if !expired.is_empty() {
            if let Some(held) = self.decoder.held_error() {
                self.dropped += 1;
                self.last_dropped = Some(held.to_string());
            }
        }
        for id in expired {
            let removed = self.pending.remove(&id);
            let dropped_before = removed.as_ref().map(|p| p.dropped_before);
            let raw = removed.is_some_and(|p| p.raw);
            self.remember_expired(id);
            self.withdraw(id, "timed out");
            let timeout_ms = self.config.request_timeout_ms;
            let error = match &self.last_dropped {
                Some(dropped) if dropped_before.is_some_and(|before| before < self.dropped) => {
                    QueryError::TimeoutAfterDrop {
                        timeout_ms,
                        dropped: dropped.clone(),
                    }
                }
                _ => QueryError::Timeout(timeout_ms),
            };
            self.fail_request(id, raw, error);
        }
    }

    /// Stop a query that no longer waits: drop it if it was held for the
    /// handshake, otherwise tell the provider (`notifications/cancelled`)
    /// so it can stop working on it.
    fn withdraw(&mut self, id: i64, reason: &str) {
        let held_before = self.held.len();
        self.held.retain(|(held, _)| *held != id);
        if self.held.len() != held_before || self.needs_restart {
            return;
        }
        let body = notification_body(
            "notifications/cancelled",
            &json!({"requestId": id, "reason": reason}),
        );
        self.transmit(body);
    }

    /// The provider is gone (exited, closed its output, or must be
    /// restarted): fail every query in flight with `reason`.
    pub fn connection_lost(&mut self, reason: &str) {
        self.fail_all(&QueryError::ConnectionLost(reason.to_owned()));
    }

    /// Start over with a fresh provider: queries in flight fail, the stream
    /// state is reset, ids keep counting (a late answer can never alias a
    /// new query), the handshake runs again when configured (its deadline
    /// starts with the next query, so an idle client keeps no timer).
    pub fn restart(&mut self, now: u64) {
        self.fail_all(&QueryError::ConnectionLost(
            "the provider was restarted".to_owned(),
        ));
        self.decoder = Decoder::with_fallback(self.config.framing, self.config.limits)
            .keep_skipped_prefix(Client::DROPPED_PREFIX_BYTES);
        self.transmits.clear();
        self.held.clear();
        self.needs_restart = false;
        self.handshake_deadline = None;
        // Like a new client, the handshake's deadline starts with the next
        // query: an idle client keeps no timer.
        let _ = now;
        self.start_handshake(None);
    }

    /// The dialect this connection speaks: MCP when it runs the handshake,
    /// Decision Gate otherwise.
    pub fn dialect(&self) -> Dialect {
        if self.config.handshake {
            Dialect::Mcp
        } else {
            Dialect::DecisionGate
        }
    }

    /// The profile evidence hashes of this connection are checked with.
    pub fn hash_profile(&self) -> crate::canonical::Profile {
        self.config.profile.for_dialect(self.dialect())
    }

    fn fail_all(&mut self, error: &QueryError) {
        let pending = core::mem::take(&mut self.pending);
        for (id, pending) in pending {
            self.remember_expired(id);
            self.fail_request(id, pending.raw, error.clone());
        }
        self.held.clear();
    }

    fn remember_expired(&mut self, id: i64) {
        if self.config.late_answer_memory == 0 {
            return;
        }
        if self.expired.insert(id) {
            self.expired_order.push_back(id);
        }
        while self.expired_order.len() > self.config.late_answer_memory {
            if let Some(oldest) = self.expired_order.pop_front() {
                self.expired.remove(&oldest);
            }
        }
    }

    /// Feed bytes the provider wrote (empty input changes nothing: the end
    /// of its output is [`Client::handle_end_of_input`]).
    pub fn handle_input(&mut self, input: &[u8]) {
        if self.needs_restart || input.is_empty() {
            return;
        }
        self.decoder.push(input);
        while let Some(next) = self.decoder.poll_frame() {
            match next {
                Ok(frame) => self.handle_body(&frame.body),
                Err(error) if error.is_fatal() => {
                    let reason = format!("provider stream desynchronized: {error}");
                    self.fail_all(&QueryError::ConnectionLost(reason.clone()));
                    self.needs_restart = true;
                    self.events.push_back(ClientEvent::Fatal(reason));
                    return;
                }
                Err(error) => {
                    // Only a message that was skipped whole may have been an
                    // answer; other framing errors are junk between frames.
                    let whole = matches!(
                        error,
                        frame::FrameError::BodyTooLarge { .. }
                            | frame::FrameError::LineTooLong { .. }
                            | frame::FrameError::UnsupportedCharset { .. }
                    );
                    let id = if whole {
                        envelope::find_id(self.decoder.skipped_prefix())
                    } else {
                        None
                    };
                    self.drop_message(error.to_string(), whole, id);
                }
            }
        }
    }

    /// The provider closed its output (end of file on its stdout, the
    /// connection closed): every query still in flight fails with
    /// [`QueryError::ConnectionLost`] and [`Client::needs_restart`] turns
    /// true. At a message boundary that is [`ClientEvent::Closed`]; a
    /// message cut short by the end is a broken stream,
    /// [`ClientEvent::Fatal`] naming it.
    pub fn handle_end_of_input(&mut self) {
        if self.needs_restart {
            return;
        }
        let (reason, event) = match self.decoder.finish() {
            Ok(()) => (
                "the provider closed its output".to_owned(),
                ClientEvent::Closed,
            ),
            Err(error) => {
                let reason = format!("the provider closed its output mid-message: {error}");
                (reason.clone(), ClientEvent::Fatal(reason))
            }
        };
        self.fail_all(&QueryError::ConnectionLost(reason));
        self.needs_restart = true;
        self.events.push_back(event);
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// The next framed bytes to write to the provider (in
    /// [`ClientConfig::framing`]).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.poll_transmit_into(&mut out).then_some(out)
    }

    /// [`Client::poll_transmit`] appending the framed bytes to `out`
    /// instead of returning them: an embedder that writes many requests at
    /// once keeps one buffer (as [`crate::server::Server::poll_transmit_into`]
    /// does on the other side). True when a message was appended, false
    /// when there is nothing to send.
    pub fn poll_transmit_into(&mut self, out: &mut Vec<u8>) -> bool {
        loop {
            let body = match self.transmits.pop_front() {
                None => return false,
                Some(Outgoing::Message(body)) => body,
                Some(Outgoing::Raw(bytes)) => {
                    out.extend_from_slice(&bytes);
                    return true;
                }
            };
            let start = out.len();
            // A body serde_json wrote holds no raw newline, so framing
            // cannot fail; a message that could not be framed is not sent.
            if frame::encode(self.config.framing, &body, out).is_ok() {
                return true;
            }
            out.truncate(start);
        }
    }

    /// The next message to send, unframed: one JSON-RPC request or
    /// notification. The unframed twin of [`Client::poll_transmit`], for
    /// transports that carry one message per unit (an HTTP request body).
    pub fn poll_message(&mut self) -> Option<Vec<u8>> {
        match self.transmits.pop_front()? {
            Outgoing::Message(body) | Outgoing::Raw(body) => Some(body),
        }
    }

    /// Feed one whole message the provider sent, unframed (an HTTP answer
    /// body): the unframed twin of [`Client::handle_input`]. A message over
    /// the frame limit is dropped as [`Client::handle_input`] drops an
    /// oversized frame.
    pub fn handle_message(&mut self, body: &[u8]) {
        if self.needs_restart {
            return;
        }
        let limit = self.config.limits.max_body_bytes;
        if body.len() > limit {
            let reason = format!(
                "a message of {} bytes is over the limit of {limit} bytes; it was dropped unread",
                body.len()
            );
            let prefix = body.get(..Client::DROPPED_PREFIX_BYTES).unwrap_or(body);
            let id = envelope::find_id(prefix);
            self.drop_message(reason, true, id);
            return;
        }
        self.handle_body(body);
    }

    /// A provider message that cannot be read (framing, JSON-RPC): report
    /// it. If it carries `id`, the id of a query in flight (or of the
    /// handshake), that fails at once ([`QueryError::AnswerDropped`]).
    /// Otherwise, if it may have been an answer while queries wait,
    /// remember it: their timeouts then say so
    /// ([`QueryError::TimeoutAfterDrop`]).
    fn drop_message(&mut self, reason: String, maybe_answer: bool, id: Option<Id<'_>>) {
        self.events
            .push_back(ClientEvent::Skipped(Skipped::Invalid(reason.clone())));
        if let Some(Id::Number(id)) = id {
            if self.handshake == Handshake::Waiting(id) {
                self.handshake_deadline = None;
                let reason =
                    format!("the provider's answer to initialize was dropped unread: {reason}");
                self.fail_all(&QueryError::ConnectionLost(reason.clone()));
                self.needs_restart = true;
                self.events.push_back(ClientEvent::Fatal(reason));
                return;
            }
            if let Some(pending) = self.pending.remove(&id) {
                self.remember_expired(id);
                self.fail_request(id, pending.raw, QueryError::AnswerDropped(reason));
                return;
            }
        }
        if maybe_answer && !self.pending.is_empty() {
            self.dropped += 1;
            self.last_dropped = Some(reason);
        }
    }

    fn handle_body(&mut self, body: &[u8]) {
        let incoming = match envelope::validate(body, &self.policy) {
            Ok(incoming) => incoming,
            Err(rejection) => {
                // JSON (or what starts like it) may have been an answer; a
                // line of plain text (a banner, a log line) was not.
                let json_like = body
                    .iter()
                    .find(|byte| !byte.is_ascii_whitespace())
                    .is_some_and(|byte| matches!(byte, b'{' | b'['));
                // The envelope's id when it was read; otherwise (too deep,
                // not JSON to the end) looked for in the body.
                let id = match rejection.id {
                    Some(id) => Some(id),
                    None if json_like => envelope::find_id(body),
                    None => None,
                };
                self.drop_message(
                    format!("{}: {}", rejection.error.name(), rejection.detail),
                    json_like,
                    id,
                );
                return;
            }
        };
        let messages = match incoming {
            Incoming::Single(message) => alloc::vec![Ok(message)],
            Incoming::Batch(entries) => entries,
        };
        for message in messages {
            match message {
                Ok(message) => self.handle_envelope(message),
                Err(rejection) => self.drop_message(rejection.detail, true, rejection.id),
            }
        }
    }

    fn handle_envelope(&mut self, message: Message<'_>) {
        match message {
            Message::Notification(notification) => {
                self.events
                    .push_back(ClientEvent::Skipped(Skipped::Notification {
                        method: notification.method.to_string(),
                    }));
            }
            Message::Request(request) => {
                let body = if request.method == "ping" {
                    envelope::encode_reply(&request.id, &json!({}))
                } else {
                    envelope::encode_error(
                        Some(&request.id),
                        CanonicalError::MethodNotFound,
                        Some("this client serves no requests"),
                    )
                };
                self.transmit(body);
                self.events
                    .push_back(ClientEvent::Skipped(Skipped::ProviderRequest {
                        method: request.method.to_string(),
                    }));
            }
            Message::Response(response) => {
                let Id::Number(id) = response.id else {
                    let id = serde_json::to_value(&response.id).unwrap_or(Value::Null);
                    self.events
                        .push_back(ClientEvent::Skipped(Skipped::UnknownId(id)));
                    return;
                };
                if self.handshake == Handshake::Waiting(id) {
                    let answer = response.outcome.map(|raw| raw.get()).map_err(|error| {
                        format!(
                            "JSON-RPC error {}: {}",
                            error.code,
                            crate::text::excerpt(&error.message, MAX_ERROR_MESSAGE_BYTES)
                        )
                    });
                    self.finish_handshake(answer);
                    return;
                }
                let Some(pending) = self.pending.remove(&id) else {
                    let skipped = if self.expired.contains(&id) {
                        Skipped::LateAnswer(RequestId(id))
                    } else {
                        Skipped::UnknownId(Value::from(id))
                    };
                    self.events.push_back(ClientEvent::Skipped(skipped));
                    return;
                };
                let provider_error = |error: envelope::ResponseError<'_>| QueryError::Provider {
                    code: error.code,
                    message: error.message.to_string(),
                    data: error
                        .data
                        .and_then(|raw| serde_json::from_str(raw.get()).ok()),
                };
                let event = if pending.raw {
                    ClientEvent::Reply {
                        id: RequestId(id),
                        outcome: response
                            .outcome
                            .map(|result| result.to_owned())
                            .map_err(provider_error),
                    }
                } else {
                    ClientEvent::Answer {
                        id: RequestId(id),
                        outcome: response
                            .outcome
                            .map_err(provider_error)
                            .and_then(|result| self.verify_answer(result)),
                    }
                };
                self.events.push_back(event);
            }
        }
    }

    /// `answer`: the `initialize` result, or the JSON-RPC error it was
    /// answered with (described).
    fn finish_handshake(&mut self, answer: Result<&str, String>) {
        self.handshake_deadline = None;
        let version = answer.as_ref().ok().and_then(|text| {
            serde_json::from_str::<Value>(text)
                .ok()?
                .get("protocolVersion")?
                .as_str()
                .map(str::to_owned)
        });
        let Some(version) = version else {
            let reason = match answer {
                Err(error) => format!("the provider refused initialize with {error}"),
                Ok(_) => "the provider answered initialize without a protocolVersion".to_owned(),
            };
            self.fail_all(&QueryError::ConnectionLost(reason.clone()));
            self.needs_restart = true;
            self.events.push_back(ClientEvent::Fatal(reason));
            return;
        };
        self.handshake = Handshake::Done;
        let body = notification_body("notifications/initialized", &json!({}));
        self.transmit(body);
        while let Some((_, held)) = self.held.pop_front() {
            self.transmit(held);
        }
        self.events.push_back(ClientEvent::Initialized {
            protocol_version: version,
        });
    }

    /// Queues one message (unframed); [`Client::poll_transmit`] frames it.
    fn transmit(&mut self, body: Vec<u8>) {
        self.transmits.push_back(Outgoing::Message(body));
    }
}

/// A request this client sends (its own types serialize without fail).
fn request_body<T: Serialize + ?Sized>(id: i64, method: &str, params: &T) -> Vec<u8> {
    envelope::encode_request(&Id::Number(id), method, Some(params)).unwrap_or_default()
}

/// The `tools/call` of `evidence_query` for `query` in `context`, members
/// in the order Decision Gate writes them (`name`, then `arguments` with
/// `query` before `context`), so that the bytes equal its own; with
/// `trace`, a `_meta` member carrying it follows `arguments`.
fn query_body(
    id: i64,
    query: &EvidenceQuery,
    context: &EvidenceContext,
    trace: Option<&TraceContext>,
) -> Vec<u8> {
    #[derive(Serialize)]
    struct Params<'a> {
        name: &'static str,
        arguments: Arguments<'a>,
        #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
        meta: Option<Map<String, Value>>,
    }
    #[derive(Serialize)]
    struct Arguments<'a> {
        query: &'a EvidenceQuery,
        context: &'a EvidenceContext,
    }
    let params = Params {
        name: EVIDENCE_QUERY_TOOL,
        arguments: Arguments { query, context },
        meta: trace.map(TraceContext::to_meta),
    };
    request_body(id, "tools/call", &params)
}

/// A notification this client sends.
fn notification_body<T: Serialize + ?Sized>(method: &str, params: &T) -> Vec<u8> {
    envelope::encode_notification(method, Some(params)).unwrap_or_default()
}
