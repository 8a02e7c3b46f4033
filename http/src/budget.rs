//! The connection budget: how many connections may be open and waiting for
//! a request head, and which one gives way under pressure.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// Names one connection in a [`ConnectionBudget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(u64);

/// Where a connection of a [`ConnectionBudget`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Accepted, not yet read from: it cannot be shed before it had one
    /// read (its head may be waiting in the socket).
    Fresh,
    /// Waiting for a request head; the key of its place in the line.
    Waiting(u64),
    /// In a request: head received, answer not yet handed over.
    InRequest,
}

/// The limits of a [`ConnectionBudget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most open connections (at least 1).
    pub max_connections: usize,
    /// Most connections waiting for a request head before the ones that
    /// have waited [`ConnectionLimits::pressure_head_ms`] are shed (1 to
    /// `max_connections`).
    pub max_waiting: usize,
    /// Under pressure (more than `max_waiting` connections waiting, or
    /// every slot taken), how long a connection may wait for its head
    /// before it may be shed, in milliseconds: the head timeout under
    /// pressure, instead of the adapter's usual one.
    pub pressure_head_ms: u64,
}

/// How many connections an HTTP server holds, and which to close when
/// they are too many (sans-IO: the adapter opens, reads, closes and sheds
/// sockets and passes the time in milliseconds; this keeps the books).
///
/// A connection is *fresh* until the adapter first reads from it, then
/// either *in a request* (head received, answer not yet handed over) or
/// *waiting for a request head* (partway through a head, or idle between
/// keep-alive requests). Waiting connections cost the peer nothing to
/// hold, so they are the ones given up under pressure, the one that has
/// waited longest first, and only once it has waited at least
/// `pressure_head_ms`:
///
/// - more than `max_waiting` connections waiting: the excess is shed as
///   soon as it has waited `pressure_head_ms` (checked whenever a
///   connection opens, is first read, or finishes a request);
/// - `max_connections` open: a new connection is let in by shedding one
///   that has waited `pressure_head_ms`; until one has,
///   [`ConnectionBudget::room`] says when to try again (the adapter stops
///   accepting meanwhile, leaving new connections in the kernel's queue).
///
/// So connections in a request are never shed; a new connection always
/// gets its first read and `pressure_head_ms` more before it can be shed
/// (a client that sends its head at once is served even while a flood of
/// half heads is being reopened); the head timeout drops from the
/// adapter's usual one to `pressure_head_ms` under pressure; and a client
/// waits for a slot at most about `pressure_head_ms` times (1 + the
/// connections queued ahead of it / `max_connections`). The churn a
/// flood can cause is at most `max_connections` per `pressure_head_ms`.
/// nginx likewise closes its "reusable" (idle and not-yet-read)
/// connections, oldest first, when it runs out of connections.
#[derive(Clone, Debug)]
pub struct ConnectionBudget {
    limits: ConnectionLimits,
    next_id: u64,
    next_place: u64,
    /// Every open connection.
    open: BTreeMap<ConnectionId, Standing>,
    /// Connections waiting for a head, in the order they began waiting:
    /// place → (connection, when it began waiting).
    waiting: BTreeMap<u64, (ConnectionId, u64)>,
    shed: u64,
}

/// Whether a [`ConnectionBudget`] can take a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// Now.
    Now,
    /// Not before this time (ms): the longest-waiting connection may be
    /// shed then. Try again at that time, or when a connection closes.
    At(u64),
    /// Not until a connection closes or finishes a request (every open
    /// connection is fresh or in a request).
    AfterClose,
}

