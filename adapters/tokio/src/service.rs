//! A provider's HTTP endpoint as a tower `Service`: mount it in the
//! application you already run.
//!
//! [`ProviderService`] answers `http::Request<B>` (any [`http_body::Body`])
//! with the same rules as the standalone server ([`crate::serve_http`],
//! which is a loop over this very service): the admission of
//! [`evidence_wire_http`] (headers sent once, proxies, `Host`, `Origin`,
//! the bearer token, draining, MCP headers, the body limit), the call cap
//! that counts running work ([`HttpServerConfig::max_concurrent_requests`]:
//! a blocking check keeps its slot until it ends, its call cancelled when
//! the caller goes), the body read timeout, the validation log and the
//! metrics. Mounted, it answers at whatever path the application gives it:
//! every `POST` is a call (MCP statuses for an MCP client, Decision Gate's
//! for any other caller), anything else `405`; the application keeps its
//! own probes and layers (timeouts, compression, auth, tracing).
//!
//! ```no_run
//! # async fn run(provider: evidence_wire_tokio::Provider) -> Result<(), Box<dyn std::error::Error>> {
//! use evidence_wire_tokio::{HttpServerConfig, ProviderService};
//!
//! let evidence = ProviderService::new(provider, HttpServerConfig::default())?;
//! let app = axum::Router::new()
//!     .route("/hello", axum::routing::get(|| async { "hello" }))
//!     .route_service("/evidence", evidence.clone());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app)
//!     .with_graceful_shutdown(async move { evidence.drain().await })
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! With hyper alone (HTTP/1.1 and HTTP/2 on one port through hyper-util's
//! auto builder), routing the provider's path to it and anything else to
//! the application:
//!
//! ```no_run
//! # async fn run(provider: evidence_wire_tokio::Provider) -> Result<(), Box<dyn std::error::Error>> {
//! use evidence_wire_tokio::{HttpServerConfig, ProviderService};
//! use http_body_util::Full;
//! use hyper::body::{Bytes, Incoming};
//! use hyper::{Request, Response};
//! use hyper_util::rt::{TokioExecutor, TokioIo};
//! use tower_service::Service as _;
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let evidence = ProviderService::new(provider, HttpServerConfig::default())?
//!     .listening_on(listener.local_addr()?)?;
//! loop {
//!     let (stream, _) = listener.accept().await?;
//!     let evidence = evidence.clone();
//!     let app = hyper::service::service_fn(move |request: Request<Incoming>| {
//!         let mut evidence = evidence.clone();
//!         async move {
//!             match request.uri().path() {
//!                 "/evidence" => evidence.call(request).await,
//!                 _ => Ok(Response::new(Full::new(Bytes::from_static(b"the app")))),
//!             }
//!         }
//!     });
//!     tokio::spawn(async move {
//!         let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
//!         let _ = builder.serve_connection(TokioIo::new(stream), app).await;
//!     });
//! }
//! # }
//! ```
//!
//! The provider's metrics in the application's own `prometheus-client`
//! registry (the mounted service serves no `/metrics` of its own; the
//! application serves its registry where it likes):
//!
//! ```
//! use evidence_wire_tokio::metrics::{Metrics, prometheus_client::registry::Registry};
//! use evidence_wire_tokio::{HttpServerConfig, http::MetricsAccess};
//!
//! let metrics = Metrics::new();
//! let mut registry = Registry::default();
//! metrics.register(&mut registry);
//! // `Off`: no `GET /metrics` of the provider's own (mounted, it has none).
//! let config = HttpServerConfig::default().with_metrics(metrics, MetricsAccess::Off);
//! # let _ = config;
//! ```
//!
//! Draining: [`ProviderService::drain`] refuses new calls (`503
//! OVERLOADED` with `Retry-After`), lets the calls in flight finish up to
//! [`HttpServerConfig::drain_timeout`], answers what still runs retryably
//! and returns: hand it to the application's graceful shutdown.
//!
//! Limits: those of [`HttpServerConfig`] that concern one request (the
//! policy, the call cap, the body read timeout, the drain); connection
//! limits (how many, head and write timeouts, shedding) are the server's
//! that carries the requests: the standalone server's, or the
//! application's.

use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use evidence_wire_http::{
    self as http, Admission, BodyLimit, Exchange, HttpReply, Lifecycle, RequestHead, Routing,
};
use evidence_wire_log::HttpCall;
use evidence_wire_log::record::Channel;
use evidence_wire_metrics::Transport;
use evidence_wire_provider::trace::TraceContext;
use evidence_wire_provider::{
    CallSource, CancelReason, Completion, IntoService, Service, complete, dispatch_from,
};
use futures_lite::future::{or, poll_once};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use hyper::header::{
    ACCEPT, ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, FORWARDED, HOST,
    HeaderMap, HeaderName, HeaderValue, ORIGIN, RETRY_AFTER, WWW_AUTHENTICATE,
};
use hyper::{Request, Response, StatusCode, Version};
use tokio::sync::{Semaphore, watch};

use crate::http_server::{HttpServeError, HttpServerConfig};
use crate::tasks::{Ran, RequestTasks, Slots, WhenFull};

/// A provider's JSON-RPC endpoint as a tower `Service` over
/// `http::Request<B>`: clone it freely (clones share the call slots, the
/// drain state, the log and the metrics). See the module docs.
#[derive(Clone)]
pub struct ProviderService {
    inner: Arc<Inner>,
}

impl fmt::Debug for ProviderService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderService")
            .field("routing", &self.inner.config.policy.routing)
            .field("draining", &self.is_draining())
            .finish_non_exhaustive()
    }
}

