//! `ProviderService`, the tower service an application mounts (issue 40
//! item 1), driven in-process through the `Service` trait and through an
//! axum `Router`: every path is a call (Decision Gate's statuses for a
//! plain caller, MCP's for an MCP client), other methods `405`; the call
//! cap, the body limit, the drain, the `Host` check of `listening_on`, the
//! metrics in the application's registry; a caller that goes away takes
//! its work with it. No sockets: every wait is bounded by `LIMIT`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult};
use evidence_wire::server::ServerConfig;
use evidence_wire_tokio::metrics::prometheus_client::registry::Registry;
use evidence_wire_tokio::{
    Answer, HttpServeError, HttpServerConfig, Metrics, ProviderService, Service,
};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::common::{TestHandler, call, test_answer};

const LIMIT: Duration = Duration::from_secs(10);

fn service(config: HttpServerConfig) -> ProviderService {
    ProviderService::new(Service::new(ServerConfig::default(), TestHandler), config)
        .expect("service")
}

fn post(path: &str, body: &Value) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap()
}

/// An MCP client's request: it lists `text/event-stream` in `Accept`.
fn mcp_post(path: &str, body: &Value) -> Request<Full<Bytes>> {
    let mut request = post(path, body);
    request.headers_mut().insert(
        "accept",
        "application/json, text/event-stream".parse().unwrap(),
    );
    request
}

struct Reply {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: Value,
}

async fn send<S, B, R>(service: &mut S, request: Request<B>) -> Reply
where
    S: tower_service::Service<Request<B>, Response = Response<R>, Error = Infallible>,
    R: hyper::body::Body,
    R::Error: std::fmt::Debug,
{
    std::future::poll_fn(|cx| service.poll_ready(cx))
        .await
        .unwrap();
    let response = tokio::time::timeout(LIMIT, service.call(request))
        .await
        .expect("answered in time")
        .unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

fn unknown_tool(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "no_such_tool", "arguments": {}}})
}

#[tokio::test]
async fn every_path_is_a_call_with_the_callers_statuses() {
    let mut evidence = service(HttpServerConfig::default());
    for path in ["/", "/evidence", "/deep/er/path"] {
        let reply = send(
            &mut evidence,
            post(path, &call(1, "echo", json!({"at": path}))),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {:?}", reply.body);
        let result = &reply.body["result"]["content"][0]["json"];
        assert_eq!(result["value"]["value"]["params"]["at"], path);
    }
    // Decision Gate's statuses for a plain caller, MCP's for an MCP client.
    let plain = send(&mut evidence, post("/evidence", &unknown_tool(2))).await;
    assert_eq!(plain.status, StatusCode::NOT_FOUND, "{:?}", plain.body);
    let mcp = send(&mut evidence, mcp_post("/evidence", &unknown_tool(3))).await;
    assert_eq!(mcp.status, StatusCode::OK, "{:?}", mcp.body);
    assert_eq!(mcp.body["error"]["code"], -32001);
    // Anything but POST: 405, naming POST.
    let get = Request::get("/evidence")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let reply = send(&mut evidence, get).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.headers["allow"], "POST");
}

