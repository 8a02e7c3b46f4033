//! MCP Inspector's strict schema lint against our tool schemas, and the proof
//! that the schemas rewritten for it accept exactly what they accepted before.
//!
//! - `npx @modelcontextprotocol/inspector --cli --method tools/list --strict`
//!   (npm, pinned in `tests/peers/package-lock.json`, on Node 22) against
//!   `evidence-wire serve` over stdio and over streamable HTTP must exit 0 with
//!   no finding at all: no portability error (exit 6) and no warning. The same
//!   lint run on the schemas as they were before (`tests/data/
//!   schemas-before-issue-22/`, served by the standard-library
//!   `tests/peers/schema_server.py`) reports their 1 error and 4 warnings, so
//!   the check is live.
//! - The schemas of `spec/schemas/` and the old ones are both valid JSON Schema
//!   2020-12 and give the same verdict on every document of a corpus: the
//!   existing schema tests' fixtures, the `evidence_query` arguments and
//!   EvidenceResults found in the repository's transcripts (spec examples, fuzz
//!   corpora), our client's EvidenceResult for `time_now`, and every
//!   single-edit mutation of all of them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::interop_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use interop_support::{
    HttpServer, Output, PEER_TIMEOUT, cli_binary, expected_time_now_evidence, inspector_launcher,
    peer_script, peers_node, repo_root, run, spec_schema, system_python,
};
use serde_json::{Value, json};

/// Run the Inspector's strict `tools/list` with `target` (its arguments after
/// the method: a server command after `--`, or `--server-url`).
fn inspect(node: &str, launcher: &str, target: &[String]) -> (Output, Value) {
    let mut command = Command::new(node);
    command
        .arg(launcher)
        .args([
            "--cli",
            "--method",
            "tools/list",
            "--strict",
            "--format",
            "json",
        ])
        .args(target);
    let output = run(&mut command, b"", PEER_TIMEOUT);
    let report = serde_json::from_str(output.stdout.trim()).unwrap_or_else(|error| {
        panic!(
            "the Inspector printed no JSON ({error}), status {:?}:\n--- stdout\n{}\n--- stderr\n{}",
            output.status, output.stdout, output.stderr
        )
    });
    (output, report)
}

/// The Inspector ran clean: exit 0, both tools listed, no finding, nothing
/// on stderr (where `--strict` writes every error and warning).
fn assert_clean(output: &Output, report: &Value, what: &str) {
    let context = format!(
        "{what}: status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status, output.stdout, output.stderr
    );
    assert_eq!(output.code(), Some(0), "{context}");
    let findings = report
        .get("schemaFindings")
        .cloned()
        .unwrap_or_else(|| json!([]));
    assert_eq!(findings, json!([]), "{context}");
    assert!(output.stderr.trim().is_empty(), "{context}");
    let names: Vec<&str> = report["result"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        names.contains(&"evidence_query") && names.contains(&"decision_gate_docs_search"),
        "{context}"
    );
}

#[test]
fn inspector_strict_tools_list_is_clean_over_stdio() {
    let (Some(node), Some(launcher)) = (peers_node(), inspector_launcher()) else {
        return;
    };
    let target = ["--".to_owned(), cli_binary(), "serve".to_owned()];
    let (output, report) = inspect(&node, &launcher, &target);
    assert_clean(&output, &report, "stdio");
}

#[test]
fn inspector_strict_tools_list_is_clean_over_streamable_http() {
    let (Some(node), Some(launcher)) = (peers_node(), inspector_launcher()) else {
        return;
    };
    let server = HttpServer::start();
    let target = [
        "--server-url".to_owned(),
        server.mcp_url(),
        "--transport".to_owned(),
        "http".to_owned(),
    ];
    let (output, report) = inspect(&node, &launcher, &target);
    if output.code() != Some(0) {
        eprintln!("server log:\n{}", server.log());
    }
    assert_clean(&output, &report, "streamable HTTP");
}

