//! The HTTP provider client on hyper (HTTP/1.1), over TLS for `https://`.
//!
//! [`HttpProvider::query`] POSTs one `tools/call` of `evidence_query` to
//! the configured URL and verifies the answer through the core [`Client`],
//! exactly like the child-process client: the same request bytes, the same
//! id matching, the same hash (and signature) checks, the same deadline
//! ([`Client::poll_timeout`], answered [`QueryError::Timeout`]).
//!
//! Rules: the URL must be `https://` unless
//! [`HttpProviderConfig::allow_insecure_http`] is set. TLS is rustls (ring
//! provider, TLS 1.2 and 1.3, ALPN `http/1.1`); the server's certificate
//! must chain to a trusted root and name the URL's host (a DNS name or an
//! IP address). Trusted roots are the Mozilla set bundled by `webpki-roots`
//! (unless [`HttpProviderConfig::trust_public_roots`] is false) plus every
//! certificate in [`HttpProviderConfig::extra_root_certificates_pem`] (a
//! private CA or a self-signed provider). A failed handshake is a
//! [`ProviderError::Tls`] naming the cause (unknown issuer, wrong name,
//! expired). Redirects are never followed: a 3xx is a
//! [`ProviderError::HttpStatus`] carrying its `Location`, as is every other
//! non-2xx. The bearer token goes in `Authorization`, the context's
//! correlation id in `x-correlation-id`.
//!
//! The answer must be one JSON-RPC response: a JSON array (a batch) is
//! refused as [`ProviderError::UnexpectedResponse`] naming the problem
//! ([`http::check_single_answer`]), since one request was sent.
//!
//! Limits: a connect timeout (TCP connect and TLS handshake), the request
//! deadline over the whole exchange, and a response cap (checked against
//! `Content-Length` before reading, counted while reading, so a peer that
//! streams without end is cut off at the cap). One connection per query;
//! nothing is pooled.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId};
use evidence_wire::evidence::CONTENT_TYPE_JSON;
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use evidence_wire_http::{self as http, BodyLimit};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, RootCertStore};

use evidence_wire_provider::caller::ProviderError;

/// Bytes of a non-2xx body read to explain the failure.
const ERROR_DETAIL_BYTES: usize = 4096;

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
    /// Request target (path and query).
    path: Uri,
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

/// A provider reached over HTTP. Cheap to clone; queries may run concurrently.
#[derive(Clone, Debug)]
pub struct HttpProvider {
    config: Arc<HttpProviderConfig>,
    target: Arc<Target>,
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
        let port = authority
            .port_u16()
            .unwrap_or(if secure { 443 } else { 80 });
        let path: Uri = uri
            .path_and_query()
            .map_or("/", |path| path.as_str())
            .parse()
            .map_err(|error| refuse(&format!("invalid path: {error}")))?;
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
            target: Arc::new(Target {
                host,
                port,
                authority,
                path,
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
        let epoch = Instant::now();
        let mut settings = self.config.client.clone();
        settings.handshake = false;
        let mut client = Client::new(settings);
        let id = client.query(query, context, 0);
        // Without a handshake the query is the one message to send.
        let body = client.poll_message().unwrap_or_default();
        let deadline_ms = client
            .poll_timeout()
            .unwrap_or(self.config.client.request_timeout_ms);
        let deadline = epoch + Duration::from_millis(deadline_ms);
        let posted =
            tokio::time::timeout_at(deadline, self.post(body, context.correlation_id.as_deref()))
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
    /// under [`HttpProvider::query`], with the same connection, TLS,
    /// headers and limits (a non-2xx status is a
    /// [`ProviderError::HttpStatus`]). No deadline but the connect timeout:
    /// the caller bounds the wait (a conformance checker feeding the answer
    /// to its own [`Client`] with [`Client::handle_message`]).
    pub async fn post_message(
        &self,
        body: Vec<u8>,
        correlation: Option<&str>,
    ) -> Result<Vec<u8>, ProviderError> {
        self.post(body, correlation).await
    }

    fn address(&self) -> String {
        if self.target.host.contains(':') {
            format!("[{}]:{}", self.target.host, self.target.port)
        } else {
            format!("{}:{}", self.target.host, self.target.port)
        }
    }

    async fn post(
        &self,
        body: Vec<u8>,
        correlation: Option<&str>,
    ) -> Result<Vec<u8>, ProviderError> {
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
            return self.exchange(stream, address, body, correlation).await;
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
            Ok(Ok(stream)) => self.exchange(stream, address, body, correlation).await,
        }
    }

    /// One HTTP/1.1 request and response over a connected `io`.
    async fn exchange<IO>(
        &self,
        io: IO,
        address: String,
        body: Vec<u8>,
        correlation: Option<&str>,
    ) -> Result<Vec<u8>, ProviderError>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let lost = |error: hyper::Error| {
            ProviderError::Query(QueryError::ConnectionLost(format!(
                "HTTP exchange with {address} failed: {error}"
            )))
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(lost)?;

        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.target.path.clone();
        let headers = request.headers_mut();
        headers.insert(header::HOST, self.target.authority.clone());
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

        let limit = self.config.max_response_bytes;
        let exchange = async {
            let response = sender.send_request(request).await.map_err(lost)?;
            let status = response.status();
            if !status.is_success() {
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
                let detail = error_detail(response.into_body()).await;
                return Err(ProviderError::HttpStatus {
                    status: status.as_u16(),
                    location,
                    detail,
                });
            }
            let mut counted = BodyLimit::new(limit);
            let declared = response
                .headers()
                .get(header::CONTENT_LENGTH)
                .map(HeaderValue::as_bytes);
            if counted.check_declared(declared).is_err() {
                return Err(ProviderError::ResponseTooLarge { limit });
            }
            let mut body = response.into_body();
            let mut bytes = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(lost)?;
                if let Ok(data) = frame.into_data() {
                    counted
                        .accept(data.len())
                        .map_err(|_| ProviderError::ResponseTooLarge { limit })?;
                    bytes.extend_from_slice(&data);
                }
            }
            Ok(bytes)
        };
        let mut exchange = std::pin::pin!(exchange);
        let mut connection = std::pin::pin!(connection);
        tokio::select! {
            result = &mut exchange => return result,
            done = &mut connection => {
                if let Err(error) = done {
                    return Err(lost(error));
                }
            }
        }
        exchange.await
    }
}

/// The rustls client settings: ring, safe protocol versions, the trusted
/// roots, ALPN `http/1.1`. Errors say which extra root is unusable.
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
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
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

/// The JSON-RPC error message of a non-2xx body, or the start of the body.
async fn error_detail(mut body: Incoming) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < ERROR_DETAIL_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let room = ERROR_DETAIL_BYTES.saturating_sub(bytes.len());
                    bytes.extend_from_slice(data.get(..room.min(data.len())).unwrap_or_default());
                }
            }
            Some(Err(_)) | None => break,
        }
    }
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) {
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
    let text = String::from_utf8_lossy(&bytes);
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
