//! Text a peer wrote, shortened for a message, a log record or a report.
//!
//! Two ways to shorten, one place for each: [`excerpt`] bounds the bytes a
//! text takes escaped inside a JSON string and names the original length
//! (for records with a size bound), [`truncate_chars`] keeps the first
//! characters and marks the cut (for messages a person reads); and one way
//! to show it on a terminal, [`printable`], which escapes what would act on
//! the terminal instead of showing (a peer's stderr, an error message).
//!
//! Limits: none of their own; the caller says how much to keep.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::String;
use core::fmt::Write as _;

/// How many bytes `c` takes inside a JSON string as serde_json writes it:
/// `"` and `\` and the short escapes take 2, other control characters 6
/// (`\u00XX`), everything else its UTF-8 length.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        c if u32::from(c) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `text` as a bounded excerpt: unchanged when it takes at most `max`
/// bytes as the body of a JSON string (after escaping); otherwise its
/// longest prefix, cut at a character boundary, that fits in `max` together
/// with the marker `… (N bytes)`, where N is the original length in bytes.
/// The result never takes more than `max` bytes escaped (for `max` of at
/// least 32; a smaller `max` yields the marker alone).
pub fn excerpt(text: &str, max: usize) -> String {
    excerpt_cow(text, max).into_owned()
}

/// [`excerpt`], borrowing `text` when it is kept whole (no allocation for
/// the usual short text).
pub fn excerpt_cow(text: &str, max: usize) -> Cow<'_, str> {
    // No byte takes more than 6 escaped: short text fits without a count.
    if text.len().saturating_mul(6) <= max {
        return Cow::Borrowed(text);
    }
    let mut escaped = 0usize;
    for c in text.chars() {
        escaped = escaped.saturating_add(escaped_len(c));
    }
    if escaped <= max {
        return Cow::Borrowed(text);
    }
    let marker = format!("… ({} bytes)", text.len());
    let budget = max.saturating_sub(marker.len());
    let mut used = 0usize;
    let mut end = 0usize;
    for (index, c) in text.char_indices() {
        let cost = escaped_len(c);
        if used.saturating_add(cost) > budget {
            break;
        }
        used = used.saturating_add(cost);
        end = index.saturating_add(c.len_utf8());
    }
    let mut cut = String::with_capacity(end.saturating_add(marker.len()));
    cut.push_str(text.get(..end).unwrap_or_default());
    cut.push_str(&marker);
    Cow::Owned(cut)
}

/// At most `max` characters of `text`, ended with `…` when anything was
/// cut: a bounded piece of what a peer wrote, for an error message.
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => String::from(text),
        Some((cut, _)) => format!("{}…", text.get(..cut).unwrap_or_default()),
    }
}

/// Whether `c` acts on a terminal instead of showing as itself: the C0
/// controls except the tab (ESC starts ANSI sequences, CR returns to the
/// start of the line, BS moves back), DEL, the C1 controls U+0080 to
/// U+009F (U+009B is a one-character CSI on some terminals), and the
/// Unicode bidirectional overrides and isolates U+202A to U+202E and
/// U+2066 to U+2069 (they reorder what follows them on screen).
pub fn is_terminal_control(c: char) -> bool {
    (c.is_control() && c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` as it may be shown on a terminal: every [`is_terminal_control`]
/// character written as an escape, `\n` and `\r` as those two characters,
/// every other one as `\u{HEX}` (ESC is `\u{1b}`). Text without one is
/// returned as it is. What a peer wrote (a provider's stderr, an error
/// message, an HTTP body) goes through this before it is printed, so it
/// shows as text and cannot forge or erase what surrounds it.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_terminal_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().saturating_add(16));
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if is_terminal_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log record's bound on a detail (its `MAX_DETAIL_BYTES`).
    const MAX_DETAIL_BYTES: usize = 1024;

    /// The no-count shortcut of `excerpt` keeps exactly what counting keeps.
    #[test]
    fn short_text_is_kept_whole_like_counting_keeps_it() {
        for text in ["", "tools/call", "\u{1}\u{1}\u{1}", "\"\"\"", "ééé", "a\nb"] {
            for max in [0, 6, 17, 18, 32, 256] {
                let counted: usize = text.chars().map(escaped_len).sum();
                if text.len() * 6 <= max {
                    assert!(counted <= max, "{text:?} {max}");
                }
                assert_eq!(excerpt(text, max) == text, counted <= max, "{text:?} {max}");
            }
        }
    }

    #[test]
    fn excerpts_count_escapes_and_name_the_original_length() {
        assert_eq!(excerpt("short", 16), "short");
        // Exactly at the limit once escaped: kept whole.
        assert_eq!(excerpt("\"abc\"", 10), "\"abc\"");
        // 100 control characters take 600 bytes escaped, not 100.
        let controls = "\u{1}".repeat(100);
        let cut = excerpt(&controls, 256);
        assert!(cut.ends_with("… (100 bytes)"), "{cut:?}");
        let escaped = serde_json::to_string(&cut).expect("JSON");
        assert!(escaped.len() <= 256 + 2, "{}", escaped.len());
        // A huge peer detail becomes a 1 KiB excerpt.
        let huge = "x".repeat(10 << 20);
        let cut = excerpt(&huge, MAX_DETAIL_BYTES);
        assert!(cut.len() <= MAX_DETAIL_BYTES);
        assert!(cut.ends_with("… (10485760 bytes)"), "{}", &cut[1000..]);
        assert!(cut.starts_with("xxxx"));
        // Never more than max bytes, whatever the mix.
        for text in [
            "é\"\n\u{0}😀".repeat(500),
            "\\".repeat(3000),
            "a".repeat(257),
        ] {
            for max in [32, 64, 255, 256, 1024] {
                let cut = excerpt(&text, max);
                let body = serde_json::to_string(&cut).expect("JSON");
                assert!(body.len() - 2 <= max, "{max}: {} bytes", body.len() - 2);
            }
        }
    }

    #[test]
    fn truncated_text_keeps_whole_characters_and_marks_the_cut() {
        assert_eq!(truncate_chars("héllo", 10), "héllo");
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("", 0), "");
        assert_eq!(truncate_chars("ab", 0), "…");
    }
}
