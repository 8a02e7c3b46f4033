//! `spec/schemas/config.schema.json` against the code and the fixtures.
//!
//! TOML files are converted to JSON with the `toml` crate and validated with
//! the schema (Draft 2020-12). Checked here: the schema is a valid 2020-12
//! schema; `examples/evidence-wire.toml` and every `good/` fixture pass; every
//! `bad/` fixture fails, except the ones listed in [`LOAD_TIME_ONLY`], whose
//! rule needs the disk or compares two values and is checked only by
//! `Config::load`; what the code serializes (defaults and loaded fixtures)
//! passes; every key of the schema is a key of the code and has the code's
//! default; and `spec/configuration.md` names every key.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use evidence_wire_config::{Config, ProviderConfig, ProviderType};
use serde_json::{Value, json};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn data_dir() -> PathBuf {
    crate_dir().join("tests/data/config")
}

fn repo_file(relative: &str) -> PathBuf {
    crate_dir().join("..").join(relative)
}

fn schema() -> Value {
    let path = repo_file("spec/schemas/config.schema.json");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn validator() -> jsonschema::Validator {
    jsonschema::draft202012::options()
        .build(&schema())
        .unwrap_or_else(|error| panic!("config.schema.json does not compile: {error}"))
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

fn file_name(path: &Path) -> String {
    path.file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default()
        .to_owned()
}

/// The JSON a TOML parser makes of the file; `None` when it is not TOML.
fn toml_as_json(path: &Path) -> Option<Value> {
    let text =
        fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let table: toml::Table = toml::from_str(&text).ok()?;
    Some(serde_json::to_value(table).expect("TOML converts to JSON"))
}

/// The first schema error as `pointer: message`, or `None` when valid.
fn first_error(validator: &jsonschema::Validator, instance: &Value) -> Option<String> {
    validator
        .iter_errors(instance)
        .next()
        .map(|error| format!("{}: {error}", error.instance_path().as_str()))
}

/// Bad fixtures whose rule the schema cannot carry: it reads files or
/// directories, compares two numbers, or judges an IP address. Everything
/// else in `bad/` must fail the schema.
const LOAD_TIME_ONLY: &[&str] = &[
    "bundled_root_missing.toml",
    "bundled_root_not_a_directory.toml",
    "contract_comparators_empty.toml",
    "contract_comparators_unordered.toml",
    "contract_duplicate_check.toml",
    "contract_missing_field.toml",
    "contract_not_json.toml",
    "contract_provider_id_mismatch.toml",
    "contract_schema_does_not_compile.toml",
    "contract_unknown_field.toml",
    "docs_extra_path_missing.toml",
    "docs_total_below_doc.toml",
    "mcp_capabilities_not_found.toml",
    "provider_name_duplicate.toml",
    "server_public_bind_without_auth.toml",
    "server_tls_cert_missing.toml",
    "timeouts_request_below_connect.toml",
    "tls_ca_cert_missing.toml",
    "tls_ca_cert_not_pem.toml",
    "tls_ca_certs_on_stdio_provider.toml",
    "trust_key_duplicate_id.toml",
    "trust_key_malformed.toml",
    "trust_key_not_found.toml",
];

/// Bad fixtures that are not TOML at all.
const NOT_TOML: &[&str] = &["toml_syntax_error.toml"];

#[test]
fn schema_is_a_valid_draft_2020_12_schema() {
    let schema = schema();
    if let Err(error) = jsonschema::draft202012::meta::validate(&schema) {
        panic!("config.schema.json fails the 2020-12 meta-schema: {error}");
    }
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["additionalProperties"], false);
}

#[test]
fn example_and_every_good_fixture_pass() {
    let validator = validator();
    let mut files = fixtures("good");
    assert!(
        files.len() >= 6,
        "good fixtures went missing: {}",
        files.len()
    );
    files.push(repo_file("examples/evidence-wire.toml"));
    for path in files {
        let instance =
            toml_as_json(&path).unwrap_or_else(|| panic!("{} is not TOML", path.display()));
        if let Some(error) = first_error(&validator, &instance) {
            panic!("{} fails the schema at {error}", path.display());
        }
    }
}

#[test]
fn bad_fixtures_fail_unless_their_rule_is_load_time_only() {
    let validator = validator();
    let files = fixtures("bad");
    assert!(
        files.len() >= 80,
        "bad fixtures went missing: {}",
        files.len()
    );
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for path in &files {
        let name = file_name(path);
        seen.insert(name.clone());
        let Some(instance) = toml_as_json(path) else {
            if !NOT_TOML.contains(&name.as_str()) {
                problems.push(format!("{name}: is not TOML but is not listed in NOT_TOML"));
            }
            continue;
        };
        let error = first_error(&validator, &instance);
        match (LOAD_TIME_ONLY.contains(&name.as_str()), error) {
            (false, None) => problems.push(format!(
                "{name}: passes the schema; express its rule in spec/schemas/config.schema.json, or list it in LOAD_TIME_ONLY when the schema cannot"
            )),
            (true, Some(error)) => problems.push(format!(
                "{name}: listed as load-time only, but the schema refuses it ({error}); remove it from LOAD_TIME_ONLY"
            )),
            _ => {}
        }
    }
    for listed in LOAD_TIME_ONLY.iter().chain(NOT_TOML) {
        if !seen.contains(*listed) {
            problems.push(format!("{listed}: listed here but no such bad fixture"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn schema_errors_point_at_the_field_the_loader_names() {
    let validator = validator();
    let cases = [
        ("server_unknown_key.toml", "/server"),
        ("unknown_section.toml", ""),
        ("provider_unknown_key.toml", "/providers/0"),
        ("timeouts_unknown_key.toml", "/providers/0/timeouts"),
        (
            "server_limit_wrong_type.toml",
            "/server/limits/max_in_flight",
        ),
        ("docs_negative.toml", "/docs/max_doc_bytes"),
        ("server_unknown_transport.toml", "/server/transport"),
        ("server_bad_bind.toml", "/server/bind"),
        ("bundled_bad_root_id.toml", "/bundled/root_id"),
        ("docs_max_sections_too_high.toml", "/docs/max_sections"),
        (
            "server_tools_passthrough_with_allowlist.toml",
            "/server/tools/allowlist",
        ),
        (
            "server_tools_passthrough_with_denylist.toml",
            "/server/tools/denylist",
        ),
    ];
    for (fixture, pointer) in cases {
        let instance = toml_as_json(&data_dir().join("bad").join(fixture)).expect("TOML");
        let pointers: Vec<String> = validator
            .iter_errors(&instance)
            .map(|error| error.instance_path().as_str().to_owned())
            .collect();
        assert!(
            pointers.iter().any(|found| found == pointer),
            "{fixture}: expected an error at {pointer:?}, got {pointers:?}"
        );
    }
}

#[test]
fn targeted_rules_hold_both_ways() {
    let validator = validator();
    let provider = |extra: Value| {
        let mut object = json!({"name": "files", "type": "mcp", "capabilities_path": "c.json"});
        if let (Some(target), Value::Object(extra)) = (object.as_object_mut(), extra) {
            target.extend(extra);
        }
        json!({ "providers": [object] })
    };
    let accepted = [
        provider(json!({"command": ["/bin/p"]})),
        provider(json!({"url": "https://example.com/rpc", "auth": {"bearer_token": "t"}})),
        provider(json!({"url": "http://127.0.0.1:9/rpc", "allow_insecure_http": true})),
        provider(
            json!({"command": ["/bin/p"], "trust": {"require_signature": {"keys": ["k.pub"]}}}),
        ),
        json!({"providers": [{"name": "http", "type": "builtin", "config": [1, "two"]}]}),
        json!({"server": {"bind": "[::1]:8080"}}),
        json!({"server": {"bind": "10.1.2.3:08080", "auth": {"mode": "bearer_token", "bearer_tokens": ["x"]}}}),
        json!({"server": {"tools": {"mode": "passthrough", "allowlist": []}}}),
        json!({"bundled": {"env": {"allow": ["HOME", "PATH"]}, "http": {"allow_hosts": ["example.com:8443"]}}}),
        json!({"bundled": {"http": {"allow_hosts": ["[::1]", "[2001:db8::1]:8443", "10.0.0.1:80"], "allow_private_addresses": true, "use_env_proxy": true}}}),
        json!({"bundled": {"json": {"max_result_bytes": 1024, "max_result_nodes": 1}}}),
    ];
    for instance in &accepted {
        if let Some(error) = first_error(&validator, instance) {
            panic!("{instance} must pass, fails at {error}");
        }
    }
    let refused = [
        provider(json!({"command": ["/bin/p"], "auth": {"bearer_token": "t"}})),
        provider(json!({"url": "http://example.com/rpc"})),
        provider(json!({"url": "http://example.com/rpc", "allow_insecure_http": false})),
        provider(json!({"command": ["  "]})),
        provider(json!({"command": ["/bin/p"], "trust": "none"})),
        provider(
            json!({"command": ["/bin/p"], "trust": {"require_signature": {"keys": ["k"], "all": true}}}),
        ),
        provider(json!({"command": ["/bin/p"], "timeouts": {"connect_timeout_ms": 2000.5}})),
        json!({"providers": [{"name": "files", "type": "mcp", "command": ["/bin/p"]}]}),
        json!({"providers": [{"name": "time", "type": "builtin", "allow_insecure_http": "yes"}]}),
        json!({"server": {"bind": "256.0.0.1:80"}}),
        json!({"server": {"bind": "127.0.0.1:65536"}}),
        json!({"server": {"auth": {"mode": "bearer_token", "bearer_tokens": [" x"]}}}),
        json!({"server": {"auth": {"allowed_tools": ["a", "a"]}}}),
        json!({"bundled": {"provider_id": "env"}}),
        json!({"bundled": {"env": {"allow": [""]}}}),
        json!({"bundled": {"http": {"allow_hosts": ["user@example.com"]}}}),
        json!({"bundled": {"http": {"allow_hosts": ["::1"]}}}),
        json!({"bundled": {"http": {"allow_hosts": ["example.com:http"]}}}),
        json!({"bundled": {"http": {"use_env_proxy": "yes"}}}),
        json!({"bundled": {"json": {"max_result_bytes": 1023}}}),
        json!({"bundled": {"json": {"max_result_nodes": 0}}}),
        json!({"logging": {"dir": 7}}),
    ];
    for instance in &refused {
        assert!(
            first_error(&validator, instance).is_some(),
            "{instance} must fail the schema"
        );
    }
}

/// Every key path the schema declares, `[]` standing for array items.
fn schema_paths(root: &Value, node: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
            .unwrap_or_else(|| panic!("unresolvable $ref {reference}"));
        schema_paths(root, target, prefix, out);
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (key, child) in properties {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            out.insert(path.clone());
            schema_paths(root, child, &path, out);
        }
    }
    if let Some(items) = node.get("items") {
        schema_paths(root, items, &format!("{prefix}[]"), out);
    }
    if let Some(branches) = node.get("oneOf").and_then(Value::as_array) {
        for branch in branches {
            schema_paths(root, branch, prefix, out);
        }
    }
}

/// The schema nodes at a key path (following `$ref`, `items` and `oneOf`);
/// a node with a `$ref` counts along with its target, since keywords such as
/// `default` may sit beside the `$ref`.
fn schema_at<'a>(root: &'a Value, node: &'a Value, path: &[&str]) -> Vec<&'a Value> {
    let mut nodes = vec![node];
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
            .unwrap_or_else(|| panic!("unresolvable $ref {reference}"));
        nodes.extend(schema_at(root, target, &[]));
    }
    let Some((first, rest)) = path.split_first() else {
        return nodes;
    };
    let mut found = Vec::new();
    for node in nodes {
        let (key, items) = match first.strip_suffix("[]") {
            Some(key) => (key, true),
            None => (*first, false),
        };
        if let Some(child) = node
            .get("properties")
            .and_then(|properties| properties.get(key))
        {
            if items {
                for array in schema_at(root, child, &[]) {
                    if let Some(item) = array.get("items") {
                        found.extend(schema_at(root, item, rest));
                    }
                }
            } else {
                found.extend(schema_at(root, child, rest));
            }
        }
        for branch in node
            .get("oneOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            found.extend(schema_at(root, branch, path));
        }
    }
    found
}

/// Every key path present in a serialized config.
fn value_paths(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                out.insert(path.clone());
                // A builtin's `config` is free-form: its inside is not the schema's.
                if !path.ends_with("[].config") {
                    value_paths(child, &path, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                value_paths(item, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

fn serialized_configs() -> Vec<(String, Value)> {
    let mut out = vec![(
        "Config::default()".to_owned(),
        serde_json::to_value(Config::default()).expect("serializes"),
    )];
    let mut files = fixtures("good");
    files.push(repo_file("examples/evidence-wire.toml"));
    for path in files {
        let config = Config::load(&path).unwrap_or_else(|error| panic!("{error}"));
        out.push((
            path.display().to_string(),
            serde_json::to_value(&config).expect("serializes"),
        ));
    }
    out.push((
        "a config with [bundled.signing]".to_owned(),
        serde_json::to_value(signing_config()).expect("serializes"),
    ));
    out
}

/// A configuration with `[bundled.signing]`: its key file must be private
/// (mode 0600), which a checked-in fixture cannot be, so it is written here.
fn signing_config() -> Config {
    // One directory per call: tests run in parallel, and a key file being
    // rewritten (truncated, then 0644 until the chmod) must never be what
    // another test's load reads.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "config-schema-signing-{}-{call}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("temp dir");
    let key = dir.join("signer.key");
    fs::write(&key, [7u8; 32]).expect("key file");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let text = "[bundled.signing]\nkey_file = \"signer.key\"\nkey_id = \"keys/signer.pub\"\n\n[server]\nhash_profile = \"decision-gate\"\n";
    Config::from_toml_str(text, &dir).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn what_the_code_serializes_passes_the_schema() {
    let validator = validator();
    for (name, value) in serialized_configs() {
        if let Some(error) = first_error(&validator, &value) {
            panic!("{name}, serialized, fails the schema at {error}");
        }
    }
}

#[test]
fn schema_keys_are_exactly_the_code_keys() {
    let schema = schema();
    let mut declared = BTreeSet::new();
    schema_paths(&schema, &schema, "", &mut declared);
    let mut written = BTreeSet::new();
    for (_, value) in serialized_configs() {
        value_paths(&value, "", &mut written);
    }
    let only_schema: Vec<&String> = declared.difference(&written).collect();
    let only_code: Vec<&String> = written.difference(&declared).collect();
    assert!(
        only_schema.is_empty() && only_code.is_empty(),
        "keys only in the schema: {only_schema:?}\nkeys only in the code: {only_code:?}"
    );
    // Spot checks that the walk sees deep keys.
    for path in [
        "providers[].trust.require_signature.keys",
        "server.auth.allowed_tools",
        "bundled.http.allow_hosts",
        "providers[].timeouts.request_timeout_ms",
        "providers[].tls.ca_certs",
    ] {
        assert!(declared.contains(path), "{path} missing from {declared:?}");
    }
}

#[test]
fn schema_defaults_are_the_code_defaults() {
    let schema = schema();
    let mut defaults = serde_json::to_value(Config::default()).expect("serializes");
    let provider =
        serde_json::to_value(ProviderConfig::new("x", ProviderType::Mcp)).expect("serializes");
    defaults["providers"] = json!([provider]);
    let mut paths = BTreeSet::new();
    value_paths(&defaults, "", &mut paths);
    let mut checked = 0;
    for path in &paths {
        let Some(code_default) = defaults.pointer(&json_pointer(path)) else {
            continue;
        };
        let nodes = schema_at(&schema, &schema, &path.split('.').collect::<Vec<_>>());
        let schema_defaults: Vec<&Value> = nodes
            .iter()
            .filter_map(|node| node.get("default"))
            .collect();
        let leaf = !code_default.is_object() || path.ends_with(".trust");
        let provider_identity =
            path == "providers" || path.ends_with("[].name") || path.ends_with("[].type");
        if leaf && !provider_identity {
            assert!(
                !schema_defaults.is_empty(),
                "{path}: the schema gives no default (the code's is {code_default})"
            );
        }
        for schema_default in schema_defaults {
            if path == "providers" {
                assert_eq!(schema_default, &json!([]), "providers");
                continue;
            }
            assert_eq!(
                schema_default, code_default,
                "{path}: schema default differs from the code's"
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} defaults compared");
}

/// `providers[].timeouts.x` → `/providers/0/timeouts/x`.
fn json_pointer(path: &str) -> String {
    path.split('.')
        .map(|part| match part.strip_suffix("[]") {
            Some(key) => format!("/{key}/0"),
            None => format!("/{part}"),
        })
        .collect()
}

#[test]
fn configuration_reference_names_every_key() {
    let path = repo_file("spec/configuration.md");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let schema = schema();
    let mut declared = BTreeSet::new();
    schema_paths(&schema, &schema, "", &mut declared);
    // A key is named in backticks; a table may instead be named by its header.
    let missing: Vec<&String> = declared
        .iter()
        .filter(|path| {
            let key = path
                .rsplit('.')
                .next()
                .unwrap_or_default()
                .trim_end_matches("[]");
            let header = path.replace("[]", "");
            !text.contains(&format!("`{key}`"))
                && !text.contains(&format!("[{header}]"))
                && !text.contains(&format!("[[{header}]]"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "spec/configuration.md does not name: {missing:?}"
    );
    for section in [
        "[[providers]]",
        "[server]",
        "[server.limits]",
        "[server.auth]",
        "[server.tools]",
        "[docs]",
        "[logging]",
        "[bundled]",
        "[bundled.env]",
        "[bundled.json]",
        "[bundled.http]",
    ] {
        assert!(
            text.contains(section),
            "spec/configuration.md has no {section} section"
        );
    }
}
