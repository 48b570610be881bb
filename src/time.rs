//! Duration and deadline arithmetic that never panics, and the one rule for waits a server asks
//! for.
//!
//! `Duration::from_secs_f64` panics on a negative, NaN or too-large value, and `Instant +
//! Duration` panics on overflow. Durations built from settings or from other programs go
//! through [`secs`] (saturating) and deadlines through [`deadline`] (a far-future instant when
//! the sum does not fit).
//!
//! A server's rate-limit wait (Discord's and Telegram's `retry_after`, the model provider's
//! `Retry-After`) is honoured up to [`MAX_SERVER_WAIT`]; a longer one is not waited for: the
//! send or call fails at once with [`WaitTooLong`] ("rate limited: the server asks to wait N s").

use std::time::Duration;

use tokio::time::Instant;

/// The longest wait a server may ask for before a retry; a longer one fails the call instead.
pub(crate) const MAX_SERVER_WAIT: Duration = Duration::from_secs(60);

/// Thirty years: the deadline used when `now + wait` does not fit in an [`Instant`].
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 86_400);

/// `seconds` as a duration, saturating: NaN and negative values are zero, values too large for
/// a [`Duration`] (and `+∞`) are [`Duration::MAX`].
pub(crate) fn secs(seconds: f64) -> Duration {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) => d,
        Err(_) if seconds > 0.0 => Duration::MAX,
        Err(_) => Duration::ZERO,
    }
}

/// `now + wait`, or a far-future instant (thirty years on) when the sum does not fit.
pub(crate) fn deadline(now: Instant, wait: Duration) -> Instant {
    now.checked_add(wait)
        .or_else(|| now.checked_add(FAR_FUTURE))
        // Unreachable on real clocks (an Instant is seconds since boot in 64 bits); `now` at
        // least never panics.
        .unwrap_or(now)
}

/// A server asked to wait longer than [`MAX_SERVER_WAIT`] before retrying.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "rate limited: the server asks to wait {} s, longer than the {} s Bub waits; try again later",
    show_secs(*.seconds),
    MAX_SERVER_WAIT.as_secs()
)]
pub struct WaitTooLong {
    pub seconds: f64,
}

/// How long to wait when a server asks for `seconds`: the wait itself up to
/// [`MAX_SERVER_WAIT`], else [`WaitTooLong`]. NaN and negative values (not a wait) are zero;
/// callers that have a default for them apply it first.
pub(crate) fn server_wait(seconds: f64) -> Result<Duration, WaitTooLong> {
    if seconds > MAX_SERVER_WAIT.as_secs_f64() {
        return Err(WaitTooLong { seconds });
    }
    Ok(secs(seconds))
}

/// Seconds for a message: whole numbers as such, fractions to three places, huge values in
/// scientific notation (never hundreds of digits).
fn show_secs(seconds: f64) -> String {
    if !seconds.is_finite() || seconds.abs() >= 1e15 {
        format!("{seconds:e}")
    } else if seconds.fract() == 0.0 {
        format!("{seconds:.0}")
    } else {
        format!("{seconds:.3}")
    }
}

/// `3d 4h`, `2h 5m`, `4m 10s`, `12s`: the two largest units.
pub(crate) fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, minutes, seconds) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s"),
        (0, 0, _) => format!("{minutes}m {seconds}s"),
        (0, _, _) => format!("{hours}h {minutes}m"),
        _ => format!("{days}d {hours}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secs_saturates_instead_of_panicking() {
        assert_eq!(secs(1.5), Duration::from_millis(1500));
        assert_eq!(secs(0.0), Duration::ZERO);
        assert_eq!(secs(-1.0), Duration::ZERO);
        assert_eq!(secs(f64::NAN), Duration::ZERO);
        assert_eq!(secs(f64::NEG_INFINITY), Duration::ZERO);
        assert_eq!(secs(1e20), Duration::MAX);
        assert_eq!(secs(f64::INFINITY), Duration::MAX);
    }

    #[test]
    fn deadlines_never_overflow() {
        let now = Instant::now();
        assert_eq!(
            deadline(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let far = deadline(now, Duration::MAX);
        assert_eq!(far, now + FAR_FUTURE);
        assert_eq!(deadline(now, secs(1e19)), far);
        assert!(
            now.checked_add(secs(1e19)).is_none(),
            "the case being tested"
        );
    }

    #[test]
    fn server_waits_up_to_the_maximum_else_fail() {
        assert_eq!(server_wait(0.5), Ok(Duration::from_millis(500)));
        assert_eq!(server_wait(60.0), Ok(MAX_SERVER_WAIT));
        assert_eq!(server_wait(-3.0), Ok(Duration::ZERO));
        assert_eq!(server_wait(f64::NAN), Ok(Duration::ZERO));
        let err = server_wait(61.0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rate limited: the server asks to wait 61 s, longer than the 60 s Bub waits; try again later"
        );
        let err = server_wait(1e19).unwrap_err().to_string();
        assert!(err.contains("wait 1e19 s"), "{err}");
        assert!(server_wait(f64::INFINITY).is_err());
        assert!(
            server_wait(99_999_999_999.0)
                .unwrap_err()
                .to_string()
                .contains("99999999999 s")
        );
    }
}
