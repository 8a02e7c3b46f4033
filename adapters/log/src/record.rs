//! Envelope validation log records, as data (sans-IO): the record model the
//! sink writes.
//!
//! Every [`ServerEvent::Handled`](evidence_wire::server::ServerEvent::Handled)
//! [`Outcome`] becomes one [`ValidationRecord`]: when it happened, the
//! request id and a correlation id, the transport (`http`, `stdio` or
//! `sse`) and route it came in on, the method and tool, the status it was
//! answered with, how long it took, and the canonical error payload when
//! it was rejected; plus `metadata.schemaVersion` and
//! `metadata.deterministic`. One record serializes to one JSON line
//! ([`ValidationRecord::to_json_line`]); `spec/logging.md` and
//! `spec/schemas/validation-log.schema.json` describe the format.
//!
//! This module never reads a clock, never draws randomness and never writes
//! a file. The adapter reads the clock and an entropy source and passes them
//! in ([`ClockReading`]), together with the transport facts
//! ([`RecordFacts`]); a [`Recorder`] turns them into records: an owned
//! [`ValidationRecord`], or a [`RecordView`] that borrows the outcome's
//! text and writes its JSON line straight into the caller's buffer (what a
//! sink does once per message: no allocation). In
//! deterministic mode the recorder ignores the clock and the entropy: every
//! timestamp is [`DETERMINISTIC_TIMESTAMP`], durations are zero and
//! correlation ids count up (`00000000-0000-4000-8000-000000000001`, …), so
//! the same traffic gives byte-identical logs.
//!
//! HTTP and stdio records of the same message agree field by field except
//! `transport`, `route` and the per-record stamps (`correlationId`, and
//! outside deterministic mode `timestamp` and `durationMicros`): the status
//! of a stdio record is what `POST /rpc` answers for the same message alone
//! ([`stdio_status`]).
//!
//! Limits: text that comes from the peer (method, tool, route, request id,
//! detail) is kept as an excerpt ([`excerpt`]): at most [`MAX_NAME_BYTES`] /
//! [`MAX_DETAIL_BYTES`] once escaped as JSON, cut at a character boundary
//! and ended with `… (N bytes)` naming the original length. So no record
//! is longer than [`MAX_RECORD_BYTES`] as a JSON line, whatever the peer
//! sent; the sink relies on that bound for its size cap.

use std::borrow::{Cow, ToOwned};
use std::format;
use std::string::String;
use std::vec::Vec;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use evidence_wire::error::CanonicalError;
use evidence_wire::frame::Framing;
use evidence_wire::id::Id;
use evidence_wire::server::Outcome;
use evidence_wire::text::{excerpt, excerpt_cow};
use evidence_wire::trace::TraceId;

/// Version of the record format (`metadata.schemaVersion`).
pub const SCHEMA_VERSION: &str = "1";

/// The timestamp of every record in deterministic mode (the Unix epoch).
pub const DETERMINISTIC_TIMESTAMP: &str = "1970-01-01T00:00:00.000Z";

/// Longest method, tool, route or request id kept in a record, in bytes
/// of its JSON string body (after escaping).
pub const MAX_NAME_BYTES: usize = 256;

/// Longest error detail kept in a record, in bytes of its JSON string body
/// (after escaping).
pub const MAX_DETAIL_BYTES: usize = 1024;

/// Longest JSON line ([`ValidationRecord::to_json_line`], newline included)
/// any record can make: four names of [`MAX_NAME_BYTES`], a detail of
/// [`MAX_DETAIL_BYTES`] and the fixed members fit with room to spare.
pub const MAX_RECORD_BYTES: usize = 4096;

/// Smallest total size cap of a log directory (`[logging] max_bytes`):
/// four records of [`MAX_RECORD_BYTES`], one per file share.
pub const MIN_LOG_MAX_BYTES: u64 = 16 * 1024;

/// Default total size cap of a log directory (`[logging] max_bytes`): 256 MiB.
pub const DEFAULT_LOG_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// How a message came in and its answer went out: the record's
/// `transport` field (`http`, `stdio` or `sse`). Over HTTP a request is
/// answered with a JSON body or as one server-sent event, which the record
/// tells apart; see [`evidence_wire:: Channel`] for the transports
/// themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Channel {
    /// An HTTP request answered with a JSON body.
    Http,
    /// A stdio stream (Content-Length or newline-delimited).
    Stdio,
    /// An HTTP request answered as a server-sent event.
    Sse,
}

impl Channel {
    /// Every channel, in the order the log schema lists them.
    pub const ALL: [Channel; 3] = [Channel::Http, Channel::Stdio, Channel::Sse];

    /// The name used in records: `http`, `stdio` or `sse`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Channel::Http => "http",
            Channel::Stdio => "stdio",
            Channel::Sse => "sse",
        }
    }
}

/// The route of a stdio record: `stdio:content-length`,
/// `stdio:newline-delimited`, or `stdio` before the framing is known.
pub const fn stdio_route(framing: Option<Framing>) -> &'static str {
    match framing {
        Some(Framing::ContentLength) => "stdio:content-length",
        Some(Framing::NewlineDelimited) => "stdio:newline-delimited",
        None => "stdio",
    }
}

/// The status of a stdio record: the status `POST /rpc` answers for the
/// same message sent alone. A rejected message gets its canonical error's
/// HTTP status, an accepted request `200`, and anything that gets no
/// JSON-RPC answer (a notification, a response) `202`.
pub fn stdio_status(outcome: &Outcome) -> u16 {
    match (&outcome.error, &outcome.id, &outcome.method) {
        (Some(error), _, _) => error.http_status(),
        (None, Some(_), Some(_)) => 200,
        (None, _, _) => 202,
    }
}

/// The outcome an HTTP refusal stands for (a reply made before any
/// JSON-RPC message was read: authentication, Origin, body limit, overload,
/// an unreadable body), read back from the canonical error body the core
/// wrote. `None` when the body holds no canonical error (a probe, `202`).
pub fn refusal_outcome(body: &[u8]) -> Option<Outcome> {
    let reply: Value = serde_json::from_slice(body).ok()?;
    let error = reply.get("error")?;
    let code = error.get("code")?.as_i64()?;
    let canonical = CanonicalError::from_jsonrpc_code(i32::try_from(code).ok()?)?;
    let detail = error
        .get("data")
        .and_then(|data| data.get("detail"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some(Outcome {
        id: None,
        method: None,
        tool: None,
        error: Some(canonical),
        detail,
        stateless: false,
        trace_id: None,
    })
}

/// What the adapter knows about where and how a message was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordFacts<'a> {
    /// The transport.
    pub transport: Channel,
    /// The HTTP path (`/rpc`, `/mcp`), or [`stdio_route`] on stdio.
    pub route: &'a str,
    /// The HTTP status of the reply, or [`stdio_status`] on stdio.
    pub status: u16,
    /// Microseconds from the message's arrival to its outcome (stdio) or
    /// to the reply (HTTP). Zero in deterministic mode.
    pub duration_micros: u64,
}

/// What the adapter read from its clock and entropy source for one record.
/// Ignored in deterministic mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockReading {
    /// Milliseconds since the Unix epoch (UTC).
    pub unix_millis: u64,
    /// 128 random bits for the correlation id (a version-4 UUID).
    pub entropy: u128,
}

/// The canonical error a rejected message was answered with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorPayload {
    /// The canonical code name, e.g. `INVALID_ENVELOPE`.
    pub code: String,
    /// The JSON-RPC `error.code`, e.g. `-32600`.
    pub jsonrpc_code: i32,
    /// The fixed JSON-RPC `error.message`, e.g. `Invalid MCP envelope`.
    pub message: String,
    /// What exactly was wrong (the answer's `error.data.detail`), if known.
    pub detail: Option<String>,
}

impl ErrorPayload {
    /// The payload for `error` with `detail`.
    pub fn new(error: CanonicalError, detail: Option<&str>) -> Self {
        ErrorPayload {
            code: error.name().to_owned(),
            jsonrpc_code: error.jsonrpc_code(),
            message: error.message().to_owned(),
            detail: detail.map(|detail| excerpt(detail, MAX_DETAIL_BYTES)),
        }
    }
}

/// `metadata` of every record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// [`SCHEMA_VERSION`].
    pub schema_version: String,
    /// True when timestamps, durations and ids are deterministic.
    pub deterministic: bool,
}