/// What every clone of a [`ProviderService`] shares.
pub(crate) struct Inner {
    service: Service,
    /// What every call's context says of its caller: HTTP, authenticated
    /// when a bearer token is required (every admitted request sent it),
    /// the configuration's call timeout.
    source: CallSource,
    pub(crate) config: HttpServerConfig,
    calls: Arc<Semaphore>,
    /// The shutdown began: not ready, no new calls.
    draining: AtomicBool,
    /// Set at the drain deadline: answer what still runs, retryably.
    expire: watch::Sender<bool>,
    expired: watch::Receiver<bool>,
    /// The address the server listens on: decides which `Host` names are
    /// its own (unknown when mounted, unless the application says).
    local: Option<SocketAddr>,
}

/// How long the calls answered at the drain deadline get to hand over
/// their replies.
const EXPIRE_GRACE: Duration = Duration::from_secs(2);

impl ProviderService {
    /// `service` (a [`evidence_wire_provider::Provider`] or a
    /// [`Service`]) as a tower service to mount at one path of an
    /// application, under `config`'s per-request rules. Refused: an
    /// invalid provider contract, `behind_proxy` without a bearer token.
    pub fn new(
        service: impl IntoService,
        config: HttpServerConfig,
    ) -> Result<Self, HttpServeError> {
        ProviderService::build(service, config, None, Routing::Mounted)
    }

    /// The standalone server's service: its fixed paths, its listener's
    /// address for the `Host` check.
    pub(crate) fn standalone(
        service: impl IntoService,
        config: HttpServerConfig,
        local: SocketAddr,
    ) -> Result<Self, HttpServeError> {
        ProviderService::build(service, config, Some(local), Routing::Standalone)
    }

