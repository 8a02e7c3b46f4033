//! A ticket tracker on loopback for the release-readiness example
//! (`examples/release_readiness.rs`), std only, so that the tests crate
//! (`tests/tests/it/examples.rs`) includes it too: `GET
//! /issues?label=L&state=open` with `Authorization: Bearer s3cret` answers
//! a JSON array of tickets (two for `release-blocker`, none for other
//! labels); any other token, or none, 401; the label `stall` answers after
//! 10 s.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The token the tracker accepts.
pub const TOKEN: &str = "s3cret";

/// Starts the tracker on a thread of its own (it lives as long as the test
/// process); its base URL, `http://127.0.0.1:PORT`.
pub fn start() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the tracker");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream));
        }
    });
    url
}

fn answer(mut stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut head = Vec::new();
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|read| read > 0) && line != "\r\n" {
        head.push(std::mem::take(&mut line));
    }
    let target = head.first().and_then(|request| request.split(' ').nth(1));
    let authorized =
        head.iter()
            .filter_map(|header| header.split_once(':'))
            .any(|(name, value)| {
                name.eq_ignore_ascii_case("authorization")
                    && value.trim() == format!("Bearer {TOKEN}")
            });
    let (status, body) = match target {
        _ if !authorized => ("401 Unauthorized", r#"{"error":"bad token"}"#),
        Some("/issues?label=release-blocker&state=open") => ("200 OK", r#"[{"id":1},{"id":2}]"#),
        Some("/issues?label=stall&state=open") => {
            std::thread::sleep(Duration::from_secs(10));
            ("200 OK", "[]")
        }
        Some(target) if target.starts_with("/issues?label=") => ("200 OK", "[]"),
        _ => ("404 Not Found", "{}"),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}
