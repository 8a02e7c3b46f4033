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
//! keep-alive connections; one timer per connection, moved only when it
//! fires, not one per request), a body read timeout, a write timeout against
//! clients that stop reading their answers (no write progress for
//! [`HttpServerConfig::write_timeout`] closes the connection and frees its
//! slot; over HTTP/2, an answer that waits as long for the client's
//! flow-control window), and the body cap of
//! [`HttpPolicy::max_body_bytes`]. A client that disconnects while its
//! call runs gets its handler's work stopped (the future dropped, a
//! blocking call's task aborted) and its permit returned. The async work
//! of a request's call is polled in the request's own task, which waits
//! for it anyway: no task is spawned per request.
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use evidence_wire_http::{
    self as http, BindRefused, ConnectionBudget, ConnectionId, ConnectionLimits, HttpPolicy,
    MetricsAccess, ProxyRefused, Room,
};
use evidence_wire_log::ValidationLog;
use evidence_wire_metrics::Metrics;
use evidence_wire_provider::{IntoService, ServeError};
use futures_lite::future::or;
use http_body_util::Full;
use hyper::Request;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use crate::service::ProviderService;
#[cfg(feature = "tls")]
use crate::tls::TlsFiles;

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
    /// its answers cannot hold a connection slot. Over HTTP/2 it also
    /// bounds how long an answer may wait for the client's flow-control
    /// window to begin: an answer still unsent this long closes the
    /// connection, whatever its other streams do (found within this plus
    /// the longer of this and `header_read_timeout`). A client that
    /// queues answers behind others for longer on a slow link loses the
    /// connection, as an HTTP/1.1 client whose socket did not drain for as
    /// long would.
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
    /// Serve HTTPS with these files (default: plain HTTP). See
    /// [`TlsFiles`]: a renewed certificate is picked up without a restart.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub tls: Option<Arc<TlsFiles>>,
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
            #[cfg(feature = "tls")]
            tls: None,
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

    /// The same settings serving HTTPS with `files` (see [`TlsFiles`]).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn with_tls(mut self, files: Arc<TlsFiles>) -> Self {
        self.tls = Some(files);
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
        let mut f = f.debug_struct("HttpServerConfig");
        f.field("authenticated", &self.policy.bearer_token.is_some())
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
            .field("metrics", &self.policy.metrics);
        #[cfg(feature = "tls")]
        f.field("tls", &self.tls);
        f.finish_non_exhaustive()
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
    /// The requests' rules: the same tower service an application mounts.
    provider: ProviderService,
    connections: Connections,
    /// The HTTPS acceptor's files, when serving TLS.
    #[cfg(feature = "tls")]
    tls: Option<Arc<TlsFiles>>,
}