    fn build(
        service: impl IntoService,
        mut config: HttpServerConfig,
        local: Option<SocketAddr>,
        routing: Routing,
    ) -> Result<Self, HttpServeError> {
        let service = service.into_service()?;
        let authenticated = config.policy.bearer_token.is_some();
        if let Some(local) = local {
            http::check_bind(local.ip(), authenticated)?;
        }
        http::check_behind_proxy(config.policy.behind_proxy, authenticated)?;
        config.policy.routing = routing;
        // Every series at zero before the first request.
        let checks = service.config().contract.as_ref().map(|contract| {
            contract
                .contract()
                .checks
                .iter()
                .map(|check| check.check_id.clone())
                .collect::<Vec<_>>()
        });
        config
            .metrics
            .announce(Transport::Http, checks.iter().flatten().map(String::as_str));
        let (expire, expired) = watch::channel(false);
        Ok(ProviderService {
            inner: Arc::new(Inner {
                calls: Arc::new(Semaphore::new(config.max_concurrent_requests.max(1))),
                draining: AtomicBool::new(false),
                expire,
                expired,
                source: service
                    .call_source(Transport::Http)
                    .authenticated(authenticated),
                service,
                local,
                config,
            }),
        })
    }

    /// The address the application's listener is bound to: `Host` must
    /// then name it (on a loopback address: `localhost`, `127.0.0.1` or
    /// `[::1]` with its port, or one of the policy's allowed hosts), as on
    /// the standalone server (DNS-rebinding defence); and a non-loopback
    /// address without a bearer token is refused, as `serve_http` refuses
    /// to bind one. Call it before cloning the service.
    pub fn listening_on(mut self, address: SocketAddr) -> Result<Self, HttpServeError> {
        http::check_bind(
            address.ip(),
            self.inner.config.policy.bearer_token.is_some(),
        )?;
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.local = Some(address),
            None => {
                return Err(HttpServeError::Io(std::io::Error::other(
                    "listening_on: call it before the service is cloned",
                )));
            }
        }
        Ok(self)
    }

    /// True once [`ProviderService::drain`] began.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }

    /// Shuts the endpoint down gracefully: new calls are refused
    /// retryably (`503 OVERLOADED`, `Retry-After`) from now on, the calls
    /// in flight run to their end up to the drain timeout, what still runs
    /// then is answered with the same retryable error (and cancelled), and
    /// this returns once they have handed over their replies (at most a
    /// couple of seconds more). Every clone sees it.
    pub async fn drain(&self) {
        let inner = &self.inner;
        inner.draining.store(true, Ordering::SeqCst);
        let all = u32::try_from(inner.config.max_concurrent_requests.max(1)).unwrap_or(u32::MAX);
        // Calls in flight: the slots taken.
        let running =
            || all.saturating_sub(u32::try_from(inner.calls.available_permits()).unwrap_or(all));
        tracing::info!(
            target: "evidence_wire::drain",
            transport = "http",
            running = running(),
            timeout_ms = u64::try_from(inner.config.drain_timeout.as_millis()).unwrap_or(u64::MAX),
            "drain started: new calls are refused, the calls in flight finish",
        );
        let idle = || Arc::clone(&inner.calls).acquire_many_owned(all);
        let slots = match tokio::time::timeout(inner.config.drain_timeout, idle()).await {
            Ok(slots) => slots.ok(),
            Err(_) => {
                tracing::warn!(
                    target: "evidence_wire::drain",
                    transport = "http",
                    running = running(),
                    "drain deadline passed: the calls still running are answered retryably and cancelled",
                );
                let _ = inner.expire.send(true);
                tokio::time::timeout(EXPIRE_GRACE, idle())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
        };
        // A request admitted just before the drain began may not have
        // taken its slot yet: closed (while the slots are still held), the
        // slots refuse it with the retryable draining answer instead of
        // letting a call start that nobody waits for.
        inner.calls.close();
        drop(slots);
        inner.config.validation_log.flush();
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

impl<B> tower_service::Service<Request<B>> for ProviderService
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: fmt::Display,
{
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Overload is answered per request (503), never by backpressure
        // here: a call slot is taken when the request is admitted.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { Ok(inner.respond(request, None).await) })
    }
}

impl Inner {
    /// The response to `request`, its validation records written; `unread`
    /// (the standalone server's) is cleared once the body is read to its end.
    pub(crate) async fn respond<B>(
        &self,
        request: Request<B>,
        unread: Option<&AtomicBool>,
    ) -> Response<Full<Bytes>>
    where
        B: Body,
        B::Error: fmt::Display,
    {
        // Only JSON-RPC routes are validation-logged (not probes). (A
        // disabled log records nothing: no call record is made.)
        let log = &self.config.validation_log;
        let mut call = (log.is_enabled() && self.is_call(&request))
            .then(|| log.http_call(request.uri().path()));
        let reply = answer(self, request, call.as_mut(), unread).await;
        if let Some(call) = call {
            let channel = if reply.header("content-type") == Some(http::CONTENT_TYPE_SSE) {
                Channel::Sse
            } else {
                Channel::Http
            };
            call.finish(reply.status, channel, &reply.body);
        }
        to_response(reply)
    }

    fn is_call<B>(&self, request: &Request<B>) -> bool {
        match self.config.policy.routing {
            Routing::Mounted => request.method() == hyper::Method::POST,
            _ => matches!(
                http::route(request.method().as_str(), request.uri().path()),
                http::Route::Call(_)
            ),
        }
    }
}

// The headers read from every request, named once (a name made from a
// `&str` is parsed and validated again on every request); `read_headers`
// compares the request's header names with these.
static MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
static MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
static MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
static MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
static TRACEPARENT: HeaderName = HeaderName::from_static(TraceContext::TRACEPARENT);
static TRACESTATE: HeaderName = HeaderName::from_static(TraceContext::TRACESTATE);

/// The W3C trace context headers of a request, as `read_headers` found them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TraceHeaders<'a> {
    traceparent: http::HeaderField<'a>,
    tracestate: http::HeaderField<'a>,
}

