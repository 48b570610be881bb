//! What time it is, for the scheduler: [`Clock`], with [`SystemClock`] (the wall clock, the
//! default) and [`TokioClock`] (follows tokio's clock, so a test with tokio's time paused runs
//! the scheduler in virtual time).
//!
//! The scheduler waits with tokio's timers (`tokio::time::sleep`); the clock tells it which jobs
//! are due. With [`TokioClock`] both move together: when tokio's paused clock jumps ahead to the
//! next timer, the due jobs are due.

use chrono::{DateTime, TimeDelta, Utc};

/// The current time as the scheduler sees it: when a job is due, how late a run started.
pub trait Clock: Send + Sync + 'static {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock (`Utc::now`): the scheduler's clock unless it is given another.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that follows tokio's: the wall time when it was created plus the time elapsed since
/// on tokio's clock (`tokio::time::Instant`). Under a paused runtime
/// (`#[tokio::test(start_paused = true)]`, `tokio::time::pause`) it stands still until tokio's
/// clock is advanced, by hand or by the runtime jumping to its next timer; otherwise it runs
/// like the wall clock (without its jumps). Read it on the runtime whose clock it follows
/// (outside any runtime, tokio's clock is the monotonic system clock).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    /// The wall time at `start`.
    wall: DateTime<Utc>,
    /// tokio's clock when this clock was created.
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading the wall time now, from here on moving with tokio's clock.
    pub fn new() -> Self {
        Self {
            wall: Utc::now(),
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    /// Never panics: a time beyond the representable dates is the last one.
    fn now(&self) -> DateTime<Utc> {
        TimeDelta::from_std(self.start.elapsed())
            .ok()
            .and_then(|elapsed| self.wall.checked_add_signed(elapsed))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_moves_with_tokio_time() {
        let clock = TokioClock::new();
        let start = clock.now();
        assert_eq!(clock.now(), start, "paused: it stands still");
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(clock.now() - start, TimeDelta::milliseconds(1500));
        // Nothing else to do: the runtime jumps to the timer.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(clock.now() - start, TimeDelta::milliseconds(61_500));
        let wall = SystemClock.now();
        assert!(
            (wall - start).abs() < TimeDelta::seconds(10),
            "{wall} vs {start}"
        );
    }
}
