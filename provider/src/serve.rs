//! The async stream serve loop, written once for every async runtime
//! (the smol and tokio adapters' `serve`, `serve_stdio` and their `_with_log`
//! forms): one [`Server`] on one reader and one writer, over the
//! `futures-io` traits ([`AsyncRead`], [`AsyncWrite`]; tokio streams are
//! adapted by the tokio adapter).
//!
//! [`serve_stream`] reads input, hands every call to the service's handler
//! ([`dispatch_from`], each call's context saying stdio and the
//! configuration's `call_timeout`) and writes answers as they finish, in any order. A ready
//! answer (an inline check, a refusal) is given where the call was read;
//! other work goes to the runtime's [`Calls`] (blocking work in at most
//! `ServerConfig::max_in_flight` slots, each held until the work really
//! ends; async work as the runtime runs it). The core caps the calls at
//! `max_in_flight`: at the cap it holds the next message and input is not
//! read until an answer frees a slot (backpressure: a pipelining peer is
//! slowed, not refused; with `Overload::Refuse` the rest are answered
//! `OVERLOADED`). A call the peer cancels is cancelled
//! ([`crate::cancel`]): queued work never starts, async work is dropped,
//! blocking work that runs sees it.
//!
//! Writing, finished calls and reading are polled together, in that order
//! (answers before more input: a peer that keeps writing cannot starve
//! them), so a peer that is slow to read its answers never stops the loop
//! from reading; when more than [`MAX_PENDING_OUTPUT`] bytes wait to be
//! written, reading pauses until the peer catches up. Output is flushed
//! once everything pending is written.
//!
//! On end of input (or a fatal framing error) reading stops, every answer
//! in flight is written and flushed, and the loop returns (the fatal error,
//! or a read error, as its [`ServeError`]). Events go to
//! [`Handler::observe`](crate::Handler::observe) and to the [`StreamLog`]
//! (the adapters' validation log). Nothing is written but protocol frames.
//!
//! Limits: input is read [`READ_CHUNK`] bytes at a time; answers wait in
//! one buffer of about [`MAX_PENDING_OUTPUT`] bytes at most (plus one
//! batch); the rest is the core's (frame limits, the in-flight cap).

use std::future::{Future, pending};
use std::io;

use evidence_wire::Transport;
use evidence_wire::frame::Framing;
use evidence_wire::server::{Server, ServerEvent, Ticket};
use futures_lite::future::or;
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};

use crate::handler::{Completion, IntoService, Job, ServeError, Work, complete, dispatch_from};

pub use futures_lite::io::{AsyncRead, AsyncWrite};

/// Most answer bytes buffered for a peer that does not read; past it,
/// input is not read until the peer catches up.
pub const MAX_PENDING_OUTPUT: usize = 4 * 1024 * 1024;
/// Bytes read from the peer at once.
pub const READ_CHUNK: usize = 64 * 1024;

/// The calls in flight of one connection, as a runtime runs them: the
/// one thing about serving that depends on the runtime.
///
/// An implementation starts each [`Job`] where its [`Answer`](crate::Answer)
/// says (blocking work on a blocking pool once it holds one of
/// `slots` slots, taken with [`Job::hold`] so that it stays taken until the
/// work ends; async work as a task or polled in place), each already
/// guarded ([`Job::into_guarded`]: a panic is answered, a cancelled call
/// never starts); cancels a call the peer cancelled
/// ([`Job::cancellation`], then aborts it if it can); yields every started
/// call exactly once from [`Calls::next`] (an aborted one as
/// [`Completion::cancelled`]); and cancels what still runs when dropped
/// (its callers are gone). The smol adapter keeps its calls in a
/// `FuturesUnordered` polled by the serving future, the tokio adapter in a
/// `JoinSet`.
pub trait Calls {
    /// No calls yet; blocking work gets at most `slots` slots (at least
    /// one) and waits for one when they are taken.
    fn with_slots(slots: usize) -> Self
    where
        Self: Sized;

    /// Starts `job` (not a ready one: those are answered inline) for
    /// `ticket`; a call refused at once is answered through `server`.
    fn start(&mut self, ticket: Ticket, job: Job, server: &mut Server);

    /// Cancels the call of `ticket` (if it runs) for the peer; `server`
    /// as in [`Calls::start`].
    fn cancel(&mut self, ticket: Ticket, server: &mut Server);

    /// True when no call is in flight.
    fn is_empty(&self) -> bool;

    /// The next finished call; `None` when none is in flight. Dropping the
    /// future loses nothing (the loop polls it among other things).
    fn next(&mut self) -> impl Future<Output = Option<(Ticket, Completion)>> + Send + '_;
}