impl TraceHeaders<'_> {
    /// The trace context they carry: one valid `traceparent` (none, or
    /// several, is no context), with its `tracestate` (several are joined
    /// with commas, as W3C Trace Context §3.3.1.1 says a list split over
    /// headers is read); invalid input is ignored.
    fn context(&self, headers: &HeaderMap) -> Option<TraceContext> {
        let http::HeaderField::One(traceparent) = self.traceparent else {
            return None;
        };
        let traceparent = std::str::from_utf8(traceparent).ok()?;
        let tracestate = match self.tracestate {
            http::HeaderField::Absent => None,
            http::HeaderField::One(value) => std::str::from_utf8(value).ok().map(Cow::Borrowed),
            http::HeaderField::Repeated(_) => {
                let mut joined = Vec::new();
                for value in headers.get_all(&TRACESTATE) {
                    // Past the bound the whole list is dropped anyway.
                    if joined.len() > TraceContext::MAX_TRACESTATE_BYTES {
                        break;
                    }
                    if !joined.is_empty() {
                        joined.push(b',');
                    }
                    joined.extend_from_slice(value.as_bytes());
                }
                String::from_utf8(joined).ok().map(Cow::Owned)
            }
        };
        TraceContext::parse(traceparent, tracestate.as_deref())
    }
}

/// The fields of `head` the core reads from request headers (and the
/// trace context headers, into `trace`), filled in by one walk over
/// `headers` (a handful, at most hyper's header count limit), each name
/// compared with the 15 read: cheaper than 15 lookups,
/// each of which hashes its name (~2.5 k instructions per request,
/// callgrind). Every value is kept for the core to judge repeats; of
/// `Accept`, the first. The `head_by_lookup` test holds it to the lookups.
fn read_headers<'a>(
    mut head: RequestHead<'a>,
    headers: &'a HeaderMap,
    trace: &mut TraceHeaders<'a>,
) -> RequestHead<'a> {
    for (name, value) in headers {
        let value = value.as_bytes();
        let field = if name == HOST {
            &mut head.host
        } else if name == AUTHORIZATION {
            &mut head.authorization
        } else if name == ORIGIN {
            &mut head.origin
        } else if name == CONTENT_LENGTH {
            &mut head.content_length
        } else if name == ACCEPT {
            head.accept.get_or_insert(value);
            continue;
        } else if name == MCP_PROTOCOL_VERSION {
            &mut head.protocol_version
        } else if name == MCP_SESSION_ID {
            &mut head.session_id
        } else if name == MCP_METHOD {
            &mut head.mcp_method
        } else if name == MCP_NAME {
            &mut head.mcp_name
        } else if name == FORWARDED {
            &mut head.forwarded
        } else if name == X_FORWARDED_FOR {
            &mut head.x_forwarded_for
        } else if name == X_FORWARDED_HOST {
            &mut head.x_forwarded_host
        } else if name == X_REAL_IP {
            &mut head.x_real_ip
        } else if name == TRACEPARENT {
            &mut trace.traceparent
        } else if name == TRACESTATE {
            &mut trace.tracestate
        } else {
            continue;
        };
        field.push(value);
    }
    head
}

