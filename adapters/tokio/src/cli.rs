//! A ready command line for any provider (feature `cli`): the whole `main`
//! of a provider binary is one call.
//!
//! ```no_run
//! use evidence_wire_tokio::prelude::*;
//!
//! fn answer(_: NoParams, _: &CheckContext) -> Result<u64, CheckError> {
//!     Ok(42)
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     Provider::new("demo", "Answers questions about nothing.")
//!         .check(Check::new("answer", "The answer.", answer))
//!         .run()
//! }
//! ```
//!
//! The binary then understands the same commands and flags as
//! `evidence-wire serve` and `evidence-wire contract` (the option structs
//! here are the CLI's own):
//!
//! - no command, or `serve`: serve on stdio (Content-Length or one JSON per
//!   line, detected; what Decision Gate's `command = ["my-provider"]`
//!   runs); `--http ADDR` serves HTTP instead (`POST /rpc`, `POST /mcp`,
//!   `GET /healthz`, `GET /readyz`), with `--tls-cert FILE --tls-key FILE`
//!   HTTPS (the files are read again when they change and on SIGHUP);
//!   `--root DIR` is given to the checks
//!   ([`CheckContext::root`](evidence_wire_provider::CheckContext::root));
//!   `--signing-key FILE --key-id ID` signs with the seed
//!   `evidence-wire keygen` writes
//!   ([`Provider::signing_key_file`]); `--provider-id ID` serves the
//!   provider under another id (one Decision Gate can then use the same
//!   program twice, say on stdio and on HTTP); `--log-dir DIR` writes the
//!   envelope validation log there (off by default, unlike `evidence-wire
//!   serve`, so that a provider started in a working tree leaves nothing
//!   in it; `--no-log` is accepted and keeps it off);
//!   `--drain-timeout-ms MS` bounds the
//!   drain after SIGTERM or SIGINT (a second signal exits at once);
//!   `--call-timeout-ms MS` gives every call a deadline
//!   ([`Provider::call_timeout`]; a check reads it with
//!   [`CheckContext::remaining`](evidence_wire_provider::CheckContext::remaining));
//!   `--bearer-token-file FILE` requires a bearer token on HTTP (without
//!   one, only a loopback address is served). `--http` needs the
//!   `http-server` feature and `--tls-*` the `tls` feature (both on by
//!   default): a stdio provider built with `cli` alone compiles no HTTP
//!   stack, and refuses them with a message saying so.
//! - `contract [--provider-id ID]`: the capabilities contract, the JSON
//!   Decision Gate reads from `capabilities_path`.
//! - `--help`, `--version` ([`Runner::version`] sets the version shown).
//!
//! Exit codes: 0 served to the end of input or drained, 1 serving failed,
//! 2 a usage error (an unknown flag, a missing file, an invalid contract);
//! errors are one line on stderr, `<program>: <what is wrong>`.
//!
//! Your own options: a `clap::Args` type, given to a function that builds
//! the provider from them ([`RunProvider::run_with`]); they are accepted by
//! `serve` and `contract` alike and shown in their `--help`. They must not
//! reuse the names above.
//!
//! ```no_run
//! use evidence_wire_tokio::prelude::*;
//!
//! #[derive(clap::Args)]
//! struct Tracker {
//!     /// The ticket tracker's base URL.
//!     #[arg(long, default_value = "https://tracker.example")]
//!     tracker_url: String,
//! }
//!
//! # fn open_tickets(_: &str) -> Check { unimplemented!() }
//! fn main() -> std::process::ExitCode {
//!     Provider::new("release", "Release readiness.").run_with(|args: Tracker, provider| {
//!         Ok::<_, std::convert::Infallible>(provider.check(open_tickets(&args.tracker_url)))
//!     })
//! }
//! ```
//!
//! (`clap` with its `derive` feature in your dependencies, or this
//! module's re-export [`clap`].) [`Runner`] takes a version; the option
//! structs ([`ServeArgs`], [`TlsArgs`], [`ContractArgs`]) are public for a
//! command line of your own design, and so are the signal helpers
//! [`termination_signal`] and [`reload_tls_on_hangup`].

use std::convert::Infallible;
use std::ffi::OsString;
use std::fmt::Display;
use std::future::{Future, poll_fn};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

