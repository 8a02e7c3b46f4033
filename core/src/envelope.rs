//! JSON-RPC 2.0 envelopes: one frame body in, one typed message (or a batch,
//! or a canonical rejection) out; typed replies in, compact JSON bytes out.
//!
//! Every transport (stdio in either framing, HTTP, SSE) hands each frame
//! body to [`validate`], so the rules below cannot drift apart between them.
//! Parsing borrows from the body: method names and string ids are
//! `Cow::Borrowed` unless they hold escapes, and `params`, `result` and
//! `error.data` stay unparsed [`RawValue`]s until a handler asks for them.
//!
//! The rules are a [`Policy`]: [`Policy::mcp`] (the default), [`Policy::jsonrpc`]
//! (full JSON-RPC 2.0 with batches and null ids) and [`Policy::strict`] (the
//! seed's executable contract), each adjustable through builder setters.
//! Whatever the policy, an envelope object that names a member twice is
//! rejected, and nesting deeper than [`Policy::max_depth`] is rejected
//! before any recursive parser runs, so no input can make anything recurse
//! deeply. An envelope object is checked in one validating pass (syntax,
//! exact depth and member spans together, see `envelope/scan.rs`); any body
//! that pass does not settle takes a linear depth pre-scan and then
//! `serde_json`, which words the refusal. Batches longer than [`Policy::max_batch_len`] are rejected
//! whole, and only that many entries are ever stored.
//!
//! Outcomes: body that is not JSON → `PARSE_ERROR` (-32700, id `null`); JSON
//! that is not a valid envelope → `INVALID_ENVELOPE` (-32600, the request id
//! echoed when it could be read, `null` otherwise).
//!
//! # Who gets a reply
//!
//! A valid [`Notification`] never gets a reply, not even inside a batch. A
//! [`Rejection`] is a *malformed* message: JSON-RPC answers it with an error
//! whose id is `null` when the id could not be read, even if the sender meant
//! it as a notification (a server cannot know that it was one). So: reply to
//! every `Err(Rejection)` whose [`Rejection::answerable`] is true (use
//! [`Rejection::to_response`]), to every [`Request`], and to nothing else. A
//! rejection is not answerable when the message looked like a response (it
//! had `result` or `error` and no `method`): answering a broken response with
//! an error could start an endless exchange of errors, so log it instead.
//! For a batch, collect the replies and join them with [`encode_batch`],
//! which returns `None` (send nothing at all) when there is none, as for a
//! batch of notifications; [`Incoming::needs_reply`] tells beforehand.
//!
//! ```
//! use evidence_wire::envelope::{validate, Id, Incoming, Message, Policy};
//!
//! let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{}}}"#;
//! let Ok(Incoming::Single(Message::Request(request))) = validate(body, &Policy::mcp()) else {
//!     panic!("a valid request");
//! };
//! assert_eq!(request.id, Id::Number(7));
//! assert_eq!(request.method, "tools/list");
//! assert_eq!(request.params.map(|raw| raw.get()), Some(r#"{"_meta":{}}"#));
//!
//! let rejection = validate(br#"{"jsonrpc":"2.0","id":7,"method":""}"#, &Policy::mcp()).unwrap_err();
//! assert_eq!(rejection.error.jsonrpc_code(), -32600);
//! assert_eq!(rejection.id, Some(Id::Number(7)));
//! ```

use alloc::borrow::Cow;
use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::{CanonicalError, ErrorObject};

mod bytes;
mod encode;
pub(crate) mod scan;

pub use bytes::find_id;
use bytes::first_significant_byte;
pub(crate) use bytes::nesting_exceeds;
pub(crate) use encode::encode_reply;
pub use encode::{
    EncodeError, encode_batch, encode_error, encode_error_object, encode_notification,
    encode_request, encode_result,
};

use scan::Scan;

/// The only `jsonrpc` member value accepted and written.
pub const JSONRPC_VERSION: &str = "2.0";

/// Default of [`Policy::max_depth`]: nested arrays and objects, the envelope included.
pub const DEFAULT_MAX_DEPTH: usize = 128;

/// Default of [`Policy::max_batch_len`].
pub const DEFAULT_MAX_BATCH_LEN: usize = 1024;

pub use crate::id::{Id, serialize_id_value};

