//! The HTTP server on hyper (HTTP/1.1).
//!
//! Plumbing only: each request head goes to [`http::admit`], the body is
//! read within the [`http::BodyLimit`] the plan carries (declared length
//! checked before reading, bytes counted while reading), and the body runs
//! through one [`Exchange`], the same [`Server`] pipeline stdio uses, with
//! the handler's calls as tokio tasks. Statuses, headers and error bodies
//! all come from [`evidence_wire::http`].
//!
//! Limits: at most [`HttpServerConfig::max_connections`] connections (past
//! it, accepting pauses), at most [`HttpServerConfig::max_concurrent_requests`]
//! JSON-RPC calls at once (past it, `503 OVERLOADED`), a header read timeout
//! against slow clients (it also closes idle keep-alive connections), a body
//! read timeout, a write timeout against clients that stop reading their
//! answers (no write progress for [`HttpServerConfig::write_timeout`] closes
//! the connection and frees its slot), and the body cap of
//! [`HttpPolicy::max_body_bytes`]. A client that disconnects while its call
//! runs gets its handler task aborted and its permit returned.
//!
//! [`serve_http`] refuses a listener on a non-loopback address unless a
//! bearer token is configured, and stops gracefully when its shutdown
//! future completes: it stops accepting, lets requests in progress finish
//! (up to [`HttpServerConfig::shutdown_grace`]), then returns.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use evidence_wire::http::{
    self, Admission, BindRefused, BodyLimit, Exchange, HttpPolicy, HttpReply, RequestHead,
};
use evidence_wire::server::{Server, ServerConfig};
use evidence_wire_log::{HttpCall, ValidationLog};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use crate::stdio::Handler;
use crate::tasks::{Completion, Tasks};

/// Sets up each per-request [`Server`] like the stdio one: registers tools,
/// resources and the evidence tool's definition.
pub type PrepareServer = Arc<dyn Fn(&mut Server) + Send + Sync>;

/// Everything that shapes the HTTP server besides the JSON-RPC [`ServerConfig`].
#[derive(Clone)]
#[non_exhaustive]
pub struct HttpServerConfig {
    /// Authentication, Origin allow-list and body cap.
    pub policy: HttpPolicy,
    /// Where [`bind_http`] listens by default: `127.0.0.1:8080`.
    pub bind_address: SocketAddr,
    /// Most JSON-RPC calls served at once (default 64); more get `503 OVERLOADED`.
    pub max_concurrent_requests: usize,
    /// Most open connections (default 256); past it, accepting pauses.
    pub max_connections: usize,
    /// How long a client may take to send a request head (default 10 s).
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request body (default 30 s).
    pub body_read_timeout: Duration,
    /// How long writing to a client may make no progress (default 30 s);
    /// past it the connection is closed, so a client that stops reading
    /// its answers cannot hold a connection slot.
    pub write_timeout: Duration,
    /// How long shutdown waits for requests in progress (default 10 s).
    pub shutdown_grace: Duration,
    /// Per-request server setup (tools, resources).
    pub prepare: Option<PrepareServer>,
    /// Where each JSON-RPC request's validation outcomes are recorded
    /// (default: disabled).
    pub validation_log: ValidationLog,
}

impl Default for HttpServerConfig {
    fn default() -> Self {
        HttpServerConfig {
            policy: HttpPolicy::default(),
            bind_address: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_concurrent_requests: 64,
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            prepare: None,
            validation_log: ValidationLog::disabled(),
        }
    }
}

impl HttpServerConfig {
    /// The same settings requiring `Authorization: Bearer <token>`.
    pub fn with_bearer_token(mut self, token: impl Into<String>) -> Self {
        self.policy.bearer_token = Some(token.into());
        self
    }

    /// The same settings allowing these `Origin`s (besides loopback ones).
    pub fn with_allowed_origins(mut self, origins: Vec<String>) -> Self {
        self.policy.allowed_origins = origins;
        self
    }

    /// The same settings with a body cap of `limit` bytes.
    pub fn with_max_body_bytes(mut self, limit: usize) -> Self {
        self.policy.max_body_bytes = limit;
        self
    }

    /// The same settings serving at most `limit` calls at once.
    pub fn with_max_concurrent_requests(mut self, limit: usize) -> Self {
        self.max_concurrent_requests = limit;
        self
    }

