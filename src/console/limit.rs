//! How many failed logins the console takes: [`FAILURES`] in any [`WINDOW`], for the whole
//! process (behind a proxy every browser has the same address). The token is 256 random bits,
//! so this is a brake on guessing, not the defence.
//!
//! * While the window holds [`FAILURES`] failures, no attempt is checked — the right token's
//!   neither, or the answer would tell which guess was right — and the answer is `429` with
//!   the time until the oldest failure leaves the window.
//! * A success is not counted and not delayed.
//! * Time is given (`now`), never read here: the tests move it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The failed logins taken in any [`WINDOW`].
pub(super) const FAILURES: usize = 5;
/// The window failures are counted in.
pub(super) const WINDOW: Duration = Duration::from_secs(60);

/// The failures of the last [`WINDOW`].
#[derive(Default)]
pub(super) struct Limiter {
    failures: VecDeque<Instant>,
}

impl Limiter {
    /// A login attempt at `now` whose token was `right`: `Ok(right)` (a failure counted), or
    /// `Err(wait)` while the window is full, `wait` being how long until it is not.
    pub(super) fn attempt(&mut self, now: Instant, right: bool) -> Result<bool, Duration> {
        while self
            .failures
            .front()
            .is_some_and(|&failed| now.saturating_duration_since(failed) >= WINDOW)
        {
            self.failures.pop_front();
        }
        if self.failures.len() >= FAILURES
            && let Some(&oldest) = self.failures.front()
        {
            return Err(WINDOW.saturating_sub(now.saturating_duration_since(oldest)));
        }
        if !right {
            self.failures.push_back(now);
        }
        Ok(right)
    }
}

/// `wait` as whole seconds for `Retry-After` (rounded up, at least 1).
pub(super) fn retry_after(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_failures_a_minute_then_nothing_is_checked_until_the_oldest_leaves() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let mut limiter = Limiter::default();
        for i in 0..FAILURES as u64 {
            assert_eq!(limiter.attempt(at(i * 10), false), Ok(false));
        }
        // Full: the right token is not checked either, and nothing is counted meanwhile.
        assert_eq!(limiter.attempt(at(45), true), Err(Duration::from_secs(15)));
        assert_eq!(limiter.attempt(at(50), false), Err(Duration::from_secs(10)));
        // The first failure left the window: one more attempt is taken.
        assert_eq!(limiter.attempt(at(60), true), Ok(true));
        assert_eq!(limiter.attempt(at(61), false), Ok(false));
        assert_eq!(limiter.attempt(at(62), false), Err(Duration::from_secs(8)));
    }

    #[test]
    fn successes_are_not_counted() {
        let now = Instant::now();
        let mut limiter = Limiter::default();
        for _ in 0..100 {
            assert_eq!(limiter.attempt(now, true), Ok(true));
        }
        for _ in 0..FAILURES - 1 {
            assert_eq!(limiter.attempt(now, false), Ok(false));
        }
        assert_eq!(limiter.attempt(now, true), Ok(true));
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after(Duration::from_secs(15)), 15);
        assert_eq!(retry_after(Duration::from_millis(14_001)), 15);
        assert_eq!(retry_after(Duration::ZERO), 1);
    }
}
