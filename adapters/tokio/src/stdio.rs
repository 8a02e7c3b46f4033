//! The stdio provider server on tokio.
//!
//! One task owns the [`Server`] state machine: it reads input, spawns one
//! handler task per query (the core caps them at
//! `ServerConfig::max_in_flight` and answers the rest `OVERLOADED`), and
//! writes answers as they finish, in any order. Reading and writing are
//! multiplexed in one `select!`, so a peer that is slow to read its answers
//! never stops us from reading; when more than [`MAX_PENDING_OUTPUT`] bytes
//! wait to be written, reading pauses until the peer catches up.
//!
//! On end of input (or a fatal framing error) reading stops, every answer in
//! flight is written and flushed, and [`serve`] returns. Events go to
//! [`Handler::observe`]; [`serve_with_log`] also writes one validation log
//! record per message (`evidence_wire_log`), and nothing else is logged here.

use std::future::Future;
use std::io;
use std::sync::Arc;

use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, EvidenceResult};
use evidence_wire::server::{Server, ServerEvent, ToolFailure};
use evidence_wire_log::ValidationLog;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::tasks::{Completion, Tasks};

/// Most answer bytes buffered for a peer that does not read; past it, input
/// is not read until the peer catches up.
pub const MAX_PENDING_OUTPUT: usize = 4 * 1024 * 1024;

const READ_CHUNK: usize = 64 * 1024;

/// Answers the queries of a provider. Every call runs in its own tokio
/// task, so many run at once.
pub trait Handler: Send + Sync + 'static {
    /// Answer one `evidence_query`. Expected failures (a missing file, bad
    /// params) are results carrying an error, not panics. (A panic is
    /// answered as an `internal_error` result.)
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
    ) -> impl Future<Output = EvidenceResult> + Send;

    /// Answer a call of a tool registered on the server with
    /// `Server::register_tool`. The default refuses every call.
    fn tool_call(
        &self,
        name: &str,
        arguments: Value,
    ) -> impl Future<Output = Result<Value, ToolFailure>> + Send {
        let _ = arguments;
        let refusal = ToolFailure::Failed(format!("tool {name:?} has no handler"));
        async move { Err(refusal) }
    }

    /// Called for every event the server reports that is not a call
    /// (validation outcomes, framing errors, cancellations): the place for
    /// logs (to stderr, never stdout). The default ignores them.
    fn observe(&self, event: &ServerEvent) {
        let _ = event;
    }
}

/// Why [`serve`] stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Writing answers failed (the peer closed its input).
    #[error("cannot write to the peer: {0}")]
    Write(#[source] io::Error),
    /// Reading input failed.
    #[error("cannot read from the peer: {0}")]
    Read(#[source] io::Error),
    /// The input stream broke beyond repair (a fatal framing error); the
    /// answers in flight were still written.
    #[error("input stream broken: {0}")]
    Fatal(String),
}

/// Serve `handler` on this process's stdin/stdout until stdin ends.
///
/// tokio reads stdin on a blocking thread; when this returns before stdin
/// ends (an error), that thread lingers until the process exits.
pub async fn serve_stdio<H: Handler>(server: Server, handler: H) -> Result<(), ServeError> {
    serve(server, handler, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serve `handler` on `input`/`output` until end of input, then write and
/// flush every answer still in flight and return.
pub async fn serve<H, R, W>(
    server: Server,
    handler: H,
    input: R,
    output: W,
) -> Result<(), ServeError>
where
    H: Handler,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    serve_with_log(server, handler, input, output, &ValidationLog::disabled()).await
}

/// [`serve_stdio`] writing one validation log record per message to `log`.
pub async fn serve_stdio_with_log<H: Handler>(
    server: Server,
    handler: H,
    log: &ValidationLog,
) -> Result<(), ServeError> {
    serve_with_log(
        server,
        handler,
        tokio::io::stdin(),
        tokio::io::stdout(),
        log,
    )
    .await
}

/// [`serve`] writing one validation log record per message to `log` (a
/// failing log never stops the server; see `evidence_wire_log`).
pub async fn serve_with_log<H, R, W>(
    mut server: Server,
    handler: H,
    mut input: R,
    mut output: W,
    log: &ValidationLog,
) -> Result<(), ServeError>
where
    H: Handler,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut log = log.stdio();
    let mut tasks = Tasks::new(Arc::new(handler));
    let mut buffer = vec![0u8; READ_CHUNK];
    let mut pending = Vec::new();
    let mut written = 0usize;
    let mut unflushed = false;
    let mut failure = None;
    loop {
        while let Some(event) = server.poll_event() {
            if let ServerEvent::Fatal(error) = &event {
                failure.get_or_insert_with(|| ServeError::Fatal(error.to_string()));
            }
            log.observe(&event, server.framing());
            tasks.offer(event);
        }
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
        let can_read = !server.is_input_closed() && unwritten.len() < MAX_PENDING_OUTPUT;
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
                    let _ = match completion {
                        Completion::Evidence(result) => server.respond(ticket, *result),
                        Completion::Tool(result) => server.respond_tool(ticket, result),
                    };
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
