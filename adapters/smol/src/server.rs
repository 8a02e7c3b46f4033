//! The stdio provider server on `futures-io` traits.
//!
//! [`serve`] owns the [`Server`] state machine, one reader and one writer.
//! Handler futures run concurrently inside the serving future itself (no
//! executor is needed, so it runs on smol, async-std or any other
//! runtime); how many run at once is bounded by the core's
//! `ServerConfig::max_in_flight` (more queries are answered `OVERLOADED`).
//!
//! On end of input the server stops reading, waits for the answers in
//! flight, writes and flushes them, and returns. A handler that panics
//! gets its query answered with an error instead of tearing the server
//! down. Nothing is written to stdout but protocol frames.
//! [`serve_with_log`] also writes one validation log record per message
//! (`evidence_wire_log`, the sink the blocking and tokio servers use);
//! [`serve`] writes none. The log's file writes are small, unbuffered and
//! made on the serving task, like the blocking adapter's.

use std::future::Future;
use std::io;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use evidence_wire::evidence::{EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult};
use evidence_wire::server::{Server, ServerEvent, Ticket, ToolFailure};
use evidence_wire_log::ValidationLog;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;

/// Bytes read from the peer at once.
const READ_CHUNK: usize = 64 * 1024;

/// Answers the queries of a provider. Its futures run concurrently inside
/// the serving future.
pub trait Handler: Send + Sync {
    /// Answer one `evidence_query`. Expected failures (a missing file, bad
    /// params) are results carrying an error, not panics.
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

    /// Called for every event the server reports that is not a query
    /// (validation outcomes, framing errors, cancellations): the place for
    /// logs. The default ignores them.
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

enum Answer {
    Evidence(Ticket, Box<EvidenceResult>),
    Tool(Ticket, Result<Value, ToolFailure>),
}

enum Step {
    Read(io::Result<usize>),
    Answer(Option<Answer>),
}

type Running<'a> = FuturesUnordered<Pin<Box<dyn Future<Output = Answer> + Send + 'a>>>;

/// Serve `handler` on this process's stdin/stdout until end of input.
///
/// Stdin and stdout are blocking handles moved to a helper thread pool
/// (`blocking::Unblock`), so this works on any runtime.
pub async fn serve_stdio<H: Handler>(server: Server, handler: H) -> Result<(), ServeError> {
    let input = blocking::Unblock::new(io::stdin());
    let output = blocking::Unblock::new(io::stdout());
    serve(server, handler, input, output).await
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
    let input = blocking::Unblock::new(io::stdin());
    let output = blocking::Unblock::new(io::stdout());
    serve_with_log(server, handler, input, output, log).await
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
    let handler = &handler;
    let mut running: Running<'_> = FuturesUnordered::new();
    let mut buffer = vec![0u8; READ_CHUNK];
    let mut failure = None;
    loop {
        while let Some(event) = server.poll_event() {
            match event {
                ServerEvent::EvidenceQuery {
                    ticket,
                    query,
                    context,
                } => running.push(Box::pin(evidence_task(handler, ticket, query, context))),
                ServerEvent::ToolCall {
                    ticket,
                    name,
                    arguments,
                } => running.push(Box::pin(tool_task(handler, ticket, name, arguments))),
                ServerEvent::Fatal(error) => {
                    failure.get_or_insert(ServeError::Fatal(error.to_string()));
                    handler.observe(&ServerEvent::Fatal(error));
                }
                other => {
                    log.observe(&other, server.framing());
                    handler.observe(&other);
                }
            }
        }
        let mut wrote = false;
        while let Some(bytes) = server.poll_transmit() {
            output.write_all(&bytes).await.map_err(ServeError::Write)?;
            wrote = true;
        }
        if wrote {
            output.flush().await.map_err(ServeError::Write)?;
        }
        if server.is_finished() {
            break;
        }
        let reading = !server.is_input_closed();
        let step = match (reading, running.is_empty()) {
            // Input closed and nothing runs: nothing can produce an answer.
            (false, true) => break,
            (false, false) => Step::Answer(running.next().await),
            (true, true) => Step::Read(input.read(&mut buffer).await),
            // Answers first: a peer that keeps writing cannot starve them.
            (true, false) => {
                futures_lite::future::or(running.next().map(Step::Answer), async {
                    Step::Read(input.read(&mut buffer).await)
                })
                .await
            }
        };
        if matches!(step, Step::Read(Ok(_))) {
            log.bytes_received();
        }
        match step {
            Step::Read(Ok(0)) => server.handle_end_of_input(),
            Step::Read(Ok(read)) => server.handle_input(buffer.get(..read).unwrap_or_default()),
            Step::Read(Err(error)) if error.kind() == io::ErrorKind::Interrupted => {}
            Step::Read(Err(error)) => {
                server.handle_end_of_input();
                failure.get_or_insert(ServeError::Read(error));
            }
            Step::Answer(Some(Answer::Evidence(ticket, result))) => {
                // A cancelled ticket is refused: nothing is sent, by design.
                let _ = server.respond(ticket, *result);
            }
            Step::Answer(Some(Answer::Tool(ticket, result))) => {
                let _ = server.respond_tool(ticket, result);
            }
            Step::Answer(None) => {}
        }
    }
    output.flush().await.map_err(ServeError::Write)?;
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

async fn evidence_task<H: Handler>(
    handler: &H,
    ticket: Ticket,
    query: EvidenceQuery,
    context: EvidenceContext,
) -> Answer {
    let result = AssertUnwindSafe(handler.evidence_query(query, context))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| {
            EvidenceResult::with_error(EvidenceError::new(
                "internal_error",
                "the provider's handler panicked while answering this query; see its log",
            ))
        });
    Answer::Evidence(ticket, Box::new(result))
}

async fn tool_task<H: Handler>(
    handler: &H,
    ticket: Ticket,
    name: String,
    arguments: Value,
) -> Answer {
    let result = AssertUnwindSafe(handler.tool_call(&name, arguments))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| {
            Err(ToolFailure::Failed(format!(
                "the handler of tool {name:?} panicked; see the provider's log"
            )))
        });
    Answer::Tool(ticket, result)
}
