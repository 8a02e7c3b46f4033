//! # evidence-wire-log
//!
//! The JSON Lines sink of envelope validation logs, shared by every runtime
//! adapter (blocking, tokio, smol) and the CLI. It depends on the core only.
//!
//! Its [`record`] module turns each validation outcome of the core's server
//! into a [`ValidationRecord`] (the record model, as data); the sink
//! reads the clock, writes the records, one JSON line each, to
//! `<dir>/<run>.jsonl` (by default `runs/mcp_server/envelope_validation`
//! under the working directory) and keeps `<dir>/.latest` a symlink to the
//! current run's file, replaced atomically (a symlink under a temporary
//! name, then `rename`). On systems without symlinks `.latest` is a small
//! file holding the run's file name.
//!
//! Adapters call it at two places:
//! - stdio: [`StdioLog::bytes_received`] before feeding input to the
//!   server and [`StdioLog::observe`] for every server event;
//! - HTTP: [`ValidationLog::http_call`] when a request head arrives,
//!   [`HttpCall::observe`] for every event of its exchange and
//!   [`HttpCall::finish`] with the reply's status.
//!
//! Logging never stops a server: [`ValidationLog::open`] cannot fail, and a
//! directory that cannot be created, a file that cannot be written or a
//! symlink that cannot be replaced is reported once (on stderr, or to the
//! [`Reporter`] given, called without the log's lock held: a report that
//! blocks holds up only the thread that makes it) and the server goes on;
//! records that cannot be written are dropped. Records go to a file opened
//! for appending, whole lines per `write` call, so concurrent writers never
//! interleave lines. A write that fails part-way (a full disk: a short
//! write, then `ENOSPC`) would leave a torn line for the next record to be
//! appended to: the file is cut back (`set_len`) to the end of the last
//! whole record that landed, so every line of a run file is one whole
//! record, the records after the failure start lines of their own, and the
//! sizes counted for the cap drop by what was cut. Where the file cannot
//! be cut (an append-only handle on some systems), the torn line is cut or
//! else ended with a newline before the next write (it is then the one
//! line that is not a record).
//!
//! Writing: the log's own thread (`evidence-wire-log`) writes the records
//! of stdio observers ([`ValidationLog::stdio_batched`]) and HTTP calls,
//! so the thread that answers the peer only stamps them (clock,
//! correlation id) and holds them: their facts and text (excerpted as the
//! record shows it) copied into a batch, no JSON written. The writer
//! thread writes their JSON lines, starts new files, points `.latest` and
//! deletes the oldest files (the size cap and rotation below are applied
//! as it writes, in the order the records were made, so the files are
//! byte for byte those of writing each record as it is made). Records
//! wait in memory until [`BATCH_BYTES`] of them are held (counted as the
//! memory they take, before any line is formatted) or the oldest is
//! [`FLUSH_INTERVAL`] old; the writer thread then writes their lines, in
//! `write`s of about [`BATCH_BYTES`]. A record made while more than
//! `QUEUED_BUFFERS` (2) such batches wait for the thread blocks until one
//! is written (or, while the thread is reporting a failure, writes them
//! itself), so memory stays bounded when the disk is slow.
//! [`ValidationLog::flush`] (at shutdown, a SIGTERM included; it also syncs
//! the file to disk), [`StdioLog::flush`], dropping a stdio observer and
//! dropping the log's last clone write what is pending before they return,
//! so a clean shutdown loses no record; a crash or SIGKILL can lose the
//! records of the last [`FLUSH_INTERVAL`]. [`ValidationLog::record`] and
//! the [`ValidationLog::stdio`] observer write each record at once, on the
//! calling thread. If the thread cannot be started, callers write.
//!
//! Runs are named `<UTC time>-<pid>.jsonl` (`20250131T090500.250Z-4242.jsonl`);
//! in deterministic mode `run-000001.jsonl`, `run-000002.jsonl`, … (one
//! past the highest number present, so names sort by age), and the records
//! themselves carry a fixed clock and sequential ids (see
//! [`record`]), so the same traffic writes the same bytes.
//!
//! Size: the run files of a directory (the files named as above, which this
//! sink writes; other files are neither counted nor touched) hold at most
//! [`LogSettings::max_bytes`] together (default
//! [`DEFAULT_LOG_MAX_BYTES`], 256 MiB), plus at most one record. When the
//! current file would pass a quarter of the cap, the next record starts a
//! new file (named like a new run) and `.latest` is pointed at it; before
//! each write the oldest run files are deleted until the record fits. No
//! record is longer than [`record::MAX_RECORD_BYTES`] (peer text
//! is excerpted by the core). The sizes are counted by this log, so the cap
//! holds for one server writing to a directory at a time. Limits: at most
//! [`MAX_RUNS_PER_NAME`] runs share a name prefix.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::VecDeque;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, RandomState};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use evidence_wire::frame::Framing;
use evidence_wire::server::{Outcome, ServerEvent};

pub mod record;

use record::{
    Channel, ClockReading, LineCache, RecordBatch, RecordFacts, RecordView, Recorder,
    ValidationRecord,
};
pub use record::{DEFAULT_LOG_MAX_BYTES, MIN_LOG_MAX_BYTES};

/// The default log directory, relative to the working directory.
pub const DEFAULT_DIR: &str = "runs/mcp_server/envelope_validation";

/// The name of the symlink to the current run's file.
pub const LATEST: &str = ".latest";

/// Most runs tried under one name before giving up (deterministic runs
/// are numbered up to this; timestamped runs get `-1`, `-2`, … suffixes).
pub const MAX_RUNS_PER_NAME: u32 = 999_999;

/// Where logging failures are reported (once per log). Called without the
/// log's lock held, by the first thread to release the lock after the
/// failure (usually the one whose work met it: a record maker, the
/// writer thread, a flush): a reporter that blocks holds up that thread
/// only (while the writer thread reports, record makers write their
/// records themselves rather than wait for it).
pub type Reporter = Arc<dyn Fn(&str) + Send + Sync>;

/// Called with every record written (the CLI turns them into
/// diagnostics), as a borrowed [`RecordView`]: [`RecordView::to_record`]
/// makes the owned record when a listener needs it.
pub type Listener = Arc<dyn Fn(&RecordView<'_>) + Send + Sync>;

/// Pending records handed to the log's writer thread at once, in bytes of
/// memory they take (their facts and text, before any JSON is written),
/// whatever the interval; also the size of the writer thread's `write`s.
pub const BATCH_BYTES: usize = 256 * 1024;

/// The longest a record waits in memory before the log's writer thread
/// writes it (when fewer than [`BATCH_BYTES`] are pending).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Full buffers that may wait for the writer thread; a record made while
/// more wait blocks until one is written (so memory stays bounded when the
/// disk is slower than the traffic).
const QUEUED_BUFFERS: usize = 2;

/// How many files share a log directory's size cap: the current file is
/// rotated when it would pass `max_bytes / FILE_SHARES`.
pub const FILE_SHARES: u64 = 4;

/// Where and how a validation log is written.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogSettings {
    /// The directory of run files and `.latest` (created when missing).
    pub dir: PathBuf,
    /// Fixed clock, zero durations, sequential ids and run numbers.
    pub deterministic: bool,
    /// Total size cap of the directory's run files, in bytes (plus at most
    /// one record); see the crate documentation.
    pub max_bytes: u64,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            dir: PathBuf::from(DEFAULT_DIR),
            deterministic: false,
            max_bytes: DEFAULT_LOG_MAX_BYTES,
        }
    }
}

impl LogSettings {
    /// Settings writing to `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LogSettings {
            dir: dir.into(),
            ..LogSettings::default()
        }
    }

    /// The same settings in deterministic mode (or not).
    pub fn deterministic(mut self, deterministic: bool) -> Self {
        self.deterministic = deterministic;
        self
    }

    /// The same settings with a total size cap of `max_bytes` (the
    /// configuration accepts [`MIN_LOG_MAX_BYTES`] and more; smaller caps
    /// work too, down to one record per file).
    pub fn max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The size at which the current file is rotated (at least 1).
    fn file_share(&self) -> u64 {
        (self.max_bytes / FILE_SHARES).max(1)
    }
}

/// Why a run's file could not be set up (see [`ValidationLog::try_open`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum LogError {
    /// The directory could not be created or the run file not opened.
    Create {
        /// The path that failed.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The run file is open but `.latest` could not be replaced.
    Latest {
        /// The `.latest` path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Create { path, source } => write!(
                f,
                "cannot create the validation log {}: {source}; check that the directory is writable, or set [logging] dir / --log-dir elsewhere, or turn logging off with --no-log",
                path.display()
            ),
            LogError::Latest { path, source } => write!(
                f,
                "cannot point {} at the current run: {source}; the run is still logged, but .latest may name an older run",
                path.display()
            ),
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogError::Create { source, .. } | LogError::Latest { source, .. } => Some(source),
        }
    }
}

/// A run file this log created (empty, so it knows every byte of it), and
/// how far its whole record lines reach.
///
/// Writes to it are serialized by the log (the writer thread while it
/// writes a batch, else a caller under the lock while the writer is not
/// writing), so the counts below are only ever changed by one thread at a
/// time; they are atomics only so that the file can be shared.
struct RunFile {
    file: File,
    /// Bytes from the start of the file to the end of the last whole
    /// record line written.
    whole: AtomicU64,
    /// Bytes of a torn line after `whole` (a failed or short write) that
    /// could not be cut off yet; 0 when there is none.
    torn: AtomicU64,
    /// Failures a test makes happen.
    #[cfg(test)]
    faults: Mutex<Faults>,
}

/// What [`RunFile::append`] did with a write's record lines.
#[derive(Debug)]
struct Appended {
    /// Why not every line landed whole; `None` when all did.
    error: Option<io::Error>,
    /// When not all did: the whole lines that did (before the tear).
    kept_records: u64,
    /// Bytes counted for the file that it does not hold: the write's past
    /// its last whole line that landed, and those of an earlier tear cut
    /// off before it (see [`RunFile::append`]).
    uncounted: u64,
}

impl RunFile {
    fn new(file: File) -> Self {
        RunFile {
            file,
            whole: AtomicU64::new(0),
            torn: AtomicU64::new(0),
            #[cfg(test)]
            faults: Mutex::new(Faults::default()),
        }
    }

    /// Append `bytes`, whole record lines (counted by the log as the
    /// file's when they were accepted).
    ///
    /// A write that fails part-way (a full disk: a short write, then
    /// `ENOSPC`) leaves the file ending in the middle of a line. The file
    /// is cut back (`set_len`) to the end of the last whole line that
    /// landed, so the next record starts a line of its own and every line
    /// of the file is a whole record. If it cannot be cut, the torn line
    /// is counted as the file's, with a newline after it, and mended
    /// before the next write: cut then, or, if it still cannot be, ended
    /// with that newline (it is then the one line that is not a record).
    fn append(&self, bytes: &[u8]) -> Appended {
        let length = byte_count(bytes.len());
        let mended = match self.mend() {
            Ok(mended) => mended,
            Err(error) => {
                return Appended {
                    error: Some(error),
                    kept_records: 0,
                    uncounted: length,
                };
            }
        };
        let (landed, written) = self.write_counted(bytes);
        let error = match written {
            Ok(()) => {
                self.whole.fetch_add(length, Ordering::Relaxed);
                return Appended {
                    error: None,
                    kept_records: 0,
                    uncounted: mended,
                };
            }
            Err(error) => error,
        };
        let landed_bytes = bytes.get(..landed).unwrap_or(bytes);
        let kept = landed_bytes
            .iter()
            .rposition(|byte| *byte == b'\n')
            .map_or(0, |last| last.saturating_add(1));
        let kept_lines = landed_bytes.get(..kept).unwrap_or_default();
        let kept_records = byte_count(kept_lines.iter().filter(|byte| **byte == b'\n').count());
        let whole = self
            .whole
            .load(Ordering::Relaxed)
            .saturating_add(byte_count(kept));
        self.whole.store(whole, Ordering::Relaxed);
        let torn = byte_count(landed.saturating_sub(kept));
        let mut on_disk = byte_count(kept);
        if torn > 0 && self.cut(whole).is_err() {
            self.torn.store(torn, Ordering::Relaxed);
            // The torn line and the newline that will end it, if it is
            // never cut.
            on_disk = byte_count(landed).saturating_add(1);
        }
        Appended {
            error: Some(error),
            kept_records,
            uncounted: mended.saturating_add(length.saturating_sub(on_disk)),
        }
    }

    /// Before a write: remove a torn line an earlier failure left (cut the
    /// file back to its whole lines; then the torn line's bytes and the
    /// newline counted for it are returned, as no longer in the file), or,
    /// when that still fails, end it with that newline. Fails when neither
    /// can be done (the write must not land after the torn line).
    fn mend(&self) -> io::Result<u64> {
        let torn = self.torn.load(Ordering::Relaxed);
        if torn == 0 {
            return Ok(0);
        }
        let whole = self.whole.load(Ordering::Relaxed);
        let uncounted = if self.cut(whole).is_ok() {
            torn.saturating_add(1)
        } else {
            let (_, written) = self.write_counted(b"\n");
            written?;
            // The torn line is now a line of its own.
            self.whole.store(
                whole.saturating_add(torn).saturating_add(1),
                Ordering::Relaxed,
            );
            0
        };
        self.torn.store(0, Ordering::Relaxed);
        Ok(uncounted)
    }

