//! The HTTP server on hyper (HTTP/1.1).
//!
//! Plumbing only: each request head goes to [`http::admit`] (with every
//! value of the headers that must appear once, and the listener's address
//! for the `Host` check), the body is read within the [`http::BodyLimit`]
//! the plan carries (declared length checked before reading, bytes counted
//! while reading), and the body runs through one [`Exchange`], the same
//! server pipeline stdio uses, with the handler's calls run as stdio runs
//! them (ready answers at once, blocking work on the blocking pool, async
//! work as tasks).
//! Statuses, headers and error bodies all come from [`evidence_wire_http`].
//!
//! Connections are kept by an [`http::ConnectionBudget`] (its docs give
//! the whole design): at most [`HttpServerConfig::max_connections`] are
//! open, and past [`HttpServerConfig::max_waiting_connections`] connections
//! waiting for a request head (partway through a head, or idle between
//! keep-alive requests) the head timeout drops from
//! [`HttpServerConfig::header_read_timeout`] to
//! [`HttpServerConfig::pressure_header_read_timeout`]: the connection that
//! has waited longest is *shed* (closed with a TCP reset, no answer) once it
//! has waited that long, to make room for new ones. A connection is never
//! shed before its first read, nor while in a request, so half-open heads,
//! which cost a peer nothing to hold, can neither lock out other clients
//! nor take the slots complete requests need. Accepting pauses only while
//! no connection can be shed yet (new clients wait in the kernel's queue,
//! [`LISTEN_BACKLOG`] long). A connection waits for a head again from the
//! moment its answer is handed to hyper.
//!
//! Other limits: at most [`HttpServerConfig::max_concurrent_requests`]
//! JSON-RPC calls at once (past it, `503 OVERLOADED`; the `/healthz` and
//! `/readyz` probes are answered from the head alone and never need a call
//! slot), a header read timeout against slow clients (it also closes idle
//! keep-alive connections), a body read timeout, a write timeout against
//! clients that stop reading their answers (no write progress for
//! [`HttpServerConfig::write_timeout`] closes the connection and frees its
//! slot), and the body cap of [`HttpPolicy::max_body_bytes`]. A client that
//! disconnects while its call runs gets its handler's work stopped (the
//! future dropped, a blocking call's task aborted) and its permit
//! returned. The async work of a request's call is polled in the request's
//! own task, which waits for it anyway: no task is spawned per request.
//!
//! [`serve_http`] refuses a listener on a non-loopback address unless a
//! bearer token is configured (and a server behind a proxy without one),
//! and drains gracefully when its shutdown future completes: `/readyz`
//! answers `503` from then on (a balancer stops routing here), every new
//! call is refused `503 OVERLOADED` with `Retry-After` (the decision is
//! [`http::admit_during`]'s), the calls in flight run to their end, up to
//! [`HttpServerConfig::drain_timeout`]; what still runs then is answered
//! with the same retryable error ([`Exchange::expire`]), never dropped.
//! Connections are then closed gracefully (an answer being written is
//! finished), the validation log is flushed, and it returns.
//!
//! Metrics: every request's events and answers are counted in
//! [`HttpServerConfig::metrics`] ([`evidence_wire_metrics`]), served at
//! `GET /metrics` when [`HttpPolicy::metrics`] allows it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use evidence_wire_http::{
    self as http, Admission, BindRefused, BodyLimit, ConnectionBudget, ConnectionId,
    ConnectionLimits, Exchange, HttpPolicy, HttpReply, Lifecycle, MetricsAccess, ProxyRefused,
    RequestHead, Room,
};
use evidence_wire_log::record::Channel;
use evidence_wire_log::{HttpCall, ValidationLog};
use evidence_wire_metrics::{Metrics, Transport};
use evidence_wire_provider::{
    CancelReason, Completion, IntoService, ServeError, Service, complete, dispatch,
};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{
    ACCEPT, ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, FORWARDED, HOST,
    HeaderMap, HeaderName, HeaderValue, ORIGIN, RETRY_AFTER, WWW_AUTHENTICATE,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, Semaphore, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use crate::tasks::{Ran, RequestTasks, Slots, WhenFull};

#[cfg(doc)]
use evidence_wire::server::ServerConfig;

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
    /// Most open connections (default 256). When full, a new connection
    /// is let in by shedding the one that has waited longest for a request
    /// head (once it has waited `pressure_header_read_timeout`); until then
    /// accepting pauses.
    pub max_connections: usize,
    /// Most connections waiting for a request head (partway through a
    /// head, or idle between keep-alive requests) before the longest-waiting
    /// ones are shed (default 128, at most `max_connections`).
    pub max_waiting_connections: usize,
    /// How long a client may take to send a request head (default 10 s).
    pub header_read_timeout: Duration,
    /// The head timeout under pressure (default 250 ms): once more than
    /// `max_waiting_connections` connections wait for a head, or every
    /// connection slot is taken, a connection that has waited this long
    /// since it was first read (or since its last answer) may be shed,
    /// the longest-waiting first. A new client waits for a slot about this
    /// long at most, unless a flood has queued more than
    /// `max_connections` connections ahead of it.
    pub pressure_header_read_timeout: Duration,
    /// How long a client may take to send a request body (default 30 s).
    pub body_read_timeout: Duration,
    /// How long writing to a client may make no progress (default 30 s);
    /// past it the connection is closed, so a client that stops reading
    /// its answers cannot hold a connection slot.
    pub write_timeout: Duration,
    /// How long a graceful shutdown waits for the calls in flight
    /// (default 25 s, under the usual 30 s an orchestrator grants after
    /// SIGTERM); what still runs then is answered with a retryable error.
    pub drain_timeout: Duration,
    /// Where each JSON-RPC request's validation outcomes are recorded
    /// (default: disabled).
    pub validation_log: ValidationLog,
    /// Where requests, check latencies, refusals and dropped bodies are
    /// counted (served at `GET /metrics` when [`HttpPolicy::metrics`]
    /// allows it). Clone a [`Metrics`] in to share it with, e.g., process
    /// clients' restart hooks.
    pub metrics: Metrics,
}