/// A call that expects a response.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// The id to echo in the response.
    pub id: Id<'a>,
    /// The method name, e.g. `tools/call`.
    pub method: Cow<'a, str>,
    /// The parameters, unparsed: an object (or, under [`Policy::jsonrpc`], an array).
    pub params: Option<&'a RawValue>,
}

impl<'a> Request<'a> {
    /// Deserializes `params` into `T`; `Ok(None)` when they are absent.
    ///
    /// A failure here is the caller's `INVALID_TOOL_INPUT` (-32602, "invalid params").
    pub fn parse_params<T: Deserialize<'a>>(&self) -> Result<Option<T>, serde_json::Error> {
        self.params
            .map(|raw| serde_json::from_str(raw.get()))
            .transpose()
    }
}

/// A call that expects no response.
#[derive(Clone, Debug)]
pub struct Notification<'a> {
    /// The method name, e.g. `notifications/initialized`.
    pub method: Cow<'a, str>,
    /// The parameters, unparsed.
    pub params: Option<&'a RawValue>,
}

/// The `error` member of an error response, as the peer sent it.
#[derive(Clone, Debug, Deserialize)]
pub struct ResponseError<'a> {
    /// The JSON-RPC error code (any integer; see [`CanonicalError::from_jsonrpc_code`]).
    pub code: i64,
    /// The peer's message.
    #[serde(borrow)]
    pub message: Cow<'a, str>,
    /// The peer's `data`, unparsed; `None` when absent or `null`.
    #[serde(borrow, default)]
    pub data: Option<&'a RawValue>,
}

/// A response to a call this side made.
#[derive(Clone, Debug)]
pub struct Response<'a> {
    /// The id of the call it answers; [`Id::Null`] when the peer could not read it.
    pub id: Id<'a>,
    /// `Ok(result)` (unparsed) or the error object.
    pub outcome: Result<&'a RawValue, ResponseError<'a>>,
}

/// One valid JSON-RPC message.
#[derive(Clone, Debug)]
pub enum Message<'a> {
    /// A call that expects a response.
    Request(Request<'a>),
    /// A call that expects no response.
    Notification(Notification<'a>),
    /// A response (success or error).
    Response(Response<'a>),
}

impl<'a> Message<'a> {
    /// The id of a request or response; `None` for a notification.
    pub fn id(&self) -> Option<&Id<'a>> {
        match self {
            Message::Request(request) => Some(&request.id),
            Message::Notification(_) => None,
            Message::Response(response) => Some(&response.id),
        }
    }

    /// The method of a request or notification; `None` for a response.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(request) => Some(&request.method),
            Message::Notification(notification) => Some(&notification.method),
            Message::Response(_) => None,
        }
    }
}

/// What one frame body held.
#[derive(Clone, Debug)]
pub enum Incoming<'a> {
    /// One message.
    Single(Message<'a>),
    /// A non-empty batch (only under a policy with [`Policy::allow_batches`]):
    /// each entry is a message or the rejection to answer for it, in order.
    Batch(Vec<Result<Message<'a>, Rejection>>),
}

impl Incoming<'_> {
    /// True when JSON-RPC wants at least one reply: a request, or a batch
    /// holding a request or an answerable rejection. False for a notification,
    /// a response, or a batch of only those: then send nothing at all.
    pub fn needs_reply(&self) -> bool {
        match self {
            Incoming::Single(message) => matches!(message, Message::Request(_)),
            Incoming::Batch(entries) => entries.iter().any(|entry| match entry {
                Ok(message) => matches!(message, Message::Request(_)),
                Err(rejection) => rejection.answerable,
            }),
        }
    }
}

/// Why a frame body (or one batch entry) is not a valid message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error}: {detail}")]
pub struct Rejection {
    /// `PARSE_ERROR` (not JSON) or `INVALID_ENVELOPE` (not a valid envelope).
    pub error: CanonicalError,
    /// The request id when it could be read; `None` is answered with `"id": null`.
    pub id: Option<Id<'static>>,
    /// What was wrong and where, for a person.
    pub detail: String,
    /// False when the message looked like a response: log it, do not answer
    /// it (see the module docs).
    pub answerable: bool,
}

impl Rejection {
    /// A rejection that deserves an answer.
    pub fn new(error: CanonicalError, id: Option<Id<'static>>, detail: impl Into<String>) -> Self {
        Rejection {
            error,
            id,
            detail: detail.into(),
            answerable: true,
        }
    }

