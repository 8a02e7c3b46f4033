//! HTTP fault injection on 127.0.0.1 (issue 11): peers and clients that
//! misbehave on purpose. Each case checks the typed error, that nothing
//! hangs (every wait is bounded and timed), that memory stays bounded (caps
//! hold, handler tasks and permits are released), and that the next
//! request succeeds.
//!
//! Client side (`HttpProvider` against a scripted raw TCP peer): a peer
//! that accepts and never answers, one that never even reads, one that
//! streams an endless body, one that declares a huge body. Server side
//! (`serve_http` against raw TCP clients): slowloris headers (and a head
//! completed in the idle close's grace), idle
//! connections, half bodies (disconnecting or stalling), clients that
//! disconnect while their query is being handled, and a client that never
//! reads its (large) answer; over HTTP/2, a client that never opens its
//! flow-control window and one that resets its streams while they are
//! handled.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Running, call, context, json_result, query};
use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult};
use evidence_wire::server::{Server, ServerConfig, ServerEvent};
use evidence_wire_tokio::{
    Answer, Handler, HttpProvider, HttpProviderConfig, HttpServerConfig, ProviderError, Service,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The bound on every wait in this file.
const LIMIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Client side: HttpProvider against scripted peers.
// ---------------------------------------------------------------------------

/// What a scripted peer does with one accepted connection.
#[derive(Clone, Copy, Debug)]
enum Peer {
    /// Reads the request, never answers, holds the connection open.
    Silent,
    /// Never reads a byte; holds the connection open.
    Deaf,
    /// Reads the request and answers it through the core `Server`.
    Answer,
    /// Answers 200 with a chunked body that never ends.
    Endless,
    /// Answers 200 declaring a 5 MB body.
    Declared,
}

/// Per-connection counters a peer reports.
#[derive(Default)]
struct PeerStats {
    accepted: AtomicUsize,
    /// Bytes of body the `Endless` peer managed to write before the client
    /// hung up.
    streamed: AtomicUsize,
    /// Set when an `Endless` peer saw the client hang up.
    cut_off: AtomicUsize,
}

/// A raw TCP peer on 127.0.0.1 acting `script[n]` on its n-th connection
/// (the last entry repeats).
async fn scripted(script: Vec<Peer>) -> (SocketAddr, Arc<PeerStats>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let address = listener.local_addr().expect("address");
    let stats = Arc::new(PeerStats::default());
    let shared = Arc::clone(&stats);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let index = shared.accepted.fetch_add(1, Ordering::SeqCst);
            let behaviour = script
                .get(index)
                .or(script.last())
                .copied()
                .unwrap_or(Peer::Answer);
            tokio::spawn(act(stream, behaviour, Arc::clone(&shared)));
        }
    });
    (address, stats)
}

async fn act(mut stream: TcpStream, behaviour: Peer, stats: Arc<PeerStats>) {
    if let Peer::Deaf = behaviour {
        tokio::time::sleep(LIMIT * 3).await;
        return;
    }
    let Some(body) = read_request(&mut stream).await else {
        return;
    };
    match behaviour {
        Peer::Deaf => {}
        Peer::Silent => tokio::time::sleep(LIMIT * 3).await,
        Peer::Answer => {
            let answer = answer_with_core(&body).await;
            let mut response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                answer.len()
            )
            .into_bytes();
            response.extend_from_slice(&answer);
            let _ = stream.write_all(&response).await;
            let _ = stream.shutdown().await;
        }
        Peer::Declared => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5000000\r\n\r\n{\"jsonrpc\":")
                .await;
            tokio::time::sleep(LIMIT).await;
        }
        Peer::Endless => {
            if stream
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            let chunk = vec![b' '; 64 * 1024];
            let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
            framed.extend_from_slice(&chunk);
            framed.extend_from_slice(b"\r\n");
            let started = Instant::now();
            // Bounded: stop after LIMIT even if the client never hangs up.
            while started.elapsed() < LIMIT {
                match stream.write_all(&framed).await {
                    Ok(()) => {
                        stats.streamed.fetch_add(chunk.len(), Ordering::SeqCst);
                    }
                    Err(_) => {
                        stats.cut_off.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
            }
        }
    }
}

/// Reads one request head and its `Content-Length` body.
async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(count) => bytes.extend_from_slice(&buffer[..count]),
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(count) => bytes.extend_from_slice(&buffer[..count]),
        }
    }
    Some(bytes[head_end..head_end + length].to_vec())
}

