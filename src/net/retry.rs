//! One retry policy for every HTTP client (the model, Telegram, Discord, transcription): which
//! failures are tried again, how long to wait before the next attempt, and when to give up.
//!
//! * The caller classifies each failed attempt as a [`Failure`]: [`Failure::After`] when the
//!   server asked for a wait (a 429's `retry_after`, already checked by
//!   [`crate::time::server_wait`]: a longer wait is a [`Failure::Final`] error), a
//!   [`Failure::Transient`] one (a 5xx answer, a connection error, a timeout), or a
//!   [`Failure::Final`] one (any other 4xx, a wait too long, a stream that already showed text).
//! * A transient failure waits `base × 2^n × U(0.5, 1.5)`, capped at `max` (`n`: the attempts
//!   that failed before it); a server's wait is honoured as asked, never over
//!   [`MAX_SERVER_WAIT`].
//! * A [`RetryPolicy`] stops after `attempts` attempts, or when the next attempt would start
//!   `budget` or more after the first one; the last error is then returned as it is.
//!
//! Each client keeps its own policy as configuration ([`SENDS`] for the chat platforms' sends,
//! [`TRANSCRIPTION`], the model client's `max_retries`); [`retry`] is the only loop. Waits run
//! on tokio's clock, so tests pause it.

use std::time::Duration;

use tokio::time::Instant;

use crate::time::MAX_SERVER_WAIT;

/// How often and how long a request is tried again, as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1: never retried).
    pub attempts: u32,
    /// No attempt starts this long or longer after the first one.
    pub budget: Duration,
    /// The wait after the first transient failure (doubled after each further one).
    pub base: Duration,
    /// The longest wait after a transient failure.
    pub max: Duration,
}

/// A chat platform's send (Telegram, Discord): retried for up to 2 minutes, waiting 1 s,
/// doubling to 15 s, so an outage shorter than that delays the answer instead of losing it.
pub(crate) const SENDS: RetryPolicy = RetryPolicy::budget(
    Duration::from_secs(120),
    Duration::from_secs(1),
    Duration::from_secs(15),
);

/// Speech transcription, which a turn waits for: three attempts, waiting 1 s, then about 2 s.
pub(crate) const TRANSCRIPTION: RetryPolicy =
    RetryPolicy::attempts(3, Duration::from_secs(1), Duration::from_secs(15));

impl RetryPolicy {
    /// One attempt, never retried.
    #[cfg_attr(not(feature = "discord"), allow(dead_code))]
    pub(crate) const ONCE: RetryPolicy = RetryPolicy::attempts(1, Duration::ZERO, Duration::ZERO);

    /// At most `attempts` attempts in all, however long they take.
    pub const fn attempts(attempts: u32, base: Duration, max: Duration) -> Self {
        Self {
            attempts,
            budget: Duration::MAX,
            base,
            max,
        }
    }

    /// As many attempts as start within `budget` of the first one.
    pub const fn budget(budget: Duration, base: Duration, max: Duration) -> Self {
        Self {
            attempts: u32::MAX,
            budget,
            base,
            max,
        }
    }

    /// This policy with another budget (tests shorten a client's).
    pub const fn within(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// The wait after a transient failure when `failed` attempts failed before it: `base ×
    /// 2^failed`, jittered by ×0.5 to ×1.5, at most `max`.
    pub fn backoff(&self, failed: u32) -> Duration {
        let factor = 2f64.powi(failed.min(30) as i32) * (0.5 + fastrand::f64());
        crate::time::secs(self.base.as_secs_f64() * factor).min(self.max)
    }
}

/// Why one attempt failed, as far as retrying goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure<E> {
    /// The server asked to wait this long first (a 429's `retry_after`, within
    /// [`MAX_SERVER_WAIT`]).
    After(E, Duration),
    /// Worth another attempt after the backoff: a 5xx answer, a connection error, a timeout.
    Transient(E),
    /// Not retried: the request's own fault, or a wait the server asks for that is too long.
    Final(E),
}