/// The schemas as they were before they were rewritten for the lint.
fn old_schema_path(file: &str) -> PathBuf {
    repo_root()
        .join("tests/data/schemas-before-issue-22")
        .join(file)
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn inspector_flags_the_old_schemas_and_passes_the_new_ones() {
    let (Some(node), Some(launcher)) = (peers_node(), inspector_launcher()) else {
        return;
    };
    let serve = |input: PathBuf, output: PathBuf| {
        vec![
            "--".to_owned(),
            system_python(),
            peer_script("schema_server.py"),
            input.to_string_lossy().into_owned(),
            output.to_string_lossy().into_owned(),
        ]
    };
    let old = serve(
        old_schema_path("evidence_query.input.schema.json"),
        old_schema_path("evidence_query.output.schema.json"),
    );
    let (output, report) = inspect(&node, &launcher, &old);
    let context = format!("{report:#}\n--- stderr\n{}", output.stderr);
    assert_eq!(
        output.code(),
        Some(6),
        "exit 6, schema unportable: {context}"
    );
    let mut findings: Vec<(String, String, String)> = report["schemaFindings"][0]["findings"]
        .as_array()
        .map(|findings| {
            findings
                .iter()
                .map(|finding| {
                    let text = |key: &str| finding[key].as_str().unwrap_or_default().to_owned();
                    (
                        text("severity"),
                        text("rule"),
                        format!("{}.{}", text("schema"), text("path")),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    findings.sort();
    let expected = [
        (
            "error",
            "boolean-schema",
            "outputSchema.properties.value.oneOf[1].properties.value",
        ),
        (
            "warning",
            "type-union",
            "inputSchema.$defs.EvidenceContext.properties.correlation_id",
        ),
        (
            "warning",
            "type-union",
            "outputSchema.properties.content_type",
        ),
        (
            "warning",
            "type-union",
            "outputSchema.properties.error.oneOf[1].properties.details",
        ),
        (
            "warning",
            "untyped-schema",
            "inputSchema.$defs.EvidenceQuery.properties.params",
        ),
    ];
    let mut expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
        .collect();
    expected.sort();
    assert_eq!(findings, expected, "{context}");

    let spec = repo_root().join("spec/schemas");
    let new = serve(
        spec.join("evidence_query.input.schema.json"),
        spec.join("evidence_query.output.schema.json"),
    );
    let (output, report) = inspect(&node, &launcher, &new);
    assert_eq!(output.code(), Some(0), "{report:#}\n{}", output.stderr);
    assert_eq!(
        report.get("schemaFindings").cloned().unwrap_or(json!([])),
        json!([])
    );
    assert!(output.stderr.trim().is_empty(), "{}", output.stderr);
}

// ---------------------------------------------------------------------------
// "Validate the same documents"

/// Values every place of a document is replaced with, one at a time.
fn palette() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(-1),
        json!(1.5),
        json!(255),
        json!(256),
        json!(u64::MAX),
        json!(1e300),
        json!(""),
        json!("x"),
        json!("12"),
        json!("0"),
        json!("json"),
        json!("bytes"),
        json!("sha256"),
        json!("verified"),
        json!("unix_millis"),
        json!("8e3359f0c6a336723783a5550104e05046b7caa8ab214fdf0c891bea1ad97083"),
        json!([]),
        json!([0, 255]),
        json!([256]),
        json!(["x"]),
        json!({}),
        json!({"kind": "json", "value": null}),
        json!({"kind": "bytes", "value": [1, 2]}),
        json!({"kind": "logical", "value": 3}),
        json!({"code": "c", "message": "m"}),
        json!({"uri": "u"}),
    ]
}

/// Every JSON pointer of `value`, the root first.
fn pointers(value: &Value, here: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                pointers(child, format!("{here}/{escaped}"), out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                pointers(child, format!("{here}/{index}"), out);
            }
        }
        _ => {}
    }
    out.push(here);
}

/// `document` and all its single-edit mutations: each place replaced by each
/// palette value, each member removed, an unknown member added to each object.
fn mutations(document: &Value, out: &mut BTreeSet<String>) {
    let mut places = Vec::new();
    pointers(document, String::new(), &mut places);
    let mut add = |value: &Value| {
        out.insert(value.to_string());
    };
    add(document);
    for place in &places {
        for replacement in palette() {
            let mut edited = document.clone();
            if let Some(slot) = edited.pointer_mut(place) {
                *slot = replacement;
                add(&edited);
            }
        }
        let mut extended = document.clone();
        if let Some(Value::Object(map)) = extended.pointer_mut(place) {
            map.insert("unknown_member".to_owned(), json!(1));
            add(&extended);
        }
        if let Some((parent, key)) = place.rsplit_once('/') {
            let mut removed = document.clone();
            let key = key.replace("~1", "/").replace("~0", "~");
            match removed.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(&key);
                }
                Some(Value::Array(items)) => {
                    if let Ok(index) = key.parse::<usize>() {
                        if index < items.len() {
                            items.remove(index);
                        }
                    }
                }
                _ => {}
            }
            add(&removed);
        }
    }
}

