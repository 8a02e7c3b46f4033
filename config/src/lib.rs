//! # evidence-wire-config
//!
//! The `evidence-wire.toml` configuration of the evidence-wire crate family:
//! its model, defaults and validation, every file it names, and the mapping
//! from it to the settings of the libraries. The protocol core
//! (`evidence-wire`) does no I/O; this crate does the reading.
//!
//! [`Config::load`] reads a file; [`Config::from_toml_str`] parses TOML into
//! the sections `[[providers]]`, `[server]` (with `[server.limits]`,
//! `[server.auth]`, `[server.tools]`), `[docs]`, `[logging]` and
//! `[bundled]`, then validates and resolves them: relative paths are joined
//! to the config file's directory, each mcp provider's capabilities contract
//! is read and checked ([`evidence_wire::contract`]), trust keys and CA
//! certificates are read, and a configured signing seed is read once
//! ([`read_signing_seed`]). [`Config::default`] is the embedded default and
//! works with no file at all.
//!
//! To the core's settings: [`ServerSection::server_config`] (limits,
//! envelope policy, dialect, hash profile of a
//! [`evidence_wire::server::ServerConfig`]), [`ServerSection::tool_policy`]
//! (`[server.tools]` and `[server.auth] allowed_tools` as a
//! [`policy::ToolPolicy`]), [`HashProfileName::choice`],
//! [`ProviderConfig::trust_policy`] and [`BundledSigningConfig::signer`].
//! The other crates map their own section (`evidence-wire-docs` takes
//! [`DocsConfig`], `evidence-wire-log` [`LoggingConfig`],
//! `evidence-wire-bundled` [`BundledConfig`]).
//!
//! Every struct refuses unknown keys; a syntax error or an unknown key is a
//! [`ConfigError::Syntax`] with the line and column of the offending key.
//! Every other problem is one [`ConfigError::Invalid`] naming the field
//! (`providers[2].timeouts.request_timeout_ms`), what is wrong and what to do.
//!
//! Limits: every file is capped before it is read: the config file at
//! [`MAX_CONFIG_BYTES`], contracts at [`MAX_CONTRACT_BYTES`], key and seed
//! files at [`MAX_KEY_FILE_BYTES`], CA certificate files at
//! [`MAX_CA_CERT_BYTES`]. Every file is opened through [`open_regular_file`]:
//! a FIFO, socket, device or directory is refused before it is opened (a
//! FIFO would block the open until a writer came). The full reference is
//! `spec/configuration.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use evidence_wire::Transport;
use evidence_wire::contract::{MAX_CONTRACT_BYTES, ProviderContract};
use evidence_wire::dialect::{Dialect, DialectChoice};
use evidence_wire::envelope::Policy;
pub mod policy;
use evidence_wire::server::ServerConfig;
use policy::{PolicyError, ToolPolicy, VisibilityMode};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The largest configuration file [`Config::load`] reads (1 MiB).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The largest trust key file read (4 KiB; a key is 32 bytes or 64 hex digits).
pub const MAX_KEY_FILE_BYTES: u64 = 4096;

/// The largest CA certificate file (`providers[].tls.ca_certs`) read (1 MiB of PEM).
pub const MAX_CA_CERT_BYTES: u64 = 1024 * 1024;

/// Provider names reserved for Decision Gate's built-in providers.
pub const RESERVED_PROVIDER_NAMES: [&str; 4] = evidence_wire::contract::RESERVED_PROVIDER_IDS;

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A file could not be read.
    #[error("{field}: cannot read `{}`: {detail}", path.display())]
    Io {
        /// The field that names the file (`config` for the config file itself).
        field: String,
        /// The path as resolved.
        path: PathBuf,
        /// What the OS or the size check said, and what to do.
        detail: String,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong type.
    #[error("{}line {line}, column {column}: {message}", file_prefix(file.as_deref()))]
    Syntax {
        /// The config file, when loaded from one.
        file: Option<PathBuf>,
        /// 1-based line of the offending key or value (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        column: usize,
        /// What the parser said (it names the key).
        message: String,
    },
    /// A value is out of range or inconsistent with another.
    #[error("{field}: {message}")]
    Invalid {
        /// The field, e.g. `providers[2].timeouts.request_timeout_ms`.
        field: String,
        /// What is wrong and what to do.
        message: String,
    },
}

fn file_prefix(file: Option<&Path>) -> String {
    match file {
        Some(file) => format!("{}: ", file.display()),
        None => String::new(),
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// Evidence providers a query can be sent to, by name.
    pub providers: Vec<ProviderConfig>,
    /// The server side of `evidence-wire serve`.
    pub server: ServerSection,
    /// The embedded docs search and resources.
    pub docs: DocsConfig,
    /// Envelope validation logs.
    pub logging: LoggingConfig,
    /// The bundled provider served by `evidence-wire serve`.
    pub bundled: BundledConfig,
}

/// Whether a provider is a built-in or an external MCP server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderType {
    /// One of Decision Gate's built-ins (`time`, `env`, `json`, `http`).
    Builtin,
    /// An external provider answering `evidence_query` over stdio or HTTP.
    Mcp,
}

/// `[[providers]]`: one evidence provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ProviderConfig {
    /// Unique name; the `provider_id` of queries and of its contract.
    pub name: String,
    /// `builtin` or `mcp`.
    #[serde(rename = "type")]
    pub provider_type: ProviderType,
    /// argv of a stdio provider (no shell); exclusive with `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// URL of an HTTP provider; exclusive with `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Allow an `http://` url (plain text on the network).
    #[serde(default)]
    pub allow_insecure_http: bool,
    /// The capabilities contract (required for mcp); resolved against the
    /// config file's directory when loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities_path: Option<PathBuf>,
    /// Credentials sent to an HTTP provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ProviderAuth>,
    /// What the caller requires of this provider's evidence.
    #[serde(default)]
    pub trust: TrustConfig,
    /// Allow raw (bytes) evidence values from this provider; when false,
    /// `evidence-wire query --provider` refuses a `kind: bytes` value.
    #[serde(default)]
    pub allow_raw: bool,
    /// Connect and request timeouts.
    #[serde(default)]
    pub timeouts: Timeouts,
    /// The canonicalization profile this provider's evidence hashes are
    /// checked with: `auto` (default: `decision-gate` on a Decision Gate
    /// connection, `rfc8785` after the MCP handshake), `rfc8785` or
    /// `decision-gate`.
    #[serde(default)]
    pub hash_profile: HashProfileName,
    /// How an `https://` provider's certificate is checked.
    #[serde(default)]
    pub tls: ProviderTls,
    /// Configuration of a builtin provider (builtin only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// The contract read from `capabilities_path` (filled by loading).
    #[serde(skip)]
    pub contract: Option<ProviderContract>,
    /// The keys read from `trust.require_signature.keys` (filled by loading).
    #[serde(skip)]
    pub trusted_keys: Vec<TrustedKey>,
    /// The PEM text of each `tls.ca_certs` file, in order (filled by loading).
    #[serde(skip)]
    pub ca_certs_pem: Vec<String>,
}

/// `providers[].tls`: extra roots trusted for an `https://` provider.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ProviderTls {
    /// PEM files of CA (or self-signed) certificates trusted for this
    /// provider in addition to the public web roots; resolved against the
    /// config file's directory and read when loaded.
    pub ca_certs: Vec<PathBuf>,
}

impl ProviderConfig {
    /// A provider of `provider_type` named `name` with every other field at its default.
    pub fn new(name: impl Into<String>, provider_type: ProviderType) -> Self {
        ProviderConfig {
            name: name.into(),
            provider_type,
            command: None,
            url: None,
            allow_insecure_http: false,
            capabilities_path: None,
            auth: None,
            trust: TrustConfig::default(),
            allow_raw: false,
            timeouts: Timeouts::default(),
            hash_profile: HashProfileName::Auto,
            tls: ProviderTls::default(),
            config: None,
            contract: None,
            trusted_keys: Vec::new(),
            ca_certs_pem: Vec::new(),
        }
    }

