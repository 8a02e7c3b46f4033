//! Framing: splitting a byte stream into message bodies, and back.
//!
//! Two framings exist on stdio. Decision Gate and LSP-style peers put
//! `Content-Length: N` headers before each body; standard MCP clients send
//! one JSON message per line (newline-delimited JSON, "NDJSON"). [`Decoder`]
//! handles both and, unless told which one to expect, picks the framing from
//! the first non-whitespace byte of the stream (`{` or `[` means NDJSON,
//! anything else means headers) and reports it through
//! [`Decoder::framing`] so the writer can mirror it with [`encode`].
//! [`Decoder::with_fallback`] detects the same way except that a stream
//! opening with neither JSON nor a `Content-` header name (a banner line a
//! peer printed on stdout) gets the framing the caller expects.
//!
//! Limits: a header block may hold at most [`Limits::max_header_bytes`] and a
//! body at most [`Limits::max_body_bytes`]. Both are checked before anything
//! is buffered: a frame that declares too many bytes is skipped as its bytes
//! arrive and never stored, so a header claiming 10^12 bytes costs nothing.
//! A caller that wants to know which request a skipped message answered
//! can ask for its first bytes ([`Decoder::keep_skipped_prefix`], at most
//! the number of bytes it names; off by default).
//!
//! Errors are recoverable (the stream is still in sync, or the decoder has
//! found its way back: answer with an error and go on) or fatal (sticky:
//! every later call returns the same error). The rules are written out in
//! `spec/framing.md`.
//!
//! Contract: after each [`Decoder::push`], call [`Decoder::poll_frame`] until
//! it returns `None`. Every complete frame already buffered is returned
//! before more input is needed.
//!
//! ```
//! use evidence_wire::frame::{encode, Decoder, Framing, Limits};
//!
//! let mut decoder = Decoder::new(Limits::default());
//! decoder.push(b"Content-Length: 2\r\n\r\n{}Content-Length: x\r\n\r\n");
//! let mut replies = Vec::new();
//! while let Some(frame) = decoder.poll_frame() {
//!     match frame {
//!         Ok(frame) => assert_eq!(frame.body.as_ref(), b"{}"),
//!         // Recoverable: answer with a JSON-RPC error and go on.
//!         Err(error) if !error.is_fatal() => {
//!             let framing = decoder.framing().unwrap_or(Framing::ContentLength);
//!             encode(framing, br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid MCP envelope"}}"#, &mut replies)?;
//!         }
//!         Err(_fatal) => break,
//!     }
//! }
//! assert_eq!(decoder.framing(), Some(Framing::ContentLength));
//! assert!(replies.starts_with(b"Content-Length: 84\r\n\r\n"));
//! assert_eq!(decoder.finish(), Ok(()));
//! # Ok::<(), evidence_wire::frame::FrameEncodeError>(())
//! ```

use alloc::vec::Vec;
use bytes::{Buf, Bytes, BytesMut};

/// Size limits of one frame, set by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes a Content-Length header block may take, blank line included.
    pub max_header_bytes: usize,
    /// Most bytes one message body (or one NDJSON line) may take.
    pub max_body_bytes: usize,
}

impl Default for Limits {
    /// 8 KiB of headers and 1 MiB of body.
    fn default() -> Self {
        Limits {
            max_header_bytes: 8 * 1024,
            max_body_bytes: 1024 * 1024,
        }
    }
}

/// How messages are delimited on a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Framing {
    /// `Content-Length: N` headers, a blank line, then N bytes of body.
    ContentLength,
    /// One JSON message per line, ended by `\n`.
    NewlineDelimited,
}

/// One complete message body taken from the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The body bytes: a zero-copy slice of the decoder's buffer.
    pub body: Bytes,
    /// Stream offset of the body's first byte.
    pub offset: u64,
}

