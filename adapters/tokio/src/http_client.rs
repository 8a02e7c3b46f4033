//! The HTTP provider client on hyper: HTTP/1.1, or HTTP/2 when a TLS
//! server offers it, over pooled keep-alive connections.
//!
//! [`HttpProvider::query`] POSTs one `tools/call` of `evidence_query` to
//! the configured URL and verifies the answer through the core [`Client`],
//! exactly like the child-process client: the same request bytes, the same
//! id matching, the same hash (and signature) checks, the same deadline
//! ([`Client::poll_timeout`], answered [`QueryError::Timeout`]).
//!
//! Rules: the URL must be `https://` unless
//! [`HttpProviderConfig::allow_insecure_http`] is set. TLS is rustls (ring
//! provider, TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`); the server's
//! certificate must chain to a trusted root and name the URL's host (a DNS
//! name or an IP address). Trusted roots are the Mozilla set bundled by
//! `webpki-roots` (unless [`HttpProviderConfig::trust_public_roots`] is
//! false) plus every certificate in
//! [`HttpProviderConfig::extra_root_certificates_pem`] (a private CA or a
//! self-signed provider). A failed handshake is a [`ProviderError::Tls`]
//! naming the cause (unknown issuer, wrong name, expired). Redirects are
//! never followed: a 3xx is a [`ProviderError::HttpStatus`] carrying its
//! `Location`, as is every other non-2xx. The bearer token goes in
//! `Authorization`, the context's correlation id in `x-correlation-id`.
//!
//! The answer must be one JSON-RPC response: a JSON array (a batch) is
//! refused as [`ProviderError::UnexpectedResponse`] naming the problem
//! ([`http::check_single_answer`]), since one request was sent.
//!
//! Limits: a connect timeout (TCP connect and TLS handshake), the request
//! deadline over the whole exchange (waiting for a connection included),
//! and a response cap (checked against `Content-Length` before reading,
//! counted while reading, so a peer that streams without end is cut off at
//! the cap).
//!
//! # Connections
//!
//! An `HttpProvider` (and every clone of it) keeps its connections to the
//! provider in one pool, built on hyper's connection API:
//!
//! - At most [`HttpProviderConfig::max_connections`] are open at once
//!   (default 32). Over HTTP/1.1 a connection carries one request at a
//!   time, so past that many queries in flight a query waits for a
//!   connection to come back (or to close), within its deadline.
//! - Over TLS the client offers `h2` by ALPN; when the server picks it,
//!   that one HTTP/2 connection carries every query at once (up to the
//!   server's stream limit) and no other is opened while it lives.
//! - A connection whose answer was read to its end goes back to the pool,
//!   at most [`HttpProviderConfig::pool_max_idle`] idle ones (default 32;
//!   0 keeps none: one connection per query), each closed once it has been
//!   idle for [`HttpProviderConfig::pool_idle_timeout`] (default 4 s, under
//!   the usual 5 s after which servers close idle keep-alive connections,
//!   so the client, not the server, normally closes them).
//! - A connection is closed, never reused, after anything but a whole
//!   answer: an exchange error, a deadline that passed mid-exchange (the
//!   HTTP/2 connection then takes no new queries and closes once its other
//!   queries end), an answer over the cap or a non-2xx answer not read to
//!   its end over HTTP/1.1 (over HTTP/2 only that request's stream is
//!   reset).
//! - A pooled connection the server has closed is skipped. If one fails a
//!   query before the request was sent (the server closed it just as it
//!   was picked), the query is sent once more on a new connection; a
//!   request that was sent is never sent again.

use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId};
use evidence_wire::evidence::CONTENT_TYPE_JSON;
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use evidence_wire::trace::TraceContext;
use evidence_wire_http::{self as http, BodyLimit};
use futures_lite::future::or;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, RootCertStore};

use evidence_wire_provider::caller::ProviderError;

/// The W3C trace context headers a traced query carries.
static TRACEPARENT: HeaderName = HeaderName::from_static(TraceContext::TRACEPARENT);
static TRACESTATE: HeaderName = HeaderName::from_static(TraceContext::TRACESTATE);

/// Bytes of a non-2xx body read to explain the failure.
const ERROR_DETAIL_BYTES: usize = 4096;

/// How long an HTTP/1.1 connection that answered may take to be ready for
/// its next request; past it, it is closed instead of pooled.
const READY_WAIT: Duration = Duration::from_secs(1);

/// The request body type of every connection.
type Body = Full<Bytes>;