    /// The trust policy for [`evidence_wire::evidence::verify`], built from the loaded keys.
    pub fn trust_policy(&self) -> Result<evidence_wire::evidence::TrustPolicy, ConfigError> {
        match self.trust {
            TrustConfig::Audit => Ok(evidence_wire::evidence::TrustPolicy::Audit),
            TrustConfig::RequireSignature { .. } => {
                let mut keys = evidence_wire::evidence::KeySet::new();
                for key in &self.trusted_keys {
                    keys.insert_bytes(key.key_id.clone(), &key.public_key)
                        .and_then(|()| {
                            keys.insert_bytes(key.configured_path.clone(), &key.public_key)
                        })
                        .map_err(|_| {
                            invalid(
                                format!("provider `{}`: trust", self.name),
                                format!(
                                    "key `{}` ({}) is not a valid ed25519 public key",
                                    key.key_id,
                                    key.path.display()
                                ),
                            )
                        })?;
                }
                Ok(evidence_wire::evidence::TrustPolicy::RequireSignature { keys })
            }
        }
    }
}

/// `providers[].auth`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderAuth {
    /// Sent as `Authorization: Bearer <token>`.
    pub bearer_token: String,
}

impl fmt::Debug for ProviderAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderAuth")
            .field("bearer_token", &"<redacted>")
            .finish()
    }
}

/// `providers[].trust`: `"audit"` or `{ require_signature = { keys = [...] } }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum TrustConfig {
    /// Check hashes only (the default).
    #[default]
    Audit,
    /// Require an ed25519 signature by one of the listed keys.
    RequireSignature {
        /// Public key files; each key's `key_id` is its file stem.
        keys: Vec<PathBuf>,
    },
}

/// A public key read from a trust key file.
///
/// A signature's `key_id` may name it in two ways: by the file stem
/// (`keys/ci-signer.pub` is `ci-signer`), or by the path exactly as the
/// configuration wrote it (`keys/ci-signer.pub`), which is what Decision
/// Gate requires; so one signed stream satisfies both Decision Gate's
/// configuration and ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedKey {
    /// The file stem: `keys/ci-signer.pub` is `ci-signer`.
    pub key_id: String,
    /// The path as written in the configuration, before it was resolved
    /// against the config file's directory: the other accepted `key_id`.
    pub configured_path: String,
    /// The 32 key bytes.
    pub public_key: [u8; 32],
    /// The file it was read from.
    pub path: PathBuf,
}

/// `providers[].timeouts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// Connect budget of an HTTP provider (TCP and TLS), 100..=10000 ms
    /// (default 2000); stdio providers do not use it.
    pub connect_timeout_ms: u64,
    /// Whole-request budget, 500..=30000 ms, at least the connect timeout (default 10000).
    pub request_timeout_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_timeout_ms: 2000,
            request_timeout_ms: 10_000,
        }
    }
}

/// `[server]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerSection {
    /// `stdio` (default) or `http`.
    pub transport: Transport,
    /// Address of the HTTP listener (default `127.0.0.1:8080`).
    #[serde(deserialize_with = "deserialize_socket_addr")]
    pub bind: SocketAddr,
    /// Message size and concurrency limits.
    pub limits: ServerLimits,
    /// JSON-RPC envelope rules: `mcp` (default), `jsonrpc` or `strict`.
    pub envelope_policy: EnvelopePolicyName,
    /// Answer shape: `auto` (default), `decision_gate` or `mcp`.
    pub dialect: DialectMode,
    /// The canonicalization profile of the `evidence_hash` (and signature)
    /// of every answer: `auto` (default: `decision-gate` for Decision Gate
    /// connections, `rfc8785` for MCP ones: the profile each verifies
    /// with), `rfc8785` or `decision-gate`.
    pub hash_profile: HashProfileName,
    /// Who may call.
    pub auth: ServerAuth,
    /// Which tools are visible.
    pub tools: ToolsConfig,
    /// `Host` values the HTTP server accepts besides the loopback names of
    /// a loopback `bind` (DNS-rebinding protection), e.g.
    /// `gate.internal:8080`; on another bind, a non-empty list is the only
    /// `Host`s accepted. Default empty.
    pub allowed_hosts: Vec<String>,
    /// How long a graceful shutdown (SIGTERM, SIGINT) waits for the
    /// queries in flight before answering them with a retryable error,
    /// 0..=600000 ms (default 25000: under the usual 30 s grace period).
    pub drain_timeout_ms: u64,
    /// Every call's deadline, 1..=600000 ms after it starts (default:
    /// none): a check reads the time left with `CheckContext::remaining`,
    /// and a blocking check polling `is_cancelled` sees it pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_timeout_ms: Option<u64>,
    /// The HTTP server runs behind a trusted reverse proxy (default
    /// false): the forwarded `Host` is checked, against `allowed_hosts`
    /// only, and loopback origins are not trusted. Needs
    /// `auth.mode = "bearer_token"` (checked at load).
    pub behind_proxy: bool,
    /// `GET /metrics` (Prometheus).
    pub metrics: MetricsSection,
    /// `[server.tls]`: serve HTTPS (default: plain HTTP).
    pub tls: ServerTls,
}

/// `[server.tls]`: the HTTP server's certificate chain and private key, as
/// PEM files; both or neither. The files are read again when they change
/// (and on `SIGHUP`), so a renewed certificate needs no restart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerTls {
    /// The certificate chain (leaf first), PEM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// The private key (PKCS#8, PKCS#1 or SEC1), PEM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