    /// Cut the file to `length` bytes.
    fn cut(&self, length: u64) -> io::Result<()> {
        #[cfg(test)]
        if lock_faults(&self.faults).take_cut_failure() {
            return Err(io::Error::other("a cut made to fail by a test"));
        }
        self.file.set_len(length)
    }

    /// `write_all`, also saying how many bytes landed when it fails.
    fn write_counted(&self, bytes: &[u8]) -> (usize, io::Result<()>) {
        #[cfg(test)]
        if let Some(limit) = lock_faults(&self.faults).take_write_failure() {
            // The disk fills after `limit` bytes.
            let (landed, written) = write_counted(&self.file, bytes.get(..limit).unwrap_or(bytes));
            let full = io::Error::new(io::ErrorKind::StorageFull, "a full disk made by a test");
            return (landed, written.and(Err(full)));
        }
        write_counted(&self.file, bytes)
    }
}

/// `write_all` of `bytes` to `file`, with the number of bytes that landed.
fn write_counted(mut file: &File, bytes: &[u8]) -> (usize, io::Result<()>) {
    let mut landed = 0;
    while let Some(rest) = bytes.get(landed..).filter(|rest| !rest.is_empty()) {
        match file.write(rest) {
            Ok(0) => return (landed, Err(io::ErrorKind::WriteZero.into())),
            Ok(count) => landed = landed.saturating_add(count),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return (landed, Err(error)),
        }
    }
    (landed, Ok(()))
}

/// A length as the `u64` the log counts in.
fn byte_count(length: usize) -> u64 {
    u64::try_from(length).unwrap_or(u64::MAX)
}

/// Failures a test arms on a [`RunFile`].
#[cfg(test)]
#[derive(Debug, Default)]
struct Faults {
    /// Writes (`write_counted` calls) that succeed before one fails.
    writes_before: usize,
    /// Bytes the failing write lets through before the disk is full;
    /// `None`: no write fails.
    write_limit: Option<usize>,
    /// Cuts (`set_len`) that fail, from now on.
    failing_cuts: usize,
}

#[cfg(test)]
impl Faults {
    fn take_write_failure(&mut self) -> Option<usize> {
        let limit = self.write_limit?;
        if self.writes_before > 0 {
            self.writes_before -= 1;
            return None;
        }
        self.write_limit = None;
        Some(limit)
    }

    fn take_cut_failure(&mut self) -> bool {
        let fail = self.failing_cuts > 0;
        self.failing_cuts = self.failing_cuts.saturating_sub(1);
        fail
    }
}

#[cfg(test)]
fn lock_faults(faults: &Mutex<Faults>) -> MutexGuard<'_, Faults> {
    faults.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The run files and the writing of record lines to them: the JSON lines,
/// rotation, the size cap. Whoever writes holds it, one at a time (the
/// writer thread, or a caller writing everything itself while the writer
/// thread is not writing); the threads that make records never touch it,
/// so formatting the lines, starting a new file, pointing `.latest` at it
/// and deleting the oldest happen off the thread that answers the peer.
struct Disk {
    settings: LogSettings,
    file: Option<Arc<RunFile>>,
    path: Option<PathBuf>,
    /// Bytes in the current file (those in `out` included).
    current_bytes: u64,
    /// Earlier run files of the directory, oldest first, with their sizes.
    older: VecDeque<(PathBuf, u64)>,
    /// The sum of `older`'s sizes.
    older_bytes: u64,
    /// What consecutive record lines share (names, the timestamp's second).
    lines: LineCache,
    /// Record lines of the current file, counted in `current_bytes`, not
    /// written yet (written at [`BATCH_BYTES`], before a rotation and at
    /// the end of every batch).
    out: Vec<u8>,
    /// How many records `out` holds.
    out_records: u64,
    /// Records written since [`Disk::take_news`] last took them.
    written: u64,
    /// The first failure met since [`Disk::take_news`] last took it.
    failure: Option<String>,
}

/// What writing did, for the log's state: records written, a failure.
struct News {
    written: u64,
    failure: Option<String>,
}

impl Disk {
    fn new(settings: &LogSettings) -> Self {
        Disk {
            settings: settings.clone(),
            file: None,
            path: None,
            current_bytes: 0,
            older: VecDeque::new(),
            older_bytes: 0,
            lines: LineCache::default(),
            out: Vec::new(),
            out_records: 0,
            written: 0,
            failure: None,
        }
    }

    /// Note a failure (the first since the last [`Disk::take_news`] is
    /// handed to the log's state, which reports a log's first failure once).
    fn fail(&mut self, message: String) {
        self.failure.get_or_insert(message);
    }

    /// What was written and the failure met since the last call.
    fn take_news(&mut self) -> News {
        News {
            written: core::mem::take(&mut self.written),
            failure: self.failure.take(),
        }
    }

    /// Take the run files already in the directory into account (oldest
    /// first) and delete the oldest until they fit under the cap.
    fn adopt(&mut self, run: Run) {
        let (file, path) = (run.file, run.path);
        for (earlier, bytes) in earlier_runs(&self.settings.dir, &path) {
            self.older_bytes = self.older_bytes.saturating_add(bytes);
            self.older.push_back((earlier, bytes));
        }
        self.file = Some(Arc::new(RunFile::new(file)));
        self.path = Some(path);
        self.current_bytes = 0;
        if let Err(error) = self.make_room(0) {
            self.fail(error);
        }
    }

    /// Delete the oldest earlier run files until `incoming` more bytes fit
    /// under the cap. Fails (and deletes nothing more) when one cannot be
    /// deleted, or when the current file alone leaves no room.
    fn make_room(&mut self, incoming: u64) -> Result<(), String> {
        let max = self.settings.max_bytes;
        let total = |disk: &Disk| {
            disk.older_bytes
                .saturating_add(disk.current_bytes)
                .saturating_add(incoming)
        };
        while total(self) > max {
            let Some((oldest, bytes)) = self.older.pop_front() else {
                // A first record always fits: the cap is exceeded by at
                // most that one record.
                return if self.current_bytes == 0 {
                    Ok(())
                } else {
                    Err(format!(
                        "the validation log is at its size cap ({max} bytes) and has no older file to delete; records are dropped (raise [logging] max_bytes or --log-max-bytes)"
                    ))
                };
            };
            match fs::remove_file(&oldest) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    self.older.push_front((oldest.clone(), bytes));
                    return Err(format!(
                        "cannot delete {} to keep the validation log under {max} bytes: {error}; records are dropped until it can be deleted",
                        oldest.display()
                    ));
                }
            }
            self.older_bytes = self.older_bytes.saturating_sub(bytes);
        }
        Ok(())
    }

    /// Start a new run file for a record of `incoming` bytes when the
    /// current one would pass its share of the cap.
    fn rotate_if_full(&mut self, incoming: u64) {
        if self.current_bytes == 0
            || self.current_bytes.saturating_add(incoming) <= self.settings.file_share()
        {
            return;
        }
        // What is formatted belongs to the current file.
        self.write_out();
        match start_run(&self.settings) {
            Ok(run) => {
                if let Some(previous) = self.path.replace(run.path) {
                    self.older_bytes = self.older_bytes.saturating_add(self.current_bytes);
                    self.older.push_back((previous, self.current_bytes));
                }
                self.file = Some(Arc::new(RunFile::new(run.file)));
                self.current_bytes = 0;
                if let Some(error) = run.latest_error {
                    self.fail(error.to_string());
                }
            }
            // Keep writing the current file: the cap still holds, as older
            // files are deleted first and records dropped when none is left.
            Err(error) => self.fail(error.to_string()),
        }
    }

    /// Accept one record line for the current file: rotate, make room,
    /// then add it to the lines to write (counted as the file's from now
    /// on).
    fn accept(&mut self, line: &[u8]) {
        let incoming = byte_count(line.len());
        self.rotate_if_full(incoming);
        if let Err(error) = self.make_room(incoming) {
            self.fail(error);
            return;
        }
        self.out.extend_from_slice(line);
        self.out_records = self.out_records.saturating_add(1);
        self.current_bytes = self.current_bytes.saturating_add(incoming);
    }

    /// Write the records of `batch`, in order: each line formatted
    /// straight into the lines to write and accepted as by
    /// [`Disk::accept`] (when it needs a new file or room, which is rare,
    /// it is taken back out and accepted like any other line, so the cap
    /// and rotation are exactly those of [`Disk::accept`]). Without a run
    /// file the records are dropped.
    /// Never inlined: the instruction bench counts the log's writing by
    /// its name (callgrind `--toggle-collect=*::write_batch`).
    #[inline(never)]
    fn write_batch(&mut self, batch: &RecordBatch) {
        if self.file.is_none() {
            return;
        }
        // Room for the most the lines to write hold, at once (they are
        // written when they pass `BATCH_BYTES`).
        let most = BATCH_BYTES.saturating_add(record::MAX_RECORD_BYTES);
        self.out.reserve(most.saturating_sub(self.out.len()));
        for index in 0..batch.len() {
            let Some(view) = batch.view(index) else {
                continue;
            };
            let start = self.out.len();
            view.write_json_line_cached(&mut self.out, &mut self.lines);
            let incoming = byte_count(self.out.len().saturating_sub(start));
            let after = self.current_bytes.saturating_add(incoming);
            let fits_file = self.current_bytes == 0 || after <= self.settings.file_share();
            let fits_cap = self.older_bytes.saturating_add(after) <= self.settings.max_bytes;
            if fits_file && fits_cap {
                self.out_records = self.out_records.saturating_add(1);
                self.current_bytes = after;
            } else {
                let line = self.out.split_off(start);
                self.accept(&line);
            }
            if self.out.len() >= BATCH_BYTES {
                self.write_out();
            }
        }
        self.write_out();
    }

    /// Write the formatted lines to the current file (one `write` call,
    /// repeated only when the system takes part of it).
    fn write_out(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let records = core::mem::take(&mut self.out_records);
        if let (Some(file), Some(path)) = (self.file.clone(), self.path.clone()) {
            let appended = file.append(&self.out);
            self.count_write(&path, records, appended);
        }
        self.out.clear();
        if self.out.capacity() > BATCH_BYTES.saturating_mul(2) {
            self.out.shrink_to(BATCH_BYTES + record::MAX_RECORD_BYTES);
        }
    }

    /// Count `records` written to the file at `path`, or those a failure
    /// kept, and note why the rest were not.
    fn count_write(&mut self, path: &Path, records: u64, appended: Appended) {
        // A failed write was cut back to its last whole line (see
        // `RunFile::append`): the bytes the file does not hold are no
        // longer counted, in the size of the file they were written to.
        if appended.uncounted > 0 {
            self.uncount(path, appended.uncounted);
        }
        match appended.error {
            None => self.written = self.written.saturating_add(records),
            Some(error) => {
                self.written = self.written.saturating_add(appended.kept_records);
                self.fail(format!(
                    "cannot write to {}: {error}; the records of that write past its last whole line were cut off, and later records may be lost (the server goes on)",
                    path.display()
                ));
            }
        }
    }

    /// `bytes` counted for the run file at `path` are not in it.
    fn uncount(&mut self, path: &Path, bytes: u64) {
        if self.path.as_deref() == Some(path) {
            self.current_bytes = self.current_bytes.saturating_sub(bytes);
        } else if let Some((_, size)) = self.older.iter_mut().find(|(older, _)| older == path) {
            let bytes = bytes.min(*size);
            *size = size.saturating_sub(bytes);
            self.older_bytes = self.older_bytes.saturating_sub(bytes);
        }
        // Else the file was deleted already: it counts no more.
    }
}

/// The state the threads that make records share (under the log's lock):
/// the records made and not yet written, the writer thread's signals,
/// the stamps and the reports. Writing itself is [`Disk`]'s.
struct Inner {
    recorder: Recorder,
    /// The run opened a file (else records are made, counted and dropped).
    has_file: bool,
    reported: bool,
    /// The failure [`Inner::report`] noted, for [`Shared::unlock`] to hand
    /// to the reporter once the lock is released.
    unreported: Option<String>,
    reporter: Reporter,
    listener: Option<Listener>,
    written: u64,
    /// Records made but not yet handed to the writer thread or written:
    /// their stamps and facts, no JSON yet.
    pending: RecordBatch,
    /// When the oldest pending record was made.
    pending_since: Option<Instant>,
    /// Full batches waiting for the writer thread, oldest first.
    queue: VecDeque<RecordBatch>,
    /// Emptied batches the writer handed back (reused, not reallocated).
    spare: Vec<RecordBatch>,
    /// The writer thread runs (else every write is made by the caller).
    writer_alive: bool,
    /// The writer thread is writing a batch it took from `queue`.
    writing: bool,
    /// The writer thread waits with nothing pending (no deadline): the
    /// next pending record must wake it to start the interval.
    writer_idle: bool,
    /// The writer thread has work (a batch queued, or a first pending
    /// record while it was idle); notified by the caller holding the lock.
    wake_writer: bool,
    /// The log's last handle is gone: the writer writes everything, then ends.
    closing: bool,
    /// Callers waiting for the writer thread to finish a batch: only then
    /// does it notify (a notification is a system call even when no one
    /// waits).
    waiters: usize,
    /// Callers about to write everything themselves ([`Shared::write_now`]):
    /// the writer takes no new batch meanwhile, so they are not starved.
    flushers: usize,
    /// The writer thread waits for `flushers` to be done.
    writer_yielding: bool,
    /// The writer thread is calling the reporter (outside the lock, and
    /// not writing): record makers do not wait for it.
    writer_reporting: bool,
    /// The keys of the correlation ids' mix (random per log).
    keys: EntropyKeys,
    /// Records stamped so far (the counter the correlation ids are mixed from).
    stamped: u64,
}

