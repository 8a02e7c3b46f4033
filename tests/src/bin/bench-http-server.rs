//! `bench-http-server`: our side of the HTTP benchmark. Serves
//! `evidence_query` with evidence-wire-tokio's `serve_http` (hyper
//! HTTP/1.1, `POST /mcp` and `/rpc`) on `127.0.0.1:0`, prints
//! `listening <port>` on stdout, and stops when stdin ends.
//!
//! With `--axum`: the same provider as an application mounts it, its tower
//! service (`ProviderService`) routed at `/mcp` and `/rpc` of an axum
//! `Router` served by `axum::serve` (`TCP_NODELAY` on its connections, as
//! `serve_http` sets it), as `adapters/tokio/examples/axum_app.rs` does.
//!
//! The one check, `time_now`, is the bundled provider's: the query's
//! `context.trigger_time` as JSON evidence, hashed by the core
//! (`EvidenceValue::json`), so the work matches `bench-rmcp-stdio --http`.
//!
//! Built only with the `bench-peers` feature (scripts/bench). Limits: the
//! server's defaults (64 calls at once, 256 connections, 1 MiB bodies);
//! with `--roomy` (the server the clients' benchmark calls, where several
//! clients each keep up to 64 pooled connections) room for 1024
//! connections, each of which may wait idle for 60 s, so that no client's
//! pooled connection is closed under it between its rounds.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

// The benchmarks give every program the allocator the `evidence-wire`
// binary links (adapters/cli/src/main.rs): the comparison is of the
// protocol code, not of malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use evidence_wire::evidence::{
    EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::server::ServerConfig;
use evidence_wire_tokio::{
    Answer, Handler, HttpServerConfig, ProviderService, Service, bind_http, serve_http,
};
use serde_json::Value;
use tokio::io::AsyncReadExt;

struct TimeNow;

/// Each query is a task of the runtime, as rmcp's async handler is.
impl Handler for TimeNow {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        Answer::future(async move { time_now(&query, &context) })
    }
}

fn time_now(query: &EvidenceQuery, context: &EvidenceContext) -> EvidenceResult {
    if query.check_id != "time_now" {
        return EvidenceResult::with_error(EvidenceError::new(
            "unsupported_check",
            format!(
                "check {:?} is not served here; use time_now",
                query.check_id
            ),
        ));
    }
    let value = match context.trigger_time {
        TriggerTime::UnixMillis(millis) => Value::from(millis),
        TriggerTime::Logical(tick) => Value::from(tick),
    };
    match EvidenceValue::json(&value) {
        Ok(value) => EvidenceResult::with_value(value),
        Err(error) => EvidenceResult::with_error(EvidenceError::new(
            "internal_error",
            format!("cannot encode the value: {error}"),
        )),
    }
}

/// Completes when the driver closes our stdin.
async fn stdin_closed() {
    let mut stdin = tokio::io::stdin();
    let mut sink = [0u8; 64];
    while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
}

/// The provider mounted in an axum application through its tower service.
async fn serve_axum() -> Result<(), Box<dyn std::error::Error>> {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let local = listener.local_addr()?;
    let evidence = ProviderService::new(
        Service::new(ServerConfig::default(), TimeNow),
        HttpServerConfig::default(),
    )?
    .listening_on(local)?;
    let app = axum::Router::new()
        .route_service("/mcp", evidence.clone())
        .route_service("/rpc", evidence.clone());
    println!("listening {}", local.port());
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            stdin_closed().await;
            evidence.drain().await;
        })
        .await?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Multi-thread, or current-thread with `--current-thread`.
    let runtime = evidence_wire_tests::bench_server_runtime()?;
    if std::env::args().any(|arg| arg == "--axum") {
        return runtime.block_on(serve_axum());
    }
    runtime.block_on(async {
        let mut config = HttpServerConfig::default();
        if std::env::args().any(|arg| arg == "--roomy") {
            config.max_connections = 1024;
            config.max_waiting_connections = 1024;
            config.header_read_timeout = std::time::Duration::from_secs(60);
        }
        let listener = bind_http(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), &config).await?;
        println!("listening {}", listener.local_addr()?.port());
        serve_http(
            listener,
            Service::new(ServerConfig::default(), TimeNow),
            config,
            stdin_closed(),
        )
        .await?;
        Ok(())
    })
}