/// What the loop tells a log of the stream (the adapters' validation log):
/// input arrived, each event as the server reports it, the end of each
/// batch of events drained together. Every method does nothing unless
/// implemented; `()` logs nothing.
pub trait StreamLog {
    /// Bytes (or the end of input, or an error) were read.
    fn bytes_received(&mut self) {}

    /// One event of the server, with the framing the server detected.
    fn observe(&mut self, event: &ServerEvent, framing: Option<Framing>) {
        let _ = (event, framing);
    }

    /// The events drained together are all observed.
    fn end_batch(&mut self) {}
}

impl StreamLog for () {}

/// What woke the loop.
enum Step {
    Wrote(io::Result<usize>),
    Answer(Option<(Ticket, Completion)>),
    Read(io::Result<usize>),
}

/// Serves `service` (a [`crate::Provider`] or a [`crate::Service`]) on
/// `input`/`output` until end of input, with its calls in `C`, telling
/// `log` what happens; then writes and flushes every answer still in
/// flight and returns (see the module's docs).
pub async fn serve_stream<C, R, W>(
    service: impl IntoService,
    mut input: R,
    mut output: W,
    log: &mut impl StreamLog,
) -> Result<(), ServeError>
where
    C: Calls,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let service = service.into_service()?;
    let mut server = service.connection();
    let handler = service.handler().as_ref();
    let source = service.call_source(Transport::Stdio);
    let mut calls = C::with_slots(service.config().max_in_flight);
    let mut buffer = vec![0u8; READ_CHUNK];
    let mut pending_output = Vec::new();
    let mut written = 0usize;
    let mut unflushed = false;
    let mut failure = None;
    loop {
        while let Some(event) = server.poll_event() {
            log.observe(&event, server.framing());
            match dispatch_from(handler, event, &source) {
                Work::Run { ticket, job } => match job.into_ready() {
                    // A cancelled ticket is refused: nothing is sent, by design.
                    Ok(completion) => {
                        let _ = complete(&mut server, ticket, completion);
                    }
                    Err(job) => calls.start(ticket, job, &mut server),
                },
                Work::Cancel { ticket } => calls.cancel(ticket, &mut server),
                Work::Fatal(error) => {
                    failure.get_or_insert_with(|| ServeError::Fatal(error.to_string()));
                }
                _ => {}
            }
        }
        log.end_batch();
        while let Some(bytes) = server.poll_transmit() {
            pending_output.extend_from_slice(&bytes);
        }
        if written == pending_output.len() {
            pending_output.clear();
            written = 0;
            if unflushed {
                output.flush().await.map_err(ServeError::Write)?;
                unflushed = false;
            }
            if server.is_finished() {
                break;
            }
        }
        let unwritten = pending_output.get(written..).unwrap_or_default();
        let writing = !unwritten.is_empty();
        let running = !calls.is_empty();
        let reading = server.wants_input() && unwritten.len() < MAX_PENDING_OUTPUT;
        if !(writing || running || reading) {
            // Nothing to write, nothing running, input closed: every answer
            // is out (is_finished covers this; be safe anyway).
            break;
        }
        let write = async {
            if !writing {
                pending::<()>().await;
            }
            Step::Wrote(output.write(unwritten).await)
        };
        let answer = async {
            if !running {
                pending::<()>().await;
            }
            Step::Answer(calls.next().await)
        };
        let read = async {
            if !reading {
                pending::<()>().await;
            }
            Step::Read(input.read(&mut buffer).await)
        };
        let step = or(write, or(answer, read)).await;
        match step {
            Step::Wrote(Ok(0)) => {
                return Err(ServeError::Write(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "the peer accepts no more bytes",
                )));
            }
            Step::Wrote(Ok(count)) => {
                written = written.saturating_add(count).min(pending_output.len());
                unflushed = true;
            }
            Step::Wrote(Err(error)) if error.kind() == io::ErrorKind::Interrupted => {}
            Step::Wrote(Err(error)) => return Err(ServeError::Write(error)),
            // A cancelled or unknown ticket is refused: nothing to send.
            Step::Answer(Some((ticket, completion))) => {
                let _ = complete(&mut server, ticket, completion);
            }
            Step::Answer(None) => {}
            Step::Read(read) => {
                log.bytes_received();
                match read {
                    Ok(0) => server.handle_end_of_input(),
                    Ok(count) => server.handle_input(buffer.get(..count).unwrap_or_default()),
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => {
                        server.handle_end_of_input();
                        failure.get_or_insert(ServeError::Read(error));
                    }
                }
            }
        }
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
