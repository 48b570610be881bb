//! [`CommandLimits`]: the process-wide bounds on `bash` commands — how many run at once
//! (`BUB_MAX_CONCURRENT_COMMANDS`), how many of those guests may hold, and the longest timeout
//! one may ask for (`BUB_BASH_MAX_TIMEOUT_SECONDS`).
//!
//! Invariants: a command holds a slot (a semaphore permit) from before its process starts until
//! its call returns or is dropped — the command has ended by then, on timeout and on
//! cancellation alike; a call waiting for a slot gives up its place in the queue when it is
//! dropped (a cancelled turn), so waiting never outlives the turn. [`owners_only`] of the
//! slots are never a guest's: however many commands guests start, an owner's `bash` gets a slot
//! once the owner's own commands leave one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::access::Role;
use crate::config::Settings;
use crate::tools::ToolError;

/// The bounds on the process's `bash` commands. One per process ([`crate::tools::ProcessCtx`]),
/// shared by every session.
#[derive(Debug)]
pub struct CommandLimits {
    slots: Arc<Semaphore>,
    /// The share of `slots` guests' commands may hold.
    guest_slots: Arc<Semaphore>,
    capacity: usize,
    waiting: AtomicUsize,
    max_timeout_seconds: u64,
}

/// A running command's slot (and its guest share), given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _slot: OwnedSemaphorePermit,
    _guest: Option<OwnedSemaphorePermit>,
}

/// The slots of `capacity` that only owners' commands take: a quarter (at least one) once there
/// are two or more.
pub(crate) fn owners_only(capacity: usize) -> usize {
    match capacity {
        0 | 1 => 0,
        n => (n / 4).max(1),
    }
}

/// A requested `timeout_seconds` after [`CommandLimits::timeout`]: the value to use and, when it
/// was lowered, a note for the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Timeout {
    pub seconds: i64,
    pub note: Option<String>,
}

impl CommandLimits {
    /// At most `max_concurrent` commands at once (at least one), timeouts of at most
    /// `max_timeout_seconds`.
    pub(crate) fn new(max_concurrent: usize, max_timeout_seconds: u64) -> Self {
        let capacity = max_concurrent.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            slots: Arc::new(Semaphore::new(capacity)),
            guest_slots: Arc::new(Semaphore::new(capacity - owners_only(capacity))),
            capacity,
            waiting: AtomicUsize::new(0),
            max_timeout_seconds: max_timeout_seconds.max(1),
        }
    }

    /// The limits `BUB_MAX_CONCURRENT_COMMANDS` and `BUB_BASH_MAX_TIMEOUT_SECONDS` set.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        Self::new(
            settings.max_concurrent_commands as usize,
            settings.bash_max_timeout.as_secs(),
        )
    }

    /// Waits for a free slot for a command of `role`; the command may run while the slot lives.
    /// Dropping the returned future gives up the place in the queue.
    pub(crate) async fn slot(&self, role: Role) -> Result<Slot, ToolError> {
        if let Some(slot) = self.try_slot(role) {
            return Ok(slot);
        }
        tracing::info!(
            running = self.running(),
            waiting = self.waiting() + 1,
            %role,
            "bash.wait: every command slot is taken"
        );
        let _waiting = Waiting::enter(&self.waiting);
        let closed = |_| ToolError::new("the command slots are closed");
        // A guest's share first, then a slot: owners never wait behind a guest's share.
        let guest = match role {
            Role::Owner => None,
            Role::Guest => Some(
                self.guest_slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(closed)?,
            ),
        };
        let slot = self.slots.clone().acquire_owned().await.map_err(closed)?;
        Ok(Slot {
            _slot: slot,
            _guest: guest,
        })
    }

    /// A free slot for a command of `role` now (a background command does not wait); `None`
    /// when there is none.
    pub(crate) fn try_slot(&self, role: Role) -> Option<Slot> {
        let guest = match role {
            Role::Owner => None,
            Role::Guest => Some(self.guest_slots.clone().try_acquire_owned().ok()?),
        };
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        Some(Slot {
            _slot: slot,
            _guest: guest,
        })
    }

    /// Commands holding a slot now.
    pub fn running(&self) -> usize {
        self.capacity - self.slots.available_permits()
    }

    /// Calls waiting for a slot now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// `requested` lowered to the maximum, with a note saying so. Values below 1 are left for
    /// the caller to refuse.
    pub(crate) fn timeout(&self, requested: i64) -> Timeout {
        let max = i64::try_from(self.max_timeout_seconds).unwrap_or(i64::MAX);
        if requested <= max {
            return Timeout {
                seconds: requested,
                note: None,
            };
        }
        Timeout {
            seconds: max,
            note: Some(format!(
                "[note: timeout_seconds={requested} is over the maximum of {max} \
                 (BUB_BASH_MAX_TIMEOUT_SECONDS); {max} was used]"
            )),
        }
    }
}

