//! Issue 38 item 11: a FIFO named where a file is read used to hang the
//! command (opening a FIFO for reading waits for a writer): `--config`
//! (and `EVIDENCE_WIRE_CONFIG`), `config check`, the files a configuration
//! names (`capabilities_path`, trust keys, `tls.ca_certs`,
//! `[bundled.signing] key_file`), `serve --signing-key`,
//! `check-provider --contract` and `--key-file`, `contract --check`,
//! `verify --key-file`, `query --ca-cert` and `--key-file`. Every one is now refused at
//! once (exit 2), with the path and what it is. Each command runs under a
//! deadline, so a regression fails instead of hanging.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![cfg(unix)]

use crate::common;
use common::*;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The longest a refusal may take (a hang is what is tested against).
const DEADLINE: Duration = Duration::from_secs(20);

/// Makes a FIFO at `dir/name` (mode 0600, so that a signing key's
/// permission check does not refuse it first).
fn fifo(dir: &TempDir, name: &str) -> PathBuf {
    let path = dir.0.join(name);
    let status = Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// Runs the binary with `args` (and `env`), killing it and failing the
/// test when it runs past [`DEADLINE`].
fn run(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let started = Instant::now();
    let mut child = KillOnDrop(command.spawn().expect("spawn evidence-wire"));
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.0.stdout.take().map(|pipe| Box::new(pipe) as _));
    let stderr = drain(child.0.stderr.take().map(|pipe| Box::new(pipe) as _));
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "evidence-wire {args:?} {env:?} still runs after {DEADLINE:?}: it blocked on a FIFO"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout"),
        stderr: stderr.join().expect("stderr"),
    }
}

/// Asserts a prompt usage error naming `path` as a FIFO.
fn assert_refused(output: &Output, path: &Path, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{what}: {stderr}");
    assert!(
        stderr.contains(&path.display().to_string())
            && stderr.contains("it is a FIFO (named pipe), not a regular file"),
        "{what}: the error names neither the path nor what it is: {stderr}"
    );
}

fn text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// The bundled provider's contract under `provider_id`, written to `dir/name`.
fn contract_file(dir: &TempDir, name: &str, provider_id: &str) -> PathBuf {
    let output = run(&["contract", "--provider-id", provider_id], &[]);
    assert_eq!(output.status.code(), Some(0));
    dir.write(name, &output.stdout)
}

#[test]
fn config_files_that_are_fifos_are_refused_at_once() {
    let dir = TempDir::new();
    let config = fifo(&dir, "config.toml");
    let output = run(&["--config", text(&config), "contract"], &[]);
    assert_refused(&output, &config, "--config");
    let output = run(&["contract"], &[("EVIDENCE_WIRE_CONFIG", &config)]);
    assert_refused(&output, &config, "EVIDENCE_WIRE_CONFIG");
    let output = run(&["config", "check", text(&config)], &[]);
    assert_refused(&output, &config, "config check");
    // A directory is refused the same way, saying what it is.
    let output = run(&["config", "check", text(&dir.0)], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("it is a directory, not a regular file"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn files_a_configuration_names_that_are_fifos_are_refused_at_once() {
    let dir = TempDir::new();
    let contract = contract_file(&dir, "mine.json", "mine");
    let fifo_path = fifo(&dir, "named.fifo");
    let cases = [
        (
            "capabilities_path",
            "[[providers]]\nname = \"mine\"\ntype = \"mcp\"\ncommand = [\"./mine\"]\ncapabilities_path = \"named.fifo\"\n".to_owned(),
        ),
        (
            "trust keys",
            format!(
                "[[providers]]\nname = \"mine\"\ntype = \"mcp\"\ncommand = [\"./mine\"]\ncapabilities_path = {:?}\ntrust = {{ require_signature = {{ keys = [\"named.fifo\"] }} }}\n",
                text(&contract)
            ),
        ),
        (
            "tls.ca_certs",
            format!(
                "[[providers]]\nname = \"mine\"\ntype = \"mcp\"\nurl = \"https://provider.example/rpc\"\ncapabilities_path = {:?}\ntls = {{ ca_certs = [\"named.fifo\"] }}\n",
                text(&contract)
            ),
        ),
        (
            "[bundled.signing] key_file",
            "[bundled.signing]\nkey_file = \"named.fifo\"\n".to_owned(),
        ),
    ];
    for (what, toml) in cases {
        let config = dir.write("evidence-wire.toml", toml);
        let output = run(&["config", "check", text(&config)], &[]);
        assert_refused(&output, &fifo_path, what);
    }
}

#[test]
fn option_files_that_are_fifos_are_refused_at_once() {
    let dir = TempDir::new();
    let fifo_path = fifo(&dir, "file.fifo");
    let result = dir.write(
        "result.json",
        r#"{"value":{"kind":"json","value":"hello"},"lane":"verified","error":null,"evidence_hash":null,"evidence_ref":null,"evidence_anchor":null,"signature":null,"content_type":"application/json"}"#,
    );
    let fifo_text = text(&fifo_path);
    let cases: [(&str, Vec<&str>); 7] = [
        (
            "serve --signing-key",
            vec!["serve", "--no-log", "--signing-key", fifo_text],
        ),
        (
            "check-provider --contract",
            vec!["check-provider", "--contract", fifo_text],
        ),
        (
            "check-provider --key-file",
            vec!["check-provider", "--key-file", fifo_text],
        ),
        (
            "query --key-file",
            vec!["query", "--check", "time_now", "--key-file", fifo_text],
        ),
        ("contract --check", vec!["contract", "--check", fifo_text]),
        (
            "verify --key-file",
            vec!["verify", text(&result), "--key-file", fifo_text],
        ),
        (
            "query --ca-cert",
            vec![
                "query",
                "--check",
                "time_now",
                "--url",
                "https://127.0.0.1:9/rpc",
                "--ca-cert",
                fifo_text,
            ],
        ),
    ];
    for (what, args) in cases {
        let output = run(&args, &[]);
        assert_refused(&output, &fifo_path, what);
    }
}
