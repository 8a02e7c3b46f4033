//! One validating pass over an envelope object: the JSON syntax check, the
//! exact nesting depth and the top-level member spans together, in place of
//! the depth pre-scan followed by `serde_json`'s `RawValue` capture (two
//! passes over the whole body).
//!
//! It is a shortcut, never a second rule book: [`members`] settles a body
//! only when it is one JSON object that `serde_json` reads without error
//! (RFC 8259 syntax on text already checked as UTF-8: strings without raw
//! control characters, escapes `\" \\ \/ \b \f \n \r \t \uXXXX`, surrogate
//! halves in `\u` escapes taken as `serde_json` takes them when skipping a
//! value, numbers without leading zeros or bare dots, nothing but
//! whitespace after the object), or when it is nested deeper than the limit
//! with everything before the offending bracket valid. Anything else
//! (including a syntax error anywhere) answers [`Scan::Unsettled`] and the
//! caller takes the `serde_json` path, which words every refusal as before.
//! The spans are those `RawValue` would capture: the value's own text,
//! without the whitespace around it. `envelope::scan::tests` holds this to
//! the `serde_json` path on generated JSON, single-byte mutations, bracket
//! soup and the shared conformance vectors.
//!
//! [`members_deferring`] may stop at a last member the caller reads and
//! checks itself (the `params` of a `tools/call`, read by the call reader
//! as it checks them), so those bytes are walked once.
//!
//! Limits: linear, no recursion, no allocation; container kinds are kept in
//! a fixed bit stack, so a limit at or above [`MAX_DEPTH`] is left to the
//! other path.
//!
//! Why hand-written: `tests/benches/instructions.rs` (`10KB-dense`) shows the
//! two passes at ~1.5x `serde_json`'s own `IgnoredAny` floor; this pass is
//! the whole validation.

use serde::de::value::{BorrowedStrDeserializer, Error as ValueError};
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::value::RawValue;

/// Depth limits from here on are left to the `serde_json` path (the bit
/// stack holds this many levels).
pub(super) const MAX_DEPTH: usize = 512;

/// Why [`members`] did not settle a body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scan {
    /// An opening bracket at this byte offset opens level `max_depth + 1`,
    /// and the text before it is valid.
    TooDeep(usize),
    /// Not settled here: not valid JSON, not an object, a member name the
    /// caller could not read, or a limit this pass does not handle.
    Unsettled,
}

/// Calls `member(name, value)` for each top-level member of the object
/// `text` holds, in order (`name` with its quotes, still escaped; `value`
/// the member's text as `RawValue` would capture it), after checking the
/// whole text: `Ok` only when `text` is one valid JSON object no deeper than
/// `max_depth` (the object itself is level 1).
pub(super) fn members<'a>(
    text: &'a str,
    max_depth: usize,
    member: impl FnMut(&'a str, &'a str) -> Result<(), Scan>,
) -> Result<(), Scan> {
    members_deferring(text, max_depth, |_| false, member).map(|_| ())
}

/// [`members`], except that the object's last member may be left
/// unchecked: when `defer(name)` holds for a member whose value starts with
/// `{` (asked before the value is walked), that member is handed over with
/// the candidate span from its `{` to the object's closing brace (the
/// text's last `}`, whitespace trimmed), and the pass ends there, answering
/// `Ok(Some(candidate))`. The candidate is the member's value, and `text` one valid
/// object no deeper than `max_depth`, exactly when the candidate is one
/// valid JSON value nested no deeper than `max_depth` counting from level
/// 2: the caller must check that itself (or run [`members`] again). The
/// members before it were checked as usual. `Ok(None)`: nothing was
/// deferred, as [`members`].
pub(super) fn members_deferring<'a>(
    text: &'a str,
    max_depth: usize,
    mut defer: impl FnMut(&str) -> bool,
    mut member: impl FnMut(&'a str, &'a str) -> Result<(), Scan>,
) -> Result<Option<&'a str>, Scan> {
    if max_depth >= MAX_DEPTH {
        return Err(Scan::Unsettled);
    }
    let bytes = text.as_bytes();
    let mut at = skip_whitespace(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return Err(Scan::Unsettled);
    }
    if max_depth == 0 {
        return Err(Scan::TooDeep(at));
    }
    at = skip_whitespace(bytes, at.saturating_add(1));
    if bytes.get(at) == Some(&b'}') {
        at = at.saturating_add(1);
    } else {
        loop {
            let name_start = at;
            if bytes.get(at) != Some(&b'"') {
                return Err(Scan::Unsettled);
            }
            at = string_end(bytes, at.saturating_add(1))?;
            let name = text.get(name_start..at).ok_or(Scan::Unsettled)?;
            at = skip_whitespace(bytes, at);
            if bytes.get(at) != Some(&b':') {
                return Err(Scan::Unsettled);
            }
            let value_start = skip_whitespace(bytes, at.saturating_add(1));
            if bytes.get(value_start) == Some(&b'{') && defer(name) {
                if let Some(candidate) = last_member_candidate(text, value_start) {
                    member(name, candidate)?;
                    return Ok(Some(candidate));
                }
            }
            at = value_end(bytes, value_start, max_depth)?;
            member(name, text.get(value_start..at).ok_or(Scan::Unsettled)?)?;
            at = skip_whitespace(bytes, at);
            match bytes.get(at) {
                Some(b',') => at = skip_whitespace(bytes, at.saturating_add(1)),
                Some(b'}') => {
                    at = at.saturating_add(1);
                    break;
                }
                _ => return Err(Scan::Unsettled),
            }
        }
    }
    if skip_whitespace(bytes, at) == bytes.len() {
        Ok(None)
    } else {
        Err(Scan::Unsettled)
    }
}

