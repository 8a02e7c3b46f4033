//! The HTTP transport's decisions, as pure functions (sans-IO).
//!
//! An HTTP adapter reads a request head, asks [`admit`] whether and how to
//! serve it, reads the body within [`BodyLimit`], runs one [`Exchange`] (the
//! same [`Server`] pipeline as stdio, one state machine per request body)
//! and writes the [`HttpReply`] it gets. Every status code, header value and
//! error body comes from here and from [`crate::error`]; the adapter only
//! moves bytes.
//!
//! Rules, in the order [`admit`] applies them:
//!
//! 1. Routes: `POST /rpc` (Decision Gate style) and `POST /mcp` (MCP
//!    streamable HTTP) run the JSON-RPC pipeline; `GET`/`HEAD /healthz` and
//!    `/readyz` answer `{"status":…}` (`/readyz` is `503
//!    {"status":"draining"}` once the server drains, [`Lifecycle`]);
//!    `GET`/`HEAD /metrics` is the Prometheus scrape when
//!    [`HttpPolicy::metrics`] allows it (`404` when off); another method on
//!    a known path is `405` with `Allow`; an unknown path is `404`. Probes
//!    are answered before any other rule, so an orchestrator always gets
//!    them.
//! 2. Headers that must appear once ([`SINGLETON_HEADERS`]: `Host`,
//!    `Origin`, `Authorization`, `Content-Length`, `MCP-Protocol-Version`,
//!    `Mcp-Session-Id`): sent more than once, the request is `400
//!    INVALID_ENVELOPE` naming the header, before any of them is read (two
//!    values would let a proxy and this server each check a different one).
//!    The adapter passes every value it received ([`HeaderField::from_values`]);
//!    an HTTP parser may already refuse or merge some repeats itself (hyper
//!    refuses two different `Content-Length`s and merges equal ones, which
//!    RFC 9110 §8.6 allows).
//! 3. Proxies (`proxied`): a request carrying `Forwarded`,
//!    `X-Forwarded-For`, `X-Forwarded-Host` or `X-Real-IP`, or sent as
//!    HTTP/1.0 ([`RequestHead::http_1_0`]: what nginx's `proxy_pass` speaks
//!    to its upstream in its stock configuration, which adds no forwarding
//!    header and rewrites `Host` to the upstream's own address), came
//!    through a proxy, from anywhere the proxy serves; behind a proxy on
//!    the same host every request arrives from loopback, so without a
//!    bearer token such a request is refused `403 FORBIDDEN` (nothing may
//!    trust loopback then). This is a guard, not the boundary: a forwarder
//!    on this host that speaks HTTP/1.1, adds no forwarding header and
//!    rewrites `Host` to this server's address is indistinguishable from a
//!    local client; the boundary is a bearer token whenever anything else
//!    on the host can reach the port (`spec/guides/deployment.md`).
//!    With [`HttpPolicy::behind_proxy`] (which needs a bearer token: see
//!    [`check_behind_proxy`]) the proxy is trusted to say what the client
//!    sent: the `Host` checked below is the forwarded one
//!    (`forwarded_host`: `X-Forwarded-Host`, else `Forwarded`'s `host=`,
//!    else `Host`; both forwarded ones present must agree, and each is read
//!    once), checked against [`HttpPolicy::allowed_hosts`] only (the bind
//!    address says nothing about the names the proxy serves), and a
//!    loopback `Origin` is not implicitly allowed (it names the client's
//!    machine, not this one).
//! 4. `Host` (DNS-rebinding defence, as the MCP transport spec recommends):
//!    on a server bound to a loopback address ([`RequestHead::server_address`]),
//!    `Host` must name that server, i.e. `localhost`, `127.0.0.0/8` or `[::1]`
//!    with the bound port (no port means 80), or be one of
//!    [`HttpPolicy::allowed_hosts`]; on any other bind it is checked only
//!    against a non-empty `allowed_hosts`. Otherwise `421 Misdirected
//!    Request` with the canonical `FORBIDDEN` body (`misdirected_reply`):
//!    a page whose DNS name was rebound to 127.0.0.1 still sends its own
//!    name as `Host`, and cannot change it.
//! 5. `Origin`: absent is accepted (non-browser clients); present, it must be
//!    on the allow-list or, when [`HttpPolicy::allow_loopback_origins`] is set,
//!    a loopback origin (`http://localhost:*`, `127.0.0.0/8`, `[::1]`).
//!    Otherwise `403 FORBIDDEN` (DNS-rebinding defence the MCP spec asks for).
//! 6. Bearer authentication when a token is configured: the header is
//!    compared in constant time (both sides hashed with SHA-256, digests
//!    compared with [`subtle`]); failure is `401 UNAUTHENTICATED` with
//!    `WWW-Authenticate: Bearer`. `/metrics` stops here with
//!    [`Admission::Metrics`]; with [`MetricsAccess::Public`] it does not
//!    ask for the token (rules 2 to 5 still apply).
//! 7. Draining ([`Lifecycle::Draining`]): a call is `503 OVERLOADED` with
//!    `Retry-After` ([`draining_reply`]); a balancer retries it elsewhere.
//! 8. MCP headers: `Mcp-Session-Id` must be visible ASCII (it is echoed on
//!    the reply; this server keeps no sessions), `MCP-Protocol-Version` must
//!    name a supported version (and selects the MCP dialect on `/rpc`).
//! 9. A declared `Content-Length` over the body limit is `413
//!    PAYLOAD_TOO_LARGE` before any byte of the body is read; the adapter
//!    also counts bytes while reading ([`BodyLimit`]).
//!
//! Replies: no JSON-RPC answer (notifications, responses) is `202` with an
//! empty body; on `/rpc` an error answer gets the canonical row's HTTP
//! status; on `/mcp` an error answering an identified request is `200`
//! (the MCP SDK clients treat any other status as a transport failure and
//! never read the JSON-RPC error), while unreadable messages keep their row's
//! status. `Accept: text/event-stream` without `application/json` gets the
//! answer as one SSE event (`encode_sse_event`).
//!
//! Limits: the body limit is [`HttpPolicy::max_body_bytes`]; header values
//! are inspected, never copied, except a session id (at most
//! [`MAX_SESSION_ID_BYTES`]). Connection-level limits (how many connections,
//! how many may still be sending their request head, which one to shed) are
//! decided by [`ConnectionBudget`]; the adapter only opens and closes sockets.
//!
//! The client side has one rule here: an HTTP answer to one request must be
//! one JSON-RPC response, not a batch ([`check_single_answer`]).

use alloc::borrow::ToOwned;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::net::{IpAddr, SocketAddr};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::dialect::McpRevision;
use crate::error::CanonicalError;
use crate::evidence::CONTENT_TYPE_JSON;
use crate::evidence::EvidenceResult;
use crate::frame::Limits;
use crate::server::{
    Dialect, DialectChoice, MessageHeaders, Outcome, RespondError, Server, ServerConfig,
    ServerEvent, Ticket, ToolFailure,
};

/// Path of the Decision Gate style JSON-RPC endpoint.
pub const RPC_PATH: &str = "/rpc";
/// Path of the MCP streamable-HTTP endpoint.
pub const MCP_PATH: &str = "/mcp";
/// Path of the liveness probe.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Path of the readiness probe.
pub const READYZ_PATH: &str = "/readyz";
/// Path of the Prometheus scrape ([`HttpPolicy::metrics`]).
pub const METRICS_PATH: &str = "/metrics";
/// Media type of the metrics text (OpenMetrics, which Prometheus reads).
pub const CONTENT_TYPE_METRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Seconds a client is told to wait (`Retry-After`) before sending a
/// refused call again (overload, shutdown).
pub const RETRY_AFTER_SECONDS: u32 = 1;
/// Longest `Mcp-Session-Id` accepted (and echoed).
pub const MAX_SESSION_ID_BYTES: usize = 256;
/// Realm named in `WWW-Authenticate`.
pub const AUTH_REALM: &str = "evidence-wire";

/// Media type of server-sent events.
pub const CONTENT_TYPE_SSE: &str = "text/event-stream";

/// Which JSON-RPC endpoint a request reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /rpc`: statuses follow the canonical error table.
    Rpc,
    /// `POST /mcp`: MCP streamable HTTP, always the MCP dialect.
    Mcp,
}

/// Where a request goes, from its method and path alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// A JSON-RPC call.
    Call(Endpoint),
    /// The liveness probe.
    Health,
    /// The readiness probe.
    Ready,
    /// The metrics scrape.
    Metrics,
    /// A known path with a method it does not serve: `405` with this `Allow`.
    MethodNotAllowed {
        /// The value of the `Allow` header.
        allow: &'static str,
    },
    /// No such path: `404`.
    NotFound,
}

/// Routes a request by method and path (the path without its query string).
/// Methods are case-sensitive, as HTTP says.
pub fn route(method: &str, path: &str) -> Route {
    let call = |endpoint| match method {
        "POST" => Route::Call(endpoint),
        _ => Route::MethodNotAllowed { allow: "POST" },
    };
    let probe = |route| match method {
        "GET" | "HEAD" => route,
        _ => Route::MethodNotAllowed { allow: "GET, HEAD" },
    };
    match path {
        RPC_PATH => call(Endpoint::Rpc),
        MCP_PATH => call(Endpoint::Mcp),
        HEALTHZ_PATH => probe(Route::Health),
        READYZ_PATH => probe(Route::Ready),
        METRICS_PATH => probe(Route::Metrics),
        _ => Route::NotFound,
    }
}

/// The HTTP status a canonical error is answered with (the table's column).
pub const fn status_for(error: CanonicalError) -> u16 {
    error.http_status()
}

/// What the HTTP side enforces, independent of the JSON-RPC server.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpPolicy {
    /// The bearer token callers must present; `None` turns authentication off.
    pub bearer_token: Option<String>,
    /// Origins allowed besides loopback ones, e.g. `https://gate.example.com`
    /// (scheme, host and port; compared ignoring ASCII case).
    pub allowed_origins: Vec<String>,
    /// Accept `Origin`s naming a loopback host (default true).
    pub allow_loopback_origins: bool,
    /// `Host` values accepted besides the names of a loopback bind address
    /// (`localhost`, `127.0.0.0/8` and `[::1]` with the bound port), e.g.
    /// `gate.internal:8080`; compared whole, ignoring ASCII case, so an
    /// entry without a port matches only a `Host` without one (the default
    /// port). On a non-loopback bind, a non-empty list is the only `Host`s
    /// accepted. Empty by default.
    pub allowed_hosts: Vec<String>,
    /// Most bytes a request body may hold (default 1 MiB).
    pub max_body_bytes: usize,
    /// The server runs behind a trusted reverse proxy (default false): the
    /// `Host` checked is the one the proxy forwards (`forwarded_host`),
    /// against [`HttpPolicy::allowed_hosts`] only, and loopback origins
    /// are not implicitly allowed. Needs a bearer token
    /// ([`check_behind_proxy`]).
    pub behind_proxy: bool,
    /// Who may read `GET /metrics` (default: nobody, it is `404`).
    pub metrics: MetricsAccess,
}

/// Who may read `GET /metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricsAccess {
    /// Not served: `404` (the default).
    #[default]
    Off,
    /// Served to callers that pass the bearer check like any call.
    Authenticated,
    /// Served without the bearer token (the `Host`, `Origin` and proxy
    /// rules still apply): for a scraper on a private network.
    Public,
}

/// Where an HTTP server is in its life, as [`admit_during`] sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lifecycle {
    /// Taking calls.
    #[default]
    Serving,
    /// Shutting down: not ready, no new calls; those in flight finish.
    Draining,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        HttpPolicy {
            bearer_token: None,
            allowed_origins: Vec::new(),
            allow_loopback_origins: true,
            allowed_hosts: Vec::new(),
            max_body_bytes: Limits::default().max_body_bytes,
            behind_proxy: false,
            metrics: MetricsAccess::Off,
        }
    }
}

/// Headers a request may carry at most once; a repeat is refused with `400`
/// by [`admit`].
pub const SINGLETON_HEADERS: [&str; 6] = [
    "Host",
    "Origin",
    "Authorization",
    "Content-Length",
    "MCP-Protocol-Version",
    "Mcp-Session-Id",
];

/// One header field of a request head as received: absent, sent once (its
/// raw value; HTTP allows non-UTF-8), or sent more than once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeaderField<'a> {
    /// Not sent.
    #[default]
    Absent,
    /// Sent once, with this value.
    One(&'a [u8]),
    /// Sent this many times (2 or more); [`admit`] refuses the request.
    Repeated(usize),
}

