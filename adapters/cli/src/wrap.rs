//! `evidence-wire wrap`: a sidecar between Decision Gate (or any MCP
//! client) and an existing provider written in any language (issue 42).
//!
//! Facing the caller it is `evidence-wire serve`: the core [`Server`] with
//! the provider's contract installed ([`ServerContract`]), on stdio (the
//! blocking adapter's `serve_until`, framing detected from the first byte)
//! or on HTTP (`--http`, the tokio adapter's `serve_http`), with the same
//! dialects, limits, validation log, metrics and drain on SIGTERM. So a
//! query naming a check the contract does not declare, params outside the
//! check's `params_schema`, another provider id or a message over a limit
//! is answered by the core itself: the provider never sees it.
//!
//! The one handler ([`Forward`]) forwards every other query to the
//! provider: a child process spoken to in Content-Length frames and
//! supervised by the blocking adapter's [`ProcessProvider`] (restarted
//! when it exits or hangs, every query with a deadline, its stderr relayed
//! within bounds), or an HTTP provider ([`HttpProvider`], `--url`). Both
//! clients verify the answer (its shape, and its `evidence_hash` against
//! the value under the Decision Gate profile): a malformed answer or a
//! wrong hash becomes an `EvidenceResult` error, never evidence.
//!
//! The verified answer is handed back to the core server without the
//! provider's hash and signature: the server seals it, computing
//! `evidence_hash` under the profile the caller verifies with
//! (`--hash-profile`, `auto`: Decision Gate's on Decision Gate
//! connections) and signing it with `--signing-key`. The value is checked
//! against the check's `result_schema`; a mismatch is said on stderr and
//! in the validation log (a record with route [`RESULT_SCHEMA_ROUTE`]),
//! and the answer is sent all the same.
//!
//! Limits: at most `--max-in-flight` queries are at the provider at once;
//! the others wait, in the server's queue, then for a slot, but never
//! longer than `--timeout-ms` in all before they are forwarded (past it
//! they are answered `provider_timeout` without reaching the provider);
//! once forwarded, the provider has `--timeout-ms` to answer. A query whose
//! child process died under it (the connection was lost) is asked once
//! more, of the restarted child, if it is still within `--timeout-ms` of
//! its arrival (`evidence_query` is idempotent): so no query waits longer
//! than twice `--timeout-ms` (plus the restart backoff). Frame and
//! in-flight limits of the caller's side are `[server.limits]`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::contract::ProviderContract;
use evidence_wire::error::CanonicalError;
use evidence_wire::evidence::{
    EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, TrustPolicy,
};
use evidence_wire::frame::Framing;
use evidence_wire::server::{Outcome, ServerContract};
use evidence_wire_blocking::log::ValidationLog;
use evidence_wire_blocking::provider::CallContext;
use evidence_wire_blocking::{
    Answer, Handler, ProcessConfig, ProcessProvider, ProviderError, Service,
};
use evidence_wire_config::Config;
use evidence_wire_log::record::{Channel, RecordFacts};
use evidence_wire_tokio::{HttpProvider, HttpProviderConfig};

use crate::{Failure, HashProfileArg, printable};

/// The `route` of the validation log record that says an answer's value
/// does not match its check's `result_schema` (the answer was sent).
pub(crate) const RESULT_SCHEMA_ROUTE: &str = "wrap:result_schema";

/// The `error.code` of a query answered without reaching the provider
/// because it waited longer than `--timeout-ms` for a free slot.
const PROVIDER_TIMEOUT: &str = "provider_timeout";

