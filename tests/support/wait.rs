//! Bounded waits: no test waits forever, and none sleeps in the hope that something happened
//! meanwhile. Prefer an event (a fake's `wait_for_*`, a channel, a log line); poll with
//! [`wait_for`] / [`wait_until`] only what has no event to wait on (files, `/proc`).

use std::future::Future;
use std::time::{Duration, Instant};

/// The bound on one step of a test: a process answering, a message arriving, a tool call.
/// Generous: the other test modules of the one test binary load the machine meanwhile.
pub const WAIT: Duration = Duration::from_secs(20);

/// How often [`wait_for`] and [`wait_for_blocking`] look at their condition again.
const POLL: Duration = Duration::from_millis(20);

/// Runs `fut`, failing the test if it takes longer than [`WAIT`].
pub async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("a test step did not finish within {WAIT:?}"))
}

/// Polls `check` until it returns `Some` and returns that; fails the test, naming `what`,
/// after `within`.
pub async fn wait_for<T>(within: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `check` until it holds; fails the test, naming `what`, after `within`.
pub async fn wait_until(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    wait_for(within, what, || check().then_some(())).await
}

/// [`wait_for`] for tests without a runtime (the thread sleeps between polls): `None` once
/// `within` has passed, for the caller to fail with what it knows then.
pub fn wait_for_blocking<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}