impl<'a> HeaderField<'a> {
    /// The field from every value the request carried for it, in order
    /// (an adapter passes them all and lets [`admit`] judge repeats).
    pub fn from_values<I: IntoIterator<Item = &'a [u8]>>(values: I) -> Self {
        let mut values = values.into_iter();
        let Some(first) = values.next() else {
            return HeaderField::Absent;
        };
        match values.count() {
            0 => HeaderField::One(first),
            more => HeaderField::Repeated(more.saturating_add(1)),
        }
    }

    /// The field after one more value of it (for an adapter that walks
    /// the request's headers once instead of looking each name up):
    /// absent becomes sent once, once becomes repeated.
    pub fn push(&mut self, value: &'a [u8]) {
        *self = match *self {
            HeaderField::Absent => HeaderField::One(value),
            HeaderField::One(_) => HeaderField::Repeated(2),
            HeaderField::Repeated(count) => HeaderField::Repeated(count.saturating_add(1)),
        };
    }

    /// The value when sent exactly once.
    pub fn value(self) -> Option<&'a [u8]> {
        match self {
            HeaderField::One(value) => Some(value),
            HeaderField::Absent | HeaderField::Repeated(_) => None,
        }
    }
}

impl<'a> From<Option<&'a [u8]>> for HeaderField<'a> {
    fn from(value: Option<&'a [u8]>) -> Self {
        value.map_or(HeaderField::Absent, HeaderField::One)
    }
}

/// The parts of a request head the decisions look at. Header values are
/// raw bytes (HTTP allows non-UTF-8 values). Headers that must appear once
/// are [`HeaderField`]s built from every value received; `Accept` may be
/// repeated (pass the first value; `None` means absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestHead<'a> {
    /// The method, e.g. `POST`.
    pub method: &'a str,
    /// The path, without the query string.
    pub path: &'a str,
    /// `Host`.
    pub host: HeaderField<'a>,
    /// `Authorization`.
    pub authorization: HeaderField<'a>,
    /// `Origin`.
    pub origin: HeaderField<'a>,
    /// `Content-Length`.
    pub content_length: HeaderField<'a>,
    /// `Accept` (the first value).
    pub accept: Option<&'a [u8]>,
    /// `MCP-Protocol-Version`.
    pub protocol_version: HeaderField<'a>,
    /// `Mcp-Session-Id`.
    pub session_id: HeaderField<'a>,
    /// `Mcp-Method` (revision 2026-07-28: the JSON-RPC method of the body).
    pub mcp_method: HeaderField<'a>,
    /// `Mcp-Name` (revision 2026-07-28: the tool name or resource URI of the body).
    pub mcp_name: HeaderField<'a>,
    /// `Forwarded` (RFC 7239), set by a proxy.
    pub forwarded: HeaderField<'a>,
    /// `X-Forwarded-For`, set by a proxy.
    pub x_forwarded_for: HeaderField<'a>,
    /// `X-Forwarded-Host`, set by a proxy.
    pub x_forwarded_host: HeaderField<'a>,
    /// `X-Real-IP`, set by a proxy.
    pub x_real_ip: HeaderField<'a>,
    /// The request came as HTTP/1.0: clients of this protocol speak
    /// HTTP/1.1 or later, and stock reverse proxies (nginx's `proxy_pass`)
    /// speak 1.0 to their upstream, so it counts as forwarded.
    pub http_1_0: bool,
    /// The address the server listens on (the listener's local address),
    /// which decides the `Host` names that are its own; `None` when
    /// unknown (then `Host` is checked only against
    /// [`HttpPolicy::allowed_hosts`]).
    pub server_address: Option<SocketAddr>,
}

impl RequestHead<'_> {
    /// The first header of [`SINGLETON_HEADERS`] sent more than once, and how often.
    pub fn repeated_singleton(&self) -> Option<(&'static str, usize)> {
        let [
            host,
            origin,
            authorization,
            content_length,
            protocol_version,
            session_id,
        ] = SINGLETON_HEADERS;
        [
            (host, self.host),
            (origin, self.origin),
            (authorization, self.authorization),
            (content_length, self.content_length),
            (protocol_version, self.protocol_version),
            (session_id, self.session_id),
        ]
        .into_iter()
        .find_map(|(name, field)| match field {
            HeaderField::Repeated(count) => Some((name, count)),
            HeaderField::Absent | HeaderField::One(_) => None,
        })
    }
}

/// A complete HTTP answer: status, headers and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpReply {
    /// The status code.
    pub status: u16,
    /// Headers besides `Content-Length` (the adapter sets that one).
    pub headers: Vec<(&'static str, String)>,
    /// The body; empty for `202` and `HEAD`.
    pub body: Vec<u8>,
}

impl HttpReply {
    fn json(status: u16, body: Vec<u8>) -> Self {
        HttpReply {
            status,
            headers: alloc::vec![("content-type", CONTENT_TYPE_JSON.to_owned())],
            body,
        }
    }

    fn error(status: u16, error: CanonicalError, detail: &str) -> Self {
        HttpReply::json(
            status,
            crate::envelope::encode_error(None, error, Some(detail)),
        )
    }

