//! The cross-adapter integration matrix (issue 6).
//!
//! One set of cases, written once against the [`Row`] trait, runs against
//! every runtime adapter's child-process provider client: blocking std,
//! smol (driven by `smol::block_on`), the same smol adapter driven by
//! `async_std::task::block_on`, and tokio (feature `tokio-row`, on by
//! default).
//! The children are real processes: `misbehave` (tests/src/bin, served by
//! the blocking adapter), `smol-provider` (served by the smol adapter) and
//! the CLI's `evidence-wire serve`.
//!
//! Each misbehaving child misbehaves once (counted in a state file, across
//! restarts); every case asserts the typed error of the bad query and that
//! the next query succeeds on the restarted child. Timeouts are a few
//! hundred milliseconds, restart backoff 20 ms: the matrix runs in seconds.
//!
//! The `fault_*` cases (issue 11) inject process faults: a child killed in
//! the middle of an answer, one that never reads its stdin while we write
//! more than a pipe holds, one that floods its stdout with junk or with a
//! 100 MiB line / a frame declaring 100 MiB, one that answers after the
//! timeout. Each asserts the typed error, a bounded time, that the next
//! query succeeds on a fresh child, and (for the floods, on Linux) that
//! this process's peak memory grew by far less than the flood: the adapter
//! buffers no more than the client's frame limit plus its read queue.
//! Two more (issue 20) flood the child's stderr, once with a log sink that
//! blocks like a stderr nobody reads: queries and timeouts keep their
//! time, and what reaches the sink is a bounded excerpt. On Unix, one more
//! (issue 39) restarts a provider behind a launcher that does not `exec`
//! and asserts that no process of the old child's group is left.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime, VerifiedEvidence};
use evidence_wire::frame::Framing;
use serde_json::json;

/// How long a query may wait in the failure cases.
const TIMEOUT_MS: u64 = 400;
/// First restart delay.
const BACKOFF: Duration = Duration::from_millis(20);

/// The child to run and how to talk to it.
struct Spec {
    command: Vec<String>,
    framing: Framing,
    timeout_ms: u64,
    backoff: Duration,
    log: Log,
}

impl Spec {
    fn new(command: Vec<String>, framing: Framing) -> Self {
        Spec {
            command,
            framing,
            timeout_ms: TIMEOUT_MS,
            backoff: BACKOFF,
            log: Log::default(),
        }
    }

    fn client(&self) -> ClientConfig {
        let mut client = ClientConfig::default();
        client.framing = self.framing;
        client.request_timeout_ms = self.timeout_ms;
        client
    }
}

/// The lines an adapter logged (the child's stderr and its own notes).
/// With [`Log::blocking`], every call of the sink also waits until the log
/// is dropped, or at most until 15 s after it was made (so a test against
/// an adapter that waits for its sink fails in bounded time instead of
/// hanging): a stderr that nobody reads.
#[derive(Default)]
struct Log(Arc<Mutex<Vec<String>>>, Option<Arc<Gate>>);

/// Closed until released (or its deadline): what a write to a full pipe
/// waits for.
struct Gate {
    open: Mutex<bool>,
    opened: std::sync::Condvar,
    deadline: Instant,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            open: Mutex::new(false),
            opened: std::sync::Condvar::new(),
            deadline: Instant::now() + Duration::from_secs(15),
        }
    }
}

impl Gate {
    fn wait(&self) {
        let deadline = self.deadline;
        let mut open = self.open.lock().unwrap_or_else(|error| error.into_inner());
        while !*open && Instant::now() < deadline {
            open = self
                .opened
                .wait_timeout(open, Duration::from_millis(100))
                .map(|(open, _)| open)
                .unwrap_or_else(|error| error.into_inner().0);
        }
    }

    fn release(&self) {
        *self.open.lock().unwrap_or_else(|error| error.into_inner()) = true;
        self.opened.notify_all();
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        if let Some(gate) = &self.1 {
            gate.release();
        }
    }
}

impl Log {
    /// A log whose sink records the line, then blocks.
    fn blocking() -> Self {
        Log(Arc::default(), Some(Arc::default()))
    }

    fn sink(&self) -> Arc<dyn Fn(&str) + Send + Sync> {
        let lines = Arc::clone(&self.0);
        let gate = self.1.clone();
        Arc::new(move |line: &str| {
            if let Ok(mut lines) = lines.lock() {
                lines.push(line.to_owned());
            }
            if let Some(gate) = &gate {
                gate.wait();
            }
        })
    }

    /// How many lines and bytes reached the sink.
    fn size(&self) -> (usize, usize) {
        self.0
            .lock()
            .map(|lines| (lines.len(), lines.iter().map(String::len).sum()))
            .unwrap_or_default()
    }