/// What went wrong while splitting a stream into frames.
///
/// Offsets count bytes from the start of the stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The declared body length is over the limit; the body is skipped as it
    /// arrives, never buffered. Recoverable.
    #[error(
        "frame at byte {offset} declares {declared} body bytes, over the limit of {limit}; the body is skipped (raise max_body_bytes if such messages are legitimate)"
    )]
    BodyTooLarge {
        /// Declared length.
        declared: u64,
        /// The configured limit.
        limit: usize,
        /// Offset of the header block.
        offset: u64,
    },
    /// A newline-delimited message is longer than the limit; it is skipped
    /// up to the next newline. Recoverable.
    #[error(
        "line at byte {offset} is longer than the limit of {limit} bytes; skipped to the next newline"
    )]
    LineTooLong {
        /// The configured limit.
        limit: usize,
        /// Offset of the line.
        offset: u64,
    },
    /// A header block grew over the limit without ending in a blank line.
    /// The decoder skips to the next `Content-Length` header. Recoverable.
    #[error(
        "header block at byte {offset} is longer than the limit of {limit} bytes without a blank line; skipping to the next Content-Length header"
    )]
    HeaderTooLarge {
        /// The configured limit.
        limit: usize,
        /// Offset of the header block.
        offset: u64,
    },
    /// A header line is not `Name: value`. The decoder skips to the next
    /// `Content-Length` header. Recoverable.
    #[error(
        "malformed header line at byte {offset}: expected `Name: value`; skipping to the next Content-Length header"
    )]
    MalformedHeaderLine {
        /// Offset of the line.
        offset: u64,
    },
    /// The Content-Length value is not a plain decimal number (signs, hex,
    /// garbage and empty values are refused). Recoverable by resync.
    #[error(
        "invalid Content-Length value at byte {offset}: only decimal digits are allowed; skipping to the next Content-Length header"
    )]
    InvalidContentLength {
        /// Offset of the header line.
        offset: u64,
    },
    /// The Content-Length value does not fit in 64 bits: the stream can be
    /// neither read nor skipped. Fatal.
    #[error(
        "Content-Length at byte {offset} does not fit in 64 bits; the stream cannot be resynchronized and must be closed"
    )]
    ContentLengthOverflow {
        /// Offset of the header line.
        offset: u64,
    },
    /// Two Content-Length headers in one block disagree. Recoverable by resync.
    #[error(
        "conflicting Content-Length headers ({first} and {second}) in the block at byte {offset}; skipping to the next Content-Length header"
    )]
    ConflictingContentLength {
        /// The first value.
        first: u64,
        /// The differing value.
        second: u64,
        /// Offset of the header block.
        offset: u64,
    },
    /// A header block has no Content-Length. Recoverable by resync.
    #[error(
        "header block at byte {offset} has no Content-Length header; skipping to the next Content-Length header"
    )]
    MissingContentLength {
        /// Offset of the header block.
        offset: u64,
    },
    /// Content-Type names a charset other than UTF-8; the body is skipped and
    /// the stream stays in sync. Recoverable.
    #[error(
        "Content-Type at byte {offset} names a charset other than utf-8; the body is skipped (send UTF-8 JSON)"
    )]
    UnsupportedCharset {
        /// Offset of the header block.
        offset: u64,
    },
    /// The input ended inside a frame.
    #[error(
        "input ended inside the frame at byte {offset}: expected {expected} more bytes, got {received}"
    )]
    Truncated {
        /// Bytes the frame still needed (for a header: at least one).
        expected: u64,
        /// Bytes of the unfinished frame that did arrive.
        received: u64,
        /// Offset of the unfinished frame.
        offset: u64,
    },
    /// Input was pushed after [`Decoder::finish`]. Fatal: it is an API misuse.
    #[error(
        "input pushed after the end of the stream was signalled; make a new decoder per stream"
    )]
    InputAfterFinish,
}

impl FrameError {
    /// True when the stream cannot go on: the error is sticky.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            FrameError::ContentLengthOverflow { .. } | FrameError::InputAfterFinish
        )
    }

    /// Stream offset the error refers to.
    pub fn offset(&self) -> u64 {
        match self {
            FrameError::BodyTooLarge { offset, .. }
            | FrameError::LineTooLong { offset, .. }
            | FrameError::HeaderTooLarge { offset, .. }
            | FrameError::MalformedHeaderLine { offset }
            | FrameError::InvalidContentLength { offset }
            | FrameError::ContentLengthOverflow { offset }
            | FrameError::ConflictingContentLength { offset, .. }
            | FrameError::MissingContentLength { offset }
            | FrameError::UnsupportedCharset { offset }
            | FrameError::Truncated { offset, .. } => *offset,
            FrameError::InputAfterFinish => 0,
        }
    }
}