impl ConnectionBudget {
    /// A budget with these limits (clamped to usable values).
    pub fn new(limits: ConnectionLimits) -> Self {
        let max_connections = limits.max_connections.max(1);
        ConnectionBudget {
            limits: ConnectionLimits {
                max_connections,
                max_waiting: limits.max_waiting.clamp(1, max_connections),
                pressure_head_ms: limits.pressure_head_ms,
            },
            next_id: 0,
            next_place: 0,
            open: BTreeMap::new(),
            waiting: BTreeMap::new(),
            shed: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    /// Whether [`ConnectionBudget::open`] would take a connection at `now`.
    pub fn room(&self, now: u64) -> Room {
        if self.open.len() < self.limits.max_connections {
            return Room::Now;
        }
        match self.sheddable_at() {
            Some(at) if at <= now => Room::Now,
            Some(at) => Room::At(at),
            None => Room::AfterClose,
        }
    }

    /// Counts a newly accepted connection (fresh) at `now`, and returns its
    /// id with the connections to close (never the new one); `None` when
    /// there is no room ([`Self::room`]).
    pub fn open(&mut self, now: u64) -> Option<(ConnectionId, Vec<ConnectionId>)> {
        if self.room(now) != Room::Now {
            return None;
        }
        let id = ConnectionId(self.next_id);
        self.next_id = self.next_id.saturating_add(1);
        self.open.insert(id, Standing::Fresh);
        Some((id, self.shed_excess(now)))
    }

    /// The adapter read from fresh connection `id` at `now` and found no
    /// complete head: it waits for one from now on. Returns the
    /// connections to shed (never `id`). No effect unless `id` is fresh.
    pub fn first_read_done(&mut self, id: ConnectionId, now: u64) -> Vec<ConnectionId> {
        if self.open.get(&id) != Some(&Standing::Fresh) {
            return Vec::new();
        }
        self.wait(id, now)
    }

    /// The head of a request on `id` arrived. False when `id` is no longer
    /// counted (it was shed or closed): the adapter must not serve it.
    pub fn head_received(&mut self, id: ConnectionId) -> bool {
        match self.open.get_mut(&id) {
            None => false,
            Some(standing) => {
                if let Standing::Waiting(place) = *standing {
                    self.waiting.remove(&place);
                }
                *standing = Standing::InRequest;
                true
            }
        }
    }

    /// The answer on `id` was handed over at `now`: it waits for its next
    /// head (keep-alive). Returns the connections to shed (never `id`).
    /// No effect unless `id` is in a request.
    pub fn request_done(&mut self, id: ConnectionId, now: u64) -> Vec<ConnectionId> {
        if self.open.get(&id) != Some(&Standing::InRequest) {
            return Vec::new();
        }
        self.wait(id, now)
    }

    /// `id` closed (by either side, or after being shed); its slot is free.
    pub fn close(&mut self, id: ConnectionId) {
        if let Some(Standing::Waiting(place)) = self.open.remove(&id) {
            self.waiting.remove(&place);
        }
    }

    /// Open connections.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// Open connections waiting for a request head.
    pub fn waiting_count(&self) -> usize {
        self.waiting.len()
    }

    /// Connections shed so far.
    pub fn shed_count(&self) -> u64 {
        self.shed
    }

    /// When the longest-waiting connection may be shed.
    fn sheddable_at(&self) -> Option<u64> {
        self.waiting
            .first_key_value()
            .map(|(_, (_, since))| since.saturating_add(self.limits.pressure_head_ms))
    }

    /// Puts open connection `id` at the back of the waiting line.
    fn wait(&mut self, id: ConnectionId, now: u64) -> Vec<ConnectionId> {
        let place = self.next_place;
        self.next_place = self.next_place.saturating_add(1);
        self.open.insert(id, Standing::Waiting(place));
        self.waiting.insert(place, (id, now));
        self.shed_excess(now)
    }

    /// Sheds the longest-waiting connections, each only once it has waited
    /// `pressure_head_ms`, while either limit is exceeded.
    fn shed_excess(&mut self, now: u64) -> Vec<ConnectionId> {
        let mut shed = Vec::new();
        while self.waiting.len() > self.limits.max_waiting
            || self.open.len() > self.limits.max_connections
        {
            if self.sheddable_at().is_none_or(|at| at > now) {
                break;
            }
            let Some((_, (oldest, _))) = self.waiting.pop_first() else {
                break;
            };
            self.open.remove(&oldest);
            self.shed = self.shed.saturating_add(1);
            shed.push(oldest);
        }
        shed
    }
}