/// How to reach an HTTP provider.
#[derive(Clone)]
#[non_exhaustive]
pub struct HttpProviderConfig {
    /// The URL to POST to, e.g. `https://evidence.example.com/rpc`.
    pub url: String,
    /// Allow plain `http://` (default false: only for loopback or trusted networks).
    pub allow_insecure_http: bool,
    /// Sent as `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// How long connecting may take (default 2 s, Decision Gate's default).
    pub connect_timeout: Duration,
    /// The protocol settings: request timeout (`request_timeout_ms`, default
    /// 10 s), trust policy, canonicalization profile, frame limits.
    pub client: ClientConfig,
    /// Most bytes an answer may hold (default 1 MiB).
    pub max_response_bytes: usize,
    /// For `https://`: trust the Mozilla root set bundled by `webpki-roots`
    /// (default true). Set false to trust only
    /// [`extra_root_certificates_pem`](Self::extra_root_certificates_pem).
    pub trust_public_roots: bool,
    /// For `https://`: more trusted roots, each entry PEM text holding one
    /// or more `CERTIFICATE` blocks (a private CA, or a provider's
    /// self-signed certificate). Empty by default.
    pub extra_root_certificates_pem: Vec<String>,
    /// Most connections open to the provider at once (default 32, at least
    /// 1). Over HTTP/1.1 each carries one query at a time: past this many
    /// queries in flight, a query waits for a connection, within its
    /// deadline. An HTTP/2 connection carries them all.
    pub max_connections: usize,
    /// Most idle connections kept for the next queries (default 32); one
    /// more that comes back is closed. 0 keeps none: every query opens its
    /// own connection and closes it.
    pub pool_max_idle: usize,
    /// How long a connection may stay idle in the pool before it is closed
    /// (default 4 s: under the 5 s after which many servers close idle
    /// keep-alive connections, so that the client closes first).
    pub pool_idle_timeout: Duration,
}

impl HttpProviderConfig {
    /// POST to `url` with default settings.
    pub fn new(url: impl Into<String>) -> Self {
        HttpProviderConfig {
            url: url.into(),
            allow_insecure_http: false,
            bearer_token: None,
            connect_timeout: Duration::from_millis(2000),
            client: ClientConfig::default(),
            max_response_bytes: 1024 * 1024,
            trust_public_roots: true,
            extra_root_certificates_pem: Vec::new(),
            max_connections: 32,
            pool_max_idle: 32,
            pool_idle_timeout: Duration::from_secs(4),
        }
    }

    /// The same settings also trusting the root certificate(s) in `pem`
    /// for `https://` (may be called more than once).
    pub fn with_root_certificate_pem(mut self, pem: impl Into<String>) -> Self {
        self.extra_root_certificates_pem.push(pem.into());
        self
    }

    /// The same settings trusting (or not) the bundled public roots.
    pub fn with_public_roots(mut self, trust: bool) -> Self {
        self.trust_public_roots = trust;
        self
    }

    /// The same settings allowing (or not) plain `http://`.
    pub fn with_insecure_http(mut self, allow: bool) -> Self {
        self.allow_insecure_http = allow;
        self
    }

    /// The same settings with a bearer token.
    pub fn with_bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }

    /// The same settings with `client`.
    pub fn with_client(mut self, client: ClientConfig) -> Self {
        self.client = client;
        self
    }

    /// The same settings with a connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The same settings with a response cap.
    pub fn with_max_response_bytes(mut self, limit: usize) -> Self {
        self.max_response_bytes = limit;
        self
    }

    /// The same settings with at most `limit` connections open at once.
    pub fn with_max_connections(mut self, limit: usize) -> Self {
        self.max_connections = limit;
        self
    }

    /// The same settings keeping at most `limit` idle connections (0: none).
    pub fn with_pool_max_idle(mut self, limit: usize) -> Self {
        self.pool_max_idle = limit;
        self
    }

    /// The same settings closing a connection idle for `timeout`.
    pub fn with_pool_idle_timeout(mut self, timeout: Duration) -> Self {
        self.pool_idle_timeout = timeout;
        self
    }
}

impl std::fmt::Debug for HttpProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProviderConfig")
            .field("url", &self.url)
            .field("allow_insecure_http", &self.allow_insecure_http)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("client", &self.client)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("trust_public_roots", &self.trust_public_roots)
            .field(
                "extra_root_certificates_pem",
                &self.extra_root_certificates_pem.len(),
            )
            .field("max_connections", &self.max_connections)
            .field("pool_max_idle", &self.pool_max_idle)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .finish()
    }
}

#[derive(Debug)]
struct Target {
    /// Host for connecting (IPv6 without brackets).
    host: String,
    port: u16,
    /// `Host` header value.
    authority: HeaderValue,
    /// Request target over HTTP/1.1 (path and query).
    path: Uri,
    /// Request target over HTTP/2 (the whole URL: scheme, authority, path).
    absolute: Uri,
    authorization: Option<HeaderValue>,
    /// TLS settings and the name the certificate must hold, for `https://`.
    tls: Option<Tls>,
}

