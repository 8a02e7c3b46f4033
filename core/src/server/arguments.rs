//! The one-pass read of `evidence_query` arguments: a typed parse straight
//! from the request's raw text (the `tools/call` params, [`read_call`], or
//! the arguments alone, [`read`]) into [`EvidenceQueryArguments`], for the
//! arguments every caller sends (integer ids, a `check_id`, no member named
//! twice), with no [`serde_json::Value`] tree and no schema walk.
//!
//! It is a shortcut, never a second rule book: [`read`] answers `Some` only
//! for arguments the full path ([`super::Server`]'s duplicate-refusing
//! parse, the built-in input schema, then the typed read) accepts, and with
//! the same value; anything else (a string id, the older `predicate`, a
//! member named twice, an unknown member, a wrong type, an empty name)
//! answers `None`, and the full path then accepts or refuses it with its own
//! words. So the shortcut can only be narrower than the full path, never
//! different: `core/tests/it/arguments_differential.rs` checks this on
//! generated arguments. It is taken only while the `evidence_query` input
//! schema is the built-in one (an embedder's replacement schema may refuse
//! more).
//!
//! Limits: the text is bounded by the frame and envelope limits (depth
//! included) before it gets here; `params`, when present, is read by the
//! same duplicate-refusing parse as the full path.

use alloc::borrow::Cow;
use alloc::string::String;
use core::fmt;
use core::marker::PhantomData;
use core::num::NonZeroU64;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess};
use serde_json::value::RawValue;

use crate::evidence::{
    EVIDENCE_QUERY_TOOL, EvidenceContext, EvidenceQuery, EvidenceQueryArguments, TriggerTime,
};
use crate::unique;

/// `T` read from a JSON object only: a derived struct would also take an
/// array of its fields in order, which the schema refuses.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for Members<T> {
            type Value = T;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }

        deserializer
            .deserialize_map(Members(PhantomData))
            .map(Object)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments<'a> {
    #[serde(borrow)]
    query: Object<Query<'a>>,
    #[serde(borrow)]
    context: Object<Context<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Query<'a> {
    #[serde(borrow)]
    provider_id: Cow<'a, str>,
    #[serde(borrow)]
    check_id: Cow<'a, str>,
    /// Kept raw: read by the duplicate-refusing parse, as the full path does.
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Context<'a> {
    #[serde(deserialize_with = "integer_id")]
    tenant_id: NonZeroU64,
    #[serde(deserialize_with = "integer_id")]
    namespace_id: NonZeroU64,
    #[serde(borrow)]
    run_id: Cow<'a, str>,
    #[serde(borrow)]
    scenario_id: Cow<'a, str>,
    #[serde(borrow)]
    stage_id: Cow<'a, str>,
    #[serde(borrow)]
    trigger_id: Cow<'a, str>,
    #[serde(borrow)]
    trigger_time: Object<Trigger<'a>>,
    #[serde(borrow, default)]
    correlation_id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Trigger<'a> {
    /// A string (an enum would also take `{"logical": null}`).
    #[serde(borrow)]
    kind: Cow<'a, str>,
    value: i64,
}

/// The params of a `tools/call`.
#[derive(Deserialize)]
struct Call<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    arguments: Object<Arguments<'a>>,
}

/// An id written as a JSON integer >= 1 (the string form goes the full way).
fn integer_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<NonZeroU64, D::Error> {
    struct IntegerId;

    impl de::Visitor<'_> for IntegerId {
        type Value = NonZeroU64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer >= 1")
        }

        fn visit_u64<E: de::Error>(self, number: u64) -> Result<NonZeroU64, E> {
            NonZeroU64::new(number).ok_or_else(|| E::custom("zero"))
        }
    }

    deserializer.deserialize_u64(IntegerId)
}

/// `text` (the `arguments` of an `evidence_query` call) read in one typed
/// pass, or `None` when it is anything but the common, plainly valid shape
/// (then the full path decides; see the module docs).
pub(crate) fn read(text: &str) -> Option<EvidenceQueryArguments> {
    let Object(arguments) = serde_json::from_str::<Object<Arguments<'_>>>(text).ok()?;
    convert(arguments)
}

