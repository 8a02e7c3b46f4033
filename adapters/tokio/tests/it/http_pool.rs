//! `HttpProvider` keeps its connections (issue 40 item 5, issue 43 item 4):
//! against loopback servers that count the connections they accept (and
//! how many are open at once), sequential queries share one keep-alive
//! connection, 64 concurrent callers use a bounded number of them, a
//! server that closes idle connections (or every connection after its
//! answer) never fails the next query, and over TLS the client speaks
//! HTTP/2 when the server offers `h2` by ALPN (one connection for all).
//! Every wait is bounded; every server listens on 127.0.0.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{call, context, json_result, query};
use bytes::Bytes;
use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::server::{Server, ServerConfig, ServerEvent};
use evidence_wire_tokio::{HttpProvider, HttpProviderConfig, ProviderError};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The bound on every wait in this file.
const LIMIT: Duration = Duration::from_secs(10);

/// What a loopback server saw.
#[derive(Default)]
struct Stats {
    /// Connections accepted.
    accepted: AtomicUsize,
    /// Connections open now.
    open: AtomicUsize,
    /// Most connections open at once.
    most_open: AtomicUsize,
    /// Requests answered.
    answered: AtomicUsize,
}

impl Stats {
    fn opened(self: &Arc<Self>) -> OpenGuard {
        self.accepted.fetch_add(1, Ordering::SeqCst);
        let now = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_open.fetch_max(now, Ordering::SeqCst);
        OpenGuard(Arc::clone(self))
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    fn most_open(&self) -> usize {
        self.most_open.load(Ordering::SeqCst)
    }
}

/// Counts a connection closed when the server's side of it ends.
struct OpenGuard(Arc<Stats>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How the raw HTTP/1.1 server treats a connection.
#[derive(Clone, Copy, Debug)]
enum KeepAlive {
    /// Keeps it open between requests (up to [`LIMIT`] idle).
    Open,
    /// Closes it once it has been idle this long.
    IdleClose(Duration),
    /// Closes it right after each answer, without a `Connection: close`
    /// header (as a server that crashed or restarted would).
    CloseAfterAnswer,
}

/// A raw HTTP/1.1 keep-alive server on 127.0.0.1 answering `echo` through
/// the core `Server`, counting connections.
async fn raw_server(mode: KeepAlive) -> (SocketAddr, Arc<Stats>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let address = listener.local_addr().expect("address");
    let stats = Arc::new(Stats::default());
    let shared = Arc::clone(&stats);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let guard = shared.opened();
            tokio::spawn(serve_raw(stream, mode, guard));
        }
    });
    (address, stats)
}

async fn serve_raw(mut stream: TcpStream, mode: KeepAlive, guard: OpenGuard) {
    let idle = match mode {
        KeepAlive::IdleClose(idle) => idle,
        KeepAlive::Open | KeepAlive::CloseAfterAnswer => LIMIT,
    };
    let mut pending = Vec::new();
    loop {
        let Ok(Some(body)) =
            tokio::time::timeout(idle, read_request(&mut stream, &mut pending)).await
        else {
            break;
        };
        if let Some(ms) = sleep_ms(&body) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let answer = answer_with_core(&body);
        let mut response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            answer.len()
        )
        .into_bytes();
        response.extend_from_slice(&answer);
        guard.0.answered.fetch_add(1, Ordering::SeqCst);
        if stream.write_all(&response).await.is_err() {
            break;
        }
        if let KeepAlive::CloseAfterAnswer = mode {
            break;
        }
    }
    let _ = stream.shutdown().await;
    drop(guard);
}

/// Reads one request head and its `Content-Length` body (bytes past it
/// stay in `pending`); `None` at end of stream.
async fn read_request(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = pending.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(count) => pending.extend_from_slice(&buffer[..count]),
        }
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    while pending.len() < head_end + length {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(count) => pending.extend_from_slice(&buffer[..count]),
        }
    }
    let body = pending[head_end..head_end + length].to_vec();
    pending.drain(..head_end + length);
    Some(body)
}

/// The `sleep_ms` a query's params ask the server to wait before answering.
fn sleep_ms(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .pointer("/params/arguments/query/params/sleep_ms")?
        .as_u64()
}

