//! `misbehave`: a stdio evidence provider that breaks the protocol on
//! purpose, for the adapter test matrix and `check-provider`'s tests.
//!
//! ```text
//! misbehave MODE [--state FILE] [--times N] [--delay-ms N] [--bytes N] [--contract FILE]
//!                [--pid-file FILE] [--leave-behind FILE]
//! ```
//!
//! It serves `evidence_query` with the blocking adapter (either framing,
//! detected from the first byte) and answers each query with the value
//! `{"check_id": ..., "params": ...}` and its correct SHA-256 hash. MODE
//! chooses how it misbehaves instead:
//!
//! | mode | on a query |
//! | --- | --- |
//! | `good` | answers correctly |
//! | `crash-request` | exits (code 3) right after reading the request |
//! | `crash-half` | writes the first half of its answer, then exits |
//! | `hang` | reads the request and never answers |
//! | `garbage` | prints a line that is not a frame instead of its answer |
//! | `desync` | prints a Content-Length no decoder can skip (a fatal framing error) |
//! | `wrong-id` | answers with an id the caller never used |
//! | `slow` | answers after `--delay-ms` (default 200) |
//! | `deaf` | (at start) never reads its stdin, so the caller's writes fill the pipe; exits after 30 s |
//! | `banner` | (at start) prints a banner line on stdout, then answers correctly |
//! | `flood` | writes `--bytes` (default 16 MiB) of junk lines instead of its answer, then exits |
//! | `huge-line` | writes `--bytes` (default 100 MiB) without a newline instead of its answer, then exits |
//! | `huge-frame` | writes its answer as one Content-Length frame padded to `--bytes` (default 100 MiB), then exits |
//! | `big-answer` | writes its answer padded to `--bytes` (default 2 MiB, over the 1 MiB limit) in the request's framing, and goes on serving |
//! | `deep-answer` | writes its answer with the evidence value nested 200 levels deep (past the envelope's 128) in the request's framing, and goes on serving |
//! | `refuse-initialize` | answers `initialize` with a JSON-RPC error (-32601) instead of its result |
//! | `stderr-flood` | writes `--bytes` (default 16 MiB) of 128-byte lines to stderr, blocking as a write to a full pipe does, then answers correctly |
//! | `params-rpc-error` | answers an `invalid_params` EvidenceResult error as a JSON-RPC error (-32602) instead |
//! | `params-accepted` | answers params its contract refuses (`invalid_params`) with a value |
//! | `unknown-check-ok` | answers an unknown check (`unknown_check`) with a value |
//! | `nondeterministic` | adds a counter to the value from the second time the same query is asked |
//! | `wrong-value` | answers the value `"wrong"` to every query |
//! | `rfc8785-hash` | hashes with RFC 8785 instead of the profile its caller verifies with |
//! | `bad-hash` | sends a wrong `evidence_hash` (64 zeros) |
//! | `no-hash` | sends `evidence_hash: null` |
//! | `dup-answer` | writes every answer twice |
//! | `text-content` | sends the EvidenceResult as a text content item (MCP style) on a Decision Gate connection |
//! | `no-tools-list` | answers `tools/list` with a JSON-RPC error (-32601) |
//! | `fragile` | exits (code 1) on the first input that is not a well-formed frame holding JSON, as Decision Gate's own server does |
//! | `unserved-contract` | answers correctly and enforces `--contract`, but does not serve it at `resources/read` |
//!
//! With `--contract FILE` (a capabilities contract) the server enforces it
//! (an unknown check or params outside `params_schema` are answered as
//! EvidenceResult errors before the handler runs) and serves it at
//! `resources/read decision-gate://contract`; the check `keys` then
//! answers `{"a":1,"a b":2,"a!":3,"ab":4}`, a value whose canonical JSON
//! differs between RFC 8785 and Decision Gate's profile.
//!
//! With `--state FILE` it misbehaves only `--times` times (default 1)
//! across restarts, counting in FILE, and answers correctly afterwards:
//! that is how a test asserts "the next query succeeds after restart".
//! It writes one line to stderr when it starts (`misbehave: Mode ready`)
//! and one each time it misbehaves (`... on purpose`), so tests can check
//! that the caller captures stderr. Test tool only: it
//! trusts its argv and panics on a bad one.
//!
//! For tests of the caller's cleanup (Unix): `--pid-file FILE` appends its
//! own pid to FILE (one line) when it starts; `--leave-behind FILE` starts
//! `sleep 300` in a process group of its own, holding this provider's
//! stdout and stderr, and appends that pid to FILE: a process its caller
//! cannot end with the provider's process group, and whose pipes never
//! close while it sleeps.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evidence_wire::canonical::Profile;
use evidence_wire::contract::ProviderContract;
use evidence_wire::dialect::HashProfile;
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue};
use evidence_wire::frame::{self, Decoder, Limits};
use evidence_wire::server::{Resource, ServerConfig, ServerContract, ServerEvent};
use evidence_wire_blocking::{Answer, Handler, Service};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Good,
    CrashRequest,
    CrashHalf,
    Hang,
    Garbage,
    Desync,
    WrongId,
    Slow,
    Deaf,
    Banner,
    Flood,
    HugeLine,
    HugeFrame,
    BigAnswer,
    DeepAnswer,
    StderrFlood,
    RefuseInitialize,
    ParamsRpcError,
    ParamsAccepted,
    UnknownCheckOk,
    Nondeterministic,
    WrongValue,
    Rfc8785Hash,
    BadHash,
    NoHash,
    DupAnswer,
    TextContent,
    NoToolsList,
    Fragile,
    UnservedContract,
}