impl Inner {
    fn new(settings: &LogSettings, reporter: Reporter) -> Self {
        Inner {
            recorder: Recorder::new(settings.deterministic),
            has_file: false,
            reported: false,
            unreported: None,
            reporter,
            listener: None,
            written: 0,
            pending: RecordBatch::default(),
            pending_since: None,
            queue: VecDeque::new(),
            spare: Vec::new(),
            writer_alive: false,
            writing: false,
            writer_idle: false,
            wake_writer: false,
            closing: false,
            waiters: 0,
            flushers: 0,
            writer_yielding: false,
            writer_reporting: false,
            keys: EntropyKeys::random(),
            stamped: 0,
        }
    }

    /// The clock reading of the next record (none in deterministic mode):
    /// the wall clock `unix_millis` if given (read once for records made
    /// together), else read now.
    fn clock(&mut self, unix_millis: Option<u64>) -> ClockReading {
        if self.recorder.is_deterministic() {
            return ClockReading::default();
        }
        self.stamped = self.stamped.wrapping_add(1);
        read_clock(
            &self.keys,
            self.stamped,
            unix_millis.unwrap_or_else(read_unix_millis),
        )
    }

    /// Stamp the record of `outcome`, hold it for writing (its facts
    /// copied, no JSON written: [`Disk::write_batch`] writes its line) and
    /// hand it to the listener.
    fn accept_outcome(
        &mut self,
        outcome: &Outcome,
        facts: &RecordFacts<'_>,
        unix_millis: Option<u64>,
    ) {
        let clock = self.clock(unix_millis);
        let view = self.recorder.view(outcome, facts, clock);
        self.hold(&view);
        if let Some(listener) = &self.listener {
            listener(&view);
        }
    }

    /// Add the record `view` to the pending records (when there is a file
    /// to write it to).
    fn hold(&mut self, view: &RecordView<'_>) {
        if !self.has_file {
            return;
        }
        // A first record: room for a batch at once.
        self.pending
            .reserve(BATCH_BYTES.saturating_add(record::MAX_HELD_BYTES));
        self.pending.push(view);
        self.pended();
    }

    /// Note the log's first failure; [`Inner::take_report`] hands it out
    /// to be reported after the lock is released.
    fn report(&mut self, message: &str) {
        if !self.reported {
            self.reported = true;
            self.unreported = Some(message.to_owned());
        }
    }

    /// The failure noted and not yet reported, with the reporter to call
    /// (outside the lock).
    fn take_report(&mut self) -> Option<(String, Reporter)> {
        let message = self.unreported.take()?;
        Some((message, Arc::clone(&self.reporter)))
    }

    /// Count what a write did and note its failure.
    fn apply(&mut self, news: News) {
        self.written = self.written.saturating_add(news.written);
        if let Some(failure) = news.failure {
            self.report(&failure);
        }
    }

    /// A record joined the pending ones: start the interval at the first
    /// one (waking an idle writer), hand them off when they are many.
    fn pended(&mut self) {
        if self.pending_since.is_none() {
            self.pending_since = Some(Instant::now());
            self.wake_writer |= self.writer_idle;
        }
        if self.pending.bytes() >= BATCH_BYTES {
            self.hand_off();
        }
    }

    /// Queue the pending records for the writer thread (the caller then
    /// notifies it, [`Shared::settle`], or, without a writer thread,
    /// writes them).
    fn hand_off(&mut self) {
        self.queue_pending();
        self.wake_writer |= self.writer_alive && !self.queue.is_empty();
    }

    /// Move the pending records to the end of the queue (a spare batch
    /// takes their place).
    fn queue_pending(&mut self) {
        self.pending_since = None;
        if self.pending.is_empty() {
            return;
        }
        let fresh = self
            .spare
            .pop()
            .unwrap_or_else(|| RecordBatch::with_capacity(BATCH_BYTES + record::MAX_HELD_BYTES));
        self.queue
            .push_back(core::mem::replace(&mut self.pending, fresh));
    }

    /// Keep a written batch's room for reuse.
    fn recycle(&mut self, mut batch: RecordBatch) {
        batch.clear();
        if self.spare.len() <= QUEUED_BUFFERS && batch.capacity() <= BATCH_BYTES.saturating_mul(2) {
            self.spare.push(batch);
        }
    }

    /// Write what is queued, then what is pending, to `disk`, here and
    /// now. Only while the writer thread is not writing (else lines could
    /// land out of order): see [`Shared::write_now`].
    fn write_everything(&mut self, disk: &mut Disk) {
        self.queue_pending();
        if self.queue.is_empty() {
            return;
        }
        while let Some(batch) = self.queue.pop_front() {
            disk.write_batch(&batch);
            self.recycle(batch);
        }
        let news = disk.take_news();
        self.apply(news);
    }
}

/// A log's state, its files and its writer thread's signals.
struct Shared {
    inner: Mutex<Inner>,
    /// The run files. Locked after `inner` when both are held (the writer
    /// thread holds it alone while it writes a batch).
    disk: Mutex<Disk>,
    /// Wakes the writer thread: a batch queued, a first pending record,
    /// closing.
    wake: Condvar,
    /// Wakes those waiting on the writer thread: a batch written (room in
    /// the queue, or the writer free for a flush), the writer gone.
    written: Condvar,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        let disk = self.disk.get_mut().unwrap_or_else(PoisonError::into_inner);
        inner.write_everything(disk);
        // No lock is held any more.
        if let Some((message, reporter)) = inner.take_report() {
            reporter(&message);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    fn lock_disk(&self) -> MutexGuard<'_, Disk> {
        // A panic while writing must not silence the log for good.
        self.disk.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Write what is queued and pending, with `inner` locked (the writer
    /// thread not writing).
    fn write_everything(&self, inner: &mut Inner) {
        if inner.pending.is_empty() && inner.queue.is_empty() {
            inner.pending_since = None;
            return;
        }
        inner.write_everything(&mut self.lock_disk());
    }

    /// Release the lock, then hand a failure noted meanwhile to the
    /// reporter: outside the lock, so that a reporter that blocks (a full
    /// stderr pipe no one reads) holds up this thread only, not every
    /// thread that makes records.
    #[inline]
    fn unlock(&self, mut inner: MutexGuard<'_, Inner>) {
        let report = inner.take_report();
        drop(inner);
        if let Some((message, reporter)) = report {
            reporter(&message);
        }
    }

    /// After records were made: wake the writer thread if it has work,
    /// and wait while more than [`QUEUED_BUFFERS`] wait for it. Without a
    /// writer thread (it could not start, or ended), write them here.
    fn settle<'a>(&'a self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        if core::mem::take(&mut inner.wake_writer) {
            self.wake.notify_one();
        }
        while inner.queue.len() > QUEUED_BUFFERS && inner.writer_alive && !inner.writer_reporting {
            inner = self.wait_for_writer(inner);
        }
        // Without a writer, or past the bound while the writer is held up
        // in the reporter (it is not writing then, so order holds).
        if !inner.writer_alive || (inner.writer_reporting && inner.queue.len() > QUEUED_BUFFERS) {
            self.write_everything(&mut inner);
        }
        inner
    }

    /// Wait until the writer thread has written a batch (or is gone).
    fn wait_for_writer<'a>(&'a self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        inner.waiters = inner.waiters.saturating_add(1);
        let mut inner = self
            .written
            .wait(inner)
            .unwrap_or_else(PoisonError::into_inner);
        inner.waiters = inner.waiters.saturating_sub(1);
        inner
    }

    /// Write everything queued and pending here and now, in order: once
    /// the writer thread is done with the batch it may be writing.
    fn write_now<'a>(&'a self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        // The writer finishes its batch and takes no other meanwhile.
        inner.flushers = inner.flushers.saturating_add(1);
        while inner.writing {
            inner = self.wait_for_writer(inner);
        }
        let queued = !inner.queue.is_empty();
        self.write_everything(&mut inner);
        inner.wake_writer = false;
        inner.flushers = inner.flushers.saturating_sub(1);
        if queued && inner.waiters > 0 {
            // Room in the queue for a caller waiting in `settle`.
            self.written.notify_all();
        }
        if inner.flushers == 0 && inner.writer_yielding {
            self.wake.notify_one();
        }
        inner
    }

    /// The writer thread waits to be woken, with the flag `flag` picks set
    /// meanwhile (so callers know why it waits).
    fn wait_for_wake<'a>(
        &'a self,
        mut inner: MutexGuard<'a, Inner>,
        flag: fn(&mut Inner) -> &mut bool,
    ) -> MutexGuard<'a, Inner> {
        *flag(&mut inner) = true;
        let mut inner = self
            .wake
            .wait(inner)
            .unwrap_or_else(PoisonError::into_inner);
        *flag(&mut inner) = false;
        inner
    }

    /// The writer thread: write the batches queued, and the pending
    /// records once the oldest is [`FLUSH_INTERVAL`] old, until the log
    /// closes. It formats their lines, rotates the files and deletes the
    /// oldest, holding the [`Disk`] but not the log's lock, so the threads
    /// that make records go on meanwhile.
    fn run_writer(&self) {
        /// Marks the writer gone however it ends (a reporter may panic),
        /// writes what is left (the report is not repeated: a log reports
        /// once) and wakes whoever waits, so writes fall back to the
        /// callers and no one waits for the writer.
        struct Exit<'a>(&'a Shared);
        impl Drop for Exit<'_> {
            fn drop(&mut self) {
                let mut inner = self.0.lock();
                inner.writer_alive = false;
                inner.writing = false;
                inner.writer_idle = false;
                inner.writer_yielding = false;
                inner.writer_reporting = false;
                self.0.write_everything(&mut inner);
                let report = inner.take_report();
                drop(inner);
                // Waiters first: a reporter that blocks must not keep them.
                self.0.written.notify_all();
                if let Some((message, reporter)) = report {
                    reporter(&message);
                }
            }
        }
        // Declared before `inner`, so dropped after it (it takes the lock).
        let _exit = Exit(self);
        let mut inner = self.lock();
        loop {
            if inner.flushers > 0 {
                // A caller writes everything itself: wait until it is done.
                inner = self.wait_for_wake(inner, |inner| &mut inner.writer_yielding);
                continue;
            }
            if let Some(batch) = inner.queue.pop_front() {
                inner.writing = true;
                drop(inner);
                let news = {
                    let mut disk = self.lock_disk();
                    disk.write_batch(&batch);
                    disk.take_news()
                };
                inner = self.lock();
                inner.writing = false;
                inner.apply(news);
                inner.recycle(batch);
                if inner.waiters > 0 {
                    self.written.notify_all();
                }
                if inner.unreported.is_some() {
                    // Record makers past the queue's bound write for
                    // themselves meanwhile (`settle`).
                    inner.writer_reporting = true;
                    self.written.notify_all();
                    self.unlock(inner);
                    inner = self.lock();
                    inner.writer_reporting = false;
                }
                continue;
            }
            let due = inner
                .pending_since
                .map(|since| FLUSH_INTERVAL.saturating_sub(since.elapsed()));
            match due {
                Some(Duration::ZERO) => inner.hand_off(),
                _ if inner.closing => {
                    if inner.pending.is_empty() {
                        return;
                    }
                    inner.hand_off();
                }
                Some(wait) => {
                    inner = self
                        .wake
                        .wait_timeout(inner, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                None => inner = self.wait_for_wake(inner, |inner| &mut inner.writer_idle),
            }
            inner.wake_writer = false;
        }
    }
}

/// What the clones of a [`ValidationLog`] share: its state and its writer
/// thread, told to finish (and joined) when the last clone is dropped.
struct Handle {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

impl Handle {
    /// Share `inner` and start its writer thread (when it has a file to
    /// write to; if the thread cannot be started, callers write), then
    /// report what failed while opening.
    fn start(inner: Inner, disk: Disk) -> Self {
        Self::start_writer(inner, disk, true)
    }

