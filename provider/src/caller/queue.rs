//! The one queue the child-process loop needs, whatever the runtime: many
//! producers that never block, one consumer that waits either as a future
//! (an async runtime's task, or a pump under `block_on` on a thread of its
//! own) or on this thread until a deadline (the blocking runtime's loop).
//!
//! It carries the callers' queries and the pumps' output to the loop, the
//! loop's requests to the stdin pump, the output credits back to the stdout
//! pump, and each query's one outcome back to its caller, so that no
//! adapter needs a channel type of its own and the loop can be written once.
//!
//! Limits: unbounded (the credits bound the output; the callers' queries
//! are what they asked); one consumer at a time (a second one waiting as a
//! future takes the first one's wake-up). A lock is held only to push or
//! pop one item.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// A queue handle; clones share the queue.
pub(crate) struct Queue<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Queue {
            shared: Arc::clone(&self.shared),
        }
    }
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

struct State<T> {
    items: VecDeque<T>,
    /// No more items are accepted; what is queued can still be popped.
    closed: bool,
    /// The consumer waiting as a future.
    waker: Option<Waker>,
}

/// What a wait on this thread came to.
pub(crate) enum Popped<T> {
    /// The next item.
    Item(T),
    /// The deadline passed first.
    Timeout,
    /// The queue is closed and empty.
    Closed,
}

impl<T> Queue<T> {
    /// An empty, open queue.
    pub(crate) fn new() -> Self {
        Queue {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    items: VecDeque::new(),
                    closed: false,
                    waker: None,
                }),
                ready: Condvar::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` and wakes the consumer; gives it back when the queue
    /// is closed. Never blocks.
    pub(crate) fn push(&self, item: T) -> Result<(), T> {
        let waker = {
            let mut state = self.state();
            if state.closed {
                return Err(item);
            }
            state.items.push_back(item);
            state.waker.take()
        };
        self.shared.ready.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Accepts no more items (what is queued can still be popped) and
    /// wakes the consumer.
    pub(crate) fn close(&self) {
        drop(self.shut(false));
    }

    /// Closes the queue and drops what it holds.
    pub(crate) fn close_and_clear(&self) {
        drop(self.shut(true));
    }

    /// Closes the queue, takes its items if `clear` (to drop them outside
    /// the lock) and wakes the consumer.
    fn shut(&self, clear: bool) -> VecDeque<T> {
        let (items, waker) = {
            let mut state = self.state();
            state.closed = true;
            let items = if clear {
                std::mem::take(&mut state.items)
            } else {
                VecDeque::new()
            };
            (items, state.waker.take())
        };
        self.shared.ready.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
        items
    }

    /// True once the queue is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.state().closed
    }

    /// The next item; `None` once the queue is closed and empty. Pending
    /// registers the task to wake.
    pub(crate) fn poll_pop(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = self.state();
        if let Some(item) = state.items.pop_front() {
            return Poll::Ready(Some(item));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        match &mut state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// The next item, as a future (see [`Queue::poll_pop`]).
    pub(crate) fn pop(&self) -> impl Future<Output = Option<T>> + '_ {
        futures_lite::future::poll_fn(move |cx| self.poll_pop(cx))
    }

    /// The next item, waiting on this thread until `deadline` (forever
    /// without one).
    pub(crate) fn pop_blocking(&self, deadline: Option<Instant>) -> Popped<T> {
        let mut state = self.state();
        loop {
            if let Some(item) = state.items.pop_front() {
                return Popped::Item(item);
            }
            if state.closed {
                return Popped::Closed;
            }
            state = match deadline {
                None => self
                    .shared
                    .ready
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Popped::Timeout;
                    }
                    self.shared
                        .ready
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn items_come_in_order_then_closed() {
        let queue = Queue::new();
        assert!(queue.push(1).is_ok());
        assert!(queue.push(2).is_ok());
        queue.close();
        assert_eq!(queue.push(3), Err(3));
        assert!(matches!(queue.pop_blocking(None), Popped::Item(1)));
        assert_eq!(futures_lite::future::block_on(queue.pop()), Some(2));
        assert!(matches!(queue.pop_blocking(None), Popped::Closed));
        assert_eq!(futures_lite::future::block_on(queue.pop()), None);
    }

    #[test]
    fn a_wait_ends_at_its_deadline_or_with_an_item_from_another_thread() {
        let queue: Queue<u8> = Queue::new();
        let started = Instant::now();
        let deadline = started + Duration::from_millis(30);
        assert!(matches!(
            queue.pop_blocking(Some(deadline)),
            Popped::Timeout
        ));
        assert!(started.elapsed() >= Duration::from_millis(30));
        let producer = queue.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            producer.push(7).is_ok()
        });
        assert_eq!(futures_lite::future::block_on(queue.pop()), Some(7));
        assert!(thread.join().unwrap());
        let closer = queue.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            closer.close_and_clear();
        });
        assert!(matches!(queue.pop_blocking(None), Popped::Closed));
        thread.join().unwrap();
    }
}
