//! `evidence-wire docs`: search, list and read the embedded documentation
//! (plus `[docs] extra_paths` from the `--config` file), offline and
//! deterministically, with JSON on stdout. Also [`prepare_server`], which
//! applies `[docs]`, `[server.tools]` and `[server.auth]` to a server.
//!
//! The output is exactly what the server answers: `docs search` prints the
//! `decision_gate_docs_search` result, `docs list` the `resources/list`
//! result and `docs read` the `resources/read` result. Exit codes: 0
//! success, 1 unknown URI, 2 usage or configuration errors (one line on
//! stderr). Warnings about skipped extra documents go to stderr.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use evidence_wire::server::ServerConfig;
use evidence_wire_config::{Config, DocsConfig};
use evidence_wire_docs::{DocsRegistry, DocsSurface, MAX_SECTIONS_CAP};
use serde_json::json;

/// The docs subcommands.
#[derive(Subcommand)]
pub enum DocsCommand {
    /// Search the docs: ranked sections, the documents they came from, follow-up queries.
    #[command(
        after_help = "Examples:\n  evidence-wire docs search 'content-length limits'\n  evidence-wire docs search 'which dialect' --max 5\n  evidence-wire docs search ''\n      an empty query: an overview, one section per role"
    )]
    Search {
        /// Words to look for; empty for an overview.
        query: String,
        /// How many sections (1 to 10; default 3).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10))]
        max: Option<u64>,
    },
    /// List every document (uri, name, title, description, mimeType).
    #[command(
        after_help = "Examples:\n  evidence-wire docs list\n  evidence-wire --config evidence-wire.toml docs list\n      with a configuration's [docs] extra_paths: their documents too"
    )]
    List,
    /// Print one document by URI, as resources/read serves it.
    #[command(after_help = "Example:\n  evidence-wire docs read decision-gate://docs/framing")]
    Read {
        /// The document's URI, e.g. decision-gate://docs/framing.
        uri: String,
    },
}

/// Loads the registry (the `[docs]` section of the configuration at
/// `config`, else the defaults) and runs `cmd`.
pub fn main(cmd: DocsCommand, config: Option<&Path>) -> ExitCode {
    let docs = match config {
        None => DocsConfig::default(),
        Some(path) => match Config::load(path) {
            Ok(config) => config.docs,
            Err(error) => return fail(2, &error.to_string()),
        },
    };
    if !docs.enabled {
        return fail(
            2,
            "docs are disabled in this configuration ([docs] enabled = false)",
        );
    }
    let surface = match load_surface(&docs) {
        Ok(surface) => surface,
        Err(message) => return fail(2, &message),
    };
    run(cmd, surface.registry())
}

/// Sets up `server_config` as `[docs]`, `[server.tools]` and
/// `[server.auth]` ask: tool visibility and authorization, the docs search
/// tool and the docs resources (or none). Warnings about skipped extra
/// documents go to stderr.
pub fn prepare_server(config: &Config, server_config: &mut ServerConfig) -> Result<(), String> {
    let policy = config
        .server
        .tool_policy()
        .map_err(|error| error.to_string())?;
    policy.apply(server_config);
    let surface = load_surface(&config.docs)?;
    surface.install(server_config);
    Ok(())
}

fn load_surface(docs: &DocsConfig) -> Result<DocsSurface, String> {
    let (surface, warnings) = DocsSurface::from_config(docs)
        .map_err(|error| format!("the default docs break a [docs] limit: {error}"))?;
    for warning in &warnings {
        eprintln!("evidence-wire: {warning}");
    }
    Ok(surface)
}

/// Runs one docs command against `registry`, printing JSON on stdout.
pub fn run(cmd: DocsCommand, registry: &DocsRegistry) -> ExitCode {
    let text = match cmd {
        DocsCommand::Search { query, max } => {
            let max = max
                .and_then(|max| usize::try_from(max).ok())
                .map(|max| max.min(MAX_SECTIONS_CAP));
            match registry.search(&query, max) {
                Ok(output) => serde_json::to_string_pretty(&output),
                Err(error) => return fail(2, &error.to_string()),
            }
        }
        DocsCommand::List => serde_json::to_string_pretty(&json!({ "resources": registry.list() })),
        DocsCommand::Read { uri } => match registry.read(&uri) {
            Some(contents) => serde_json::to_string_pretty(&json!({ "contents": [contents] })),
            None => {
                return fail(
                    1,
                    &format!("no document has the URI {uri:?}; see `evidence-wire docs list`"),
                );
            }
        },
    };
    let text = match text {
        Ok(text) => text,
        Err(error) => return fail(2, &format!("cannot print the answer: {error}")),
    };
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}") {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(2, &format!("cannot write to stdout: {error}")),
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("evidence-wire: {message}");
    ExitCode::from(code)
}
