//! Bounded load on loopback and in memory (issue 11): nothing lost, nothing
//! answered twice.
//!
//! - HTTP: [`CLIENTS`] concurrent keep-alive clients each send
//!   [`REQUESTS_PER_CLIENT`] `evidence_query` calls with distinct ids to
//!   `serve_http`; every id must be answered exactly once, with its own
//!   params, and p50/p99 latencies go to stderr. The default (64 x 500 =
//!   32,000 requests) keeps CI short; the full 64 x 2,000 run is
//!   `EVIDENCE_WIRE_LOAD_REQUESTS=2000 cargo test -p evidence-wire-tokio
//!   --test it load:: -- --nocapture` (about 70 s in a debug build on 2 busy
//!   cores, 1,850 requests/s).
//! - stdio: [`PIPELINED`] queries written back to back to the tokio stdio
//!   server over a duplex pipe; the handler sleeps a pseudo-random time per
//!   query, so answers come back out of order; each id must be answered
//!   exactly once.
//!
//! Every wait is bounded; the counts keep each test well under 30 s in a
//! debug build on 2 cores.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{call, dg_result, frames, json_result, ndjson};
use bytes::Bytes;
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult};
use evidence_wire::server::ServerConfig;
use evidence_wire_tokio::{
    Answer, Handler, HttpServerConfig, Service, bind_http, serve, serve_http,
};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// Concurrent HTTP clients.
const CLIENTS: usize = 64;
/// Requests each HTTP client sends, one after another on one connection
/// (`EVIDENCE_WIRE_LOAD_REQUESTS` overrides it, up to 100,000).
const REQUESTS_PER_CLIENT: usize = 500;
/// Queries pipelined on the stdio server.
const PIPELINED: usize = 1000;
/// The bound on each whole load run (generous: CI machines are shared).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Echoes `params`; with `{"delay_ms": n}` it sleeps first.
struct EchoHandler;

impl Handler for EchoHandler {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        _context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        Answer::future(async move {
            let params = query.params.unwrap_or(Value::Null);
            if let Some(ms) = params.get("delay_ms").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            json_result(&json!({"params": params}))
        })
    }
}

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = (sorted.len() * percent / 100).min(sorted.len() - 1);
    sorted[index]
}

/// Checks that `ids` holds each of `0..total` exactly once.
fn assert_each_once(mut ids: Vec<u64>, total: usize) {
    assert_eq!(ids.len(), total, "answers received");
    ids.sort_unstable();
    let mut duplicated = Vec::new();
    let mut missing = Vec::new();
    let mut expected = 0u64;
    for id in ids.iter().copied() {
        if id < expected {
            duplicated.push(id);
            continue;
        }
        while expected < id {
            missing.push(expected);
            expected += 1;
        }
        expected = id + 1;
    }
    while (expected as usize) < total {
        missing.push(expected);
        expected += 1;
    }
    assert!(
        duplicated.is_empty() && missing.is_empty(),
        "duplicated ids {duplicated:?}, missing ids {missing:?}"
    );
}

fn requests_per_client() -> usize {
    std::env::var("EVIDENCE_WIRE_LOAD_REQUESTS")
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|count| (1..=100_000).contains(count))
        .unwrap_or(REQUESTS_PER_CLIENT)
}

