//! A small pool of threads that own the memory-heavy part of `json_path`:
//! reading, parsing and evaluating a document.
//!
//! Bounding how many documents are held at once is not enough to bound the
//! process's memory: the allocator keeps per-thread arenas, and a document
//! parsed on each of 64 request threads leaves up to one arena's worth of
//! freed memory resident per thread (measured: 643 MB peak under 64
//! concurrent calls with a 4-document gate, 272 MB with two arenas). So the
//! documents are parsed and evaluated only on the pool's `capacity` threads,
//! at most one at a time each; the caller's thread waits for the answer.
//!
//! A caller waits at most its `timeout` for a thread to take its job; a job
//! still queued then is abandoned (the caller answers `provider_busy`) and
//! skipped when a thread reaches it. A job already running is waited for:
//! its cost is bounded before it starts. A caller whose call is cancelled
//! (its own caller went away) stops waiting at once: its job, if still
//! queued, is skipped; if running, it finishes on its thread (bounded) and
//! its result is dropped. The threads start on first use and
//! end when the pool is dropped. A job that panics is reported as a lost
//! answer to its caller; the thread goes on.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use evidence_wire_provider::Cancellation;

/// A job as the threads see it.
type Job = Box<dyn FnOnce() + Send>;

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const ABANDONED: u8 = 2;

/// Why a job gave no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No thread took the job within the timeout.
    Busy,
    /// The job panicked or the pool could not run it.
    Lost,
    /// The call was cancelled while it waited: nobody wants the answer.
    Cancelled,
}

/// What a caller hears about its job.
enum Outcome<T> {
    Answered(T),
    /// It panicked, or was dropped without running.
    Lost,
    /// The call was cancelled: stop waiting.
    Cancelled,
}

/// The job's end of the answer channel: says [`Outcome::Lost`] when
/// dropped without having sent.
struct Reply<T>(Option<mpsc::SyncSender<Outcome<T>>>);

impl<T> Reply<T> {
    fn send(&mut self, outcome: Outcome<T>) {
        if let Some(sender) = self.0.take() {
            let _ = sender.try_send(outcome);
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        self.send(Outcome::Lost);
    }
}

/// The pool.
#[derive(Debug)]
pub(crate) struct Pool {
    capacity: usize,
    /// The queue's sending end, created with the threads on first use.
    sender: OnceLock<Mutex<mpsc::Sender<Job>>>,
}

impl Pool {
    /// A pool of `capacity` (at least 1) threads, not started yet.
    pub(crate) fn new(capacity: usize) -> Pool {
        Pool {
            capacity: capacity.max(1),
            sender: OnceLock::new(),
        }
    }

    /// The number of threads.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    fn sender(&self) -> &Mutex<mpsc::Sender<Job>> {
        self.sender.get_or_init(|| {
            let (sender, receiver) = mpsc::channel::<Job>();
            let receiver = Arc::new(Mutex::new(receiver));
            for index in 0..self.capacity {
                let receiver = receiver.clone();
                // A thread that cannot start leaves the others to the work;
                // with none at all, callers time out as Busy.
                let _ = std::thread::Builder::new()
                    .name(format!("evidence-wire-json-{index}"))
                    .stack_size(2 * 1024 * 1024)
                    .spawn(move || {
                        loop {
                            let job = {
                                let receiver =
                                    receiver.lock().unwrap_or_else(PoisonError::into_inner);
                                receiver.recv()
                            };
                            match job {
                                Ok(job) => job(),
                                Err(_) => return,
                            }
                        }
                    });
            }
            Mutex::new(sender)
        })
    }

