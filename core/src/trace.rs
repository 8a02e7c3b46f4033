//! W3C Trace Context (level 1): the `traceparent` and `tracestate` a
//! caller sends so that a provider's work joins the caller's trace.
//!
//! A [`TraceContext`] is read from the two HTTP headers of that name or
//! from a `tools/call`'s `params._meta.traceparent` and
//! `params._meta.tracestate` (as the MCP SDKs carry it), and written back
//! the same ways by a client ([`TraceContext::traceparent`],
//! [`TraceContext::tracestate`]). Parsing never fails loudly: input that
//! is not a valid trace context reads as none ([`TraceContext::parse`]
//! returns `None`; an invalid `tracestate` is dropped and the
//! `traceparent` kept), so a caller's broken header never costs it its
//! answer.
//!
//! What is accepted (W3C Trace Context, §3.2 and §3.3):
//! - `traceparent`: `version-traceid-parentid-flags`, lowercase hex: a
//!   2-digit version other than `ff`, a 32-digit trace id and a 16-digit
//!   parent id, neither all zeros, 2-digit flags. Version `00` is exactly
//!   55 characters; a later version may carry more after a `-` (its first
//!   four fields are read as version `00`'s, and a context sent on is
//!   written as version `00`).
//! - `tracestate`: at most [`TraceContext::MAX_TRACESTATE_BYTES`] bytes and
//!   [`TraceContext::MAX_TRACESTATE_MEMBERS`] list members, each `key=value` with the
//!   key and value grammar of §3.3.1 (empty members are allowed).
//!
//! Limits: a `traceparent` longer than [`TraceContext::MAX_TRACEPARENT_BYTES`] and a
//! `tracestate` longer than [`TraceContext::MAX_TRACESTATE_BYTES`] are refused before
//! anything is copied; a context holds at most 25 bytes of ids and flags
//! and its `tracestate`.

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::string::String;
use core::fmt;

use serde_json::{Map, Value};

/// A 16-byte trace id (never all zeros); shown as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId([u8; 16]);

impl TraceId {
    /// The id of these bytes, or `None` when they are all zero (invalid).
    pub fn new(bytes: [u8; 16]) -> Option<Self> {
        (bytes != [0; 16]).then_some(TraceId(bytes))
    }

    /// The id's bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceId({self})")
    }
}

/// An 8-byte span id (the `parent-id` of a `traceparent`; never all
/// zeros); shown as 16 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId([u8; 8]);

impl SpanId {
    /// The id of these bytes, or `None` when they are all zero (invalid).
    pub fn new(bytes: [u8; 8]) -> Option<Self> {
        (bytes != [0; 8]).then_some(SpanId(bytes))
    }

    /// The id's bytes.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

impl fmt::Debug for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpanId({self})")
    }
}

fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    bytes.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
}

/// One W3C trace context: the caller's trace id, the id of the caller's
/// span (the parent of the work done here), the trace flags and the
/// vendors' `tracestate`. See the module docs for what is accepted.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceContext {
    trace_id: TraceId,
    parent_id: SpanId,
    flags: u8,
    tracestate: Option<Box<str>>,
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceContext")
            .field("traceparent", &format_args!("{}", self.traceparent()))
            .field("tracestate", &self.tracestate)
            .finish()
    }
}

/// The `sampled` bit of the trace flags.
const SAMPLED: u8 = 0x01;

impl TraceContext {
    /// The name of the `traceparent` header and `_meta` member.
    pub const TRACEPARENT: &str = "traceparent";

    /// The name of the `tracestate` header and `_meta` member.
    pub const TRACESTATE: &str = "tracestate";

    /// The longest `tracestate` kept, in bytes (W3C Trace Context §3.3.1.1:
    /// a platform should propagate at least 512 bytes).
    pub const MAX_TRACESTATE_BYTES: usize = 512;

    /// The most list members a `tracestate` may hold (§3.3.1.1).
    pub const MAX_TRACESTATE_MEMBERS: usize = 32;

    /// The longest `traceparent` read, in bytes: version `00` is 55; a later
    /// version may append fields, which are ignored (this bound only keeps a
    /// hostile value from being scanned at length).
    pub const MAX_TRACEPARENT_BYTES: usize = 256;

    /// A context of `trace_id` whose caller's span is `parent_id`, with
    /// `flags` (bit 0: sampled) and no `tracestate`: what a client makes
    /// from its own current span to send on.
    pub fn new(trace_id: TraceId, parent_id: SpanId, flags: u8) -> Self {
        TraceContext {
            trace_id,
            parent_id,
            flags,
            tracestate: None,
        }
    }

