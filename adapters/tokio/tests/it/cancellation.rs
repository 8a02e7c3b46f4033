//! What a check's context tells it about its call, through the tokio
//! adapter on stdio and HTTP: every source of cancellation reaches a
//! blocking check that polls `is_cancelled` (with its reason) and drops an
//! async check (the peer's `notifications/cancelled`, the serving future
//! dropped, an HTTP client that disconnects, the drain deadline); the
//! server's `call_timeout` becomes the check's deadline (a blocking check
//! sees it pass, and its answer still reaches the caller); and the caller's
//! identity and `_meta` arrive as sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evidence_wire::server::ServerConfig;
use evidence_wire_provider::IntoService;
use evidence_wire_tokio::prelude::*;
use evidence_wire_tokio::{Service, serve};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::common::{call, frames, ndjson};

/// The bound on every wait here.
const LIMIT: Duration = Duration::from_secs(10);

/// What the checks report, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    /// Waits until a report equals `line`; panics with every report after
    /// [`LIMIT`].
    async fn until(&self, line: &str) {
        let started = Instant::now();
        while !self.0.lock().unwrap().iter().any(|seen| seen == line) {
            assert!(
                started.elapsed() < LIMIT,
                "never saw {line:?}; saw {:?}",
                self.0.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Reports its drop: an async check dropped by its adapter.
struct OnDrop(Seen, &'static str);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.push(format!("{} dropped", self.1));
    }
}

/// `block` (blocking, polls `is_cancelled` until it may stop, then says
/// why), `wait` (async, waits forever), `whoami` (its caller, `_meta` and
/// whether it has a deadline).
fn provider(seen: &Seen) -> Provider {
    let (blocking, waiting) = (seen.clone(), seen.clone());
    Provider::new("test", "Observes its calls.")
        .check(Check::new(
            "block",
            "Runs until it may stop.",
            move |_: NoParams, context: &CheckContext| {
                blocking.push("block started".to_owned());
                let started = Instant::now();
                while !context.is_cancelled() && started.elapsed() < LIMIT {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let reason = context.cancel_reason();
                blocking.push(format!("block stopped: {reason:?}"));
                Err::<(), _>(CheckError::new("stopped", format!("{reason:?}")))
            },
        ))
        .check(Check::new_async(
            "wait",
            "Waits until dropped.",
            move |_: NoParams, _: CheckContext| {
                let seen = waiting.clone();
                async move {
                    let _dropped = OnDrop(seen.clone(), "wait");
                    seen.push("wait started".to_owned());
                    std::future::pending::<()>().await;
                    Ok(())
                }
            },
        ))
        .check(
            Check::new(
                "whoami",
                "Who asked.",
                |_: NoParams, context: &CheckContext| {
                    let caller = context.caller();
                    Ok(json!({
                        "dialect": format!("{:?}", caller.dialect()),
                        "transport": caller.transport().map(|transport| transport.to_string()),
                        "authenticated": caller.is_authenticated(),
                        "meta": context.meta(),
                        "deadline": context.deadline().is_some(),
                    }))
                },
            )
            .inline(),
        )
}

fn service(seen: &Seen, configure: impl FnOnce(&mut ServerConfig)) -> Service {
    let mut service = provider(seen).into_service().unwrap();
    configure(service.config_mut());
    service
}

fn cancel(id: i64) -> Vec<u8> {
    ndjson(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}),
    )
}

fn ask(id: i64, check: &str) -> Vec<u8> {
    ndjson(&call(id, check, json!({})))
}

/// A stdio connection to `service` over an in-memory pipe.
struct Stdio {
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    read: tokio::io::ReadHalf<tokio::io::DuplexStream>,
    serving: tokio::task::JoinHandle<Result<(), ServeError>>,
}

fn stdio(service: Service) -> Stdio {
    let (client, server_side) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_side);
    let (read, write) = tokio::io::split(client);
    Stdio {
        write,
        read,
        serving: tokio::spawn(serve(service, server_read, server_write)),
    }
}