/// Answers one request; `unread` (the standalone server's) is cleared once
/// its body is read to the end (any earlier reply leaves part of it unread).
async fn answer<B>(
    shared: &Inner,
    request: Request<B>,
    mut call: Option<&mut HttpCall>,
    unread: Option<&AtomicBool>,
) -> HttpReply
where
    B: Body,
    B::Error: fmt::Display,
{
    let metrics = &shared.config.metrics;
    let lifecycle = if shared.draining.load(Ordering::SeqCst) {
        Lifecycle::Draining
    } else {
        Lifecycle::Serving
    };
    let plan = {
        let mut trace = TraceHeaders::default();
        let mut head = read_headers(
            RequestHead {
                method: request.method().as_str(),
                path: request.uri().path(),
                server_address: shared.local,
                http_1_0: request.version() == Version::HTTP_10,
                ..RequestHead::default()
            },
            request.headers(),
            &mut trace,
        );
        // HTTP/2 sends the host as `:authority`, not `Host` (RFC 9113
        // §8.3.1); hyper puts it in the URI.
        if head.host == http::HeaderField::Absent {
            if let Some(authority) = request.uri().authority() {
                head.host.push(authority.as_str().as_bytes());
            }
        }
        match http::admit_during(&shared.config.policy, &head, lifecycle) {
            Admission::Reply(reply) => {
                let refused_call = matches!(
                    http::route_for(&shared.config.policy, &head),
                    http::Route::Call(_)
                ) && reply.status == 503;
                if refused_call {
                    metrics.overload_refused(Transport::Http);
                }
                if reply.status >= 400 {
                    refused(reply.status, head.path, "refused at admission");
                }
                return reply;
            }
            Admission::Metrics => return http::metrics_reply(metrics.encode().into_bytes()),
            Admission::Call(mut plan) => {
                // Each call in the body carries it unless its own `_meta`
                // has one (the core decides).
                plan.headers.trace = trace.context(request.headers());
                plan
            }
        }
    };
    let Ok(slot) = Arc::clone(&shared.calls).try_acquire_owned() else {
        metrics.overload_refused(Transport::Http);
        if shared.draining.load(Ordering::SeqCst) {
            refused(503, request.uri().path(), "the server is draining");
            return http::draining_reply();
        }
        refused(
            503,
            request.uri().path(),
            "the concurrent call cap is reached",
        );
        return http::overloaded_reply(shared.config.max_concurrent_requests);
    };

    let mut expired = shared.expired.clone();
    let timeout = shared.config.body_read_timeout;
    let mut read = std::pin::pin!(read_body(request.into_body(), plan.body_limit));
    // One poll first, without a timer or a drain waiter: hyper has a small
    // body that came with its head (the usual request) ready at once, and
    // then neither is made. A body still on its way is awaited within the
    // timeout from here.
    let body = match poll_once(read.as_mut()).await {
        Some(read) => Some(Ok(read)),
        None => {
            let read = tokio::time::timeout(timeout, read);
            // The body first: when it is already here, the drain watch is
            // not polled at all (no waiter registered on it).
            let expiry = async {
                let _ = expired.wait_for(|expired| *expired).await;
                None
            };
            or(async { Some(read.await) }, expiry).await
        }
    };
    let Some(body) = body else {
        // The drain deadline passed while the body was still arriving.
        metrics.overload_refused(Transport::Http);
        refused(503, "", "the drain deadline passed while the body arrived");
        return http::draining_reply();
    };
    let body = match body {
        Err(_) => {
            metrics.frame_dropped(Transport::Http, "body_timeout");
            let reason = format!("it did not arrive within {} ms", timeout.as_millis());
            refused(400, "", "the body did not arrive in time");
            return http::unreadable_body_reply(&reason);
        }
        Ok(Err(BodyError::TooLarge(limit))) => {
            metrics.frame_dropped(Transport::Http, "body_too_large");
            refused(413, "", "the body is over the limit");
            return http::payload_too_large_reply(limit);
        }
        Ok(Err(BodyError::Read(error))) => {
            metrics.frame_dropped(Transport::Http, "body_unreadable");
            refused(400, "", "the body could not be read");
            return http::unreadable_body_reply(&error);
        }
        Ok(Ok(body)) => {
            if let Some(unread) = unread {
                unread.store(false, Ordering::Relaxed);
            }
            body
        }
    };
    let mut exchange = Exchange::start(shared.service.config(), plan, body.as_slice());
    drop(body);
    let handler = shared.service.handler().as_ref();
    let mut counts = metrics.connection(Transport::Http);
    // Dropped with the request (a client that disconnects): its calls are
    // cancelled, and its blocking work keeps its call slot until it ends.
    let slots = Slots::shared(
        Arc::clone(&shared.calls),
        shared.config.max_concurrent_requests.max(1),
        WhenFull::Refuse,
    );
    let mut tasks = RequestTasks::new(slots, slot);
    loop {
        while let Some(event) = exchange.poll_event() {
            if let Some(call) = &mut call {
                call.observe(&event);
            }
            counts.observe(&event);
            // One message in, no stream: no fatal framing error here.
            if let Ran::Ready(ticket, completion) = tasks.run(
                dispatch_from(handler, event, &shared.source),
                exchange.server_mut(),
            ) {
                counts.answered(ticket, error_code(&completion));
                let _ = complete(exchange.server_mut(), ticket, completion);
            }
        }
        if exchange.is_finished() {
            break;
        }
        let expiry = async {
            let _ = expired.wait_for(|expired| *expired).await;
            None
        };
        let Some(finished) = or(async { Some(tasks.next().await) }, expiry).await else {
            // The drain deadline: answer what still runs, retryably.
            tasks.cancel_all(CancelReason::Shutdown);
            exchange.expire();
            counts.expired();
            continue;
        };
        let Some((ticket, completion)) = finished else {
            break;
        };
        counts.answered(ticket, error_code(&completion));
        // A cancelled ticket is refused: nothing to send for it.
        let _ = complete(exchange.server_mut(), ticket, completion);
    }
    exchange.into_reply()
}

