//! From `[server]` to the core's settings: `ServerSection::server_config`
//! (what the CLI's `server_config` did) and `ServerSection::tool_policy`
//! (what `ToolPolicy::from_config` did). Every mapped key is set away from
//! its default, so a key the mapping forgot fails here.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::path::Path;

use evidence_wire::canonical::Profile;
use evidence_wire::dialect::{Dialect, DialectChoice, HashProfile};
use evidence_wire::envelope::Policy;
use evidence_wire::server::ServerConfig;
use evidence_wire_config::Config;
use evidence_wire_config::policy::VisibilityMode;

fn load(text: &str) -> Config {
    Config::from_toml_str(text, Path::new(".")).expect("loads")
}

#[test]
fn the_default_section_is_the_default_server() {
    let mapped = Config::default().server.server_config();
    let default = ServerConfig::default();
    assert_eq!(mapped.limits, default.limits);
    assert_eq!(mapped.max_in_flight, default.max_in_flight);
    assert_eq!(mapped.policy, default.policy);
    assert_eq!(mapped.dialect, default.dialect);
    assert_eq!(mapped.hash_profile, default.hash_profile);
}

#[test]
fn every_server_key_reaches_the_server_config() {
    let config = load(
        r#"
[server]
envelope_policy = "strict"
dialect = "mcp"
hash_profile = "decision-gate"

[server.limits]
max_body_bytes = 4096
max_header_bytes = 512
max_in_flight = 3
"#,
    );
    let server = config.server.server_config();
    assert_eq!(server.limits.max_body_bytes, 4096);
    assert_eq!(server.limits.max_header_bytes, 512);
    assert_eq!(server.max_in_flight, 3);
    assert_eq!(server.policy, Policy::strict());
    assert_eq!(server.dialect, DialectChoice::Fixed(Dialect::Mcp));
    assert_eq!(
        server.hash_profile,
        HashProfile::Fixed(Profile::DecisionGate)
    );

    let other = load(
        "[server]\nenvelope_policy = \"jsonrpc\"\ndialect = \"decision_gate\"\nhash_profile = \"rfc8785\"\n",
    );
    let server = other.server.server_config();
    assert_eq!(server.policy, Policy::jsonrpc());
    assert_eq!(server.dialect, DialectChoice::Fixed(Dialect::DecisionGate));
    assert_eq!(server.hash_profile, HashProfile::Fixed(Profile::Rfc8785));
    assert_eq!(server.call_timeout, None, "no deadline by default");

    let timed = load("[server]\ncall_timeout_ms = 1500\n");
    assert_eq!(
        timed.server.server_config().call_timeout,
        Some(std::time::Duration::from_millis(1500))
    );
}

#[test]
fn tools_and_auth_become_the_tool_policy() {
    let config = load(
        r#"
[server.tools]
mode = "filter"
allowlist = ["evidence_query", "alpha"]
denylist = ["alpha"]

[server.auth]
allowed_tools = ["evidence_query"]
"#,
    );
    let policy = config.server.tool_policy().expect("valid lists");
    assert_eq!(policy.mode(), VisibilityMode::Filter);
    assert!(policy.is_visible("evidence_query"));
    assert!(!policy.is_visible("alpha"), "the denylist wins");
    assert!(!policy.is_visible("beta"), "not allowlisted");
    assert!(policy.is_authorized("evidence_query"));
    assert!(!policy.is_authorized("beta"));

    let passthrough = load("[server.tools]\nmode = \"passthrough\"\n");
    let policy = passthrough.server.tool_policy().expect("no lists");
    assert_eq!(policy.mode(), VisibilityMode::Passthrough);
    assert!(policy.is_visible("anything"));
}

/// `[logging]` maps to the log sink's settings: off when disabled, the
/// sink's defaults otherwise.
#[test]
fn logging_maps_to_the_sinks_settings() {
    let mut disabled = evidence_wire_config::LoggingConfig::default();
    disabled.enabled = false;
    assert_eq!(disabled.settings(), None);
    let enabled = evidence_wire_config::LoggingConfig::default()
        .settings()
        .expect("on by default");
    assert_eq!(
        enabled.dir,
        std::path::PathBuf::from(evidence_wire_log::DEFAULT_DIR)
    );
    assert!(!enabled.deterministic);
    assert_eq!(enabled.max_bytes, 256 * 1024 * 1024);
}
