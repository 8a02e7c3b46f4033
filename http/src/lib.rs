//! The HTTP transport's decisions, as pure functions (sans-IO).
//!
//! An HTTP adapter reads a request head, asks [`admit`] whether and how to
//! serve it, reads the body within [`BodyLimit`], runs one [`Exchange`] (the
//! same [`Server`] pipeline as stdio, one state machine per request body)
//! and writes the [`HttpReply`] it gets. Every status code, header value and
//! error body comes from here and from [`evidence_wire::error`]; the adapter only
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
//!
//! The crate is `#![no_std]` + `alloc`, like the core it wraps: it reads no
//! socket and no clock. Its rooms: `route` (paths and routes), `admit` (the
//! rules above: policy, request heads, proxies, `Host`, `Origin`, bearer,
//! body limits, the call plan), `reply` (statuses, headers and bodies of
//! every reply, SSE), `budget` (the connection budget) and `exchange` (one
//! request body through a [`Server`], and the reply's status). The tokio
//! adapter's tower service and standalone server are its plumbing.

#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod admit;
mod budget;
mod exchange;
mod reply;
mod route;

pub use admit::{
    Admission, BearerCheck, BindRefused, BodyLimit, BodyTooLarge, CallPlan, HeaderField,
    HttpPolicy, Lifecycle, MetricsAccess, ProxyRefused, RequestHead, SINGLETON_HEADERS, admit,
    admit_during, check_behind_proxy, check_bind, route_for,
};
pub use budget::{ConnectionBudget, ConnectionId, ConnectionLimits, Room};
pub use exchange::{BatchAnswer, Exchange, check_single_answer};
pub use reply::{
    HttpReply, draining_reply, health_reply, metrics_reply, overloaded_reply,
    payload_too_large_reply, status_for, unreadable_body_reply,
};
pub use route::{
    AUTH_REALM, CONTENT_TYPE_METRICS, CONTENT_TYPE_SSE, Endpoint, HEALTHZ_PATH,
    MAX_SESSION_ID_BYTES, MCP_PATH, METRICS_PATH, READYZ_PATH, RETRY_AFTER_SECONDS, RPC_PATH,
    Route, Routing, route, route_mounted,
};

#[cfg(doc)]
use evidence_wire::server::Server;

/// `bytes` without leading and trailing ASCII whitespace.
pub(crate) fn trim_ascii(bytes: &[u8]) -> &[u8] {
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
mod tests;
