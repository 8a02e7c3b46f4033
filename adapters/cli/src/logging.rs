//! `serve`'s logs: the envelope validation log (JSON Lines, the audit
//! record) and human diagnostics on stderr through `tracing`.
//!
//! The validation log is on by default and goes to
//! `runs/mcp_server/envelope_validation/<run>.jsonl` under the working
//! directory (`[logging] dir` in a configuration file is resolved against
//! the file's directory). `[logging] enabled = false` or `--no-log` turns it
//! off, `--log-dir DIR` moves it, `[logging] deterministic = true` or
//! `--deterministic-log` fixes its clock and ids, `[logging] max_bytes` or
//! `--log-max-bytes` caps the directory's run files (256 MiB by default;
//! rotated, oldest deleted). A log that cannot be written is reported once
//! on stderr and the server goes on.
//!
//! Diagnostics: `RUST_LOG` (tracing-subscriber's `EnvFilter` directives,
//! e.g. `evidence_wire=debug` or `info,evidence_wire::call=debug`) selects
//! what goes to stderr, spans included: each call's `evidence_wire::call`
//! span is one line when it closes, with its fields (see the SDK's
//! `trace` module). Without `RUST_LOG`, `EVIDENCE_WIRE_LOG` sets one level
//! for everything (`error`, `warn` (default), `info`, `debug`, `trace`,
//! `off`). At `info` every rejected message is one line, at `debug` every
//! accepted one too; each names the record's correlation id so it can be
//! found in the JSONL file. Nothing is ever written to stdout, which
//! carries the protocol on stdio. With the `otlp` cargo feature the spans
//! are also exported over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set
//! (see `spec/guides/deployment.md`, "Tracing").

use evidence_wire_blocking::log::{LogSettings, ValidationLog};
use evidence_wire_config::Config;
use evidence_wire_log::record::RecordView;
use std::sync::Arc;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::ServeArgs;

/// The environment variable holding the stderr diagnostics level.
pub const LEVEL_VARIABLE: &str = "EVIDENCE_WIRE_LOG";

/// The environment variable holding `EnvFilter` directives (it wins over
/// [`LEVEL_VARIABLE`]).
pub const FILTER_VARIABLE: &str = "RUST_LOG";

/// Send `tracing` diagnostics (events, and spans as they close) to stderr,
/// filtered by `RUST_LOG` when it is set, else at the level
/// `EVIDENCE_WIRE_LOG` names (default `warn`). Directives or a level that
/// cannot be read are reported and `warn` used. With the `otlp` feature,
/// spans are exported too when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
pub fn init_diagnostics() {
    use tracing_subscriber::layer::SubscriberExt as _;

    let directives = std::env::var(FILTER_VARIABLE)
        .ok()
        .filter(|directives| !directives.trim().is_empty());
    let (filter, problem) = match &directives {
        Some(directives) => match EnvFilter::try_new(directives) {
            Ok(filter) => (filter, None),
            Err(error) => (
                EnvFilter::new("warn"),
                Some(format!(
                    "{FILTER_VARIABLE}={directives:?} cannot be read ({error}); use tracing-subscriber's EnvFilter directives, e.g. evidence_wire=debug (using warn)"
                )),
            ),
        },
        None => {
            let requested = std::env::var(LEVEL_VARIABLE).ok();
            let level = match requested.as_deref().map(str::trim) {
                None | Some("") => Ok(LevelFilter::WARN),
                Some(name) => name.parse::<LevelFilter>().map_err(|_| name.to_owned()),
            };
            let problem = level.as_ref().err().map(|name| {
                format!(
                    "{LEVEL_VARIABLE}={name:?} is not a level; use error, warn, info, debug, trace or off (using warn)"
                )
            });
            let level = level.unwrap_or(LevelFilter::WARN);
            (EnvFilter::default().add_directive(level.into()), problem)
        }
    };
    // Targets help when directives name them; the plain level keeps the
    // lines as they always were.
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(directives.is_some())
        .with_span_events(FmtSpan::CLOSE)
        .with_filter(filter);
    let subscriber = tracing_subscriber::registry().with(stderr);
    #[cfg(feature = "otlp")]
    let subscriber = subscriber.with(crate::otlp::layer());
    // Fails only when a subscriber is already installed: keep that one.
    let _ = tracing::subscriber::set_global_default(subscriber);
    if let Some(problem) = problem {
        tracing::warn!("{problem}");
    }
}

/// The log flags of a command that serves (`serve`, `wrap`).
pub struct LogFlags<'a> {
    /// `--no-log`.
    pub no_log: bool,
    /// `--log-dir DIR`.
    pub log_dir: Option<&'a std::path::Path>,
    /// `--deterministic-log`.
    pub deterministic: bool,
    /// `--log-max-bytes BYTES`.
    pub max_bytes: Option<u64>,
}

/// The validation log `serve` writes, from `[logging]` and the flags.
pub fn open_validation_log(args: &ServeArgs, config: &Config) -> ValidationLog {
    open_validation_log_with(
        &LogFlags {
            no_log: args.common.no_log,
            log_dir: args.common.log_dir.as_deref(),
            deterministic: args.deterministic_log,
            max_bytes: args.log_max_bytes,
        },
        config,
    )
}

/// The validation log a serving command writes, from `[logging]` and `args`.
pub fn open_validation_log_with(args: &LogFlags<'_>, config: &Config) -> ValidationLog {
    if args.no_log {
        tracing::info!("validation log off (--no-log)");
        return ValidationLog::disabled();
    }
    let settings = match (args.log_dir, config.logging.settings()) {
        // --log-dir turns logging on even when the configuration turned it off.
        (Some(dir), settings) => LogSettings::new(dir)
            .deterministic(
                settings.is_some_and(|settings| settings.deterministic) || args.deterministic,
            )
            .max_bytes(config.logging.max_bytes),
        (None, Some(settings)) => {
            let deterministic = settings.deterministic || args.deterministic;
            settings.deterministic(deterministic)
        }
        (None, None) => {
            tracing::info!("validation log off ([logging] enabled = false)");
            return ValidationLog::disabled();
        }
    };
    let settings = match args.max_bytes {
        Some(max_bytes) => settings.max_bytes(max_bytes),
        None => settings,
    };
    let report: Arc<dyn Fn(&str) + Send + Sync> =
        Arc::new(|message: &str| tracing::warn!("validation log: {message}"));
    let log = ValidationLog::open_with_reporter(&settings, report);
    if let Some(path) = log.path() {
        tracing::info!("validation log: {}", path.display());
    }
    log.with_listener(Arc::new(diagnose))
}

/// One stderr line per record: rejections at `info`, the rest at `debug`.
/// (The macros read the record only when their level is on.) The method
/// and the detail are the client's text: escaped ([`crate::printable`]),
/// since `tracing`'s formatter escapes ESC but passes CR and C1 through.
fn diagnose(record: &RecordView<'_>) {
    match record.error() {
        Some(error) => tracing::info!(
            correlation_id = %record.correlation_id(),
            transport = record.transport().as_str(),
            status = record.status(),
            "rejected {}: {} ({})",
            crate::printable(record.method().as_deref().unwrap_or("-")),
            error.name(),
            crate::printable(record.detail().as_deref().unwrap_or(error.message())),
        ),
        None => tracing::debug!(
            correlation_id = %record.correlation_id(),
            transport = record.transport().as_str(),
            status = record.status(),
            "accepted {}",
            crate::printable(record.method().as_deref().unwrap_or("-")),
        ),
    }
}