/// The `evidence_wire::refusal` event of a request answered `status`
/// before its body reached the core (`path` empty once the request is
/// taken apart): INFO for `503` (a limit was reached, or the server
/// drains), DEBUG for the rest (the request itself was refused).
fn refused(status: u16, path: &str, why: &str) {
    if status == 503 {
        tracing::info!(target: "evidence_wire::refusal", transport = "http", status, path, "{why}");
    } else {
        tracing::debug!(target: "evidence_wire::refusal", transport = "http", status, path, "{why}");
    }
}

/// The evidence error code a completion carries, if any.
fn error_code(completion: &Completion) -> Option<&str> {
    match completion {
        Completion::Evidence(result) => result.error.as_ref().map(|error| error.code.as_str()),
        Completion::Tool(_) => None,
    }
}

enum BodyError {
    TooLarge(usize),
    Read(String),
}

async fn read_body<B>(body: B, mut limit: BodyLimit) -> Result<BodyBytes, BodyError>
where
    B: Body,
    B::Error: fmt::Display,
{
    let mut body = std::pin::pin!(body);
    let mut bytes = BodyBytes::default();
    while let Some(frame) = body.as_mut().frame().await {
        let frame = frame.map_err(|error| BodyError::Read(error.to_string()))?;
        if let Ok(mut data) = frame.into_data() {
            let length = data.remaining();
            limit
                .accept(length)
                .map_err(|too_large| BodyError::TooLarge(too_large.limit))?;
            // `Bytes` (hyper's, axum's) hands itself over without a copy.
            bytes.push(data.copy_to_bytes(length));
        }
    }
    Ok(bytes)
}