/// Runs `attempt(n)` (`n`: 1 for the first attempt) until it succeeds, fails for good, or
/// `policy` gives up; returns its value or the last error. `on_retry(error, failed_attempts,
/// wait)` is called before each wait (callers log there, with their own context).
///
/// `attempt` is a closure returning a future rather than an async closure: the futures of
/// async closures are not known to be `Send` for every lifetime, which spawned tasks need.
pub async fn retry<T, E, F, Fut>(
    policy: &RetryPolicy,
    mut attempt: F,
    mut on_retry: impl FnMut(&E, u32, Duration),
) -> Result<T, E>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, Failure<E>>>,
{
    let started = Instant::now();
    let mut failed = 0u32;
    loop {
        let (error, wait) = match attempt(failed.saturating_add(1)).await {
            Ok(value) => return Ok(value),
            Err(Failure::Final(error)) => return Err(error),
            Err(Failure::After(error, wait)) => (error, wait.min(MAX_SERVER_WAIT)),
            Err(Failure::Transient(error)) => (error, policy.backoff(failed)),
        };
        failed = failed.saturating_add(1);
        if failed >= policy.attempts || started.elapsed().saturating_add(wait) >= policy.budget {
            return Err(error);
        }
        on_retry(&error, failed, wait);
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// Runs `retry` over `script` (one outcome per attempt, then success); returns the result,
    /// the attempts made and the time they took on the paused clock.
    async fn run(
        policy: RetryPolicy,
        script: Vec<Failure<&'static str>>,
    ) -> (Result<u32, &'static str>, u32, Duration) {
        let started = Instant::now();
        let mut script = script.into_iter();
        let mut made = 0;
        let result = retry(
            &policy,
            |n| {
                made = n;
                std::future::ready(script.next().map_or(Ok(n), Err))
            },
            |_, _, _| {},
        )
        .await;
        (result, made, started.elapsed())
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let policy = RetryPolicy::attempts(3, Duration::from_millis(100), Duration::from_secs(60));
        for _ in 0..50 {
            let first = policy.backoff(0).as_secs_f64();
            let third = policy.backoff(2).as_secs_f64();
            assert!((0.05..=0.15).contains(&first), "{first}");
            assert!((0.2..=0.6).contains(&third), "{third}");
        }
        assert_eq!(policy.backoff(40), Duration::from_secs(60));
        assert_eq!(SENDS.backoff(10), Duration::from_secs(15));
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_is_retried_after_the_backoff() {
        let script = vec![Failure::Transient("502"), Failure::Transient("reset")];
        let (result, made, took) = run(SENDS, script).await;
        assert_eq!((result, made), (Ok(3), 3));
        // 1 s then 2 s, each ×0.5 to ×1.5.
        assert!((1500..=4500).contains(&took.as_millis()), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_wait_is_honoured_and_never_over_the_maximum() {
        let asked = Duration::from_millis(2500);
        let (result, _, took) = run(SENDS, vec![Failure::After("429", asked)]).await;
        assert_eq!((result, took), (Ok(2), asked));
        let policy = RetryPolicy::attempts(2, SECOND, SECOND);
        let too_long = Duration::from_secs(3600);
        let (result, _, took) = run(policy, vec![Failure::After("429", too_long)]).await;
        assert_eq!((result, took), (Ok(2), MAX_SERVER_WAIT));
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_failure_is_not_retried() {
        let script = vec![Failure::Transient("502"), Failure::Final("403")];
        let (result, made, _) = run(SENDS, script).await;
        assert_eq!((result, made), (Err("403"), 2));
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_bound_a_policy() {
        let policy = RetryPolicy::attempts(3, SECOND, SECOND);
        let (result, made, _) = run(policy, vec![Failure::Transient("500"); 10]).await;
        assert_eq!((result, made), (Err("500"), 3));
        let (result, made, took) = run(RetryPolicy::ONCE, vec![Failure::Transient("500")]).await;
        assert_eq!((result, made, took), (Err("500"), 1, Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn a_persistent_outage_fails_within_the_budget() {
        let (result, made, took) = run(SENDS, vec![Failure::Transient("503"); 100]).await;
        assert_eq!(result, Err("503"));
        assert!(took < SENDS.budget, "{took:?}");
        // Waits of about 1, 2, 4, 8, then 15 s each: at least 8 attempts fit in 2 minutes.
        assert!((8..30).contains(&made), "{made} attempts in {took:?}");
        // A server wait counts against the budget too.
        let waits = vec![Failure::After("429", MAX_SERVER_WAIT); 10];
        let (result, made, took) = run(SENDS, waits).await;
        assert_eq!((result, made, took), (Err("429"), 2, MAX_SERVER_WAIT));
        let shortened = SENDS.within(Duration::from_secs(3));
        let (_, _, took) = run(shortened, vec![Failure::Transient("503"); 100]).await;
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
}
