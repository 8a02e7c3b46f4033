//! `http_status` and `http_body_hash`: one GET of an allow-listed URL.
//!
//! What a caller can make the provider reach is bounded in four ways:
//!
//! - **Scheme:** `https`, or `http` with `allow_insecure_http`.
//! - **Host and port:** an `allow_hosts` entry `host` allows the scheme's
//!   default port only, `host:port` that port only
//!   ([`HostPattern::allows`]).
//! - **Address:** the host is resolved once, by [`CheckedResolver`]; every
//!   address that is loopback, private, link-local, unique-local,
//!   unspecified, multicast, documentation, benchmarking or otherwise
//!   special-purpose is dropped unless `allow_private_addresses` is set, and
//!   a host with no address left is refused (`http_address_not_allowed`).
//!   ureq connects only to the addresses the resolver returned, so the
//!   address checked is the address connected (a DNS answer that changes
//!   between a check and a connect cannot slip a private address in).
//! - **Route:** no proxy, whatever `HTTP_PROXY`, `HTTPS_PROXY` or
//!   `ALL_PROXY` say, unless `use_env_proxy` is set (then the proxy's own
//!   address is what the resolver checks). Redirects are never followed.
//!
//! The whole request, connect to last byte, is bounded by `timeout_ms`; a
//! body is hashed as it arrives (SHA-256, constant memory) and refused past
//! `max_body_bytes`. A call cancelled before the request starts makes none;
//! cancelled while it runs (its caller went away), the request's
//! connection is shut down at once (`ureq::Agent::shutdown`), so an
//! abandoned check neither waits out its timeout nor keeps its slot.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use evidence_wire::evidence::EvidenceError;
use evidence_wire_config::{BundledHttpConfig, HostPattern};
use evidence_wire_provider::{CheckContext, CheckError, OnCancel};
use serde_json::json;
use sha2::{Digest, Sha256};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

use crate::checks::{BodyHash, HashAlgorithm, HttpStatus};

/// `http_status`: the status of a GET of `url`.
pub(crate) fn http_status(
    settings: &BundledHttpConfig,
    hosts: &[HostPattern],
    url: &str,
    context: &CheckContext,
) -> Result<HttpStatus, CheckError> {
    let (response, _interrupt) = get(settings, hosts, url, context)?;
    context.set_ref(url);
    Ok(HttpStatus(response.status().as_u16()))
}

/// `http_body_hash`: the SHA-256 of the body of a 2xx GET of `url`.
pub(crate) fn http_body_hash(
    settings: &BundledHttpConfig,
    hosts: &[HostPattern],
    url: &str,
    context: &CheckContext,
) -> Result<BodyHash, CheckError> {
    // The body is read under the same interruption as the head.
    let (mut response, _interrupt) = get(settings, hosts, url, context)?;
    if !response.status().is_success() {
        return Err(CheckError::new(
            "http_status_not_success",
            format!(
                "GET {url} answered {}; the body of a non-2xx answer is not hashed (redirects are not followed)",
                response.status().as_u16()
            ),
        ));
    }
    let digest = hash_body(
        response.body_mut().as_reader(),
        settings.max_body_bytes,
        url,
        settings.timeout_ms,
    )?;
    context.set_ref(url);
    Ok(BodyHash {
        algorithm: HashAlgorithm::Sha256,
        value: digest,
    })
}