/// A request body gathered from its frames. A body that arrives as one
/// frame (the usual case: it came with its head, or in one read) is kept
/// as hyper handed it over, without a copy; only a body of several frames
/// is joined into one buffer. Either way [`BodyBytes::as_slice`] is the
/// frames' bytes in order.
#[derive(Default)]
enum BodyBytes {
    /// No bytes yet.
    #[default]
    Empty,
    /// One non-empty frame.
    One(Bytes),
    /// The frames so far, joined.
    Joined(Vec<u8>),
}

impl BodyBytes {
    /// Append one frame's bytes.
    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        match self {
            BodyBytes::Empty => *self = BodyBytes::One(data),
            BodyBytes::One(first) => {
                let mut joined = Vec::with_capacity(first.len().saturating_add(data.len()));
                joined.extend_from_slice(first);
                joined.extend_from_slice(&data);
                *self = BodyBytes::Joined(joined);
            }
            BodyBytes::Joined(joined) => joined.extend_from_slice(&data),
        }
    }

    /// Every byte pushed, in order.
    fn as_slice(&self) -> &[u8] {
        match self {
            BodyBytes::Empty => &[],
            BodyBytes::One(bytes) => bytes,
            BodyBytes::Joined(joined) => joined,
        }
    }
}

/// `reply` as an HTTP response.
fn to_response(reply: HttpReply) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.reserve(reply.headers.len());
    for (name, value) in reply.headers {
        // Every value comes from the core and is valid; skip rather than panic.
        if let (Some(name), Ok(value)) = (reply_header_name(name), HeaderValue::try_from(value)) {
            headers.append(name, value);
        }
    }
    response
}

