//! The bundled provider's capabilities contract: one table of checks, with
//! params and result schemas, comparators and examples.
//!
//! The comparators of each check are those of the equivalent Decision Gate
//! built-in (reference/wire-facts.md §5): `time_now` = `time.now`,
//! `time_after`/`time_before` = `time.after`/`time.before`, `env_get` =
//! `env.get`, `json_path` = `json.path` (all sixteen), `http_status` =
//! `http.status`, `http_body_hash` = `http.body_hash`. `file_size` has no
//! built-in; it answers an integer and gets what Decision Gate's strict
//! validation allows for an integer result (the same list as `time.now`).
//! Every `result_schema` passes Decision Gate's strict rule (a `type`, an
//! `enum`, or `x-decision-gate.dynamic_type`); `json_path`'s is the
//! built-in's own dynamic form.

use evidence_wire::contract::{
    CheckContract, CheckExample, Comparator, ContractTransport, Determinism, ProviderContract,
};
use serde_json::json;

use crate::jsonpath::MAX_JSONPATH_CHARS;

/// The bundled provider's capabilities contract under `provider_id`.
pub(crate) fn contract_of(provider_id: &str) -> ProviderContract {
    ProviderContract {
        provider_id: provider_id.to_owned(),
        name: "evidence-wire bundled provider".to_owned(),
        description: "Time, environment and file checks equivalent to Decision Gate's built-in providers.".to_owned(),
        transport: ContractTransport::Mcp,
        config_schema: json!({"type": "object"}),
        checks: check_contracts(),
        notes: vec![
            "Time checks read trigger_time from the query context, never the wall clock.".to_owned(),
            "File checks read only under the configured root; env_get reads only allow-listed keys.".to_owned(),
            format!("json_path expressions are at most {MAX_JSONPATH_CHARS} characters; results are bounded in nodes and bytes (size_limit_exceeded)."),
        ],
    }
}

