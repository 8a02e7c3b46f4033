//! `check-provider`'s battery as a library: a conformance and robustness
//! report for any evidence provider, run from a command line
//! (`evidence-wire check-provider`) or from a provider's own `cargo test`.
//!
//! It runs a battery against the provider (transport and dialect, the
//! capabilities contract against Decision Gate's rules, every check of the
//! contract, robustness, signatures when keys are given) and fills a
//! [`Report`]: one line per check, `pass`, `warn` or `fail` with its
//! reason and evidence. `spec/guides/checking-a-provider.md` explains
//! every line.
//!
//! ```no_run
//! use evidence_wire_tokio::prelude::*;
//! use evidence_wire_tokio::testing::CheckProvider;
//!
//! # fn files() -> Provider { unimplemented!() }
//! // The provider in this process, served on an in-memory stream:
//! CheckProvider::service(files()).unwrap().run().assert_clean();
//! // Its binary, spawned as Decision Gate spawns it (contract given):
//! CheckProvider::command(["target/debug/examples/files_provider"])
//!     .contract(files().contract())
//!     .run()
//!     .assert_passed();
//! ```
//!
//! The battery is built on the core client ([`evidence_wire::client`]):
//! every request and every answer goes through its raw entry points (see
//! [`session`]); broken frames are written with `Client::send_raw`, their
//! ids reserved with `Client::expect_reply`, so the client still matches
//! what the provider answers to them.
//!
//! The provider's contract is given ([`CheckProvider::contract`]; a
//! service in this process brings its own), or read from the provider
//! itself: `resources/read` of `decision-gate://contract`
//! ([`battery::CONTRACT_URI`]), whose text is the contract JSON as
//! `evidence-wire contract` prints it. Without either, the per-check
//! battery uses only what `tools/list` says (the `check_id` enum of the
//! input schema), and `contract.source` says so.
//!
//! A provider program runs in a process group of its own, ended as a whole
//! with each session ([`process`]), so a launcher that does not `exec`
//! and whatever it started end with it; no read of its pipes waits
//! without a deadline (issue 38). A service in this process is served
//! afresh for each session by [`crate::serve`] on an in-memory stream (the
//! bytes stdio would carry); the lines about processes and stderr are not
//! run for it.
//!
//! Limits: see [`battery`] (timeouts, fixed counts), [`session`]
//! (bounded queues, stderr sampling, pipe deadlines) and [`process`]
//! (the grace before SIGKILL).

pub mod battery;
pub mod process;
pub mod report;
pub mod session;

use std::time::Duration;

use evidence_wire::contract::ProviderContract;
use evidence_wire::evidence::KeySet;
use evidence_wire_provider::{IntoService, ServeError};

pub use battery::{Battery, ContractInput, Keys};
pub use report::{Line, Report, Status};
pub use session::{Endpoint, ExitLog};

use crate::HttpProvider;

/// The battery's default wait for each answer (`--timeout-ms`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(5000);
/// The battery's default number of answers timed per check (`--samples`).
pub const DEFAULT_SAMPLES: usize = 20;

/// `check-provider`'s battery for one provider, built up and then
/// [`CheckProvider::run`]: a provider program, an HTTP endpoint or a
/// service in this process.
pub struct CheckProvider {
    battery: Battery,
    target: String,
}

