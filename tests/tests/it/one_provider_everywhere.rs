//! One provider value, every adapter (issue 23 item 2): the same
//! `evidence_wire_provider::Provider` (an inline check, a blocking check,
//! an async check and one that panics) served unchanged by the blocking
//! stdio server, the tokio stdio and HTTP servers, and the smol stdio
//! server on smol and on async-std gives the same answers, and the panic
//! is answered `internal_error` everywhere.
//!
//! Every server runs on loopback or in memory and is bounded: stdio input
//! ends after the queries, the HTTP server stops after its requests.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::io::{Cursor, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evidence_wire_provider::{Check, CheckContext, CheckError, NoParams, Provider};
use serde_json::{Value, json};

/// The checks, by id: how each one runs.
const CHECKS: [&str; 4] = ["inline", "blocking", "async", "boom"];

fn provider() -> Provider {
    Provider::new("everywhere", "Answers on every adapter.")
        .check(
            Check::new(
                "inline",
                "Computed where the query is read.",
                |_: NoParams, _: &CheckContext| Ok(1_u64),
            )
            .inline(),
        )
        .check(Check::new(
            "blocking",
            "Computed on the blocking pool.",
            |_: NoParams, context: &CheckContext| {
                context.set_ref("memory://blocking");
                Ok("from the pool".to_owned())
            },
        ))
        .check(Check::new_async(
            "async",
            "Computed by a future.",
            |_: NoParams, _: CheckContext| async { Ok::<bool, CheckError>(true) },
        ))
        .check(Check::new(
            "boom",
            "Panics.",
            |_: NoParams, _: &CheckContext| -> Result<bool, CheckError> {
                panic!("a bug in the check, on purpose")
            },
        ))
}

/// The `evidence_query` call of `check` with JSON-RPC id `id`.
fn call(id: usize, check: &str) -> String {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {
            "query": {"provider_id": "everywhere", "check_id": check, "params": {}},
            "context": {"tenant_id": 1, "namespace_id": 1, "run_id": "r", "scenario_id": "s",
                "stage_id": "st", "trigger_id": "t",
                "trigger_time": {"kind": "logical", "value": 1}}
        }}
    })
    .to_string()
}

fn stdio_input() -> Vec<u8> {
    CHECKS
        .iter()
        .enumerate()
        .flat_map(|(id, check)| format!("{}\n", call(id, check)).into_bytes())
        .collect()
}

/// The EvidenceResult of each answer, by JSON-RPC id.
fn results(lines: &[u8]) -> Vec<Value> {
    let mut answers: Vec<(u64, Value)> = lines
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            let message: Value = serde_json::from_slice(line).expect("one JSON answer a line");
            let id = message["id"].as_u64().expect("an id");
            (id, message["result"]["content"][0]["json"].clone())
        })
        .collect();
    answers.sort_by_key(|(id, _)| *id);
    answers.into_iter().map(|(_, result)| result).collect()
}

fn blocking() -> Vec<u8> {
    /// The server needs a `'static` writer: the bytes land here.
    #[derive(Clone, Default)]
    struct Output(Arc<Mutex<Vec<u8>>>);
    impl Write for Output {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("output lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let output = Output::default();
    evidence_wire_blocking::serve(provider(), 2, Cursor::new(stdio_input()), output.clone())
        .expect("the blocking server serves");
    output.0.lock().expect("output lock").clone()
}

fn tokio_stdio() -> Vec<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut output = Vec::new();
    runtime
        .block_on(evidence_wire_tokio::serve(
            provider(),
            Cursor::new(stdio_input()),
            &mut output,
        ))
        .expect("the tokio server serves");
    output
}

fn smol_stdio(on_async_std: bool) -> Vec<u8> {
    let mut output = smol::io::Cursor::new(Vec::new());
    let serving = evidence_wire_smol::serve(
        provider(),
        smol::io::Cursor::new(stdio_input()),
        &mut output,
    );
    if on_async_std {
        async_std::task::block_on(serving)
    } else {
        smol::block_on(serving)
    }
    .expect("the smol server serves");
    output.into_inner()
}

/// Posts each call alone to `/rpc` of the tokio HTTP server; the answers,
/// one a line.
fn tokio_http() -> Vec<u8> {
    let (address_tx, address_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let config = evidence_wire_tokio::HttpServerConfig::default();
            let listener =
                evidence_wire_tokio::bind_http(SocketAddr::from(([127, 0, 0, 1], 0)), &config)
                    .await
                    .expect("bind 127.0.0.1");
            address_tx
                .send(listener.local_addr().expect("local address"))
                .expect("report the address");
            evidence_wire_tokio::serve_http(listener, provider(), config, async move {
                let _ = stop_rx.await;
            })
            .await
            .expect("the HTTP server runs");
        });
    });
    let address = address_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the HTTP server starts");
    let mut lines = Vec::new();
    for (id, check) in CHECKS.iter().enumerate() {
        lines.extend(post(address, &call(id, check)));
        lines.push(b'\n');
    }
    let _ = stop_tx.send(());
    server.join().expect("the HTTP server thread ends");
    lines
}

/// One HTTP/1.1 request on its own connection; returns the body.
fn post(address: SocketAddr, body: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let request = format!(
        "POST /rpc HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).expect("read the reply");
    let split = reply
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("a head and a body");
    reply.split_off(split + 4)
}

#[test]
fn one_provider_value_answers_alike_on_every_adapter() {
    let expected = results(&blocking());
    assert_eq!(expected.len(), CHECKS.len(), "{expected:?}");
    assert_eq!(expected[0]["value"]["value"], 1);
    assert_eq!(expected[1]["value"]["value"], "from the pool");
    assert_eq!(expected[1]["evidence_ref"]["uri"], "memory://blocking");
    assert_eq!(expected[2]["value"]["value"], true);
    assert_eq!(expected[3]["error"]["code"], "internal_error");
    for result in &expected[..3] {
        assert_eq!(result["evidence_hash"]["algorithm"], "sha256", "{result}");
    }
    for (adapter, output) in [
        ("tokio stdio", tokio_stdio()),
        ("tokio HTTP", tokio_http()),
        ("smol on smol", smol_stdio(false)),
        ("smol on async-std", smol_stdio(true)),
    ] {
        assert_eq!(
            results(&output),
            expected,
            "{adapter} answers differently from the blocking adapter"
        );
    }
}
