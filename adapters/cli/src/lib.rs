//! `evidence-wire`: serve the bundled evidence provider, query any provider
//! and verify what comes back, hash and verify evidence.
//!
//! Exit codes: 0 evidence (or success), 1 the result carries an error or
//! fails verification, 2 usage or configuration errors. Errors are one line
//! on stderr.
//!
//! The library has one public item, [`run`]: the command line itself. The
//! `evidence-wire` binary only calls it.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod check_provider;
mod docs_cmd;
mod logging;
#[cfg(feature = "otlp")]
mod otlp;
mod wrap;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand, ValueEnum};
use evidence_wire::canonical::{self, Options, Profile};
use evidence_wire::client::ClientConfig;
use evidence_wire::contract::ProviderContract;
use evidence_wire::evidence::{
    self, EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, HashDigest, TriggerTime,
    TrustPolicy,
};
use evidence_wire::frame::Framing;
use evidence_wire_blocking::{ProcessConfig, ProcessProvider, Service};
use evidence_wire_config::{Config, ProviderConfig, ProviderType};
use evidence_wire_tokio::{HttpProvider, HttpProviderConfig, HttpServerConfig};
use serde_json::Value;

use evidence_wire_bundled::{BundledProvider, JsonPool};
use evidence_wire_config::BundledConfig;

#[derive(Parser)]
#[command(
    name = "evidence-wire",
    version,
    about = "Serve, query and verify Decision Gate evidence providers.",
    after_help = "Example:\n  evidence-wire query --check time_now\n      ask the bundled provider (spawned over stdio) and print verified evidence"
)]
struct Cli {
    /// Configuration file (TOML; see examples/evidence-wire.toml). Without
    /// one, the embedded defaults apply. Also read from EVIDENCE_WIRE_CONFIG.
    #[arg(long, global = true, value_name = "FILE", env = "EVIDENCE_WIRE_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the bundled provider on stdio (framing detected from the first byte).
    #[command(
        after_help = "Examples:\n  evidence-wire serve --root ./evidence\n  evidence-wire serve --http 127.0.0.1:8080"
    )]
    Serve(ServeArgs),
    /// Query a provider and print the verified EvidenceResult.
    #[command(
        after_help = "Examples:\n  evidence-wire query --check time_now\n  evidence-wire query --check file_size --params '{\"path\":\"Cargo.toml\"}'\n  evidence-wire query --command ./my-provider --provider-id mine --check probe\n  evidence-wire query --provider-id mine --check probe -- ./my-provider --verbose\n  evidence-wire query --url https://localhost:8443/rpc --ca-cert ca.pem --check time_now\n  evidence-wire --config evidence-wire.toml query --provider git --check head"
    )]
    Query(QueryArgs),
    /// Hash a JSON value (canonical JSON, SHA-256) or raw bytes.
    ///
    /// Memory: the input is read whole, at most 67108864 bytes (64 MiB;
    /// larger input is refused, exit 2), and JSON is parsed into memory
    /// before it is canonicalized, which costs about 20 to 35 bytes of
    /// memory per input byte for JSON made of many small values (peak RSS
    /// measured with /usr/bin/time -v: 280 to 330 MB for 10 MB arrays of
    /// small numbers, 1.7 GB for 64 MiB of [0,0,...]). With --bytes, about
    /// 2.5 bytes per input byte.
    #[command(
        after_help = "Examples:\n  echo '{\"b\":1,\"a\":2}' | evidence-wire hash\n  evidence-wire hash --canonical value.json\n  evidence-wire hash --bytes image.png"
    )]
    Hash(HashArgs),
    /// Verify an EvidenceResult file: its hash and, with --key-file or --key, its signature.
    #[command(
        after_help = "Examples:\n  evidence-wire verify result.json --key-file k1.pub\n      the public key file keygen wrote (PREFIX.pub); key id: the path or its stem\n  evidence-wire verify result.json --key 'k1=ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c'\n      the same key inline"
    )]
    Verify(VerifyArgs),
    /// Print the bundled provider's capabilities contract (for Decision Gate's capabilities_path),
    /// or check a contract against Decision Gate's rules.
    #[command(
        after_help = "Examples:\n  evidence-wire contract > evidence-wire.contract.json\n  evidence-wire contract --check my-provider.contract.json"
    )]
    Contract(ContractArgs),
    /// Run a conformance and robustness battery against a provider and
    /// report each check (pass, warn or fail); exit 1 on a fail.
    #[command(
        name = "check-provider",
        after_help = "Examples:\n  evidence-wire check-provider\n      the bundled provider against its own contract\n  evidence-wire check-provider --contract my-provider.contract.json --provider-id git -- ./my-provider\n  evidence-wire check-provider --json --contract my-provider.contract.json --provider-id git --command ./my-provider\n      every line with its evidence, for CI"
    )]
    CheckProvider(check_provider::CheckProviderArgs),
    /// Front an existing provider (any language) for Decision Gate: queries
    /// checked against its contract before they reach it, answers verified,
    /// hashed and signed, the provider supervised.
    #[command(
        after_help = "Examples:\n  evidence-wire wrap --contract my-provider.contract.json -- ./my-provider\n      serve ./my-provider on stdio, checked against its contract\n  evidence-wire wrap --contract my-provider.contract.json --signing-key signing-key --key-id signing-key.pub -- ./my-provider\n      and sign its answers for Decision Gate's require_signature\n\nDecision Gate runs it as the provider's command:\n  command = [\"evidence-wire\", \"wrap\", \"--contract\", \"provider.contract.json\", \"--\", \"python3\", \"provider.py\"]\nSee spec/guides/wrapping-a-provider.md."
    )]
    Wrap(wrap::WrapArgs),
    /// Make an ed25519 signing key: PREFIX (secret seed, mode 0600) and PREFIX.pub (public key).
    #[command(
        after_help = "Example:\n  evidence-wire keygen --out keys/provider\n      writes keys/provider (for serve --signing-key or [bundled.signing] key_file)\n      and keys/provider.pub (for Decision Gate's require_signature keys, or ours)"
    )]
    Keygen(KeygenArgs),
    /// Check a configuration file.
    #[command(
        subcommand,
        after_help = "Example:\n  evidence-wire config check examples/evidence-wire.toml"
    )]
    Config(ConfigCommand),
    /// Search, list and read the embedded documentation (JSON on stdout).
    #[command(
        after_help = "Examples:\n  evidence-wire docs search 'content-length limits'\n  evidence-wire docs list\n  evidence-wire docs read decision-gate://docs/framing"
    )]
    Docs {
        /// What to do.
        #[command(subcommand)]
        cmd: docs_cmd::DocsCommand,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Load and validate a configuration file (and the contracts and keys it names).
    #[command(after_help = "Example:\n  evidence-wire config check examples/evidence-wire.toml")]
    Check {
        /// The file to check.
        file: PathBuf,
    },
}