/// Why a body could not be framed for sending.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameEncodeError {
    /// Newline-delimited framing cannot carry a body holding a raw `\n`
    /// (serialize the JSON compactly; JSON strings escape newlines).
    #[error(
        "body contains a raw newline at byte {offset}; newline-delimited framing needs compact JSON"
    )]
    EmbeddedNewline {
        /// Offset of the newline in the body.
        offset: usize,
    },
}

/// Writes `body` framed as `framing` to the end of `out`.
pub fn encode(framing: Framing, body: &[u8], out: &mut Vec<u8>) -> Result<(), FrameEncodeError> {
    match framing {
        Framing::ContentLength => {
            out.reserve(body.len() + 32);
            out.extend_from_slice(b"Content-Length: ");
            push_decimal(out, body.len() as u64);
            out.extend_from_slice(b"\r\n\r\n");
            out.extend_from_slice(body);
        }
        Framing::NewlineDelimited => {
            if let Some(offset) = memchr::memchr(b'\n', body) {
                return Err(FrameEncodeError::EmbeddedNewline { offset });
            }
            out.reserve(body.len() + 1);
            out.extend_from_slice(body);
            out.push(b'\n');
        }
    }
    Ok(())
}

fn push_decimal(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        if let Some(slot) = digits.get_mut(start) {
            *slot = b'0' + (value % 10) as u8;
        }
        value /= 10;
        if value == 0 || start == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(start..).unwrap_or_default());
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";
const CONTENT_LENGTH: &[u8] = b"content-length";
/// What a header line of a Content-Length peer starts with (`Content-Length`,
/// `Content-Type`), case-insensitively.
const CONTENT_DASH: &[u8] = b"content-";

#[derive(Clone, Copy, Debug)]
enum State {
    /// Auto mode: nothing but whitespace seen yet.
    Detecting,
    /// Reading a header block; `scan` is where the next unread line starts,
    /// `length` what the block's lines said so far.
    Header { scan: usize, block: HeaderBlock },
    /// Reading a body of `len` bytes (the header block is already consumed).
    Body { len: usize, offset: u64 },
    /// Discarding `remaining` bytes of a body that is not delivered.
    Skipping { remaining: u64 },
    /// Keeping the first `want` bytes of a body that is not delivered
    /// ([`Decoder::keep_skipped_prefix`]) before its error, held in
    /// `Decoder::held`, is returned; `remaining` body bytes are still due.
    Capturing { remaining: u64, want: usize },
    /// Discarding bytes until a `content-length` header name starts a line.
    Resync,
    /// Reading newline-delimited lines; `scan` bytes of the buffer hold no `\n`.
    Lines { scan: usize },
    /// Discarding an over-long line up to its newline.
    SkippingLine,
}

#[derive(Clone, Copy, Debug, Default)]
struct HeaderBlock {
    length: Option<u64>,
    bad_charset: bool,
    started: bool,
}

/// Splits a byte stream into frames; see the module docs.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    framing: Option<Framing>,
    /// What detection picks when the stream opens with neither `{`/`[` nor
    /// `Content-` (any case: `Content-Length`, `Content-Type`).
    fallback: Framing,
    state: State,
    buffer: BytesMut,
    /// Stream offset of `buffer[0]`.
    base: u64,
    /// Nothing but whitespace has been seen (for BOM stripping).
    at_stream_start: bool,
    finished: bool,
    fatal: Option<FrameError>,
    /// The fatal error was returned since the last push.
    fatal_reported: bool,
    /// Most bytes of a skipped body or line kept ([`Decoder::keep_skipped_prefix`]).
    prefix_limit: usize,
    /// The first bytes of the last skipped body or line.
    prefix: Vec<u8>,
    /// A skip error waiting for its prefix ([`State::Capturing`]).
    held: Option<FrameError>,
}

