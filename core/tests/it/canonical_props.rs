//! Differential property tests of the canonicalizer.
//!
//! RFC 8785 profile against `serde_json_canonicalizer` 0.4.1 (a correct RFC
//! 8785 implementation), Decision Gate profile against `serde_jcs` 0.1.0 (the
//! library Decision Gate hashes with), both applied to the `serde_json::Value`
//! of the same text. The generated JSON text has unicode keys (supplementary
//! planes, the U+E000..U+FFFF range where UTF-16 and UTF-8 order differ,
//! controls, quotes), random escaping of every character (`\uXXXX`, surrogate
//! pairs, short escapes), random whitespace, deep nesting and extreme numbers
//! (any finite double bit pattern, integers beyond 2^53 and 2^64, long
//! mantissas, every exponent spelling).
//!
//! Where the RFC 8785 profile rightly departs from the oracle: an integer
//! literal past ±(2^53 − 1) is refused (`UnsafeInteger`, I-JSON), so the
//! differential checks that we refuse exactly the texts that hold one,
//! found by an independent scanner ([`unsafe_integer_in`]).

use evidence_wire::canonical::{
    self, CanonicalizeError, CanonicalizeErrorKind, Options, Profile, hex_lower, to_vec,
    to_vec_with,
};
use proptest::prelude::*;
use serde_json::Value;

/// A JSON document before it is spelled as text.
#[derive(Clone, Debug)]
enum Json {
    Null,
    Bool(bool),
    /// A number, already spelled (any valid JSON number text).
    Number(String),
    String(String),
    Array(Vec<Json>),
    /// Members with distinct names.
    Object(Vec<(String, Json)>),
}

/// A tiny deterministic generator that decides how to spell things.
struct Spelling(u64);

impl Spelling {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, in_eight: u64) -> bool {
        self.next() % 8 < in_eight
    }

    fn whitespace(&mut self, out: &mut String) {
        while self.chance(2) {
            out.push([' ', '\t', '\n', '\r'][(self.next() % 4) as usize]);
        }
    }

    fn string(&mut self, text: &str, out: &mut String) {
        out.push('"');
        for c in text.chars() {
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '\n' => Some("\\n"),
                '\t' => Some("\\t"),
                '\r' => Some("\\r"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                '/' if self.chance(4) => Some("\\/"),
                _ => None,
            };
            let must_escape = matches!(c, '"' | '\\' | '\u{0}'..='\u{1f}');
            if let Some(short) = short.filter(|_| self.chance(6)) {
                out.push_str(short);
            } else if must_escape || self.chance(2) {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    if self.chance(4) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    } else {
                        out.push_str(&format!("\\u{unit:04X}"));
                    }
                }
            } else {
                out.push(c);
            }
        }
        out.push('"');
    }

    fn write(&mut self, json: &Json, out: &mut String) {
        self.whitespace(out);
        match json {
            Json::Null => out.push_str("null"),
            Json::Bool(true) => out.push_str("true"),
            Json::Bool(false) => out.push_str("false"),
            Json::Number(text) => out.push_str(text),
            Json::String(text) => self.string(text, out),
            Json::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    self.write(item, out);
                }
                self.whitespace(out);
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (index, (name, value)) in members.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    self.whitespace(out);
                    self.string(name, out);
                    self.whitespace(out);
                    out.push(':');
                    self.write(value, out);
                }
                self.whitespace(out);
                out.push('}');
            }
        }
        self.whitespace(out);
    }
}

fn spell(json: &Json, seed: u64) -> String {
    let mut out = String::new();
    Spelling(seed | 1).write(json, &mut out);
    out
}

fn tricky_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::char::range('a', 'e'),
        2 => proptest::char::range(' ', '~'),
        1 => proptest::char::range('\u{0}', '\u{1f}'),
        1 => proptest::sample::select(vec![
            '\u{7f}', '\u{80}', '\u{9f}', '\u{e9}', '\u{20ac}', '\u{2028}', '\u{d7ff}',
            '\u{e000}', '\u{fb33}', '\u{fffd}', '\u{ffff}', '\u{10000}', '\u{1f600}',
            '\u{1f602}', '\u{10ffff}', '"', '\\', '/',
        ]),
        2 => any::<char>(),
    ]
}

fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(tricky_char(), 0..max).prop_map(|chars| chars.into_iter().collect())
}

/// Number spellings, from ordinary to extreme.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (-20i64..20).prop_map(|n| n.to_string()),
        // Around 2^53, 2^63 and 2^64.
        (-3i64..4).prop_map(|d| (9_007_199_254_740_992i128 + i128::from(d)).to_string()),
        (-3i64..4).prop_map(|d| (-9_223_372_036_854_775_808i128 + i128::from(d)).to_string()),
        (-3i64..4).prop_map(|d| (18_446_744_073_709_551_616i128 + i128::from(d)).to_string()),
        // Long integers, beyond every integer type.
        "-?[1-9][0-9]{15,40}",
        // Every finite double, spelled three ways.
        any::<u64>()
            .prop_map(f64::from_bits)
            .prop_filter("finite", |v| v.is_finite())
            .prop_flat_map(|v| proptest::sample::select(vec![
                format!("{v:?}"),
                format!("{v:e}"),
                format!("{v:E}").replace("E", "E+").replace("E+-", "E-"),
            ])),
        // Long mantissas and explicit exponents.
        "-?(0|[1-9][0-9]{0,3})\\.[0-9]{1,30}([eE][+-]?[0-9]{1,2})?",
        "-?[1-9]\\.[0-9]{1,17}[eE][+-]?(30[0-7]|[12][0-9]{2}|[0-9]{1,2})",
        proptest::sample::select(vec![
            "-0",
            "-0.0",
            "0e0",
            "-0e-5",
            "0.0",
            "1e21",
            "1e-7",
            "1e20",
            "1e-6",
            "5e-324",
            "2.2250738585072014e-308",
            "1.7976931348623157e308",
            "4.9e-324",
            "1E400",
            "123e-20",
            "0.000001",
            "100e-2",
        ])
        .prop_map(str::to_owned),
    ]
}

fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        number().prop_map(Json::Number),
        text(12).prop_map(Json::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Json::Array),
            proptest::collection::vec((text(4), inner), 0..8).prop_map(|members| {
                let mut seen = std::collections::HashSet::new();
                Json::Object(
                    members
                        .into_iter()
                        .filter(|(name, _)| seen.insert(name.clone()))
                        .collect(),
                )
            }),
        ]
    })
}

/// A chain of `depth` containers around `json`.
fn nested(depth: usize, json: Json, names: &[String]) -> Json {
    (0..depth).fold(json, |inner, level| {
        match names.get(level % names.len().max(1)) {
            Some(name) if level % 3 != 0 => Json::Object(vec![(name.clone(), inner)]),
            _ => Json::Array(vec![inner, Json::Null]),
        }
    })
}

fn oracle(text: &str, profile: Profile) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_str(text).ok()?;
    match profile {
        Profile::Rfc8785 => Some(serde_json_canonicalizer::to_vec(&value).ok()?),
        _ => Some(serde_jcs_01::to_vec(&value).ok()?),
    }
}

/// The first integer literal (no fraction, no exponent) outside
/// ±(2^53 − 1) in the JSON `text`, found by a scan of its own: numbers are
/// the tokens outside strings that start with `-` or a digit.
fn unsafe_integer_in(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                at += 1;
                while bytes[at] != b'"' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
                at += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                while at < bytes.len()
                    && matches!(bytes[at], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    at += 1;
                }
                let token = &text[start..at];
                let digits = token.strip_prefix('-').unwrap_or(token);
                let integer = digits.bytes().all(|byte| byte.is_ascii_digit());
                if integer
                    && (digits.len() > 38 || digits.parse::<u128>().unwrap() > (1u128 << 53) - 1)
                {
                    return Some(token.to_owned());
                }
            }
            _ => at += 1,
        }
    }
    None
}