    /// The value of header `name` (lower case), if set.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// `200 {"status":"ok"}`: the process is alive.
pub fn health_reply() -> HttpReply {
    HttpReply::json(200, br#"{"status":"ok"}"#.to_vec())
}

/// `200 {"status":"ready"}`: the server accepts calls.
pub(crate) fn ready_reply() -> HttpReply {
    HttpReply::json(200, br#"{"status":"ready"}"#.to_vec())
}

/// `503 {"status":"draining"}`: the server is shutting down; a balancer
/// stops routing to it.
pub(crate) fn not_ready_reply() -> HttpReply {
    HttpReply::json(503, br#"{"status":"draining"}"#.to_vec())
}

/// `503` with the canonical `OVERLOADED` error and `Retry-After`: the
/// server is shutting down and takes no new calls (retryable: a balancer
/// or the client sends it to another instance).
pub fn draining_reply() -> HttpReply {
    let detail = "the server is shutting down and takes no new calls; send the call again, to another instance or after the restart";
    let mut reply = HttpReply::error(
        status_for(CanonicalError::Overloaded),
        CanonicalError::Overloaded,
        detail,
    );
    reply
        .headers
        .push(("retry-after", RETRY_AFTER_SECONDS.to_string()));
    reply
}

/// `200` with the metrics text (`text`, rendered by the adapter's
/// registry) as [`CONTENT_TYPE_METRICS`].
pub fn metrics_reply(text: Vec<u8>) -> HttpReply {
    HttpReply {
        status: 200,
        headers: alloc::vec![("content-type", CONTENT_TYPE_METRICS.to_owned())],
        body: text,
    }
}

/// `403 FORBIDDEN` for a request that came through a proxy (it carries
/// `header`, or came as `HTTP/1.0`) to a server without a bearer token.
pub(crate) fn proxied_unauthenticated_reply(header: &str) -> HttpReply {
    let sign = match header {
        "HTTP/1.0" => "it came as HTTP/1.0, which stock reverse proxies such as nginx's proxy_pass speak to their upstream".to_owned(),
        header => format!("it carries {header}"),
    };
    let detail = format!(
        "this request came through a proxy ({sign}) and this server has no bearer token; behind a proxy every request looks local, so configure [server.auth] with a bearer token (and [server] behind_proxy = true); a local client speaks HTTP/1.1 without forwarding headers"
    );
    HttpReply::error(
        status_for(CanonicalError::Forbidden),
        CanonicalError::Forbidden,
        &detail,
    )
}

/// `404` for a path that serves nothing, as a JSON-RPC `METHOD_NOT_FOUND` body.
pub(crate) fn not_found_reply(path: &str) -> HttpReply {
    let detail = format!(
        "nothing is served at {path:?}; POST JSON-RPC to {RPC_PATH} or {MCP_PATH}, GET {HEALTHZ_PATH} or {READYZ_PATH}"
    );
    HttpReply::error(404, CanonicalError::MethodNotFound, &detail)
}

/// `405` with `Allow`, as a JSON-RPC `INVALID_ENVELOPE` body.
pub(crate) fn method_not_allowed_reply(method: &str, path: &str, allow: &'static str) -> HttpReply {
    let detail = format!("{method} is not served at {path:?}; use {allow}");
    let mut reply = HttpReply::error(405, CanonicalError::InvalidEnvelope, &detail);
    reply.headers.push(("allow", allow.to_owned()));
    reply
}

/// `413` with the canonical `PAYLOAD_TOO_LARGE` JSON-RPC error (never plain text).
pub fn payload_too_large_reply(limit: usize) -> HttpReply {
    let detail = format!(
        "the request body is larger than the limit of {limit} bytes; send a smaller message or raise the server's max_body_bytes"
    );
    HttpReply::error(
        status_for(CanonicalError::PayloadTooLarge),
        CanonicalError::PayloadTooLarge,
        &detail,
    )
}

/// `503` with the canonical `OVERLOADED` error and `Retry-After: 1`.
pub fn overloaded_reply(limit: usize) -> HttpReply {
    let detail = format!("{limit} requests are already being served (the limit); retry shortly");
    let mut reply = HttpReply::error(
        status_for(CanonicalError::Overloaded),
        CanonicalError::Overloaded,
        &detail,
    );
    reply
        .headers
        .push(("retry-after", RETRY_AFTER_SECONDS.to_string()));
    reply
}

/// `400` with the canonical `PARSE_ERROR` when the body could not be read
/// (the connection broke or timed out mid-body).
pub fn unreadable_body_reply(reason: &str) -> HttpReply {
    let detail = format!("the request body could not be read: {reason}");
    HttpReply::error(
        status_for(CanonicalError::ParseError),
        CanonicalError::ParseError,
        &detail,
    )
}

/// `400 INVALID_ENVELOPE` for a header that must appear once but was sent
/// `count` times.
pub(crate) fn repeated_header_reply(name: &str, count: usize) -> HttpReply {
    let detail = format!(
        "the {name} header appears {count} times; it must appear at most once, so send it once"
    );
    HttpReply::error(400, CanonicalError::InvalidEnvelope, &detail)
}

/// `421 Misdirected Request` with the canonical `FORBIDDEN` body: `Host`
/// (absent when `None`) names no host this server answers for.
pub(crate) fn misdirected_reply(host: Option<&[u8]>) -> HttpReply {
    let detail = match host {
        Some(host) => format!(
            "this server does not answer for Host {:?} (DNS-rebinding protection); use the address it listens on (127.0.0.1:PORT, localhost:PORT or [::1]:PORT on a loopback bind), or add the name to the server's allowed_hosts",
            String::from_utf8_lossy(host)
        ),
        None => "the request has no Host header; send one naming the address this server listens on, or a name in its allowed_hosts".to_owned(),
    };
    HttpReply::error(421, CanonicalError::Forbidden, &detail)
}

/// The outcome of checking an `Authorization` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BearerCheck {
    /// No token is configured: everyone may call.
    NotRequired,
    /// The right token was presented.
    Accepted,
    /// No `Authorization: Bearer …` header was sent.
    Missing,
    /// A bearer token was sent, and it is wrong (or the header is malformed).
    Invalid,
}

impl BearerCheck {
    /// True when the request may go on.
    pub fn is_allowed(self) -> bool {
        matches!(self, BearerCheck::NotRequired | BearerCheck::Accepted)
    }
}

/// Compares two secrets in time independent of where they differ and of
/// their lengths: both are hashed with SHA-256 and the digests compared with
/// [`subtle`].
pub(crate) fn secrets_equal(expected: &[u8], presented: &[u8]) -> bool {
    let expected = Sha256::digest(expected);
    let presented = Sha256::digest(presented);
    bool::from(expected.as_slice().ct_eq(presented.as_slice()))
}

/// Checks `Authorization` against the configured token: the scheme
/// `Bearer` (any case), at least one space, then the token.
pub(crate) fn check_bearer(expected: Option<&str>, authorization: Option<&[u8]>) -> BearerCheck {
    let Some(expected) = expected else {
        return BearerCheck::NotRequired;
    };
    let Some(header) = authorization else {
        return BearerCheck::Missing;
    };
    let header = trim_ascii(header);
    let (scheme, rest) = match header.iter().position(|byte| *byte == b' ') {
        Some(space) => (header.get(..space), header.get(space..)),
        None => (Some(header), None),
    };
    if !scheme.is_some_and(|scheme| scheme.eq_ignore_ascii_case(b"bearer")) {
        return BearerCheck::Missing;
    }
    let token = trim_ascii(rest.unwrap_or_default());
    if token.is_empty() {
        return BearerCheck::Missing;
    }
    if secrets_equal(expected.as_bytes(), token) {
        BearerCheck::Accepted
    } else {
        BearerCheck::Invalid
    }
}

/// `401` with `WWW-Authenticate: Bearer realm=…` (plus `error="invalid_token"`
/// when a wrong token was sent, as RFC 6750 says).
pub(crate) fn unauthenticated_reply(check: BearerCheck) -> HttpReply {
    let (challenge, detail) = match check {
        BearerCheck::Invalid => (
            format!(r#"Bearer realm="{AUTH_REALM}", error="invalid_token""#),
            "the bearer token is not valid; send the configured token as `Authorization: Bearer <token>`",
        ),
        _ => (
            format!(r#"Bearer realm="{AUTH_REALM}""#),
            "this server requires authentication; send `Authorization: Bearer <token>`",
        ),
    };
    let mut reply = HttpReply::error(
        status_for(CanonicalError::Unauthenticated),
        CanonicalError::Unauthenticated,
        detail,
    );
    reply.headers.push(("www-authenticate", challenge));
    reply
}

/// True when `origin` may call: absent, on the allow-list (ASCII case
/// ignored, a trailing `/` ignored), or a loopback origin when allowed.
pub(crate) fn origin_allowed(policy: &HttpPolicy, origin: Option<&[u8]>) -> bool {
    let Some(origin) = origin else {
        return true;
    };
    let origin = trim_ascii(origin);
    let origin = origin.strip_suffix(b"/").unwrap_or(origin);
    if policy.allowed_origins.iter().any(|allowed| {
        let allowed = allowed.as_bytes();
        let allowed = allowed.strip_suffix(b"/").unwrap_or(allowed);
        allowed.eq_ignore_ascii_case(origin)
    }) {
        return true;
    }
    policy.allow_loopback_origins && is_loopback_origin(origin)
}

/// True for `http(s)://localhost[:port]`, `http(s)://127.x.y.z[:port]` and
/// `http(s)://[::1][:port]`.
pub(crate) fn is_loopback_origin(origin: &[u8]) -> bool {
    let Ok(origin) = core::str::from_utf8(origin) else {
        return false;
    };
    let lower = origin.to_ascii_lowercase();
    let Some(authority) = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
    else {
        return false;
    };
    if authority.contains(['/', '@', '?', '#']) {
        return false;
    }
    let host = if let Some(rest) = authority.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return false;
        };
        if !(after.is_empty() || is_port(after)) {
            return false;
        }
        host
    } else {
        match authority.split_once(':') {
            Some((host, port)) if is_port(&format!(":{port}")) => host,
            Some(_) => return false,
            None => authority,
        }
    };
    if host == "localhost" {
        return true;
    }
    host.parse::<IpAddr>().is_ok_and(is_loopback_ip)
}

fn is_port(text: &str) -> bool {
    text.strip_prefix(':').is_some_and(|digits| {
        !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

/// True when `host` (the `Host` header, `None` when absent) may reach a
/// server listening on `server` (see rule 3 of the module docs): it equals
/// an entry of [`HttpPolicy::allowed_hosts`] (ASCII case ignored), or the
/// server is bound to a loopback address and `host` names a loopback host
/// (`localhost`, `127.0.0.0/8`, `[::1]`) with the bound port (no port means
/// 80). On a non-loopback or unknown bind, any `Host` passes while
/// `allowed_hosts` is empty.
pub(crate) fn host_allowed(
    policy: &HttpPolicy,
    server: Option<SocketAddr>,
    host: Option<&[u8]>,
) -> bool {
    let host = host.map(trim_ascii);
    if let Some(host) = host {
        if policy
            .allowed_hosts
            .iter()
            .any(|allowed| allowed.as_bytes().eq_ignore_ascii_case(host))
        {
            return true;
        }
    }
    match server {
        Some(server) if is_loopback_ip(server.ip()) => {
            host.is_some_and(|host| names_loopback(host, server.port()))
        }
        _ => policy.allowed_hosts.is_empty(),
    }
}

/// True when the `Host` value `host` is `localhost`, a loopback IPv4
/// address or `[::1]`, with port `port` (a missing port is 80).
fn names_loopback(host: &[u8], port: u16) -> bool {
    let Ok(host) = core::str::from_utf8(host) else {
        return false;
    };
    let (loopback, port_part) = if let Some(rest) = host.strip_prefix('[') {
        let Some((address, after)) = rest.split_once(']') else {
            return false;
        };
        let loopback = address
            .parse::<core::net::Ipv6Addr>()
            .is_ok_and(|address| is_loopback_ip(IpAddr::V6(address)));
        (loopback, after)
    } else {
        let at = host.find(':').unwrap_or(host.len());
        let name = host.get(..at).unwrap_or_default();
        let loopback = name.eq_ignore_ascii_case("localhost")
            || name
                .parse::<core::net::Ipv4Addr>()
                .is_ok_and(|address| address.is_loopback());
        (loopback, host.get(at..).unwrap_or_default())
    };
    let named_port = if port_part.is_empty() {
        Some(80)
    } else if is_port(port_part) {
        port_part
            .get(1..)
            .and_then(|digits| digits.parse::<u16>().ok())
    } else {
        None
    };
    loopback && named_port == Some(port)
}

/// True for loopback addresses, IPv4-mapped IPv6 ones included.
pub(crate) fn is_loopback_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Why a listening address was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "refusing to serve HTTP on {address}: it is not a loopback address and no bearer token is configured; set a bearer token, or bind 127.0.0.1"
)]
pub struct BindRefused {
    /// The refused address.
    pub address: IpAddr,
}

/// The loopback-bind rule: a non-loopback address needs authentication.
pub fn check_bind(address: IpAddr, authenticated: bool) -> Result<(), BindRefused> {
    if authenticated || is_loopback_ip(address) {
        Ok(())
    } else {
        Err(BindRefused { address })
    }
}

/// Why a server behind a proxy was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "refusing to serve behind a proxy without a bearer token: behind a proxy every request arrives from the proxy, so nothing tells a local caller from the whole network; configure a bearer token, or drop behind_proxy"
)]
pub struct ProxyRefused;

/// The behind-proxy rule: a server behind a proxy needs authentication.
pub fn check_behind_proxy(behind_proxy: bool, authenticated: bool) -> Result<(), ProxyRefused> {
    if behind_proxy && !authenticated {
        Err(ProxyRefused)
    } else {
        Ok(())
    }
}

/// What marks a request as forwarded (a proxy header it carries, or
/// `HTTP/1.0`), if anything: then it came through a proxy.
pub(crate) fn proxied(head: &RequestHead<'_>) -> Option<&'static str> {
    [
        ("Forwarded", head.forwarded),
        ("X-Forwarded-For", head.x_forwarded_for),
        ("X-Forwarded-Host", head.x_forwarded_host),
        ("X-Real-IP", head.x_real_ip),
    ]
    .into_iter()
    .find(|(_, field)| *field != HeaderField::Absent)
    .map(|(name, _)| name)
    .or(head.http_1_0.then_some("HTTP/1.0"))
}

/// Why the host a proxy forwarded cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ForwardedHostError {
    /// A proxy header sent more than once.
    Repeated(&'static str, usize),
    /// `Forwarded`'s element names `host=` more than once.
    DuplicateHost,
    /// `X-Forwarded-Host` and `Forwarded`'s `host=` name different hosts.
    Disagree(String, String),
}

/// `400 INVALID_ENVELOPE` for forwarded hosts that cannot be read.
pub(crate) fn forwarded_host_reply(error: &ForwardedHostError) -> HttpReply {
    let detail = match error {
        ForwardedHostError::Repeated(name, count) => return repeated_header_reply(name, *count),
        ForwardedHostError::DuplicateHost => "the Forwarded header's last element names host= more than once; a proxy sends it once (check the proxy's configuration)".to_owned(),
        ForwardedHostError::Disagree(x_forwarded, forwarded) => format!(
            "X-Forwarded-Host names {x_forwarded:?} but Forwarded names host={forwarded:?}; a proxy that sends both sends the same host (check the proxy's configuration)"
        ),
    };
    HttpReply::error(400, CanonicalError::InvalidEnvelope, &detail)
}

/// The host a trusted proxy says the client asked for: the last entry of
/// `X-Forwarded-Host` (the one the nearest proxy added), else the `host=`
/// of the last element of `Forwarded`, else `Host`. A proxy header sent
/// more than once, a `host=` named twice in the element, and the two
/// forwarded hosts disagreeing are refused (each would let a proxy and
/// this server read different hosts).
pub(crate) fn forwarded_host<'a>(
    head: &RequestHead<'a>,
) -> Result<Option<&'a [u8]>, ForwardedHostError> {
    let forwarded = match head.forwarded {
        HeaderField::Repeated(count) => {
            return Err(ForwardedHostError::Repeated("Forwarded", count));
        }
        HeaderField::One(value) => {
            let last = value
                .rsplit(|byte| *byte == b',')
                .next()
                .unwrap_or_default();
            let mut hosts = last.split(|byte| *byte == b';').filter_map(|pair| {
                let pair = trim_ascii(pair);
                let at = pair.iter().position(|byte| *byte == b'=')?;
                let (name, value) = (pair.get(..at)?, pair.get(at.saturating_add(1)..)?);
                name.eq_ignore_ascii_case(b"host").then(|| {
                    let value = trim_ascii(value);
                    value
                        .strip_prefix(b"\"")
                        .and_then(|inner| inner.strip_suffix(b"\""))
                        .unwrap_or(value)
                })
            });
            let host = hosts.next();
            if hosts.next().is_some() {
                return Err(ForwardedHostError::DuplicateHost);
            }
            host
        }
        HeaderField::Absent => None,
    };
    let x_forwarded = match head.x_forwarded_host {
        HeaderField::Repeated(count) => {
            return Err(ForwardedHostError::Repeated("X-Forwarded-Host", count));
        }
        HeaderField::One(value) => value.rsplit(|byte| *byte == b',').next().map(trim_ascii),
        HeaderField::Absent => None,
    };
    match (x_forwarded, forwarded) {
        (Some(x_forwarded), Some(forwarded)) if !x_forwarded.eq_ignore_ascii_case(forwarded) => {
            Err(ForwardedHostError::Disagree(
                String::from_utf8_lossy(x_forwarded).into_owned(),
                String::from_utf8_lossy(forwarded).into_owned(),
            ))
        }
        (Some(host), _) | (None, Some(host)) => Ok(Some(host)),
        (None, None) => Ok(head.host.value()),
    }
}

/// True when `Accept` asks for server-sent events and not for JSON: it
/// lists `text/event-stream` and none of `application/json`,
/// `application/*`, `*/*` (ranges with `q=0` do not count).
pub(crate) fn wants_sse(accept: Option<&[u8]>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    // What MCP clients send (the spec's own list) and a JSON-only
    // client's value, answered without parsing: each lists JSON.
    if USUAL_ACCEPT.contains(&accept) {
        return false;
    }
    ranges_want_sse(accept)
}

/// The `Accept` values of nearly every request (see [`wants_sse`]).
const USUAL_ACCEPT: [&[u8]; 2] = [b"application/json, text/event-stream", b"application/json"];

/// [`wants_sse`] by parsing the media ranges.
fn ranges_want_sse(accept: &[u8]) -> bool {
    let Ok(accept) = core::str::from_utf8(accept) else {
        return false;
    };
    let mut sse = false;
    let mut json = false;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim();
        let refused = parts.any(|param| {
            let param = param.trim();
            let Some((name, value)) = param.split_once('=') else {
                return false;
            };
            name.trim().eq_ignore_ascii_case("q")
                && value
                    .trim()
                    .trim_end_matches('0')
                    .trim_end_matches('.')
                    .trim_start_matches('0')
                    .is_empty()
        });
        if refused {
            continue;
        }
        if media.eq_ignore_ascii_case(CONTENT_TYPE_SSE) {
            sse = true;
        } else if media.eq_ignore_ascii_case(CONTENT_TYPE_JSON)
            || media.eq_ignore_ascii_case("application/*")
            || media == "*/*"
        {
            json = true;
        }
    }
    sse && !json
}

/// Appends `json` as one SSE `message` event: `event: message`, one
/// `data:` line per line of the body (compact JSON has one), a blank line.
pub(crate) fn encode_sse_event(json: &[u8], out: &mut Vec<u8>) {
    out.reserve(json.len().saturating_add(24));
    out.extend_from_slice(b"event: message\n");
    for line in json.split(|byte| *byte == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// True when `id` is an acceptable `Mcp-Session-Id`: 1 to
/// [`MAX_SESSION_ID_BYTES`] visible ASCII characters (0x21–0x7E).
pub(crate) fn session_id_valid(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID_BYTES
        && id.iter().all(|byte| (0x21..=0x7e).contains(byte))
}

/// The body limit of one request, counted as chunks arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyLimit {
    limit: usize,
    received: usize,
}

/// A body went over its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("request body over the limit of {limit} bytes")]
pub struct BodyTooLarge {
    /// The limit.
    pub limit: usize,
}

impl BodyLimit {
    /// A fresh count against `limit` bytes.
    pub const fn new(limit: usize) -> Self {
        BodyLimit { limit, received: 0 }
    }

    /// Check a declared `Content-Length` before reading anything. A value
    /// that is not a plain decimal number is left to the HTTP parser.
    pub fn check_declared(&self, content_length: Option<&[u8]>) -> Result<(), BodyTooLarge> {
        let Some(text) = content_length.map(trim_ascii) else {
            return Ok(());
        };
        if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
            return Ok(());
        }
        let too_large = core::str::from_utf8(text)
            .ok()
            .and_then(|digits| digits.parse::<u64>().ok())
            .is_none_or(|declared| declared > self.limit as u64);
        if too_large {
            Err(BodyTooLarge { limit: self.limit })
        } else {
            Ok(())
        }
    }

    /// Count a chunk of `len` bytes before storing it.
    pub fn accept(&mut self, len: usize) -> Result<(), BodyTooLarge> {
        match self.received.checked_add(len) {
            Some(total) if total <= self.limit => {
                self.received = total;
                Ok(())
            }
            _ => Err(BodyTooLarge { limit: self.limit }),
        }
    }

    /// Bytes accepted so far.
    pub const fn received(&self) -> usize {
        self.received
    }

    /// The limit.
    pub const fn limit(&self) -> usize {
        self.limit
    }
}