/// Counts one waiting call while it lives (also when its future is dropped mid-wait).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    /// Polls `fut` once without a runtime waker.
    fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        fut.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_dropped_wait_gives_up_its_place() {
        let limits = CommandLimits::new(1, 60);
        let first = limits.slot(Role::Owner);
        let Poll::Ready(Ok(held)) = poll_once(pin!(first)) else {
            panic!("a free slot is granted at once");
        };
        assert_eq!((limits.running(), limits.waiting()), (1, 0));
        {
            let mut second = pin!(limits.slot(Role::Owner));
            assert!(poll_once(second.as_mut()).is_pending());
            assert_eq!((limits.running(), limits.waiting()), (1, 1));
        } // dropped while waiting: a cancelled turn
        assert_eq!(limits.waiting(), 0);
        let mut third = pin!(limits.slot(Role::Guest));
        assert!(poll_once(third.as_mut()).is_pending());
        drop(held);
        assert!(
            matches!(poll_once(third.as_mut()), Poll::Ready(Ok(_))),
            "the slot went to the next waiter, not the dropped one"
        );
        assert_eq!(limits.waiting(), 0);
    }

    #[test]
    fn guests_never_take_the_owners_slots() {
        assert_eq!(
            [1, 2, 3, 4, 8, 9, 1024].map(owners_only),
            [0, 1, 1, 1, 2, 2, 256]
        );
        let limits = CommandLimits::new(8, 60);
        let guests: Vec<Slot> = std::iter::from_fn(|| limits.try_slot(Role::Guest)).collect();
        assert_eq!(guests.len(), 6, "a guest's share is 6 of 8");
        let mut waiting = pin!(limits.slot(Role::Guest));
        assert!(poll_once(waiting.as_mut()).is_pending(), "a guest waits");
        let owners: Vec<Slot> = std::iter::from_fn(|| limits.try_slot(Role::Owner)).collect();
        assert_eq!(owners.len(), 2, "the owners' two are free");
        assert_eq!(limits.running(), 8);
        drop(owners);
        assert!(
            poll_once(waiting.as_mut()).is_pending(),
            "freed owners' slots do not go to a guest over its share"
        );
        drop(guests);
        assert!(matches!(poll_once(waiting.as_mut()), Poll::Ready(Ok(_))));
    }

    #[test]
    fn timeouts_over_the_maximum_are_lowered_with_a_note() {
        let limits = CommandLimits::new(8, 3_600);
        assert_eq!(limits.timeout(30).seconds, 30);
        assert_eq!(limits.timeout(3_600).note, None);
        let t = limits.timeout(7_200);
        assert_eq!(t.seconds, 3_600);
        assert_eq!(
            t.note.as_deref(),
            Some(
                "[note: timeout_seconds=7200 is over the maximum of 3600 \
                 (BUB_BASH_MAX_TIMEOUT_SECONDS); 3600 was used]"
            )
        );
        assert_eq!(limits.timeout(0).seconds, 0, "left for run_bash to refuse");
    }
}
