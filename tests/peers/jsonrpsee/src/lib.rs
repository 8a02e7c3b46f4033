//! What the jsonrpsee peers of the HTTP benchmark share: the `time_now`
//! evidence as the rmcp peer computes it (`tests/src/lib.rs`, `rmcp_peer`),
//! its hash (SHA-256 of the RFC 8785 canonical JSON, from `sha2` and
//! `serde_json_canonicalizer`, crates independent of evidence-wire), and
//! the control loop every benchmarked client runs
//! (`tests/benches/http.rs` drives it over stdin).

#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::future::Future;
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The params of a `tools/call` of `evidence_query`, as far as `time_now`
/// reads them; the other members are checked to be JSON and skipped.
#[derive(Deserialize)]
pub struct CallParams<'a> {
    /// The tool: must be `evidence_query`.
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    /// The query and its context.
    #[serde(borrow)]
    pub arguments: Arguments<'a>,
}

/// `arguments` of the call.
#[derive(Deserialize)]
pub struct Arguments<'a> {
    /// The query.
    #[serde(borrow)]
    pub query: Query<'a>,
    /// Its context.
    pub context: Context,
}

/// `arguments.query`.
#[derive(Deserialize)]
pub struct Query<'a> {
    /// The check asked: must be `time_now`.
    #[serde(borrow)]
    pub check_id: Cow<'a, str>,
}

/// `arguments.context`.
#[derive(Deserialize)]
pub struct Context {
    /// When the trigger fired.
    pub trigger_time: TriggerTime,
}

/// `context.trigger_time`: its `value` is the evidence.
#[derive(Deserialize)]
pub struct TriggerTime {
    /// An integer (unix millis or a logical tick).
    pub value: i64,
}

/// Hex SHA-256 of the RFC 8785 canonical form of `value`.
pub fn sha256_canonical(value: &Value) -> Result<String, String> {
    let canonical = serde_json_canonicalizer::to_vec(value)
        .map_err(|error| format!("not canonicalizable: {error}"))?;
    Ok(hex(&Sha256::digest(&canonical)))
}

/// Lowercase hex of `bytes`, two digits pushed per byte (as the rmcp
/// peer's `hex`: a `format!` per byte costs more than the hash itself).
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        for nibble in [byte >> 4, byte & 0x0f] {
            out.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
        }
    }
    out
}

/// A verified-lane EvidenceResult carrying a JSON integer, typed (as a
/// jsonrpsee method returns its result: a `Serialize` type, no
/// `serde_json::Value` tree), members in the rmcp peer's order.
#[derive(Clone, Serialize)]
pub struct Evidence {
    /// `{"kind":"json","value":...}`.
    pub value: JsonValue,
    /// `"verified"`.
    pub lane: &'static str,
    /// `null`.
    pub error: Option<()>,
    /// The SHA-256 of the value's canonical JSON.
    pub evidence_hash: Hash,
    /// `null`.
    pub evidence_ref: Option<()>,
    /// `null`.
    pub evidence_anchor: Option<()>,
    /// `null`.
    pub signature: Option<()>,
    /// `"application/json"`.
    pub content_type: &'static str,
}

/// `{"kind":"json","value":...}`.
#[derive(Clone, Serialize)]
pub struct JsonValue {
    /// `"json"`.
    pub kind: &'static str,
    /// The value.
    pub value: i64,
}

/// `{"algorithm":"sha256","value":HEX}`.
#[derive(Clone, Serialize)]
pub struct Hash {
    /// `"sha256"`.
    pub algorithm: &'static str,
    /// Lowercase hex.
    pub value: String,
}

/// An MCP tool result as rmcp's `CallToolResult::structured` writes it:
/// the evidence as `structuredContent` and its JSON as a text item.
#[derive(Clone, Serialize)]
pub struct ToolResult {
    /// One text item: the evidence's JSON.
    pub content: [TextItem; 1],
    /// The evidence.
    #[serde(rename = "structuredContent")]
    pub structured_content: Evidence,
    /// Always false here.
    #[serde(rename = "isError")]
    pub is_error: bool,
}

/// `{"type":"text","text":...}`.
#[derive(Clone, Serialize)]
pub struct TextItem {
    /// `"text"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The text.
    pub text: String,
}

