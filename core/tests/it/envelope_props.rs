//! Properties of `envelope::validate`:
//!
//! - on arbitrary bytes (and on JSON-ish token soup) it never panics and
//!   always yields either messages or a canonical rejection (`PARSE_ERROR` or
//!   `INVALID_ENVELOPE`) whose response is valid JSON echoing the right id;
//! - on generated envelopes (members drawn from valid and invalid values, in
//!   any order, possibly duplicated, possibly escaped) it classifies exactly
//!   as a small independent model of each policy does;
//! - what the encoders write reads back unchanged.

use evidence_wire::envelope::{
    Id, Incoming, Message, Policy, Rejection, encode_request, encode_result, validate,
};
use evidence_wire::error::CanonicalError;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;

/// Checks one outcome of `validate` for internal consistency.
fn check_outcome(body: &[u8], policy: &Policy) {
    match validate(body, policy) {
        Ok(Incoming::Single(message)) => {
            // An accepted request's id can be echoed exactly.
            if let Message::Request(request) = &message {
                let reply = encode_result(&request.id, &0).expect("a result encodes");
                let echoed: Value = serde_json::from_slice(&reply).expect("JSON reply");
                assert_eq!(echoed["id"], request.id.to_value());
                assert_eq!(request.id.to_string(), echoed["id"].to_string());
            }
        }
        Ok(Incoming::Batch(entries)) => {
            assert!(policy.allows_batches());
            assert!(!entries.is_empty());
            assert!(entries.len() <= policy.batch_len_limit());
            for entry in entries {
                if let Err(rejection) = entry {
                    assert_eq!(rejection.error, CanonicalError::InvalidEnvelope);
                    check_rejection(&rejection);
                }
            }
        }
        Err(rejection) => {
            assert!(matches!(
                rejection.error,
                CanonicalError::ParseError | CanonicalError::InvalidEnvelope
            ));
            check_rejection(&rejection);
        }
    }
}

fn check_rejection(rejection: &Rejection) {
    assert!(!rejection.detail.is_empty());
    let reply: Value = serde_json::from_slice(&rejection.to_response()).expect("JSON reply");
    assert_eq!(reply["jsonrpc"], "2.0");
    assert_eq!(reply["error"]["code"], rejection.error.jsonrpc_code());
    assert_eq!(reply["error"]["message"], rejection.error.message());
    let id = rejection.id.as_ref().map_or(Value::Null, Id::to_value);
    assert_eq!(reply["id"], id);
    assert_eq!(reply["error"]["data"]["request_id"], id);
    assert_ne!(
        rejection.id,
        Some(Id::Null),
        "a null id is never `readable`"
    );
}

fn policies() -> [Policy; 4] {
    [
        Policy::mcp(),
        Policy::jsonrpc().max_batch_len(4),
        Policy::strict().uuid_ids(true),
        Policy::mcp().max_depth(3),
    ]
}

/// Fragments that, glued together, often make (almost) JSON.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    " ",
    "\"",
    "\\",
    "\"jsonrpc\"",
    "\"2.0\"",
    "\"id\"",
    "\"\\u0069d\"",
    "\"method\"",
    "\"params\"",
    "\"result\"",
    "\"error\"",
    "\"code\"",
    "\"message\"",
    "1",
    "-1",
    "1.5",
    "1e9",
    "null",
    "true",
    "\"x\"",
    "\"\\ud800\"",
    "{}",
    "[]",
    "\u{feff}",
    "\u{e9}",
    "99999999999999999999",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600)) {
        for policy in policies() {
            check_outcome(&body, &policy);
        }
    }

    #[test]
    fn token_soup_never_panics(tokens in proptest::collection::vec(0..TOKENS.len(), 0..80)) {
        let body: String = tokens.iter().map(|&index| TOKENS[index]).collect();
        for policy in policies() {
            check_outcome(body.as_bytes(), &policy);
        }
    }
}

// ---- a model of the rules, on parsed JSON ----

/// Which members the model needs to know about.
const KEYS: &[(&str, &str)] = &[
    ("jsonrpc", "\"jsonrpc\""),
    ("jsonrpc", "\"json\\u0072pc\""),
    ("id", "\"id\""),
    ("id", "\"\\u0069d\""),
    ("method", "\"method\""),
    ("params", "\"params\""),
    ("result", "\"result\""),
    ("error", "\"error\""),
    ("extra", "\"extra\""),
];

const UUID: &str = "\"6f1c2a9e-3b7d-4c1e-9a2f-0d4b5e6f7a8b\"";
const ERROR_OK: &str = "{\"code\":-32000,\"message\":\"m\"}";
const ERROR_DATA: &str = "{\"code\":1,\"message\":\"m\",\"data\":{\"x\":1}}";