    /// [`Handle::start`], with the writer thread only if `writer` (a test
    /// stands for a thread that could not be started).
    fn start_writer(mut inner: Inner, mut disk: Disk, writer: bool) -> Self {
        inner.has_file = disk.file.is_some();
        inner.apply(disk.take_news());
        let has_file = inner.has_file && writer;
        inner.writer_alive = has_file;
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            disk: Mutex::new(disk),
            wake: Condvar::new(),
            written: Condvar::new(),
        });
        let writer = if has_file {
            let for_writer = Arc::clone(&shared);
            let spawned = thread::Builder::new()
                .name("evidence-wire-log".to_owned())
                .spawn(move || for_writer.run_writer());
            match spawned {
                Ok(writer) => Some(writer),
                Err(error) => {
                    let mut inner = shared.lock();
                    inner.writer_alive = false;
                    inner.report(&format!(
                        "cannot start the log's writer thread ({error}); records are written by the server's threads"
                    ));
                    None
                }
            }
        } else {
            None
        };
        // Opening is over: report what failed (outside the lock).
        shared.unlock(shared.lock());
        Handle { shared, writer }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        if let Some(writer) = self.writer.take() {
            // It writes everything pending, then ends.
            let _ = writer.join();
        }
        let inner = self.shared.lock();
        self.shared.unlock(self.shared.write_now(inner));
    }
}

/// A validation log: one run's JSON Lines file. Cheap to clone; every
/// clone writes to the same file with the same id sequence, so one log can
/// serve several transports at once.
///
/// Records are written by the log's own thread, in `write`s of up to
/// [`BATCH_BYTES`], at most [`FLUSH_INTERVAL`] after they are made;
/// [`ValidationLog::flush`] (at shutdown) and dropping the last clone
/// write the rest.
#[derive(Clone, Default)]
pub struct ValidationLog {
    inner: Option<Arc<Handle>>,
}

impl fmt::Debug for ValidationLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidationLog")
            .field("path", &self.path())
            .finish_non_exhaustive()
    }
}

fn default_reporter() -> Reporter {
    // Not `eprintln!`, which panics when stderr is gone (a closed pipe):
    // the report is best effort, and the writer thread calls it.
    Arc::new(|message: &str| {
        let _ = writeln!(io::stderr(), "evidence-wire: validation log: {message}");
    })
}

impl ValidationLog {
    /// A log that records nothing.
    pub fn disabled() -> Self {
        ValidationLog { inner: None }
    }

    /// Start a run under `settings`, reporting a failure once on stderr.
    /// Never fails: without a file the log keeps counting but writes nothing.
    pub fn open(settings: &LogSettings) -> Self {
        Self::open_with_reporter(settings, default_reporter())
    }

    /// [`ValidationLog::open`] reporting failures to `reporter` instead.
    pub fn open_with_reporter(settings: &LogSettings, reporter: Reporter) -> Self {
        let mut inner = Inner::new(settings, reporter);
        let mut disk = Disk::new(settings);
        match start_run(settings) {
            Ok(mut run) => {
                let latest_error = run.latest_error.take();
                disk.adopt(run);
                if let Some(error) = latest_error {
                    inner.report(&error.to_string());
                }
            }
            Err(error) => inner.report(&error.to_string()),
        }
        let handle = Handle::start(inner, disk);
        ValidationLog {
            inner: Some(Arc::new(handle)),
        }
    }

    /// Start a run under `settings`, or say why the run's file could not be
    /// created (a `.latest` failure is an error here too).
    pub fn try_open(settings: &LogSettings) -> Result<Self, LogError> {
        let mut run = start_run(settings)?;
        if let Some(error) = run.latest_error.take() {
            return Err(error);
        }
        let inner = Inner::new(settings, default_reporter());
        let mut disk = Disk::new(settings);
        disk.adopt(run);
        let handle = Handle::start(inner, disk);
        Ok(ValidationLog {
            inner: Some(Arc::new(handle)),
        })
    }

    /// The same log, also handing every record to `listener`.
    pub fn with_listener(self, listener: Listener) -> Self {
        if let Some(handle) = &self.inner {
            handle.shared.lock().listener = Some(listener);
        }
        self
    }

    /// True unless this is [`ValidationLog::disabled`].
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The current run file (the newest, which `.latest` names), when one
    /// is open.
    pub fn path(&self) -> Option<PathBuf> {
        self.inner
            .as_ref()
            .and_then(|handle| handle.shared.lock_disk().path.clone())
    }

    /// Writes every pending record to the run file now and makes what the
    /// file holds durable (its data synced to disk): what a server calls
    /// last when it shuts down (a SIGTERM included). A failure is reported
    /// like a failed write (the server goes on).
    pub fn flush(&self) {
        let Some(handle) = &self.inner else {
            return;
        };
        let mut inner = handle.shared.write_now(handle.shared.lock());
        let failure = {
            let disk = handle.shared.lock_disk();
            let synced = match &disk.file {
                Some(run) => run.file.sync_data(),
                None => Ok(()),
            };
            synced.err().map(|error| {
                let path = disk.path.clone().unwrap_or_default();
                format!("cannot flush {}: {error}", path.display())
            })
        };
        if let Some(failure) = failure {
            inner.report(&failure);
        }
        handle.shared.unlock(inner);
    }

    /// How many records reached the file.
    pub fn written(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |handle| handle.shared.lock().written)
    }

    /// True in deterministic mode.
    pub fn is_deterministic(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|handle| handle.shared.lock().recorder.is_deterministic())
    }

    /// Record `outcome`, answered as `facts` say, now, and write it (with
    /// any record still pending before it) before returning. Returns the
    /// record (also when it could not be written), or `None` when disabled.
    pub fn record(&self, outcome: &Outcome, facts: &RecordFacts<'_>) -> Option<ValidationRecord> {
        let handle = self.inner.as_ref()?;
        let mut inner = handle.shared.lock();
        let clock = inner.clock(None);
        let view = inner.recorder.view(outcome, facts, clock);
        inner.hold(&view);
        let inner = handle.shared.write_now(inner);
        if let Some(listener) = &inner.listener {
            listener(&view);
        }
        handle.shared.unlock(inner);
        Some(view.to_record())
    }

    /// Record `outcome` like [`ValidationLog::record`] without making the
    /// owned record, stamped `unix_millis` (the wall clock read once for
    /// records made together; `None`: read now); `pending` leaves its line
    /// to the writer thread (see [`ValidationLog::stdio_batched`]), else it
    /// is written at once.
    fn record_line(
        &self,
        outcome: &Outcome,
        facts: &RecordFacts<'_>,
        unix_millis: Option<u64>,
        pending: bool,
    ) {
        let Some(handle) = self.inner.as_ref() else {
            return;
        };
        let mut inner = handle.shared.lock();
        inner.accept_outcome(outcome, facts, unix_millis);
        let inner = if pending {
            handle.shared.settle(inner)
        } else {
            handle.shared.write_now(inner)
        };
        handle.shared.unlock(inner);
    }

    /// The observer of one stdio connection that writes every record when
    /// it is observed (one `write` each, made by the observing thread).
    pub fn stdio(&self) -> StdioLog {
        StdioLog {
            log: self.clone(),
            received: Instant::now(),
            batched: false,
            reading: None,
        }
    }

    /// The observer of one stdio connection that leaves the writing to the
    /// log's writer thread: records wait in memory until [`BATCH_BYTES`]
    /// are pending or the oldest is [`FLUSH_INTERVAL`] old, then that
    /// thread writes them in one `write`; [`StdioLog::flush`],
    /// [`ValidationLog::flush`] and dropping the observer write them at
    /// once. The adapter calls [`StdioLog::end_batch`] after each batch of
    /// input handled (the records of a batch share one clock reading).
    pub fn stdio_batched(&self) -> StdioLog {
        StdioLog {
            log: self.clone(),
            received: Instant::now(),
            batched: true,
            reading: None,
        }
    }

    /// The observer of one HTTP request that reached `path`.
    pub fn http_call(&self, path: &str) -> HttpCall {
        HttpCall {
            log: self.clone(),
            route: path.to_owned(),
            started: Instant::now(),
            outcomes: Vec::new(),
        }
    }
}

/// Records the validation outcomes of one stdio connection.
#[derive(Debug)]
pub struct StdioLog {
    log: ValidationLog,
    received: Instant,
    /// Records are left to the writer thread ([`ValidationLog::stdio_batched`]).
    batched: bool,
    /// Batched: the clocks read at the batch's first record, shared by
    /// its records: the wall clock in Unix milliseconds, and the
    /// microseconds from `received` to then.
    reading: Option<(u64, u64)>,
}

impl StdioLog {
    /// Call before handing bytes read from the peer (or the end of input)
    /// to the server: durations count from here.
    pub fn bytes_received(&mut self) {
        if self.log.is_enabled() {
            self.received = Instant::now();
            self.reading = None;
        }
    }

    /// Call with every event the server reports (others than `Handled`
    /// are ignored) and the server's current framing.
    pub fn observe(&mut self, event: &ServerEvent, framing: Option<Framing>) {
        let ServerEvent::Handled(outcome) = event else {
            return;
        };
        if !self.log.is_enabled() {
            return;
        }
        // A batch's records share one reading of the clocks, taken at its
        // first record: the events of a batch are drained together after
        // the server handled them, so per-record readings would only add
        // the time spent logging the records before (two clock reads are
        // about a quarter of a record's cost).
        let (unix_millis, duration_micros) = match self.reading {
            Some(reading) => reading,
            None => {
                let now = Instant::now();
                let reading = (read_unix_millis(), micros_between(self.received, now));
                if self.batched {
                    self.reading = Some(reading);
                }
                reading
            }
        };
        let facts = RecordFacts {
            transport: Channel::Stdio,
            route: record::stdio_route(framing),
            status: record::stdio_status(outcome),
            duration_micros,
        };
        self.log
            .record_line(outcome, &facts, Some(unix_millis), self.batched);
    }

    /// Call after the events of a batch of input were observed: the next
    /// record reads the clocks anew. The batch's records stay pending for
    /// the log's writer thread (at most [`FLUSH_INTERVAL`]).
    pub fn end_batch(&mut self) {
        self.reading = None;
    }

    /// Write the records still pending (of this observer and any other of
    /// the log), in order, before returning; also ends the batch.
    pub fn flush(&mut self) {
        self.reading = None;
        if let Some(handle) = self.log.inner.as_ref() {
            handle
                .shared
                .unlock(handle.shared.write_now(handle.shared.lock()));
        }
    }
}

impl Drop for StdioLog {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Records the validation outcomes of one HTTP request: collected while
/// its exchange runs, written with the reply's status when it is done.
#[derive(Debug)]
pub struct HttpCall {
    log: ValidationLog,
    route: String,
    started: Instant,
    outcomes: Vec<Outcome>,
}

impl HttpCall {
    /// Call with every server event of the request's exchange (others than
    /// `Handled` are ignored).
    pub fn observe(&mut self, event: &ServerEvent) {
        if let ServerEvent::Handled(outcome) = event {
            self.outcome(outcome);
        }
    }

    /// Keep one validation outcome of the request's exchange.
    pub fn outcome(&mut self, outcome: &Outcome) {
        if self.log.is_enabled() {
            self.outcomes.push(outcome.clone());
        }
    }