impl Mode {
    fn parse(text: &str) -> Mode {
        match text {
            "good" => Mode::Good,
            "crash-request" => Mode::CrashRequest,
            "crash-half" => Mode::CrashHalf,
            "hang" => Mode::Hang,
            "garbage" => Mode::Garbage,
            "desync" => Mode::Desync,
            "wrong-id" => Mode::WrongId,
            "slow" => Mode::Slow,
            "deaf" => Mode::Deaf,
            "banner" => Mode::Banner,
            "flood" => Mode::Flood,
            "huge-line" => Mode::HugeLine,
            "huge-frame" => Mode::HugeFrame,
            "big-answer" => Mode::BigAnswer,
            "deep-answer" => Mode::DeepAnswer,
            "stderr-flood" => Mode::StderrFlood,
            "refuse-initialize" => Mode::RefuseInitialize,
            "params-rpc-error" => Mode::ParamsRpcError,
            "params-accepted" => Mode::ParamsAccepted,
            "unknown-check-ok" => Mode::UnknownCheckOk,
            "nondeterministic" => Mode::Nondeterministic,
            "wrong-value" => Mode::WrongValue,
            "rfc8785-hash" => Mode::Rfc8785Hash,
            "bad-hash" => Mode::BadHash,
            "no-hash" => Mode::NoHash,
            "dup-answer" => Mode::DupAnswer,
            "text-content" => Mode::TextContent,
            "no-tools-list" => Mode::NoToolsList,
            "fragile" => Mode::Fragile,
            "unserved-contract" => Mode::UnservedContract,
            other => panic!("misbehave: unknown mode {other:?}"),
        }
    }
}

/// How often the provider still has to misbehave, shared by the handler
/// (worker threads) and the output writer, and across restarts via a file.
struct Budget {
    mode: Mode,
    state: Option<PathBuf>,
    times: u64,
    lock: Mutex<()>,
}

impl Budget {
    /// True when this query should be mishandled; counts it.
    fn take(&self) -> bool {
        if self.mode == Mode::Good {
            return false;
        }
        let Some(state) = &self.state else {
            return true;
        };
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let used: u64 = fs::read_to_string(state)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0);
        if used >= self.times {
            return false;
        }
        fs::write(state, (used + 1).to_string()).expect("misbehave: cannot write the state file");
        true
    }
}