/// `serve`: the flags every provider built on the tokio adapter's ready
/// command line shares (`evidence_wire_tokio::cli::ServeArgs`, one
/// definition), with the configuration-file defaults named in their help,
/// and the bundled provider's own.
#[derive(clap::Args)]
#[command(
    mut_arg("http", |arg| arg.help("Serve HTTP on this address (POST /rpc and /mcp, GET /healthz and /readyz, GET /metrics with [server.metrics]) instead of stdio; default from [server] transport and bind. SIGTERM or SIGINT drains (see --drain-timeout-ms)")),
    mut_arg("tls_cert", |arg| arg.help("Serve HTTPS with this certificate chain (PEM, leaf first; with --tls-key). Read again when it changes and on SIGHUP, so a renewed certificate needs no restart (default: [server.tls] cert_file)")),
    mut_arg("tls_key", |arg| arg.help("The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1) (default: [server.tls] key_file)")),
    mut_arg("root", |arg| arg.help("Directory the file checks read from (default: [bundled] root, or the current directory)")),
    mut_arg("provider_id", |arg| arg.help("The provider id queries must carry and the contract declares (default: [bundled] provider_id, or evidence-wire)")),
    mut_arg("signing_key", |arg| arg.help("Sign every successful result with this ed25519 secret seed file (`evidence-wire keygen` writes one; default: [bundled.signing] key_file)")),
    mut_arg("key_id", |arg| arg.help("The key_id put in signatures (default: [bundled.signing] key_id, or the key file's stem). For Decision Gate: the public key's path exactly as its config lists it under require_signature keys")),
    mut_arg("no_log", |arg| arg.help("Do not write the envelope validation log (default: [logging] enabled, on)")),
    mut_arg("log_dir", |arg| arg.help("Directory of the validation log (default: [logging] dir, or runs/mcp_server/envelope_validation under the working directory)")),
    mut_arg("drain_timeout_ms", |arg| arg.help("On SIGTERM or SIGINT, how long the queries in flight may run before they are answered with a retryable error (default: [server] drain_timeout_ms, or 25000)")),
    mut_arg("call_timeout_ms", |arg| arg.help("Give every call a deadline this many milliseconds after it starts (1..=600000): a check reads the time left with CheckContext::remaining, and a blocking check polling is_cancelled sees it pass (default: [server] call_timeout_ms, or no deadline)")),
)]
struct ServeArgs {
    #[command(flatten)]
    common: evidence_wire_tokio::cli::ServeArgs,
    /// Id of the root in evidence_ref URIs and anchors (default: [bundled] root_id, or evidence-root).
    #[arg(long)]
    root_id: Option<String>,
    /// Environment variable env_get may read (repeatable; adds to [bundled.env] allow; none by default).
    #[arg(long = "allow-env", value_name = "KEY")]
    allow_env: Vec<String>,
    /// Worker threads answering queries.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Fixed clock and sequential ids in the validation log (byte-identical runs).
    #[arg(long, conflicts_with = "no_log")]
    deterministic_log: bool,
    /// Canonicalization profile of evidence hashes and signatures (default:
    /// [server] hash_profile, auto: decision-gate for Decision Gate
    /// connections, rfc8785 after the MCP handshake).
    #[arg(long, value_enum)]
    hash_profile: Option<HashProfileArg>,
    /// Total size cap of the validation log's run files in bytes; the current
    /// file is rotated at a quarter of it and the oldest files deleted
    /// (default: [logging] max_bytes, or 268435456 = 256 MiB; at least 16384).
    #[arg(long, value_name = "BYTES", conflicts_with = "no_log", value_parser = clap::value_parser!(u64).range(16384..=1_099_511_627_776))]
    log_max_bytes: Option<u64>,
    /// The HTTP server runs behind a trusted reverse proxy: check the
    /// forwarded Host, trust no loopback Origin; needs a bearer token
    /// (default: [server] behind_proxy).
    #[arg(long)]
    behind_proxy: bool,
}

/// Why `--tls-cert` without HTTP is refused.
pub(crate) const TLS_NEEDS_HTTP: &str = "--tls-cert and --tls-key ([server.tls]) are for the HTTP server: add --http ADDR or set [server] transport = \"http\"";

// `--tls-cert` and `--tls-key` of serve and wrap: one definition with
// every provider's ready command line.
pub(crate) use evidence_wire_tokio::cli::TlsArgs;

/// The certificate and key files of `serve`/`wrap`: the flags', else
/// `[server.tls]`'s.
pub(crate) fn tls_files(tls: &TlsArgs, config: &Config) -> Option<(PathBuf, PathBuf)> {
    match tls.files() {
        Some((cert, key)) => Some((cert.to_owned(), key.to_owned())),
        None => config
            .server
            .tls
            .files()
            .map(|(cert, key)| (cert.to_owned(), key.to_owned())),
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum HashProfileArg {
    /// decision-gate for Decision Gate connections, rfc8785 after the MCP handshake.
    Auto,
    Rfc8785,
    DecisionGate,
}

impl HashProfileArg {
    fn choice(self) -> evidence_wire::dialect::HashProfile {
        use evidence_wire::dialect::HashProfile;
        match self {
            HashProfileArg::Auto => HashProfile::FollowDialect,
            HashProfileArg::Rfc8785 => HashProfile::Fixed(Profile::Rfc8785),
            HashProfileArg::DecisionGate => HashProfile::Fixed(Profile::DecisionGate),
        }
    }
}

#[derive(clap::Args)]
struct KeygenArgs {
    /// Where to write: PREFIX gets the 32-byte secret seed (mode 0600),
    /// PREFIX.pub the 32-byte public key (raw bytes, which both Decision
    /// Gate and evidence-wire read). Existing files are not overwritten.
    #[arg(long, value_name = "PREFIX")]
    out: PathBuf,
}

#[derive(Clone, Copy, ValueEnum)]
enum FramingArg {
    ContentLength,
    Ndjson,
}

#[derive(Clone, Copy, ValueEnum)]
enum ProfileArg {
    Rfc8785,
    DecisionGate,
}

impl From<ProfileArg> for Profile {
    fn from(profile: ProfileArg) -> Self {
        match profile {
            ProfileArg::Rfc8785 => Profile::Rfc8785,
            ProfileArg::DecisionGate => Profile::DecisionGate,
        }
    }
}

#[derive(clap::Args)]
struct QueryArgs {
    /// The check to run.
    #[arg(long, long_help = format!("The check to run.\n\n{}", BundledProvider::checks_help()))]
    check: String,
    /// The check's params as JSON.
    #[arg(long)]
    params: Option<String>,
    /// The full EvidenceContext as JSON (default: tenant 1, namespace 1, now).
    #[arg(long)]
    context: Option<String>,
    /// A provider from the configuration's [[providers]], by name.
    #[arg(long, value_name = "NAME", conflicts_with = "command")]
    provider: Option<String>,
    /// Provider program, spawned without a shell (default: this binary's
    /// bundled provider); its arguments go after `--`.
    #[arg(long, value_name = "PROGRAM", conflicts_with = "url")]
    command: Option<String>,
    /// After `--`: the provider's arguments (with --command), or its whole
    /// command line, program first (without): `-- ./my-provider --flag`.
    #[arg(last = true, value_name = "ARGV", conflicts_with_all = ["url", "provider"])]
    argv: Vec<String>,
    /// URL of an HTTP provider (POST, JSON-RPC).
    #[arg(long, conflicts_with = "provider")]
    url: Option<String>,
    /// PEM certificate file trusted for an https:// --url (a private CA or a
    /// self-signed certificate), besides the public web roots; repeatable.
    #[arg(long = "ca-cert", value_name = "FILE", requires = "url")]
    ca_cert: Vec<PathBuf>,
    /// Allow a plain http:// --url.
    #[arg(long)]
    allow_insecure_http: bool,
    /// Bearer token sent to an HTTP provider.
    #[arg(long, env = "EVIDENCE_WIRE_BEARER_TOKEN", hide_env_values = true)]
    bearer_token: Option<String>,
    /// The provider id put in the query (default: the provider's name, or the bundled provider's id).
    #[arg(long)]
    provider_id: Option<String>,
    /// Request framing for --command providers.
    #[arg(long, value_enum, default_value = "content-length")]
    framing: FramingArg,
    /// Run the MCP initialize handshake first.
    #[arg(long)]
    handshake: bool,
    /// Request timeout in milliseconds (default: the provider's timeouts, or 10000).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Canonicalization profile a present hash is checked with (default: the
    /// provider's hash_profile, or auto: decision-gate without --handshake,
    /// rfc8785 with it, as an evidence-wire server sends).
    #[arg(long, value_enum)]
    profile: Option<HashProfileArg>,
    /// Root for the bundled provider's file checks.
    #[arg(long)]
    root: Option<PathBuf>,
    // --key-file FILE, --key KEY_ID=HEX: require a signature (instead of
    // the provider's configured trust).
    #[command(flatten)]
    keys: KeyArgs,
}

#[derive(clap::Args)]
struct HashArgs {
    /// File to hash; `-` or nothing reads stdin.
    file: Option<PathBuf>,
    /// Print the canonical bytes instead of the hash.
    #[arg(long, conflicts_with = "bytes")]
    canonical: bool,
    /// Hash the raw bytes instead of canonical JSON.
    #[arg(long)]
    bytes: bool,
    /// Canonicalization profile.
    #[arg(long, value_enum, default_value = "rfc8785")]
    profile: ProfileArg,
}

/// `--key` and `--key-file`: the public keys a command requires
/// signatures by (verify, query, check-provider).
#[derive(clap::Args, Clone, Default)]
pub(crate) struct KeyArgs {
    /// Require a signature by the public key in this file (raw, hex or base64,
    /// as `keygen` writes PREFIX.pub); its key_id is the path as written here
    /// or the file stem (repeatable).
    #[arg(long, value_name = "FILE")]
    pub(crate) key_file: Vec<PathBuf>,
    /// Require a signature by this key, given inline: `KEY_ID=HEX` (32-byte
    /// ed25519 public key in hex; repeatable).
    #[arg(long, value_name = "KEY_ID=HEX")]
    pub(crate) key: Vec<String>,
}

#[derive(clap::Args)]
struct VerifyArgs {
    /// File holding an EvidenceResult (or a tools/call result); `-` reads stdin.
    file: PathBuf,
    // --key-file FILE, --key KEY_ID=HEX.
    #[command(flatten)]
    keys: KeyArgs,
    /// Canonicalization profile (default: auto, accepting a hash under
    /// decision-gate or rfc8785 and saying which matched).
    #[arg(long, value_enum)]
    profile: Option<HashProfileArg>,
}

#[derive(clap::Args)]
#[command(mut_arg("provider_id", |arg| arg.help("The provider id to put in the contract (default: [bundled] provider_id, or evidence-wire)")))]
struct ContractArgs {
    #[command(flatten)]
    common: evidence_wire_tokio::cli::ContractArgs,
    /// Check a contract instead of printing it: FILE (a capabilities_path
    /// JSON file), or the bundled provider's own without one. Lists every
    /// problem Decision Gate would refuse, with its place and rule; exit 1
    /// when there is one.
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    check: Option<Option<PathBuf>>,
}

/// A failure with its exit code.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: 2,
            message: message.into(),
        }
    }

    fn evidence(message: impl Into<String>) -> Self {
        Failure {
            code: 1,
            message: message.into(),
        }
    }
}