pub use clap;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use evidence_wire::server::DEFAULT_DRAIN_TIMEOUT_MS;
use evidence_wire_log::{LogSettings, ValidationLog};
use evidence_wire_provider::{IntoService, Provider, Service};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::oneshot;

#[cfg(feature = "tls")]
use crate::TlsFiles;
use crate::serve_with_log;
#[cfg(feature = "http-server")]
use crate::{HttpServerConfig, bind_http, serve_http};

/// `serve`'s options: the ones `evidence-wire serve` shares with every
/// provider built on [`Runner`] (the CLI flattens this struct into its
/// own, adding the bundled provider's options and configuration-file
/// defaults). Like every option struct here it makes no argument group
/// (`#[group(skip)]`), so it flattens into a struct of any name.
#[derive(Args, Clone, Debug, Default)]
#[group(skip)]
#[non_exhaustive]
pub struct ServeArgs {
    /// Serve HTTP on this address (POST /rpc and /mcp, GET /healthz and
    /// /readyz) instead of stdio. SIGTERM or SIGINT drains (see
    /// --drain-timeout-ms).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// HTTPS for `--http`.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Directory the checks read their files from (a check sees it as
    /// CheckContext::root).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// The provider id queries must carry and the contract declares
    /// (default: the provider's own). A second id lets one Decision Gate
    /// use the same program twice, e.g. on stdio and on HTTP; `contract
    /// --provider-id` prints the contract that goes with it.
    #[arg(long, value_name = "ID")]
    pub provider_id: Option<String>,
    /// Sign every successful result with this ed25519 secret seed file
    /// (`evidence-wire keygen` writes one).
    #[arg(long, value_name = "FILE")]
    pub signing_key: Option<PathBuf>,
    /// The key_id put in signatures (default: the key file's stem). For
    /// Decision Gate: the public key's path exactly as its config lists it
    /// under require_signature keys.
    #[arg(long, value_name = "ID")]
    pub key_id: Option<String>,
    /// Do not write the envelope validation log (a provider's default:
    /// it writes one only with --log-dir).
    #[arg(long, conflicts_with = "log_dir")]
    pub no_log: bool,
    /// Write the envelope validation log (JSON Lines, one record per
    /// message, as Decision Gate's server writes it) to this directory.
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// On SIGTERM or SIGINT, how long the queries in flight may run before
    /// they are given up: over HTTP answered with a retryable error, on
    /// stdio left unanswered as the process exits (default: 25000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub drain_timeout_ms: Option<u64>,
    /// Give every call a deadline this many milliseconds after it starts
    /// (1..=600000): a check reads the time left with
    /// CheckContext::remaining, and a blocking check polling is_cancelled
    /// sees it pass (default: no deadline).
    #[arg(long, value_name = "MS", value_parser = parse_call_timeout_ms)]
    pub call_timeout_ms: Option<u64>,
}

/// Largest `--call-timeout-ms` (10 minutes, as `--drain-timeout-ms`).
pub const MAX_CALL_TIMEOUT_MS: u64 = 600_000;

/// `--call-timeout-ms`: 1..=[`MAX_CALL_TIMEOUT_MS`]; zero would fail every
/// call, so it is refused with what to give instead.
fn parse_call_timeout_ms(value: &str) -> Result<u64, String> {
    let ms: u64 = value
        .parse()
        .map_err(|_| format!("{value:?} is not a number of milliseconds"))?;
    if ms == 0 {
        return Err(
            "0 would give every call no time at all; give the milliseconds a call may run (1..=600000), or leave the option out for no deadline"
                .to_owned(),
        );
    }
    if ms > MAX_CALL_TIMEOUT_MS {
        return Err(format!(
            "{ms} is more than {MAX_CALL_TIMEOUT_MS} (10 minutes); give 1..={MAX_CALL_TIMEOUT_MS}, or leave the option out for no deadline"
        ));
    }
    Ok(ms)
}