/// One validation log record: one JSON line of the log.
///
/// Fields serialize in this order, under these camelCase names; absent
/// values are `null`, never missing, except `traceId`, which only a record
/// of a call that carried a trace context has.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationRecord {
    /// When the outcome was recorded, RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    /// A UUID unique to this record (sequential in deterministic mode).
    pub correlation_id: String,
    /// The JSON-RPC id of the message, or `null` when it had none or it
    /// could not be read (`-0` is written as sent).
    #[serde(serialize_with = "evidence_wire::id::serialize_id_value")]
    pub request_id: Value,
    /// The transport.
    pub transport: Channel,
    /// The HTTP path, or the stdio framing (`stdio:content-length`).
    pub route: String,
    /// The JSON-RPC method, when it was readable.
    pub method: Option<String>,
    /// The tool called, for `tools/call`.
    pub tool: Option<String>,
    /// The HTTP status of the reply, or on stdio what `/rpc` would answer.
    pub status: u16,
    /// Microseconds the message took (see [`RecordFacts::duration_micros`]).
    pub duration_micros: u64,
    /// The canonical error answered, or `null` when the message was accepted.
    pub error: Option<ErrorPayload>,
    /// The trace id (32 lowercase hex digits) of the W3C trace context a
    /// `tools/call` carried (`_meta.traceparent`, or over HTTP the
    /// `traceparent` header). The one member left out rather than `null`
    /// when absent: records of messages without a trace context are
    /// written as before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Format version and determinism.
    pub metadata: Metadata,
}

impl ValidationRecord {
    /// The record as one line of JSON Lines: compact JSON and `\n`.
    pub fn to_json_line(&self) -> Vec<u8> {
        if let Some(line) = self.to_json_line_direct() {
            return line;
        }
        self.to_json_line_serde()
    }

    /// [`ValidationRecord::to_json_line`] through serde (the reference the
    /// direct writer is tested against).
    fn to_json_line_serde(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }

    /// The same bytes written member by member (a serde walk costs about
    /// as much as the rest of the record), for a request id that is null,
    /// an integer or a string; `None` for any other id.
    fn to_json_line_direct(&self) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(320);
        out.extend_from_slice(br#"{"timestamp":"#);
        push_json_str(&mut out, &self.timestamp)?;
        out.extend_from_slice(br#","correlationId":"#);
        push_json_str(&mut out, &self.correlation_id)?;
        out.extend_from_slice(br#","requestId":"#);
        match &self.request_id {
            Value::Null => out.extend_from_slice(b"null"),
            Value::String(id) => push_json_str(&mut out, id)?,
            Value::Number(number) if number.is_i64() || number.is_u64() => {
                out.extend_from_slice(serde_json::to_string(number).ok()?.as_bytes());
            }
            _ => return None,
        }
        out.extend_from_slice(br#","transport":""#);
        out.extend_from_slice(self.transport.as_str().as_bytes());
        out.extend_from_slice(br#"","route":"#);
        push_json_str(&mut out, &self.route)?;
        out.extend_from_slice(br#","method":"#);
        push_json_option(&mut out, self.method.as_deref())?;
        out.extend_from_slice(br#","tool":"#);
        push_json_option(&mut out, self.tool.as_deref())?;
        out.extend_from_slice(br#","status":"#);
        push_decimal(&mut out, u64::from(self.status));
        out.extend_from_slice(br#","durationMicros":"#);
        push_decimal(&mut out, self.duration_micros);
        out.extend_from_slice(br#","error":"#);
        match &self.error {
            None => out.extend_from_slice(b"null"),
            Some(error) => out.extend_from_slice(&serde_json::to_vec(error).ok()?),
        }
        if let Some(trace_id) = &self.trace_id {
            out.extend_from_slice(br#","traceId":"#);
            push_json_str(&mut out, trace_id)?;
        }
        out.extend_from_slice(br#","metadata":{"schemaVersion":"#);
        push_json_str(&mut out, &self.metadata.schema_version)?;
        out.extend_from_slice(if self.metadata.deterministic {
            br#","deterministic":true}}"#
        } else {
            br#","deterministic":false}}"#
        });
        out.push(b'\n');
        Some(out)
    }

    /// True when the message was accepted (no canonical error).
    pub fn is_accepted(&self) -> bool {
        self.error.is_none()
    }
}

/// `text` as a JSON string: copied between quotes when no byte needs an
/// escape (the usual names, UUIDs and timestamps), else as serde_json
/// writes it.
fn push_json_str(out: &mut Vec<u8>, text: &str) -> Option<()> {
    let plain = needs_no_escape(text.as_bytes());
    if plain {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        out.extend_from_slice(&serde_json::to_vec(text).ok()?);
    }
    Some(())
}

/// True when no byte of `bytes` is escaped in a JSON string (a control
/// character, `"` or `\\`): eight bytes at a time, then byte by byte.
fn needs_no_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A byte of `word` is zero when the high bit of its lane in the result
    // is set (exact for the lanes that matter: the first zero lane is found).
    let has_zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    let chunks = bytes.chunks_exact(8);
    let rest = chunks.remainder();
    let mut flagged = 0u64;
    for chunk in chunks {
        let mut lanes = [0u8; 8];
        lanes.copy_from_slice(chunk);
        let word = u64::from_le_bytes(lanes);
        // Bytes below 0x20: `word & 0xe0` lanes are zero.
        flagged |= has_zero(word & 0xe0e0_e0e0_e0e0_e0e0)
            | has_zero(word ^ (ONES * u64::from(b'"')))
            | has_zero(word ^ (ONES * u64::from(b'\\')));
    }
    flagged == 0
        && rest
            .iter()
            .all(|&byte| byte >= 0x20 && byte != b'"' && byte != b'\\')
}

fn push_json_option(out: &mut Vec<u8>, text: Option<&str>) -> Option<()> {
    match text {
        Some(text) => push_json_str(out, text),
        None => {
            out.extend_from_slice(b"null");
            Some(())
        }
    }
}

/// `value` in decimal.
fn push_decimal(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start = start.saturating_sub(1);
        if let Some(slot) = digits.get_mut(start) {
            *slot = b'0' + u8::try_from(value % 10).unwrap_or(0);
        }
        value /= 10;
        if value == 0 || start == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(start..).unwrap_or_default());
}

/// Turns outcomes into records: stamps timestamps and correlation ids, and
/// in deterministic mode fixes the clock and counts ids up.
///
/// Use one recorder per log file, shared by every transport writing to it,
/// so ids are unique (and sequential) across the whole file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorder {
    deterministic: bool,
    issued: u64,
}

impl Recorder {
    /// A recorder; `deterministic` fixes the clock and numbers the ids.
    pub const fn new(deterministic: bool) -> Self {
        Recorder {
            deterministic,
            issued: 0,
        }
    }

    /// True in deterministic mode.
    pub const fn is_deterministic(&self) -> bool {
        self.deterministic
    }

    /// How many records were made.
    pub const fn issued(&self) -> u64 {
        self.issued
    }

    /// The record of `outcome`, answered as `facts` say, at `clock`.
    pub fn record(
        &mut self,
        outcome: &Outcome,
        facts: &RecordFacts<'_>,
        clock: ClockReading,
    ) -> ValidationRecord {
        self.view(outcome, facts, clock).to_record()
    }

    /// The same record as [`Recorder::record`] (it counts as one made),
    /// borrowing `outcome` and `facts`: write it with
    /// [`RecordView::write_json_line`].
    pub fn view<'a>(
        &mut self,
        outcome: &'a Outcome,
        facts: &RecordFacts<'a>,
        clock: ClockReading,
    ) -> RecordView<'a> {
        self.issued = self.issued.saturating_add(1);
        let stamp = if self.deterministic {
            // `DETERMINISTIC_TIMESTAMP` is the epoch.
            Stamp {
                unix_millis: 0,
                uuid: sequential_uuid_bits(self.issued),
                duration_micros: 0,
            }
        } else {
            Stamp {
                unix_millis: clock.unix_millis,
                uuid: random_uuid_bits(clock.entropy),
                duration_micros: facts.duration_micros,
            }
        };
        RecordView {
            parts: Parts::of(outcome),
            facts: *facts,
            stamp,
            deterministic: self.deterministic,
        }
    }
}

/// The parts of a record that come from its outcome, borrowed.
#[derive(Clone, Copy, Debug)]
struct Parts<'a> {
    id: IdPart<'a>,
    method: Option<&'a str>,
    tool: Option<&'a str>,
    error: Option<CanonicalError>,
    detail: Option<&'a str>,
    trace_id: Option<TraceId>,
}

impl<'a> Parts<'a> {
    fn of(outcome: &'a Outcome) -> Self {
        Parts {
            id: match &outcome.id {
                None | Some(Id::Null) => IdPart::Null,
                Some(Id::Number(number)) => IdPart::Number(*number),
                Some(Id::NegativeZero) => IdPart::NegativeZero,
                Some(Id::String(id)) => IdPart::String(id),
            },
            method: outcome.method.as_deref(),
            tool: outcome.tool.as_deref(),
            error: outcome.error,
            detail: outcome.detail.as_deref(),
            trace_id: outcome.trace_id,
        }
    }
}

/// A record's request id, borrowed (a missing id is written as `null`).
#[derive(Clone, Copy, Debug)]
enum IdPart<'a> {
    Null,
    Number(i64),
    NegativeZero,
    String(&'a str),
}

/// The per-record stamps: when, which UUID, how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    unix_millis: u64,
    uuid: u128,
    duration_micros: u64,
}

/// One record that borrows its text from the outcome and the facts
/// ([`Recorder::view`]): [`RecordView::write_json_line`] writes exactly the
/// bytes of [`ValidationRecord::to_json_line`] of [`RecordView::to_record`]
/// without making the owned record (a unit proptest holds the two to the
/// serde bytes).
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    parts: Parts<'a>,
    facts: RecordFacts<'a>,
    stamp: Stamp,
    deterministic: bool,
}

impl<'a> RecordView<'a> {
    /// The owned record.
    pub fn to_record(&self) -> ValidationRecord {
        let outcome = &self.parts;
        // Ids are strings (excerpted: they come from the peer), 64-bit
        // integers (bounded), `-0` (kept as sent) or null.
        let request_id = match outcome.id {
            IdPart::String(id) => Value::String(excerpt(id, MAX_NAME_BYTES)),
            IdPart::Number(number) => Id::Number(number).to_value(),
            IdPart::NegativeZero => Id::NegativeZero.to_value(),
            IdPart::Null => Value::Null,
        };
        ValidationRecord {
            timestamp: format_timestamp(self.stamp.unix_millis),
            correlation_id: format_uuid(self.stamp.uuid),
            request_id,
            transport: self.facts.transport,
            route: excerpt(self.facts.route, MAX_NAME_BYTES),
            method: outcome.method.map(|method| excerpt(method, MAX_NAME_BYTES)),
            tool: outcome.tool.map(|tool| excerpt(tool, MAX_NAME_BYTES)),
            status: self.facts.status,
            duration_micros: self.stamp.duration_micros,
            error: outcome
                .error
                .map(|error| ErrorPayload::new(error, outcome.detail)),
            trace_id: outcome.trace_id.map(|trace_id| trace_id.to_string()),
            metadata: Metadata {
                schema_version: SCHEMA_VERSION.to_owned(),
                deterministic: self.deterministic,
            },
        }
    }

    /// Appends the record's JSON line (compact JSON and `\n`) to `out`:
    /// the bytes of [`ValidationRecord::to_json_line`], written from the
    /// borrowed parts (excerpts are cut only when the text is too long).
    pub fn write_json_line(&self, out: &mut Vec<u8>) {
        self.write_line(out, None);
    }

    /// [`RecordView::write_json_line`] for one record of a run of them:
    /// the same bytes, with what the records share (their names, the
    /// second of their timestamps) copied from `cache` when it holds them
    /// and kept there for the next record.
    pub fn write_json_line_cached(&self, out: &mut Vec<u8>, cache: &mut LineCache) {
        self.write_line(out, Some(cache));
    }

    fn write_line(&self, out: &mut Vec<u8>, mut cache: Option<&mut LineCache>) {
        let outcome = &self.parts;
        out.reserve(320);
        out.extend_from_slice(br#"{"timestamp":""#);
        match cache.as_deref_mut() {
            Some(cache) => cache.push_timestamp(out, self.stamp.unix_millis),
            None => push_timestamp(out, self.stamp.unix_millis),
        }
        out.extend_from_slice(br#"","correlationId":""#);
        push_uuid(out, self.stamp.uuid);
        out.extend_from_slice(br#"","requestId":"#);
        match outcome.id {
            IdPart::Null => out.extend_from_slice(b"null"),
            IdPart::Number(number) => push_signed(out, number),
            IdPart::NegativeZero => out.extend_from_slice(b"-0"),
            IdPart::String(id) => push_json_text(out, &excerpt_cow(id, MAX_NAME_BYTES)),
        }
        match cache {
            Some(cache) => cache.push_names(out, self),
            None => self.push_names(out),
        }
        push_decimal(out, u64::from(self.facts.status));
        out.extend_from_slice(br#","durationMicros":"#);
        push_decimal(out, self.stamp.duration_micros);
        out.extend_from_slice(br#","error":"#);
        match outcome.error {
            None => out.extend_from_slice(b"null"),
            Some(error) => {
                out.extend_from_slice(br#"{"code":"#);
                push_json_text(out, error.name());
                out.extend_from_slice(br#","jsonrpcCode":"#);
                push_signed(out, i64::from(error.jsonrpc_code()));
                out.extend_from_slice(br#","message":"#);
                push_json_text(out, error.message());
                out.extend_from_slice(br#","detail":"#);
                match outcome.detail {
                    Some(detail) => push_json_text(out, &excerpt_cow(detail, MAX_DETAIL_BYTES)),
                    None => out.extend_from_slice(b"null"),
                }
                out.push(b'}');
            }
        }
        if let Some(trace_id) = outcome.trace_id {
            out.extend_from_slice(br#","traceId":""#);
            for word in trace_id.to_bytes().chunks_exact(4) {
                let word = <[u8; 4]>::try_from(word).unwrap_or_default();
                out.extend_from_slice(&hex_digits(u32::from_be_bytes(word)));
            }
            out.push(b'"');
        }
        out.extend_from_slice(br#","metadata":{"schemaVersion":""#);
        out.extend_from_slice(SCHEMA_VERSION.as_bytes());
        out.extend_from_slice(if self.deterministic {
            b"\",\"deterministic\":true}}\n"
        } else {
            b"\",\"deterministic\":false}}\n"
        });
    }

    /// The record's names as JSON members, from the `transport` member's
    /// leading comma to the `status` member's colon.
    fn push_names(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(br#","transport":""#);
        out.extend_from_slice(self.facts.transport.as_str().as_bytes());
        out.extend_from_slice(br#"","route":"#);
        push_json_text(out, &excerpt_cow(self.facts.route, MAX_NAME_BYTES));
        out.extend_from_slice(br#","method":"#);
        push_json_name(out, self.parts.method);
        out.extend_from_slice(br#","tool":"#);
        push_json_name(out, self.parts.tool);
        out.extend_from_slice(br#","status":"#);
    }

    /// The record's correlation id (a UUID).
    pub fn correlation_id(&self) -> String {
        format_uuid(self.stamp.uuid)
    }

    /// The transport.
    pub fn transport(&self) -> Channel {
        self.facts.transport
    }

    /// The status (see [`ValidationRecord::status`]).
    pub fn status(&self) -> u16 {
        self.facts.status
    }

    /// The method, excerpted as in the record.
    pub fn method(&self) -> Option<Cow<'a, str>> {
        self.parts
            .method
            .map(|method| excerpt_cow(method, MAX_NAME_BYTES))
    }

    /// The canonical error answered, or `None` when the message was accepted.
    pub fn error(&self) -> Option<CanonicalError> {
        self.parts.error
    }

    /// The error detail, excerpted as in the record.
    pub fn detail(&self) -> Option<Cow<'a, str>> {
        self.parts
            .detail
            .map(|detail| excerpt_cow(detail, MAX_DETAIL_BYTES))
    }
}

/// Records made and not written yet, held cheaply: what each view
/// borrowed (its stamps and facts, and its text excerpted as the record
/// shows it) copied into two flat buffers, with no JSON written. The thread
/// that answers the peer hands records over this way and the log's writer
/// thread writes their lines: [`RecordBatch::view`] gives each record back
/// as a view whose JSON line is the bytes of the view it was made from
/// (excerpting is idempotent: a record's text, cut once, is kept whole the
/// second time).
#[derive(Debug, Default)]
pub(crate) struct RecordBatch {
    records: Vec<Held>,
    /// The records' text, one after the other.
    text: String,
}

/// The most memory one record takes in a [`RecordBatch`]: its parts and
/// its text, excerpted (an id, a route, a method and a tool of at most
/// [`MAX_NAME_BYTES`], a detail of at most [`MAX_DETAIL_BYTES`]).
pub(crate) const MAX_HELD_BYTES: usize =
    core::mem::size_of::<Held>() + 4 * MAX_NAME_BYTES + MAX_DETAIL_BYTES;

/// One record of a [`RecordBatch`]: its text as spans of the batch's text.
#[derive(Clone, Copy, Debug)]
struct Held {
    stamp: Stamp,
    deterministic: bool,
    transport: Channel,
    status: u16,
    error: Option<CanonicalError>,
    id: HeldId,
    route: Span,
    method: Option<Span>,
    tool: Option<Span>,
    detail: Option<Span>,
    trace_id: Option<TraceId>,
}

/// [`IdPart`] with its text in the batch.
#[derive(Clone, Copy, Debug)]
enum HeldId {
    Null,
    Number(i64),
    NegativeZero,
    String(Span),
}

/// Where a piece of text is in a [`RecordBatch`]'s text.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u32,
    end: u32,
}

impl RecordBatch {
    /// An empty batch with room for about `bytes` of records
    /// ([`RecordBatch::bytes`]) before it grows.
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        // A usual record's text (route, method, tool: `stdio:newline-delimited`,
        // `tools/call`, `evidence_query`) is under this.
        const TEXT: usize = 48;
        let records = bytes / (core::mem::size_of::<Held>() + TEXT) + 1;
        RecordBatch {
            records: Vec::with_capacity(records),
            text: String::with_capacity(records.saturating_mul(TEXT)),
        }
    }

    /// Add the record `view` (copying its text, excerpted).
    pub(crate) fn push(&mut self, view: &RecordView<'_>) {
        let parts = &view.parts;
        let id = match parts.id {
            IdPart::Null => HeldId::Null,
            IdPart::Number(number) => HeldId::Number(number),
            IdPart::NegativeZero => HeldId::NegativeZero,
            IdPart::String(id) => HeldId::String(self.hold(id, MAX_NAME_BYTES)),
        };
        let route = self.hold(view.facts.route, MAX_NAME_BYTES);
        let method = parts.method.map(|method| self.hold(method, MAX_NAME_BYTES));
        let tool = parts.tool.map(|tool| self.hold(tool, MAX_NAME_BYTES));
        let detail = parts
            .detail
            .map(|detail| self.hold(detail, MAX_DETAIL_BYTES));
        self.records.push(Held {
            stamp: view.stamp,
            deterministic: view.deterministic,
            transport: view.facts.transport,
            status: view.facts.status,
            error: parts.error,
            id,
            route,
            method,
            tool,
            detail,
            trace_id: parts.trace_id,
        });
    }

    /// Copy `text` as a record shows it (excerpted to `max`).
    #[inline]
    fn hold(&mut self, text: &str, max: usize) -> Span {
        let start = self.text.len();
        // No byte takes more than 6 escaped: short text is kept whole
        // (what `excerpt_cow` finds first, without the call).
        if text.len().saturating_mul(6) <= max {
            self.text.push_str(text);
        } else {
            self.text.push_str(&excerpt_cow(text, max));
        }
        let offset = |at: usize| u32::try_from(at).unwrap_or(u32::MAX);
        Span {
            start: offset(start),
            end: offset(self.text.len()),
        }
    }

    fn text(&self, span: Span) -> &str {
        let range = usize::try_from(span.start).unwrap_or(usize::MAX)
            ..usize::try_from(span.end).unwrap_or(usize::MAX);
        self.text.get(range).unwrap_or_default()
    }

    /// Make room for about `bytes` of records ([`RecordBatch::bytes`])
    /// in an empty batch that has none, so it does not grow as it fills.
    pub(crate) fn reserve(&mut self, bytes: usize) {
        if self.records.capacity() == 0 {
            *self = RecordBatch::with_capacity(bytes);
        }
    }

    /// How many records the batch holds.
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// True when the batch holds no record.
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The memory the batch's records take (what the log's budget counts).
    pub(crate) fn bytes(&self) -> usize {
        self.records
            .len()
            .saturating_mul(core::mem::size_of::<Held>())
            .saturating_add(self.text.len())
    }

    /// The memory the batch has room for.
    pub(crate) fn capacity(&self) -> usize {
        self.records
            .capacity()
            .saturating_mul(core::mem::size_of::<Held>())
            .saturating_add(self.text.capacity())
    }

    /// Forget the records, keeping the room.
    pub(crate) fn clear(&mut self) {
        self.records.clear();
        self.text.clear();
    }

    /// Record number `index`, as a view.
    pub(crate) fn view(&self, index: usize) -> Option<RecordView<'_>> {
        let held = self.records.get(index)?;
        let id = match held.id {
            HeldId::Null => IdPart::Null,
            HeldId::Number(number) => IdPart::Number(number),
            HeldId::NegativeZero => IdPart::NegativeZero,
            HeldId::String(id) => IdPart::String(self.text(id)),
        };
        Some(RecordView {
            parts: Parts {
                id,
                method: held.method.map(|method| self.text(method)),
                tool: held.tool.map(|tool| self.text(tool)),
                error: held.error,
                detail: held.detail.map(|detail| self.text(detail)),
                trace_id: held.trace_id,
            },
            facts: RecordFacts {
                transport: held.transport,
                route: self.text(held.route),
                status: held.status,
                duration_micros: held.stamp.duration_micros,
            },
            stamp: held.stamp,
            deterministic: held.deterministic,
        })
    }
}

/// What [`RecordView::write_json_line_cached`] keeps from one record to
/// the next of a log: the JSON of the last record's names (transport,
/// route, method, tool) and the date and time of its timestamp's second.
/// A log's records mostly repeat both, so the usual record copies them
/// instead of escaping its names and working out the calendar again.
/// Holds a few short strings (names longer than a record shows are never
/// kept).
#[derive(Clone, Debug, Default)]
pub struct LineCache {
    names: Option<CachedNames>,
    /// A second since the epoch and its `YYYY-MM-DDTHH:MM:SS`.
    second: Option<(u64, [u8; 19])>,
}

/// The names [`LineCache`] holds the JSON of.
#[derive(Clone, Debug)]
struct CachedNames {
    transport: Channel,
    route: String,
    method: Option<String>,
    tool: Option<String>,
    /// [`RecordView::push_names`] of them.
    json: Vec<u8>,
}

impl LineCache {
    /// Appends [`RecordView::push_names`] of `view`: copied when the
    /// names are the last record's, else written and kept. Names longer
    /// than a record shows ([`MAX_NAME_BYTES`], a peer's doing) are written
    /// and not kept, so the cache holds a few short strings at most.
    fn push_names(&mut self, out: &mut Vec<u8>, view: &RecordView<'_>) {
        let (outcome, facts) = (&view.parts, &view.facts);
        if let Some(names) = &self.names {
            let same = names.transport == facts.transport
                && names.route == facts.route
                && names.method.as_deref() == outcome.method
                && names.tool.as_deref() == outcome.tool;
            if same {
                out.extend_from_slice(&names.json);
                return;
            }
        }
        let short = |name: Option<&str>| name.is_none_or(|name| name.len() <= MAX_NAME_BYTES);
        if !(short(Some(facts.route)) && short(outcome.method) && short(outcome.tool)) {
            view.push_names(out);
            return;
        }
        let mut json = Vec::new();
        view.push_names(&mut json);
        out.extend_from_slice(&json);
        self.names = Some(CachedNames {
            transport: facts.transport,
            route: facts.route.to_owned(),
            method: outcome.method.map(str::to_owned),
            tool: outcome.tool.map(str::to_owned),
            json,
        });
    }

    /// Appends [`format_timestamp`] of `unix_millis`, its date and time
    /// copied when the last timestamp fell in the same second.
    fn push_timestamp(&mut self, out: &mut Vec<u8>, unix_millis: u64) {
        let second = unix_millis / 1000;
        let date_time = match self.second {
            Some((cached, date_time)) if cached == second => date_time,
            _ => {
                let mut text = Vec::with_capacity(24);
                push_timestamp(&mut text, second.saturating_mul(1000));
                // Years past 9999 are longer (and never cached).
                let Some(Ok(date_time)) = text.get(..19).map(<[u8; 19]>::try_from) else {
                    return push_timestamp(out, unix_millis);
                };
                if text.len() != 24 {
                    return push_timestamp(out, unix_millis);
                }
                self.second = Some((second, date_time));
                date_time
            }
        };
        let millis = unix_millis % 1000;
        let [tens, ones] = digit_pair(millis);
        let hundreds = b'0' + u8::try_from(millis / 100).unwrap_or(0);
        out.extend_from_slice(&date_time);
        out.extend_from_slice(&[b'.', hundreds, tens, ones, b'Z']);
    }
}

/// A name (method, tool) as JSON, excerpted, or `null`.
fn push_json_name(out: &mut Vec<u8>, name: Option<&str>) {
    match name {
        Some(name) => push_json_text(out, &excerpt_cow(name, MAX_NAME_BYTES)),
        None => out.extend_from_slice(b"null"),
    }
}

/// `text` as a JSON string, as serde_json writes it (copied between quotes
/// when no byte needs an escape).
fn push_json_text(out: &mut Vec<u8>, text: &str) {
    if push_json_str(out, text).is_none() {
        // serde_json cannot fail on a `str`; keep the line well-formed anyway.
        out.extend_from_slice(b"null");
    }
}

/// `value` in decimal, with its sign.
fn push_signed(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    push_decimal(out, value.unsigned_abs());
}

/// The UUID with `n` in its last 48 bits, version 4 and RFC 9562 variant
/// bits set: `00000000-0000-4000-8000-000000000001` for 1.
pub fn sequential_uuid(n: u64) -> String {
    format_uuid(sequential_uuid_bits(n))
}

/// The bits of [`sequential_uuid`].
fn sequential_uuid_bits(n: u64) -> u128 {
    (0x4000_u128 << 64) | (0x8000_u128 << 48) | u128::from(n & 0xffff_ffff_ffff)
}

/// A version-4 UUID made from 128 random bits.
#[cfg(test)]
fn random_uuid(entropy: u128) -> String {
    format_uuid(random_uuid_bits(entropy))
}

/// The bits of a random UUID (`random_uuid`): version 4 and the variant set.
fn random_uuid_bits(entropy: u128) -> u128 {
    let versioned = (entropy & !(0xf_u128 << 76)) | (0x4_u128 << 76);
    (versioned & !(0x3_u128 << 62)) | (0x2_u128 << 62)
}

/// `bits` as `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (lowercase hex).
fn format_uuid(bits: u128) -> String {
    let mut out = Vec::with_capacity(36);
    push_uuid(&mut out, bits);
    String::from_utf8(out).unwrap_or_default()
}

/// Appends `bits` as a UUID ([`format_uuid`]), eight digits at a time
/// ([`hex_digits`]; a `format!` costs ten times as much, once per record).
fn push_uuid(out: &mut Vec<u8>, bits: u128) {
    let word = |shift: u32| hex_digits(u32::try_from((bits >> shift) & 0xffff_ffff).unwrap_or(0));
    let [a0, a1, a2, a3, a4, a5, a6, a7] = word(96);
    let [b0, b1, b2, b3, c0, c1, c2, c3] = word(64);
    let [d0, d1, d2, d3, e0, e1, e2, e3] = word(32);
    let [f0, f1, f2, f3, f4, f5, f6, f7] = word(0);
    out.extend_from_slice(&[
        a0, a1, a2, a3, a4, a5, a6, a7, b'-', b0, b1, b2, b3, b'-', c0, c1, c2, c3, b'-', d0, d1,
        d2, d3, b'-', e0, e1, e2, e3, f0, f1, f2, f3, f4, f5, f6, f7,
    ]);
}

/// The eight lowercase hex digits of `value`, most significant first: its
/// nibbles spread one per byte of a `u64`, then made ASCII in every byte
/// at once (`'0'` plus the nibble, plus 39 more from 10 on, where
/// `nibble + 6` carries into bit 4; no byte overflows into the next).
fn hex_digits(value: u32) -> [u8; 8] {
    const BYTES: u64 = 0x0101_0101_0101_0101;
    let mut x = u64::from(value);
    x = ((x & 0xffff_0000) << 16) | (x & 0xffff);
    x = ((x & 0x0000_ff00_0000_ff00) << 8) | (x & 0x0000_00ff_0000_00ff);
    x = ((x & 0x00f0_00f0_00f0_00f0) << 4) | (x & 0x000f_000f_000f_000f);
    let letters = ((x + 6 * BYTES) >> 4) & BYTES;
    (x + u64::from(b'0') * BYTES + letters * 39).to_be_bytes()
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds,
/// e.g. `2025-01-31T09:05:00.250Z`.
pub(crate) fn format_timestamp(unix_millis: u64) -> String {
    let mut out = Vec::with_capacity(24);
    push_timestamp(&mut out, unix_millis);
    String::from_utf8(out).unwrap_or_default()
}

/// Appends [`format_timestamp`] of `unix_millis` to `out`.
fn push_timestamp(out: &mut Vec<u8>, unix_millis: u64) {
    let (year, month, day, hour, minute, second, millis) = civil(unix_millis);
    if year > 9999 {
        out.extend_from_slice(
            format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
                .as_bytes(),
        );
        return;
    }
    // Two digits at a time from a table: a `format!` costs ten times as
    // much, once per record.
    let pair = digit_pair;
    let [y1, y2] = pair(year / 100);
    let [y3, y4] = pair(year);
    let [mo1, mo2] = pair(month);
    let [d1, d2] = pair(day);
    let [h1, h2] = pair(hour);
    let [mi1, mi2] = pair(minute);
    let [s1, s2] = pair(second);
    let [ms2, ms3] = pair(millis);
    let ms1 = b'0' + u8::try_from(millis / 100 % 10).unwrap_or(0);
    out.extend_from_slice(&[
        y1, y2, y3, y4, b'-', mo1, mo2, b'-', d1, d2, b'T', h1, h2, b':', mi1, mi2, b':', s1, s2,
        b'.', ms1, ms2, ms3, b'Z',
    ]);
}

/// The last two decimal digits of `value`.
fn digit_pair(value: u64) -> [u8; 2] {
    let index = usize::try_from(value % 100).unwrap_or(0).saturating_mul(2);
    match DIGIT_PAIRS.get(index..index.saturating_add(2)) {
        Some(&[tens, ones]) => [tens, ones],
        _ => *b"00",
    }
}

/// `00` to `99`, two bytes each.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Milliseconds since the Unix epoch in a form safe in file names on every
/// system, e.g. `20250131T090500.250Z`.
pub fn format_compact_timestamp(unix_millis: u64) -> String {
    let (year, month, day, hour, minute, second, millis) = civil(unix_millis);
    format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}.{millis:03}Z")
}

/// (year, month, day, hour, minute, second, millisecond) of a Unix time in
/// milliseconds (proleptic Gregorian calendar, UTC).
fn civil(unix_millis: u64) -> (u64, u64, u64, u64, u64, u64, u64) {
    let millis = unix_millis % 1000;
    let seconds = unix_millis / 1000;
    let (second, minute, hour) = (seconds % 60, (seconds / 60) % 60, (seconds / 3600) % 24);
    // Howard Hinnant's days-to-civil, shifted so every quantity is unsigned
    // (the input is never before 1970).
    let days = seconds / 86_400 + 719_468;
    let era = days / 146_097;
    let day_of_era = days % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day, hour, minute, second, millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A name longer than a record shows (a peer's method, say) is
    /// written excerpted through the cache and never kept there; the
    /// usual names are kept and copied.
    #[test]
    fn the_line_cache_keeps_only_short_names() {
        let facts = RecordFacts {
            transport: Channel::Stdio,
            route: "stdio",
            status: 200,
            duration_micros: 5,
        };
        let clock = ClockReading {
            unix_millis: 1_706_691_900_250,
            entropy: 1,
        };
        let mut cache = LineCache::default();
        let mut recorder = Recorder::new(false);
        for method in ["tools/call", &"m".repeat(MAX_NAME_BYTES + 1), "tools/call"] {
            let outcome = Outcome {
                id: Some(Id::Number(1)),
                method: Some(Cow::Owned(method.to_owned())),
                tool: None,
                error: None,
                detail: None,
                stateless: false,
                trace_id: None,
            };
            let view = recorder.view(&outcome, &facts, clock);
            let (mut plain, mut cached) = (Vec::new(), Vec::new());
            view.write_json_line(&mut plain);
            view.write_json_line_cached(&mut cached, &mut cache);
            assert_eq!(
                String::from_utf8_lossy(&cached),
                String::from_utf8_lossy(&plain)
            );
            let kept = cache.names.as_ref().and_then(|names| names.method.clone());
            assert_eq!(kept.as_deref(), Some("tools/call"), "{method}");
        }
    }

    /// The digit-by-digit writers against the `format!` they replaced.
    #[test]
    fn uuids_and_timestamps_are_written_as_format_wrote_them() {
        let mut bits: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
        for round in 0..2000u128 {
            bits = bits.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(round);
            let expected = format!(
                "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                (bits >> 96) & 0xffff_ffff,
                (bits >> 80) & 0xffff,
                (bits >> 64) & 0xffff,
                (bits >> 48) & 0xffff,
                bits & 0xffff_ffff_ffff,
            );
            assert_eq!(format_uuid(bits), expected);
            let millis = u64::try_from(bits % 300_000_000_000_000).unwrap_or(0);
            let (year, month, day, hour, minute, second, milli) = civil(millis);
            assert_eq!(
                format_timestamp(millis),
                format!(
                    "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z"
                )
            );
        }
        for edge in [
            0,
            999,
            1_710_000_000_000,
            253_402_300_799_999,
            253_402_300_800_000,
            u64::MAX,
        ] {
            let (year, month, day, hour, minute, second, milli) = civil(edge);
            assert_eq!(
                format_timestamp(edge),
                format!(
                    "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z"
                )
            );
        }
        assert_eq!(format_uuid(0), "00000000-0000-0000-0000-000000000000");
        assert_eq!(
            format_uuid(u128::MAX),
            "ffffffff-ffff-ffff-ffff-ffffffffffff"
        );
    }

    /// Records written member by member are byte for byte what serde writes.
    #[test]
    fn the_direct_record_line_equals_the_serde_line() {
        use proptest::prelude::*;
        let text = || "[ -~é\u{1}\u{1f}\u{7f}\n\"\\\\]{0,12}";
        let id = prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            text().prop_map(Value::String),
            Just(json!(-0.0)),
            Just(json!(1.5)),
        ];
        let strategy = (
            (text(), text(), id, text()),
            (
                proptest::option::of(text()),
                proptest::option::of(text()),
                any::<u16>(),
                any::<u64>(),
                proptest::option::of((text(), any::<i32>(), proptest::option::of(text()))),
                text(),
                any::<bool>(),
                0usize..3,
            ),
        );
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 1024,
            ..proptest::test_runner::Config::default()
        });
        runner
            .run(
                &strategy,
                |(
                    (timestamp, correlation_id, request_id, route),
                    (
                        method,
                        tool,
                        status,
                        duration_micros,
                        error,
                        schema_version,
                        deterministic,
                        transport,
                    ),
                )| {
                    let record = ValidationRecord {
                        timestamp,
                        correlation_id,
                        request_id,
                        transport: [Channel::Http, Channel::Stdio, Channel::Sse][transport],
                        route,
                        method,
                        tool,
                        status,
                        duration_micros,
                        error: error.map(|(code, jsonrpc_code, detail)| ErrorPayload {
                            code,
                            jsonrpc_code,
                            message: "m\"x".to_owned(),
                            detail,
                        }),
                        // Half the records carry a trace id.
                        trace_id: (status % 2 == 0)
                            .then(|| "4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
                        metadata: Metadata {
                            schema_version,
                            deterministic,
                        },
                    };
                    let direct = record.to_json_line();
                    let serde = record.to_json_line_serde();
                    prop_assert_eq!(
                        String::from_utf8_lossy(&direct),
                        String::from_utf8_lossy(&serde)
                    );
                    Ok(())
                },
            )
            .expect("the direct line equals the serde line");
    }

    /// A view's line, written from borrowed parts, is byte for byte the
    /// serde line of the owned record `Recorder::record` makes (the path
    /// it replaced), in both modes, for every kind of id, excerpted and
    /// escaped text, every canonical error and any clock.
    #[test]
    fn a_view_line_equals_the_serde_line_of_the_owned_record() {
        use proptest::prelude::*;
        // Short text with escapes, and text long enough to be excerpted.
        let text = || {
            prop_oneof![
                "[ -~é\u{1}\u{1f}\u{7f}\n\"\\\\]{0,12}",
                ("[a-z\"é\u{1}]{1,4}", 40usize..400).prop_map(|(unit, times)| unit.repeat(times)),
            ]
        };
        let id = prop_oneof![
            Just(None),
            Just(Some(Id::Null)),
            Just(Some(Id::NegativeZero)),
            any::<i64>().prop_map(|number| Some(Id::Number(number))),
            text().prop_map(|text| Some(Id::from(text))),
        ];
        let strategy = (
            (
                id,
                proptest::option::of(text()),
                proptest::option::of(text()),
                proptest::option::of(0usize..CanonicalError::ALL.len()),
                proptest::option::of(prop_oneof![
                    text(),
                    (text(), 1usize..300).prop_map(|(text, times)| text.repeat(times)),
                ]),
            ),
            (
                text(),
                0usize..3,
                any::<u16>(),
                any::<u64>(),
                prop_oneof![any::<u64>(), 0u64..300_000_000_000_000],
                any::<u128>(),
                any::<bool>(),
            ),
        );
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 1024,
            ..proptest::test_runner::Config::default()
        });
        // One cache across the cases, as a log keeps it across its records.
        let shared = core::cell::RefCell::new(LineCache::default());
        runner
            .run(
                &strategy,
                |(
                    (id, method, tool, error, detail),
                    (
                        route,
                        transport,
                        status,
                        duration_micros,
                        unix_millis,
                        entropy,
                        deterministic,
                    ),
                )| {
                    let outcome = Outcome {
                        id: id.map(Id::into_owned),
                        method: method.map(Cow::Owned),
                        tool: tool.map(Cow::Owned),
                        error: error.and_then(|index| CanonicalError::ALL.get(index).copied()),
                        detail,
                        stateless: false,
                        // Half the records carry a trace id.
                        trace_id: (status % 2 == 0)
                            .then(|| TraceId::new(entropy.to_be_bytes()))
                            .flatten(),
                    };
                    let facts = RecordFacts {
                        transport: [Channel::Http, Channel::Stdio, Channel::Sse][transport],
                        route: &route,
                        status,
                        duration_micros,
                    };
                    let clock = ClockReading {
                        unix_millis,
                        entropy,
                    };
                    // Two recorders in step: the second record of each.
                    let mut owned = Recorder::new(deterministic);
                    let mut borrowed = Recorder::new(deterministic);
                    let _ = owned.record(&outcome, &facts, clock);
                    let _ = borrowed.view(&outcome, &facts, clock);
                    let record = owned.record(&outcome, &facts, clock);
                    let view = borrowed.view(&outcome, &facts, clock);
                    let mut line = b"kept".to_vec();
                    view.write_json_line(&mut line);
                    let serde = record.to_json_line_serde();
                    prop_assert_eq!(
                        String::from_utf8_lossy(line.get(4..).unwrap_or_default()),
                        String::from_utf8_lossy(&serde)
                    );
                    prop_assert_eq!(line.get(..4), Some(&b"kept"[..]), "appended, not replaced");
                    // Cached: after the previous case's record (names and
                    // second most likely stale), again (both kept), and at
                    // another millisecond of the same second.
                    let mut cache = shared.borrow_mut();
                    for _ in 0..2 {
                        let mut cached = b"kept".to_vec();
                        view.write_json_line_cached(&mut cached, &mut cache);
                        prop_assert_eq!(
                            String::from_utf8_lossy(&cached),
                            String::from_utf8_lossy(&line)
                        );
                    }
                    let later = ClockReading {
                        unix_millis: unix_millis / 1000 * 1000 + (unix_millis % 1000 + 1) % 1000,
                        entropy,
                    };
                    let again = Recorder::new(deterministic).view(&outcome, &facts, later);
                    let (mut plain, mut cached) = (Vec::new(), Vec::new());
                    again.write_json_line(&mut plain);
                    again.write_json_line_cached(&mut cached, &mut cache);
                    prop_assert_eq!(
                        String::from_utf8_lossy(&cached),
                        String::from_utf8_lossy(&plain)
                    );
                    prop_assert_eq!(view.to_record(), record.clone());
                    prop_assert_eq!(view.correlation_id(), record.correlation_id);
                    prop_assert_eq!(view.method().map(Cow::into_owned), record.method);
                    prop_assert_eq!(
                        view.detail()
                            .filter(|_| view.error().is_some())
                            .map(Cow::into_owned),
                        record.error.and_then(|error| error.detail)
                    );
                    prop_assert!(serde.len() <= MAX_RECORD_BYTES);
                    Ok(())
                },
            )
            .expect("the view's line equals the serde line");
    }

    /// The eight-at-a-time escape check agrees with the byte-by-byte one
    /// for every byte value at every position (each lane, and the tail).
    #[test]
    fn the_word_wise_escape_check_equals_the_byte_wise_one() {
        let reference = |bytes: &[u8]| {
            bytes
                .iter()
                .all(|&byte| byte >= 0x20 && byte != b'"' && byte != b'\\')
        };
        for len in [0usize, 1, 7, 8, 9, 16, 17, 23] {
            for position in 0..len {
                for byte in 0..=255u8 {
                    for fill in [b'a', 0xff, 0x20, 0x80] {
                        let mut bytes = std::vec![fill; len];
                        bytes[position] = byte;
                        assert_eq!(needs_no_escape(&bytes), reference(&bytes), "{bytes:?}");
                    }
                }
            }
        }
        assert!(needs_no_escape(b""));
    }

    fn rejected(error: CanonicalError, detail: &str) -> Outcome {
        Outcome {
            id: Some(Id::from("req-1").into_owned()),
            method: Some("tools/call".into()),
            tool: Some("evidence_query".into()),
            error: Some(error),
            detail: Some(detail.to_owned()),
            stateless: false,
            trace_id: None,
        }
    }

    fn facts(transport: Channel, route: &str, status: u16) -> RecordFacts<'_> {
        RecordFacts {
            transport,
            route,
            status,
            duration_micros: 1234,
        }
    }

    #[test]
    fn timestamps_match_known_dates() {
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day in a century leap year) 12:34:56.789
        assert_eq!(
            format_timestamp(951_827_696_789),
            "2000-02-29T12:34:56.789Z"
        );
        assert_eq!(
            format_timestamp(1_735_689_599_999),
            "2024-12-31T23:59:59.999Z"
        );
        assert_eq!(
            format_timestamp(1_735_689_600_000),
            "2025-01-01T00:00:00.000Z"
        );
        assert_eq!(
            format_compact_timestamp(1_735_689_600_250),
            "20250101T000000.250Z"
        );
        // Far future stays well-formed and never panics.
        assert!(format_timestamp(u64::MAX).ends_with('Z'));
    }

    #[test]
    fn uuids_are_version_4_and_well_formed() {
        assert_eq!(sequential_uuid(1), "00000000-0000-4000-8000-000000000001");
        assert_eq!(
            sequential_uuid(0x2a),
            "00000000-0000-4000-8000-00000000002a"
        );
        for entropy in [0_u128, u128::MAX, 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef] {
            let uuid = random_uuid(entropy);
            assert_eq!(uuid.len(), 36, "{uuid}");
            assert_eq!(uuid.as_bytes().get(14), Some(&b'4'), "{uuid}");
            assert!(
                matches!(uuid.as_bytes().get(19), Some(b'8' | b'9' | b'a' | b'b')),
                "{uuid}"
            );
        }
        assert_ne!(random_uuid(1), random_uuid(2));
    }

    #[test]
    fn a_rejection_carries_the_canonical_payload() {
        let mut recorder = Recorder::new(false);
        let outcome = rejected(CanonicalError::InvalidToolInput, "query is missing");
        let clock = ClockReading {
            unix_millis: 1_735_689_600_000,
            entropy: 7,
        };
        let record = recorder.record(&outcome, &facts(Channel::Http, "/rpc", 422), clock);
        let line = record.to_json_line();
        assert_eq!(line.last(), Some(&b'\n'));
        let value: Value = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(value["timestamp"], "2025-01-01T00:00:00.000Z");
        assert_eq!(value["requestId"], "req-1");
        assert_eq!(value["transport"], "http");
        assert_eq!(value["route"], "/rpc");
        assert_eq!(value["method"], "tools/call");
        assert_eq!(value["tool"], "evidence_query");
        assert_eq!(value["status"], 422);
        assert_eq!(value["durationMicros"], 1234);
        assert_eq!(
            value["error"],
            json!({
                "code": "INVALID_TOOL_INPUT",
                "jsonrpcCode": -32602,
                "message": "Invalid tool input",
                "detail": "query is missing",
            })
        );
        assert_eq!(
            value["metadata"],
            json!({"schemaVersion": SCHEMA_VERSION, "deterministic": false})
        );
        // The line reads back as the same record.
        let back: ValidationRecord = serde_json::from_slice(&line).expect("record");
        assert_eq!(back, record);
    }

    #[test]
    fn deterministic_mode_ignores_the_clock_and_counts_ids() {
        let mut recorder = Recorder::new(true);
        let outcome = rejected(CanonicalError::ToolNotFound, "no tool");
        let first = recorder.record(
            &outcome,
            &facts(Channel::Stdio, "stdio", 404),
            ClockReading {
                unix_millis: 123_456_789,
                entropy: 99,
            },
        );
        let second = recorder.record(
            &outcome,
            &facts(Channel::Stdio, "stdio", 404),
            ClockReading {
                unix_millis: 987_654_321,
                entropy: 3,
            },
        );
        assert_eq!(first.timestamp, DETERMINISTIC_TIMESTAMP);
        assert_eq!(second.timestamp, DETERMINISTIC_TIMESTAMP);
        assert_eq!(first.duration_micros, 0);
        assert_eq!(first.correlation_id, sequential_uuid(1));
        assert_eq!(second.correlation_id, sequential_uuid(2));
        assert!(first.metadata.deterministic);
        assert_eq!(recorder.issued(), 2);
        // Two recorders given the same outcomes produce the same bytes.
        let mut again = Recorder::new(true);
        let replay = again.record(
            &outcome,
            &facts(Channel::Stdio, "stdio", 404),
            ClockReading::default(),
        );
        assert_eq!(replay.to_json_line(), first.to_json_line());
    }

    #[test]
    fn every_field_is_present_even_when_empty() {
        let mut recorder = Recorder::new(true);
        let outcome = Outcome {
            id: None,
            method: None,
            tool: None,
            error: None,
            detail: None,
            stateless: false,
            trace_id: None,
        };
        let record = recorder.record(
            &outcome,
            &facts(Channel::Sse, "/mcp", 202),
            ClockReading::default(),
        );
        let value: Value = serde_json::to_value(&record).expect("JSON");
        let keys: Vec<&str> = value
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = [
            "timestamp",
            "correlationId",
            "requestId",
            "transport",
            "route",
            "method",
            "tool",
            "status",
            "durationMicros",
            "error",
            "metadata",
        ];
        expected.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, expected);
        assert_eq!(value["transport"], "sse");
        assert!(value["error"].is_null());
        assert!(value["requestId"].is_null());
    }

    #[test]
    fn stdio_status_mirrors_rpc_statuses() {
        let mut outcome = rejected(CanonicalError::InvalidEnvelope, "bad");
        assert_eq!(stdio_status(&outcome), 400);
        outcome.error = Some(CanonicalError::InternalError);
        assert_eq!(stdio_status(&outcome), 500);
        outcome.error = None;
        assert_eq!(stdio_status(&outcome), 200);
        outcome.id = None;
        assert_eq!(stdio_status(&outcome), 202, "a notification gets no answer");
        assert_eq!(
            stdio_route(Some(Framing::ContentLength)),
            "stdio:content-length"
        );
        assert_eq!(
            stdio_route(Some(Framing::NewlineDelimited)),
            "stdio:newline-delimited"
        );
    }

    #[test]
    fn peer_text_is_capped() {
        let mut recorder = Recorder::new(true);
        let long = "é".repeat(4096);
        let outcome = Outcome {
            id: Some(Id::from(long.clone())),
            method: Some(long.clone().into()),
            tool: Some(long.clone().into()),
            error: Some(CanonicalError::InvalidEnvelope),
            detail: Some(long.clone()),
            stateless: false,
            trace_id: None,
        };
        let record = recorder.record(
            &outcome,
            &facts(Channel::Stdio, "stdio", 400),
            ClockReading::default(),
        );
        let method = record.method.expect("method");
        assert!(method.len() <= MAX_NAME_BYTES, "{}", method.len());
        assert!(method.ends_with("… (8192 bytes)"), "{method}");
        assert!(long.starts_with(method.trim_end_matches("… (8192 bytes)")));
        let detail = record.error.and_then(|error| error.detail).expect("detail");
        assert!(detail.len() <= MAX_DETAIL_BYTES);
        assert!(detail.ends_with("… (8192 bytes)"), "{detail}");
        assert!(record.request_id.as_str().expect("id").len() <= MAX_NAME_BYTES);
        // A non-scalar id cannot reach a record: `Outcome::id` is an `Id`.
    }

    #[test]
    fn no_record_is_longer_than_the_bound() {
        let mut recorder = Recorder::new(false);
        // The costliest text: control characters take 6 bytes escaped.
        let nasty = "\u{1}\u{1}\u{1}\"\\é😀".repeat(1 << 16);
        let outcome = Outcome {
            id: Some(Id::from(nasty.clone())),
            method: Some(nasty.clone().into()),
            tool: Some(nasty.clone().into()),
            error: Some(CanonicalError::ResourceNotFound),
            detail: Some(nasty.clone()),
            stateless: false,
            trace_id: None,
        };
        let clock = ClockReading {
            unix_millis: u64::MAX,
            entropy: u128::MAX,
        };
        let facts = RecordFacts {
            transport: Channel::Stdio,
            route: &nasty,
            status: 599,
            duration_micros: u64::MAX,
        };
        let line = recorder.record(&outcome, &facts, clock).to_json_line();
        assert!(
            line.len() <= MAX_RECORD_BYTES,
            "{} bytes > {MAX_RECORD_BYTES}",
            line.len()
        );
        // Numeric ids are 64-bit integers: the longest stays a number.
        let mut big = outcome.clone();
        big.id = Some(Id::Number(i64::MIN));
        let record = recorder.record(&big, &facts, clock);
        assert!(record.request_id.is_number());
        assert!(record.to_json_line().len() <= MAX_RECORD_BYTES);
        assert!(MIN_LOG_MAX_BYTES >= 4 * MAX_RECORD_BYTES as u64);
    }

    #[test]
    fn refusals_read_back_the_canonical_error() {
        let body = evidence_wire::envelope::encode_error(
            None,
            CanonicalError::Unauthenticated,
            Some("missing bearer token"),
        );
        let outcome = refusal_outcome(&body).expect("a canonical error body");
        assert_eq!(outcome.error, Some(CanonicalError::Unauthenticated));
        assert_eq!(outcome.detail.as_deref(), Some("missing bearer token"));
        assert_eq!(refusal_outcome(br#"{"status":"ok"}"#), None);
        assert_eq!(refusal_outcome(b""), None);
        assert_eq!(
            refusal_outcome(br#"{"error":{"code":12345}}"#),
            None,
            "unknown codes are not guessed"
        );
        assert_eq!(Channel::Sse.as_str(), "sse");
    }

    /// One record's parts for the batch tests: an outcome (names borrowed
    /// as the server's known ones are, or owned as a peer's are), facts
    /// and a clock.
    type AnyRecord = (Outcome, String, Channel, u16, u64, ClockReading);

    /// Any record: every kind of id, short text with escapes, text long
    /// enough to be excerpted, every canonical error, any clock.
    fn any_record() -> impl proptest::strategy::Strategy<Value = AnyRecord> {
        use proptest::prelude::*;
        let text = || {
            prop_oneof![
                "[ -~é\u{1}\u{1f}\u{7f}\n\"\\\\]{0,12}",
                ("[a-z\"é\u{1}]{1,4}", 40usize..400).prop_map(|(unit, times)| unit.repeat(times)),
            ]
        };
        let name = || {
            prop_oneof![
                Just(Cow::Borrowed("tools/call")),
                Just(Cow::Borrowed("evidence_query")),
                text().prop_map(Cow::Owned),
            ]
        };
        let id = prop_oneof![
            Just(None),
            Just(Some(Id::Null)),
            Just(Some(Id::NegativeZero)),
            any::<i64>().prop_map(|number| Some(Id::Number(number))),
            text().prop_map(|text| Some(Id::from(text).into_owned())),
        ];
        (
            (
                id,
                proptest::option::of(name()),
                proptest::option::of(name()),
                proptest::option::of(0usize..CanonicalError::ALL.len()),
                proptest::option::of(prop_oneof![
                    text(),
                    (text(), 1usize..300).prop_map(|(text, times)| text.repeat(times)),
                ]),
            ),
            (
                prop_oneof![Just("stdio:content-length".to_owned()), text()],
                0usize..3,
                any::<u16>(),
                any::<u64>(),
                prop_oneof![any::<u64>(), 0u64..300_000_000_000_000],
                any::<u128>(),
            ),
        )
            .prop_map(
                |(
                    (id, method, tool, error, detail),
                    (route, transport, status, duration_micros, unix_millis, entropy),
                )| {
                    let outcome = Outcome {
                        id,
                        method,
                        tool,
                        error: error.and_then(|index| CanonicalError::ALL.get(index).copied()),
                        detail,
                        stateless: false,
                        // Half the records carry a trace id.
                        trace_id: (status % 2 == 0)
                            .then(|| TraceId::new(entropy.to_be_bytes()))
                            .flatten(),
                    };
                    let transport = [Channel::Http, Channel::Stdio, Channel::Sse][transport];
                    let clock = ClockReading {
                        unix_millis,
                        entropy,
                    };
                    (outcome, route, transport, status, duration_micros, clock)
                },
            )
    }

    /// Issue 43: the records the answering thread holds (stamps and facts
    /// copied into a batch, no JSON) give the writer thread the bytes of
    /// the straightforward path they replaced: each record's owned form
    /// through serde, and the line of the view it was made from, in a run
    /// of records sharing one line cache, in both modes.
    #[test]
    fn held_records_write_the_lines_of_the_straightforward_path() {
        use proptest::prelude::*;
        let strategy = (
            proptest::collection::vec(any_record(), 1..24),
            any::<bool>(),
        );
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 512,
            ..proptest::test_runner::Config::default()
        });
        runner
            .run(&strategy, |(records, deterministic)| {
                let mut recorder = Recorder::new(deterministic);
                let mut batch = RecordBatch::default();
                let (mut reference, mut from_views) = (Vec::new(), Vec::new());
                let mut owned = Vec::new();
                for (outcome, route, transport, status, duration_micros, clock) in &records {
                    let facts = RecordFacts {
                        transport: *transport,
                        route,
                        status: *status,
                        duration_micros: *duration_micros,
                    };
                    let view = recorder.view(outcome, &facts, *clock);
                    let record = view.to_record();
                    reference.extend_from_slice(&record.to_json_line_serde());
                    view.write_json_line(&mut from_views);
                    owned.push(record);
                    batch.push(&view);
                }
                prop_assert_eq!(batch.len(), records.len());
                let mut cache = LineCache::default();
                let mut held = Vec::new();
                for (index, record) in owned.iter().enumerate() {
                    let view = batch.view(index).expect("a held record");
                    view.write_json_line_cached(&mut held, &mut cache);
                    prop_assert_eq!(&view.to_record(), record);
                }
                prop_assert!(batch.view(records.len()).is_none());
                prop_assert_eq!(
                    String::from_utf8_lossy(&held),
                    String::from_utf8_lossy(&reference)
                );
                prop_assert_eq!(
                    String::from_utf8_lossy(&from_views),
                    String::from_utf8_lossy(&reference)
                );
                // Emptied, the batch holds nothing and keeps its room.
                let room = batch.capacity();
                batch.clear();
                prop_assert!(batch.is_empty() && batch.bytes() == 0);
                prop_assert_eq!(batch.capacity(), room);
                Ok(())
            })
            .expect("held records write the straightforward lines");
    }

    /// A held record costs the batch only what its line shows: peer text
    /// is excerpted before it is copied (a 10 MiB detail, a 1 MiB method
    /// and id add a few KiB), so the log's budget, counted in held bytes,
    /// bounds its memory.
    #[test]
    fn a_held_record_keeps_only_its_excerpts() {
        let huge = "x".repeat(10 * 1024 * 1024);
        let name = "m".repeat(1024 * 1024);
        let outcome = Outcome {
            id: Some(Id::from(name.clone()).into_owned()),
            method: Some(Cow::Owned(name.clone())),
            tool: Some(Cow::Owned(name.clone())),
            error: Some(CanonicalError::InvalidEnvelope),
            detail: Some(huge),
            stateless: false,
            trace_id: None,
        };
        let facts = RecordFacts {
            transport: Channel::Http,
            route: &name,
            status: 400,
            duration_micros: 1,
        };
        let mut recorder = Recorder::new(false);
        let view = recorder.view(&outcome, &facts, ClockReading::default());
        let mut batch = RecordBatch::default();
        batch.push(&view);
        assert!(
            batch.bytes() <= MAX_HELD_BYTES,
            "{} bytes held",
            batch.bytes()
        );
        let mut held = Vec::new();
        batch.view(0).expect("held").write_json_line(&mut held);
        assert_eq!(held, view.to_record().to_json_line_serde());
        assert!(held.len() <= MAX_RECORD_BYTES);
    }
}
