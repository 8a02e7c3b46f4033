//! `evidence-wire check-provider`: a conformance and robustness report for
//! any evidence provider (issue 26).
//!
//! It runs a battery against the provider (transport and dialect, the
//! capabilities contract against Decision Gate's rules, every check of the
//! contract, robustness, signatures with `--key-file` or `--key`) and prints one line per
//! check, `pass`, `warn` or `fail` with its reason, or with `--json` the
//! same lines with their evidence. Exit 0 without a `fail`, 1 with one, 2
//! on a usage error, 130 when interrupted (SIGINT, SIGTERM).
//! `spec/guides/checking-a-provider.md` explains every line.
//!
//! The battery is a library (`evidence_wire_tokio::testing::check_provider`,
//! feature `testing`), which a provider's own `cargo test` runs too; this
//! module is its command line. It is built on the core client
//! ([`evidence_wire::client`]): every request and every answer goes
//! through its raw entry points; broken frames are written with
//! `Client::send_raw`, their ids reserved with `Client::expect_reply`, so
//! the client still matches what the provider answers to them.
//!
//! The provider's contract comes from `--contract FILE`, or, without one,
//! from the provider itself: `resources/read` of `decision-gate://contract`
//! (`CONTRACT_URI`), whose text is the contract JSON as
//! `evidence-wire contract` prints it. Without either, the per-check
//! battery uses only what `tools/list` says (the `check_id` enum of the
//! input schema), and `contract.source` says so.
//!
//! A stdio provider runs in a process group of its own, ended as a whole
//! with each session (the library's `process`), so a launcher that does not `exec`
//! and whatever it started end with it; no read of its pipes waits
//! without a deadline (issue 38). SIGINT or SIGTERM ends the groups still
//! running and exits 130. On Linux check-provider is a child subreaper
//! while it runs, to reap the orphans of its providers.
//!
//! Limits: see the library's `battery` (timeouts, fixed counts),
//! `session` (bounded queues, stderr sampling, pipe deadlines) and
//! `process` (the grace before SIGKILL); the contract file is read up to
//! Decision Gate's 1 MiB.

use std::path::{Path, PathBuf};

use evidence_wire::contract::ProviderContract;
use evidence_wire_bundled::BundledProvider;
use evidence_wire_config::Config;
use evidence_wire_tokio::testing::check_provider::{
    Battery, ContractInput, Endpoint, ExitLog, Keys, Report, process,
};
use evidence_wire_tokio::{HttpProvider, HttpProviderConfig};

use crate::Failure;

/// `check-provider`'s arguments.
#[derive(clap::Args)]
pub struct CheckProviderArgs {
    /// Provider program, spawned without a shell, afresh for each probe,
    /// in a process group of its own that is ended with the probe; its
    /// arguments go after `--` (default: this binary's bundled provider).
    #[arg(long, value_name = "PROGRAM", conflicts_with = "url")]
    command: Option<String>,
    /// After `--`: the provider's arguments (with --command), or its whole
    /// command line, program first (without): `-- ./my-provider --flag`.
    #[arg(last = true, value_name = "ARGV", conflicts_with = "url")]
    argv: Vec<String>,
    /// URL of an HTTP provider (POST, JSON-RPC).
    #[arg(long)]
    url: Option<String>,
    /// PEM certificate file trusted for an https:// --url, besides the
    /// public web roots; repeatable.
    #[arg(long = "ca-cert", value_name = "FILE", requires = "url")]
    ca_cert: Vec<PathBuf>,
    /// Allow a plain http:// --url.
    #[arg(long, requires = "url")]
    allow_insecure_http: bool,
    /// Bearer token sent to an HTTP provider.
    #[arg(long, env = "EVIDENCE_WIRE_BEARER_TOKEN", hide_env_values = true)]
    bearer_token: Option<String>,
    /// The provider's capabilities contract (the JSON file Decision Gate's
    /// capabilities_path names). Without it: the one the provider serves
    /// at resources/read decision-gate://contract, else only what
    /// tools/list says (the bundled provider: its own).
    #[arg(long, value_name = "FILE")]
    contract: Option<PathBuf>,
    /// The provider id put in queries (default: the contract's).
    #[arg(long, value_name = "ID")]
    provider_id: Option<String>,
    // Require every result to be signed: `--key-file FILE` (a public key
    // file) or `--key KEY_ID=HEX` (inline), as verify and query take them.
    #[command(flatten)]
    keys: crate::KeyArgs,
    /// Print the report as JSON, every line with its evidence (for CI).
    #[arg(long)]
    json: bool,
    /// How long each request may wait for its answer, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=120_000))]
    timeout_ms: u64,
    /// Answers timed per check for its latency line.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000))]
    samples: u64,
}