    /// The JSON-RPC error response for this rejection (compact JSON, no newline).
    pub fn to_response(&self) -> Vec<u8> {
        encode_error(self.id.as_ref(), self.error, Some(&self.detail))
    }

    fn invalid(id: Option<Id<'static>>, detail: String) -> Self {
        Rejection::new(CanonicalError::InvalidEnvelope, id, detail)
    }
}

/// Which envelopes [`validate`] accepts.
///
/// Start from a preset and adjust with the setters:
///
/// ```
/// use evidence_wire::envelope::Policy;
/// let policy = Policy::strict().uuid_ids(true).max_depth(32);
/// assert_eq!(policy.depth_limit(), 32);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    allow_batches: bool,
    allow_null_id: bool,
    allow_notifications: bool,
    allow_positional_params: bool,
    allow_empty_method: bool,
    allow_unknown_members: bool,
    require_params: bool,
    string_ids_only: bool,
    uuid_ids: bool,
    tool_input_errors_as_jsonrpc: bool,
    max_depth: usize,
    max_batch_len: usize,
}

impl Default for Policy {
    /// [`Policy::mcp`].
    fn default() -> Self {
        Policy::mcp()
    }
}

impl Policy {
    /// MCP: `jsonrpc` exactly "2.0"; `method` a non-empty string; id a string
    /// or an integer (never null, never fractional); `params` absent or an
    /// object (`_meta` inside is fine); notifications allowed; no batches.
    pub const fn mcp() -> Self {
        Policy {
            allow_batches: false,
            allow_null_id: false,
            allow_notifications: true,
            allow_positional_params: false,
            allow_empty_method: false,
            allow_unknown_members: true,
            require_params: false,
            string_ids_only: false,
            uuid_ids: false,
            tool_input_errors_as_jsonrpc: false,
            max_depth: DEFAULT_MAX_DEPTH,
            max_batch_len: DEFAULT_MAX_BATCH_LEN,
        }
    }

    /// Full JSON-RPC 2.0: batches, null ids, positional (array) params,
    /// any method string.
    pub const fn jsonrpc() -> Self {
        Policy {
            allow_batches: true,
            allow_null_id: true,
            allow_notifications: true,
            allow_positional_params: true,
            allow_empty_method: true,
            allow_unknown_members: true,
            require_params: false,
            string_ids_only: false,
            uuid_ids: false,
            tool_input_errors_as_jsonrpc: false,
            max_depth: DEFAULT_MAX_DEPTH,
            max_batch_len: DEFAULT_MAX_BATCH_LEN,
        }
    }

    /// The seed's executable contract: `id`, `jsonrpc`, `method` and `params`
    /// all required (so no notifications), id a string (a UUID too once
    /// [`Policy::uuid_ids`] is on), `params` an object, no batches.
    pub const fn strict() -> Self {
        Policy {
            allow_batches: false,
            allow_null_id: false,
            allow_notifications: false,
            allow_positional_params: false,
            allow_empty_method: false,
            allow_unknown_members: true,
            require_params: true,
            string_ids_only: true,
            uuid_ids: false,
            tool_input_errors_as_jsonrpc: true,
            max_depth: DEFAULT_MAX_DEPTH,
            max_batch_len: DEFAULT_MAX_BATCH_LEN,
        }
    }

    /// Answer tool arguments that fail the tool's input schema with
    /// JSON-RPC `INVALID_TOOL_INPUT` (-32602) whatever the MCP revision
    /// (the seed's executable contract; [`Policy::strict`] sets it). When
    /// false, revisions from 2025-11-25 on get a tool result with
    /// `isError: true` instead (SEP-1303), so a model can read the error.
    pub const fn tool_input_errors_as_jsonrpc(mut self, yes: bool) -> Self {
        self.tool_input_errors_as_jsonrpc = yes;
        self
    }

    /// True when tool input errors are always JSON-RPC errors (see
    /// [`Policy::tool_input_errors_as_jsonrpc`]).
    pub const fn tool_input_errors_always_jsonrpc(&self) -> bool {
        self.tool_input_errors_as_jsonrpc
    }

    /// Accept JSON-RPC batches (arrays of messages).
    pub const fn allow_batches(mut self, yes: bool) -> Self {
        self.allow_batches = yes;
        self
    }

    /// Accept `"id": null` on requests and success responses.
    pub const fn allow_null_id(mut self, yes: bool) -> Self {
        self.allow_null_id = yes;
        self
    }