struct Tls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A provider reached over HTTP. Cheap to clone (clones share the
/// connections); queries may run concurrently.
#[derive(Clone, Debug)]
pub struct HttpProvider {
    config: Arc<HttpProviderConfig>,
    target: Arc<Target>,
    pool: Arc<Pool>,
}

impl HttpProvider {
    /// Check the URL and settings; nothing is connected yet.
    pub fn new(config: HttpProviderConfig) -> Result<Self, ProviderError> {
        let refuse = |reason: &str| ProviderError::Url {
            url: config.url.clone(),
            reason: reason.to_owned(),
        };
        let uri: Uri = config
            .url
            .parse()
            .map_err(|error| refuse(&format!("not a valid URL: {error}")))?;
        let secure = match uri.scheme_str() {
            Some("http") if config.allow_insecure_http => false,
            Some("http") => {
                return Err(refuse(
                    "plain http:// sends queries and the bearer token unencrypted; use https://, or set allow_insecure_http = true for a loopback or trusted network",
                ));
            }
            Some("https") => true,
            _ => {
                return Err(refuse(
                    "the URL must start with https:// (or http:// with allow_insecure_http)",
                ));
            }
        };
        let Some(authority) = uri.authority() else {
            return Err(refuse("the URL names no host"));
        };
        if authority.as_str().contains('@') {
            return Err(refuse(
                "credentials in the URL are not supported; use the bearer token setting",
            ));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if host.is_empty() {
            return Err(refuse("the URL names no host"));
        }
        if config.max_connections == 0 {
            return Err(refuse("max_connections must be at least 1"));
        }
        let port = authority
            .port_u16()
            .unwrap_or(if secure { 443 } else { 80 });
        let path: Uri = uri
            .path_and_query()
            .map_or("/", |path| path.as_str())
            .parse()
            .map_err(|error| refuse(&format!("invalid path: {error}")))?;
        let absolute = Uri::builder()
            .scheme(if secure { "https" } else { "http" })
            .authority(authority.as_str())
            .path_and_query(path.path_and_query().map_or("/", |path| path.as_str()))
            .build()
            .map_err(|error| refuse(&format!("not a valid URL: {error}")))?;
        let authority = HeaderValue::try_from(authority.as_str())
            .map_err(|_| refuse("the host cannot be sent in a Host header"))?;
        let authorization = match &config.bearer_token {
            None => None,
            Some(token) => {
                let mut value = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
                    refuse("the bearer token holds characters an HTTP header cannot carry")
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let tls = if secure {
            let name = ServerName::try_from(host.clone()).map_err(|_| {
                refuse("the host is neither a DNS name nor an IP address a certificate can name")
            })?;
            Some(Tls {
                connector: TlsConnector::from(Arc::new(
                    tls_config(&config).map_err(|reason| refuse(&reason))?,
                )),
                name,
            })
        } else {
            None
        };
        Ok(HttpProvider {
            pool: Arc::new(Pool::new(&config)),
            target: Arc::new(Target {
                host,
                port,
                authority,
                path,
                absolute,
                authorization,
                tls,
            }),
            config: Arc::new(config),
        })
    }

    /// Ask one query and wait for its verified answer (or its typed failure).
    pub async fn query(
        &self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
    ) -> Result<VerifiedEvidence, ProviderError> {
        self.query_traced(query, context, None).await
    }

    /// [`HttpProvider::query`] continuing the caller's W3C trace: with
    /// `trace`, the request carries it in the `traceparent` (and
    /// `tracestate`) headers and in `params._meta`, so the provider's span
    /// and validation-log record name the caller's trace. Without one the
    /// request is exactly [`HttpProvider::query`]'s. Send the caller's own
    /// current span as the context's parent id.
    pub async fn query_traced(
        &self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
        trace: Option<&TraceContext>,
    ) -> Result<VerifiedEvidence, ProviderError> {
        let epoch = Instant::now();
        let mut settings = self.config.client.clone();
        settings.handshake = false;
        let mut client = Client::new(settings);
        let id = client.query_traced(query, context, trace, 0);
        // Without a handshake the query is the one message to send.
        let body = client.poll_message().unwrap_or_default();
        let deadline_ms = client
            .poll_timeout()
            .unwrap_or(self.config.client.request_timeout_ms);
        let deadline = epoch + Duration::from_millis(deadline_ms);
        let posted = tokio::time::timeout_at(
            deadline,
            self.post(body, context.correlation_id.as_deref(), trace),
        )
        .await;
        match posted {
            Err(_elapsed) => client.handle_timeout(deadline_ms),
            Ok(Err(error)) => return Err(error),
            Ok(Ok(answer)) => {
                // One request went out: a batch (array) is not its answer.
                http::check_single_answer(&answer)
                    .map_err(|batch| ProviderError::UnexpectedResponse(batch.to_string()))?;
                client.handle_message(&answer);
            }
        }
        take_answer(&mut client, id)
    }

    /// POST one message exactly as given (`body`, unframed; it need not be
    /// valid JSON) and return the answer's body, unread: the raw exchange
    /// under [`HttpProvider::query`], with the same connections, TLS,
    /// headers and limits (a non-2xx status is a
    /// [`ProviderError::HttpStatus`]). No deadline but the connect timeout:
    /// the caller bounds the wait (a conformance checker feeding the answer
    /// to its own [`Client`] with [`Client::handle_message`]).
    pub async fn post_message(
        &self,
        body: Vec<u8>,
        correlation: Option<&str>,
    ) -> Result<Vec<u8>, ProviderError> {
        self.post(body, correlation, None).await
    }

    fn address(&self) -> String {
        if self.target.host.contains(':') {
            format!("[{}]:{}", self.target.host, self.target.port)
        } else {
            format!("{}:{}", self.target.host, self.target.port)
        }
    }

    fn lost(&self, error: &dyn std::fmt::Display) -> ProviderError {
        ProviderError::Query(QueryError::ConnectionLost(format!(
            "HTTP exchange with {} failed: {error}",
            self.address()
        )))
    }

    /// One request and its answer's body, on a pooled or a new connection.
    async fn post(
        &self,
        body: Vec<u8>,
        correlation: Option<&str>,
        trace: Option<&TraceContext>,
    ) -> Result<Vec<u8>, ProviderError> {
        let body = Bytes::from(body);
        let mut fresh = false;
        loop {
            let mut lease = match self.pool.checkout(fresh).await? {
                Checkout::Pooled(lease) => lease,
                Checkout::Open(slot) => self.connect(slot).await?,
            };
            let request = self.request(body.clone(), correlation, trace, lease.is_http2());
            match lease.send(request).await {
                Ok(response) => return self.read(response, lease).await,
                // A pooled connection died before any answer came back
                // (closed by the server as it was picked): once more, on a
                // new connection. `lease` is dropped: never reused.
                Err(failure) if failure.stale && lease.reused && !fresh => fresh = true,
                Err(failure) => return Err(self.lost(&failure.error)),
            }
        }
    }

    /// The POST of `body` for an HTTP/1.1 or an HTTP/2 connection.
    fn request(
        &self,
        body: Bytes,
        correlation: Option<&str>,
        trace: Option<&TraceContext>,
        http2: bool,
    ) -> Request<Body> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        // Over HTTP/2 the authority travels as `:authority`, from the whole URL.
        *request.uri_mut() = if http2 {
            self.target.absolute.clone()
        } else {
            self.target.path.clone()
        };
        let headers = request.headers_mut();
        if !http2 {
            headers.insert(header::HOST, self.target.authority.clone());
        }
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(CONTENT_TYPE_JSON),
        );
        headers.insert(header::ACCEPT, HeaderValue::from_static(CONTENT_TYPE_JSON));
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static(concat!("evidence-wire/", env!("CARGO_PKG_VERSION"))),
        );
        if let Some(authorization) = &self.target.authorization {
            headers.insert(header::AUTHORIZATION, authorization.clone());
        }
        // A correlation id that cannot be a header value still travels in
        // the body's context; only the header is left out.
        if let Some(value) = correlation.and_then(|id| HeaderValue::try_from(id).ok()) {
            headers.insert("x-correlation-id", value);
        }
        if let Some(trace) = trace {
            // Both are ASCII by construction (hex, and a tracestate that
            // passed the W3C grammar).
            if let Ok(value) = HeaderValue::try_from(trace.traceparent()) {
                headers.insert(&TRACEPARENT, value);
            }
            if let Some(value) = trace
                .tracestate()
                .and_then(|state| HeaderValue::try_from(state).ok())
            {
                headers.insert(&TRACESTATE, value);
            }
        }
        request
    }

    /// Reads the answer within the caps; the connection goes back to the
    /// pool only after a whole answer.
    async fn read(
        &self,
        response: Response<Incoming>,
        lease: Lease,
    ) -> Result<Vec<u8>, ProviderError> {
        let status = response.status();
        if !status.is_success() {
            let location = response
                .headers()
                .get(header::LOCATION)
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
            let (detail, whole) = error_detail(response.into_body()).await;
            if whole {
                lease.keep();
            } else {
                lease.abandon_request();
            }
            return Err(ProviderError::HttpStatus {
                status: status.as_u16(),
                location,
                detail,
            });
        }
        let limit = self.config.max_response_bytes;
        let mut counted = BodyLimit::new(limit);
        let declared = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .map(HeaderValue::as_bytes);
        if counted.check_declared(declared).is_err() {
            lease.abandon_request();
            return Err(ProviderError::ResponseTooLarge { limit });
        }
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            // An error drops `lease`: the connection is closed.
            let frame = frame.map_err(|error| self.lost(&error))?;
            if let Ok(data) = frame.into_data() {
                if counted.accept(data.len()).is_err() {
                    lease.abandon_request();
                    return Err(ProviderError::ResponseTooLarge { limit });
                }
                bytes.extend_from_slice(&data);
            }
        }
        lease.keep();
        Ok(bytes)
    }

    /// A new connection (TCP connect, TLS handshake, HTTP handshake), which
    /// holds `slot` while it is open.
    async fn connect(&self, slot: OwnedSemaphorePermit) -> Result<Lease, ProviderError> {
        let address = self.address();
        let connect = TcpStream::connect((self.target.host.as_str(), self.target.port));
        let stream = match tokio::time::timeout(self.config.connect_timeout, connect).await {
            Err(_) => {
                return Err(ProviderError::Connect {
                    address,
                    reason: format!(
                        "no connection within {} ms",
                        self.config.connect_timeout.as_millis()
                    ),
                });
            }
            Ok(Err(error)) => {
                return Err(ProviderError::Connect {
                    address,
                    reason: error.to_string(),
                });
            }
            Ok(Ok(stream)) => stream,
        };
        let _ = stream.set_nodelay(true);
        let Some(tls) = &self.target.tls else {
            return self.http1(stream, slot).await;
        };
        let handshake = tls.connector.connect(tls.name.clone(), stream);
        match tokio::time::timeout(self.config.connect_timeout, handshake).await {
            Err(_) => Err(ProviderError::Tls {
                address,
                reason: format!(
                    "no TLS handshake within {} ms",
                    self.config.connect_timeout.as_millis()
                ),
            }),
            Ok(Err(error)) => Err(ProviderError::Tls {
                reason: tls_failure(&error),
                address,
            }),
            Ok(Ok(stream)) => {
                if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                    self.http2(stream, slot).await
                } else {
                    self.http1(stream, slot).await
                }
            }
        }
    }

    /// An HTTP/1.1 connection over `io`, driven by its own task.
    async fn http1<IO>(&self, io: IO, slot: OwnedSemaphorePermit) -> Result<Lease, ProviderError>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, connection) = http1::handshake(TokioIo::new(io))
            .await
            .map_err(|error| self.lost(&error))?;
        let task = tokio::spawn(async move {
            let _slot = slot;
            let _ = connection.await;
        });
        Ok(Lease {
            pool: Arc::clone(&self.pool),
            connection: Some(Leased::Http1 {
                sender,
                task: ConnectionTask(task.abort_handle()),
            }),
            reused: false,
        })
    }

    /// An HTTP/2 connection over `io`, driven by its own task and shared
    /// through the pool (unless another already is).
    async fn http2<IO>(&self, io: IO, slot: OwnedSemaphorePermit) -> Result<Lease, ProviderError>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let handshake = http2::Builder::new(TokioExecutor::new()).handshake(TokioIo::new(io));
        let (sender, connection) =
            match tokio::time::timeout(self.config.connect_timeout, handshake).await {
                Err(_) => {
                    return Err(ProviderError::Connect {
                        address: self.address(),
                        reason: format!(
                            "no HTTP/2 handshake within {} ms",
                            self.config.connect_timeout.as_millis()
                        ),
                    });
                }
                Ok(Err(error)) => return Err(self.lost(&error)),
                Ok(Ok(handshake)) => handshake,
            };
        let task = tokio::spawn(async move {
            let _slot = slot;
            let _ = connection.await;
        });
        let task = Arc::new(ConnectionTask(task.abort_handle()));
        self.pool.share(&sender, &task);
        Ok(Lease {
            pool: Arc::clone(&self.pool),
            connection: Some(Leased::Http2 { sender, task }),
            reused: false,
        })
    }
}