fn check_contracts() -> Vec<CheckContract> {
    use Comparator::*;
    // Decision Gate's comparators for an integer result (time.now, http.status).
    let integer = vec![
        Equals,
        NotEquals,
        GreaterThan,
        GreaterThanOrEqual,
        LessThan,
        LessThanOrEqual,
        InSet,
        Exists,
        NotExists,
    ];
    // time.after / time.before (a boolean result).
    let boolean = vec![Equals, NotEquals, InSet, Exists, NotExists];
    let timestamp_schema = json!({
        "type": "object",
        "properties": {"timestamp": {"type": ["integer", "string"], "description": "unix milliseconds or RFC 3339"}},
        "required": ["timestamp"],
        "additionalProperties": false
    });
    let anchor = vec!["file_path_rooted".to_owned()];
    let url_schema = json!({
        "type": "object",
        "properties": {"url": {"type": "string", "minLength": 1, "maxLength": 2048}},
        "required": ["url"],
        "additionalProperties": false
    });
    let json_type = vec!["application/json".to_owned()];
    vec![
        CheckContract {
            check_id: "time_now".to_owned(),
            description: "The trigger time of the query, in unix milliseconds.".to_owned(),
            determinism: Determinism::TimeDependent,
            params_required: false,
            params_schema: json!({"type": "object", "additionalProperties": false}),
            result_schema: json!({"type": "integer"}),
            allowed_comparators: integer.clone(),
            anchor_types: vec![],
            content_types: json_type.clone(),
            examples: vec![CheckExample {
                description: "trigger time 1710000000000".to_owned(),
                params: json!({}),
                result: json!(1_710_000_000_000_i64),
            }],
        },
        CheckContract {
            check_id: "time_after".to_owned(),
            description: "Whether the trigger time is after params.timestamp.".to_owned(),
            determinism: Determinism::TimeDependent,
            params_required: true,
            params_schema: timestamp_schema.clone(),
            result_schema: json!({"type": "boolean"}),
            allowed_comparators: boolean.clone(),
            anchor_types: vec![],
            content_types: json_type.clone(),
            examples: vec![CheckExample {
                description: "after 2024-01-01".to_owned(),
                params: json!({"timestamp": "2024-01-01T00:00:00Z"}),
                result: json!(true),
            }],
        },
        CheckContract {
            check_id: "time_before".to_owned(),
            description: "Whether the trigger time is before params.timestamp.".to_owned(),
            determinism: Determinism::TimeDependent,
            params_required: true,
            params_schema: timestamp_schema,
            result_schema: json!({"type": "boolean"}),
            allowed_comparators: boolean,
            anchor_types: vec![],
            content_types: json_type.clone(),
            examples: vec![CheckExample {
                description: "before 2030-01-01".to_owned(),
                params: json!({"timestamp": 1_893_456_000_000_i64}),
                result: json!(true),
            }],
        },
        CheckContract {
            check_id: "env_get".to_owned(),
            description: "The value of an allow-listed environment variable.".to_owned(),
            determinism: Determinism::External,
            params_required: true,
            params_schema: json!({
                "type": "object",
                "properties": {"key": {"type": "string", "minLength": 1}},
                "required": ["key"],
                "additionalProperties": false
            }),
            result_schema: json!({"type": "string"}),
            allowed_comparators: vec![Equals, NotEquals, Contains, InSet, Exists, NotExists],
            anchor_types: vec![],
            content_types: json_type.clone(),
            examples: vec![CheckExample {
                description: "DEPLOY_ENV".to_owned(),
                params: json!({"key": "DEPLOY_ENV"}),
                result: json!("production"),
            }],
        },
        CheckContract {
            check_id: "json_path".to_owned(),
            description: "A JSON file under the evidence root, or the nodes an RFC 9535 JSONPath selects in it.".to_owned(),
            determinism: Determinism::External,
            params_required: true,
            params_schema: json!({
                "type": "object",
                "properties": {
                    "file": {"type": "string", "minLength": 1},
                    "jsonpath": {"type": "string", "maxLength": MAX_JSONPATH_CHARS}
                },
                "required": ["file"],
                "additionalProperties": false
            }),
            result_schema: json!({
                "description": "The selected JSON value (dynamic JSON type).",
                "x-decision-gate": {"dynamic_type": true}
            }),
            allowed_comparators: Comparator::ALL.to_vec(),
            anchor_types: anchor.clone(),
            content_types: json_type.clone(),
            examples: vec![CheckExample {
                description: "status field of report.json".to_owned(),
                params: json!({"file": "report.json", "jsonpath": "$.status"}),
                result: json!("approved"),
            }],
        },
        CheckContract {
            check_id: "file_size".to_owned(),
            description: "The size in bytes of a file under the evidence root.".to_owned(),
            determinism: Determinism::External,
            params_required: true,
            params_schema: json!({
                "type": "object",
                "properties": {"path": {"type": "string", "minLength": 1}},
                "required": ["path"],
                "additionalProperties": false
            }),
            result_schema: json!({"type": "integer", "minimum": 0}),
            allowed_comparators: integer.clone(),
            anchor_types: anchor,
            content_types: json_type.clone(),
            examples: vec![CheckExample {
                description: "size of report.json".to_owned(),
                params: json!({"path": "report.json"}),
                result: json!(1024),
            }],
        },
        CheckContract {
            check_id: "http_status".to_owned(),
            description: "The HTTP status of a GET of params.url (https, allow-listed host and port, no redirects followed).".to_owned(),
            determinism: Determinism::External,
            params_required: true,
            params_schema: url_schema.clone(),
            result_schema: json!({"type": "integer", "minimum": 100, "maximum": 999}),
            allowed_comparators: integer,
            anchor_types: vec![],
            content_types: json_type.clone(),
            examples: vec![CheckExample {
                description: "health endpoint answers 200".to_owned(),
                params: json!({"url": "https://status.example.com/healthz"}),
                result: json!(200),
            }],
        },
        CheckContract {
            check_id: "http_body_hash".to_owned(),
            description: "The SHA-256 of the body of a 2xx GET of params.url (https, allow-listed host and port, no redirects followed).".to_owned(),
            determinism: Determinism::External,
            params_required: true,
            params_schema: url_schema,
            result_schema: json!({
                "type": "object",
                "properties": {
                    "algorithm": {"const": "sha256"},
                    "value": {"type": "string", "pattern": "^[0-9a-f]{64}$"}
                },
                "required": ["algorithm", "value"],
                "additionalProperties": false
            }),
            allowed_comparators: vec![Exists, NotExists],
            anchor_types: vec![],
            content_types: json_type,
            examples: vec![CheckExample {
                description: "release manifest unchanged".to_owned(),
                params: json!({"url": "https://releases.example.com/manifest.json"}),
                result: json!({"algorithm": "sha256", "value": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}),
            }],
        },
    ]
}