    /// Waits (bounded) for a line containing `needle`: stderr is read by
    /// its own pump and may trail the answers.
    fn wait_for(&self, needle: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let found = self
                .0
                .lock()
                .map(|lines| lines.iter().any(|line| line.contains(needle)))
                .unwrap_or(false);
            if found || Instant::now() >= deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (bounded) until at least `count` lines contain `needle`.
    fn wait_for_count(&self, needle: &str, count: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let found = self
                .0
                .lock()
                .map(|lines| lines.iter().filter(|line| line.contains(needle)).count())
                .unwrap_or(0);
            if found >= count || Instant::now() >= deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn dump(&self) -> String {
        self.0
            .lock()
            .map(|lines| lines.join("\n"))
            .unwrap_or_default()
    }
}

/// What a failed query looked like, whatever the adapter.
#[derive(Debug)]
enum Failure {
    Query(QueryError),
    Spawn(String),
    Other(#[allow(dead_code, reason = "shown through Debug in failure messages")] String),
}

type Outcome = Result<VerifiedEvidence, Failure>;

/// One adapter's child-process provider client.
trait Row: Sized {
    /// Start the child.
    fn spawn(spec: &Spec) -> Result<Self, Failure>;
    /// Ask all `queries` at once (pipelined) and wait for every outcome.
    fn query_all(&self, queries: &[(EvidenceQuery, EvidenceContext)]) -> Vec<Outcome>;
}

mod rows {
    use super::*;

    pub struct Blocking(evidence_wire_blocking::ProcessProvider);

    fn blocking_failure(error: evidence_wire_blocking::ProviderError) -> Failure {
        use evidence_wire_blocking::ProviderError as E;
        match error {
            E::Query(error) => Failure::Query(error),
            E::Spawn { .. } => Failure::Spawn(error.to_string()),
            other => Failure::Other(other.to_string()),
        }
    }

    impl Row for Blocking {
        fn spawn(spec: &Spec) -> Result<Self, Failure> {
            use evidence_wire_blocking::{ProcessConfig, ProcessProvider};
            let config = ProcessConfig::new(spec.command.clone())
                .with_client(spec.client())
                .with_log(spec.log.sink())
                .with_backoff(spec.backoff, spec.backoff * 10);
            ProcessProvider::spawn(config)
                .map(Blocking)
                .map_err(blocking_failure)
        }

        fn query_all(&self, queries: &[(EvidenceQuery, EvidenceContext)]) -> Vec<Outcome> {
            std::thread::scope(|scope| {
                let handles: Vec<_> = queries
                    .iter()
                    .map(|(query, context)| {
                        scope.spawn(move || {
                            self.0
                                .query(query.clone(), context.clone())
                                .map_err(blocking_failure)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|handle| {
                        handle
                            .join()
                            .unwrap_or_else(|_| Err(Failure::Other("query thread panicked".into())))
                    })
                    .collect()
            })
        }
    }

    pub fn smol_failure(error: evidence_wire_smol::ProviderError) -> Failure {
        use evidence_wire_smol::ProviderError as E;
        match error {
            E::Query(error) => Failure::Query(error),
            E::Spawn { .. } => Failure::Spawn(error.to_string()),
            other => Failure::Other(other.to_string()),
        }
    }

    pub fn smol_spawn(spec: &Spec) -> Result<evidence_wire_smol::ProcessProvider, Failure> {
        use evidence_wire_smol::{ProcessConfig, ProcessProvider};
        let config = ProcessConfig::new(spec.command.clone())
            .with_client(spec.client())
            .with_log(spec.log.sink())
            .with_backoff(spec.backoff, spec.backoff * 10);
        ProcessProvider::spawn(config).map_err(smol_failure)
    }

    async fn smol_query_all(
        provider: &evidence_wire_smol::ProcessProvider,
        queries: &[(EvidenceQuery, EvidenceContext)],
    ) -> Vec<Outcome> {
        futures_util::future::join_all(queries.iter().map(|(query, context)| async move {
            provider.query(query, context).await.map_err(smol_failure)
        }))
        .await
    }

    /// The smol adapter on smol's executor.
    pub struct Smol(evidence_wire_smol::ProcessProvider);

    impl Row for Smol {
        fn spawn(spec: &Spec) -> Result<Self, Failure> {
            smol_spawn(spec).map(Smol)
        }

        fn query_all(&self, queries: &[(EvidenceQuery, EvidenceContext)]) -> Vec<Outcome> {
            ::smol::block_on(smol_query_all(&self.0, queries))
        }
    }

    /// The same smol adapter on async-std's executor.
    pub struct AsyncStd(evidence_wire_smol::ProcessProvider);

    impl Row for AsyncStd {
        fn spawn(spec: &Spec) -> Result<Self, Failure> {
            smol_spawn(spec).map(AsyncStd)
        }

        fn query_all(&self, queries: &[(EvidenceQuery, EvidenceContext)]) -> Vec<Outcome> {
            ::async_std::task::block_on(smol_query_all(&self.0, queries))
        }
    }

    /// The tokio adapter on a one-worker multi-thread tokio runtime (its
    /// supervisor and pumps keep running between queries, as in a service).
    #[cfg(feature = "tokio-row")]
    pub struct Tokio {
        provider: evidence_wire_tokio::ProcessProvider,
        runtime: ::tokio::runtime::Runtime,
    }

    #[cfg(feature = "tokio-row")]
    fn tokio_failure(error: evidence_wire_tokio::ProviderError) -> Failure {
        use evidence_wire_tokio::ProviderError as E;
        match error {
            E::Query(error) => Failure::Query(error),
            E::Spawn { .. } => Failure::Spawn(error.to_string()),
            other => Failure::Other(other.to_string()),
        }
    }

    #[cfg(feature = "tokio-row")]
    impl Row for Tokio {
        fn spawn(spec: &Spec) -> Result<Self, Failure> {
            use evidence_wire_tokio::{ProcessConfig, ProcessProvider};
            let runtime = ::tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .map_err(|error| Failure::Other(error.to_string()))?;
            let config = ProcessConfig::new(spec.command.clone())
                .with_client(spec.client())
                .with_log(spec.log.sink())
                .with_backoff(spec.backoff, spec.backoff * 10);
            let provider = {
                let _entered = runtime.enter();
                ProcessProvider::spawn(config).map_err(tokio_failure)?
            };
            Ok(Tokio { provider, runtime })
        }

        fn query_all(&self, queries: &[(EvidenceQuery, EvidenceContext)]) -> Vec<Outcome> {
            let provider = &self.provider;
            self.runtime
                .block_on(futures_util::future::join_all(queries.iter().map(
                    |(query, context)| async move {
                        provider.query(query, context).await.map_err(tokio_failure)
                    },
                )))
        }
    }
}

// ---------------------------------------------------------------------------
// Children and queries.

fn misbehave(mode: &str, extra: &[&str]) -> Vec<String> {
    let mut command = vec![env!("CARGO_BIN_EXE_misbehave").to_owned(), mode.to_owned()];
    command.extend(extra.iter().map(|arg| (*arg).to_owned()));
    command
}

/// `misbehave MODE --state <fresh file>`: misbehaves once, then behaves.
fn misbehave_once(mode: &str) -> (Vec<String>, StateFile) {
    let state = StateFile::new();
    let path = state.0.to_string_lossy().into_owned();
    (misbehave(mode, &["--state", &path, "--times", "1"]), state)
}

/// A fresh path in the temp dir, removed when dropped.
struct StateFile(PathBuf);

impl StateFile {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "evidence-wire-matrix-{}-{}.count",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_file(&path);
        StateFile(path)
    }

    fn count(&self) -> u64 {
        std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for StateFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn probe(n: u64) -> (EvidenceQuery, EvidenceContext) {
    (
        EvidenceQuery::new("matrix", "probe").with_params(json!({"n": n})),
        EvidenceContext::adhoc(TriggerTime::Logical(1)),
    )
}

fn one<R: Row>(row: &R, n: u64) -> Outcome {
    row.query_all(&[probe(n)])
        .into_iter()
        .next()
        .unwrap_or_else(|| Err(Failure::Other("no outcome".into())))
}

/// Asserts `outcome` is the test providers' answer to `probe(n)`, hashed.
fn assert_echo(outcome: &Outcome, n: u64, log: &Log) {
    let verified = match outcome {
        Ok(verified) => verified,
        Err(failure) => panic!("query {n} failed: {failure:?}\nlog:\n{}", log.dump()),
    };
    let value = verified
        .result()
        .value
        .as_ref()
        .and_then(|value| value.to_value().ok());
    assert_eq!(
        value,
        Some(json!({"check_id": "probe", "params": {"n": n}})),
        "query {n} got another query's answer"
    );
    assert!(verified.hash().is_some(), "query {n}: no verified hash");
}

fn spawn<R: Row>(spec: &Spec) -> R {
    match R::spawn(spec) {
        Ok(row) => row,
        Err(failure) => panic!("cannot start {:?}: {failure:?}", spec.command),
    }
}

// ---------------------------------------------------------------------------
// The cases, generic over the row.

fn good<R: Row>(framing: Framing) {
    let spec = Spec::new(misbehave("good", &[]), framing);
    let row = spawn::<R>(&spec);
    assert_echo(&one(&row, 1), 1, &spec.log);
    assert_echo(&one(&row, 2), 2, &spec.log);
    assert!(
        spec.log.wait_for("misbehave: Good ready"),
        "the child's stderr was not captured into the log:\n{}",
        spec.log.dump()
    );
}

fn pipelined<R: Row>(command: Vec<String>, framing: Framing) {
    let mut spec = Spec::new(command, framing);
    spec.timeout_ms = 5_000;
    let row = spawn::<R>(&spec);
    let queries: Vec<_> = (0..32).map(probe).collect();
    let outcomes = row.query_all(&queries);
    assert_eq!(outcomes.len(), 32);
    for (n, outcome) in (0..32).zip(&outcomes) {
        assert_echo(outcome, n, &spec.log);
    }
}

/// Four queries to a child that answers each after 300 ms on four worker
/// threads: pipelined, they take about 300 ms; one at a time, 1200 ms.
fn pipelined_concurrently<R: Row>() {
    let mut spec = Spec::new(
        misbehave("slow", &["--delay-ms", "300"]),
        Framing::ContentLength,
    );
    spec.timeout_ms = 5_000;
    let row = spawn::<R>(&spec);
    // Warm the child up so its start-up time is not measured.
    let _ = one(&row, 100);
    let queries: Vec<_> = (0..4).map(probe).collect();
    let started = Instant::now();
    let outcomes = row.query_all(&queries);
    let elapsed = started.elapsed();
    for (n, outcome) in (0..4).zip(&outcomes) {
        assert_echo(outcome, n, &spec.log);
    }
    assert!(
        elapsed < Duration::from_millis(1_100),
        "4 queries to a 300 ms provider took {elapsed:?}: they were not pipelined"
    );
}

/// Asserts the first query fails as `expected` says, and that the next one
/// succeeds on the restarted child.
fn fails_once_then_recovers<R: Row>(
    mode: &str,
    framing: Framing,
    expected: impl Fn(&Failure) -> bool,
    log_needle: &str,
) {
    let (command, state) = misbehave_once(mode);
    let spec = Spec::new(command, framing);
    fails_then_recovers::<R>(&spec, &state, mode, expected, log_needle);
}

/// [`fails_once_then_recovers`] for a child and settings already chosen.
fn fails_then_recovers<R: Row>(
    spec: &Spec,
    state: &StateFile,
    mode: &str,
    expected: impl Fn(&Failure) -> bool,
    log_needle: &str,
) {
    let row = spawn::<R>(spec);
    let started = Instant::now();
    let first = one(&row, 1);
    let took = started.elapsed();
    match &first {
        Err(failure) if expected(failure) => {}
        other => panic!(
            "{mode}: expected its typed error, got {other:?} after {took:?}\nlog:\n{}",
            spec.log.dump()
        ),
    }
    assert_eq!(
        state.count(),
        1,
        "{mode}: the child did not misbehave exactly once"
    );
    assert_echo(&one(&row, 2), 2, &spec.log);
    assert!(
        spec.log.wait_for(log_needle),
        "{mode}: log lacks {log_needle:?}:\n{}",
        spec.log.dump()
    );
    // The second answer came from a fresh child: two starts were logged.
    let starts = spec.log.wait_for_count(" ready", 2);
    assert!(
        starts >= 2,
        "{mode}: the child was not restarted ({starts} start):\n{}",
        spec.log.dump()
    );
}

// ---------------------------------------------------------------------------
// Fault injection (issue 11).

/// Most the peak resident memory of this test process may grow while a
/// child floods it: far below the floods (100 MiB), far above what the
/// adapters may hold (the client's 1 MiB frame limit plus at most 16 read
/// chunks of 64 KiB per child, a few children at once).
const MEMORY_GROWTH_LIMIT_KIB: u64 = 64 * 1024;

/// Peak resident memory of this process (Linux `VmHWM`, KiB); `None`
/// elsewhere, where the memory check is skipped.
fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

fn assert_memory_bounded(before: Option<u64>, what: &str) {
    if let (Some(before), Some(after)) = (before, peak_memory_kib()) {
        let growth = after.saturating_sub(before);
        assert!(
            growth < MEMORY_GROWTH_LIMIT_KIB,
            "{what}: peak memory grew by {growth} KiB (limit {MEMORY_GROWTH_LIMIT_KIB} KiB): the adapter buffered the flood"
        );
    }
}

/// How the query of a flooding child fails.
enum FloodFailure {
    /// As a lost connection, once the whole flood was read and the child
    /// exited (its output holds no id of ours).
    LostAfterFlood,
    /// At once, as a dropped answer naming the limit: the flood is one
    /// frame that starts with the answer, id included (issue 20.7).
    DroppedAtOnce,
}

/// A child that floods its stdout (`mode`: flood, huge-line, huge-frame)
/// instead of answering, then exits: the query fails as `expected` says
/// (the timeout is long, so it cannot be the cause), the junk was skipped
/// under the frame limit and logged a bounded number of times, memory
/// stayed bounded, and the next query succeeds on a fresh child.
fn flood_then_recovers<R: Row>(
    mode: &str,
    framing: Framing,
    done_needle: &str,
    limit_needle: Option<&str>,
    expected: FloodFailure,
) {
    let state = StateFile::new();
    let path = state.0.to_string_lossy().into_owned();
    let mut spec = Spec::new(
        misbehave(mode, &["--state", &path, "--times", "1"]),
        framing,
    );
    spec.timeout_ms = 20_000;
    let before = peak_memory_kib();
    let row = spawn::<R>(&spec);
    let started = Instant::now();
    let first = one(&row, 1);
    let took = started.elapsed();
    match (&expected, &first) {
        (FloodFailure::LostAfterFlood, Err(failure)) if is_lost("closed its output")(failure) => {
            assert!(
                took < Duration::from_secs(15),
                "{mode}: the flood took {took:?} to get through"
            );
        }
        (FloodFailure::DroppedAtOnce, Err(Failure::Query(QueryError::AnswerDropped(reason))))
            if reason.contains("over the limit of 1048576") =>
        {
            assert!(
                took < Duration::from_secs(3),
                "{mode}: the query took {took:?}: it waited for the flood or its timeout"
            );
        }
        (_, other) => panic!(
            "{mode}: unexpected outcome {other:?} after {took:?}\nlog:\n{}",
            spec.log.dump()
        ),
    }
    assert!(
        spec.log.wait_for(done_needle),
        "{mode}: the child did not finish its flood ({done_needle:?}):\n{}",
        spec.log.dump()
    );
    if matches!(expected, FloodFailure::DroppedAtOnce) {
        // The query failed before the flood was over: wait (bounded) for
        // the rest to be skipped, the child to exit and its restart.
        let deadline = Instant::now() + Duration::from_secs(15);
        while spec.log.wait_for_count(" ready", 2) < 2 && Instant::now() < deadline {}
    }
    assert_memory_bounded(before, mode);
    if let Some(limit_needle) = limit_needle {
        assert!(
            spec.log.wait_for(limit_needle),
            "{mode}: the frame limit error ({limit_needle:?}) was not reported:\n{}",
            spec.log.dump()
        );
    }
    assert_echo(&one(&row, 2), 2, &spec.log);
    assert_eq!(state.count(), 1, "{mode}: misbehaved more than once");
    let ignored = spec.log.wait_for_count("ignored a provider message", 1);
    assert!(
        (1..=16).contains(&ignored),
        "{mode}: {ignored} ignored messages were logged (expected 1..=16: at least the limit error, at most the per-child cap):\n{}",
        spec.log.dump()
    );
}

fn fault_flood<R: Row>(framing: Framing) {
    flood_then_recovers::<R>(
        "flood",
        framing,
        "flooded",
        None,
        FloodFailure::LostAfterFlood,
    );
}

fn fault_huge_line<R: Row>() {
    flood_then_recovers::<R>(
        "huge-line",
        Framing::NewlineDelimited,
        "without a newline on purpose",
        Some("longer than the limit"),
        FloodFailure::LostAfterFlood,
    );
}

fn fault_huge_frame<R: Row>() {
    flood_then_recovers::<R>(
        "huge-frame",
        Framing::ContentLength,
        "-byte frame on purpose; exiting",
        Some("over the limit"),
        FloodFailure::DroppedAtOnce,
    );
}

/// A child that never reads its stdin while we write far more than a pipe
/// holds (two queries, one with a 1 MiB parameter): the writer must not
/// block anything; the queries fail within their timeout (timed out, or
/// lost when the first timeout restarts the child), the child is
/// restarted, the next query succeeds.
fn fault_deaf<R: Row>() {
    let (command, state) = misbehave_once("deaf");
    let spec = Spec::new(command, Framing::ContentLength);
    let row = spawn::<R>(&spec);
    let (big, context) = probe(1);
    let big = big.with_params(json!({"n": 1, "pad": "p".repeat(1 << 20)}));
    let started = Instant::now();
    let outcomes = row.query_all(&[(big, context), probe(2)]);
    let took = started.elapsed();
    assert_eq!(outcomes.len(), 2);
    assert!(
        outcomes
            .iter()
            .any(|outcome| matches!(outcome, Err(failure) if is_timeout(failure))),
        "deaf: no query timed out: {outcomes:?}\nlog:\n{}",
        spec.log.dump()
    );
    for outcome in &outcomes {
        assert!(
            matches!(outcome, Err(failure) if is_timeout(failure) || is_lost("restart")(failure)),
            "deaf: {outcome:?}\nlog:\n{}",
            spec.log.dump()
        );
    }
    assert!(
        took < Duration::from_millis(TIMEOUT_MS + 1_500),
        "deaf: the queries took {took:?} (timeout {TIMEOUT_MS} ms): the writer blocked"
    );
    assert!(
        spec.log.wait_for("not reading stdin on purpose"),
        "{}",
        spec.log.dump()
    );
    assert_eq!(state.count(), 1);
    assert_echo(&one(&row, 3), 3, &spec.log);
    let starts = spec.log.wait_for_count(" ready", 2);
    assert!(starts >= 2, "deaf: not restarted:\n{}", spec.log.dump());
}

/// A child that answers one query after its timeout while answering
/// another at once: the slow query times out and the child is told
/// (`notifications/cancelled`); it is alive (it answered since), so it keeps
/// running; and nothing of the slow query reaches a later one.
fn fault_late_answer<R: Row>() {
    let state = StateFile::new();
    let path = state.0.to_string_lossy().into_owned();
    let spec = Spec::new(
        misbehave(
            "slow",
            &["--state", &path, "--times", "1", "--delay-ms", "1000"],
        ),
        Framing::NewlineDelimited,
    );
    let row = spawn::<R>(&spec);
    let started = Instant::now();
    // Whichever the child takes first is the slow one.
    let both = row.query_all(&[probe(1), probe(2)]);
    let took = started.elapsed();
    let (late, quick) = if both[0].is_err() { (0, 1) } else { (1, 0) };
    assert!(
        matches!(&both[late], Err(failure) if is_timeout(failure)),
        "late: {both:?} after {took:?}\nlog:\n{}",
        spec.log.dump()
    );
    assert_echo(&both[quick], quick as u64 + 1, &spec.log);
    assert!(
        took < Duration::from_millis(TIMEOUT_MS + 500),
        "late: the timeout took {took:?}"
    );
    assert!(
        spec.log.wait_for("cancelled: Some(\"timed out\")"),
        "late: the child was not told:\n{}",
        spec.log.dump()
    );
    // Past the moment the late answer was due, the same child answers.
    std::thread::sleep(Duration::from_millis(1_200).saturating_sub(started.elapsed()));
    assert_echo(&one(&row, 3), 3, &spec.log);
    let both: Vec<_> = row.query_all(&[probe(4), probe(5)]);
    assert_echo(&both[0], 4, &spec.log);
    assert_echo(&both[1], 5, &spec.log);
    assert_eq!(state.count(), 1);
    let log = spec.log.dump();
    assert_eq!(log.matches(" ready").count(), 1, "late: restarted:\n{log}");
}

/// A child whose answer is over the client's frame limit (2 MiB against
/// 1 MiB), in either framing: skipped without being stored, and the query
/// fails at once (well before its timeout) naming the limit; the child goes
/// on and answers the next query (issue 20.7; before: the full timeout).
fn fault_big_answer<R: Row>(framing: Framing) {
    fails_fast_then_same_child_answers::<R>(
        "big-answer",
        framing,
        "limit of 1048576",
        "-byte answer on purpose",
    );
}

/// A child whose evidence is nested deeper than the envelope limit (200
/// levels against 128), in either framing: dropped, and the query fails at
/// once naming the limit; the child goes on and answers the next query
/// (issue 20.7; before: `provider_timeout` after the full timeout).
fn fault_deep_answer<R: Row>(framing: Framing) {
    fails_fast_then_same_child_answers::<R>(
        "deep-answer",
        framing,
        "nested deeper than 128 levels",
        "nested 200 deep on purpose",
    );
}

/// Asserts the first query fails as [`QueryError::AnswerDropped`] naming
/// `limit_needle` within a fraction of its (long) timeout, and that the same
/// child, not restarted, answers the next queries.
fn fails_fast_then_same_child_answers<R: Row>(
    mode: &str,
    framing: Framing,
    limit_needle: &str,
    log_needle: &str,
) {
    let (command, state) = misbehave_once(mode);
    let mut spec = Spec::new(command, framing);
    spec.timeout_ms = 10_000;
    let row = spawn::<R>(&spec);
    let started = Instant::now();
    let first = one(&row, 1);
    let took = started.elapsed();
    match &first {
        Err(Failure::Query(QueryError::AnswerDropped(reason))) if reason.contains(limit_needle) => {
        }
        other => panic!(
            "{mode}: expected a dropped answer naming {limit_needle:?}, got {other:?} after {took:?}\nlog:\n{}",
            spec.log.dump()
        ),
    }
    assert!(
        took < Duration::from_secs(3),
        "{mode}: the query took {took:?}: it waited for its 10 s timeout"
    );
    assert_eq!(state.count(), 1, "{mode}: misbehaved more than once");
    assert!(
        spec.log.wait_for(log_needle),
        "{mode}: log lacks {log_needle:?}:\n{}",
        spec.log.dump()
    );
    assert_echo(&one(&row, 2), 2, &spec.log);
    assert_echo(&one(&row, 3), 3, &spec.log);
    let log = spec.log.dump();
    assert_eq!(
        log.matches(" ready").count(),
        1,
        "{mode}: restarted:\n{log}"
    );
}

/// How many bytes the child floods its stderr with, per query.
const STDERR_FLOOD: &str = "8388608";

/// A child that writes 8 MiB to its stderr before each answer, and a sink
/// that blocks on its first line, as a stderr nobody reads does (issue 20
/// item 8): the child's stderr is drained and dropped, so the queries are
/// answered within their timeout and the supervisor's notes do not wait
/// for the sink either; the sink saw one line.
fn fault_stderr_flood_blocked_sink<R: Row>() {
    let mut spec = Spec::new(
        misbehave("stderr-flood", &["--bytes", STDERR_FLOOD]),
        Framing::ContentLength,
    );
    spec.timeout_ms = 5_000;
    spec.log = Log::blocking();
    let row = spawn::<R>(&spec);
    let started = Instant::now();
    let outcomes = row.query_all(&[probe(1), probe(2)]);
    let took = started.elapsed();
    assert_echo(&outcomes[0], 1, &spec.log);
    assert_echo(&outcomes[1], 2, &spec.log);
    assert!(
        took < Duration::from_millis(spec.timeout_ms),
        "stderr flood: the queries took {took:?}"
    );
    // A query that times out is answered on time too: the supervisor's
    // note about it does not wait for the blocked sink.
    let (hang, _state) = misbehave_once("hang");
    let mut hung = Spec::new(hang, Framing::ContentLength);
    hung.log = Log::blocking();
    let row = spawn::<R>(&hung);
    let started = Instant::now();
    let outcome = one(&row, 3);
    let took = started.elapsed();
    assert!(
        matches!(&outcome, Err(failure) if is_timeout(failure)),
        "{outcome:?}"
    );
    assert!(
        took < Duration::from_millis(TIMEOUT_MS + 1_000),
        "the timeout took {took:?} with a blocked sink"
    );
    let (lines, _) = spec.log.size();
    assert!(lines <= 1, "the blocked sink was called {lines} times");
}

/// The same flood with a sink that keeps up: what reaches it is a bounded
/// excerpt (the first 16 KiB, then 2 KiB/s) ending in a summary of what
/// was dropped, not the 16 MiB the child wrote.
fn fault_stderr_flood_is_excerpted<R: Row>() {
    let mut spec = Spec::new(
        misbehave("stderr-flood", &["--bytes", STDERR_FLOOD]),
        Framing::NewlineDelimited,
    );
    spec.timeout_ms = 5_000;
    let row = spawn::<R>(&spec);
    let started = Instant::now();
    assert_echo(&one(&row, 1), 1, &spec.log);
    assert_echo(&one(&row, 2), 2, &spec.log);
    let took = started.elapsed();
    assert!(
        spec.log
            .wait_for("flooded stderr with 8388608 bytes on purpose"),
        "{}",
        spec.log.dump()
    );
    assert!(
        spec.log.wait_for("of provider stderr dropped"),
        "no summary of the dropped lines:\n{}",
        spec.log.dump()
    );
    let (lines, bytes) = spec.log.size();
    // 16 KiB at once, 2 KiB a second after, lines of at most 1 KiB, plus
    // the notes and summaries; far below the 16 MiB written.
    let bound = 16 * 1024 + 2048 * (took.as_secs() as usize + 2) + 8 * 1024;
    assert!(
        bytes <= bound,
        "{bytes} bytes in {lines} lines reached the sink (bound {bound}) in {took:?}"
    );
}

fn is_timeout(failure: &Failure) -> bool {
    matches!(failure, Failure::Query(QueryError::Timeout(ms)) if *ms == TIMEOUT_MS)
}

fn is_lost(needle: &'static str) -> impl Fn(&Failure) -> bool {
    move |failure| matches!(failure, Failure::Query(QueryError::ConnectionLost(reason)) if reason.contains(needle))
}

fn crash_request<R: Row>(framing: Framing) {
    fails_once_then_recovers::<R>(
        "crash-request",
        framing,
        is_lost("closed its output"),
        "crashing on purpose after reading a request",
    );
}

fn crash_half<R: Row>(framing: Framing) {
    fails_once_then_recovers::<R>(
        "crash-half",
        framing,
        is_lost("mid-message"),
        "crashing on purpose in the middle of an answer",
    );
}

fn hang<R: Row>(framing: Framing) {
    fails_once_then_recovers::<R>("hang", framing, is_timeout, "hanging on purpose");
}

fn garbage<R: Row>(framing: Framing) {
    // Garbage is skipped, never taken as an answer: the query times out (a
    // line of plain text is not reported as a dropped answer).
    fails_once_then_recovers::<R>("garbage", framing, is_timeout, "garbage on purpose");
}

fn desync<R: Row>(framing: Framing) {
    fails_once_then_recovers::<R>(
        "desync",
        framing,
        is_lost("desynchronized"),
        "desynchronizing the stream on purpose",
    );
}

/// A child whose stdout opens with a banner line: the line is dropped and
/// logged, and the first query is answered by that same child.
fn banner<R: Row>(framing: Framing) {
    let (command, state) = misbehave_once("banner");
    let spec = Spec::new(command, framing);
    let row = spawn::<R>(&spec);
    assert_echo(&one(&row, 1), 1, &spec.log);
    assert_eq!(state.count(), 1, "banner: printed exactly once");
    assert!(
        spec.log.wait_for("ignored a provider message"),
        "banner: the dropped line is logged:\n{}",
        spec.log.dump()
    );
}

fn wrong_id<R: Row>(framing: Framing) {
    // An answer to an id never asked is not taken: the query times out.
    fails_once_then_recovers::<R>("wrong-id", framing, is_timeout, "wrong id on purpose");
}

/// A query that arrives while the child waits for its restart (a long
/// backoff) does not wait for the restart: it fails within its own timeout,
/// either as a timeout (it waited for the fresh child) or at once as a lost
/// connection (the adapter fails fast while the child is down).
fn query_during_backoff_is_bounded<R: Row>() {
    let mut spec = Spec::new(misbehave("crash-request", &[]), Framing::ContentLength);
    spec.backoff = Duration::from_secs(3);
    let row = spawn::<R>(&spec);
    let first = one(&row, 1);
    assert!(
        matches!(first, Err(Failure::Query(QueryError::ConnectionLost(_)))),
        "{first:?}"
    );
    let started = Instant::now();
    let second = one(&row, 2);
    let took = started.elapsed();
    assert!(
        matches!(
            &second,
            Err(failure) if is_timeout(failure)
                || matches!(failure, Failure::Query(QueryError::ConnectionLost(_)))
        ),
        "{second:?}\nlog:\n{}",
        spec.log.dump()
    );
    assert!(
        took < Duration::from_millis(2_000),
        "the query waited {took:?} for a restart 3 s away"
    );
}

fn slow_within_timeout<R: Row>() {
    let mut spec = Spec::new(
        misbehave("slow", &["--delay-ms", "100"]),
        Framing::NewlineDelimited,
    );
    spec.timeout_ms = 2_000;
    let row = spawn::<R>(&spec);
    assert_echo(&one(&row, 7), 7, &spec.log);
}

fn smol_served<R: Row>(framing: Framing) {
    let command = vec![
        env!("CARGO_BIN_EXE_smol-provider").to_owned(),
        "--delay-ms".to_owned(),
        "5".to_owned(),
    ];
    pipelined::<R>(command.clone(), framing);
    let spec = Spec::new(command, framing);
    let row = spawn::<R>(&spec);
    assert_echo(&one(&row, 3), 3, &spec.log);
    assert!(
        spec.log.wait_for("smol-provider: ready"),
        "{}",
        spec.log.dump()
    );
}

fn cli_serve<R: Row>(framing: Framing) {
    let cli = cli_binary();
    let mut spec = Spec::new(vec![cli, "serve".to_owned()], framing);
    spec.timeout_ms = 5_000;
    let row = spawn::<R>(&spec);
    let query = EvidenceQuery::new("evidence-wire", "time_now");
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_700_000_000_000));
    let outcomes = row.query_all(&[(query.clone(), context.clone()), (query, context)]);
    for outcome in outcomes {
        let verified = match outcome {
            Ok(verified) => verified,
            Err(failure) => panic!("the CLI failed: {failure:?}\nlog:\n{}", spec.log.dump()),
        };
        assert!(verified.result().error.is_none(), "{:?}", verified.result());
        assert!(verified.result().value.is_some());
        assert!(verified.hash().is_some());
    }
}

fn spawn_failure<R: Row>() {
    let spec = Spec::new(
        vec!["/nonexistent/evidence-wire-provider".to_owned()],
        Framing::ContentLength,
    );
    match R::spawn(&spec) {
        Err(Failure::Spawn(message)) => {
            assert!(
                message.contains("/nonexistent/evidence-wire-provider"),
                "{message}"
            );
        }
        Err(other) => panic!("expected a spawn error, got {other:?}"),
        Ok(_) => panic!("a missing program was started"),
    }
}

/// A provider behind a launcher that does not `exec` (`sh -c '<provider>;
/// true'`) and hangs (issue 39 item 3): its query times out and the child is
/// restarted; the restart ends the old child's whole process group (the
/// launcher and the provider under it, whose pids the launcher and
/// `misbehave --pid-file` wrote), the fresh child answers, and dropping the
/// client ends the fresh group too. Before, only the launcher was killed:
/// the provider lived on, its stdout and stderr pumps attached.
#[cfg(unix)]
fn restart_ends_the_process_group<R: Row>() {
    let state = StateFile::new();
    let pids = StateFile::new();
    let script = r#"echo $$ >> "$2"; "$0" hang --state "$1" --times 1 --pid-file "$2"; true"#;
    let command = [
        "sh",
        "-c",
        script,
        env!("CARGO_BIN_EXE_misbehave"),
        &state.0.to_string_lossy(),
        &pids.0.to_string_lossy(),
    ];
    let spec = Spec::new(
        command.iter().map(|arg| (*arg).to_owned()).collect(),
        Framing::ContentLength,
    );
    let row = spawn::<R>(&spec);
    let first = one(&row, 1);
    assert!(
        matches!(&first, Err(failure) if is_timeout(failure)),
        "the hung query: {first:?}\nlog:\n{}",
        spec.log.dump()
    );
    assert_echo(&one(&row, 2), 2, &spec.log);
    // Each child wrote its launcher's pid, then its provider's.
    let written = pid_lines(&pids);
    assert_eq!(
        written.len(),
        4,
        "two children of two processes: {written:?}"
    );
    let (old, fresh) = written.split_at(2);
    let lingering = wait_until_ended(old);
    assert!(
        lingering.is_empty(),
        "the restarted child's processes still run: {lingering:?} (of {old:?})\nlog:\n{}",
        spec.log.dump()
    );
    assert!(
        fresh.iter().all(|pid| running(*pid)),
        "the fresh child does not run: {fresh:?}"
    );
    drop(row);
    let lingering = wait_until_ended(fresh);
    assert!(
        lingering.is_empty(),
        "the dropped client's processes still run: {lingering:?} (of {fresh:?})"
    );
}

/// The pids in `file`, one a line.
#[cfg(unix)]
fn pid_lines(file: &StateFile) -> Vec<u32> {
    std::fs::read_to_string(&file.0)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Waits (bounded: past the ending's grace) until none of `pids` runs;
/// those that still do (killed, so that a failed run leaves nothing).
#[cfg(unix)]
fn wait_until_ended(pids: &[u32]) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lingering: Vec<u32> = pids.iter().copied().filter(|pid| running(*pid)).collect();
        if lingering.is_empty() || Instant::now() >= deadline {
            for pid in &lingering {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            return lingering;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True while `pid` runs. A zombie (dead, not yet reaped: in a container
/// whose init does not reap orphans it stays one) does not count.
#[cfg(unix)]
fn running(pid: u32) -> bool {
    if std::path::Path::new("/proc/self/stat").exists() {
        return std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        });
    }
    std::process::Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Dropping a smol query future cancels the query: the child is told
/// (`notifications/cancelled`, which `misbehave` logs) and the provider
/// stays usable. Runtime-specific, so outside the matrix.
#[test]
fn smol_dropped_query_is_cancelled() {
    let mut spec = Spec::new(
        misbehave("slow", &["--delay-ms", "300"]),
        Framing::NewlineDelimited,
    );
    spec.timeout_ms = 5_000;
    let provider = match rows::smol_spawn(&spec) {
        Ok(provider) => provider,
        Err(failure) => panic!("cannot start misbehave: {failure:?}"),
    };
    let (query, context) = probe(1);
    let gave_up = ::smol::block_on(futures_util::future::select(
        Box::pin(provider.query(&query, &context)),
        Box::pin(::smol::Timer::after(Duration::from_millis(50))),
    ));
    assert!(
        matches!(gave_up, futures_util::future::Either::Right(_)),
        "the slow query answered within 50 ms"
    );
    drop(gave_up);
    assert!(
        spec.log.wait_for("cancelled by the caller"),
        "the child never heard of the cancellation:\n{}",
        spec.log.dump()
    );
    let (query, context) = probe(2);
    let outcome = ::smol::block_on(provider.query(&query, &context)).map_err(rows::smol_failure);
    assert_echo(&outcome, 2, &spec.log);
}

/// The CLI binary: `EVIDENCE_WIRE_CLI` if set (to test another build of
/// it), otherwise this package's `evidence-wire-cli` binary, the same program
/// (`evidence_wire_cli::run`) built by `cargo test`.
fn cli_binary() -> String {
    std::env::var("EVIDENCE_WIRE_CLI")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_evidence-wire-cli").to_owned())
}

// ---------------------------------------------------------------------------
// The matrix: every case for every row.

macro_rules! matrix {
    ($($(#[$attr:meta])* $row:ident => $ty:ty),* $(,)?) => {$(
        $(#[$attr])*
        mod $row {
            use super::*;
            type R = $ty;

            #[test] fn good_content_length() { good::<R>(Framing::ContentLength) }
            #[test] fn good_ndjson() { good::<R>(Framing::NewlineDelimited) }
            #[test] fn pipelined_32_content_length() {
                pipelined::<R>(misbehave("good", &[]), Framing::ContentLength)
            }
            #[test] fn pipelined_32_ndjson() {
                pipelined::<R>(misbehave("good", &[]), Framing::NewlineDelimited)
            }
            #[test] fn pipelined_queries_run_concurrently() { pipelined_concurrently::<R>() }
            #[test] fn crash_mid_request() { crash_request::<R>(Framing::ContentLength) }
            #[test] fn crash_mid_answer() { crash_half::<R>(Framing::NewlineDelimited) }
            #[test] fn hang_times_out() { hang::<R>(Framing::ContentLength) }
            #[test] fn garbage_times_out() { garbage::<R>(Framing::NewlineDelimited) }
            #[test] fn desync_loses_connection() { desync::<R>(Framing::ContentLength) }
            #[test] fn wrong_id_times_out() { wrong_id::<R>(Framing::NewlineDelimited) }
            #[test] fn banner_before_ndjson() { banner::<R>(Framing::NewlineDelimited) }
            #[test] fn banner_before_content_length() { banner::<R>(Framing::ContentLength) }
            #[test] fn slow_answer_within_timeout() { slow_within_timeout::<R>() }
            #[test] fn query_during_backoff_is_bounded() {
                super::query_during_backoff_is_bounded::<R>()
            }
            #[test] fn smol_served_content_length() { smol_served::<R>(Framing::ContentLength) }
            #[test] fn smol_served_ndjson() { smol_served::<R>(Framing::NewlineDelimited) }
            #[test] fn cli_serve_content_length() { cli_serve::<R>(Framing::ContentLength) }
            #[test] fn cli_serve_ndjson() { cli_serve::<R>(Framing::NewlineDelimited) }
            #[test] fn missing_program_is_a_spawn_error() { spawn_failure::<R>() }
            #[test] fn fault_killed_mid_answer_content_length() {
                crash_half::<R>(Framing::ContentLength)
            }
            #[test] fn fault_deaf_child_does_not_block_the_writer() { fault_deaf::<R>() }
            #[test] fn fault_flood_ndjson() { fault_flood::<R>(Framing::NewlineDelimited) }
            #[test] fn fault_flood_content_length() { fault_flood::<R>(Framing::ContentLength) }
            #[test] fn fault_huge_line() { super::fault_huge_line::<R>() }
            #[test] fn fault_huge_frame() { super::fault_huge_frame::<R>() }
            #[test] fn fault_big_answer_content_length() { super::fault_big_answer::<R>(Framing::ContentLength) }
            #[test] fn fault_big_answer_ndjson() { super::fault_big_answer::<R>(Framing::NewlineDelimited) }
            #[test] fn fault_deep_answer_content_length() { super::fault_deep_answer::<R>(Framing::ContentLength) }
            #[test] fn fault_deep_answer_ndjson() { super::fault_deep_answer::<R>(Framing::NewlineDelimited) }
            #[test] fn fault_late_answer_is_dropped() { fault_late_answer::<R>() }
            #[test] fn fault_stderr_flood_with_a_blocked_sink() {
                fault_stderr_flood_blocked_sink::<R>()
            }
            #[test] fn fault_stderr_flood_is_excerpted() { super::fault_stderr_flood_is_excerpted::<R>() }
            #[cfg(unix)]
            #[test] fn restart_ends_the_process_group() { super::restart_ends_the_process_group::<R>() }
        }
    )*};
}

matrix! {
    blocking => rows::Blocking,
    smol => rows::Smol,
    async_std => rows::AsyncStd,
    #[cfg(feature = "tokio-row")]
    tokio => rows::Tokio,
}