#[derive(Clone)]
struct Misbehaving {
    budget: Arc<Budget>,
    delay: Duration,
    /// Size of the stderr flood.
    bytes: Option<u64>,
    /// How often each query was asked (`nondeterministic`).
    asked: Arc<Mutex<std::collections::HashMap<String, u64>>>,
}

/// Writes `total` bytes of numbered 128-byte lines to stderr (blocking
/// while the reader of the pipe does not keep up).
fn flood_stderr(total: u64) -> io::Result<()> {
    let mut stderr = io::stderr().lock();
    let mut line = 0u64;
    write_generated(&mut stderr, total, |piece| {
        for chunk in piece.chunks_mut(128) {
            let text = format!("misbehave: stderr flood line {line:012} ");
            line += 1;
            for (index, byte) in chunk.iter_mut().enumerate() {
                *byte = text.as_bytes().get(index).copied().unwrap_or(b'e');
            }
            if let Some(last) = chunk.last_mut() {
                *last = b'\n';
            }
        }
    })?;
    stderr.flush()
}

/// Every query is answered on a worker thread (the blocking pool).
impl Handler for Misbehaving {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        _context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        let this = self.clone();
        Answer::blocking(move || this.answer(&query))
    }

    fn observe(&self, event: &ServerEvent) {
        if let ServerEvent::Cancelled { ticket, reason } = event {
            eprintln!("misbehave: {ticket} cancelled: {reason:?}");
        }
    }
}

impl Misbehaving {
    fn answer(&self, query: &EvidenceQuery) -> EvidenceResult {
        let mode = self.budget.mode;
        if mode == Mode::StderrFlood && self.budget.take() {
            let total = self.bytes.unwrap_or(16 << 20);
            flood_stderr(total).expect("misbehave: cannot write stderr");
            eprintln!("misbehave: flooded stderr with {total} bytes on purpose; answering");
        }
        if matches!(mode, Mode::CrashRequest | Mode::Hang | Mode::Slow) && self.budget.take() {
            match mode {
                Mode::CrashRequest => {
                    eprintln!("misbehave: crashing on purpose after reading a request");
                    std::process::exit(3);
                }
                Mode::Hang => {
                    eprintln!("misbehave: hanging on purpose");
                    // Bounded, so a forgotten child ends on its own.
                    std::thread::sleep(Duration::from_secs(30));
                    std::process::exit(4);
                }
                _ => std::thread::sleep(self.delay),
            }
        }
        let mut value = if query.check_id == "keys" {
            json!({"a": 1, "a b": 2, "a!": 3, "ab": 4})
        } else {
            json!({"check_id": query.check_id, "params": query.params})
        };
        if mode == Mode::WrongValue && self.budget.take() {
            value = json!("wrong");
        }
        if mode == Mode::Nondeterministic {
            let key = format!("{}:{:?}", query.check_id, query.params);
            let mut asked = self
                .asked
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let count = asked.entry(key).or_insert(0);
            *count += 1;
            if *count > 1 && self.budget.take() {
                value["nonce"] = json!(*count);
            }
        }
        EvidenceValue::json(&value)
            .ok()
            .map(EvidenceResult::with_value)
            .and_then(|result| result.with_computed_hash(Profile::Rfc8785).ok())
            .expect("misbehave: cannot build the answer")
    }
}

/// Passes frames through to stdout, except the answers it must spoil.
struct Output {
    budget: Arc<Budget>,
    decoder: Decoder,
    stdout: io::Stdout,
    /// Size of the flood / huge modes' output.
    bytes: Option<u64>,
}

/// Writes `total` bytes made by `fill` in 64 KiB pieces (never all at once).
fn write_generated(
    out: &mut impl Write,
    total: u64,
    mut fill: impl FnMut(&mut [u8]),
) -> io::Result<()> {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut left = total;
    while left > 0 {
        let take = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        let piece = &mut chunk[..take];
        fill(piece);
        out.write_all(piece)?;
        left -= take as u64;
    }
    Ok(())
}

