//! The HTTP server and client on 127.0.0.1: authentication required and
//! refused, oversize bodies, notifications, SSE, Origin, redirects, plain
//! http:// refused without the flag, overload, graceful shutdown. Every
//! network wait is bounded by a timeout.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{Running, TestHandler, call, context, query};
use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::server::{Server, ServerConfig};
use evidence_wire_tokio::{
    HttpProvider, HttpProviderConfig, HttpServeError, HttpServerConfig, ProviderError, Service,
    bind_http,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(10);

async fn start(config: HttpServerConfig) -> Running {
    let service = Service::new(ServerConfig::default(), TestHandler);
    Running::start(service, config).await
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "JSON body expected ({error}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Sends `request` with `Host: <address>` added after its request line
/// (as every HTTP/1.1 client does) and reads the whole reply (the request
/// asks for `Connection: close`).
async fn raw(address: SocketAddr, request: &[u8]) -> Reply {
    let line_end = request
        .windows(2)
        .position(|window| window == b"\r\n")
        .expect("a request line")
        + 2;
    let mut with_host = request[..line_end].to_vec();
    with_host.extend_from_slice(format!("Host: {address}\r\n").as_bytes());
    with_host.extend_from_slice(&request[line_end..]);
    let exchange = async {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.write_all(&with_host).await.expect("send");
        let mut bytes = Vec::new();
        // The server may close before reading an unread body; take what came.
        let _ = stream.read_to_end(&mut bytes).await;
        bytes
    };
    let bytes = tokio::time::timeout(LIMIT, exchange)
        .await
        .expect("reply in time");
    let split = bytes
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: bytes[split + 4..].to_vec(),
    }
}

fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

fn post(path: &str, headers: &[(&str, &str)], message: &Value) -> Vec<u8> {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    request(
        "POST",
        path,
        &all,
        &serde_json::to_vec(message).expect("json"),
    )
}

fn insecure_provider(url: String) -> HttpProviderConfig {
    HttpProviderConfig::new(url).with_insecure_http(true)
}

async fn ask(provider: &HttpProvider, check: &str, params: Value) -> Result<Value, ProviderError> {
    let answer = tokio::time::timeout(LIMIT, provider.query(&query(check, params), &context()))
        .await
        .expect("outcome in time")?;
    Ok(serde_json::to_value(answer.result()).expect("json"))
}

#[tokio::test]
async fn rpc_answers_are_the_stdio_bytes() {
    let server = start(HttpServerConfig::default()).await;
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let reply = raw(server.address, &post("/rpc", &[], &message)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let mut stdio = Server::new(ServerConfig::default());
    let mut line = serde_json::to_vec(&message).expect("json");
    line.push(b'\n');
    stdio.handle_input(&line);
    let mut expected = stdio.poll_transmit().expect("stdio answer");
    expected.pop();
    assert_eq!(reply.body, expected);
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn provider_client_round_trip_verifies_evidence() {
    let server = start(HttpServerConfig::default()).await;
    let provider = HttpProvider::new(insecure_provider(server.url("/rpc"))).expect("provider");
    let result = ask(&provider, "echo", json!({"k": 1}))
        .await
        .expect("verified");
    assert_eq!(result["value"]["value"]["params"], json!({"k": 1}));
    assert_eq!(result["evidence_hash"]["algorithm"], "sha256");
    // The MCP endpoint answers in the MCP dialect; the client reads it too.
    let mcp = HttpProvider::new(insecure_provider(server.url("/mcp"))).expect("provider");
    let result = ask(&mcp, "echo", json!("m"))
        .await
        .expect("verified over /mcp");
    assert_eq!(result["value"]["value"]["params"], "m");
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn authentication_required_and_refused() {
    let server = start(HttpServerConfig::default().with_bearer_token("s3cret-token")).await;
    let message = call(1, "echo", json!(1));
    let missing = raw(server.address, &post("/rpc", &[], &message)).await;
    assert_eq!(missing.status, 401);
    assert!(
        missing
            .header("www-authenticate")
            .is_some_and(|value| value.starts_with("Bearer"))
    );
    assert_eq!(missing.json()["error"]["code"], -32004);
    let wrong = raw(
        server.address,
        &post(
            "/rpc",
            &[("Authorization", "Bearer s3cret-tokeN")],
            &message,
        ),
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert!(
        wrong
            .header("www-authenticate")
            .is_some_and(|value| value.contains("invalid_token"))
    );
    let right = raw(
        server.address,
        &post(
            "/rpc",
            &[("Authorization", "Bearer s3cret-token")],
            &message,
        ),
    )
    .await;
    assert_eq!(right.status, 200);
    assert_eq!(right.json()["id"], 1);

    let without = HttpProvider::new(insecure_provider(server.url("/rpc"))).expect("provider");
    let error = ask(&without, "echo", json!(1)).await.unwrap_err();
    let ProviderError::HttpStatus { status, detail, .. } = &error else {
        panic!("401 → status error, got {error:?}");
    };
    assert_eq!(*status, 401);
    assert!(detail.contains("Unauthenticated"), "{detail}");
    let with =
        HttpProvider::new(insecure_provider(server.url("/rpc")).with_bearer_token("s3cret-token"))
            .expect("provider");
    ask(&with, "echo", json!(1))
        .await
        .expect("authenticated query");
    // Probes need no token.
    let health = raw(server.address, &request("GET", "/healthz", &[], b"")).await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({"status": "ok"}));
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn oversize_bodies_get_the_canonical_json_error() {
    let server = start(HttpServerConfig::default().with_max_body_bytes(256)).await;
    // Declared too large: refused before the body is sent at all.
    let declared = raw(
        server.address,
        b"POST /rpc HTTP/1.1\r\nConnection: close\r\nContent-Length: 1000000000\r\n\r\n",
    )
    .await;
    assert_eq!(declared.status, 413);
    assert_eq!(declared.header("content-type"), Some("application/json"));
    let body = declared.json();
    assert_eq!(body["error"]["code"], -32070);
    assert_eq!(body["error"]["data"]["kind"], "payload_too_large");
    // No length declared (chunked): counted while reading.
    let chunk = "x".repeat(200);
    let chunked = format!(
        "POST /rpc HTTP/1.1\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n{len:x}\r\n{chunk}\r\n{len:x}\r\n{chunk}\r\n0\r\n\r\n",
        len = chunk.len()
    );
    let counted = raw(server.address, chunked.as_bytes()).await;
    assert_eq!(counted.status, 413);
    assert_eq!(counted.json()["error"]["code"], -32070);
    // Within the limit: served.
    let small = raw(
        server.address,
        &post(
            "/rpc",
            &[],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        ),
    )
    .await;
    assert_eq!(small.status, 200);
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn notifications_get_202_with_an_empty_body() {
    let server = start(HttpServerConfig::default()).await;
    let reply = raw(
        server.address,
        &post(
            "/mcp",
            &[],
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ),
    )
    .await;
    assert_eq!(reply.status, 202);
    assert!(reply.body.is_empty());
    assert_eq!(reply.header("content-length"), Some("0"));
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn event_stream_accept_gets_one_sse_event() {
    let server = start(HttpServerConfig::default()).await;
    let reply = raw(
        server.address,
        &post(
            "/rpc",
            &[("Accept", "text/event-stream")],
            &call(5, "echo", json!("sse")),
        ),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let text = String::from_utf8(reply.body).expect("utf-8");
    assert!(text.starts_with("event: message\ndata: {"), "{text}");
    assert!(text.ends_with("}\n\n"), "{text}");
    let data = text
        .lines()
        .find_map(|line| line.strip_prefix("data: "))
        .expect("data line");
    let answer: Value = serde_json::from_str(data).expect("JSON data");
    assert_eq!(answer["id"], 5);
    // MCP clients list both types: they get plain JSON.
    let both = raw(
        server.address,
        &post(
            "/mcp",
            &[("Accept", "application/json, text/event-stream")],
            &call(6, "echo", json!(1)),
        ),
    )
    .await;
    assert_eq!(both.header("content-type"), Some("application/json"));
    assert_eq!(both.json()["id"], 6);
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn foreign_origins_are_refused() {
    let config = HttpServerConfig::default()
        .with_allowed_origins(vec!["https://gate.example.com".to_owned()]);
    let server = start(config).await;
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let evil = raw(
        server.address,
        &post("/mcp", &[("Origin", "https://evil.example")], &message),
    )
    .await;
    assert_eq!(evil.status, 403);
    assert_eq!(evil.json()["error"]["code"], -32003);
    for origin in ["https://gate.example.com", "http://localhost:3000"] {
        let allowed = raw(
            server.address,
            &post("/mcp", &[("Origin", origin)], &message),
        )
        .await;
        assert_eq!(allowed.status, 200, "{origin}");
    }
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn mcp_endpoint_headers_and_methods() {
    let server = start(HttpServerConfig::default()).await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    });
    let reply = raw(
        server.address,
        &post(
            "/mcp",
            &[
                ("Mcp-Session-Id", "abc-123"),
                ("Accept", "application/json, text/event-stream"),
            ],
            &initialize,
        ),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("mcp-session-id"), Some("abc-123"));
    assert_eq!(reply.json()["result"]["protocolVersion"], "2025-06-18");
    // After initialize, MCP clients send MCP-Protocol-Version; /rpc then speaks MCP too.
    let listed = raw(
        server.address,
        &post(
            "/rpc",
            &[("MCP-Protocol-Version", "2025-06-18")],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ),
    )
    .await;
    assert!(listed.json()["result"]["tools"][0]["inputSchema"].is_object());
    let unknown_tool = raw(
        server.address,
        &post("/mcp", &[], &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "nope", "arguments": {}}})),
    )
    .await;
    assert_eq!(
        unknown_tool.status, 200,
        "JSON-RPC errors to MCP requests ride on 200"
    );
    assert_eq!(unknown_tool.json()["error"]["code"], -32001);
    let on_rpc = raw(
        server.address,
        &post("/rpc", &[], &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "nope", "arguments": {}}})),
    )
    .await;
    assert_eq!(on_rpc.status, 404, "the canonical table's status on /rpc");
    let get = raw(server.address, &request("GET", "/mcp", &[], b"")).await;
    assert_eq!(get.status, 405);
    assert_eq!(get.header("allow"), Some("POST"));
    let missing = raw(server.address, &request("GET", "/nowhere", &[], b"")).await;
    assert_eq!(missing.status, 404);
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_answers_overloaded() {
    let server = start(HttpServerConfig::default().with_max_concurrent_requests(1)).await;
    let address = server.address;
    let slow = tokio::spawn(async move {
        raw(
            address,
            &post("/rpc", &[], &call(1, "slow", json!({"ms": 800}))),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = raw(address, &post("/rpc", &[], &call(2, "echo", json!(2)))).await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.json()["error"]["code"], -32072);
    assert_eq!(refused.header("retry-after"), Some("1"));
    let slow = slow.await.expect("task");
    assert_eq!(slow.status, 200);
    let after = raw(address, &post("/rpc", &[], &call(3, "echo", json!(3)))).await;
    assert_eq!(after.status, 200, "the permit is returned");
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_requests_in_progress() {
    let server = start(HttpServerConfig::default()).await;
    let address = server.address;
    let slow = tokio::spawn(async move {
        raw(
            address,
            &post("/rpc", &[], &call(1, "slow", json!({"ms": 500}))),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    server.stop().await.expect("clean stop");
    let slow = slow.await.expect("task");
    assert_eq!(slow.status, 200);
    assert_eq!(slow.json()["id"], 1);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(address))
            .await
            .map_or(true, |connected| connected.is_err()),
        "no longer accepting"
    );
}

#[tokio::test]
async fn non_loopback_bind_needs_authentication() {
    let everywhere = SocketAddr::from(([0, 0, 0, 0], 0));
    let error = bind_http(everywhere, &HttpServerConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(error, HttpServeError::Bind(_)), "{error:?}");
    assert!(error.to_string().contains("bearer token"));
}

#[test]
fn plain_http_is_refused_without_the_flag_and_https_accepted() {
    let error = HttpProvider::new(HttpProviderConfig::new("http://127.0.0.1:9/rpc")).unwrap_err();
    assert!(matches!(error, ProviderError::Url { .. }), "{error:?}");
    assert!(error.to_string().contains("allow_insecure_http"));
    // TLS itself is tested in tests/it/http_tls.rs.
    HttpProvider::new(HttpProviderConfig::new("https://127.0.0.1:9/rpc")).expect("https accepted");
    let scheme = HttpProvider::new(HttpProviderConfig::new("ftp://host/rpc")).unwrap_err();
    assert!(matches!(scheme, ProviderError::Url { .. }));
    HttpProvider::new(insecure_provider("http://127.0.0.1:9/rpc".to_owned()))
        .expect("allowed with the flag");
}

/// A one-shot raw HTTP server: records each request head and answers every
/// connection with `response`.
async fn canned(response: &'static [u8]) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let address = listener.local_addr().expect("address");
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut bytes = Vec::new();
                let mut buffer = [0u8; 4096];
                while !bytes.windows(4).any(|window| window == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(count) => bytes.extend_from_slice(&buffer[..count]),
                    }
                }
                seen.lock()
                    .expect("lock")
                    .push(String::from_utf8_lossy(&bytes).into_owned());
                if !response.is_empty() {
                    let _ = stream.write_all(response).await;
                    let _ = stream.shutdown().await;
                } else {
                    // Never answer.
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            });
        }
    });
    (address, heads)
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (target, target_heads) = canned(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
    let location: &'static str = Box::leak(
        format!(
            "HTTP/1.1 302 Found\r\nLocation: http://{target}/rpc\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .into_boxed_str(),
    );
    let (redirector, heads) = canned(location.as_bytes()).await;
    let provider =
        HttpProvider::new(insecure_provider(format!("http://{redirector}/rpc"))).expect("provider");
    let error = ask(&provider, "echo", json!(1)).await.unwrap_err();
    let ProviderError::HttpStatus {
        status, location, ..
    } = &error
    else {
        panic!("302 → status error, got {error:?}");
    };
    assert_eq!(*status, 302);
    assert_eq!(
        location.as_deref(),
        Some(format!("http://{target}/rpc").as_str())
    );
    assert!(error.to_string().contains("not followed"));
    assert_eq!(heads.lock().expect("lock").len(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        target_heads.lock().expect("lock").is_empty(),
        "the redirect target was never called"
    );
}

#[tokio::test]
async fn client_sends_token_correlation_id_and_json() {
    let (address, heads) = canned(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 112\r\nConnection: close\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"json\",\"json\":{\"value\":{\"kind\":\"json\",\"value\":\"hello\"}}}]}}",
    )
    .await;
    let provider = HttpProvider::new(
        insecure_provider(format!("http://{address}/rpc")).with_bearer_token("tok"),
    )
    .expect("provider");
    let mut ctx = context();
    ctx.correlation_id = Some("corr-42".to_owned());
    let answer = tokio::time::timeout(LIMIT, provider.query(&query("echo", Value::Null), &ctx))
        .await
        .expect("in time")
        .expect("verified");
    assert_eq!(
        answer.hash().map(|hash| hash.value.as_str()),
        Some("5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a")
    );
    let head = heads.lock().expect("lock").join("\n").to_ascii_lowercase();
    assert!(head.starts_with("post /rpc http/1.1"), "{head}");
    assert!(head.contains("authorization: bearer tok"), "{head}");
    assert!(head.contains("x-correlation-id: corr-42"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
}

#[tokio::test]
async fn wrong_hash_is_rejected_over_http() {
    let (address, _) = canned(
        b"HTTP/1.1 200 OK\r\nContent-Length: 164\r\nConnection: close\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"json\",\"json\":{\"value\":{\"kind\":\"json\",\"value\":\"hello\"},\"evidence_hash\":{\"algorithm\":\"sha256\",\"value\":\"00\"}}}]}}",
    )
    .await;
    let provider =
        HttpProvider::new(insecure_provider(format!("http://{address}/rpc"))).expect("provider");
    let error = ask(&provider, "echo", Value::Null).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::Query(QueryError::Verification(_))),
        "{error:?}"
    );
}

#[tokio::test]
async fn request_timeout_and_connect_failure() {
    let (silent, _) = canned(b"").await;
    let mut client = ClientConfig::default();
    client.request_timeout_ms = 300;
    let provider =
        HttpProvider::new(insecure_provider(format!("http://{silent}/rpc")).with_client(client))
            .expect("provider");
    let started = Instant::now();
    let error = ask(&provider, "echo", Value::Null).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::Query(QueryError::Timeout(300))),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // A port nobody listens on.
    let closed = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let port = closed.local_addr().expect("address").port();
    drop(closed);
    let provider = HttpProvider::new(insecure_provider(format!("http://127.0.0.1:{port}/rpc")))
        .expect("provider");
    let error = ask(&provider, "echo", Value::Null).await.unwrap_err();
    assert!(matches!(error, ProviderError::Connect { .. }), "{error:?}");
}

#[tokio::test]
async fn response_size_is_capped() {
    let (address, _) = canned(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5000000\r\nConnection: close\r\n\r\n{\"jsonrpc\":",
    )
    .await;
    let provider =
        HttpProvider::new(insecure_provider(format!("http://{address}/rpc"))).expect("provider");
    let error = ask(&provider, "echo", Value::Null).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::ResponseTooLarge { limit: 1_048_576 }),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_with_prior_knowledge_is_served_and_idle_connections_close() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let mut config = HttpServerConfig::default();
    config.header_read_timeout = Duration::from_millis(300);
    let server = start(config).await;
    let stream = TcpStream::connect(server.address).await.expect("connect");
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("HTTP/2 handshake");
    let connection = tokio::spawn(connection);
    let post = |id: i64, authority: &str| {
        let body = serde_json::to_vec(&call(id, "slow", json!({"ms": 100}))).expect("json");
        hyper::Request::post(format!("http://{authority}/rpc"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request")
    };
    // Several calls at once on one connection, each its own stream.
    let authority = server.address.to_string();
    let calls = (0..8).map(|id| {
        let mut sender = sender.clone();
        let request = post(id, &authority);
        tokio::spawn(async move {
            let response = sender.send_request(request).await.expect("answered");
            assert_eq!(response.version(), hyper::Version::HTTP_2);
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            (
                status,
                serde_json::from_slice::<Value>(&body).expect("JSON"),
            )
        })
    });
    let calls: Vec<_> = calls.collect();
    let started = Instant::now();
    for (id, answered) in calls.into_iter().enumerate() {
        let (status, body) = tokio::time::timeout(LIMIT, answered)
            .await
            .expect("in time")
            .expect("task");
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["id"], json!(id));
    }
    assert!(
        started.elapsed() < Duration::from_millis(800),
        "the streams ran side by side: {:?}",
        started.elapsed()
    );
    // `:authority` is the Host: another name is refused as misdirected.
    let mut other = sender.clone();
    let response = other
        .send_request(post(
            9,
            &format!("rebound.example:{}", server.address.port()),
        ))
        .await
        .expect("answered");
    assert_eq!(response.status().as_u16(), 421);
    // Idle past the head timeout, the server closes the connection (the
    // client keeps its handle: it would otherwise close it itself).
    tokio::time::timeout(LIMIT, connection)
        .await
        .expect("the idle HTTP/2 connection is closed by the server")
        .expect("task")
        .expect("closed cleanly");
    drop((sender, other));
    server.stop().await.expect("stopped");
}
