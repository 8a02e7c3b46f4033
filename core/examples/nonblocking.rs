//! The core in a readiness event loop (`mio`), with the embedder's two jobs
//! that the in-memory `by_hand` example hides: **partial writes** (a socket
//! takes only part of what is ready; the rest waits in the connection's
//! backlog until the socket is writable again) and **backpressure** (read
//! only while the server wants input and the backlog is small, so a peer
//! that does not read its answers is slowed instead of growing our memory).
//!
//! A provider listens on loopback; a client thread (plain blocking std I/O)
//! pipelines 1,000 calls, then reads the answers slowly, so the provider's
//! writes fill the socket and come back `WouldBlock`. The loop closes a
//! connection only when the server is finished *and* its backlog is
//! written: `Server::is_finished` means every byte was handed out, not that
//! it reached the peer.
//!
//! ```text
//! cargo run -p evidence-wire --example nonblocking
//! ```
#![allow(
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::panic
)] // an example: it stops loudly where a provider would answer an error

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream as StdStream;
use std::time::Duration;

use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
use evidence_wire::server::{Server, ServerConfig, ServerEvent};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

const LISTENER: Token = Token(0);
const CALLS: usize = 1000;
/// Read nothing more while this many answer bytes wait to be written.
const MAX_BACKLOG: usize = 256 * 1024;

/// One accepted connection: its socket, its server state machine and the
/// answer bytes the socket has not taken yet.
struct Connection {
    socket: TcpStream,
    server: Server,
    backlog: Vec<u8>,
    written: usize,
}

impl Connection {
    /// Reads what the socket has (while the server wants input and the
    /// backlog is small), answers every query, and writes what the socket
    /// takes. True when the connection is done and can be dropped.
    fn drive(&mut self) -> io::Result<bool> {
        let mut buffer = [0u8; 16 * 1024];
        // Edge-triggered readiness: go on until neither reading nor
        // writing makes progress (an answer frees a slot, so input held at
        // the server's cap may be read again in the same turn).
        loop {
            let mut progress = false;
            while self.server.wants_input() && self.backlog.len() - self.written < MAX_BACKLOG {
                match self.socket.read(&mut buffer) {
                    Ok(0) => {
                        self.server.handle_end_of_input();
                        progress = true;
                    }
                    Ok(read) => {
                        self.server.handle_input(&buffer[..read]);
                        progress = true;
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(error),
                }
            }
            while let Some(event) = self.server.poll_event() {
                if let ServerEvent::EvidenceQuery { ticket, query, .. } = event {
                    let value = EvidenceValue::json(&query.check_id).expect("a string");
                    // The ticket is in flight: the only possible error is a
                    // cancellation, when nothing is to be sent.
                    let _ = self
                        .server
                        .respond(ticket, EvidenceResult::with_value(value));
                }
            }
            // Appended to the backlog: one buffer, no allocation per answer.
            while self.server.poll_transmit_into(&mut self.backlog) {}
            while self.written < self.backlog.len() {
                match self.socket.write(&self.backlog[self.written..]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(count) => {
                        self.written += count;
                        progress = true;
                    }
                    // The socket is full: the rest waits for a writable event.
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(error),
                }
            }
            if self.written == self.backlog.len() {
                self.backlog.clear();
                self.written = 0;
            }
            if !progress {
                return Ok(self.server.is_finished() && self.backlog.is_empty());
            }
        }
    }
}

/// The client: pipelines every call, then reads the answers slowly.
fn client(address: std::net::SocketAddr) -> io::Result<usize> {
    let mut socket = StdStream::connect(address)?;
    let mut calls = Vec::new();
    for id in 0..CALLS {
        calls.extend_from_slice(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"evidence_query","arguments":{{"query":{{"provider_id":"demo","check_id":"check-{id}"}},"context":{{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{{"kind":"logical","value":1}}}}}}}}}}"#).as_bytes());
        calls.push(b'\n');
    }
    socket.write_all(&calls)?;
    socket.shutdown(std::net::Shutdown::Write)?;
    let mut answers = 0;
    for line in BufReader::new(socket).lines() {
        let line = line?;
        assert!(line.contains(r#""jsonrpc":"2.0""#), "{line}");
        answers += 1;
        if answers % 100 == 0 {
            // A slow reader: the provider's writes come back WouldBlock.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(answers)
}

fn main() -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut listener = TcpListener::bind("127.0.0.1:0".parse().expect("an address"))?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let address = listener.local_addr()?;
    let client = std::thread::spawn(move || client(address));

    let config = std::sync::Arc::new(ServerConfig::default());
    let mut connections: HashMap<Token, Connection> = HashMap::new();
    let mut next = 1;
    let mut events = Events::with_capacity(64);
    let mut served = 0;
    while served == 0 || !connections.is_empty() {
        poll.poll(&mut events, Some(Duration::from_secs(10)))?;
        for event in &events {
            if event.token() == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((mut socket, _)) => {
                            let token = Token(next);
                            next += 1;
                            poll.registry().register(
                                &mut socket,
                                token,
                                Interest::READABLE | Interest::WRITABLE,
                            )?;
                            let server = Server::new(std::sync::Arc::clone(&config));
                            connections.insert(
                                token,
                                Connection {
                                    socket,
                                    server,
                                    backlog: Vec::new(),
                                    written: 0,
                                },
                            );
                        }
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                        Err(error) => return Err(error),
                    }
                }
                continue;
            }
            let done = match connections.get_mut(&event.token()) {
                Some(connection) => connection.drive()?,
                None => false,
            };
            if done {
                connections.remove(&event.token());
                served += 1;
            }
        }
    }
    let answers = client.join().expect("the client thread")?;
    println!("{answers} answers over {served} connection(s), every byte written before closing");
    assert_eq!(answers, CALLS);
    Ok(())
}
