//! `bench-http-client URL [--unpooled] [--current-thread]`: our side of
//! the HTTP client benchmark (`tests/benches/http.rs`). Callers share one
//! evidence-wire-tokio `HttpProvider` (its clones share its connections),
//! each asking `time_now` of the provider at `URL` one query after
//! another; every answer is verified (EvidenceResult found, its hash
//! checked) before it counts, as `query --url` does. Driven over stdin by
//! `evidence_wire_tests::bench_client_loop`, as jsonrpsee's client
//! (`tests/peers/jsonrpsee`) is.
//!
//! Setup: at most 64 connections (the benchmark's most callers, so that no
//! caller waits for one, as none does with jsonrpsee's uncapped pool), as
//! many kept idle; `--unpooled` keeps none (`pool_max_idle` 0: every query
//! opens its own connection and closes it, the client before pooling). On
//! the multi-thread tokio runtime, or a current-thread one with
//! `--current-thread`. Built only with the `bench-peers` feature.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;

use evidence_wire::client::ClientConfig;
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
use evidence_wire_tokio::{HttpProvider, HttpProviderConfig};

/// The benchmark's most concurrent callers.
const MAX_CALLERS: usize = 64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .filter(|arg| !arg.starts_with("--"))
        .ok_or("usage: bench-http-client URL [--unpooled] [--current-thread]")?;
    let unpooled = std::env::args().any(|arg| arg == "--unpooled");
    let runtime = evidence_wire_tests::bench_server_runtime()?;
    let mut client = ClientConfig::default();
    client.request_timeout_ms = 10_000;
    let config = HttpProviderConfig::new(url)
        .with_insecure_http(true)
        .with_client(client)
        .with_max_connections(MAX_CALLERS)
        .with_pool_max_idle(if unpooled { 0 } else { MAX_CALLERS });
    let provider = HttpProvider::new(config)?;
    let query = Arc::new(EvidenceQuery::new("evidence-wire", "time_now"));
    let context = Arc::new(EvidenceContext::adhoc(TriggerTime::UnixMillis(
        1_710_000_000_000,
    )));
    let call = move || {
        let (provider, query, context) =
            (provider.clone(), Arc::clone(&query), Arc::clone(&context));
        async move {
            provider
                .query(&query, &context)
                .await
                .map(drop)
                .map_err(|error| error.to_string())
        }
    };
    evidence_wire_tests::bench_client_loop(&runtime, call)?;
    Ok(())
}