/// Every JSON value that starts at a `{` of `text` (a transcript, a spec
/// example, a fuzz corpus file: JSON with framing or prose around it).
fn embedded_json(text: &str) -> Vec<Value> {
    let mut found = Vec::new();
    for (start, _) in text.match_indices('{') {
        let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        if let Some(Ok(value)) = values.next() {
            found.push(value);
        }
    }
    found
}

/// Walk `value`: `evidence_query` arguments (a `tools/call` of it, or an
/// object with `query` and `context`) go to `inputs`, EvidenceResults (an
/// object with `lane`) to `outputs`.
fn harvest(value: &Value, inputs: &mut Vec<Value>, outputs: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            if map.get("name") == Some(&json!("evidence_query")) {
                if let Some(arguments) = map.get("arguments") {
                    inputs.push(arguments.clone());
                }
            }
            if map.contains_key("query") && map.contains_key("context") {
                inputs.push(value.clone());
            }
            if map.contains_key("lane") {
                outputs.push(value.clone());
            }
            map.values()
                .for_each(|child| harvest(child, inputs, outputs));
        }
        Value::Array(items) => items
            .iter()
            .for_each(|child| harvest(child, inputs, outputs)),
        _ => {}
    }
}

/// The repository's transcripts: files under `dirs` (recursively).
fn transcript_documents(dirs: &[&str]) -> (Vec<Value>, Vec<Value>) {
    let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
    let mut stack: Vec<PathBuf> = dirs.iter().map(|dir| repo_root().join(dir)).collect();
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|entry| entry.path()));
            }
        } else if let Ok(bytes) = std::fs::read(&path) {
            for value in embedded_json(&String::from_utf8_lossy(&bytes)) {
                harvest(&value, &mut inputs, &mut outputs);
            }
        }
    }
    (inputs, outputs)
}

/// The existing schema tests' fixtures (`core/tests/it/schema_registry.rs`).
fn fixture_query() -> Value {
    json!({
        "query": {"provider_id": "files", "check_id": "exists", "params": {"path": "/x"}},
        "context": {"tenant_id": 1, "namespace_id": "2", "run_id": "r", "scenario_id": "s",
                    "stage_id": "st", "trigger_id": "t", "trigger_time": {"kind": "logical", "value": 1}}
    })
}

fn fixture_result() -> Value {
    json!({"value": {"kind": "json", "value": {"a": 1}}, "lane": "verified", "error": null,
           "evidence_hash": null, "evidence_ref": null, "evidence_anchor": null,
           "signature": null, "content_type": "application/json"})
}

/// Compile a 2020-12 schema after checking it against the 2020-12 meta-schema.
fn compile(schema: &Value, what: &str) -> jsonschema::Validator {
    if let Err(error) = jsonschema::draft202012::meta::validate(schema) {
        panic!("{what} is not a valid JSON Schema 2020-12: {error}");
    }
    jsonschema::draft202012::new(schema).unwrap_or_else(|error| panic!("{what}: {error}"))
}

