//! Reading JSON bytes without parsing them: the first significant byte,
//! how deep a body nests (checked before any parse, so a body of 10^6 `[`
//! costs one scan), and where a message's `id` is (for a message that was
//! skipped unread).

use super::*;

pub(super) fn first_significant_byte(body: &[u8]) -> Option<u8> {
    body.iter()
        .copied()
        .find(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
}

/// The offset of the first `[` or `{` (outside strings) that opens nesting
/// level `max_depth + 1`, if any. Linear, no recursion, no allocation.
///
/// Two shortcuts come first, both exact: nesting `max_depth + 1` deep needs
/// at least `max_depth + 1` opening brackets, so a body with no more `[` and
/// `{` bytes than `max_depth` (counted everywhere, strings included) cannot
/// be too deep. The count is one branch-free pass that the compiler
/// vectorizes (well under one instruction per byte), and it settles most
/// JSON-RPC messages, whose nesting is shallow and whose bracket count is
/// small. Only bodies with more brackets than the limit get the exact scan
/// ([`deepest_open`]), which skips string contents eight bytes at a time.
/// `tests/benches/instructions.rs` measures both paths; the
/// `envelope_depth` differential test keeps them equal to a byte-by-byte
/// reference.
pub(crate) fn nesting_exceeds(body: &[u8], max_depth: usize) -> Option<usize> {
    if body.len() <= max_depth || !more_brackets_than(body, max_depth) {
        return None;
    }
    deepest_open(body, max_depth)
}

/// Whether `body` holds more than `limit` `[` and `{` bytes, inside strings
/// or not. Stops counting once past the limit.
pub(super) fn more_brackets_than(body: &[u8], limit: usize) -> bool {
    let mut total = 0usize;
    // Byte-wide counters over chunks of at most 255 bytes vectorize well;
    // a `usize` per byte would not. `[` is 0x5B and `{` is 0x7B: they
    // differ in bit 0x20 only, and no other byte maps onto 0x7B with it set.
    for chunk in body.chunks(255) {
        let count = chunk.iter().fold(0u8, |count, &byte| {
            count.wrapping_add(u8::from(byte | 0x20 == b'{'))
        });
        total = total.saturating_add(usize::from(count));
        if total > limit {
            return true;
        }
    }
    false
}

/// The exact scan behind [`nesting_exceeds`]: tracks depth outside strings.
pub(super) fn deepest_open(body: &[u8], max_depth: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut offset = 0usize;
    while let Some(&byte) = body.get(offset) {
        match byte {
            b'"' => offset = string_end(body, offset.saturating_add(1))?,
            b'[' | b'{' => {
                depth = depth.saturating_add(1);
                if depth > max_depth {
                    return Some(offset);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        offset = offset.saturating_add(1);
    }
    None
}

/// The offset of the quote closing the string whose contents start at
/// `from`, hopping over escapes; `None` when the string never closes.
///
/// Eight bytes at a time (SWAR): most strings in JSON-RPC messages are
/// short keys and values, for which a call into a vectorized search costs
/// more than it saves.
pub(super) fn string_end(body: &[u8], mut from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const QUOTES: u64 = ONES * b'"' as u64;
    const BACKSLASHES: u64 = ONES * b'\\' as u64;
    loop {
        while let Some(chunk) = body.get(from..from.saturating_add(8)) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let word = u64::from_le_bytes(word);
            // A byte of `x` is zero iff its high bit is set in
            // `(x - ONES) & !x & HIGHS`; bits above the first zero byte may
            // be set wrongly (borrows), the lowest one never is.
            let quote = word ^ QUOTES;
            let backslash = word ^ BACKSLASHES;
            let found = (quote.wrapping_sub(ONES) & !quote & HIGHS)
                | (backslash.wrapping_sub(ONES) & !backslash & HIGHS);
            if found != 0 {
                let skip = (found.trailing_zeros() / 8) as usize;
                from = from.saturating_add(skip);
                break;
            }
            from = from.saturating_add(8);
        }
        match body.get(from)? {
            b'"' => return Some(from),
            b'\\' => from = from.saturating_add(2),
            _ => from = from.saturating_add(1),
        }
    }
}

/// The id of a message that could not be validated (too deep, not JSON
/// to the end, not a valid envelope, or only its first bytes kept, see
/// [`crate::frame::Decoder::keep_skipped_prefix`]): the value of the first
/// member named `id` at the top level of the object that `bytes` starts
/// with, when it reads as an id ([`Id`]: a string, an `i64`, `null` or
/// `-0`). `None` when `bytes` is not the start of an object, or ends (or
/// breaks) before such a member.
///
/// A caller uses it to tell which of its requests a broken answer was
/// meant for, and fail that one at once rather than at its timeout. One
/// linear pass, no recursion (nested values are skipped by counting
/// brackets outside strings), no allocation unless a member name or the
/// id holds escapes. It trusts nothing after the id: the rest of the
/// message may be cut off or broken.
pub fn find_id(bytes: &[u8]) -> Option<Id<'static>> {
    let mut at = skip_json_whitespace(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_json_whitespace(bytes, at.saturating_add(1));
    loop {
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        let name_end = string_end(bytes, at.saturating_add(1))?;
        let name = bytes.get(at..=name_end)?;
        at = skip_json_whitespace(bytes, name_end.saturating_add(1));
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        at = skip_json_whitespace(bytes, at.saturating_add(1));
        let value_end = json_value_end(bytes, at)?;
        if is_id_name(name) {
            let text = core::str::from_utf8(bytes.get(at..value_end)?).ok()?;
            let raw: &RawValue = serde_json::from_str(text).ok()?;
            return match read_id(raw) {
                IdRead::Readable(id) => Some(id.into_owned()),
                IdRead::Unreadable(_) => None,
            };
        }
        at = skip_json_whitespace(bytes, value_end);
        match bytes.get(at) {
            Some(b',') => at = skip_json_whitespace(bytes, at.saturating_add(1)),
            _ => return None,
        }
    }
}

/// Whether the quoted member name `name` (quotes included) is `"id"`,
/// however it is escaped.
pub(super) fn is_id_name(name: &[u8]) -> bool {
    if name == b"\"id\"" {
        return true;
    }
    name.contains(&b'\\')
        && core::str::from_utf8(name)
            .ok()
            .and_then(|text| serde_json::from_str::<JsonStr<'_>>(text).ok())
            .is_some_and(|JsonStr(decoded)| decoded == "id")
}

pub(super) fn skip_json_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(at) {
        at = at.saturating_add(1);
    }
    at
}

/// The offset just past the JSON value starting at `at` (not validated:
/// strings are skipped to their closing quote, containers to their
/// matching bracket, scalars to the next delimiter); `None` when `bytes`
/// ends first.
pub(super) fn json_value_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    let mut depth = 0usize;
    loop {
        match *bytes.get(at)? {
            b'"' => at = string_end(bytes, at.saturating_add(1))?,
            b'[' | b'{' => depth = depth.saturating_add(1),
            b']' | b'}' => {
                if depth == 0 {
                    // A scalar ended by its container's close.
                    return Some(at);
                }
                depth -= 1;
            }
            b',' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return Some(at),
            _ => {}
        }
        at = at.saturating_add(1);
        if depth == 0 && matches!(bytes.get(at.saturating_sub(1)), Some(b'"' | b']' | b'}')) {
            return Some(at);
        }
    }
}
