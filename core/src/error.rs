//! The closed table of canonical errors.
//!
//! Every error evidence-wire answers on the wire (on stdio, HTTP or SSE)
//! is one row of [`CanonicalError`]: a stable code name, an HTTP status, a
//! JSON-RPC error code and a fixed message. The four rows of the envelope
//! contract (`INVALID_ENVELOPE`, `INVALID_TOOL_INPUT`, `TOOL_NOT_FOUND`,
//! `INTERNAL_ERROR`) are fixed by the seed; the others are ours and are
//! documented in `spec/errors.md`.
//!
//! The table is closed: parsing an unknown code name is an error
//! ([`UnknownErrorCode`]), never a fallback to some default row.

use alloc::string::String;
use core::fmt;
use core::str::FromStr;
use serde::Serialize;

use crate::id::Id;

/// One row of the canonical error table.
///
/// The table is closed for parsing (an unknown code name is an error, see
/// [`UnknownErrorCode`]) but not exhaustive for matching: it has grown
/// (`HEADER_MISMATCH` and `UNSUPPORTED_PROTOCOL_VERSION` came with MCP
/// 2026-07-28) and may grow again, so a `match` needs a wildcard arm.
/// [`CanonicalError::ALL`] lists every row; guard tests hold
/// `spec/errors.md` and the validation-log schema to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CanonicalError {
    /// The message is not a valid JSON-RPC envelope (400 / -32600).
    InvalidEnvelope,
    /// The tool's arguments do not match its input schema (422 / -32602).
    InvalidToolInput,
    /// No such tool, or the tool is hidden (404 / -32001).
    ToolNotFound,
    /// The server failed while handling a valid request (500 / -32603).
    InternalError,
    /// The message body is not JSON (400 / -32700).
    ParseError,
    /// No such JSON-RPC method (404 / -32601).
    MethodNotFound,
    /// The caller did not authenticate, or its credentials are wrong (401 / -32004).
    Unauthenticated,
    /// The caller is authenticated but may not call this tool (403 / -32003).
    Forbidden,
    /// The message is larger than the configured limit (413 / -32070).
    PayloadTooLarge,
    /// The caller sent too many requests (429 / -32071).
    RateLimited,
    /// The server is at its concurrency limit (503 / -32072).
    Overloaded,
    /// No resource has the requested URI (404 / -32002).
    ResourceNotFound,
    /// A stateless MCP request's HTTP headers disagree with its body
    /// (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) (400 / -32020).
    HeaderMismatch,
    /// The request names an MCP protocol revision this server does not
    /// speak; `data.supported` lists the ones it does (400 / -32022).
    UnsupportedProtocolVersion,
}

impl CanonicalError {
    /// Every row, in table order.
    pub const ALL: [CanonicalError; 14] = [
        CanonicalError::InvalidEnvelope,
        CanonicalError::InvalidToolInput,
        CanonicalError::ToolNotFound,
        CanonicalError::InternalError,
        CanonicalError::ParseError,
        CanonicalError::MethodNotFound,
        CanonicalError::Unauthenticated,
        CanonicalError::Forbidden,
        CanonicalError::PayloadTooLarge,
        CanonicalError::RateLimited,
        CanonicalError::Overloaded,
        CanonicalError::ResourceNotFound,
        CanonicalError::HeaderMismatch,
        CanonicalError::UnsupportedProtocolVersion,
    ];