/// The answer to a `tools/call` of `evidence_query` asking `time_now`:
/// the trigger time as JSON evidence, hashed; or why not.
pub fn time_now(params: &CallParams<'_>) -> Result<ToolResult, String> {
    if params.name != "evidence_query" {
        return Err(format!("unknown tool {:?}", params.name));
    }
    if params.arguments.query.check_id != "time_now" {
        return Err(format!(
            "unsupported check {:?}",
            params.arguments.query.check_id
        ));
    }
    let value = params.arguments.context.trigger_time.value;
    let evidence = Evidence {
        value: JsonValue {
            kind: "json",
            value,
        },
        lane: "verified",
        error: None,
        evidence_hash: Hash {
            algorithm: "sha256",
            value: sha256_canonical(&Value::from(value))?,
        },
        evidence_ref: None,
        evidence_anchor: None,
        signature: None,
        content_type: "application/json",
    };
    let text = serde_json::to_string(&evidence).map_err(|error| error.to_string())?;
    Ok(ToolResult {
        content: [TextItem { kind: "text", text }],
        structured_content: evidence,
        is_error: false,
    })
}

/// Checks an answer's EvidenceResult as a caller does: found in any of
/// the result shapes (Decision Gate's `json` item, `structuredContent`,
/// a text item holding its JSON), a `json` value whose SHA-256 of the
/// canonical form is the `evidence_hash` it carries.
pub fn verify(result: &Value) -> Result<(), String> {
    let found = result
        .pointer("/content/0/json")
        .or_else(|| result.get("structuredContent"))
        .cloned()
        .or_else(|| {
            result
                .pointer("/content/0/text")
                .and_then(Value::as_str)
                .and_then(|text| serde_json::from_str(text).ok())
        })
        .ok_or_else(|| format!("no EvidenceResult in {result}"))?;
    let value = found
        .pointer("/value/value")
        .ok_or_else(|| format!("no json value in {found}"))?;
    let expected = found
        .pointer("/evidence_hash/value")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no evidence_hash in {found}"))?;
    let actual = sha256_canonical(value)?;
    if actual == expected {
        Ok(())
    } else {
        Err(format!(
            "hash mismatch: {expected} announced, {actual} computed"
        ))
    }
}

/// A tokio runtime: current-thread with `--current-thread` among the
/// arguments, else the multi-thread default.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    if std::env::args().any(|arg| arg == "--current-thread") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    }
}

/// The client side of the benchmark's control loop, the same for every
/// benchmarked client: prints `ready`, then for each `round CALLERS MILLIS`
/// line on stdin runs `CALLERS` callers for `MILLIS` ms (each calling
/// `call` one call after another) and prints `done CALLS FAILURES
/// SECONDS`; stops at the end of stdin. A call taking over 10 s fails.
pub fn control_loop<C, F>(runtime: &tokio::runtime::Runtime, call: C) -> std::io::Result<()>
where
    C: Fn() -> F + Clone + Send + 'static,
    F: Future<Output = Result<(), String>> + Send,
{
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let mut words = line.split_whitespace();
        let (Some("round"), Some(callers), Some(millis)) =
            (words.next(), words.next(), words.next())
        else {
            writeln!(out, "error: expected `round CALLERS MILLIS`, got {line:?}")?;
            out.flush()?;
            continue;
        };
        let (Ok(callers), Ok(millis)) = (callers.parse::<usize>(), millis.parse::<u64>()) else {
            writeln!(out, "error: bad numbers in {line:?}")?;
            out.flush()?;
            continue;
        };
        let (calls, failures, seconds) =
            runtime.block_on(round(callers, Duration::from_millis(millis), call.clone()));
        writeln!(out, "done {calls} {failures} {seconds}")?;
        out.flush()?;
    }
    Ok(())
}

/// `callers` tasks calling until `length` has passed: (calls, failures, seconds).
async fn round<C, F>(callers: usize, length: Duration, call: C) -> (u64, u64, f64)
where
    C: Fn() -> F + Clone + Send + 'static,
    F: Future<Output = Result<(), String>> + Send,
{
    let started = Instant::now();
    let until = started + length;
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let call = call.clone();
            tokio::spawn(async move {
                let (mut done, mut failed) = (0u64, 0u64);
                while Instant::now() < until {
                    match tokio::time::timeout(Duration::from_secs(10), call()).await {
                        Ok(Ok(())) => done += 1,
                        Ok(Err(error)) => {
                            if failed == 0 {
                                eprintln!("call failed: {error}");
                            }
                            failed += 1;
                        }
                        Err(_) => {
                            eprintln!("call took over 10 s");
                            failed += 1;
                        }
                    }
                }
                (done, failed)
            })
        })
        .collect();
    let (mut calls, mut failures) = (0, 0);
    for task in tasks {
        match task.await {
            Ok((done, failed)) => {
                calls += done;
                failures += failed;
            }
            Err(_) => failures += 1,
        }
    }
    (calls, failures, started.elapsed().as_secs_f64())
}