impl Stdio {
    async fn send(&mut self, bytes: &[u8]) {
        self.write.write_all(bytes).await.unwrap();
    }

    /// Closes the input and reads every answer.
    async fn finish(mut self) -> Vec<Value> {
        self.write.shutdown().await.unwrap();
        let mut output = Vec::new();
        tokio::time::timeout(LIMIT, self.read.read_to_end(&mut output))
            .await
            .expect("answered in time")
            .unwrap();
        self.serving.await.unwrap().unwrap();
        frames(&output)
    }
}

/// The peer's `notifications/cancelled` (stdio): the blocking check sees
/// `Peer`, the async one is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peers_cancellation_reaches_blocking_and_async_checks() {
    let seen = Seen::default();
    let mut connection = stdio(service(&seen, |_| {}));
    connection
        .send(&[ask(1, "block"), ask(2, "wait")].concat())
        .await;
    seen.until("block started").await;
    seen.until("wait started").await;
    connection.send(&[cancel(1), cancel(2)].concat()).await;
    seen.until("block stopped: Some(Peer)").await;
    seen.until("wait dropped").await;
    assert!(
        connection.finish().await.is_empty(),
        "cancelled calls are not answered"
    );
}

/// The serving future dropped (the caller is gone): the blocking check
/// sees `CallerGone`, the async one is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_reaches_blocking_and_async_checks() {
    let seen = Seen::default();
    let mut connection = stdio(service(&seen, |_| {}));
    connection
        .send(&[ask(1, "block"), ask(2, "wait")].concat())
        .await;
    seen.until("block started").await;
    seen.until("wait started").await;
    connection.serving.abort();
    seen.until("block stopped: Some(CallerGone)").await;
    seen.until("wait dropped").await;
}

/// The configuration's `call_timeout` is the check's deadline on stdio:
/// the blocking check sees it pass and its answer (an error saying so)
/// still reaches the caller; `whoami` sees a deadline, stdio, MCP after
/// `initialize`, and the `_meta` sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_calls_carry_the_deadline_caller_and_meta() {
    let seen = Seen::default();
    let mut connection = stdio(service(&seen, |config| {
        config.call_timeout = Some(Duration::from_millis(100));
    }));
    connection.send(&ask(1, "block")).await;
    seen.until("block stopped: Some(Deadline)").await;
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut whoami = call(2, "whoami", json!({}));
    whoami["params"]["_meta"] = json!({"progressToken": 5});
    connection
        .send(&[ndjson(&initialize), ndjson(&whoami)].concat())
        .await;
    let answers = connection.finish().await;
    let by_id = |id: i64| answers.iter().find(|answer| answer["id"] == id).unwrap();
    let deadline = &by_id(1)["result"]["content"][0]["json"]["error"];
    assert_eq!(deadline["code"], "stopped", "{answers:?}");
    assert_eq!(deadline["message"], "Some(Deadline)");
    let who = &by_id(2)["result"]["structuredContent"]["value"]["value"];
    assert_eq!(
        who,
        &json!({"dialect": "Mcp", "transport": "stdio", "authenticated": false,
                "meta": {"progressToken": 5}, "deadline": true}),
        "{answers:?}"
    );
}

/// A running HTTP server of `service`, stopped through `stop`.
struct Http {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), evidence_wire_tokio::HttpServeError>>,
}

async fn http(service: Service, config: HttpServerConfig) -> Http {
    let listener = bind_http(SocketAddr::from(([127, 0, 0, 1], 0)), &config)
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_http(listener, service, config, async move {
        let _ = stopped.await;
    }));
    Http {
        address,
        stop: Some(stop),
        task,
    }
}

impl Http {
    /// Sends `POST /rpc` of `message` (with `token` as the bearer token)
    /// on a fresh connection and returns it unread.
    async fn post(&self, message: &Value, token: Option<&str>) -> TcpStream {
        let body = serde_json::to_vec(message).unwrap();
        let auth = token
            .map(|token| format!("Authorization: Bearer {token}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "POST /rpc HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.address,
            body.len()
        );
        let mut stream = TcpStream::connect(self.address).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&body).await.unwrap();
        stream
    }