/// `--tls-cert` and `--tls-key`: HTTPS for `--http`.
#[derive(Args, Clone, Debug, Default)]
#[group(skip)]
#[non_exhaustive]
pub struct TlsArgs {
    /// Serve HTTPS with this certificate chain (PEM, leaf first; with
    /// --tls-key). Read again when it changes and on SIGHUP, so a renewed
    /// certificate needs no restart.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The certificate and key files, when both are given.
    pub fn files(&self) -> Option<(&Path, &Path)> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            _ => None,
        }
    }
}

/// `contract`'s options shared with `evidence-wire contract`.
#[derive(Args, Clone, Debug, Default)]
#[group(skip)]
#[non_exhaustive]
pub struct ContractArgs {
    /// The provider id to put in the contract (default: the provider's
    /// own; the same as serve --provider-id).
    #[arg(long, value_name = "ID")]
    pub provider_id: Option<String>,
}

/// The options [`Runner`]'s `serve` has besides [`ServeArgs`].
#[derive(Args, Clone, Debug, Default)]
#[group(skip)]
struct RunnerServeArgs {
    /// Require this bearer token (the file's first line) on every HTTP
    /// call: Decision Gate's auth.bearer_token for the provider. Without
    /// it, --http serves a loopback address only.
    #[arg(long, value_name = "FILE")]
    bearer_token_file: Option<PathBuf>,
}

/// No options of the author's own ([`RunProvider::run`]).
#[derive(Args, Clone, Copy, Debug, Default)]
#[group(skip)]
pub struct NoArgs {}

/// The largest bearer token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

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

    fn serving(message: impl Into<String>) -> Self {
        Failure {
            code: 1,
            message: message.into(),
        }
    }
}

/// The ready command line of one provider: `serve`, `contract`, `--help`
/// and `--version` (see the [module docs](self)).
#[derive(Debug)]
pub struct Runner {
    provider: Provider,
    version: Option<String>,
}

impl Runner {
    /// The command line of `provider`.
    pub fn new(provider: Provider) -> Self {
        Runner {
            provider,
            version: None,
        }
    }

    /// The version `--version` shows (usually `env!("CARGO_PKG_VERSION")`;
    /// without one it names the evidence-wire-tokio version it was built
    /// with).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// The clap command, with the author's options `A` on `serve` and
    /// `contract`, named `bin` (for tests of its help, or to render it).
    pub fn command<A: Args>(&self, bin: &str) -> Command {
        let id = self.provider.id().to_owned();
        let version = self.version.clone().unwrap_or_else(|| {
            format!(
                "(built with evidence-wire-tokio {})",
                env!("CARGO_PKG_VERSION")
            )
        });
        // The option structs' doc comments would set the commands' about
        // text: set it after them.
        let serve = A::augment_args(RunnerServeArgs::augment_args(ServeArgs::augment_args(
            Command::new("serve"),
        )))
        .about("Serve the provider on stdio (the default), or on HTTP with --http")
        .long_about(None)
        .after_help(format!(
            "Examples:\n  {bin} serve\n      stdio, as Decision Gate's command = [\"{bin}\"] runs it\n  {bin} serve --http 127.0.0.1:8080\n  {bin} serve --signing-key signing-key --key-id signing-key.pub\n      signed for Decision Gate's require_signature (evidence-wire keygen --out signing-key)"
        ));
        let contract = A::augment_args(ContractArgs::augment_args(Command::new("contract")))
            .about("Print the capabilities contract (for Decision Gate's capabilities_path)")
            .long_about(None)
            .after_help(format!(
                "Examples:\n  {bin} contract > {id}.contract.json\n  {bin} contract --provider-id {id}-http > {id}-http.contract.json"
            ));
        let description = self.provider.contract().description;
        Command::new(bin.to_owned())
            .version(version)
            .about(description)
            .after_help(format!(
                "Without a command: serve on stdio.\n\nExamples:\n  {bin} contract > {id}.contract.json\n  {bin} serve --http 127.0.0.1:8080"
            ))
            .subcommand(serve)
            .subcommand(contract)
    }

    /// Runs the command line on this process's arguments.
    pub fn run(self) -> ExitCode {
        self.run_with(|_: NoArgs, provider| Ok::<_, Infallible>(provider))
    }