impl ServerTls {
    /// The certificate and key files, when HTTPS is configured.
    pub fn files(&self) -> Option<(&Path, &Path)> {
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Some((cert, key)),
            _ => None,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => Err(invalid(
                "server.tls.key_file",
                "is missing but cert_file is set; give both the certificate chain and its private key",
            )),
            (None, Some(_)) => Err(invalid(
                "server.tls.cert_file",
                "is missing but key_file is set; give both the certificate chain and its private key",
            )),
            _ => Ok(()),
        }
    }

    fn resolve(&mut self, base_dir: &Path) -> Result<(), ConfigError> {
        for (field, path) in [
            ("server.tls.cert_file", &mut self.cert_file),
            ("server.tls.key_file", &mut self.key_file),
        ] {
            if let Some(path) = path {
                *path = resolve(base_dir, path);
                if !path.is_file() {
                    return Err(invalid(
                        field,
                        format!("`{}` is not a file; {CONFIG_PATH_HINT}", path.display()),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Default of `[server] drain_timeout_ms`: every adapter's default.
pub const DEFAULT_DRAIN_TIMEOUT_MS: u64 = evidence_wire::server::DEFAULT_DRAIN_TIMEOUT_MS;

/// Largest `[server] drain_timeout_ms` (10 minutes).
pub const MAX_DRAIN_TIMEOUT_MS: u64 = 600_000;

/// Largest `[server] call_timeout_ms` (10 minutes).
pub const MAX_CALL_TIMEOUT_MS: u64 = 600_000;

/// `[server.metrics]`: the Prometheus endpoint of the HTTP server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct MetricsSection {
    /// Serve `GET /metrics` (default false: it is `404`).
    pub enabled: bool,
    /// Ask for the bearer token like any call (default true); false
    /// serves the metrics without it (the `Host`, `Origin` and proxy rules
    /// still apply), for a scraper on a private network.
    pub require_auth: bool,
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            enabled: false,
            require_auth: true,
        }
    }
}

impl MetricsSection {
    /// Who may read `GET /metrics`, as the HTTP policy says it.
    pub fn access(&self) -> evidence_wire_http::MetricsAccess {
        use evidence_wire_http::MetricsAccess;
        match (self.enabled, self.require_auth) {
            (false, _) => MetricsAccess::Off,
            (true, true) => MetricsAccess::Authenticated,
            (true, false) => MetricsAccess::Public,
        }
    }
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            transport: Transport::Stdio,
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            limits: ServerLimits::default(),
            envelope_policy: EnvelopePolicyName::Mcp,
            dialect: DialectMode::Auto,
            hash_profile: HashProfileName::Auto,
            auth: ServerAuth::default(),
            tools: ToolsConfig::default(),
            allowed_hosts: Vec::new(),
            drain_timeout_ms: DEFAULT_DRAIN_TIMEOUT_MS,
            call_timeout_ms: None,
            behind_proxy: false,
            metrics: MetricsSection::default(),
            tls: ServerTls::default(),
        }
    }
}

impl ServerSection {
    /// Refuses to serve HTTP on `bind` when it is not a loopback address and
    /// no authentication is configured. The CLI calls this again for an
    /// address given with `--http`.
    pub fn check_exposure(&self, bind: SocketAddr) -> Result<(), ConfigError> {
        if !bind.ip().is_loopback() && self.auth.mode == ServerAuthMode::None {
            return Err(invalid(
                "server.bind",
                format!(
                    "{bind} is reachable from other machines but server.auth.mode is \"none\"; set server.auth.mode = \"bearer_token\" with bearer_tokens, or bind to 127.0.0.1"
                ),
            ));
        }
        Ok(())
    }

    /// The server state machine's settings `[server]` describes: frame
    /// limits (`limits.max_body_bytes`, `limits.max_header_bytes`), queries
    /// in flight (`limits.max_in_flight`), the envelope policy, the dialect
    /// and the hash profile; every other field at its default. Tools,
    /// resources, the contract and the signer are the embedder's to add;
    /// [`ServerSection::tool_policy`] gives the tool visibility and
    /// authorization.
    pub fn server_config(&self) -> ServerConfig {
        let mut server = ServerConfig::default();
        server.limits.max_body_bytes = self.limits.max_body_bytes;
        server.limits.max_header_bytes = self.limits.max_header_bytes;
        server.max_in_flight = self.limits.max_in_flight;
        server.policy = match self.envelope_policy {
            EnvelopePolicyName::Mcp => Policy::mcp(),
            EnvelopePolicyName::Jsonrpc => Policy::jsonrpc(),
            EnvelopePolicyName::Strict => Policy::strict(),
        };
        server.dialect = match self.dialect {
            DialectMode::Auto => DialectChoice::Auto,
            DialectMode::DecisionGate => DialectChoice::Fixed(Dialect::DecisionGate),
            DialectMode::Mcp => DialectChoice::Fixed(Dialect::Mcp),
        };
        server.hash_profile = self.hash_profile.choice();
        server.call_timeout = self.call_timeout_ms.map(core::time::Duration::from_millis);
        server
    }

    /// The tool policy `[server.tools]` (visibility) and `[server.auth]
    /// allowed_tools` (authorization) describe; install it on a server
    /// with [`ToolPolicy::apply`].
    pub fn tool_policy(&self) -> Result<ToolPolicy, PolicyError> {
        let mode = match self.tools.mode {
            ToolsMode::Filter => VisibilityMode::Filter,
            ToolsMode::Passthrough => VisibilityMode::Passthrough,
        };
        ToolPolicy::new(
            mode,
            &self.tools.allowlist,
            &self.tools.denylist,
            self.auth.allowed_tools.as_deref(),
        )
    }
}

fn deserialize_socket_addr<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "`{text}` is not an IP address and port such as 127.0.0.1:8080 or [::1]:8080"
        ))
    })
}

/// `server.envelope_policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvelopePolicyName {
    /// MCP rules: string or integer ids, object params, no batches.
    Mcp,
    /// Full JSON-RPC 2.0 including batches and null ids.
    Jsonrpc,
    /// The seed's executable contract: string ids, params required.
    Strict,
}

/// `server.dialect`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DialectMode {
    /// MCP after `initialize`, Decision Gate otherwise.
    Auto,
    /// Always answer `{"type":"json"}` content items.
    DecisionGate,
    /// Always answer text content plus `structuredContent`.
    Mcp,
}

/// `server.hash_profile` and `providers[].hash_profile`: which
/// canonicalization profile evidence hashes use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HashProfileName {
    /// The profile the connection's dialect verifies with (see
    /// [`evidence_wire::dialect`]): `decision-gate` for Decision Gate, `rfc8785` for MCP.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// RFC 8785 always.
    #[serde(rename = "rfc8785")]
    Rfc8785,
    /// Decision Gate's own canonicalization always.
    #[serde(rename = "decision-gate", alias = "decision_gate")]
    DecisionGate,
}

impl HashProfileName {
    /// The core's choice for this name.
    pub fn choice(self) -> evidence_wire::dialect::HashProfile {
        use evidence_wire::canonical::Profile;
        use evidence_wire::dialect::HashProfile;
        match self {
            HashProfileName::Auto => HashProfile::FollowDialect,
            HashProfileName::Rfc8785 => HashProfile::Fixed(Profile::Rfc8785),
            HashProfileName::DecisionGate => HashProfile::Fixed(Profile::DecisionGate),
        }
    }
}

/// `[server.limits]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerLimits {
    /// Largest message body, 1 KiB..=64 MiB (default 1 MiB).
    pub max_body_bytes: usize,
    /// Largest Content-Length header block, 256 B..=64 KiB (default 8 KiB).
    pub max_header_bytes: usize,
    /// Requests handled at once, 1..=4096 (default 64).
    pub max_in_flight: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        // The core's defaults, written once there.
        let frame = evidence_wire::frame::Limits::default();
        ServerLimits {
            max_body_bytes: frame.max_body_bytes,
            max_header_bytes: frame.max_header_bytes,
            max_in_flight: evidence_wire::server::DEFAULT_MAX_IN_FLIGHT,
        }
    }
}

/// `server.auth.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerAuthMode {
    /// No authentication (loopback binds only).
    #[default]
    None,
    /// `Authorization: Bearer <token>` with one of `bearer_tokens`.
    BearerToken,
}

/// `[server.auth]`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerAuth {
    /// `none` (default) or `bearer_token`.
    pub mode: ServerAuthMode,
    /// Accepted tokens (bearer_token mode).
    pub bearer_tokens: Vec<String>,
    /// Tools an authenticated caller may call; absent = all visible tools.
    /// Does not change `tools/list`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
}

impl fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerAuth")
            .field("mode", &self.mode)
            .field("bearer_tokens", &self.bearer_tokens.len())
            .field("allowed_tools", &self.allowed_tools)
            .finish()
    }
}

/// `server.tools.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolsMode {
    /// Hidden tools are absent from `tools/list` and uncallable (default).
    #[default]
    Filter,
    /// `tools/list` shows the full registry (legacy clients).
    Passthrough,
}

/// `[server.tools]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolsConfig {
    /// `filter` (default) or `passthrough`.
    pub mode: ToolsMode,
    /// When non-empty, the only visible tools.
    pub allowlist: Vec<String>,
    /// Always hidden, even when allowlisted.
    pub denylist: Vec<String>,
}

/// `[docs]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct DocsConfig {
    /// Master switch for search and resources.
    pub enabled: bool,
    /// The docs search tool.
    pub enable_search: bool,
    /// `resources/list` and `resources/read`.
    pub enable_resources: bool,
    /// Include the embedded `spec/` documents.
    pub include_default_docs: bool,
    /// Extra `.md` files or directories; resolved against the config directory; must exist.
    pub extra_paths: Vec<PathBuf>,
    /// Largest single document, at least 1 (default 262144).
    pub max_doc_bytes: u64,
    /// Largest corpus, at least `max_doc_bytes` (default 1048576).
    pub max_total_bytes: u64,
    /// Most documents, at least 1 (default 32).
    pub max_docs: usize,
    /// Most sections a search answers, 1..=10 (default 10).
    pub max_sections: usize,
}

impl Default for DocsConfig {
    fn default() -> Self {
        DocsConfig {
            enabled: true,
            enable_search: true,
            enable_resources: true,
            include_default_docs: true,
            extra_paths: Vec::new(),
            max_doc_bytes: 262_144,
            max_total_bytes: 1_048_576,
            max_docs: 32,
            max_sections: 10,
        }
    }
}

