//! The stdio provider server on `futures-io` traits.
//!
//! [`serve`] runs the SDK's stream loop
//! ([`evidence_wire_provider::serve::serve_stream`]: the [`Server`] state
//! machine on one reader and one writer, every call handed to the
//! service's handler) with this adapter's [`Calls`]: a ready answer
//! ([`Answer::Ready`], an inline check) is given where the call was read;
//! blocking work ([`Answer::Blocking`]) runs on the `blocking` crate's
//! thread pool; async work ([`Answer::Async`]) runs concurrently inside
//! the serving future itself (no executor is needed, so it runs on smol,
//! async-std or any other runtime). How many calls run at once is bounded
//! by the core's `ServerConfig::max_in_flight`: at the cap input is not
//! read until an answer frees a slot (backpressure; with
//! `Overload::Refuse` more queries are answered `OVERLOADED`); when more
//! than [`MAX_PENDING_OUTPUT`] answer bytes wait for a peer that does not
//! read, input is not read either. A call the peer cancels is cancelled
//! ([`evidence_wire_provider::cancel`]): its future is dropped, queued work
//! never starts, and blocking work that has started sees it and may stop
//! early (its answer is dropped). Blocking work runs in at most
//! `max_in_flight` slots, each held until the work really ends, so
//! cancelling calls never lets more of it run at once.
//!
//! On end of input the server stops reading, waits for the answers in
//! flight, writes and flushes them, and returns. A handler that panics
//! gets its query answered with an `internal_error` result instead of
//! tearing the server down. Nothing is written to stdout but protocol
//! frames. [`serve_with_log`] also writes one validation log record per
//! message (`evidence_wire_log`, the sink the blocking and tokio servers
//! use); [`serve`] writes none. The log's file writes are small, unbuffered
//! and made on the serving task, like the blocking adapter's.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use evidence_wire::frame::Framing;
use evidence_wire::server::{Server, ServerEvent, Ticket};
use evidence_wire_log::{StdioLog, ValidationLog};
use evidence_wire_provider::serve::{Calls as StreamCalls, StreamLog, serve_stream};
use evidence_wire_provider::stdout::unbuffered_stdout;
use evidence_wire_provider::{
    Answer, BoxFuture, CancelReason, Cancellation, Completion, IntoService, Job, ServeError,
};
use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_util::future::{AbortHandle, abortable};
use futures_util::stream::{FuturesUnordered, StreamExt};

#[cfg(doc)]
use evidence_wire_provider::serve::MAX_PENDING_OUTPUT;

/// The calls in flight: their futures, polled by the serving future, a
/// way to drop and cancel each one when the peer cancels it, and the slots
/// blocking work runs in.
struct Calls {
    running: FuturesUnordered<BoxFuture<(Ticket, Completion)>>,
    aborts: HashMap<Ticket, (AbortHandle, Cancellation)>,
    slots: Arc<async_lock::Semaphore>,
}

/// Runs `answer` (from a job already holding its slot) to its completion.
async fn run_answer(answer: Answer<Completion>) -> Completion {
    match answer {
        Answer::Ready(completion) => completion,
        Answer::Blocking(work) => blocking::unblock(work).await,
        Answer::Async(future) => future.await,
    }
}

impl StreamCalls for Calls {
    fn with_slots(slots: usize) -> Self {
        Calls {
            running: FuturesUnordered::new(),
            aborts: HashMap::new(),
            slots: Arc::new(async_lock::Semaphore::new(slots.max(1))),
        }
    }

    /// Blocking work on the blocking pool once it has a slot (a queued
    /// call cancelled meanwhile never starts), async work in the serving
    /// future.
    fn start(&mut self, ticket: Ticket, job: Job, _: &mut Server) {
        let kind = job.kind();
        let cancellation = job.cancellation().clone();
        let work: BoxFuture<Completion> = if job.is_blocking() {
            let slots = Arc::clone(&self.slots);
            Box::pin(async move {
                let slot = slots.acquire_arc().await;
                run_answer(job.hold(slot).into_guarded()).await
            })
        } else {
            Box::pin(run_answer(job.into_guarded()))
        };
        let (work, abort) = abortable(work);
        self.aborts.insert(ticket, (abort, cancellation));
        self.running.push(Box::pin(async move {
            let completion = work.await.unwrap_or_else(|_| Completion::cancelled(kind));
            (ticket, completion)
        }));
    }

    fn cancel(&mut self, ticket: Ticket, _: &mut Server) {
        if let Some((abort, cancellation)) = self.aborts.remove(&ticket) {
            cancellation.cancel(CancelReason::Peer);
            abort.abort();
        }
    }

    fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    async fn next(&mut self) -> Option<(Ticket, Completion)> {
        let (ticket, completion) = self.running.next().await?;
        self.aborts.remove(&ticket);
        Some((ticket, completion))
    }
}

impl Drop for Calls {
    /// The serving future is gone: so are the callers of what still runs.
    fn drop(&mut self) {
        for (_, cancellation) in self.aborts.values() {
            cancellation.cancel(CancelReason::CallerGone);
        }
    }
}

/// The validation log of one stdio stream, as the loop tells it.
struct Log(StdioLog);

impl StreamLog for Log {
    fn bytes_received(&mut self) {
        self.0.bytes_received();
    }

    fn observe(&mut self, event: &ServerEvent, framing: Option<Framing>) {
        self.0.observe(event, framing);
    }

    fn end_batch(&mut self) {
        self.0.end_batch();
    }
}

/// Serve `service` (a [`evidence_wire_provider::Provider`] or a
/// [`evidence_wire_provider::Service`]) on this process's stdin/stdout
/// until end of input.
///
/// Stdin and stdout are blocking handles moved to a helper thread pool
/// (`blocking::Unblock`), so this works on any runtime.
pub async fn serve_stdio(service: impl IntoService) -> Result<(), ServeError> {
    serve_stdio_with_log(service, &ValidationLog::disabled()).await
}

/// Serve `service` on `input`/`output` until end of input, then write and
/// flush every answer still in flight and return.
pub async fn serve<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    service: impl IntoService,
    input: R,
    output: W,
) -> Result<(), ServeError> {
    serve_stream::<Calls, _, _>(service, input, output, &mut ()).await
}

/// [`serve_stdio`] writing one validation log record per message to `log`.
pub async fn serve_stdio_with_log(
    service: impl IntoService,
    log: &ValidationLog,
) -> Result<(), ServeError> {
    let input = blocking::Unblock::new(io::stdin());
    let output = blocking::Unblock::new(unbuffered_stdout());
    serve_with_log(service, input, output, log).await
}

/// [`serve`] writing one validation log record per message to `log` (a
/// failing log never stops the server; see `evidence_wire_log`).
pub async fn serve_with_log<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    service: impl IntoService,
    input: R,
    output: W,
    log: &ValidationLog,
) -> Result<(), ServeError> {
    // The records of the events drained together share one clock reading;
    // the log's writer thread writes them (in large `write`s, within the
    // log's flush interval), and dropping the log writes what is left.
    serve_stream::<Calls, _, _>(service, input, output, &mut Log(log.stdio_batched())).await
}
