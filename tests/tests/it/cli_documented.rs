//! Every command line that README.md, the guides that show command lines
//! ([`GUIDES`]) and the CLI's `--help` texts show, run as written (issue 21
//! item 6, issue 26).
//!
//! The lines are extracted, not copied: every line of README.md's and the
//! guides' ```sh blocks, and every example line of each `--help` (found by
//! walking the `Commands:` lists from the top). A new documented line is therefore
//! tested without touching this file; one this file does not know how to
//! run fails the test until it is taught.
//!
//! Each line runs in a fresh temporary directory holding the fixtures the
//! documented lines name (`Cargo.toml`, `report.json`, `value.json`,
//! `image.png`, a signed `result.json` and its public key `k1.pub`, an executable `./my-provider`, a
//! configuration `evidence-wire.toml` with its contract, a copy of the
//! repository's `examples/`, an `evidence/` root). Only two rewrites are
//! made, both of an address: a `--url` host (and port) is pointed at a
//! loopback TLS provider started for the line (`localhost:8443` keeps its
//! name, so `--ca-cert ca.pem` verifies it; an external host such as
//! `provider.example` becomes `127.0.0.1`, whose certificate the public
//! roots do not trust, so the line fails precisely, with exit 1 and a
//! certificate error); and `serve --http ADDR` listens on port 0 of the
//! same host instead of a fixed port other tests may hold. Each line's exit
//! status and key output are asserted; a clap usage error is never
//! accepted.
//!
//! Also here: `query` answers within its timeout while the provider floods
//! its stderr and nobody reads `query`'s own stderr, and relays only a
//! bounded excerpt of it (issue 20 item 8); `query --handshake` against a
//! provider that answers `initialize` with a JSON-RPC error says so
//! (issue 21 item 6).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_evidence-wire-cli");
const MISBEHAVE: &str = env!("CARGO_BIN_EXE_misbehave");

/// The longest one documented line may run.
const LINE_DEADLINE: Duration = Duration::from_secs(20);

/// README lines that are not `evidence-wire` command lines (run by CI, not here).
const NOT_CLI: &[&str] = &["scripts/test"];

/// README lines that build or run the cargo examples: `tests/it/examples.rs`
/// runs them as written (in a git repository, against this build's examples).
fn is_example_line(line: &str) -> bool {
    line.starts_with("cargo build") || line.starts_with("target/debug/examples/")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

// ---------------------------------------------------------------------------
// Extracting the documented lines.

/// A documented command line and where it was found.
#[derive(Clone, Debug)]
struct Documented {
    source: String,
    text: String,
}

/// `line` without a trailing `# comment` (a `#` after whitespace, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (index, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(open), c) if c == open => quote = None,
            (None, '#') if previous.is_whitespace() => return line[..index].trim_end(),
            _ => {}
        }
        previous = c;
    }
    line.trim_end()
}

/// Guides whose ```sh blocks are run like README.md's.
const GUIDES: &[&str] = &["spec/guides/checking-a-provider.md"];

/// Every non-empty line of README.md's ```sh blocks.
fn readme_lines() -> Vec<Documented> {
    sh_lines("README.md")
}

/// Every non-empty line of the ```sh blocks of `file` (relative to the repository root).
fn sh_lines(file: &str) -> Vec<Documented> {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap_or_else(|error| {
        panic!("{file}: {error}");
    });
    let mut lines = Vec::new();
    let mut in_sh = false;
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && trimmed == "```sh";
            continue;
        }
        if in_sh {
            let command = strip_comment(trimmed);
            if !command.is_empty() {
                lines.push(Documented {
                    source: format!("{file}:{}", number + 1),
                    text: command.to_owned(),
                });
            }
        }
    }
    lines
}

fn help_text(path: &[String]) -> String {
    let output = Command::new(BIN)
        .args(path)
        .arg("--help")
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .output()
        .expect("run --help");
    assert!(output.status.success(), "{path:?} --help failed");
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

/// The subcommands a help text lists under `Commands:` (`help` aside).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The example lines of a help text: after `Example:` / `Examples:`, the
/// lines that run `evidence-wire` (descriptions under them are skipped).
fn help_examples(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.trim_start().starts_with("Example"))
        .skip(1)
        .map(str::trim)
        .filter(|line| line.starts_with("evidence-wire ") || line.contains("| evidence-wire "))
        .map(str::to_owned)
        .collect()
}

