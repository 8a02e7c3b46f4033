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
//!    `/readyz` answer `{"status":…}`; another method on a known path is
//!    `405` with `Allow`; an unknown path is `404`.
//! 2. `Origin`: absent is accepted (non-browser clients); present, it must be
//!    on the allow-list or, when [`HttpPolicy::allow_loopback_origins`] is set,
//!    a loopback origin (`http://localhost:*`, `127.0.0.0/8`, `[::1]`).
//!    Otherwise `403 FORBIDDEN` (DNS-rebinding defence the MCP spec asks for).
//! 3. Bearer authentication when a token is configured: the header is
//!    compared in constant time (both sides hashed with SHA-256, digests
//!    compared with [`subtle`]); failure is `401 UNAUTHENTICATED` with
//!    `WWW-Authenticate: Bearer`.
//! 4. MCP headers: `Mcp-Session-Id` must be visible ASCII (it is echoed on
//!    the reply; this server keeps no sessions), `MCP-Protocol-Version` must
//!    name a supported version (and selects the MCP dialect on `/rpc`).
//! 5. A declared `Content-Length` over the body limit is `413
//!    PAYLOAD_TOO_LARGE` before any byte of the body is read; the adapter
//!    also counts bytes while reading ([`BodyLimit`]).
//!
//! Replies: no JSON-RPC answer (notifications, responses) is `202` with an
//! empty body; on `/rpc` an error answer gets the canonical row's HTTP
//! status; on `/mcp` an error answering an identified request is `200`
//! (the MCP SDK clients treat any other status as a transport failure and
//! never read the JSON-RPC error), while unreadable messages keep their row's
//! status. `Accept: text/event-stream` without `application/json` gets the
//! answer as one SSE event ([`encode_sse_event`]).
//!
//! Limits: the body limit is [`HttpPolicy::max_body_bytes`]; header values
//! are inspected, never copied, except a session id (at most
//! [`MAX_SESSION_ID_BYTES`]).

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::IpAddr;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::CanonicalError;
use crate::evidence::EvidenceResult;
use crate::frame::{Decoder, Framing, Limits};
use crate::server::{
    self, Dialect, DialectChoice, Outcome, RespondError, SUPPORTED_PROTOCOL_VERSIONS, Server,
    ServerConfig, ServerEvent, Ticket, ToolFailure,
};

/// Path of the Decision Gate style JSON-RPC endpoint.
pub const RPC_PATH: &str = "/rpc";
/// Path of the MCP streamable-HTTP endpoint.
pub const MCP_PATH: &str = "/mcp";
/// Path of the liveness probe.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Path of the readiness probe.
pub const READYZ_PATH: &str = "/readyz";
/// Longest `Mcp-Session-Id` accepted (and echoed).
pub const MAX_SESSION_ID_BYTES: usize = 256;
/// Realm named in `WWW-Authenticate`.
pub const AUTH_REALM: &str = "evidence-wire";

/// Media type of JSON bodies.
pub const CONTENT_TYPE_JSON: &str = "application/json";
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
    /// Most bytes a request body may hold (default 1 MiB).
    pub max_body_bytes: usize,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        HttpPolicy {
            bearer_token: None,
            allowed_origins: Vec::new(),
            allow_loopback_origins: true,
            max_body_bytes: Limits::default().max_body_bytes,
        }
    }
}

