//! The depth limit of `envelope::validate` against a byte-by-byte reference.
//!
//! `validate` checks `Policy::max_depth` before parsing, with a bracket
//! count shortcut and an exact scan that skips strings eight bytes at a
//! time (core/src/envelope.rs, `nesting_exceeds`). This test keeps both
//! honest: on arbitrary bracket/quote/backslash soup and on generated JSON
//! with brackets, quotes and escapes inside strings, at every limit, the
//! body is refused as too deep exactly when the plain one-byte-at-a-time
//! scan below says so, and the refusal names the same byte offset.

use evidence_wire::envelope::{Policy, validate};
use evidence_wire::error::CanonicalError;
use proptest::prelude::*;
use proptest::sample::select;

/// The reference: the offset of the first `[`/`{` outside strings opening
/// level `max_depth + 1`. One byte at a time, no shortcuts.
fn reference(body: &[u8], max_depth: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (offset, &byte) in body.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Some(offset);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The offset `validate` reports for a too-deep body, `None` for any other
/// outcome.
fn refused_at(body: &[u8], max_depth: usize) -> Option<usize> {
    let rejection = validate(body, &Policy::mcp().max_depth(max_depth)).err()?;
    let detail = &rejection.detail;
    let rest = detail.strip_prefix(&format!(
        "JSON nested deeper than {max_depth} levels (byte "
    ))?;
    assert_eq!(rejection.error, CanonicalError::InvalidEnvelope, "{detail}");
    let offset = rest.split(')').next()?;
    Some(offset.parse().expect("the detail names a byte offset"))
}

fn check(body: &[u8], max_depth: usize) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        refused_at(body, max_depth),
        reference(body, max_depth),
        "max_depth {}, body {:?}",
        max_depth,
        String::from_utf8_lossy(body)
    );
    Ok(())
}

/// Bytes that matter to the scan, plus filler, so that strings, escapes and
/// eight-byte chunk boundaries fall everywhere.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        select(
            &[
                b'[', b'{', b']', b'}', b'"', b'\\', b'a', b' ', b'1', b':', b',', 0xC3, 0xA9,
            ][..],
        ),
        0..400,
    )
}

/// A JSON value whose strings carry brackets, quotes and backslashes.
fn json() -> impl Strategy<Value = String> {
    let text = prop::collection::vec(
        select(
            &[
                "a",
                "[",
                "{",
                "]",
                "}",
                "\\\"",
                "\\\\",
                "\\n",
                "\\u005b",
                "é",
                "abcdefghij",
            ][..],
        ),
        0..12,
    )
    .prop_map(|parts| format!("\"{}\"", parts.concat()));
    let leaf = prop_oneof![text, Just("1".to_string()), Just("null".to_string())];
    leaf.prop_recursive(40, 400, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(","))),
            prop::collection::vec(inner, 0..4).prop_map(|items| format!(
                "{{{}}}",
                items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| format!("\"k{index}\\\"[\":{item}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn soup_is_refused_exactly_when_the_reference_says(body in soup(), max_depth in 0usize..12) {
        check(&body, max_depth)?;
    }

    #[test]
    fn generated_json_is_refused_exactly_when_the_reference_says(
        value in json(),
        max_depth in 0usize..48,
    ) {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"v":{value}}}}}"#);
        check(body.as_bytes(), max_depth)?;
    }
}

#[test]
fn bracket_count_shortcut_is_exact_at_the_boundary() {
    // `limit` levels hold `limit` opening brackets: accepted; one more
    // level is refused at the last opening bracket, whatever the padding
    // around it (strings full of closing brackets do not lower the depth).
    for limit in [1usize, 2, 7, 8, 9, 127, 128, 129] {
        for pad in ["", "\"]]]]]]]]\",", "\"\\\\\\\"}}\","] {
            let mut body = String::new();
            for _ in 0..limit {
                body.push('[');
                body.push_str(pad);
            }
            body.push('1');
            body.push_str(&"]".repeat(limit));
            assert_eq!(refused_at(body.as_bytes(), limit), None, "{body}");
            let deeper = format!("[{body}]");
            assert_eq!(
                refused_at(deeper.as_bytes(), limit),
                reference(deeper.as_bytes(), limit)
            );
            assert!(reference(deeper.as_bytes(), limit).is_some(), "{deeper}");
        }
    }
}
