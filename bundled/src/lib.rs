//! The bundled evidence provider of evidence-wire: checks equivalent to
//! Decision Gate's built-ins, served by `evidence-wire serve`, built on the
//! provider SDK ([`evidence_wire_provider`]).
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
//! ```
//! use evidence_wire_config::BundledConfig;
//! use evidence_wire_bundled::BundledProvider;
//!
//! let mut config = BundledConfig::default();
//! config.root = "evidence".into();
//! let provider = BundledProvider::new(&config).expect("a valid [bundled] section");
//! assert_eq!(provider.contract().checks.len(), 8);
//! // Serve it with an adapter: `provider.into_service()` (evidence_wire_provider::IntoService).
//! ```
//!
//! The checks are declared once, as a table of typed SDK checks (the
//! `checks` module): the capabilities contract
//! ([`BundledProvider::contract`], what `evidence-wire contract` prints), the
//! `tools/list` schema, the check table of `spec/bundled-provider.md` and
//! the CLI's help ([`BundledProvider::checks_help`]) all come from it. A
//! server with the contract installed ([`BundledProvider::install`], or
//! [`IntoService`]) refuses an unknown check, another provider's id or
//! params outside the check's `params_schema` before a check runs.
//!
//! The provider takes the `[bundled]` configuration section as it is
//! ([`BundledConfig`]; its defaults are the only ones) plus how many threads
//! hold `json_path` documents ([`JsonPool`], `serve --workers`).
//!
//! Limits (spec/bundled-provider.md and spec/security.md have the table):
//! files larger than `max_file_bytes` are refused before reading; paths that
//! leave the root (`..`, absolute paths, symlinks pointing outside) are
//! refused with `path_outside_root`; a JSON file nests at most 128 levels
//! (serde_json's own limit); a JSONPath expression is bounded in length and
//! nesting before it is parsed ([`MAX_JSONPATH_CHARS`],
//! [`MAX_JSONPATH_NESTING`]) and its evaluation cost before it runs; a
//! `json_path` value is bounded in nodes, bytes and depth while it is
//! written (`[bundled.json]`, [`MAX_RESULT_DEPTH`]); documents are parsed
//! and evaluated only on the [`JsonPool`]'s threads, one at a time each;
//! environment values larger than `max_value_bytes` are refused; HTTP
//! bodies are hashed as they arrive up to `max_body_bytes`, requests are
//! bounded by `timeout_ms`, and destinations are checked by host, port and
//! resolved address (`[bundled.http]`).
//!
//! Features: `http` (default) compiles the two HTTP checks (ureq with
//! rustls); without it they stay in the contract and answer
//! `http_unavailable`.
//!
//! [`BundledProvider`] is an [`evidence_wire_provider::Handler`], so every
//! adapter serves it: the clock and environment checks are answered where
//! the query is read, the file and HTTP checks on the adapter's blocking
//! pool.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod checks;
mod env;
mod files;
#[cfg(feature = "http")]
mod http;
mod jsonpath;
mod pool;
mod time;

use std::sync::Arc;
use std::time::Duration;

use evidence_wire::contract::ProviderContract;
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult};
use evidence_wire::server::{ServerConfig, ServerContract};
use evidence_wire_config::HostPattern;
use evidence_wire_provider::{
    Answer, Check, CheckContext, CheckError, EvidenceRoot, Handler, IntoService, Provider,
    ServeError, Service,
};

pub use crate::jsonpath::{
    EVALUATION_COST_PER_FILE_BYTE, MAX_JSONPATH_CHARS, MAX_JSONPATH_NESTING, MAX_RESULT_DEPTH,
};
/// The `[bundled]` configuration section the provider is built from
/// (re-exported from `evidence-wire-config`).
pub use evidence_wire_config::BundledConfig;

/// The threads that read, parse and evaluate `json_path` documents: how
/// many (each holds one document at a time; the other queries wait their
/// turn) and how long a query waits for one before it is answered
/// `provider_busy`.
///
/// Not part of `[bundled]`: `evidence-wire serve` uses `--workers`, so that
/// as many documents are in memory as there are workers answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsonPool {
    threads: usize,
    queue_timeout: Duration,
}

impl JsonPool {
    /// The default number of document threads.
    pub const DEFAULT_THREADS: usize = 4;
    /// The default wait for a document thread.
    pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(30);