/// Run the whole command line on this process's arguments and return its
/// exit code (0 evidence or success, 1 an error result or a failed
/// verification, 2 usage or configuration errors).
///
/// The `evidence-wire` binary is `fn main() -> ExitCode { run() }`; the
/// function is public so that a harness can build the same program under
/// another name (the workspace's interop tests do, to get it from
/// `cargo test` without a nested `cargo build`). The `query` command's
/// bundled provider is this same executable (`std::env::current_exe`) run
/// as `serve`, so such a binary must call `run` and nothing else.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    let config = cli.config.as_deref();
    let outcome = match cli.command {
        Command::Serve(args) => load_config(config).and_then(|loaded| serve(args, &loaded)),
        Command::Query(args) => load_config(config).and_then(|loaded| query(args, &loaded, config)),
        Command::Hash(args) => hash(args),
        Command::Verify(args) => verify(args),
        Command::Contract(args) => load_config(config).and_then(|loaded| contract(args, &loaded)),
        Command::Keygen(args) => keygen(&args),
        Command::Wrap(args) => load_config(config).and_then(|loaded| wrap::main(args, &loaded)),
        Command::CheckProvider(args) => {
            load_config(config).and_then(|loaded| check_provider::main(args, &loaded, config))
        }
        Command::Config(ConfigCommand::Check { file }) => config_check(&file),
        Command::Docs { cmd } => return docs_cmd::main(cmd, config),
    };
    // The spans still batched for the collector go out before the exit.
    #[cfg(feature = "otlp")]
    otlp::shutdown();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            report(&failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// The longest [`report`] waits for stderr to take its line.
const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Writes `evidence-wire: <message>` on stderr, giving up after
/// [`REPORT_WAIT`] when stderr blocks (a pipe nobody reads, possibly filled
/// by a provider's relayed stderr): the exit code and stdout still tell the
/// outcome, and the command never hangs on its own error message.
///
/// The message is escaped ([`printable`]): it often quotes what a provider
/// wrote (an error message, an HTTP body), which must not reach the
/// terminal as control sequences; a newline in it becomes `\n`, so the
/// error stays one line.
fn report(message: &str) {
    let line = format!("evidence-wire: {}\n", printable(message));
    let (done, finished) = std::sync::mpsc::channel();
    let fallback = line.clone();
    let writer = std::thread::Builder::new()
        .name("evidence-wire-report".into())
        .spawn(move || {
            let _ = std::io::stderr().write_all(line.as_bytes());
            let _ = done.send(());
        });
    match writer {
        Ok(_) => {
            let _ = finished.recv_timeout(REPORT_WAIT);
        }
        Err(_) => {
            let _ = std::io::stderr().write_all(fallback.as_bytes());
        }
    }
}

/// The configuration at `path`, or the embedded default without one.
fn load_config(path: Option<&Path>) -> Result<Config, Failure> {
    match path {
        None => Ok(Config::default()),
        Some(path) => Config::load(path).map_err(|error| Failure::usage(error.to_string())),
    }
}

fn config_check(file: &Path) -> Result<u8, Failure> {
    let config = Config::load(file).map_err(|error| Failure::usage(error.to_string()))?;
    // The contracts loaded; now Decision Gate's own rules for each.
    let mut problems = Vec::new();
    for (index, provider) in config.providers.iter().enumerate() {
        let Some(contract) = &provider.contract else {
            continue;
        };
        let prefix = format!(
            "providers[{index}] ({}): capabilities_path contract",
            provider.name
        );
        problems.extend(
            contract
                .check_decision_gate_rules()
                .iter()
                .map(|violation| format!("{prefix}: {violation}")),
        );
        if let Some(path) = &provider.capabilities_path {
            problems.extend(dg_path_rule(path).map(|detail| format!("{prefix}: {detail}")));
        }
    }
    if !problems.is_empty() {
        for problem in &problems {
            println!("{}: {}", file.display(), printable(problem));
        }
        return Err(Failure::evidence(format!(
            "{}: loads, but Decision Gate would refuse {} thing{} in the contracts it names (listed above)",
            file.display(),
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        )));
    }
    println!(
        "{}: ok ({} provider{}, server transport {}, docs {})",
        file.display(),
        config.providers.len(),
        if config.providers.len() == 1 { "" } else { "s" },
        config.server.transport.as_str(),
        if config.docs.enabled { "on" } else { "off" },
    );
    Ok(0)
}

/// The bundled provider's settings: `[bundled]`, then the command line.
fn bundled_settings(config: &Config, args: &ServeArgs) -> BundledConfig {
    let mut settings = config.bundled.clone();
    if let Some(root) = &args.common.root {
        settings.root = root.clone();
    }
    if let Some(root_id) = &args.root_id {
        settings.root_id = root_id.clone();
    }
    if let Some(provider_id) = &args.common.provider_id {
        settings.provider_id = provider_id.clone();
    }
    for key in &args.allow_env {
        if !settings.env.allow.contains(key) {
            settings.env.allow.push(key.clone());
        }
    }
    settings
}

/// The signer `serve` uses: `--signing-key` (with `--key-id`), else
/// `[bundled.signing]` (with `--key-id` overriding its key_id), else none.
fn serve_signer(
    args: &ServeArgs,
    config: &Config,
) -> Result<Option<evidence::EvidenceSigner>, Failure> {
    let signing = match (&args.common.signing_key, &config.bundled.signing) {
        (Some(key_file), _) => {
            let mut signing = evidence_wire_config::BundledSigningConfig::new(key_file.clone());
            signing.key_id = args.common.key_id.clone();
            signing
        }
        (None, Some(configured)) => {
            let mut signing = configured.clone();
            if let Some(key_id) = &args.common.key_id {
                signing.key_id = Some(key_id.clone());
            }
            signing
        }
        (None, None) if args.common.key_id.is_some() => {
            return Err(Failure::usage(
                "--key-id needs a signing key: give --signing-key FILE or [bundled.signing] key_file",
            ));
        }
        (None, None) => return Ok(None),
    };
    signing
        .signer()
        .map(Some)
        .map_err(|error| Failure::usage(error.to_string()))
}

fn serve(args: ServeArgs, config: &Config) -> Result<u8, Failure> {
    let settings = bundled_settings(config, &args);
    // As many json_path documents in memory as workers answering.
    let documents = JsonPool::new(args.workers.clamp(1, 64));
    let provider = BundledProvider::with_json_pool(&settings, documents).map_err(Failure::usage)?;
    let mut server_config = provider.install(config.server.server_config());
    if let Some(profile) = args.hash_profile {
        server_config.hash_profile = profile.choice();
    }
    server_config.signer = serve_signer(&args, config)?;
    if let Some(ms) = args.common.call_timeout_ms {
        server_config.call_timeout = Some(std::time::Duration::from_millis(ms));
    }
    docs_cmd::prepare_server(config, &mut server_config).map_err(Failure::usage)?;
    let http = args
        .common
        .http
        .or((config.server.transport == evidence_wire::Transport::Http)
            .then_some(config.server.bind));
    logging::init_diagnostics();
    let log = logging::open_validation_log(&args, config);
    // One service (configuration and handler) for either transport.
    let service = Service::new(server_config, provider);
    let drain = std::time::Duration::from_millis(
        args.common
            .drain_timeout_ms
            .unwrap_or(config.server.drain_timeout_ms),
    );
    let tls = tls_files(&args.common.tls, config);
    if let Some(address) = http {
        return serve_http(
            HttpServe {
                workers: args.workers,
                address,
                drain,
                behind_proxy: args.behind_proxy || config.server.behind_proxy,
                metrics: evidence_wire_tokio::Metrics::new(),
                tls,
            },
            config,
            service,
            log,
        );
    }
    if tls.is_some() {
        return Err(Failure::usage(TLS_NEEDS_HTTP));
    }
    // SIGTERM or SIGINT: stop reading, answer every query read, exit 0.
    let shutdown = evidence_wire_blocking::Shutdown::new();
    watch_signals_in_background(shutdown.clone());
    evidence_wire_blocking::serve_until(
        service,
        args.workers,
        std::io::stdin(),
        evidence_wire_blocking::unbuffered_stdout(),
        &log,
        &shutdown,
        drain,
    )
    .map_err(|error| Failure::evidence(error.to_string()))?;
    Ok(0)
}

/// What completes on the first SIGTERM or SIGINT; a second one during
/// the drain exits at once (`evidence_wire_tokio::cli::termination_signal`,
/// shared with every provider's ready command line). Must run inside a
/// tokio runtime.
fn termination_signal() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    evidence_wire_tokio::cli::termination_signal("evidence-wire")
}

