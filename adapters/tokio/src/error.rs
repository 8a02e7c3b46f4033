//! [`ProviderError`]: why a query through a provider client failed.
//!
//! One error type for the child-process and the HTTP client, so callers
//! handle both alike. Protocol failures (a provider's JSON-RPC error, an
//! unreadable or unverifiable answer, a timeout, a lost connection) come
//! from the core client as [`QueryError`]; the other variants are about
//! processes, URLs and HTTP.

use std::io;

use evidence_wire::client::QueryError;
use evidence_wire::evidence::{EvidenceError, EvidenceResult};
use serde_json::json;

/// Why a query through a [`ProcessProvider`](crate::ProcessProvider) or an
/// [`HttpProvider`](crate::HttpProvider) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The query failed (provider error, bad answer, verification, timeout,
    /// lost connection).
    #[error(transparent)]
    Query(QueryError),
    /// The child could not be started.
    #[error("cannot start provider {command:?}: {source}")]
    Spawn {
        /// The command.
        command: Vec<String>,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The provider client was shut down.
    #[error("the provider client has shut down")]
    ShutDown,
    /// The provider URL cannot be used (malformed, `http://` without
    /// `allow_insecure_http`, unusable extra root certificates).
    #[error("provider URL {url:?} refused: {reason}")]
    Url {
        /// The URL as configured.
        url: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The HTTP provider could not be reached.
    #[error("cannot connect to {address}: {reason}")]
    Connect {
        /// `host:port`.
        address: String,
        /// Why (refused, unresolvable, timed out).
        reason: String,
    },
    /// The TLS handshake with an `https://` provider failed (certificate
    /// not trusted or not naming the host, no common protocol, timeout).
    #[error("TLS with {address} failed: {reason}")]
    Tls {
        /// `host:port`.
        address: String,
        /// The cause and what to do.
        reason: String,
    },
    /// The HTTP provider answered with a status other than 2xx. Redirects
    /// (3xx) are never followed and land here with their `Location`.
    #[error("provider answered HTTP {status}{}: {detail}", location.as_ref().map(|l| format!(" (redirect to {l:?}, not followed)")).unwrap_or_default())]
    HttpStatus {
        /// The status code.
        status: u16,
        /// The `Location` header of a redirect.
        location: Option<String>,
        /// The JSON-RPC error message when the body held one, else the
        /// start of the body.
        detail: String,
    },
    /// The HTTP answer is larger than the configured cap.
    #[error(
        "provider answer is larger than the limit of {limit} bytes; raise max_response_bytes if such answers are legitimate"
    )]
    ResponseTooLarge {
        /// The cap.
        limit: usize,
    },
    /// The HTTP answer held no response to the query (empty, wrong id,
    /// not JSON-RPC).
    #[error("provider answer holds no response to the query: {0}")]
    UnexpectedResponse(String),
}

impl ProviderError {
    /// A stable machine-readable name of the failure (the `error.code` of
    /// [`ProviderError::to_evidence_result`]).
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::Query(error) => error.code(),
            ProviderError::Spawn { .. }
            | ProviderError::ShutDown
            | ProviderError::Connect { .. }
            | ProviderError::Tls { .. } => "provider_unavailable",
            ProviderError::Url { .. } => "provider_misconfigured",
            ProviderError::HttpStatus { .. } => "provider_error",
            ProviderError::ResponseTooLarge { .. } | ProviderError::UnexpectedResponse(_) => {
                "invalid_provider_result"
            }
        }
    }

    /// The failure as an EvidenceResult carrying an error (what Decision
    /// Gate records).
    pub fn to_evidence_result(&self) -> EvidenceResult {
        match self {
            ProviderError::Query(error) => error.to_evidence_result(),
            ProviderError::HttpStatus { status, .. } => EvidenceResult::with_error(
                EvidenceError::new(self.code(), self.to_string())
                    .with_details(json!({ "status": status })),
            ),
            other => {
                EvidenceResult::with_error(EvidenceError::new(other.code(), other.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_results() {
        let status = ProviderError::HttpStatus {
            status: 302,
            location: Some("http://elsewhere".to_owned()),
            detail: String::new(),
        };
        assert!(status.to_string().contains("not followed"));
        let result = status.to_evidence_result();
        let error = result.error.expect("error");
        assert_eq!(error.code, "provider_error");
        assert_eq!(error.details, Some(json!({"status": 302})));
        assert_eq!(
            ProviderError::Query(QueryError::Timeout(5)).code(),
            "provider_timeout"
        );
        assert_eq!(ProviderError::ShutDown.code(), "provider_unavailable");
    }
}
