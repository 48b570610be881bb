//! One scheduled job and its trigger: what `jobs.json` holds, and the trigger math.
//!
//! All time arithmetic takes `now` as an argument (never reads the clock), so it is tested with
//! fixed instants, and it is checked: a trigger (perhaps from a hand-edited `jobs.json`) whose
//! next run is beyond the representable dates has none, and never panics. Times are stored in UTC (RFC 3339); a cron trigger is evaluated in its own
//! time zone (an IANA name, or the machine's local zone when none is given).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use chrono::{DateTime, Local, NaiveDateTime, TimeDelta, Utc};
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::access::{Authority, Role};

/// A job: a message that is run as a turn in `session` whenever its trigger fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Short random id (8 hex digits).
    pub id: String,
    /// The session the job belongs to and runs in (`telegram:42`, `cli`).
    pub session: String,
    /// What the agent is asked to do when the job fires.
    pub message: String,
    /// The workspace of the process that created the job.
    pub workspace: PathBuf,
    pub trigger: Trigger,
    pub created: DateTime<Utc>,
    /// When the job fires next; `None` once a one-shot job has been claimed.
    pub next_run: Option<DateTime<Utc>>,
    /// When the job last fired (claimed for a run).
    #[serde(default)]
    pub last_run: Option<DateTime<Utc>>,
    /// `running`, `ok`, `error: …`, `missed`.
    #[serde(default)]
    pub last_status: Option<String>,
    /// Who created the job, with their role: the job runs with these rights (never more than
    /// the creator has when it fires). Absent in jobs written before rights were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creator: Option<Authority>,
}

impl Job {
    /// The rights the job was created with. A job without a record runs as the owner in a
    /// terminal session and as a guest in a chat session (fail closed: its creator is unknown).
    pub fn recorded_authority(&self) -> Authority {
        match &self.creator {
            Some(creator) => creator.clone(),
            None if crate::tools::context::session_chat(&self.session).is_some() => Authority {
                role: Role::Guest,
                senders: Vec::new(),
            },
            None => Authority::terminal(),
        }
    }
}

/// When a job fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Trigger {
    /// Once, at a fixed time (`after_seconds` or `at`).
    Once { at: DateTime<Utc> },
    /// Every `seconds` after `start` (first run at `start + seconds`).
    Interval { seconds: u64, start: DateTime<Utc> },
    /// A 5-field crontab expression in `timezone` (local when `None`).
    Cron {
        expr: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
    },
}