#[derive(clap::Args)]
pub(crate) struct WrapArgs {
    /// The provider id queries must carry (default: the contract's
    /// provider_id; when given, it must equal it).
    #[arg(long, value_name = "ID")]
    provider_id: Option<String>,
    /// The provider's capabilities contract: the JSON file Decision Gate
    /// reads from capabilities_path. Required: it is what queries are
    /// checked against before they are forwarded, what tools/list answers
    /// and what answers are checked against (result_schema).
    #[arg(long, value_name = "FILE")]
    contract: Option<PathBuf>,
    /// Sign every successful answer with this ed25519 secret seed file
    /// (`evidence-wire keygen` writes one).
    #[arg(long, value_name = "FILE")]
    signing_key: Option<PathBuf>,
    /// The key_id put in signatures (default: the key file's stem). For
    /// Decision Gate: the public key's path exactly as its config lists it
    /// under require_signature keys.
    #[arg(long, value_name = "ID", requires = "signing_key")]
    key_id: Option<String>,
    /// Canonicalization profile of the evidence_hash (and signature) put
    /// on answers (default: [server] hash_profile, auto: decision-gate for
    /// Decision Gate connections, rfc8785 after the MCP handshake).
    #[arg(long, value_enum)]
    hash_profile: Option<HashProfileArg>,
    /// Serve HTTP on this address (POST /rpc and /mcp, GET /healthz and
    /// /readyz, GET /metrics with [server.metrics]) instead of stdio.
    /// SIGTERM or SIGINT drains.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    #[command(flatten)]
    tls: crate::TlsArgs,
    /// Do not write the envelope validation log (default: [logging] enabled, on).
    #[arg(long, conflicts_with = "log_dir")]
    no_log: bool,
    /// Directory of the validation log (default: [logging] dir, or
    /// runs/mcp_server/envelope_validation under the working directory).
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
    /// How long the provider may take to answer one query, and the longest
    /// a query may wait for a free slot before it is forwarded, in
    /// milliseconds. Past either: a provider_timeout error (a provider
    /// that answered nothing meanwhile is restarted).
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    timeout_ms: u64,
    /// Queries at the provider at once, at most; the others wait for a
    /// slot (see --timeout-ms).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    max_in_flight: u64,
    /// URL of an HTTP provider (POST, JSON-RPC) to forward to, instead of
    /// a program after `--`.
    #[arg(long, conflicts_with = "argv")]
    url: Option<String>,
    /// PEM certificate file trusted for an https:// --url (a private CA or
    /// a self-signed certificate), besides the public web roots; repeatable.
    #[arg(long = "ca-cert", value_name = "FILE", requires = "url")]
    ca_cert: Vec<PathBuf>,
    /// Allow a plain http:// --url.
    #[arg(long, requires = "url")]
    allow_insecure_http: bool,
    /// Bearer token sent to the --url provider.
    #[arg(long, env = "EVIDENCE_WIRE_BEARER_TOKEN", hide_env_values = true)]
    bearer_token: Option<String>,
    /// After `--`: the provider's command line, program first, run without
    /// a shell and spoken to in Content-Length frames.
    #[arg(last = true, value_name = "PROGRAM [ARGS]")]
    argv: Vec<String>,
}

