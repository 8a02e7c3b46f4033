//! The relay of a provider child's stderr (and of the process adapters'
//! own notes) to a log sink: bounded, rate-limited, and never blocking.
//!
//! A child process may write to its stderr without end (2.6 GB in 3 s was
//! measured), and the sink may block: the default sink writes to this
//! process's stderr, which may be a pipe nobody reads. The relay keeps the
//! two apart, so that neither can stall the protocol or a timeout:
//!
//! - The adapters' stderr pumps read the child's stderr as fast as it
//!   comes and hand each line to [`StderrRelay::line`], which never
//!   blocks: it decides, queues or drops, and returns. Dropping is the
//!   answer to a flood: the child's pipe is always drained.
//! - A delivery thread of the relay's own calls the sink. When the sink
//!   blocks, only that thread waits; the queue between them
//!   ([`RelayLimits::queue`] lines) fills and further lines are dropped
//!   and counted. The thread holds nothing the query path needs.
//! - Lines are rate-limited by a token bucket on their bytes: the first
//!   [`RelayLimits::burst_bytes`] pass at once, then
//!   [`RelayLimits::bytes_per_second`]; each line costs its excerpt's
//!   length plus [`LINE_COST`], so a flood of empty lines is limited too.
//!   A line longer than [`RelayLimits::max_line_bytes`] is cut and ended
//!   with `… (N bytes)`.
//! - When lines start being dropped, a notice says so at once (the
//!   process may end before any summary); dropped lines are summarised
//!   before the next line that passes, every
//!   [`FLUSH_INTERVAL`] while a flood goes on, and at the end of a child's
//!   stderr ([`StderrRelay::end_of_stream`]):
//!   `… K bytes (L lines) of provider stderr dropped (…)`; the last line
//!   dropped is held back and relayed with the summary (unless a newer
//!   line passed), so the line a flood ends with is not lost.
//! - The adapters' own notes ([`StderrRelay::note`]: restarts, ignored
//!   messages, which the core already bounds) skip the rate limit but go
//!   through the same queue, so they never block either.
//! - Every line (the child's, a note, the held last one) reaches the sink
//!   with its terminal controls escaped ([`printable`]): a child cannot
//!   move the cursor, erase the sink's prefix or recolour the screen of
//!   whoever reads this process's stderr (issue 38). A line's cost is its
//!   escaped excerpt's length, so the escapes count against the rate limit
//!   too.
//!
//! So what reaches the sink is bounded by `burst_bytes` plus
//! `bytes_per_second` per second, plus one notice and one summary per
//! passed line and one
//! summary and one line per [`FLUSH_INTERVAL`]; what waits in memory by
//! `queue` lines of at most `max_line_bytes` (notes: 4 KiB).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::{Duration, Instant};

#[cfg(test)]
use evidence_wire::text::is_terminal_control;
use evidence_wire::text::printable;

/// Where relayed lines go (the process adapters' `LogSink`).
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// The bytes a relayed line costs beyond its own length.
pub const LINE_COST: u64 = 64;

/// The relay's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayLimits {
    /// Bytes (with [`LINE_COST`] per line) that pass at once: the bucket's size.
    pub burst_bytes: u64,
    /// Bytes per second that pass after the burst: the bucket's refill rate.
    pub bytes_per_second: u64,
    /// Longest line relayed; longer lines are cut to an excerpt.
    pub max_line_bytes: usize,
    /// Lines waiting for the sink, at most; more are dropped.
    pub queue: usize,
}

impl Default for RelayLimits {
    /// 16 KiB at once, then 2 KiB per second; lines cut at 1 KiB; 256 lines queued.
    fn default() -> Self {
        RelayLimits {
            burst_bytes: 16 * 1024,
            bytes_per_second: 2 * 1024,
            max_line_bytes: 1024,
            queue: 256,
        }
    }
}

impl RelayLimits {
    /// The same limits with a burst of `burst_bytes` and a rate of `bytes_per_second`.
    pub fn with_rate(mut self, burst_bytes: u64, bytes_per_second: u64) -> Self {
        self.burst_bytes = burst_bytes;
        self.bytes_per_second = bytes_per_second;
        self
    }
}