    /// Accept messages without an `id` (notifications).
    pub const fn allow_notifications(mut self, yes: bool) -> Self {
        self.allow_notifications = yes;
        self
    }

    /// Accept `params` as an array (JSON-RPC by-position parameters).
    pub const fn allow_positional_params(mut self, yes: bool) -> Self {
        self.allow_positional_params = yes;
        self
    }

    /// Accept `"method": ""`.
    pub const fn allow_empty_method(mut self, yes: bool) -> Self {
        self.allow_empty_method = yes;
        self
    }

    /// Accept envelope members other than `jsonrpc`, `id`, `method`,
    /// `params`, `result` and `error` (they are ignored).
    pub const fn allow_unknown_members(mut self, yes: bool) -> Self {
        self.allow_unknown_members = yes;
        self
    }

    /// Reject requests and notifications without `params`.
    pub const fn require_params(mut self, yes: bool) -> Self {
        self.require_params = yes;
        self
    }

    /// Reject integer ids.
    pub const fn string_ids_only(mut self, yes: bool) -> Self {
        self.string_ids_only = yes;
        self
    }

    /// Deterministic ids: a string id must be a UUID (`8-4-4-4-12` hex digits).
    pub const fn uuid_ids(mut self, yes: bool) -> Self {
        self.uuid_ids = yes;
        self
    }

    /// Deepest nesting of arrays and objects accepted, the envelope (or the
    /// batch array) counting as 1. Default [`DEFAULT_MAX_DEPTH`]. Note that
    /// `serde_json` refuses to parse values nested 128 deep or more into
    /// typed values, so a handler parsing `params` meets that limit too.
    pub const fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth;
        self
    }

    /// Most entries accepted in one batch. Default [`DEFAULT_MAX_BATCH_LEN`].
    pub const fn max_batch_len(mut self, len: usize) -> Self {
        self.max_batch_len = len;
        self
    }

    /// Whether batches are accepted.
    pub const fn allows_batches(&self) -> bool {
        self.allow_batches
    }

    /// The nesting limit (see [`Policy::max_depth`]).
    pub const fn depth_limit(&self) -> usize {
        self.max_depth
    }

    /// The batch length limit (see [`Policy::max_batch_len`]).
    pub const fn batch_len_limit(&self) -> usize {
        self.max_batch_len
    }
}

/// Validates one frame body under `policy`.
///
/// `Ok(Incoming::Single)` for one valid message, `Ok(Incoming::Batch)` for a
/// non-empty batch (entries validated one by one), `Err` for a body that
/// deserves one error response: not JSON (`PARSE_ERROR`), too deep, not an
/// object, an empty batch, a batch under a policy without batches, a batch
/// longer than the limit, or a single invalid envelope (`INVALID_ENVELOPE`).
pub fn validate<'a>(body: &'a [u8], policy: &Policy) -> Result<Incoming<'a>, Rejection> {
    // The usual case, a valid envelope object, in one validating pass
    // (syntax, exact depth and the member spans together); anything it does
    // not settle takes the `serde_json` path below, which words every
    // refusal (see `scan`).
    if first_significant_byte(body) == Some(b'{') {
        if let Ok(text) = core::str::from_utf8(body) {
            match scanned_envelope(text, policy.max_depth) {
                Ok(envelope) => return check_envelope(&envelope, policy).map(Incoming::Single),
                Err(Scan::TooDeep(offset)) => return Err(too_deep(offset, policy)),
                Err(Scan::Unsettled) => {}
            }
        }
    }
    validate_with_serde(body, policy)
}