/// The text from `start` to just before the last `}` of `text` (the
/// closing brace of the object, if the member at `start` is its last),
/// without trailing whitespace; `None` when `text` does not end with `}`
/// (whitespace aside) or nothing is left between.
fn last_member_candidate(text: &str, start: usize) -> Option<&str> {
    let close = text
        .trim_end_matches([' ', '\t', '\n', '\r'])
        .len()
        .checked_sub(1)?;
    if text.as_bytes().get(close) != Some(&b'}') {
        return None;
    }
    let candidate = text
        .get(start..close)?
        .trim_end_matches([' ', '\t', '\n', '\r']);
    (!candidate.is_empty()).then_some(candidate)
}

/// The kinds (object or array) of the open containers, one bit per level.
struct Kinds([u64; MAX_DEPTH / 64]);

impl Kinds {
    fn set(&mut self, depth: usize, object: bool) {
        if let Some(word) = self.0.get_mut(depth / 64) {
            let bit = 1u64 << (depth % 64);
            if object {
                *word |= bit;
            } else {
                *word &= !bit;
            }
        }
    }

    fn is_object(&self, depth: usize) -> bool {
        self.0
            .get(depth / 64)
            .is_some_and(|word| (word >> (depth % 64)) & 1 == 1)
    }
}

/// The offset just past the value starting at `at` (a member value of the
/// level-1 object), checking it; nesting counts from 1.
fn value_end(bytes: &[u8], at: usize, max_depth: usize) -> Result<usize, Scan> {
    value_end_within(bytes, at, 1, max_depth)
}

/// The offset just past the value starting at `at`, checking it, for a
/// value held by a container at nesting level `level` (so a bracket at
/// `at` opens level `level + 1`); a limit at or above [`MAX_DEPTH`] is
/// left to the caller's other path ([`Scan::Unsettled`]).
pub(crate) fn value_end_within(
    bytes: &[u8],
    mut at: usize,
    level: usize,
    max_depth: usize,
) -> Result<usize, Scan> {
    if max_depth >= MAX_DEPTH {
        return Err(Scan::Unsettled);
    }
    let mut kinds = Kinds([0; MAX_DEPTH / 64]);
    // Never above `max_depth`, which is below `MAX_DEPTH`.
    let mut depth = level;
    'value: loop {
        // A value starts at `at`.
        match bytes.get(at) {
            Some(b'"') => at = string_end(bytes, at.saturating_add(1))?,
            Some(&open @ (b'{' | b'[')) => {
                depth = depth.saturating_add(1);
                if depth > max_depth {
                    return Err(Scan::TooDeep(at));
                }
                let object = open == b'{';
                kinds.set(depth, object);
                at = skip_whitespace(bytes, at.saturating_add(1));
                if bytes.get(at) == Some(if object { &b'}' } else { &b']' }) {
                    depth = depth.saturating_sub(1);
                    at = at.saturating_add(1);
                } else {
                    if object {
                        at = member_name(bytes, at)?;
                    }
                    continue 'value;
                }
            }
            Some(b't') => at = literal(bytes, at, b"true")?,
            Some(b'f') => at = literal(bytes, at, b"false")?,
            Some(b'n') => at = literal(bytes, at, b"null")?,
            Some(b'-' | b'0'..=b'9') => at = number_end(bytes, at)?,
            _ => return Err(Scan::Unsettled),
        }
        // A value ended just before `at`: close containers until one goes on.
        loop {
            if depth <= level {
                return Ok(at);
            }
            at = skip_whitespace(bytes, at);
            let object = kinds.is_object(depth);
            match bytes.get(at) {
                Some(b',') => {
                    at = skip_whitespace(bytes, at.saturating_add(1));
                    if object {
                        at = member_name(bytes, at)?;
                    }
                    continue 'value;
                }
                Some(b'}') if object => {}
                Some(b']') if !object => {}
                _ => return Err(Scan::Unsettled),
            }
            depth = depth.saturating_sub(1);
            at = at.saturating_add(1);
        }
    }
}

/// Checks `"name"` `:` at `at` and returns where the value starts.
fn member_name(bytes: &[u8], at: usize) -> Result<usize, Scan> {
    if bytes.get(at) != Some(&b'"') {
        return Err(Scan::Unsettled);
    }
    let at = skip_whitespace(bytes, string_end(bytes, at.saturating_add(1))?);
    if bytes.get(at) != Some(&b':') {
        return Err(Scan::Unsettled);
    }
    Ok(skip_whitespace(bytes, at.saturating_add(1)))
}