impl Decoder {
    /// A decoder that detects the framing from the first non-whitespace byte.
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            framing: None,
            fallback: Framing::ContentLength,
            state: State::Detecting,
            buffer: BytesMut::new(),
            base: 0,
            at_stream_start: true,
            finished: false,
            fatal: None,
            fatal_reported: false,
            prefix_limit: 0,
            prefix: Vec::new(),
            held: None,
        }
    }

    /// The same decoder keeping the first `bytes` bytes of every body or
    /// line it skips for [`FrameError::BodyTooLarge`],
    /// [`FrameError::LineTooLong`] or [`FrameError::UnsupportedCharset`],
    /// readable with [`Decoder::skipped_prefix`] right after that error is
    /// returned: enough for a caller to find which request the message
    /// answered. `0` (the default) keeps nothing.
    ///
    /// For a Content-Length frame the error is then returned once that many
    /// body bytes (or the whole body, if shorter) have arrived, rather than
    /// as soon as the header block ends. Memory: at most `bytes` more.
    pub fn keep_skipped_prefix(mut self, bytes: usize) -> Self {
        self.prefix_limit = bytes;
        self
    }

    /// The first bytes (at most [`Decoder::keep_skipped_prefix`]) of the
    /// body or line that the error just returned by [`Decoder::poll_frame`]
    /// skipped; empty for other errors, or when nothing is kept.
    pub fn skipped_prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The error of a body being skipped whose first bytes are still
    /// awaited ([`Decoder::keep_skipped_prefix`]): it will be returned by
    /// [`Decoder::poll_frame`] once they arrive. `None` otherwise.
    pub fn held_error(&self) -> Option<&FrameError> {
        self.held.as_ref()
    }

    /// Starts remembering the skipped message that begins at `buffer[..len]`
    /// (the part of it already buffered).
    fn keep_prefix_of(&mut self, len: usize) {
        self.prefix.clear();
        let keep = len.min(self.prefix_limit);
        if let Some(start) = self.buffer.get(..keep) {
            self.prefix.extend_from_slice(start);
        }
    }

    /// A decoder that detects the framing like [`Decoder::new`], except
    /// that a stream that opens (after whitespace) with neither JSON (`{`,
    /// `[`) nor a `Content-` header name (any case; up to 8 bytes are
    /// awaited to tell) selects `fallback`: a caller that speaks NDJSON to a
    /// peer whose stdout begins with a banner line then drops that one line
    /// instead of waiting for headers that never come. ([`Decoder::new`] is
    /// this with `Framing::ContentLength`.)
    pub fn with_fallback(fallback: Framing, limits: Limits) -> Self {
        let mut decoder = Decoder::new(limits);
        decoder.fallback = fallback;
        decoder
    }

    /// A decoder for a known framing.
    pub fn with_framing(framing: Framing, limits: Limits) -> Self {
        let mut decoder = Decoder::new(limits);
        decoder.set_framing(framing);
        decoder
    }

    fn set_framing(&mut self, framing: Framing) {
        self.framing = Some(framing);
        self.state = match framing {
            Framing::ContentLength => State::Header {
                scan: 0,
                block: HeaderBlock::default(),
            },
            Framing::NewlineDelimited => State::Lines { scan: 0 },
        };
    }

    /// The framing in use: `None` until the auto-detecting decoder has seen
    /// a non-whitespace byte.
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    /// Bytes currently held by the decoder.
    pub fn buffered_len(&self) -> usize {
        self.buffer.len()
    }

    /// Feeds bytes. Never fails: problems surface from [`Decoder::poll_frame`].
    ///
    /// Bytes of a frame being skipped are dropped here without being stored.
    pub fn push(&mut self, mut input: &[u8]) {
        if self.fatal.is_some() {
            self.fatal_reported = false;
            return;
        }
        if self.finished {
            self.fatal = Some(FrameError::InputAfterFinish);
            self.fatal_reported = false;
            return;
        }
        if !self.buffer.is_empty() {
            self.buffer.extend_from_slice(input);
            return;
        }
        // Fast paths that drop skipped bytes before they are buffered.
        match self.state {
            State::Skipping { remaining } => {
                let take = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(input.len());
                self.base += take as u64;
                input = input.get(take..).unwrap_or_default();
                let remaining = remaining - take as u64;
                self.state = if remaining == 0 {
                    State::Header {
                        scan: 0,
                        block: HeaderBlock::default(),
                    }
                } else {
                    State::Skipping { remaining }
                };
            }
            State::SkippingLine => match memchr::memchr(b'\n', input) {
                Some(at) => {
                    self.base += at as u64 + 1;
                    input = input.get(at + 1..).unwrap_or_default();
                    self.state = State::Lines { scan: 0 };
                }
                None => {
                    self.base += input.len() as u64;
                    input = &[];
                }
            },
            _ => {}
        }
        self.buffer.extend_from_slice(input);
    }

    /// Signals the end of input. `Ok` on a clean end (nothing, or only blank
    /// lines, left over); [`FrameError::Truncated`] when a frame was cut off.
    ///
    /// Call [`Decoder::poll_frame`] until `None` first: frames still buffered
    /// are not lost by finishing.
    pub fn finish(&mut self) -> Result<(), FrameError> {
        if let Some(error) = &self.fatal {
            return Err(error.clone());
        }
        self.finished = true;
        let offset = self.base;
        let received = self.buffer.len() as u64;
        match self.state {
            State::Detecting | State::Resync | State::SkippingLine => Ok(()),
            State::Header { .. } | State::Lines { .. } => {
                if self
                    .buffer
                    .iter()
                    .all(|byte| matches!(byte, b' ' | b'\t' | b'\r' | b'\n'))
                {
                    Ok(())
                } else {
                    Err(FrameError::Truncated {
                        expected: 1,
                        received,
                        offset,
                    })
                }
            }
            State::Body { len, offset } => Err(FrameError::Truncated {
                expected: (len as u64).saturating_sub(received),
                received,
                offset,
            }),
            State::Skipping { remaining } | State::Capturing { remaining, .. } => {
                Err(FrameError::Truncated {
                    expected: remaining,
                    received: 0,
                    offset,
                })
            }
        }
    }

    /// Returns the next complete frame or error, or `None` when more input is
    /// needed.
    ///
    /// After a fatal error the decoder is dead: the error is returned once
    /// after every [`Decoder::push`] (then `None`, so polling loops end), and
    /// by every [`Decoder::finish`].
    pub fn poll_frame(&mut self) -> Option<Result<Frame, FrameError>> {
        if let Some(error) = &self.fatal {
            if self.fatal_reported {
                return None;
            }
            self.fatal_reported = true;
            return Some(Err(error.clone()));
        }
        loop {
            let step = match self.state {
                State::Detecting => self.step_detect(),
                State::Header { scan, block } => self.step_header(scan, block),
                State::Body { len, offset } => self.step_body(len, offset),
                State::Skipping { remaining } => self.step_skip(remaining),
                State::Capturing { remaining, want } => self.step_capture(remaining, want),
                State::Resync => self.step_resync(),
                State::Lines { scan } => self.step_lines(scan),
                State::SkippingLine => self.step_skip_line(),
            };
            match step {
                Step::Continue => continue,
                Step::NeedInput => return None,
                Step::Frame(frame) => return Some(Ok(frame)),
                Step::Error(error) => {
                    if !matches!(
                        error,
                        FrameError::BodyTooLarge { .. }
                            | FrameError::LineTooLong { .. }
                            | FrameError::UnsupportedCharset { .. }
                    ) {
                        self.prefix.clear();
                    }
                    if error.is_fatal() {
                        self.fatal = Some(error.clone());
                        self.fatal_reported = true;
                        self.buffer = BytesMut::new();
                    }
                    return Some(Err(error));
                }
            }
        }
    }

    /// Drops a UTF-8 byte order mark at the very start of the stream.
    /// Returns true while the buffer is a strict prefix of one (wait for more).
    fn strip_bom_at_start(&mut self) -> bool {
        if !self.at_stream_start {
            return false;
        }
        if self.buffer.len() < UTF8_BOM.len() && UTF8_BOM.starts_with(&self.buffer) {
            return true;
        }
        if self.buffer.starts_with(UTF8_BOM) {
            self.consume(UTF8_BOM.len());
        }
        self.at_stream_start = false;
        false
    }

    fn consume(&mut self, count: usize) {
        let count = count.min(self.buffer.len());
        self.buffer.advance(count);
        self.base += count as u64;
    }

    fn step_detect(&mut self) -> Step {
        if self.strip_bom_at_start() {
            return Step::NeedInput;
        }
        let skip = self
            .buffer
            .iter()
            .position(|byte| !matches!(byte, b' ' | b'\t' | b'\r' | b'\n'));
        match skip {
            None => {
                let all = self.buffer.len();
                self.consume(all);
                Step::NeedInput
            }
            Some(at) => {
                self.consume(at);
                let head = self
                    .buffer
                    .get(..self.buffer.len().min(CONTENT_DASH.len()))
                    .unwrap_or_default();
                let names_content = CONTENT_DASH
                    .get(..head.len())
                    .is_some_and(|prefix| prefix.eq_ignore_ascii_case(head));
                let framing = match head.first() {
                    Some(b'{' | b'[') => Framing::NewlineDelimited,
                    _ if self.fallback == Framing::ContentLength => Framing::ContentLength,
                    _ if !names_content => self.fallback,
                    // `Content-` may still be arriving: decide on more bytes.
                    _ if head.len() < CONTENT_DASH.len() => return Step::NeedInput,
                    _ => Framing::ContentLength,
                };
                self.set_framing(framing);
                Step::Continue
            }
        }
    }

    fn step_header(&mut self, mut scan: usize, mut block: HeaderBlock) -> Step {
        loop {
            let Some(rest) = self.buffer.get(scan..) else {
                return Step::NeedInput;
            };
            let Some(newline) = memchr::memchr(b'\n', rest) else {
                if self.buffer.len() > self.limits.max_header_bytes {
                    return self.header_too_large();
                }
                self.state = State::Header { scan, block };
                return Step::NeedInput;
            };
            let line_end = scan + newline;
            let line = self.buffer.get(scan..line_end).unwrap_or_default();
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line_offset = self.base + scan as u64;
            if line.is_empty() {
                if !block.started {
                    // Blank lines between frames are tolerated.
                    self.consume(line_end + 1);
                    scan = 0;
                    continue;
                }
                // The blank line counts against the limit too, as it does
                // when the block arrives in pieces (found by fuzzing).
                if line_end + 1 > self.limits.max_header_bytes {
                    return self.header_too_large();
                }
                let block_offset = self.base;
                self.consume(line_end + 1);
                return self.finish_header_block(block, block_offset);
            }
            if line_end + 1 > self.limits.max_header_bytes {
                return self.header_too_large();
            }
            block.started = true;
            let Some(colon) = memchr::memchr(b':', line) else {
                self.consume(line_end + 1);
                return self.resync_after(FrameError::MalformedHeaderLine {
                    offset: line_offset,
                });
            };
            let name = line.get(..colon).unwrap_or_default();
            let value = trim_ows(line.get(colon + 1..).unwrap_or_default());
            if name.is_empty() || !name.iter().all(|b| is_token_byte(*b)) {
                self.consume(line_end + 1);
                return self.resync_after(FrameError::MalformedHeaderLine {
                    offset: line_offset,
                });
            }
            if name.eq_ignore_ascii_case(CONTENT_LENGTH) {
                let length = match parse_decimal(value) {
                    Ok(length) => length,
                    Err(DecimalError::Overflow) => {
                        return Step::Error(FrameError::ContentLengthOverflow {
                            offset: line_offset,
                        });
                    }
                    Err(DecimalError::Invalid) => {
                        self.consume(line_end + 1);
                        return self.resync_after(FrameError::InvalidContentLength {
                            offset: line_offset,
                        });
                    }
                };
                match block.length {
                    Some(first) if first != length => {
                        let offset = self.base;
                        self.consume(line_end + 1);
                        return self.resync_after(FrameError::ConflictingContentLength {
                            first,
                            second: length,
                            offset,
                        });
                    }
                    _ => block.length = Some(length),
                }
            } else if name.eq_ignore_ascii_case(b"content-type") && !charset_is_utf8(value) {
                block.bad_charset = true;
            }
            scan = line_end + 1;
        }
    }

    fn header_too_large(&mut self) -> Step {
        let error = FrameError::HeaderTooLarge {
            limit: self.limits.max_header_bytes,
            offset: self.base,
        };
        // Drop the start of the block so the resync cannot match it again.
        self.consume(1);
        self.resync_after(error)
    }

    fn resync_after(&mut self, error: FrameError) -> Step {
        self.state = State::Resync;
        Step::Error(error)
    }

    fn finish_header_block(&mut self, block: HeaderBlock, offset: u64) -> Step {
        let Some(length) = block.length else {
            return self.resync_after(FrameError::MissingContentLength { offset });
        };
        let fits = usize::try_from(length)
            .ok()
            .filter(|len| *len <= self.limits.max_body_bytes);
        match fits {
            Some(len) if !block.bad_charset => {
                self.state = State::Body { len, offset };
                Step::Continue
            }
            _ => {
                let error = if block.bad_charset && fits.is_some() {
                    FrameError::UnsupportedCharset { offset }
                } else {
                    FrameError::BodyTooLarge {
                        declared: length,
                        limit: self.limits.max_body_bytes,
                        offset,
                    }
                };
                self.prefix.clear();
                let want = usize::try_from(length)
                    .unwrap_or(usize::MAX)
                    .min(self.prefix_limit);
                if want == 0 {
                    self.state = State::Skipping { remaining: length };
                    return Step::Error(error);
                }
                // The error waits until the first `want` body bytes are kept.
                self.held = Some(error);
                self.state = State::Capturing {
                    remaining: length,
                    want,
                };
                Step::Continue
            }
        }
    }

    fn step_body(&mut self, len: usize, _offset: u64) -> Step {
        if self.buffer.len() < len {
            self.buffer.reserve(len - self.buffer.len());
            return Step::NeedInput;
        }
        let offset = self.base;
        let body = self.buffer.split_to(len).freeze();
        self.base += len as u64;
        self.state = State::Header {
            scan: 0,
            block: HeaderBlock::default(),
        };
        Step::Frame(Frame { body, offset })
    }

    fn step_skip(&mut self, remaining: u64) -> Step {
        let take = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(self.buffer.len());
        self.consume(take);
        let remaining = remaining - take as u64;
        if remaining == 0 {
            self.state = State::Header {
                scan: 0,
                block: HeaderBlock::default(),
            };
            Step::Continue
        } else {
            self.state = State::Skipping { remaining };
            Step::NeedInput
        }
    }

    fn step_capture(&mut self, remaining: u64, want: usize) -> Step {
        let take = want
            .saturating_sub(self.prefix.len())
            .min(self.buffer.len());
        if let Some(bytes) = self.buffer.get(..take) {
            self.prefix.extend_from_slice(bytes);
        }
        self.consume(take);
        let remaining = remaining.saturating_sub(take as u64);
        if self.prefix.len() < want {
            self.state = State::Capturing { remaining, want };
            return Step::NeedInput;
        }
        self.state = if remaining == 0 {
            State::Header {
                scan: 0,
                block: HeaderBlock::default(),
            }
        } else {
            State::Skipping { remaining }
        };
        match self.held.take() {
            Some(error) => Step::Error(error),
            None => Step::Continue,
        }
    }

    fn step_resync(&mut self) -> Step {
        match find_ignore_case(&self.buffer, CONTENT_LENGTH) {
            Some(at) => {
                self.consume(at);
                self.state = State::Header {
                    scan: 0,
                    block: HeaderBlock::default(),
                };
                Step::Continue
            }
            None => {
                // Keep only a tail that may be the start of a header name.
                let keep = CONTENT_LENGTH.len() - 1;
                let drop = self.buffer.len().saturating_sub(keep);
                self.consume(drop);
                Step::NeedInput
            }
        }
    }

    fn step_lines(&mut self, scan: usize) -> Step {
        if self.strip_bom_at_start() {
            return Step::NeedInput;
        }
        let Some(rest) = self.buffer.get(scan..) else {
            return Step::NeedInput;
        };
        let Some(newline) = memchr::memchr(b'\n', rest) else {
            let len = self.buffer.len();
            // One trailing `\r` does not count against the limit.
            if len > self.limits.max_body_bytes.saturating_add(1) {
                let error = FrameError::LineTooLong {
                    limit: self.limits.max_body_bytes,
                    offset: self.base,
                };
                self.keep_prefix_of(len);
                self.consume(len);
                self.state = State::SkippingLine;
                return Step::Error(error);
            }
            self.state = State::Lines { scan: len };
            return Step::NeedInput;
        };
        let line_end = scan + newline;
        let offset = self.base;
        let mut line = self.buffer.split_to(line_end + 1).freeze();
        self.base += line_end as u64 + 1;
        self.state = State::Lines { scan: 0 };
        line.truncate(line_end);
        if line.last() == Some(&b'\r') {
            line.truncate(line_end - 1);
        }
        if line.iter().all(|byte| matches!(byte, b' ' | b'\t' | b'\r')) {
            return Step::Continue;
        }
        if line.len() > self.limits.max_body_bytes {
            self.prefix.clear();
            let keep = line.len().min(self.prefix_limit);
            self.prefix
                .extend_from_slice(line.get(..keep).unwrap_or_default());
            return Step::Error(FrameError::LineTooLong {
                limit: self.limits.max_body_bytes,
                offset,
            });
        }
        Step::Frame(Frame { body: line, offset })
    }

    fn step_skip_line(&mut self) -> Step {
        match memchr::memchr(b'\n', &self.buffer) {
            Some(at) => {
                self.consume(at + 1);
                self.state = State::Lines { scan: 0 };
                Step::Continue
            }
            None => {
                let all = self.buffer.len();
                self.consume(all);
                Step::NeedInput
            }
        }
    }
}