/// One GET of `url` within the destination rules, up to the response's
/// head (the body is left unread); the guard shuts the request down if the
/// call is cancelled while it is alive.
fn get(
    settings: &BundledHttpConfig,
    hosts: &[HostPattern],
    url: &str,
    context: &CheckContext,
) -> Result<(ureq::http::Response<ureq::Body>, OnCancel), EvidenceError> {
    let uri: ureq::http::Uri = url.parse().map_err(|error| {
        EvidenceError::new(
            "invalid_params",
            format!("params.url {url:?} is not a URL: {error}"),
        )
    })?;
    let default_port = match uri.scheme_str() {
        Some("https") => 443,
        Some("http") if settings.allow_insecure_http => 80,
        Some("http") => {
            return Err(EvidenceError::new(
                "http_insecure_refused",
                format!(
                    "{url:?} is plain http; use https, or set [bundled.http] allow_insecure_http = true"
                ),
            ));
        }
        _ => {
            return Err(EvidenceError::new(
                "invalid_params",
                format!("params.url {url:?} must be an https:// URL"),
            ));
        }
    };
    let host = uri.host().unwrap_or_default();
    if host.is_empty() {
        return Err(EvidenceError::new(
            "invalid_params",
            format!("params.url {url:?} has no host"),
        ));
    }
    let port = uri.port_u16().unwrap_or(default_port);
    if !hosts
        .iter()
        .any(|allowed| allowed.allows(host, port, default_port))
    {
        let entry = if port == default_port {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
        return Err(EvidenceError::new(
            "http_host_not_allowed",
            format!(
                "host {host:?} on port {port} is not allowed; add \"{entry}\" to [bundled.http] allow_hosts in the configuration (an entry without a port allows only the default port {default_port})"
            ),
        )
        .with_details(json!({"host": host, "port": port})));
    }
    let refused = Arc::new(Mutex::new(None));
    let resolver = CheckedResolver {
        allow_private: settings.allow_private_addresses,
        refused: refused.clone(),
    };
    let proxy = if settings.use_env_proxy {
        ureq::Proxy::try_from_env()
    } else {
        None
    };
    let config = ureq::Agent::config_builder()
        .proxy(proxy)
        .max_redirects(0)
        .max_redirects_will_error(false)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_millis(settings.timeout_ms)))
        .user_agent(concat!("evidence-wire/", env!("CARGO_PKG_VERSION")))
        .build();
    let agent = ureq::Agent::with_parts(config, DefaultConnector::default(), resolver);
    let interrupt = {
        let agent = agent.clone();
        context.cancellation().on_cancel(move || agent.shutdown())
    };
    if context.is_cancelled() {
        // Nobody reads the answer: make no request at all.
        return Err(EvidenceError::new(
            "cancelled",
            format!("GET {url} was not made: the call was cancelled"),
        ));
    }
    let failed = |error: ureq::Error| {
        if context.is_cancelled() {
            return EvidenceError::new(
                "cancelled",
                format!("GET {url} was interrupted: the call was cancelled"),
            );
        }
        if let Some(refusal) = refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let Refusal { resolved, reason } = refusal;
            // With `use_env_proxy` the address checked is the proxy's.
            if !resolved.eq_ignore_ascii_case(host) {
                return EvidenceError::new(
                    "http_address_not_allowed",
                    format!(
                        "the proxy {resolved} (from the environment's proxy settings, use_env_proxy) resolves only to addresses that are not allowed ({reason}); GET {url} was not made. Set [bundled.http] allow_private_addresses = true to use a proxy on such an address"
                    ),
                )
                .with_details(json!({"host": host, "proxy": resolved}));
            }
            return EvidenceError::new(
                "http_address_not_allowed",
                format!(
                    "{host} resolves only to addresses that are not allowed ({reason}); set [bundled.http] allow_private_addresses = true to reach such a host"
                ),
            )
            .with_details(json!({"host": host}));
        }
        match error {
            ureq::Error::Timeout(_) => EvidenceError::new(
                "http_timeout",
                format!("GET {url} took longer than {} ms", settings.timeout_ms),
            ),
            other => {
                EvidenceError::new("http_request_failed", format!("GET {url} failed: {other}"))
            }
        }
    };
    let response = agent.get(url).call().map_err(failed)?;
    Ok((response, interrupt))
}

/// The lowercase hex SHA-256 of a body read as it arrives, refused past
/// `limit` bytes.
fn hash_body(
    reader: impl Read,
    limit: u64,
    url: &str,
    timeout_ms: u64,
) -> Result<String, EvidenceError> {
    let mut hasher = Sha256::new();
    let mut reader = reader.take(limit.saturating_add(1));
    let mut buffer = [0u8; 16 * 1024];
    let mut total: u64 = 0;
    loop {
        let read = reader.read(&mut buffer).map_err(|error| {
            let timed_out = error.kind() == std::io::ErrorKind::TimedOut
                || error
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<ureq::Error>())
                    .is_some_and(|inner| matches!(inner, ureq::Error::Timeout(_)));
            if timed_out {
                EvidenceError::new(
                    "http_timeout",
                    format!("GET {url} took longer than {timeout_ms} ms"),
                )
            } else {
                EvidenceError::new(
                    "http_request_failed",
                    format!("reading the body of {url} failed: {error}"),
                )
            }
        })?;
        if read == 0 {
            break;
        }
        total = total.saturating_add(read as u64);
        if total > limit {
            return Err(EvidenceError::new(
                "http_body_too_large",
                format!("the body of {url} is larger than the {limit}-byte limit"),
            ));
        }
        hasher.update(buffer.get(..read).unwrap_or_default());
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect())
}

/// ureq's own resolver, keeping only the addresses the settings allow.
#[derive(Debug)]
struct CheckedResolver {
    allow_private: bool,
    /// Why every address was dropped, for the error the caller sees.
    refused: Arc<Mutex<Option<Refusal>>>,
}

/// A host whose every address was dropped.
#[derive(Debug)]
struct Refusal {
    /// The host resolved: the destination's, or a proxy's.
    resolved: String,
    /// Each address and why it is not allowed.
    reason: String,
}

