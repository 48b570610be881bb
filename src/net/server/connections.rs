//! The open connections of one listener, and what happens at its cap.
//!
//! Each accepted connection holds a [`Slot`] until it ends. A listener never holds more than
//! its cap: at the cap, a new connection is always taken, and the connection that has waited
//! longest *without a request in flight* is closed for it — one still sending its request
//! headers (a slow-loris connection is exactly that) or idling between requests. Only when
//! every connection has a request in flight is the one whose request started first closed
//! (a request is bounded by `server::REQUEST_LIMIT`, so that is the slowest one).
//!
//! Why not let a new connection wait for a free slot: an attacker who keeps the cap full would
//! then starve every legitimate client. Closing the oldest waiting connection instead means a
//! newcomer is closed only after `cap` newer connections arrived before it finished sending its
//! headers, which a real client does in one round trip; a held connection costs an attacker its
//! place as soon as anyone else arrives.
//!
//! The cap is strict: each connection holds one of `cap` permits until its socket is closed, so
//! a newcomer at the cap waits for the one closed for it to let go of its descriptor (a moment:
//! nothing it does is waited for), and a listener never holds more than `cap + 1` sockets.
//!
//! The first time the cap is reached one warning names it (`listen.full`); the episode ends,
//! with one line counting the connections closed for newer ones, when half the cap is free
//! again. The map is bounded by the cap; its lock is never held across an `.await`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The connections of one listener.
pub(super) struct Connections {
    /// The listener's name in the log (`http`, `console`).
    name: &'static str,
    cap: usize,
    /// The listener's clock: a tick per change of a connection's activity, so their order is
    /// exact.
    clock: Arc<AtomicU64>,
    /// One per connection whose socket is open (closed ones included until they let go).
    permits: Arc<Semaphore>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    open: HashMap<u64, Open>,
    /// In an episode at the cap (announced once).
    full: bool,
    /// Connections closed for newer ones in this episode.
    closed: u64,
}

struct Open {
    activity: Arc<Activity>,
    close: CancellationToken,
}

/// What a connection is doing: requests in flight, and since when it does what it does.
pub(super) struct Activity {
    clock: Arc<AtomicU64>,
    in_flight: AtomicUsize,
    /// The listener's tick when the connection was accepted, its last response was sent, or its
    /// current request began.
    since: AtomicU64,
}

impl Activity {
    fn new(clock: Arc<AtomicU64>) -> Activity {
        let activity = Activity {
            clock,
            in_flight: AtomicUsize::new(0),
            since: AtomicU64::new(0),
        };
        activity.touch();
        activity
    }

    fn touch(&self) {
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        self.since.store(tick, Ordering::Relaxed);
    }

    /// A request's headers were read: in flight until the returned guard is dropped (with its
    /// response body, once sent).
    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.touch();
        InFlight(self.clone())
    }

    /// The order in which connections are closed at the cap: none in flight first, then the
    /// longest in their state.
    fn eviction_key(&self) -> (bool, u64) {
        (
            self.in_flight.load(Ordering::Relaxed) > 0,
            self.since.load(Ordering::Relaxed),
        )
    }
}

/// A request in flight on its connection.
pub(super) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One admitted connection's place: given back when dropped.
pub(super) struct Slot {
    id: u64,
    connections: Arc<Connections>,
    pub(super) activity: Arc<Activity>,
    close: CancellationToken,
    /// Given back after the connection (its socket) is dropped: a slot is dropped last.
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    /// Resolves when the connection is closed to make room for a newer one.
    pub(super) async fn evicted(&self) {
        self.close.cancelled().await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.release(self.id);
    }
}