/// Junk lines of varied lengths (1 to ~2000 bytes, some not UTF-8, some
/// JSON-looking): nothing a decoder can take as a message.
fn junk(state: &mut u64) -> impl FnMut(&mut [u8]) + '_ {
    const ALPHABET: &[u8] = b"{}[]\":,0123456789abcdefxyz \t\r\xff\xfe\x00";
    move |piece: &mut [u8]| {
        for byte in piece.iter_mut() {
            // xorshift64: deterministic, no dependency.
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            *byte = if *state % 997 == 0 {
                b'\n'
            } else {
                ALPHABET[(*state >> 32) as usize % ALPHABET.len()]
            };
        }
    }
}

impl Output {
    fn emit(&mut self, body: &[u8]) -> io::Result<()> {
        let framing = self
            .decoder
            .framing()
            .unwrap_or(frame::Framing::ContentLength);
        let mut framed = Vec::new();
        frame::encode(framing, body, &mut framed).map_err(io::Error::other)?;
        let is_answer = serde_json::from_slice::<Value>(body)
            .ok()
            .filter(|message| message.pointer("/result/content").is_some());
        let mode = self.budget.mode;
        if let Some(messages) = self.rewrite(body) {
            let mut out = self.stdout.lock();
            for message in messages {
                let body = serde_json::to_vec(&message).map_err(io::Error::other)?;
                let mut reframed = Vec::new();
                frame::encode(framing, &body, &mut reframed).map_err(io::Error::other)?;
                out.write_all(&reframed)?;
            }
            return out.flush();
        }
        if mode == Mode::RefuseInitialize {
            let initialized = serde_json::from_slice::<Value>(body)
                .ok()
                .filter(|message| message.pointer("/result/protocolVersion").is_some());
            if let Some(message) = initialized {
                if self.budget.take() {
                    eprintln!("misbehave: refusing initialize on purpose");
                    let refusal = json!({"jsonrpc": "2.0", "id": message["id"],
                        "error": {"code": -32601, "message": "Method not found: initialize"}});
                    let body = serde_json::to_vec(&refusal).map_err(io::Error::other)?;
                    let mut reframed = Vec::new();
                    frame::encode(framing, &body, &mut reframed).map_err(io::Error::other)?;
                    let mut out = self.stdout.lock();
                    out.write_all(&reframed)?;
                    return out.flush();
                }
            }
        }
        let spoil = matches!(
            mode,
            Mode::CrashHalf
                | Mode::Garbage
                | Mode::Desync
                | Mode::WrongId
                | Mode::Flood
                | Mode::HugeLine
                | Mode::HugeFrame
                | Mode::BigAnswer
                | Mode::DeepAnswer
        );
        let mut out = self.stdout.lock();
        match is_answer {
            Some(mut message) if spoil && self.budget.take() => match mode {
                Mode::CrashHalf => {
                    let half = framed.get(..framed.len() / 2).unwrap_or_default();
                    out.write_all(half)?;
                    out.flush()?;
                    eprintln!("misbehave: crashing on purpose in the middle of an answer");
                    std::process::exit(3);
                }
                Mode::Garbage => {
                    eprintln!("misbehave: printing garbage on purpose");
                    out.write_all(b"this is not a frame, the provider is confused\n\n")?;
                }
                Mode::Desync => {
                    eprintln!("misbehave: desynchronizing the stream on purpose");
                    out.write_all(b"Content-Length: 99999999999999999999999999\r\n\r\n")?;
                }
                Mode::Flood => {
                    let total = self.bytes.unwrap_or(16 << 20);
                    eprintln!("misbehave: flooding {total} bytes of junk on purpose");
                    let mut state = 0x9E37_79B9_7F4A_7C15;
                    write_generated(&mut out, total, junk(&mut state))?;
                    out.flush()?;
                    eprintln!("misbehave: flooded {total} bytes of junk on purpose; exiting");
                    std::process::exit(3);
                }
                Mode::HugeLine => {
                    let total = self.bytes.unwrap_or(100 << 20);
                    eprintln!("misbehave: writing a {total}-byte line on purpose");
                    write_generated(&mut out, total, |piece| piece.fill(b'x'))?;
                    out.flush()?;
                    eprintln!(
                        "misbehave: wrote a {total}-byte line without a newline on purpose; exiting"
                    );
                    std::process::exit(3);
                }
                Mode::HugeFrame => {
                    // The real answer, then spaces (valid JSON whitespace) up
                    // to `total` body bytes.
                    let total = self.bytes.unwrap_or(100 << 20).max(body.len() as u64);
                    eprintln!("misbehave: writing a {total}-byte frame on purpose");
                    write!(out, "Content-Length: {total}\r\n\r\n")?;
                    out.write_all(body)?;
                    write_generated(&mut out, total - body.len() as u64, |piece| {
                        piece.fill(b' ')
                    })?;
                    out.flush()?;
                    eprintln!("misbehave: wrote a {total}-byte frame on purpose; exiting");
                    std::process::exit(3);
                }
                Mode::BigAnswer => {
                    // The real answer, then spaces (valid JSON whitespace) up
                    // to `total` body bytes, framed as the request was.
                    let total = self.bytes.unwrap_or(2 << 20).max(body.len() as u64);
                    eprintln!("misbehave: writing a {total}-byte answer on purpose");
                    if framing == frame::Framing::ContentLength {
                        write!(out, "Content-Length: {total}\r\n\r\n")?;
                    }
                    out.write_all(body)?;
                    write_generated(&mut out, total - body.len() as u64, |piece| {
                        piece.fill(b' ')
                    })?;
                    if framing == frame::Framing::NewlineDelimited {
                        out.write_all(b"\n")?;
                    }
                    out.flush()?;
                }
                Mode::DeepAnswer => {
                    // The same answer (id first, as serde_json writes it),
                    // its evidence value an array nested 200 deep.
                    let depth = 200;
                    let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
                    let id = message.get("id").cloned().unwrap_or(Value::Null);
                    let body = format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"json","json":{{"value":{{"kind":"json","value":{deep}}},"lane":"verified"}}}}]}}}}"#
                    );
                    eprintln!("misbehave: writing an answer nested {depth} deep on purpose");
                    let mut reframed = Vec::new();
                    frame::encode(framing, body.as_bytes(), &mut reframed)
                        .map_err(io::Error::other)?;
                    out.write_all(&reframed)?;
                }
                _ => {
                    eprintln!("misbehave: answering with a wrong id on purpose");
                    let wrong = message
                        .get("id")
                        .and_then(Value::as_i64)
                        .map_or(Value::from("not-yours"), |id| Value::from(id + 1_000_000));
                    message["id"] = wrong;
                    let body = serde_json::to_vec(&message).map_err(io::Error::other)?;
                    let mut reframed = Vec::new();
                    frame::encode(framing, &body, &mut reframed).map_err(io::Error::other)?;
                    out.write_all(&reframed)?;
                }
            },
            _ => out.write_all(&framed)?,
        }
        out.flush()
    }
}