/// Watches for SIGTERM and SIGINT on a thread of its own (a one-thread
/// runtime) and requests `shutdown` on the first. Returns once the
/// handlers are installed, so an early signal drains instead of killing.
fn watch_signals_in_background(shutdown: evidence_wire_blocking::Shutdown) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("evidence-wire: cannot watch for shutdown signals: {error}");
            return;
        }
    };
    let (ready, installed) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("evidence-wire-signals".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                let signal = termination_signal();
                let _ = ready.send(());
                signal.await;
                eprintln!("evidence-wire: shutting down: answering the queries in flight");
                shutdown.request();
                // Keep watching: a second signal ends the process at once.
                std::future::pending::<()>().await;
            });
        });
    match spawned {
        Ok(_) => {
            let _ = installed.recv_timeout(std::time::Duration::from_secs(5));
        }
        Err(error) => eprintln!("evidence-wire: cannot watch for shutdown signals: {error}"),
    }
}

/// How `serve --http` (and `wrap --http`) serves.
pub(crate) struct HttpServe {
    /// The runtime's worker threads.
    pub(crate) workers: usize,
    pub(crate) address: std::net::SocketAddr,
    /// How long the calls in flight may run after SIGTERM or SIGINT.
    pub(crate) drain: std::time::Duration,
    pub(crate) behind_proxy: bool,
    /// Served at `/metrics` as `[server.metrics]` says.
    pub(crate) metrics: evidence_wire_tokio::Metrics,
    /// HTTPS: the certificate chain and key files.
    pub(crate) tls: Option<(PathBuf, PathBuf)>,
}