/// Answers one JSON-RPC body through a fresh core `Server` (`echo` only).
fn answer_with_core(body: &[u8]) -> Vec<u8> {
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

fn plain(address: SocketAddr) -> HttpProviderConfig {
    HttpProviderConfig::new(format!("http://{address}/rpc")).with_insecure_http(true)
}

/// One `echo` query, bounded by [`LIMIT`]; returns the echoed params.
async fn ask(provider: &HttpProvider, params: Value) -> Result<Value, ProviderError> {
    let answer = tokio::time::timeout(LIMIT, provider.query(&query("echo", params), &context()))
        .await
        .expect("an outcome in time")?;
    Ok(serde_json::to_value(answer.result()).expect("json")["value"]["value"]["params"].clone())
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < LIMIT, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_queries_share_one_connection() {
    let (address, stats) = raw_server(KeepAlive::Open).await;
    let provider = HttpProvider::new(plain(address)).expect("provider");
    for round in 0..20 {
        assert_eq!(ask(&provider, json!(round)).await.expect("answer"), round);
    }
    // Clones share the connections too.
    let clone = provider.clone();
    assert_eq!(ask(&clone, json!("clone")).await.expect("answer"), "clone");
    assert_eq!(stats.answered.load(Ordering::SeqCst), 21);
    assert_eq!(stats.accepted(), 1, "one keep-alive connection for all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_use_a_bounded_number_of_connections() {
    let (address, stats) = raw_server(KeepAlive::Open).await;
    let provider = HttpProvider::new(plain(address)).expect("provider");
    for round in 0..3 {
        let callers: Vec<_> = (0..64)
            .map(|caller| {
                let provider = provider.clone();
                tokio::spawn(async move {
                    let params = json!([round, caller]);
                    assert_eq!(
                        ask(&provider, params.clone()).await.expect("answer"),
                        params
                    );
                })
            })
            .collect();
        for caller in callers {
            caller.await.expect("caller");
        }
    }
    assert_eq!(stats.answered.load(Ordering::SeqCst), 192);
    // The default limit: 32 connections at most, kept across the rounds.
    assert!(
        stats.most_open() <= 32,
        "{} open at once",
        stats.most_open()
    );
    assert!(stats.accepted() <= 32, "{} accepted", stats.accepted());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_closing_idle_connections_never_fails_the_next_query() {
    let (address, stats) = raw_server(KeepAlive::IdleClose(Duration::from_millis(300))).await;
    let provider = HttpProvider::new(plain(address)).expect("provider");
    assert_eq!(ask(&provider, json!(1)).await.expect("answer"), 1);
    assert_eq!(ask(&provider, json!(2)).await.expect("answer"), 2);
    assert_eq!(stats.accepted(), 1, "reused within the server's idle time");
    // The server closes the idle connection; the next query takes a new one.
    eventually("the server closed the idle connection", || {
        stats.open() == 0
    })
    .await;
    assert_eq!(ask(&provider, json!(3)).await.expect("answer"), 3);
    assert_eq!(stats.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_closing_after_every_answer_never_fails_a_query() {
    // No `Connection: close`: the client learns of the close only from the
    // socket, possibly after it has picked the connection for the next
    // query. Sequential and concurrent queries all succeed.
    let (address, stats) = raw_server(KeepAlive::CloseAfterAnswer).await;
    let provider = HttpProvider::new(plain(address)).expect("provider");
    for round in 0..50 {
        assert_eq!(ask(&provider, json!(round)).await.expect("answer"), round);
    }
    let callers: Vec<_> = (0..16)
        .map(|caller| {
            let provider = provider.clone();
            tokio::spawn(async move {
                for round in 0..5 {
                    let params = json!([caller, round]);
                    assert_eq!(
                        ask(&provider, params.clone()).await.expect("answer"),
                        params
                    );
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("caller");
    }
    assert_eq!(stats.answered.load(Ordering::SeqCst), 130);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_bounds_the_connections_of_concurrent_callers() {
    let (address, stats) = raw_server(KeepAlive::Open).await;
    let provider = HttpProvider::new(plain(address).with_max_connections(4)).expect("provider");
    for round in 0..3 {
        let callers: Vec<_> = (0..64)
            .map(|caller| {
                let provider = provider.clone();
                tokio::spawn(async move {
                    let params = json!([round, caller]);
                    assert_eq!(
                        ask(&provider, params.clone()).await.expect("answer"),
                        params
                    );
                })
            })
            .collect();
        for caller in callers {
            caller.await.expect("caller");
        }
    }
    assert_eq!(stats.answered.load(Ordering::SeqCst), 192);
    assert!(stats.most_open() <= 4, "{} open at once", stats.most_open());
    assert!(stats.accepted() <= 4, "{} accepted", stats.accepted());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_connection_counts_against_the_deadline() {
    let (address, stats) = raw_server(KeepAlive::Open).await;
    let mut client = ClientConfig::default();
    client.request_timeout_ms = 300;
    let provider = HttpProvider::new(plain(address).with_max_connections(1).with_client(client))
        .expect("provider");
    // The one connection is taken by a slow exchange (no deadline of its own).
    let slow = {
        let provider = provider.clone();
        let body = serde_json::to_vec(&call(7, "echo", json!({"sleep_ms": 1500}))).expect("json");
        tokio::spawn(async move {
            tokio::time::timeout(LIMIT, provider.post_message(body, None))
                .await
                .expect("in time")
        })
    };
    eventually("the slow request arrived", || stats.accepted() == 1).await;
    let started = Instant::now();
    let error = ask(&provider, json!(1)).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(error, ProviderError::Query(QueryError::Timeout(300))),
        "{error:?}"
    );
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(1400),
        "the deadline covers the wait for a connection: {took:?}"
    );
    let answer = slow.await.expect("slow task").expect("slow answer");
    assert!(!answer.is_empty());
    // The connection came back and serves the next query.
    assert_eq!(ask(&provider, json!(2)).await.expect("answer"), 2);
    assert_eq!(stats.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_capped_and_closed_after_the_idle_timeout() {
    let (address, stats) = raw_server(KeepAlive::Open).await;
    let provider = HttpProvider::new(
        plain(address)
            .with_max_connections(16)
            .with_pool_max_idle(2)
            .with_pool_idle_timeout(Duration::from_millis(400)),
    )
    .expect("provider");
    // A burst: 16 queries the server takes 200 ms to answer, on up to 16
    // connections.
    let callers: Vec<_> = (0..16)
        .map(|caller| {
            let provider = provider.clone();
            tokio::spawn(async move {
                let params = json!({"sleep_ms": 200, "caller": caller});
                assert_eq!(
                    ask(&provider, params.clone()).await.expect("answer"),
                    params
                );
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("caller");
    }
    assert!(
        stats.most_open() > 2,
        "the burst used {}",
        stats.most_open()
    );
    // Past the burst, only 2 stay open for reuse...
    eventually("all but 2 closed", || stats.open() <= 2).await;
    let accepted = stats.accepted();
    assert_eq!(
        ask(&provider, json!("reused")).await.expect("answer"),
        "reused"
    );
    assert_eq!(stats.accepted(), accepted, "an idle one served it");
    // ...and they are closed once idle for 400 ms.
    let idle_since = Instant::now();
    eventually("the idle connections closed", || stats.open() == 0).await;
    assert!(idle_since.elapsed() >= Duration::from_millis(300));
    assert_eq!(ask(&provider, json!("new")).await.expect("answer"), "new");
    assert_eq!(stats.accepted(), accepted + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_idle_connections_means_one_connection_per_query() {
    let (address, stats) = raw_server(KeepAlive::Open).await;
    let provider = HttpProvider::new(plain(address).with_pool_max_idle(0)).expect("provider");
    for round in 0..5 {
        assert_eq!(ask(&provider, json!(round)).await.expect("answer"), round);
    }
    assert_eq!(stats.accepted(), 5);
    eventually("every connection closed", || stats.open() == 0).await;
}

#[test]
fn zero_connections_is_refused() {
    let error = HttpProvider::new(
        HttpProviderConfig::new("https://127.0.0.1:9/rpc").with_max_connections(0),
    )
    .unwrap_err();
    assert!(matches!(error, ProviderError::Url { .. }), "{error:?}");
    assert!(error.to_string().contains("max_connections"), "{error}");
}

// ---------------------------------------------------------------------------
// TLS: HTTP/2 when the server offers it.
// ---------------------------------------------------------------------------

/// A self-signed certificate for 127.0.0.1 and the server settings using
/// it, offering `alpn` (in order of preference).
fn tls_identity(alpn: &[&[u8]]) -> (String, Arc<rustls::ServerConfig>) {
    let issued =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("certificate");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(issued.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![issued.cert.der().clone()], key)
        .expect("server certificate");
    server.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    (issued.cert.pem(), Arc::new(server))
}

/// What the TLS server saw of each request: its HTTP version and URI.
type Seen = Arc<Mutex<Vec<(hyper::Version, String)>>>;

/// Serves HTTPS on 127.0.0.1, HTTP/2 on connections that negotiated `h2`
/// and HTTP/1.1 on the others. A body asking for `{"big": true}` gets a
/// 2 MiB answer, one asking for `{"sleep_ms": n}` waits that long.
async fn tls_server(config: Arc<rustls::ServerConfig>) -> (SocketAddr, Arc<Stats>, Seen) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let address = listener.local_addr().expect("address");
    let acceptor = TlsAcceptor::from(config);
    let stats = Arc::new(Stats::default());
    let seen: Seen = Arc::default();
    let (shared, recorded) = (Arc::clone(&stats), Arc::clone(&seen));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let guard = shared.opened();
            let acceptor = acceptor.clone();
            let recorded = Arc::clone(&recorded);
            tokio::spawn(async move {
                let Ok(Ok(stream)) = tokio::time::timeout(LIMIT, acceptor.accept(stream)).await
                else {
                    return;
                };
                let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                let counter = Arc::clone(&guard.0);
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let recorded = Arc::clone(&recorded);
                    let counter = Arc::clone(&counter);
                    async move {
                        recorded
                            .lock()
                            .expect("lock")
                            .push((request.version(), request.uri().to_string()));
                        let body = request
                            .into_body()
                            .collect()
                            .await
                            .map(|body| body.to_bytes())
                            .unwrap_or_default();
                        if let Some(ms) = sleep_ms(&body) {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        let answer = if body.windows(5).any(|window| window == b"\"big\"") {
                            vec![b' '; 2 * 1024 * 1024]
                        } else {
                            answer_with_core(&body)
                        };
                        counter.answered.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(answer))))
                    }
                });
                let io = TokioIo::new(stream);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
                drop(guard);
            });
        }
    });
    (address, stats, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_is_spoken_when_the_server_offers_it() {
    let (certificate, config) = tls_identity(&[b"h2", b"http/1.1"]);
    let (address, stats, seen) = tls_server(config).await;
    let provider = HttpProvider::new(
        HttpProviderConfig::new(format!("https://{address}/rpc"))
            .with_public_roots(false)
            .with_root_certificate_pem(certificate),
    )
    .expect("provider");
    for round in 0..10 {
        assert_eq!(ask(&provider, json!(round)).await.expect("answer"), round);
    }
    // Concurrent callers share the one HTTP/2 connection.
    let callers: Vec<_> = (0..32)
        .map(|caller| {
            let provider = provider.clone();
            tokio::spawn(async move {
                assert_eq!(ask(&provider, json!(caller)).await.expect("answer"), caller);
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("caller");
    }
    // The response cap holds over HTTP/2 too, and the connection survives.
    let error = ask(&provider, json!({"big": true})).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::ResponseTooLarge { limit: 1_048_576 }),
        "{error:?}"
    );
    assert_eq!(
        ask(&provider, json!("after")).await.expect("answer"),
        "after"
    );
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 44);
    for (version, uri) in &seen {
        assert_eq!(*version, hyper::Version::HTTP_2);
        assert_eq!(uri, &format!("https://{address}/rpc"));
    }
    assert_eq!(stats.accepted(), 1, "one HTTP/2 connection for every query");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_over_tls_is_kept_when_h2_is_not_offered() {
    let (certificate, config) = tls_identity(&[b"http/1.1"]);
    let (address, stats, seen) = tls_server(config).await;
    let provider = HttpProvider::new(
        HttpProviderConfig::new(format!("https://{address}/rpc"))
            .with_public_roots(false)
            .with_root_certificate_pem(certificate),
    )
    .expect("provider");
    for round in 0..10 {
        assert_eq!(ask(&provider, json!(round)).await.expect("answer"), round);
    }
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 10);
    for (version, uri) in &seen {
        assert_eq!(*version, hyper::Version::HTTP_11);
        assert_eq!(uri, "/rpc");
    }
    assert_eq!(stats.accepted(), 1, "one TLS handshake for every query");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_past_a_deadline_takes_no_new_queries() {
    let (certificate, config) = tls_identity(&[b"h2", b"http/1.1"]);
    let (address, stats, _) = tls_server(config).await;
    let mut client = ClientConfig::default();
    client.request_timeout_ms = 300;
    let provider = HttpProvider::new(
        HttpProviderConfig::new(format!("https://{address}/rpc"))
            .with_public_roots(false)
            .with_root_certificate_pem(certificate)
            .with_client(client),
    )
    .expect("provider");
    assert_eq!(ask(&provider, json!(1)).await.expect("answer"), 1);
    let error = ask(&provider, json!({"sleep_ms": 5000})).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::Query(QueryError::Timeout(300))),
        "{error:?}"
    );
    // A connection that kept a query past its deadline may be stuck: the
    // next query opens a new one.
    assert_eq!(ask(&provider, json!(2)).await.expect("answer"), 2);
    assert_eq!(stats.accepted(), 2);
    assert_eq!(ask(&provider, json!(3)).await.expect("answer"), 3);
    assert_eq!(stats.accepted(), 2);
}