impl Output {
    /// The messages to write instead of `body` in the rewriting modes
    /// (`None`: write it as it is).
    fn rewrite(&self, body: &[u8]) -> Option<Vec<Value>> {
        let mode = self.budget.mode;
        let rewriting = matches!(
            mode,
            Mode::ParamsRpcError
                | Mode::ParamsAccepted
                | Mode::UnknownCheckOk
                | Mode::BadHash
                | Mode::NoHash
                | Mode::DupAnswer
                | Mode::TextContent
                | Mode::NoToolsList
        );
        if !rewriting {
            return None;
        }
        let mut message = serde_json::from_slice::<Value>(body).ok()?;
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        if mode == Mode::NoToolsList {
            message.pointer("/result/tools")?;
            self.budget.take().then_some(())?;
            eprintln!("misbehave: refusing tools/list on purpose");
            return Some(vec![json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found: tools/list"}})]);
        }
        let evidence = message.pointer("/result/content/0/json")?.clone();
        let code = evidence
            .pointer("/error/code")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let accepted = || {
            let value = EvidenceValue::json(&json!("accepted")).ok()?;
            let result = EvidenceResult::with_value(value)
                .with_computed_hash(Profile::DecisionGate)
                .ok()?;
            Some(json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "json", "json": result}]}}))
        };
        let rewritten = match mode {
            Mode::ParamsRpcError if code == "invalid_params" => {
                json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32602, "message": evidence.pointer("/error/message").cloned().unwrap_or(Value::Null)}})
            }
            Mode::ParamsAccepted if code == "invalid_params" => accepted()?,
            Mode::UnknownCheckOk if code == "unknown_check" => accepted()?,
            Mode::BadHash if evidence.pointer("/evidence_hash/value").is_some() => {
                message["result"]["content"][0]["json"]["evidence_hash"]["value"] =
                    json!("0".repeat(64));
                message
            }
            Mode::NoHash if evidence.pointer("/evidence_hash/value").is_some() => {
                message["result"]["content"][0]["json"]["evidence_hash"] = Value::Null;
                message
            }
            Mode::DupAnswer => {
                if self.budget.take() {
                    eprintln!("misbehave: answering twice on purpose");
                    return Some(vec![message.clone(), message]);
                }
                return None;
            }
            Mode::TextContent => {
                let text = serde_json::to_string(&evidence).ok()?;
                message["result"] = json!({"content": [{"type": "text", "text": text}]});
                message
            }
            _ => return None,
        };
        if !self.budget.take() {
            return None;
        }
        eprintln!("misbehave: {mode:?} on purpose");
        Some(vec![rewritten])
    }
}

