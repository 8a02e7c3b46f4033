//! Admission: what a request head must show before its body is read (the
//! rules of the crate docs, in order), and the plan for the call it carries.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::{IpAddr, SocketAddr};

use evidence_wire::dialect::McpRevision;
use evidence_wire::error::CanonicalError;
use evidence_wire::evidence::CONTENT_TYPE_JSON;
use evidence_wire::frame::Limits;
use evidence_wire::server::{Dialect, MessageHeaders};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::reply::*;
use crate::route::*;
use crate::trim_ascii;

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
    /// The standalone server's fixed paths (the default), or mounted at
    /// one path of an application ([`route_for`]).
    pub routing: Routing,
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
            routing: Routing::Standalone,
        }
    }
}

impl RequestHead<'_> {
    /// True when the request comes from an MCP client: it sends
    /// `MCP-Protocol-Version` (from the second request on) or lists
    /// `text/event-stream` in `Accept` (every streamable-HTTP request).
    pub fn from_mcp_client(&self) -> bool {
        self.protocol_version != HeaderField::Absent
            || self.accept.is_some_and(|accept| {
                accept
                    .windows(CONTENT_TYPE_SSE.len())
                    .any(|window| window.eq_ignore_ascii_case(CONTENT_TYPE_SSE.as_bytes()))
            })
    }
}

/// Where `head` goes under `policy`'s [`Routing`]: by its path on the
/// standalone server ([`route`]), by its method and caller when mounted
/// ([`route_mounted`]).
pub fn route_for(policy: &HttpPolicy, head: &RequestHead<'_>) -> Route {
    match policy.routing {
        Routing::Standalone => route(head.method, head.path),
        Routing::Mounted => route_mounted(head.method, head.from_mcp_client()),
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

pub(crate) fn is_port(text: &str) -> bool {
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
pub(crate) fn names_loopback(host: &[u8], port: u16) -> bool {
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
        // The usual name first, without parsing an address (~200
        // instructions a request); the parse decides every other one.
        let loopback = name == "127.0.0.1"
            || name.eq_ignore_ascii_case("localhost")
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
pub(crate) const USUAL_ACCEPT: [&[u8]; 2] =
    [b"application/json, text/event-stream", b"application/json"];

/// [`wants_sse`] by parsing the media ranges.
pub(crate) fn ranges_want_sse(accept: &[u8]) -> bool {
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
    /// Read the body and run an [`Exchange`](crate::Exchange).
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
    let endpoint = match route_for(policy, head) {
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
                evidence_wire::envelope::encode_error_object(None, &object),
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
