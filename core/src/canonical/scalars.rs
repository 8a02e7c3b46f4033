//! JSON scalars in canonical form: strings scanned and written with the
//! RFC 8785 escapes, numbers scanned and written as ECMAScript writes them
//! (with the profile's rule for integers beyond 2^53).

use super::*;

/// Validates the string whose opening quote is at `quote`; returns the
/// offset of its closing quote and whether it contains escapes.
pub(super) fn scan_string(input: &[u8], quote: usize) -> Result<(usize, bool), CanonicalizeError> {
    let mut pos = quote + 1;
    let mut escaped = false;
    loop {
        // Plain bytes first: everything but '"', '\\' and controls.
        pos += plain_run(input.get(pos..).unwrap_or_default());
        match input.get(pos) {
            Some(b'"') => return Ok((pos, escaped)),
            Some(b'\\') => {
                escaped = true;
                pos = decode_escape(input, pos)?.1;
            }
            Some(_) => {
                return Err(syntax(
                    "raw control character in string; escape it (\\n, \\t, \\u001f, ...)",
                    pos,
                ));
            }
            None => return Err(syntax("unterminated string; close it with '\"'", quote)),
        }
    }
}

/// Length of the run of plain string bytes (not '"', '\\' or a control
/// character) at the start of `bytes`. Eight bytes at a time: a word holds a
/// special byte iff one of its bytes is below 0x20 or equal to 0x22 or 0x5C,
/// which the classic "has a byte less than / equal to" bit tricks detect
/// exactly; the byte loop then finds which.
pub(super) fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let is_special = |byte: &u8| matches!(byte, b'"' | b'\\' | 0x00..=0x1f);
    let mut run = 0;
    for chunk in bytes.chunks_exact(8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let special = (word.wrapping_sub(ONES * 0x20) & !word)
            | (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash);
        if special & HIGHS != 0 {
            break;
        }
        run += 8;
    }
    let rest = bytes.get(run..).unwrap_or_default();
    run + rest.iter().position(is_special).unwrap_or(rest.len())
}

/// Four hex digits at `pos`.
pub(super) fn hex4(input: &[u8], pos: usize) -> Result<u32, CanonicalizeError> {
    let digits = input
        .get(pos..pos + 4)
        .ok_or_else(|| syntax("\\u must be followed by four hex digits", pos))?;
    let mut value = 0u32;
    for digit in digits {
        let nibble = char::from(*digit)
            .to_digit(16)
            .ok_or_else(|| syntax("\\u must be followed by four hex digits", pos))?;
        value = (value << 4) | nibble;
    }
    Ok(value)
}

/// Decodes the escape sequence whose backslash is at `pos`; returns the
/// character and the offset after the sequence (a surrogate pair counts as
/// one sequence).
pub(super) fn decode_escape(input: &[u8], pos: usize) -> Result<(char, usize), CanonicalizeError> {
    let simple = |c: char| Ok((c, pos + 2));
    let unit = match input.get(pos + 1) {
        Some(b'"') => return simple('"'),
        Some(b'\\') => return simple('\\'),
        Some(b'/') => return simple('/'),
        Some(b'b') => return simple('\u{8}'),
        Some(b'f') => return simple('\u{c}'),
        Some(b'n') => return simple('\n'),
        Some(b'r') => return simple('\r'),
        Some(b't') => return simple('\t'),
        Some(b'u') => hex4(input, pos + 2)?,
        _ => {
            return Err(syntax(
                "invalid escape; use \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX",
                pos,
            ));
        }
    };
    let lone = || error(CanonicalizeErrorKind::LoneSurrogate, pos);
    match unit {
        0xD800..=0xDBFF => {
            if input.get(pos + 6..pos + 8) != Some(b"\\u") {
                return Err(lone());
            }
            let low = hex4(input, pos + 8)?;
            if !(0xDC00..=0xDFFF).contains(&low) {
                return Err(lone());
            }
            let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
            char::from_u32(code).map(|c| (c, pos + 12)).ok_or_else(lone)
        }
        0xDC00..=0xDFFF => Err(lone()),
        _ => char::from_u32(unit).map(|c| (c, pos + 6)).ok_or_else(lone),
    }
}

/// Writes the string text `input[start..end]` (validated, escapes
/// included) into `out`: unescaped as UTF-8 if `escape` is false, in RFC
/// 8785 escaped form (without quotes) if it is true.
pub(super) fn write_string_content<S: Sink>(
    input: &[u8],
    start: usize,
    end: usize,
    escape: bool,
    out: &mut S,
) -> Result<(), CanonicalizeError> {
    let mut pos = start;
    while pos < end {
        let rest = input.get(pos..end).unwrap_or_default();
        let Some(backslash) = memchr::memchr(b'\\', rest) else {
            out.write_bytes(rest);
            break;
        };
        out.write_bytes(rest.get(..backslash).unwrap_or_default());
        let (c, next) = decode_escape(input, pos + backslash)?;
        if escape {
            write_escaped_char(c, out);
        } else {
            out.write_bytes(c.encode_utf8(&mut [0; 4]).as_bytes());
        }
        pos = next;
    }
    Ok(())
}