    /// The context a `traceparent` value (and the `tracestate` sent with
    /// it, if any) describes, or `None` when the `traceparent` is not
    /// valid. An invalid `tracestate` is dropped; the context stays.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let context = parse_traceparent(traceparent.as_bytes())?;
        Some(match tracestate {
            Some(tracestate) => context.with_tracestate(tracestate),
            None => context,
        })
    }

    /// The context a request's `_meta` carries in its `traceparent` and
    /// `tracestate` members (strings), or `None` when it carries no valid
    /// `traceparent`.
    pub fn from_meta(meta: &Map<String, Value>) -> Option<Self> {
        let traceparent = meta.get(TraceContext::TRACEPARENT)?.as_str()?;
        let tracestate = meta.get(TraceContext::TRACESTATE).and_then(Value::as_str);
        TraceContext::parse(traceparent, tracestate)
    }

    /// The same context carrying `tracestate`, when it is valid (else
    /// without one). Surrounding spaces and tabs are trimmed; an empty
    /// value is none.
    pub fn with_tracestate(mut self, tracestate: &str) -> Self {
        let trimmed = tracestate.trim_matches([' ', '\t']);
        self.tracestate =
            (!trimmed.is_empty() && valid_tracestate(trimmed)).then(|| Box::from(trimmed));
        self
    }

    /// The trace id.
    pub fn trace_id(&self) -> TraceId {
        self.trace_id
    }

    /// The id of the caller's span: the parent of the work done here.
    pub fn parent_id(&self) -> SpanId {
        self.parent_id
    }

    /// The trace flags (bit 0: sampled; the other bits are kept as sent).
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// True when the caller may have recorded its span (flags bit 0).
    pub fn is_sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// The vendors' `tracestate`, when one was sent and is valid.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The `traceparent` to send on: version `00`, lowercase hex, 55
    /// characters.
    pub fn traceparent(&self) -> String {
        alloc::format!("00-{}-{}-{:02x}", self.trace_id, self.parent_id, self.flags)
    }

    /// The `_meta` members that carry this context: `traceparent`, and
    /// `tracestate` when there is one.
    pub fn to_meta(&self) -> Map<String, Value> {
        let mut meta = Map::new();
        meta.insert(
            TraceContext::TRACEPARENT.to_owned(),
            Value::String(self.traceparent()),
        );
        if let Some(tracestate) = self.tracestate() {
            meta.insert(
                TraceContext::TRACESTATE.to_owned(),
                Value::String(tracestate.to_owned()),
            );
        }
        meta
    }
}

/// The value of one lowercase hex digit.
fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

/// `N` bytes from `2 * N` lowercase hex digits.
fn hex_bytes<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    if digits.len() != N.checked_mul(2)? {
        return None;
    }
    let mut out = [0u8; N];
    for (slot, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let [high, low] = pair else { return None };
        *slot = (hex_digit(*high)? << 4) | hex_digit(*low)?;
    }
    Some(out)
}

fn parse_traceparent(text: &[u8]) -> Option<TraceContext> {
    if text.len() > TraceContext::MAX_TRACEPARENT_BYTES {
        return None;
    }
    // Spaces and tabs around a header value are not part of it.
    let text = trim_ows(text);
    let version = text.get(..2).and_then(hex_bytes::<1>)?;
    match version {
        [0xff] => return None,
        [0x00] if text.len() != 55 => return None,
        // A later version: at least version 00's fields, and anything
        // after them starts with `-`.
        _ if text.len() < 55 || (text.len() > 55 && text.get(55) != Some(&b'-')) => {
            return None;
        }
        _ => {}
    }
    if text.get(2) != Some(&b'-') || text.get(35) != Some(&b'-') || text.get(52) != Some(&b'-') {
        return None;
    }
    let trace_id = TraceId::new(text.get(3..35).and_then(hex_bytes::<16>)?)?;
    let parent_id = SpanId::new(text.get(36..52).and_then(hex_bytes::<8>)?)?;
    let [flags] = text.get(53..55).and_then(hex_bytes::<1>)?;
    Some(TraceContext::new(trace_id, parent_id, flags))
}

fn trim_ows(mut text: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = text {
        text = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = text {
        text = rest;
    }
    text
}

/// A `tracestate` of the W3C grammar (§3.3.1): at most
/// [`TraceContext::MAX_TRACESTATE_BYTES`] bytes, at most [`TraceContext::MAX_TRACESTATE_MEMBERS`]
/// members separated by commas (with optional spaces or tabs around them;
/// empty members allowed), each `key=value`, no key twice.
fn valid_tracestate(text: &str) -> bool {
    if text.len() > TraceContext::MAX_TRACESTATE_BYTES {
        return false;
    }
    let mut keys: [&str; TraceContext::MAX_TRACESTATE_MEMBERS] =
        [""; TraceContext::MAX_TRACESTATE_MEMBERS];
    let mut count = 0usize;
    for member in text.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let Some((key, value)) = member.split_once('=') else {
            return false;
        };
        if !valid_key(key) || !valid_value(value) {
            return false;
        }
        let seen = keys.get(..count).unwrap_or_default();
        if seen.contains(&key) {
            return false;
        }
        let Some(slot) = keys.get_mut(count) else {
            // More members than a tracestate may hold.
            return false;
        };
        *slot = key;
        count += 1;
    }
    true
}

