//! The bundled evidence provider of evidence-wire: checks equivalent to
//! Decision Gate's built-ins, served by `evidence-wire serve`.
//!
//! `time_now`, `time_after`, `time_before` read the query's `trigger_time`
//! (never the wall clock); `env_get` reads an allow-listed environment
//! variable; `json_path` and `file_size` read a file under the configured
//! root. Expected failures (a missing file, a denied key, bad params) come
//! back as an `EvidenceResult` carrying an error, never as a JSON-RPC error.
//!
//! `http_status` and `http_body_hash` GET an allow-listed `https` URL
//! (`http` only when allowed) without following redirects.
//!
//! The checks are declared once, as a capabilities contract
//! ([`BundledProvider::server_contract`]), and registered with the core
//! server through [`ServerConfig::with_contract`]
//! ([`BundledProvider::install`]): the server derives `tools/list` from it,
//! refuses an unknown check, another provider's id or params outside the
//! check's `params_schema` before the provider is called, and the same
//! contract is what `evidence-wire contract` prints. This module only
//! dispatches the queries that passed.
//!
//! Limits: files larger than `max_file_bytes` are refused before reading;
//! environment values larger than `max_value_bytes` are refused; paths that
//! leave the root (`..`, absolute paths, symlinks pointing outside) are
//! refused with `path_outside_root`; HTTP bodies are read up to
//! `max_body_bytes` and requests bounded by `timeout_ms`.
//!
//! Features: `http` (default) compiles the two HTTP checks (ureq with
//! rustls); without it they stay in the contract and answer
//! `http_unavailable`. `blocking` and `tokio` (default) implement the
//! adapters' `Handler` traits for [`BundledProvider`].

#![forbid(unsafe_code)]

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
#[cfg(feature = "http")]
use std::time::Duration;

#[cfg(feature = "http")]
use evidence_wire::canonical::Profile;
use evidence_wire::config::BundledConfig;
use evidence_wire::contract::{
    CheckContract, CheckExample, Comparator, ContractTransport, Determinism, ProviderContract,
};
#[cfg(feature = "http")]
use evidence_wire::evidence::HashDigest;
use evidence_wire::evidence::{
    EvidenceAnchor, EvidenceContext, EvidenceError, EvidenceQuery, EvidenceRef, EvidenceResult,
    EvidenceValue, TriggerTime,
};
use evidence_wire::server::{ServerConfig, ServerContract};
use serde_json::{Value, json};

/// Settings of the bundled provider.
#[derive(Clone, Debug)]
pub struct BundledSettings {
    /// The provider id reported in the contract.
    pub provider_id: String,
    /// The directory file checks read from.
    pub root: PathBuf,
    /// The root's id, used in `evidence_ref` and anchors.
    pub root_id: String,
    /// Environment variables `env_get` may read (deny by default).
    pub env_allow: Vec<String>,
    /// Largest environment value returned, in bytes.
    pub env_max_value_bytes: usize,
    /// Largest file read, in bytes.
    pub max_file_bytes: u64,
    /// Settings of the HTTP checks.
    pub http: HttpSettings,
}

/// Settings of `http_status` and `http_body_hash`.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// Hosts the checks may fetch (exact, case-insensitive); empty = none.
    pub allow_hosts: Vec<String>,
    /// Allow `http://` URLs.
    pub allow_insecure_http: bool,
    /// Budget of one request, connect to last body byte.
    pub timeout_ms: u64,
    /// Largest body read.
    pub max_body_bytes: u64,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            allow_hosts: Vec::new(),
            allow_insecure_http: false,
            timeout_ms: 5000,
            max_body_bytes: 1024 * 1024,
        }
    }
}

impl BundledSettings {
    /// The settings a validated `[bundled]` section describes.
    pub fn from_config(config: &BundledConfig) -> Self {
        BundledSettings {
            provider_id: config.provider_id.clone(),
            root: config.root.clone(),
            root_id: config.root_id.clone(),
            env_allow: config.env.allow.clone(),
            env_max_value_bytes: config.env.max_value_bytes,
            max_file_bytes: config.json.max_file_bytes,
            http: HttpSettings {
                allow_hosts: config.http.allow_hosts.clone(),
                allow_insecure_http: config.http.allow_insecure_http,
                timeout_ms: config.http.timeout_ms,
                max_body_bytes: config.http.max_body_bytes,
            },
        }
    }
}