/// [`validate`] with the `params` of a `tools/call` read by `read` in the
/// same pass: where the body's last member is its `params` object and the
/// `method` before it is `"tools/call"`, the envelope pass stops at `params`
/// and leaves the rest of the body to `read`, which must answer `Some` only
/// for text that is one valid JSON value nested no deeper than the policy's
/// limit with the `params` object at level 2 (then the body is the valid
/// envelope it would be anyway, and one walk over `params` was saved).
/// When `read` answers `None`, or anything else is unusual, the body is
/// validated as [`validate`] does; `Some` is answered only beside a valid
/// request whose params were read.
pub(crate) fn validate_reading_call<'a, T>(
    body: &'a [u8],
    policy: &Policy,
    read: impl FnOnce(&'a RawValue) -> Option<T>,
) -> (Result<Incoming<'a>, Rejection>, Option<T>) {
    if first_significant_byte(body) == Some(b'{') {
        if let Ok(text) = core::str::from_utf8(body) {
            match scanned_envelope_deferring(text, policy.max_depth, true) {
                Ok((envelope, Some(params))) => {
                    // `params` is the text left unchecked (the envelope's
                    // own `params` may be an earlier member of that name,
                    // which the envelope check then refuses as named twice).
                    if let Some(read) = scan::raw_value(params).ok().and_then(read) {
                        return match check_envelope(&envelope, policy) {
                            Ok(request @ Message::Request(_)) => {
                                (Ok(Incoming::Single(request)), Some(read))
                            }
                            // A notification (no id) is answered nothing.
                            checked => (checked.map(Incoming::Single), None),
                        };
                    }
                    // Not read: the whole body the usual way.
                }
                // Nothing left unchecked: what `validate` would find, with
                // no second pass over the body.
                Ok((envelope, None)) => {
                    let checked = check_envelope(&envelope, policy).map(Incoming::Single);
                    return (checked, None);
                }
                Err(Scan::TooDeep(offset)) => return (Err(too_deep(offset, policy)), None),
                Err(Scan::Unsettled) => return (validate_with_serde(body, policy), None),
            }
        }
    }
    (validate(body, policy), None)
}

/// The envelope members of `text` read by the one validating pass.
fn scanned_envelope(text: &str, max_depth: usize) -> Result<RawEnvelope<'_>, Scan> {
    scanned_envelope_deferring(text, max_depth, false).map(|(envelope, _)| envelope)
}

/// [`scanned_envelope`], leaving the `params` of a `tools/call` unchecked
/// when `defer_call` holds and they can be (see [`scan::members_deferring`];
/// their text beside the envelope when they were).
fn scanned_envelope_deferring<'t>(
    text: &'t str,
    max_depth: usize,
    defer_call: bool,
) -> Result<(RawEnvelope<'t>, Option<&'t str>), Scan> {
    let mut envelope = RawEnvelope::default();
    let mut other_names = BTreeSet::new();
    // Set once `"method":"tools/call"` has gone by (as written, unescaped).
    let call_seen = core::cell::Cell::new(false);
    let defer = |name: &str| defer_call && call_seen.get() && name == "\"params\"";
    let record = |name: &'t str, value: &'t str| {
        if defer_call && name == "\"method\"" {
            call_seen.set(value == "\"tools/call\"");
        }
        let name = match name.get(1..name.len().saturating_sub(1)) {
            Some(plain) if !plain.contains('\\') => Cow::Borrowed(plain),
            // Escaped names are rare: `serde_json` reads them (and refuses
            // what it refuses, e.g. a lone surrogate, on its own path).
            _ => {
                serde_json::from_str::<JsonStr<'_>>(name)
                    .map_err(|_| Scan::Unsettled)?
                    .0
            }
        };
        envelope.record(&mut other_names, name, scan::raw_value(value)?);
        Ok(())
    };
    let deferred = if defer_call {
        scan::members_deferring(text, max_depth, defer, record)?
    } else {
        scan::members(text, max_depth, record)?;
        None
    };
    Ok((envelope, deferred))
}

fn too_deep(offset: usize, policy: &Policy) -> Rejection {
    Rejection::invalid(
        None,
        format!(
            "JSON nested deeper than {} levels (byte {offset}); flatten the message or raise Policy::max_depth",
            policy.max_depth
        ),
    )
}

/// [`validate`] the straightforward way: the depth pre-scan, then
/// `serde_json`'s `RawValue` capture of the members. Every body the one
/// validating pass does not settle comes here; the unit tests of `scan`
/// hold the two paths to the same outcomes.
pub(crate) fn validate_with_serde<'a>(
    body: &'a [u8],
    policy: &Policy,
) -> Result<Incoming<'a>, Rejection> {
    if let Some(offset) = nesting_exceeds(body, policy.max_depth) {
        return Err(too_deep(offset, policy));
    }
    match first_significant_byte(body) {
        Some(b'{') => {
            // One UTF-8 check of the whole body, then a `str` parse, costs
            // less than serde_json's check of every member and key one by
            // one. Invalid UTF-8 takes the byte parse, which says where.
            let envelope: RawEnvelope<'a> = match core::str::from_utf8(body) {
                Ok(text) => serde_json::from_str(text),
                Err(_) => serde_json::from_slice(body),
            }
            .map_err(|error| parse_error(&error))?;
            check_envelope(&envelope, policy).map(Incoming::Single)
        }
        Some(b'[') => validate_batch(body, policy),
        _ => {
            let value: &'a RawValue =
                serde_json::from_slice(body).map_err(|error| parse_error(&error))?;
            Err(Rejection::invalid(
                None,
                format!(
                    "a JSON-RPC message is an object, found {}; send {{\"jsonrpc\":\"2.0\",\"method\":…}}",
                    json_type_name(value)
                ),
            ))
        }
    }
}