/// How an admitted JSON-RPC call is to be run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallPlan {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The dialect to force, when the endpoint or headers decide it.
    pub dialect: Option<Dialect>,
    /// The MCP revision the `MCP-Protocol-Version` header names, if any.
    pub revision: Option<McpRevision>,
    /// The headers a stateless request's body must agree with.
    pub headers: MessageHeaders,
    /// Answer as one SSE event.
    pub sse: bool,
    /// The `Mcp-Session-Id` to echo.
    pub session_id: Option<String>,
    /// The body limit.
    pub body_limit: BodyLimit,
}

/// What to do with a request, decided from its head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Answer at once with this reply (probe, refusal, error); do not read the body.
    Reply(HttpReply),
    /// Read the body and run an [`Exchange`].
    Call(CallPlan),
    /// Render the metrics registry and answer it with [`metrics_reply`].
    Metrics,
}

/// Decides what to do with a request from its head alone, for a server
/// taking calls ([`admit_during`] with [`Lifecycle::Serving`]).
pub fn admit(policy: &HttpPolicy, head: &RequestHead<'_>) -> Admission {
    admit_during(policy, head, Lifecycle::Serving)
}

/// Decides what to do with a request from its head alone, at `lifecycle`
/// (see the module docs for the order of the checks).
pub fn admit_during(
    policy: &HttpPolicy,
    head: &RequestHead<'_>,
    lifecycle: Lifecycle,
) -> Admission {
    let endpoint = match route(head.method, head.path) {
        Route::Call(endpoint) => Some(endpoint),
        Route::Health => return Admission::Reply(health_reply()),
        Route::Ready if lifecycle == Lifecycle::Draining => {
            return Admission::Reply(not_ready_reply());
        }
        Route::Ready => return Admission::Reply(ready_reply()),
        Route::Metrics if policy.metrics == MetricsAccess::Off => {
            return Admission::Reply(not_found_reply(head.path));
        }
        Route::Metrics => None,
        Route::MethodNotAllowed { allow } => {
            return Admission::Reply(method_not_allowed_reply(head.method, head.path, allow));
        }
        Route::NotFound => return Admission::Reply(not_found_reply(head.path)),
    };
    if let Some((name, count)) = head.repeated_singleton() {
        return Admission::Reply(repeated_header_reply(name, count));
    }
    if let Some(header) = proxied(head) {
        if policy.bearer_token.is_none() {
            return Admission::Reply(proxied_unauthenticated_reply(header));
        }
    }
    if policy.behind_proxy {
        let host = match forwarded_host(head) {
            Ok(host) => host,
            Err(error) => return Admission::Reply(forwarded_host_reply(&error)),
        };
        // The bind address says nothing of the names the proxy serves.
        if !host_allowed(policy, None, host) {
            return Admission::Reply(misdirected_reply(host));
        }
    } else {
        let host = head.host.value();
        if !host_allowed(policy, head.server_address, host) {
            return Admission::Reply(misdirected_reply(host));
        }
    }
    let origin = head.origin.value();
    let origin_ok = if policy.behind_proxy {
        // A loopback origin names the client's machine, not this one.
        let remote = HttpPolicy {
            allow_loopback_origins: false,
            ..policy.clone()
        };
        origin_allowed(&remote, origin)
    } else {
        origin_allowed(policy, origin)
    };
    if !origin_ok {
        let origin = String::from_utf8_lossy(origin.unwrap_or_default());
        let detail = format!(
            "requests from origin {origin:?} are not allowed; add it to the server's allowed origins"
        );
        return Admission::Reply(HttpReply::error(
            status_for(CanonicalError::Forbidden),
            CanonicalError::Forbidden,
            &detail,
        ));
    }
    let Some(endpoint) = endpoint else {
        // The metrics scrape: the bearer check unless it is public.
        if policy.metrics == MetricsAccess::Authenticated {
            let bearer = check_bearer(policy.bearer_token.as_deref(), head.authorization.value());
            if !bearer.is_allowed() {
                return Admission::Reply(unauthenticated_reply(bearer));
            }
        }
        return Admission::Metrics;
    };
    let bearer = check_bearer(policy.bearer_token.as_deref(), head.authorization.value());
    if !bearer.is_allowed() {
        return Admission::Reply(unauthenticated_reply(bearer));
    }
    if lifecycle == Lifecycle::Draining {
        return Admission::Reply(draining_reply());
    }
    let session_id = match head.session_id.value() {
        None => None,
        Some(id) if session_id_valid(id) => Some(String::from_utf8_lossy(id).into_owned()),
        Some(_) => {
            return Admission::Reply(HttpReply::error(
                400,
                CanonicalError::InvalidEnvelope,
                "Mcp-Session-Id must be 1 to 256 visible ASCII characters",
            ));
        }
    };
    let mut dialect = match endpoint {
        Endpoint::Mcp => Some(Dialect::Mcp),
        Endpoint::Rpc => None,
    };
    // The revision of every request after the handshake (2025-06-18 on)
    // and of every stateless one; without it, 2025-03-26 (as the
    // transport spec says), unless the body is `initialize` or stateless.
    let mut revision = None;
    let mut protocol_version = None;
    if let Some(version) = head.protocol_version.value() {
        let version = String::from_utf8_lossy(trim_ascii(version)).into_owned();
        let Some(known) = McpRevision::parse(&version) else {
            let detail = format!(
                "MCP-Protocol-Version {version:?} is not a revision this server speaks; it speaks {}",
                McpRevision::ALL.map(McpRevision::as_str).join(", ")
            );
            let object = CanonicalError::UnsupportedProtocolVersion
                .error_object(None, Some(&detail))
                .with_versions(McpRevision::ALL.map(McpRevision::as_str).to_vec(), version);
            return Admission::Reply(HttpReply::json(
                400,
                crate::envelope::encode_error_object(None, &object),
            ));
        };
        revision = Some(known);
        protocol_version = Some(version);
        dialect = Some(Dialect::Mcp);
    }
    let header_text = |field: HeaderField<'_>| {
        field
            .value()
            .map(|value| String::from_utf8_lossy(trim_ascii(value)).into_owned())
    };
    let body_limit = BodyLimit::new(policy.max_body_bytes);
    if body_limit
        .check_declared(head.content_length.value())
        .is_err()
    {
        return Admission::Reply(payload_too_large_reply(policy.max_body_bytes));
    }
    Admission::Call(CallPlan {
        endpoint,
        dialect,
        revision,
        headers: MessageHeaders::new(
            protocol_version,
            header_text(head.mcp_method),
            header_text(head.mcp_name),
        ),
        sse: wants_sse(head.accept),
        session_id,
        body_limit,
    })
}

/// An HTTP answer that is a JSON-RPC batch (a JSON array) although one
/// request was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the provider answered one request with a JSON-RPC batch (a JSON array); one request must be answered with one JSON-RPC response object, so the provider's HTTP endpoint is broken or is not a JSON-RPC provider"
)]
pub struct BatchAnswer;

/// Client side: refuses an answer body whose JSON is an array, since one
/// request went out (batches are never sent over HTTP here). Whatever else
/// is wrong with the body is left to the client's parser.
pub fn check_single_answer(body: &[u8]) -> Result<(), BatchAnswer> {
    match body.iter().find(|byte| !byte.is_ascii_whitespace()) {
        Some(b'[') => Err(BatchAnswer),
        _ => Ok(()),
    }
}

/// Names one connection in a [`ConnectionBudget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(u64);

/// Where a connection of a [`ConnectionBudget`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Accepted, not yet read from: it cannot be shed before it had one
    /// read (its head may be waiting in the socket).
    Fresh,
    /// Waiting for a request head; the key of its place in the line.
    Waiting(u64),
    /// In a request: head received, answer not yet handed over.
    InRequest,
}

/// The limits of a [`ConnectionBudget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most open connections (at least 1).
    pub max_connections: usize,
    /// Most connections waiting for a request head before the ones that
    /// have waited [`ConnectionLimits::pressure_head_ms`] are shed (1 to
    /// `max_connections`).
    pub max_waiting: usize,
    /// Under pressure (more than `max_waiting` connections waiting, or
    /// every slot taken), how long a connection may wait for its head
    /// before it may be shed, in milliseconds: the head timeout under
    /// pressure, instead of the adapter's usual one.
    pub pressure_head_ms: u64,
}

/// How many connections an HTTP server holds, and which to close when
/// they are too many (sans-IO: the adapter opens, reads, closes and sheds
/// sockets and passes the time in milliseconds; this keeps the books).
///
/// A connection is *fresh* until the adapter first reads from it, then
/// either *in a request* (head received, answer not yet handed over) or
/// *waiting for a request head* (partway through a head, or idle between
/// keep-alive requests). Waiting connections cost the peer nothing to
/// hold, so they are the ones given up under pressure, the one that has
/// waited longest first, and only once it has waited at least
/// `pressure_head_ms`:
///
/// - more than `max_waiting` connections waiting: the excess is shed as
///   soon as it has waited `pressure_head_ms` (checked whenever a
///   connection opens, is first read, or finishes a request);
/// - `max_connections` open: a new connection is let in by shedding one
///   that has waited `pressure_head_ms`; until one has,
///   [`ConnectionBudget::room`] says when to try again (the adapter stops
///   accepting meanwhile, leaving new connections in the kernel's queue).
///
/// So connections in a request are never shed; a new connection always
/// gets its first read and `pressure_head_ms` more before it can be shed
/// (a client that sends its head at once is served even while a flood of
/// half heads is being reopened); the head timeout drops from the
/// adapter's usual one to `pressure_head_ms` under pressure; and a client
/// waits for a slot at most about `pressure_head_ms` times (1 + the
/// connections queued ahead of it / `max_connections`). The churn a
/// flood can cause is at most `max_connections` per `pressure_head_ms`.
/// nginx likewise closes its "reusable" (idle and not-yet-read)
/// connections, oldest first, when it runs out of connections.
#[derive(Clone, Debug)]
pub struct ConnectionBudget {
    limits: ConnectionLimits,
    next_id: u64,
    next_place: u64,
    /// Every open connection.
    open: BTreeMap<ConnectionId, Standing>,
    /// Connections waiting for a head, in the order they began waiting:
    /// place → (connection, when it began waiting).
    waiting: BTreeMap<u64, (ConnectionId, u64)>,
    shed: u64,
}

/// Whether a [`ConnectionBudget`] can take a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// Now.
    Now,
    /// Not before this time (ms): the longest-waiting connection may be
    /// shed then. Try again at that time, or when a connection closes.
    At(u64),
    /// Not until a connection closes or finishes a request (every open
    /// connection is fresh or in a request).
    AfterClose,
}