    /// The same settings recording validation outcomes to `log`.
    pub fn with_validation_log(mut self, log: ValidationLog) -> Self {
        self.validation_log = log;
        self
    }

    /// The same settings with a per-request server setup.
    pub fn with_prepare(mut self, prepare: PrepareServer) -> Self {
        self.prepare = Some(prepare);
        self
    }
}

impl std::fmt::Debug for HttpServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServerConfig")
            .field("authenticated", &self.policy.bearer_token.is_some())
            .field("allowed_origins", &self.policy.allowed_origins)
            .field(
                "allow_loopback_origins",
                &self.policy.allow_loopback_origins,
            )
            .field("max_body_bytes", &self.policy.max_body_bytes)
            .field("bind_address", &self.bind_address)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("max_connections", &self.max_connections)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("shutdown_grace", &self.shutdown_grace)
            .finish_non_exhaustive()
    }
}

/// Why the HTTP server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpServeError {
    /// The address is not loopback and no bearer token is configured.
    #[error(transparent)]
    Bind(#[from] BindRefused),
    /// The socket failed.
    #[error("HTTP listener failed: {0}")]
    Io(#[from] io::Error),
}

/// Bind `address` (use `config.bind_address` for the default loopback one),
/// refusing a non-loopback address unless a bearer token is configured.
pub async fn bind_http(
    address: SocketAddr,
    config: &HttpServerConfig,
) -> Result<TcpListener, HttpServeError> {
    http::check_bind(address.ip(), config.policy.bearer_token.is_some())?;
    Ok(TcpListener::bind(address).await?)
}

struct Shared<H> {
    server_config: ServerConfig,
    config: HttpServerConfig,
    handler: Arc<H>,
    calls: Arc<Semaphore>,
}

/// Serve `handler` over HTTP on `listener` until `shutdown` completes.
///
/// `POST /rpc` and `POST /mcp` run the JSON-RPC pipeline (each request body
/// through its own [`Server`] built from `server_config` and
/// `http_config.prepare`); `GET /healthz` and `/readyz` are probes.
pub async fn serve_http<H, F>(
    listener: TcpListener,
    server_config: ServerConfig,
    handler: H,
    http_config: HttpServerConfig,
    shutdown: F,
) -> Result<(), HttpServeError>
where
    H: Handler,
    F: Future<Output = ()> + Send,
{
    let local = listener.local_addr()?;
    http::check_bind(local.ip(), http_config.policy.bearer_token.is_some())?;
    let connections = Arc::new(Semaphore::new(http_config.max_connections.max(1)));
    let shared = Arc::new(Shared {
        calls: Arc::new(Semaphore::new(http_config.max_concurrent_requests.max(1))),
        server_config,
        handler: Arc::new(handler),
        config: http_config,
    });
    let (stop, stopped) = watch::channel(false);
    let mut open: JoinSet<()> = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            Some(_) = open.join_next(), if !open.is_empty() => continue,
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) if is_transient(&error) => {
                    // Out of file descriptors and the like: wait, then retry.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(error) => return Err(HttpServeError::Io(error)),
            },
        };
        let shared = Arc::clone(&shared);
        let stopped = stopped.clone();
        open.spawn(async move {
            serve_connection(stream, shared, stopped).await;
            drop(permit);
        });
    }
    let _ = stop.send(true);
    let grace = shared.config.shutdown_grace;
    let drained =
        tokio::time::timeout(grace, async { while open.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        open.shutdown().await;
    }
    Ok(())
}

fn is_transient(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || error
        .raw_os_error()
        .is_some_and(|code| code == 23 || code == 24)
}