/// `[logging]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct LoggingConfig {
    /// Write envelope validation logs.
    pub enabled: bool,
    /// Log directory; resolved against the config directory.
    pub dir: PathBuf,
    /// Deterministic ids and timestamps in logs (for tests and diffs).
    pub deterministic: bool,
    /// Total size cap of the log directory's run files, in bytes: a file
    /// is rotated at a quarter of it and the oldest files are deleted.
    pub max_bytes: u64,
}

impl LoggingConfig {
    /// The log sink's settings for this `[logging]` table, or `None` when it
    /// turns logging off.
    pub fn settings(&self) -> Option<evidence_wire_log::LogSettings> {
        self.enabled.then(|| {
            let mut settings = evidence_wire_log::LogSettings::new(&self.dir);
            settings.deterministic = self.deterministic;
            settings.max_bytes = self.max_bytes;
            settings
        })
    }
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            enabled: true,
            dir: PathBuf::from("runs/mcp_server/envelope_validation"),
            deterministic: false,
            max_bytes: evidence_wire_log::DEFAULT_LOG_MAX_BYTES,
        }
    }
}

/// Largest `[logging] max_bytes` (1 TiB).
pub const MAX_LOG_MAX_BYTES: u64 = 1024 * 1024 * MIB;

impl LoggingConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_range(
            "logging.max_bytes",
            self.max_bytes,
            evidence_wire_log::MIN_LOG_MAX_BYTES,
            MAX_LOG_MAX_BYTES,
            evidence_wire_log::DEFAULT_LOG_MAX_BYTES,
        )
    }
}

/// `[bundled]`: the provider `evidence-wire serve` answers as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BundledConfig {
    /// The provider id it answers to (default `evidence-wire`).
    pub provider_id: String,
    /// Directory `json_path` and `file_size` read under; resolved against the
    /// config directory (the current directory when there is no file).
    pub root: PathBuf,
    /// Name of the root in `dg+file://<root_id>/<path>` (default `evidence-root`).
    pub root_id: String,
    /// `env_get` settings.
    pub env: BundledEnvConfig,
    /// `json_path` / `file_size` settings.
    pub json: BundledJsonConfig,
    /// `http_status` / `http_body_hash` settings.
    pub http: BundledHttpConfig,
    /// Signing of every successful result (off when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing: Option<BundledSigningConfig>,
}

/// `[bundled.signing]`: the ed25519 key `evidence-wire serve` signs with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BundledSigningConfig {
    /// File holding the 32-byte secret seed (raw, or 64 hex digits), as
    /// `evidence-wire keygen` writes it; must not be readable by group or
    /// others. Resolved against the config file's directory.
    pub key_file: PathBuf,
    /// The `key_id` written into signatures (default: the file stem).
    /// Decision Gate authorizes a signature only when this equals the path
    /// of the public key exactly as its own config lists it under
    /// `trust = { require_signature = { keys = [...] } }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

impl Default for BundledConfig {
    fn default() -> Self {
        BundledConfig {
            provider_id: "evidence-wire".to_owned(),
            root: PathBuf::from("."),
            root_id: "evidence-root".to_owned(),
            env: BundledEnvConfig::default(),
            json: BundledJsonConfig::default(),
            http: BundledHttpConfig::default(),
            signing: None,
        }
    }
}

/// `[bundled.env]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BundledEnvConfig {
    /// Variables `env_get` may read; empty = none (deny by default).
    pub allow: Vec<String>,
    /// Largest value returned, 1..=65536 bytes (default 4096).
    pub max_value_bytes: usize,
}

impl Default for BundledEnvConfig {
    fn default() -> Self {
        BundledEnvConfig {
            allow: Vec::new(),
            max_value_bytes: 4096,
        }
    }
}

/// `[bundled.json]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BundledJsonConfig {
    /// Largest file read, 1..=64 MiB (default 1 MiB).
    pub max_file_bytes: u64,
    /// Largest `json_path` value, as compact JSON, 1 KiB..=16 MiB (default
    /// 256 KiB: three times it, the most an MCP-dialect answer carries, stays
    /// under the default 1 MiB frame limit).
    pub max_result_bytes: u64,
    /// Most nodes a JSONPath may select, 1..=1000000 (default 10000).
    pub max_result_nodes: u64,
}

/// Default of `[bundled.json] max_result_bytes` (256 KiB).
pub const DEFAULT_MAX_RESULT_BYTES: u64 = 256 * 1024;

/// Default of `[bundled.json] max_result_nodes`.
pub const DEFAULT_MAX_RESULT_NODES: u64 = 10_000;

impl Default for BundledJsonConfig {
    fn default() -> Self {
        BundledJsonConfig {
            max_file_bytes: 1024 * 1024,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            max_result_nodes: DEFAULT_MAX_RESULT_NODES,
        }
    }
}

/// `[bundled.http]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BundledHttpConfig {
    /// Hosts the http checks may fetch; empty = none. `host` allows the
    /// scheme's default port only, `host:port` that port only (see
    /// [`HostPattern`]).
    pub allow_hosts: Vec<String>,
    /// Allow `http://` URLs.
    pub allow_insecure_http: bool,
    /// Allow destinations whose address is loopback, private, link-local,
    /// unique-local, unspecified or otherwise special-purpose (default
    /// false: refused after resolution).
    pub allow_private_addresses: bool,
    /// Use the proxy named by `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` (and
    /// their lower-case forms) in the environment (default false: connect
    /// directly, whatever the environment says).
    pub use_env_proxy: bool,
    /// Whole-request budget, 100..=60000 ms (default 5000).
    pub timeout_ms: u64,
    /// Largest response body read, 1..=64 MiB (default 1 MiB).
    pub max_body_bytes: u64,
}

impl Default for BundledHttpConfig {
    fn default() -> Self {
        BundledHttpConfig {
            allow_hosts: Vec::new(),
            allow_insecure_http: false,
            allow_private_addresses: false,
            use_env_proxy: false,
            timeout_ms: 5000,
            max_body_bytes: 1024 * 1024,
        }
    }
}

/// One `[bundled.http] allow_hosts` entry: a host and, optionally, a port.
///
/// `example.com` allows `example.com` on the default port of the URL's
/// scheme only (443 for `https`, 80 for `http`); `example.com:8443` allows
/// that port only. Host names compare case-insensitively; an IPv6 address
/// is written in brackets (`[::1]`, `[::1]:8443`) and compares as an
/// address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    /// The host, lower-cased; an IPv6 address keeps its brackets.
    pub host: String,
    /// The port, or `None` for the scheme's default port.
    pub port: Option<u16>,
}

impl HostPattern {
    /// Parses an entry, or says what is wrong with it.
    pub fn parse(entry: &str) -> Result<HostPattern, String> {
        let usage = "write a host name or address with an optional port, e.g. \"example.com\", \"example.com:8443\" or \"[::1]:8443\" (no scheme, path or user)";
        if entry.is_empty()
            || entry.contains("://")
            || entry.contains(['/', '?', '#', '@'])
            || entry.contains(char::is_whitespace)
        {
            return Err(format!("{entry:?} is not a bare host name; {usage}"));
        }
        let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
            let Some((inside, after)) = rest.split_once(']') else {
                return Err(format!("{entry:?} opens `[` without `]`; {usage}"));
            };
            if inside.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!(
                    "{entry:?}: `{inside}` is not an IPv6 address; {usage}"
                ));
            }
            let port = match after {
                "" => None,
                other => match other.strip_prefix(':') {
                    Some(port) => Some(port),
                    None => return Err(format!("{entry:?} has text after `]`; {usage}")),
                },
            };
            (format!("[{}]", inside.to_ascii_lowercase()), port)
        } else {
            match entry.split_once(':') {
                None => (entry.to_ascii_lowercase(), None),
                Some((_, port)) if port.contains(':') => {
                    return Err(format!(
                        "{entry:?} has more than one `:`; write an IPv6 address in brackets, e.g. \"[::1]:8443\""
                    ));
                }
                Some((host, port)) => (host.to_ascii_lowercase(), Some(port)),
            }
        };
        if !host.starts_with('[') && host.contains(['[', ']']) {
            return Err(format!("{entry:?} has a stray `[` or `]`; {usage}"));
        }
        if host.is_empty() {
            return Err(format!("{entry:?} has no host; {usage}"));
        }
        let port = match port {
            None => None,
            Some(text) => match text.parse::<u16>() {
                Ok(port) if port > 0 && text.bytes().all(|byte| byte.is_ascii_digit()) => {
                    Some(port)
                }
                _ => {
                    return Err(format!(
                        "{entry:?}: the port `{text}` is not a number in 1..=65535; {usage}"
                    ));
                }
            },
        };
        Ok(HostPattern { host, port })
    }

    /// Whether this entry allows `host` (as a URL carries it: lower or
    /// upper case, an IPv6 address in brackets) on `port` (the URL's
    /// explicit port, or its scheme's default) given the scheme's
    /// `default_port`.
    pub fn allows(&self, host: &str, port: u16, default_port: u16) -> bool {
        let same_host = match (bracketed_ipv6(&self.host), bracketed_ipv6(host)) {
            (Some(ours), Some(theirs)) => ours == theirs,
            _ => self.host.eq_ignore_ascii_case(host),
        };
        same_host && self.port.unwrap_or(default_port) == port
    }
}