/// `serve --http` (and `wrap --http`): the service on hyper until Ctrl-C /
/// SIGTERM, over TLS with `tls` (reloaded on SIGHUP and when the files
/// change).
fn serve_http(
    serve: HttpServe,
    config: &Config,
    service: Service,
    log: evidence_wire_blocking::log::ValidationLog,
) -> Result<u8, Failure> {
    let HttpServe {
        workers,
        address,
        drain,
        behind_proxy,
        metrics,
        tls,
    } = serve;
    use evidence_wire_config::ServerAuthMode;
    config
        .server
        .check_exposure(address)
        .map_err(|error| Failure::usage(error.to_string()))?;
    config
        .server
        .check_proxy(behind_proxy)
        .map_err(|error| Failure::usage(error.to_string()))?;
    let mut http_config = HttpServerConfig::default()
        .with_max_body_bytes(config.server.limits.max_body_bytes)
        .with_max_concurrent_requests(config.server.limits.max_in_flight)
        .with_allowed_hosts(config.server.allowed_hosts.clone())
        .with_validation_log(log)
        .with_drain_timeout(drain)
        .behind_proxy(behind_proxy)
        .with_metrics(metrics, config.server.metrics.access());
    if config.server.auth.mode == ServerAuthMode::BearerToken {
        match config.server.auth.bearer_tokens.as_slice() {
            [token] => http_config = http_config.with_bearer_token(token.clone()),
            tokens => {
                return Err(Failure::usage(format!(
                    "server.auth.bearer_tokens: the HTTP server takes exactly one token, found {}",
                    tokens.len()
                )));
            }
        }
    }
    // Blocking checks hold a call slot until they end, so at most
    // `max_in_flight` of them run at once; the pool's spare threads only
    // cover the moment between a check's end and its thread's return.
    let blocking_threads = config.server.limits.max_in_flight.max(1).saturating_add(8);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.clamp(1, 64))
        .max_blocking_threads(blocking_threads)
        .enable_all()
        .build()
        .map_err(|error| Failure::usage(format!("cannot start the runtime: {error}")))?;
    let files = match &tls {
        Some((cert, key)) => Some(
            evidence_wire_tokio::TlsFiles::load(cert, key)
                .map_err(|error| Failure::usage(error.to_string()))?,
        ),
        None => None,
    };
    if let Some(files) = &files {
        http_config = http_config.with_tls(std::sync::Arc::clone(files));
    }
    let served = runtime.block_on(async move {
        let listener = evidence_wire_tokio::bind_http(address, &http_config)
            .await
            .map_err(|error| Failure::usage(format!("cannot serve on {address}: {error}")))?;
        let local = listener
            .local_addr()
            .map_err(|error| Failure::usage(error.to_string()))?;
        match files {
            Some(files) => {
                evidence_wire_tokio::cli::reload_tls_on_hangup(files, "evidence-wire");
                eprintln!("evidence-wire: serving HTTPS on https://{local} (POST /rpc, POST /mcp)");
            }
            None => {
                eprintln!("evidence-wire: serving HTTP on http://{local} (POST /rpc, POST /mcp)");
            }
        }
        // SIGTERM or SIGINT: /readyz 503, new calls 503 + Retry-After,
        // the calls in flight finish (up to the drain timeout), exit 0.
        let signal = termination_signal();
        let shutdown = async {
            signal.await;
            eprintln!("evidence-wire: shutting down: draining the calls in flight");
        };
        evidence_wire_tokio::serve_http(listener, service, http_config, shutdown)
            .await
            .map_err(|error| Failure::evidence(error.to_string()))
    });
    // Every call was answered (those past the drain deadline retryably):
    // do not wait for checks still running on the blocking pool.
    runtime.shutdown_background();
    served?;
    Ok(0)
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// How to reach a provider.
enum Endpoint {
    /// A child process on stdio.
    Command(Vec<String>),
    /// An HTTP provider.
    Url {
        url: String,
        allow_insecure_http: bool,
        bearer_token: Option<String>,
        connect_timeout_ms: u64,
        /// PEM text of extra trusted roots (`--ca-cert`, `tls.ca_certs`).
        ca_certs_pem: Vec<String>,
    },
}

/// Where a query goes and what is known of the provider beforehand.
struct Target {
    endpoint: Endpoint,
    framing: Framing,
    provider_id: String,
    contract: Option<ProviderContract>,
    trust: TrustPolicy,
    timeout_ms: u64,
    /// Whether a `kind: bytes` value is accepted (`allow_raw`; only
    /// `--provider` targets can refuse it).
    allow_raw: bool,
    /// The profile a present hash is checked with (`providers[].hash_profile`).
    hash_profile: evidence_wire::dialect::HashProfile,
}

fn framing_of(arg: FramingArg) -> Framing {
    match arg {
        FramingArg::ContentLength => Framing::ContentLength,
        FramingArg::Ndjson => Framing::NewlineDelimited,
    }
}

fn target(
    args: &QueryArgs,
    config: &Config,
    config_path: Option<&Path>,
) -> Result<Target, Failure> {
    if let Some(name) = &args.provider {
        let provider: &ProviderConfig = config.provider(name).ok_or_else(|| {
            let names: Vec<&str> = config.providers.iter().map(|p| p.name.as_str()).collect();
            Failure::usage(if config_path.is_none() {
                format!("--provider {name}: no configuration given; pass --config FILE")
            } else if names.is_empty() {
                format!("--provider {name}: the configuration has no [[providers]]")
            } else {
                format!(
                    "--provider {name}: no such provider; the configuration has {}",
                    names.join(", ")
                )
            })
        })?;
        if provider.provider_type == ProviderType::Builtin {
            return Err(Failure::usage(format!(
                "--provider {name} is a Decision Gate built-in, answered inside Decision Gate; query the bundled provider (no --provider) for the equivalent checks"
            )));
        }
        let endpoint = match (&provider.command, &provider.url) {
            (Some(command), _) => Endpoint::Command(command.clone()),
            (None, Some(url)) => Endpoint::Url {
                url: url.clone(),
                allow_insecure_http: provider.allow_insecure_http,
                bearer_token: provider.auth.as_ref().map(|auth| auth.bearer_token.clone()),
                connect_timeout_ms: provider.timeouts.connect_timeout_ms,
                ca_certs_pem: provider.ca_certs_pem.clone(),
            },
            (None, None) => {
                return Err(Failure::usage(format!(
                    "--provider {name} has neither command nor url"
                )));
            }
        };
        let trust = provider
            .trust_policy()
            .map_err(|error| Failure::usage(error.to_string()))?;
        return Ok(Target {
            endpoint,
            framing: framing_of(args.framing),
            provider_id: args
                .provider_id
                .clone()
                .unwrap_or_else(|| provider.name.clone()),
            contract: provider.contract.clone(),
            trust,
            timeout_ms: args
                .timeout_ms
                .unwrap_or(provider.timeouts.request_timeout_ms),
            allow_raw: provider.allow_raw,
            hash_profile: provider.hash_profile.choice(),
        });
    }
    if let Some(url) = &args.url {
        return Ok(Target {
            endpoint: Endpoint::Url {
                url: url.clone(),
                allow_insecure_http: args.allow_insecure_http,
                bearer_token: args.bearer_token.clone(),
                connect_timeout_ms: 2000,
                ca_certs_pem: read_ca_certs(&args.ca_cert)?,
            },
            framing: Framing::ContentLength,
            provider_id: args
                .provider_id
                .clone()
                .unwrap_or_else(|| "evidence-wire".to_owned()),
            contract: None,
            trust: TrustPolicy::Audit,
            timeout_ms: args.timeout_ms.unwrap_or(10_000),
            allow_raw: true,
            hash_profile: evidence_wire::dialect::HashProfile::FollowDialect,
        });
    }
    let command_line: Vec<String> = args.command.iter().chain(&args.argv).cloned().collect();
    if !command_line.is_empty() {
        return Ok(Target {
            endpoint: Endpoint::Command(command_line),
            framing: framing_of(args.framing),
            provider_id: args
                .provider_id
                .clone()
                .unwrap_or_else(|| "evidence-wire".to_owned()),
            contract: None,
            trust: TrustPolicy::Audit,
            timeout_ms: args.timeout_ms.unwrap_or(10_000),
            allow_raw: true,
            hash_profile: evidence_wire::dialect::HashProfile::FollowDialect,
        });
    }
    // The bundled provider: this binary, `serve`, with the same configuration.
    let exe = std::env::current_exe()
        .map_err(|error| Failure::usage(format!("cannot find this program: {error}")))?;
    let mut command = vec![exe.to_string_lossy().into_owned()];
    if let Some(path) = config_path {
        command.push("--config".to_owned());
        command.push(path.to_string_lossy().into_owned());
    }
    command.push("serve".to_owned());
    // A one-shot query is not a served run: no validation log in the caller's directory.
    command.push("--no-log".to_owned());
    if let Some(root) = &args.root {
        command.push("--root".to_owned());
        command.push(root.to_string_lossy().into_owned());
    }
    let mut settings = config.bundled.clone();
    if let Some(provider_id) = &args.provider_id {
        settings.provider_id = provider_id.clone();
        // The served contract checks query.provider_id: serve under the same id.
        command.push("--provider-id".to_owned());
        command.push(provider_id.clone());
    }
    let provider_id = settings.provider_id.clone();
    let contract = BundledProvider::new(&settings)
        .map_err(Failure::usage)?
        .contract();
    Ok(Target {
        endpoint: Endpoint::Command(command),
        framing: Framing::ContentLength,
        provider_id,
        contract: Some(contract),
        trust: TrustPolicy::Audit,
        timeout_ms: args.timeout_ms.unwrap_or(10_000),
        allow_raw: true,
        hash_profile: evidence_wire::dialect::HashProfile::FollowDialect,
    })
}