    /// Runs the command line on this process's arguments with the
    /// author's options `A`, given to `build` with the provider; what
    /// `build` returns is served (or its contract printed). An error from
    /// `build` is a usage error (exit 2).
    pub fn run_with<A, E>(self, build: impl FnOnce(A, Provider) -> Result<Provider, E>) -> ExitCode
    where
        A: Args + FromArgMatches,
        E: Display,
    {
        self.run_from(std::env::args_os(), build)
    }

    /// [`Runner::run_with`] on `args` (the program name first).
    pub fn run_from<A, E, I, T>(
        self,
        args: I,
        build: impl FnOnce(A, Provider) -> Result<Provider, E>,
    ) -> ExitCode
    where
        A: Args + FromArgMatches,
        E: Display,
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let bin = args
            .first()
            .and_then(|program| Path::new(program).file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.provider.id().to_owned());
        // No command at all: serve on stdio.
        if args.len() <= 1 {
            args.truncate(1);
            if args.is_empty() {
                args.push(OsString::from(&bin));
            }
            args.push(OsString::from("serve"));
        }
        let matches = match self.command::<A>(&bin).try_get_matches_from(args) {
            Ok(matches) => matches,
            Err(error) => {
                let _ = error.print();
                return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
            }
        };
        match self.dispatch(&bin, &matches, build) {
            Ok(()) => ExitCode::SUCCESS,
            Err(failure) => {
                report(&bin, &failure.message);
                ExitCode::from(failure.code)
            }
        }
    }

    fn dispatch<A, E>(
        self,
        bin: &str,
        matches: &ArgMatches,
        build: impl FnOnce(A, Provider) -> Result<Provider, E>,
    ) -> Result<(), Failure>
    where
        A: Args + FromArgMatches,
        E: Display,
    {
        let parse_error = |error: clap::Error| Failure::usage(error.to_string());
        match matches.subcommand() {
            Some(("contract", matches)) => {
                let args = ContractArgs::from_arg_matches(matches).map_err(parse_error)?;
                let own = A::from_arg_matches(matches).map_err(parse_error)?;
                let mut provider =
                    build(own, self.provider).map_err(|error| Failure::usage(error.to_string()))?;
                if let Some(id) = args.provider_id {
                    provider = provider.with_id(id);
                }
                let contract = provider.server_contract().map_err(|error| {
                    Failure::usage(format!(
                        "the contract of provider {:?} is invalid: {error}",
                        provider.id()
                    ))
                })?;
                let mut stdout = std::io::stdout().lock();
                writeln!(stdout, "{}", contract.contract_json())
                    .and_then(|()| stdout.flush())
                    .map_err(|error| {
                        Failure::serving(format!("cannot write the contract: {error}"))
                    })
            }
            Some(("serve", matches)) => {
                let args = ServeArgs::from_arg_matches(matches).map_err(parse_error)?;
                let runner = RunnerServeArgs::from_arg_matches(matches).map_err(parse_error)?;
                let own = A::from_arg_matches(matches).map_err(parse_error)?;
                let provider =
                    build(own, self.provider).map_err(|error| Failure::usage(error.to_string()))?;
                serve(provider, &args, &runner, bin)
            }
            _ => Err(Failure::usage(
                "no command: use serve or contract (see --help)",
            )),
        }
    }
}

/// `Provider::run()`: the ready command line of a provider (see the
/// [module docs](self)).
pub trait RunProvider {
    /// Runs the command line on this process's arguments: `serve` (the
    /// default) or `contract`. The whole of a provider's `main`:
    /// `fn main() -> std::process::ExitCode { provider().run() }`.
    fn run(self) -> ExitCode;

    /// [`RunProvider::run`] with options of the author's own: `A` (a
    /// `clap::Args` type) is read from the command line and given to
    /// `build` with the provider, and what `build` returns is served.
    fn run_with<A, E>(self, build: impl FnOnce(A, Provider) -> Result<Provider, E>) -> ExitCode
    where
        A: Args + FromArgMatches,
        E: Display;
}

impl RunProvider for Provider {
    fn run(self) -> ExitCode {
        Runner::new(self).run()
    }

    fn run_with<A, E>(self, build: impl FnOnce(A, Provider) -> Result<Provider, E>) -> ExitCode
    where
        A: Args + FromArgMatches,
        E: Display,
    {
        Runner::new(self).run_with(build)
    }
}