/// Runs `check-provider`: the battery, the report on stdout, exit 1 on a `fail`.
pub(crate) fn main(
    args: CheckProviderArgs,
    config: &Config,
    config_path: Option<&Path>,
) -> Result<u8, Failure> {
    let keys = keys(&args.keys)?;
    let mut contract = match &args.contract {
        Some(path) => {
            let text = crate::read_contract_file(path)?;
            ContractInput::File {
                path: path.display().to_string(),
                parsed: ProviderContract::from_json_str(&text).map_err(|error| error.to_string()),
            }
        }
        None => ContractInput::None,
    };
    let mut provider_id = args.provider_id.clone();
    let (endpoint, target) = if let Some(url) = &args.url {
        let mut http = HttpProviderConfig::new(url.clone())
            .with_insecure_http(args.allow_insecure_http)
            .with_connect_timeout(std::time::Duration::from_millis(2000));
        if let Some(token) = &args.bearer_token {
            http = http.with_bearer_token(token.clone());
        }
        for pem in crate::read_ca_certs(&args.ca_cert)? {
            http = http.with_root_certificate_pem(pem);
        }
        let provider =
            HttpProvider::new(http).map_err(|error| Failure::usage(error.to_string()))?;
        (Endpoint::Http(provider), url.clone())
    } else {
        let command_line: Vec<String> = args.command.iter().chain(&args.argv).cloned().collect();
        if command_line.is_empty() {
            // The bundled provider: this binary, `serve`, with the same configuration.
            let (command, own_contract, id) = bundled(config, config_path, &args)?;
            if matches!(contract, ContractInput::None) {
                contract = ContractInput::Bundled(own_contract);
            }
            provider_id.get_or_insert(id);
            let target = format!("the bundled provider ({})", command.join(" "));
            (Endpoint::Command(command), target)
        } else {
            let target = command_line.join(" ");
            (Endpoint::Command(command_line), target)
        }
    };
    #[cfg(unix)]
    if matches!(endpoint, Endpoint::Command(_)) {
        prepare();
    }
    let battery = Battery {
        endpoint,
        contract,
        provider_id,
        keys,
        timeout_ms: args.timeout_ms,
        samples: usize::try_from(args.samples).unwrap_or(20),
        exits: ExitLog::default(),
    };
    let mut report = Report {
        target,
        ..Report::default()
    };
    battery.run(&mut report);
    if args.json {
        let text = serde_json::to_string_pretty(&report.json())
            .map_err(|error| Failure::evidence(format!("cannot print the report: {error}")))?;
        println!("{}", crate::printable_json(&text));
    } else {
        print!("{}", report.table());
    }
    if report.failed() {
        crate::report(&format!(
            "check-provider: {} (the failing lines are above)",
            report.summary()
        ));
        return Ok(1);
    }
    Ok(0)
}

/// The bundled provider's command line, contract and provider id.
fn bundled(
    config: &Config,
    config_path: Option<&Path>,
    args: &CheckProviderArgs,
) -> Result<(Vec<String>, ProviderContract, String), Failure> {
    let exe = std::env::current_exe()
        .map_err(|error| Failure::usage(format!("cannot find this program: {error}")))?;
    let mut command = vec![exe.to_string_lossy().into_owned()];
    if let Some(path) = config_path {
        command.push("--config".to_owned());
        command.push(path.to_string_lossy().into_owned());
    }
    command.push("serve".to_owned());
    command.push("--no-log".to_owned());
    let mut settings = config.bundled.clone();
    if let Some(provider_id) = &args.provider_id {
        settings.provider_id = provider_id.clone();
        command.push("--provider-id".to_owned());
        command.push(provider_id.clone());
    }
    let provider_id = settings.provider_id.clone();
    let contract = BundledProvider::new(&settings)
        .map_err(Failure::usage)?
        .contract();
    Ok((command, contract, provider_id))
}

/// `--key-file` and `--key` values ([`crate::key_set`]).
fn keys(keys: &crate::KeyArgs) -> Result<Option<Keys>, Failure> {
    Ok(crate::key_set(&keys.key, &keys.key_file)?.map(|(set, names)| Keys { set, names }))
}

/// Readies check-provider to end its providers' processes: on Linux it
/// becomes a child subreaper (the orphans of its providers become its
/// children, so that it can reap them), and it ends every provider
/// process group still running when it gets SIGINT or SIGTERM.
#[cfg(unix)]
fn prepare() {
    if let Err(error) = process::adopt_orphans() {
        crate::report(&format!("check-provider: {error}"));
    }
    end_on_signal();
}

/// Ends every provider process group still running when check-provider
/// gets SIGINT or SIGTERM (SIGTERM, the grace, SIGKILL), then exits with
/// status 130. Watches on a thread of its own; returns once the handlers
/// are installed (or could not be: then the signals keep their default
/// action, as before).
#[cfg(unix)]
fn end_on_signal() {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            crate::report(&format!(
                "check-provider: cannot watch for Ctrl-C ({error}); an interrupted run may leave the provider running"
            ));
            return;
        }
    };
    let (ready, installed) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("check-provider-signals".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                let signal = crate::termination_signal();
                let _ = ready.send(());
                signal.await;
            });
            crate::report("check-provider: interrupted: ending the provider's processes");
            process::end_all_then(|| std::process::exit(130))
        });
    match spawned {
        Ok(_) => {
            let _ = installed.recv_timeout(std::time::Duration::from_secs(5));
        }
        Err(error) => crate::report(&format!(
            "check-provider: cannot watch for Ctrl-C ({error}); an interrupted run may leave the provider running"
        )),
    }
}
