//! `bench-http-server`: our side of the HTTP benchmark. Serves
//! `evidence_query` with evidence-wire-tokio's `serve_http` (hyper
//! HTTP/1.1, `POST /mcp` and `/rpc`) on `127.0.0.1:0`, prints
//! `listening <port>` on stdout, and stops when stdin ends.
//!
//! The one check, `time_now`, is the bundled provider's: the query's
//! `context.trigger_time` as JSON evidence, hashed by the core
//! (`EvidenceValue::json`), so the work matches `bench-rmcp-stdio --http`.
//!
//! Built only with the `bench-peers` feature (scripts/bench). Limits: the
//! server's defaults (64 calls at once, 256 connections, 1 MiB bodies).

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
use evidence_wire_tokio::{Answer, Handler, HttpServerConfig, Service, bind_http, serve_http};
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Multi-thread, or current-thread with `--current-thread`.
    let runtime = evidence_wire_tests::bench_server_runtime()?;
    runtime.block_on(async {
        let config = HttpServerConfig::default();
        let listener = bind_http(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), &config).await?;
        println!("listening {}", listener.local_addr()?.port());
        let stdin_closed = async {
            let mut stdin = tokio::io::stdin();
            let mut sink = [0u8; 64];
            while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
        };
        serve_http(
            listener,
            Service::new(ServerConfig::default(), TimeNow),
            config,
            stdin_closed,
        )
        .await?;
        Ok(())
    })
}