/// `<bin>: <message>` on stderr (best effort: stderr may be gone).
fn report(bin: &str, message: &str) {
    let _ = writeln!(std::io::stderr(), "{bin}: {message}");
}

/// The provider as `serve`'s flags configure it: id, root, signing key.
fn configure(mut provider: Provider, args: &ServeArgs) -> Result<Provider, Failure> {
    if let Some(id) = &args.provider_id {
        provider = provider.with_id(id.clone());
    }
    if let Some(ms) = args.call_timeout_ms {
        provider = provider.call_timeout(Duration::from_millis(ms));
    }
    if let Some(root) = &args.root {
        match std::fs::metadata(root) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => {
                return Err(Failure::usage(format!(
                    "--root {}: not a directory; give the directory the checks read from",
                    root.display()
                )));
            }
            Err(error) => {
                return Err(Failure::usage(format!(
                    "--root {}: {error}; give an existing directory",
                    root.display()
                )));
            }
        }
        match evidence_wire_provider::EvidenceRoot::open(root) {
            Ok(opened) => provider = provider.root(opened),
            Err(error) => {
                return Err(Failure::usage(format!(
                    "--root {}: {error}; give an existing directory",
                    root.display()
                )));
            }
        }
    }
    match (&args.signing_key, &args.key_id) {
        (Some(file), key_id) => {
            let key_id = match key_id {
                Some(key_id) => key_id.clone(),
                None => file
                    .file_stem()
                    .and_then(|stem| stem.to_str())
                    .filter(|stem| !stem.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        Failure::usage(format!(
                            "--signing-key {}: no UTF-8 file stem to use as key id; give --key-id",
                            file.display()
                        ))
                    })?,
            };
            provider = provider
                .signing_key_file(file, key_id)
                .map_err(|error| Failure::usage(format!("--signing-key: {error}")))?;
        }
        (None, Some(_)) => {
            return Err(Failure::usage(
                "--key-id needs a signing key: give --signing-key FILE",
            ));
        }
        (None, None) => {}
    }
    Ok(provider)
}

