//! HTTPS for the standalone server: rustls with a certificate chain and a
//! private key read from PEM files, reloaded when they change, so a renewed
//! certificate needs no restart.
//!
//! [`TlsFiles::load`] reads both files and builds the server configuration
//! (ALPN `h2` and `http/1.1`, TLS 1.2 and 1.3, the ring provider). While
//! serving, the files' modification times are looked at when a connection
//! arrives, at most once a second; a change reloads them, and
//! [`TlsFiles::reload`] reloads at once (what the CLI does on `SIGHUP`). A
//! reload that fails (a half-written file, a key that does not match)
//! keeps the configuration that works and reports why; new connections
//! use the new certificate, connections already open keep theirs.
//!
//! Limits: each file is read up to [`MAX_PEM_BYTES`]; a handshake must
//! finish within the server's head timeout.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

/// The most bytes read from a certificate or key file.
pub const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// How often the files' modification times are looked at, at most.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read the TLS {what} {path}: {source}; check the path and its permissions")]
    Read {
        /// `certificate` or `private key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no PEM item of the kind needed.
    #[error(
        "the TLS {what} file {path} holds no {expected} in PEM; give a PEM file (-----BEGIN {expected}-----)"
    )]
    Empty {
        /// `certificate` or `private key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What was looked for.
        expected: &'static str,
    },
    /// rustls refused the pair (a key that does not match the
    /// certificate, an unsupported key type).
    #[error("the TLS certificate {cert} and key {key} cannot be used: {source}")]
    Invalid {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        source: rustls::Error,
    },
}

/// The certificate chain and private key of an HTTPS server, as PEM files,
/// and the configuration built from them: cheap to share (`Arc`), reloaded
/// when the files change.
pub struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Loaded>,
    checked: Mutex<Instant>,
    reporter: Box<dyn Fn(&str) + Send + Sync>,
}

struct Loaded {
    acceptor: TlsAcceptor,
    stamps: (Option<SystemTime>, Option<SystemTime>),
}

impl fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsFiles")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl TlsFiles {
    /// Reads `cert` (the chain, leaf first) and `key` (PKCS#8, PKCS#1 or
    /// SEC1) and builds the server configuration. A reload that fails later
    /// is reported on stderr (see [`TlsFiles::with_reporter`]).
    pub fn load(
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Result<Arc<TlsFiles>, TlsError> {
        let (cert, key) = (cert.into(), key.into());
        let loaded = load(&cert, &key)?;
        Ok(Arc::new(TlsFiles {
            cert,
            key,
            current: RwLock::new(loaded),
            checked: Mutex::new(Instant::now()),
            reporter: Box::new(|message| eprintln!("evidence-wire: {message}")),
        }))
    }

    /// The same files, reload failures reported to `reporter` instead of
    /// stderr (a tracing event, a log line).
    pub fn with_reporter(
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
        reporter: impl Fn(&str) + Send + Sync + 'static,
    ) -> Result<Arc<TlsFiles>, TlsError> {
        let (cert, key) = (cert.into(), key.into());
        let loaded = load(&cert, &key)?;
        Ok(Arc::new(TlsFiles {
            cert,
            key,
            current: RwLock::new(loaded),
            checked: Mutex::new(Instant::now()),
            reporter: Box::new(reporter),
        }))
    }

    /// Reads both files again now; on success new connections use them,
    /// on failure the configuration that works stays and the error says why.
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = load(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = loaded;
        Ok(())
    }

    /// The acceptor for a new connection, after reloading the files if
    /// they changed (looked at most once a second).
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        let due = {
            let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
            let due = checked.elapsed() >= CHECK_INTERVAL;
            if due {
                *checked = Instant::now();
            }
            due
        };
        if due {
            let stamps = stamps(&self.cert, &self.key);
            let changed = self
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .stamps
                != stamps;
            if changed {
                if let Err(error) = self.reload() {
                    (self.reporter)(&format!(
                        "the TLS files changed but cannot be used; serving with the previous ones: {error}"
                    ));
                    // Not tried again until the files change again.
                    self.current
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .stamps = stamps;
                }
            }
        }
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .acceptor
            .clone()
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
}

fn stamps(cert: &Path, key: &Path) -> (Option<SystemTime>, Option<SystemTime>) {
    (modified(cert), modified(key))
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    let failed = |source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(failed)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    Ok(bytes)
}

fn load(cert: &Path, key: &Path) -> Result<Loaded, TlsError> {
    // The stamps first: a change while reading is seen at the next look.
    let stamps = stamps(cert, key);
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&read(cert, "certificate")?)
            .filter_map(Result::ok)
            .collect();
    if chain.is_empty() {
        return Err(TlsError::Empty {
            what: "certificate",
            path: cert.to_owned(),
            expected: "CERTIFICATE",
        });
    }
    let private =
        PrivateKeyDer::from_pem_slice(&read(key, "private key")?).map_err(|_| TlsError::Empty {
            what: "private key",
            path: key.to_owned(),
            expected: "PRIVATE KEY",
        })?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .and_then(|builder| {
                builder
                    .with_no_client_auth()
                    .with_single_cert(chain, private)
            })
            .map_err(|source| TlsError::Invalid {
                cert: cert.to_owned(),
                key: key.to_owned(),
                source,
            })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Loaded {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        stamps,
    })
}