impl ConnectionBudget {
    /// A budget with these limits (clamped to usable values).
    pub fn new(limits: ConnectionLimits) -> Self {
        let max_connections = limits.max_connections.max(1);
        ConnectionBudget {
            limits: ConnectionLimits {
                max_connections,
                max_waiting: limits.max_waiting.clamp(1, max_connections),
                pressure_head_ms: limits.pressure_head_ms,
            },
            next_id: 0,
            next_place: 0,
            open: BTreeMap::new(),
            waiting: BTreeMap::new(),
            shed: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    /// Whether [`ConnectionBudget::open`] would take a connection at `now`.
    pub fn room(&self, now: u64) -> Room {
        if self.open.len() < self.limits.max_connections {
            return Room::Now;
        }
        match self.sheddable_at() {
            Some(at) if at <= now => Room::Now,
            Some(at) => Room::At(at),
            None => Room::AfterClose,
        }
    }

    /// Counts a newly accepted connection (fresh) at `now`, and returns its
    /// id with the connections to close (never the new one); `None` when
    /// there is no room ([`Self::room`]).
    pub fn open(&mut self, now: u64) -> Option<(ConnectionId, Vec<ConnectionId>)> {
        if self.room(now) != Room::Now {
            return None;
        }
        let id = ConnectionId(self.next_id);
        self.next_id = self.next_id.saturating_add(1);
        self.open.insert(id, Standing::Fresh);
        Some((id, self.shed_excess(now)))
    }

    /// The adapter read from fresh connection `id` at `now` and found no
    /// complete head: it waits for one from now on. Returns the
    /// connections to shed (never `id`). No effect unless `id` is fresh.
    pub fn first_read_done(&mut self, id: ConnectionId, now: u64) -> Vec<ConnectionId> {
        if self.open.get(&id) != Some(&Standing::Fresh) {
            return Vec::new();
        }
        self.wait(id, now)
    }

    /// The head of a request on `id` arrived. False when `id` is no longer
    /// counted (it was shed or closed): the adapter must not serve it.
    pub fn head_received(&mut self, id: ConnectionId) -> bool {
        match self.open.get_mut(&id) {
            None => false,
            Some(standing) => {
                if let Standing::Waiting(place) = *standing {
                    self.waiting.remove(&place);
                }
                *standing = Standing::InRequest;
                true
            }
        }
    }

    /// The answer on `id` was handed over at `now`: it waits for its next
    /// head (keep-alive). Returns the connections to shed (never `id`).
    /// No effect unless `id` is in a request.
    pub fn request_done(&mut self, id: ConnectionId, now: u64) -> Vec<ConnectionId> {
        if self.open.get(&id) != Some(&Standing::InRequest) {
            return Vec::new();
        }
        self.wait(id, now)
    }

    /// `id` closed (by either side, or after being shed); its slot is free.
    pub fn close(&mut self, id: ConnectionId) {
        if let Some(Standing::Waiting(place)) = self.open.remove(&id) {
            self.waiting.remove(&place);
        }
    }

    /// Open connections.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// Open connections waiting for a request head.
    pub fn waiting_count(&self) -> usize {
        self.waiting.len()
    }

    /// Connections shed so far.
    pub fn shed_count(&self) -> u64 {
        self.shed
    }

    /// When the longest-waiting connection may be shed.
    fn sheddable_at(&self) -> Option<u64> {
        self.waiting
            .first_key_value()
            .map(|(_, (_, since))| since.saturating_add(self.limits.pressure_head_ms))
    }

    /// Puts open connection `id` at the back of the waiting line.
    fn wait(&mut self, id: ConnectionId, now: u64) -> Vec<ConnectionId> {
        let place = self.next_place;
        self.next_place = self.next_place.saturating_add(1);
        self.open.insert(id, Standing::Waiting(place));
        self.waiting.insert(place, (id, now));
        self.shed_excess(now)
    }

    /// Sheds the longest-waiting connections, each only once it has waited
    /// `pressure_head_ms`, while either limit is exceeded.
    fn shed_excess(&mut self, now: u64) -> Vec<ConnectionId> {
        let mut shed = Vec::new();
        while self.waiting.len() > self.limits.max_waiting
            || self.open.len() > self.limits.max_connections
        {
            if self.sheddable_at().is_none_or(|at| at > now) {
                break;
            }
            let Some((_, (oldest, _))) = self.waiting.pop_first() else {
                break;
            };
            self.open.remove(&oldest);
            self.shed = self.shed.saturating_add(1);
            shed.push(oldest);
        }
        shed
    }
}

/// The HTTP status of a JSON-RPC answer: `outcomes` are the
/// [`ServerEvent::Handled`] records of the request body.
///
/// On `/mcp` a JSON-RPC error to a request of a handshake revision travels
/// with 200 (those clients treat any other status as a transport failure);
/// a stateless request's error carries its own status, as revision
/// 2026-07-28 says: 400 for a malformed request, bad `_meta`, disagreeing
/// headers or an unknown revision, 404 for an unknown method, 200 for the
/// rest.
pub(crate) fn answer_status(endpoint: Endpoint, outcomes: &[Outcome]) -> u16 {
    let [outcome] = outcomes else {
        // A batch (or nothing recorded): the body says what failed.
        return 200;
    };
    match (outcome.error, endpoint) {
        (None, _) => 200,
        (Some(error), _) if outcome.stateless => stateless_status(error),
        (Some(_), Endpoint::Mcp) if outcome.id.is_some() => 200,
        (Some(error), _) => status_for(error),
    }
}

/// The HTTP status of a stateless request's JSON-RPC error.
const fn stateless_status(error: CanonicalError) -> u16 {
    match error {
        CanonicalError::ParseError
        | CanonicalError::InvalidEnvelope
        | CanonicalError::InvalidToolInput
        | CanonicalError::HeaderMismatch
        | CanonicalError::UnsupportedProtocolVersion => 400,
        CanonicalError::MethodNotFound => 404,
        _ => 200,
    }
}

/// One HTTP request body through a [`Server`]: the same pipeline as stdio,
/// without framing: the body goes in as one message
/// ([`Server::handle_message`]) and each answer comes out as one
/// ([`Server::poll_message`]), so answers are byte-identical to what stdio
/// would send inside its frames.
///
/// Feed the body with [`Exchange::start`], take events with
/// [`Exchange::poll_event`] (answer queries with [`Exchange::respond`] /
/// [`Exchange::respond_tool`]) until [`Exchange::is_finished`], then build
/// the reply with [`Exchange::into_reply`].
#[derive(Debug)]
pub struct Exchange {
    server: Server,
    plan: CallPlan,
    outcomes: Vec<Outcome>,
    /// [`Exchange::expire`] answered what was still running.
    expired: bool,
}

impl Exchange {
    /// Runs `body` through a connection of `config` (shared, built once),
    /// speaking the plan's dialect when the endpoint or headers decide it
    /// and the configuration does not force one.
    pub fn start(config: &Arc<ServerConfig>, plan: CallPlan, body: &[u8]) -> Self {
        let mut server = Server::new(Arc::clone(config));
        if let (DialectChoice::Auto, Some(dialect)) = (config.dialect, plan.dialect) {
            server.set_dialect(dialect);
        }
        // Each request is its own connection: what the handshake negotiated
        // comes back in the header on every later request.
        server.set_revision(plan.revision.unwrap_or(McpRevision::HTTP_DEFAULT));
        server.set_message_headers(plan.headers.clone());
        server.handle_message(body);
        server.handle_end_of_input();
        Exchange {
            server,
            plan,
            outcomes: Vec::new(),
            expired: false,
        }
    }

    /// The server's drain deadline passed: every query still running is
    /// answered with the retryable `OVERLOADED` error
    /// ([`Server::expire_in_flight`]) and the reply is `503` with
    /// `Retry-After`, so a balancer or the client sends the call again
    /// elsewhere. Returns how many were still running.
    pub fn expire(&mut self) -> usize {
        let expired = self.server.expire_in_flight();
        self.expired |= expired > 0;
        expired
    }

    /// The next event; [`ServerEvent::Handled`] records are also kept for
    /// the status decision.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        let event = self.server.poll_event()?;
        if let ServerEvent::Handled(outcome) = &event {
            self.outcomes.push(outcome.clone());
        }
        Some(event)
    }

    /// The call of `ticket` will not run after all (the server's limit on
    /// running work is reached): it is answered with the retryable
    /// `OVERLOADED` error carrying `detail` ([`Server::expire`]); the reply's
    /// status follows as for any other answer (`503` for a lone call on
    /// `/rpc`, the error inside a batch's `200`).
    pub fn expire_call(&mut self, ticket: Ticket, detail: &str) -> Result<(), RespondError> {
        self.server.expire(ticket, detail)
    }

    /// Answer the evidence query of `ticket`.
    pub fn respond(&mut self, ticket: Ticket, result: EvidenceResult) -> Result<(), RespondError> {
        self.server.respond(ticket, result)
    }

    /// Answer the tool call of `ticket`.
    pub fn respond_tool(
        &mut self,
        ticket: Ticket,
        result: Result<serde_json::Value, ToolFailure>,
    ) -> Result<(), RespondError> {
        self.server.respond_tool(ticket, result)
    }

    /// Queries still waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.server.in_flight()
    }

    /// True when every query is answered.
    pub fn is_finished(&self) -> bool {
        self.server.in_flight() == 0
    }

    /// The plan this exchange runs.
    pub fn plan(&self) -> &CallPlan {
        &self.plan
    }

    /// The HTTP reply: `202` with no body when nothing is answered, else the
    /// JSON-RPC answer as JSON or one SSE event, with the status of
    /// `answer_status` and the session id echoed.
    pub fn into_reply(mut self) -> HttpReply {
        while let Some(event) = self.server.poll_event() {
            if let ServerEvent::Handled(outcome) = event {
                self.outcomes.push(outcome);
            }
        }
        let mut bodies: Vec<Vec<u8>> = Vec::new();
        while let Some(body) = self.server.poll_message() {
            bodies.push(body);
        }
        let mut reply = match bodies.len() {
            0 => HttpReply {
                status: 202,
                headers: Vec::new(),
                body: Vec::new(),
            },
            _ => {
                // One request body yields one answer (a batch is one array);
                // join defensively if the server ever sends more.
                let body = if bodies.len() == 1 {
                    bodies.pop().unwrap_or_default()
                } else {
                    let mut joined = Vec::new();
                    for body in &bodies {
                        joined.extend_from_slice(body);
                        joined.push(b'\n');
                    }
                    joined
                };
                if self.plan.sse {
                    let mut event = Vec::new();
                    encode_sse_event(&body, &mut event);
                    HttpReply {
                        status: 200,
                        headers: alloc::vec![
                            ("content-type", CONTENT_TYPE_SSE.to_owned()),
                            ("cache-control", "no-cache".to_owned()),
                        ],
                        body: event,
                    }
                } else {
                    HttpReply::json(answer_status(self.plan.endpoint, &self.outcomes), body)
                }
            }
        };
        if self.expired {
            // Retryable at the transport level, whatever the endpoint: the
            // caller never got its answer.
            if !self.plan.sse {
                reply.status = status_for(CanonicalError::Overloaded);
            }
            reply
                .headers
                .push(("retry-after", RETRY_AFTER_SECONDS.to_string()));
        }
        if let Some(session) = self.plan.session_id.take() {
            reply.headers.push(("mcp-session-id", session));
        }
        reply
    }
}