    /// Write the request's records with the reply's `status`, sent as a
    /// JSON body ([`Channel::Http`]) or as a server-sent event
    /// ([`Channel::Sse`]). A reply made before any message was read
    /// (authentication, Origin, body limit, overload) is one record of the
    /// canonical error in its `body`; a reply without one (a probe) writes
    /// nothing.
    pub fn finish(self, status: u16, transport: Channel, body: &[u8]) {
        if !self.log.is_enabled() {
            return;
        }
        // One reading of the clocks for the request's records.
        let now = Instant::now();
        let unix_millis = Some(read_unix_millis());
        let facts = RecordFacts {
            transport,
            route: &self.route,
            status,
            duration_micros: micros_between(self.started, now),
        };
        if self.outcomes.is_empty() {
            if let Some(refusal) = record::refusal_outcome(body) {
                self.log.record_line(&refusal, &facts, unix_millis, true);
            }
            return;
        }
        for outcome in &self.outcomes {
            self.log.record_line(outcome, &facts, unix_millis, true);
        }
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panicking listener must not silence the log for good.
    inner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Microseconds from `start` to `end` (0 if `end` came first).
fn micros_between(start: Instant, end: Instant) -> u64 {
    u64::try_from(end.saturating_duration_since(start).as_micros()).unwrap_or(u64::MAX)
}

/// The wall clock: milliseconds since the Unix epoch (0 before it).
fn read_unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The wall clock and 128 bits for the correlation id of record number
/// `count` of a log, mixed from the count under two keys drawn at random
/// once per log ([`EntropyKeys`]):
/// - the low 62 bits (the bits below the UUID's variant) are a bijection
///   of the count modulo 2^62, so no two records of a log share them;
/// - the high 64 bits are SplitMix64's finalizer over the keyed count.
///
/// Unique within a log and unrelated across logs: enough for correlation,
/// not for secrets (the mix is invertible: one id of a log gives away the
/// others). (Two SipHash rounds per record cost twenty times more.)
fn read_clock(keys: &EntropyKeys, count: u64, unix_millis: u64) -> ClockReading {
    ClockReading {
        unix_millis,
        entropy: (u128::from(keys.high(count)) << 64) | u128::from(keys.low(count)),
    }
}

/// The two per-log keys of the correlation ids (see [`read_clock`]).
#[derive(Clone, Copy, Debug)]
struct EntropyKeys([u64; 2]);

impl EntropyKeys {
    /// Odd multipliers (SplitMix64's), so every step below is a bijection.
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    const MIX_1: u64 = 0xbf58_476d_1ce4_e5b9;
    const MIX_2: u64 = 0x94d0_49bb_1331_11eb;
    /// The low 62 bits.
    const LOW: u64 = (1 << 62) - 1;

    /// Keys from the standard library's per-process random hasher keys.
    fn random() -> Self {
        let state = RandomState::new();
        EntropyKeys([state.hash_one(0u8), state.hash_one(1u8)])
    }

    /// SplitMix64's output for the keyed count.
    fn high(self, count: u64) -> u64 {
        let mut z = count.wrapping_mul(Self::GOLDEN).wrapping_add(self.0[0]);
        z = (z ^ (z >> 30)).wrapping_mul(Self::MIX_1);
        z = (z ^ (z >> 27)).wrapping_mul(Self::MIX_2);
        z ^ (z >> 31)
    }

    /// The same steps modulo 2^62: an odd multiple plus a key, a shift
    /// folded in, an odd multiple (each one-to-one on 62-bit values).
    fn low(self, count: u64) -> u64 {
        let mut z = count.wrapping_mul(Self::GOLDEN).wrapping_add(self.0[1]) & Self::LOW;
        z = ((z ^ (z >> 31)).wrapping_mul(Self::MIX_1)) & Self::LOW;
        z = ((z ^ (z >> 29)).wrapping_mul(Self::MIX_2)) & Self::LOW;
        z ^ (z >> 32)
    }
}

/// A freshly created run file.
struct Run {
    file: File,
    path: PathBuf,
    /// Why `.latest` could not be pointed at it, if it could not.
    latest_error: Option<LogError>,
}

/// Create the directory, open a fresh run file and point `.latest` at it.
/// A `.latest` failure is returned beside the open file.
fn start_run(settings: &LogSettings) -> Result<Run, LogError> {
    let dir = &settings.dir;
    fs::create_dir_all(dir).map_err(|source| LogError::Create {
        path: dir.clone(),
        source,
    })?;
    let base = if settings.deterministic {
        "run".to_owned()
    } else {
        format!(
            "{}-{}",
            record::format_compact_timestamp(read_unix_millis()),
            std::process::id()
        )
    };
    // Deterministic runs count on from the highest number present, so a
    // number freed by deleting an old file is not reused out of order.
    let first_number = if settings.deterministic {
        highest_run_number(dir).saturating_add(1)
    } else {
        0
    };
    let mut attempt = 0u32;
    let (file, name) = loop {
        let name = if settings.deterministic {
            format!(
                "{base}-{:06}.jsonl",
                first_number.saturating_add(u64::from(attempt))
            )
        } else if attempt == 0 {
            format!("{base}.jsonl")
        } else {
            format!("{base}-{attempt}.jsonl")
        };
        let path = dir.join(&name);
        match OpenOptions::new().append(true).create_new(true).open(&path) {
            Ok(file) => break (file, name),
            Err(error)
                if error.kind() == io::ErrorKind::AlreadyExists && attempt < MAX_RUNS_PER_NAME =>
            {
                attempt = attempt.saturating_add(1);
            }
            Err(source) => return Err(LogError::Create { path, source }),
        }
    };
    let latest_error = point_latest(dir, &name).err();
    Ok(Run {
        file,
        path: dir.join(name),
        latest_error,
    })
}

/// The number of `run-NNNNNN.jsonl`, if `name` is one.
fn run_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("run-")?.strip_suffix(".jsonl")?;
    if digits.len() < 6 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// True when `name` is a timestamped run file:
/// `YYYYMMDDTHHMMSS.mmmZ-<pid>[-<n>].jsonl`.
fn is_timestamped_run(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".jsonl") else {
        return false;
    };
    let bytes = stem.as_bytes();
    let shape = b"ddddddddTdddddd.dddZ-";
    if bytes.len() <= shape.len() {
        return false;
    }
    let (head, tail) = bytes.split_at(shape.len());
    let head_ok = head
        .iter()
        .zip(shape)
        .all(|(byte, expected)| match expected {
            b'd' => byte.is_ascii_digit(),
            other => byte == other,
        });
    let mut parts = tail.split(|byte| *byte == b'-');
    let pid_ok = parts
        .next()
        .is_some_and(|pid| !pid.is_empty() && pid.iter().all(u8::is_ascii_digit));
    let suffix_ok = match parts.next() {
        None => true,
        Some(suffix) => !suffix.is_empty() && suffix.iter().all(u8::is_ascii_digit),
    };
    head_ok && pid_ok && suffix_ok && parts.next().is_none()
}

/// True when this sink writes files named `name` (see the crate docs).
fn is_run_file(name: &str) -> bool {
    run_number(name).is_some() || is_timestamped_run(name)
}

/// The highest `run-NNNNNN.jsonl` number in `dir` (0 when none).
fn highest_run_number(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|entry| entry.file_name().to_str().and_then(run_number))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// The run files of `dir` other than `current`, oldest first (by
/// modification time, then name), with their sizes.
fn earlier_runs(dir: &Path, current: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut runs: Vec<(SystemTime, PathBuf, u64)> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_str().is_some_and(is_run_file))
        .filter_map(|entry| {
            let metadata = fs::symlink_metadata(entry.path()).ok()?;
            metadata.is_file().then(|| {
                (
                    metadata.modified().unwrap_or(UNIX_EPOCH),
                    entry.path(),
                    metadata.len(),
                )
            })
        })
        .filter(|(_, path, _)| path != current)
        .collect();
    runs.sort();
    runs.into_iter()
        .map(|(_, path, bytes)| (path, bytes))
        .collect()
}

/// Replace `<dir>/.latest` atomically with a link to `name` (relative, so
/// the directory can be moved).
fn point_latest(dir: &Path, name: &str) -> Result<(), LogError> {
    static TEMPORARY: AtomicU64 = AtomicU64::new(0);
    let latest = dir.join(LATEST);
    let temporary = dir.join(format!(
        "{LATEST}.tmp-{}-{}",
        std::process::id(),
        TEMPORARY.fetch_add(1, Ordering::Relaxed)
    ));
    let fail = |source| LogError::Latest {
        path: latest.clone(),
        source,
    };
    let _ = fs::remove_file(&temporary);
    #[cfg(unix)]
    std::os::unix::fs::symlink(name, &temporary).map_err(fail)?;
    #[cfg(not(unix))]
    fs::write(&temporary, name).map_err(fail)?;
    if let Err(source) = fs::rename(&temporary, &latest) {
        let _ = fs::remove_file(&temporary);
        return Err(fail(source));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use evidence_wire::error::CanonicalError;
    use serde_json::Value;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "evidence-wire-log-{name}-{}-{}",
            std::process::id(),
            read_unix_millis()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn correlation_bits_below_the_variant_never_repeat_within_a_log() {
        // The low 62 bits are a bijection of the count: distinct for every
        // record, whatever the keys (here the extremes and random ones).
        for keys in [
            EntropyKeys([0, 0]),
            EntropyKeys([u64::MAX, u64::MAX]),
            EntropyKeys::random(),
        ] {
            let mut seen = std::collections::HashSet::new();
            let mut highs = std::collections::HashSet::new();
            for count in (0..100_000u64).chain([(1 << 62) - 1]) {
                let low = keys.low(count);
                assert!(low < 1 << 62, "{low:#x}");
                assert!(seen.insert(low), "count {count}");
                highs.insert(keys.high(count));
                // The bijection is modulo 2^62 (a log never counts that far).
                assert_eq!(low, keys.low(count.wrapping_add(1 << 62)));
            }
            assert!(highs.len() > 99_990, "{}", highs.len());
        }
        // Two logs' keys give unrelated ids for the same count.
        let (a, b) = (EntropyKeys::random(), EntropyKeys::random());
        assert_ne!((a.high(1), a.low(1)), (b.high(1), b.low(1)));
    }

    fn outcome(error: Option<CanonicalError>) -> Outcome {
        Outcome {
            id: Some(evidence_wire::id::Id::Number(7)),
            method: Some("tools/call".into()),
            tool: Some("evidence_query".into()),
            error,
            detail: error.map(|_| "what was wrong".to_owned()),
            stateless: false,
            trace_id: None,
        }
    }

    fn lines(path: &Path) -> Vec<Value> {
        fs::read_to_string(path)
            .expect("log file")
            .lines()
            .map(|line| serde_json::from_str(line).expect("one JSON record per line"))
            .collect()
    }

    #[test]
    fn stdio_records_land_in_the_run_file() {
        let dir = scratch("stdio");
        let log = ValidationLog::open(&LogSettings::new(&dir).deterministic(true));
        let path = log.path().expect("a run file");
        assert_eq!(path, dir.join("run-000001.jsonl"));
        let mut stdio = log.stdio();
        stdio.bytes_received();
        stdio.observe(
            &ServerEvent::Handled(outcome(None)),
            Some(Framing::ContentLength),
        );
        stdio.observe(
            &ServerEvent::Handled(outcome(Some(CanonicalError::ToolNotFound))),
            Some(Framing::NewlineDelimited),
        );
        let records = lines(&path);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0]["route"], "stdio:content-length");
        assert_eq!(records[0]["status"], 200);
        assert_eq!(records[1]["route"], "stdio:newline-delimited");
        assert_eq!(records[1]["status"], 404);
        assert_eq!(records[1]["error"]["code"], "TOOL_NOT_FOUND");
        assert_eq!(records[1]["correlationId"], record::sequential_uuid(2));
        assert_eq!(log.written(), 2);
        let _ = fs::remove_dir_all(&dir);
    }

    /// The body of a `401` refusal made before any message was read.
    fn unauthenticated(detail: Option<&str>) -> Vec<u8> {
        evidence_wire::envelope::encode_error(None, CanonicalError::Unauthenticated, detail)
    }

    #[test]
    fn http_refusals_and_exchanges_are_recorded_with_the_reply_status() {
        let dir = scratch("http");
        let log = ValidationLog::open(&LogSettings::new(&dir));
        let refused = unauthenticated(Some("no token"));
        log.http_call("/rpc").finish(401, Channel::Http, &refused);
        let mut call = log.http_call("/mcp");
        call.observe(&ServerEvent::Handled(outcome(None)));
        call.finish(200, Channel::Sse, b"event: message\n");
        // A probe's reply has no canonical error: nothing is written.
        let probe = evidence_wire_http::health_reply();
        log.http_call("/healthz")
            .finish(probe.status, Channel::Http, &probe.body);
        // HTTP records are left to the writer thread: flush to read them now.
        log.flush();
        let records = lines(&log.path().expect("run file"));
        assert_eq!(records.len(), 2);
        assert_eq!(records[0]["transport"], "http");
        assert_eq!(records[0]["status"], 401);
        assert_eq!(records[0]["error"]["code"], "UNAUTHENTICATED");
        assert_eq!(records[1]["transport"], "sse");
        assert_eq!(records[1]["route"], "/mcp");
        assert_eq!(records[1]["metadata"]["deterministic"], false);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn latest_follows_the_newest_run() {
        let dir = scratch("latest");
        let settings = LogSettings::new(&dir).deterministic(true);
        let first = ValidationLog::try_open(&settings).expect("first run");
        let second = ValidationLog::try_open(&settings).expect("second run");
        assert_ne!(first.path(), second.path());
        let latest = fs::canonicalize(dir.join(LATEST)).expect(".latest resolves");
        let newest = fs::canonicalize(second.path().expect("path")).expect("run file");
        assert_eq!(latest, newest);
        // No temporary link is left behind.
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .expect("dir")
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    /// A deterministic log in `dir` whose writer thread was never started
    /// (as when it cannot be).
    fn without_writer(dir: &Path) -> ValidationLog {
        let settings = LogSettings::new(dir).deterministic(true);
        let mut run = start_run(&settings).expect("writable");
        assert!(run.latest_error.take().is_none());
        let inner = Inner::new(&settings, default_reporter());
        let mut disk = Disk::new(&settings);
        disk.adopt(run);
        ValidationLog {
            inner: Some(Arc::new(Handle::start_writer(inner, disk, false))),
        }
    }

    /// Removes a scratch path (a directory, or the file standing in for
    /// one) however the test ends.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
            let _ = fs::remove_file(&self.0);
        }
    }

