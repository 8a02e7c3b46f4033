//! Routes: the paths the standalone server answers, and what each is for.

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