/// The bearer token in `path`: its first line, trimmed, not empty.
fn read_token_file(path: &Path) -> Result<String, Failure> {
    let failure = |detail: String| {
        Failure::usage(format!("--bearer-token-file {}: {detail}", path.display()))
    };
    let metadata = std::fs::metadata(path).map_err(|error| failure(error.to_string()))?;
    if !metadata.is_file() {
        return Err(failure("not a regular file".to_owned()));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_TOKEN_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|error| failure(error.to_string()))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_TOKEN_FILE_BYTES {
        return Err(failure(format!(
            "larger than {MAX_TOKEN_FILE_BYTES} bytes; put the token alone on the first line"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| failure("not UTF-8 text".to_owned()))?;
    let token = text.lines().next().unwrap_or_default().trim();
    if token.is_empty() {
        return Err(failure(
            "the first line is empty; put the token on it".to_owned(),
        ));
    }
    Ok(token.to_owned())
}

/// The validation log `--log-dir` / `--no-log` ask for.
fn validation_log(args: &ServeArgs, bin: &str) -> ValidationLog {
    let Some(dir) = args.log_dir.clone().filter(|_| !args.no_log) else {
        return ValidationLog::disabled();
    };
    let bin = bin.to_owned();
    let reporter: Arc<dyn Fn(&str) + Send + Sync> = Arc::new(move |message: &str| {
        let _ = writeln!(std::io::stderr(), "{bin}: validation log: {message}");
    });
    ValidationLog::open_with_reporter(&LogSettings::new(dir), reporter)
}

/// `serve`: the provider on stdio or HTTP until end of input or a signal.
fn serve(
    provider: Provider,
    args: &ServeArgs,
    runner: &RunnerServeArgs,
    bin: &str,
) -> Result<(), Failure> {
    let provider = configure(provider, args)?;
    let token = match &runner.bearer_token_file {
        Some(path) => Some(read_token_file(path)?),
        None => None,
    };
    if args.http.is_none() && (args.tls.files().is_some() || token.is_some()) {
        return Err(Failure::usage(
            "--tls-cert, --tls-key and --bearer-token-file are for the HTTP server: add --http ADDR",
        ));
    }
    let service = provider
        .into_service()
        .map_err(|error| Failure::usage(error.to_string()))?;
    let drain = Duration::from_millis(args.drain_timeout_ms.unwrap_or(DEFAULT_DRAIN_TIMEOUT_MS));
    let log = validation_log(args, bin);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| Failure::serving(format!("cannot start the runtime: {error}")))?;
    #[cfg(not(feature = "http-server"))]
    if let Some(address) = args.http {
        let _ = (address, token);
        return Err(Failure::usage(format!(
            "--http: {bin} was built without HTTP serving (evidence-wire-tokio's `http-server` feature, on by default); serve on stdio, or rebuild with the feature"
        )));
    }
    #[cfg(all(feature = "http-server", not(feature = "tls")))]
    if args.tls.files().is_some() {
        return Err(Failure::usage(format!(
            "--tls-cert: {bin} was built without HTTPS (evidence-wire-tokio's `tls` feature, on by default); serve plain HTTP behind a TLS proxy, or rebuild with the feature"
        )));
    }
    let served = match args.http {
        #[cfg(feature = "http-server")]
        Some(address) => {
            if !address.ip().is_loopback() && token.is_none() {
                return Err(Failure::usage(format!(
                    "{address} is reachable from other machines but no bearer token is required: add --bearer-token-file FILE, or bind to 127.0.0.1"
                )));
            }
            let http = HttpSettings {
                address,
                tls: args
                    .tls
                    .files()
                    .map(|(cert, key)| (cert.to_path_buf(), key.to_path_buf())),
                token,
                drain,
            };
            runtime.block_on(serve_http_until_signal(service, http, log, bin))
        }
        _ => runtime.block_on(serve_stdio_until_signal(service, log, drain, bin)),
    };
    // Every call was answered or given up: do not wait for the thread
    // reading stdin or for checks still running on the blocking pool.
    runtime.shutdown_background();
    served
}

/// How `serve --http` serves.
#[cfg(feature = "http-server")]
struct HttpSettings {
    address: SocketAddr,
    tls: Option<(PathBuf, PathBuf)>,
    token: Option<String>,
    drain: Duration,
}

#[cfg(feature = "http-server")]
async fn serve_http_until_signal(
    service: Service,
    settings: HttpSettings,
    log: ValidationLog,
    bin: &str,
) -> Result<(), Failure> {
    let mut config = HttpServerConfig::default()
        .with_validation_log(log)
        .with_drain_timeout(settings.drain);
    if let Some(token) = settings.token {
        config = config.with_bearer_token(token);
    }
    #[cfg(feature = "tls")]
    let files = match &settings.tls {
        Some((cert, key)) => {
            let files =
                TlsFiles::load(cert, key).map_err(|error| Failure::usage(error.to_string()))?;
            config = config.with_tls(Arc::clone(&files));
            Some(files)
        }
        None => None,
    };
    // Without the feature `serve` refused TLS files: there are none.
    #[cfg(not(feature = "tls"))]
    let files: Option<()> = settings.tls.map(drop);
    let address = settings.address;
    let listener = bind_http(address, &config)
        .await
        .map_err(|error| Failure::usage(format!("cannot serve on {address}: {error}")))?;
    let local = listener
        .local_addr()
        .map_err(|error| Failure::serving(error.to_string()))?;
    let scheme = if files.is_some() { "https" } else { "http" };
    #[cfg(feature = "tls")]
    if let Some(files) = files {
        reload_tls_on_hangup(files, bin);
    }
    let _ = writeln!(std::io::stderr(), "listening on {scheme}://{local}/rpc");
    let signal = termination_signal(bin);
    let bin = bin.to_owned();
    let shutdown = async move {
        signal.await;
        let _ = writeln!(
            std::io::stderr(),
            "{bin}: shutting down: draining the calls in flight"
        );
    };
    serve_http(listener, service, config, shutdown)
        .await
        .map_err(|error| Failure::serving(error.to_string()))
}

async fn serve_stdio_until_signal(
    service: Service,
    log: ValidationLog,
    drain: Duration,
    bin: &str,
) -> Result<(), Failure> {
    let (stop, stopped) = oneshot::channel();
    let input = UntilStopped {
        inner: tokio::io::stdin(),
        stop: Some(stopped),
    };
    let mut served = std::pin::pin!(serve_with_log(service, input, crate::stdio::stdout(), &log));
    let mut signal = std::pin::pin!(termination_signal(bin));
    let first = poll_fn(|cx| {
        if let Poll::Ready(outcome) = served.as_mut().poll(cx) {
            return Poll::Ready(Some(outcome));
        }
        match signal.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    let outcome = match first {
        Some(outcome) => outcome,
        None => {
            // Stop reading; answer what was read, for up to `drain`.
            let _ = stop.send(());
            let _ = writeln!(
                std::io::stderr(),
                "{bin}: shutting down: answering the queries read"
            );
            match tokio::time::timeout(drain, served).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "{bin}: the drain timeout ({} ms) passed: exiting without the answers still running",
                        drain.as_millis()
                    );
                    Ok(())
                }
            }
        }
    };
    log.flush();
    outcome.map_err(|error| Failure::serving(error.to_string()))
}

/// Input that ends (reads as end of input) once `stop` fires: the stdio
/// loop then answers what it read and returns.
struct UntilStopped<R> {
    inner: R,
    stop: Option<oneshot::Receiver<()>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for UntilStopped<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(stop) = self.stop.as_mut() {
            if Pin::new(stop).poll(cx).is_ready() {
                self.stop = None;
            }
        }
        if self.stop.is_none() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// What completes on the first SIGTERM or SIGINT (elsewhere than Unix,
/// Ctrl-C). Must be created inside a tokio runtime, which must keep
/// running while the caller drains. Once created, the first signal no
/// longer ends the process: the caller drains and exits. A second one
/// during the drain ends the process at once (exit 128 + the signal's
/// number: 143 for SIGTERM, 130 for SIGINT), saying so on stderr as
/// `<program>: ...`, for an operator who will not wait for the drain. If a
/// handler cannot be installed, a note goes to stderr and the signals keep
/// their default action.
pub fn termination_signal(program: &str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    let program = program.to_owned();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        fn first_of<'a>(
            term: &'a mut Signal,
            int: &'a mut Signal,
        ) -> impl Future<Output = i32> + Send + 'a {
            poll_fn(move |cx| {
                if term.poll_recv(cx).is_ready() {
                    return Poll::Ready(143);
                }
                if int.poll_recv(cx).is_ready() {
                    return Poll::Ready(130);
                }
                Poll::Pending
            })
        }
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => Box::pin(async move {
                first_of(&mut term, &mut int).await;
                tokio::spawn(async move {
                    let code = first_of(&mut term, &mut int).await;
                    let _ = writeln!(
                        std::io::stderr(),
                        "{program}: a second signal: exiting now, without waiting for the drain"
                    );
                    std::process::exit(code);
                });
            }),
            (term, int) => {
                for error in [term.err(), int.err()].into_iter().flatten() {
                    let _ = writeln!(
                        std::io::stderr(),
                        "{program}: cannot watch for shutdown signals: {error}"
                    );
                }
                Box::pin(std::future::pending())
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = program;
        Box::pin(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

/// On SIGHUP (Unix), reads the TLS files again and says on stderr, as
/// `<program>: ...`, whether the new pair is served (a pair that cannot be
/// used leaves the working one in place). Call it inside a tokio runtime.
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub fn reload_tls_on_hangup(files: Arc<TlsFiles>, program: &str) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let program = program.to_owned();
        match signal(SignalKind::hangup()) {
            Ok(mut hangups) => {
                tokio::spawn(async move {
                    while hangups.recv().await.is_some() {
                        let line = match files.reload() {
                            Ok(()) => format!(
                                "{program}: SIGHUP: reloaded the TLS certificate and key; new connections use them"
                            ),
                            Err(error) => format!(
                                "{program}: SIGHUP: serving with the previous TLS files: {error}"
                            ),
                        };
                        let _ = writeln!(std::io::stderr(), "{line}");
                    }
                });
            }
            Err(error) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "{program}: cannot watch for SIGHUP (the TLS files are still reloaded when they change): {error}"
                );
            }
        }
    }
    #[cfg(not(unix))]
    drop((files, program));
}
