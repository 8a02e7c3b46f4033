//! The bundled evidence provider of evidence-wire: checks equivalent to
//! Decision Gate's built-ins, served by `evidence-wire serve`.
//!
//! `time_now`, `time_after`, `time_before` read the query's `trigger_time`
//! (never the wall clock); `env_get` reads an allow-listed environment
//! variable; `json_path` and `file_size` read a file under the configured
//! root; `http_status` and `http_body_hash` GET an allow-listed `https` URL
//! (`http` only when allowed) without following redirects. Expected
//! failures (a missing file, a denied key, bad params, a limit) come back as
//! an `EvidenceResult` carrying an error, never as a JSON-RPC error and never
//! as a panic.
//!
//! The checks are declared once, as a capabilities contract
//! ([`BundledProvider::server_contract`]), and registered with the core
//! server through [`ServerConfig::with_contract`]
//! ([`BundledProvider::install`]): the server derives `tools/list` from it,
//! refuses an unknown check, another provider's id or params outside the
//! check's `params_schema` before the provider is called, and the same
//! contract is what `evidence-wire contract` prints. This crate only
//! dispatches the queries that passed (and checks again what it relies on).
//!
//! Limits (spec/bundled-provider.md and spec/security.md have the table):
//! files larger than `max_file_bytes` are refused before reading; paths that
//! leave the root (`..`, absolute paths, symlinks pointing outside) are
//! refused with `path_outside_root`; a JSON file nests at most 128 levels
//! (serde_json's own limit); a JSONPath expression is bounded in length and
//! nesting before it is parsed ([`MAX_JSONPATH_CHARS`],
//! [`MAX_JSONPATH_NESTING`]) and its evaluation cost before it runs; a
//! `json_path` value is bounded in nodes, bytes and depth while it is
//! written ([`JsonSettings`], [`MAX_RESULT_DEPTH`]); documents are parsed
//! and evaluated only on [`JsonSettings::max_concurrent`] threads of the
//! provider's own, one at a time each; environment values larger than `max_value_bytes` are refused; HTTP
//! bodies are hashed as they arrive up to `max_body_bytes`, requests are
//! bounded by `timeout_ms`, and destinations are checked by host, port and
//! resolved address ([`HttpSettings`]).
//!
//! Features: `http` (default) compiles the two HTTP checks (ureq with
//! rustls); without it they stay in the contract and answer
//! `http_unavailable`. `blocking` and `tokio` (default) implement the
//! adapters' `Handler` traits for [`BundledProvider`].

#![forbid(unsafe_code)]

mod contract;
mod files;
#[cfg(feature = "http")]
mod http;
mod jsonpath;
mod pool;
mod time;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use evidence_wire::contract::ProviderContract;
use evidence_wire::evidence::{
    EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, EvidenceValue,
};
use evidence_wire::server::{ServerConfig, ServerContract};
use evidence_wire_config::{BundledConfig, HostPattern};
use serde_json::Value;

pub use crate::jsonpath::{
    EVALUATION_COST_PER_FILE_BYTE, MAX_JSONPATH_CHARS, MAX_JSONPATH_NESTING, MAX_RESULT_DEPTH,
};

/// Settings of the bundled provider.
#[derive(Clone, Debug)]
#[non_exhaustive]
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
    /// Settings of `json_path`.
    pub json: JsonSettings,
    /// Settings of the HTTP checks.
    pub http: HttpSettings,
}

/// Settings of `json_path`: what one answer and one evaluation may cost.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct JsonSettings {
    /// Largest value, counted as compact JSON while it is written (default
    /// 256 KiB, `[bundled.json] max_result_bytes`).
    pub max_result_bytes: usize,
    /// Most nodes a JSONPath may select (default 10000,
    /// `[bundled.json] max_result_nodes`).
    pub max_result_nodes: usize,
    /// Threads that read, parse and evaluate `json_path` documents, one
    /// document each at a time; the other queries wait their turn (default
    /// 4; `evidence-wire serve` uses `--workers`).
    pub max_concurrent: usize,
    /// How long a `json_path` query waits for its turn before it is answered
    /// `provider_busy` (default 30 s).
    pub queue_timeout: Duration,
}

impl Default for JsonSettings {
    fn default() -> Self {
        JsonSettings {
            max_result_bytes: usize_from(evidence_wire_config::DEFAULT_MAX_RESULT_BYTES),
            max_result_nodes: usize_from(evidence_wire_config::DEFAULT_MAX_RESULT_NODES),
            max_concurrent: 4,
            queue_timeout: Duration::from_secs(30),
        }
    }
}

/// Settings of `http_status` and `http_body_hash`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HttpSettings {
    /// Hosts the checks may fetch, as [`HostPattern`] entries: `host` means
    /// the scheme's default port only, `host:port` that port only; empty =
    /// none.
    pub allow_hosts: Vec<String>,
    /// Allow `http://` URLs.
    pub allow_insecure_http: bool,
    /// Allow destinations whose resolved address is loopback, private,
    /// link-local, unique-local, unspecified or otherwise special-purpose.
    pub allow_private_addresses: bool,
    /// Use the proxy the environment names (`HTTPS_PROXY`, `HTTP_PROXY`,
    /// `ALL_PROXY`, lower case too); otherwise connect directly.
    pub use_env_proxy: bool,
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
            allow_private_addresses: false,
            use_env_proxy: false,
            timeout_ms: 5000,
            max_body_bytes: 1024 * 1024,
        }
    }
}