impl Trigger {
    /// The first run strictly after `now`, or `None` when the trigger will not fire again (or
    /// its next run is not a representable date).
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Trigger::Once { at } => (*at > now).then_some(*at),
            Trigger::Interval { seconds, start } => {
                // Runs at start + k·seconds, k ≥ 1.
                let step = i64::try_from(*seconds).ok().filter(|s| *s > 0)?;
                let after = |periods: i64| {
                    let offset = TimeDelta::try_seconds(periods.checked_mul(step)?)?;
                    start.checked_add_signed(offset)
                };
                let first = after(1)?;
                if first > now {
                    return Some(first);
                }
                after((now - *start).num_seconds() / step + 1)
            }
            Trigger::Cron { expr, timezone } => {
                let cron = parse_cron(expr).ok()?;
                let zone = zone(timezone.as_deref()).ok()?;
                let next = cron
                    .find_next_occurrence(&to_jiff(now)?.to_zoned(zone), false)
                    .ok()?;
                from_jiff(next.timestamp())
            }
        }
    }

    /// Fires more than once.
    pub fn is_recurring(&self) -> bool {
        !matches!(self, Trigger::Once { .. })
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Once { at } => write!(f, "once at {}", local_time(*at)),
            Trigger::Interval { seconds, .. } => write!(f, "every {seconds}s"),
            Trigger::Cron { expr, timezone } => {
                write!(f, "cron '{expr}'")?;
                match timezone {
                    Some(tz) => write!(f, " ({tz})"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The trigger arguments of `schedule.add`: exactly one of the first four must be set.
#[derive(Debug, Default, Clone)]
pub struct TriggerSpec {
    pub after_seconds: Option<f64>,
    pub interval_seconds: Option<f64>,
    pub cron: Option<String>,
    pub at: Option<String>,
    pub timezone: Option<String>,
}

impl TriggerSpec {
    /// Validates the arguments into a trigger. Errors are messages for the caller.
    pub fn build(&self, now: DateTime<Utc>) -> Result<Trigger, String> {
        let given = [
            self.after_seconds.is_some(),
            self.interval_seconds.is_some(),
            self.cron.is_some(),
            self.at.is_some(),
        ];
        match given.iter().filter(|g| **g).count() {
            1 => {}
            0 => return Err(ONE_TRIGGER.replace("{}", "none was given")),
            _ => return Err(ONE_TRIGGER.replace("{}", "several were given")),
        }
        if let Some(tz) = &self.timezone {
            parse_timezone(tz)?;
        }
        if let Some(seconds) = self.after_seconds {
            if !(0.0..=MAX_SECONDS).contains(&seconds) {
                return Err(format!(
                    "after_seconds must be between 0 and {MAX_SECONDS}, got {seconds:?}"
                ));
            }
            let delay = TimeDelta::try_milliseconds((seconds * 1000.0).round() as i64);
            let at = delay.and_then(|delay| now.checked_add_signed(delay));
            return at
                .map(|at| Trigger::Once { at })
                .ok_or_else(|| format!("after_seconds {seconds} is beyond the last date"));
        }
        if let Some(seconds) = self.interval_seconds {
            if !(1.0..=MAX_SECONDS).contains(&seconds) {
                return Err(format!(
                    "interval_seconds must be between 1 and {MAX_SECONDS}, got {seconds:?}"
                ));
            }
            return Ok(Trigger::Interval {
                seconds: seconds.round() as u64,
                start: now,
            });
        }
        if let Some(expr) = &self.cron {
            let expr = expr.split_whitespace().collect::<Vec<_>>().join(" ");
            parse_cron(&expr)?;
            return Ok(Trigger::Cron {
                expr,
                timezone: self.timezone.clone(),
            });
        }
        let raw = self.at.as_deref().unwrap_or_default();
        let at = parse_at(raw, self.timezone.as_deref())?;
        if at <= now {
            return Err(format!(
                "`at` is in the past: {raw} (now is {})",
                local_time(now)
            ));
        }
        Ok(Trigger::Once { at })
    }
}

const ONE_TRIGGER: &str = "give exactly one trigger — after_seconds, interval_seconds, cron \
                           (5 fields: minute hour day-of-month month day-of-week) or at \
                           (ISO time) — {}";

/// Ten years: longer delays are almost certainly a unit mistake.
const MAX_SECONDS: f64 = 10.0 * 365.0 * 86_400.0;

/// Parses a 5-field crontab expression (or an `@daily`-style alias).
pub fn parse_cron(expr: &str) -> Result<croner::Cron, String> {
    let fields = expr.split_whitespace().count();
    let alias = expr.trim_start().starts_with('@');
    if !alias && fields != 5 {
        return Err(format!(
            "invalid cron expression: {expr:?} has {fields} fields; use 5: minute hour \
             day-of-month month day-of-week (e.g. \"*/5 * * * *\")"
        ));
    }
    croner::Cron::from_str(expr).map_err(|e| format!("invalid cron expression: {expr:?} ({e})"))
}

/// Parses an IANA time zone name (`Europe/Berlin`, `UTC`).
pub fn parse_timezone(name: &str) -> Result<TimeZone, String> {
    TimeZone::get(name.trim()).map_err(|_| {
        format!("unknown time zone: {name:?} (use an IANA name such as Europe/Berlin or UTC)")
    })
}

/// The zone `timezone` names, or the machine's local zone.
fn zone(timezone: Option<&str>) -> Result<TimeZone, String> {
    timezone.map_or_else(|| Ok(TimeZone::system()), parse_timezone)
}

fn to_jiff(t: DateTime<Utc>) -> Option<jiff::Timestamp> {
    let nanos = i32::try_from(t.timestamp_subsec_nanos()).ok()?;
    jiff::Timestamp::new(t.timestamp(), nanos).ok()
}

fn from_jiff(t: jiff::Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.as_second(), u32::try_from(t.subsec_nanosecond()).ok()?)
}

/// Parses an `at` time: RFC 3339 with an offset, or a date-time without one in `timezone`
/// (local when `None`; a time skipped by a DST change moves forward); `T` or a space between
/// date and time, seconds optional.
pub fn parse_at(raw: &str, timezone: Option<&str>) -> Result<DateTime<Utc>, String> {
    let raw = raw.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        return Ok(t.with_timezone(&Utc));
    }
    let naive = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(raw, f).ok())
        .ok_or_else(|| {
            format!("invalid `at` time: {raw:?} (use ISO 8601, e.g. 2026-12-24T18:00 or 2026-12-24T18:00:00+01:00)")
        })?;
    let civil: jiff::civil::DateTime = naive
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
        .parse()
        .map_err(|e| format!("invalid `at` time: {raw:?} ({e})"))?;
    let zoned = zone(timezone)?
        .to_ambiguous_zoned(civil)
        .compatible()
        .map_err(|e| format!("invalid `at` time: {raw:?} ({e})"))?;
    from_jiff(zoned.timestamp()).ok_or_else(|| format!("`at` time {raw:?} is out of range"))
}

/// A time as the machine's local ISO time, to the second.
pub fn local_time(t: DateTime<Utc>) -> String {
    t.with_timezone(&Local)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

/// A fresh job id: 8 hex digits.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}