/// Reads each `--ca-cert` file (capped before reading) as PEM text.
fn read_ca_certs(paths: &[PathBuf]) -> Result<Vec<String>, Failure> {
    paths
        .iter()
        .map(|path| {
            evidence_wire_config::read_ca_cert("--ca-cert", path)
                .map_err(|error| Failure::usage(error.to_string()))
        })
        .collect()
}

/// `allow_raw = false`: a `kind: bytes` value is refused. Following Decision
/// Gate's redaction, the value and its content type are withheld while the
/// hash, reference and anchor are kept; the result carries the error
/// `raw_value_refused`.
fn refuse_raw(mut result: EvidenceResult, provider_id: &str) -> (EvidenceResult, String) {
    let message = format!(
        "provider {provider_id} answered raw (kind: bytes) evidence, refused because its allow_raw is false; set allow_raw = true in its [[providers]] entry to accept raw values"
    );
    result.value = None;
    result.content_type = None;
    result.error = Some(evidence::EvidenceError::new(
        "raw_value_refused",
        message.clone(),
    ));
    (result, message)
}

fn query(args: QueryArgs, config: &Config, config_path: Option<&Path>) -> Result<u8, Failure> {
    let params: Option<Value> = match &args.params {
        Some(text) => Some(
            serde_json::from_str(text)
                .map_err(|error| Failure::usage(format!("--params is not JSON: {error}")))?,
        ),
        None => None,
    };
    let context: EvidenceContext = match &args.context {
        Some(text) => serde_json::from_str(text).map_err(|error| {
            Failure::usage(format!(
                "--context is not an EvidenceContext (see spec/evidence.md): {error}"
            ))
        })?,
        None => EvidenceContext::adhoc(TriggerTime::UnixMillis(now_millis())),
    };
    let target = target(&args, config, config_path)?;
    if let Some(contract) = &target.contract {
        let check = contract.check(&args.check).ok_or_else(|| {
            let checks: Vec<&str> = contract
                .checks
                .iter()
                .map(|c| c.check_id.as_str())
                .collect();
            Failure::usage(format!(
                "provider {} has no check {:?}; its checks are {}",
                target.provider_id,
                args.check,
                checks.join(", ")
            ))
        })?;
        check
            .validate_params(params.as_ref().unwrap_or(&Value::Null))
            .map_err(|error| Failure::usage(error.to_string()))?;
    }
    let mut query = EvidenceQuery::new(target.provider_id.clone(), args.check.clone());
    if let Some(params) = params {
        query = query.with_params(params);
    }
    let mut client = ClientConfig::default();
    client.framing = target.framing;
    client.handshake = args.handshake;
    client.request_timeout_ms = target.timeout_ms;
    client.profile = args
        .profile
        .map_or(target.hash_profile, HashProfileArg::choice);
    client.trust = match key_set(&args.keys.key, &args.keys.key_file)? {
        Some((keys, _)) => TrustPolicy::RequireSignature { keys },
        None => target.trust,
    };
    let outcome = match target.endpoint {
        Endpoint::Command(command) => {
            let provider = ProcessProvider::spawn(ProcessConfig::new(command).with_client(client))
                .map_err(|error| Failure::usage(error.to_string()))?;
            provider
                .query(query, context)
                .map_err(|error| (error.to_string(), error.to_evidence_result()))
        }
        Endpoint::Url {
            url,
            allow_insecure_http,
            bearer_token,
            connect_timeout_ms,
            ca_certs_pem,
        } => {
            let mut config = HttpProviderConfig::new(url)
                .with_insecure_http(allow_insecure_http)
                .with_client(client)
                .with_connect_timeout(std::time::Duration::from_millis(connect_timeout_ms));
            if let Some(token) = bearer_token {
                config = config.with_bearer_token(token);
            }
            for pem in ca_certs_pem {
                config = config.with_root_certificate_pem(pem);
            }
            let provider =
                HttpProvider::new(config).map_err(|error| Failure::usage(error.to_string()))?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| Failure::usage(format!("cannot start the runtime: {error}")))?;
            runtime
                .block_on(provider.query(&query, &context))
                .map_err(|error| (error.to_string(), error.to_evidence_result()))
        }
    };
    let (result, code) = match outcome {
        Ok(verified)
            if !target.allow_raw
                && matches!(verified.result().value, Some(EvidenceValue::Bytes(_))) =>
        {
            let (result, message) = refuse_raw(verified.into_result(), &target.provider_id);
            report(&message);
            (result, 1)
        }
        Ok(verified) => {
            if verified.result().value.is_some() {
                eprintln!(
                    "evidence-wire: evidence_hash verified under the {} profile{}",
                    verified.profile(),
                    verified
                        .signer()
                        .map(|key_id| format!(", signed by key {key_id:?}"))
                        .unwrap_or_default()
                );
            }
            let code = u8::from(verified.result().error.is_some());
            (verified.into_result(), code)
        }
        Err((message, result)) => {
            report(&message);
            (result, 1)
        }
    };
    print_json(&result)?;
    Ok(code)
}

fn print_json(result: &EvidenceResult) -> Result<(), Failure> {
    let value = serde_json::to_value(result)
        .map_err(|error| Failure::evidence(format!("cannot print the result: {error}")))?;
    let text = serde_json::to_string_pretty(&value)
        .map_err(|error| Failure::evidence(format!("cannot print the result: {error}")))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", printable_json(&text))
        .map_err(|error| Failure::evidence(error.to_string()))
}

/// Text a peer wrote, as it may be printed: terminal controls escaped
/// (`evidence_wire::text::printable`, the one helper every printed
/// peer string goes through, the relayed provider stderr included).
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    evidence_wire::text::printable(text)
}

/// JSON text (as serde_json writes it) with the terminal controls serde_json
/// leaves raw inside strings (DEL, the C1 controls, the bidirectional
/// overrides; it escapes the C0 ones) written as `\uXXXX`: the same JSON
/// value, printable on a terminal. Such characters occur only inside
/// strings, so the escape is always valid there; the pretty printer's own
/// newlines are kept.
pub(crate) fn printable_json(text: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    let unsafe_char = |c: char| c != '\n' && evidence_wire::text::is_terminal_control(c);
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().saturating_add(16));
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

