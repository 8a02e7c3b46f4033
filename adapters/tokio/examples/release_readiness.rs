//! A `release` evidence provider: is this release ready to ship? Three
//! checks: `line_coverage` (a `cargo llvm-cov --json --summary-only`
//! summary under the evidence root), `changelog_has_entry` (a heading for
//! the version in the root's `CHANGELOG.md`) and `open_blockers` (the open
//! tickets with a label, asked of a tracker's JSON API behind a bearer
//! token, within the call's deadline).
//!
//! ```text
//! TRACKER_TOKEN=... cargo run -p evidence-wire-tokio --example release_readiness -- \
//!     serve --root DIR --tracker-url http://tracker.internal:8080
//! ```
use std::{error::Error, sync::Arc, time::Duration};

use evidence_wire_tokio::cli::clap;
use evidence_wire_tokio::prelude::*;
use evidence_wire_tokio::wire::serde_json::{self, Value, json};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, StatusCode, body::Bytes, client::conn::http1, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct File {
    /// A path under the evidence root, e.g. `coverage.json`.
    path: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Version {
    /// A version as CHANGELOG.md heads its entry: `1.4.0` for `## [1.4.0] - 2026-11-28`.
    version: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Label {
    /// The label of the tickets that block a release, e.g. `release-blocker`.
    label: String,
}

fn line_coverage(file: File, context: &CheckContext) -> Result<f64, CheckError> {
    let summary: Value = serde_json::from_slice(&context.root()?.read(&file.path, context)?)
        .map_err(|error| CheckError::new("coverage_unreadable", error.to_string()))?;
    let percent = summary.pointer("/data/0/totals/lines/percent");
    percent.and_then(Value::as_f64).ok_or_else(|| {
        let what = "has no data[0].totals.lines.percent (cargo llvm-cov --json --summary-only)";
        CheckError::new("coverage_unreadable", format!("{} {what}", file.path))
    })
}

fn changelog_has_entry(wanted: Version, context: &CheckContext) -> Result<bool, CheckError> {
    let bytes = context.root()?.read("CHANGELOG.md", context)?;
    let wanted = wanted.version.trim_start_matches('v');
    let headings = String::from_utf8_lossy(&bytes);
    let mut headings = headings.lines().filter(|line| line.starts_with('#'));
    Ok(headings.any(|heading| {
        let first = heading.trim_start_matches('#').split_whitespace().next();
        first.is_some_and(|word| word.trim_matches(['[', ']']).trim_start_matches('v') == wanted)
    }))
}

/// The ticket tracker: options of the command line (or the environment).
#[derive(clap::Args, Clone)]
pub struct Tracker {
    /// The tracker's base URL (http://): GET URL/issues?label=L&state=open.
    #[arg(long, env = "TRACKER_URL", default_value = "http://127.0.0.1:8080")]
    pub tracker_url: String,
    /// The tracker's bearer token (better given in the environment).
    #[arg(long, env = "TRACKER_TOKEN", hide_env_values = true)]
    pub tracker_token: Option<String>,
}

type Fallible<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// `GET url` with the tracker's token: the status and at most 1 MiB of body.
async fn get(url: &str, token: Option<&str>) -> Fallible<(StatusCode, Bytes)> {
    let uri: hyper::Uri = url.parse()?;
    let host = uri.authority().filter(|_| uri.scheme_str() == Some("http"));
    let host = host.ok_or("not an http:// URL")?;
    let tcp = TcpStream::connect((host.host(), host.port_u16().unwrap_or(80))).await?;
    let (mut sender, connection) = http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(connection);
    let path = uri.path_and_query().map_or("/", |path| path.as_str());
    let mut request = Request::get(path).header(header::HOST, host.as_str());
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new())?)
        .await?;
    let status = response.status();
    let body = Limited::new(response.into_body(), 1 << 20);
    Ok((status, body.collect().await?.to_bytes()))
}

async fn open_blockers(
    tracker: Arc<Tracker>,
    wanted: Label,
    cx: CheckContext,
) -> Result<u64, CheckError> {
    let label = wanted.label;
    let plain = |byte: u8| byte.is_ascii_alphanumeric() || b"-._".contains(&byte);
    if !label.bytes().all(plain) {
        return Err(CheckError::new(
            "invalid_label",
            "only letters, digits, -._",
        ));
    }
    let url = format!("{}/issues?label={label}&state=open", tracker.tracker_url);
    cx.set_ref(&url);
    let failed = |code: &str, why: &str| CheckError::new(code, format!("GET {url}: {why}"));
    let time = cx.remaining().unwrap_or(Duration::from_secs(10)); // the call's deadline, if any
    let answer = tokio::time::timeout(time, get(&url, tracker.tracker_token.as_deref())).await;
    let (status, body) = answer
        .map_err(|_| failed("tracker_timeout", &format!("no answer within {time:?}")))?
        .map_err(|error| failed("tracker_unreachable", &error.to_string()))?;
    match (status, serde_json::from_slice(&body)) {
        (StatusCode::OK, Ok(Value::Array(tickets))) => Ok(tickets.len() as u64),
        (StatusCode::OK, _) => Err(failed("tracker_unreadable", "not a JSON array")),
        (StatusCode::UNAUTHORIZED, _) => Err(failed(
            "tracker_unauthorized",
            "401 Unauthorized: give its token (TRACKER_TOKEN)",
        )),
        _ => Err(failed("tracker_failed", status.as_str())),
    }
}

/// The `release` provider's file checks; `open_blockers` joins them once
/// the tracker is known. The examples are true of a root holding
/// `coverage.json` (87.5 %) and a `CHANGELOG.md` with a `1.4.0` entry, and
/// of a tracker with two open `release-blocker` tickets.
pub fn release() -> Provider {
    let file = ["file_path_rooted"];
    let coverage = "The line coverage percentage of the llvm-cov summary at params.path.";
    let changelog = "Whether CHANGELOG.md has an entry for params.version.";
    Provider::new("release", "Is this release ready to ship?")
        .check(
            Check::new("line_coverage", coverage, line_coverage)
                .anchor_types(file)
                .example("87.5 %", json!({"path": "coverage.json"}), json!(87.5)),
        )
        .check(
            Check::new("changelog_has_entry", changelog, changelog_has_entry)
                .anchor_types(file)
                .example("1.4.0 is in", json!({"version": "1.4.0"}), json!(true)),
        )
}

/// The tracker check: how many open tickets carry a label.
pub fn blockers(tracker: Tracker) -> Check {
    let tracker = Arc::new(tracker);
    let ask = move |label, context| open_blockers(Arc::clone(&tracker), label, context);
    let blockers = "How many open tickets carry params.label.";
    let example = json!({"label": "release-blocker"});
    Check::new_async("open_blockers", blockers, ask).example("two open", example, json!(2))
}

fn main() -> std::process::ExitCode {
    release().run_with(|tracker: Tracker, provider| {
        Ok::<_, std::convert::Infallible>(provider.check(blockers(tracker)))
    })
}