/// Stdin that ends the process at the first input that is not a
/// well-formed frame holding JSON (`fragile`), as Decision Gate's own
/// server does.
struct FragileInput {
    inner: io::Stdin,
    decoder: Decoder,
}

impl io::Read for FragileInput {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buffer)?;
        self.decoder.push(buffer.get(..read).unwrap_or_default());
        while let Some(next) = self.decoder.poll_frame() {
            let fine = match next {
                Ok(frame) => serde_json::from_slice::<Value>(&frame.body).is_ok(),
                Err(_) => false,
            };
            if !fine {
                eprintln!("misbehave: a broken frame; exiting on purpose");
                std::process::exit(1);
            }
        }
        Ok(read)
    }
}

impl Write for Output {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.decoder.push(bytes);
        while let Some(next) = self.decoder.poll_frame() {
            let frame = next.map_err(io::Error::other)?;
            self.emit(&frame.body)?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stdout.flush()
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = Mode::parse(&args.next().unwrap_or_else(|| "good".to_owned()));
    let mut state = None;
    let mut times = 1;
    let mut delay = Duration::from_millis(200);
    let mut bytes = None;
    let mut contract = None;
    let mut pid_file = None;
    let mut leave_behind = None;
    while let Some(flag) = args.next() {
        let value = args.next().expect("misbehave: a flag needs a value");
        match flag.as_str() {
            "--state" => state = Some(PathBuf::from(value)),
            "--times" => times = value.parse().expect("misbehave: --times N"),
            "--bytes" => bytes = Some(value.parse().expect("misbehave: --bytes N")),
            "--contract" => contract = Some(PathBuf::from(value)),
            "--pid-file" => pid_file = Some(PathBuf::from(value)),
            "--leave-behind" => leave_behind = Some(PathBuf::from(value)),
            "--delay-ms" => {
                delay = Duration::from_millis(value.parse().expect("misbehave: --delay-ms N"));
            }
            other => panic!("misbehave: unknown flag {other:?}"),
        }
    }
    if let Some(path) = &pid_file {
        append_pid(path, std::process::id());
    }
    if let Some(path) = &leave_behind {
        leave_behind_a_holder(path);
    }
    eprintln!("misbehave: {mode:?} ready");
    let budget = Arc::new(Budget {
        mode,
        state,
        times,
        lock: Mutex::new(()),
    });
    if mode == Mode::Deaf && budget.take() {
        eprintln!("misbehave: not reading stdin on purpose");
        // Bounded, so a forgotten child ends on its own.
        std::thread::sleep(Duration::from_secs(30));
        std::process::exit(4);
    }
    if mode == Mode::Banner && budget.take() {
        eprintln!("misbehave: printing a banner on stdout on purpose");
        let mut stdout = io::stdout();
        // Starting with `C`, it looks like a header until `Content-` is ruled out.
        let _ = stdout.write_all(b"Connecting... misbehave provider 1.0 on stdio\n");
        let _ = stdout.flush();
    }
    let output = Output {
        budget: Arc::clone(&budget),
        decoder: Decoder::new(Limits::default()),
        stdout: io::stdout(),
        bytes,
    };
    let handler = Misbehaving {
        budget,
        delay,
        bytes,
        asked: Arc::new(Mutex::new(std::collections::HashMap::new())),
    };
    let mut config = ServerConfig::default();
    if let Some(path) = contract {
        let text = fs::read_to_string(&path).expect("misbehave: cannot read --contract");
        let contract =
            ProviderContract::from_json_str(&text).expect("misbehave: --contract is no contract");
        let contract = ServerContract::new(contract).expect("misbehave: --contract is refused");
        if mode != Mode::UnservedContract {
            config.add_resource(Resource {
                uri: "decision-gate://contract".to_owned(),
                name: "contract".to_owned(),
                title: Some("Capabilities contract".to_owned()),
                description: Some("This provider's capabilities contract.".to_owned()),
                mime_type: "application/json".to_owned(),
                text: contract.contract_json().into(),
            });
        }
        config = config.with_contract(contract);
    }
    if mode == Mode::Rfc8785Hash {
        config.hash_profile = HashProfile::Fixed(Profile::Rfc8785);
    }
    let service = Service::new(config, handler);
    let served = if mode == Mode::Fragile {
        let input = FragileInput {
            inner: io::stdin(),
            decoder: Decoder::new(Limits::default()),
        };
        evidence_wire_blocking::serve(service, 4, input, output)
    } else {
        evidence_wire_blocking::serve(service, 4, io::stdin(), output)
    };
    if let Err(error) = served {
        eprintln!("misbehave: {error}");
        std::process::exit(1);
    }
}

/// Appends `pid` (one line) to the file at `path`, in one write: several
/// providers append to the same file at once.
fn append_pid(path: &std::path::Path, pid: u32) {
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("misbehave: cannot open the pid file");
    file.write_all(format!("{pid}\n").as_bytes())
        .expect("misbehave: cannot write the pid file");
}

/// `--leave-behind`: `sleep 300` in a process group of its own, holding
/// this process's stdout and stderr; its pid goes to `path`.
#[cfg(unix)]
#[allow(clippy::zombie_processes)] // left behind on purpose: never waited for
fn leave_behind_a_holder(path: &std::path::Path) {
    use std::os::unix::process::CommandExt;
    let holder = std::process::Command::new("sleep")
        .arg("300")
        .stdin(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("misbehave: cannot start sleep");
    append_pid(path, holder.id());
    eprintln!(
        "misbehave: left sleep (pid {}) holding stdout and stderr, outside this process group, on purpose",
        holder.id()
    );
}

#[cfg(not(unix))]
fn leave_behind_a_holder(_path: &std::path::Path) {
    panic!("misbehave: --leave-behind needs Unix process groups");
}