fn bracketed_ipv6(host: &str) -> Option<std::net::Ipv6Addr> {
    host.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

const MIB: u64 = 1024 * 1024;

fn check_range(
    field: &str,
    value: u64,
    min: u64,
    max: u64,
    default: u64,
) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(invalid(
            field,
            format!("{value} is out of range; use a value in {min}..={max} (default {default})"),
        ));
    }
    Ok(())
}

fn usize_to_u64(value: usize) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

fn check_name_list(field: &str, names: &[String], what: &str) -> Result<(), ConfigError> {
    for (index, name) in names.iter().enumerate() {
        if name.trim().is_empty() || name.trim() != name {
            return Err(invalid(
                format!("{field}[{index}]"),
                format!("{what} {name:?} must be non-empty with no leading or trailing whitespace"),
            ));
        }
        if names.iter().take(index).any(|earlier| earlier == name) {
            return Err(invalid(
                format!("{field}[{index}]"),
                format!("{what} `{name}` is listed twice; remove the repeat"),
            ));
        }
    }
    Ok(())
}

/// A `Host` header value as clients send it: `name`, `name:port` or
/// `[v6]:port`, in the characters of a URI authority without user info.
fn check_host_value(field: &str, host: &str) -> Result<(), ConfigError> {
    let allowed = |byte: u8| byte.is_ascii_alphanumeric() || b"-._~!$&'()*+;=:[]%".contains(&byte);
    if !host.bytes().all(allowed) {
        return Err(invalid(
            field,
            format!(
                "`{host}` is not a Host header value; write the host as clients send it, such as gate.internal:8080 or gate.internal (no scheme, path or user)"
            ),
        ));
    }
    Ok(())
}

fn resolve(base_dir: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base_dir.join(path)
    }
}

/// What to check when a file named in the configuration cannot be opened.
const CONFIG_PATH_HINT: &str =
    "check the path (relative paths are resolved against the config file's directory)";

/// What [`open_regular_file`] refuses: a path that is not a regular file.
#[derive(Debug)]
struct NotRegularFile(&'static str);

impl fmt::Display for NotRegularFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "it is {}, not a regular file; give the path of a regular file (a FIFO, socket, device or directory is never read: opening a FIFO would wait for a writer)",
            self.0
        )
    }
}

impl std::error::Error for NotRegularFile {}

/// What kind of non-regular file `file_type` is, in words.
fn file_kind(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
    }
    "not a regular file"
}

/// Opens `path` for reading if it is a regular file (symlinks followed),
/// and refuses anything else with an [`std::io::ErrorKind::InvalidInput`]
/// error saying what it is: opening a FIFO blocks until a writer comes, so
/// a FIFO named as a configuration, contract, key or certificate file
/// would hang whoever loads it; a device or a directory is no such file
/// either. Every file this crate reads, and every file the CLI reads for
/// its options (`--signing-key`, `--key-file`, `--contract`, `--ca-cert`),
/// is opened here.
///
/// The path's type is checked before it is opened (that is the check that
/// keeps a FIFO from blocking), and the opened file's again (a path
/// swapped for a directory or a device in between is refused). A path
/// swapped for a FIFO between the two still blocks the open: closing that
/// window needs `O_NONBLOCK`, which the crate does not set (no `libc`, no
/// `unsafe`); only someone who can write the file's directory can swap it.
pub fn open_regular_file(path: &Path) -> std::io::Result<std::fs::File> {
    let not_regular = |file_type: std::fs::FileType| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            NotRegularFile(file_kind(file_type)),
        )
    };
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        return Err(not_regular(metadata.file_type()));
    }
    let file = std::fs::File::open(path)?;
    let opened = file.metadata()?;
    if !opened.is_file() {
        return Err(not_regular(opened.file_type()));
    }
    Ok(file)
}

/// Reads at most `limit` bytes of `path`, refusing larger files before
/// reading them and anything but a regular file before opening it
/// ([`open_regular_file`]); a file that cannot be opened is reported with
/// [`CONFIG_PATH_HINT`].
fn read_capped(field: &str, path: &Path, limit: u64) -> Result<Vec<u8>, ConfigError> {
    read_capped_hinted(field, path, limit, CONFIG_PATH_HINT)
}

/// [`read_capped`] with `hint` saying what to check when `path` cannot be opened.
fn read_capped_hinted(
    field: &str,
    path: &Path,
    limit: u64,
    hint: &str,
) -> Result<Vec<u8>, ConfigError> {
    let io_error = |detail: String| ConfigError::Io {
        field: field.to_owned(),
        path: path.to_path_buf(),
        detail,
    };
    let file = open_regular_file(path).map_err(|error| {
        let refused = error
            .get_ref()
            .is_some_and(|inner| inner.is::<NotRegularFile>());
        io_error(if refused {
            error.to_string()
        } else {
            format!("{error}; {hint}")
        })
    })?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| io_error(error.to_string()))?;
    if usize_to_u64(bytes.len()) > limit {
        return Err(io_error(format!(
            "the file is larger than the limit of {limit} bytes"
        )));
    }
    Ok(bytes)
}

/// 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset = offset.saturating_sub(1);
    }
    let before = text.get(..offset).unwrap_or_default();
    let line = before.matches('\n').count().saturating_add(1);
    let line_start = before
        .rfind('\n')
        .map_or(0, |newline| newline.saturating_add(1));
    let column = before
        .get(line_start..)
        .unwrap_or_default()
        .chars()
        .count()
        .saturating_add(1);
    (line, column)
}

