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
//! its cost is bounded before it starts. The threads start on first use and
//! end when the pool is dropped. A job that panics is reported as a lost
//! answer to its caller; the thread goes on.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

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
    /// `timeout` for a thread to start it.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        timeout: Duration,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Refused> {
        let state = Arc::new(AtomicU8::new(QUEUED));
        let (answer, result) = mpsc::sync_channel::<T>(1);
        let job_state = state.clone();
        let job: Job = Box::new(move || {
            if job_state
                .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return;
            }
            // A panic must not take the pool thread with it.
            if let Ok(value) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
                let _ = answer.send(value);
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
        match result.recv_timeout(timeout) {
            Ok(value) => Ok(value),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Refused::Lost),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if state
                    .compare_exchange(QUEUED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Err(Refused::Busy);
                }
                // Started meanwhile: its cost is bounded, wait for it.
                result.recv().map_err(|_| Refused::Lost)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Pool, Refused};
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
                    pool.run(Duration::from_secs(10), move || {
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
        let slow = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                pool.run(Duration::from_secs(5), || {
                    std::thread::sleep(Duration::from_millis(300))
                })
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        let waited = pool.run(Duration::from_millis(20), move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(waited, Err(Refused::Busy));
        assert!(slow.join().is_ok());
        // The abandoned job never runs.
        assert_eq!(pool.run(Duration::from_secs(5), || 7), Ok(7));
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_panicking_job_is_lost_and_the_pool_goes_on() {
        let pool = Pool::new(1);
        let lost: Result<(), Refused> = pool.run(Duration::from_secs(5), || panic!("boom"));
        assert_eq!(lost, Err(Refused::Lost));
        assert_eq!(pool.run(Duration::from_secs(5), || 1), Ok(1));
    }
}