fn validate_batch<'a>(body: &'a [u8], policy: &Policy) -> Result<Incoming<'a>, Rejection> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let batch = BatchSeed {
        limit: policy.max_batch_len,
    }
    .deserialize(&mut deserializer)
    .and_then(|batch| deserializer.end().map(|()| batch))
    .map_err(|error| parse_error(&error))?;
    if !policy.allow_batches {
        return Err(Rejection::invalid(
            None,
            String::from(
                "batches (JSON arrays of messages) are not accepted under this policy (MCP removed them in 2025-06-18); send one message per frame",
            ),
        ));
    }
    if batch.total == 0 {
        return Err(Rejection::invalid(
            None,
            String::from("empty batch: a batch must hold at least one message"),
        ));
    }
    if batch.total > policy.max_batch_len {
        return Err(Rejection::invalid(
            None,
            format!(
                "batch of {} messages is longer than the limit of {}; split it or raise Policy::max_batch_len",
                batch.total, policy.max_batch_len
            ),
        ));
    }
    let entries = batch
        .items
        .into_iter()
        .enumerate()
        .map(|(index, raw)| {
            check_batch_entry(raw, policy).map_err(|mut rejection| {
                rejection.detail = format!("batch entry {index}: {}", rejection.detail);
                rejection
            })
        })
        .collect();
    Ok(Incoming::Batch(entries))
}

fn check_batch_entry<'a>(raw: &'a RawValue, policy: &Policy) -> Result<Message<'a>, Rejection> {
    if raw.get().as_bytes().first() != Some(&b'{') {
        return Err(Rejection::invalid(
            None,
            format!(
                "a batch entry must be a message object, found {}",
                json_type_name(raw)
            ),
        ));
    }
    let envelope: RawEnvelope<'a> = serde_json::from_str(raw.get())
        .map_err(|error| Rejection::invalid(None, format!("unreadable batch entry: {error}")))?;
    check_envelope(&envelope, policy)
}

fn parse_error(error: &serde_json::Error) -> Rejection {
    Rejection::new(
        CanonicalError::ParseError,
        None,
        format!("body is not valid JSON: {error}"),
    )
}

/// The members of one envelope object, unparsed.
#[derive(Default)]
struct RawEnvelope<'a> {
    jsonrpc: Option<&'a RawValue>,
    id: Option<&'a RawValue>,
    method: Option<&'a RawValue>,
    params: Option<&'a RawValue>,
    result: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
    /// The first member named twice.
    duplicate: Option<String>,
    /// The first member that is none of the above.
    unknown: Option<String>,
}

impl<'a> RawEnvelope<'a> {
    /// Keeps the member `name: value` (the first of each known name; the
    /// first name seen twice and the first unknown name for the refusal).
    fn record(
        &mut self,
        other_names: &mut BTreeSet<Cow<'a, str>>,
        name: Cow<'a, str>,
        value: &'a RawValue,
    ) {
        let slot = match name.as_ref() {
            "jsonrpc" => &mut self.jsonrpc,
            "id" => &mut self.id,
            "method" => &mut self.method,
            "params" => &mut self.params,
            "result" => &mut self.result,
            "error" => &mut self.error,
            _ => {
                if self.unknown.is_none() {
                    self.unknown = Some(name.to_string());
                }
                if other_names.contains(&name) {
                    if self.duplicate.is_none() {
                        self.duplicate = Some(name.into_owned());
                    }
                } else {
                    other_names.insert(name);
                }
                return;
            }
        };
        if slot.is_some() {
            if self.duplicate.is_none() {
                self.duplicate = Some(name.into_owned());
            }
        } else {
            *slot = Some(value);
        }
    }
}

impl<'de> Deserialize<'de> for RawEnvelope<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor)
    }
}