/// Every example line of every `--help`, from the top down.
fn help_lines() -> Vec<Documented> {
    let mut lines = Vec::new();
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let help = help_text(&path);
        let source = format!("evidence-wire {} --help", path.join(" "));
        let examples = help_examples(&help);
        assert!(!examples.is_empty(), "{source} shows no example");
        for text in examples {
            lines.push(Documented {
                source: source.clone(),
                text,
            });
        }
        for name in subcommands(&help) {
            let mut sub = path.clone();
            sub.push(name);
            pending.push(sub);
        }
    }
    lines
}

// ---------------------------------------------------------------------------
// Reading a line the way a POSIX shell would (the subset documented lines use).

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Pipe,
    Redirect,
}

/// Words with single quotes (literal), double quotes (`\` escapes `"`, `\`,
/// `$`) and backslashes, and the operators `|` and `>`.
fn tokens(line: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' if matches!(chars.peek(), Some('"' | '\\' | '$')) => {
                            word.extend(chars.next());
                        }
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '|' | '>' => {
                if in_word {
                    tokens.push(Token::Word(std::mem::take(&mut word)));
                    in_word = false;
                }
                tokens.push(if c == '|' {
                    Token::Pipe
                } else {
                    Token::Redirect
                });
            }
            c if c.is_whitespace() => {
                if in_word {
                    tokens.push(Token::Word(std::mem::take(&mut word)));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        tokens.push(Token::Word(word));
    }
    tokens
}

/// One run of the CLI: its arguments, its stdin, and where stdout goes.
#[derive(Clone, Debug, Default)]
struct Invocation {
    args: Vec<String>,
    stdin: Vec<u8>,
    stdout_file: Option<String>,
}

fn words(tokens: &[Token]) -> Option<Vec<String>> {
    tokens
        .iter()
        .map(|token| match token {
            Token::Word(word) => Some(word.clone()),
            _ => None,
        })
        .collect()
}

/// The invocation a documented line stands for, or `None` when it does not
/// run `evidence-wire` (`cargo run -p evidence-wire-cli --` counts).
fn invocation(line: &str) -> Option<Invocation> {
    let tokens = tokens(line);
    let (stdin, command) = match tokens.iter().position(|token| *token == Token::Pipe) {
        Some(pipe) => {
            let left = words(&tokens[..pipe])?;
            let (echo, text) = left.split_first()?;
            assert_eq!(echo, "echo", "{line}: only `echo … |` pipes are understood");
            let mut stdin = text.join(" ").into_bytes();
            stdin.push(b'\n');
            (stdin, &tokens[pipe + 1..])
        }
        None => (Vec::new(), &tokens[..]),
    };
    let (command, stdout_file) = match command.iter().position(|token| *token == Token::Redirect) {
        Some(at) => {
            let target = words(&command[at + 1..])?;
            assert_eq!(target.len(), 1, "{line}: one file after `>`");
            (&command[..at], target.into_iter().next())
        }
        None => (command, None),
    };
    let command = words(command)?;
    let cargo_run = ["cargo", "run", "-q", "-p", "evidence-wire-cli", "--"];
    let args = if command.first().map(String::as_str) == Some("evidence-wire") {
        command[1..].to_vec()
    } else if command.len() >= cargo_run.len() && command[..cargo_run.len()] == cargo_run {
        command[cargo_run.len()..].to_vec()
    } else {
        return None;
    };
    Some(Invocation {
        args,
        stdin,
        stdout_file,
    })
}

