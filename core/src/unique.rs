//! JSON values read with one more rule than `serde_json` applies: no object
//! names a member twice, at any depth.
//!
//! `serde_json::Value` keeps the last of two members with the same name
//! without a word, so `{"check_id":"a","check_id":"b"}` would be read as
//! `b` by us and possibly as `a` by a log, a proxy or another parser: a
//! parser differential. I-JSON (RFC 7493) forbids duplicate names, and
//! every object the server reads from a peer (tool arguments, the query,
//! its context, a check's params, the params of `initialize`,
//! `resources/read` and `notifications/cancelled`) is read through
//! [`from_str`], which refuses them in the same single parse that builds
//! the value, and says where ([`Duplicate::pointer`], an RFC 6901 JSON
//! pointer).
//!
//! Limits: nesting is bounded by `serde_json`'s own recursion limit (128)
//! and, before any of this runs, by the envelope's depth pre-scan
//! ([`crate::envelope::Policy::max_depth`]); the value is built once, and
//! the pointer only when a duplicate is found.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A member named twice in one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    /// The member name (unescaped).
    pub name: String,
    /// RFC 6901 JSON pointer of the member, relative to the parsed text
    /// (e.g. `/query/check_id`).
    pub pointer: String,
}

impl fmt::Display for Duplicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "member `{}` appears more than once in the same object (at `{}`); name each member once (I-JSON): a reader could take either value",
            self.name, self.pointer
        )
    }
}

/// Why [`from_str`] refused a text.
#[derive(Debug)]
#[non_exhaustive]
pub enum UniqueError {
    /// Not one JSON value (or nested past `serde_json`'s limit).
    Syntax(serde_json::Error),
    /// An object names a member twice.
    Duplicate(Duplicate),
}

impl fmt::Display for UniqueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UniqueError::Syntax(error) => write!(f, "not valid JSON: {error}"),
            UniqueError::Duplicate(duplicate) => duplicate.fmt(f),
        }
    }
}

/// Parses exactly one JSON value (surrounding whitespace allowed), refusing
/// any object that names a member twice.
pub fn from_str(text: &str) -> Result<Value, UniqueError> {
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = UniqueValue { found: &mut found }
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
    match (parsed, found) {
        (Ok(value), _) => Ok(value),
        (Err(_), Some(found)) => Err(UniqueError::Duplicate(found.finish())),
        (Err(error), None) => Err(UniqueError::Syntax(error)),
    }
}

/// A duplicate on its way out: the segments from the duplicated member up
/// to the root, innermost first (pushed while the error unwinds).
struct Found {
    name: String,
    segments: Vec<String>,
}

impl Found {
    fn finish(self) -> Duplicate {
        let mut pointer = String::new();
        for segment in self.segments.iter().rev() {
            pointer.push('/');
            for c in segment.chars() {
                match c {
                    '~' => pointer.push_str("~0"),
                    '/' => pointer.push_str("~1"),
                    other => pointer.push(other),
                }
            }
        }
        Duplicate {
            name: self.name,
            pointer,
        }
    }
}

/// Builds a [`Value`], recording the first duplicate in `found`.
struct UniqueValue<'f> {
    found: &'f mut Option<Found>,
}

impl<'de> DeserializeSeed<'de> for UniqueValue<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl UniqueValue<'_> {
    /// On the way out of a failed child: name the place it sat at.
    fn unwinding(&mut self, segment: impl FnOnce() -> String) {
        if let Some(found) = self.found.as_mut() {
            found.segments.push(segment());
        }
    }
}

impl<'de> Visitor<'de> for UniqueValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let index = items.len();
            let next = seq.next_element_seed(UniqueValue {
                found: &mut *self.found,
            });
            match next {
                Ok(Some(item)) => items.push(item),
                Ok(None) => return Ok(Value::Array(items)),
                Err(error) => {
                    self.unwinding(|| format!("{index}"));
                    return Err(error);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if object.contains_key(&name) {
                let message = format!("duplicate member `{name}`");
                *self.found = Some(Found {
                    segments: alloc::vec![name.clone()],
                    name,
                });
                return Err(de::Error::custom(message));
            }
            let value = map.next_value_seed(UniqueValue {
                found: &mut *self.found,
            });
            match value {
                Ok(value) => {
                    object.insert(name, value);
                }
                Err(error) => {
                    self.unwinding(|| name);
                    return Err(error);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::{UniqueError, from_str};

    #[test]
    fn a_member_named_twice_is_refused_with_its_pointer() {
        let value = from_str(r#"{"query":{"check_id":"a"}}"#).unwrap();
        assert_eq!(value["query"]["check_id"], "a");
        match from_str(r#"{"query":{"check_id":"a","check_id":"b"}}"#) {
            Err(UniqueError::Duplicate(duplicate)) => {
                assert_eq!(duplicate.name, "check_id");
                assert_eq!(duplicate.pointer, "/query/check_id");
            }
            other => panic!("{other:?}"),
        }
    }
}