/// Compare the verdicts of the old and the new schema on every document;
/// returns (valid, invalid) counts.
fn same_verdicts(file: &str, documents: &BTreeSet<String>) -> (usize, usize) {
    let old = compile(&read_json(&old_schema_path(file)), &format!("old {file}"));
    let new = compile(&spec_schema(file), &format!("spec/schemas/{file}"));
    let (mut valid, mut invalid) = (0, 0);
    for text in documents {
        let document: Value = serde_json::from_str(text).unwrap_or_else(|error| panic!("{error}"));
        let verdict = old.is_valid(&document);
        assert_eq!(
            new.is_valid(&document),
            verdict,
            "{file}: old and new schemas disagree on {document}"
        );
        if verdict {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    (valid, invalid)
}

#[test]
fn new_schemas_validate_exactly_the_documents_the_old_ones_did() {
    let (mut inputs, mut outputs) =
        transcript_documents(&["spec", "fuzz/corpus", "tests/data", "examples"]);
    eprintln!(
        "transcripts: {} evidence_query argument objects, {} EvidenceResults",
        inputs.len(),
        outputs.len()
    );
    assert!(
        inputs.len() >= 10 && !outputs.is_empty(),
        "the transcripts hold {} argument objects and {} EvidenceResults",
        inputs.len(),
        outputs.len()
    );
    inputs.push(fixture_query());
    outputs.push(fixture_result());
    outputs.push(expected_time_now_evidence());
    // The fixtures' own edits (core/tests/it/schema_registry.rs) are among the
    // single edits below; add the ones that change two places.
    let mut with_predicate = fixture_query();
    if let Some(query) = with_predicate["query"].as_object_mut() {
        let check = query.remove("check_id").unwrap_or_default();
        query.insert("predicate".into(), check);
    }
    inputs.push(with_predicate);
    let mut with_details = fixture_result();
    with_details["value"] = Value::Null;
    with_details["error"] = json!({"code": "c", "message": "m", "details": {"k": [1]}});
    outputs.push(with_details);
    let mut bytes = fixture_result();
    bytes["value"] = json!({"kind": "bytes", "value": [0, 17, 255]});
    bytes["content_type"] = Value::Null;
    outputs.push(bytes);

    let mut input_documents = BTreeSet::new();
    for document in &inputs {
        mutations(document, &mut input_documents);
    }
    let mut output_documents = BTreeSet::new();
    for document in &outputs {
        mutations(document, &mut output_documents);
    }
    let (valid, invalid) = same_verdicts("evidence_query.input.schema.json", &input_documents);
    eprintln!("input schema: {valid} valid and {invalid} invalid documents, same verdicts");
    assert!(
        valid >= 100 && invalid >= 1000,
        "a corpus with both verdicts in bulk"
    );
    let (valid, invalid) = same_verdicts("evidence_query.output.schema.json", &output_documents);
    eprintln!("output schema: {valid} valid and {invalid} invalid documents, same verdicts");
    assert!(
        valid >= 100 && invalid >= 1000,
        "a corpus with both verdicts in bulk"
    );

    // The rewritten places, one by one, under the new schemas.
    let input = compile(&spec_schema("evidence_query.input.schema.json"), "input");
    let output = compile(&spec_schema("evidence_query.output.schema.json"), "output");
    for value in palette() {
        let mut query = fixture_query();
        query["query"]["params"] = value.clone();
        assert!(
            input.is_valid(&query),
            "params may be any JSON value: {value}"
        );
        let mut result = fixture_result();
        result["value"]["value"] = value.clone();
        assert!(
            output.is_valid(&result),
            "a json value may be any JSON value: {value}"
        );
        let nullable = |ok: &dyn Fn(&Value) -> bool| value.is_null() || ok(&value);
        let mut query = fixture_query();
        query["context"]["correlation_id"] = value.clone();
        assert_eq!(
            input.is_valid(&query),
            nullable(&Value::is_string),
            "correlation_id {value}"
        );
        let mut result = fixture_result();
        result["content_type"] = value.clone();
        assert_eq!(
            output.is_valid(&result),
            nullable(&Value::is_string),
            "content_type {value}"
        );
        let mut result = fixture_result();
        result["value"] = Value::Null;
        result["error"] = json!({"code": "c", "message": "m", "details": value.clone()});
        assert_eq!(
            output.is_valid(&result),
            nullable(&Value::is_object),
            "details {value}"
        );
    }
}

#[test]
fn the_corpus_helpers() {
    assert_eq!(
        embedded_json("Content-Length: 9\r\n\r\n{\"a\":{}} x {\"b\":"),
        vec![json!({"a": {}}), json!({})]
    );
    let mut places = Vec::new();
    pointers(&json!({"a/b": [1, {"c": 2}]}), String::new(), &mut places);
    assert_eq!(places, vec!["/a~1b/0", "/a~1b/1/c", "/a~1b/1", "/a~1b", ""]);
    let mut documents = BTreeSet::new();
    mutations(&json!({"k": 1}), &mut documents);
    assert!(documents.contains("{\"k\":1}"));
    assert!(documents.contains("{}"));
    assert!(documents.contains("{\"k\":null}"));
    assert!(documents.contains("{\"k\":1,\"unknown_member\":1}"));
    assert!(documents.contains("null"));
}
