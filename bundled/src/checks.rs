//! The table of checks: the one place the bundled provider's check ids,
//! descriptions, params and result types, comparators, determinism,
//! examples and where each check runs are written.
//!
//! [`table`] declares the provider with the SDK: one typed [`Check`] per
//! check id. Everything else is generated from it: the capabilities
//! contract (`evidence-wire contract`, checked against a golden file and
//! Decision Gate's rules in `tests/it/contract.rs`), the `tools/list` schema,
//! the table of checks in `spec/bundled-provider.md` (checked in
//! `tests/it/docs.rs`) and the CLI's help ([`crate::BundledProvider::checks_help`]).
//!
//! Params and result schemas are derived from the types below (`schemars`,
//! bounds as schemars attributes); the comparators are the SDK's defaults
//! for each result type, which are Decision Gate's rules and equal the
//! lists of the built-ins each check stands for (reference/wire-facts.md
//! §5): `time_now` = `time.now`, `time_after`/`time_before` =
//! `time.after`/`time.before`, `env_get` = `env.get`, `json_path` =
//! `json.path` (all sixteen, a dynamic result type), `http_status` =
//! `http.status`, `http_body_hash` = `http.body_hash`; `file_size` has no
//! built-in and gets what strict validation allows for an integer.
//!
//! Where checks run: the clock and environment checks are `.inline()` (no
//! I/O); the file and HTTP checks on the adapter's blocking pool, and
//! `json_path` hands its document to the provider's own bounded pool
//! ([`crate::pool`]).
//!
//! The types here are the checks' params as the server reads them after
//! validating against the derived schema: none of them bounds memory by
//! itself (the frame limits did that before the query arrived).

use std::fmt;
use std::sync::Arc;

use evidence_wire_provider::{Check, CheckContext, Determinism, Provider};
use schemars::JsonSchema;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::jsonpath::MAX_JSONPATH_CHARS;
use crate::{Inner, env, files, time};

/// The provider's display name in its contract.
const NAME: &str = "evidence-wire bundled provider";

/// The provider's description in its contract.
const DESCRIPTION: &str =
    "Time, environment and file checks equivalent to Decision Gate's built-in providers.";

/// The anchor type of the file checks.
const FILE_ANCHOR: &str = "file_path_rooted";

/// The bundled provider under `inner`'s configuration: its id, its notes and
/// its eight checks.
pub(crate) fn table(inner: &Arc<Inner>) -> Provider {
    let env_inner = Arc::clone(inner);
    let json_inner = Arc::clone(inner);
    let size_inner = Arc::clone(inner);
    let status_inner = Arc::clone(inner);
    let hash_inner = Arc::clone(inner);
    Provider::new(inner.config.provider_id.clone(), DESCRIPTION)
        .name(NAME)
        .note("Time checks read trigger_time from the query context, never the wall clock.")
        .note("File checks read only under the configured root; env_get reads only allow-listed keys.")
        .note(format!(
            "json_path expressions are at most {MAX_JSONPATH_CHARS} characters; results are bounded in nodes and bytes (size_limit_exceeded)."
        ))
        .check(
            Check::new(
                "time_now",
                "The trigger time of the query, in unix milliseconds.",
                time::time_now,
            )
            .determinism(Determinism::TimeDependent)
            .inline()
            .example(
                "trigger time 1710000000000",
                json!({}),
                json!(1_710_000_000_000_i64),
            ),
        )
        .check(
            Check::new(
                "time_after",
                "Whether the trigger time is after params.timestamp.",
                |params: TimestampParams, context: &CheckContext| {
                    time::compare_time(context, params.timestamp, true)
                },
            )
            .determinism(Determinism::TimeDependent)
            .inline()
            .example(
                "after 2024-01-01",
                json!({"timestamp": "2024-01-01T00:00:00Z"}),
                json!(true),
            ),
        )
        .check(
            Check::new(
                "time_before",
                "Whether the trigger time is before params.timestamp.",
                |params: TimestampParams, context: &CheckContext| {
                    time::compare_time(context, params.timestamp, false)
                },
            )
            .determinism(Determinism::TimeDependent)
            .inline()
            .example(
                "before 2030-01-01",
                json!({"timestamp": 1_893_456_000_000_i64}),
                json!(true),
            ),
        )
        .check(
            Check::new(
                "env_get",
                "The value of an allow-listed environment variable.",
                move |params: Key, _: &CheckContext| env::env_get(&env_inner.config.env, &params.key),
            )
            .inline()
            .example("DEPLOY_ENV", json!({"key": "DEPLOY_ENV"}), json!("production")),
        )
        .check(
            Check::new(
                "json_path",
                "A JSON file under the evidence root, or the nodes an RFC 9535 JSONPath selects in it.",
                move |params: JsonPathParams, context: &CheckContext| {
                    files::json_path(&json_inner, &params, context)
                },
            )
            .anchor_types([FILE_ANCHOR])
            .example(
                "status field of report.json",
                json!({"file": "report.json", "jsonpath": "$.status"}),
                json!("approved"),
            ),
        )
        .check(
            Check::new(
                "file_size",
                "The size in bytes of a file under the evidence root.",
                move |params: FilePath, context: &CheckContext| {
                    files::file_size(&size_inner.root, &params.path, context)
                },
            )
            .anchor_types([FILE_ANCHOR])
            .example("size of report.json", json!({"path": "report.json"}), json!(1024)),
        )
        .check(
            Check::new(
                "http_status",
                "The HTTP status of a GET of params.url (https, allow-listed host and port, no redirects followed).",
                move |params: Url, context: &CheckContext| {
                    crate::http_status(&status_inner, &params.url, context)
                },
            )
            .example(
                "health endpoint answers 200",
                json!({"url": "https://status.example.com/healthz"}),
                json!(200),
            ),
        )
        .check(
            Check::new(
                "http_body_hash",
                "The SHA-256 of the body of a 2xx GET of params.url (https, allow-listed host and port, no redirects followed).",
                move |params: Url, context: &CheckContext| {
                    crate::http_body_hash(&hash_inner, &params.url, context)
                },
            )
            .example(
                "release manifest unchanged",
                json!({"url": "https://releases.example.com/manifest.json"}),
                json!({"algorithm": "sha256", "value": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}),
            ),
        )
}

