//! `HttpProvider` over HTTPS on 127.0.0.1: a loopback TLS server
//! (tokio-rustls acceptor + hyper, a self-signed certificate from `rcgen`)
//! answering through the core `Server`. Trusting that certificate, a query
//! verifies; without it, or with a certificate for another name, the
//! failure is a typed `ProviderError::Tls` naming the cause, and the next
//! (trusting) query still succeeds. Every network wait is bounded.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{TestHandler, context, query, test_answer};
use bytes::Bytes;
use evidence_wire::server::{Server, ServerConfig, ServerEvent};
use evidence_wire_tokio::{
    HttpProvider, HttpProviderConfig, HttpServeError, HttpServerConfig, ProviderError, Service,
    TlsError, TlsFiles, bind_http, serve_http,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

const LIMIT: Duration = Duration::from_secs(10);

/// A certificate for `names` and its key, as PEM (certificate) and DER (key).
struct Identity {
    certificate_pem: String,
    server: Arc<rustls::ServerConfig>,
}

fn identity(names: &[&str]) -> Identity {
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    let issued = rcgen::generate_simple_self_signed(names).expect("certificate");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(issued.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![issued.cert.der().clone()], key)
        .expect("server certificate");
    Identity {
        certificate_pem: issued.cert.pem(),
        server: Arc::new(server),
    }
}

/// Answers one JSON-RPC body through a fresh core `Server` and the test
/// handler, like the stdio pipeline.
async fn answer(body: &[u8]) -> Vec<u8> {
    let mut server = Server::new(ServerConfig::default());
    let mut line = body.to_vec();
    line.push(b'\n');
    server.handle_input(&line);
    server.handle_end_of_input();
    while let Some(event) = server.poll_event() {
        if let ServerEvent::EvidenceQuery {
            ticket,
            query,
            context,
            ..
        } = event
        {
            let result = test_answer(query, context).await;
            server.respond(ticket, result).expect("known ticket");
        }
    }
    let mut out = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        out.extend_from_slice(&bytes);
    }
    if out.last() == Some(&b'\n') {
        out.pop();
    }
    out
}

/// Serves HTTPS on 127.0.0.1 with `identity`; counts the requests that
/// passed the handshake.
async fn https_server(identity: &Identity) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let address = listener.local_addr().expect("address");
    let acceptor = TlsAcceptor::from(Arc::clone(&identity.server));
    let served = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&served);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                // A client that refuses our certificate ends here.
                let Ok(Ok(stream)) = tokio::time::timeout(LIMIT, acceptor.accept(stream)).await
                else {
                    return;
                };
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let counter = Arc::clone(&counter);
                    async move {
                        let body = request
                            .into_body()
                            .collect()
                            .await
                            .map(|body| body.to_bytes())
                            .unwrap_or_default();
                        counter.fetch_add(1, Ordering::SeqCst);
                        let mut response =
                            Response::new(Full::new(Bytes::from(answer(&body).await)));
                        response.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (address, served)
}

