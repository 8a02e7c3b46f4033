//! `jsonrpsee-client URL [--current-thread]`: jsonrpsee's HTTP client
//! calling a provider at `URL` (`tests/benches/http.rs` points it at our
//! `bench-http-server`, as it points our `HttpProvider`): each call is a
//! `tools/call` of `evidence_query` asking `time_now` with the params our
//! client sends (`EvidenceContext::adhoc`), and its answer is checked as a
//! caller checks it: the EvidenceResult found, the SHA-256 of its value's
//! canonical JSON equal to its `evidence_hash` (`bench_jsonrpsee::verify`).
//!
//! Setup: one `HttpClient` (jsonrpsee's default builder: a pooled hyper
//! client, no cap on concurrent requests) shared by every caller, on the
//! multi-thread tokio runtime or, with `--current-thread`, a current-thread
//! one. Driven over stdin by `bench_jsonrpsee::control_loop`.

#![forbid(unsafe_code)]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;

use bench_jsonrpsee::{control_loop, runtime, verify};
use jsonrpsee::core::client::ClientT;
use jsonrpsee::core::params::ObjectParams;
use jsonrpsee::http_client::HttpClient;
use serde::Serialize;
use serde_json::Value;

/// `arguments` as our `HttpProvider` writes them for
/// `EvidenceQuery::new("evidence-wire", "time_now")` in
/// `EvidenceContext::adhoc(TriggerTime::UnixMillis(1710000000000))`.
#[derive(Serialize)]
struct Arguments {
    query: Query,
    context: Context,
}

#[derive(Serialize)]
struct Query {
    provider_id: &'static str,
    check_id: &'static str,
}

#[derive(Serialize)]
struct Context {
    tenant_id: u64,
    namespace_id: u64,
    run_id: &'static str,
    scenario_id: &'static str,
    stage_id: &'static str,
    trigger_id: &'static str,
    trigger_time: TriggerTime,
    correlation_id: Option<&'static str>,
}

#[derive(Serialize)]
struct TriggerTime {
    kind: &'static str,
    value: i64,
}

impl Arguments {
    fn adhoc() -> Self {
        Arguments {
            query: Query {
                provider_id: "evidence-wire",
                check_id: "time_now",
            },
            context: Context {
                tenant_id: 1,
                namespace_id: 1,
                run_id: "adhoc",
                scenario_id: "adhoc",
                stage_id: "adhoc",
                trigger_id: "adhoc",
                trigger_time: TriggerTime {
                    kind: "unix_millis",
                    value: 1_710_000_000_000,
                },
                correlation_id: None,
            },
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .filter(|arg| !arg.starts_with("--"))
        .ok_or("usage: jsonrpsee-client URL [--current-thread]")?;
    let runtime = runtime()?;
    // The client needs a runtime context to start its pool.
    let client = Arc::new(runtime.block_on(async { HttpClient::builder().build(&url) })?);
    let call = move || {
        let client = Arc::clone(&client);
        async move {
            // Serialized per call, as our client serializes its query.
            let mut params = ObjectParams::new();
            params
                .insert("name", "evidence_query")
                .map_err(|error| error.to_string())?;
            params
                .insert("arguments", Arguments::adhoc())
                .map_err(|error| error.to_string())?;
            let result: Value = client
                .request("tools/call", params)
                .await
                .map_err(|error| error.to_string())?;
            verify(&result)
        }
    };
    control_loop(&runtime, call)?;
    Ok(())
}