// ---------------------------------------------------------------------------
// The pool.
// ---------------------------------------------------------------------------

/// The connections of one provider (the module doc gives the rules).
struct Pool {
    state: Mutex<PoolState>,
    /// One permit per open connection, held by the connection's task: a
    /// connection closed for any reason gives its permit back.
    slots: Arc<Semaphore>,
    /// Signalled each time a connection becomes idle.
    returned: Notify,
    max_idle: usize,
    idle_timeout: Duration,
}

#[derive(Default)]
struct PoolState {
    /// Idle HTTP/1.1 connections, the most recently used last.
    idle: Vec<Idle>,
    /// The HTTP/2 connection every query shares, while one is open.
    shared: Option<Shared>,
    /// Whether a task is closing the connections that stay idle too long.
    reaping: bool,
    /// HTTP/1.1 connections that answered and are about to be idle: a
    /// query waits for one of them rather than open a new connection.
    returning: usize,
}

struct Idle {
    sender: http1::SendRequest<Body>,
    task: ConnectionTask,
    since: Instant,
}

struct Shared {
    sender: http2::SendRequest<Body>,
    /// Also held by every query on the connection: the pool's alone means
    /// no query is in flight.
    task: Arc<ConnectionTask>,
    last_used: Instant,
}

/// The task driving one connection, aborted (the connection closed at
/// once, its slot given back) when this is dropped.
struct ConnectionTask(AbortHandle);