/// Writes one character as RFC 8785 string content.
pub(super) fn write_escaped_char<S: Sink>(c: char, out: &mut S) {
    match c {
        '"' => out.write_bytes(b"\\\""),
        '\\' => out.write_bytes(b"\\\\"),
        '\u{8}' => out.write_bytes(b"\\b"),
        '\t' => out.write_bytes(b"\\t"),
        '\n' => out.write_bytes(b"\\n"),
        '\u{c}' => out.write_bytes(b"\\f"),
        '\r' => out.write_bytes(b"\\r"),
        '\u{0}'..='\u{1f}' => {
            // `c` is below 0x20, so the cast is exact.
            let code = c as u8;
            let escape = [
                b'\\',
                b'u',
                b'0',
                b'0',
                hex_digit(code >> 4) as u8,
                hex_digit(code & 0x0f) as u8,
            ];
            out.write_bytes(&escape);
        }
        _ => out.write_bytes(c.encode_utf8(&mut [0; 4]).as_bytes()),
    }
}

/// Validates the number at `start`; returns its node and the offset after it.
pub(super) fn scan_number(
    input: &[u8],
    start: usize,
    profile: Profile,
) -> Result<(Node, usize), CanonicalizeError> {
    let mut pos = start;
    let negative = input.get(pos) == Some(&b'-');
    if negative {
        pos += 1;
    }
    let int_start = pos;
    match input.get(pos) {
        Some(b'0') => {
            pos += 1;
            if let Some(b'0'..=b'9') = input.get(pos) {
                return Err(syntax("leading zeros are not allowed in numbers", start));
            }
        }
        Some(b'1'..=b'9') => pos = skip_digits(input, pos),
        _ => return Err(syntax("expected a digit", pos)),
    }
    let int_end = pos;
    let mut integer = true;
    if input.get(pos) == Some(&b'.') {
        integer = false;
        let digits = skip_digits(input, pos + 1);
        if digits == pos + 1 {
            return Err(syntax("expected a digit after the decimal point", digits));
        }
        pos = digits;
    }
    if let Some(b'e' | b'E') = input.get(pos) {
        integer = false;
        pos += 1;
        if let Some(b'+' | b'-') = input.get(pos) {
            pos += 1;
        }
        let digits = skip_digits(input, pos);
        if digits == pos {
            return Err(syntax("expected a digit in the exponent", digits));
        }
        pos = digits;
    }
    let int_digits = input.get(int_start..int_end).unwrap_or_default();
    let negative_zero = negative && int_digits == b"0";
    if integer && profile == Profile::Rfc8785 && !is_safe_integer(int_digits) {
        let literal = input.get(start..pos).unwrap_or_default();
        return Err(error(
            CanonicalizeErrorKind::UnsafeInteger {
                literal: shorten_literal(literal),
                pointer: String::new(),
            },
            start,
        ));
    }
    if integer && !negative_zero {
        let verbatim = match profile {
            // Below 10^15 an integer is an exact double that ECMAScript
            // prints digit for digit.
            Profile::Rfc8785 => int_digits.len() <= 15,
            // serde_json keeps integers that fit u64 (or i64 if negative)
            // and serde_jcs 0.1.0 prints them as they are.
            Profile::DecisionGate => fits_64_bits(int_digits, negative),
        };
        if verbatim {
            return Ok((Node::Verbatim { start, end: pos }, pos));
        }
    }
    let value = input
        .get(start..pos)
        .and_then(|text| core::str::from_utf8(text).ok())
        .and_then(|text| text.parse::<f64>().ok())
        .ok_or_else(|| syntax("malformed number", start))?;
    if !value.is_finite() {
        return Err(error(CanonicalizeErrorKind::NumberOutOfRange, start));
    }
    Ok((Node::Number(value), pos))
}

/// The largest integer of the I-JSON safe range, 2^53 − 1, in decimal.
pub(super) const MAX_SAFE_INTEGER: &[u8] = b"9007199254740991";

/// Whether the magnitude written by `digits` (no sign, no leading zeros)
/// is at most 2^53 − 1: fewer digits, or as many and not greater.
pub(super) fn is_safe_integer(digits: &[u8]) -> bool {
    match digits.len().cmp(&MAX_SAFE_INTEGER.len()) {
        Ordering::Less => true,
        Ordering::Equal => digits <= MAX_SAFE_INTEGER,
        Ordering::Greater => false,
    }
}

/// A number literal for an error message: as written up to 40 characters,
/// otherwise its first 24 characters and its length.
pub(super) fn shorten_literal(literal: &[u8]) -> String {
    let text = String::from_utf8_lossy(literal);
    if text.len() <= 40 {
        return text.into_owned();
    }
    let head: String = text.chars().take(24).collect();
    alloc::format!("{head}… ({} characters)", text.len())
}

/// Whether the decimal digits fit u64 (or, if `negative`, i64).
pub(super) fn fits_64_bits(digits: &[u8], negative: bool) -> bool {
    let mut value: u64 = 0;
    for digit in digits {
        let Some(next) = value
            .checked_mul(10)
            .and_then(|value| value.checked_add(u64::from(digit.wrapping_sub(b'0'))))
        else {
            return false;
        };
        value = next;
    }
    !negative || value <= 1u64 << 63
}

// ---------------------------------------------------------------------------
// Pass 2: emission.
