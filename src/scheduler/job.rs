//! One scheduled job and its trigger: what `jobs.json` holds, and the trigger math.
//!
//! All time arithmetic takes `now` as an argument (never reads the clock), so it is tested with
//! fixed instants, and it is checked: a trigger (perhaps from a hand-edited `jobs.json`) whose
//! next run is beyond the representable dates has none, and never panics. Times are stored in UTC (RFC 3339); a cron trigger is evaluated in its own
//! time zone (an IANA name, or the machine's local zone when none is given).
//!
//! A job read from the file is checked before it is trusted ([`Job::from_json`]): one that cannot
//! run (bad time, cron expression or zone, zero interval, empty id or session) is refused with a
//! reason naming the field, and the store sets it aside on its own.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{LazyLock, Mutex, PoisonError};

use chrono::{DateTime, Local, NaiveDateTime, TimeDelta, Utc};
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::access::{Authority, Role};
use crate::chat::SessionId;

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
    /// How the last run went (`running`, `ok`, `error: …`, `missed`, `interrupted` in the file).
    #[serde(default)]
    pub last_status: Option<RunStatus>,
    /// Who created the job, with their role: the job runs with these rights (never more than
    /// the creator has when it fires). Absent in jobs written before rights were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creator: Option<Authority>,
}

/// How a job's last run went. Stored as the text `bub jobs list` shows (`running`, `ok`,
/// `error: <reason>`, `missed`, `interrupted`), so `jobs.json` stays plain and readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum RunStatus {
    /// Claimed and not finished (a crash leaves it so; the next owner marks it interrupted).
    Running,
    Ok,
    Error(String),
    /// Its due time passed while no scheduler ran, and catch-up is off.
    Missed,
    /// A restart cut the run short.
    Interrupted,
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunStatus::Running => f.write_str("running"),
            RunStatus::Ok => f.write_str("ok"),
            RunStatus::Error(e) => write!(f, "error: {e}"),
            RunStatus::Missed => f.write_str("missed"),
            RunStatus::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl From<RunStatus> for String {
    fn from(status: RunStatus) -> String {
        status.to_string()
    }
}

impl From<String> for RunStatus {
    /// Any text that is not a known status is an error's reason (files written by hand).
    fn from(text: String) -> RunStatus {
        match text.as_str() {
            "running" => RunStatus::Running,
            "ok" => RunStatus::Ok,
            "missed" => RunStatus::Missed,
            "interrupted" => RunStatus::Interrupted,
            _ => RunStatus::Error(text.strip_prefix("error: ").unwrap_or(&text).to_owned()),
        }
    }
}

impl Job {
    /// The job as one line (`schedule.list`, `bub jobs list`, `/status`):
    /// `<id> next=<time or -> trigger=<t> [session=<s>] by=<creator> [last=<status>] msg=<message>`,
    /// the creator as `guest (telegram:50)`, `owner (terminal)` or `unknown`.
    pub fn row(&self, with_session: bool) -> String {
        let next = self.next_run.map_or_else(|| "-".to_owned(), local_time);
        let session = if with_session {
            format!(" session={}", self.session)
        } else {
            String::new()
        };
        let status = self
            .last_status
            .as_ref()
            .map(|s| format!(" last={s}"))
            .unwrap_or_default();
        let creator = self
            .creator
            .as_ref()
            .map_or_else(|| "unknown".to_owned(), Authority::describe);
        format!(
            "{} next={next} trigger={}{session} by={creator}{status} msg={}",
            self.id, self.trigger, self.message
        )
    }

    /// Whether `who` created the job: every sender behind `who` is one of its creators (a turn
    /// of several senders has no more rights than each of them). Nobody named (the terminal, or
    /// a job without a record) created nothing.
    pub(crate) fn created_by(&self, who: &Authority) -> bool {
        let Some(creator) = &self.creator else {
            return false;
        };
        !who.senders.is_empty() && who.senders.iter().all(|s| creator.senders.contains(s))
    }

    /// The rights the job was created with. A job without a record runs as the owner in a
    /// terminal session and as a guest in a chat session (fail closed: its creator is unknown).
    pub(crate) fn recorded_authority(&self) -> Authority {
        match &self.creator {
            Some(creator) => creator.clone(),
            None if SessionId::from(self.session.as_str()).chat().is_some() => Authority {
                role: Role::Guest,
                senders: Vec::new(),
            },
            None => Authority::terminal(),
        }
    }
}