impl Default for BundledSettings {
    fn default() -> Self {
        BundledSettings {
            provider_id: "evidence-wire".to_owned(),
            root: PathBuf::from("."),
            root_id: "evidence-root".to_owned(),
            env_allow: Vec::new(),
            env_max_value_bytes: 4096,
            max_file_bytes: 1024 * 1024,
            http: HttpSettings::default(),
        }
    }
}

/// The bundled provider.
#[derive(Clone, Debug)]
pub struct BundledProvider {
    settings: BundledSettings,
    contract: ServerContract,
}

impl BundledProvider {
    /// A provider with `settings`. Its contract is validated and the
    /// checks' params schemas compiled here, once.
    pub fn new(settings: BundledSettings) -> Result<Self, String> {
        let contract = ServerContract::new(contract_of(&settings.provider_id)).map_err(|error| {
            format!("the bundled provider's contract is refused: {error}; check [bundled] provider_id")
        })?;
        Ok(BundledProvider { settings, contract })
    }

    /// The contract the server enforces for this provider.
    pub fn server_contract(&self) -> &ServerContract {
        &self.contract
    }

    /// `config` serving this provider's contract: `tools/list`, query
    /// checks and the contract output all come from it.
    pub fn install(&self, config: ServerConfig) -> ServerConfig {
        config.with_contract(self.contract.clone())
    }

    /// Answer one query that the server already checked against the
    /// contract (check id, provider id, params schema).
    pub fn answer(&self, query: &EvidenceQuery, context: &EvidenceContext) -> EvidenceResult {
        let params = query.params.clone().unwrap_or(Value::Null);
        let outcome = match query.check_id.as_str() {
            "time_now" => Ok(time_now(context)),
            "time_after" => compare_time(context, &params, true),
            "time_before" => compare_time(context, &params, false),
            "env_get" => self.env_get(&params),
            "json_path" => self.json_path(&params),
            "file_size" => self.file_size(&params),
            "http_status" => self.http_get(&params, false),
            "http_body_hash" => self.http_get(&params, true),
            // Unreachable behind a server with this contract; answered as
            // the server would, for a caller that skipped it.
            _ => self.contract.check_query(query).and_then(|()| {
                Err(EvidenceError::new(
                    "internal_error",
                    format!(
                        "check {:?} is in the contract but not implemented",
                        query.check_id
                    ),
                ))
            }),
        };
        match outcome {
            Ok(result) => result,
            Err(error) => EvidenceResult::with_error(error),
        }
    }

    fn env_get(&self, params: &Value) -> Result<EvidenceResult, EvidenceError> {
        let key = string_param(params, "key")?;
        if !self.settings.env_allow.iter().any(|allowed| allowed == key) {
            return Err(EvidenceError::new(
                "env_key_denied",
                format!(
                    "reading {key:?} is not allowed; add it to [bundled.env] allow in the configuration"
                ),
            ));
        }
        let value = match std::env::var(key) {
            Ok(value) => value,
            Err(std::env::VarError::NotPresent) => {
                return Err(EvidenceError::new(
                    "env_not_set",
                    format!("environment variable {key:?} is not set"),
                ));
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(EvidenceError::new(
                    "env_not_unicode",
                    format!("environment variable {key:?} is not valid UTF-8"),
                ));
            }
        };
        if value.len() > self.settings.env_max_value_bytes {
            return Err(EvidenceError::new(
                "env_value_too_large",
                format!(
                    "environment variable {key:?} holds {} bytes, more than the {}-byte limit",
                    value.len(),
                    self.settings.env_max_value_bytes
                ),
            ));
        }
        json_result(&Value::from(value))
    }