fn trim_ascii(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|byte| !byte.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|byte| !byte.is_ascii_whitespace())
        .map_or(start, |last| last.saturating_add(1));
    bytes.get(start..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use serde_json::Value;

    fn head<'a>(method: &'a str, path: &'a str) -> RequestHead<'a> {
        RequestHead {
            method,
            path,
            ..RequestHead::default()
        }
    }

    fn body_json(reply: &HttpReply) -> Value {
        serde_json::from_slice(&reply.body).expect("JSON body")
    }

    #[test]
    fn routes_known_paths_and_methods() {
        assert_eq!(route("POST", "/rpc"), Route::Call(Endpoint::Rpc));
        assert_eq!(route("POST", "/mcp"), Route::Call(Endpoint::Mcp));
        assert_eq!(route("GET", "/healthz"), Route::Health);
        assert_eq!(route("HEAD", "/readyz"), Route::Ready);
        assert_eq!(
            route("GET", "/mcp"),
            Route::MethodNotAllowed { allow: "POST" }
        );
        assert_eq!(
            route("DELETE", "/rpc"),
            Route::MethodNotAllowed { allow: "POST" }
        );
        assert_eq!(
            route("POST", "/healthz"),
            Route::MethodNotAllowed { allow: "GET, HEAD" }
        );
        assert_eq!(
            route("post", "/rpc"),
            Route::MethodNotAllowed { allow: "POST" }
        );
        assert_eq!(route("POST", "/rpc/"), Route::NotFound);
        assert_eq!(route("GET", "/"), Route::NotFound);
    }

    #[test]
    fn method_not_allowed_carries_allow_and_json() {
        let Admission::Reply(reply) = admit(&HttpPolicy::default(), &head("GET", "/mcp")) else {
            panic!("GET /mcp is refused");
        };
        assert_eq!(reply.status, 405);
        assert_eq!(reply.header("allow"), Some("POST"));
        assert_eq!(body_json(&reply)["error"]["code"], -32600);
    }

    #[test]
    fn unknown_path_is_404_json() {
        let Admission::Reply(reply) = admit(&HttpPolicy::default(), &head("POST", "/nope")) else {
            panic!("refused");
        };
        assert_eq!(reply.status, 404);
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert_eq!(body_json(&reply)["error"]["code"], -32601);
    }

    #[test]
    fn probes_answer_status_json() {
        for (path, status) in [("/healthz", "ok"), ("/readyz", "ready")] {
            let Admission::Reply(reply) = admit(&HttpPolicy::default(), &head("GET", path)) else {
                panic!("probe");
            };
            assert_eq!(reply.status, 200);
            assert_eq!(body_json(&reply)["status"], status);
        }
    }

    #[test]
    fn status_comes_from_the_canonical_table() {
        for error in CanonicalError::ALL {
            assert_eq!(status_for(error), error.http_status());
        }
        assert_eq!(status_for(CanonicalError::PayloadTooLarge), 413);
        assert_eq!(status_for(CanonicalError::Unauthenticated), 401);
    }

    #[test]
    fn secrets_compare_by_content_not_prefix() {
        assert!(secrets_equal(b"s3cret", b"s3cret"));
        assert!(!secrets_equal(b"s3cret", b"s3cre"));
        assert!(!secrets_equal(b"s3cret", b"s3cret "));
        assert!(!secrets_equal(b"s3cret", b"S3cret"));
        assert!(!secrets_equal(b"", b"x"));
        assert!(secrets_equal(b"", b""));
    }

    #[test]
    fn bearer_header_parsing() {
        let token = Some("tok-123");
        assert_eq!(check_bearer(None, None), BearerCheck::NotRequired);
        assert_eq!(
            check_bearer(None, Some(b"Bearer x")),
            BearerCheck::NotRequired
        );
        assert_eq!(check_bearer(token, None), BearerCheck::Missing);
        assert_eq!(
            check_bearer(token, Some(b"Bearer tok-123")),
            BearerCheck::Accepted
        );
        assert_eq!(
            check_bearer(token, Some(b"bearer   tok-123 ")),
            BearerCheck::Accepted
        );
        assert_eq!(
            check_bearer(token, Some(b"BEARER tok-123")),
            BearerCheck::Accepted
        );
        assert_eq!(
            check_bearer(token, Some(b"Bearer tok-124")),
            BearerCheck::Invalid
        );
        assert_eq!(
            check_bearer(token, Some(b"Bearer tok-1234")),
            BearerCheck::Invalid
        );
        assert_eq!(
            check_bearer(token, Some(b"Basic dG9rLTEyMw==")),
            BearerCheck::Missing
        );
        assert_eq!(check_bearer(token, Some(b"Bearer")), BearerCheck::Missing);
        assert_eq!(
            check_bearer(token, Some(b"Bearertok-123")),
            BearerCheck::Missing
        );
        assert_eq!(check_bearer(token, Some(b"\xff\xfe")), BearerCheck::Missing);
    }

    #[test]
    fn auth_refusal_has_challenge_and_canonical_body() {
        let policy = HttpPolicy {
            bearer_token: Some("tok".to_owned()),
            ..HttpPolicy::default()
        };
        let Admission::Reply(missing) = admit(&policy, &head("POST", "/rpc")) else {
            panic!("refused");
        };
        assert_eq!(missing.status, 401);
        assert_eq!(
            missing.header("www-authenticate"),
            Some(r#"Bearer realm="evidence-wire""#)
        );
        assert_eq!(body_json(&missing)["error"]["code"], -32004);
        let wrong = RequestHead {
            authorization: HeaderField::One(b"Bearer nope"),
            ..head("POST", "/rpc")
        };
        let Admission::Reply(wrong) = admit(&policy, &wrong) else {
            panic!("refused");
        };
        assert_eq!(wrong.status, 401);
        assert!(
            wrong
                .header("www-authenticate")
                .is_some_and(|value| value.contains("invalid_token"))
        );
        let right = RequestHead {
            authorization: HeaderField::One(b"Bearer tok"),
            ..head("POST", "/rpc")
        };
        assert!(matches!(admit(&policy, &right), Admission::Call(_)));
        // Probes stay open for orchestrators.
        assert!(matches!(
            admit(&policy, &head("GET", "/healthz")),
            Admission::Reply(HttpReply { status: 200, .. })
        ));
    }

    #[test]
    fn origin_rules() {
        let policy = HttpPolicy {
            allowed_origins: vec!["https://Gate.Example.com".to_owned()],
            ..HttpPolicy::default()
        };
        assert!(origin_allowed(&policy, None));
        assert!(origin_allowed(&policy, Some(b"https://gate.example.com")));
        assert!(origin_allowed(&policy, Some(b"https://gate.example.com/")));
        assert!(!origin_allowed(
            &policy,
            Some(b"https://gate.example.com:8443")
        ));
        assert!(!origin_allowed(&policy, Some(b"http://gate.example.com")));
        assert!(!origin_allowed(&policy, Some(b"https://evil.example")));
        assert!(!origin_allowed(&policy, Some(b"null")));
        assert!(origin_allowed(&policy, Some(b"http://localhost:5173")));
        assert!(origin_allowed(&policy, Some(b"http://127.0.0.1")));
        assert!(origin_allowed(&policy, Some(b"http://[::1]:8080")));
        assert!(!origin_allowed(
            &policy,
            Some(b"http://localhost.evil.example")
        ));
        assert!(!origin_allowed(
            &policy,
            Some(b"http://localhost@evil.example")
        ));
        assert!(!origin_allowed(&policy, Some(b"http://127.0.0.1:99999x")));
        let strict = HttpPolicy {
            allow_loopback_origins: false,
            ..HttpPolicy::default()
        };
        assert!(!origin_allowed(&strict, Some(b"http://localhost:5173")));
        let refused = RequestHead {
            origin: HeaderField::One(b"https://evil.example"),
            ..head("POST", "/mcp")
        };
        let Admission::Reply(reply) = admit(&policy, &refused) else {
            panic!("refused");
        };
        assert_eq!(reply.status, 403);
        assert_eq!(body_json(&reply)["error"]["code"], -32003);
    }

    #[test]
    fn loopback_bind_rule() {
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        assert!(check_bind(v4(127, 0, 0, 1), false).is_ok());
        assert!(check_bind(v4(127, 1, 2, 3), false).is_ok());
        assert!(check_bind(IpAddr::V6(Ipv6Addr::LOCALHOST), false).is_ok());
        let mapped = IpAddr::V6(Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped());
        assert!(check_bind(mapped, false).is_ok());
        let refused = check_bind(v4(0, 0, 0, 0), false).unwrap_err();
        assert!(refused.to_string().contains("bearer token"));
        assert!(check_bind(v4(192, 168, 1, 2), false).is_err());
        assert!(check_bind(IpAddr::V6(Ipv6Addr::UNSPECIFIED), false).is_err());
        assert!(check_bind(v4(0, 0, 0, 0), true).is_ok());
    }

    #[test]
    fn sse_negotiation() {
        // The usual values skip the parse, with its answer.
        for usual in USUAL_ACCEPT {
            assert!(!ranges_want_sse(usual));
        }
        assert!(!wants_sse(None));
        assert!(wants_sse(Some(b"text/event-stream")));
        assert!(wants_sse(Some(b"Text/Event-Stream; charset=utf-8")));
        assert!(!wants_sse(Some(b"application/json, text/event-stream")));
        assert!(!wants_sse(Some(b"*/*")));
        assert!(wants_sse(Some(b"text/event-stream, application/json;q=0")));
        assert!(wants_sse(Some(
            b"text/event-stream, application/json;q=0.000"
        )));
        assert!(!wants_sse(Some(b"text/event-stream;q=0, application/json")));
        assert!(!wants_sse(Some(
            b"text/event-stream, application/json;q=0.5"
        )));
    }

    #[test]
    fn sse_event_encoding() {
        let mut out = Vec::new();
        encode_sse_event(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, &mut out);
        assert_eq!(
            out,
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
        );
        let mut multi = Vec::new();
        encode_sse_event(b"{\r\n\"a\":1\n}", &mut multi);
        assert_eq!(
            multi,
            b"event: message\ndata: {\ndata: \"a\":1\ndata: }\n\n"
        );
    }

    #[test]
    fn body_limit_declared_and_counted() {
        let limit = BodyLimit::new(10);
        assert!(limit.check_declared(None).is_ok());
        assert!(limit.check_declared(Some(b"10")).is_ok());
        assert_eq!(
            limit.check_declared(Some(b"11")),
            Err(BodyTooLarge { limit: 10 })
        );
        assert!(
            limit
                .check_declared(Some(b"99999999999999999999999"))
                .is_err()
        );
        assert!(
            limit.check_declared(Some(b"abc")).is_ok(),
            "left to the HTTP parser"
        );
        let mut counted = BodyLimit::new(10);
        assert!(counted.accept(4).is_ok());
        assert!(counted.accept(6).is_ok());
        assert_eq!(counted.received(), 10);
        assert!(counted.accept(1).is_err());
        assert!(counted.accept(usize::MAX).is_err());
        let policy = HttpPolicy {
            max_body_bytes: 5,
            ..HttpPolicy::default()
        };
        let declared = RequestHead {
            content_length: HeaderField::One(b"6"),
            ..head("POST", "/rpc")
        };
        let Admission::Reply(reply) = admit(&policy, &declared) else {
            panic!("too large");
        };
        assert_eq!(reply.status, 413);
        assert_eq!(body_json(&reply)["error"]["code"], -32070);
        assert_eq!(
            body_json(&reply)["error"]["data"]["kind"],
            "payload_too_large"
        );
    }

    #[test]
    fn mcp_headers() {
        let policy = HttpPolicy::default();
        let with = |session: Option<&'static [u8]>, version: Option<&'static [u8]>| {
            admit(
                &policy,
                &RequestHead {
                    session_id: session.into(),
                    protocol_version: version.into(),
                    ..head("POST", "/rpc")
                },
            )
        };
        let Admission::Call(plan) = with(Some(b"abc-123"), Some(b"2025-06-18")) else {
            panic!("admitted");
        };
        assert_eq!(plan.session_id.as_deref(), Some("abc-123"));
        assert_eq!(plan.dialect, Some(Dialect::Mcp));
        let Admission::Call(plan) = with(None, None) else {
            panic!("admitted");
        };
        assert_eq!(plan.dialect, None);
        assert!(matches!(
            with(Some(b"has space"), None),
            Admission::Reply(HttpReply { status: 400, .. })
        ));
        assert!(matches!(
            with(None, Some(b"1999-01-01")),
            Admission::Reply(HttpReply { status: 400, .. })
        ));
        let Admission::Call(plan) = admit(&policy, &head("POST", "/mcp")) else {
            panic!("admitted");
        };
        assert_eq!(plan.dialect, Some(Dialect::Mcp));
        // The plan's dialect applies unless the configuration forces one.
        let listing = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let forced = Arc::new(ServerConfig {
            dialect: DialectChoice::Fixed(Dialect::DecisionGate),
            ..ServerConfig::default()
        });
        let reply = Exchange::start(&forced, plan.clone(), listing).into_reply();
        assert!(body_json(&reply)["result"]["tools"][0]["input_schema"].is_object());
        let auto = Arc::new(ServerConfig::default());
        let reply = Exchange::start(&auto, plan, listing).into_reply();
        assert!(body_json(&reply)["result"]["tools"][0]["inputSchema"].is_object());
    }

    fn plan(endpoint: Endpoint, sse: bool) -> CallPlan {
        CallPlan {
            endpoint,
            // As `admit` decides: /mcp always speaks MCP.
            dialect: (endpoint == Endpoint::Mcp).then_some(Dialect::Mcp),
            revision: None,
            headers: MessageHeaders::default(),
            sse,
            session_id: Some("s-1".to_owned()),
            body_limit: BodyLimit::new(1024),
        }
    }

    fn run(endpoint: Endpoint, sse: bool, body: &[u8]) -> HttpReply {
        let plan = plan(endpoint, sse);
        let mut exchange = Exchange::start(&Arc::new(ServerConfig::default()), plan, body);
        while let Some(event) = exchange.poll_event() {
            if let ServerEvent::EvidenceQuery { ticket, .. } = event {
                let value = crate::evidence::EvidenceValue::json(&"hello").expect("value");
                exchange
                    .respond(ticket, EvidenceResult::with_value(value))
                    .expect("respond");
            }
        }
        assert!(exchange.is_finished());
        exchange.into_reply()
    }

    #[test]
    fn exchange_answers_like_stdio() {
        let request = br#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
        let reply = run(Endpoint::Rpc, false, request);
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("mcp-session-id"), Some("s-1"));
        let mut stdio = Server::new(ServerConfig::default());
        let mut framed = request.to_vec();
        framed.push(b'\n');
        stdio.handle_input(&framed);
        let mut expected = stdio.poll_transmit().expect("stdio answer");
        assert_eq!(expected.pop(), Some(b'\n'));
        assert_eq!(reply.body, expected);
    }

    #[test]
    fn exchange_accepts_pretty_printed_bodies() {
        let reply = run(
            Endpoint::Rpc,
            false,
            b"{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"method\": \"ping\"\n}",
        );
        assert_eq!(reply.status, 200);
        assert_eq!(body_json(&reply)["result"], serde_json::json!({}));
    }

    #[test]
    fn exchange_notification_is_202_empty() {
        let reply = run(
            Endpoint::Mcp,
            false,
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        assert_eq!(reply.status, 202);
        assert!(reply.body.is_empty());
        assert_eq!(reply.header("content-type"), None);
    }

    #[test]
    fn exchange_error_statuses_per_endpoint() {
        let unknown = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#;
        assert_eq!(run(Endpoint::Rpc, false, unknown).status, 404);
        let on_mcp = run(Endpoint::Mcp, false, unknown);
        assert_eq!(
            on_mcp.status, 200,
            "MCP SDK clients read JSON-RPC errors only on 200"
        );
        assert_eq!(body_json(&on_mcp)["error"]["code"], -32001);
        let garbage = b"not json";
        assert_eq!(run(Endpoint::Rpc, false, garbage).status, 400);
        assert_eq!(run(Endpoint::Mcp, false, garbage).status, 400);
        assert_eq!(run(Endpoint::Rpc, false, b"").status, 400);
    }

    #[test]
    fn exchange_evidence_query_in_both_dialects() {
        let call = br#"{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1}}}}}"#;
        let rpc = body_json(&run(Endpoint::Rpc, false, call));
        assert_eq!(rpc["result"]["content"][0]["type"], "json");
        // Without MCP-Protocol-Version a request is taken to speak
        // 2025-03-26, which has no structuredContent.
        let mcp = body_json(&run(Endpoint::Mcp, false, call));
        assert_eq!(mcp["result"]["content"][0]["type"], "text");
        assert!(mcp["result"].get("structuredContent").is_none());
        // The header of a later revision brings it.
        let mut plan = plan(Endpoint::Mcp, false);
        plan.revision = Some(McpRevision::V2025_11_25);
        let config = Arc::new(ServerConfig::default());
        let mut exchange = Exchange::start(&config, plan, call);
        while let Some(event) = exchange.poll_event() {
            if let ServerEvent::EvidenceQuery { ticket, .. } = event {
                let value = crate::evidence::EvidenceValue::json(&"hello").expect("value");
                exchange
                    .respond(ticket, EvidenceResult::with_value(value))
                    .expect("respond");
            }
        }
        let mcp = body_json(&exchange.into_reply());
        assert!(mcp["result"]["structuredContent"].is_object());
    }

    #[test]
    fn exchange_sse_reply_is_one_event() {
        let reply = run(
            Endpoint::Mcp,
            true,
            br#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#,
        );
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("content-type"), Some("text/event-stream"));
        assert_eq!(
            reply.body,
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}\n\n"
        );
    }

    #[test]
    fn fixed_replies_are_canonical_json() {
        let too_large = payload_too_large_reply(7);
        assert_eq!(too_large.status, 413);
        assert!(
            body_json(&too_large)["error"]["data"]["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains('7'))
        );
        let overloaded = overloaded_reply(3);
        assert_eq!(overloaded.status, 503);
        assert_eq!(overloaded.header("retry-after"), Some("1"));
        assert_eq!(body_json(&overloaded)["error"]["code"], -32072);
        let unreadable = unreadable_body_reply("timed out");
        assert_eq!(unreadable.status, 400);
        assert_eq!(body_json(&unreadable)["error"]["code"], -32700);
    }

    #[test]
    fn draining_is_not_ready_and_refuses_new_calls_retryably() {
        let policy = HttpPolicy::default();
        let draining = Lifecycle::Draining;
        let Admission::Reply(ready) = admit_during(&policy, &head("GET", "/readyz"), draining)
        else {
            panic!("a probe");
        };
        assert_eq!(ready.status, 503);
        assert_eq!(body_json(&ready)["status"], "draining");
        let Admission::Reply(alive) = admit_during(&policy, &head("GET", "/healthz"), draining)
        else {
            panic!("a probe");
        };
        assert_eq!(alive.status, 200, "still alive while draining");
        let Admission::Reply(refused) = admit_during(&policy, &head("POST", "/rpc"), draining)
        else {
            panic!("no new call while draining");
        };
        assert_eq!(refused.status, 503);
        assert_eq!(refused.header("retry-after"), Some("1"));
        assert_eq!(body_json(&refused)["error"]["code"], -32072);
        assert_eq!(body_json(&refused)["error"]["data"]["retryable"], true);
        // Serving: the same requests are taken.
        assert!(matches!(
            admit(&policy, &head("GET", "/readyz")),
            Admission::Reply(HttpReply { status: 200, .. })
        ));
        assert!(matches!(
            admit(&policy, &head("POST", "/rpc")),
            Admission::Call(_)
        ));
        // Authentication still comes first while draining.
        let authenticated = HttpPolicy {
            bearer_token: Some("tok".to_owned()),
            ..HttpPolicy::default()
        };
        assert!(matches!(
            admit_during(&authenticated, &head("POST", "/rpc"), draining),
            Admission::Reply(HttpReply { status: 401, .. })
        ));
    }

    #[test]
    fn metrics_are_off_public_or_behind_the_token() {
        let off = HttpPolicy::default();
        assert!(matches!(
            admit(&off, &head("GET", "/metrics")),
            Admission::Reply(HttpReply { status: 404, .. })
        ));
        let public = HttpPolicy {
            metrics: MetricsAccess::Public,
            bearer_token: Some("tok".to_owned()),
            ..HttpPolicy::default()
        };
        assert!(matches!(
            admit(&public, &head("GET", "/metrics")),
            Admission::Metrics
        ));
        assert!(matches!(
            admit(&public, &head("POST", "/metrics")),
            Admission::Reply(HttpReply { status: 405, .. })
        ));
        let authenticated = HttpPolicy {
            metrics: MetricsAccess::Authenticated,
            ..public.clone()
        };
        assert!(matches!(
            admit(&authenticated, &head("GET", "/metrics")),
            Admission::Reply(HttpReply { status: 401, .. })
        ));
        let with_token = RequestHead {
            authorization: HeaderField::One(b"Bearer tok"),
            ..head("GET", "/metrics")
        };
        assert!(matches!(
            admit(&authenticated, &with_token),
            Admission::Metrics
        ));
        assert!(matches!(
            admit_during(&authenticated, &with_token, Lifecycle::Draining),
            Admission::Metrics
        ));
        let reply = metrics_reply(b"# EOF\n".to_vec());
        assert_eq!(reply.header("content-type"), Some(CONTENT_TYPE_METRICS));
    }

    #[test]
    fn a_proxied_request_needs_a_bearer_token() {
        let open = HttpPolicy::default();
        for (name, proxied_head) in [
            (
                "Forwarded",
                RequestHead {
                    forwarded: HeaderField::One(b"for=192.0.2.7"),
                    ..head("POST", "/rpc")
                },
            ),
            (
                "X-Forwarded-For",
                RequestHead {
                    x_forwarded_for: HeaderField::One(b"192.0.2.7"),
                    ..head("POST", "/rpc")
                },
            ),
            (
                "X-Real-IP",
                RequestHead {
                    x_real_ip: HeaderField::One(b"192.0.2.7"),
                    ..head("POST", "/mcp")
                },
            ),
        ] {
            let Admission::Reply(reply) = admit(&open, &proxied_head) else {
                panic!("{name}: refused");
            };
            assert_eq!(reply.status, 403, "{name}");
            let detail = body_json(&reply)["error"]["data"]["detail"].clone();
            assert!(
                detail.as_str().is_some_and(|d| d.contains(name)),
                "{detail}"
            );
            // With a token the usual checks apply instead.
            let guarded = HttpPolicy {
                bearer_token: Some("tok".to_owned()),
                ..HttpPolicy::default()
            };
            assert!(matches!(
                admit(&guarded, &proxied_head),
                Admission::Reply(HttpReply { status: 401, .. })
            ));
        }
        // The probes stay open.
        let probe = RequestHead {
            x_forwarded_for: HeaderField::One(b"192.0.2.7"),
            ..head("GET", "/readyz")
        };
        assert!(matches!(
            admit(&open, &probe),
            Admission::Reply(HttpReply { status: 200, .. })
        ));
        assert!(check_behind_proxy(true, false).is_err());
        assert!(check_behind_proxy(true, true).is_ok());
        assert!(check_behind_proxy(false, false).is_ok());
    }

    #[test]
    fn behind_a_proxy_the_forwarded_host_and_origin_are_checked() {
        let policy = HttpPolicy {
            bearer_token: Some("tok".to_owned()),
            behind_proxy: true,
            allowed_hosts: vec!["gate.example.com".to_owned()],
            ..HttpPolicy::default()
        };
        let through = |forwarded: &'static [u8], origin: Option<&'static [u8]>| RequestHead {
            // nginx's default Host is the upstream's name.
            host: HeaderField::One(b"replicas"),
            forwarded: HeaderField::One(forwarded),
            origin: origin.map_or(HeaderField::Absent, HeaderField::One),
            authorization: HeaderField::One(b"Bearer tok"),
            server_address: loopback(8080),
            ..head("POST", "/rpc")
        };
        assert!(matches!(
            admit(
                &policy,
                &through(b"for=192.0.2.7;host=gate.example.com", None)
            ),
            Admission::Call(_)
        ));
        // The nearest proxy's element counts, not the client's own.
        assert!(matches!(
            admit(
                &policy,
                &through(
                    b"host=gate.example.com, for=192.0.2.7;host=\"evil.example\"",
                    None
                )
            ),
            Admission::Reply(HttpReply { status: 421, .. })
        ));
        assert!(matches!(
            admit(
                &policy,
                &through(
                    b"for=192.0.2.7;host=gate.example.com",
                    Some(b"http://localhost:3000")
                )
            ),
            Admission::Reply(HttpReply { status: 403, .. })
        ));
        let by_x_header = RequestHead {
            forwarded: HeaderField::Absent,
            x_forwarded_host: HeaderField::One(b"evil.example, gate.example.com"),
            ..through(b"", None)
        };
        assert!(matches!(admit(&policy, &by_x_header), Admission::Call(_)));
        let repeated = RequestHead {
            x_forwarded_host: HeaderField::Repeated(2),
            ..by_x_header
        };
        assert!(matches!(
            admit(&policy, &repeated),
            Admission::Reply(HttpReply { status: 400, .. })
        ));
        // Not behind a proxy: the raw Host must name the loopback bind.
        let direct = HttpPolicy {
            behind_proxy: false,
            ..policy.clone()
        };
        assert!(matches!(
            admit(
                &direct,
                &through(b"for=192.0.2.7;host=gate.example.com", None)
            ),
            Admission::Reply(HttpReply { status: 421, .. })
        ));
    }

    /// Issue 38 item 7: `X-Forwarded-Host` comes before `Forwarded`'s
    /// `host=` (as the configuration and deployment documents say); when
    /// both are sent they must agree, and `host=` is named once.
    #[test]
    fn forwarded_hosts_follow_the_documents_and_must_agree() {
        let policy = HttpPolicy {
            bearer_token: Some("tok".to_owned()),
            behind_proxy: true,
            allowed_hosts: vec!["gate.example.com".to_owned()],
            ..HttpPolicy::default()
        };
        let head_with =
            |x_forwarded: Option<&'static [u8]>, forwarded: Option<&'static [u8]>| RequestHead {
                host: HeaderField::One(b"replicas"),
                x_forwarded_host: x_forwarded.map_or(HeaderField::Absent, HeaderField::One),
                forwarded: forwarded.map_or(HeaderField::Absent, HeaderField::One),
                authorization: HeaderField::One(b"Bearer tok"),
                server_address: loopback(8080),
                ..head("POST", "/rpc")
            };
        let status = |head: &RequestHead<'_>| match admit(&policy, head) {
            Admission::Call(_) => 200,
            Admission::Reply(reply) => reply.status,
            Admission::Metrics => 0,
        };
        // X-Forwarded-Host is read first.
        let first = head_with(Some(b"gate.example.com"), None);
        assert_eq!(forwarded_host(&first), Ok(Some(&b"gate.example.com"[..])));
        assert_eq!(status(&first), 200);
        // Both, agreeing (case aside): served.
        let agreeing = head_with(
            Some(b"Gate.Example.com"),
            Some(b"for=192.0.2.7;host=gate.example.com"),
        );
        assert_eq!(status(&agreeing), 200);
        // Both, disagreeing: refused, whichever is the allowed one.
        for (x_forwarded, forwarded) in [
            (
                &b"gate.example.com"[..],
                &b"for=192.0.2.7;host=evil.example"[..],
            ),
            (
                &b"evil.example"[..],
                &b"for=192.0.2.7;host=gate.example.com"[..],
            ),
        ] {
            let head = RequestHead {
                x_forwarded_host: HeaderField::One(x_forwarded),
                forwarded: HeaderField::One(forwarded),
                ..head_with(None, None)
            };
            assert!(matches!(
                forwarded_host(&head),
                Err(ForwardedHostError::Disagree(..))
            ));
            assert_eq!(status(&head), 400);
        }
        // host= twice in the element: refused.
        let twice = head_with(
            None,
            Some(b"for=192.0.2.7;host=gate.example.com;host=evil.example"),
        );
        assert_eq!(
            forwarded_host(&twice),
            Err(ForwardedHostError::DuplicateHost)
        );
        assert_eq!(status(&twice), 400);
    }

    /// Issue 38 item 6: nginx's stock `proxy_pass` adds no forwarding
    /// header and rewrites `Host` to the upstream's address, but speaks
    /// HTTP/1.0: without a bearer token such a request is refused.
    #[test]
    fn an_http_1_0_request_counts_as_forwarded() {
        let open = HttpPolicy::default();
        let stock_nginx = RequestHead {
            host: HeaderField::One(b"127.0.0.1:8080"),
            server_address: loopback(8080),
            http_1_0: true,
            ..head("POST", "/rpc")
        };
        let Admission::Reply(reply) = admit(&open, &stock_nginx) else {
            panic!("an HTTP/1.0 request to a token-less server must be refused");
        };
        assert_eq!(reply.status, 403);
        assert!(String::from_utf8_lossy(&reply.body).contains("HTTP/1.0"));
        let local = RequestHead {
            http_1_0: false,
            ..stock_nginx
        };
        assert!(matches!(admit(&open, &local), Admission::Call(_)));
        // With a token, HTTP/1.0 is served like any request.
        let guarded = HttpPolicy {
            bearer_token: Some("tok".to_owned()),
            ..HttpPolicy::default()
        };
        let with_token = RequestHead {
            authorization: HeaderField::One(b"Bearer tok"),
            ..stock_nginx
        };
        assert!(matches!(admit(&guarded, &with_token), Admission::Call(_)));
    }

    #[test]
    fn an_expired_exchange_is_a_retryable_503() {
        let plan = plan(Endpoint::Mcp, false);
        let config = Arc::new(ServerConfig::default());
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":0}}}}}"#;
        let mut exchange = Exchange::start(&config, plan, body);
        while exchange.poll_event().is_some() {}
        assert_eq!(exchange.in_flight(), 1);
        assert_eq!(exchange.expire(), 1);
        assert!(exchange.is_finished());
        let reply = exchange.into_reply();
        assert_eq!(reply.status, 503);
        assert_eq!(reply.header("retry-after"), Some("1"));
        let answer = body_json(&reply);
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], -32072);
    }

    fn loopback(port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    #[test]
    fn header_fields_count_every_value() {
        let none: [&[u8]; 0] = [];
        assert_eq!(HeaderField::from_values(none), HeaderField::Absent);
        assert_eq!(
            HeaderField::from_values([b"a".as_slice()]),
            HeaderField::One(b"a")
        );
        assert_eq!(
            HeaderField::from_values([b"a".as_slice(), b"a", b"b"]),
            HeaderField::Repeated(3)
        );
        assert_eq!(HeaderField::Repeated(2).value(), None);
        assert_eq!(
            HeaderField::from(Some(b"x".as_slice())).value(),
            Some(&b"x"[..])
        );
    }

    #[test]
    fn repeated_singleton_headers_are_400_naming_the_header() {
        let policy = HttpPolicy {
            bearer_token: Some("tok".to_owned()),
            ..HttpPolicy::default()
        };
        let good = RequestHead {
            host: HeaderField::One(b"127.0.0.1:8080"),
            authorization: HeaderField::One(b"Bearer tok"),
            origin: HeaderField::One(b"http://localhost:8080"),
            content_length: HeaderField::One(b"2"),
            protocol_version: HeaderField::One(b"2025-06-18"),
            session_id: HeaderField::One(b"s"),
            server_address: loopback(8080),
            ..head("POST", "/mcp")
        };
        assert!(matches!(admit(&policy, &good), Admission::Call(_)));
        type Repeat = fn(&mut RequestHead<'static>);
        let cases: [(&str, Repeat); 6] = [
            ("Host", |head| head.host = HeaderField::Repeated(2)),
            ("Origin", |head| head.origin = HeaderField::Repeated(2)),
            ("Authorization", |head| {
                head.authorization = HeaderField::Repeated(2);
            }),
            ("Content-Length", |head| {
                head.content_length = HeaderField::Repeated(2);
            }),
            ("MCP-Protocol-Version", |head| {
                head.protocol_version = HeaderField::Repeated(2);
            }),
            ("Mcp-Session-Id", |head| {
                head.session_id = HeaderField::Repeated(2);
            }),
        ];
        for (name, repeat) in cases {
            let mut repeated = good;
            repeat(&mut repeated);
            let Admission::Reply(reply) = admit(&policy, &repeated) else {
                panic!("{name} twice is refused");
            };
            assert_eq!(reply.status, 400, "{name}");
            assert_eq!(body_json(&reply)["error"]["code"], -32600, "{name}");
            let detail = body_json(&reply)["error"]["data"]["detail"].to_string();
            assert!(
                detail.contains(&format!("the {name} header appears 2 times")),
                "{detail}"
            );
        }
        // Probes are answered whatever the headers.
        let probe = RequestHead {
            host: HeaderField::Repeated(2),
            ..head("GET", "/healthz")
        };
        assert!(matches!(
            admit(&policy, &probe),
            Admission::Reply(HttpReply { status: 200, .. })
        ));
    }

    #[test]
    fn host_rules_on_a_loopback_bind() {
        let policy = HttpPolicy::default();
        let server = loopback(8080);
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LocalHost:8080",
            "[::1]:8080",
            "127.0.0.2:8080",
            " 127.0.0.1:8080 ",
        ] {
            assert!(
                host_allowed(&policy, server, Some(host.as_bytes())),
                "{host}"
            );
        }
        for host in [
            "evil.example:8080",
            "evil.example",
            "127.0.0.1:8081",
            "localhost:80",
            "localhost",
            "localhost.:8080",
            "localhost:8080:8080",
            "localhost:",
            "localhost:99999",
            "[localhost]:8080",
            "[::1]8080",
            "::1:8080",
            "127.1:8080",
            "10.0.0.1:8080",
            "",
        ] {
            assert!(
                !host_allowed(&policy, server, Some(host.as_bytes())),
                "{host:?}"
            );
        }
        assert!(!host_allowed(&policy, server, Some(b"localhost\xff:8080")));
        assert!(
            !host_allowed(&policy, server, None),
            "a missing Host is refused"
        );
        // Port 80: a Host without a port names it.
        assert!(host_allowed(&policy, loopback(80), Some(b"localhost")));
        assert!(host_allowed(&policy, loopback(80), Some(b"127.0.0.1:80")));
        let v6 = Some(SocketAddr::from((Ipv6Addr::LOCALHOST, 9000)));
        assert!(host_allowed(&policy, v6, Some(b"[::1]:9000")));
        assert!(host_allowed(&policy, v6, Some(b"localhost:9000")));
        assert!(!host_allowed(&policy, v6, Some(b"[::2]:9000")));
        // Configured names, compared whole and ignoring case.
        let configured = HttpPolicy {
            allowed_hosts: vec!["gate.internal:8080".to_owned(), "gate.internal".to_owned()],
            ..HttpPolicy::default()
        };
        assert!(host_allowed(
            &configured,
            server,
            Some(b"Gate.Internal:8080")
        ));
        assert!(host_allowed(&configured, server, Some(b"gate.internal")));
        assert!(host_allowed(&configured, server, Some(b"localhost:8080")));
        assert!(!host_allowed(
            &configured,
            server,
            Some(b"gate.internal:9090")
        ));
        assert!(!host_allowed(
            &configured,
            server,
            Some(b"evil.gate.internal:8080")
        ));
    }

    #[test]
    fn host_rules_elsewhere() {
        let public = Some(SocketAddr::from(([0, 0, 0, 0], 8443)));
        let open = HttpPolicy::default();
        assert!(host_allowed(&open, public, Some(b"anything.example")));
        assert!(host_allowed(&open, None, None));
        let listed = HttpPolicy {
            allowed_hosts: vec!["gate.example.com".to_owned()],
            ..HttpPolicy::default()
        };
        assert!(host_allowed(&listed, public, Some(b"gate.example.com")));
        assert!(!host_allowed(&listed, public, Some(b"other.example.com")));
        assert!(!host_allowed(&listed, public, None));
    }

    #[test]
    fn wrong_host_is_421_with_the_forbidden_body() {
        let policy = HttpPolicy::default();
        let rebound = RequestHead {
            host: HeaderField::One(b"attacker.example:8080"),
            server_address: loopback(8080),
            ..head("POST", "/mcp")
        };
        let Admission::Reply(reply) = admit(&policy, &rebound) else {
            panic!("refused");
        };
        assert_eq!(reply.status, 421);
        assert_eq!(body_json(&reply)["error"]["code"], -32003);
        assert_eq!(body_json(&reply)["error"]["data"]["kind"], "forbidden");
        assert!(
            body_json(&reply)["error"]["data"]["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains("attacker.example:8080")
                    && detail.contains("allowed_hosts"))
        );
        let missing = RequestHead {
            server_address: loopback(8080),
            ..head("POST", "/mcp")
        };
        let Admission::Reply(reply) = admit(&policy, &missing) else {
            panic!("refused");
        };
        assert_eq!(reply.status, 421);
        let right = RequestHead {
            host: HeaderField::One(b"localhost:8080"),
            server_address: loopback(8080),
            ..head("POST", "/mcp")
        };
        assert!(matches!(admit(&policy, &right), Admission::Call(_)));
    }

    #[test]
    fn single_answers_only() {
        assert!(check_single_answer(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_ok());
        assert!(check_single_answer(b"").is_ok(), "left to the parser");
        assert_eq!(check_single_answer(b" \r\n[{}]"), Err(BatchAnswer));
        assert_eq!(check_single_answer(b"[]"), Err(BatchAnswer));
        assert!(BatchAnswer.to_string().contains("batch"));
    }

    fn budget(max_connections: usize, max_waiting: usize) -> ConnectionBudget {
        ConnectionBudget::new(ConnectionLimits {
            max_connections,
            max_waiting,
            pressure_head_ms: 100,
        })
    }

    /// Opens a connection at `now` whose first read finds half a head.
    fn half_head(budget: &mut ConnectionBudget, now: u64) -> (ConnectionId, Vec<ConnectionId>) {
        let (id, mut shed) = budget.open(now).expect("room");
        shed.extend(budget.first_read_done(id, now));
        (id, shed)
    }

    #[test]
    fn connection_budget_sheds_the_longest_waiting_once_it_waited_enough() {
        let mut budget = budget(4, 2);
        let (a, shed) = half_head(&mut budget, 0);
        assert!(shed.is_empty());
        let (b, shed) = half_head(&mut budget, 10);
        assert!(shed.is_empty());
        // Over the waiting budget, but nobody has waited 100 ms yet.
        let (c, shed) = half_head(&mut budget, 50);
        assert!(shed.is_empty());
        assert_eq!(budget.waiting_count(), 3);
        // Now the oldest has: it gives way to the next arrival.
        let (d, shed) = half_head(&mut budget, 100);
        assert_eq!(shed, vec![a]);
        assert!(!budget.head_received(a), "a shed connection is not served");
        assert_eq!((budget.open_count(), budget.waiting_count()), (3, 3));
        // Full: the next connection waits until someone has waited enough.
        let (e, shed) = budget.open(105).expect("a free slot");
        assert!(shed.is_empty());
        assert_eq!(budget.room(105), Room::At(110), "b waited since 10");
        assert!(budget.open(109).is_none());
        let (f, shed) = budget.open(110).expect("room by shedding b");
        assert_eq!(shed, vec![b]);
        // Connections in a request are never shed.
        assert!(budget.head_received(c));
        assert!(budget.head_received(d));
        assert!(budget.head_received(e));
        assert!(budget.head_received(f), "a head complete at the first read");
        assert!(budget.first_read_done(f, 110).is_empty());
        assert_eq!((budget.open_count(), budget.waiting_count()), (4, 0));
        assert_eq!(budget.room(10_000), Room::AfterClose);
        assert!(budget.open(10_000).is_none());
        // An idle keep-alive connection waits like a half head.
        assert!(budget.request_done(c, 200).is_empty());
        assert_eq!(budget.room(250), Room::At(300));
        let (_, shed) = budget.open(300).expect("room by shedding idle c");
        assert_eq!(shed, vec![c]);
        budget.close(d);
        budget.close(d);
        assert_eq!(budget.open_count(), 3);
        assert_eq!(budget.room(300), Room::Now);
        assert_eq!(budget.shed_count(), 3);
    }

    #[test]
    fn fresh_connections_are_never_shed() {
        // A burst of arrivals: none has been read yet, so none is shed,
        // however long they have been open.
        let mut budget = budget(3, 1);
        let fresh: Vec<ConnectionId> = (0..3).map(|_| budget.open(0).expect("room").0).collect();
        assert_eq!(budget.room(1_000), Room::AfterClose);
        // The first read of each: a whole head is served; half heads wait.
        assert!(budget.head_received(fresh[2]));
        assert!(budget.first_read_done(fresh[0], 1_000).is_empty());
        assert!(budget.first_read_done(fresh[1], 1_050).is_empty());
        assert!(budget.first_read_done(fresh[1], 1_050).is_empty(), "once");
        assert_eq!(budget.room(1_050), Room::At(1_100));
        // Over the waiting budget: the excess goes once it waited enough,
        // at the next event.
        assert_eq!(budget.request_done(fresh[2], 1_100), vec![fresh[0]]);
        // Limits are clamped to something usable.
        let mut tiny = ConnectionBudget::new(ConnectionLimits {
            max_connections: 0,
            max_waiting: 0,
            pressure_head_ms: 0,
        });
        assert_eq!(tiny.limits().max_connections, 1);
        let (first, _) = tiny.open(0).expect("one slot");
        assert!(tiny.open(0).is_none(), "fresh: not shed");
        assert!(tiny.first_read_done(first, 0).is_empty());
        let (_, shed) = tiny.open(0).expect("by shedding");
        assert_eq!(shed, vec![first]);
    }
}