impl Connections {
    pub(super) fn new(name: &'static str, cap: usize) -> Arc<Connections> {
        let cap = cap.max(1);
        Arc::new(Connections {
            name,
            cap,
            clock: Arc::default(),
            permits: Arc::new(Semaphore::new(cap)),
            inner: Mutex::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a newly accepted connection; at the cap, first closes the connection that makes
    /// room for it (see the module's doc) and waits until its socket is closed.
    pub(super) async fn admit(self: &Arc<Self>) -> Slot {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.make_room();
                let closing = self.permits.clone().acquire_owned();
                closing.await.expect("the semaphore is never closed")
            }
        };
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let activity = Arc::new(Activity::new(self.clock.clone()));
        let close = CancellationToken::new();
        let open = Open {
            activity: activity.clone(),
            close: close.clone(),
        };
        inner.open.insert(id, open);
        Slot {
            id,
            connections: self.clone(),
            activity,
            close,
            _permit: permit,
        }
    }

    /// At the cap: closes the oldest connection without a request in flight, else the one
    /// whose request began first (none when every one is closing already).
    fn make_room(&self) {
        let mut inner = self.lock();
        if !inner.full {
            inner.full = true;
            tracing::warn!(
                listener = self.name,
                cap = self.cap,
                "listen.full: at the connection cap; each new connection closes the oldest one \
                 with no request in flight (a request's headers not yet sent)"
            );
        }
        let oldest = inner
            .open
            .iter()
            .min_by_key(|(id, open)| (open.activity.eviction_key(), **id))
            .map(|(id, _)| *id);
        if let Some(open) = oldest.and_then(|id| inner.open.remove(&id)) {
            open.close.cancel();
            inner.closed += 1;
        }
    }

    fn release(&self, id: u64) {
        let mut inner = self.lock();
        inner.open.remove(&id);
        if inner.full && inner.open.len() <= self.cap / 2 {
            inner.full = false;
            tracing::info!(
                listener = self.name,
                cap = self.cap,
                closed = inner.closed,
                "listen.full ended: connections closed for newer ones"
            );
            inner.closed = 0;
        }
    }

    /// Connections open now.
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        self.lock().open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection's stand-in: holds its slot until it is closed for a newer one.
    struct Held {
        activity: Arc<Activity>,
        close: CancellationToken,
    }

    impl Held {
        fn evicted(&self) -> bool {
            self.close.is_cancelled()
        }
    }

    async fn admit(connections: &Arc<Connections>) -> Held {
        let slot = connections.admit().await;
        let held = Held {
            activity: slot.activity.clone(),
            close: slot.close.clone(),
        };
        tokio::spawn(async move { slot.evicted().await });
        held
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_connection_without_a_request_gives_way() {
        let connections = Connections::new("test", 3);
        let a = admit(&connections).await;
        let b = admit(&connections).await;
        let c = admit(&connections).await;
        // `a` is sending a request (its headers were read): it is not the one to go.
        let in_flight = a.activity.begin();
        let d = admit(&connections).await;
        assert!(!a.evicted() && b.evicted() && !c.evicted());
        assert_eq!(connections.open(), 3);
        // The next oldest without a request: `c`, then `d`.
        let e = admit(&connections).await;
        assert!(c.evicted() && !d.evicted());
        let f = admit(&connections).await;
        assert!(d.evicted() && !a.evicted());
        // A finished request makes `a` the newest idle one: `e` goes before it.
        drop(in_flight);
        let _g = admit(&connections).await;
        assert!(e.evicted() && !a.evicted() && !f.evicted());
        assert_eq!(connections.open(), 3);
    }

    #[tokio::test]
    async fn when_every_connection_has_a_request_the_oldest_request_gives_way() {
        let connections = Connections::new("test", 2);
        let a = admit(&connections).await;
        let b = admit(&connections).await;
        let _ra = a.activity.begin();
        let _rb = b.activity.begin();
        let _c = admit(&connections).await;
        assert!(a.evicted() && !b.evicted());
    }

    #[tokio::test]
    async fn a_newcomer_waits_until_the_connection_closed_for_it_lets_go() {
        let connections = Connections::new("test", 1);
        // A slot held here stands for a connection slow to close its socket.
        let a = connections.admit().await;
        let newcomer = tokio::spawn({
            let connections = connections.clone();
            async move { connections.admit().await.id }
        });
        a.evicted().await;
        assert!(
            !newcomer.is_finished(),
            "the cap holds until the socket is closed"
        );
        drop(a);
        let id = tokio::time::timeout(std::time::Duration::from_secs(5), newcomer);
        assert_eq!(id.await.unwrap().unwrap(), 1);
    }

    #[tokio::test]
    async fn a_slot_is_given_back_when_dropped() {
        let connections = Connections::new("test", 2);
        let a = connections.admit().await;
        let b = admit(&connections).await;
        drop(a);
        assert_eq!(connections.open(), 1);
        let _c = admit(&connections).await;
        assert!(!b.evicted());
        assert_eq!(connections.open(), 2);
    }
}