impl Config {
    /// Reads, parses, validates and resolves the configuration file at `path`.
    /// Relative paths inside it are resolved against its directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let bytes = read_capped("config", path, MAX_CONFIG_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|error| ConfigError::Io {
            field: "config".to_owned(),
            path: path.to_path_buf(),
            detail: format!(
                "not UTF-8 text (invalid byte at offset {}); TOML files must be UTF-8",
                error.utf8_error().valid_up_to()
            ),
        })?;
        let base_dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Config::from_toml_str(&text, &base_dir).map_err(|error| match error {
            ConfigError::Syntax {
                line,
                column,
                message,
                ..
            } => ConfigError::Syntax {
                file: Some(path.to_path_buf()),
                line,
                column,
                message,
            },
            other => other,
        })
    }

    /// Parses, validates and resolves configuration text; relative paths are
    /// resolved against `base_dir` (the config file's directory).
    pub fn from_toml_str(text: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|error| {
            let (line, column) = error
                .span()
                .map_or((0, 0), |span| line_column(text, span.start));
            ConfigError::Syntax {
                file: None,
                line,
                column,
                message: error.message().trim_end().to_owned(),
            }
        })?;
        config.validate()?;
        config.resolve(base_dir)?;
        Ok(config)
    }

    /// Checks every rule that needs no file: ranges, names, exclusivity,
    /// URL schemes, auth exposure. [`Config::from_toml_str`] calls it; call
    /// it again after changing a `Config` in code.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (index, provider) in self.providers.iter().enumerate() {
            if let Some(first) = self
                .providers
                .iter()
                .take(index)
                .position(|earlier| earlier.name == provider.name)
            {
                return Err(invalid(
                    format!("providers[{index}].name"),
                    format!(
                        "`{}` is already the name of providers[{first}]; provider names must be unique",
                        provider.name
                    ),
                ));
            }
            provider.validate(index)?;
        }
        self.server.validate()?;
        self.docs.validate()?;
        self.logging.validate()?;
        self.bundled.validate()?;
        Ok(())
    }

    /// Joins relative paths to `base_dir`, reads contracts and keys, and
    /// checks that referenced files and directories exist.
    fn resolve(&mut self, base_dir: &Path) -> Result<(), ConfigError> {
        for (index, provider) in self.providers.iter_mut().enumerate() {
            provider.resolve(index, base_dir)?;
        }
        for (index, path) in self.docs.extra_paths.iter_mut().enumerate() {
            *path = resolve(base_dir, path);
            if !path.exists() {
                return Err(invalid(
                    format!("docs.extra_paths[{index}]"),
                    format!(
                        "`{}` does not exist; list existing .md files or directories (relative to the config file's directory)",
                        path.display()
                    ),
                ));
            }
        }
        self.server.tls.resolve(base_dir)?;
        self.logging.dir = resolve(base_dir, &self.logging.dir);
        if let Some(signing) = &mut self.bundled.signing {
            signing.key_file = resolve(base_dir, &signing.key_file);
            // Read once now, so a missing, malformed or exposed key fails
            // `config check` and start-up, not the first query.
            read_signing_seed("bundled.signing.key_file", &signing.key_file)?;
        }
        self.bundled.root = resolve(base_dir, &self.bundled.root);
        if !self.bundled.root.is_dir() {
            return Err(invalid(
                "bundled.root",
                format!(
                    "`{}` is not a directory; point root at the directory whose files the bundled provider may read",
                    self.bundled.root.display()
                ),
            ));
        }
        Ok(())
    }

    /// The provider named `name`, if configured.
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|provider| provider.name == name)
    }
}

impl ProviderConfig {
    fn validate(&self, index: usize) -> Result<(), ConfigError> {
        let field = |name: &str| format!("providers[{index}].{name}");
        if self.name.trim().is_empty() {
            return Err(invalid(field("name"), "is empty; give the provider a name"));
        }
        if self.name.trim() != self.name {
            return Err(invalid(
                field("name"),
                format!(
                    "{:?} has leading or trailing whitespace; remove it",
                    self.name
                ),
            ));
        }
        let reserved = RESERVED_PROVIDER_NAMES.contains(&self.name.as_str());
        match self.provider_type {
            ProviderType::Builtin => {
                if !reserved {
                    return Err(invalid(
                        field("name"),
                        format!(
                            "`{}` is not a builtin provider; builtin names are time, env, json and http (use type = \"mcp\" for an external provider)",
                            self.name
                        ),
                    ));
                }
                for (key, present) in [
                    ("command", self.command.is_some()),
                    ("url", self.url.is_some()),
                    ("capabilities_path", self.capabilities_path.is_some()),
                    ("auth", self.auth.is_some()),
                ] {
                    if present {
                        return Err(invalid(
                            field(key),
                            "applies only to type = \"mcp\" providers; remove it from this builtin provider",
                        ));
                    }
                }
            }
            ProviderType::Mcp => {
                if reserved {
                    return Err(invalid(
                        field("name"),
                        format!(
                            "`{}` is reserved for the builtin provider; choose another name for an mcp provider",
                            self.name
                        ),
                    ));
                }
                if self.config.is_some() {
                    return Err(invalid(
                        field("config"),
                        "applies only to type = \"builtin\" providers; an mcp provider is configured by its own command or service",
                    ));
                }
                self.validate_endpoint(index)?;
                if self.capabilities_path.is_none() {
                    return Err(invalid(
                        field("capabilities_path"),
                        "is required for type = \"mcp\"; point it at the provider's capabilities contract JSON (see `evidence-wire contract`)",
                    ));
                }
            }
        }
        if !self.tls.ca_certs.is_empty() {
            let https = self.provider_type == ProviderType::Mcp
                && self
                    .url
                    .as_deref()
                    .is_some_and(|url| url.starts_with("https://"));
            if !https {
                return Err(invalid(
                    field("tls.ca_certs"),
                    "applies only to type = \"mcp\" providers with an https:// url; remove it",
                ));
            }
        }
        if let TrustConfig::RequireSignature { keys } = &self.trust {
            if keys.is_empty() {
                return Err(invalid(
                    field("trust.require_signature.keys"),
                    "is empty, so no signature could ever be accepted; list at least one public key file",
                ));
            }
        }
        let timeouts = self.timeouts;
        check_range(
            &field("timeouts.connect_timeout_ms"),
            timeouts.connect_timeout_ms,
            100,
            10_000,
            2000,
        )?;
        check_range(
            &field("timeouts.request_timeout_ms"),
            timeouts.request_timeout_ms,
            500,
            30_000,
            10_000,
        )?;
        if timeouts.request_timeout_ms < timeouts.connect_timeout_ms {
            return Err(invalid(
                field("timeouts.request_timeout_ms"),
                format!(
                    "{} is less than connect_timeout_ms {}; the request timeout must be at least the connect timeout",
                    timeouts.request_timeout_ms, timeouts.connect_timeout_ms
                ),
            ));
        }
        Ok(())
    }

