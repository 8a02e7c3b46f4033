//! The stdio provider server on `futures-io` traits.
//!
//! [`serve`] owns the [`Server`] state machine, one reader and one writer,
//! and hands every call to the service's handler ([`dispatch`]). Where the
//! work runs: a ready answer ([`Answer::Ready`], an inline check) is given
//! where the call was read; blocking work ([`Answer::Blocking`]) runs on
//! the `blocking` crate's thread pool; async work ([`Answer::Async`]) runs
//! concurrently inside the serving future itself (no executor is needed,
//! so it runs on smol, async-std or any other runtime). How many calls run
//! at once is bounded by the core's `ServerConfig::max_in_flight`: at the cap
//! input is not read until an answer frees a slot (backpressure; with
//! `Overload::Refuse` more queries are answered `OVERLOADED`). A call the
//! peer cancels is cancelled ([`evidence_wire_provider::cancel`]): its
//! future is dropped, queued work never starts, and blocking work that has
//! started sees it and may stop early (its answer is dropped). Blocking
//! work runs in at most `max_in_flight` slots, each held until the work
//! really ends, so cancelling calls never lets more of it run at once.
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

use evidence_wire::server::Ticket;

#[cfg(doc)]
use evidence_wire::server::Server;
use evidence_wire_log::ValidationLog;
use evidence_wire_provider::stdout::unbuffered_stdout;
use evidence_wire_provider::{
    Answer, BoxFuture, CancelReason, Cancellation, Completion, IntoService, Job, ServeError, Work,
    complete, dispatch,
};
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_util::FutureExt;
use futures_util::future::{AbortHandle, abortable};
use futures_util::stream::{FuturesUnordered, StreamExt};

/// Bytes read from the peer at once.
const READ_CHUNK: usize = 64 * 1024;

enum Step {
    Read(io::Result<usize>),
    Answer(Option<(Ticket, Completion)>),
}

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

impl Calls {
    /// Calls whose blocking work runs in at most `slots` slots.
    fn new(slots: usize) -> Self {
        Calls {
            running: FuturesUnordered::new(),
            aborts: HashMap::new(),
            slots: Arc::new(async_lock::Semaphore::new(slots.max(1))),
        }
    }

    /// Start the work of `ticket`: blocking work on the blocking pool once
    /// it has a slot (a queued call cancelled meanwhile never starts),
    /// async work in the serving future.
    fn start(&mut self, ticket: Ticket, job: Job) {
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

    fn cancel(&mut self, ticket: Ticket) {
        if let Some((abort, cancellation)) = self.aborts.remove(&ticket) {
            cancellation.cancel(CancelReason::Peer);
            abort.abort();
        }
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

/// Serve `service` (a [`evidence_wire_provider::Provider`] or a
/// [`evidence_wire_provider::Service`]) on this process's stdin/stdout
/// until end of input.
///
/// Stdin and stdout are blocking handles moved to a helper thread pool
/// (`blocking::Unblock`), so this works on any runtime.
pub async fn serve_stdio(service: impl IntoService) -> Result<(), ServeError> {
    let input = blocking::Unblock::new(io::stdin());
    let output = blocking::Unblock::new(unbuffered_stdout());
    serve(service, input, output).await
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
    let input = blocking::Unblock::new(io::stdin());
    let output = blocking::Unblock::new(unbuffered_stdout());
    serve_with_log(service, input, output, log).await
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
    let mut calls = Calls::new(service.config().max_in_flight);
    let mut buffer = vec![0u8; READ_CHUNK];
    let mut failure = None;
    loop {
        while let Some(event) = server.poll_event() {
            log.observe(&event, server.framing());
            match dispatch(handler, event) {
                Work::Run { ticket, job } => match job.into_ready() {
                    // A cancelled ticket is refused: nothing is sent, by design.
                    Ok(completion) => {
                        let _ = complete(&mut server, ticket, completion);
                    }
                    Err(job) => calls.start(ticket, job),
                },
                Work::Cancel { ticket } => calls.cancel(ticket),
                Work::Fatal(error) => {
                    failure.get_or_insert(ServeError::Fatal(error.to_string()));
                }
                _ => {}
            }
        }
        log.end_batch();
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
        // At the in-flight cap the core holds the next message: read
        // nothing more until an answer frees a slot.
        let reading = server.wants_input();
        let step = match (reading, calls.running.is_empty()) {
            // Input closed and nothing runs: nothing can produce an answer.
            (false, true) => break,
            (false, false) => Step::Answer(calls.next().await),
            (true, true) => Step::Read(input.read(&mut buffer).await),
            // Answers first: a peer that keeps writing cannot starve them.
            (true, false) => {
                futures_lite::future::or(calls.next().map(Step::Answer), async {
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
            Step::Answer(Some((ticket, completion))) => {
                // A cancelled ticket is refused: nothing is sent, by design.
                let _ = complete(&mut server, ticket, completion);
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