/// The parts of a request head the decisions look at. Header values are
/// raw bytes (HTTP allows non-UTF-8 values); `None` means absent. When a
/// header appears more than once, pass the first value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestHead<'a> {
    /// The method, e.g. `POST`.
    pub method: &'a str,
    /// The path, without the query string.
    pub path: &'a str,
    /// `Authorization`.
    pub authorization: Option<&'a [u8]>,
    /// `Origin`.
    pub origin: Option<&'a [u8]>,
    /// `Content-Length`.
    pub content_length: Option<&'a [u8]>,
    /// `Accept`.
    pub accept: Option<&'a [u8]>,
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a [u8]>,
    /// `Mcp-Session-Id`.
    pub session_id: Option<&'a [u8]>,
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
        HttpReply::json(status, server::encode_error(None, error, Some(detail)))
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
pub fn ready_reply() -> HttpReply {
    HttpReply::json(200, br#"{"status":"ready"}"#.to_vec())
}

/// `404` for a path that serves nothing, as a JSON-RPC `METHOD_NOT_FOUND` body.
pub fn not_found_reply(path: &str) -> HttpReply {
    let detail = format!(
        "nothing is served at {path:?}; POST JSON-RPC to {RPC_PATH} or {MCP_PATH}, GET {HEALTHZ_PATH} or {READYZ_PATH}"
    );
    HttpReply::error(404, CanonicalError::MethodNotFound, &detail)
}

/// `405` with `Allow`, as a JSON-RPC `INVALID_ENVELOPE` body.
pub fn method_not_allowed_reply(method: &str, path: &str, allow: &'static str) -> HttpReply {
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
    reply.headers.push(("retry-after", "1".to_owned()));
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
pub fn secrets_equal(expected: &[u8], presented: &[u8]) -> bool {
    let expected = Sha256::digest(expected);
    let presented = Sha256::digest(presented);
    bool::from(expected.as_slice().ct_eq(presented.as_slice()))
}

/// Checks `Authorization` against the configured token: the scheme
/// `Bearer` (any case), at least one space, then the token.
pub fn check_bearer(expected: Option<&str>, authorization: Option<&[u8]>) -> BearerCheck {
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
pub fn unauthenticated_reply(check: BearerCheck) -> HttpReply {
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
pub fn origin_allowed(policy: &HttpPolicy, origin: Option<&[u8]>) -> bool {
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
pub fn is_loopback_origin(origin: &[u8]) -> bool {
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

/// True for loopback addresses, IPv4-mapped IPv6 ones included.
pub fn is_loopback_ip(ip: IpAddr) -> bool {
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

/// True when `Accept` asks for server-sent events and not for JSON: it
/// lists `text/event-stream` and none of `application/json`,
/// `application/*`, `*/*` (ranges with `q=0` do not count).
pub fn wants_sse(accept: Option<&[u8]>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
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
pub fn encode_sse_event(json: &[u8], out: &mut Vec<u8>) {
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
pub fn session_id_valid(id: &[u8]) -> bool {
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
    /// Answer as one SSE event.
    pub sse: bool,
    /// The `Mcp-Session-Id` to echo.
    pub session_id: Option<String>,
    /// The body limit.
    pub body_limit: BodyLimit,
}

impl CallPlan {
    /// The server configuration for this call: `base` with the plan's
    /// dialect unless `base` already forces one.
    pub fn server_config(&self, base: &ServerConfig) -> ServerConfig {
        let mut config = base.clone();
        if let (DialectChoice::Auto, Some(dialect)) = (config.dialect, self.dialect) {
            config.dialect = DialectChoice::Fixed(dialect);
        }
        config
    }
}

/// What to do with a request, decided from its head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Answer at once with this reply (probe, refusal, error); do not read the body.
    Reply(HttpReply),
    /// Read the body and run an [`Exchange`].
    Call(CallPlan),
}

/// Decides what to do with a request from its head alone (see the module
/// docs for the order of the checks).
pub fn admit(policy: &HttpPolicy, head: &RequestHead<'_>) -> Admission {
    let endpoint = match route(head.method, head.path) {
        Route::Call(endpoint) => endpoint,
        Route::Health => return Admission::Reply(health_reply()),
        Route::Ready => return Admission::Reply(ready_reply()),
        Route::MethodNotAllowed { allow } => {
            return Admission::Reply(method_not_allowed_reply(head.method, head.path, allow));
        }
        Route::NotFound => return Admission::Reply(not_found_reply(head.path)),
    };
    if !origin_allowed(policy, head.origin) {
        let origin = String::from_utf8_lossy(head.origin.unwrap_or_default());
        let detail = format!(
            "requests from origin {origin:?} are not allowed; add it to the server's allowed origins"
        );
        return Admission::Reply(HttpReply::error(
            status_for(CanonicalError::Forbidden),
            CanonicalError::Forbidden,
            &detail,
        ));
    }
    let bearer = check_bearer(policy.bearer_token.as_deref(), head.authorization);
    if !bearer.is_allowed() {
        return Admission::Reply(unauthenticated_reply(bearer));
    }
    let session_id = match head.session_id {
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
    if let Some(version) = head.protocol_version {
        let version = trim_ascii(version);
        if !SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .any(|supported| supported.as_bytes() == version)
        {
            let detail = format!(
                "MCP-Protocol-Version {:?} is not supported; supported: {}",
                String::from_utf8_lossy(version),
                SUPPORTED_PROTOCOL_VERSIONS.join(", ")
            );
            return Admission::Reply(HttpReply::error(
                400,
                CanonicalError::InvalidEnvelope,
                &detail,
            ));
        }
        dialect = Some(Dialect::Mcp);
    }
    let body_limit = BodyLimit::new(policy.max_body_bytes);
    if body_limit.check_declared(head.content_length).is_err() {
        return Admission::Reply(payload_too_large_reply(policy.max_body_bytes));
    }
    Admission::Call(CallPlan {
        endpoint,
        dialect,
        sse: wants_sse(head.accept),
        session_id,
        body_limit,
    })
}

/// The HTTP status of a JSON-RPC answer: `outcomes` are the
/// [`ServerEvent::Handled`] records of the request body.
pub fn answer_status(endpoint: Endpoint, outcomes: &[Outcome]) -> u16 {
    let [outcome] = outcomes else {
        // A batch (or nothing recorded): the body says what failed.
        return 200;
    };
    match (outcome.error, endpoint) {
        (None, _) => 200,
        (Some(_), Endpoint::Mcp) if outcome.id.is_some() => 200,
        (Some(error), _) => status_for(error),
    }
}

/// One HTTP request body through a [`Server`]: the same pipeline as stdio,
/// so answers are byte-identical to what stdio would send (minus framing).
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
    output: Decoder,
}

impl Exchange {
    /// Runs `body` through `server` (made from [`CallPlan::server_config`]
    /// and set up like the stdio one). The body is handed over as one
    /// Content-Length frame, so pretty-printed JSON with newlines is fine.
    pub fn start(mut server: Server, plan: CallPlan, body: &[u8]) -> Self {
        let header = format!("Content-Length: {}\r\n\r\n", body.len());
        server.handle_input(header.as_bytes());
        if !body.is_empty() {
            server.handle_input(body);
        }
        server.handle_end_of_input();
        let limits = Limits {
            max_header_bytes: Limits::default().max_header_bytes,
            max_body_bytes: usize::MAX,
        };
        Exchange {
            server,
            plan,
            outcomes: Vec::new(),
            output: Decoder::with_framing(Framing::ContentLength, limits),
        }
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
    /// [`answer_status`] and the session id echoed.
    pub fn into_reply(mut self) -> HttpReply {
        while let Some(event) = self.server.poll_event() {
            if let ServerEvent::Handled(outcome) = event {
                self.outcomes.push(outcome);
            }
        }
        let mut bodies: Vec<Vec<u8>> = Vec::new();
        while let Some(bytes) = self.server.poll_transmit() {
            self.output.push(&bytes);
            while let Some(Ok(frame)) = self.output.poll_frame() {
                bodies.push(frame.body.to_vec());
            }
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
            authorization: Some(b"Bearer nope"),
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
            authorization: Some(b"Bearer tok"),
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
            origin: Some(b"https://evil.example"),
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
            content_length: Some(b"6"),
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
                    session_id: session,
                    protocol_version: version,
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
        let forced = ServerConfig {
            dialect: DialectChoice::Fixed(Dialect::DecisionGate),
            ..ServerConfig::default()
        };
        assert_eq!(
            plan.server_config(&forced).dialect,
            DialectChoice::Fixed(Dialect::DecisionGate)
        );
        assert_eq!(
            plan.server_config(&ServerConfig::default()).dialect,
            DialectChoice::Fixed(Dialect::Mcp)
        );
    }

    fn plan(endpoint: Endpoint, sse: bool) -> CallPlan {
        CallPlan {
            endpoint,
            // As `admit` decides: /mcp always speaks MCP.
            dialect: (endpoint == Endpoint::Mcp).then_some(Dialect::Mcp),
            sse,
            session_id: Some("s-1".to_owned()),
            body_limit: BodyLimit::new(1024),
        }
    }

    fn run(endpoint: Endpoint, sse: bool, body: &[u8]) -> HttpReply {
        let plan = plan(endpoint, sse);
        let server = Server::new(plan.server_config(&ServerConfig::default()));
        let mut exchange = Exchange::start(server, plan, body);
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
        let mcp = body_json(&run(Endpoint::Mcp, false, call));
        assert_eq!(mcp["result"]["content"][0]["type"], "text");
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
}