    fn resolve(&self, relative: &str) -> Result<(PathBuf, String), EvidenceError> {
        let outside = || {
            EvidenceError::new(
                "path_outside_root",
                format!(
                    "{relative:?} is not inside the evidence root {:?}; give a relative path without `..`",
                    self.settings.root_id
                ),
            )
        };
        let path = Path::new(relative);
        if relative.is_empty()
            || path
                .components()
                .any(|component| !matches!(component, Component::Normal(_) | Component::CurDir))
        {
            return Err(outside());
        }
        let root = fs::canonicalize(&self.settings.root).map_err(|error| {
            EvidenceError::new(
                "root_unavailable",
                format!(
                    "the evidence root {} cannot be opened: {error}",
                    self.settings.root.display()
                ),
            )
        })?;
        let joined = root.join(path);
        let resolved = match fs::canonicalize(&joined) {
            Ok(resolved) => resolved,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(EvidenceError::new(
                    "file_not_found",
                    format!("no file {relative:?} under the evidence root"),
                ));
            }
            Err(error) => {
                return Err(EvidenceError::new(
                    "file_unreadable",
                    format!("cannot open {relative:?}: {error}"),
                ));
            }
        };
        if !resolved.starts_with(&root) {
            return Err(outside());
        }
        let display = path
            .components()
            .filter_map(|component| match component {
                Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("/");
        Ok((resolved, display))
    }

    fn read_file(&self, relative: &str) -> Result<(Vec<u8>, String), EvidenceError> {
        let (path, display) = self.resolve(relative)?;
        let metadata = fs::metadata(&path).map_err(|error| {
            EvidenceError::new(
                "file_unreadable",
                format!("cannot stat {relative:?}: {error}"),
            )
        })?;
        if !metadata.is_file() {
            return Err(EvidenceError::new(
                "not_a_file",
                format!("{relative:?} is not a regular file"),
            ));
        }
        if metadata.len() > self.settings.max_file_bytes {
            return Err(file_too_large(relative, self.settings.max_file_bytes));
        }
        let file = fs::File::open(&path).map_err(|error| {
            EvidenceError::new(
                "file_unreadable",
                format!("cannot open {relative:?}: {error}"),
            )
        })?;
        let mut bytes = Vec::new();
        // Read at most one byte past the limit, in case the file grew.
        file.take(self.settings.max_file_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|error| {
                EvidenceError::new(
                    "file_unreadable",
                    format!("cannot read {relative:?}: {error}"),
                )
            })?;
        if bytes.len() as u64 > self.settings.max_file_bytes {
            return Err(file_too_large(relative, self.settings.max_file_bytes));
        }
        Ok((bytes, display))
    }

    fn file_size(&self, params: &Value) -> Result<EvidenceResult, EvidenceError> {
        let relative = string_param(params, "path")?;
        let (path, display) = self.resolve(relative)?;
        let metadata = fs::metadata(&path).map_err(|error| {
            EvidenceError::new(
                "file_unreadable",
                format!("cannot stat {relative:?}: {error}"),
            )
        })?;
        if !metadata.is_file() {
            return Err(EvidenceError::new(
                "not_a_file",
                format!("{relative:?} is not a regular file"),
            ));
        }
        let size = metadata.len();
        let mut result = json_result(&Value::from(size))?;
        result.evidence_ref = Some(self.file_ref(&display));
        result.evidence_anchor = Some(EvidenceAnchor::file_path_rooted(
            &self.settings.root_id,
            &display,
            Some(size),
        ));
        Ok(result)
    }

    fn json_path(&self, params: &Value) -> Result<EvidenceResult, EvidenceError> {
        let relative = string_param(params, "file")?;
        let (bytes, display) = self.read_file(relative)?;
        let document: Value = serde_json::from_slice(&bytes).map_err(|error| {
            EvidenceError::new("invalid_json", format!("{relative:?} is not JSON: {error}"))
        })?;
        let value = match params.get("jsonpath").and_then(Value::as_str) {
            None => document,
            Some(expression) => {
                let path = serde_json_path::JsonPath::parse(expression).map_err(|error| {
                    EvidenceError::new(
                        "invalid_jsonpath",
                        format!("{expression:?} is not an RFC 9535 JSONPath: {error}"),
                    )
                })?;
                let nodes = path.query(&document).all();
                match nodes.as_slice() {
                    [] => {
                        return Err(EvidenceError::new(
                            "jsonpath_not_found",
                            format!("{expression:?} selects nothing in {relative:?}"),
                        ));
                    }
                    [single] => (*single).clone(),
                    many => Value::Array(many.iter().map(|node| (*node).clone()).collect()),
                }
            }
        };
        let mut result = json_result(&value)?;
        result.evidence_ref = Some(self.file_ref(&display));
        result.evidence_anchor = Some(EvidenceAnchor::file_path_rooted(
            &self.settings.root_id,
            &display,
            None,
        ));
        Ok(result)
    }

    /// `http_status` (`body == false`) and `http_body_hash` (`body == true`):
    /// one GET of `params.url`, no redirects followed.
    #[cfg(feature = "http")]
    fn http_get(&self, params: &Value, body: bool) -> Result<EvidenceResult, EvidenceError> {
        let url = string_param(params, "url")?;
        let http = &self.settings.http;
        let uri: ureq::http::Uri = url.parse().map_err(|error| {
            EvidenceError::new(
                "invalid_params",
                format!("params.url {url:?} is not a URL: {error}"),
            )
        })?;
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") if http.allow_insecure_http => {}
            Some("http") => {
                return Err(EvidenceError::new(
                    "http_insecure_refused",
                    format!(
                        "{url:?} is plain http; use https, or set [bundled.http] allow_insecure_http = true"
                    ),
                ));
            }
            _ => {
                return Err(EvidenceError::new(
                    "invalid_params",
                    format!("params.url {url:?} must be an https:// URL"),
                ));
            }
        }
        let host = uri.host().unwrap_or_default();
        if !http
            .allow_hosts
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(host))
        {
            return Err(EvidenceError::new(
                "http_host_not_allowed",
                format!(
                    "host {host:?} is not allowed; add it to [bundled.http] allow_hosts in the configuration"
                ),
            ));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .max_redirects(0)
            .max_redirects_will_error(false)
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_millis(http.timeout_ms)))
            .user_agent(concat!("evidence-wire/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let mut response = agent.get(url).call().map_err(|error| match error {
            ureq::Error::Timeout(_) => EvidenceError::new(
                "http_timeout",
                format!("GET {url} took longer than {} ms", http.timeout_ms),
            ),
            other => {
                EvidenceError::new("http_request_failed", format!("GET {url} failed: {other}"))
            }
        })?;
        let status = response.status().as_u16();
        let mut result = if body {
            if !response.status().is_success() {
                return Err(EvidenceError::new(
                    "http_status_not_success",
                    format!(
                        "GET {url} answered {status}; the body of a non-2xx answer is not hashed (redirects are not followed)"
                    ),
                ));
            }
            let bytes = response
                .body_mut()
                .with_config()
                .limit(http.max_body_bytes)
                .read_to_vec()
                .map_err(|error| match error {
                    ureq::Error::BodyExceedsLimit(_) => EvidenceError::new(
                        "http_body_too_large",
                        format!(
                            "the body of {url} is larger than the {}-byte limit",
                            http.max_body_bytes
                        ),
                    ),
                    ureq::Error::Timeout(_) => EvidenceError::new(
                        "http_timeout",
                        format!("GET {url} took longer than {} ms", http.timeout_ms),
                    ),
                    other => EvidenceError::new(
                        "http_request_failed",
                        format!("reading the body of {url} failed: {other}"),
                    ),
                })?;
            let digest: HashDigest = EvidenceValue::Bytes(bytes)
                .digest(Profile::Rfc8785)
                .map_err(|error| EvidenceError::new("internal_error", error.to_string()))?;
            let value = serde_json::to_value(&digest).map_err(|error| {
                EvidenceError::new(
                    "internal_error",
                    format!("cannot encode the digest: {error}"),
                )
            })?;
            json_result(&value)?
        } else {
            json_result(&Value::from(status))?
        };
        result.evidence_ref = Some(EvidenceRef {
            uri: url.to_owned(),
        });
        Ok(result)
    }

    /// Without the `http` feature the HTTP checks are declared but answer
    /// `http_unavailable`.
    #[cfg(not(feature = "http"))]
    fn http_get(&self, params: &Value, _body: bool) -> Result<EvidenceResult, EvidenceError> {
        let url = string_param(params, "url")?;
        Err(EvidenceError::new(
            "http_unavailable",
            format!(
                "cannot GET {url}: this build of the bundled provider has no HTTP checks (cargo feature `http`)"
            ),
        ))
    }

    fn file_ref(&self, display: &str) -> EvidenceRef {
        EvidenceRef {
            uri: format!("dg+file://{}/{}", self.settings.root_id, display),
        }
    }

    /// The capabilities contract of this provider (Decision Gate's
    /// `capabilities_path` format): the one the server enforces.
    pub fn contract(&self) -> ProviderContract {
        self.contract.contract().clone()
    }
}