/// Collects members without ever failing on content, so that every error
/// serde_json reports while reading an envelope is a syntax error.
struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = RawEnvelope<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC envelope object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut envelope = RawEnvelope::default();
        let mut other_names: BTreeSet<Cow<'de, str>> = BTreeSet::new();
        while let Some(JsonStr(name)) = map.next_key::<JsonStr<'de>>()? {
            let value: &'de RawValue = map.next_value()?;
            envelope.record(&mut other_names, name, value);
        }
        Ok(envelope)
    }
}

/// A JSON string, borrowed from the input when it holds no escapes.
struct JsonStr<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for JsonStr<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = JsonStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(JsonStr(Cow::Borrowed(text)))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(JsonStr(Cow::Owned(text.to_string())))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(JsonStr(Cow::Owned(text)))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// The entries of a batch, at most `limit` stored, all counted.
struct Batch<'a> {
    items: Vec<&'a RawValue>,
    total: usize,
}

struct BatchSeed {
    limit: usize,
}

impl<'de> DeserializeSeed<'de> for BatchSeed {
    type Value = Batch<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for BatchSeed {
    type Value = Batch<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a batch (array) of JSON-RPC messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut batch = Batch {
            items: Vec::new(),
            total: 0,
        };
        while let Some(item) = seq.next_element::<&'de RawValue>()? {
            batch.total = batch.total.saturating_add(1);
            if batch.items.len() < self.limit {
                batch.items.push(item);
            }
        }
        Ok(batch)
    }
}

/// How an `id` member reads.
enum IdRead<'a> {
    /// A string, an `i64` or `null`.
    Readable(Id<'a>),
    /// Anything else, with what it was, for the detail.
    Unreadable(String),
}

/// The string `text` (a JSON value already checked as valid, as every
/// envelope member is) holds: borrowed as it is when it has no escape (its
/// contents between the quotes are then the string), read by `serde_json`
/// otherwise (which also refuses what is not a string).
fn json_str(text: &str) -> Result<Cow<'_, str>, serde_json::Error> {
    if let Some(contents) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        if !contents.contains(['\\', '"']) {
            return Ok(Cow::Borrowed(contents));
        }
    }
    serde_json::from_str::<JsonStr<'_>>(text).map(|JsonStr(text)| text)
}

fn read_id(raw: &RawValue) -> IdRead<'_> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => match json_str(text) {
            Ok(value) => IdRead::Readable(Id::String(value)),
            Err(error) => IdRead::Unreadable(format!("an unreadable string ({error})")),
        },
        Some(b'n') => IdRead::Readable(Id::Null),
        Some(b'-') if text == "-0" => IdRead::Readable(Id::NegativeZero),
        Some(b'-' | b'0'..=b'9') => match text.parse::<i64>() {
            Ok(number) => IdRead::Readable(Id::Number(number)),
            Err(_) if text.bytes().any(|byte| matches!(byte, b'.' | b'e' | b'E')) => {
                IdRead::Unreadable(format!("a fractional or exponent number ({text})"))
            }
            Err(_) => IdRead::Unreadable(format!("an integer outside the 64-bit range ({text})")),
        },
        _ => IdRead::Unreadable(String::from(json_type_name(raw))),
    }
}