/// `evidence-wire wrap`.
pub(crate) fn main(args: WrapArgs, config: &Config) -> Result<u8, Failure> {
    let contract = load_contract(&args)?;
    let provider_id = contract.contract().provider_id.clone();
    let signer = signer(&args)?;
    let mut server_config = config
        .server
        .server_config()
        .with_contract(contract.clone());
    if let Some(profile) = args.hash_profile {
        server_config.hash_profile = profile.choice();
    }
    server_config.signer = signer;
    config
        .server
        .tool_policy()
        .map_err(|error| Failure::usage(error.to_string()))?
        .apply(&mut server_config);
    let http = args
        .http
        .or((config.server.transport == evidence_wire::Transport::Http)
            .then_some(config.server.bind));
    let tls = crate::tls_files(&args.tls, config);
    if http.is_none() && tls.is_some() {
        return Err(Failure::usage(crate::TLS_NEEDS_HTTP));
    }
    let metrics = evidence_wire_tokio::Metrics::new();
    let timeout = Duration::from_millis(args.timeout_ms);
    let upstream = upstream(&args, &provider_id, &metrics, server_config.limits)?;
    crate::logging::init_diagnostics();
    let log = crate::logging::open_validation_log_with(
        &crate::logging::LogFlags {
            no_log: args.no_log,
            log_dir: args.log_dir.as_deref(),
            deterministic: false,
            max_bytes: None,
        },
        config,
    );
    let slots = usize::try_from(args.max_in_flight).unwrap_or(16);
    let forward = Forward {
        inner: Arc::new(Inner {
            upstream,
            slots: Slots::new(slots),
            timeout,
            result_schemas: result_schemas(contract.contract()),
            log: log.clone(),
            transport: if http.is_some() {
                Channel::Http
            } else {
                Channel::Stdio
            },
        }),
    };
    let service = Service::new(server_config, forward);
    let drain = Duration::from_millis(config.server.drain_timeout_ms);
    let outcome = match http {
        Some(address) => crate::serve_http(
            crate::HttpServe {
                // The HTTP side's async threads (`serve`'s default);
                // forwarded queries wait on its blocking pool.
                workers: 4,
                address,
                drain,
                behind_proxy: config.server.behind_proxy,
                metrics,
                tls,
            },
            config,
            service,
            log.clone(),
        ),
        None => {
            // SIGTERM or SIGINT: stop reading, answer every query read, exit 0.
            let shutdown = evidence_wire_blocking::Shutdown::new();
            crate::watch_signals_in_background(shutdown.clone());
            evidence_wire_blocking::serve_until(
                service,
                slots,
                std::io::stdin(),
                evidence_wire_blocking::unbuffered_stdout(),
                &log,
                &shutdown,
                drain,
            )
            .map(|()| 0)
            .map_err(|error| Failure::evidence(error.to_string()))
        }
    };
    log.flush();
    outcome
}

/// The contract of `--contract`, bound for the server, with `--provider-id`
/// checked against it.
fn load_contract(args: &WrapArgs) -> Result<ServerContract, Failure> {
    let Some(path) = &args.contract else {
        return Err(Failure::usage(
            "wrap needs --contract FILE: the provider's capabilities contract, the JSON file Decision Gate reads from capabilities_path (queries are checked against it before they reach the provider, and tools/list answers from it); `evidence-wire contract --check FILE` checks one",
        ));
    };
    let name = path.display();
    let text = crate::read_contract_file(path)?;
    let contract = ProviderContract::from_json_str(&text)
        .map_err(|error| Failure::usage(format!("--contract {name}: {error}")))?;
    if let Some(provider_id) = &args.provider_id {
        if *provider_id != contract.provider_id {
            return Err(Failure::usage(format!(
                "--provider-id {provider_id:?} differs from the provider_id {:?} of the contract {name}: Decision Gate requires the [[providers]] name, the contract's provider_id and the id queries carry to be equal; fix one of them (or leave --provider-id out)",
                contract.provider_id
            )));
        }
    }
    ServerContract::new(contract).map_err(|error| {
        Failure::usage(format!(
            "--contract {name}: {error} (`evidence-wire contract --check {name}` lists every problem)"
        ))
    })
}

/// The signer of `--signing-key` (with `--key-id`), or none.
fn signer(args: &WrapArgs) -> Result<Option<evidence_wire::evidence::EvidenceSigner>, Failure> {
    let Some(key_file) = &args.signing_key else {
        return Ok(None);
    };
    let mut signing = evidence_wire_config::BundledSigningConfig::new(key_file.clone());
    signing.key_id = args.key_id.clone();
    signing
        .signer()
        .map(Some)
        .map_err(|error| Failure::usage(format!("--signing-key {}: {error}", key_file.display())))
}

