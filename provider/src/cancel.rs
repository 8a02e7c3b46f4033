//! Cancelling a call's work once nobody waits for its answer.
//!
//! Every call an adapter runs carries a [`Cancellation`]. The adapter
//! cancels it when the answer can no longer reach anyone: the peer sent
//! `notifications/cancelled`, the HTTP client disconnected, the drain
//! deadline passed. Work that has not started then never starts (a
//! [`crate::Job`] checks before it runs); async work is dropped by its
//! adapter; blocking work, which no runtime can stop from outside, learns it
//! here: it polls [`Cancellation::is_cancelled`] between steps, or registers
//! a callback with [`Cancellation::on_cancel`] that interrupts what it
//! blocks on (closing a socket, shutting down an HTTP client agent).
//!
//! Limits: the callbacks registered on one call are kept until the call is
//! cancelled or the guards are dropped; each runs at most once, on the
//! thread that cancels (keep them short and non-blocking).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Why a call's work was cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// The peer cancelled the call (`notifications/cancelled`).
    Peer,
    /// The caller went away (an HTTP client disconnected, a stdio peer
    /// closed the connection before its answer).
    CallerGone,
    /// The call's deadline passed.
    Deadline,
    /// The server shut down before the call finished (drain deadline).
    Shutdown,
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CancelReason::Peer => "the peer cancelled the call",
            CancelReason::CallerGone => "the caller went away",
            CancelReason::Deadline => "the call's deadline passed",
            CancelReason::Shutdown => "the server shut down",
        })
    }
}

type Callback = Box<dyn FnOnce() + Send>;

/// The cancellation of one call: cheap to clone (the clones share it),
/// cancelled at most once.
#[derive(Clone, Default)]
pub struct Cancellation {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    reason: Mutex<Option<CancelReason>>,
    callbacks: Mutex<Callbacks>,
}

#[derive(Default)]
struct Callbacks {
    next: u64,
    registered: Vec<(u64, Callback)>,
}

impl fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancellation")
            .field("reason", &self.reason())
            .finish()
    }
}

impl Cancellation {
    /// A call not cancelled (yet).
    pub fn new() -> Self {
        Cancellation::default()
    }

    /// True once the call is cancelled: its answer will reach nobody, so
    /// the work may stop (returning any error; it is dropped).
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// Why the call was cancelled, once it is.
    pub fn reason(&self) -> Option<CancelReason> {
        *lock(&self.inner.reason)
    }

    /// Cancels the call (the first reason sticks) and runs the callbacks
    /// registered with [`Cancellation::on_cancel`], each once, on this
    /// thread. Later calls do nothing.
    pub fn cancel(&self, reason: CancelReason) {
        {
            let mut first = lock(&self.inner.reason);
            if first.is_some() {
                return;
            }
            *first = Some(reason);
        }
        self.inner.cancelled.store(true, Ordering::Release);
        let callbacks = std::mem::take(&mut lock(&self.inner.callbacks).registered);
        for (_, callback) in callbacks {
            callback();
        }
    }

    /// Runs `callback` when the call is cancelled (at once, on this
    /// thread, if it already is), unless the returned guard is dropped
    /// first. What blocking work uses to interrupt what it waits on:
    ///
    /// ```
    /// use evidence_wire_provider::{CancelReason, Cancellation};
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    ///
    /// let cancellation = Cancellation::new();
    /// let interrupted = Arc::new(AtomicBool::new(false));
    /// let flag = Arc::clone(&interrupted);
    /// // e.g. `agent.shutdown()` of the HTTP client the check uses.
    /// let _guard = cancellation.on_cancel(move || flag.store(true, Ordering::SeqCst));
    /// cancellation.cancel(CancelReason::CallerGone);
    /// assert!(interrupted.load(Ordering::SeqCst));
    /// ```
    #[must_use = "dropping the guard unregisters the callback"]
    pub fn on_cancel(&self, callback: impl FnOnce() + Send + 'static) -> OnCancel {
        let key = {
            let mut callbacks = lock(&self.inner.callbacks);
            // Checked under the lock `cancel` takes to run the callbacks:
            // registered before it took them, or run here.
            if !self.is_cancelled() {
                let key = callbacks.next;
                callbacks.next = callbacks.next.wrapping_add(1);
                callbacks.registered.push((key, Box::new(callback)));
                Some(key)
            } else {
                drop(callbacks);
                callback();
                None
            }
        };
        OnCancel {
            inner: key.map(|key| (Arc::clone(&self.inner), key)),
        }
    }

    /// How many callbacks wait for the cancellation (for tests).
    #[doc(hidden)]
    pub fn waiting_callbacks(&self) -> usize {
        lock(&self.inner.callbacks).registered.len()
    }
}

/// Unregisters its [`Cancellation::on_cancel`] callback when dropped.
#[must_use = "dropping the guard unregisters the callback"]
pub struct OnCancel {
    inner: Option<(Arc<Inner>, u64)>,
}

impl fmt::Debug for OnCancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnCancel")
            .field("registered", &self.inner.is_some())
            .finish()
    }
}

impl Drop for OnCancel {
    fn drop(&mut self) {
        if let Some((inner, key)) = self.inner.take() {
            lock(&inner.callbacks)
                .registered
                .retain(|(registered, _)| *registered != key);
        }
    }
}

/// A lock whose data stays plain after a panic elsewhere.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn callbacks_run_once_and_guards_unregister() {
        let cancellation = Cancellation::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = |runs: &Arc<AtomicUsize>| {
            let runs = Arc::clone(runs);
            move || {
                runs.fetch_add(1, Ordering::SeqCst);
            }
        };
        let kept = cancellation.on_cancel(counted(&runs));
        let dropped = cancellation.on_cancel(counted(&runs));
        drop(dropped);
        assert_eq!(cancellation.waiting_callbacks(), 1);
        assert!(!cancellation.is_cancelled());
        cancellation.cancel(CancelReason::Peer);
        cancellation.cancel(CancelReason::Deadline);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(cancellation.reason(), Some(CancelReason::Peer));
        // Registered after the cancellation: runs at once.
        let late = cancellation.on_cancel(counted(&runs));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        drop((kept, late));
        assert_eq!(cancellation.waiting_callbacks(), 0);
    }

    #[test]
    fn a_cancel_racing_a_registration_runs_the_callback_exactly_once() {
        for _ in 0..200 {
            let cancellation = Cancellation::new();
            let runs = Arc::new(AtomicUsize::new(0));
            let other = cancellation.clone();
            let canceller = std::thread::spawn(move || other.cancel(CancelReason::CallerGone));
            let counter = Arc::clone(&runs);
            let guard = cancellation.on_cancel(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            });
            canceller.join().unwrap();
            assert_eq!(runs.load(Ordering::SeqCst), 1);
            drop(guard);
        }
    }
}