    /// `threads` document threads (at least 1) and the default wait.
    pub fn new(threads: usize) -> Self {
        JsonPool {
            threads,
            queue_timeout: Self::DEFAULT_QUEUE_TIMEOUT,
        }
    }

    /// The same pool with another wait for a thread.
    pub fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.queue_timeout = timeout;
        self
    }

    /// The number of document threads.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Default for JsonPool {
    fn default() -> Self {
        JsonPool::new(Self::DEFAULT_THREADS)
    }
}

/// The bundled provider: the SDK [`Provider`] of the check table, under a
/// `[bundled]` configuration. Cloning is cheap and clones share the
/// `json_path` threads.
#[derive(Clone, Debug)]
pub struct BundledProvider {
    inner: Arc<Inner>,
    provider: Provider,
    contract: ServerContract,
}

/// What the checks share: the configuration, the parsed host allow-list and
/// the document threads.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: BundledConfig,
    /// `root` as the SDK's evidence root (opened by the first query that
    /// needs it), named `root_id`, reading at most `json.max_file_bytes`.
    pub(crate) root: EvidenceRoot,
    /// `[bundled.http] allow_hosts`, parsed once.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) hosts: Vec<HostPattern>,
    /// The threads that hold `json_path` documents.
    pub(crate) pool: pool::Pool,
    /// How long a `json_path` query waits for a document thread.
    pub(crate) queue_timeout: Duration,
}

impl BundledProvider {
    /// The provider `config` describes, with the default [`JsonPool`].
    ///
    /// Fails, saying what to change, when the section is unusable: an
    /// `allow_hosts` entry that does not parse, a zero `json` limit, or a
    /// `provider_id` under which the contract is invalid or breaks one of
    /// Decision Gate's rules (e.g. a built-in's name such as `time`).
    pub fn new(config: &BundledConfig) -> Result<Self, String> {
        BundledProvider::with_json_pool(config, JsonPool::default())
    }

    /// The provider `config` describes, its `json_path` documents held by
    /// `pool`. The contract is generated, validated and compiled here, once.
    pub fn with_json_pool(config: &BundledConfig, pool: JsonPool) -> Result<Self, String> {
        let mut hosts = Vec::with_capacity(config.http.allow_hosts.len());
        for (index, entry) in config.http.allow_hosts.iter().enumerate() {
            hosts.push(
                HostPattern::parse(entry)
                    .map_err(|message| format!("bundled.http.allow_hosts[{index}]: {message}"))?,
            );
        }
        let json = &config.json;
        if json.max_result_bytes == 0 || json.max_result_nodes == 0 || pool.threads == 0 {
            return Err(
                "bundled json settings: max_result_bytes, max_result_nodes and the number of json_path threads must be at least 1"
                    .to_owned(),
            );
        }
        let root = EvidenceRoot::deferred(&config.root)
            .with_id(config.root_id.clone())
            .map_err(|error| format!("bundled.root_id: {error}"))?
            .with_max_file_bytes(json.max_file_bytes);
        let inner = Arc::new(Inner {
            config: config.clone(),
            root,
            hosts,
            pool: pool::Pool::new(pool.threads),
            queue_timeout: pool.queue_timeout,
        });
        let provider = checks::table(&inner);
        let refused = |why: String| {
            format!(
                "the bundled provider's contract under provider_id {:?} is refused: {why}; check [bundled] provider_id (or --provider-id)",
                config.provider_id
            )
        };
        let contract = provider
            .server_contract()
            .map_err(|error| refused(error.to_string()))?;
        let violations = contract.contract().check_decision_gate_rules();
        if let Some(violation) = violations.first() {
            return Err(refused(format!(
                "Decision Gate would not accept it ({violation})"
            )));
        }
        Ok(BundledProvider {
            inner,
            provider,
            contract,
        })
    }

    /// The `[bundled]` configuration this provider runs with.
    pub fn config(&self) -> &BundledConfig {
        &self.inner.config
    }

    /// The SDK provider: the table of checks under this configuration.
    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    /// The checks, in the contract's order.
    pub fn checks(&self) -> &[Check] {
        self.provider.checks()
    }

    /// The ids of the bundled checks, in the contract's order (from the
    /// table; no configuration needed).
    pub fn check_ids() -> Vec<String> {
        Self::summaries().into_iter().map(|(id, _)| id).collect()
    }

