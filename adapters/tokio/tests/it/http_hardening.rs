//! HTTP head rules and client answer shape from the adversarial review
//! (issue 20, items 10 and 11; issue 22, item 6), on 127.0.0.1:
//!
//! - headers that must appear once (`Host`, `Origin`, `Authorization`,
//!   `Content-Length`, `MCP-Protocol-Version`, `Mcp-Session-Id`) are refused
//!   with `400` when repeated, and what hyper does on its own with repeated
//!   `Content-Length`s;
//! - DNS-rebinding protection: a `Host` that does not name the loopback
//!   address the server is bound to, nor a configured allowed host, is
//!   answered `421` with the canonical `FORBIDDEN` body;
//! - the HTTP client refuses an answer that is a JSON-RPC batch when it
//!   sent one request;
//! - `/healthz` and `/readyz` are answered while every call slot is taken
//!   (a guard: they never needed one);
//! - a body refused as too large is answered `413` and the connection
//!   closes in stages (RFC 9112 §9.6): a client still writing its body can
//!   finish and read the answer instead of failing on a reset.
//!
//! Every network wait is bounded.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{Running, TestHandler, context, json_result, query};
use evidence_wire::server::{Server, ServerConfig, ServerEvent};
use evidence_wire_tokio::{
    HttpProvider, HttpProviderConfig, HttpServerConfig, ProviderError, Service,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(10);
const TOKEN: &str = "hardening-token";

async fn start_on(bind: SocketAddr, config: HttpServerConfig) -> Running {
    let service = Service::new(ServerConfig::default(), TestHandler);
    Running::start_on(bind, service, config).await
}

async fn start(config: HttpServerConfig) -> Running {
    start_on(SocketAddr::from(([127, 0, 0, 1], 0)), config).await
}

/// Status and body of one exchange.
struct Reply {
    status: u16,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn detail(&self) -> String {
        self.json()["error"]["data"]["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// Sends `request` exactly as given and reads the reply until the server
/// closes the connection.
async fn send(address: SocketAddr, request: &[u8]) -> Reply {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.write_all(request).await.expect("send");
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
        .map(|(_, body)| body.as_bytes().to_vec())
        .unwrap_or_default();
    Reply { status, body }
}

/// `POST path` of a `ping` with exactly these header lines (besides
/// `Connection` and, unless one is given, `Content-Length`).
fn post_with(path: &str, headers: &[(&str, String)]) -> Vec<u8> {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let mut head = format!("POST {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The headers of a request the server accepts: its own `Host`, a loopback
/// `Origin`, the token, an MCP version and a session id.
fn good_headers(address: SocketAddr) -> Vec<(&'static str, String)> {
    vec![
        ("Host", address.to_string()),
        ("Origin", format!("http://localhost:{}", address.port())),
        ("Authorization", format!("Bearer {TOKEN}")),
        ("Content-Type", "application/json".to_owned()),
        ("MCP-Protocol-Version", "2025-06-18".to_owned()),
        ("Mcp-Session-Id", "session-1".to_owned()),
    ]
}

#[tokio::test]
async fn headers_that_must_appear_once_are_refused_when_repeated() {
    let server = start(HttpServerConfig::default().with_bearer_token(TOKEN)).await;
    let address = server.address;
    let good = good_headers(address);
    let reply = send(address, &post_with("/mcp", &good)).await;
    assert_eq!(
        reply.status,
        200,
        "the good request is served: {:?}",
        reply.json()
    );
    assert_eq!(reply.json()["result"], json!({}));

    // Each singleton sent twice: first with the same (acceptable) value,
    // then with a second value that differs. Before, only the first value
    // was looked at and every one of these was served.
    let port = address.port();
    let second_values = [
        ("Host", "evil.example".to_owned()),
        ("Origin", "https://evil.example".to_owned()),
        ("Authorization", "Bearer wrong".to_owned()),
        ("MCP-Protocol-Version", "2025-03-26".to_owned()),
        ("Mcp-Session-Id", "session-2".to_owned()),
    ];
    for (name, other) in second_values {
        let first = good
            .iter()
            .find(|(header, _)| *header == name)
            .map(|(_, value)| value.clone())
            .expect("a good value");
        for second in [first.clone(), other] {
            let mut headers = good.clone();
            headers.push((name, second.clone()));
            let reply = send(address, &post_with("/mcp", &headers)).await;
            assert_eq!(
                reply.status,
                400,
                "{name} twice ({second}): {:?}",
                reply.json()
            );
            assert_eq!(reply.json()["error"]["code"], -32600, "{name}");
            assert_eq!(reply.json()["id"], Value::Null, "{name}");
            let detail = reply.detail();
            assert!(
                detail.contains(&format!("the {name} header appears 2 times")),
                "{name}: {detail}"
            );
        }
    }
    // Header names are case-insensitive: `host` and `HOST` are one header.
    let mut mixed = good.clone();
    mixed.push(("HOST", format!("localhost:{port}")));
    let reply = send(address, &post_with("/mcp", &mixed)).await;
    assert_eq!(reply.status, 400);
    assert!(reply.detail().contains("the Host header appears 2 times"));

    // Content-Length: hyper refuses two different values itself (before
    // the request reaches us: a bare 400 and the connection closed), and
    // merges two equal ones into one (RFC 9110 §8.6 allows that), so the
    // request is unambiguous and served.
    let mut conflicting = good.clone();
    conflicting.push(("Content-Length", "40".to_owned()));
    conflicting.push(("Content-Length", "41".to_owned()));
    let reply = send(address, &post_with("/mcp", &conflicting)).await;
    assert_eq!(reply.status, 400, "conflicting Content-Length");
    let mut equal = good.clone();
    equal.push(("Content-Length", "40".to_owned()));
    equal.push(("Content-Length", "40".to_owned()));
    let reply = send(address, &post_with("/mcp", &equal)).await;
    assert_eq!(reply.status, 200, "equal Content-Lengths merged by hyper");
    assert_eq!(reply.json()["result"], json!({}));

    // Probes are answered whatever the headers.
    let probe = format!(
        "GET /healthz HTTP/1.1\r\nHost: {address}\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(send(address, probe.as_bytes()).await.status, 200);
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn host_must_name_the_loopback_server_or_an_allowed_host() {
    let server = start(HttpServerConfig::default()).await;
    let address = server.address;
    let port = address.port();
    // The names of a loopback bind, with its port: served.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
    ] {
        let reply = send(address, &post_with("/rpc", &[("Host", host.clone())])).await;
        assert_eq!(reply.status, 200, "Host {host}: {:?}", reply.json());
        assert_eq!(reply.json()["result"], json!({}));
    }
    // A rebound DNS name, another port, a name that merely starts like
    // ours, no Host at all: 421 with the canonical FORBIDDEN body.
    for host in [
        Some(format!("attacker.example:{port}")),
        Some("attacker.example".to_owned()),
        Some(format!("127.0.0.1:{}", port.wrapping_add(1))),
        Some(format!("localhost.attacker.example:{port}")),
        Some("gate.internal:8080".to_owned()),
        None,
    ] {
        let headers: Vec<(&str, String)> = host.iter().map(|host| ("Host", host.clone())).collect();
        let reply = send(address, &post_with("/rpc", &headers)).await;
        assert_eq!(reply.status, 421, "Host {host:?}: {:?}", reply.json());
        let body = reply.json();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["id"], Value::Null);
        assert_eq!(body["error"]["code"], -32003, "like the Origin refusal");
        assert_eq!(body["error"]["message"], "Forbidden");
        assert_eq!(body["error"]["data"]["kind"], "forbidden");
        let detail = reply.detail();
        assert!(detail.contains("allowed_hosts"), "{detail}");
        if let Some(host) = &host {
            assert!(detail.contains(host.as_str()), "{detail}");
        }
    }
    // On /mcp too; probes stay open (orchestrators use their own names).
    let rebound = post_with("/mcp", &[("Host", format!("attacker.example:{port}"))]);
    assert_eq!(send(address, &rebound).await.status, 421);
    let probe = "GET /healthz HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n";
    assert_eq!(send(address, probe.as_bytes()).await.status, 200);
    server.stop().await.expect("clean stop");

    // A configured host is accepted besides the loopback names.
    let config =
        HttpServerConfig::default().with_allowed_hosts(vec!["gate.internal:8080".to_owned()]);
    let server = start(config).await;
    let address = server.address;
    for host in [
        "gate.internal:8080".to_owned(),
        "Gate.Internal:8080".to_owned(),
        address.to_string(),
    ] {
        let reply = send(address, &post_with("/rpc", &[("Host", host.clone())])).await;
        assert_eq!(reply.status, 200, "Host {host}");
    }
    for host in ["gate.internal", "gate.internal:9090", "attacker.example"] {
        let reply = send(address, &post_with("/rpc", &[("Host", host.to_owned())])).await;
        assert_eq!(reply.status, 421, "Host {host}");
    }
    // Our own client names the server as its URL does: served.
    let provider = HttpProvider::new(
        HttpProviderConfig::new(format!("http://localhost:{}/rpc", address.port()))
            .with_insecure_http(true),
    )
    .expect("provider");
    let answer = tokio::time::timeout(LIMIT, provider.query(&query("echo", json!(1)), &context()))
        .await
        .expect("in time")
        .expect("served");
    assert_eq!(
        serde_json::to_value(answer.result()).expect("json")["value"]["value"]["params"],
        1
    );
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn host_on_an_ipv6_loopback_bind() {
    let Ok(probe) = TcpListener::bind("[::1]:0").await else {
        eprintln!("SKIPPED host_on_an_ipv6_loopback_bind: no IPv6 loopback here");
        return;
    };
    drop(probe);
    let server = start_on(
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0)),
        HttpServerConfig::default(),
    )
    .await;
    let address = server.address;
    let port = address.port();
    for (host, status) in [
        (format!("[::1]:{port}"), 200),
        (format!("localhost:{port}"), 200),
        (format!("attacker.example:{port}"), 421),
    ] {
        let reply = send(address, &post_with("/mcp", &[("Host", host.clone())])).await;
        assert_eq!(reply.status, status, "Host {host}");
    }
    server.stop().await.expect("clean stop");
}

/// How the fake provider shapes its answers.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// The core server's correct answer.
    Single,
    /// That answer in a JSON array (a batch of one).
    Batch,
    /// `[]`.
    EmptyBatch,
}

/// A provider on 127.0.0.1 that answers every request in `shape`.
async fn fake_provider(shape: Shape) -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Some(body) = read_request(&mut stream).await else {
                    return;
                };
                let answer = match shape {
                    Shape::Single => answer_with_core(&body),
                    Shape::Batch => {
                        let mut batch = b" [".to_vec();
                        batch.extend_from_slice(&answer_with_core(&body));
                        batch.push(b']');
                        batch
                    }
                    Shape::EmptyBatch => b"[]".to_vec(),
                };
                let mut response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    answer.len()
                )
                .into_bytes();
                response.extend_from_slice(&answer);
                let _ = stream.write_all(&response).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    address
}

/// Reads one request head and its `Content-Length` body.
async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
        match tokio::time::timeout(LIMIT, stream.read(&mut buffer)).await {
            Ok(Ok(0) | Err(_)) | Err(_) => return None,
            Ok(Ok(count)) => bytes.extend_from_slice(&buffer[..count]),
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        match tokio::time::timeout(LIMIT, stream.read(&mut buffer)).await {
            Ok(Ok(0) | Err(_)) | Err(_) => return None,
            Ok(Ok(count)) => bytes.extend_from_slice(&buffer[..count]),
        }
    }
    Some(bytes[head_end..head_end + length].to_vec())
}

/// The core server's answer to one JSON-RPC body (`echo` only).
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

fn provider_at(address: SocketAddr) -> HttpProvider {
    HttpProvider::new(
        HttpProviderConfig::new(format!("http://{address}/rpc")).with_insecure_http(true),
    )
    .expect("provider")
}

#[tokio::test]
async fn client_refuses_a_batch_answer_to_one_request() {
    // The correct answer on its own is taken...
    let single = provider_at(fake_provider(Shape::Single).await);
    let answer = tokio::time::timeout(LIMIT, single.query(&query("echo", json!(7)), &context()))
        .await
        .expect("an outcome in time")
        .expect("a single answer is taken");
    assert_eq!(
        serde_json::to_value(answer.result()).expect("json")["value"]["value"]["params"],
        7
    );
    // ...and refused in an array, naming what was wrong.
    for shape in [Shape::Batch, Shape::EmptyBatch] {
        let provider = provider_at(fake_provider(shape).await);
        let outcome =
            tokio::time::timeout(LIMIT, provider.query(&query("echo", json!(7)), &context()))
                .await
                .expect("an outcome in time");
        let error = match outcome {
            Ok(answer) => panic!(
                "{shape:?}: a batch answer was taken: {:?}",
                serde_json::to_value(answer.result())
            ),
            Err(error) => error,
        };
        assert!(
            matches!(error, ProviderError::UnexpectedResponse(_)),
            "{shape:?}: {error:?}"
        );
        assert_eq!(error.code(), "invalid_provider_result");
        let message = error.to_string();
        assert!(
            message.contains("JSON-RPC batch (a JSON array)")
                && message.contains("one request must be answered with one JSON-RPC response"),
            "{shape:?}: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_every_call_slot_is_taken() {
    let server = start(HttpServerConfig::default().with_max_concurrent_requests(1)).await;
    let address = server.address;
    let host = ("Host", address.to_string());
    // One slow call holds the only call slot for 3 s.
    let body =
        serde_json::to_vec(&crate::common::call(1, "slow", json!({"ms": 3_000}))).expect("json");
    let mut slow = format!(
        "POST /rpc HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    slow.extend_from_slice(&body);
    // The prober's own calls hold the slot for a moment too: a slow call
    // that lands in one of those moments is refused and sent again.
    let holder = tokio::spawn(async move {
        let started = std::time::Instant::now();
        loop {
            let status = send(address, &slow).await.status;
            if status != 503 || started.elapsed() >= LIMIT {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    // A second call is refused OVERLOADED (once the slow call holds the slot).
    let started = std::time::Instant::now();
    loop {
        let reply = send(address, &post_with("/rpc", std::slice::from_ref(&host))).await;
        if reply.status == 503 {
            assert_eq!(reply.json()["error"]["code"], -32072);
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the slow call never took the slot"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The probes do not need a call slot.
    for path in ["/healthz", "/readyz"] {
        let probe = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        let asked = std::time::Instant::now();
        let reply = send(address, probe.as_bytes()).await;
        assert_eq!(reply.status, 200, "{path}");
        assert!(asked.elapsed() < Duration::from_secs(1), "{path}");
    }
    assert_eq!(holder.await.expect("holder"), 200);
    server.stop().await.expect("clean stop");
}

/// A client that sends a head declaring a body over the limit, waits for
/// the answer to arrive, then writes its body (as a blocking client that
/// writes everything before it reads does) must be able to write it all and
/// read the `413`: the server reads and discards the rest before it closes.
/// Closed at once, the server's kernel answers the late body with a reset,
/// the client's writes fail, and the `413` is lost to it (the check
/// provider's over-HTTP battery saw this about one run in six).
#[tokio::test]
async fn a_refused_oversized_body_is_drained_so_the_client_reads_the_413() {
    const BODY_LIMIT: usize = 64 * 1024;
    const DECLARED: usize = 1 << 20;
    let server = start(
        HttpServerConfig::default()
            .with_bearer_token(TOKEN)
            .with_max_body_bytes(BODY_LIMIT),
    )
    .await;
    let address = server.address;
    let exchange = async {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        let mut head = String::from("POST /mcp HTTP/1.1\r\n");
        for (name, value) in good_headers(address) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("Content-Length: {DECLARED}\r\n\r\n"));
        stream.write_all(head.as_bytes()).await.expect("send head");
        // The answer arrives before any of the body is sent.
        let mut peek = [0u8; 16];
        let peeked = stream.peek(&mut peek).await.expect("an answer");
        assert!(peeked > 0, "an answer before the body");
        // Time for an immediate close to happen.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let chunk = vec![b' '; 16 * 1024];
        let mut written = 0;
        let mut write_error = None;
        while written < DECLARED {
            if let Err(error) = stream.write_all(&chunk).await {
                write_error = Some(error);
                break;
            }
            written += chunk.len();
            // Time for a reset, if one comes, to arrive.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let _ = stream.shutdown().await;
        let mut bytes = Vec::new();
        let read = stream.read_to_end(&mut bytes).await;
        (written, write_error, read.err(), bytes)
    };
    let (written, write_error, read_error, bytes) = tokio::time::timeout(LIMIT, exchange)
        .await
        .expect("exchange in time");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        write_error.is_none(),
        "the body could not be sent after {written} bytes: {write_error:?}"
    );
    assert!(
        read_error.is_none(),
        "reading the answer failed: {read_error:?}"
    );
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    server.stop().await.expect("clean stop");
}

/// The lingering close is bounded in time: a client that got its `413`
/// and keeps trickling bytes without ever closing is cut off within the
/// linger time (1 s): the server's socket closes and the next writes fail.
#[tokio::test]
async fn a_lingering_close_ends_within_its_time_while_the_client_trickles() {
    let server = start(
        HttpServerConfig::default()
            .with_bearer_token(TOKEN)
            .with_max_body_bytes(64 * 1024),
    )
    .await;
    let address = server.address;
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let mut head = String::from("POST /mcp HTTP/1.1\r\n");
    for (name, value) in good_headers(address) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", 1 << 20));
    stream.write_all(head.as_bytes()).await.expect("send head");
    // The answer, then the server's half close.
    let mut bytes = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut bytes))
        .await
        .expect("the answer in time")
        .expect("read the answer");
    assert!(String::from_utf8_lossy(&bytes).starts_with("HTTP/1.1 413"));
    // A byte every 50 ms: accepted while the server lingers, refused
    // (reset) once it has closed.
    let started = std::time::Instant::now();
    let cut_off = loop {
        if stream.write_all(b" ").await.is_err() {
            break Some(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(5) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = cut_off.expect("the server closed its side within 5 s");
    assert!(
        took < Duration::from_secs(3),
        "cut off after {took:?}; the linger time is 1 s"
    );
    server.stop().await.expect("clean stop");
}