// ---------------------------------------------------------------------------
// Fixtures.

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-documented-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("parent dir");
        }
        std::fs::write(&path, bytes).expect("write fixture");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("dir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The worked example of spec/evidence.md: `"hello"` signed by key `k1`
/// (public key ea4a6c63…46d22c).
fn signed_hello() -> Value {
    let signature = "e4285475a284b843913b0a8d21709cd9d5e709f9a3ecc5c7a774fb31ba6f7c13587f6d247e8869fe7c693513911fc1755a9d8fb07ebf437e1ba81de36318190f";
    let bytes: Vec<u8> = (0..64)
        .map(|i| u8::from_str_radix(&signature[i * 2..i * 2 + 2], 16).expect("hex"))
        .collect();
    json!({
        "value": {"kind": "json", "value": "hello"},
        "lane": "verified",
        "error": null,
        "evidence_hash": {"algorithm": "sha256", "value": "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a"},
        "evidence_ref": null,
        "evidence_anchor": null,
        "signature": {"scheme": "ed25519", "key_id": "k1", "signature": bytes},
        "content_type": "application/json"
    })
}

/// The files the documented lines name.
fn fixtures(dir: &TempDir) {
    use std::os::unix::fs::PermissionsExt;
    dir.write(
        "Cargo.toml",
        b"[package]\nname = \"demo\"\nversion = \"0.1.0\"\n",
    );
    dir.write("report.json", br#"{"status":"ok","checks":3}"#);
    dir.write("value.json", br#"{"b":1,"a":2}"#);
    dir.write(
        "image.png",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR not really an image",
    );
    dir.write("result.json", signed_hello().to_string().as_bytes());
    // Its public key as `keygen` writes PREFIX.pub (32 raw bytes), for
    // `verify --key-file k1.pub`.
    let public = "ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c";
    let public: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&public[i * 2..i * 2 + 2], 16).expect("hex"))
        .collect();
    dir.write("k1.pub", &public);
    dir.write("evidence/status.json", br#"{"ok":true}"#);
    // Any stdio provider: the misbehave test provider in its good mode,
    // which answers every check; the arguments go to stderr.
    let script = dir.write(
        "my-provider",
        format!("#!/bin/sh\necho \"my-provider: args: $*\" >&2\nexec '{MISBEHAVE}' good\n")
            .as_bytes(),
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // A signing key, as `keygen --out signing-key` writes it (for `wrap --signing-key`).
    let key = dir.write("signing-key", &[7u8; 32]);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // A configuration with a provider `git` (the same program) whose
    // contract declares a `head` check: the example config's contract, renamed.
    let contract = std::fs::read_to_string(repo_root().join("examples/contracts/git.json"))
        .expect("example contract")
        .replace("\"head_commit\"", "\"head\"");
    dir.write("git.contract.json", contract.as_bytes());
    // A user's contract for `contract --check FILE`: the example's, as written.
    dir.write(
        "my-provider.contract.json",
        &std::fs::read(repo_root().join("examples/contracts/git.json")).expect("example contract"),
    );
    dir.write(
        "evidence-wire.toml",
        b"[[providers]]\nname = \"git\"\ntype = \"mcp\"\ncommand = [\"./my-provider\"]\ncapabilities_path = \"git.contract.json\"\n\n[docs]\nextra_paths = [\"runbooks\"]\n",
    );
    dir.write(
        "runbooks/deploy.md",
        b"# Deploy runbook\n\nHow evidence gates a deploy.\n",
    );
    copy_dir(&repo_root().join("examples"), &dir.0.join("examples"));
}

// ---------------------------------------------------------------------------
// Loopback providers.

fn rpc_answer(body: &[u8]) -> Vec<u8> {
    use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
    use evidence_wire::server::{Server, ServerConfig, ServerEvent};
    let mut server = Server::new(ServerConfig::default());
    let mut line = body.to_vec();
    line.push(b'\n');
    server.handle_input(&line);
    server.handle_end_of_input();
    while let Some(event) = server.poll_event() {
        if let ServerEvent::EvidenceQuery { ticket, .. } = event {
            let value = EvidenceValue::json(&json!("over tls")).expect("json");
            server
                .respond(ticket, EvidenceResult::with_value(value))
                .expect("known ticket");
        }
    }
    let mut out = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        out.extend_from_slice(&bytes);
    }
    while out.last() == Some(&b'\n') {
        out.pop();
    }
    out
}

fn serve_one_request(stream: &mut (impl Read + Write)) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
        .min(1024 * 1024);
    let mut body = vec![0u8; length];
    if stream.read_exact(&mut body).is_err() {
        return;
    }
    let answer = rpc_answer(&body);
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        answer.len()
    )
    .into_bytes();
    response.extend_from_slice(&answer);
    let _ = stream.write_all(&response);
    let _ = stream.flush();
}

