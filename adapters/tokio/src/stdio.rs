//! The stdio provider server on tokio.
//!
//! One task owns the [`Server`] state machine: it reads input, hands every
//! call to the service's handler ([`dispatch`]) and writes answers as they
//! finish, in any order. A ready answer (an inline check) is given at
//! once; blocking work runs on tokio's blocking pool and async work as a
//! task. The core caps the calls at `ServerConfig::max_in_flight`: at the
//! cap it holds the next message and input is not read until an answer
//! frees a slot (backpressure: a pipelining peer is slowed, not refused;
//! with `Overload::Refuse` the rest are answered `OVERLOADED`). A call the
//! peer cancels is cancelled ([`evidence_wire_provider::cancel`]): queued
//! work never starts, its task is aborted, blocking work that runs sees
//! it. Blocking work runs in at most `max_in_flight` slots, each held until
//! the work really ends, so cancelling calls frees the core's slots but
//! never lets more blocking checks run at once.
//! Reading and writing are multiplexed in one `select!`, so a peer that is
//! slow to read its answers never stops us from reading; when more than
//! [`MAX_PENDING_OUTPUT`] bytes wait to be written, reading pauses until
//! the peer catches up.
//!
//! On end of input (or a fatal framing error) reading stops, every answer in
//! flight is written and flushed, and [`serve`] returns. Events go to
//! [`Handler::observe`]; [`serve_with_log`] also writes one validation log
//! record per message (`evidence_wire_log`), and nothing else is logged here.

use std::io;

use evidence_wire_log::ValidationLog;
use evidence_wire_provider::stdout::unbuffered_stdout;
use evidence_wire_provider::{IntoService, ServeError, complete, dispatch};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::tasks::{Ran, Slots, Tasks, WhenFull};

#[cfg(doc)]
use evidence_wire::server::Server;
#[cfg(doc)]
use evidence_wire_provider::Handler;

/// Most answer bytes buffered for a peer that does not read; past it, input
/// is not read until the peer catches up.
pub const MAX_PENDING_OUTPUT: usize = 4 * 1024 * 1024;

const READ_CHUNK: usize = 64 * 1024;

/// Serve `service` (a [`evidence_wire_provider::Provider`] or a
/// [`evidence_wire_provider::Service`]) on this process's stdin/stdout
/// until stdin ends.
///
/// tokio reads stdin on a blocking thread; when this returns before stdin
/// ends (an error), that thread lingers until the process exits.
pub async fn serve_stdio(service: impl IntoService) -> Result<(), ServeError> {
    serve(service, tokio::io::stdin(), stdout()).await
}

/// The process's standard output without std's line buffering (which
/// `tokio::io::stdout()` writes through, and which cuts each
/// Content-Length batch in two writes): the duplicate of descriptor 1 that
/// [`unbuffered_stdout`] makes, as a tokio file, or `tokio::io::stdout()`
/// where there is none.
fn stdout() -> Box<dyn AsyncWrite + Send + Unpin> {
    match unbuffered_stdout().into_file() {
        Some(file) => Box::new(tokio::fs::File::from_std(file)),
        None => Box::new(tokio::io::stdout()),
    }
}

/// Serve `service` on `input`/`output` until end of input, then write and
/// flush every answer still in flight and return.
pub async fn serve<R, W>(service: impl IntoService, input: R, output: W) -> Result<(), ServeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    serve_with_log(service, input, output, &ValidationLog::disabled()).await
}

/// [`serve_stdio`] writing one validation log record per message to `log`.
pub async fn serve_stdio_with_log(
    service: impl IntoService,
    log: &ValidationLog,
) -> Result<(), ServeError> {
    serve_with_log(service, tokio::io::stdin(), stdout(), log).await
}

/// [`serve`] writing one validation log record per message to `log` (a
/// failing log never stops the server; see `evidence_wire_log`).
pub async fn serve_with_log<R, W>(
    service: impl IntoService,
    mut input: R,
    mut output: W,
    log: &ValidationLog,
) -> Result<(), ServeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let service = service.into_service()?;
    let mut server = service.connection();
    let handler = service.handler().as_ref();
    // The records of the events drained together share one clock reading;
    // the log's writer thread writes them (in large `write`s, within the
    // log's flush interval), and dropping `log` writes what is left.
    let mut log = log.stdio_batched();
    // Blocking checks run in at most `max_in_flight` slots, however many
    // the peer cancels meanwhile: a cancelled check keeps its slot until it
    // ends, and a queued one never starts.
    let mut tasks = Tasks::new(Slots::new(service.config().max_in_flight, WhenFull::Wait));
    let mut buffer = vec![0u8; READ_CHUNK];
    let mut pending = Vec::new();
    let mut written = 0usize;
    let mut unflushed = false;
    let mut failure = None;
    loop {
        while let Some(event) = server.poll_event() {
            log.observe(&event, server.framing());
            match tasks.run(dispatch(handler, event), &mut server) {
                // A cancelled or unknown ticket is refused: nothing to send.
                Ran::Ready(ticket, completion) => {
                    let _ = complete(&mut server, ticket, completion);
                }
                Ran::Fatal(error) => {
                    failure.get_or_insert_with(|| ServeError::Fatal(error.to_string()));
                }
                Ran::Nothing => {}
            }
        }
        log.end_batch();
        while let Some(bytes) = server.poll_transmit() {
            pending.extend_from_slice(&bytes);
        }
        if written == pending.len() {
            pending.clear();
            written = 0;
            if unflushed {
                output.flush().await.map_err(ServeError::Write)?;
                unflushed = false;
            }
            if server.is_finished() {
                break;
            }
        }
        let unwritten = pending.get(written..).unwrap_or_default();
        let can_read = server.wants_input() && unwritten.len() < MAX_PENDING_OUTPUT;
        tokio::select! {
            result = output.write(unwritten), if !unwritten.is_empty() => {
                match result {
                    Ok(0) => {
                        return Err(ServeError::Write(io::Error::new(
                            io::ErrorKind::WriteZero,
                            "the peer accepts no more bytes",
                        )));
                    }
                    Ok(count) => {
                        written = written.saturating_add(count).min(pending.len());
                        unflushed = true;
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(ServeError::Write(error)),
                }
            }
            finished = tasks.next(), if !tasks.is_empty() => {
                if let Some((ticket, completion)) = finished {
                    // A cancelled or unknown ticket is refused: nothing to send.
                    let _ = complete(&mut server, ticket, completion);
                }
            }
            read = input.read(&mut buffer), if can_read => {
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
            else => {
                // Nothing to write, nothing running, input closed: every
                // answer is out (is_finished covers this; be safe anyway).
                break;
            }
        }
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