    fn validate_endpoint(&self, index: usize) -> Result<(), ConfigError> {
        let field = |name: &str| format!("providers[{index}].{name}");
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => Err(invalid(
                field("url"),
                "an mcp provider needs exactly one of command (stdio) or url (HTTP), not both; remove one",
            )),
            (None, None) => Err(invalid(
                field("command"),
                "an mcp provider needs exactly one of command (stdio) or url (HTTP); add one",
            )),
            (Some(command), None) => {
                match command.first() {
                    None => {
                        return Err(invalid(
                            field("command"),
                            "is empty; give the program and its arguments, e.g. [\"/usr/local/bin/provider\", \"--flag\"]",
                        ));
                    }
                    Some(program) if program.trim().is_empty() => {
                        return Err(invalid(
                            field("command[0]"),
                            "the program name is empty; give the path of the provider executable",
                        ));
                    }
                    Some(_) => {}
                }
                if self.auth.is_some() {
                    return Err(invalid(
                        field("auth"),
                        "applies only to url (HTTP) providers; a stdio provider receives no Authorization header",
                    ));
                }
                Ok(())
            }
            (None, Some(url)) => {
                let rest = if let Some(rest) = url.strip_prefix("https://") {
                    rest
                } else if let Some(rest) = url.strip_prefix("http://") {
                    if !self.allow_insecure_http {
                        return Err(invalid(
                            field("url"),
                            format!(
                                "`{url}` is plain http; use https://, or set allow_insecure_http = true if plain text on the network is acceptable"
                            ),
                        ));
                    }
                    rest
                } else {
                    return Err(invalid(
                        field("url"),
                        format!("`{url}` is not an http(s) URL; use https://host/path"),
                    ));
                };
                let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
                if host.is_empty() || host.contains(char::is_whitespace) {
                    return Err(invalid(
                        field("url"),
                        format!("`{url}` has no valid host; use https://host/path"),
                    ));
                }
                if let Some(auth) = &self.auth {
                    if auth.bearer_token.trim().is_empty() {
                        return Err(invalid(
                            field("auth.bearer_token"),
                            "is empty; give the token, or remove auth",
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    fn resolve(&mut self, index: usize, base_dir: &Path) -> Result<(), ConfigError> {
        if let Some(path) = &self.capabilities_path {
            let resolved = resolve(base_dir, path);
            let field = format!("providers[{index}].capabilities_path");
            let bytes = read_capped(&field, &resolved, MAX_CONTRACT_BYTES)?;
            let text = core::str::from_utf8(&bytes).map_err(|_| {
                invalid(
                    field.as_str(),
                    format!("`{}` is not UTF-8 JSON", resolved.display()),
                )
            })?;
            let contract = ProviderContract::from_json_str(text)
                .and_then(|contract| contract.validate(&self.name).map(|()| contract))
                .map_err(|error| {
                    invalid(
                        field.as_str(),
                        format!("contract `{}` is invalid: {error}", resolved.display()),
                    )
                })?;
            self.capabilities_path = Some(resolved);
            self.contract = Some(contract);
        }
        if let TrustConfig::RequireSignature { keys } = &mut self.trust {
            let mut loaded: Vec<TrustedKey> = Vec::new();
            for (key_index, path) in keys.iter_mut().enumerate() {
                let configured = path.to_string_lossy().into_owned();
                *path = resolve(base_dir, path);
                let field = format!("providers[{index}].trust.require_signature.keys[{key_index}]");
                let key = read_trusted_key(&field, path, configured)?;
                let clash = |earlier: &&TrustedKey| {
                    earlier.key_id == key.key_id
                        || earlier.configured_path == key.key_id
                        || earlier.key_id == key.configured_path
                };
                if let Some(earlier) = loaded.iter().find(clash) {
                    return Err(invalid(
                        field,
                        format!(
                            "key id `{}` (the file stem) is already used by `{}`; rename one of the files",
                            key.key_id,
                            earlier.path.display()
                        ),
                    ));
                }
                loaded.push(key);
            }
            self.trusted_keys = loaded;
        }
        let mut pems = Vec::with_capacity(self.tls.ca_certs.len());
        for (cert_index, path) in self.tls.ca_certs.iter_mut().enumerate() {
            *path = resolve(base_dir, path);
            let field = format!("providers[{index}].tls.ca_certs[{cert_index}]");
            pems.push(read_ca_cert_hinted(&field, path, CONFIG_PATH_HINT)?);
        }
        self.ca_certs_pem = pems;
        Ok(())
    }
}

/// Reads a PEM file holding at least one certificate (at most
/// [`MAX_CA_CERT_BYTES`], refused before reading when larger), as the CLI's
/// `--ca-cert` names one; errors name `field`. The configuration's
/// `providers[].tls.ca_certs` are read this way when it loads
/// ([`ProviderConfig::ca_certs_pem`]).
pub fn read_ca_cert(field: &str, path: &Path) -> Result<String, ConfigError> {
    read_ca_cert_hinted(field, path, "check the path")
}

/// [`read_ca_cert`] with `hint` saying what to check when `path` cannot be opened.
fn read_ca_cert_hinted(field: &str, path: &Path, hint: &str) -> Result<String, ConfigError> {
    let bytes = read_capped_hinted(field, path, MAX_CA_CERT_BYTES, hint)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        invalid(
            field,
            format!(
                "`{}` is not PEM text; give a PEM certificate file (-----BEGIN CERTIFICATE-----)",
                path.display()
            ),
        )
    })?;
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(invalid(
            field,
            format!(
                "`{}` holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the CA certificate in PEM form",
                path.display()
            ),
        ));
    }
    Ok(text)
}

/// Reads a public key file: 32 raw bytes, 64 hex digits, or base64 of
/// the 32 bytes (what Decision Gate reads; surrounding whitespace
/// ignored). The key id is the file stem; `configured` is the path as the
/// configuration wrote it.
fn read_trusted_key(
    field: &str,
    path: &Path,
    configured: String,
) -> Result<TrustedKey, ConfigError> {
    let key_id = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .filter(|stem| !stem.is_empty())
        .ok_or_else(|| {
            invalid(
                field,
                format!(
                    "`{}` has no UTF-8 file stem to use as key id; rename the file",
                    path.display()
                ),
            )
        })?
        .to_owned();
    let bytes = read_capped(field, path, MAX_KEY_FILE_BYTES)?;
    let public_key = decode_key_bytes(&bytes).ok_or_else(|| {
        invalid(
            field,
            format!(
                "`{}` is not an ed25519 public key; write the 32 raw key bytes (what `evidence-wire keygen` writes), 64 hex digits or base64",
                path.display()
            ),
        )
    })?;
    if ed25519_dalek::VerifyingKey::from_bytes(&public_key).is_err() {
        return Err(invalid(
            field,
            format!(
                "`{}` holds 32 bytes that are not a valid ed25519 public key",
                path.display()
            ),
        ));
    }
    Ok(TrustedKey {
        key_id,
        configured_path: configured,
        public_key,
        path: path.to_path_buf(),
    })
}

/// 32 key bytes from a key file's contents: exactly 32 raw bytes, or text
/// holding 64 hex digits or the base64 of 32 bytes (padded or not).
pub fn decode_key_bytes(bytes: &[u8]) -> Option<[u8; 32]> {
    if let Ok(raw) = <[u8; 32]>::try_from(bytes) {
        // 32 bytes that happen to be text could also be base64 of 24
        // bytes, never of 32: raw is the only reading.
        return Some(raw);
    }
    let text = core::str::from_utf8(bytes).ok()?.trim();
    if text.len() == 64 {
        if let Some(key) = decode_hex_32(text) {
            return Some(key);
        }
    }
    use base64::Engine as _;
    let engine = if text.ends_with('=') {
        base64::engine::general_purpose::STANDARD
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD
    };
    let decoded = engine.decode(text).ok()?;
    <[u8; 32]>::try_from(decoded.as_slice()).ok()
}

/// Reads an ed25519 secret seed file (32 raw bytes or 64 hex digits, as
/// `evidence-wire keygen` writes it). On Unix a file readable by group or
/// others is refused: a leaked seed lets anyone sign evidence.
pub fn read_signing_seed(field: &str, path: &Path) -> Result<[u8; 32], ConfigError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::metadata(path).map_err(|error| ConfigError::Io {
            field: field.to_owned(),
            path: path.to_path_buf(),
            detail: format!(
                "{error}; check the path (relative paths are resolved against the config file's directory)"
            ),
        })?;
        let mode = metadata.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(invalid(
                field,
                format!(
                    "`{}` is readable by group or others (mode {:o}); a signing key must be private: run `chmod 600 {}`",
                    path.display(),
                    mode & 0o777,
                    path.display()
                ),
            ));
        }
    }
    let bytes = read_capped(field, path, MAX_KEY_FILE_BYTES)?;
    let seed = match <[u8; 32]>::try_from(bytes.as_slice()) {
        Ok(raw) => Some(raw),
        Err(_) => core::str::from_utf8(&bytes)
            .ok()
            .map(str::trim)
            .filter(|text| text.len() == 64)
            .and_then(decode_hex_32),
    };
    seed.ok_or_else(|| {
        invalid(
            field,
            format!(
                "`{}` is not an ed25519 secret seed; it must hold 32 raw bytes or 64 hex digits (`evidence-wire keygen --out PREFIX` writes one)",
                path.display()
            ),
        )
    })
}

impl BundledSigningConfig {
    /// Signing with the seed in `key_file`, under the key file's stem as key id.
    pub fn new(key_file: PathBuf) -> Self {
        BundledSigningConfig {
            key_file,
            key_id: None,
        }
    }
}

impl BundledSigningConfig {
    /// Reads the key file and makes the signer `serve` signs with; the key
    /// id is `key_id`, or the key file's stem.
    pub fn signer(&self) -> Result<evidence_wire::evidence::EvidenceSigner, ConfigError> {
        let seed = read_signing_seed("bundled.signing.key_file", &self.key_file)?;
        let key_id = match &self.key_id {
            Some(key_id) => key_id.clone(),
            None => self
                .key_file
                .file_stem()
                .and_then(|stem| stem.to_str())
                .filter(|stem| !stem.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| {
                    invalid(
                        "bundled.signing.key_id",
                        format!(
                            "`{}` has no UTF-8 file stem to use as key id; set key_id",
                            self.key_file.display()
                        ),
                    )
                })?,
        };
        Ok(evidence_wire::evidence::EvidenceSigner::from_seed(
            key_id, &seed,
        ))
    }
}

