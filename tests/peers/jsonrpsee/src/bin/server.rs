//! `jsonrpsee-server`: jsonrpsee's JSON-RPC server (HTTP transport) with a
//! `tools/call` method answering `evidence_query` `time_now` as the rmcp
//! peer does (the trigger time as JSON evidence, SHA-256 of its canonical
//! form, an MCP tool result with `structuredContent`), on `127.0.0.1:0`.
//! Prints `listening <port>` and stops when stdin ends.
//!
//! Setup: what jsonrpsee's docs and its own benchmarks
//! (`benches/helpers.rs`) use for throughput: `ServerConfig` with HTTP only
//! (no WebSocket upgrade path), batches off, `max_connections` 10240 (its
//! benchmarks' value; the default is 100), `TCP_NODELAY` (its default), the
//! method registered with `register_method` (a synchronous method, answered
//! without a task of its own), params parsed into borrowed typed structs;
//! on the multi-thread tokio runtime (its examples' `#[tokio::main]`), or
//! a current-thread one with `--current-thread` (the benchmark keeps each
//! server's best).

#![forbid(unsafe_code)]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bench_jsonrpsee::{CallParams, runtime, time_now};
use jsonrpsee::server::{BatchRequestConfig, RpcModule, Server, ServerConfig};
use jsonrpsee::types::ErrorObjectOwned;
use tokio::io::AsyncReadExt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    runtime()?.block_on(async {
        let config = ServerConfig::builder()
            .http_only()
            .set_batch_request_config(BatchRequestConfig::Disabled)
            .max_connections(10 * 1024)
            .build();
        let server = Server::builder()
            .set_config(config)
            .build("127.0.0.1:0")
            .await?;
        let mut module = RpcModule::new(());
        module.register_method("tools/call", |params, _, _| {
            let params: CallParams<'_> = params.parse()?;
            time_now(&params)
                .map_err(|message| ErrorObjectOwned::owned(-32602, message, None::<()>))
        })?;
        println!("listening {}", server.local_addr()?.port());
        let handle = server.start(module);
        // Stop when the driver closes our stdin.
        let mut stdin = tokio::io::stdin();
        let mut sink = [0u8; 64];
        while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
        let _ = handle.stop();
        handle.stopped().await;
        Ok(())
    })
}