/// The [`HeaderName`] of a reply header the core names: the ones it uses
/// come from constants (parsing a name costs ~600 instructions, and a
/// non-standard one is copied into a fresh allocation); any other is
/// parsed (`None` if it is not a valid name).
fn reply_header_name(name: &str) -> Option<HeaderName> {
    Some(match name {
        "content-type" => CONTENT_TYPE,
        "cache-control" => CACHE_CONTROL,
        "retry-after" => RETRY_AFTER,
        "www-authenticate" => WWW_AUTHENTICATE,
        "allow" => ALLOW,
        "mcp-session-id" => MCP_SESSION_ID.clone(),
        other => return HeaderName::from_bytes(other.as_bytes()).ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use evidence_wire_http::HeaderField;

    /// Every field by a lookup of its name, as the adapter read them
    /// before the one walk of `read_headers`.
    fn head_by_lookup(headers: &HeaderMap) -> RequestHead<'_> {
        let field = |name: &HeaderName| {
            HeaderField::from_values(headers.get_all(name).iter().map(HeaderValue::as_bytes))
        };
        RequestHead {
            host: field(&HOST),
            authorization: field(&AUTHORIZATION),
            origin: field(&ORIGIN),
            content_length: field(&CONTENT_LENGTH),
            accept: headers.get(&ACCEPT).map(HeaderValue::as_bytes),
            protocol_version: field(&MCP_PROTOCOL_VERSION),
            session_id: field(&MCP_SESSION_ID),
            mcp_method: field(&MCP_METHOD),
            mcp_name: field(&MCP_NAME),
            forwarded: field(&FORWARDED),
            x_forwarded_for: field(&X_FORWARDED_FOR),
            x_forwarded_host: field(&X_FORWARDED_HOST),
            x_real_ip: field(&X_REAL_IP),
            ..RequestHead::default()
        }
    }

    /// Generated requests (each read name, and others, sent 0 to 3
    /// times in any order): the one walk reads what the lookups read.
    #[test]
    fn head_by_lookup_is_head_read_in_one_walk() {
        let names = [
            HOST,
            AUTHORIZATION,
            ORIGIN,
            CONTENT_LENGTH,
            ACCEPT,
            MCP_PROTOCOL_VERSION.clone(),
            MCP_SESSION_ID.clone(),
            MCP_METHOD.clone(),
            MCP_NAME.clone(),
            FORWARDED,
            X_FORWARDED_FOR.clone(),
            X_FORWARDED_HOST.clone(),
            X_REAL_IP.clone(),
            TRACEPARENT.clone(),
            TRACESTATE.clone(),
            CONTENT_TYPE,
            HeaderName::from_static("mcp-other"),
            HeaderName::from_static("x-real-ips"),
        ];
        // A fixed linear congruential sequence: the same cases every run.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |below: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(state >> 33).unwrap_or(0) % below
        };
        for case in 0..3000 {
            let mut headers = HeaderMap::new();
            for value in 0..next(12) {
                let name = names[next(names.len())].clone();
                let value = HeaderValue::from_str(&format!("v{case}-{value}")).unwrap();
                headers.append(name, value);
            }
            let mut trace = TraceHeaders::default();
            assert_eq!(
                read_headers(RequestHead::default(), &headers, &mut trace),
                head_by_lookup(&headers),
                "{headers:?}"
            );
            let lookup = |name: &HeaderName| {
                HeaderField::from_values(headers.get_all(name).iter().map(HeaderValue::as_bytes))
            };
            assert_eq!(trace.traceparent, lookup(&TRACEPARENT), "{headers:?}");
            assert_eq!(trace.tracestate, lookup(&TRACESTATE), "{headers:?}");
        }
    }

    /// The reply header names taken from constants are the names the
    /// core wrote, as parsing them gives.
    #[test]
    fn reply_header_names_match_parsing() {
        for name in [
            "content-type",
            "cache-control",
            "retry-after",
            "www-authenticate",
            "allow",
            "mcp-session-id",
            "x-some-other",
        ] {
            let parsed = HeaderName::from_bytes(name.as_bytes()).ok();
            assert_eq!(reply_header_name(name), parsed, "{name}");
            assert_eq!(
                reply_header_name(name).map(|n| n.to_string()).as_deref(),
                Some(name)
            );
        }
        assert_eq!(reply_header_name("bad name"), None);
    }

    /// However a body is split into frames (empty ones included), the
    /// gathered bytes are the frames joined in order, as the plain
    /// `extend_from_slice` loop gave.
    #[test]
    fn body_bytes_are_the_frames_joined() {
        let body: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..500 {
            let mut gathered = BodyBytes::default();
            let mut plain = Vec::new();
            let mut rest = body.as_slice();
            while !rest.is_empty() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let take = usize::try_from(seed % 300).unwrap().min(rest.len());
                let (frame, tail) = rest.split_at(take);
                plain.extend_from_slice(frame);
                gathered.push(Bytes::copy_from_slice(frame));
                rest = tail;
            }
            assert_eq!(gathered.as_slice(), plain.as_slice());
            assert_eq!(gathered.as_slice(), body.as_slice());
        }
        assert_eq!(BodyBytes::default().as_slice(), b"");
        let mut one = BodyBytes::default();
        one.push(Bytes::new());
        one.push(Bytes::from_static(b"abc"));
        one.push(Bytes::new());
        assert!(matches!(one, BodyBytes::One(_)));
        assert_eq!(one.as_slice(), b"abc");
    }
}