/// One keep-alive client: `per_client` sequential calls; returns (id
/// answered, latency) per call.
async fn http_client(
    address: SocketAddr,
    client: usize,
    per_client: usize,
) -> Vec<(u64, Duration)> {
    let stream = TcpStream::connect(address).await.expect("connect");
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut answered = Vec::with_capacity(per_client);
    for index in 0..per_client {
        let id = (client * per_client + index) as u64;
        let body = serde_json::to_vec(&call(
            i64::try_from(id).expect("small"),
            "echo",
            json!({"n": id}),
        ))
        .expect("json");
        let request = Request::post("/rpc")
            .header(HOST, address.to_string())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let started = Instant::now();
        let response = sender.send_request(request).await.expect("response");
        assert_eq!(response.status(), 200, "request {id}");
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let latency = started.elapsed();
        let answer: Value = serde_json::from_slice(&body).expect("JSON answer");
        let answered_id = answer["id"].as_u64().expect("numeric id");
        // The answer carries the params of the query with that id.
        assert_eq!(
            dg_result(&answer)["value"]["value"]["params"]["n"],
            answered_id,
            "{answer}"
        );
        answered.push((answered_id, latency));
    }
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_under_concurrent_clients_loses_nothing() {
    let config = HttpServerConfig::default().with_max_concurrent_requests(CLIENTS);
    let listener = bind_http(SocketAddr::from(([127, 0, 0, 1], 0)), &config)
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve_http(
        listener,
        Service::new(ServerConfig::default(), EchoHandler),
        config,
        async move {
            let _ = stopped.await;
        },
    ));

    let per_client = requests_per_client();
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| tokio::spawn(http_client(address, client, per_client)))
        .collect();
    let run = async {
        let mut all = Vec::with_capacity(CLIENTS * per_client);
        for client in clients {
            all.extend(client.await.expect("client task"));
        }
        all
    };
    let all = tokio::time::timeout(RUN_LIMIT, run)
        .await
        .expect("the load run finishes within the bound");
    let elapsed = started.elapsed();

    let mut latencies: Vec<Duration> = all.iter().map(|(_, latency)| *latency).collect();
    latencies.sort_unstable();
    let total = CLIENTS * per_client;
    eprintln!(
        "http load: {CLIENTS} clients x {per_client} requests = {total} in {elapsed:.2?} ({:.0} req/s); latency p50 {:.2?}, p99 {:.2?}, max {:.2?}",
        total as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 50),
        percentile(&latencies, 99),
        latencies.last().copied().unwrap_or_default(),
    );
    assert_each_once(all.into_iter().map(|(id, _)| id).collect(), total);

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("server stops in time")
        .expect("server task")
        .expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_server_answers_pipelined_queries_once_each_out_of_order() {
    let mut server_config = ServerConfig::default();
    server_config.max_in_flight = PIPELINED;
    let (client, server_side) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_side);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let serving = tokio::spawn(serve(
        Service::new(server_config, EchoHandler),
        server_read,
        server_write,
    ));

    let started = Instant::now();
    let writer = tokio::spawn(async move {
        let mut input = Vec::new();
        for id in 0..PIPELINED {
            // Pseudo-random delays (0..=47 ms) so answers finish out of order.
            let delay = (id * 7919 + 13) % 48;
            input.extend_from_slice(&ndjson(&call(
                i64::try_from(id).expect("small"),
                "echo",
                json!({"n": id, "delay_ms": delay}),
            )));
        }
        client_write.write_all(&input).await.expect("write");
        client_write.shutdown().await.expect("close input");
        client_write
    });
    let mut output = Vec::new();
    tokio::time::timeout(RUN_LIMIT, client_read.read_to_end(&mut output))
        .await
        .expect("the server answers everything and closes within the bound")
        .expect("read");
    let _input = writer.await.expect("writer");
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("serve returns")
        .expect("serve task")
        .expect("clean end of input");
    let elapsed = started.elapsed();

    let answers = frames(&output);
    let mut ids = Vec::with_capacity(answers.len());
    for answer in &answers {
        let id = answer["id"].as_u64().expect("numeric id");
        assert_eq!(
            dg_result(answer)["value"]["value"]["params"]["n"],
            id,
            "{answer}"
        );
        ids.push(id);
    }
    let in_order = ids.windows(2).all(|pair| pair[0] < pair[1]);
    assert!(!in_order, "the random delays reorder the answers");
    eprintln!("stdio load: {PIPELINED} pipelined queries answered in {elapsed:.2?}");
    assert_each_once(ids, PIPELINED);
}
