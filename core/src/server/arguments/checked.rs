//! The usual `evidence_query` call read by hand from the params of a
//! `tools/call`: no visitor machinery, one short walk over the members that
//! checks every byte it steps over (strings, numbers, literals, skipped
//! values, nesting against the envelope's limit), so that the envelope pass
//! can leave such params to it and the body is walked once
//! ([`crate::envelope::validate_reading_call`]).
//!
//! Narrower than the `serde_json` read it shortcuts ([`super::read_call`]
//! falls back to that one): it answers `Some` only for valid JSON of the
//! shape it knows (member names without escapes, ids as plain integers,
//! each member once, nothing unknown below `arguments`) and then with the
//! same value; its unit proptest holds it to the `serde_json` read on
//! generated calls, `envelope::scan::tests` hold the envelope outcome to
//! the `serde_json` path when params are left to it, and
//! `core/tests/it/server_arguments.rs` holds the server to the full path on
//! generated and mutated calls.
//!
//! Why hand-written: the `serde_json` typed read of the call was ~8 k of the
//! ~43 k instructions of a `time_now` request (`tests/benches/instructions.rs`,
//! `serve`), and checking the params in the envelope pass and again here
//! cost ~3.5 k more. Limits: the text is bounded by the frame limit; nesting
//! by the envelope's depth limit (skipped values are walked by the envelope
//! pass's own loop, no recursion).

use alloc::borrow::Cow;
use alloc::string::String;
use core::num::NonZeroU64;

use serde_json::value::RawValue;

use crate::envelope::scan;
use crate::evidence::{
    EVIDENCE_QUERY_TOOL, EvidenceContext, EvidenceQuery, EvidenceQueryArguments, TriggerTime,
};
use crate::unique;

/// `raw` (the params of a `tools/call`, an object at nesting level 2 of an
/// envelope whose limit is `max_depth`) read as the usual `evidence_query`
/// call, or `None` for anything else. `Some` also says that `raw` is one
/// valid JSON value nested no deeper than the limit: every byte was
/// checked on the way (the envelope pass may leave `params` to this read,
/// see [`crate::envelope::validate_reading_call`]).
pub(crate) fn call(raw: &RawValue, max_depth: usize) -> Option<ReadCall> {
    let mut reader = Reader {
        text: raw.get(),
        at: 0,
        level: 1,
        max_depth,
    };
    let mut named = None;
    let mut arguments = None;
    let mut has_meta = false;
    reader.object(|reader, name| {
        match name {
            "name" => {
                // Any other tool is left to the full path at once.
                if !reader.string_is(EVIDENCE_QUERY_TOOL)? {
                    return None;
                }
                once(&mut named, true)
            }
            "arguments" => {
                let read = read_arguments(reader)?;
                once(&mut arguments, read)
            }
            // Other members of the params (`_meta`, say) are ignored, as
            // the full path ignores them; `_meta` is noted (it may name a
            // stateless revision).
            other => {
                has_meta |= other == "_meta";
                reader.skip()
            }
        }
    })?;
    if named != Some(true) || !reader.at_end() {
        return None;
    }
    Some(ReadCall {
        arguments: arguments?,
        has_meta,
    })
}

/// A call read by [`call`].
#[derive(Debug)]
pub(crate) struct ReadCall {
    /// The call's arguments.
    pub(crate) arguments: EvidenceQueryArguments,
    /// Whether the params hold a `_meta` member. False says they certainly
    /// do not (member names with escapes are never read here), so the
    /// request speaks as its connection (`Server::speech_of`).
    pub(crate) has_meta: bool,
}

/// Fills `slot` with `value`; `None` when it was already filled (a member
/// named twice).
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

fn read_arguments(reader: &mut Reader<'_>) -> Option<EvidenceQueryArguments> {
    let mut query = None;
    let mut context = None;
    reader.object(|reader, name| match name {
        "query" => {
            let read = read_query(reader)?;
            once(&mut query, read)
        }
        "context" => {
            let read = read_context(reader)?;
            once(&mut context, read)
        }
        _ => None,
    })?;
    Some(EvidenceQueryArguments {
        query: query?,
        context: context?,
    })
}