/// Candidate values, as JSON text.
const VALUES: &[&str] = &[
    "\"2.0\"",
    "\"2\\u002e0\"",
    "\"1.0\"",
    "2.0",
    "1",
    "-7",
    "0",
    "1.5",
    "1e2",
    "9223372036854775808",
    "null",
    "true",
    "\"\"",
    "\"tools/list\"",
    UUID,
    "{}",
    "{\"_meta\":{}}",
    "[1]",
    "[]",
    ERROR_OK,
    ERROR_DATA,
    "{\"code\":1.5,\"message\":\"m\"}",
    "{\"message\":\"m\"}",
];

/// The knobs of the policies under test, restated independently.
struct Model {
    null_id: bool,
    notifications: bool,
    positional: bool,
    empty_method: bool,
    require_params: bool,
    string_ids_only: bool,
    uuid_ids: bool,
}

const MCP: Model = Model {
    null_id: false,
    notifications: true,
    positional: false,
    empty_method: false,
    require_params: false,
    string_ids_only: false,
    uuid_ids: false,
};
const JSONRPC: Model = Model {
    null_id: true,
    notifications: true,
    positional: true,
    empty_method: true,
    require_params: false,
    string_ids_only: false,
    uuid_ids: false,
};
const STRICT_UUID: Model = Model {
    null_id: false,
    notifications: false,
    positional: false,
    empty_method: false,
    require_params: true,
    string_ids_only: true,
    uuid_ids: true,
};

#[derive(Debug, PartialEq)]
enum Kind {
    Request(Value),
    Notification,
    Response(Value),
    Invalid { echo: Value, answerable: bool },
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// A string or an `i64` (not null, not fractional, not out of range).
fn readable(id: &Value) -> bool {
    id.is_string() || id.as_i64().is_some()
}

impl Model {
    fn id_ok(&self, id: &Value, null_ok: bool) -> bool {
        match id {
            Value::Null => null_ok || self.null_id,
            Value::String(text) => !self.uuid_ids || is_uuid(text),
            _ => id.as_i64().is_some() && !self.string_ids_only,
        }
    }

    fn classify(&self, members: &[(&str, Value)]) -> Kind {
        let get = |name: &str| members.iter().find(|(key, _)| *key == name).map(|(_, v)| v);
        let id = get("id");
        let echo = id.filter(|id| readable(id)).cloned().unwrap_or(Value::Null);
        let method = get("method");
        let is_response = method.is_none() && (get("result").is_some() || get("error").is_some());
        let invalid = Kind::Invalid {
            echo,
            answerable: !is_response,
        };
        let mut names: Vec<&str> = members.iter().map(|(key, _)| *key).collect();
        names.sort_unstable();
        if names.windows(2).any(|pair| pair[0] == pair[1]) {
            return invalid;
        }
        if get("jsonrpc") != Some(&Value::from("2.0")) {
            return invalid;
        }
        if let Some(method) = method {
            if get("result").is_some() || get("error").is_some() {
                return invalid;
            }
            let Some(name) = method.as_str() else {
                return invalid;
            };
            if name.is_empty() && !self.empty_method {
                return invalid;
            }
            match get("params") {
                None if self.require_params => return invalid,
                None | Some(Value::Object(_)) => {}
                Some(Value::Array(_)) if self.positional => {}
                Some(_) => return invalid,
            }
            return match id {
                None if self.notifications => Kind::Notification,
                Some(id) if self.id_ok(id, false) => Kind::Request(id.clone()),
                _ => invalid,
            };
        }
        match (get("result"), get("error")) {
            (Some(_), None) => match id {
                Some(id) if self.id_ok(id, false) => Kind::Response(id.clone()),
                _ => invalid,
            },
            (None, Some(error)) => {
                let id = id.cloned().unwrap_or(Value::Null);
                let error_ok = error.get("code").and_then(Value::as_i64).is_some()
                    && error.get("message").is_some_and(Value::is_string);
                if self.id_ok(&id, true) && error_ok {
                    Kind::Response(id)
                } else {
                    invalid
                }
            }
            _ => invalid,
        }
    }
}

fn actual(body: &[u8], policy: &Policy) -> Kind {
    match validate(body, policy) {
        Ok(Incoming::Single(Message::Request(request))) => Kind::Request(request.id.to_value()),
        Ok(Incoming::Single(Message::Notification(_))) => Kind::Notification,
        Ok(Incoming::Single(Message::Response(response))) => Kind::Response(response.id.to_value()),
        Ok(Incoming::Batch(_)) => panic!("an object is never a batch"),
        Err(rejection) => {
            assert_eq!(
                rejection.error,
                CanonicalError::InvalidEnvelope,
                "{}",
                rejection.detail
            );
            Kind::Invalid {
                echo: rejection.id.as_ref().map_or(Value::Null, Id::to_value),
                answerable: rejection.answerable,
            }
        }
    }
}

/// One member: absent, or a key spelling from `keys` with a value that is
/// usually from `good` and sometimes anything at all.
fn member(
    keys: &'static [usize],
    good: &'static [&'static str],
    present: u32,
    absent: u32,
) -> BoxedStrategy<Option<(usize, &'static str)>> {
    let value = prop_oneof![3 => select(good), 1 => select(VALUES)];
    prop_oneof![absent => Just(None), present => (select(keys), value).prop_map(Some)].boxed()
}

