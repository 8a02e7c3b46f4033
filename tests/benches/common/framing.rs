//! The framing workloads shared by `frame.rs` (criterion timings) and
//! `instructions.rs` (callgrind instruction counts): each side splits a
//! stream of messages and parses what it parses (see `frame.rs`), fed
//! `chunk` bytes at a time. Each returns the number of messages it saw.

#![allow(dead_code)] // each bench uses a subset

use std::hint::black_box;
use std::io::{BufReader, Read};

use bytes::BytesMut;
use evidence_wire::envelope::{Incoming, Message, Policy, validate};
use evidence_wire::frame::{Decoder, Framing, Limits, encode};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::async_rw::JsonRpcMessageCodec;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_util::codec::LinesCodec;

/// The feedings: label and chunk size.
pub const FEEDINGS: [(&str, usize); 3] = [("whole", usize::MAX), ("4KiB", 4096), ("1B", 1)];

pub fn stream(framing: Framing, body: &[u8], copies: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..copies {
        encode(framing, body, &mut out).expect("benchmark body is encodable");
    }
    out
}

pub fn limits() -> Limits {
    Limits {
        max_header_bytes: 8 * 1024,
        max_body_bytes: 2 * 1024 * 1024,
    }
}

/// Ours: frames (and envelopes, when `envelope`) in `input` fed `chunk` bytes at a time.
pub fn ours(framing: Framing, input: &[u8], chunk: usize, envelope: bool) -> usize {
    let policy = Policy::mcp();
    let mut decoder = Decoder::with_framing(framing, limits());
    let mut count = 0;
    for piece in input.chunks(chunk) {
        decoder.push(piece);
        while let Some(frame) = decoder.poll_frame() {
            let frame = frame.expect("benchmark input frames");
            if envelope {
                match validate(&frame.body, &policy) {
                    Ok(Incoming::Single(Message::Request(request))) => {
                        black_box((&request.id, &request.method, request.params));
                    }
                    other => panic!("benchmark message rejected: {other:?}"),
                }
            } else {
                black_box(&frame.body);
            }
            count += 1;
        }
    }
    count
}

/// A `Read` that returns at most `chunk` bytes per call, like a pipe that
/// delivers its data in pieces.
pub struct Chunked<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.chunk.min(buf.len()).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        buf[..n].copy_from_slice(head);
        self.data = rest;
        Ok(n)
    }
}

pub fn lsp(input: &[u8], chunk: usize) -> usize {
    let mut reader = BufReader::with_capacity(8192, Chunked { data: input, chunk });
    let mut count = 0;
    while let Some(message) = lsp_server::Message::read(&mut reader).expect("lsp-server reads") {
        black_box(message);
        count += 1;
    }
    count
}

/// Drives a tokio-util decoder the way `FramedRead` does: append a piece,
/// decode until `None`.
pub fn drive<D, T>(mut decoder: D, input: &[u8], chunk: usize, mut each: impl FnMut(T)) -> usize
where
    D: tokio_util::codec::Decoder<Item = T>,
    D::Error: std::fmt::Debug,
{
    let mut buffer = BytesMut::with_capacity(8192);
    let mut count = 0;
    for piece in input.chunks(chunk) {
        buffer.extend_from_slice(piece);
        while let Some(item) = decoder.decode(&mut buffer).expect("peer decodes") {
            each(item);
            count += 1;
        }
    }
    count
}

pub fn rmcp_codec(input: &[u8], chunk: usize) -> usize {
    drive(
        JsonRpcMessageCodec::<ClientJsonRpcMessage>::new(),
        input,
        chunk,
        |message| {
            black_box(message);
        },
    )
}

/// The envelope split a hand-rolled server would do with serde.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[allow(dead_code)]
    jsonrpc: &'a str,
    id: serde_json::Value,
    method: String,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

pub fn lines_serde(input: &[u8], chunk: usize) -> usize {
    drive(LinesCodec::new(), input, chunk, |line: String| {
        let envelope: Envelope<'_> = serde_json::from_str(&line).expect("valid envelope");
        black_box((&envelope.id, &envelope.method, envelope.params));
    })
}

pub fn ignored_any(bodies: &[Vec<u8>]) -> usize {
    for body in bodies {
        serde_json::from_slice::<serde::de::IgnoredAny>(body).expect("valid JSON");
    }
    bodies.len()
}