    // Unix: the run file stays writable after its directory is removed.
    #[cfg(unix)]
    #[test]
    fn a_blocking_reporter_holds_up_only_the_thread_that_reports() {
        use std::sync::mpsc;
        let dir = scratch("blocking-reporter");
        let _cleanup = Scratch(dir.clone());
        // A cap whose file share is smaller than one record: the second
        // record rotates.
        let settings = LogSettings::new(&dir).deterministic(true).max_bytes(1000);
        let (entered, reporter_entered) = mpsc::channel::<String>();
        let (release, released) = mpsc::channel::<()>();
        let released = Mutex::new(released);
        // Stands for a write to a full stderr pipe no one reads.
        let reporter: Reporter = Arc::new(move |message: &str| {
            let _ = entered.send(message.to_owned());
            let _ = released
                .lock()
                .expect("release")
                .recv_timeout(Duration::from_secs(30));
        });
        let log = ValidationLog::open_with_reporter(&settings, reporter);
        log.stdio()
            .observe(&ServerEvent::Handled(outcome(None)), None);
        assert_eq!(log.written(), 1);
        // The directory becomes a file: the rotation cannot start a new run.
        fs::remove_dir_all(&dir).expect("remove the directory");
        fs::write(&dir, b"not a directory").expect("blocker file");
        let reporting = {
            let log = log.clone();
            thread::spawn(move || {
                log.stdio()
                    .observe(&ServerEvent::Handled(outcome(None)), None);
            })
        };
        let message = reporter_entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the failed rotation is reported");
        assert!(message.contains("cannot create"), "{message}");
        // While the reporter blocks, other threads make records (dropped at
        // the cap, or written) without waiting for it.
        let (done, finished) = mpsc::channel::<()>();
        let others = {
            let log = log.clone();
            thread::spawn(move || {
                let mut stdio = log.stdio();
                for _ in 0..50 {
                    stdio.observe(&ServerEvent::Handled(outcome(None)), None);
                }
                stdio.flush();
                drop(stdio);
                log.flush();
                let _ = done.send(());
            })
        };
        let unblocked = finished.recv_timeout(Duration::from_secs(10));
        let _ = release.send(());
        reporting.join().expect("the reporting thread");
        others.join().expect("the other thread");
        assert!(
            unblocked.is_ok(),
            "a record maker waited for another thread's blocked reporter"
        );
    }

    #[test]
    fn record_makers_do_not_wait_for_a_writer_held_up_in_the_reporter() {
        use std::sync::mpsc;
        let dir = scratch("writer-reporting");
        let _cleanup = Scratch(dir.clone());
        let log = without_writer(&dir);
        // The state of a writer that is alive but held up in the reporter
        // (not writing, so the queue is not drained).
        {
            let mut inner = log.inner.as_ref().expect("enabled").shared.lock();
            inner.writer_alive = true;
            inner.writer_reporting = true;
        }
        let path = log.path().expect("a run file");
        // Records for well over QUEUED_BUFFERS full batches (each record holds > 100 bytes).
        let records = (QUEUED_BUFFERS + 2) * BATCH_BYTES / 100;
        let (done, finished) = mpsc::channel::<u64>();
        let maker = {
            let log = log.clone();
            thread::spawn(move || {
                let mut stdio = log.stdio_batched();
                for _ in 0..records {
                    stdio.observe(&ServerEvent::Handled(outcome(None)), None);
                    stdio.end_batch();
                }
                let _ = done.send(log.written());
            })
        };
        let written = finished
            .recv_timeout(Duration::from_secs(30))
            .expect("a record maker waited for a writer held up in the reporter");
        maker.join().expect("the record maker");
        assert!(
            written > 0,
            "past the queue's bound the record maker wrote the batches itself"
        );
        {
            let mut inner = log.inner.as_ref().expect("enabled").shared.lock();
            inner.writer_reporting = false;
            inner.writer_alive = false;
        }
        log.flush();
        let records = u64::try_from(records).expect("count");
        assert_eq!(log.written(), records);
        assert_eq!(lines(&path).len() as u64, records, "every record, once");
    }

    #[test]
    fn an_unusable_directory_is_reported_once_and_recording_goes_on() {
        let dir = scratch("unusable");
        fs::create_dir_all(dir.parent().expect("parent")).expect("temp dir");
        // A regular file where the directory should be: nothing can be created under it.
        fs::write(&dir, b"not a directory").expect("blocker file");
        let reports = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = Arc::clone(&reports);
        let reporter: Reporter = Arc::new(move |message: &str| {
            sink.lock().expect("reports").push(message.to_owned());
        });
        let log =
            ValidationLog::open_with_reporter(&LogSettings::new(dir.join("nested")), reporter);
        assert!(log.path().is_none());
        let mut stdio = log.stdio();
        for _ in 0..3 {
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        }
        let record = log.record(
            &outcome(None),
            &RecordFacts {
                transport: Channel::Stdio,
                route: "stdio",
                status: 200,
                duration_micros: 0,
            },
        );
        assert!(record.is_some(), "records are still made");
        assert_eq!(log.written(), 0);
        let reports = reports.lock().expect("reports");
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert!(reports[0].contains("cannot create"), "{}", reports[0]);
        assert!(ValidationLog::try_open(&LogSettings::new(dir.join("nested"))).is_err());
        let _ = fs::remove_file(&dir);
    }