fn check_envelope<'a>(
    envelope: &RawEnvelope<'a>,
    policy: &Policy,
) -> Result<Message<'a>, Rejection> {
    let id = envelope.id.map(read_id);
    let echo = match &id {
        Some(IdRead::Readable(id)) if !id.is_null() => Some(id.as_borrowed().into_owned()),
        _ => None,
    };
    let is_response =
        envelope.method.is_none() && (envelope.result.is_some() || envelope.error.is_some());
    let reject = |detail: String| Rejection {
        error: CanonicalError::InvalidEnvelope,
        id: echo.clone(),
        detail,
        answerable: !is_response,
    };

    if let Some(name) = &envelope.duplicate {
        return Err(reject(format!(
            "member `{name}` appears more than once; name each envelope member once"
        )));
    }
    if let (false, Some(name)) = (policy.allow_unknown_members, &envelope.unknown) {
        return Err(reject(format!(
            "unknown envelope member `{name}`; only jsonrpc, id, method, params, result and error are allowed"
        )));
    }
    match envelope.jsonrpc {
        None => {
            return Err(reject(String::from(
                "missing member `jsonrpc`; it must be the string \"2.0\"",
            )));
        }
        Some(raw) => match json_str(raw.get()) {
            Ok(version) if version == JSONRPC_VERSION => {}
            _ => {
                return Err(reject(format!(
                    "`jsonrpc` is {}; it must be the string \"2.0\"",
                    raw.get()
                )));
            }
        },
    }

    if let Some(method) = envelope.method {
        if envelope.result.is_some() || envelope.error.is_some() {
            return Err(reject(String::from(
                "a message has either `method` (request or notification) or `result`/`error` (response), not both",
            )));
        }
        let method = match json_str(method.get()) {
            Ok(method) => method,
            Err(_) => {
                return Err(reject(format!(
                    "`method` must be a string, found {}",
                    json_type_name(method)
                )));
            }
        };
        if method.is_empty() && !policy.allow_empty_method {
            return Err(reject(String::from("`method` must not be empty")));
        }
        check_params(envelope.params, policy).map_err(&reject)?;
        return match id {
            None if policy.allow_notifications => Ok(Message::Notification(Notification {
                method,
                params: envelope.params,
            })),
            None => Err(reject(String::from(
                "missing member `id`; this policy requires every message to be a request",
            ))),
            Some(id) => {
                let id = check_id(id, policy, false).map_err(&reject)?;
                Ok(Message::Request(Request {
                    id,
                    method,
                    params: envelope.params,
                }))
            }
        };
    }

    match (envelope.result, envelope.error) {
        (Some(_), Some(_)) => Err(reject(String::from(
            "a response has either `result` or `error`, not both",
        ))),
        (Some(result), None) => {
            let id = match id {
                Some(id) => check_id(id, policy, false).map_err(&reject)?,
                None => return Err(reject(String::from("a success response needs an `id`"))),
            };
            Ok(Message::Response(Response {
                id,
                outcome: Ok(result),
            }))
        }
        (None, Some(error)) => {
            let id = match id {
                Some(id) => check_id(id, policy, true).map_err(&reject)?,
                None => Id::Null,
            };
            let error = serde_json::from_str::<ResponseError<'a>>(error.get()).map_err(|problem| {
                reject(format!(
                    "`error` must be an object {{code: integer, message: string, data?: any}}: {problem}"
                ))
            })?;
            Ok(Message::Response(Response {
                id,
                outcome: Err(error),
            }))
        }
        (None, None) => Err(reject(String::from(
            "neither `method` (a request or notification) nor `result`/`error` (a response): not a JSON-RPC message",
        ))),
    }
}

fn check_params(params: Option<&RawValue>, policy: &Policy) -> Result<(), String> {
    match params.map(|raw| raw.get().as_bytes().first()) {
        None if policy.require_params => Err(String::from(
            "missing member `params`; this policy requires it (an object, `{}` when empty)",
        )),
        None | Some(Some(b'{')) => Ok(()),
        Some(Some(b'[')) if policy.allow_positional_params => Ok(()),
        Some(_) => {
            let found = params.map_or("nothing", json_type_name);
            Err(if policy.allow_positional_params {
                format!("`params` must be an object or an array, found {found}")
            } else {
                format!("`params` must be an object, found {found}; pass named parameters")
            })
        }
    }
}

fn check_id<'a>(id: IdRead<'a>, policy: &Policy, null_ok: bool) -> Result<Id<'a>, String> {
    match id {
        IdRead::Unreadable(found) => Err(format!(
            "`id` must be a string or an integer, found {found}"
        )),
        IdRead::Readable(Id::Null) if null_ok || policy.allow_null_id => Ok(Id::Null),
        IdRead::Readable(Id::Null) => Err(String::from(
            "`id` must not be null; use a string or an integer (or omit it for a notification)",
        )),
        IdRead::Readable(Id::Number(_) | Id::NegativeZero) if policy.string_ids_only => {
            Err(String::from("`id` must be a string under this policy"))
        }
        IdRead::Readable(Id::String(text)) if policy.uuid_ids && !is_uuid(&text) => Err(format!(
            "`id` must be a UUID (8-4-4-4-12 hex digits) when deterministic ids are on, found {text:?}"
        )),
        IdRead::Readable(id) => Ok(id),
    }
}

/// True for `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with hex digits of either case.
pub(crate) fn is_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(index, byte)| match index {
            8 | 13 | 18 | 23 => *byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        })
}

fn json_type_name(raw: &RawValue) -> &'static str {
    match raw.get().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(_) => "a number",
        None => "nothing",
    }
}