impl Resolver for CheckedResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let resolved = DefaultResolver::default().resolve(uri, config, timeout)?;
        if self.allow_private {
            return Ok(resolved);
        }
        let mut kept = self.empty();
        let mut reasons: Vec<String> = Vec::new();
        for address in resolved.iter() {
            match special_purpose(address.ip()) {
                None => kept.push(*address),
                Some(reason) => reasons.push(format!("{} is {reason}", address.ip())),
            }
        }
        if kept.is_empty() {
            let reason = reasons.join(", ");
            *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = Some(Refusal {
                resolved: uri.host().unwrap_or_default().to_owned(),
                reason: reason.clone(),
            });
            return Err(ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("destination not allowed: {reason}"),
            )));
        }
        Ok(kept)
    }
}

/// Why `ip` is not a public unicast destination (IANA's IPv4 and IPv6
/// special-purpose address registries, RFC 6890 and successors), or `None`
/// when it is.
pub(crate) fn special_purpose(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "\"this network\" (0.0.0.0/8, unspecified)",
        (10, _, _) => "private (10.0.0.0/8)",
        (100, b, _) if b & 0xC0 == 64 => "shared address space (100.64.0.0/10)",
        (127, _, _) => "loopback (127.0.0.0/8)",
        (169, 254, _) => "link-local (169.254.0.0/16)",
        (172, b, _) if b & 0xF0 == 16 => "private (172.16.0.0/12)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) => "documentation (192.0.2.0/24)",
        (192, 88, 99) => "6to4 relay anycast (192.88.99.0/24)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (198, b, _) if b & 0xFE == 18 => "benchmarking (198.18.0.0/15)",
        (198, 51, 100) => "documentation (198.51.100.0/24)",
        (203, 0, 113) => "documentation (203.0.113.0/24)",
        (224..=239, _, _) => "multicast (224.0.0.0/4)",
        (240..=255, _, _) => "reserved or broadcast (240.0.0.0/4)",
        _ => return None,
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback (::1)");
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return special_v4(v4).map(|_| "an IPv4-mapped special-purpose address (::ffff:0:0/96)");
    }
    let segments = ip.segments();
    Some(match segments {
        [0, 0, 0, 0, 0, 0, _, _] => "IPv4-compatible (::/96, deprecated)",
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => {
            let [a, b] = high.to_be_bytes();
            let [c, d] = low.to_be_bytes();
            return special_v4(Ipv4Addr::new(a, b, c, d))
                .map(|_| "a NAT64-translated special-purpose address (64:ff9b::/96)");
        }
        [0x64, 0xff9b, 1, ..] => "local-use NAT64 (64:ff9b:1::/48)",
        [0x100, 0, 0, 0, ..] => "discard-only (100::/64)",
        [0x2001, 0xdb8, ..] => "documentation (2001:db8::/32)",
        [0x2001, b, ..] if b < 0x200 => "IETF protocol assignments (2001::/23)",
        [0x2002, ..] => "6to4 (2002::/16)",
        [0x3fff, b, ..] if b < 0x1000 => "documentation (3fff::/20)",
        [first, ..] if first & 0xfe00 == 0xfc00 => "unique-local (fc00::/7)",
        [first, ..] if first & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        [first, ..] if first & 0xffc0 == 0xfec0 => "site-local (fec0::/10, deprecated)",
        [first, ..] if first & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::special_purpose;
    use std::net::SocketAddr;

    #[test]
    fn special_purpose_address_table() {
        for refused in [
            "0.0.0.0:1",
            "10.1.2.3:1",
            "100.64.0.1:1",
            "127.0.0.1:1",
            "169.254.169.254:1",
            "172.16.0.1:1",
            "172.31.255.255:1",
            "192.0.0.8:1",
            "192.0.2.1:1",
            "192.168.1.1:1",
            "198.18.0.1:1",
            "198.51.100.1:1",
            "203.0.113.1:1",
            "224.0.0.1:1",
            "255.255.255.255:1",
            "[::]:1",
            "[::1]:1",
            "[::ffff:127.0.0.1]:1",
            "[::ffff:10.0.0.1]:1",
            "[::127.0.0.1]:1",
            "[64:ff9b::a00:1]:1",
            "[64:ff9b:1::1]:1",
            "[100::1]:1",
            "[2001::1]:1",
            "[2001:db8::1]:1",
            "[2002::1]:1",
            "[fc00::1]:1",
            "[fd12:3456::1]:1",
            "[fe80::1]:1",
            "[fec0::1]:1",
            "[ff02::1]:1",
        ] {
            let address: SocketAddr = refused.parse().expect("address");
            assert!(special_purpose(address.ip()).is_some(), "{refused}");
        }
        for allowed in [
            "1.1.1.1:1",
            "8.8.8.8:1",
            "100.128.0.1:1",
            "172.32.0.1:1",
            "192.169.0.1:1",
            "[2606:4700::1111]:1",
            "[::ffff:1.1.1.1]:1",
            "[64:ff9b::101:101]:1",
            "[2001:4860::8888]:1",
        ] {
            let address: SocketAddr = allowed.parse().expect("address");
            assert_eq!(special_purpose(address.ip()), None, "{allowed}");
        }
    }
}