/// A token bucket over milliseconds (sans-IO: the caller passes the time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    /// Capacity in milli-bytes.
    capacity: u64,
    /// Refill in milli-bytes per millisecond (= bytes per second).
    rate: u64,
    tokens: u64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket of `burst` bytes refilled at `per_second` bytes per second.
    pub fn new(burst: u64, per_second: u64) -> Self {
        let capacity = burst.saturating_mul(1000);
        TokenBucket {
            capacity,
            rate: per_second,
            tokens: capacity,
            last_ms: 0,
        }
    }

    /// Takes `cost` bytes at `now_ms` if the bucket holds them.
    pub fn take(&mut self, cost: u64, now_ms: u64) -> bool {
        let elapsed = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        self.tokens = self
            .tokens
            .saturating_add(elapsed.saturating_mul(self.rate))
            .min(self.capacity);
        let cost = cost.saturating_mul(1000);
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

/// What happened to the lines given to a relay so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayCounts {
    /// Lines queued for the sink (notes and summaries included).
    pub relayed_lines: u64,
    /// Bytes of those lines.
    pub relayed_bytes: u64,
    /// Lines of the child dropped (rate limit or full queue).
    pub dropped_lines: u64,
    /// Bytes of the child dropped.
    pub dropped_bytes: u64,
}

/// How often the delivery thread flushes what a flood left unreported.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

struct State {
    bucket: TokenBucket,
    counts: RelayCounts,
    /// Dropped since the last summary (the held tail aside).
    unreported_lines: u64,
    unreported_bytes: u64,
    /// The last line dropped, held back (its first `max_line_bytes`, and
    /// its length): relayed by the next flush unless a newer line passes.
    tail: Vec<u8>,
    tail_len: Option<u64>,
    /// Lines are being dropped (the notice saying so was queued).
    dropping: bool,
}

impl State {
    /// Count the held tail as dropped for good.
    fn forget_tail(&mut self) {
        if let Some(bytes) = self.tail_len.take() {
            self.unreported_lines = self.unreported_lines.saturating_add(1);
            self.unreported_bytes = self.unreported_bytes.saturating_add(bytes);
        }
        self.tail.clear();
    }

    /// Hold `raw` as the newest dropped line (the previous one is dropped
    /// for good).
    fn hold(&mut self, raw: &[u8], max_line_bytes: usize) {
        self.forget_tail();
        let bytes = u64::try_from(raw.len()).unwrap_or(u64::MAX);
        self.counts.dropped_lines = self.counts.dropped_lines.saturating_add(1);
        self.counts.dropped_bytes = self.counts.dropped_bytes.saturating_add(bytes);
        self.tail
            .extend_from_slice(raw.get(..max_line_bytes).unwrap_or(raw));
        self.tail_len = Some(bytes);
    }
}