impl Shared {
    fn config(&self) -> &HttpServerConfig {
        &self.provider.inner().config
    }
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
        self.at(Instant::now())
    }

    /// `instant` on the books' clock.
    fn at(&self, instant: Instant) -> u64 {
        millis(instant.saturating_duration_since(self.epoch))
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

    /// `id`'s request ended at `ended`.
    fn request_done(&self, id: ConnectionId, ended: Instant) {
        let now = self.at(ended);
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
                tracing::info!(
                    target: "evidence_wire::shed",
                    transport = "http",
                    connection = ?id,
                    open = self.shed.len(),
                    "connection shed: the one waiting longest for a request is closed to let a new one in",
                );
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

/// Marks a connection as in a request while alive; when the last one of
/// the connection is dropped (its answer handed to hyper, or the request
/// abandoned), the connection waits for its next head again. (HTTP/2
/// carries several requests at once; HTTP/1.1 one.)
struct InRequest {
    shared: Arc<Shared>,
    id: ConnectionId,
    activity: Arc<Activity>,
}

impl InRequest {
    fn new(shared: Arc<Shared>, id: ConnectionId, activity: Arc<Activity>) -> Self {
        activity.in_progress.fetch_add(1, Ordering::AcqRel);
        InRequest {
            shared,
            id,
            activity,
        }
    }
}

impl Drop for InRequest {
    fn drop(&mut self) {
        // When it ended first, then that it did: the idle watch reads them
        // the other way round.
        // One clock reading for both.
        let ended = Instant::now();
        self.activity
            .idle_since_nanos
            .store(self.activity.nanos_at(ended), Ordering::Release);
        if self.activity.in_progress.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.connections.request_done(self.id, ended);
        }
    }
}

/// A connection's requests in progress and when the last one ended,
/// shared by its requests ([`InRequest`]) and its idle watch
/// ([`idle_for`]). Plain atomics, so that a request costs neither a
/// wake-up nor a timer: the idle watch sleeps on one timer and moves it
/// only when it fires.
struct Activity {
    start: Instant,
    in_progress: AtomicUsize,
    /// Nanoseconds from `start` to when the last request ended (0: none
    /// has; the connection has been idle since it started).
    idle_since_nanos: AtomicU64,
    /// HTTP/2 answers handed to hyper and not yet taken by the connection
    /// ([`HeldReply`]), by the parity of the watch's beat they were handed
    /// over in: one may wait for the client to open its flow-control
    /// window, with no byte waiting on the socket for the write guard to
    /// time.
    replies_held: [AtomicUsize; 2],
    /// The stall watch's beat: advanced by the watch every stall limit
    /// while answers are held. An answer still held two beats after its
    /// own has waited at least one whole beat.
    beat: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            in_progress: AtomicUsize::new(0),
            idle_since_nanos: AtomicU64::new(0),
            replies_held: [AtomicUsize::new(0), AtomicUsize::new(0)],
            beat: AtomicU64::new(0),
        }
    }

    /// The count of answers held that were handed over in a beat of
    /// `beat`'s parity.
    fn held_in(&self, beat: u64) -> &AtomicUsize {
        let [even, odd] = &self.replies_held;
        if beat % 2 == 0 { even } else { odd }
    }

    /// `instant` in nanoseconds from the connection's start.
    fn nanos_at(&self, instant: Instant) -> u64 {
        u64::try_from(instant.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Counts an HTTP/2 answer as held by hyper while alive (from when it is
/// handed over until hyper has put its body into the stream's send
/// buffer, which takes at least one byte of window, or dropped it), in
/// the count of the watch's beat it was handed over in.
struct HeldReply {
    activity: Arc<Activity>,
    beat: u64,
}

impl HeldReply {
    fn new(activity: Arc<Activity>) -> Self {
        // A beat read just before the watch advances it only makes the
        // answer look older by that beat: it is still held for a whole
        // stall limit before it counts as stalled.
        let beat = activity.beat.load(Ordering::Acquire);
        activity.held_in(beat).fetch_add(1, Ordering::AcqRel);
        HeldReply { activity, beat }
    }
}

impl Drop for HeldReply {
    fn drop(&mut self) {
        self.activity
            .held_in(self.beat)
            .fetch_sub(1, Ordering::AcqRel);
    }
}

/// The limits a connection's watch ([`idle_for`]) holds it to.
#[derive(Clone, Copy, Debug)]
struct WatchLimits {
    /// No request in progress for this long: the connection is idle
    /// ([`HttpServerConfig::header_read_timeout`]).
    idle: Duration,
    /// An HTTP/2 answer held this long for the client's window: the
    /// connection is stalled ([`HttpServerConfig::write_timeout`]).
    stall: Duration,
}

/// Why a connection's watch completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Watched {
    /// No request in progress for the idle limit.
    Idle,
    /// An HTTP/2 answer was held for the client's flow-control window for
    /// the stall limit: the client stopped reading it as surely as one
    /// whose socket stopped draining.
    Stalled,
}

/// Completes once the connection has had no request in progress for
/// `limits.idle` (from its start, or since its last answer): an idle
/// connection, one still sending a request head (the first bytes that say
/// which HTTP version it speaks included: this is the head timeout,
/// hyper's own is off), or an HTTP/2 connection with no stream open. Or
/// once an HTTP/2 answer has waited `limits.stall` for the client's
/// flow-control window, whatever the connection's other streams do: while
/// answers are held the timer beats every `limits.stall`, and an answer
/// still held two beats after the one it was handed over in is a stall
/// (found between `limits.stall` and `limits.stall` plus the longer of
/// the two limits after it was handed over).
///
/// One timer: when it fires on a busy connection it is set `limits.idle`
/// on (the request in progress must end, then `limits.idle` pass); on an
/// idle one, to `limits.idle` after the last request ended, and the watch
/// completes if that has passed.
async fn idle_for(activity: &Activity, limits: WatchLimits) -> Watched {
    idle_from(activity, limits, activity.start).await
}

/// As [`idle_for`], with `from` as the earliest time the idle limit counts
/// from (a connection idle since before `from` gets the limit from
/// `from`).
async fn idle_from(activity: &Activity, limits: WatchLimits, from: Instant) -> Watched {
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(from + limits.idle));
    loop {
        sleep.as_mut().await;
        let now = Instant::now();
        let beat = activity.beat.load(Ordering::Acquire);
        let held = |beat| activity.held_in(beat).load(Ordering::Acquire);
        if held(beat) > 0 || held(beat.wrapping_add(1)) > 0 {
            // Answers handed over before the current beat began (the
            // other count) have been held a whole beat: a stall. Else
            // the beat moves on, and that count takes the new answers.
            if held(beat.wrapping_add(1)) > 0 {
                return Watched::Stalled;
            }
            activity.beat.store(beat.wrapping_add(1), Ordering::Release);
            sleep.as_mut().reset(now + limits.stall);
            continue;
        }
        let deadline = if activity.in_progress.load(Ordering::Acquire) > 0 {
            now + limits.idle
        } else {
            let idle_since = activity.idle_since_nanos.load(Ordering::Acquire);
            (activity.start + Duration::from_nanos(idle_since)).max(from) + limits.idle
        };
        if deadline <= now {
            return Watched::Idle;
        }
        sleep.as_mut().reset(deadline);
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
    let local = listener.local_addr()?;
    #[cfg(feature = "tls")]
    let tls = http_config.tls.clone();
    let connections = Connections::new(&http_config);
    let provider = ProviderService::standalone(service, http_config, local)?;
    let shared = Arc::new(Shared {
        provider,
        connections,
        #[cfg(feature = "tls")]
        tls,
    });
    let (stop, stopped) = watch::channel(false);
    let mut open: JoinSet<()> = JoinSet::new();
    accept_until(&listener, &shared, &mut open, &stopped, shutdown).await?;
    // Draining: keep accepting (probes answer 503, new calls are refused
    // retryably) until the calls in flight are done or the deadline.
    let drained = shared.provider.drain();
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
    shared.config().validation_log.flush();
    Ok(())
}

/// How long connections may take to close after the drain (to finish
/// writing their last answers) before they are dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

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
        // The stop first, then a new connection, then a finished one reaped.
        let next = or(
            async {
                until.as_mut().await;
                None
            },
            or(async { Some(Some(listener.accept().await)) }, async {
                reap_one(open).await;
                Some(None)
            }),
        )
        .await;
        let stream = match next {
            None => break 'serve,
            Some(None) => continue,
            Some(Some(Ok((stream, _peer)))) => stream,
            Some(Some(Err(error))) if is_transient(&error) => {
                // Out of file descriptors and the like: wait, then retry.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Some(Some(Err(error))) => return Err(HttpServeError::Io(error)),
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
        // Stopped, else woken by the retry time, a closed connection or a
        // finished connection task.
        let stop = async {
            until.as_mut().await;
            true
        };
        let woken = async {
            or(later, or(connections.room.notified(), reap_one(open))).await;
            false
        };
        if or(stop, woken).await {
            return false;
        }
    }
}

/// Completes when a finished connection task has been reaped; never when
/// none is open.
async fn reap_one(open: &mut JoinSet<()>) {
    if open.join_next().await.is_none() {
        std::future::pending::<()>().await;
    }
}

/// Completes when the connection is shed; never once the shedder is gone.
async fn shed_signal(shed: &mut oneshot::Receiver<()>) {
    if shed.await.is_err() {
        std::future::pending::<()>().await;
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
    stopped: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let shared = Arc::clone(&slot.shared);
    let config = shared.config();
    let reset = Arc::new(AtomicBool::new(false));
    // Set while a request's body may be left unread (cleared once it is
    // read to its end): the close is then a lingering one.
    let unread = Arc::new(AtomicBool::new(false));
    let stream = StallGuard::new(
        stream,
        config.write_timeout,
        Arc::clone(&reset),
        Arc::clone(&unread),
    );
    #[cfg(feature = "tls")]
    if let Some(acceptor) = shared.tls.as_ref().map(|tls| tls.acceptor()) {
        // The handshake is part of the head: it gets the head timeout.
        let handshake = tokio::time::timeout(config.header_read_timeout, acceptor.accept(stream));
        let mut handshake = std::pin::pin!(handshake);
        // As for a plain connection: if the first read finds no complete
        // ClientHello, the connection waits (for its handshake, then its
        // head) from now on and may be shed.
        let mut first_read = true;
        let handshake = std::future::poll_fn(|cx| {
            let polled = handshake.as_mut().poll(cx);
            if first_read && polled.is_pending() {
                first_read = false;
                shared.connections.first_read_done(slot.id);
            }
            polled
        });
        let mut shed = shed;
        // Shed first (biased), else the handshake's outcome.
        let shed_first = async {
            shed_signal(&mut shed).await;
            None
        };
        let tls = match or(shed_first, async { Some(handshake.await) }).await {
            None => {
                reset.store(true, Ordering::Relaxed);
                return;
            }
            Some(Ok(Ok(tls))) => tls,
            // A failed or slow handshake: nothing to answer.
            Some(_) => return,
        };
        // Past the handshake, the connection waits for its head as any
        // other: the same shed signal still closes it.
        serve_stream(tls, slot, shed, stopped, reset, unread).await;
        return;
    }
    serve_stream(stream, slot, shed, stopped, reset, unread).await;
}

/// Serves HTTP/1.1 or HTTP/2 (detected from the first bytes, or from ALPN
/// over TLS) on `io` until the peer closes, the connection is shed, or the
/// server stops.
async fn serve_stream<I>(
    io: I,
    slot: Slot,
    shed: oneshot::Receiver<()>,
    mut stopped: watch::Receiver<bool>,
    reset: Arc<AtomicBool>,
    unread: Arc<AtomicBool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::clone(&slot.shared);
    let id = slot.id;
    let limits = WatchLimits {
        idle: shared.config().header_read_timeout,
        stall: shared.config().write_timeout,
    };
    let activity = Arc::new(Activity::new());
    let requests = Arc::clone(&activity);
    let service = service_fn(move |request: Request<Incoming>| {
        let shared = Arc::clone(&shared);
        let unread = Arc::clone(&unread);
        let requests = Arc::clone(&requests);
        unread.store(!request.body().is_end_stream(), Ordering::Relaxed);
        // HTTP/2 answers wait for the client's flow-control window in
        // hyper, out of the write guard's sight: the watch times them.
        let http2 = request.version() == hyper::Version::HTTP_2;
        async move {
            // The head is in: this connection no longer counts as waiting.
            // (False if it was shed meanwhile: its shed signal, which
            // serve_stream heeds first, closes it.)
            let _counted = shared.connections.head_received(id);
            let in_request = InRequest::new(Arc::clone(&shared), id, requests);
            let response = shared
                .provider
                .inner()
                .respond(request, Some(&unread))
                .await;
            Ok::<_, Infallible>(response.map(|body| Answer {
                body,
                _held: http2.then(|| HeldReply::new(Arc::clone(&in_request.activity))),
                in_request: Some(in_request),
            }))
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No hyper head timer: the idle watch below enforces the same limit
    // (`header_read_timeout` with no request in progress, from the
    // connection's start or its last answer), and hyper's would arm, box
    // and drop a timer for every request on a keep-alive connection.
    builder.http1().header_read_timeout(None).keep_alive(true);
    // More streams than call slots would only be refused `503`.
    let streams =
        u32::try_from(slot.shared.config().max_concurrent_requests.max(1)).unwrap_or(u32::MAX);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(streams);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    // The first poll reads what the peer sent; a complete head is served
    // in that same poll. If that poll found none, the connection waits for
    // its head from now on and may be shed.
    let mut first_read = true;
    let mut served = std::future::poll_fn(|cx| {
        let polled = connection.as_mut().poll(cx);
        if first_read && polled.is_pending() {
            first_read = false;
            slot.shared.connections.first_read_done(slot.id);
        }
        polled
    });
    // In this order (each polled before the next): a shed connection is
    // no longer counted, so it goes before anything else it might do.
    let mut shed = shed;
    let shed_first = async {
        // Shed to make room: close at once, without an answer, with a
        // reset (as nginx's reset_timedout_connection does) so no TIME_WAIT
        // is left behind for a peer that reconnects at once.
        shed_signal(&mut shed).await;
        reset.store(true, Ordering::Relaxed);
        Closing::Now
    };
    let stopping = async {
        // The guard wait_for returns must not live across the drain below.
        let _ = stopped.wait_for(|stop| *stop).await;
        Closing::Stopping
    };
    let idle = async {
        match idle_for(&activity, limits).await {
            Watched::Idle => Closing::Idle,
            // As the write guard's timeout: the connection is closed.
            Watched::Stalled => Closing::Now,
        }
    };
    let ended = async {
        let _ = (&mut served).await;
        Closing::Now
    };
    // The signals are polled only when one of them woke the task (they
    // rarely do), the connection on every poll: polling the three of them
    // for every request on the connection cost ~750 instructions.
    let closing = WokenFirst::new(or(shed_first, or(stopping, idle)), ended).await;
    drop(served);
    match closing {
        Closing::Now => {}
        Closing::Stopping => {
            // Finish what is in progress, take nothing new.
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
        Closing::Idle => {
            // Nothing is in progress: an HTTP/1.1 connection between
            // requests closes at once, an HTTP/2 one flushes its GOAWAY.
            // A first head still arriving (which a graceful shutdown
            // would wait for) gets `IDLE_CLOSE_GRACE` more, then the
            // connection is dropped.
            connection.as_mut().graceful_shutdown();
            let closing_since = Instant::now();
            let idle_before = activity.idle_since_nanos.load(Ordering::Acquire);
            let closed = tokio::time::timeout(IDLE_CLOSE_GRACE, connection.as_mut())
                .await
                .is_ok();
            let requested = activity.in_progress.load(Ordering::Acquire) > 0
                || activity.idle_since_nanos.load(Ordering::Acquire) != idle_before;
            if !closed && requested {
                // A request began meanwhile: it is finished (its answer
                // written) as any other, and the connection is dropped
                // once it has had none in progress for the head timeout
                // again (an HTTP/2 client that never acknowledges the
                // shutdown's PING holds it no longer).
                let finished = async {
                    let _ = connection.as_mut().await;
                };
                let watched = async {
                    let _ = idle_from(&activity, limits, closing_since).await;
                };
                or(finished, watched).await;
            }
        }
    }
    drop(slot);
}

/// Completes with `signals` or `main`, whichever is done first. `signals`
/// goes first on a poll it is polled in, but it is polled only when it
/// woke the task (and on the first poll), through a waker of its own;
/// `main` is polled on every poll. For futures that rarely wake, beside one
/// that wakes all the time: polled with every poll, they would each look
/// at their state and register their waker again, for nothing.
struct WokenFirst<S, M> {
    signals: Pin<Box<S>>,
    main: Pin<Box<M>>,
    wake: Arc<SignalWake>,
    waker: Waker,
}

/// What a [`WokenFirst`]'s `signals` wake: a flag, and the task.
struct SignalWake {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for SignalWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // The flag before the wake: the task, polled, sees it. The task
        // is woken outside the lock (an executor may poll it at once).
        self.woken.store(true, Ordering::Release);
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(task) = task {
            task.wake();
        }
    }
}

impl<S, M> WokenFirst<S, M> {
    fn new(signals: S, main: M) -> Self {
        let wake = Arc::new(SignalWake {
            // Polled on the first poll.
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        WokenFirst {
            signals: Box::pin(signals),
            main: Box::pin(main),
            waker: Waker::from(Arc::clone(&wake)),
            wake,
        }
    }
}

impl<T, S: Future<Output = T>, M: Future<Output = T>> Future for WokenFirst<S, M> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        {
            // The task to wake, kept up to date before the flag is read (a
            // wake from now on reaches this task).
            let mut task = this
                .wake
                .task
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !task.as_ref().is_some_and(|task| task.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        if this.wake.woken.swap(false, Ordering::AcqRel) {
            let mut signals_cx = Context::from_waker(&this.waker);
            if let Poll::Ready(output) = this.signals.as_mut().poll(&mut signals_cx) {
                return Poll::Ready(output);
            }
        }
        this.main.as_mut().poll(cx)
    }
}

/// Why [`serve_stream`] stops serving a connection.
enum Closing {
    /// It ended, or was shed: nothing more to do.
    Now,
    /// The server stops: finish what is in progress.
    Stopping,
    /// The idle watch fired: no request is in progress.
    Idle,
}

/// How long a connection the idle watch closes may take to close (an
/// HTTP/2 GOAWAY to flush; a partial first head a graceful shutdown of
/// HTTP/1.1 would wait for) before it is dropped.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

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
/// has taken the whole body (or dropped it), and over HTTP/2 its
/// [`HeldReply`] mark until hyper drops it.
struct Answer {
    body: Full<Bytes>,
    // Held for its drop.
    _held: Option<HeldReply>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `test` on a current-thread runtime whose clock only moves when
    /// every task waits (tokio's paused time).
    fn paused(test: impl Future<Output = ()>) {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime")
            .block_on(test);
    }

    /// A task waker that counts its wakes.
    struct CountingWake(AtomicUsize);

    impl Wake for CountingWake {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `WokenFirst` against `or`, the straightforward combinator it
    /// replaces in `serve_stream`: the same outcome whichever side is
    /// ready (signals first), but the signals are polled again only once
    /// they woke the task.
    #[test]
    fn signals_are_polled_first_and_only_once_they_woke() {
        let task = Arc::new(CountingWake(AtomicUsize::new(0)));
        let task_waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&task_waker);
        let signal_polls = Arc::new(AtomicUsize::new(0));
        let fired = Arc::new(AtomicBool::new(false));
        let signal_waker: Arc<Mutex<Option<Waker>>> = Arc::default();
        let signals = {
            let (polls, fired, waker) = (
                Arc::clone(&signal_polls),
                Arc::clone(&fired),
                Arc::clone(&signal_waker),
            );
            std::future::poll_fn(move |cx: &mut Context<'_>| {
                polls.fetch_add(1, Ordering::SeqCst);
                *waker.lock().expect("lock") = Some(cx.waker().clone());
                if fired.load(Ordering::SeqCst) {
                    Poll::Ready("signal")
                } else {
                    Poll::Pending
                }
            })
        };
        let main_polls = Arc::new(AtomicUsize::new(0));
        let main_ready = Arc::new(AtomicBool::new(false));
        let main = {
            let (polls, ready) = (Arc::clone(&main_polls), Arc::clone(&main_ready));
            std::future::poll_fn(move |_: &mut Context<'_>| {
                polls.fetch_add(1, Ordering::SeqCst);
                if ready.load(Ordering::SeqCst) {
                    Poll::Ready("main")
                } else {
                    Poll::Pending
                }
            })
        };
        let mut both = std::pin::pin!(WokenFirst::new(signals, main));
        // The first poll polls both.
        assert!(both.as_mut().poll(&mut cx).is_pending());
        assert_eq!(signal_polls.load(Ordering::SeqCst), 1);
        assert_eq!(main_polls.load(Ordering::SeqCst), 1);
        // Later polls (the connection's own wakes) poll the main one only.
        for _ in 0..5 {
            assert!(both.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(signal_polls.load(Ordering::SeqCst), 1);
        assert_eq!(main_polls.load(Ordering::SeqCst), 6);
        // A signal's wake wakes the task, and the next poll polls it first:
        // it wins even when the main one is ready too, as with `or`.
        fired.store(true, Ordering::SeqCst);
        main_ready.store(true, Ordering::SeqCst);
        let woken = signal_waker
            .lock()
            .expect("lock")
            .take()
            .expect("registered");
        woken.wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "the task was woken");
        assert_eq!(both.as_mut().poll(&mut cx), Poll::Ready("signal"));
        assert_eq!(main_polls.load(Ordering::SeqCst), 6);

        // Unwoken signals leave the main one's outcome to it.
        let quiet = std::future::pending::<&str>();
        let mut main_only = std::pin::pin!(WokenFirst::new(quiet, async { "main" }));
        assert_eq!(main_only.as_mut().poll(&mut cx), Poll::Ready("main"));
    }

    /// Watch limits with `idle` as the idle limit and a stall limit of 30 s.
    fn limits(idle: Duration) -> WatchLimits {
        WatchLimits {
            idle,
            stall: Duration::from_secs(30),
        }
    }

    /// Polls `idle` once: true when it completed.
    fn done(idle: Pin<&mut impl Future<Output = Watched>>) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        idle.poll(&mut cx).is_ready()
    }

    #[test]
    fn a_connection_that_never_asks_is_idle_from_its_start() {
        paused(async {
            let activity = Activity::new();
            let limit = Duration::from_secs(10);
            let started = Instant::now();
            idle_for(&activity, limits(limit)).await;
            assert_eq!(started.elapsed(), limit);
        });
    }

    /// The idle close's second watch (`idle_from`): the limit counts from
    /// the later of the floor and the last request's end, and a request in
    /// progress holds it off.
    #[test]
    fn idleness_from_a_floor_counts_from_the_later_of_it_and_the_last_end() {
        paused(async {
            let activity = Arc::new(Activity::new());
            let limit = Duration::from_secs(10);
            // Idle since its start, 30 s ago: from the floor, not the start.
            tokio::time::sleep(Duration::from_secs(30)).await;
            let floor = Instant::now();
            idle_from(&activity, limits(limit), floor).await;
            assert_eq!(floor.elapsed(), limit);
            // A request from 2 s to 5 s after a new floor: 10 s from its end.
            let floor = Instant::now();
            let watch = tokio::spawn({
                let activity = Arc::clone(&activity);
                async move { idle_from(&activity, limits(limit), floor).await }
            });
            tokio::time::sleep(Duration::from_secs(2)).await;
            activity.in_progress.fetch_add(1, Ordering::AcqRel);
            tokio::time::sleep(Duration::from_secs(3)).await;
            activity
                .idle_since_nanos
                .store(activity.nanos_at(Instant::now()), Ordering::Release);
            activity.in_progress.fetch_sub(1, Ordering::AcqRel);
            watch.await.expect("watch");
            assert_eq!(floor.elapsed(), Duration::from_secs(15));
        });
    }

    #[test]
    fn a_request_longer_than_the_limit_is_not_idleness_and_the_limit_runs_from_its_end() {
        paused(async {
            let activity = Arc::new(Activity::new());
            let limit = Duration::from_secs(10);
            let mut idle = std::pin::pin!(idle_for(&activity, limits(limit)));
            // Busy from 3 s to 28 s: the watch fires at 10 s and 20 s and
            // finds the connection busy.
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert!(!done(idle.as_mut()));
            activity.in_progress.fetch_add(1, Ordering::AcqRel);
            for _ in 0..25 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                assert!(!done(idle.as_mut()), "closed while busy");
            }
            activity
                .idle_since_nanos
                .store(activity.nanos_at(Instant::now()), Ordering::Release);
            activity.in_progress.fetch_sub(1, Ordering::AcqRel);
            let ended = Instant::now();
            // Idle from 28 s: not before 38 s, at 38 s.
            tokio::time::sleep(limit - Duration::from_millis(1)).await;
            assert!(!done(idle.as_mut()), "closed before the limit");
            idle.as_mut().await;
            assert_eq!(ended.elapsed(), limit);
        });
    }

    /// An answer handed over as a request of the connection would: in
    /// progress, and held.
    fn hand_over(activity: &Arc<Activity>) -> HeldReply {
        activity.in_progress.fetch_add(1, Ordering::AcqRel);
        HeldReply::new(Arc::clone(activity))
    }

    /// Its end: taken, and no longer in progress.
    fn take(activity: &Activity, held: HeldReply) {
        drop(held);
        activity.in_progress.fetch_sub(1, Ordering::AcqRel);
    }

    /// HTTP/2 answers held for the client's window: answers taken within
    /// the stall limit never make a stall, however long the connection
    /// stays busy with them.
    #[test]
    fn answers_each_taken_within_the_stall_limit_are_no_stall() {
        paused(async {
            let activity = Arc::new(Activity::new());
            let mut watch = std::pin::pin!(idle_for(&activity, STALL_LIMITS));
            // 100 s of answers, one handed over every 12.5 s and each
            // taken 25 s later: two held at a time.
            let mut held = std::collections::VecDeque::new();
            for _ in 0..8 {
                held.push_back(hand_over(&activity));
                tokio::time::sleep(Duration::from_millis(12_500)).await;
                assert!(!done(watch.as_mut()), "a stall while answers are taken");
                if held.len() == 2 {
                    take(&activity, held.pop_front().expect("two held"));
                }
            }
            while let Some(answer) = held.pop_front() {
                take(&activity, answer);
            }
        });
    }

    /// The limits the stall tests watch with: the defaults' 10 s and 30 s.
    const STALL_LIMITS: WatchLimits = WatchLimits {
        idle: Duration::from_secs(10),
        stall: Duration::from_secs(30),
    };

    /// `activity`'s watch under [`STALL_LIMITS`], as a task.
    fn spawn_watch(activity: &Arc<Activity>) -> tokio::task::JoinHandle<Watched> {
        let activity = Arc::clone(activity);
        tokio::spawn(async move { idle_for(&activity, STALL_LIMITS).await })
    }

    /// One answer left unwindowed is a stall, even while the connection's
    /// other answers keep being taken (a client cannot keep a stuck
    /// answer, and its memory, alive by asking for others).
    #[test]
    fn an_answer_held_past_the_stall_limit_is_a_stall_whatever_else_moves() {
        paused(async {
            let activity = Arc::new(Activity::new());
            let watch = spawn_watch(&activity);
            tokio::time::sleep(Duration::from_secs(3)).await;
            let handed = Instant::now();
            let _stuck = hand_over(&activity);
            // Another answer every 5 s, each taken at once.
            while !watch.is_finished() {
                take(&activity, hand_over(&activity));
                assert!(
                    handed.elapsed()
                        <= STALL_LIMITS.stall + STALL_LIMITS.idle.max(STALL_LIMITS.stall),
                    "found late: {:?}",
                    handed.elapsed()
                );
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            assert_eq!(watch.await.expect("watch"), Watched::Stalled);
            let waited = handed.elapsed();
            assert!(waited >= STALL_LIMITS.stall, "{waited:?}");
        });
    }

    /// A held answer that is taken before the stall limit ends the stall
    /// watch: the connection is then judged idle as usual.
    #[test]
    fn a_held_answer_taken_in_time_leaves_the_connection_to_the_idle_watch() {
        paused(async {
            let activity = Arc::new(Activity::new());
            let watch = spawn_watch(&activity);
            let held = hand_over(&activity);
            tokio::time::sleep(Duration::from_secs(25)).await;
            let ended = Instant::now();
            activity
                .idle_since_nanos
                .store(activity.nanos_at(ended), Ordering::Release);
            take(&activity, held);
            assert_eq!(watch.await.expect("watch"), Watched::Idle);
            // Idle 10 s after the end, found on the timer's next firing.
            assert!(
                ended.elapsed() >= STALL_LIMITS.idle,
                "{:?}",
                ended.elapsed()
            );
            assert!(
                ended.elapsed() <= STALL_LIMITS.idle + STALL_LIMITS.stall,
                "{:?}",
                ended.elapsed()
            );
        });
    }
}