fn read_input(path: Option<&PathBuf>) -> Result<Vec<u8>, Failure> {
    // `hash --help` states this limit and what it costs in memory.
    const LIMIT: u64 = 64 * 1024 * 1024;
    let mut bytes = Vec::new();
    match path {
        None => {
            std::io::stdin()
                .take(LIMIT + 1)
                .read_to_end(&mut bytes)
                .map_err(|error| Failure::usage(format!("cannot read stdin: {error}")))?;
        }
        Some(path) if path.as_os_str() == "-" => {
            std::io::stdin()
                .take(LIMIT + 1)
                .read_to_end(&mut bytes)
                .map_err(|error| Failure::usage(format!("cannot read stdin: {error}")))?;
        }
        Some(path) => {
            let file = std::fs::File::open(path).map_err(|error| {
                Failure::usage(format!("cannot open {}: {error}", path.display()))
            })?;
            file.take(LIMIT + 1)
                .read_to_end(&mut bytes)
                .map_err(|error| {
                    Failure::usage(format!("cannot read {}: {error}", path.display()))
                })?;
        }
    }
    if bytes.len() as u64 > LIMIT {
        return Err(Failure::usage(format!(
            "input is larger than the {LIMIT}-byte limit"
        )));
    }
    Ok(bytes)
}

/// A canonicalization failure of `hash`, one line; an integer outside the
/// I-JSON range also names the flag that hashes it exactly.
fn canonical_failure(error: &canonical::CanonicalizeError) -> Failure {
    match error.kind {
        canonical::CanonicalizeErrorKind::UnsafeInteger { .. } => {
            Failure::evidence(format!("{error} (--profile decision-gate)"))
        }
        _ => Failure::evidence(error.to_string()),
    }
}

fn hash(args: HashArgs) -> Result<u8, Failure> {
    let input = read_input(args.file.as_ref())?;
    let options = Options::with_profile(args.profile.into());
    let mut stdout = std::io::stdout().lock();
    if args.canonical {
        let bytes =
            canonical::to_vec_with(&input, &options).map_err(|error| canonical_failure(&error))?;
        stdout
            .write_all(&bytes)
            .and_then(|()| stdout.write_all(b"\n"))
            .map_err(|error| Failure::evidence(error.to_string()))?;
        return Ok(0);
    }
    let value = if args.bytes {
        EvidenceValue::Bytes(input)
    } else {
        let text = std::str::from_utf8(&input)
            .map_err(|_| Failure::evidence("input is not UTF-8 JSON; use --bytes for raw bytes"))?;
        EvidenceValue::json_text(text.trim())
            .map_err(|error| Failure::evidence(format!("input is not JSON: {error}")))?
    };
    let digest: HashDigest = value
        .digest(options.profile)
        .map_err(|error| canonical_failure(&error))?;
    let text =
        serde_json::to_string(&digest).map_err(|error| Failure::evidence(error.to_string()))?;
    writeln!(stdout, "{text}").map_err(|error| Failure::evidence(error.to_string()))?;
    Ok(0)
}

fn verify(args: VerifyArgs) -> Result<u8, Failure> {
    let input = read_input(Some(&args.file))?;
    let text = std::str::from_utf8(&input).map_err(|_| Failure::usage("input is not UTF-8"))?;
    let result: EvidenceResult = match serde_json::from_str(text) {
        Ok(result) => result,
        Err(direct) => {
            let raw: Box<serde_json::value::RawValue> = serde_json::from_str(text)
                .map_err(|_| Failure::usage(format!("input is not an EvidenceResult: {direct}")))?;
            evidence_wire::dialect::from_tool_result(&raw)
                .map(|(result, _)| result)
                .map_err(|_| Failure::usage(format!("input is not an EvidenceResult: {direct}")))?
        }
    };
    let policy = match key_set(&args.keys.key, &args.keys.key_file)? {
        None => TrustPolicy::Audit,
        Some((keys, _)) => TrustPolicy::RequireSignature { keys },
    };
    // auto: Decision Gate's profile first (what an evidence-wire server
    // sends Decision Gate), then RFC 8785; a hash is a hash of this value
    // under whichever profile it matches.
    let profiles: &[Profile] = match args.profile {
        None | Some(HashProfileArg::Auto) => &[Profile::DecisionGate, Profile::Rfc8785],
        Some(HashProfileArg::Rfc8785) => &[Profile::Rfc8785],
        Some(HashProfileArg::DecisionGate) => &[Profile::DecisionGate],
    };
    let mut failures = Vec::new();
    for profile in profiles {
        match evidence::verify(result.clone(), &policy, *profile) {
            Ok(verified) => {
                print_json(verified.result())?;
                eprintln!(
                    "evidence-wire: verified under the {profile} profile{}",
                    verified
                        .signer()
                        .map(|key_id| format!(", signed by key {key_id:?}"))
                        .unwrap_or_default()
                );
                return Ok(0);
            }
            Err(error) => failures.push(format!("{} ({}): {error}", profile, error.kind())),
        }
    }
    Err(Failure::evidence(format!(
        "verification failed under {}",
        failures.join("; and under ")
    )))
}

/// The public keys of `--key KEY_ID=HEX` (inline) and `--key-file FILE`
/// (a file's key under its path as written and its stem), one spelling
/// for every command that verifies signatures (verify, query,
/// check-provider), and how they were given; `None` without either.
pub(crate) fn key_set(
    inline: &[String],
    files: &[PathBuf],
) -> Result<Option<(evidence::KeySet, Vec<String>)>, Failure> {
    if inline.is_empty() && files.is_empty() {
        return Ok(None);
    }
    let mut keys = evidence::KeySet::new();
    let mut names = Vec::new();
    for spec in inline {
        let Some((key_id, hex)) = spec.split_once('=') else {
            let hint = if Path::new(spec).exists() {
                format!("; {spec} is a file: give a public key file as --key-file {spec}")
            } else {
                "; a public key file goes to --key-file FILE".to_owned()
            };
            return Err(Failure::usage(format!(
                "--key {spec:?} must be KEY_ID=HEX (the key id, `=`, 64 hex digits){hint}"
            )));
        };
        let bytes = decode_hex32(hex.trim()).ok_or_else(|| {
            Failure::usage(format!(
                "--key {key_id}: the key must be 64 hex digits (a public key file goes to --key-file FILE)"
            ))
        })?;
        keys.insert_bytes(key_id, &bytes)
            .map_err(|error| Failure::usage(format!("--key {key_id}: {error}")))?;
        names.push(key_id.to_owned());
    }
    for path in files {
        let as_written = path.to_string_lossy().into_owned();
        let key = read_public_key_file(path)?;
        let stem = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_else(|| as_written.clone());
        for key_id in [stem, as_written.clone()] {
            keys.insert_bytes(key_id, &key)
                .map_err(|error| Failure::usage(format!("--key-file {as_written}: {error}")))?;
        }
        names.push(as_written);
    }
    Ok(Some((keys, names)))
}

/// The 32 bytes of a public key file (raw, 64 hex digits or base64; a
/// regular file only: `evidence_wire_config::open_regular_file`).
fn read_public_key_file(path: &Path) -> Result<[u8; 32], Failure> {
    let mut bytes = Vec::new();
    evidence_wire_config::open_regular_file(path)
        .and_then(|file| file.take(4097).read_to_end(&mut bytes))
        .map_err(|error| Failure::usage(format!("--key-file {}: {error}", path.display())))?;
    evidence_wire_config::decode_key_bytes(&bytes).ok_or_else(|| {
        Failure::usage(format!(
            "--key-file {}: not an ed25519 public key (32 raw bytes, 64 hex digits or base64)",
            path.display()
        ))
    })
}