/// The provider client: the child after `--`, or `--url`.
fn upstream(
    args: &WrapArgs,
    provider_id: &str,
    metrics: &evidence_wire_tokio::Metrics,
    limits: evidence_wire::frame::Limits,
) -> Result<Upstream, Failure> {
    let mut client = ClientConfig::default();
    // The provider's answers get the frame limits the caller's messages
    // get ([server.limits]): an answer the caller could not take is not read.
    client.limits = limits;
    client.framing = Framing::ContentLength;
    client.handshake = false;
    client.request_timeout_ms = args.timeout_ms;
    // The provider's own signature is not checked (and not passed on): the
    // answer is re-sealed with this wrapper's key. Its hash is checked
    // under the profile of a Decision Gate connection (decision-gate).
    client.trust = TrustPolicy::Audit;
    if let Some(url) = &args.url {
        let mut settings = HttpProviderConfig::new(url.clone())
            .with_insecure_http(args.allow_insecure_http)
            .with_client(client)
            .with_connect_timeout(Duration::from_millis(2000))
            .with_max_response_bytes(limits.max_body_bytes);
        if let Some(token) = &args.bearer_token {
            settings = settings.with_bearer_token(token.clone());
        }
        for pem in crate::read_ca_certs(&args.ca_cert)? {
            settings = settings.with_root_certificate_pem(pem);
        }
        let provider =
            HttpProvider::new(settings).map_err(|error| Failure::usage(error.to_string()))?;
        // The HTTP client's own runtime, whatever the caller's side runs on.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("evidence-wire-wrap-http")
            .enable_all()
            .build()
            .map_err(|error| Failure::usage(format!("cannot start the runtime: {error}")))?;
        return Ok(Upstream::Http {
            provider,
            runtime: BackgroundRuntime(Some(runtime)),
        });
    }
    if args.argv.is_empty() {
        return Err(Failure::usage(
            "wrap needs the provider to forward to: its command line after `--` (`wrap --contract FILE -- python3 provider.py`), or --url URL",
        ));
    }
    let process = ProcessConfig::new(args.argv.clone())
        .with_client(client)
        .with_restart_hook(metrics.restart_hook(provider_id));
    let provider =
        ProcessProvider::spawn(process).map_err(|error| Failure::usage(error.to_string()))?;
    Ok(Upstream::Process(provider))
}

/// Each check's compiled `result_schema` (a schema that does not compile,
/// which `ServerContract::new` refuses anyway, is not checked).
fn result_schemas(contract: &ProviderContract) -> HashMap<String, jsonschema::Validator> {
    contract
        .checks
        .iter()
        .filter_map(|check| {
            jsonschema::draft202012::new(&check.result_schema)
                .ok()
                .map(|validator| (check.check_id.clone(), validator))
        })
        .collect()
}

/// Where queries are forwarded.
enum Upstream {
    /// A supervised child process (Content-Length stdio).
    Process(ProcessProvider),
    /// An HTTP provider, on a runtime of its own.
    Http {
        provider: HttpProvider,
        runtime: BackgroundRuntime,
    },
}

/// The HTTP client's runtime, shut down in the background when dropped:
/// the handler may be dropped inside the HTTP server's runtime, where a
/// runtime must not be dropped (that would block).
struct BackgroundRuntime(Option<tokio::runtime::Runtime>);

impl BackgroundRuntime {
    fn block_on<F: std::future::Future>(&self, future: F) -> Option<F::Output> {
        self.0.as_ref().map(|runtime| runtime.block_on(future))
    }
}

impl Drop for BackgroundRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// The handler of `wrap`: forwards each query the core server let through.
#[derive(Clone)]
struct Forward {
    inner: Arc<Inner>,
}

struct Inner {
    upstream: Upstream,
    slots: Slots,
    timeout: Duration,
    result_schemas: HashMap<String, jsonschema::Validator>,
    log: ValidationLog,
    transport: Channel,
}

impl Handler for Forward {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        call: CallContext,
    ) -> Answer<EvidenceResult> {
        let inner = Arc::clone(&self.inner);
        let arrived = Instant::now();
        Answer::blocking(move || inner.forward(query, context, &call, arrived))
    }
}

