//! The JSON-RPC request id, carried end to end: read from a request, kept
//! while its call is in flight, echoed in the answer, in errors
//! (`data.request_id`) and in validation records, exactly as the peer
//! wrote it (`-0` included).
//!
//! Limits: a numeric id must fit an `i64`; string ids are bounded by the
//! frame that carried them.

use alloc::borrow::Cow;
use alloc::string::{String, ToString};
use core::fmt;

use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

/// A JSON-RPC request id.
///
/// JSON-RPC allows a string, a number or `null`; MCP allows a string or an
/// integer. Numbers are kept as `i64`: a fractional id, or an integer outside
/// the `i64` range, cannot be echoed exactly and is rejected as unreadable.
/// The integer `-0` is kept apart from `0` ([`Id::NegativeZero`]), so that
/// it too is echoed as sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id<'a> {
    /// An integer id, e.g. `7`.
    Number(i64),
    /// A string id, borrowed from the frame body when it holds no escapes.
    String(Cow<'a, str>),
    /// `null`: the id of a request that cannot be matched (JSON-RPC only).
    Null,
    /// The integer id `-0`, written and echoed as `-0` (an `i64` cannot
    /// hold the sign). As a [`serde_json::Value`] it is the float `-0.0`
    /// ([`Id::to_value`]), which [`serialize_id_value`] writes back as `-0`.
    NegativeZero,
}

impl Id<'_> {
    /// The same id, owning its string, so it can outlive the frame body.
    pub fn into_owned(self) -> Id<'static> {
        match self {
            Id::Number(number) => Id::Number(number),
            Id::String(text) => Id::String(Cow::Owned(text.into_owned())),
            Id::Null => Id::Null,
            Id::NegativeZero => Id::NegativeZero,
        }
    }

    /// A copy that borrows from `self` (cheap: never copies the string).
    pub fn as_borrowed(&self) -> Id<'_> {
        match self {
            Id::Number(number) => Id::Number(*number),
            Id::String(text) => Id::String(Cow::Borrowed(text.as_ref())),
            Id::Null => Id::Null,
            Id::NegativeZero => Id::NegativeZero,
        }
    }

    /// The id a JSON value names (a string, an `i64` integer or `null`), as
    /// a cancellation's `requestId` does; `None` for anything else.
    pub fn from_value(value: &serde_json::Value) -> Option<Id<'static>> {
        match value {
            serde_json::Value::String(text) => Some(Id::String(Cow::Owned(text.clone()))),
            serde_json::Value::Number(number) => match number.as_i64() {
                Some(number) => Some(Id::Number(number)),
                None if number.as_f64() == Some(0.0) => Some(Id::NegativeZero),
                None => None,
            },
            serde_json::Value::Null => Some(Id::Null),
            _ => None,
        }
    }

    /// True for [`Id::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Id::Null)
    }

    /// The id as a JSON value (`null` for [`Id::Null`], the float `-0.0`
    /// for [`Id::NegativeZero`]; write it with [`serialize_id_value`] to
    /// get `-0` back).
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            Id::Number(number) => serde_json::Value::from(*number),
            Id::String(text) => serde_json::Value::String(text.to_string()),
            Id::Null => serde_json::Value::Null,
            Id::NegativeZero => serde_json::Value::from(-0.0f64),
        }
    }
}

impl Serialize for Id<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Id::Number(number) => serializer.serialize_i64(*number),
            Id::String(text) => serializer.serialize_str(text),
            Id::Null => serializer.serialize_unit(),
            Id::NegativeZero => negative_zero(serializer),
        }
    }
}

/// Writes the JSON number `-0` (verbatim with `serde_json`).
fn negative_zero<S: Serializer>(serializer: S) -> Result<S::Ok, S::Error> {
    let literal: &RawValue = serde_json::from_str("-0").map_err(serde::ser::Error::custom)?;
    literal.serialize(serializer)
}

/// Serializes a request id held as a [`serde_json::Value`] (as the server
/// keeps them) the way it was sent: like `serde_json`, except that the
/// float `-0.0`, which is how [`Id::NegativeZero`] reads as a value (a
/// fractional id is never accepted), is written `-0` rather than `-0.0`.
/// For `#[serde(serialize_with = "…")]` on fields that echo an id.
pub fn serialize_id_value<S: Serializer>(
    id: &serde_json::Value,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match id.as_f64() {
        Some(number) if id.is_f64() && number == 0.0 && number.is_sign_negative() => {
            negative_zero(serializer)
        }
        _ => id.serialize(serializer),
    }
}

impl fmt::Display for Id<'_> {
    /// The id as JSON: `7`, `"abc"` (quoted and escaped) or `null`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Number(number) => write!(f, "{number}"),
            Id::String(text) => match serde_json::to_string(text.as_ref()) {
                Ok(quoted) => f.write_str(&quoted),
                Err(_) => write!(f, "{text:?}"),
            },
            Id::Null => f.write_str("null"),
            Id::NegativeZero => f.write_str("-0"),
        }
    }
}

impl From<i64> for Id<'_> {
    fn from(number: i64) -> Self {
        Id::Number(number)
    }
}

impl<'a> From<&'a str> for Id<'a> {
    fn from(text: &'a str) -> Self {
        Id::String(Cow::Borrowed(text))
    }
}

impl From<String> for Id<'_> {
    fn from(text: String) -> Self {
        Id::String(Cow::Owned(text))
    }
}

impl From<&Id<'_>> for serde_json::Value {
    fn from(id: &Id<'_>) -> Self {
        id.to_value()
    }
}
