//! Every configuration rule, driven by fixture files.
//!
//! `tests/data/config/bad/*.toml` must each fail to load with a message that
//! contains every `# expect: <text>` line of the file; `good/*.toml` and
//! `examples/evidence-wire.toml` must load. Also: defaults, unknown keys with
//! line and column, path resolution, contract and key loading.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::fs;
use std::path::{Path, PathBuf};

use evidence_wire_config::{
    Config, ConfigError, DialectMode, EnvelopePolicyName, ProviderType, ServerAuthMode, ToolsMode,
    TrustConfig,
};

fn data_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/config"))
}

fn repo_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(data_dir().join(kind))
        .expect("fixture dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    files
}

fn expectations(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .expect("fixture text")
        .lines()
        .filter_map(|line| line.strip_prefix("# expect: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_bad_fixture_fails_with_its_expected_message() {
    let files = fixtures("bad");
    assert!(
        files.len() >= 80,
        "bad fixtures went missing: {}",
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        let expected = expectations(path);
        assert!(
            !expected.is_empty(),
            "{} has no `# expect:` line",
            path.display()
        );
        match Config::load(path) {
            Ok(_) => failures.push(format!("{}: loaded but must fail", path.display())),
            Err(error) => {
                let message = error.to_string();
                for text in &expected {
                    if !message.contains(text.as_str()) {
                        failures.push(format!(
                            "{}:\n  expected to contain: {text}\n  got: {message}",
                            path.display()
                        ));
                    }
                }
                assert!(!message.contains('\n'), "one line: {message}");
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_good_fixture_loads() {
    for path in fixtures("good") {
        if let Err(error) = Config::load(&path) {
            panic!("{}: {error}", path.display());
        }
    }
}

#[test]
fn example_config_passes_and_covers_every_section() {
    let path = repo_dir().join("examples/evidence-wire.toml");
    let config = Config::load(&path).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(config.providers.len(), 3);
    let git = config.provider("git").expect("git");
    assert_eq!(git.provider_type, ProviderType::Mcp);
    let contract = git.contract.as_ref().expect("contract loaded");
    assert_eq!(contract.provider_id, "git");
    assert!(
        git.capabilities_path
            .as_ref()
            .expect("path")
            .ends_with("examples/contracts/git.json")
    );
    let cloud = config.provider("cloud").expect("cloud");
    assert_eq!(cloud.timeouts.connect_timeout_ms, 1000);
    assert_eq!(cloud.timeouts.request_timeout_ms, 5000);
    assert_eq!(cloud.trusted_keys.len(), 1);
    assert_eq!(cloud.trusted_keys[0].key_id, "cloud-signer");
    assert_eq!(
        cloud.trusted_keys[0].public_key[..4],
        [0xea, 0x4a, 0x6c, 0x63]
    );
    let env = config.provider("env").expect("env");
    assert_eq!(env.provider_type, ProviderType::Builtin);
    assert!(env.config.is_some());
    // The example states every default explicitly (except providers and the
    // commented-out allowed_tools): the other sections equal Config::default().
    let defaults = Config::default();
    assert_eq!(config.server, defaults.server);
    assert_eq!(config.docs, defaults.docs);
    assert_eq!(config.bundled.env, defaults.bundled.env);
    assert_eq!(config.bundled.http, defaults.bundled.http);
    assert_eq!(config.bundled.json, defaults.bundled.json);
    assert_eq!(config.bundled.provider_id, defaults.bundled.provider_id);
    assert_eq!(config.bundled.root_id, defaults.bundled.root_id);
}

#[test]
fn example_trust_becomes_a_key_set() {
    use evidence_wire::evidence::TrustPolicy;
    let config = Config::load(&repo_dir().join("examples/evidence-wire.toml")).expect("loads");
    let policy = config
        .provider("cloud")
        .expect("cloud")
        .trust_policy()
        .expect("policy");
    match policy {
        TrustPolicy::RequireSignature { keys } => assert!(keys.get("cloud-signer").is_some()),
        other => panic!("expected RequireSignature, got {other:?}"),
    }
    let git = config.provider("git").expect("git");
    assert!(matches!(git.trust_policy(), Ok(TrustPolicy::Audit)));
}

#[test]
fn defaults_are_the_documented_ones() {
    let config = Config::default();
    assert!(config.providers.is_empty());
    assert_eq!(config.server.transport, evidence_wire::Transport::Stdio);
    assert_eq!(config.server.bind.to_string(), "127.0.0.1:8080");
    assert_eq!(config.server.limits.max_body_bytes, 1024 * 1024);
    assert_eq!(config.server.limits.max_header_bytes, 8 * 1024);
    assert_eq!(config.server.limits.max_in_flight, 64);
    assert_eq!(config.server.envelope_policy, EnvelopePolicyName::Mcp);
    assert_eq!(config.server.dialect, DialectMode::Auto);
    assert_eq!(config.server.auth.mode, ServerAuthMode::None);
    assert!(config.server.auth.bearer_tokens.is_empty());
    assert_eq!(config.server.auth.allowed_tools, None);
    assert_eq!(config.server.tools.mode, ToolsMode::Filter);
    assert!(config.server.tools.allowlist.is_empty() && config.server.tools.denylist.is_empty());
    let docs = &config.docs;
    assert!(
        docs.enabled && docs.enable_search && docs.enable_resources && docs.include_default_docs
    );
    assert!(docs.extra_paths.is_empty());
    assert_eq!(
        (
            docs.max_doc_bytes,
            docs.max_total_bytes,
            docs.max_docs,
            docs.max_sections
        ),
        (262_144, 1_048_576, 32, 10)
    );
    assert!(config.logging.enabled && !config.logging.deterministic);
    assert_eq!(
        config.logging.dir,
        PathBuf::from("runs/mcp_server/envelope_validation")
    );
    let bundled = &config.bundled;
    assert_eq!(bundled.provider_id, "evidence-wire");
    assert_eq!(bundled.root, PathBuf::from("."));
    assert_eq!(bundled.root_id, "evidence-root");
    assert!(bundled.env.allow.is_empty());
    assert_eq!(bundled.env.max_value_bytes, 4096);
    assert_eq!(bundled.json.max_file_bytes, 1024 * 1024);
    assert!(bundled.http.allow_hosts.is_empty() && !bundled.http.allow_insecure_http);
    assert_eq!(bundled.http.timeout_ms, 5000);
    assert_eq!(bundled.http.max_body_bytes, 1024 * 1024);
    config.validate().expect("the embedded default is valid");
}

#[test]
fn empty_text_gives_the_defaults_resolved_against_the_base_dir() {
    let base = data_dir();
    let config = Config::from_toml_str("", &base).expect("empty config");
    let mut expected = Config::default();
    expected.bundled.root = base.join(".");
    expected.logging.dir = base.join("runs/mcp_server/envelope_validation");
    assert_eq!(config, expected);
}

#[test]
fn provider_defaults() {
    let text = "[[providers]]\nname = \"files\"\ntype = \"mcp\"\ncommand = [\"/bin/p\"]\ncapabilities_path = \"contracts/files.json\"\n";
    let config = Config::from_toml_str(text, &data_dir()).expect("loads");
    let provider = &config.providers[0];
    assert_eq!(provider.timeouts.connect_timeout_ms, 2000);
    assert_eq!(provider.timeouts.request_timeout_ms, 10_000);
    assert_eq!(provider.trust, TrustConfig::Audit);
    assert!(!provider.allow_insecure_http && !provider.allow_raw);
    assert!(provider.auth.is_none() && provider.url.is_none() && provider.config.is_none());
    assert_eq!(
        provider.capabilities_path.as_deref(),
        Some(data_dir().join("contracts/files.json").as_path())
    );
    assert!(provider.trusted_keys.is_empty());
}

#[test]
fn unknown_key_reports_key_line_and_column() {
    let text = "[server]\ntransport = \"stdio\"\n\n[docs]\nenabled = true\n  max_sectons = 3\n";
    let error = Config::from_toml_str(text, &data_dir()).expect_err("unknown key");
    match &error {
        ConfigError::Syntax {
            file,
            line,
            column,
            message,
        } => {
            assert_eq!(file, &None);
            assert_eq!((*line, *column), (6, 3));
            assert!(message.contains("unknown field `max_sectons`"), "{message}");
        }
        other => panic!("expected Syntax, got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .starts_with("line 6, column 3: unknown field `max_sectons`")
    );
}

#[test]
fn line_and_column_count_characters_not_bytes() {
    let text = "# héllo wörld\n[logging]\ndir = \"é\"\nniveau = 1\n";
    let error = Config::from_toml_str(text, &data_dir()).expect_err("unknown key");
    assert!(
        matches!(
            error,
            ConfigError::Syntax {
                line: 4,
                column: 1,
                ..
            }
        ),
        "{error:?}"
    );
    let text = "[logging] deterministic = true\n";
    let error = Config::from_toml_str(text, &data_dir()).expect_err("syntax");
    assert!(
        matches!(error, ConfigError::Syntax { line: 1, .. }),
        "{error:?}"
    );
}

#[test]
fn load_names_the_file_in_syntax_errors() {
    let path = data_dir().join("bad/provider_unknown_key.toml");
    let message = Config::load(&path).expect_err("fails").to_string();
    assert!(
        message.starts_with(&format!("{}: line 5, column 1: ", path.display())),
        "{message}"
    );
}

#[test]
fn missing_config_file_is_an_io_error() {
    let path = data_dir().join("does-not-exist.toml");
    let error = Config::load(&path).expect_err("missing");
    assert!(matches!(error, ConfigError::Io { .. }), "{error:?}");
    assert!(
        error.to_string().starts_with("config: cannot read"),
        "{error}"
    );
}

#[test]
fn oversized_config_file_is_refused_before_parsing() {
    let dir = std::env::temp_dir().join(format!("evidence-wire-config-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("huge.toml");
    let mut text = String::from("# padding\n");
    while text.len() <= 1024 * 1024 {
        text.push_str("# ..................................................................\n");
    }
    fs::write(&path, &text).expect("write");
    let error = Config::load(&path).expect_err("too large");
    assert!(
        error
            .to_string()
            .contains("larger than the limit of 1048576 bytes"),
        "{error}"
    );
    fs::remove_dir_all(&dir).ok();
}

#[test]
fn relative_paths_resolve_against_the_config_directory() {
    let path = data_dir().join("good/docs_and_bundled.toml");
    let config = Config::load(&path).expect("loads");
    assert_eq!(config.bundled.root, data_dir().join("good/.."));
    assert_eq!(config.docs.extra_paths[0], data_dir().join("good/../docs"));
    assert_eq!(
        config.logging.dir,
        data_dir().join("good/runs/mcp_server/envelope_validation")
    );
    assert_eq!(config.bundled.root_id, "repo.root_1");
}

#[test]
fn trust_keys_read_from_hex_and_raw_files_with_file_stem_ids() {
    let config = Config::load(&data_dir().join("good/stdio_provider_with_signed_trust.toml"))
        .expect("loads");
    let keys = &config.providers[0].trusted_keys;
    let ids: Vec<&str> = keys.iter().map(|key| key.key_id.as_str()).collect();
    assert_eq!(ids, ["signer", "raw-signer"]);
    assert_eq!(keys[0].public_key, keys[1].public_key);
    assert_eq!(keys[0].public_key[31], 0x2c);
}

#[test]
fn validate_catches_changes_made_in_code() {
    let mut config = Config::default();
    config.server.bind = "10.0.0.1:8080".parse().expect("addr");
    let message = config.validate().expect_err("public bind").to_string();
    assert!(
        message.starts_with("server.bind: 10.0.0.1:8080 is reachable"),
        "{message}"
    );
    assert!(
        config
            .server
            .check_exposure("[::1]:9000".parse().expect("addr"))
            .is_ok()
    );
    assert!(
        config
            .server
            .check_exposure("0.0.0.0:9000".parse().expect("addr"))
            .is_err()
    );
}

#[test]
fn config_serializes_to_json_without_secrets_in_debug() {
    let config = Config::load(&repo_dir().join("examples/evidence-wire.toml")).expect("loads");
    let debug = format!("{config:?}");
    assert!(!debug.contains("YOUR_TOKEN"), "Debug must redact tokens");
    let json = serde_json::to_value(&config).expect("serializes");
    assert_eq!(json["server"]["bind"], "127.0.0.1:8080");
    assert_eq!(
        json["providers"][1]["trust"]["require_signature"]["keys"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn tls_ca_certs_are_resolved_and_read_at_load() {
    let path = data_dir().join("good/https_provider_with_ca.toml");
    let config = Config::load(&path).unwrap_or_else(|error| panic!("{error}"));
    let provider = config.provider("files").expect("provider files");
    assert_eq!(provider.tls.ca_certs.len(), 1);
    assert!(provider.tls.ca_certs[0].ends_with("certs/provider-ca.pem"));
    let expected = fs::read_to_string(data_dir().join("certs/provider-ca.pem")).expect("pem");
    assert_eq!(provider.ca_certs_pem, vec![expected]);
}