fn usize_from(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
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
            json: JsonSettings {
                max_result_bytes: usize_from(config.json.max_result_bytes),
                max_result_nodes: usize_from(config.json.max_result_nodes),
                ..JsonSettings::default()
            },
            http: HttpSettings {
                allow_hosts: config.http.allow_hosts.clone(),
                allow_insecure_http: config.http.allow_insecure_http,
                allow_private_addresses: config.http.allow_private_addresses,
                use_env_proxy: config.http.use_env_proxy,
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
            json: JsonSettings::default(),
            http: HttpSettings::default(),
        }
    }
}

/// The bundled provider. Cloning is cheap and clones share the
/// `json_path` threads.
#[derive(Clone, Debug)]
pub struct BundledProvider {
    inner: Arc<Inner>,
    contract: ServerContract,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) settings: BundledSettings,
    /// `allow_hosts`, parsed once.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) hosts: Vec<HostPattern>,
    /// The threads that hold `json_path` documents.
    pub(crate) pool: pool::Pool,
}

impl BundledProvider {
    /// A provider with `settings`. Its contract is validated and the
    /// checks' params schemas compiled here, once; the settings are
    /// checked (an `allow_hosts` entry that does not parse, a zero limit).
    pub fn new(settings: BundledSettings) -> Result<Self, String> {
        let contract = ServerContract::new(contract::contract_of(&settings.provider_id)).map_err(
            |error| {
                format!(
                    "the bundled provider's contract is refused: {error}; check [bundled] provider_id"
                )
            },
        )?;
        let mut hosts = Vec::with_capacity(settings.http.allow_hosts.len());
        for (index, entry) in settings.http.allow_hosts.iter().enumerate() {
            hosts.push(
                HostPattern::parse(entry)
                    .map_err(|message| format!("bundled.http.allow_hosts[{index}]: {message}"))?,
            );
        }
        let json = &settings.json;
        if json.max_result_bytes == 0 || json.max_result_nodes == 0 || json.max_concurrent == 0 {
            return Err(
                "bundled json settings: max_result_bytes, max_result_nodes and max_concurrent must be at least 1"
                    .to_owned(),
            );
        }
        let pool = pool::Pool::new(json.max_concurrent);
        Ok(BundledProvider {
            inner: Arc::new(Inner {
                settings,
                hosts,
                pool,
            }),
            contract,
        })
    }

    /// The settings this provider runs with.
    pub fn settings(&self) -> &BundledSettings {
        &self.inner.settings
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

    /// The capabilities contract of this provider (Decision Gate's
    /// `capabilities_path` format): the one the server enforces.
    pub fn contract(&self) -> ProviderContract {
        self.contract.contract().clone()
    }

    /// Answer one query that the server already checked against the
    /// contract (check id, provider id, params schema). Never panics on
    /// the query's content: every failure is an `EvidenceResult` error.
    pub fn answer(&self, query: &EvidenceQuery, context: &EvidenceContext) -> EvidenceResult {
        let empty = Value::Null;
        let params = query.params.as_ref().unwrap_or(&empty);
        let settings = &self.inner.settings;
        let outcome = match query.check_id.as_str() {
            "time_now" => Ok(time::time_now(context)),
            "time_after" => time::compare_time(context, params, true),
            "time_before" => time::compare_time(context, params, false),
            "env_get" => self.env_get(params),
            "json_path" => return files::json_path(&self.inner, params),
            "file_size" => files::file_size(settings, params),
            "http_status" => self.http_get(params, false),
            "http_body_hash" => self.http_get(params, true),
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
        let settings = &self.inner.settings;
        let key = string_param(params, "key")?;
        if !settings.env_allow.iter().any(|allowed| allowed == key) {
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
        if value.len() > settings.env_max_value_bytes {
            return Err(EvidenceError::new(
                "env_value_too_large",
                format!(
                    "environment variable {key:?} holds {} bytes, more than the {}-byte limit",
                    value.len(),
                    settings.env_max_value_bytes
                ),
            ));
        }
        json_result(&Value::from(value))
    }

    /// `http_status` (`body == false`) and `http_body_hash` (`body == true`).
    #[cfg(feature = "http")]
    fn http_get(&self, params: &Value, body: bool) -> Result<EvidenceResult, EvidenceError> {
        http::http_get(&self.inner.settings.http, &self.inner.hosts, params, body)
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

/// A successful result holding `value` as JSON.
fn json_result(value: &Value) -> Result<EvidenceResult, EvidenceError> {
    let value = EvidenceValue::json(value).map_err(|error| {
        EvidenceError::new(
            "internal_error",
            format!("cannot encode the value: {error}"),
        )
    })?;
    Ok(EvidenceResult::with_value(value))
}

/// `params.<name>` as a string, or `invalid_params`.
fn string_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, EvidenceError> {
    params.get(name).and_then(Value::as_str).ok_or_else(|| {
        EvidenceError::new(
            "invalid_params",
            format!("params.{name} is required and must be a string"),
        )
    })
}
