//! [`CommandLimits`]: the process-wide bounds on `bash` commands — how many run at once
//! (`BUB_MAX_CONCURRENT_COMMANDS`) and the longest timeout one may ask for
//! (`BUB_BASH_MAX_TIMEOUT_SECONDS`).
//!
//! Invariants: a command holds a slot (a semaphore permit) from before its process starts until
//! its call returns or is dropped — the process group is killed by then, on timeout and on
//! cancellation alike; a call waiting for a slot gives up its place in the queue when it is
//! dropped (a cancelled turn), so waiting never outlives the turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};

use crate::config::Settings;
use crate::tools::ToolError;

/// The bounds on the process's `bash` commands. One per process ([`crate::tools::ProcessCtx`]),
/// shared by every session.
#[derive(Debug)]
pub struct CommandLimits {
    slots: Arc<Semaphore>,
    capacity: usize,
    waiting: AtomicUsize,
    max_timeout_seconds: u64,
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

    /// Waits for a free slot; the command may run while the permit lives. Dropping the returned
    /// future gives up the place in the queue.
    pub(crate) async fn slot(&self) -> Result<SemaphorePermit<'_>, ToolError> {
        if let Ok(permit) = self.slots.try_acquire() {
            return Ok(permit);
        }
        tracing::info!(
            running = self.running(),
            waiting = self.waiting() + 1,
            "bash.wait: every command slot is taken"
        );
        let _waiting = Waiting::enter(&self.waiting);
        self.slots
            .acquire()
            .await
            .map_err(|_| ToolError::new("the command slots are closed"))
    }

    /// A free slot now, held by its owner (a background command) until dropped; `None` when
    /// every slot is taken (a background command does not wait).
    pub(crate) fn try_slot_owned(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
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
        let first = limits.slot();
        let Poll::Ready(Ok(held)) = poll_once(pin!(first)) else {
            panic!("a free slot is granted at once");
        };
        assert_eq!((limits.running(), limits.waiting()), (1, 0));
        {
            let mut second = pin!(limits.slot());
            assert!(poll_once(second.as_mut()).is_pending());
            assert_eq!((limits.running(), limits.waiting()), (1, 1));
        } // dropped while waiting: a cancelled turn
        assert_eq!(limits.waiting(), 0);
        let mut third = pin!(limits.slot());
        assert!(poll_once(third.as_mut()).is_pending());
        drop(held);
        assert!(
            matches!(poll_once(third.as_mut()), Poll::Ready(Ok(_))),
            "the slot went to the next waiter, not the dropped one"
        );
        assert_eq!(limits.waiting(), 0);
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