/// A JSON-RPC provider over TLS on loopback with a self-signed certificate
/// for `localhost`, for a few connections: its port and certificate (PEM).
fn https_provider() -> (u16, String) {
    use std::sync::Arc;
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let issued =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(issued.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![issued.cert.der().clone()], key)
            .expect("server certificate"),
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(tcp) = stream else { continue };
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = tcp.set_write_timeout(Some(Duration::from_secs(5)));
            let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&server)) else {
                continue;
            };
            let mut tls = rustls::StreamOwned::new(connection, tcp);
            serve_one_request(&mut tls);
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    (port, issued.cert.pem())
}

/// Points `--url`'s host at a loopback TLS provider (writing its
/// certificate as `ca.pem`); returns whether the host was external.
fn rewrite_url(args: &mut [String], dir: &TempDir) -> Option<bool> {
    let at = args.iter().position(|arg| arg == "--url")?;
    let url = args.get(at + 1)?.clone();
    let rest = url
        .strip_prefix("https://")
        .expect("documented URLs are https");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority.split(':').next().unwrap_or(authority);
    let (port, pem) = https_provider();
    dir.write("ca.pem", pem.as_bytes());
    let external = host != "localhost" && host != "127.0.0.1";
    let loopback = if external { "127.0.0.1" } else { host };
    args[at + 1] = format!("https://{loopback}:{port}{path}");
    Some(external)
}

// ---------------------------------------------------------------------------
// Running.

struct Ran {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `child` to its end, at most `deadline`, reading both outputs.
fn finish(mut child: Child, stdin: &[u8], deadline: Duration) -> Ran {
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin);
    }
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let code = wait_bounded(&mut child, deadline);
    Ran {
        code,
        stdout: out.join().unwrap_or_default(),
        stderr: String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned(),
    }
}

/// The exit code, or `None` when the child had to be killed at `deadline`.
fn wait_bounded(child: &mut Child, deadline: Duration) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code();
        }
        if started.elapsed() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

fn spawn_in(dir: &Path, args: &[String]) -> Child {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .env_remove("EVIDENCE_WIRE_BEARER_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn evidence-wire")
}

/// The subcommand of `args` (after the global `--config FILE`).
fn subcommand(args: &[String]) -> Vec<&str> {
    let mut rest = args;
    while let Some((first, tail)) = rest.split_first() {
        if first == "--config" {
            rest = tail.get(1..).unwrap_or_default();
        } else {
            break;
        }
    }
    rest.iter()
        .map(String::as_str)
        .take_while(|word| !word.starts_with('-'))
        .take(2)
        .collect()
}

fn value_of<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let at = args.iter().position(|arg| arg == flag)?;
    args.get(at + 1).map(String::as_str)
}

/// `serve --http ADDR`: listens on port 0 of the same host, announces its
/// address, answers `GET /healthz`.
fn check_serve_http(line: &Documented, dir: &TempDir, inv: &Invocation) {
    let mut args = inv.args.clone();
    let at = args.iter().position(|arg| arg == "--http").expect("--http");
    let address = args[at + 1].clone();
    let host = address
        .rsplit_once(':')
        .map_or(address.as_str(), |(host, _)| host);
    args[at + 1] = format!("{host}:0");
    let mut child = spawn_in(&dir.0, &args);
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut first = String::new();
        let _ = BufReader::new(stderr).read_line(&mut first);
        let _ = tx.send(first);
    });
    let announced = rx.recv_timeout(Duration::from_secs(10));
    let result = announced.as_ref().ok().and_then(|first| {
        let bound = first.split("http://").nth(1)?.split_whitespace().next()?;
        let mut stream = TcpStream::connect(bound).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut reply = String::new();
        let _ = stream.read_to_string(&mut reply);
        Some(reply)
    });
    let _ = child.kill();
    let _ = child.wait();
    let reply = result.unwrap_or_else(|| {
        panic!(
            "{} ({}): no announced address or no /healthz answer: {announced:?}",
            line.source, line.text
        )
    });
    assert!(
        reply.starts_with("HTTP/1.1 200"),
        "{} ({}): /healthz answered {reply:?}",
        line.source,
        line.text
    );
}