    /// The stable code name, e.g. `INVALID_ENVELOPE`.
    pub const fn name(self) -> &'static str {
        self.row().0
    }

    /// The HTTP status this error is answered with.
    pub const fn http_status(self) -> u16 {
        self.row().1
    }

    /// The JSON-RPC `error.code`.
    pub const fn jsonrpc_code(self) -> i32 {
        self.row().2
    }

    /// The fixed JSON-RPC `error.message`.
    pub const fn message(self) -> &'static str {
        self.row().3
    }

    /// A stable machine-readable kind for `error.data.kind`, e.g. `invalid_envelope`.
    pub const fn kind(self) -> &'static str {
        self.row().4
    }

    /// True when the same request may succeed if sent again later.
    pub const fn retryable(self) -> bool {
        matches!(
            self,
            CanonicalError::RateLimited | CanonicalError::Overloaded
        )
    }

    /// The row whose JSON-RPC code is `code`, if any.
    pub fn from_jsonrpc_code(code: i32) -> Option<CanonicalError> {
        CanonicalError::ALL
            .into_iter()
            .find(|error| error.jsonrpc_code() == code)
    }

    /// Renders the JSON-RPC error object `{code, message, data}`.
    ///
    /// `request_id` is the id of the request when it could be read; `None`
    /// (and [`Id::Null`]) render `data.request_id` as `null`. `detail`
    /// says, for a person, what exactly was wrong.
    pub fn error_object(self, request_id: Option<&Id<'_>>, detail: Option<&str>) -> ErrorObject {
        ErrorObject {
            code: self.jsonrpc_code(),
            message: String::from(self.message()),
            data: ErrorData {
                kind: self.kind(),
                retryable: self.retryable(),
                request_id: request_id.map_or(Id::Null, |id| id.as_borrowed().into_owned()),
                detail: detail.map(String::from),
                pointer: None,
                supported: None,
                requested: None,
            },
        }
    }

    /// (name, HTTP status, JSON-RPC code, message, kind)
    const fn row(self) -> (&'static str, u16, i32, &'static str, &'static str) {
        match self {
            CanonicalError::InvalidEnvelope => (
                "INVALID_ENVELOPE",
                400,
                -32600,
                "Invalid MCP envelope",
                "invalid_envelope",
            ),
            CanonicalError::InvalidToolInput => (
                "INVALID_TOOL_INPUT",
                422,
                -32602,
                "Invalid tool input",
                "invalid_tool_input",
            ),
            CanonicalError::ToolNotFound => (
                "TOOL_NOT_FOUND",
                404,
                -32001,
                "Unknown tool",
                "tool_not_found",
            ),
            CanonicalError::InternalError => (
                "INTERNAL_ERROR",
                500,
                -32603,
                "Internal error",
                "internal_error",
            ),
            CanonicalError::ParseError => {
                ("PARSE_ERROR", 400, -32700, "Parse error", "parse_error")
            }
            CanonicalError::MethodNotFound => (
                "METHOD_NOT_FOUND",
                404,
                -32601,
                "Method not found",
                "method_not_found",
            ),
            CanonicalError::Unauthenticated => (
                "UNAUTHENTICATED",
                401,
                -32004,
                "Unauthenticated",
                "unauthenticated",
            ),
            CanonicalError::Forbidden => ("FORBIDDEN", 403, -32003, "Forbidden", "forbidden"),
            CanonicalError::PayloadTooLarge => (
                "PAYLOAD_TOO_LARGE",
                413,
                -32070,
                "Payload too large",
                "payload_too_large",
            ),
            CanonicalError::RateLimited => {
                ("RATE_LIMITED", 429, -32071, "Rate limited", "rate_limited")
            }
            CanonicalError::Overloaded => ("OVERLOADED", 503, -32072, "Overloaded", "overloaded"),
            CanonicalError::ResourceNotFound => (
                "RESOURCE_NOT_FOUND",
                404,
                -32002,
                "Resource not found",
                "resource_not_found",
            ),
            CanonicalError::HeaderMismatch => (
                "HEADER_MISMATCH",
                400,
                -32020,
                "Header mismatch",
                "header_mismatch",
            ),
            CanonicalError::UnsupportedProtocolVersion => (
                "UNSUPPORTED_PROTOCOL_VERSION",
                400,
                -32022,
                "Unsupported protocol version",
                "unsupported_protocol_version",
            ),
        }
    }
}

impl fmt::Display for CanonicalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.message())
    }
}

/// A code name that is not in the canonical table.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown canonical error code `{0}`: the table is closed (see spec/errors.md for the valid names)"
)]
pub struct UnknownErrorCode(pub String);

impl FromStr for CanonicalError {
    type Err = UnknownErrorCode;

    /// Parses a code name such as `TOOL_NOT_FOUND` (exact, upper case).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        CanonicalError::ALL
            .into_iter()
            .find(|error| error.name() == name)
            .ok_or_else(|| UnknownErrorCode(String::from(name)))
    }
}

impl TryFrom<&str> for CanonicalError {
    type Error = UnknownErrorCode;

    fn try_from(name: &str) -> Result<Self, Self::Error> {
        name.parse()
    }
}

/// The JSON-RPC `error` member: `{code, message, data}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorObject {
    /// The JSON-RPC error code.
    pub code: i32,
    /// The fixed message of the canonical row.
    pub message: String,
    /// Machine-readable details.
    pub data: ErrorData,
}

/// The `data` member of a canonical error.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorData {
    /// Stable machine-readable kind, e.g. `tool_not_found`.
    pub kind: &'static str,
    /// True when retrying later may succeed.
    pub retryable: bool,
    /// The request id when it could be read, otherwise `null`; echoed as
    /// sent (`-0` included).
    pub request_id: Id<'static>,
    /// What exactly was wrong, for a person; omitted when there is nothing to add.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// JSON pointer (RFC 6901) to the first offending place in the tool's
    /// input, for `INVALID_TOOL_INPUT`; omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// For `UNSUPPORTED_PROTOCOL_VERSION`: the MCP revisions the server
    /// speaks, newest first; omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supported: Option<alloc::vec::Vec<&'static str>>,
    /// For `UNSUPPORTED_PROTOCOL_VERSION`: the revision the request named;
    /// omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested: Option<String>,
}

impl ErrorObject {
    /// The same object naming the revisions the server speaks and the one
    /// that was requested (`UNSUPPORTED_PROTOCOL_VERSION`).
    pub fn with_versions(
        mut self,
        supported: alloc::vec::Vec<&'static str>,
        requested: impl Into<String>,
    ) -> Self {
        self.data.supported = Some(supported);
        self.data.requested = Some(requested.into());
        self
    }

    /// The same object with `data.pointer` set.
    pub fn with_pointer(mut self, pointer: impl Into<String>) -> Self {
        self.data.pointer = Some(pointer.into());
        self
    }
}