/// `simple-key` or `tenant-id@system-id` (§3.3.1.3.1).
fn valid_key(key: &str) -> bool {
    let part = |text: &str, first_digit: bool, max: usize| {
        let bytes = text.as_bytes();
        let first_ok = match bytes.first() {
            Some(b'a'..=b'z') => true,
            Some(b'0'..=b'9') => first_digit,
            _ => false,
        };
        first_ok
            && bytes.len() <= max
            && bytes
                .iter()
                .all(|byte| matches!(byte, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/'))
    };
    match key.split_once('@') {
        None => part(key, false, 256),
        Some((tenant, system)) => part(tenant, true, 241) && part(system, false, 14),
    }
}

/// Up to 256 printable ASCII characters but `,` and `=`, not ending in a
/// space (§3.3.1.3.2).
fn valid_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 256
        && bytes.last() != Some(&b' ')
        && bytes
            .iter()
            .all(|byte| matches!(byte, 0x20..=0x7e) && *byte != b',' && *byte != b'=')
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read_and_written_back() {
        let context = TraceContext::parse(VALID, None).unwrap();
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.parent_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_sampled());
        assert_eq!(context.traceparent(), VALID);
        assert_eq!(context.tracestate(), None);
        // Surrounding spaces and tabs (as in a header) do not count.
        assert_eq!(
            TraceContext::parse(&alloc::format!(" \t{VALID} "), None),
            Some(context)
        );
    }

    #[test]
    fn invalid_traceparents_read_as_none() {
        let cases: Vec<String> = [
            "",
            "00",
            // Uppercase hex.
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
            // All-zero ids.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // Version ff.
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // Version 00 with more after it.
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            // A later version whose extra part does not start with `-`.
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            // Short ids, wrong separators, a non-hex flag.
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-é1",
        ]
        .iter()
        .map(|case| (*case).to_owned())
        .chain(core::iter::once(
            "0".repeat(TraceContext::MAX_TRACEPARENT_BYTES + 1),
        ))
        .collect();
        for case in &cases {
            assert_eq!(TraceContext::parse(case, Some("a=b")), None, "{case:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_as_version_00() {
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-comes-next";
        let context = TraceContext::parse(later, None).unwrap();
        assert_eq!(
            context.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09"
        );
        assert!(context.is_sampled());
        assert_eq!(context.flags(), 9);
    }

    #[test]
    fn tracestate_is_kept_when_valid_and_dropped_when_not() {
        let keep = [
            "rojo=00f067aa0ba902b7",
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
            " rojo=1 ,\tcongo=2 ,, ",
            "tenant1@vendor=x y",
        ];
        for tracestate in keep {
            let context = TraceContext::parse(VALID, Some(tracestate)).unwrap();
            assert_eq!(
                context.tracestate(),
                Some(tracestate.trim_matches([' ', '\t'])),
                "{tracestate:?}"
            );
        }
        let many = (0..=TraceContext::MAX_TRACESTATE_MEMBERS)
            .map(|n| alloc::format!("k{n}=v"))
            .collect::<Vec<_>>()
            .join(",");
        let long = alloc::format!("k={}", "v".repeat(TraceContext::MAX_TRACESTATE_BYTES));
        let drop = [
            "Rojo=1",
            "rojo",
            "rojo=",
            "rojo=a,b",
            "rojo=1,rojo=2",
            "rojo=caf\u{e9}",
            "rojo=tab\there",
            "1abc=1",
            many.as_str(),
            long.as_str(),
        ];
        for tracestate in drop {
            let context = TraceContext::parse(VALID, Some(tracestate)).unwrap();
            assert_eq!(context.tracestate(), None, "{tracestate:?}");
            assert_eq!(context.traceparent(), VALID);
        }
        assert_eq!(
            TraceContext::parse(VALID, Some("")).unwrap().tracestate(),
            None
        );
    }

    #[test]
    fn meta_carries_the_context_both_ways() {
        let context = TraceContext::parse(VALID, Some("rojo=1")).unwrap();
        let meta = context.to_meta();
        assert_eq!(
            meta.get(TraceContext::TRACEPARENT),
            Some(&Value::String(VALID.into()))
        );
        assert_eq!(
            meta.get(TraceContext::TRACESTATE),
            Some(&Value::String("rojo=1".into()))
        );
        assert_eq!(TraceContext::from_meta(&meta), Some(context));
        let mut not_a_string = Map::new();
        not_a_string.insert(TraceContext::TRACEPARENT.into(), Value::Bool(true));
        assert_eq!(TraceContext::from_meta(&not_a_string), None);
        assert_eq!(TraceContext::from_meta(&Map::new()), None);
    }

    #[test]
    fn ids_refuse_all_zeros() {
        assert_eq!(TraceId::new([0; 16]), None);
        assert_eq!(SpanId::new([0; 8]), None);
        let context = TraceContext::new(
            TraceId::new([1; 16]).unwrap(),
            SpanId::new([0xab; 8]).unwrap(),
            0,
        );
        assert_eq!(
            context.traceparent(),
            "00-01010101010101010101010101010101-abababababababab-00"
        );
        assert!(!context.is_sampled());
    }
}