/// Runs one documented line in a fresh directory and asserts its outcome.
fn check(line: &Documented) {
    let Some(inv) = invocation(&line.text) else {
        assert!(
            NOT_CLI.contains(&line.text.as_str()) || is_example_line(&line.text),
            "{}: `{}` is documented but this test cannot run it; teach tests/tests/it/cli_documented.rs",
            line.source,
            line.text
        );
        return;
    };
    let dir = TempDir::new();
    fixtures(&dir);
    let sub = subcommand(&inv.args);
    if (sub == ["serve"] || sub == ["wrap"]) && inv.args.iter().any(|arg| arg == "--http") {
        check_serve_http(line, &dir, &inv);
        return;
    }
    let mut args = inv.args.clone();
    let external_url = rewrite_url(&mut args, &dir);
    let ran = finish(spawn_in(&dir.0, &args), &inv.stdin, LINE_DEADLINE);
    let context = format!(
        "{} `{}` (ran {args:?})\nexit {:?}\nstdout: {}\nstderr: {}",
        line.source,
        line.text,
        ran.code,
        String::from_utf8_lossy(&ran.stdout),
        ran.stderr
    );
    assert!(
        ran.code.is_some(),
        "did not finish in {LINE_DEADLINE:?}: {context}"
    );
    assert!(
        !ran.stderr.contains("Usage:"),
        "a usage error for a documented line: {context}"
    );
    // `> FILE`: stdout goes to the file, as the shell would put it there.
    let stdout: Vec<u8> = match &inv.stdout_file {
        Some(file) => {
            dir.write(file, &ran.stdout);
            std::fs::read(dir.0.join(file)).unwrap_or_default()
        }
        None => ran.stdout.clone(),
    };
    let json = || -> Value {
        serde_json::from_slice(&stdout)
            .unwrap_or_else(|error| panic!("stdout is not JSON ({error}): {context}"))
    };
    match sub.as_slice() {
        ["query"] if external_url == Some(true) => {
            // An external host, rewritten to loopback: the public roots do
            // not trust the loopback certificate. A precise failure, not a
            // usage error.
            assert_eq!(ran.code, Some(1), "{context}");
            assert!(ran.stderr.contains("certificate"), "{context}");
        }
        ["query"]
            if value_of(&inv.args, "--config")
                .is_some_and(|file| file.starts_with("examples/")) =>
        {
            // The example configuration's providers are programs that are
            // not installed here: the configuration loads, the spawn fails.
            assert_eq!(ran.code, Some(2), "{context}");
            assert!(ran.stderr.contains("cannot start provider"), "{context}");
        }
        ["query"] => {
            assert_eq!(ran.code, Some(0), "{context}");
            let result = json();
            assert_eq!(result["error"], Value::Null, "{context}");
            assert_eq!(result["value"]["kind"], "json", "{context}");
            assert!(result["evidence_hash"]["value"].is_string(), "{context}");
            if let Some(check) = value_of(&inv.args, "--check") {
                if inv.args.iter().any(|arg| arg.contains("my-provider"))
                    || value_of(&inv.args, "--provider").is_some()
                {
                    // The test provider echoes the check it was asked.
                    assert_eq!(result["value"]["value"]["check_id"], check, "{context}");
                }
            }
        }
        ["hash"] => {
            assert_eq!(ran.code, Some(0), "{context}");
            if inv.args.iter().any(|arg| arg == "--canonical") {
                assert_eq!(stdout, b"{\"a\":2,\"b\":1}\n", "{context}");
            } else {
                let digest = json();
                assert_eq!(digest["algorithm"], "sha256", "{context}");
                assert_eq!(
                    digest["value"].as_str().map(str::len),
                    Some(64),
                    "{context}"
                );
            }
        }
        ["verify"] => {
            assert_eq!(ran.code, Some(0), "{context}");
            assert_eq!(json()["value"]["value"], "hello", "{context}");
        }
        ["contract"] if inv.args.iter().any(|arg| arg == "--check") => {
            // The contract meets Decision Gate's rules: a one-line verdict.
            assert_eq!(ran.code, Some(0), "{context}");
            assert!(
                String::from_utf8_lossy(&stdout).contains(": ok"),
                "{context}"
            );
        }
        ["contract"] => {
            assert_eq!(ran.code, Some(0), "{context}");
            assert!(
                json()["checks"]
                    .as_array()
                    .is_some_and(|checks| !checks.is_empty()),
                "{context}"
            );
        }
        ["config", "check"] => {
            assert_eq!(ran.code, Some(0), "{context}");
            assert!(
                String::from_utf8_lossy(&stdout).contains(": ok"),
                "{context}"
            );
        }
        ["docs", what] => {
            assert_eq!(ran.code, Some(0), "{context}");
            let answer = json();
            if *what == "list" && value_of(&inv.args, "--config").is_some() {
                // The configuration's extra document is listed.
                assert!(answer.to_string().contains("Deploy runbook"), "{context}");
            }
        }
        ["check-provider"] if inv.args.iter().any(|arg| arg.contains("my-provider")) => {
            // The fixture provider echoes every query with a value, so it
            // does not honour the contract it is checked against: the
            // report says so precisely (exit 1), and an unknown check is
            // the line that shows it.
            assert_eq!(ran.code, Some(1), "{context}");
            let unknown_fails = if inv.args.iter().any(|arg| arg == "--json") {
                json()["checks"].as_array().is_some_and(|checks| {
                    checks
                        .iter()
                        .any(|line| line["check"] == "unknown_check" && line["status"] == "fail")
                })
            } else {
                String::from_utf8_lossy(&stdout)
                    .lines()
                    .any(|line| line.starts_with("fail") && line.contains(" unknown_check "))
            };
            assert!(unknown_fails, "{context}");
            assert!(ran.stderr.contains("check-provider:"), "{context}");
        }
        ["check-provider"] => {
            // The bundled provider against its own contract: no failure;
            // its external checks warn here (no DEPLOY_ENV, no such
            // report.json fields, no internet).
            assert_eq!(ran.code, Some(0), "{context}");
            let text = String::from_utf8_lossy(&stdout);
            assert!(
                text.starts_with("check-provider: the bundled provider"),
                "{context}"
            );
            assert!(text.contains(" 0 fail in "), "{context}");
            assert!(text.contains("pass   robustness.pipelined"), "{context}");
        }
        ["serve"] | ["wrap"] => {
            // On stdio with nothing to read: a clean exit, nothing written.
            assert_eq!(ran.code, Some(0), "{context}");
            assert!(stdout.is_empty(), "{context}");
        }
        _ => assert_eq!(ran.code, Some(0), "{context}"),
    }
}