/// The bundled provider's capabilities contract under `provider_id`.
fn contract_of(provider_id: &str) -> ProviderContract {
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
        ],
    }
}

#[cfg(feature = "blocking")]
impl evidence_wire_blocking::Handler for BundledProvider {
    fn evidence_query(&self, query: EvidenceQuery, context: EvidenceContext) -> EvidenceResult {
        self.answer(&query, &context)
    }

    /// The clock and environment checks compute from the context or the
    /// process environment, with no I/O: answered on the reading thread.
    /// File and HTTP checks block, and go to a worker.
    fn answer_inline(&self, query: &EvidenceQuery) -> bool {
        matches!(
            query.check_id.as_str(),
            "time_now" | "time_after" | "time_before" | "env_get"
        )
    }

    /// This provider has no tool of its own: every call gets the default
    /// refusal, an in-memory answer (the docs tools are answered by the
    /// server itself and never reach the handler).
    fn answer_tool_inline(&self, _name: &str) -> bool {
        true
    }
}

/// Over HTTP (tokio) each query runs on the blocking pool: the checks read
/// files and make blocking HTTP requests.
#[cfg(feature = "tokio")]
impl evidence_wire_tokio::Handler for BundledProvider {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
    ) -> impl std::future::Future<Output = EvidenceResult> + Send {
        let provider = self.clone();
        async move {
            tokio::task::spawn_blocking(move || provider.answer(&query, &context))
                .await
                .unwrap_or_else(|error| {
                    EvidenceResult::with_error(EvidenceError::new(
                        "internal_error",
                        format!("the check did not finish: {error}"),
                    ))
                })
        }
    }
}

