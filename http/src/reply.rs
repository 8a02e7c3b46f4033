//! Replies: the status, headers and body of every answer the HTTP layer
//! gives itself (probes, refusals, limits), and one server-sent event.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use evidence_wire::error::CanonicalError;
use evidence_wire::evidence::CONTENT_TYPE_JSON;

use crate::route::*;

/// The HTTP status a canonical error is answered with (the table's column).
pub const fn status_for(error: CanonicalError) -> u16 {
    error.http_status()
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
    pub(crate) fn json(status: u16, body: Vec<u8>) -> Self {
        HttpReply {
            status,
            headers: alloc::vec![("content-type", CONTENT_TYPE_JSON.to_owned())],
            body,
        }
    }

    pub(crate) fn error(status: u16, error: CanonicalError, detail: &str) -> Self {
        HttpReply::json(
            status,
            evidence_wire::envelope::encode_error(None, error, Some(detail)),
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