#[test]
fn every_readme_command_line_runs_as_written() {
    let lines = readme_lines();
    let runnable = lines
        .iter()
        .filter(|line| invocation(&line.text).is_some())
        .count();
    assert!(
        runnable >= 12,
        "only {runnable} README command lines found: {lines:?}"
    );
    for line in &lines {
        check(line);
    }
}

#[test]
fn every_guide_command_line_runs_as_written() {
    for guide in GUIDES {
        let lines = sh_lines(guide);
        assert!(!lines.is_empty(), "{guide} shows no command line");
        for line in &lines {
            check(line);
        }
    }
}

#[test]
fn every_help_example_runs_as_written() {
    let lines = help_lines();
    assert!(
        lines.len() >= 15,
        "only {} help examples found: {lines:?}",
        lines.len()
    );
    for line in &lines {
        check(line);
    }
}

#[test]
fn the_line_reader_reads_quotes_pipes_and_redirects() {
    let inv = invocation(r#"echo '{"b":1,"a":2}' | evidence-wire hash"#).expect("a CLI line");
    assert_eq!(inv.args, ["hash"]);
    assert_eq!(inv.stdin, b"{\"b\":1,\"a\":2}\n");
    let inv = invocation("evidence-wire contract > out.json").expect("a CLI line");
    assert_eq!(inv.args, ["contract"]);
    assert_eq!(inv.stdout_file.as_deref(), Some("out.json"));
    let inv = invocation(r#"evidence-wire docs search "a \"b\" c" 'd e'"#).expect("a CLI line");
    assert_eq!(inv.args, ["docs", "search", "a \"b\" c", "d e"]);
    let inv = invocation("cargo run -q -p evidence-wire-cli -- query --check time_now")
        .expect("cargo run");
    assert_eq!(inv.args, ["query", "--check", "time_now"]);
    assert!(invocation("scripts/test").is_none());
    assert_eq!(
        strip_comment("evidence-wire hash '# not a comment'   # a comment"),
        "evidence-wire hash '# not a comment'"
    );
    assert_eq!(
        subcommand(&[
            "--config".into(),
            "x.toml".into(),
            "config".into(),
            "check".into(),
            "f".into()
        ]),
        ["config", "check"]
    );
}

// ---------------------------------------------------------------------------
// Issue 20 item 8: a provider flooding its stderr.

/// `query` against a provider that writes 32 MiB to its stderr before it
/// answers, with `query`'s own stderr a pipe nobody reads: the answer comes
/// within the timeout; and with the pipe read, only a bounded excerpt of
/// the flood came through, with the notice that the rest was dropped.
#[test]
fn query_answers_while_a_provider_floods_stderr_nobody_reads() {
    let dir = TempDir::new();
    let args: Vec<String> = [
        "query",
        "--provider-id",
        "flood",
        "--check",
        "probe",
        "--timeout-ms",
        "5000",
        "--",
        MISBEHAVE,
        "stderr-flood",
        "--bytes",
        "33554432",
    ]
    .map(str::to_owned)
    .to_vec();

    // Nobody reads our stderr: the pipe stays open and fills up.
    let mut child = spawn_in(&dir.0, &args);
    let unread_stderr = child.stderr.take();
    let mut stdout = child.stdout.take().expect("stdout");
    let out = thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    drop(child.stdin.take());
    let started = Instant::now();
    let code = wait_bounded(&mut child, Duration::from_secs(15));
    let took = started.elapsed();
    let stdout = out.join().unwrap_or_default();
    drop(unread_stderr);
    assert_eq!(
        code,
        Some(0),
        "query did not answer in time (exit {code:?} after {took:?}; None: killed): {}",
        String::from_utf8_lossy(&stdout)
    );
    assert!(
        took < Duration::from_secs(5),
        "query took {took:?}, past its timeout"
    );
    let result: Value = serde_json::from_slice(&stdout).expect("the result on stdout");
    assert_eq!(result["value"]["value"]["check_id"], "probe");

    // Read, the stderr holds a bounded excerpt and a summary.
    let ran = finish(spawn_in(&dir.0, &args), b"", Duration::from_secs(15));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stderr.len() < 40 * 1024,
        "{} bytes of the 32 MiB stderr flood were relayed",
        ran.stderr.len()
    );
    assert!(
        ran.stderr.contains("provider stderr over its rate limit"),
        "no notice that lines were dropped:\n{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("stderr flood line 000000000000"));
}

/// `query --handshake` against a provider that answers `initialize` with a
/// JSON-RPC error: exit 1, and the message names that error (it used to say
/// the provider "answered initialize without a protocolVersion").
#[test]
fn query_reports_a_refused_handshake_as_the_error_it_was() {
    let dir = TempDir::new();
    let args: Vec<String> = [
        "query",
        "--handshake",
        "--framing",
        "ndjson",
        "--provider-id",
        "refuser",
        "--check",
        "probe",
        "--timeout-ms",
        "5000",
        "--",
        MISBEHAVE,
        "refuse-initialize",
    ]
    .map(str::to_owned)
    .to_vec();
    let ran = finish(spawn_in(&dir.0, &args), b"", Duration::from_secs(15));
    assert_eq!(ran.code, Some(1), "{}", ran.stderr);
    assert!(
        ran.stderr.contains(
            "refused initialize with JSON-RPC error -32601: Method not found: initialize"
        ),
        "{}",
        ran.stderr
    );
    assert!(
        !ran.stderr.contains("without a protocolVersion"),
        "{}",
        ran.stderr
    );
    let result: Value = serde_json::from_slice(&ran.stdout).expect("the result on stdout");
    assert_eq!(result["error"]["code"], "provider_unavailable");
}