    /// Runs `work` on a pool thread and returns its result; waits at most
    /// `timeout` for a thread to start it, and not at all once
    /// `cancellation` is cancelled.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        timeout: Duration,
        cancellation: &Cancellation,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Refused> {
        let state = Arc::new(AtomicU8::new(QUEUED));
        // Room for the job's word and the cancellation's, so neither
        // sender ever blocks.
        let (answer, result) = mpsc::sync_channel::<Outcome<T>>(2);
        let job_state = state.clone();
        let wake = answer.clone();
        let cancel_state = state.clone();
        let _on_cancel = cancellation.on_cancel(move || {
            // Skipped if still queued; the caller stops waiting either way.
            let _ = cancel_state.compare_exchange(
                QUEUED,
                ABANDONED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            let _ = wake.try_send(Outcome::Cancelled);
        });
        // Says `Lost` unless the job answered: when it panics, or is
        // dropped unrun (the pool gone).
        let mut reply = Reply(Some(answer));
        let job: Job = Box::new(move || {
            if job_state
                .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return;
            }
            // A panic must not take the pool thread with it.
            if let Ok(value) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
                reply.send(Outcome::Answered(value));
            }
        });
        let sent = self
            .sender()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job);
        if sent.is_err() {
            return Err(Refused::Lost);
        }
        let outcome = match result.recv_timeout(timeout) {
            Ok(outcome) => outcome,
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(Refused::Lost),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if state
                    .compare_exchange(QUEUED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Err(Refused::Busy);
                }
                // Started meanwhile: its cost is bounded, wait for it.
                result.recv().map_err(|_| Refused::Lost)?
            }
        };
        match outcome {
            Outcome::Answered(value) => Ok(value),
            Outcome::Lost => Err(Refused::Lost),
            Outcome::Cancelled => Err(Refused::Cancelled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Pool, Refused};
    use evidence_wire_provider::{CancelReason, Cancellation};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn runs_jobs_on_at_most_capacity_threads() {
        let pool = Arc::new(Pool::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..6)
            .map(|index| {
                let (pool, running, most) = (pool.clone(), running.clone(), most.clone());
                std::thread::spawn(move || {
                    pool.run(Duration::from_secs(10), &Cancellation::new(), move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        running.fetch_sub(1, Ordering::SeqCst);
                        index
                    })
                })
            })
            .collect();
        let mut answers: Vec<usize> = callers
            .into_iter()
            .map(|caller| caller.join().ok().and_then(Result::ok).unwrap_or(99))
            .collect();
        answers.sort_unstable();
        assert_eq!(answers, [0, 1, 2, 3, 4, 5]);
        assert!(most.load(Ordering::SeqCst) <= 2);
    }

    #[test]
    fn a_queued_job_times_out_busy_and_is_skipped() {
        let pool = Arc::new(Pool::new(1));
        let started = Arc::new(AtomicUsize::new(0));
        let slow = {
            let pool = pool.clone();
            let started = started.clone();
            std::thread::spawn(move || {
                pool.run(Duration::from_secs(5), &Cancellation::new(), move || {
                    started.store(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(300));
                })
            })
        };
        // The one worker is busy once the slow job runs (not after a fixed
        // sleep: on a loaded machine the job may start later).
        while started.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        let waited = pool.run(Duration::from_millis(20), &Cancellation::new(), move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(waited, Err(Refused::Busy));
        assert!(slow.join().is_ok());
        // The abandoned job never runs.
        assert_eq!(
            pool.run(Duration::from_secs(5), &Cancellation::new(), || 7),
            Ok(7)
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    /// A cancelled caller stops waiting at once, and its queued job never
    /// runs (a thread busy elsewhere meanwhile).
    #[test]
    fn a_cancelled_caller_stops_waiting_and_its_queued_job_is_skipped() {
        let pool = Arc::new(Pool::new(1));
        let running = Arc::new(AtomicUsize::new(0));
        let busy = {
            let pool = pool.clone();
            let running = running.clone();
            std::thread::spawn(move || {
                pool.run(Duration::from_secs(5), &Cancellation::new(), move || {
                    running.store(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(400));
                })
            })
        };
        // The one worker is busy once that job runs.
        while running.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let cancellation = Cancellation::new();
        let canceller = {
            let cancellation = cancellation.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                cancellation.cancel(CancelReason::CallerGone);
            })
        };
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        let started = std::time::Instant::now();
        let waited = pool.run(Duration::from_secs(30), &cancellation, move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(waited, Err(Refused::Cancelled));
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "{:?}",
            started.elapsed()
        );
        assert!(canceller.join().is_ok());
        assert!(busy.join().is_ok());
        assert_eq!(
            pool.run(Duration::from_secs(5), &Cancellation::new(), || 7),
            Ok(7)
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_panicking_job_is_lost_and_the_pool_goes_on() {
        let pool = Pool::new(1);
        let lost: Result<(), Refused> =
            pool.run(Duration::from_secs(5), &Cancellation::new(), || {
                panic!("boom")
            });
        assert_eq!(lost, Err(Refused::Lost));
        assert_eq!(
            pool.run(Duration::from_secs(5), &Cancellation::new(), || 1),
            Ok(1)
        );
    }
}
