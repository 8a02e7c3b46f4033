//! The examples' providers tested with the SDK's test support, in this
//! process (`evidence_wire_tokio::testing`, feature `testing`): the
//! `files` provider (`examples/files_provider.rs`, compiled in here as a
//! module) asked as Decision Gate and as an MCP client ask, its refusals
//! and its references and anchors exact, and `check-provider`'s battery
//! passed against it. The examples' binaries are tested the same way in
//! `tests/tests/examples.rs` (spawned, or over HTTP).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use evidence_wire_tokio::prelude::*;
use evidence_wire_tokio::testing::{self, CheckProvider};
use serde_json::json;

#[path = "../../examples/files_provider.rs"]
mod files_provider;

/// A fresh evidence root, removed when dropped: `notes.txt` (three lines,
/// the last unterminated: the contract's examples), `sub/b.txt` (empty),
/// and `../outside.txt` next to it.
struct Root(PathBuf);

impl Root {
    fn new() -> Root {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ew-files-example-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let root = dir.join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("notes.txt"), "one\ntwo\nthree").unwrap();
        std::fs::write(root.join("sub/b.txt"), "").unwrap();
        std::fs::write(dir.join("outside.txt"), "secret\n").unwrap();
        Root(dir)
    }

    fn provider(&self) -> Provider {
        files_provider::files().root(EvidenceRoot::open(self.0.join("root")).unwrap())
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn file_sha256_and_line_count_answer_with_the_files_ref_and_anchor() {
    let root = Root::new();
    for mut client in [
        testing::decision_gate(root.provider()).unwrap(),
        testing::mcp(root.provider()).unwrap(),
    ] {
        let lines = client
            .query("line_count", json!({"path": "notes.txt"}))
            .unwrap();
        assert_eq!(lines.value(), Some(json!(3)));
        assert_eq!(
            lines.evidence_ref(),
            Some("dg+file://evidence-root/notes.txt")
        );
        let anchor = lines.anchor().unwrap();
        assert_eq!(anchor.anchor_type, "file_path_rooted");
        assert_eq!(
            anchor.anchor_value,
            r#"{"path":"notes.txt","root_id":"evidence-root","size":13}"#
        );
        let hash = client
            .query("file_sha256", json!({"path": "notes.txt"}))
            .unwrap();
        // `printf 'one\ntwo\nthree' | sha256sum`
        let expected = "058053d87c818d699cde0f00d670bca0e1c6ad857caa9758ea6a556d7c64fcee";
        assert_eq!(hash.value(), Some(json!(expected)));
        assert_eq!(
            hash.evidence_ref(),
            Some("dg+file://evidence-root/notes.txt")
        );
        let empty = client
            .query("line_count", json!({"path": "./sub/b.txt"}))
            .unwrap();
        assert_eq!(empty.value(), Some(json!(0)));
        assert_eq!(
            empty.evidence_ref(),
            Some("dg+file://evidence-root/sub/b.txt")
        );
        assert_eq!(
            empty.anchor().unwrap().anchor_value,
            r#"{"path":"sub/b.txt","root_id":"evidence-root","size":0}"#
        );
    }
}

#[test]
fn paths_out_of_the_root_and_missing_files_are_refused_with_the_bundled_codes() {
    let root = Root::new();
    let mut client = testing::decision_gate(root.provider()).unwrap();
    for (path, code) in [
        ("../outside.txt", "path_outside_root"),
        ("/etc/passwd", "path_outside_root"),
        ("sub/../../outside.txt", "path_outside_root"),
        ("missing.txt", "file_not_found"),
        ("sub", "not_a_file"),
    ] {
        for check in ["file_sha256", "line_count"] {
            let answer = client.query(check, json!({"path": path})).unwrap();
            assert_eq!(answer.error_code(), Some(code), "{check} {path}");
            assert_eq!(answer.value(), None);
        }
    }
    let refused = client
        .query("line_count", json!({"path": "missing.txt"}))
        .unwrap();
    assert_eq!(
        refused.error_message(),
        Some("no file \"missing.txt\" under the evidence root")
    );
    // Params are strict: an unknown member never reaches the check.
    let strict = client
        .query("line_count", json!({"path": "notes.txt", "extra": 1}))
        .unwrap();
    assert_eq!(strict.error_code(), Some("invalid_params"));
}

#[test]
fn the_files_contract_meets_decision_gates_rules_and_check_provider_passes() {
    let root = Root::new();
    let client = testing::decision_gate(root.provider()).unwrap();
    client.check_contract().unwrap();
    let contract = client.contract().unwrap();
    assert_eq!(contract.provider_id, "files");
    assert_eq!(contract.checks[0].anchor_types, ["file_path_rooted"]);
    let report = CheckProvider::service(root.provider())
        .unwrap()
        .samples(3)
        .run();
    report.assert_clean();
    // The examples ran against notes.txt: values, schemas and hashes checked.
    for line in ["example[0]", "result_schema", "hash"] {
        for check in ["file_sha256", "line_count"] {
            let name = format!("check.{check}.{line}");
            assert!(report.line(&name).is_some(), "{name}: {}", report.table());
        }
    }
}

/// Without a root the checks answer `root_unavailable`, never panic.
#[test]
fn without_a_root_the_checks_say_so() {
    let mut client = testing::decision_gate(files_provider::files()).unwrap();
    let answer = client
        .query("line_count", json!({"path": "notes.txt"}))
        .unwrap();
    assert_eq!(answer.error_code(), Some("root_unavailable"));
}

/// The files example stays small: at most 60 lines of code (blank lines
/// and comments aside), for two checks with references, anchors, examples
/// and every refusal.
#[test]
fn the_files_example_is_at_most_60_lines_of_code() {
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/files_provider.rs"),
    )
    .unwrap();
    let code = source
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("//"))
        .count();
    assert!(code <= 60, "files_provider.rs has {code} lines of code");
}

/// `assert_clean` passes a report of `pass` lines only and panics on a
/// `warn` line (which `assert_passed` lets through), naming it with its
/// reason: an `external` check whose example answer differs is graded
/// `warn`, and a provider's own test must not pass over it.
#[test]
fn assert_clean_refuses_a_warning_that_assert_passed_lets_through() {
    let mut report = testing::Report {
        target: "the test".to_owned(),
        ..testing::Report::default()
    };
    report.add(
        "check.a.example[0]",
        testing::Status::Pass,
        "as the example",
        json!(null),
    );
    report.assert_clean();
    assert_eq!(report.warnings().count(), 0);
    report.add(
        "check.tracker.example[0]",
        testing::Status::Warn,
        "external check answered 3, the example says 0",
        json!(null),
    );
    report.assert_passed();
    let names: Vec<&str> = report.warnings().map(|line| line.check.as_str()).collect();
    assert_eq!(names, ["check.tracker.example[0]"]);
    let panicked = std::panic::catch_unwind(|| report.assert_clean()).unwrap_err();
    let message = panicked
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("warn check.tracker.example[0]: external check answered 3"),
        "{message}"
    );
    assert!(message.contains("STATUS"), "the table: {message}");
}