/// Answers one JSON-RPC body through a fresh core `Server` (`echo` only).
async fn answer_with_core(body: &[u8]) -> Vec<u8> {
    let mut server = Server::new(ServerConfig::default());
    let mut line = body.to_vec();
    line.push(b'\n');
    server.handle_input(&line);
    server.handle_end_of_input();
    while let Some(event) = server.poll_event() {
        if let ServerEvent::EvidenceQuery { ticket, query, .. } = event {
            let result = json_result(&json!({"params": query.params}));
            server.respond(ticket, result).expect("known ticket");
        }
    }
    let mut out = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        out.extend_from_slice(&bytes);
    }
    if out.last() == Some(&b'\n') {
        out.pop();
    }
    out
}

fn provider(address: SocketAddr, timeout_ms: u64) -> HttpProvider {
    let mut client = ClientConfig::default();
    client.request_timeout_ms = timeout_ms;
    HttpProvider::new(
        HttpProviderConfig::new(format!("http://{address}/rpc"))
            .with_insecure_http(true)
            .with_client(client),
    )
    .expect("provider")
}

/// One query, bounded by [`LIMIT`]; returns the outcome and how long it took.
async fn timed_query(
    provider: &HttpProvider,
    params: Value,
) -> (Result<Value, ProviderError>, Duration) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(LIMIT, provider.query(&query("echo", params), &context()))
        .await
        .expect("the query returns within the bound");
    let outcome = outcome.map(|answer| serde_json::to_value(answer.result()).expect("json"));
    (outcome, started.elapsed())
}