// The params and result types below derive the contract's schemas: their
// comments are `//` on purpose (a doc comment would become a schema
// `description`).

// Params of `time_after` and `time_before`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimestampParams {
    pub(crate) timestamp: Timestamp,
}

/// A point in time as a query gives it: unix milliseconds, or an RFC 3339
/// date-time checked by [`time`] (the grammar is stricter than a type can
/// say). A number without a fractional part is an integer however it is
/// written (`1000.0`, `1e3`), as JSON Schema says. Any other JSON (a
/// fraction, an integer beyond 64 bits, an object) does not read as one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Timestamp {
    /// Unix milliseconds.
    UnixMillis(i64),
    /// An RFC 3339 date-time, not checked yet.
    Text(String),
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TimestampVisitor;

        impl Visitor<'_> for TimestampVisitor {
            type Value = Timestamp;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("unix milliseconds (an integer) or an RFC 3339 date-time string")
            }

            fn visit_i64<E: de::Error>(self, millis: i64) -> Result<Timestamp, E> {
                Ok(Timestamp::UnixMillis(millis))
            }

            fn visit_u64<E: de::Error>(self, millis: u64) -> Result<Timestamp, E> {
                i64::try_from(millis)
                    .map(Timestamp::UnixMillis)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(millis), &self))
            }

            // JSON Schema calls a number without a fractional part an
            // integer however it is written (`1000.0`, `1e3`), and so the
            // params schema lets it through: read it as that integer.
            // Both read the same `f64` (serde_json's), so they agree on
            // which numbers are integers.
            fn visit_f64<E: de::Error>(self, number: f64) -> Result<Timestamp, E> {
                // -2^63 and 2^63 (exact in an f64).
                const LOW: f64 = -9_223_372_036_854_775_808.0;
                const HIGH: f64 = 9_223_372_036_854_775_808.0;
                if number.fract() != 0.0 || !number.is_finite() {
                    return Err(E::invalid_type(de::Unexpected::Float(number), &self));
                }
                if !(LOW..HIGH).contains(&number) {
                    return Err(E::invalid_value(de::Unexpected::Float(number), &self));
                }
                // A whole number within the i64 range: the cast is exact.
                Ok(Timestamp::UnixMillis(number as i64))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Timestamp, E> {
                Ok(Timestamp::Text(text.to_owned()))
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<Timestamp, E> {
                Ok(Timestamp::Text(text))
            }
        }

        deserializer.deserialize_any(TimestampVisitor)
    }
}

impl JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": ["integer", "string"],
            "description": "unix milliseconds or RFC 3339"
        })
    }
}

// Params of `env_get`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Key {
    #[schemars(length(min = 1))]
    pub(crate) key: String,
}

// Params of `json_path`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct JsonPathParams {
    #[schemars(length(min = 1))]
    pub(crate) file: String,
    // Absent (or, from a caller that skipped the schema, `null`): the
    // whole document. The schema says `string`: a server refuses `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", length(max = MAX_JSONPATH_CHARS))]
    pub(crate) jsonpath: Option<String>,
}

// Params of `file_size`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilePath {
    #[schemars(length(min = 1))]
    pub(crate) path: String,
}

// Params of `http_status` and `http_body_hash`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Url {
    #[schemars(length(min = 1, max = 2048))]
    pub(crate) url: String,
}

/// The value `json_path` answers: JSON already written within the limits
/// (compact, bounded in bytes and depth by [`crate::jsonpath::encode`]).
/// Its type depends on the file, so the result schema is Decision Gate's
/// dynamic form.
pub(crate) struct SelectedJson(pub(crate) Box<RawValue>);

impl Serialize for SelectedJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl JsonSchema for SelectedJson {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SelectedJson".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // No type: the SDK marks it `"x-decision-gate": {"dynamic_type": true}`.
        schemars::json_schema!({"description": "The selected JSON value (dynamic JSON type)."})
    }
}

// The value `http_status` answers.
#[derive(Serialize, JsonSchema)]
#[serde(transparent)]
pub(crate) struct HttpStatus(#[schemars(range(min = 100, max = 999))] pub(crate) u16);

// The value `http_body_hash` answers.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BodyHash {
    pub(crate) algorithm: HashAlgorithm,
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub(crate) value: String,
}

// The digest algorithm of `BodyHash`.
#[derive(Serialize, JsonSchema)]
#[schemars(inline)]
pub(crate) enum HashAlgorithm {
    #[serde(rename = "sha256")]
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Sha256,
}