fn file_too_large(relative: &str, limit: u64) -> EvidenceError {
    EvidenceError::new(
        "file_too_large",
        format!("{relative:?} is larger than the {limit}-byte limit"),
    )
}

fn json_result(value: &Value) -> Result<EvidenceResult, EvidenceError> {
    let value = EvidenceValue::json(value).map_err(|error| {
        EvidenceError::new(
            "internal_error",
            format!("cannot encode the value: {error}"),
        )
    })?;
    Ok(EvidenceResult::with_value(value))
}

fn string_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, EvidenceError> {
    params.get(name).and_then(Value::as_str).ok_or_else(|| {
        EvidenceError::new(
            "invalid_params",
            format!("params.{name} is required and must be a string"),
        )
    })
}

fn time_now(context: &EvidenceContext) -> EvidenceResult {
    let value = match context.trigger_time {
        TriggerTime::UnixMillis(millis) => Value::from(millis),
        TriggerTime::Logical(tick) => Value::from(tick),
    };
    json_result(&value).unwrap_or_else(EvidenceResult::with_error)
}

fn compare_time(
    context: &EvidenceContext,
    params: &Value,
    after: bool,
) -> Result<EvidenceResult, EvidenceError> {
    let threshold = match params.get("timestamp") {
        Some(Value::Number(number)) => number.as_i64().ok_or_else(|| {
            EvidenceError::new(
                "invalid_params",
                "params.timestamp must be an integer (unix milliseconds) or an RFC 3339 string",
            )
        })?,
        Some(Value::String(text)) => {
            let timestamp: jiff::Timestamp = text.parse().map_err(|error| {
                EvidenceError::new(
                    "invalid_params",
                    format!("params.timestamp {text:?} is not RFC 3339: {error}"),
                )
            })?;
            timestamp.as_millisecond()
        }
        _ => {
            return Err(EvidenceError::new(
                "invalid_params",
                "params.timestamp is required: unix milliseconds or an RFC 3339 string",
            ));
        }
    };
    let now = match context.trigger_time {
        TriggerTime::UnixMillis(millis) => millis,
        TriggerTime::Logical(_) => {
            return Err(EvidenceError::new(
                "unsupported_trigger_time",
                "time comparisons need a unix_millis trigger_time, not a logical one",
            ));
        }
    };
    let holds = if after {
        now > threshold
    } else {
        now < threshold
    };
    json_result(&Value::Bool(holds))
}

fn check_contracts() -> Vec<CheckContract> {
    use Comparator::*;
    let ordering = vec![
        Equals,
        NotEquals,
        GreaterThan,
        GreaterThanOrEqual,
        LessThan,
        LessThanOrEqual,
    ];
    let boolean = vec![Equals, NotEquals];
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
            allowed_comparators: ordering.clone(),
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
            allowed_comparators: boolean.clone(),
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
                    "jsonpath": {"type": "string"}
                },
                "required": ["file"],
                "additionalProperties": false
            }),
            result_schema: json!({}),
            allowed_comparators: vec![
                Equals, NotEquals, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual,
                Contains, InSet, DeepEquals, DeepNotEquals, Exists, NotExists,
            ],
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
            allowed_comparators: ordering,
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
            description: "The HTTP status of a GET of params.url (https, allow-listed host, no redirects followed).".to_owned(),
            determinism: Determinism::External,
            params_required: true,
            params_schema: url_schema.clone(),
            result_schema: json!({"type": "integer", "minimum": 100, "maximum": 999}),
            allowed_comparators: vec![Equals, NotEquals, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, InSet],
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
            description: "The SHA-256 of the body of a 2xx GET of params.url (https, allow-listed host, no redirects followed).".to_owned(),
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
            allowed_comparators: vec![Equals, NotEquals, DeepEquals, DeepNotEquals],
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