    /// Bytes of the run files in `dir` (what the cap covers; `.latest` and
    /// other files aside) and how many there are.
    fn run_files_size(dir: &Path) -> (u64, usize) {
        let mut total = 0;
        let mut count = 0;
        for entry in fs::read_dir(dir).expect("dir").filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_run_file(&name) {
                if let Ok(metadata) = fs::symlink_metadata(entry.path()) {
                    total += metadata.len();
                    count += 1;
                }
            }
        }
        (total, count)
    }

    fn newest_run(dir: &Path) -> PathBuf {
        let (_, newest) = fs::read_dir(dir)
            .expect("dir")
            .filter_map(Result::ok)
            .filter(|entry| is_run_file(&entry.file_name().to_string_lossy()))
            .map(|entry| {
                (
                    run_number(&entry.file_name().to_string_lossy()),
                    entry.path(),
                )
            })
            .max()
            .expect("a run file");
        newest
    }

    #[test]
    fn a_flood_stays_under_the_size_cap_and_latest_follows_rotation() {
        const CAP: u64 = 16 * 1024;
        let dir = scratch("cap");
        fs::create_dir_all(&dir).expect("dir");
        // A previous run's big file and an unrelated file: the first is
        // counted and deleted, the second left alone.
        fs::write(dir.join("run-000001.jsonl"), vec![b'x'; 12 * 1024]).expect("old run");
        fs::write(dir.join("notes.txt"), b"not ours").expect("other file");
        let settings = LogSettings::new(&dir).deterministic(true).max_bytes(CAP);
        let worst = Arc::new(Mutex::new((0u64, 0usize)));
        let sampler = Arc::clone(&worst);
        let sampled_dir = dir.clone();
        // Sample the directory after every record, while the writer holds
        // the log: every change to the directory happens under that lock.
        let listener: Listener = Arc::new(move |_: &RecordView<'_>| {
            let (total, files) = run_files_size(&sampled_dir);
            let mut worst = sampler.lock().expect("worst");
            worst.0 = worst.0.max(total);
            worst.1 = worst.1.max(files);
        });
        let log = ValidationLog::try_open(&settings)
            .expect("writable")
            .with_listener(listener);
        assert_eq!(log.path(), Some(dir.join("run-000002.jsonl")));
        let mut stdio = log.stdio();
        let mut outcome = outcome(Some(CanonicalError::InvalidEnvelope));
        // Records of varied sizes, some with the longest detail.
        for n in 0..2000 {
            outcome.detail = Some("d".repeat(n % 1500));
            stdio.observe(&ServerEvent::Handled(outcome.clone()), None);
        }
        assert_eq!(log.written(), 2000, "every record was written");
        let (worst_total, most_files) = *worst.lock().expect("worst");
        let bound = CAP + record::MAX_RECORD_BYTES as u64;
        assert!(
            worst_total <= bound,
            "the directory reached {worst_total} bytes (cap {CAP} + one record)"
        );
        assert!(most_files <= 6, "{most_files} run files at once");
        let (total, files) = run_files_size(&dir);
        assert!(
            total <= bound && files >= 2,
            "{total} bytes in {files} files"
        );
        // The flood rotated through many files; the oldest were deleted,
        // the previous run's first, and the unrelated file is still there.
        assert!(!dir.join("run-000001.jsonl").exists());
        assert!(!dir.join("run-000002.jsonl").exists());
        assert!(dir.join("notes.txt").exists());
        let current = log.path().expect("current file");
        assert_eq!(current, newest_run(&dir));
        let latest = fs::canonicalize(dir.join(LATEST)).expect(".latest resolves");
        assert_eq!(latest, fs::canonicalize(&current).expect("current"));
        // The newest records are kept, whole lines only.
        let kept = lines(&current);
        assert!(!kept.is_empty());
        assert_eq!(
            kept.last().expect("last")["correlationId"],
            record::sequential_uuid(2000)
        );
        // A new run in the same directory keeps counting past the cap's files.
        let again = ValidationLog::try_open(&settings).expect("second run");
        let second = again.path().expect("second run file");
        assert_eq!(second, newest_run(&dir));
        assert!(run_files_size(&dir).0 <= bound);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_huge_peer_detail_is_excerpted_in_the_file() {
        let dir = scratch("excerpt");
        let log = ValidationLog::open(&LogSettings::new(&dir).deterministic(true));
        let mut huge = outcome(Some(CanonicalError::InvalidToolInput));
        huge.detail = Some("\"\u{0}".repeat(5 << 20));
        huge.method = Some("m".repeat(1 << 20).into());
        huge.id = Some(evidence_wire::id::Id::from("i".repeat(1 << 20)));
        log.stdio().observe(&ServerEvent::Handled(huge), None);
        let path = log.path().expect("run file");
        let bytes = fs::read(&path).expect("log");
        assert!(
            bytes.len() <= record::MAX_RECORD_BYTES,
            "one record took {} bytes",
            bytes.len()
        );
        let record = &lines(&path)[0];
        let detail = record["error"]["detail"].as_str().expect("detail");
        assert!(detail.ends_with("… (10485760 bytes)"), "{detail}");
        assert!(detail.starts_with("\"\u{0}"));
        assert!(
            record["method"]
                .as_str()
                .is_some_and(|method| method.ends_with("… (1048576 bytes)"))
        );
        assert!(
            record["requestId"]
                .as_str()
                .is_some_and(|id| id.len() <= record::MAX_NAME_BYTES)
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_run_file_names_are_ours() {
        for name in [
            "run-000001.jsonl",
            "run-1234567.jsonl",
            "20250131T090500.250Z-4242.jsonl",
            "20250131T090500.250Z-4242-3.jsonl",
        ] {
            assert!(is_run_file(name), "{name}");
        }
        for name in [
            ".latest",
            "run-1.jsonl",
            "run-000001.json",
            "notes.jsonl",
            "20250131T090500.250Z.jsonl",
            "20250131T090500.250Z-.jsonl",
            "20250131T090500.250Z-42-x.jsonl",
            "20250131T090500.250Z-42-1-2.jsonl",
            "2025013XT090500.250Z-42.jsonl",
        ] {
            assert!(!is_run_file(name), "{name}");
        }
    }

    #[test]
    fn disabled_logs_write_nothing() {
        let log = ValidationLog::disabled();
        assert!(!log.is_enabled());
        assert!(log.path().is_none());
        let mut stdio = log.stdio();
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        assert_eq!(log.written(), 0);
    }

    /// A batch's records share one reading of the clocks (taken at its
    /// first record): the same timestamp and duration however long the
    /// records take; a flush or new input starts a new reading. An
    /// observer that does not batch reads the clocks for every record.
    #[test]
    fn a_batch_shares_one_clock_reading() {
        let dir = scratch("reading");
        let log = ValidationLog::open(&LogSettings::new(&dir));
        let path = log.path().expect("a run file");
        let pause = std::time::Duration::from_millis(20);
        let stamps = |records: &[Value], at: usize| {
            (
                records[at]["timestamp"]
                    .as_str()
                    .expect("timestamp")
                    .to_owned(),
                records[at]["durationMicros"].as_u64().expect("duration"),
            )
        };
        let mut stdio = log.stdio_batched();
        stdio.bytes_received();
        for round in 0..2 {
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
            std::thread::sleep(pause);
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
            if round == 0 {
                stdio.flush();
            } else {
                stdio.bytes_received();
            }
            std::thread::sleep(pause);
        }
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        stdio.flush();
        let records = lines(&path);
        assert_eq!(records.len(), 5);
        assert_eq!(stamps(&records, 0), stamps(&records, 1), "one batch");
        assert_eq!(stamps(&records, 2), stamps(&records, 3), "one batch");
        let pause_micros = u64::try_from(pause.as_micros()).expect("small");
        // After a flush: a new reading (the same input, a later time).
        assert!(stamps(&records, 2).1 >= stamps(&records, 1).1 + 2 * pause_micros);
        assert_ne!(stamps(&records, 2).0, stamps(&records, 1).0);
        // After new input: a new reading, counted from it.
        assert!(stamps(&records, 4).1 < stamps(&records, 3).1 + pause_micros);
        assert_ne!(stamps(&records, 4).0, stamps(&records, 3).0);
        drop(stdio);

        let mut stdio = log.stdio();
        stdio.bytes_received();
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        std::thread::sleep(pause);
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        let records = lines(&path);
        assert!(stamps(&records, 6).1 >= stamps(&records, 5).1 + pause_micros);
        assert_ne!(stamps(&records, 6).0, stamps(&records, 5).0);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A batching observer's flush writes everything pending, in order,
    /// and the size cap holds exactly as with one write per record: its
    /// pending bytes count as the file's.
    #[test]
    fn a_batching_observer_writes_at_flush_and_keeps_the_cap() {
        const CAP: u64 = 16 * 1024;
        let dir = scratch("batched");
        let settings = LogSettings::new(&dir).deterministic(true).max_bytes(CAP);
        let log = ValidationLog::try_open(&settings).expect("writable");
        let path = log.path().expect("a run file");
        let mut stdio = log.stdio_batched();
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        stdio.flush();
        let records = lines(&path);
        assert_eq!(records.len(), 2);
        assert_eq!(records[1]["correlationId"], record::sequential_uuid(2));
        assert_eq!(log.written(), 2);

        let mut outcome = outcome(Some(CanonicalError::InvalidEnvelope));
        let bound = CAP + record::MAX_RECORD_BYTES as u64;
        for n in 0..2000 {
            outcome.detail = Some("d".repeat(n % 1500));
            stdio.observe(&ServerEvent::Handled(outcome.clone()), None);
            if n % 7 == 0 {
                stdio.flush();
                let (total, _) = run_files_size(&dir);
                assert!(total <= bound, "{total} bytes after record {n} (cap {CAP})");
            }
        }
        drop(stdio);
        assert_eq!(log.written(), 2002, "every record was written");
        let (total, files) = run_files_size(&dir);
        assert!(
            total <= bound && files >= 2,
            "{total} bytes in {files} files"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    /// Records left pending (a batch ended, nothing flushed) reach the
    /// file by the writer thread within the flush interval; what is
    /// pending when the last clone is dropped is written too.
    #[test]
    fn pending_records_reach_the_file_within_the_flush_interval() {
        let dir = scratch("interval");
        let settings = LogSettings::new(&dir).deterministic(true);
        let log = ValidationLog::try_open(&settings).expect("writable");
        let path = log.path().expect("a run file");
        let mut stdio = log.stdio_batched();
        for _ in 0..3 {
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        }
        stdio.end_batch();
        // Bounded: the interval is 100 ms; a loaded machine gets 50 times
        // that. `written` counts a batch once its `write` has returned.
        let written_soon = |count: u64| {
            let started = Instant::now();
            while log.written() < count && started.elapsed() < FLUSH_INTERVAL * 50 {
                std::thread::sleep(Duration::from_millis(5));
            }
            log.written()
        };
        assert_eq!(written_soon(3), 3, "written by the writer thread");
        assert_eq!(lines(&path).len(), 3);
        // The writer is idle now (nothing pending): a new record wakes it.
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        stdio.end_batch();
        assert_eq!(written_soon(4), 4, "an idle writer was woken");
        assert_eq!(lines(&path).len(), 4);

        // Pending at the end (an HTTP call's record, left to the writer):
        // dropping the log's last clone writes it.
        drop(stdio);
        let refused = unauthenticated(None);
        let clone = log.clone();
        clone.http_call("/rpc").finish(401, Channel::Http, &refused);
        drop(log);
        drop(clone);
        let records = lines(&path);
        assert_eq!(
            records.len(),
            5,
            "the pending record was written at the drop"
        );
        assert_eq!(records[4]["correlationId"], record::sequential_uuid(5));
        let _ = fs::remove_dir_all(&dir);
    }

    /// Many records from several threads, written through the queue (full
    /// buffers and interval hand-offs, rotation included), all land whole
    /// and in the order they were made.
    #[test]
    fn the_writer_thread_keeps_every_record_in_order() {
        let dir = scratch("order");
        // ~2.6 MB of records: files of 1 MiB rotate, and none is deleted.
        let settings = LogSettings::new(&dir)
            .deterministic(true)
            .max_bytes(4 * 1024 * 1024);
        let log = ValidationLog::try_open(&settings).expect("writable");
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut stdio = log.stdio_batched();
                    for n in 0..3000 {
                        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
                        if n % 50 == 0 {
                            stdio.end_batch();
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("observer thread");
        }
        log.flush();
        assert_eq!(log.written(), 9000);
        let mut files: Vec<_> = fs::read_dir(&dir)
            .expect("log dir")
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                is_run_file(&name).then(|| dir.join(name))
            })
            .collect();
        files.sort();
        assert!(files.len() >= 2, "no rotation: {files:?}");
        let ids: Vec<String> = files
            .iter()
            .flat_map(|file| lines(file))
            .map(|record| record["correlationId"].as_str().expect("id").to_owned())
            .collect();
        let expected: Vec<String> = (1..=9000).map(record::sequential_uuid).collect();
        assert!(ids == expected, "{} records, not in order", ids.len());
        let _ = fs::remove_dir_all(&dir);
    }

    /// Without a writer thread (one that could not be started, or ended),
    /// the thread making a record writes the pending ones at once.
    #[test]
    fn without_a_writer_thread_records_are_written_by_their_makers() {
        let dir = scratch("no-writer");
        let log = without_writer(&dir);
        let path = log.path().expect("a run file");
        let mut stdio = log.stdio_batched();
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        log.http_call("/rpc")
            .finish(401, Channel::Http, &unauthenticated(None));
        assert_eq!(
            log.written(),
            2,
            "written before observe and finish returned"
        );
        assert_eq!(lines(&path).len(), 2);
        drop(stdio);
        let _ = fs::remove_dir_all(&dir);
    }

    /// `log`'s current run file.
    fn run_file(log: &ValidationLog) -> Arc<RunFile> {
        let disk = log.inner.as_ref().expect("enabled").shared.lock_disk();
        Arc::clone(disk.file.as_ref().expect("a run file"))
    }

    /// Arms `file`: after `writes_before` writes, one lets `limit` bytes
    /// through and fails (a full disk); the next `failing_cuts` cuts fail.
    fn arm(file: &RunFile, writes_before: usize, limit: usize, failing_cuts: usize) {
        *lock_faults(&file.faults) = Faults {
            writes_before,
            write_limit: Some(limit),
            failing_cuts,
        };
    }

    /// The records of the run file at `path`, each line parsed (a line
    /// that is not a record fails the test), by correlation id number.
    fn record_numbers(path: &Path) -> Vec<u64> {
        let text = fs::read_to_string(path).expect("log file");
        assert!(text.is_empty() || text.ends_with('\n'), "a torn last line");
        lines(path)
            .iter()
            .map(|record| {
                let id = record["correlationId"].as_str().expect("id");
                (1..=10_000)
                    .find(|n| record::sequential_uuid(*n) == id)
                    .expect("a sequential id")
            })
            .collect()
    }

    /// What the log counts of its directory (the cap's accounting) and
    /// what is there: equal once everything is written.
    fn counted_and_present(log: &ValidationLog, dir: &Path) -> (u64, u64) {
        let disk = log.inner.as_ref().expect("enabled").shared.lock_disk();
        let counted = disk.older_bytes.saturating_add(disk.current_bytes);
        drop(disk);
        (counted, run_files_size(dir).0)
    }

    /// A reporter keeping what it is told.
    fn keeping_reporter() -> (Reporter, Arc<Mutex<Vec<String>>>) {
        let reports = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = Arc::clone(&reports);
        let reporter: Reporter = Arc::new(move |message: &str| {
            sink.lock().expect("reports").push(message.to_owned());
        });
        (reporter, reports)
    }

    /// A deterministic log in `dir` whose writer thread was never
    /// started, reporting to `reporter`.
    fn without_writer_reporting(dir: &Path, reporter: Reporter) -> ValidationLog {
        let settings = LogSettings::new(dir).deterministic(true);
        let mut run = start_run(&settings).expect("writable");
        assert!(run.latest_error.take().is_none());
        let inner = Inner::new(&settings, reporter);
        let mut disk = Disk::new(&settings);
        disk.adopt(run);
        ValidationLog {
            inner: Some(Arc::new(Handle::start_writer(inner, disk, false))),
        }
    }

    /// Issue 38 item 8: a write that the disk cuts short (part of a line
    /// landed, then ENOSPC) must not leave the next record appended to
    /// the torn line: the file is cut back to its last whole record, the
    /// records after the failure are all there, every line parses, and
    /// the size the cap counts is the file's.
    #[test]
    fn a_write_cut_short_leaves_no_torn_line() {
        let dir = scratch("torn");
        let _cleanup = Scratch(dir.clone());
        let (reporter, reports) = keeping_reporter();
        let log = without_writer_reporting(&dir, reporter);
        let path = log.path().expect("a run file");
        let mut stdio = log.stdio();
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        // Two writes later, the fourth record's write stops 40 bytes in.
        arm(&run_file(&log), 2, 40, 0);
        for _ in 0..8 {
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        }
        assert_eq!(record_numbers(&path), [1, 2, 3, 5, 6, 7, 8, 9]);
        assert_eq!(log.written(), 8);
        let (counted, present) = counted_and_present(&log, &dir);
        assert_eq!(counted, present, "the cap counts what the file holds");
        let reports = reports.lock().expect("reports");
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert!(reports[0].contains("cannot write"), "{}", reports[0]);
        assert!(reports[0].contains("full disk"), "{}", reports[0]);
    }

    /// A batch of records written at once by the writer thread, cut short
    /// in its third line: the two whole lines before the tear stay (and
    /// are counted as written), the torn one and the rest of the batch
    /// are gone, and later batches are whole.
    #[test]
    fn a_batch_cut_short_keeps_its_whole_lines() {
        let dir = scratch("torn-batch");
        let _cleanup = Scratch(dir.clone());
        let settings = LogSettings::new(&dir).deterministic(true);
        let log = ValidationLog::try_open(&settings).expect("writable");
        let path = log.path().expect("a run file");
        let mut stdio = log.stdio_batched();
        let line_length = deterministic_line_length();
        arm(&run_file(&log), 0, 2 * line_length + line_length / 2, 0);
        for _ in 0..5 {
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        }
        stdio.end_batch();
        // Written by the writer thread within the flush interval (or by
        // the flush below, if the machine is slow: the same repair).
        let started = Instant::now();
        while log.written() < 2 && started.elapsed() < FLUSH_INTERVAL * 50 {
            std::thread::sleep(Duration::from_millis(5));
        }
        stdio.flush();
        assert_eq!(log.written(), 2);
        for _ in 0..4 {
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        }
        stdio.flush();
        assert_eq!(record_numbers(&path), [1, 2, 6, 7, 8, 9]);
        assert_eq!(log.written(), 6);
        let (counted, present) = counted_and_present(&log, &dir);
        assert_eq!(counted, present);
    }

    /// The length of a deterministic log's line for `outcome(None)` (the
    /// same for every such record: fixed clock, ids of one length).
    fn deterministic_line_length() -> usize {
        let dir = scratch("line-length");
        let _cleanup = Scratch(dir.clone());
        let log = without_writer_reporting(&dir, Arc::new(|_: &str| {}));
        log.stdio()
            .observe(&ServerEvent::Handled(outcome(None)), None);
        let text = fs::read_to_string(log.path().expect("a run file")).expect("log file");
        assert_eq!(text.lines().count(), 1);
        text.len()
    }

    /// When the torn line cannot be cut off at once it is cut before the
    /// next write; when it never can be, it is ended with a newline, so
    /// the records after it still start lines of their own (the torn line
    /// is then the only line that is not a record).
    #[test]
    fn a_torn_line_that_cannot_be_cut_at_once_is_mended_before_the_next_write() {
        let dir = scratch("torn-mend");
        let _cleanup = Scratch(dir.clone());
        let log = without_writer_reporting(&dir, Arc::new(|_: &str| {}));
        let path = log.path().expect("a run file");
        let mut stdio = log.stdio();
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        // Cut fails once: the next write cuts first.
        arm(&run_file(&log), 0, 25, 1);
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        let (counted, present) = counted_and_present(&log, &dir);
        assert!(
            counted >= present,
            "{counted} < {present}: the cap undercounts"
        );
        stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        assert_eq!(record_numbers(&path), [1, 3]);
        // Cuts fail for good: the torn line is ended with a newline.
        arm(&run_file(&log), 0, 30, usize::MAX);
        for _ in 0..4 {
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        }
        let text = fs::read_to_string(&path).expect("log file");
        assert_eq!(log.written(), 5, "{text}");
        let torn: Vec<&str> = text
            .lines()
            .filter(|line| serde_json::from_str::<Value>(line).is_err())
            .collect();
        assert_eq!(torn.len(), 1, "{text}");
        assert_eq!(torn[0].len(), 30);
        let kept: Vec<Value> = text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        let ids: Vec<&str> = kept
            .iter()
            .map(|record| record["correlationId"].as_str().expect("id"))
            .collect();
        let expected: Vec<String> = [1, 3, 5, 6, 7].map(record::sequential_uuid).to_vec();
        assert_eq!(ids, expected);
        let (counted, present) = counted_and_present(&log, &dir);
        assert_eq!(counted, present);
    }

    /// The last write to a file before it is rotated away (its lines are
    /// written when the record that does not fit starts the next file)
    /// fails part-way: that file, an older one from then on, is cut back
    /// to its whole lines and its size in the cap's accounting is
    /// corrected, not the current file's.
    #[test]
    fn a_failed_write_to_a_rotated_file_is_repaired_and_counted_there() {
        let dir = scratch("torn-rotated");
        let _cleanup = Scratch(dir.clone());
        // Files of 1000 bytes: the fourth record (about 300 bytes each)
        // starts a new file.
        let settings = LogSettings::new(&dir).deterministic(true).max_bytes(4000);
        let mut run = start_run(&settings).expect("writable");
        assert!(run.latest_error.take().is_none());
        let inner = Inner::new(&settings, Arc::new(|_: &str| {}));
        let mut disk = Disk::new(&settings);
        disk.adopt(run);
        let log = ValidationLog {
            inner: Some(Arc::new(Handle::start_writer(inner, disk, false))),
        };
        let first = log.path().expect("a run file");
        // A writer that is alive but held up: the records wait, unwritten.
        {
            let mut inner = log.inner.as_ref().expect("enabled").shared.lock();
            inner.writer_alive = true;
        }
        let first_file = run_file(&log);
        let line = deterministic_line_length();
        let count = 1000 / line + 1;
        assert!(count >= 3, "{line}-byte lines");
        let mut stdio = log.stdio_batched();
        for _ in 0..count {
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
        }
        assert_eq!(log.written(), 0, "the records wait");
        // The first file's lines go in one write, which fails after one
        // line and 10 bytes.
        arm(&first_file, 0, line + 10, 0);
        {
            let mut inner = log.inner.as_ref().expect("enabled").shared.lock();
            inner.writer_alive = false;
        }
        stdio.flush();
        let second = log.path().expect("the second run file");
        assert_ne!(first, second, "rotated");
        assert_eq!(record_numbers(&first), [1]);
        assert_eq!(
            record_numbers(&second),
            [u64::try_from(count).expect("few")]
        );
        assert_eq!(log.written(), 2);
        let (counted, present) = counted_and_present(&log, &dir);
        assert_eq!(counted, present, "the older file's size was corrected");
    }

    /// Issue 43: the thread that makes a record only holds it. With the
    /// writer thread alive but held up, records that need a new file and
    /// the deletion of an old one change nothing on disk (no line written,
    /// no file started or deleted, `.latest` unmoved); the thread that
    /// writes them (here the flush) formats, rotates and deletes.
    #[test]
    fn record_makers_neither_write_nor_rotate_nor_delete() {
        const CAP: u64 = 16 * 1024;
        let dir = scratch("held");
        let _cleanup = Scratch(dir.clone());
        fs::create_dir_all(&dir).expect("dir");
        // An earlier run's file that the cap makes room by deleting.
        let old = dir.join("run-000001.jsonl");
        fs::write(&old, vec![b'x'; 12 * 1024]).expect("old run");
        let settings = LogSettings::new(&dir).deterministic(true).max_bytes(CAP);
        let mut run = start_run(&settings).expect("writable");
        assert!(run.latest_error.take().is_none());
        let mut disk = Disk::new(&settings);
        disk.adopt(run);
        let log = ValidationLog {
            inner: Some(Arc::new(Handle::start_writer(
                Inner::new(&settings, default_reporter()),
                disk,
                false,
            ))),
        };
        let first = log.path().expect("a run file");
        let latest = fs::read_link(dir.join(LATEST)).expect(".latest");
        log.inner
            .as_ref()
            .expect("enabled")
            .shared
            .lock()
            .writer_alive = true;
        let mut stdio = log.stdio_batched();
        // ~40 records of ~300 bytes: past a file share (4 KiB) several
        // times and past the cap with the old file.
        for _ in 0..40 {
            stdio.observe(&ServerEvent::Handled(outcome(None)), None);
            stdio.end_batch();
        }
        let (size, files) = run_files_size(&dir);
        assert_eq!(
            (size, files),
            (12 * 1024, 2),
            "nothing written, started or deleted"
        );
        assert!(old.exists());
        assert_eq!(log.path().as_ref(), Some(&first));
        assert_eq!(fs::read_link(dir.join(LATEST)).expect(".latest"), latest);
        assert_eq!(log.written(), 0);
        log.inner
            .as_ref()
            .expect("enabled")
            .shared
            .lock()
            .writer_alive = false;
        stdio.flush();
        assert_eq!(log.written(), 40);
        assert!(!old.exists(), "deleted to keep the cap");
        let newest = log.path().expect("a run file");
        assert_ne!(newest, first, "rotated");
        assert_eq!(
            fs::read_link(dir.join(LATEST)).expect(".latest"),
            PathBuf::from(newest.file_name().expect("name"))
        );
        let (size, _) = run_files_size(&dir);
        assert!(size <= CAP + record::MAX_RECORD_BYTES as u64, "{size}");
    }

    /// Issue 43: the files a log writes, through its writer thread and
    /// its callers' flushes, hold exactly the lines of the straightforward
    /// path (each record's owned form written on its own,
    /// `ValidationRecord::to_json_line`), in order, for any records made
    /// through batching and direct stdio observers and HTTP calls; and,
    /// with a small cap, they are split and deleted as the rules say:
    /// every file ends where the next line would pass its share of the
    /// cap, and the files kept hold the newest lines.
    #[test]
    fn the_files_hold_the_lines_of_the_straightforward_path() {
        use proptest::prelude::*;
        // Short text with escapes, or long enough to be excerpted.
        let text = || {
            prop_oneof![
                "[ -~é\u{1}\n\"\\\\]{0,12}",
                ("[a-z\"é\u{1}]{1,4}", 40usize..400).prop_map(|(unit, times)| unit.repeat(times)),
            ]
        };
        let id = prop_oneof![
            Just(None),
            Just(Some(evidence_wire::id::Id::NegativeZero)),
            any::<i64>().prop_map(|number| Some(evidence_wire::id::Id::Number(number))),
            text().prop_map(|text| Some(evidence_wire::id::Id::from(text).into_owned())),
        ];
        let method = prop_oneof![
            Just(Some(std::borrow::Cow::Borrowed("tools/call"))),
            Just(None),
            text().prop_map(|text| Some(std::borrow::Cow::Owned(text))),
        ];
        let error = proptest::option::of(0usize..CanonicalError::ALL.len());
        // How each record is made: 0-2 a batching observer (then nothing,
        // end the batch, flush), 3 a direct observer, 4 an HTTP call.
        let record = (id, method, error, proptest::option::of(text()), 0u8..5);
        let strategy = (proptest::collection::vec(record, 1..120), any::<bool>());
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 48,
            ..proptest::test_runner::Config::default()
        });
        let case = AtomicU64::new(0);
        runner
            .run(&strategy, |(records, small_cap)| {
                let dir = scratch(&format!("lines-{}", case.fetch_add(1, Ordering::Relaxed)));
                let _cleanup = Scratch(dir.clone());
                let cap = if small_cap {
                    MIN_LOG_MAX_BYTES
                } else {
                    1 << 30
                };
                let settings = LogSettings::new(&dir).deterministic(true).max_bytes(cap);
                let log = ValidationLog::try_open(&settings).expect("writable");
                let mut reference = Recorder::new(true);
                let mut expected: Vec<Vec<u8>> = Vec::new();
                let mut batched = log.stdio_batched();
                for (id, method, error, detail, how) in records {
                    let outcome = Outcome {
                        id,
                        method,
                        tool: Some(std::borrow::Cow::Borrowed("evidence_query")),
                        error: error.and_then(|index| CanonicalError::ALL.get(index).copied()),
                        detail,
                        stateless: false,
                        // Every other record carries a trace id (held in
                        // batches and written by the writer like the rest).
                        trace_id: (how % 2 == 0)
                            .then(|| evidence_wire::trace::TraceId::new([how + 1; 16]))
                            .flatten(),
                    };
                    let event = ServerEvent::Handled(outcome.clone());
                    let framing = Some(Framing::NewlineDelimited);
                    let stdio_facts = RecordFacts {
                        transport: Channel::Stdio,
                        route: record::stdio_route(framing),
                        status: record::stdio_status(&outcome),
                        duration_micros: 0,
                    };
                    let facts = match how {
                        0..=2 => {
                            batched.observe(&event, framing);
                            match how {
                                1 => batched.end_batch(),
                                2 => batched.flush(),
                                _ => {}
                            }
                            stdio_facts
                        }
                        3 => {
                            log.stdio().observe(&event, framing);
                            stdio_facts
                        }
                        _ => {
                            let mut call = log.http_call("/rpc");
                            call.observe(&event);
                            call.finish(422, Channel::Http, b"");
                            RecordFacts {
                                transport: Channel::Http,
                                route: "/rpc",
                                status: 422,
                                duration_micros: 0,
                            }
                        }
                    };
                    let line = reference
                        .record(&outcome, &facts, ClockReading::default())
                        .to_json_line();
                    expected.push(line);
                }
                drop(batched);
                log.flush();
                prop_assert_eq!(log.written(), expected.len() as u64);
                // The run files, oldest first (deterministic names sort by age).
                let mut files: Vec<PathBuf> = fs::read_dir(&dir)
                    .expect("dir")
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .filter(|path| {
                        path.file_name()
                            .and_then(|name| name.to_str())
                            .is_some_and(is_run_file)
                    })
                    .collect();
                files.sort();
                let contents: Vec<Vec<u8>> = files
                    .iter()
                    .map(|file| fs::read(file).expect("run file"))
                    .collect();
                let written: Vec<u8> = contents.concat();
                let all: Vec<u8> = expected.concat();
                if !small_cap {
                    prop_assert_eq!(files.len(), 1);
                    prop_assert_eq!(
                        String::from_utf8_lossy(&written),
                        String::from_utf8_lossy(&all)
                    );
                    return Ok(());
                }
                // The newest lines, whole, in order.
                prop_assert!(all.ends_with(&written), "not the newest lines");
                let kept = expected.len()
                    - expected
                        .iter()
                        .rev()
                        .scan(0usize, |length, line| {
                            *length += line.len();
                            Some(*length)
                        })
                        .take_while(|length| *length <= written.len())
                        .count();
                prop_assert_eq!(
                    expected[kept..].concat().len(),
                    written.len(),
                    "files end at line ends"
                );
                // Each file ends where the next line would pass its share.
                let share = usize::try_from(settings.file_share()).expect("small");
                let mut line = kept;
                for (index, content) in contents.iter().enumerate() {
                    let mut length = 0;
                    while length < content.len() {
                        length += expected[line].len();
                        line += 1;
                    }
                    prop_assert_eq!(length, content.len());
                    if let Some(next) = expected.get(line).filter(|_| index + 1 < contents.len()) {
                        prop_assert!(content.len() + next.len() > share);
                    }
                    prop_assert!(
                        content.len() <= share || content.len() == expected[line - 1].len()
                    );
                }
                let total = u64::try_from(written.len()).expect("small");
                prop_assert!(total <= cap + record::MAX_RECORD_BYTES as u64);
                Ok(())
            })
            .expect("the files hold the straightforward lines");
    }

    /// The memory budget holds before any line is formatted: records are
    /// handed off once `BATCH_BYTES` of them are held (counted as the
    /// memory they take, peer text excerpted first), so the pending batch
    /// never holds more, and a queued one at most one record more; past
    /// `QUEUED_BUFFERS` queued batches a record maker waits (`settle`).
    #[test]
    fn held_records_are_handed_off_at_the_batch_budget() {
        let mut inner = Inner::new(&LogSettings::new("unused"), default_reporter());
        inner.has_file = true;
        // Alive, so hand-offs only queue (nothing is written here).
        inner.writer_alive = true;
        let mut outcome = outcome(Some(CanonicalError::InvalidEnvelope));
        let facts = RecordFacts {
            transport: Channel::Http,
            route: "/rpc",
            status: 400,
            duration_micros: 0,
        };
        let most = record::MAX_HELD_BYTES;
        let mut made = 0u64;
        for n in 0..20_000usize {
            // Details from none to far past the excerpt's bound.
            outcome.detail = (n % 3 != 0).then(|| "d".repeat(n % 5000));
            inner.accept_outcome(&outcome, &facts, Some(0));
            made += 1;
            assert!(
                inner.pending.bytes() < BATCH_BYTES,
                "pending past the budget"
            );
            if let Some(queued) = inner.queue.back() {
                assert!(queued.bytes() < BATCH_BYTES + most, "{}", queued.bytes());
                assert!(queued.bytes() >= BATCH_BYTES, "handed off early");
            }
            // The writer thread takes the oldest batches as `settle` would
            // make the record maker wait for.
            while inner.queue.len() > QUEUED_BUFFERS {
                let batch = inner.queue.pop_front().expect("queued");
                made -= u64::try_from(batch.len()).expect("count");
                inner.recycle(batch);
            }
        }
        let held: u64 = inner
            .queue
            .iter()
            .chain([&inner.pending])
            .map(|batch| u64::try_from(batch.len()).expect("count"))
            .sum();
        assert_eq!(held, made, "every record made is held once");
        assert!(inner.queue.len() <= QUEUED_BUFFERS);
        assert!(inner.spare.len() <= QUEUED_BUFFERS + 1);
    }
}