impl Default for HttpServerConfig {
    fn default() -> Self {
        HttpServerConfig {
            policy: HttpPolicy::default(),
            bind_address: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_concurrent_requests: evidence_wire::server::DEFAULT_MAX_IN_FLIGHT,
            max_connections: 256,
            max_waiting_connections: 128,
            header_read_timeout: Duration::from_secs(10),
            pressure_header_read_timeout: Duration::from_millis(250),
            body_read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_millis(evidence_wire::server::DEFAULT_DRAIN_TIMEOUT_MS),
            validation_log: ValidationLog::disabled(),
            metrics: Metrics::new(),
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

    /// The same settings also accepting these `Host` values (besides the
    /// loopback names of a loopback bind address), e.g. `gate.internal:8080`.
    pub fn with_allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        self.policy.allowed_hosts = hosts;
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

    /// The same settings waiting at most `timeout` for the calls in
    /// flight when shutting down.
    pub fn with_drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// The same settings counting into `metrics`, served at `GET /metrics`
    /// as `access` says.
    pub fn with_metrics(mut self, metrics: Metrics, access: MetricsAccess) -> Self {
        self.metrics = metrics;
        self.policy.metrics = access;
        self
    }

    /// The same settings trusting a reverse proxy in front (see
    /// [`HttpPolicy::behind_proxy`]; needs a bearer token).
    pub fn behind_proxy(mut self, behind_proxy: bool) -> Self {
        self.policy.behind_proxy = behind_proxy;
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
            .field("allowed_hosts", &self.policy.allowed_hosts)
            .field("max_body_bytes", &self.policy.max_body_bytes)
            .field("bind_address", &self.bind_address)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("max_connections", &self.max_connections)
            .field("max_waiting_connections", &self.max_waiting_connections)
            .field("header_read_timeout", &self.header_read_timeout)
            .field(
                "pressure_header_read_timeout",
                &self.pressure_header_read_timeout,
            )
            .field("body_read_timeout", &self.body_read_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("drain_timeout", &self.drain_timeout)
            .field("behind_proxy", &self.policy.behind_proxy)
            .field("metrics", &self.policy.metrics)
            .finish_non_exhaustive()
    }
}

/// Why the HTTP server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpServeError {
    /// The service could not be built (e.g. the provider's contract is
    /// invalid).
    #[error(transparent)]
    Service(#[from] ServeError),
    /// The address is not loopback and no bearer token is configured.
    #[error(transparent)]
    Bind(#[from] BindRefused),
    /// The server is behind a proxy and no bearer token is configured.
    #[error(transparent)]
    Proxy(#[from] ProxyRefused),
    /// The socket failed.
    #[error("HTTP listener failed: {0}")]
    Io(#[from] io::Error),
}

/// Connections the kernel may hold for [`serve_http`] to accept (capped by
/// the system's `somaxconn`). Larger than the standard library's 128, so a
/// burst of connections (say, a flood of half heads being reopened) does
/// not overflow the queue, which would drop the SYNs of other clients and
/// make them wait for a retransmission (a second or more).
pub const LISTEN_BACKLOG: u32 = 1024;

/// Bind `address` (use `config.bind_address` for the default loopback one),
/// refusing a non-loopback address unless a bearer token is configured.
/// The listen backlog is [`LISTEN_BACKLOG`].
pub async fn bind_http(
    address: SocketAddr,
    config: &HttpServerConfig,
) -> Result<TcpListener, HttpServeError> {
    http::check_bind(address.ip(), config.policy.bearer_token.is_some())?;
    let socket = if address.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As the standard library and mio do: rebind at once after a restart.
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    Ok(socket.listen(LISTEN_BACKLOG)?)
}

struct Shared {
    service: Service,
    config: HttpServerConfig,
    calls: Arc<Semaphore>,
    /// The shutdown began: not ready, no new calls.
    draining: AtomicBool,
    /// Set at the drain deadline: answer what still runs, retryably.
    expired: watch::Receiver<bool>,
    /// The listener's address: decides which `Host` names are ours.
    local: SocketAddr,
    connections: Connections,
}

/// The [`ConnectionBudget`] and a way to close each connection it sheds.
struct Connections {
    books: Mutex<Books>,
    /// Signalled when a slot may have come free (a connection closed or
    /// went back to waiting for a head).
    room: Notify,
    /// The budget's clock starts here.
    epoch: Instant,
}

struct Books {
    budget: ConnectionBudget,
    shed: HashMap<ConnectionId, oneshot::Sender<()>>,
}

impl Connections {
    fn new(config: &HttpServerConfig) -> Self {
        let limits = ConnectionLimits {
            max_connections: config.max_connections,
            max_waiting: config.max_waiting_connections,
            pressure_head_ms: millis(config.pressure_header_read_timeout),
        };
        Connections {
            books: Mutex::new(Books {
                budget: ConnectionBudget::new(limits),
                shed: HashMap::new(),
            }),
            room: Notify::new(),
            epoch: Instant::now(),
        }
    }

    /// Milliseconds since `epoch`: the budget's clock.
    fn now(&self) -> u64 {
        millis(self.epoch.elapsed())
    }

    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        // The books stay consistent across a panic elsewhere: every update
        // is a few map operations that cannot panic.
        self.books.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn room(&self) -> Room {
        let now = self.now();
        self.books().budget.room(now)
    }

    /// Counts a new connection; `None` when there is no room after all.
    fn open(&self) -> Option<(ConnectionId, oneshot::Receiver<()>)> {
        let now = self.now();
        let mut books = self.books();
        let (id, shed) = books.budget.open(now)?;
        let (signal, shed_signal) = oneshot::channel();
        books.shed.insert(id, signal);
        books.shed_all(shed);
        Some((id, shed_signal))
    }

    fn first_read_done(&self, id: ConnectionId) {
        let now = self.now();
        let mut books = self.books();
        let shed = books.budget.first_read_done(id, now);
        books.shed_all(shed);
    }

    fn head_received(&self, id: ConnectionId) -> bool {
        self.books().budget.head_received(id)
    }

    fn request_done(&self, id: ConnectionId) {
        let now = self.now();
        let mut books = self.books();
        let shed = books.budget.request_done(id, now);
        books.shed_all(shed);
        drop(books);
        self.room.notify_one();
    }

    fn close(&self, id: ConnectionId) {
        let mut books = self.books();
        books.budget.close(id);
        books.shed.remove(&id);
        drop(books);
        self.room.notify_one();
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Books {
    fn shed_all(&mut self, shed: Vec<ConnectionId>) {
        for id in shed {
            if let Some(signal) = self.shed.remove(&id) {
                // The connection may be closing already; nothing to do then.
                let _ = signal.send(());
            }
        }
    }
}

/// Holds a connection's slot in the books; gives it back when dropped,
/// however the connection task ends.
struct Slot {
    shared: Arc<Shared>,
    id: ConnectionId,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.connections.close(self.id);
    }
}

/// Marks a connection as in a request while alive; when dropped (the
/// answer handed to hyper, or the request abandoned), the connection waits
/// for its next head again.
struct InRequest {
    shared: Arc<Shared>,
    id: ConnectionId,
}

impl Drop for InRequest {
    fn drop(&mut self) {
        self.shared.connections.request_done(self.id);
    }
}

/// Serve `service` (a [`evidence_wire_provider::Provider`] or a
/// [`evidence_wire_provider::Service`]) over HTTP on `listener` until
/// `shutdown` completes.
///
/// `POST /rpc` and `POST /mcp` run the JSON-RPC pipeline (each request body
/// through its own connection of the service's configuration, which is
/// built once and shared); `GET /healthz` and `/readyz` are probes.
pub async fn serve_http<F>(
    listener: TcpListener,
    service: impl IntoService,
    http_config: HttpServerConfig,
    shutdown: F,
) -> Result<(), HttpServeError>
where
    F: Future<Output = ()> + Send,
{
    let service = service.into_service()?;
    let local = listener.local_addr()?;
    // Every series at zero before the first request.
    let checks = service.config().contract.as_ref().map(|contract| {
        contract
            .contract()
            .checks
            .iter()
            .map(|check| check.check_id.clone())
            .collect::<Vec<_>>()
    });
    http_config
        .metrics
        .announce(Transport::Http, checks.iter().flatten().map(String::as_str));
    let authenticated = http_config.policy.bearer_token.is_some();
    http::check_bind(local.ip(), authenticated)?;
    http::check_behind_proxy(http_config.policy.behind_proxy, authenticated)?;
    let (expire, expired) = watch::channel(false);
    let shared = Arc::new(Shared {
        calls: Arc::new(Semaphore::new(http_config.max_concurrent_requests.max(1))),
        draining: AtomicBool::new(false),
        expired,
        service,
        local,
        connections: Connections::new(&http_config),
        config: http_config,
    });
    let (stop, stopped) = watch::channel(false);
    let mut open: JoinSet<()> = JoinSet::new();
    accept_until(&listener, &shared, &mut open, &stopped, shutdown).await?;
    // Draining: keep accepting (probes answer 503, new calls are refused
    // retryably) until the calls in flight are done or the deadline.
    shared.draining.store(true, Ordering::SeqCst);
    let drained = drain(&shared, &expire);
    accept_until(&listener, &shared, &mut open, &stopped, drained).await?;
    drop(listener);
    // Close every connection gracefully: an answer being written is
    // finished, idle keep-alive connections close.
    let _ = stop.send(true);
    let closed = tokio::time::timeout(CLOSE_GRACE, async {
        while open.join_next().await.is_some() {}
    })
    .await;
    if closed.is_err() {
        open.shutdown().await;
    }
    shared.config.validation_log.flush();
    Ok(())
}

/// How long connections may take to close after the drain (to finish
/// writing their last answers) before they are dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How long the calls answered at the drain deadline get to hand over
/// their replies.
const EXPIRE_GRACE: Duration = Duration::from_secs(2);

/// Waits until no call is in flight, or until the drain deadline; then
/// tells the calls still running to answer retryably and waits briefly
/// for their replies.
async fn drain(shared: &Shared, expire: &watch::Sender<bool>) {
    let all = u32::try_from(shared.config.max_concurrent_requests.max(1)).unwrap_or(u32::MAX);
    let idle = || Arc::clone(&shared.calls).acquire_many_owned(all);
    let slots = match tokio::time::timeout(shared.config.drain_timeout, idle()).await {
        Ok(slots) => slots.ok(),
        Err(_) => {
            let _ = expire.send(true);
            tokio::time::timeout(EXPIRE_GRACE, idle())
                .await
                .ok()
                .and_then(Result::ok)
        }
    };
    // A request admitted just before the drain began may not have taken
    // its slot yet: closed (while the slots are still held), the slots
    // refuse it with the retryable draining answer instead of letting a
    // call start that nobody waits for.
    shared.calls.close();
    drop(slots);
}

/// Accepts connections (as the budget allows) and serves each on its own
/// task until `until` completes.
async fn accept_until<U: Future<Output = ()>>(
    listener: &TcpListener,
    shared: &Arc<Shared>,
    open: &mut JoinSet<()>,
    stopped: &watch::Receiver<bool>,
    until: U,
) -> Result<(), HttpServeError> {
    let mut until = std::pin::pin!(until);
    'serve: loop {
        if !wait_for_room(&shared.connections, &mut until, open).await {
            break;
        }
        let stream = tokio::select! {
            () = &mut until => break 'serve,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) if is_transient(&error) => {
                    // Out of file descriptors and the like: wait, then retry.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(error) => return Err(HttpServeError::Io(error)),
            },
            Some(_) = open.join_next(), if !open.is_empty() => continue,
        };
        // Counting it sheds what must give way. The room seen above can
        // only have shrunk if a waiting connection got its head meanwhile;
        // then this one waits for the next slot.
        let (id, shed) = loop {
            if let Some(opened) = shared.connections.open() {
                break opened;
            }
            if !wait_for_room(&shared.connections, &mut until, open).await {
                break 'serve;
            }
        };
        let slot = Slot {
            shared: Arc::clone(shared),
            id,
        };
        open.spawn(serve_connection(stream, slot, shed, stopped.clone()));
    }
    Ok(())
}

/// Waits until the budget has room for a connection (reaping finished
/// connection tasks meanwhile); false when `until` completed first.
async fn wait_for_room<F: Future<Output = ()>>(
    connections: &Connections,
    until: &mut Pin<&mut F>,
    open: &mut JoinSet<()>,
) -> bool {
    loop {
        let retry_at = match connections.room() {
            Room::Now => return true,
            Room::At(at) => Some(connections.epoch + Duration::from_millis(at)),
            Room::AfterClose => None,
        };
        let later = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = until.as_mut() => return false,
            () = later => {}
            () = connections.room.notified() => {}
            Some(_) = open.join_next(), if !open.is_empty() => {}
        }
    }
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

async fn serve_connection(
    stream: TcpStream,
    slot: Slot,
    shed: oneshot::Receiver<()>,
    mut stopped: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let shared = Arc::clone(&slot.shared);
    let id = slot.id;
    let header_read_timeout = shared.config.header_read_timeout;
    let reset = Arc::new(AtomicBool::new(false));
    // Set while a request's body may be left unread (cleared once it is
    // read to its end): the close is then a lingering one.
    let unread = Arc::new(AtomicBool::new(false));
    let stream = StallGuard::new(
        stream,
        shared.config.write_timeout,
        Arc::clone(&reset),
        Arc::clone(&unread),
    );
    let service = service_fn(move |request: Request<Incoming>| {
        let shared = Arc::clone(&shared);
        let unread = Arc::clone(&unread);
        unread.store(!request.body().is_end_stream(), Ordering::Relaxed);
        async move {
            // The head is in: this connection no longer counts as waiting.
            // (False if it was shed meanwhile: its shed signal, which
            // serve_connection heeds first, closes it.)
            let _counted = shared.connections.head_received(id);
            let in_request = InRequest {
                shared: Arc::clone(&shared),
                id,
            };
            // Only JSON-RPC routes are validation-logged (not probes).
            // (A disabled log records nothing: no call record is made.)
            let route = http::route(request.method().as_str(), request.uri().path());
            let log = &shared.config.validation_log;
            let mut call = (log.is_enabled() && matches!(route, http::Route::Call(_)))
                .then(|| log.http_call(request.uri().path()));
            let reply = answer(&shared, request, call.as_mut(), &unread).await;
            if let Some(call) = call {
                let transport = if reply.header("content-type") == Some(http::CONTENT_TYPE_SSE) {
                    Channel::Sse
                } else {
                    Channel::Http
                };
                call.finish(reply.status, transport, &reply.body);
            }
            Ok::<_, Infallible>(to_response(reply, in_request))
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Some(header_read_timeout))
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    // The first poll reads what the peer sent; a complete head is served
    // in that same poll. If that poll found none, the connection waits for
    // its head from now on and may be shed.
    let mut first_read = true;
    let served = std::future::poll_fn(|cx| {
        let polled = connection.as_mut().poll(cx);
        if first_read && polled.is_pending() {
            first_read = false;
            slot.shared.connections.first_read_done(slot.id);
        }
        polled
    });
    tokio::select! {
        // A shed connection is no longer counted: it goes before anything
        // else it might do.
        biased;
        // Shed to make room: close at once, without an answer, with a
        // reset (as nginx's reset_timedout_connection does) so no TIME_WAIT
        // is left behind for a peer that reconnects at once.
        Ok(()) = shed => reset.store(true, Ordering::Relaxed),
        () = async {
            // The guard wait_for returns must not live across the drain below.
            let _ = stopped.wait_for(|stop| *stop).await;
        } => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
        _ = served => {}
    }
    drop(slot);
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

/// The fields of `head` the core reads from request headers, filled in by
/// one walk over `headers` (a handful, at most hyper's header count
/// limit), each name compared with the 13 read: cheaper than 13 lookups,
/// each of which hashes its name (~2.5 k instructions per request,
/// callgrind). Every value is kept for the core to judge repeats; of
/// `Accept`, the first. The `head_by_lookup` test holds it to the lookups.
fn read_headers<'a>(mut head: RequestHead<'a>, headers: &'a HeaderMap) -> RequestHead<'a> {
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
        } else {
            continue;
        };
        field.push(value);
    }
    head
}

/// Answers one request; `unread` is cleared once its body is read to the
/// end (any earlier reply leaves part of it unread).
async fn answer(
    shared: &Shared,
    request: Request<Incoming>,
    mut call: Option<&mut HttpCall>,
    unread: &AtomicBool,
) -> HttpReply {
    let metrics = &shared.config.metrics;
    let lifecycle = if shared.draining.load(Ordering::SeqCst) {
        Lifecycle::Draining
    } else {
        Lifecycle::Serving
    };
    let plan = {
        let head = read_headers(
            RequestHead {
                method: request.method().as_str(),
                path: request.uri().path(),
                server_address: Some(shared.local),
                http_1_0: request.version() == hyper::Version::HTTP_10,
                ..RequestHead::default()
            },
            request.headers(),
        );
        match http::admit_during(&shared.config.policy, &head, lifecycle) {
            Admission::Reply(reply) => {
                let refused_call =
                    matches!(http::route(head.method, head.path), http::Route::Call(_))
                        && reply.status == 503;
                if refused_call {
                    metrics.overload_refused(Transport::Http);
                }
                return reply;
            }
            Admission::Metrics => return http::metrics_reply(metrics.encode().into_bytes()),
            Admission::Call(plan) => plan,
        }
    };
    let Ok(slot) = Arc::clone(&shared.calls).try_acquire_owned() else {
        metrics.overload_refused(Transport::Http);
        if shared.draining.load(Ordering::SeqCst) {
            return http::draining_reply();
        }
        return http::overloaded_reply(shared.config.max_concurrent_requests);
    };
    let mut expired = shared.expired.clone();
    let timeout = shared.config.body_read_timeout;
    let read = tokio::time::timeout(timeout, read_body(request.into_body(), plan.body_limit));
    let body = tokio::select! {
        // The body first: when it is already here (a small request), the
        // drain watch is not polled at all (no waiter registered on it).
        biased;
        read = read => read,
        // The drain deadline passed while the body was still arriving.
        _ = expired.wait_for(|expired| *expired) => {
            metrics.overload_refused(Transport::Http);
            return http::draining_reply();
        }
    };
    let body = match body {
        Err(_) => {
            metrics.frame_dropped(Transport::Http, "body_timeout");
            let reason = format!("it did not arrive within {} ms", timeout.as_millis());
            return http::unreadable_body_reply(&reason);
        }
        Ok(Err(BodyError::TooLarge(limit))) => {
            metrics.frame_dropped(Transport::Http, "body_too_large");
            return http::payload_too_large_reply(limit);
        }
        Ok(Err(BodyError::Read(error))) => {
            metrics.frame_dropped(Transport::Http, "body_unreadable");
            return http::unreadable_body_reply(&error.to_string());
        }
        Ok(Ok(body)) => {
            unread.store(false, Ordering::Relaxed);
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
            if let Ran::Ready(ticket, completion) =
                tasks.run(dispatch(handler, event), exchange.server_mut())
            {
                counts.answered(ticket, error_code(&completion));
                let _ = complete(exchange.server_mut(), ticket, completion);
            }
        }
        if exchange.is_finished() {
            break;
        }
        let finished = tokio::select! {
            finished = tasks.next() => finished,
            // The drain deadline: answer what still runs, retryably.
            _ = expired.wait_for(|expired| *expired) => {
                tasks.cancel_all(CancelReason::Shutdown);
                exchange.expire();
                counts.expired();
                continue;
            }
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

/// The evidence error code a completion carries, if any.
fn error_code(completion: &Completion) -> Option<&str> {
    match completion {
        Completion::Evidence(result) => result.error.as_ref().map(|error| error.code.as_str()),
        Completion::Tool(_) => None,
    }
}

enum BodyError {
    TooLarge(usize),
    Read(hyper::Error),
}

async fn read_body(mut body: Incoming, mut limit: BodyLimit) -> Result<BodyBytes, BodyError> {
    let mut bytes = BodyBytes::default();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        if let Ok(data) = frame.into_data() {
            limit
                .accept(data.len())
                .map_err(|too_large| BodyError::TooLarge(too_large.limit))?;
            bytes.push(data);
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

/// How long a connection closed with part of a request body unread keeps
/// reading (and discarding) before it closes (see [`StallGuard`]).
const LINGER_TIME: Duration = Duration::from_secs(1);
/// How many bytes such a connection discards at most before it closes.
const LINGER_MAX_BYTES: usize = 4 << 20;

/// A connection whose writes fail with `TimedOut` once they have made no
/// progress for `limit` (the peer stopped reading). Reads pass through.
/// When `reset` is set, dropping it closes the socket with a TCP reset
/// (`SO_LINGER` 0) instead of the orderly close.
///
/// When `unread` is set (the last request was answered before its body was
/// read to the end: a `413`, a refusal at the head), shutting it down is a
/// lingering close (RFC 9112 §9.6): the write side is closed first, then
/// what the client still sends is read and discarded until it closes too,
/// for at most [`LINGER_TIME`] and [`LINGER_MAX_BYTES`]. Closing at once
/// with unread bytes makes the kernel send a reset, and a client still
/// writing its body then fails on the write and never reads the answer
/// that says why.
struct StallGuard {
    stream: TcpStream,
    limit: Duration,
    timer: Pin<Box<Sleep>>,
    armed: bool,
    reset: Arc<AtomicBool>,
    unread: Arc<AtomicBool>,
    /// Set once the write side is shut down and the lingering read began.
    linger: Option<Linger>,
}

struct Linger {
    deadline: Pin<Box<Sleep>>,
    discarded: usize,
}

impl StallGuard {
    fn new(
        stream: TcpStream,
        limit: Duration,
        reset: Arc<AtomicBool>,
        unread: Arc<AtomicBool>,
    ) -> Self {
        StallGuard {
            stream,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            armed: false,
            reset,
            unread,
            linger: None,
        }
    }

    /// Reads and discards until the client closes, fails, or the lingering
    /// budget (time or bytes) is spent.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(linger) = self.linger.as_mut() else {
            return Poll::Ready(());
        };
        let mut scratch = [0u8; 8192];
        loop {
            if linger.discarded >= LINGER_MAX_BYTES {
                return Poll::Ready(());
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(()),
                Poll::Ready(Ok(())) => {
                    linger.discarded = linger.discarded.saturating_add(buf.filled().len());
                }
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => return linger.deadline.as_mut().poll(cx),
            }
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

impl Drop for StallGuard {
    fn drop(&mut self) {
        if self.reset.load(Ordering::Relaxed) {
            // Best effort: if it fails, the close is an orderly one.
            let _ = self.stream.set_zero_linger();
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
        if this.linger.is_none() {
            let polled = Pin::new(&mut this.stream).poll_shutdown(cx);
            let shut = std::task::ready!(this.watch(cx, polled));
            if shut.is_err()
                || this.reset.load(Ordering::Relaxed)
                || !this.unread.load(Ordering::Relaxed)
            {
                return Poll::Ready(shut);
            }
            this.linger = Some(Linger {
                deadline: Box::pin(tokio::time::sleep(LINGER_TIME)),
                discarded: 0,
            });
        }
        std::task::ready!(this.poll_linger(cx));
        Poll::Ready(Ok(()))
    }
}

/// A reply body that holds its connection's [`InRequest`] mark until hyper
/// has taken the whole body (or dropped it).
struct Answer {
    body: Full<Bytes>,
    in_request: Option<InRequest>,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.in_request = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

fn to_response(reply: HttpReply, in_request: InRequest) -> Response<Answer> {
    let body = Answer {
        body: Full::new(Bytes::from(reply.body)),
        in_request: Some(in_request),
    };
    let mut response = Response::new(body);
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
            assert_eq!(
                read_headers(RequestHead::default(), &headers),
                head_by_lookup(&headers),
                "{headers:?}"
            );
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
