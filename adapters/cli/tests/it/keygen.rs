//! Issue 38 item 12: `keygen --out PREFIX` writes PREFIX and PREFIX.pub,
//! both or neither. It used to write the secret seed and only then find
//! that PREFIX.pub existed (or was a dangling symlink), failing with the
//! secret left behind. Now an existing target (a symlink, dangling or not,
//! included) is refused before anything is written, nothing is written
//! through a symlink, and a failed run leaves no file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![cfg(unix)]

use crate::common;
use common::*;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn keygen(dir: &Path, prefix: &str) -> Output {
    Command::new(BIN)
        .args(["keygen", "--out", prefix])
        .current_dir(dir)
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run keygen")
}

/// Asserts exit 2 with an error naming `target` and saying nothing is
/// overwritten.
fn assert_refused(output: &Output, target: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(target) && stderr.contains("never overwrites"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "printed a key anyway");
}

/// Whether anything (a dangling symlink included) is at `path`.
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

#[test]
fn an_existing_public_key_file_leaves_no_secret_behind() {
    let dir = TempDir::new();
    dir.write("provider.pub", b"an older public key");
    let output = keygen(&dir.0, "provider");
    assert_refused(&output, "provider.pub");
    assert!(
        !present(&dir.0.join("provider")),
        "the secret seed was written although PREFIX.pub exists"
    );
    assert_eq!(
        std::fs::read(dir.0.join("provider.pub")).unwrap(),
        b"an older public key"
    );
}

#[test]
fn a_dangling_public_key_symlink_leaves_no_secret_behind_and_is_not_followed() {
    let dir = TempDir::new();
    symlink(dir.0.join("elsewhere.pub"), dir.0.join("provider.pub")).unwrap();
    let output = keygen(&dir.0, "provider");
    assert_refused(&output, "provider.pub");
    assert!(
        !present(&dir.0.join("provider")),
        "the secret seed was written although PREFIX.pub is a symlink"
    );
    assert!(
        !present(&dir.0.join("elsewhere.pub")),
        "followed the symlink"
    );
}

#[test]
fn a_secret_path_that_is_a_symlink_is_refused_and_not_followed() {
    let dir = TempDir::new();
    // Dangling: keygen must not create the file it points to.
    symlink(dir.0.join("stolen"), dir.0.join("provider")).unwrap();
    let output = keygen(&dir.0, "provider");
    assert_refused(&output, "provider");
    assert!(!present(&dir.0.join("stolen")), "wrote through the symlink");
    assert!(!present(&dir.0.join("provider.pub")));
    // To an existing file: left as it was.
    dir.write("victim", b"keep me");
    symlink(dir.0.join("victim"), dir.0.join("other")).unwrap();
    let output = keygen(&dir.0, "other");
    assert_refused(&output, "other");
    assert_eq!(std::fs::read(dir.0.join("victim")).unwrap(), b"keep me");
    assert!(!present(&dir.0.join("other.pub")));
}

#[test]
fn a_directory_in_the_public_keys_place_leaves_no_secret_and_the_pair_follows_once_free() {
    let dir = TempDir::new();
    std::fs::create_dir(dir.0.join("provider.pub")).unwrap();
    let output = keygen(&dir.0, "provider");
    assert_refused(&output, "provider.pub");
    assert!(!present(&dir.0.join("provider")));
    // The pair is written when both names are free.
    std::fs::remove_dir(dir.0.join("provider.pub")).unwrap();
    let output = keygen(&dir.0, "provider");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(std::fs::read(dir.0.join("provider")).unwrap().len(), 32);
    assert_eq!(std::fs::read(dir.0.join("provider.pub")).unwrap().len(), 32);
}
