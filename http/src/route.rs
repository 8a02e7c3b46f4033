//! Routes: the paths the standalone server answers, and what each is for;
//! or, for a service mounted at one path of an application, what each
//! method is for there.

/// Path of the Decision Gate style JSON-RPC endpoint.
pub const RPC_PATH: &str = "/rpc";
/// Path of the MCP streamable-HTTP endpoint.
pub const MCP_PATH: &str = "/mcp";
/// Path of the liveness probe.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Path of the readiness probe.
pub const READYZ_PATH: &str = "/readyz";
/// Path of the Prometheus scrape ([`HttpPolicy::metrics`](crate::HttpPolicy::metrics)).
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
#[non_exhaustive]
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

/// Where the HTTP layer answers: the standalone server's fixed paths, or
/// one path of an application it is mounted in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Routing {
    /// The fixed paths of [`route`]: `POST /rpc`, `POST /mcp`, the probes
    /// and `/metrics`.
    #[default]
    Standalone,
    /// Mounted at one path of an application (an axum route, a hyper
    /// service): [`route_mounted`] answers whatever the path.
    Mounted,
}

/// Routes a request to a service mounted at one path: `POST` is a call,
/// anything else `405` with `Allow: POST` (the application serves its own
/// probes and metrics). The endpoint follows the caller: an MCP client
/// (one that sends `MCP-Protocol-Version`, or lists `text/event-stream` in
/// `Accept`, as the streamable-HTTP transport requires of every MCP
/// client) gets [`Endpoint::Mcp`]'s statuses, any other caller (Decision
/// Gate) [`Endpoint::Rpc`]'s.
pub fn route_mounted(method: &str, mcp_client: bool) -> Route {
    match method {
        "POST" if mcp_client => Route::Call(Endpoint::Mcp),
        "POST" => Route::Call(Endpoint::Rpc),
        _ => Route::MethodNotAllowed { allow: "POST" },
    }
}