impl std::fmt::Debug for CheckProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckProvider")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl CheckProvider {
    fn with(endpoint: Endpoint, contract: ContractInput, target: String) -> Self {
        CheckProvider {
            battery: Battery {
                endpoint,
                contract,
                provider_id: None,
                keys: None,
                timeout_ms: u64::try_from(DEFAULT_TIMEOUT.as_millis()).unwrap_or(u64::MAX),
                samples: DEFAULT_SAMPLES,
                exits: ExitLog::default(),
            },
            target,
        }
    }

    /// The provider program `argv` (program first), spawned without a
    /// shell, afresh for each session, in a process group of its own.
    /// Give its contract with [`CheckProvider::contract`] unless it serves
    /// one at `resources/read decision-gate://contract`.
    pub fn command<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let argv: Vec<String> = argv.into_iter().map(Into::into).collect();
        let target = argv.join(" ");
        CheckProvider::with(Endpoint::Command(argv), ContractInput::None, target)
    }

    /// The HTTP provider `provider` (its URL, token and roots).
    pub fn http(provider: HttpProvider, target: impl Into<String>) -> Self {
        CheckProvider::with(Endpoint::Http(provider), ContractInput::None, target.into())
    }

    /// `service` (a [`crate::Provider`] or a [`crate::Service`]) in this
    /// process, served for each session on an in-memory stream as stdio
    /// would serve it, with the contract it serves.
    pub fn service(service: impl IntoService) -> Result<Self, ServeError> {
        let service = service.into_service()?;
        let contract = match &service.config().contract {
            Some(contract) => ContractInput::Given {
                source: "the service's own contract (what Provider::contract builds)".to_owned(),
                contract: contract.contract().clone(),
            },
            None => ContractInput::None,
        };
        let target = match &contract {
            ContractInput::Given { contract, .. } => {
                format!("provider {:?} in this process", contract.provider_id)
            }
            _ => "a service in this process".to_owned(),
        };
        Ok(CheckProvider::with(
            Endpoint::Service(service),
            contract,
            target,
        ))
    }

    /// The same battery holding the provider to `contract` (e.g. its
    /// `Provider::contract()`), as `--contract FILE` does.
    pub fn contract(mut self, contract: ProviderContract) -> Self {
        self.battery.contract = ContractInput::Given {
            source: "given by the caller".to_owned(),
            contract,
        };
        self
    }

    /// The same battery putting `provider_id` in its queries (default: the
    /// contract's).
    pub fn provider_id(mut self, provider_id: impl Into<String>) -> Self {
        self.battery.provider_id = Some(provider_id.into());
        self
    }

    /// The same battery requiring every result to be signed by the
    /// ed25519 key `public_key` under `key_id` (call again for more keys):
    /// Decision Gate's `require_signature`.
    pub fn require_signature(
        mut self,
        key_id: &str,
        public_key: &[u8; 32],
    ) -> Result<Self, String> {
        let keys = self.battery.keys.get_or_insert_with(|| Keys {
            set: KeySet::new(),
            names: Vec::new(),
        });
        keys.set
            .insert_bytes(key_id, public_key)
            .map_err(|error| format!("key {key_id}: {error}"))?;
        keys.names.push(key_id.to_owned());
        Ok(self)
    }

    /// [`CheckProvider::require_signature`] with the public key in the
    /// file `path` (`PREFIX.pub` as `evidence-wire keygen --out PREFIX`
    /// writes it, read by
    /// [`read_public_key_file`](evidence_wire_provider::signing::read_public_key_file)),
    /// under the key id `path` as given: the key id Decision Gate looks it
    /// up by, and what a provider signing for it passes as `--key-id`.
    pub fn require_signature_file(self, path: impl AsRef<std::path::Path>) -> Result<Self, String> {
        let path = path.as_ref();
        let key = evidence_wire_provider::signing::read_public_key_file(path)
            .map_err(|error| error.to_string())?;
        self.require_signature(&path.display().to_string(), &key)
    }

    /// The same battery waiting at most `timeout` for each answer.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.battery.timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// The same battery timing `samples` answers per check.
    pub fn samples(mut self, samples: usize) -> Self {
        self.battery.samples = samples.max(1);
        self
    }

    /// Runs the battery (seconds: every session, every probe) and returns
    /// the report; [`Report::assert_clean`] fails a test on a `fail` or
    /// `warn` line, [`Report::assert_passed`] on a `fail` line.
    pub fn run(self) -> Report {
        let mut report = Report {
            target: self.target,
            ..Report::default()
        };
        self.battery.run(&mut report);
        report
    }
}