/// Envelopes near the valid ones, so every rule is exercised: each member
/// present or not, with a likely or an arbitrary value, sometimes a member
/// twice, in any order.
fn envelope_strategy() -> impl Strategy<Value = Vec<(usize, &'static str)>> {
    (
        member(&[0, 0, 0, 1], &["\"2.0\""], 9, 1),
        member(
            &[2, 2, 2, 3],
            &["1", "-7", "\"tools/list\"", UUID, "null"],
            7,
            3,
        ),
        member(&[4], &["\"tools/list\"", "\"\""], 7, 3),
        member(&[5], &["{}", "{\"_meta\":{}}", "[1]", "[]"], 6, 4),
        member(&[6], &["1", "{}", "null"], 1, 5),
        member(&[7], &[ERROR_OK, ERROR_DATA], 1, 5),
        member(&[8], VALUES, 1, 4),
        proptest::option::weighted(0.1, (0..KEYS.len(), select(VALUES))),
    )
        .prop_flat_map(|(a, b, c, d, e, f, g, twice)| {
            let members: Vec<_> = [a, b, c, d, e, f, g, twice].into_iter().flatten().collect();
            Just(members).prop_shuffle()
        })
}

fn render(picks: &[(usize, &'static str)]) -> (String, Vec<(&'static str, Value)>) {
    let mut text = String::from("{");
    let mut members = Vec::new();
    for (index, &(key, value)) in picks.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        let (name, spelled) = KEYS[key];
        text.push_str(spelled);
        text.push(':');
        text.push_str(value);
        members.push((name, serde_json::from_str(value).unwrap()));
    }
    text.push('}');
    (text, members)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn generated_envelopes_classify_as_the_model_says(picks in envelope_strategy()) {
        let (text, members) = render(&picks);
        for (policy, model) in [
            (Policy::mcp(), &MCP),
            (Policy::jsonrpc(), &JSONRPC),
            (Policy::strict().uuid_ids(true), &STRICT_UUID),
        ] {
            prop_assert_eq!(actual(text.as_bytes(), &policy), model.classify(&members), "{}", text);
        }
    }

    #[test]
    fn batches_classify_entry_by_entry(entries in proptest::collection::vec(envelope_strategy(), 1..6)) {
        let rendered: Vec<_> = entries.iter().map(|picks| render(picks)).collect();
        let body = format!(
            "[{}]",
            rendered.iter().map(|(text, _)| text.as_str()).collect::<Vec<_>>().join(",")
        );
        let Ok(Incoming::Batch(results)) = validate(body.as_bytes(), &Policy::jsonrpc()) else {
            panic!("a non-empty batch: {body}")
        };
        prop_assert_eq!(results.len(), rendered.len());
        let mut needs_reply = false;
        for (result, (text, members)) in results.into_iter().zip(&rendered) {
            let kind = match result {
                Ok(Message::Request(request)) => Kind::Request(request.id.to_value()),
                Ok(Message::Notification(_)) => Kind::Notification,
                Ok(Message::Response(response)) => Kind::Response(response.id.to_value()),
                Err(rejection) => Kind::Invalid {
                    echo: rejection.id.as_ref().map_or(Value::Null, Id::to_value),
                    answerable: rejection.answerable,
                },
            };
            needs_reply |= matches!(kind, Kind::Request(_) | Kind::Invalid { answerable: true, .. });
            prop_assert_eq!(kind, JSONRPC.classify(members), "{}", text);
        }
        let incoming = validate(body.as_bytes(), &Policy::jsonrpc()).unwrap();
        prop_assert_eq!(incoming.needs_reply(), needs_reply);
    }

    #[test]
    fn encoded_requests_and_results_read_back(
        id in prop_oneof![any::<i64>().prop_map(Id::Number), any::<String>().prop_map(Id::from)],
        method in "[^\u{0}]{1,20}",
        key in any::<String>(),
        number in any::<i64>(),
    ) {
        let mut object = serde_json::Map::new();
        object.insert(key, Value::from(number));
        let params = Value::Object(object);
        let body = encode_request(&id, &method, Some(&params)).unwrap();
        let Ok(Incoming::Single(Message::Request(request))) = validate(&body, &Policy::mcp()) else {
            panic!("our own request reads back")
        };
        prop_assert_eq!(&request.id, &id);
        prop_assert_eq!(request.method.as_ref(), method.as_str());
        prop_assert_eq!(request.parse_params::<Value>().unwrap(), Some(params));
        let body = encode_result(&id, &number).unwrap();
        let Ok(Incoming::Single(Message::Response(response))) = validate(&body, &Policy::mcp()) else {
            panic!("our own result reads back")
        };
        prop_assert_eq!(response.id, id);
        prop_assert_eq!(response.outcome.unwrap().get(), number.to_string());
    }
}