fn read_query(reader: &mut Reader<'_>) -> Option<EvidenceQuery> {
    let (mut provider_id, mut check_id, mut params) = (None, None, None);
    reader.object(|reader, name| match name {
        "provider_id" => {
            let text = reader.string()?;
            once(&mut provider_id, text)
        }
        "check_id" => {
            let text = reader.string()?;
            once(&mut check_id, text)
        }
        "params" => {
            let text = reader.value_text()?;
            once(&mut params, text)
        }
        _ => None,
    })?;
    let (provider_id, check_id) = (provider_id?, check_id?);
    // The schema's `minLength: 1`.
    if provider_id.is_empty() || check_id.is_empty() {
        return None;
    }
    let params = match params.map(unique::from_str).transpose().ok()? {
        None | Some(serde_json::Value::Null) => None,
        Some(value) => Some(value),
    };
    Some(EvidenceQuery {
        provider_id,
        check_id,
        params,
    })
}

fn read_context(reader: &mut Reader<'_>) -> Option<EvidenceContext> {
    let (mut tenant_id, mut namespace_id) = (None, None);
    let (mut run_id, mut scenario_id, mut stage_id, mut trigger_id) = (None, None, None, None);
    let (mut trigger_time, mut correlation_id) = (None, None);
    reader.object(|reader, name| match name {
        "tenant_id" => {
            let id = reader.id()?;
            once(&mut tenant_id, id)
        }
        "namespace_id" => {
            let id = reader.id()?;
            once(&mut namespace_id, id)
        }
        "run_id" => {
            let text = reader.string()?;
            once(&mut run_id, text)
        }
        "scenario_id" => {
            let text = reader.string()?;
            once(&mut scenario_id, text)
        }
        "stage_id" => {
            let text = reader.string()?;
            once(&mut stage_id, text)
        }
        "trigger_id" => {
            let text = reader.string()?;
            once(&mut trigger_id, text)
        }
        "trigger_time" => {
            let time = read_trigger(reader)?;
            once(&mut trigger_time, time)
        }
        "correlation_id" => {
            let id = if reader.null() {
                None
            } else {
                Some(reader.string()?)
            };
            once(&mut correlation_id, id)
        }
        _ => None,
    })?;
    Some(EvidenceContext {
        tenant_id: tenant_id?,
        namespace_id: namespace_id?,
        run_id: run_id?,
        scenario_id: scenario_id?,
        stage_id: stage_id?,
        trigger_id: trigger_id?,
        trigger_time: trigger_time?,
        correlation_id: correlation_id.flatten(),
    })
}

fn read_trigger(reader: &mut Reader<'_>) -> Option<TriggerTime> {
    let (mut kind, mut value) = (None, None);
    reader.object(|reader, name| match name {
        "kind" => {
            let read = match reader.str()?.as_ref() {
                "unix_millis" => TriggerKind::UnixMillis,
                "logical" => TriggerKind::Logical,
                _ => return None,
            };
            once(&mut kind, read)
        }
        "value" => {
            let number = reader.integer()?;
            once(&mut value, number)
        }
        _ => None,
    })?;
    let value = value?;
    Some(match kind? {
        TriggerKind::UnixMillis => TriggerTime::UnixMillis(value),
        TriggerKind::Logical => TriggerTime::Logical(value),
    })
}

/// The `kind` of a trigger time, read before its `value` may be.
enum TriggerKind {
    UnixMillis,
    Logical,
}

/// A validating cursor over JSON text: every read checks the syntax of
/// what it steps over (strings, numbers, literals, nesting) and answers
/// `None` for anything invalid or unexpected (never a panic).
struct Reader<'a> {
    text: &'a str,
    at: usize,
    /// The nesting level of the container the cursor is in (the envelope
    /// object is level 1).
    level: usize,
    /// The deepest level allowed.
    max_depth: usize,
}