enum Step {
    Continue,
    NeedInput,
    Frame(Frame),
    Error(FrameError),
}

enum DecimalError {
    Invalid,
    Overflow,
}

fn parse_decimal(value: &[u8]) -> Result<u64, DecimalError> {
    if value.is_empty() {
        return Err(DecimalError::Invalid);
    }
    let mut result: u64 = 0;
    let mut overflow = false;
    for byte in value {
        if !byte.is_ascii_digit() {
            return Err(DecimalError::Invalid);
        }
        match result
            .checked_mul(10)
            .and_then(|r| r.checked_add(u64::from(byte - b'0')))
        {
            Some(next) => result = next,
            None => overflow = true,
        }
    }
    if overflow {
        Err(DecimalError::Overflow)
    } else {
        Ok(result)
    }
}

fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// RFC 9110 token characters (header field names).
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// True when a Content-Type value names no charset, or UTF-8 (`utf-8`/`utf8`).
fn charset_is_utf8(value: &[u8]) -> bool {
    for parameter in value.split(|byte| *byte == b';').skip(1) {
        let parameter = trim_ows(parameter);
        let Some(eq) = memchr::memchr(b'=', parameter) else {
            continue;
        };
        let name = trim_ows(parameter.get(..eq).unwrap_or_default());
        if !name.eq_ignore_ascii_case(b"charset") {
            continue;
        }
        let charset = trim_ows(parameter.get(eq + 1..).unwrap_or_default());
        let charset = charset
            .strip_prefix(b"\"")
            .and_then(|c| c.strip_suffix(b"\""))
            .unwrap_or(charset);
        return charset.eq_ignore_ascii_case(b"utf-8") || charset.eq_ignore_ascii_case(b"utf8");
    }
    true
}

fn find_ignore_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut from = 0;
    while let Some(rest) = haystack.get(from..) {
        let at = memchr::memchr2(first, first.to_ascii_uppercase(), rest)?;
        let start = from + at;
        let candidate = haystack.get(start..start + needle.len())?;
        if candidate.eq_ignore_ascii_case(needle) {
            return Some(start);
        }
        from = start + 1;
    }
    None
}