impl Job {
    /// Reads one job of `jobs.json` (the JSON object as stored there) and checks that it can run
    /// ([`Job::check`]). The error names the field and the problem (`trigger.at: "tomorrow" is
    /// not an RFC 3339 time …`); it never quotes the job's message.
    pub(crate) fn from_json(raw: &str) -> Result<Job, String> {
        let job: Job = serde_json::from_str(raw).map_err(|e| explain(raw, &e))?;
        job.check()?;
        Ok(job)
    }

    /// Why the job can never run, if it cannot: an empty id or session, or a trigger that
    /// cannot fire ([`Trigger::check`]).
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.id.trim().is_empty() {
            return Err("empty id".to_owned());
        }
        if self.session.trim().is_empty() {
            return Err("empty session".to_owned());
        }
        self.trigger.check()
    }
}

/// What serde's error for a job that does not deserialize leaves unsaid: which time field is
/// not a time (chrono's own error is only "input contains invalid characters"). Falls back to
/// serde's message without its position (which is relative to the job, not the file).
fn explain(raw: &str, error: &serde_json::Error) -> String {
    let fallback = || {
        let text = error.to_string();
        let position = format!(" at line {} column {}", error.line(), error.column());
        text.strip_suffix(&position).unwrap_or(&text).to_owned()
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(raw) else {
        return fallback();
    };
    let Some(object) = value.as_object() else {
        return "a job must be a JSON object".to_owned();
    };
    if let Some(trigger) = object.get("trigger")
        && let Err(e) = Trigger::deserialize(trigger)
    {
        let problem = ["at", "start"]
            .into_iter()
            .find_map(|field| Some(format!("{field}: {}", not_a_time(trigger.get(field)?)?)));
        return match problem {
            Some(problem) => format!("trigger.{problem}"),
            None => format!("trigger: {e}"),
        };
    }
    ["created", "next_run", "last_run"]
        .into_iter()
        .find_map(|field| Some(format!("{field}: {}", not_a_time(object.get(field)?)?)))
        .unwrap_or_else(fallback)
}

/// The problem with a string that should be a stored time, if it is not one.
fn not_a_time(value: &serde_json::Value) -> Option<String> {
    let text = value.as_str()?;
    text.parse::<DateTime<Utc>>()
        .is_err()
        .then(|| format!("{text:?} is not an RFC 3339 time (e.g. 2026-12-24T18:00:00Z)"))
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
                // Checked: a hand-edited interval too large for the calendar never fires
                // rather than panicking (and `Trigger::check` rejects it on load).
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

    /// The shortest time between two runs, in seconds, among the next [`GAPS_CHECKED`] runs
    /// after `now` (a cron expression's runs need not be evenly spaced: `0,1 9 * * *` runs twice
    /// in a minute, once a day); `None` for a one-shot trigger, or one that will not run twice.
    pub(crate) fn shortest_gap(&self, now: DateTime<Utc>) -> Option<u64> {
        match self {
            Trigger::Once { .. } => None,
            Trigger::Interval { seconds, .. } => Some(*seconds),
            Trigger::Cron { expr, timezone } => {
                let cron = parse_cron(expr).ok()?;
                let start = to_jiff(now)?.to_zoned(zone(timezone.as_deref()).ok()?);
                let runs: Vec<i64> = cron
                    .iter_after(start)
                    .take(GAPS_CHECKED + 1)
                    .map(|run| run.timestamp().as_second())
                    .collect();
                runs.windows(2)
                    .map(|pair| u64::try_from(pair[1] - pair[0]).unwrap_or(0))
                    .min()
            }
        }
    }

    /// Why the trigger can never fire, if it cannot: an interval of 0 seconds or one too large
    /// for the calendar, a cron expression that does not parse, an unknown time zone. (A `once`
    /// time in the past is fine: it is a missed run.) No clock reads and no search for the next
    /// run, so checking every job of a large file on each load stays cheap.
    pub(crate) fn check(&self) -> Result<(), String> {
        match self {
            Trigger::Once { .. } => Ok(()),
            Trigger::Interval { seconds: 0, .. } => {
                Err("interval of 0 seconds (use at least 1)".to_owned())
            }
            Trigger::Interval { seconds, start } => match self.next_after(*start) {
                Some(_) => Ok(()),
                None => Err(format!(
                    "interval of {seconds} seconds is out of range (its first run after \
                     {start} is not a representable time)"
                )),
            },
            Trigger::Cron { expr, timezone } => {
                check_cron(expr)?;
                // No zone is the machine's own, which always exists.
                timezone
                    .as_deref()
                    .map_or(Ok(()), |tz| parse_timezone(tz).map(drop))
            }
        }
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

/// How many gaps between a cron trigger's next runs [`Trigger::shortest_gap`] looks at: a burst
/// of runs shows in its first gaps (a pair close together once a year is harmless).
const GAPS_CHECKED: usize = 64;

/// The most jobs one `BUB_HOME` keeps: `schedule.add` refuses more, so `jobs.json` (read and
/// rewritten at every run) stays small.
pub(crate) const MAX_JOBS: usize = 1000;

/// Parses a 5-field crontab expression (or an `@daily`-style alias).
pub(crate) fn parse_cron(expr: &str) -> Result<croner::Cron, String> {
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

/// Cron expressions known to parse. croner takes ~50 µs per expression, so parsing every cron
/// job of a large file on each load would dominate it; the owner re-reads the same expressions
/// whenever the file changes. Bounded: emptied when full.
static VALID_CRON: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);
const VALID_CRON_MAX: usize = 16_384;

/// [`parse_cron`]'s verdict without its result, remembered for expressions that parse.
fn check_cron(expr: &str) -> Result<(), String> {
    if VALID_CRON
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(expr)
    {
        return Ok(());
    }
    parse_cron(expr)?;
    let mut valid = VALID_CRON.lock().unwrap_or_else(PoisonError::into_inner);
    if valid.len() >= VALID_CRON_MAX {
        valid.clear();
    }
    valid.insert(expr.to_owned());
    Ok(())
}

/// Parses an IANA time zone name (`Europe/Berlin`, `UTC`).
pub(crate) fn parse_timezone(name: &str) -> Result<TimeZone, String> {
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
pub(crate) fn parse_at(raw: &str, timezone: Option<&str>) -> Result<DateTime<Utc>, String> {
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
pub(crate) fn local_time(t: DateTime<Utc>) -> String {
    t.with_timezone(&Local)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

/// A fresh job id: 8 hex digits.
pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_statuses_are_stored_as_their_text() {
        let all = [
            (RunStatus::Running, "running"),
            (RunStatus::Ok, "ok"),
            (RunStatus::Error("boom".into()), "error: boom"),
            (RunStatus::Missed, "missed"),
            (RunStatus::Interrupted, "interrupted"),
        ];
        for (status, text) in all {
            assert_eq!(serde_json::to_value(&status).unwrap(), text);
            let read: RunStatus = serde_json::from_value(text.into()).unwrap();
            assert_eq!(read, status);
        }
        let by_hand: RunStatus = serde_json::from_value("gave up".into()).unwrap();
        assert_eq!(by_hand, RunStatus::Error("gave up".into()));
    }

    #[test]
    fn the_shortest_gap_between_runs() {
        let now: DateTime<Utc> = "2026-03-01T12:00:00Z".parse().unwrap();
        let cron = |expr: &str| Trigger::Cron {
            expr: expr.into(),
            timezone: Some("UTC".into()),
        };
        let every = |seconds| Trigger::Interval {
            seconds,
            start: now,
        };
        assert_eq!(Trigger::Once { at: now }.shortest_gap(now), None);
        assert_eq!(every(2).shortest_gap(now), Some(2));
        assert_eq!(cron("*/5 * * * *").shortest_gap(now), Some(300));
        assert_eq!(cron("0 9 * * *").shortest_gap(now), Some(86_400));
        // Uneven runs: the closest pair counts, wherever it falls among the next runs.
        assert_eq!(cron("0,1 9 * * *").shortest_gap(now), Some(60));
        assert_eq!(cron("58 23 * * *").shortest_gap(now), Some(86_400));
        assert_eq!(cron("0,58 0,23 * * *").shortest_gap(now), Some(120));
    }

    #[test]
    fn a_job_was_created_by_the_senders_of_its_creator() {
        let person = |id: &str| crate::access::Principal {
            channel: "telegram".into(),
            id: id.into(),
            name: None,
        };
        let guests = |ids: &[&str]| Authority {
            role: Role::Guest,
            senders: ids.iter().map(|id| person(id)).collect(),
        };
        let now = Utc::now();
        let mut job = Job {
            id: "0badf00d".into(),
            session: "telegram:-100".into(),
            message: "m".into(),
            workspace: PathBuf::new(),
            trigger: Trigger::Once { at: now },
            created: now,
            next_run: None,
            last_run: None,
            last_status: None,
            creator: Some(guests(&["50", "51"])),
        };
        assert!(job.created_by(&guests(&["50"])) && job.created_by(&guests(&["51", "50"])));
        assert!(!job.created_by(&guests(&["50", "52"])) && !job.created_by(&guests(&[])));
        assert!(
            job.row(true)
                .contains(" by=guest (telegram:50, telegram:51) msg=m")
        );
        job.creator = None;
        assert!(!job.created_by(&guests(&["50"])));
        assert!(job.row(false).contains(" by=unknown msg=m"));
    }
}