/// The params of a `tools/call` (`raw`) naming `evidence_query`, read in
/// one pass with their arguments (other members are ignored, as the full
/// path's read of `name` and `arguments` ignores them); `None` for any
/// other call or shape (then the full path decides). `max_depth` is the
/// envelope's nesting limit (the params are at level 2).
pub(crate) fn read_call(raw: &RawValue, max_depth: usize) -> Option<EvidenceQueryArguments> {
    checked::call(raw, max_depth)
        .map(|read| read.arguments)
        .or_else(|| read_call_serde(raw.get()))
}

/// [`read_call`] with `serde_json`'s typed parse: the reference the
/// hand-written reader ([`checked::call`]) is held to, and its fallback for
/// shapes it leaves (escaped member names).
pub(crate) fn read_call_serde(text: &str) -> Option<EvidenceQueryArguments> {
    let Object(call) = serde_json::from_str::<Object<Call<'_>>>(text).ok()?;
    if call.name != EVIDENCE_QUERY_TOOL {
        return None;
    }
    convert(call.arguments.0)
}

fn convert(arguments: Arguments<'_>) -> Option<EvidenceQueryArguments> {
    let Object(Query {
        provider_id,
        check_id,
        params,
    }) = arguments.query;
    // The schema's `minLength: 1`.
    if provider_id.is_empty() || check_id.is_empty() {
        return None;
    }
    let params = match params {
        None => None,
        Some(raw) => match unique::from_str(raw.get()).ok()? {
            serde_json::Value::Null => None,
            value => Some(value),
        },
    };
    let Object(context) = arguments.context;
    let Object(trigger) = context.trigger_time;
    let trigger_time = match &*trigger.kind {
        "unix_millis" => TriggerTime::UnixMillis(trigger.value),
        "logical" => TriggerTime::Logical(trigger.value),
        _ => return None,
    };
    Some(EvidenceQueryArguments {
        query: EvidenceQuery {
            provider_id: String::from(provider_id),
            check_id: String::from(check_id),
            params,
        },
        context: EvidenceContext {
            tenant_id: context.tenant_id,
            namespace_id: context.namespace_id,
            run_id: String::from(context.run_id),
            scenario_id: String::from(context.scenario_id),
            stage_id: String::from(context.stage_id),
            trigger_id: String::from(context.trigger_id),
            trigger_time,
            correlation_id: context.correlation_id.map(String::from),
        },
    })
}

pub(crate) mod checked;

#[cfg(test)]
mod tests {
    use super::read;

    const USUAL: &str = r#"{"query":{"provider_id":"p","check_id":"time_now"},"context":{"tenant_id":1,"namespace_id":2,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000},"correlation_id":null}}"#;

    /// The shortcut is taken for the shape callers send (else the
    /// differential test in `core/tests/it/server_arguments.rs` would
    /// compare the full path with itself).
    #[test]
    fn the_usual_shape_takes_the_shortcut() {
        let arguments = read(USUAL).expect("the shortcut reads it");
        assert_eq!(arguments.query.check_id, "time_now");
        assert_eq!(arguments.context.namespace_id.get(), 2);
    }

    /// What the schema or the typed read might word differently is left
    /// to the full path.
    #[test]
    fn anything_unusual_is_left_to_the_full_path() {
        for (from, to) in [
            (r#""check_id""#, r#""predicate""#),
            (r#""tenant_id":1"#, r#""tenant_id":"1""#),
            (r#""tenant_id":1"#, r#""tenant_id":0"#),
            (r#""tenant_id":1"#, r#""tenant_id":1.0"#),
            (r#""provider_id":"p""#, r#""provider_id":"""#),
            (
                r#""provider_id":"p""#,
                r#""provider_id":"p","provider_id":"p""#,
            ),
            (r#""kind":"unix_millis""#, r#""kind":{"unix_millis":null}"#),
            (r#""kind":"unix_millis""#, r#""kind":"Unix_millis""#),
            (
                r#"{"kind":"unix_millis","value":1710000000000}"#,
                r#"["unix_millis",1]"#,
            ),
            (r#""correlation_id":null"#, r#""correlation_id":null,"x":1"#),
            (
                r#"{"provider_id":"p","check_id":"time_now"}"#,
                r#"["p","time_now"]"#,
            ),
            (
                r#""check_id":"time_now""#,
                r#""check_id":"time_now","params":{"a":1,"a":2}"#,
            ),
        ] {
            let text = USUAL.replacen(from, to, 1);
            assert_ne!(text, USUAL, "{from} is in the sample");
            assert!(read(&text).is_none(), "{text}");
        }
    }
}