fn literal(bytes: &[u8], at: usize, word: &[u8]) -> Result<usize, Scan> {
    let end = at.saturating_add(word.len());
    if bytes.get(at..end) == Some(word) {
        Ok(end)
    } else {
        Err(Scan::Unsettled)
    }
}

/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`; what follows is
/// checked by the caller (a digit after a leading `0` is refused there).
pub(crate) fn number_end(bytes: &[u8], mut at: usize) -> Result<usize, Scan> {
    if bytes.get(at) == Some(&b'-') {
        at = at.saturating_add(1);
    }
    match bytes.get(at) {
        Some(b'0') => at = at.saturating_add(1),
        Some(b'1'..=b'9') => at = digits_end(bytes, at.saturating_add(1)),
        _ => return Err(Scan::Unsettled),
    }
    if bytes.get(at) == Some(&b'.') {
        let start = at.saturating_add(1);
        at = digits_end(bytes, start);
        if at == start {
            return Err(Scan::Unsettled);
        }
    }
    if let Some(b'e' | b'E') = bytes.get(at) {
        at = at.saturating_add(1);
        if let Some(b'+' | b'-') = bytes.get(at) {
            at = at.saturating_add(1);
        }
        let start = at;
        at = digits_end(bytes, start);
        if at == start {
            return Err(Scan::Unsettled);
        }
    }
    Ok(at)
}

fn digits_end(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b'0'..=b'9') = bytes.get(at) {
        at = at.saturating_add(1);
    }
    at
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(at) {
        at = at.saturating_add(1);
    }
    at
}

/// The offset just past the quote closing the string whose contents start
/// at `from`, checking escapes and refusing raw control characters.
#[inline(always)]
fn string_end(bytes: &[u8], from: usize) -> Result<usize, Scan> {
    string_close(bytes, from).map(|(close, _)| close.saturating_add(1))
}

/// The offset of the quote closing the string whose contents start at
/// `from`, and whether the contents hold an escape; checks escapes and
/// refuses raw control characters. Eight bytes at a time (SWAR) to the
/// next quote, backslash or control byte; strings without escapes (the
/// usual ones) end on this inlined path, the rest on [`string_close_slow`].
#[inline(always)]
pub(crate) fn string_close(bytes: &[u8], from: usize) -> Result<(usize, bool), Scan> {
    let from = plain_end(bytes, from);
    if bytes.get(from) == Some(&b'"') {
        return Ok((from, false));
    }
    string_close_slow(bytes, from, false)
}

/// The offset of the first quote, backslash or control byte from `from`
/// on, eight bytes at a time; where fewer than eight bytes are left, the
/// offset of the first of those (the caller goes on a byte at a time).
#[inline(always)]
fn plain_end(bytes: &[u8], mut from: usize) -> usize {
    while let Some(chunk) = bytes.get(from..from.saturating_add(8)) {
        let Ok(chunk) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let found = specials(u64::from_le_bytes(chunk));
        if found != 0 {
            return from.saturating_add((found.trailing_zeros() / 8) as usize);
        }
        from = from.saturating_add(8);
    }
    from
}

/// The high bit of each byte of the result is set where `word` holds a
/// quote, a backslash or a byte below 0x20, except that bits above the
/// first such byte may be set wrongly (borrows): the lowest one never is.
#[inline(always)]
fn specials(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const QUOTES: u64 = ONES * b'"' as u64;
    const BACKSLASHES: u64 = ONES * b'\\' as u64;
    const SPACES: u64 = ONES * b' ' as u64;
    // `(x - ONES) & !x & HIGHS` marks the bytes where `x` is zero, and
    // `(w - SPACES) & !w & HIGHS` those where `w` is below 0x20.
    let quote = word ^ QUOTES;
    let backslash = word ^ BACKSLASHES;
    ((quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash)
        | (word.wrapping_sub(SPACES) & !word))
        & HIGHS
}

/// [`string_close`] from `from` on, a byte at a time: escapes, control
/// bytes and the last few bytes of the text.
#[inline(never)]
fn string_close_slow(
    bytes: &[u8],
    mut from: usize,
    mut escaped: bool,
) -> Result<(usize, bool), Scan> {
    loop {
        match bytes.get(from) {
            Some(b'"') => return Ok((from, escaped)),
            Some(b'\\') => {
                escaped = true;
                // Back to eight at a time until the next special byte.
                from = plain_end(bytes, escape_end(bytes, from.saturating_add(1))?);
            }
            Some(0..0x20) | None => return Err(Scan::Unsettled),
            Some(_) => from = from.saturating_add(1),
        }
    }
}

/// The offset just past the escape whose letter is at `at`.
fn escape_end(bytes: &[u8], at: usize) -> Result<usize, Scan> {
    match bytes.get(at) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(at.saturating_add(1)),
        Some(b'u') => {
            let end = at.saturating_add(5);
            match bytes.get(at.saturating_add(1)..end) {
                Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => Ok(end),
                _ => Err(Scan::Unsettled),
            }
        }
        _ => Err(Scan::Unsettled),
    }
}

/// The `RawValue` for `text`, which [`members`] has already checked: no
/// second parse. `serde_json` builds a borrowed `RawValue` from any
/// deserializer that hands it the text as a map with one member named by
/// its raw-value token (the protocol its own deserializers follow); should
/// a later `serde_json` change that, the fallback parses the text (the same
/// value, only slower) and the unit test
/// `checked_spans_become_raw_values_without_a_parse` fails.
pub(super) fn raw_value(text: &str) -> Result<&RawValue, Scan> {
    raw_value_named(RAW_VALUE_TOKEN, text)
}

/// [`raw_value`] presenting `text` under the member name `token`; a test
/// passes another name to see the fallback engage.
fn raw_value_named<'a>(token: &'static str, text: &'a str) -> Result<&'a RawValue, Scan> {
    <&RawValue as serde::Deserialize>::deserialize(Checked { token, text })
        .or_else(|_| serde_json::from_str(text))
        .map_err(|_| Scan::Unsettled)
}

/// `serde_json`'s name for a raw value in its deserializer protocol.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Already-checked JSON text, presented as a raw value: a map of one
/// member named `token` whose value is `text`.
struct Checked<'a> {
    token: &'static str,
    text: &'a str,
}

impl<'de> Deserializer<'de> for Checked<'de> {
    type Error = ValueError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        visitor.visit_map(CheckedMember {
            token: self.token,
            text: Some(self.text),
        })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

struct CheckedMember<'a> {
    token: &'static str,
    text: Option<&'a str>,
}

impl<'de> MapAccess<'de> for CheckedMember<'de> {
    type Error = ValueError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ValueError> {
        if self.text.is_none() {
            return Ok(None);
        }
        seed.deserialize(BorrowedStrDeserializer::new(self.token))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ValueError> {
        let text = self
            .text
            .take()
            .ok_or_else(|| ValueError::custom("the raw value was already taken"))?;
        seed.deserialize(BorrowedStrDeserializer::new(text))
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
mod tests {
    //! The one validating pass against the `serde_json` path it shortcuts:
    //! same outcome (accept, or refuse with the same error and words), same
    //! member spans, and a settled verdict wherever it should have one.

    use alloc::format;
    use alloc::string::{String, ToString};
    use alloc::vec::Vec;

    use proptest::prelude::*;
    use proptest::sample::select;

    use super::{Scan, members, raw_value};
    use crate::envelope::{
        Incoming, Message, Policy, RawEnvelope, nesting_exceeds, validate, validate_reading_call,
        validate_with_serde,
    };
    use crate::server::arguments::{checked, read_call_serde};

    /// Byte offsets of every raw member the outcome kept (params, result,
    /// error data), so equal text at another place does not pass.
    fn spans(
        body: &[u8],
        outcome: &Result<Incoming<'_>, crate::envelope::Rejection>,
    ) -> Vec<usize> {
        let base = body.as_ptr() as usize;
        let mut out = Vec::new();
        let mut push = |raw: Option<&serde_json::value::RawValue>| {
            if let Some(raw) = raw {
                out.push((raw.get().as_ptr() as usize).wrapping_sub(base));
                out.push(raw.get().len());
            }
        };
        if let Ok(Incoming::Single(message)) = outcome {
            match message {
                Message::Request(request) => push(request.params),
                Message::Notification(notification) => push(notification.params),
                Message::Response(response) => match &response.outcome {
                    Ok(result) => push(Some(result)),
                    Err(error) => push(error.data),
                },
            }
        }
        out
    }

    /// `validate`, `validate_reading_call` (with the server's call reader)
    /// and the `serde_json` path agree on `body` under `policy`; a call the
    /// reader read is the `serde_json` read of the same params.
    fn same_outcome(body: &[u8], policy: &Policy) -> Result<(), TestCaseError> {
        let fast = validate(body, policy);
        let slow = validate_with_serde(body, policy);
        let lossy = String::from_utf8_lossy(body);
        prop_assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "body {:?}", lossy);
        prop_assert_eq!(spans(body, &fast), spans(body, &slow));
        let max_depth = policy.depth_limit();
        let (reading, read) =
            validate_reading_call(body, policy, |raw| checked::call(raw, max_depth));
        prop_assert_eq!(
            format!("{reading:?}"),
            format!("{slow:?}"),
            "body {:?}",
            lossy
        );
        prop_assert_eq!(spans(body, &reading), spans(body, &slow));
        if let Some(read) = read {
            // Only beside a valid envelope whose params are the call.
            let params = match &slow {
                Ok(Incoming::Single(Message::Request(request))) => request.params,
                _ => None,
            };
            prop_assert!(params.is_some(), "read beside {:?}: {:?}", slow, lossy);
            let serde = params.and_then(|raw| read_call_serde(raw.get()));
            prop_assert_eq!(read.has_meta, names_meta(params), "body {:?}", lossy);
            prop_assert_eq!(Some(read.arguments), serde, "body {:?}", lossy);
        }
        Ok(())
    }

    /// Whether `params` (an object) has a member named `_meta`, by serde
    /// (values left raw: `Server::speech_of` reads them only below `_meta`).
    fn names_meta(params: Option<&serde_json::value::RawValue>) -> bool {
        type Members<'a> = alloc::collections::BTreeMap<String, &'a serde_json::value::RawValue>;
        params
            .and_then(|raw| serde_json::from_str::<Members<'_>>(raw.get()).ok())
            .is_some_and(|members| members.contains_key("_meta"))
    }

    /// The pass's own verdict against `serde_json` and the depth pre-scan:
    /// settled exactly when they settle it, with the same members.
    fn same_verdict(text: &str, max_depth: usize) -> Result<(), TestCaseError> {
        let mut seen = Vec::new();
        let verdict = members(text, max_depth, |name, value| {
            seen.push((
                name.to_string(),
                value.as_ptr() as usize - text.as_ptr() as usize,
                value.len(),
            ));
            Ok(())
        });
        let deep = nesting_exceeds(text.as_bytes(), max_depth);
        let syntax_ok = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
        let object = text
            .trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('{');
        match verdict {
            Ok(()) => {
                prop_assert!(syntax_ok && object && deep.is_none(), "settled {text:?}");
                // The same member values `serde_json` captures, in order.
                use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
                struct Spans<'t>(&'t str);
                impl<'de> Visitor<'de> for Spans<'_> {
                    type Value = Vec<(usize, usize)>;
                    fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                        f.write_str("an object")
                    }
                    fn visit_map<A: MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<Self::Value, A::Error> {
                        let mut out = Vec::new();
                        while map.next_key::<IgnoredAny>()?.is_some() {
                            let value: &'de serde_json::value::RawValue = map.next_value()?;
                            out.push((
                                value.get().as_ptr() as usize - self.0.as_ptr() as usize,
                                value.get().len(),
                            ));
                        }
                        Ok(out)
                    }
                }
                let mut de = serde_json::Deserializer::from_str(text);
                let found: Vec<(usize, usize)> = seen
                    .iter()
                    .map(|(_, offset, len)| (*offset, *len))
                    .collect();
                match (&mut de).deserialize_map(Spans(text)) {
                    Ok(expected) => prop_assert_eq!(found, expected),
                    // `serde_json` reads top-level names fully (a lone
                    // surrogate there is refused); the pass leaves escaped
                    // names to its caller, which hands them to `serde_json`.
                    Err(_) => prop_assert!(seen.iter().any(|(name, _, _)| name.contains('\\'))),
                }
            }
            Err(Scan::TooDeep(offset)) => {
                prop_assert_eq!(deep, Some(offset), "{:?}", text);
            }
            Err(Scan::Unsettled) => {
                // Only what the pass must leave: broken JSON, not an object,
                // or an escaped top-level name... which it never sees here.
                prop_assert!(
                    !syntax_ok || !object || max_depth >= super::MAX_DEPTH,
                    "left unsettled: {text:?} (depth {max_depth})"
                );
            }
        }
        if syntax_ok && object && max_depth < super::MAX_DEPTH {
            // Valid and deep: refused at the pre-scan's offset.
            if let Some(offset) = deep {
                prop_assert_eq!(verdict, Err(Scan::TooDeep(offset)));
            }
        }
        Ok(())
    }

    /// JSON text, valid or broken in the places a validator gets wrong:
    /// numbers, escapes (lone surrogates too), literals, control bytes,
    /// whitespace, trailing commas.
    fn token() -> impl Strategy<Value = String> {
        let string = prop::collection::vec(
            select(
                &[
                    "a",
                    "é",
                    "\u{1F600}",
                    "\\\"",
                    "\\\\",
                    "\\/",
                    "\\b",
                    "\\f",
                    "\\n",
                    "\\r",
                    "\\t",
                    "\\u0041",
                    "\\uD800",
                    "\\uDC00",
                    "\\uD83D\\uDE00",
                    "\\u00e9",
                    "[",
                    "{",
                    "]",
                    "}",
                    ":",
                    ",",
                    "abcdefghijklmnop",
                    " ",
                    "\\x",
                    "\\u12",
                    "\u{1}",
                    "\t",
                    "\u{7f}",
                ][..],
            ),
            0..6,
        )
        .prop_map(|parts| format!("\"{}\"", parts.concat()));
        let number = select(
            &[
                "0",
                "-0",
                "7",
                "-12",
                "10",
                "1.5",
                "0.25",
                "1e5",
                "1E+5",
                "-1.0e-3",
                "2e-0",
                "123456789012345678901234567890",
                "01",
                "1.",
                ".5",
                "-",
                "1e",
                "+1",
                "00",
                "-01",
                "1.e3",
                "1e+",
                "0x1",
                "1_0",
                "Infinity",
                "NaN",
            ][..],
        )
        .prop_map(ToString::to_string);
        let literal = select(&["true", "false", "null", "tru", "nul", "falsey", "True"][..])
            .prop_map(ToString::to_string);
        prop_oneof![4 => string, 3 => number, 2 => literal]
    }

    fn space() -> impl Strategy<Value = &'static str> {
        select(&["", "", "", " ", "\n", "\r\n\t ", "\u{c}", "\u{a0}"][..])
    }

    fn value() -> impl Strategy<Value = String> {
        token().prop_recursive(12, 200, 5, |inner| {
            prop_oneof![
                (
                    prop::collection::vec((inner.clone(), space()), 0..5),
                    any::<bool>()
                )
                    .prop_map(|(items, trailing)| {
                        let items: Vec<String> = items
                            .into_iter()
                            .map(|(item, ws)| format!("{ws}{item}{ws}"))
                            .collect();
                        let comma = if trailing && !items.is_empty() {
                            ","
                        } else {
                            ""
                        };
                        format!("[{}{comma}]", items.join(","))
                    }),
                (
                    prop::collection::vec((token(), inner, space()), 0..5),
                    any::<bool>()
                )
                    .prop_map(|(members, missing_colon)| {
                        let members: Vec<String> = members
                            .into_iter()
                            .enumerate()
                            .map(|(index, (name, value, ws))| {
                                let name = if name.starts_with('"') {
                                    name
                                } else {
                                    format!("\"{name}\"")
                                };
                                let colon = if missing_colon && index == 1 { "" } else { ":" };
                                format!("{ws}{name}{ws}{colon}{ws}{value}{ws}")
                            })
                            .collect();
                        format!("{{{}}}", members.join(","))
                    }),
            ]
        })
    }

    /// The arguments of the usual `evidence_query` call.
    const USUAL_ARGUMENTS: &str = r#"{"query":{"provider_id":"p","check_id":"time_now"},"context":{"tenant_id":1,"namespace_id":20,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":-1710000000000},"correlation_id":"c\u0041"}}"#;

    /// An envelope around `value`, in one of several member layouts.
    fn envelope() -> impl Strategy<Value = String> {
        (value(), 0usize..12, space()).prop_map(|(value, layout, ws)| match layout {
            // The usual call, with a generated value where the call reader
            // must check what it steps over (the envelope pass leaves the
            // params of such a call to it).
            7 => format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"evidence_query","_meta":{value},"arguments":{USUAL_ARGUMENTS}}}{ws}}}{ws}"#),
            8 => format!(r#"{{"jsonrpc":"2.0","method":"tools/call","id":2,"params":{{"x":{value},"arguments":{USUAL_ARGUMENTS},"name":"evidence_query"}}}}"#),
            9 => format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"evidence_query","arguments":{}}}}}"#, USUAL_ARGUMENTS.replacen("\"time_now\"", &format!("\"time_now\",\"params\":{value}"), 1)),
            10 => format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"evidence_query","arguments":{USUAL_ARGUMENTS}}}{ws},"x":{value}}}"#),
            0 => format!(r#"{ws}{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"v":{value}}}}}{ws}"#),
            1 => format!(r#"{{ "params" : {value} , "method":"m","jsonrpc":"2.0","id":"x"}}"#),
            2 => format!(r#"{{"jsonrpc":"2.0","id":3,"result":{value}}}"#),
            3 => format!(r#"{{"jsonrpc":"2.0","id":3,"error":{{"code":1,"message":"m","data":{value}}}}}"#),
            4 => format!(r#"{{"jsonrpc":"2.0","method":"n","params":{value},"x":{value},"x":1}}"#),
            5 => format!(r#"{{"jsonrpc":"2.0","id":4,"method":"m","para\u006ds":{value}}}"#),
            6 => format!(r#"{{"jsonrpc":"2.0","id":4,"method":"m","params":{value},"params":{{}}}}"#),
            _ => value,
        })
    }

    /// Bytes a mutation puts in: structure, escapes, number parts, control
    /// and non-ASCII bytes (some making the text invalid UTF-8).
    const MUTANTS: &[u8] = &[
        b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'0', b'1', b'-', b'+', b'.', b'e', b'u',
        b'a', b't', b'n', b' ', b'\n', 0x00, 0x01, 0x1f, 0x7f, 0xC3, 0xA9, 0xFF,
    ];

    fn policies() -> impl Strategy<Value = Policy> {
        (
            select(&[0usize, 1, 2, 3, 4, 6, 8, 128, 511, 512, 600][..]),
            0usize..3,
        )
            .prop_map(|(depth, preset)| {
                let policy = match preset {
                    0 => Policy::mcp(),
                    1 => Policy::jsonrpc(),
                    _ => Policy::strict(),
                };
                policy.max_depth(depth)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn generated_envelopes_have_the_serde_outcome(body in envelope(), policy in policies()) {
            same_outcome(body.as_bytes(), &policy)?;
            same_verdict(&body, policy.depth_limit())?;
        }

        #[test]
        fn single_byte_mutations_have_the_serde_outcome(
            body in envelope(),
            at in any::<prop::sample::Index>(),
            byte in select(MUTANTS),
            how in 0usize..3,
            policy in policies(),
        ) {
            let mut bytes = body.into_bytes();
            let at = at.index(bytes.len() + 1);
            match how {
                0 if at < bytes.len() => bytes[at] = byte,
                1 => bytes.insert(at, byte),
                _ if at < bytes.len() => { bytes.remove(at); }
                _ => bytes.push(byte),
            }
            same_outcome(&bytes, &policy)?;
            if let Ok(text) = core::str::from_utf8(&bytes) {
                same_verdict(text, policy.depth_limit())?;
            }
        }

        #[test]
        fn bracket_soup_has_the_serde_outcome(
            soup in prop::collection::vec(select(&[b'[', b'{', b']', b'}', b'"', b'\\', b':', b',', b'1', b' ', b'a'][..]), 0..200),
            depth in 0usize..10,
        ) {
            let mut body = b"{\"a\":".to_vec();
            body.extend_from_slice(&soup);
            let policy = Policy::mcp().max_depth(depth);
            same_outcome(&body, &policy)?;
            same_outcome(&soup, &policy)?;
            same_verdict(core::str::from_utf8(&body).unwrap(), depth)?;
        }
    }

    /// Deeply nested valid bodies at and around every limit: refused at the
    /// pre-scan's offset, accepted one level shallower.
    #[test]
    fn depth_limits_match_the_pre_scan() {
        for limit in [1usize, 2, 3, 63, 64, 65, 127, 128, 129, 300, 511] {
            for extra in 0..3 {
                let inner = limit + extra - 1;
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{}1{}}}"#,
                    "[".repeat(inner),
                    "]".repeat(inner)
                );
                let body = body.replacen("\"params\":1", "\"params\":{\"a\":1}", 1);
                let policy = Policy::mcp().max_depth(limit);
                same_outcome(body.as_bytes(), &policy).unwrap();
                same_verdict(&body, limit).unwrap();
            }
        }
    }

    /// The usual call's params are left to the call reader (so the
    /// properties above exercise it), and nothing around or inside them
    /// can make that reading accept a body the full pass refuses.
    #[test]
    fn params_left_to_the_call_reader_are_checked_there() {
        let usual = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"evidence_query","arguments":{USUAL_ARGUMENTS}}}}}"#
        );
        let policy = Policy::mcp();
        let read = |raw| checked::call(raw, policy.depth_limit());
        let (outcome, ready) = validate_reading_call(usual.as_bytes(), &policy, read);
        assert!(outcome.is_ok() && ready.is_some(), "{outcome:?}");
        let meta =
            |value: &str| usual.replacen(r#""name""#, &format!(r#""_meta":{value},"name""#), 1);
        let mut bodies = alloc::vec![
            usual.replacen('}', "} ", usual.len()),
            format!("{}\n\t ", usual),
            usual.trim_end_matches('}').to_string(),
            format!("{usual}}}"),
            format!("{} x}}", usual.strip_suffix('}').unwrap()),
            format!(r#"{},"id":2}}"#, usual.strip_suffix('}').unwrap()),
            usual.replacen(r#""params""#, r#""params":{},"params""#, 1),
            usual.replacen(r#""tools/call""#, r#""tools\/call""#, 1),
            usual.replacen(r#""tenant_id":1"#, r#""tenant_id":01"#, 1),
            usual.replacen(r#""namespace_id":20"#, r#""namespace_id":2.0"#, 1),
            usual.replacen(r#""value":-1710000000000"#, r#""value":-01"#, 1),
            usual.replacen(r#""value":-1710000000000"#, r#""value":1e3"#, 1),
            usual.replacen(r#""run_id":"r""#, "\"run_id\":\"r\u{1}\"", 1),
            usual.replacen(r#""run_id":"r""#, r#""run_id":"\x""#, 1),
            usual.replacen(
                r#""correlation_id":"c\u0041""#,
                r#""correlation_id":nul"#,
                1
            ),
            usual.replacen(
                r#""check_id":"time_now""#,
                r#""check_id":"time_now","params":[1,]"#,
                1
            ),
        ];
        for value in [
            "[1,]",
            "[1 2]",
            "{\"a\"}",
            "{\"a\":1,}",
            "01",
            "-",
            "1.",
            "tru",
            "\"\\q\"",
            "[[[[[[[[1]]]]]]]]",
            "{\"a\":{\"b\":{\"c\":{}}}}",
        ] {
            bodies.push(meta(value));
        }
        for body in &bodies {
            for policy in [
                Policy::mcp(),
                Policy::strict(),
                Policy::mcp().max_depth(6),
                Policy::mcp().max_depth(4),
            ] {
                same_outcome(body.as_bytes(), &policy).unwrap();
            }
        }
    }

    /// The usual messages take this pass (so the properties above do not
    /// compare the `serde_json` path with itself).
    #[test]
    fn usual_envelopes_are_settled_here() {
        for body in [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{}}}"#,
            r#"{"jsonrpc":"2.0","id":"a","result":{"x":[1,2.5e3,-0,"\u00e9\"",true,null]}}"#,
            "{\"jsonrpc\" : \"2.0\",\n \"method\":\"n\", \"params\":{\"s\":\"\\uD800\"} }\n",
        ] {
            let mut count = 0;
            members(body, 128, |_, _| {
                count += 1;
                Ok(())
            })
            .expect("settled");
            assert!(count >= 3, "{body}");
        }
    }

    /// `raw_value` builds the `RawValue` from the checked text itself, not
    /// through the parsing fallback (a `serde_json` change would break it).
    #[test]
    fn checked_spans_become_raw_values_without_a_parse() {
        use serde::Deserialize as _;
        let text = r#"{"a":[1,{"b":null}]}"#;
        let raw = <&serde_json::value::RawValue>::deserialize(super::Checked {
            token: super::RAW_VALUE_TOKEN,
            text,
        })
        .expect("the raw-value protocol");
        assert_eq!(raw.get().as_ptr(), text.as_ptr());
        assert_eq!(raw_value(text).unwrap().get(), text);
        let _ = RawEnvelope::default();
    }

    /// Should `serde_json` rename its raw-value token, the checked text is
    /// refused by the raw-value protocol and `raw_value` still answers the
    /// same span, through the parsing fallback (and that parse still
    /// refuses text that is not JSON).
    #[test]
    fn a_renamed_token_takes_the_parsing_fallback() {
        use serde::Deserialize as _;
        let renamed = "$serde_json::private::RawValueRenamed";
        for text in [r#"{"a":[1,{"b":null}]}"#, "\"\\uD800\"", "-0", "[]"] {
            assert!(
                <&serde_json::value::RawValue>::deserialize(super::Checked {
                    token: renamed,
                    text,
                })
                .is_err(),
                "serde_json no longer checks the token: {text}"
            );
            let raw = super::raw_value_named(renamed, text).expect("the fallback parse");
            assert_eq!(raw.get().as_ptr(), text.as_ptr());
            assert_eq!(raw.get().len(), text.len());
        }
        assert!(
            matches!(
                super::raw_value_named(renamed, "[1,]"),
                Err(Scan::Unsettled)
            ),
            "the fallback parses"
        );
    }

    /// Every JSON file of the shared conformance vectors, as a body and as
    /// params (the vendored `tests/vectors/` of this crate).
    #[cfg(feature = "std")]
    #[test]
    fn shared_vectors_have_the_serde_outcome() {
        extern crate std;
        let root = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors"));
        let mut stack = std::vec![root.clone()];
        let mut files = 0;
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|ext| ext == "json") {
                    let bytes = std::fs::read(&path).unwrap();
                    files += 1;
                    let mut bodies = std::vec![bytes.clone()];
                    let mut wrapped =
                        br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"v":"#.to_vec();
                    wrapped.extend_from_slice(&bytes);
                    wrapped.extend_from_slice(b"}}");
                    bodies.push(wrapped);
                    // JSON-RPC examples: each request of the transcript too.
                    if let Ok(serde_json::Value::Object(doc)) = serde_json::from_slice(&bytes) {
                        for case in doc
                            .get("examples")
                            .and_then(|c| c.as_array())
                            .into_iter()
                            .flatten()
                        {
                            for key in ["request", "expected_response"] {
                                if let Some(text) = case.get(key).and_then(|r| r.as_str()) {
                                    bodies.push(text.as_bytes().to_vec());
                                }
                            }
                        }
                    }
                    for body in bodies {
                        for policy in [Policy::mcp(), Policy::jsonrpc(), Policy::mcp().max_depth(3)]
                        {
                            same_outcome(&body, &policy).unwrap();
                        }
                    }
                }
            }
        }
        assert!(files > 5, "no vectors under {}", root.display());
    }

    /// The checked-in corpus of the `envelope_differential` fuzz target
    /// (`fuzz/corpus/envelope_differential`), so `cargo test` guards what
    /// the fuzzer found: each input as a body and as the params of a
    /// `tools/call` (the target's first template), and the params of every
    /// request read by hand only as `serde_json` reads them.
    #[cfg(feature = "std")]
    #[test]
    fn differential_fuzz_corpus_has_the_serde_outcome() {
        extern crate std;
        use crate::server::arguments::{checked, read_call_serde};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus/envelope_differential");
        let mut inputs = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            inputs += 1;
            let mut wrapped =
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"#.to_vec();
            wrapped.extend_from_slice(data.get(1..).unwrap_or_default());
            wrapped.push(b'}');
            for body in [&data, &wrapped] {
                for policy in [
                    Policy::mcp(),
                    Policy::jsonrpc(),
                    Policy::strict(),
                    Policy::mcp().max_depth(3),
                ] {
                    same_outcome(body, &policy).unwrap();
                    if let Ok(Incoming::Single(Message::Request(request))) = validate(body, &policy)
                    {
                        let max_depth = policy.depth_limit();
                        let read = |raw| checked::call(raw, max_depth);
                        if let Some(hand) = request.params.and_then(read) {
                            let params = request.params.unwrap().get();
                            assert_eq!(hand.has_meta, names_meta(request.params), "{params}");
                            assert_eq!(Some(hand.arguments), read_call_serde(params), "{params}");
                        }
                    }
                }
            }
        }
        assert!(inputs >= 30, "the corpus is at {}", dir.display());
    }
}