fn differential(text: &str, profile: Profile) -> Result<(), TestCaseError> {
    let options = Options::with_profile(profile);
    let ours = to_vec_with(text.as_bytes(), &options);
    let unsafe_integer = unsafe_integer_in(text).filter(|_| profile == Profile::Rfc8785);
    if let Some(literal) = &unsafe_integer {
        // Refused whatever the oracle says (unless the text is refused for
        // an earlier reason: an out-of-range number before it).
        match &ours {
            Err(error) => match &error.kind {
                CanonicalizeErrorKind::UnsafeInteger { literal: found, .. } => {
                    // Literals past 40 characters are shortened.
                    let shortened = literal.len() > 40
                        && found.starts_with(&literal[..24])
                        && found.ends_with(&format!("({} characters)", literal.len()));
                    prop_assert!(found == literal || shortened, "{} named {}", text, found);
                }
                CanonicalizeErrorKind::NumberOutOfRange => {}
                other => prop_assert!(false, "{}: refused as {:?}", text, other),
            },
            Ok(bytes) => prop_assert!(
                false,
                "{} holds {} but was accepted: {}",
                text,
                literal,
                String::from_utf8_lossy(bytes)
            ),
        }
        return Ok(());
    }
    if let Err(CanonicalizeError {
        kind: CanonicalizeErrorKind::UnsafeInteger { literal, .. },
        ..
    }) = &ours
    {
        prop_assert!(
            false,
            "{}: refused {} that is in the safe range",
            text,
            literal
        );
    }
    match (oracle(text, profile), &ours) {
        (Some(expected), Ok(actual)) => {
            prop_assert_eq!(
                String::from_utf8_lossy(actual),
                String::from_utf8_lossy(&expected),
                "profile {:?}, input {}",
                profile,
                text
            );
            // The hash sink sees exactly the buffered bytes.
            let digest = canonical::sha256(text.as_bytes(), &options).unwrap();
            use sha2::Digest;
            prop_assert_eq!(hex_lower(&digest), hex_lower(&sha2::Sha256::digest(actual)));
            // Idempotence, except that ECMAScript prints doubles below
            // 1e21 as plain integers, which the RFC 8785 profile then
            // refuses as input when past 2^53 − 1 (as PyPI `rfc8785` does).
            match to_vec_with(actual, &options) {
                Ok(again) => prop_assert_eq!(&again, actual),
                Err(error) => {
                    let printed = String::from_utf8_lossy(actual).into_owned();
                    prop_assert!(
                        unsafe_integer_in(&printed).is_some() && profile == Profile::Rfc8785,
                        "{} not idempotent: {}",
                        printed,
                        error
                    );
                }
            }
        }
        // Both refuse (only numbers out of range can get here: names are distinct).
        (None, Err(error)) => {
            prop_assert_eq!(
                &error.kind,
                &CanonicalizeErrorKind::NumberOutOfRange,
                "{}",
                text
            );
        }
        (expected, actual) => {
            prop_assert!(
                false,
                "disagreement on {}: oracle {:?}, ours {:?}",
                text,
                expected.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
                actual
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1024,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn rfc8785_agrees_with_serde_json_canonicalizer(document in json(), seed in any::<u64>()) {
        differential(&spell(&document, seed), Profile::Rfc8785)?;
    }

    #[test]
    fn decision_gate_profile_agrees_with_serde_jcs_0_1_0(document in json(), seed in any::<u64>()) {
        differential(&spell(&document, seed), Profile::DecisionGate)?;
    }

    #[test]
    fn numbers_agree_with_both_oracles(spelling in number(), seed in any::<u64>()) {
        let document = Json::Array(vec![Json::Number(spelling)]);
        let text = spell(&document, seed);
        differential(&text, Profile::Rfc8785)?;
        differential(&text, Profile::DecisionGate)?;
    }

    #[test]
    fn object_keys_sort_like_the_oracles(
        names in proptest::collection::vec(text(6), 0..24),
        seed in any::<u64>(),
    ) {
        let mut seen = std::collections::HashSet::new();
        let members = names
            .into_iter()
            .filter(|name| seen.insert(name.clone()))
            .enumerate()
            .map(|(index, name)| (name, Json::Number(index.to_string())))
            .collect();
        let text = spell(&Json::Object(members), seed);
        differential(&text, Profile::Rfc8785)?;
        differential(&text, Profile::DecisionGate)?;
    }

    #[test]
    fn deep_nesting_agrees(
        depth in 0usize..120,
        names in proptest::collection::vec(text(3), 1..4),
        leaf in json(),
        seed in any::<u64>(),
    ) {
        // serde_json's own recursion limit is 128, so stay below it.
        let text = spell(&nested(depth, leaf, &names), seed);
        let value: Option<Value> = serde_json::from_str(&text).ok();
        prop_assume!(value.is_some());
        differential(&text, Profile::Rfc8785)?;
    }

    #[test]
    fn depth_limit_is_exact(depth in 1usize..300, limit in 1usize..200) {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let options = Options::default().with_max_depth(limit);
        let result = to_vec_with(text.as_bytes(), &options);
        if depth <= limit {
            prop_assert_eq!(result.unwrap(), text.into_bytes());
        } else {
            let error = result.unwrap_err();
            prop_assert_eq!(error.kind, CanonicalizeErrorKind::TooDeep(limit));
            prop_assert_eq!(error.offset, limit);
        }
    }

    #[test]
    fn a_duplicate_name_anywhere_is_rejected_and_nothing_is_written(
        document in json(),
        name in text(4),
        seed in any::<u64>(),
    ) {
        // Wrap the document in an object that names `name` twice.
        let twice = Json::Object(vec![
            (name.clone(), Json::Null),
            ("\u{0}separator".to_owned(), document),
            (name.clone(), Json::Bool(true)),
        ]);
        let text = spell(&twice, seed);
        for profile in [Profile::Rfc8785, Profile::DecisionGate] {
            let mut sink = Vec::new();
            let error = canonical::write_with(text.as_bytes(), &Options::with_profile(profile), &mut sink)
                .unwrap_err();
            // The inner document may hold an out-of-range number (or, under
            // RFC 8785, an unsafe integer), found first.
            let number_first = error.kind == CanonicalizeErrorKind::NumberOutOfRange
                || (profile == Profile::Rfc8785 && unsafe_integer_in(&text).is_some());
            if !number_first {
                prop_assert_eq!(&error.kind, &CanonicalizeErrorKind::DuplicateKey(name.clone()));
            }
            prop_assert!(sink.is_empty(), "bytes written before the error");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_accepted_input_is_json(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(canonical) = to_vec(&bytes) {
            prop_assert!(serde_json::from_slice::<Value>(&bytes).is_ok());
            match to_vec(&canonical) {
                Ok(again) => prop_assert_eq!(again, canonical),
                // A double below 1e21 printed as an integer past 2^53 − 1.
                Err(error) => prop_assert!(
                    matches!(error.kind, CanonicalizeErrorKind::UnsafeInteger { .. }),
                    "{}",
                    error
                ),
            }
        }
    }

    #[test]
    fn lone_surrogates_are_rejected(unit in 0xd800u32..0xe000, before in text(3)) {
        let mut document = String::new();
        Spelling(7).string(&before, &mut document);
        let text = format!("[{document}, \"x\\u{unit:04x}y\"]");
        let error = to_vec(text.as_bytes()).unwrap_err();
        prop_assert_eq!(error.kind, CanonicalizeErrorKind::LoneSurrogate);
    }
}

#[test]
fn size_limit_is_checked_first() {
    let options = Options::default().with_max_input_bytes(4);
    assert!(to_vec_with(b"[1,2]", &options).is_err());
    assert_eq!(
        to_vec_with(b"[1,2]", &options).unwrap_err().kind,
        CanonicalizeErrorKind::TooLarge(4)
    );
    assert_eq!(to_vec_with(b"[12]", &options).unwrap(), b"[12]");
}

#[test]
fn a_paired_surrogate_escape_is_one_character() {
    assert_eq!(
        to_vec(br#"["\ud83d\ude02", "\uD83D\uDE02"]"#).unwrap(),
        "[\"\u{1f602}\",\"\u{1f602}\"]".as_bytes()
    );
    // A high surrogate followed by a non-surrogate escape, or by raw text.
    for bad in [
        r#"["\ud83d\u0041"]"#,
        r#"["\ud83dA"]"#,
        r#"["\ud83d"]"#,
        r#"["\ude02\ud83d"]"#,
    ] {
        assert_eq!(
            to_vec(bad.as_bytes()).unwrap_err().kind,
            CanonicalizeErrorKind::LoneSurrogate,
            "{bad}"
        );
    }
}

#[test]
fn syntax_errors_are_reported_with_offsets() {
    for (bad, offset) in [
        (&b""[..], 0),
        (b"   ", 3),
        (b"[1,]", 3),
        (b"{\"a\" 1}", 5),
        (b"[01]", 1),
        (b"[1.]", 3),
        (b"[1e]", 3),
        (b"[-]", 2),
        (b"[+1]", 1),
        (b"\"\x01\"", 1),
        (b"\"abc", 0),
        (b"[\"\\x\"]", 2),
        (b"[\"\\u12G4\"]", 4),
        (b"[1] [2]", 4),
        (b"[true false]", 6),
        (b"nul", 0),
        (b"\xef\xbb\xbf[1]", 0),
        (b"[\"\xff\"]", 2),
        (b"{\"a\":1,}", 7),
        (b"{1:2}", 1),
    ] {
        let error = to_vec(bad).unwrap_err();
        assert!(
            matches!(error.kind, CanonicalizeErrorKind::Syntax(_)),
            "{:?}: {error}",
            String::from_utf8_lossy(bad)
        );
        assert_eq!(
            error.offset,
            offset,
            "{:?}: {error}",
            String::from_utf8_lossy(bad)
        );
        assert!(error.to_string().contains(&format!("at byte {offset}")));
    }
}

#[test]
fn special_string_bytes_are_found_at_every_position() {
    // Strings are scanned eight bytes at a time: put each special byte and
    // each near miss at every position of strings of every length up to 40.
    for len in 1..40usize {
        for at in 0..len {
            let mut body = vec![b'a'; len];
            for control in [0x00u8, 0x01, 0x0a, 0x1f] {
                body[at] = control;
                let text = [b"\"".as_slice(), &body, b"\""].concat();
                let error = to_vec(&text).unwrap_err();
                assert_eq!(
                    error.offset,
                    at + 1,
                    "control {control:#x} at {at} of {len}"
                );
            }
            for near_miss in [0x20u8, 0x21, 0x23, 0x5b, 0x5d, 0x7f] {
                body[at] = near_miss;
                let text = [b"\"".as_slice(), &body, b"\""].concat();
                assert_eq!(
                    to_vec(&text).unwrap(),
                    text,
                    "{near_miss:#x} at {at} of {len}"
                );
            }
            for (escape, canonical) in [
                (&b"\\\""[..], &b"\\\""[..]),
                (b"\\\\", b"\\\\"),
                (b"\\/", b"/"),
            ] {
                let mut escaped = vec![b'a'; len];
                escaped.splice(at..=at, escape.iter().copied());
                let text = [b"\"".as_slice(), &escaped, b"\""].concat();
                let mut expected = vec![b'a'; len];
                expected.splice(at..=at, canonical.iter().copied());
                let expected = [b"\"".as_slice(), &expected, b"\""].concat();
                assert_eq!(to_vec(&text).unwrap(), expected, "escape at {at} of {len}");
            }
        }
    }
}