impl Drop for ConnectionTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a query gets from the pool.
enum Checkout {
    /// An open connection.
    Pooled(Lease),
    /// A free slot, to open a new connection with.
    Open(OwnedSemaphorePermit),
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Pool")
            .field("idle", &state.idle.len())
            .field("http2", &state.shared.is_some())
            .field("free_slots", &self.slots.available_permits())
            .finish_non_exhaustive()
    }
}

impl Pool {
    fn new(config: &HttpProviderConfig) -> Self {
        Pool {
            state: Mutex::new(PoolState::default()),
            slots: Arc::new(Semaphore::new(
                config.max_connections.min(Semaphore::MAX_PERMITS),
            )),
            returned: Notify::new(),
            max_idle: config.pool_max_idle,
            idle_timeout: config.pool_idle_timeout,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection for one request: the shared HTTP/2 one, else the most
    /// recently used idle one, else a slot for a new one (waiting for a
    /// connection to come back or close when every slot is taken).
    /// `fresh`: only a slot for a new connection will do.
    async fn checkout(self: &Arc<Self>, fresh: bool) -> Result<Checkout, ProviderError> {
        if !fresh {
            if let Ok(lease) = self.take() {
                return Ok(Checkout::Pooled(lease));
            }
        }
        loop {
            // Registered before looking (again), so that a connection
            // coming back between the look and the wait is not missed.
            let mut returned = pin!(self.returned.notified());
            returned.as_mut().enable();
            let returning = if fresh {
                0
            } else {
                match self.take() {
                    Ok(lease) => return Ok(Checkout::Pooled(lease)),
                    Err(returning) => returning,
                }
            };
            if returning > 0 {
                // One is about to be idle (within microseconds, or
                // `READY_WAIT` at worst): wait for it.
                returned.await;
                continue;
            }
            if let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() {
                return Ok(Checkout::Open(slot));
            }
            // A free slot, or a connection coming back: whichever is first.
            let slot = async { Some(Arc::clone(&self.slots).acquire_owned().await) };
            let back = async {
                returned.as_mut().await;
                None
            };
            if let Some(slot) = or(slot, back).await {
                return slot.map(Checkout::Open).map_err(|_| {
                    ProviderError::Query(QueryError::ConnectionLost(
                        "the connection pool is closed".to_owned(),
                    ))
                });
            }
        }
    }

    /// An open pooled connection, else how many are about to be idle.
    fn take(self: &Arc<Self>) -> Result<Lease, usize> {
        let mut state = self.lock();
        let now = Instant::now();
        if let Some(shared) = state.shared.as_mut() {
            if !shared.sender.is_closed() {
                shared.last_used = now;
                let connection = Leased::Http2 {
                    sender: shared.sender.clone(),
                    task: Arc::clone(&shared.task),
                };
                return Ok(self.lease(connection));
            }
            state.shared = None;
        }
        // Closed by the server, or idle too long: dropped (closed).
        while let Some(idle) = state.idle.pop() {
            if idle.sender.is_ready() && now.duration_since(idle.since) < self.idle_timeout {
                let connection = Leased::Http1 {
                    sender: idle.sender,
                    task: idle.task,
                };
                return Ok(self.lease(connection));
            }
        }
        Err(state.returning)
    }

    fn lease(self: &Arc<Self>, connection: Leased) -> Lease {
        Lease {
            pool: Arc::clone(self),
            connection: Some(connection),
            reused: true,
        }
    }

    /// Shares a new HTTP/2 connection, unless an open one already is.
    fn share(self: &Arc<Self>, sender: &http2::SendRequest<Body>, task: &Arc<ConnectionTask>) {
        let mut state = self.lock();
        if state
            .shared
            .as_ref()
            .is_some_and(|shared| !shared.sender.is_closed())
        {
            return;
        }
        state.shared = Some(Shared {
            sender: sender.clone(),
            task: Arc::clone(task),
            last_used: Instant::now(),
        });
        let reaper = !std::mem::replace(&mut state.reaping, true);
        drop(state);
        // Queries waiting for a slot can share it at once.
        self.returned.notify_waiters();
        if reaper {
            tokio::spawn(reap(Arc::downgrade(self)));
        }
    }

    /// Stops sharing `task`'s HTTP/2 connection: it closes once its queries
    /// in flight end.
    fn unshare(&self, task: &Arc<ConnectionTask>) {
        let mut state = self.lock();
        if state
            .shared
            .as_ref()
            .is_some_and(|shared| Arc::ptr_eq(&shared.task, task))
        {
            state.shared = None;
        }
    }

    /// Takes back an HTTP/1.1 connection that answered, once it is ready
    /// for another request.
    fn give_back(self: &Arc<Self>, mut sender: http1::SendRequest<Body>, task: ConnectionTask) {
        if self.max_idle == 0 || sender.is_closed() {
            return;
        }
        if sender.is_ready() {
            self.put(sender, task);
            return;
        }
        // Not ready yet: its connection task has still to see the end of
        // the answer. Counted meanwhile, so the next query waits for it.
        self.lock().returning += 1;
        let returning = Returning(Arc::clone(self));
        tokio::spawn(async move {
            if let Ok(Ok(())) = tokio::time::timeout(READY_WAIT, sender.ready()).await {
                returning.0.put(sender, task);
            }
            drop(returning);
        });
    }

    fn put(self: &Arc<Self>, sender: http1::SendRequest<Body>, task: ConnectionTask) {
        let mut state = self.lock();
        if state.idle.len() >= self.max_idle {
            return;
        }
        state.idle.push(Idle {
            sender,
            task,
            since: Instant::now(),
        });
        let reaper = !std::mem::replace(&mut state.reaping, true);
        drop(state);
        self.returned.notify_one();
        if reaper {
            tokio::spawn(reap(Arc::downgrade(self)));
        }
    }

    /// Closes the connections idle for `idle_timeout` (and drops those the
    /// server closed); returns when to look again, or `None` once the pool
    /// holds no connection (the reaper then ends).
    fn sweep(&self) -> Option<Duration> {
        let mut state = self.lock();
        let now = Instant::now();
        let timeout = self.idle_timeout;
        state
            .idle
            .retain(|idle| idle.sender.is_ready() && now.duration_since(idle.since) < timeout);
        let expired = state.shared.as_ref().is_some_and(|shared| {
            shared.sender.is_closed()
                || (Arc::strong_count(&shared.task) == 1
                    && now.duration_since(shared.last_used) >= timeout)
        });
        if expired {
            state.shared = None;
        }
        let left = |since: Instant| timeout.saturating_sub(now.duration_since(since));
        let idle = state.idle.first().map(|idle| left(idle.since));
        // One in use is looked at again a whole timeout later.
        let shared = state.shared.as_ref().map(|shared| {
            if Arc::strong_count(&shared.task) == 1 {
                left(shared.last_used)
            } else {
                timeout
            }
        });
        let Some(wait) = [idle, shared].into_iter().flatten().min() else {
            state.reaping = false;
            return None;
        };
        Some(wait.max(Duration::from_millis(1)))
    }

    /// Marks the shared HTTP/2 connection used now (a query on it ended).
    fn touch(&self, task: &Arc<ConnectionTask>) {
        let mut state = self.lock();
        if let Some(shared) = state
            .shared
            .as_mut()
            .filter(|shared| Arc::ptr_eq(&shared.task, task))
        {
            shared.last_used = Instant::now();
        }
    }
}

/// Counts a connection about to be idle (in [`PoolState::returning`])
/// while it lives.
struct Returning(Arc<Pool>);

impl Drop for Returning {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.returning = state.returning.saturating_sub(1);
        let none = state.returning == 0;
        drop(state);
        if none {
            // Whoever waited for it looks again (and opens a connection
            // if it did not come back).
            self.0.returned.notify_waiters();
        }
    }
}

/// The pool's reaper: closes idle connections on time, ends with the pool
/// (or once it is empty).
async fn reap(pool: Weak<Pool>) {
    loop {
        let Some(wait) = pool.upgrade().and_then(|pool| pool.sweep()) else {
            return;
        };
        tokio::time::sleep(wait).await;
    }
}

/// A connection lent to one request. Dropped without [`Lease::keep`] (an
/// error, an answer cut off, a deadline), it is not reused.
struct Lease {
    pool: Arc<Pool>,
    connection: Option<Leased>,
    /// Whether it came from the pool (rather than being opened for this
    /// request).
    reused: bool,
}

enum Leased {
    Http1 {
        sender: http1::SendRequest<Body>,
        task: ConnectionTask,
    },
    Http2 {
        sender: http2::SendRequest<Body>,
        task: Arc<ConnectionTask>,
    },
}

/// A request that failed on its connection.
struct SendFailure {
    error: String,
    /// The connection died before any answer came: nothing of the request
    /// was written (hyper handed it back), or it was written to a
    /// connection the server had already closed (closed or reset before
    /// a response, or a broken pipe). On a pooled connection that is the
    /// server's idle close racing the request, and sending the query again
    /// on a new connection is safe: an `evidence_query` only reads
    /// evidence (see `spec/guides/deployment.md`).
    stale: bool,
}

impl Lease {
    fn is_http2(&self) -> bool {
        matches!(self.connection, Some(Leased::Http2 { .. }))
    }