/// `keygen --out PREFIX`: a fresh ed25519 key, the seed in PREFIX (0600)
/// and the public key in PREFIX.pub (32 raw bytes).
///
/// Both files or neither: an existing PREFIX or PREFIX.pub (a dangling
/// symlink included) is refused before anything is written, both are
/// created with `create_new` (which refuses an existing path and never
/// follows a symlink, closing the window after the check), and when the
/// second cannot be created or either cannot be written, what was created
/// is removed.
fn keygen(args: &KeygenArgs) -> Result<u8, Failure> {
    let secret_path = args.out.clone();
    let mut public_path = args.out.clone().into_os_string();
    public_path.push(".pub");
    let public_path = PathBuf::from(public_path);
    for path in [&secret_path, &public_path] {
        match std::fs::symlink_metadata(path) {
            Ok(metadata) => {
                return Err(Failure::usage(format!(
                    "{} already exists{}; keygen never overwrites a key and writes both PREFIX and PREFIX.pub or neither: choose another --out or remove it",
                    path.display(),
                    if metadata.file_type().is_symlink() {
                        " (as a symbolic link)"
                    } else {
                        ""
                    }
                )));
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(Failure::usage(format!(
                    "cannot check {}: {error}",
                    path.display()
                )));
            }
        }
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|error| Failure::usage(format!("no randomness from the system: {error}")))?;
    let signer = evidence::EvidenceSigner::from_seed("keygen", &seed);
    if let Some(parent) = secret_path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(|error| {
            Failure::usage(format!(
                "cannot create the directory {}: {error}",
                parent.display()
            ))
        })?;
    }
    let mut secret = create_key_file(&secret_path, 0o600)?;
    let mut public = match create_key_file(&public_path, 0o644) {
        Ok(public) => public,
        Err(failure) => {
            drop(secret);
            return Err(remove_created(failure, &[&secret_path]));
        }
    };
    let written = write_key_file(&mut secret, &secret_path, &seed)
        .and_then(|()| write_key_file(&mut public, &public_path, &signer.public_key()));
    if let Err(failure) = written {
        drop((secret, public));
        return Err(remove_created(failure, &[&secret_path, &public_path]));
    }
    println!(
        "{}",
        serde_json::json!({
            "secret_key_file": secret_path.display().to_string(),
            "public_key_file": public_path.display().to_string(),
            "public_key_hex": canonical::hex_lower(&signer.public_key()),
        })
    );
    Ok(0)
}

/// Creates a new key file with `mode` (on Unix): never an existing path,
/// never through a symlink (`create_new`).
fn create_key_file(path: &Path, mode: u32) -> Result<std::fs::File, Failure> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    options.open(path).map_err(|error| {
        Failure::usage(format!(
            "cannot create {}: {error}{}",
            path.display(),
            if error.kind() == std::io::ErrorKind::AlreadyExists {
                "; keygen never overwrites a key: choose another --out or remove it"
            } else {
                ""
            }
        ))
    })
}

fn write_key_file(file: &mut std::fs::File, path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|error| Failure::usage(format!("cannot write {}: {error}", path.display())))
}

/// `failure`, after removing the files keygen created (so a failed keygen
/// leaves neither); a file that cannot be removed is named in the message.
fn remove_created(failure: Failure, created: &[&Path]) -> Failure {
    let left: Vec<String> = created
        .iter()
        .filter_map(|path| {
            std::fs::remove_file(path)
                .err()
                .map(|error| format!("{} ({error}; remove it by hand)", path.display()))
        })
        .collect();
    if left.is_empty() {
        return failure;
    }
    Failure {
        code: failure.code,
        message: format!(
            "{}; and could not remove {}",
            failure.message,
            left.join(", ")
        ),
    }
}

fn decode_hex32(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (index, slot) in out.iter_mut().enumerate() {
        let pair = hex.get(index * 2..index * 2 + 2)?;
        *slot = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

fn contract(args: ContractArgs, config: &Config) -> Result<u8, Failure> {
    let mut settings = config.bundled.clone();
    if let Some(provider_id) = args.common.provider_id {
        settings.provider_id = provider_id;
    }
    let provider = BundledProvider::new(&settings).map_err(Failure::usage)?;
    match args.check {
        None => {
            println!("{}", provider.server_contract().contract_json());
            Ok(0)
        }
        Some(None) => contract_check("the bundled provider's contract", &provider.contract()),
        Some(Some(path)) => {
            let name = path.display().to_string();
            let text = read_contract_file(&path)?;
            match ProviderContract::from_json_str(&text) {
                Ok(contract) => contract_check(&name, &contract),
                Err(error) => {
                    println!("{name}: contract: parse: {}", printable(&error.to_string()));
                    Err(Failure::evidence(format!(
                        "{name}: not a capabilities contract (see above)"
                    )))
                }
            }
        }
    }
}

/// Reads a contract file, capped at [`evidence_wire::contract::MAX_CONTRACT_BYTES`]
/// (a regular file only: `evidence_wire_config::open_regular_file`).
fn read_contract_file(path: &Path) -> Result<String, Failure> {
    let limit = evidence_wire::contract::MAX_CONTRACT_BYTES;
    let file = evidence_wire_config::open_regular_file(path)
        .map_err(|error| Failure::usage(format!("cannot open {}: {error}", path.display())))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| Failure::usage(format!("cannot read {}: {error}", path.display())))?;
    if bytes.len() as u64 > limit {
        return Err(Failure::usage(format!(
            "{} is larger than {limit} bytes, the most Decision Gate reads for a contract",
            path.display()
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| Failure::usage(format!("{} is not UTF-8 text", path.display())))
}

/// `contract --check`: what `validate` refuses, then Decision Gate's own
/// rules; one line per problem on stdout (`NAME: LOCATION: RULE: DETAIL`).
fn contract_check(name: &str, contract: &ProviderContract) -> Result<u8, Failure> {
    let mut problems = Vec::new();
    if let Err(error) = contract.validate(&contract.provider_id) {
        problems.push(format!("contract: contract_valid: {error}"));
    }
    problems.extend(
        contract
            .check_decision_gate_rules()
            .iter()
            .map(ToString::to_string),
    );
    if problems.is_empty() {
        println!(
            "{name}: ok ({} check{} meet Decision Gate's contract rules, strict validation included)",
            contract.checks.len(),
            if contract.checks.len() == 1 { "" } else { "s" }
        );
        return Ok(0);
    }
    for problem in &problems {
        println!("{name}: {}", printable(problem));
    }
    Err(Failure::evidence(format!(
        "{name}: {} problem{} Decision Gate would refuse (listed above)",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    )))
}

/// Decision Gate's limits on a `capabilities_path` string: at most 4096
/// bytes in all and 255 per component.
fn dg_path_rule(path: &Path) -> Option<String> {
    let text = path.display().to_string();
    if text.len() > 4096 {
        return Some(format!(
            "capabilities_path: path_length: {} bytes, more than the 4096 Decision Gate accepts",
            text.len()
        ));
    }
    path.components()
        .map(|component| component.as_os_str().to_string_lossy().into_owned())
        .find(|component| component.len() > 255)
        .map(|component| {
            format!(
                "capabilities_path: path_length: the component {component:?} is longer than the 255 bytes Decision Gate accepts"
            )
        })
}
