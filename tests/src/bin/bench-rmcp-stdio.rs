//! `bench-rmcp-stdio`: the rmcp peer of the end-to-end stdio benchmark, and
//! (with `--http`) of the HTTP one: an evidence provider built on rmcp, the
//! official Rust MCP SDK, with a `time_now` check equivalent to the bundled
//! provider's: read `context.trigger_time.value`, return it as JSON evidence
//! hashed with SHA-256 (`sha2`) of its RFC 8785 canonical form
//! (`serde_json_canonicalizer`), MCP-shaped (`structuredContent` plus the
//! JSON as a text item, which is what `CallToolResult::structured` writes).
//!
//! Built only with the `bench-peers` feature (scripts/bench).
//! - `bench-rmcp-stdio`: newline-delimited JSON-RPC on stdin/stdout (rmcp's
//!   default `stdio()` transport, multi-thread runtime), until stdin ends.
//! - `bench-rmcp-stdio --pipes`: the same over rmcp's `stdio_pipes()`
//!   (non-blocking pipes) on a current-thread runtime: its best stdio setup.
//! - `bench-rmcp-stdio --http`: rmcp's streamable-HTTP server in stateless
//!   JSON-response mode on `127.0.0.1:0` (hyper HTTP/1.1), printing
//!   `listening <port>` on stdout; it stops when stdin ends.
//!
//! Limits: rmcp's defaults (its HTTP body cap; no stdio line cap).

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

use std::sync::Arc;

use evidence_wire_tests::rmcp_peer::{EvidencePeer, evidence, sha256_canonical};
use rmcp::ServiceExt;
use rmcp::model::ErrorData;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value};
use tokio::io::AsyncReadExt;

/// The peer: `time_now` only, like the bundled provider's.
const PEER: EvidencePeer = EvidencePeer {
    name: "bench-rmcp",
    answer,
};

fn answer(arguments: &Map<String, Value>) -> Result<Value, ErrorData> {
    let check = arguments
        .get("query")
        .and_then(|query| query.get("check_id"))
        .and_then(Value::as_str);
    if check != Some("time_now") {
        return Err(ErrorData::invalid_params(
            format!("unsupported check {check:?}"),
            None,
        ));
    }
    let Some(value) = arguments
        .get("context")
        .and_then(|context| context.pointer("/trigger_time/value"))
        .filter(|value| value.is_i64())
    else {
        return Err(ErrorData::invalid_params(
            "context.trigger_time.value must be an integer",
            None,
        ));
    };
    Ok(evidence(value, sha256_canonical(value)?))
}

async fn serve_http() -> Result<(), Box<dyn std::error::Error>> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    let service = StreamableHttpService::new(
        || Ok(PEER),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("listening {}", listener.local_addr()?.port());
    let accept = async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let service = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    };
    // Stop when the driver closes our stdin.
    let stdin_closed = async {
        let mut stdin = tokio::io::stdin();
        let mut sink = [0u8; 64];
        while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    tokio::select! {
        () = accept => {}
        () = stdin_closed => {}
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let http = std::env::args().any(|arg| arg == "--http");
    let pipes = std::env::args().any(|arg| arg == "--pipes");
    if pipes {
        // rmcp's best stdio setup, as its docs recommend when both ends are
        // pipes: the non-blocking pipe transport on a current-thread runtime.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        return runtime.block_on(async {
            let service = PEER.serve(rmcp::transport::stdio_pipes()).await?;
            service.waiting().await?;
            Ok(())
        });
    }
    // Multi-thread, or current-thread with `--current-thread`.
    let runtime = evidence_wire_tests::bench_server_runtime()?;
    runtime.block_on(async {
        if http {
            return serve_http().await;
        }
        let service = PEER.serve(rmcp::transport::stdio()).await?;
        service.waiting().await?;
        Ok(())
    })
}