impl Inner {
    /// One query to the provider and back, verified (or the error saying why not).
    fn forward(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        call: &CallContext,
        arrived: Instant,
    ) -> EvidenceResult {
        let deadline = arrived + self.timeout;
        let Some(_slot) = self.slots.acquire(deadline, call) else {
            return EvidenceResult::with_error(EvidenceError::new(
                PROVIDER_TIMEOUT,
                format!(
                    "not forwarded: the query waited {} ms for one of the {} slots at the provider (wrap --max-in-flight), more than --timeout-ms",
                    arrived.elapsed().as_millis(),
                    self.slots.capacity
                ),
            ));
        };
        let check_id = query.check_id.clone();
        let mut outcome = self.ask(&query, &context);
        // The child died (or was restarted) with the query in flight: the
        // supervisor restarts it, and the query, idempotent, is asked once
        // more if its deadline has not passed.
        if matches!(
            outcome,
            Err(ProviderError::Query(QueryError::ConnectionLost(_)))
        ) && Instant::now() < deadline
            && !call.cancellation().is_cancelled()
        {
            tracing::info!(
                "wrap: check {}: the provider went away with the query in flight; asking its restarted process",
                printable(&check_id)
            );
            outcome = self.ask(&query, &context);
        }
        match outcome {
            Ok(verified) => {
                let mut result = verified.into_result();
                // Sealed again by the server: the caller's profile, our key.
                result.evidence_hash = None;
                result.signature = None;
                self.check_result_schema(&check_id, &result);
                result
            }
            Err(error) => {
                tracing::warn!(
                    "wrap: check {}: the provider's answer is refused ({}): {}",
                    printable(&check_id),
                    error.code(),
                    printable(&error.to_string())
                );
                error.to_evidence_result()
            }
        }
    }

    /// One query to the provider, verified.
    fn ask(
        &self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
    ) -> Result<evidence_wire::evidence::VerifiedEvidence, ProviderError> {
        match &self.upstream {
            Upstream::Process(provider) => provider.query(query.clone(), context.clone()),
            Upstream::Http { provider, runtime } => runtime
                .block_on(provider.query(query, context))
                .unwrap_or(Err(ProviderError::ShutDown)),
        }
    }

    /// Says on stderr and in the validation log when the value does not
    /// match the check's `result_schema` (the answer is sent anyway).
    fn check_result_schema(&self, check_id: &str, result: &EvidenceResult) {
        let Some(validator) = self.result_schemas.get(check_id) else {
            return;
        };
        let Some(value) = result
            .value
            .as_ref()
            .and_then(|value| value.to_value().ok())
        else {
            return;
        };
        let Some(error) = validator.iter_errors(&value).next() else {
            return;
        };
        let detail = format!(
            "check {check_id:?}: the provider's value does not match the contract's result_schema at {:?}: {error} (the answer was sent unchanged)",
            error.instance_path().as_str()
        );
        tracing::warn!("wrap: {}", printable(&detail));
        let outcome = Outcome {
            id: None,
            method: Some("tools/call".into()),
            tool: Some(evidence_wire::evidence::EVIDENCE_QUERY_TOOL.into()),
            error: Some(CanonicalError::InternalError),
            detail: Some(detail),
            stateless: false,
            trace_id: None,
        };
        let facts = RecordFacts {
            transport: self.transport,
            route: RESULT_SCHEMA_ROUTE,
            // The answer went out as a success.
            status: 200,
            duration_micros: 0,
        };
        let _ = self.log.record(&outcome, &facts);
    }
}

/// A counting semaphore over the provider's slots whose waits end at a
/// deadline (or when the call is cancelled).
struct Slots {
    capacity: usize,
    free: Mutex<usize>,
    freed: Condvar,
}

/// A taken slot, given back when dropped.
struct Slot<'a>(&'a Slots);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.0.freed.notify_one();
    }
}

impl Slots {
    fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Slots {
            capacity,
            free: Mutex::new(capacity),
            freed: Condvar::new(),
        }
    }

    /// A slot, or `None` once `deadline` has passed (even with a slot
    /// free: the query waited too long already) or the call is cancelled
    /// (checked every 100 ms while waiting).
    fn acquire(&self, deadline: Instant, call: &CallContext) -> Option<Slot<'_>> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let now = Instant::now();
            if now >= deadline || call.cancellation().is_cancelled() {
                return None;
            }
            if *free > 0 {
                *free -= 1;
                return Some(Slot(self));
            }
            let wait = deadline
                .saturating_duration_since(now)
                .min(Duration::from_millis(100));
            free = self
                .freed
                .wait_timeout(free, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}