async fn serve_connection<H: Handler>(
    stream: TcpStream,
    shared: Arc<Shared<H>>,
    mut stopped: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let header_read_timeout = shared.config.header_read_timeout;
    let stream = StallGuard::new(stream, shared.config.write_timeout);
    let service = service_fn(move |request| {
        let shared = Arc::clone(&shared);
        async move {
            // Only JSON-RPC routes are validation-logged (not probes).
            let route = http::route(request.method().as_str(), request.uri().path());
            let mut call = matches!(route, http::Route::Call(_))
                .then(|| shared.config.validation_log.http_call(request.uri().path()));
            let reply = answer(&shared, request, call.as_mut()).await;
            if let Some(call) = call {
                call.finish(&reply);
            }
            Ok::<_, Infallible>(to_response(reply))
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Some(header_read_timeout))
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = async {
            // The guard wait_for returns must not live across the drain below.
            let _ = stopped.wait_for(|stop| *stop).await;
        } => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

async fn answer<H: Handler>(
    shared: &Shared<H>,
    request: Request<Incoming>,
    mut call: Option<&mut HttpCall>,
) -> HttpReply {
    let plan = {
        let headers = request.headers();
        let header = |name: &str| headers.get(name).map(HeaderValue::as_bytes);
        let head = RequestHead {
            method: request.method().as_str(),
            path: request.uri().path(),
            authorization: header("authorization"),
            origin: header("origin"),
            content_length: header("content-length"),
            accept: header("accept"),
            protocol_version: header("mcp-protocol-version"),
            session_id: header("mcp-session-id"),
        };
        match http::admit(&shared.config.policy, &head) {
            Admission::Reply(reply) => return reply,
            Admission::Call(plan) => plan,
        }
    };
    let Ok(_permit) = Arc::clone(&shared.calls).try_acquire_owned() else {
        return http::overloaded_reply(shared.config.max_concurrent_requests);
    };
    let timeout = shared.config.body_read_timeout;
    let body = match tokio::time::timeout(timeout, read_body(request.into_body(), plan.body_limit))
        .await
    {
        Err(_) => {
            let reason = format!("it did not arrive within {} ms", timeout.as_millis());
            return http::unreadable_body_reply(&reason);
        }
        Ok(Err(BodyError::TooLarge(limit))) => return http::payload_too_large_reply(limit),
        Ok(Err(BodyError::Read(error))) => return http::unreadable_body_reply(&error.to_string()),
        Ok(Ok(body)) => body,
    };
    let mut server = Server::new(plan.server_config(&shared.server_config));
    if let Some(prepare) = &shared.config.prepare {
        prepare(&mut server);
    }
    let mut exchange = Exchange::start(server, plan, &body);
    drop(body);
    let mut tasks = Tasks::new(Arc::clone(&shared.handler));
    loop {
        while let Some(event) = exchange.poll_event() {
            if let Some(call) = &mut call {
                call.observe(&event);
            }
            tasks.offer(event);
        }
        if exchange.is_finished() {
            break;
        }
        let Some((ticket, completion)) = tasks.next().await else {
            break;
        };
        // A cancelled ticket is refused: nothing to send for it.
        let _ = match completion {
            Completion::Evidence(result) => exchange.respond(ticket, *result),
            Completion::Tool(result) => exchange.respond_tool(ticket, result),
        };
    }
    exchange.into_reply()
}

enum BodyError {
    TooLarge(usize),
    Read(hyper::Error),
}

async fn read_body(mut body: Incoming, mut limit: BodyLimit) -> Result<Vec<u8>, BodyError> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        if let Ok(data) = frame.into_data() {
            limit
                .accept(data.len())
                .map_err(|too_large| BodyError::TooLarge(too_large.limit))?;
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// A connection whose writes fail with `TimedOut` once they have made no
/// progress for `limit` (the peer stopped reading). Reads pass through.
struct StallGuard {
    stream: TcpStream,
    limit: Duration,
    timer: Pin<Box<Sleep>>,
    armed: bool,
}

impl StallGuard {
    fn new(stream: TcpStream, limit: Duration) -> Self {
        StallGuard {
            stream,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            armed: false,
        }
    }

    /// Track the outcome of one write-side poll: progress disarms the
    /// timer; a stall arms it and fails once it fires.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.armed = false;
            return polled;
        }
        if !self.armed {
            self.armed = true;
            let deadline = Instant::now() + self.limit;
            self.timer.as_mut().reset(deadline);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {} ms; closing the connection",
                    self.limit.as_millis()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for StallGuard {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallGuard {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_flush(cx);
        this.watch(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.watch(cx, polled)
    }
}

fn to_response(reply: HttpReply) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in reply.headers {
        // Every value comes from the core and is valid; skip rather than panic.
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::try_from(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}
