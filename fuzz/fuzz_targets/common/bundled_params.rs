//! The checks of the `bundled_params` fuzz target, shared with
//! `bundled/tests/it/bundled_fuzz_corpus.rs` (which replays the corpus through
//! them).
//!
//! Input: one selector byte, then text (lossy UTF-8) that becomes one
//! param of a bundled check, as a peer would send it:
//!
//! | `selector % 8` | query |
//! | --- | --- |
//! | 0 | `json_path` on `doc.json` with `jsonpath` = text |
//! | 1 | `json_path` on `deep.json` with `jsonpath` = text |
//! | 2 | `json_path` with `file` = text (and `$..*`) |
//! | 3 | `file_size` with `path` = text |
//! | 4 | `time_after` with `timestamp` = text |
//! | 5 | `time_before` with `timestamp` = the first 8 bytes as an integer |
//! | 6 | any check (`selector / 8` picks it) with the text parsed as its params |
//! | 7 | `json_path` on `wide.json` with `jsonpath` = text, tight limits |
//!
//! Files live in a temporary root made once per process. Every query goes
//! through the same path as on a server: the contract's check
//! (`ServerContract::check_query`: check id, provider id, params schema),
//! then `BundledProvider::answer`. Invariants: no panic (which includes a
//! stack overflow: the process would die); every answer is an
//! `EvidenceResult` with exactly one of a value and an error; an error has
//! a code and a message; a `json_path` value fits `max_result_bytes`.

use std::path::PathBuf;
use std::sync::OnceLock;

use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire_bundled::BundledConfig;
use evidence_wire_bundled::BundledProvider;
use serde_json::{Value, json};

/// The checks the target drives, in the order `selector / 8` picks them.
const CHECKS: [&str; 8] = [
    "json_path",
    "file_size",
    "time_after",
    "time_before",
    "time_now",
    "env_get",
    "http_status",
    "http_body_hash",
];

/// `max_result_bytes` of the default and the tight provider.
const DEFAULT_RESULT_BYTES: usize = 256 * 1024;
const TIGHT_RESULT_BYTES: usize = 2048;

struct Providers {
    normal: BundledProvider,
    tight: BundledProvider,
}

fn root() -> PathBuf {
    let root =
        std::env::temp_dir().join(format!("evidence-wire-fuzz-bundled-{}", std::process::id()));
    let _ = std::fs::create_dir_all(root.join("sub"));
    let write = |name: &str, text: &str| {
        let _ = std::fs::write(root.join(name), text);
    };
    write(
        "doc.json",
        r#"{"status":"approved","n":[1,2.5,-3,1e3],"o":{"a":{"b":[true,false,null]},"k":"v"},"s":"a\"b\\c","e":[],"u":"é😀"}"#,
    );
    let deep = format!("{}{}{}", "[".repeat(60), "[1,{\"a\":2}]", "]".repeat(60));
    write("deep.json", &deep);
    let wide = format!(
        "[{}]",
        vec!["{\"id\":1,\"tags\":[\"x\",\"y\"]}"; 400].join(",")
    );
    write("wide.json", &wide);
    write("sub/inner.json", r#"{"inner":true}"#);
    write("not-json.txt", "not json");
    root
}

fn providers() -> &'static Providers {
    static PROVIDERS: OnceLock<Providers> = OnceLock::new();
    PROVIDERS.get_or_init(|| {
        let root = root();
        let mut config = BundledConfig::default();
        config.root = root.clone();
        config.json.max_file_bytes = 64 * 1024;
        config.json.max_result_bytes = DEFAULT_RESULT_BYTES as u64;
        // Never reached: the target is built without the `http` feature or
        // the hosts are not allowed.
        config.http.allow_hosts = vec!["example.invalid".to_owned()];
        let normal = BundledProvider::new(&config).expect("provider");
        config.json.max_result_bytes = TIGHT_RESULT_BYTES as u64;
        config.json.max_result_nodes = 16;
        let tight = BundledProvider::new(&config).expect("provider");
        Providers { normal, tight }
    })
}

/// Runs one fuzz input; panics when an invariant breaks. Returns the
/// answer's error code (`None` for a value).
pub fn run(data: &[u8]) -> Option<String> {
    let (&selector, rest) = data.split_first()?;
    let text = String::from_utf8_lossy(rest).into_owned();
    let providers = providers();
    let mut provider = &providers.normal;
    let mut limit = DEFAULT_RESULT_BYTES;
    let (check, params) = match selector % 8 {
        0 => ("json_path", json!({"file": "doc.json", "jsonpath": text})),
        1 => ("json_path", json!({"file": "deep.json", "jsonpath": text})),
        2 => ("json_path", json!({"file": text, "jsonpath": "$..*"})),
        3 => ("file_size", json!({"path": text})),
        4 => ("time_after", json!({"timestamp": text})),
        5 => {
            let mut bytes = [0u8; 8];
            for (slot, byte) in bytes.iter_mut().zip(rest) {
                *slot = *byte;
            }
            (
                "time_before",
                json!({"timestamp": i64::from_le_bytes(bytes)}),
            )
        }
        6 => {
            let check = CHECKS[usize::from(selector / 8) % CHECKS.len()];
            let params = serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
            (check, params)
        }
        _ => {
            provider = &providers.tight;
            limit = TIGHT_RESULT_BYTES;
            ("json_path", json!({"file": "wide.json", "jsonpath": text}))
        }
    };
    let query = EvidenceQuery::new("evidence-wire", check).with_params(params);
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    let result = match provider.server_contract().check_query(&query) {
        Ok(()) => provider.answer(&query, &context),
        Err(error) => EvidenceResult::with_error(error),
    };
    check_result(&result, check, limit)
}

fn check_result(result: &EvidenceResult, check: &str, limit: usize) -> Option<String> {
    match (&result.value, &result.error) {
        (Some(value), None) => {
            if check == "json_path" {
                let EvidenceValue::Json(raw) = value else {
                    panic!("json_path answered bytes");
                };
                assert!(
                    raw.get().len() <= limit,
                    "a json_path value of {} bytes passed the {limit}-byte limit",
                    raw.get().len()
                );
            }
            None
        }
        (None, Some(error)) => {
            assert!(!error.code.is_empty(), "an error without a code");
            assert!(
                !error.message.is_empty(),
                "{} without a message",
                error.code
            );
            Some(error.code.clone())
        }
        (value, error) => panic!("value {value:?} and error {error:?}: exactly one expected"),
    }
}
