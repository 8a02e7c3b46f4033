//! The stdio provider server on tokio.
//!
//! [`serve`] runs the SDK's stream loop
//! ([`evidence_wire_provider::serve::serve_stream`]) on the tokio streams
//! (seen as `futures-io` ones through a forwarding wrapper: no copy, no
//! task) with the adapter's [`Tasks`] as its calls. One task owns the
//! [`Server`] state machine: it reads input, hands every call to the
//! service's handler ([`dispatch`](evidence_wire_provider::dispatch)) and
//! writes answers as they finish, in any order. A ready answer (an inline
//! check) is given at once; blocking work runs on tokio's blocking pool and
//! async work as a task. The core caps the calls at
//! `ServerConfig::max_in_flight`: at the cap it holds the next message and
//! input is not read until an answer frees a slot (backpressure: a
//! pipelining peer is slowed, not refused; with `Overload::Refuse` the
//! rest are answered `OVERLOADED`). A call the peer cancels is cancelled
//! ([`evidence_wire_provider::cancel`]): queued work never starts, its task
//! is aborted, blocking work that runs sees it. Blocking work runs in at
//! most `max_in_flight` slots, each held until the work really ends, so
//! cancelling calls frees the core's slots but never lets more blocking
//! checks run at once. Writing, finished calls and reading are polled
//! together, so a peer that is slow to read its answers never stops us from
//! reading; when more than [`MAX_PENDING_OUTPUT`] bytes wait to be written,
//! reading pauses until the peer catches up.
//!
//! On end of input (or a fatal framing error) reading stops, every answer in
//! flight is written and flushed, and [`serve`] returns. Events go to
//! [`Handler::observe`]; [`serve_with_log`] also writes one validation log
//! record per message (`evidence_wire_log`), and nothing else is logged here.

use evidence_wire::frame::Framing;
use evidence_wire::server::{Server, ServerEvent, Ticket};
use evidence_wire_log::{StdioLog, ValidationLog};
use evidence_wire_provider::serve::{Calls as StreamCalls, StreamLog, serve_stream};
use evidence_wire_provider::stdout::unbuffered_stdout;
use evidence_wire_provider::{Completion, IntoService, Job, ServeError, Work, complete};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::compat::Compat;
use crate::tasks::{Ran, Slots, Tasks, WhenFull};

#[cfg(doc)]
use evidence_wire_provider::{Handler, serve::MAX_PENDING_OUTPUT};

impl StreamCalls for Tasks {
    /// Blocking checks run in at most `slots` slots, however many the peer
    /// cancels meanwhile: a cancelled check keeps its slot until it ends,
    /// and a queued one never starts.
    fn with_slots(slots: usize) -> Self {
        Tasks::new(Slots::new(slots, WhenFull::Wait))
    }

    fn start(&mut self, ticket: Ticket, job: Job, server: &mut Server) {
        // Not ready (the loop answered those): started, never handed back.
        if let Ran::Ready(ticket, completion) = self.run(Work::Run { ticket, job }, server) {
            let _ = complete(server, ticket, completion);
        }
    }

    fn cancel(&mut self, ticket: Ticket, server: &mut Server) {
        let _ = self.run(Work::Cancel { ticket }, server);
    }

    fn is_empty(&self) -> bool {
        Tasks::is_empty(self)
    }

    async fn next(&mut self) -> Option<(Ticket, Completion)> {
        Tasks::next(self).await
    }
}

/// The validation log of the stdio stream, as the loop tells it.
struct StdioRecords(StdioLog);

impl StreamLog for StdioRecords {
    fn observe(&mut self, event: &ServerEvent, framing: Option<Framing>) {
        self.0.observe(event, framing);
    }

    fn end_batch(&mut self) {
        self.0.end_batch();
    }

    fn bytes_received(&mut self) {
        self.0.bytes_received();
    }
}

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
pub(crate) fn stdout() -> Box<dyn AsyncWrite + Send + Unpin> {
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
    let (input, output) = (Compat(input), Compat(output));
    serve_stream::<Tasks, _, _>(service, input, output, &mut ()).await
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
    input: R,
    output: W,
    log: &ValidationLog,
) -> Result<(), ServeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // The records of the events drained together share one clock reading;
    // the log's writer thread writes them (in large `write`s, within the
    // log's flush interval), and dropping `log` writes what is left.
    let mut records = StdioRecords(log.stdio_batched());
    let (input, output) = (Compat(input), Compat(output));
    serve_stream::<Tasks, _, _>(service, input, output, &mut records).await
}