impl<'a> Reader<'a> {
    fn byte(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn advance(&mut self, by: usize) {
        self.at = self.at.saturating_add(by);
    }

    /// The next byte that is not whitespace (not consumed).
    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.byte() {
            self.advance(1);
        }
        self.byte()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.advance(1))
    }

    fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// Calls `member(self, name)` for each member of the object here (the
    /// callback reads the value); `None` when a name holds an escape.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.level >= self.max_depth {
            return None;
        }
        self.level = self.level.saturating_add(1);
        let read = self.members(&mut member);
        self.level = self.level.saturating_sub(1);
        read
    }

    /// The members of the object whose `{` was just read, and its `}`.
    fn members(&mut self, member: &mut impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        if self.peek()? == b'}' {
            self.advance(1);
            return Some(());
        }
        loop {
            let (name, escaped) = self.raw_string()?;
            if escaped {
                return None;
            }
            self.eat(b':')?;
            member(self, name)?;
            match self.peek()? {
                b',' => self.advance(1),
                b'}' => {
                    self.advance(1);
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The contents of the string here (between the quotes, still
    /// escaped) and whether it holds an escape.
    #[inline(always)]
    fn raw_string(&mut self) -> Option<(&'a str, bool)> {
        self.eat(b'"')?;
        let start = self.at;
        let (close, escaped) = scan::string_close(self.text.as_bytes(), start).ok()?;
        let contents = self.text.get(start..close)?;
        self.at = close.saturating_add(1);
        Some((contents, escaped))
    }

    /// The string here, unescaped: borrowed from the text unless it holds
    /// an escape.
    fn str(&mut self) -> Option<Cow<'a, str>> {
        self.peek()?;
        let start = self.at;
        let (contents, escaped) = self.raw_string()?;
        if !escaped {
            return Some(Cow::Borrowed(contents));
        }
        serde_json::from_str::<String>(self.text.get(start..self.at)?)
            .ok()
            .map(Cow::Owned)
    }

    /// The string here, unescaped.
    fn string(&mut self) -> Option<String> {
        self.str().map(Cow::into_owned)
    }

    /// Whether the string here, unescaped, is `expected` (no allocation
    /// unless it holds an escape).
    fn string_is(&mut self, expected: &str) -> Option<bool> {
        Some(self.str()? == expected)
    }

    /// `null` here (consumed), or false.
    fn null(&mut self) -> bool {
        let found = self.peek() == Some(b'n')
            && self.text.get(self.at..self.at.saturating_add(4)) == Some("null");
        if found {
            self.advance(4);
        }
        found
    }

    /// The plain integer token here (sign included): a JSON number, read
    /// by the envelope pass's own grammar, without fraction or exponent.
    /// A digit after a leading `0` is left unread, for the caller's next
    /// check to refuse, as the envelope pass leaves it.
    fn integer_token(&mut self) -> Option<&'a str> {
        self.peek()?;
        let start = self.at;
        let end = scan::number_end(self.text.as_bytes(), start).ok()?;
        let token = self.text.get(start..end)?;
        self.at = end;
        let plain = !token.bytes().any(|byte| matches!(byte, b'.' | b'e' | b'E'));
        plain.then_some(token)
    }

    /// An id: a plain integer >= 1 that fits in 64 bits.
    fn id(&mut self) -> Option<NonZeroU64> {
        let token = self.integer_token()?;
        if token.starts_with('-') {
            return None;
        }
        NonZeroU64::new(token.parse().ok()?)
    }

    /// A plain integer that fits in an `i64` (not `-0`, which `serde_json`
    /// reads as a float).
    fn integer(&mut self) -> Option<i64> {
        let token = self.integer_token()?;
        if token == "-0" {
            return None;
        }
        token.parse().ok()
    }

    /// The text of the value here, whatever it is (checked).
    fn value_text(&mut self) -> Option<&'a str> {
        self.peek()?;
        let start = self.at;
        self.skip()?;
        self.text.get(start..self.at)
    }

    /// Steps over the value here, checking it as the envelope pass does
    /// (syntax and nesting below the current level).
    fn skip(&mut self) -> Option<()> {
        self.peek()?;
        self.at = scan::value_end_within(self.text.as_bytes(), self.at, self.level, self.max_depth)
            .ok()?;
        Some(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    //! The hand-written read against `serde_json`'s typed read of the call.

    use alloc::format;
    use alloc::string::{String, ToString};
    use alloc::vec::Vec;

    use proptest::prelude::*;
    use proptest::sample::select;
    use serde_json::value::RawValue;

    use super::call;
    use crate::server::arguments::read_call_serde;

    /// A member value: the usual one, or one of its variants (wrong type,
    /// escapes, edge numbers).
    fn variant(usual: &'static str, others: &'static [&'static str]) -> BoxedStrategy<String> {
        prop_oneof![
            3 => Just(usual.to_string()),
            1 => select(others).prop_map(ToString::to_string),
        ]
        .boxed()
    }

    const IDS: &[&str] = &[
        "0",
        "2",
        "-1",
        "1.0",
        "1e2",
        "\"1\"",
        "null",
        "18446744073709551615",
        "18446744073709551616",
        "[1]",
    ];
    const STRINGS: &[&str] = &[
        "\"\"",
        "\"a\\\"b\"",
        "\"\\u00e9\\n\"",
        "\"\\uD83D\\uDE00\"",
        "1",
        "null",
        "{}",
        "\"é\"",
    ];
    const VALUES: &[&str] = &[
        "0",
        "-1",
        "-0",
        "1.5",
        "1e3",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "\"1\"",
        "null",
    ];

    /// An object from members, some dropped, some doubled, some added,
    /// shuffled, with whitespace.
    fn object(members: Vec<BoxedStrategy<(String, String)>>) -> BoxedStrategy<String> {
        (members, any::<u64>(), select(&["", " ", "\n "][..]))
            .prop_map(|(mut members, noise, ws)| {
                let count = members.len() as u64;
                if noise % 11 == 0 {
                    let member = members[(noise / 11 % count) as usize].clone();
                    members.push(member);
                }
                if noise % 7 == 0 {
                    members.remove((noise / 7 % count) as usize);
                }
                if noise % 13 == 0 {
                    members.push(("\"extra\"".into(), "1".into()));
                }
                if noise % 17 == 0 {
                    let len = members.len() as u64;
                    let name = &mut members[(noise / 17 % len) as usize].0;
                    *name = name.replacen('_', "\\u005f", 1).replacen('e', "\\u0065", 1);
                }
                if noise % 3 == 0 {
                    let len = members.len() as u64;
                    members.rotate_left((noise / 3 % len) as usize);
                }
                let inner: Vec<String> = members
                    .into_iter()
                    .map(|(name, value)| format!("{ws}{name}{ws}:{ws}{value}"))
                    .collect();
                format!("{{{}{ws}}}", inner.join(","))
            })
            .boxed()
    }

    fn member(name: &'static str, value: BoxedStrategy<String>) -> BoxedStrategy<(String, String)> {
        value
            .prop_map(move |value| (format!("\"{name}\""), value))
            .boxed()
    }

    fn calls() -> impl Strategy<Value = String> {
        let trigger = object(alloc::vec![
            member(
                "kind",
                variant(
                    "\"unix_millis\"",
                    &[
                        "\"logical\"",
                        "\"Unix_millis\"",
                        "\"unix_m\\u0069llis\"",
                        "1"
                    ]
                )
            ),
            member("value", variant("1710000000000", VALUES)),
        ]);
        let query = object(alloc::vec![
            member("provider_id", variant("\"evidence-wire\"", STRINGS)),
            member("check_id", variant("\"time_now\"", STRINGS)),
            member(
                "params",
                variant(
                    "null",
                    &[
                        "{\"a\":[1,{\"b\":\"]\"}]}",
                        "{\"a\":1,\"a\":2}",
                        "[1]",
                        "\"p\"",
                        "{}"
                    ]
                )
            ),
        ]);
        let context = object(alloc::vec![
            member("tenant_id", variant("1", IDS)),
            member("namespace_id", variant("7", IDS)),
            member("run_id", variant("\"run-1\"", STRINGS)),
            member("scenario_id", variant("\"s\"", STRINGS)),
            member("stage_id", variant("\"st\"", STRINGS)),
            member("trigger_id", variant("\"t\"", STRINGS)),
            member("trigger_time", trigger.boxed()),
            member(
                "correlation_id",
                variant("null", &["\"c\"", "\"c\\u0021\"", "1", "{}"])
            ),
        ]);
        let arguments = object(alloc::vec![
            member("query", query),
            member("context", context)
        ]);
        object(alloc::vec![
            member(
                "name",
                variant(
                    "\"evidence_query\"",
                    &["\"evidence_que\\u0072y\"", "\"other\"", "7"]
                )
            ),
            member("arguments", arguments),
            member(
                "_meta",
                variant(
                    "{\"progressToken\":[1,\"}\"]}",
                    &["null", "1", "\"x\"", "true"]
                )
            ),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn the_hand_read_is_the_serde_read_or_leaves_it(text in calls()) {
            let raw: &RawValue = serde_json::from_str(&text).expect("generated JSON");
            let serde = read_call_serde(&text);
            match call(raw, crate::envelope::DEFAULT_MAX_DEPTH) {
                Some(hand) => {
                    let members: alloc::collections::BTreeMap<String, &RawValue> =
                        serde_json::from_str(&text).expect("an object");
                    prop_assert_eq!(hand.has_meta, members.contains_key("_meta"), "{}", text);
                    prop_assert_eq!(Some(hand.arguments), serde, "{}", text);
                }
                // Left to the serde read only for what it does not know:
                // escaped member names.
                None => prop_assert!(serde.is_none() || text.contains("\\u005f") || text.contains("\\u0065"), "{}", text),
            }
        }
    }

    #[test]
    fn the_usual_call_is_read_by_hand() {
        let text = r#"{"name":"evidence_query","arguments":{"query":{"provider_id":"evidence-wire","check_id":"time_now"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000},"correlation_id":null}}}"#;
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        let depth = crate::envelope::DEFAULT_MAX_DEPTH;
        let read = call(raw, depth).unwrap();
        assert_eq!(Some(read.arguments), read_call_serde(text));
        assert!(!read.has_meta);
    }
}