#[tokio::test]
async fn the_policy_and_limits_hold_when_mounted() {
    let mut evidence = service(
        HttpServerConfig::default()
            .with_max_body_bytes(600)
            .with_bearer_token("s3cret"),
    );
    // No token: 401 with the challenge.
    let reply = send(&mut evidence, post("/evidence", &call(1, "echo", json!(1)))).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(reply.headers.contains_key("www-authenticate"));
    let authorized = |body: &Value| {
        let mut request = post("/evidence", body);
        request
            .headers_mut()
            .insert("authorization", "Bearer s3cret".parse().unwrap());
        request
    };
    let reply = send(&mut evidence, authorized(&call(2, "echo", json!(2)))).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    // A body over the cap: 413, read no further than the cap.
    let big = call(3, "echo", json!("x".repeat(1000)));
    let reply = send(&mut evidence, authorized(&big)).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    // A browser page of another origin: refused.
    let mut request = authorized(&call(4, "echo", json!(4)));
    request
        .headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    let reply = send(&mut evidence, request).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn listening_on_makes_host_name_the_listener() {
    let address = "127.0.0.1:8080".parse().unwrap();
    let mut evidence = service(HttpServerConfig::default())
        .listening_on(address)
        .expect("loopback");
    let with_host = |host: &str| {
        let mut request = post("/evidence", &call(1, "echo", json!(1)));
        request.headers_mut().insert("host", host.parse().unwrap());
        request
    };
    let reply = send(&mut evidence, with_host("127.0.0.1:8080")).await;
    assert_eq!(reply.status, StatusCode::OK);
    let reply = send(&mut evidence, with_host("rebound.example:8080")).await;
    assert_eq!(reply.status, StatusCode::MISDIRECTED_REQUEST);

    // A public address without a bearer token is refused, as serve_http
    // refuses to bind one; and the address is set before cloning.
    let public = service(HttpServerConfig::default()).listening_on("0.0.0.0:8080".parse().unwrap());
    assert!(matches!(public, Err(HttpServeError::Bind(_))), "{public:?}");
    let shared = service(HttpServerConfig::default());
    let _clone = shared.clone();
    assert!(shared.listening_on(address).is_err());
}

/// A handler whose `slow` future counts how often it was dropped unfinished.
struct Abandoned(Arc<AtomicUsize>);

struct DropCount(Arc<AtomicUsize>, bool);

impl Drop for DropCount {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl evidence_wire_tokio::Handler for Abandoned {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        _: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        let dropped = Arc::clone(&self.0);
        Answer::future(async move {
            let mut guard = DropCount(dropped, false);
            let result = test_answer(query, context).await;
            guard.1 = true;
            result
        })
    }
}

#[tokio::test]
async fn the_call_cap_counts_work_and_a_caller_that_leaves_takes_its_work_along() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let mut evidence = ProviderService::new(
        Service::new(ServerConfig::default(), Abandoned(Arc::clone(&dropped))),
        HttpServerConfig::default().with_max_concurrent_requests(1),
    )
    .unwrap();
    // One slow call holds the only slot: the next is refused 503.
    let mut first = evidence.clone();
    let slow = tokio::spawn(async move {
        send(
            &mut first,
            post("/e", &call(1, "slow", json!({"ms": 60_000}))),
        )
        .await
    });
    let refused = loop {
        let reply = send(&mut evidence, post("/e", &call(2, "echo", json!(2)))).await;
        if reply.status == StatusCode::SERVICE_UNAVAILABLE {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(
        refused.body["error"]["data"]["kind"], "overloaded",
        "{:?}",
        refused.body
    );
    assert!(refused.headers.contains_key("retry-after"));
    // The caller goes away (its request future dropped): the check's
    // future is dropped with it and the slot is free at once.
    slow.abort();
    let _ = slow.await;
    let reply = send(&mut evidence, post("/e", &call(3, "echo", json!(3)))).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the abandoned check was dropped"
    );
}

#[tokio::test]
async fn drain_refuses_new_calls_and_finishes_those_in_flight() {
    let mut evidence = service(HttpServerConfig::default().with_drain_timeout(LIMIT));
    let mut first = evidence.clone();
    let slow = tokio::spawn(async move {
        send(&mut first, post("/e", &call(1, "slow", json!({"ms": 300})))).await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let draining = evidence.clone();
    let drained = tokio::spawn(async move { draining.drain().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(evidence.is_draining());
    let refused = send(&mut evidence, post("/e", &call(2, "echo", json!(2)))).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers.contains_key("retry-after"));
    // The call in flight runs to its end; then the drain returns.
    let finished = slow.await.unwrap();
    assert_eq!(finished.status, StatusCode::OK);
    assert_eq!(
        finished.body["result"]["content"][0]["json"]["value"]["value"]["slept_ms"],
        300
    );
    tokio::time::timeout(LIMIT, drained)
        .await
        .expect("drained in time")
        .unwrap();
}

#[tokio::test]
async fn a_call_past_the_drain_timeout_is_answered_retryably() {
    let mut evidence =
        service(HttpServerConfig::default().with_drain_timeout(Duration::from_millis(100)));
    let mut first = evidence.clone();
    let slow = tokio::spawn(async move {
        send(
            &mut first,
            post("/e", &call(1, "slow", json!({"ms": 60_000}))),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    tokio::time::timeout(LIMIT, evidence.drain())
        .await
        .expect("the drain ends at its deadline");
    let answered = slow.await.unwrap();
    assert_eq!(
        answered.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        answered.body
    );
    assert_eq!(answered.body["error"]["data"]["kind"], "overloaded");
    let _ = send(&mut evidence, post("/e", &call(2, "echo", json!(2)))).await;
}

#[tokio::test]
async fn metrics_count_into_the_applications_registry() {
    let mut registry = Registry::default();
    let metrics = Metrics::new();
    metrics.register(&mut registry);
    let mut config = HttpServerConfig::default();
    config.metrics = metrics;
    let mut evidence = service(config);
    let reply = send(&mut evidence, post("/e", &call(1, "echo", json!(1)))).await;
    assert_eq!(reply.status, StatusCode::OK);
    let mut text = String::new();
    evidence_wire_tokio::metrics::prometheus_client::encoding::text::encode(&mut text, &registry)
        .unwrap();
    assert!(
        text.contains(
            r#"evidence_wire_queries_total{transport="http",check="echo",outcome="ok"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn an_axum_router_mounts_it_beside_its_own_routes() {
    let evidence = service(HttpServerConfig::default());
    let mut app = axum::Router::new()
        .route("/hello", axum::routing::get(|| async { "\"app\"" }))
        .route_service("/evidence", evidence.clone())
        .nest_service("/providers/greeter", evidence);
    let to_axum = |request: Request<Full<Bytes>>| request.map(axum::body::Body::new);
    let reply = send(
        &mut app,
        to_axum(post("/evidence", &call(1, "echo", json!(1)))),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let nested = post("/providers/greeter/rpc", &call(2, "echo", json!(2)));
    let reply = send(&mut app, to_axum(nested)).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let hello = Request::get("/hello")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let reply = send(&mut app, to_axum(hello)).await;
    assert_eq!(reply.body, json!("app"));
}
