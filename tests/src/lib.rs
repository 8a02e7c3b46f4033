//! Shared helpers for the evidence-wire conformance and interop tests, and
//! the pieces its two rmcp peer binaries share ([`rmcp_peer`]).
//!
//! The tests themselves live in `tests/tests/`; this library locates the
//! conformance vectors vendored in `core/tests/vectors/` and holds what the
//! rmcp peers have in common.

#![forbid(unsafe_code)]

use std::path::PathBuf;

/// The folder holding the conformance vectors, vendored inside the core
/// crate (`core/tests/vectors/`; sources and licences in its README).
pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../core/tests/vectors")
}

pub mod rmcp_peer {
    //! What the two rmcp peers share (`rmcp-provider`, the interop peer, and
    //! `bench-rmcp-stdio`, the benchmarks' peer): an rmcp server with the one
    //! `evidence_query` tool ([`EvidencePeer`]), and evidence hashed with
    //! crates independent of evidence-wire (SHA-256 from `sha2` over the
    //! RFC 8785 canonical JSON from `serde_json_canonicalizer`).

    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::RequestContext;
    use rmcp::{RoleServer, ServerHandler};
    use serde_json::{Map, Value, json};
    use sha2::{Digest, Sha256};

    /// An rmcp server (tools only) with the one tool `evidence_query`,
    /// taking `query` and `context` objects; `answer` turns a call's
    /// arguments into the EvidenceResult (sent as `structuredContent` plus
    /// the JSON as a text item) or the error to answer.
    #[derive(Clone, Copy)]
    pub struct EvidencePeer {
        /// The name in its server info.
        pub name: &'static str,
        /// The result for a call's arguments.
        pub answer: fn(&Map<String, Value>) -> Result<Value, ErrorData>,
    }

    impl ServerHandler for EvidencePeer {
        fn get_info(&self) -> ServerConfig {
            let mut config =
                ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
            config.server_info = Implementation::new(self.name, env!("CARGO_PKG_VERSION"));
            config
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let mut properties = Map::new();
            properties.insert("query".to_owned(), json!({"type": "object"}));
            properties.insert("context".to_owned(), json!({"type": "object"}));
            let mut schema = Map::new();
            schema.insert("type".to_owned(), json!("object"));
            schema.insert("properties".to_owned(), Value::Object(properties));
            schema.insert("required".to_owned(), json!(["query", "context"]));
            Ok(ListToolsResult::with_all_items(vec![Tool::new(
                "evidence_query",
                "Resolve a Decision Gate evidence query.",
                schema,
            )]))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            if request.name != "evidence_query" {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {:?}", request.name),
                    None,
                ));
            }
            let arguments = request.arguments.unwrap_or_default();
            Ok(CallToolResult::structured((self.answer)(&arguments)?).into())
        }
    }

    /// Hex SHA-256 of the RFC 8785 canonical form of `value`; a value that
    /// cannot be canonicalized is the caller's invalid-params error.
    pub fn sha256_canonical(value: &Value) -> Result<String, ErrorData> {
        let canonical = serde_json_canonicalizer::to_vec(value).map_err(|error| {
            ErrorData::invalid_params(format!("not canonicalizable: {error}"), None)
        })?;
        Ok(hex(&Sha256::digest(&canonical)))
    }

    /// Lowercase hex of `bytes`, two digits pushed per byte (a `format!`
    /// per byte cost the peers ~15 k instructions per answer, more than
    /// the hash itself: not the protocol work being compared).
    pub fn hex(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len() * 2);
        for byte in bytes {
            for nibble in [byte >> 4, byte & 0x0f] {
                out.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
            }
        }
        out
    }

    /// A verified-lane EvidenceResult carrying `value` as JSON with `hash`.
    pub fn evidence(value: &Value, hash: String) -> Value {
        json!({
            "value": {"kind": "json", "value": value},
            "lane": "verified",
            "error": null,
            "evidence_hash": {"algorithm": "sha256", "value": hash},
            "evidence_ref": null,
            "evidence_anchor": null,
            "signature": null,
            "content_type": "application/json"
        })
    }

    #[cfg(test)]
    mod tests {
        /// `hex` is `format!`'s `{:02x}` of every byte.
        #[test]
        fn hex_is_formatted_hex() {
            let bytes: Vec<u8> = (0..=255).collect();
            let formatted: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
            assert_eq!(super::hex(&bytes), formatted);
            assert_eq!(super::hex(&[]), "");
        }
    }
}

/// The tokio runtime of a benchmarked HTTP server: a current-thread one
/// when the server was started with `--current-thread`, else the
/// multi-thread default (`tests/benches/http.rs` runs every server both
/// ways and keeps each one's best).
#[cfg(feature = "bench-peers")]
pub fn bench_server_runtime() -> std::io::Result<tokio::runtime::Runtime> {
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

/// The control loop every benchmarked HTTP client runs (ours,
/// `bench-http-client`; jsonrpsee's, `tests/peers/jsonrpsee`, which has a
/// copy of this loop, being a separate Cargo project): prints `ready`, then
/// for each `round CALLERS MILLIS` line on stdin runs `CALLERS` callers for
/// `MILLIS` ms, each calling `call` one call after another, and prints
/// `done CALLS FAILURES SECONDS`; stops at the end of stdin. A call taking
/// over 10 s fails. `tests/benches/http.rs` drives it.
#[cfg(feature = "bench-peers")]
pub fn bench_client_loop<C, F>(runtime: &tokio::runtime::Runtime, call: C) -> std::io::Result<()>
where
    C: Fn() -> F + Clone + Send + 'static,
    F: std::future::Future<Output = Result<(), String>> + Send,
{
    use std::io::{BufRead, Write};
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
        let (calls, failures, seconds) = runtime.block_on(bench_client_round(
            callers,
            std::time::Duration::from_millis(millis),
            call.clone(),
        ));
        writeln!(out, "done {calls} {failures} {seconds}")?;
        out.flush()?;
    }
    Ok(())
}

/// `callers` tasks calling until `length` has passed: (calls, failures, seconds).
#[cfg(feature = "bench-peers")]
async fn bench_client_round<C, F>(
    callers: usize,
    length: std::time::Duration,
    call: C,
) -> (u64, u64, f64)
where
    C: Fn() -> F + Clone + Send + 'static,
    F: std::future::Future<Output = Result<(), String>> + Send,
{
    use std::time::{Duration, Instant};
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