    async fn send(&mut self, request: Request<Body>) -> Result<Response<Incoming>, SendFailure> {
        let sent = match self.connection.as_mut() {
            Some(Leased::Http1 { sender, .. }) => sender.try_send_request(request).await,
            Some(Leased::Http2 { sender, .. }) => sender.try_send_request(request).await,
            None => {
                return Err(SendFailure {
                    error: "the connection was already given back".to_owned(),
                    stale: true,
                });
            }
        };
        sent.map_err(|mut failure| {
            let unsent = failure.take_message().is_some();
            let error = failure.into_error();
            SendFailure {
                stale: unsent || died_before_answer(&error),
                error: error.to_string(),
            }
        })
    }

    /// The answer was read whole: the connection may serve another request.
    fn keep(mut self) {
        match self.connection.take() {
            Some(Leased::Http1 { sender, task }) => self.pool.give_back(sender, task),
            // The pool still shares it; its idle time starts now.
            Some(Leased::Http2 { task, .. }) => self.pool.touch(&task),
            None => {}
        }
    }

    /// The answer was not read whole (over the cap, or an error status not
    /// read to its end): an HTTP/1.1 connection is closed; over HTTP/2 only
    /// this request's stream is reset, when the response is dropped.
    fn abandon_request(mut self) {
        drop(self.connection.take());
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        match self.connection.take() {
            // Its task is aborted with it.
            Some(Leased::Http1 { .. }) | None => {}
            // Failed or cut off by a deadline mid-exchange: new queries go
            // to a new connection; this one closes when its queries end.
            Some(Leased::Http2 { task, .. }) => self.pool.unshare(&task),
        }
    }
}

/// The rustls client settings: ring, safe protocol versions, the trusted
/// roots, ALPN `h2` then `http/1.1`. Errors say which extra root is unusable.
fn tls_config(config: &HttpProviderConfig) -> Result<rustls::ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    if config.trust_public_roots {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    for (index, pem) in config.extra_root_certificates_pem.iter().enumerate() {
        let mut found = 0usize;
        for certificate in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let certificate = certificate.map_err(|error| {
                format!("extra root certificate #{index} is not valid PEM: {error}")
            })?;
            roots.add(certificate).map_err(|error| {
                format!("extra root certificate #{index} cannot be a trust anchor: {error}")
            })?;
            found = found.saturating_add(1);
        }
        if found == 0 {
            return Err(format!(
                "extra root certificate #{index} holds no PEM CERTIFICATE block"
            ));
        }
    }
    if roots.is_empty() {
        return Err(
            "https:// with no trusted roots: set trust_public_roots, or add the provider's CA to extra_root_certificates_pem".to_owned(),
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("cannot set up TLS: {error}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tls)
}

/// Why a TLS handshake failed, with what to do for the usual causes.
fn tls_failure(error: &std::io::Error) -> String {
    let cause = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match cause {
        Some(rustls::Error::InvalidCertificate(reason)) => {
            let hint = match reason {
                rustls::CertificateError::UnknownIssuer
                | rustls::CertificateError::BadSignature => {
                    "; if the provider uses a private CA or a self-signed certificate, add it to extra_root_certificates_pem"
                }
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. } => {
                    "; the URL's host must be one the certificate names"
                }
                rustls::CertificateError::Expired
                | rustls::CertificateError::ExpiredContext { .. } => {
                    "; the provider must renew its certificate"
                }
                _ => "",
            };
            format!("the provider's certificate is not trusted: {reason}{hint}")
        }
        Some(other) => format!("TLS handshake failed: {other}"),
        None => format!("TLS handshake failed: {error}"),
    }
}

/// Whether `error` says the connection closed (or was reset) before an
/// answer came.
fn died_before_answer(error: &hyper::Error) -> bool {
    if error.is_incomplete_message() || error.is_canceled() || error.is_closed() {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            );
        }
        source = cause.source();
    }
    false
}