async fn next_query_succeeds(provider: &HttpProvider) {
    let (outcome, _) = timed_query(provider, json!("next")).await;
    let result = outcome.expect("the next query succeeds");
    assert_eq!(result["value"]["value"]["params"], "next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_that_accepts_and_never_answers_times_out_typed() {
    for silent in [Peer::Silent, Peer::Deaf] {
        let (address, stats) = scripted(vec![silent, Peer::Answer]).await;
        let provider = provider(address, 400);
        let (outcome, took) = timed_query(&provider, json!(1)).await;
        let error = outcome.unwrap_err();
        assert!(
            matches!(error, ProviderError::Query(QueryError::Timeout(400))),
            "{silent:?}: {error:?}"
        );
        assert_eq!(error.code(), "provider_timeout");
        assert!(
            took >= Duration::from_millis(390) && took < Duration::from_millis(2500),
            "{silent:?}: the deadline is kept, took {took:?}"
        );
        next_query_succeeds(&provider).await;
        assert_eq!(stats.accepted.load(Ordering::SeqCst), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_or_oversized_answer_is_cut_off_at_the_cap() {
    let (address, stats) = scripted(vec![Peer::Endless, Peer::Declared, Peer::Answer]).await;
    let provider = HttpProvider::new(
        HttpProviderConfig::new(format!("http://{address}/rpc"))
            .with_insecure_http(true)
            .with_max_response_bytes(256 * 1024),
    )
    .expect("provider");
    // A chunked body with no end: counted while read, stopped at the cap.
    let (outcome, took) = timed_query(&provider, json!(1)).await;
    let error = outcome.unwrap_err();
    assert!(
        matches!(error, ProviderError::ResponseTooLarge { limit: 262_144 }),
        "{error:?}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // The client hung up: the peer's writes fail soon after, having pushed
    // at most the cap plus what the socket buffers hold.
    let waited = Instant::now();
    while stats.cut_off.load(Ordering::SeqCst) == 0 && waited.elapsed() < LIMIT {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        stats.cut_off.load(Ordering::SeqCst),
        1,
        "the client closed the endless stream"
    );
    let streamed = stats.streamed.load(Ordering::SeqCst);
    assert!(
        streamed < 32 * 1024 * 1024,
        "bounded reading: {streamed} bytes"
    );
    // A declared length past the cap is refused before reading.
    let (outcome, _) = timed_query(&provider, json!(2)).await;
    assert!(
        matches!(
            outcome,
            Err(ProviderError::ResponseTooLarge { limit: 262_144 })
        ),
        "{outcome:?}"
    );
    next_query_succeeds(&provider).await;
}

// ---------------------------------------------------------------------------
// Server side: serve_http against misbehaving clients.
// ---------------------------------------------------------------------------

/// `echo` answers at once; `slow` sleeps `params.ms`. Counts the calls in
/// progress (a guard decrements on completion *or* when the task is
/// dropped), so a leaked handler task is observable.
#[derive(Clone, Default)]
struct CountingHandler {
    active: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
}

struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Handler for CountingHandler {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        _context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        let counts = self.clone();
        Answer::future(async move {
            counts.started.fetch_add(1, Ordering::SeqCst);
            counts.active.fetch_add(1, Ordering::SeqCst);
            let _active = Active(Arc::clone(&counts.active));
            let params = query.params.clone().unwrap_or(Value::Null);
            if query.check_id == "slow" {
                let ms = params.get("ms").and_then(Value::as_u64).unwrap_or(100);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if query.check_id == "big" {
                let kib = params.get("kib").and_then(Value::as_u64).unwrap_or(1);
                let size = usize::try_from(kib).expect("small") * 1024;
                return json_result(&json!({"blob": "x".repeat(size)}));
            }
            json_result(&json!({"params": params}))
        })
    }
}

async fn start(config: HttpServerConfig, handler: CountingHandler) -> Running {
    Running::start(Service::new(ServerConfig::default(), handler), config).await
}

/// `POST /rpc` of `message` to the server at `address` (named in `Host`).
fn post_bytes(address: SocketAddr, message: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(message).expect("json");
    let mut bytes = format!(
        "POST /rpc HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

/// A well-behaved request: the status and JSON body.
async fn normal(address: SocketAddr, id: i64) -> (u16, Value) {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream
            .write_all(&post_bytes(address, &call(id, "echo", json!(id))))
            .await
            .expect("send");
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes).await;
        bytes
    };
    let bytes = tokio::time::timeout(LIMIT, exchange)
        .await
        .expect("reply in time");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Reads until the server closes the connection (or `LIMIT`); returns
/// what arrived and how long it took.
async fn until_closed(stream: &mut TcpStream) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut bytes = Vec::new();
    let _ = tokio::time::timeout(LIMIT, stream.read_to_end(&mut bytes))
        .await
        .expect("the server closes the connection within the bound");
    (bytes, started.elapsed())
}

/// Writes `bytes` one every 40 ms (a slowloris head) until the server
/// refuses them or 3 s have passed since `started`; returns how many it took.
async fn trickle(stream: &mut TcpStream, bytes: &[u8], started: Instant) -> usize {
    let mut sent = 0usize;
    for byte in bytes {
        if stream.write_all(std::slice::from_ref(byte)).await.is_err() {
            break;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(40)).await;
        // Stop trickling once the server has given up on us.
        if started.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    sent
}

async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < LIMIT, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_headers_are_cut_off_while_others_are_served() {
    let mut config = HttpServerConfig::default();
    config.header_read_timeout = Duration::from_millis(400);
    let server = start(config, CountingHandler::default()).await;
    let address = server.address;

    // Slowloris: one header byte every 40 ms (the head would take seconds).
    let slow = tokio::spawn(async move {
        let head = post_bytes(address, &call(1, "echo", json!(1)));
        let mut stream = TcpStream::connect(address).await.expect("connect");
        let started = Instant::now();
        let sent = trickle(&mut stream, &head, started).await;
        let (reply, _) = until_closed(&mut stream).await;
        (sent, head.len(), reply, started.elapsed())
    });
    // An idle connection that never sends a byte is cut off the same way.
    let idle = tokio::spawn(async move {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        until_closed(&mut stream).await
    });
    // Meanwhile normal clients are served promptly.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for id in 0..5 {
        let started = Instant::now();
        let (status, body) = normal(address, id).await;
        assert_eq!(status, 200);
        assert_eq!(body["id"], id);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    let (sent, total, reply, took) = slow.await.expect("slowloris task");
    assert!(
        sent < total,
        "the server closed before the head was complete ({sent}/{total} bytes sent)"
    );
    assert!(
        took < Duration::from_secs(4),
        "cut off near the 400 ms header timeout, took {took:?}"
    );
    // hyper closes the connection; whatever it says, it is not a 200.
    assert!(
        !String::from_utf8_lossy(&reply).contains(" 200 "),
        "{reply:?}"
    );
    let (idle_reply, idle_took) = idle.await.expect("idle task");
    assert!(idle_reply.is_empty() || !String::from_utf8_lossy(&idle_reply).contains(" 200 "));
    assert!(
        idle_took < Duration::from_secs(3),
        "idle connection closed near the header timeout, took {idle_took:?}"
    );
    let (status, _) = normal(address, 99).await;
    assert_eq!(status, 200, "the next request succeeds");
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_head_after_a_keep_alive_answer_is_cut_off_too() {
    // The head timeout of a connection's later requests, which the idle
    // watch enforces (hyper's own head timer is off): it runs from the
    // last answer, whatever arrives meanwhile.
    let mut config = HttpServerConfig::default();
    config.header_read_timeout = Duration::from_millis(400);
    let server = start(config, CountingHandler::default()).await;
    let address = server.address;
    let keep_alive = |id: i64| {
        String::from_utf8(post_bytes(address, &call(id, "echo", json!(id))))
            .expect("ASCII request")
            .replace("Connection: close\r\n", "")
            .into_bytes()
    };
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(&keep_alive(1)).await.expect("send");
    // The first answer, read to the end of its body.
    let mut first = Vec::new();
    let answered = async {
        let mut chunk = [0u8; 4096];
        loop {
            let read = stream.read(&mut chunk).await.expect("read");
            assert!(read > 0, "closed before the first answer: {first:?}");
            first.extend_from_slice(&chunk[..read]);
            let text = String::from_utf8_lossy(&first).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .expect("a Content-Length");
                if body.len() >= length {
                    return text;
                }
            }
        }
    };
    let text = tokio::time::timeout(LIMIT, answered)
        .await
        .expect("first answer in time");
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    // The second head, one byte every 40 ms.
    let head = keep_alive(2);
    let started = Instant::now();
    let sent = trickle(&mut stream, &head, started).await;
    let (reply, _) = until_closed(&mut stream).await;
    let took = started.elapsed();
    assert!(
        sent < head.len(),
        "the whole second head was taken ({sent} bytes)"
    );
    assert!(
        took < Duration::from_secs(2),
        "cut off near the 400 ms head timeout, took {took:?}"
    );
    assert!(
        !String::from_utf8_lossy(&reply).contains(" 200 "),
        "{reply:?}"
    );
    let (status, _) = normal(address, 3).await;
    assert_eq!(status, 200, "the next client is served");
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_bodies_release_their_permits() {
    const LIMIT_CALLS: usize = 2;
    let mut config = HttpServerConfig::default().with_max_concurrent_requests(LIMIT_CALLS);
    config.body_read_timeout = Duration::from_millis(300);
    let handler = CountingHandler::default();
    let server = start(config, handler.clone()).await;
    let address = server.address;
    let full = post_bytes(address, &call(1, "echo", json!("x".repeat(200))));
    let half = &full[..full.len() - 150];

    // More than the limit of clients send headers and half a body, then
    // disconnect.
    for _ in 0..LIMIT_CALLS * 3 {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.write_all(half).await.expect("send half");
        drop(stream);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, body) = normal(address, 7).await;
    assert_eq!(status, 200, "permits released after disconnects: {body}");

    // More than the limit of clients send half a body and stall: each is
    // answered 400 after the body read timeout, and its permit returns.
    let mut stalled = Vec::new();
    for _ in 0..LIMIT_CALLS + 1 {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.write_all(half).await.expect("send half");
        stalled.push(tokio::spawn(async move {
            let (reply, took) = until_closed(&mut stream).await;
            (String::from_utf8_lossy(&reply).into_owned(), took)
        }));
    }
    let mut statuses = Vec::new();
    for stalled in stalled {
        let (reply, took) = stalled.await.expect("stalled task");
        assert!(took < Duration::from_secs(3), "took {took:?}");
        statuses.push(reply.split(' ').nth(1).unwrap_or("none").to_owned());
        if reply.contains(" 400 ") {
            assert!(reply.contains("did not arrive within 300 ms"), "{reply}");
        }
    }
    // The first LIMIT_CALLS held permits and timed out; the extra one was
    // refused OVERLOADED at once.
    assert_eq!(
        statuses.iter().filter(|status| *status == "400").count(),
        LIMIT_CALLS,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|status| *status == "503").count(),
        1,
        "{statuses:?}"
    );
    let (status, body) = normal(address, 8).await;
    assert_eq!(status, 200, "permits released after timeouts: {body}");
    assert_eq!(
        handler.started.load(Ordering::SeqCst),
        2,
        "only the normal requests reached the handler"
    );
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_while_handled_aborts_the_call_and_frees_the_permit() {
    const LIMIT_CALLS: usize = 2;
    let config = HttpServerConfig::default().with_max_concurrent_requests(LIMIT_CALLS);
    let handler = CountingHandler::default();
    let server = start(config, handler.clone()).await;
    let address = server.address;

    // Rounds of the limit of slow queries (30 s each) plus one refused, each
    // client disconnecting while its handler runs.
    for round in 0..3 {
        let slow = |index: usize| {
            let id = i64::try_from(round * 10 + index).expect("small");
            post_bytes(address, &call(id, "slow", json!({"ms": 30_000})))
        };
        let mut streams = Vec::new();
        for index in 0..LIMIT_CALLS {
            let mut stream = TcpStream::connect(address).await.expect("connect");
            stream.write_all(&slow(index)).await.expect("send");
            streams.push(stream);
        }
        let active = Arc::clone(&handler.active);
        wait_until("the slow calls run", || {
            active.load(Ordering::SeqCst) == LIMIT_CALLS
        })
        .await;
        // One more while every permit is held: refused at once, so it never
        // reaches the handler. (Sent before the wait above, it could still
        // be unread when the permits free up, and start.)
        let mut extra = TcpStream::connect(address).await.expect("connect");
        extra.write_all(&slow(LIMIT_CALLS)).await.expect("send");
        let (reply, _) = until_closed(&mut extra).await;
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 503 "), "round {round}: {reply}");
        drop(streams);
        let active = Arc::clone(&handler.active);
        wait_until("the abandoned calls are dropped", || {
            active.load(Ordering::SeqCst) == 0
        })
        .await;
        let (status, body) = normal(address, 100 + i64::try_from(round).expect("small")).await;
        assert_eq!(
            status, 200,
            "round {round}: permits released, not OVERLOADED: {body}"
        );
    }
    // Every slow call that started was dropped (none ran to completion).
    assert_eq!(handler.active.load(Ordering::SeqCst), 0);
    assert_eq!(
        handler.started.load(Ordering::SeqCst),
        3 * LIMIT_CALLS + 3,
        "slow calls started plus the normal ones"
    );
    server.stop().await.expect("clean stop");
}

/// A server with one connection slot, a 400 ms head timeout and a 500 ms
/// write timeout: a client that stalls holds everyone else off until the
/// server gives it up.
async fn one_slot_server() -> Running {
    let mut config = HttpServerConfig::default();
    config.max_connections = 1;
    config.header_read_timeout = Duration::from_millis(400);
    config.write_timeout = Duration::from_millis(500);
    start(config, CountingHandler::default()).await
}

/// With the one connection slot held by a stalled client, a new client is
/// served within 5 s (once the server gives the stalled answer up).
async fn served_once_the_stall_is_given_up(address: SocketAddr) {
    let started = Instant::now();
    let (status, body) = normal(address, 2).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "served once the stalled answer was given up, took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_never_reads_its_answer_does_not_pin_the_connection() {
    // One connection slot: a client that asks for a big answer and never
    // reads it must not keep the slot once its answer stops draining.
    let server = one_slot_server().await;
    let address = server.address;
    let mut hog = TcpStream::connect(address).await.expect("connect");
    hog.write_all(&post_bytes(
        address,
        &call(1, "big", json!({"kib": 32 * 1024})),
    ))
    .await
    .expect("send");
    tokio::time::sleep(Duration::from_millis(300)).await;
    served_once_the_stall_is_given_up(address).await;
    // The hog's connection was closed, its answer cut short.
    let (received, _) = until_closed(&mut hog).await;
    assert!(
        received.len() < 32 * 1024 * 1024,
        "{} bytes reached the hog",
        received.len()
    );
    server.stop().await.expect("clean stop");
}

/// An HTTP/2 client connection to `address` (prior knowledge) whose
/// streams open `stream_window` bytes of window: its sender and the
/// connection's task.
async fn http2_client(
    address: SocketAddr,
    stream_window: u32,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let stream = TcpStream::connect(address).await.expect("connect");
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(stream_window)
        .handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/2 handshake");
    (sender, tokio::spawn(connection))
}

/// `POST /rpc` of `message` over HTTP/2 to the server at `address`.
fn http2_post(
    address: SocketAddr,
    message: &Value,
) -> hyper::Request<http_body_util::Full<bytes::Bytes>> {
    let body = serde_json::to_vec(message).expect("json");
    hyper::Request::post(format!("http://{address}/rpc"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_whose_window_stays_shut_does_not_pin_the_connection() {
    // HTTP/2 flow control: a client that opens no window for its streams
    // gets its answer's head but never its body. hyper holds the body
    // waiting for window; no byte waits on the socket, so the write guard
    // sees nothing to time out. With one connection slot, that client
    // must not keep the slot past the write timeout.
    use http_body_util::BodyExt;

    let server = one_slot_server().await;
    let address = server.address;
    let (mut sender, connection) = http2_client(address, 0).await;
    let request = http2_post(address, &call(1, "echo", json!("held")));
    let response = tokio::time::timeout(LIMIT, sender.send_request(request))
        .await
        .expect("the head in time")
        .expect("answered");
    assert_eq!(response.status().as_u16(), 200);
    // The body cannot come: the client's window for it is 0.
    let held = tokio::spawn(response.into_body().collect());
    served_once_the_stall_is_given_up(address).await;
    // The stalled connection was closed, its answer never delivered.
    // (How hyper's client reports the close is its own business.)
    let _closed = tokio::time::timeout(LIMIT, connection)
        .await
        .expect("the server closed the stalled HTTP/2 connection")
        .expect("task");
    let body = tokio::time::timeout(LIMIT, held)
        .await
        .expect("the held body ends")
        .expect("task");
    assert!(
        body.is_err(),
        "the held answer never arrived whole: {body:?}"
    );
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_reset_while_handled_stops_its_call_and_frees_the_permit() {
    // The HTTP/2 form of a client that leaves: it resets its streams
    // (dropping a response future does) and keeps the connection. The
    // calls must stop, their permits come back, and the connection serve on.
    const LIMIT_CALLS: usize = 2;
    let config = HttpServerConfig::default().with_max_concurrent_requests(LIMIT_CALLS);
    let handler = CountingHandler::default();
    let server = start(config, handler.clone()).await;
    let address = server.address;
    let (sender, connection) = http2_client(address, 65_535).await;
    // Each round first needs every permit back from the one before: its
    // slow calls must all run at once.
    for round in 0..4_i64 {
        let calls: Vec<_> = (0..LIMIT_CALLS)
            .map(|index| {
                let mut sender = sender.clone();
                let id = round * 10 + i64::try_from(index).expect("small");
                let request = http2_post(address, &call(id, "slow", json!({"ms": 30_000})));
                tokio::spawn(async move { sender.send_request(request).await })
            })
            .collect();
        let active = Arc::clone(&handler.active);
        wait_until("the slow calls run", || {
            active.load(Ordering::SeqCst) == LIMIT_CALLS
        })
        .await;
        for call in &calls {
            call.abort();
        }
        let active = Arc::clone(&handler.active);
        wait_until("the reset streams' calls are dropped", || {
            active.load(Ordering::SeqCst) == 0
        })
        .await;
        // The connection serves on.
        for index in 0..LIMIT_CALLS {
            let id = 100 + round * 10 + i64::try_from(index).expect("small");
            let response = tokio::time::timeout(
                LIMIT,
                sender
                    .clone()
                    .send_request(http2_post(address, &call(id, "echo", json!(id)))),
            )
            .await
            .expect("answered in time")
            .expect("answered");
            assert_eq!(response.status().as_u16(), 200, "round {round}");
        }
    }
    assert!(
        !connection.is_finished(),
        "the connection served throughout"
    );
    assert_eq!(handler.active.load(Ordering::SeqCst), 0);
    drop(sender);
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_completed_in_the_idle_close_grace_is_answered_whole() {
    // The idle watch fires on a first head still arriving; the close it
    // starts gives that head 1 s more (IDLE_CLOSE_GRACE). A head completed
    // within it is a request like any other: its call runs past the grace
    // and its answer is written whole before the connection closes.
    let mut config = HttpServerConfig::default();
    config.header_read_timeout = Duration::from_millis(300);
    let server = start(config, CountingHandler::default()).await;
    let address = server.address;
    let request = post_bytes(address, &call(1, "slow", json!({"ms": 1_000})));
    let (first, rest) = request.split_at(20);
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let started = Instant::now();
    stream.write_all(first).await.expect("send");
    // Past the head timeout (300 ms), inside the grace (to 1.3 s).
    tokio::time::sleep(Duration::from_millis(650)).await;
    stream.write_all(rest).await.expect("send the rest");
    let (reply, _) = until_closed(&mut stream).await;
    let took = started.elapsed();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200 "), "{reply}");
    assert!(reply.contains("\"ms\":1000"), "the whole answer: {reply}");
    assert!(
        took > Duration::from_millis(1_500),
        "answered after the grace ended, not cut off at it: {took:?}"
    );
    server.stop().await.expect("clean stop");
}