    /// The status line and JSON body of the answer on `stream`.
    async fn answer(mut stream: TcpStream) -> (String, Value) {
        let mut reply = Vec::new();
        tokio::time::timeout(LIMIT, stream.read_to_end(&mut reply))
            .await
            .expect("answered in time")
            .unwrap();
        let text = String::from_utf8(reply).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head.lines().next().unwrap().to_owned();
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(LIMIT, self.task)
            .await
            .expect("stopped in time")
            .unwrap()
            .unwrap();
    }
}

/// An HTTP client that disconnects while its call runs: the blocking
/// check sees `CallerGone`, the async one is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_disconnect_reaches_blocking_and_async_checks() {
    let seen = Seen::default();
    let server = http(service(&seen, |_| {}), HttpServerConfig::default()).await;
    let blocking = server.post(&call(1, "block", json!({})), None).await;
    let waiting = server.post(&call(2, "wait", json!({})), None).await;
    seen.until("block started").await;
    seen.until("wait started").await;
    drop((blocking, waiting));
    seen.until("block stopped: Some(CallerGone)").await;
    seen.until("wait dropped").await;
    server.stop().await;
}

/// The drain deadline: what still runs is answered retryably, the
/// blocking check sees `Shutdown` and the async one is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_deadline_reaches_blocking_and_async_checks() {
    let seen = Seen::default();
    let config = HttpServerConfig::default().with_drain_timeout(Duration::from_millis(100));
    let server = http(service(&seen, |_| {}), config).await;
    let blocking = server.post(&call(1, "block", json!({})), None).await;
    let waiting = server.post(&call(2, "wait", json!({})), None).await;
    seen.until("block started").await;
    seen.until("wait started").await;
    server.stop().await;
    seen.until("block stopped: Some(Shutdown)").await;
    seen.until("wait dropped").await;
    for stream in [blocking, waiting] {
        let (status, _) = Http::answer(stream).await;
        assert!(status.contains(" 503 "), "answered retryably: {status}");
    }
}

/// Over HTTP the call carries the server's `call_timeout` as its deadline
/// (the blocking check's answer still arrives), HTTP as its transport,
/// authenticated once a bearer token is required (the token itself is not
/// shown), and the request's `_meta`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_calls_carry_the_deadline_caller_and_meta() {
    let seen = Seen::default();
    let service = service(&seen, |config| {
        config.call_timeout = Some(Duration::from_millis(100));
    });
    let config = HttpServerConfig::default().with_bearer_token("s3cret-token");
    let server = http(service, config).await;
    let (status, body) = Http::answer(
        server
            .post(&call(1, "block", json!({})), Some("s3cret-token"))
            .await,
    )
    .await;
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(
        body["result"]["content"][0]["json"]["error"]["message"],
        "Some(Deadline)"
    );
    let mut whoami = call(2, "whoami", json!({}));
    whoami["params"]["_meta"] = json!({"trace": "t-1"});
    let (_, body) = Http::answer(server.post(&whoami, Some("s3cret-token")).await).await;
    let who = &body["result"]["content"][0]["json"]["value"]["value"];
    assert_eq!(
        who,
        &json!({"dialect": "DecisionGate", "transport": "http", "authenticated": true,
                "meta": {"trace": "t-1"}, "deadline": true}),
        "{body}"
    );
    assert!(!body.to_string().contains("s3cret-token"));
    server.stop().await;
}

/// Without a bearer token the HTTP caller is not authenticated, and
/// without a `call_timeout` there is no deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_http_caller_is_not_authenticated() {
    let seen = Seen::default();
    let server = http(service(&seen, |_| {}), HttpServerConfig::default()).await;
    let (_, body) = Http::answer(server.post(&call(1, "whoami", json!({})), None).await).await;
    let who = &body["result"]["content"][0]["json"]["value"]["value"];
    assert_eq!(who["authenticated"], false, "{body}");
    assert_eq!(who["deadline"], false, "{body}");
    assert_eq!(who["meta"], Value::Null, "{body}");
    server.stop().await;
}