async fn ask(provider: &HttpProvider, params: Value) -> Result<Value, ProviderError> {
    let answer = tokio::time::timeout(LIMIT, provider.query(&query("echo", params), &context()))
        .await
        .expect("outcome in time")?;
    Ok(serde_json::to_value(answer.result()).expect("json"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_query_verifies_with_the_extra_root_and_fails_typed_without_it() {
    let identity = identity(&["localhost", "127.0.0.1"]);
    let (address, served) = https_server(&identity).await;
    let url = format!("https://{address}/rpc");

    // Public roots only: the self-signed certificate is unknown.
    let untrusting = HttpProvider::new(HttpProviderConfig::new(url.clone())).expect("provider");
    let error = ask(&untrusting, json!(1)).await.unwrap_err();
    let ProviderError::Tls {
        address: named,
        reason,
    } = &error
    else {
        panic!("untrusted certificate → TLS error, got {error:?}");
    };
    assert_eq!(named, &address.to_string());
    assert!(reason.contains("UnknownIssuer"), "{reason}");
    assert!(reason.contains("extra_root_certificates_pem"), "{reason}");
    assert_eq!(error.code(), "provider_unavailable");
    assert_eq!(
        served.load(Ordering::SeqCst),
        0,
        "nothing sent over a refused TLS session"
    );

    // Trusting the certificate: the query goes through and verifies.
    let trusting = HttpProvider::new(
        HttpProviderConfig::new(url.clone())
            .with_root_certificate_pem(identity.certificate_pem.clone()),
    )
    .expect("provider");
    let result = ask(&trusting, json!({"over": "tls"}))
        .await
        .expect("verified over https");
    assert_eq!(result["value"]["value"]["params"], json!({"over": "tls"}));
    assert_eq!(result["evidence_hash"]["algorithm"], "sha256");
    assert_eq!(served.load(Ordering::SeqCst), 1);

    // Only the extra root (no public roots), by DNS name.
    let private_only = HttpProvider::new(
        HttpProviderConfig::new(format!("https://localhost:{}/rpc", address.port()))
            .with_public_roots(false)
            .with_root_certificate_pem(identity.certificate_pem.clone()),
    )
    .expect("provider");
    let result = ask(&private_only, json!(2))
        .await
        .expect("verified by name");
    assert_eq!(result["value"]["value"]["params"], json!(2));
    assert_eq!(served.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_for_another_name_is_refused() {
    let identity = identity(&["provider.invalid"]);
    let (address, served) = https_server(&identity).await;
    let provider = HttpProvider::new(
        HttpProviderConfig::new(format!("https://{address}/rpc"))
            .with_root_certificate_pem(identity.certificate_pem.clone()),
    )
    .expect("provider");
    let error = ask(&provider, json!(1)).await.unwrap_err();
    let ProviderError::Tls { reason, .. } = &error else {
        panic!("wrong name → TLS error, got {error:?}");
    };
    assert!(
        reason.contains("host must be one the certificate names"),
        "{reason}"
    );
    assert!(reason.contains("127.0.0.1"), "{reason}");
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn silent_tls_peer_times_out_typed() {
    // Accepts TCP, never speaks TLS: the handshake is bounded too.
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let mut config = HttpProviderConfig::new(format!("https://{address}/rpc"))
        .with_connect_timeout(Duration::from_millis(300));
    config.client.request_timeout_ms = 5_000;
    let provider = HttpProvider::new(config).expect("provider");
    let started = std::time::Instant::now();
    let error = ask(&provider, json!(1)).await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::Tls { reason, .. } if reason.contains("no TLS handshake within 300 ms")),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn https_urls_are_accepted_and_bad_roots_refused() {
    HttpProvider::new(HttpProviderConfig::new("https://127.0.0.1:9/rpc")).expect("https accepted");
    HttpProvider::new(HttpProviderConfig::new("https://[::1]/rpc")).expect("IPv6 literal");
    let garbage = HttpProvider::new(
        HttpProviderConfig::new("https://127.0.0.1:9/rpc")
            .with_root_certificate_pem("not a certificate"),
    )
    .unwrap_err();
    assert!(matches!(garbage, ProviderError::Url { .. }), "{garbage:?}");
    assert!(
        garbage.to_string().contains("#0 holds no PEM CERTIFICATE"),
        "{garbage}"
    );
    let broken = HttpProvider::new(
        HttpProviderConfig::new("https://127.0.0.1:9/rpc").with_root_certificate_pem(
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        ),
    )
    .unwrap_err();
    assert!(
        broken.to_string().contains("cannot be a trust anchor")
            || broken.to_string().contains("not valid PEM"),
        "{broken}"
    );
    let no_roots = HttpProvider::new(
        HttpProviderConfig::new("https://127.0.0.1:9/rpc").with_public_roots(false),
    )
    .unwrap_err();
    assert!(
        no_roots.to_string().contains("no trusted roots"),
        "{no_roots}"
    );
    // Plain http stays refused without the flag.
    let plain = HttpProvider::new(HttpProviderConfig::new("http://127.0.0.1:9/rpc")).unwrap_err();
    assert!(plain.to_string().contains("allow_insecure_http"), "{plain}");
}

/// A folder of its own under the system temp dir, removed when dropped.
struct Folder(std::path::PathBuf);

impl Folder {
    fn new(what: &str) -> Folder {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-tokio-{what}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        Folder(path)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a fresh self-signed certificate for 127.0.0.1 and its key into
/// `folder` (`cert.pem`, `key.pem`) as a renewal tool does: each written
/// beside, then renamed over the old one. Returns the certificate's PEM.
fn issue_into(folder: &Folder) -> String {
    let issued = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("cert");
    for (name, pem) in [
        ("cert.pem", issued.cert.pem()),
        ("key.pem", issued.signing_key.serialize_pem()),
    ] {
        let fresh = folder.0.join(format!("{name}.new"));
        std::fs::write(&fresh, pem).expect("write");
        std::fs::rename(&fresh, folder.0.join(name)).expect("rename");
    }
    issued.cert.pem()
}

/// `serve_http` over TLS on 127.0.0.1 with `files`, stopped by the sender.
async fn serve_https(
    files: Arc<TlsFiles>,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), HttpServeError>>,
) {
    let config = HttpServerConfig::default().with_tls(files);
    let listener = bind_http(SocketAddr::from(([127, 0, 0, 1], 0)), &config)
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve_http(
        listener,
        Service::new(ServerConfig::default(), TestHandler),
        config,
        async move {
            let _ = stopped.await;
        },
    ));
    (address, stop, task)
}

/// A fresh client (no pooled connection) trusting only `root`.
fn trusting(address: SocketAddr, root: &str) -> HttpProvider {
    HttpProvider::new(
        HttpProviderConfig::new(format!("https://{address}/rpc"))
            .with_public_roots(false)
            .with_root_certificate_pem(root.to_owned()),
    )
    .expect("provider")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_http_serves_tls_and_picks_up_a_renewed_certificate() {
    let folder = Folder::new("tls");
    let first = issue_into(&folder);
    let reports = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reported = Arc::clone(&reports);
    let files = TlsFiles::with_reporter(
        folder.0.join("cert.pem"),
        folder.0.join("key.pem"),
        move |message| reported.lock().unwrap().push(message.to_owned()),
    )
    .expect("load");
    let (address, stop, task) = serve_https(Arc::clone(&files)).await;

    let result = ask(&trusting(address, &first), json!("first"))
        .await
        .expect("verified over https");
    assert_eq!(result["value"]["value"]["params"], json!("first"));

    // Renewed on disk: the next connection (within a second) presents it.
    let second = issue_into(&folder);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let result = ask(&trusting(address, &second), json!("second"))
        .await
        .expect("the renewed certificate");
    assert_eq!(result["value"]["value"]["params"], json!("second"));
    let stale = ask(&trusting(address, &first), json!(0)).await.unwrap_err();
    assert!(matches!(stale, ProviderError::Tls { .. }), "{stale:?}");

    // A broken renewal keeps the certificate that works, and says why.
    std::fs::write(folder.0.join("cert.pem"), "half a file").expect("write");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let result = ask(&trusting(address, &second), json!("kept"))
        .await
        .expect("still served with the working certificate");
    assert_eq!(result["value"]["value"]["params"], json!("kept"));
    let said = reports.lock().unwrap().join("\n");
    assert!(
        said.contains("cannot be used") && said.contains("cert.pem"),
        "{said}"
    );

    // reload() (what SIGHUP does) takes effect at once.
    let third = issue_into(&folder);
    files.reload().expect("reload");
    let result = ask(&trusting(address, &third), json!("third"))
        .await
        .expect("reloaded at once");
    assert_eq!(result["value"]["value"]["params"], json!("third"));

    let _ = stop.send(());
    tokio::time::timeout(LIMIT, task)
        .await
        .expect("stopped in time")
        .expect("task")
        .expect("served");
}

#[test]
fn tls_files_that_cannot_be_used_are_refused_saying_why() {
    let folder = Folder::new("tls-bad");
    let missing = TlsFiles::load(folder.0.join("nope.pem"), folder.0.join("nope.key")).unwrap_err();
    assert!(matches!(missing, TlsError::Read { .. }), "{missing:?}");
    assert!(missing.to_string().contains("nope.pem"), "{missing}");
    std::fs::write(folder.0.join("cert.pem"), "not PEM").unwrap();
    std::fs::write(folder.0.join("key.pem"), "not PEM").unwrap();
    let empty = TlsFiles::load(folder.0.join("cert.pem"), folder.0.join("key.pem")).unwrap_err();
    assert!(
        empty.to_string().contains("holds no CERTIFICATE"),
        "{empty}"
    );
    // A key that is not the certificate's.
    issue_into(&folder);
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(folder.0.join("key.pem"), other.signing_key.serialize_pem()).unwrap();
    let mismatched =
        TlsFiles::load(folder.0.join("cert.pem"), folder.0.join("key.pem")).unwrap_err();
    assert!(
        matches!(mismatched, TlsError::Invalid { .. }),
        "{mismatched:?}"
    );
}