    /// The bundled checks as help text: one line per check, its id and
    /// description (for a command line's `--check` help).
    pub fn checks_help() -> String {
        let summaries = Self::summaries();
        let width = summaries.iter().map(|(id, _)| id.len()).max().unwrap_or(0);
        let mut help = String::from("The bundled provider's checks:");
        for (id, description) in summaries {
            help.push_str(&format!("\n  {id:width$}  {description}"));
        }
        help
    }

    /// `(id, description)` of every check of the table.
    fn summaries() -> Vec<(String, String)> {
        // The table needs an `Inner`: the default one starts no thread (the
        // pool starts on first use) and reads nothing.
        let inner = Arc::new(Inner {
            config: BundledConfig::default(),
            root: EvidenceRoot::deferred("."),
            hosts: Vec::new(),
            pool: pool::Pool::new(1),
            queue_timeout: JsonPool::DEFAULT_QUEUE_TIMEOUT,
        });
        checks::table(&inner)
            .checks()
            .iter()
            .map(|check| (check.id().to_owned(), check.description().to_owned()))
            .collect()
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
    /// `capabilities_path` format), generated from the table of checks:
    /// the one the server enforces.
    pub fn contract(&self) -> ProviderContract {
        self.contract.contract().clone()
    }

    /// Answers one query on this thread, to the end (a file or HTTP check
    /// blocks it). For a caller without an adapter, such as a test or a
    /// fuzz target: a server checks the query against the contract first,
    /// this does not (params that do not fit the check's type are answered
    /// `invalid_params`, an unknown check `unknown_check`). Never panics on
    /// the query's content: every failure is an `EvidenceResult` error.
    pub fn answer(&self, query: &EvidenceQuery, context: &EvidenceContext) -> EvidenceResult {
        let call = evidence_wire_provider::CallContext::new();
        match self.provider.answer(query.clone(), context.clone(), call) {
            Answer::Ready(result) => result,
            Answer::Blocking(work) => work(),
            Answer::Async(future) => futures_lite::future::block_on(future),
        }
    }

    /// Whether `query`'s check runs where the query was read (the clock and
    /// environment checks: no I/O).
    pub fn is_inline(&self, query: &EvidenceQuery) -> bool {
        self.provider
            .find_check(&query.check_id)
            .is_some_and(Check::is_inline)
    }
}

/// `http_status` on `inner`'s settings.
#[cfg(feature = "http")]
fn http_status(
    inner: &Inner,
    url: &str,
    context: &CheckContext,
) -> Result<checks::HttpStatus, CheckError> {
    http::http_status(&inner.config.http, &inner.hosts, url, context)
}

/// `http_body_hash` on `inner`'s settings.
#[cfg(feature = "http")]
fn http_body_hash(
    inner: &Inner,
    url: &str,
    context: &CheckContext,
) -> Result<checks::BodyHash, CheckError> {
    http::http_body_hash(&inner.config.http, &inner.hosts, url, context)
}

/// Without the `http` feature the HTTP checks are declared but answer
/// `http_unavailable`.
#[cfg(not(feature = "http"))]
fn http_status(_: &Inner, url: &str, _: &CheckContext) -> Result<checks::HttpStatus, CheckError> {
    Err(http_unavailable(url))
}

/// Without the `http` feature the HTTP checks are declared but answer
/// `http_unavailable`.
#[cfg(not(feature = "http"))]
fn http_body_hash(_: &Inner, url: &str, _: &CheckContext) -> Result<checks::BodyHash, CheckError> {
    Err(http_unavailable(url))
}

#[cfg(not(feature = "http"))]
fn http_unavailable(url: &str) -> CheckError {
    CheckError::new(
        "http_unavailable",
        format!(
            "cannot GET {url}: this build of the bundled provider has no HTTP checks (cargo feature `http`)"
        ),
    )
}

/// The SDK's handler vocabulary: each check says where it runs (inline,
/// or the blocking pool).
impl Handler for BundledProvider {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        self.provider.answer(query, context, call)
    }
}

/// A default server configuration with the provider's contract installed.
impl IntoService for BundledProvider {
    fn into_service(self) -> Result<Service, ServeError> {
        let config = self.install(ServerConfig::default());
        Ok(Service::new(config, self))
    }
}