/// The JSON-RPC error message of a non-2xx body, or the start of the
/// body; and whether the body was read to its end.
async fn error_detail(mut body: Incoming) -> (String, bool) {
    let mut bytes = Vec::new();
    let mut whole = false;
    while bytes.len() < ERROR_DETAIL_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let room = ERROR_DETAIL_BYTES.saturating_sub(bytes.len());
                    if data.len() > room {
                        bytes.extend_from_slice(data.get(..room).unwrap_or_default());
                        break;
                    }
                    bytes.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => break,
            None => {
                whole = true;
                break;
            }
        }
    }
    (describe_error(&bytes), whole)
}

/// What a non-2xx body says: its JSON-RPC error, or its start.
fn describe_error(bytes: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) {
        if let Some(message) = value
            .pointer("/error/message")
            .and_then(serde_json::Value::as_str)
        {
            let detail = value
                .pointer("/error/data/detail")
                .and_then(serde_json::Value::as_str);
            return match detail {
                Some(detail) => format!("{message}: {detail}"),
                None => message.to_owned(),
            };
        }
    }
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text.is_empty() {
        "empty body".to_owned()
    } else {
        text.chars().take(200).collect()
    }
}

fn take_answer(client: &mut Client, id: RequestId) -> Result<VerifiedEvidence, ProviderError> {
    let mut skipped = Vec::new();
    while let Some(event) = client.poll_event() {
        match event {
            ClientEvent::Answer {
                id: answered,
                outcome,
            } if answered == id => {
                return outcome.map_err(ProviderError::Query);
            }
            ClientEvent::Skipped(reason) => skipped.push(format!("{reason:?}")),
            ClientEvent::Fatal(reason) => skipped.push(reason),
            _ => {}
        }
    }
    let detail = if skipped.is_empty() {
        "the body is empty; expected one JSON-RPC response".to_owned()
    } else {
        skipped.join("; ")
    };
    Err(ProviderError::UnexpectedResponse(detail))
}