struct Shared {
    limits: RelayLimits,
    epoch: Instant,
    state: Mutex<State>,
    queue: Option<SyncSender<String>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queue `text` for the sink; false when the queue is full or gone.
    fn enqueue(&self, state: &mut State, text: String) -> bool {
        let bytes = u64::try_from(text.len()).unwrap_or(u64::MAX);
        let Some(queue) = &self.queue else {
            return false;
        };
        match queue.try_send(text) {
            Ok(()) => {
                state.counts.relayed_lines = state.counts.relayed_lines.saturating_add(1);
                state.counts.relayed_bytes = state.counts.relayed_bytes.saturating_add(bytes);
                true
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// Queue the summary of what was dropped and the held tail, if any.
    /// Not rate-limited: it runs at most once per [`FLUSH_INTERVAL`] and at
    /// the end of a stream.
    fn flush(&self) {
        let mut state = self.state();
        if state.unreported_lines > 0 {
            let summary = summary(&state, &self.limits);
            if self.enqueue(&mut state, summary) {
                state.unreported_lines = 0;
                state.unreported_bytes = 0;
            }
        }
        if let Some(bytes) = state.tail_len {
            let text = cut_line(&state.tail, bytes, self.limits.max_line_bytes);
            if self.enqueue(&mut state, text) {
                state.tail_len = None;
                state.tail.clear();
            }
        }
    }
}

/// A never-blocking relay of stderr lines to a [`LogSink`]. Cheap to clone;
/// clones share the limits, the counts and the delivery thread, which ends
/// when the last clone is dropped and the queue is delivered.
#[derive(Clone)]
pub struct StderrRelay {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for StderrRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StderrRelay")
            .field("limits", &self.shared.limits)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl StderrRelay {
    /// A relay to `sink` under `limits`, with its delivery thread. If the
    /// thread cannot be started, every line is dropped (and counted).
    pub fn new(sink: LogSink, limits: RelayLimits) -> Self {
        let (sender, receiver) = mpsc::sync_channel::<String>(limits.queue.max(1));
        let shared = Arc::new(Shared {
            limits,
            epoch: Instant::now(),
            state: Mutex::new(State {
                bucket: TokenBucket::new(limits.burst_bytes, limits.bytes_per_second),
                counts: RelayCounts::default(),
                unreported_lines: 0,
                unreported_bytes: 0,
                tail: Vec::new(),
                tail_len: None,
                dropping: false,
            }),
            queue: Some(sender),
        });
        let weak = Arc::downgrade(&shared);
        let started = thread::Builder::new()
            .name("evidence-wire-stderr-relay".into())
            .spawn(move || deliver(&receiver, &sink, &weak));
        match started {
            Ok(_) => StderrRelay { shared },
            // Without the thread, nothing may be queued: drop everything.
            Err(_) => StderrRelay {
                shared: Arc::new(Shared {
                    limits,
                    epoch: Instant::now(),
                    state: Mutex::new(State {
                        bucket: TokenBucket::new(0, 0),
                        counts: RelayCounts::default(),
                        unreported_lines: 0,
                        unreported_bytes: 0,
                        tail: Vec::new(),
                        tail_len: None,
                        dropping: false,
                    }),
                    queue: None,
                }),
            },
        }
    }

    /// One line the child wrote (with or without its newline, or a piece
    /// of a longer one): relayed if the rate limit and the queue allow,
    /// else dropped and counted (the newest dropped line is held back for
    /// the next flush). Never blocks.
    pub fn line(&self, raw: &[u8]) {
        let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let limits = &self.shared.limits;
        let bytes = u64::try_from(raw.len()).unwrap_or(u64::MAX);
        // What the sink would get (escaped, cut): its length is the cost,
        // so escapes cannot multiply what passes the rate limit.
        let text = cut_line(raw, bytes, limits.max_line_bytes);
        let cost = u64::try_from(text.len())
            .unwrap_or(u64::MAX)
            .saturating_add(LINE_COST);
        let now = self.now_ms();
        let mut state = self.shared.state();
        if !state.bucket.take(cost, now) {
            if !state.dropping {
                // Say so at once: the process may end before a summary.
                state.dropping = true;
                let notice = format!(
                    "… provider stderr over its rate limit ({} bytes at once, then {} bytes/s): dropping lines, a summary follows",
                    limits.burst_bytes, limits.bytes_per_second
                );
                let _ = self.shared.enqueue(&mut state, notice);
            }
            state.hold(raw, limits.max_line_bytes);
            return;
        }
        state.dropping = false;
        // A newer line passes: the held one is dropped for good.
        state.forget_tail();
        if state.unreported_lines > 0 {
            let summary = summary(&state, limits);
            if self.shared.enqueue(&mut state, summary) {
                state.unreported_lines = 0;
                state.unreported_bytes = 0;
            }
        }
        if !self.shared.enqueue(&mut state, text) {
            state.hold(raw, limits.max_line_bytes);
        }
    }

    /// One of the adapter's own notes: not rate-limited (the core bounds
    /// them), but dropped when the queue is full. Never blocks.
    pub fn note(&self, text: &str) {
        let mut state = self.shared.state();
        let text = cut_line(text.as_bytes(), u64::MAX, 4096);
        let _ = self.shared.enqueue(&mut state, text);
    }

    /// A child's stderr ended: summarise what was dropped and relay the
    /// held last line. Never blocks.
    pub fn end_of_stream(&self) {
        self.shared.flush();
    }

    /// What was relayed and dropped so far.
    pub fn counts(&self) -> RelayCounts {
        self.shared.state().counts
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.shared.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// `raw` (the first bytes of a line of `original` bytes; `u64::MAX` when
/// `raw` is all of it) as text of at most `max` bytes: decoded lossily,
/// terminal controls escaped ([`printable`]), and when cut, ended with
/// `… (N bytes)` naming the original length.
fn cut_line(raw: &[u8], original: u64, max: usize) -> String {
    let original = if original == u64::MAX {
        u64::try_from(raw.len()).unwrap_or(u64::MAX)
    } else {
        original
    };
    // Decoding and escaping never shorten text, so the first `max` bytes
    // of the result come from at most the first `max` bytes of `raw` (the
    // extra 4 keep a character cut at the end whole or past the cut).
    let head = raw.get(..max.saturating_add(4)).unwrap_or(raw);
    let decoded = String::from_utf8_lossy(head);
    let text = printable(&decoded);
    let whole =
        head.len() == raw.len() && u64::try_from(raw.len()).is_ok_and(|len| len == original);
    if whole && text.len() <= max {
        return text.into_owned();
    }
    let marker = format!("… ({original} bytes)");
    let mut end = max.saturating_sub(marker.len()).min(text.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = String::with_capacity(end.saturating_add(marker.len()));
    cut.push_str(text.get(..end).unwrap_or_default());
    cut.push_str(&marker);
    cut
}

fn summary(state: &State, limits: &RelayLimits) -> String {
    format!(
        "… {} bytes ({} lines) of provider stderr dropped (relayed at most {} bytes at once, then {} bytes/s)",
        state.unreported_bytes, state.unreported_lines, limits.burst_bytes, limits.bytes_per_second
    )
}

/// The delivery thread: calls the sink with each queued line, and every
/// [`FLUSH_INTERVAL`] flushes what a flood left unreported. Ends when
/// every relay is gone and the queue is delivered.
fn deliver(lines: &Receiver<String>, sink: &LogSink, shared: &Weak<Shared>) {
    let mut next_flush = Instant::now() + FLUSH_INTERVAL;
    loop {
        let wait = next_flush.saturating_duration_since(Instant::now());
        match lines.recv_timeout(wait) {
            Ok(line) => sink(&line),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if Instant::now() >= next_flush {
            match shared.upgrade() {
                Some(shared) => shared.flush(),
                // The relays are gone: deliver what is queued, then end.
                None => {
                    while let Ok(line) = lines.recv() {
                        sink(&line);
                    }
                    return;
                }
            }
            next_flush = Instant::now() + FLUSH_INTERVAL;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;
    use std::sync::mpsc::Sender;
    use std::time::Duration;

    #[test]
    fn the_bucket_passes_a_burst_then_its_rate() {
        let mut bucket = TokenBucket::new(1000, 100);
        assert!(bucket.take(600, 0));
        assert!(bucket.take(400, 0));
        assert!(!bucket.take(1, 0), "the burst is spent");
        assert!(!bucket.take(100, 999));
        assert!(bucket.take(100, 1000), "100 bytes a second");
        assert!(!bucket.take(1, 1000));
        // Never more than the burst, however long it rested.
        assert!(!bucket.take(1001, 10_000_000));
        assert!(bucket.take(1000, 10_000_000));
        // A clock that goes back does not refill.
        assert!(!bucket.take(1, 5));
    }

    fn collecting() -> (LogSink, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink_lines = Arc::clone(&lines);
        let sink: LogSink = Arc::new(move |line: &str| {
            sink_lines.lock().expect("lines").push(line.to_owned());
        });
        (sink, lines)
    }

    fn wait_for(lines: &Mutex<Vec<String>>, count: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let seen = lines.lock().expect("lines").clone();
            if seen.len() >= count || Instant::now() >= deadline {
                return seen;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_flood_is_cut_to_the_burst_and_summarised() {
        let (sink, lines) = collecting();
        let limits = RelayLimits::default().with_rate(4096, 1);
        let relay = StderrRelay::new(sink, limits);
        for n in 0..100_000 {
            relay.line(format!("{n:0100}\n").as_bytes());
        }
        relay.end_of_stream();
        let counts = relay.counts();
        // 164 bytes a line: 24 lines fit in 4096, then the notice that
        // lines are dropped, the summary and the held last line.
        assert!((27..=29).contains(&counts.relayed_lines), "{counts:?}");
        let notice = wait_for(&lines, 25)[24].clone();
        assert!(notice.contains("over its rate limit"), "{notice}");
        assert!(counts.dropped_lines >= 99_970, "{counts:?}");
        assert!(counts.relayed_bytes < 8192, "{counts:?}");
        let seen = wait_for(
            &lines,
            usize::try_from(counts.relayed_lines).expect("count"),
        );
        let summary = &seen[seen.len() - 2];
        assert!(
            summary.starts_with("… ") && summary.contains("lines) of provider stderr dropped"),
            "{summary}"
        );
        assert_eq!(seen.last().expect("tail"), &format!("{:0100}", 99_999));
    }

    #[test]
    fn a_flood_is_summarised_while_it_goes_on() {
        let (sink, lines) = collecting();
        let relay = StderrRelay::new(sink, RelayLimits::default().with_rate(1024, 1));
        let started = Instant::now();
        let mut n = 0u64;
        // A flood that never ends while we look: the flush shows its
        // newest line and what was dropped, about once a second.
        while started.elapsed() < FLUSH_INTERVAL * 2 + Duration::from_millis(300) {
            relay.line(format!("flood {n}").as_bytes());
            n += 1;
            if n % 1000 == 0 {
                thread::sleep(Duration::from_millis(1));
            }
        }
        let summaries = |seen: &[String]| {
            seen.iter()
                .filter(|line| line.contains("of provider stderr dropped"))
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = lines.lock().expect("lines").clone();
        while summaries(&seen) == 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
            seen = lines.lock().expect("lines").clone();
        }
        // About one flush a second: a summary and the newest line each.
        let count = summaries(&seen);
        assert!((1..=4).contains(&count), "{count} summaries: {seen:?}");
        assert!(seen.len() < 40, "{} lines relayed", seen.len());
    }

    #[test]
    fn long_lines_are_excerpted_with_their_length() {
        let (sink, lines) = collecting();
        let relay = StderrRelay::new(sink, RelayLimits::default());
        relay.line(&[b'y'; 65536]);
        relay.line(b"short\r\n");
        relay.line(b"\xff\xfe not UTF-8\n");
        let seen = wait_for(&lines, 3);
        assert!(seen[0].len() <= 1024, "{}", seen[0].len());
        assert!(seen[0].ends_with("… (65536 bytes)"), "{}", seen[0]);
        assert_eq!(seen[1], "short");
        assert_eq!(seen[2], "\u{fffd}\u{fffd} not UTF-8");
        // Lossy decoding triples invalid bytes; the cut still fits.
        let cut = cut_line(&[0xff; 1024], 1024, 1024);
        assert!(
            cut.len() <= 1024 && cut.ends_with("… (1024 bytes)"),
            "{cut}"
        );
    }

    #[test]
    fn terminal_controls_reach_the_sink_escaped() {
        // Issue 38 item 10: a child erasing the sink's `[provider]` prefix
        // and printing a line of its own.
        let (sink, lines) = collecting();
        let relay = StderrRelay::new(sink, RelayLimits::default());
        relay.line(b"\x1b[2K\rfake: evidence_hash verified\n");
        relay.line("C1 \u{9b}31m, DEL \x7f, bidi \u{202e}txet, tab\tkept\n".as_bytes());
        relay.note("a note with \x1b]0;title\x07");
        let seen = wait_for(&lines, 3);
        assert_eq!(seen[0], "\\u{1b}[2K\\rfake: evidence_hash verified");
        assert_eq!(
            seen[1],
            "C1 \\u{9b}31m, DEL \\u{7f}, bidi \\u{202e}txet, tab\tkept"
        );
        assert_eq!(seen[2], "a note with \\u{1b}]0;title\\u{7}");
        for line in &seen {
            assert!(!line.chars().any(is_terminal_control), "{line:?}");
        }
        // Escapes count against the rate limit: a line of 256 ESC bytes
        // costs its escaped excerpt (cut at 1024 bytes), not 256 bytes.
        let (sink, lines) = collecting();
        let relay = StderrRelay::new(sink, RelayLimits::default().with_rate(2000, 1));
        relay.line(&[0x1b; 256]);
        relay.line(&[0x1b; 256]);
        let counts = relay.counts();
        assert_eq!(counts.dropped_lines, 1, "{counts:?}");
        let seen = wait_for(&lines, 1);
        assert!(
            seen[0].len() <= 1024 && seen[0].ends_with("… (256 bytes)"),
            "{}",
            seen[0]
        );
        // Text without controls is returned as it is.
        assert!(matches!(printable("plain\ttext é"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_blocked_sink_blocks_nothing_and_bounds_the_queue() {
        // The sink blocks until released, like a write to a full pipe.
        let (release, blocked) = mpsc::channel::<()>();
        let blocked = Mutex::new(blocked);
        let calls = Arc::new(Mutex::new(0u64));
        let counted = Arc::clone(&calls);
        let sink: LogSink = Arc::new(move |_: &str| {
            *counted.lock().expect("calls") += 1;
            let _ = blocked
                .lock()
                .expect("blocked")
                .recv_timeout(Duration::from_secs(10));
        });
        let limits = RelayLimits {
            queue: 8,
            ..RelayLimits::default().with_rate(1 << 30, 1 << 30)
        };
        let relay = StderrRelay::new(sink, limits);
        let started = Instant::now();
        for _ in 0..10_000 {
            relay.line(b"flood");
            relay.note("a note");
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the relay waited for the sink: {:?}",
            started.elapsed()
        );
        let counts = relay.counts();
        // One line in the sink, at most `queue` waiting; the rest dropped.
        assert!(counts.relayed_lines <= 9 + 1, "{counts:?}");
        assert!(counts.dropped_lines >= 9_990, "{counts:?}");
        drop(relay);
        let _release: Sender<()> = release;
    }
}