fn decode_hex_32(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    let digits = text.as_bytes().chunks_exact(2);
    if digits.len() != out.len() {
        return None;
    }
    for (slot, pair) in out.iter_mut().zip(digits) {
        let pair = core::str::from_utf8(pair).ok()?;
        *slot = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

impl ServerSection {
    fn validate(&self) -> Result<(), ConfigError> {
        let limits = self.limits;
        check_range(
            "server.limits.max_body_bytes",
            usize_to_u64(limits.max_body_bytes),
            1024,
            64 * MIB,
            MIB,
        )?;
        check_range(
            "server.limits.max_header_bytes",
            usize_to_u64(limits.max_header_bytes),
            256,
            64 * 1024,
            8 * 1024,
        )?;
        check_range(
            "server.limits.max_in_flight",
            usize_to_u64(limits.max_in_flight),
            1,
            4096,
            64,
        )?;
        match self.auth.mode {
            ServerAuthMode::None => {
                if !self.auth.bearer_tokens.is_empty() {
                    return Err(invalid(
                        "server.auth.bearer_tokens",
                        "tokens are set but server.auth.mode is \"none\", so they would be ignored; set mode = \"bearer_token\" or remove them",
                    ));
                }
            }
            ServerAuthMode::BearerToken => {
                if self.auth.bearer_tokens.is_empty() {
                    return Err(invalid(
                        "server.auth.bearer_tokens",
                        "is empty but server.auth.mode is \"bearer_token\", so nobody could call; list at least one token",
                    ));
                }
                for (index, token) in self.auth.bearer_tokens.iter().enumerate() {
                    if token.trim().is_empty() || token.trim() != token {
                        return Err(invalid(
                            format!("server.auth.bearer_tokens[{index}]"),
                            "a token must be non-empty with no surrounding whitespace",
                        ));
                    }
                }
            }
        }
        if let Some(allowed) = &self.auth.allowed_tools {
            check_name_list("server.auth.allowed_tools", allowed, "tool")?;
        }
        check_name_list("server.allowed_hosts", &self.allowed_hosts, "host")?;
        for (index, host) in self.allowed_hosts.iter().enumerate() {
            check_host_value(&format!("server.allowed_hosts[{index}]"), host)?;
        }
        check_name_list("server.tools.allowlist", &self.tools.allowlist, "tool")?;
        check_name_list("server.tools.denylist", &self.tools.denylist, "tool")?;
        if self.tools.mode == ToolsMode::Passthrough {
            for (list, names) in [
                ("server.tools.allowlist", &self.tools.allowlist),
                ("server.tools.denylist", &self.tools.denylist),
            ] {
                if !names.is_empty() {
                    return Err(invalid(
                        list,
                        "is not empty but server.tools.mode is \"passthrough\", which shows every tool and would ignore it; set mode = \"filter\" or empty the list",
                    ));
                }
            }
        }
        check_range(
            "server.drain_timeout_ms",
            self.drain_timeout_ms,
            0,
            MAX_DRAIN_TIMEOUT_MS,
            DEFAULT_DRAIN_TIMEOUT_MS,
        )?;
        match self.call_timeout_ms {
            Some(0) => {
                return Err(invalid(
                    "server.call_timeout_ms",
                    "0 would give every call no time at all; use a value in 1..=600000, or leave it out for no deadline",
                ));
            }
            Some(ms) if ms > MAX_CALL_TIMEOUT_MS => {
                return Err(invalid(
                    "server.call_timeout_ms",
                    format!(
                        "{ms} is out of range; use a value in 1..={MAX_CALL_TIMEOUT_MS}, or leave it out for no deadline"
                    ),
                ));
            }
            _ => {}
        }
        self.check_proxy(self.behind_proxy)?;
        self.tls.validate()?;
        self.check_exposure(self.bind)
    }

    /// Refuses to serve behind a proxy (`behind_proxy`, or `--behind-proxy`
    /// on the command line) without authentication: behind a proxy every
    /// request arrives from the proxy, so nothing tells a local caller from
    /// the whole network. The CLI calls this again with the flag.
    pub fn check_proxy(&self, behind_proxy: bool) -> Result<(), ConfigError> {
        if behind_proxy && self.auth.mode == ServerAuthMode::None {
            return Err(invalid(
                "server.behind_proxy",
                "is true but server.auth.mode is \"none\": behind a proxy every request arrives from the proxy, so nothing tells a local caller from the whole network; set server.auth.mode = \"bearer_token\" with bearer_tokens",
            ));
        }
        Ok(())
    }
}

impl DocsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_range(
            "docs.max_sections",
            usize_to_u64(self.max_sections),
            1,
            10,
            10,
        )?;
        check_range("docs.max_docs", usize_to_u64(self.max_docs), 1, 4096, 32)?;
        check_range(
            "docs.max_doc_bytes",
            self.max_doc_bytes,
            1,
            64 * MIB,
            262_144,
        )?;
        check_range(
            "docs.max_total_bytes",
            self.max_total_bytes,
            1,
            256 * MIB,
            1_048_576,
        )?;
        if self.max_total_bytes < self.max_doc_bytes {
            return Err(invalid(
                "docs.max_total_bytes",
                format!(
                    "{} is less than max_doc_bytes {}; the corpus limit must be at least the per-document limit",
                    self.max_total_bytes, self.max_doc_bytes
                ),
            ));
        }
        Ok(())
    }
}

impl BundledConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.provider_id.trim().is_empty() || self.provider_id.trim() != self.provider_id {
            return Err(invalid(
                "bundled.provider_id",
                format!(
                    "{:?} must be non-empty with no leading or trailing whitespace",
                    self.provider_id
                ),
            ));
        }
        if RESERVED_PROVIDER_NAMES.contains(&self.provider_id.as_str()) {
            return Err(invalid(
                "bundled.provider_id",
                format!(
                    "`{}` is reserved for a builtin provider; choose another id",
                    self.provider_id
                ),
            ));
        }
        let root_id_ok = !self.root_id.is_empty()
            && self
                .root_id
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
        if !root_id_ok {
            return Err(invalid(
                "bundled.root_id",
                format!(
                    "{:?} must be non-empty and use only letters, digits, '-', '_' and '.' (it is the host part of dg+file://<root_id>/<path>)",
                    self.root_id
                ),
            ));
        }
        for (index, name) in self.env.allow.iter().enumerate() {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(invalid(
                    format!("bundled.env.allow[{index}]"),
                    format!(
                        "{name:?} is not an environment variable name (non-empty, no '=' or NUL)"
                    ),
                ));
            }
        }
        check_name_list("bundled.env.allow", &self.env.allow, "variable")?;
        check_range(
            "bundled.env.max_value_bytes",
            usize_to_u64(self.env.max_value_bytes),
            1,
            65_536,
            4096,
        )?;
        check_range(
            "bundled.json.max_file_bytes",
            self.json.max_file_bytes,
            1,
            64 * MIB,
            MIB,
        )?;
        check_range(
            "bundled.json.max_result_bytes",
            self.json.max_result_bytes,
            1024,
            16 * MIB,
            DEFAULT_MAX_RESULT_BYTES,
        )?;
        check_range(
            "bundled.json.max_result_nodes",
            self.json.max_result_nodes,
            1,
            1_000_000,
            DEFAULT_MAX_RESULT_NODES,
        )?;
        for (index, host) in self.http.allow_hosts.iter().enumerate() {
            HostPattern::parse(host).map_err(|message| {
                invalid(format!("bundled.http.allow_hosts[{index}]"), message)
            })?;
        }
        check_name_list("bundled.http.allow_hosts", &self.http.allow_hosts, "host")?;
        if let Some(key_id) = self
            .signing
            .as_ref()
            .and_then(|signing| signing.key_id.as_ref())
        {
            if key_id.trim().is_empty() {
                return Err(invalid(
                    "bundled.signing.key_id",
                    "must not be empty; write the key id callers trust, e.g. the public key's path as Decision Gate's config lists it",
                ));
            }
        }
        check_range(
            "bundled.http.timeout_ms",
            self.http.timeout_ms,
            100,
            60_000,
            5000,
        )?;
        check_range(
            "bundled.http.max_body_bytes",
            self.http.max_body_bytes,
            1,
            64 * MIB,
            MIB,
        )?;
        Ok(())
    }
}
