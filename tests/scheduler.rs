//! The scheduler's parts: trigger math and the catch-up / claim decisions at fixed instants, and
//! the jobs.json store (atomic, shared, corrupt files moved aside, jobs that cannot run set aside
//! one by one into jobs.rejected.json). The owner loop is in `scheduler/owner.rs`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, TimeZone, Utc};

use bub::scheduler::job::RunStatus;
use bub::scheduler::job::{Job, Trigger, TriggerSpec};
use bub::scheduler::{plan, store};

#[path = "scheduler/owner.rs"]
mod owner;

fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, h, m, s).unwrap()
}

fn job(id: &str, trigger: Trigger, next_run: Option<DateTime<Utc>>) -> Job {
    Job {
        id: id.into(),
        session: "telegram:42".into(),
        message: format!("task {id}"),
        workspace: "/ws".into(),
        trigger,
        created: t(0, 0, 0),
        next_run,
        last_run: None,
        last_status: None,
        creator: None,
    }
}

fn once(at: DateTime<Utc>) -> Trigger {
    Trigger::Once { at }
}

fn every(seconds: u64, start: DateTime<Utc>) -> Trigger {
    Trigger::Interval { seconds, start }
}

fn spec() -> TriggerSpec {
    TriggerSpec::default()
}

// ---- trigger math ---------------------------------------------------------------------------

#[test]
fn after_seconds_and_at_fire_once() {
    let now = t(12, 0, 0);
    let trigger = TriggerSpec {
        after_seconds: Some(90.0),
        ..spec()
    }
    .build(now)
    .unwrap();
    assert_eq!(trigger, once(t(12, 1, 30)));
    assert_eq!(trigger.next_after(now), Some(t(12, 1, 30)));
    assert_eq!(trigger.next_after(t(12, 1, 30)), None, "fires once");
    assert!(!trigger.is_recurring());

    let at = TriggerSpec {
        at: Some("2026-11-23T15:00:00+01:00".into()),
        ..spec()
    }
    .build(now)
    .unwrap();
    assert_eq!(at, once(t(14, 0, 0)));
    let zoned = TriggerSpec {
        at: Some("2026-11-23 18:30".into()),
        timezone: Some("Asia/Tokyo".into()),
        ..spec()
    }
    .build(t(1, 0, 0))
    .unwrap();
    assert_eq!(zoned, once(t(9, 30, 0)), "18:30 in Tokyo is 09:30 UTC");
}

#[test]
fn interval_runs_on_its_grid_and_coalesces() {
    let start = t(12, 0, 0);
    let trigger = every(600, start);
    assert_eq!(
        trigger.next_after(start),
        Some(t(12, 10, 0)),
        "first run after one interval"
    );
    assert_eq!(trigger.next_after(t(12, 9, 59)), Some(t(12, 10, 0)));
    assert_eq!(
        trigger.next_after(t(12, 10, 0)),
        Some(t(12, 20, 0)),
        "strictly after"
    );
    // Down for hours: the next run is the next grid point, not a backlog.
    assert_eq!(trigger.next_after(t(15, 4, 0)), Some(t(15, 10, 0)));
}

#[test]
fn cron_in_a_time_zone() {
    let trigger = TriggerSpec {
        cron: Some("0  9 * * 1-5".into()),
        timezone: Some("Europe/Berlin".into()),
        ..spec()
    }
    .build(t(12, 0, 0))
    .unwrap();
    assert_eq!(
        trigger,
        Trigger::Cron {
            expr: "0 9 * * 1-5".into(),
            timezone: Some("Europe/Berlin".into())
        },
        "whitespace normalised"
    );
    // 2026-11-23 is a Monday; 09:00 in Berlin (UTC+1 in November) is 08:00 UTC on Tuesday.
    let tuesday = Utc.with_ymd_and_hms(2026, 11, 24, 8, 0, 0).unwrap();
    assert_eq!(trigger.next_after(t(12, 0, 0)), Some(tuesday));
    // Friday 09:00 → the next run is Monday.
    let friday = Utc.with_ymd_and_hms(2026, 11, 27, 8, 0, 0).unwrap();
    let monday = Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 0).unwrap();
    assert_eq!(trigger.next_after(friday), Some(monday));
    let utc = Trigger::Cron {
        expr: "*/5 * * * *".into(),
        timezone: Some("UTC".into()),
    };
    assert_eq!(utc.next_after(t(12, 3, 10)), Some(t(12, 5, 0)));
}

#[test]
fn bad_triggers_get_clear_errors() {
    let now = t(12, 0, 0);
    let err = |s: TriggerSpec| s.build(now).unwrap_err();
    assert!(
        err(spec()).contains("exactly one trigger"),
        "{}",
        err(spec())
    );
    assert!(err(spec()).contains("none was given"));
    let both = TriggerSpec {
        after_seconds: Some(5.0),
        cron: Some("* * * * *".into()),
        ..spec()
    };
    assert!(err(both).contains("several were given"));
    let short = err(TriggerSpec {
        cron: Some("* * *".into()),
        ..spec()
    });
    assert!(
        short.contains("invalid cron expression") && short.contains("3 fields"),
        "{short}"
    );
    let bad = err(TriggerSpec {
        cron: Some("61 * * * *".into()),
        ..spec()
    });
    assert!(bad.contains("invalid cron expression"), "{bad}");
    let past = err(TriggerSpec {
        at: Some("2026-11-23T11:00:00Z".into()),
        ..spec()
    });
    assert!(past.contains("in the past"), "{past}");
    let garbled = err(TriggerSpec {
        at: Some("tomorrow-ish".into()),
        ..spec()
    });
    assert!(garbled.contains("invalid `at` time"), "{garbled}");
    let zone = err(TriggerSpec {
        cron: Some("* * * * *".into()),
        timezone: Some("Mars/Olympus".into()),
        ..spec()
    });
    assert!(zone.contains("unknown time zone"), "{zone}");
    let negative = err(TriggerSpec {
        after_seconds: Some(-1.0),
        ..spec()
    });
    assert!(negative.contains("after_seconds"), "{negative}");
    let zero = err(TriggerSpec {
        interval_seconds: Some(0.0),
        ..spec()
    });
    assert!(zero.contains("interval_seconds"), "{zero}");
}

#[test]
fn out_of_range_trigger_values_are_errors_not_panics() {
    let now = t(12, 0, 0);
    for value in [
        1e300,
        1e19,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ] {
        let after = TriggerSpec {
            after_seconds: Some(value),
            ..spec()
        }
        .build(now)
        .unwrap_err();
        assert!(
            after.contains("after_seconds must be between 0 and 315360000"),
            "{after}"
        );
        let interval = TriggerSpec {
            interval_seconds: Some(value),
            ..spec()
        }
        .build(now)
        .unwrap_err();
        assert!(
            interval.contains("interval_seconds must be between 1 and 315360000"),
            "{interval}"
        );
    }
    let huge = TriggerSpec {
        after_seconds: Some(1e300),
        ..spec()
    }
    .build(now)
    .unwrap_err();
    assert!(huge.ends_with("got 1e300"), "short, not 301 digits: {huge}");
}

#[test]
fn an_interval_beyond_the_last_date_has_no_next_run() {
    // Values a hand-edited jobs.json can hold; each one panicked in the trigger math.
    let start = t(12, 0, 0);
    for seconds in [
        u64::MAX,
        i64::MAX as u64,
        i64::MAX as u64 / 1000 + 1,
        9_000_000_000_000_000,
    ] {
        assert_eq!(every(seconds, start).next_after(start), None, "{seconds}");
    }
    // A start long ago: the grid point after now is still found.
    let ancient = Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap();
    let next = every(7, ancient).next_after(start).unwrap();
    assert!(next > start && next <= start + chrono::Duration::seconds(7));
    // A start near the last representable date: no next run, no overflow.
    let last = DateTime::<Utc>::MAX_UTC - chrono::Duration::seconds(10);
    assert_eq!(every(60, last).next_after(last), None);
}

// ---- catch-up and claiming ------------------------------------------------------------------

#[test]
fn catch_up_keeps_missed_runs_to_fire_once() {
    let now = t(12, 0, 0);
    let mut jobs = vec![
        job("late-once", once(t(9, 0, 0)), Some(t(9, 0, 0))),
        job("late-every", every(600, t(8, 0, 0)), Some(t(8, 10, 0))),
        job("future", once(t(13, 0, 0)), Some(t(13, 0, 0))),
    ];
    let notes = plan::recover(&mut jobs, now, true);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(jobs.len(), 3);

    let claims = plan::claim_due(&mut jobs, now);
    let ids: Vec<&str> = claims.iter().map(|c| c.job.id.as_str()).collect();
    assert_eq!(ids, ["late-once", "late-every"]);
    assert_eq!(
        claims[1].due,
        t(8, 10, 0),
        "the missed due time is reported"
    );
    // The recurring job fires once (coalesced) and moves to its next grid point after now.
    assert_eq!(jobs[1].next_run, Some(t(12, 10, 0)));
    assert_eq!(jobs[0].next_run, None);
    assert!(
        jobs[..2]
            .iter()
            .all(|j| j.last_status == Some(RunStatus::Running))
    );
    assert!(jobs[..2].iter().all(|j| j.last_run == Some(now)));
    assert!(
        plan::claim_due(&mut jobs, now).is_empty(),
        "claimed runs never fire twice"
    );

    let ended = [
        ("late-once".to_owned(), RunStatus::Ok),
        ("late-every".to_owned(), RunStatus::Error("boom".into())),
    ];
    plan::finish(&mut jobs, &ended);
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        ids,
        ["late-every", "future"],
        "a finished one-shot job is removed"
    );
    assert_eq!(jobs[0].last_status, Some(RunStatus::Error("boom".into())));
    assert_eq!(plan::next_due(&jobs), Some(t(12, 10, 0)));
}

#[test]
fn without_catch_up_missed_runs_are_skipped() {
    let now = t(12, 0, 0);
    let mut jobs = vec![
        job("late-once", once(t(9, 0, 0)), Some(t(9, 0, 0))),
        job("late-every", every(600, t(8, 0, 0)), Some(t(8, 10, 0))),
        job("due-now", once(now), Some(now)),
    ];
    let notes = plan::recover(&mut jobs, now, false);
    assert_eq!(notes.len(), 2, "{notes:?}");
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["late-every", "due-now"]);
    assert_eq!(jobs[0].next_run, Some(t(12, 10, 0)));
    assert_eq!(jobs[0].last_status, Some(RunStatus::Missed));
    assert_eq!(
        plan::claim_due(&mut jobs, now).len(),
        1,
        "only the job due now"
    );
}

#[test]
fn runs_interrupted_by_a_crash_are_not_repeated() {
    let now = t(12, 0, 0);
    let mut once_running = job("once", once(t(11, 0, 0)), None);
    once_running.last_status = Some(RunStatus::Running);
    let mut every_running = job("every", every(600, t(8, 0, 0)), Some(t(12, 10, 0)));
    every_running.last_status = Some(RunStatus::Running);
    let mut jobs = vec![once_running, every_running];
    let notes = plan::recover(&mut jobs, now, true);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].last_status, Some(RunStatus::Interrupted));
    assert!(plan::claim_due(&mut jobs, now).is_empty());
}

// ---- the store ------------------------------------------------------------------------------

/// Waits for `work` on a runtime of its own (the store's file work runs on its blocking pool).
fn wait<F: std::future::Future>(work: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    runtime.unwrap().block_on(work)
}

#[test]
fn store_is_plain_json_and_shared_by_writers() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(dir.path(), None);
    assert!(wait(store.list()).unwrap().is_empty(), "no file = no jobs");
    // Eight writers at once (as eight processes would): no update is lost.
    std::thread::scope(|s| {
        for i in 0..8 {
            let store = store.clone();
            s.spawn(move || {
                for k in 0..10 {
                    let id = format!("{i}-{k}");
                    wait(store.change(move |jobs| {
                        jobs.push(job(&id, once(t(13, 0, 0)), Some(t(13, 0, 0))))
                    }))
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(wait(store.list()).unwrap().len(), 80);
    let text = std::fs::read_to_string(jobs_file(dir.path())).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["version"], 1);
    let first = &value["jobs"][0];
    assert_eq!(first["session"], "telegram:42");
    assert_eq!(first["trigger"]["kind"], "once");
    assert_eq!(first["next_run"], "2026-11-23T13:00:00Z");
    assert!(
        text.contains("\n  \"jobs\": ["),
        "pretty-printed for people"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn corrupt_store_is_moved_aside_and_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(dir.path(), None);
    std::fs::write(jobs_file(dir.path()), "{\"version\": 1, \"jobs\": [ {oops").unwrap();
    assert!(wait(store.list()).unwrap().is_empty());
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("jobs.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(
        std::fs::read_to_string(&aside[0]).unwrap(),
        "{\"version\": 1, \"jobs\": [ {oops",
        "the broken file is kept as it was"
    );
    wait(store.change(move |jobs| jobs.push(job("new", once(t(13, 0, 0)), Some(t(13, 0, 0))))))
        .unwrap();
    assert_eq!(wait(store.list()).unwrap().len(), 1);
}

/// A job as a person would write it into jobs.json.
fn hand_job(id: &str, trigger: serde_json::Value, next_run: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "session": "telegram:42",
        "message": format!("private words of {id}"),
        "workspace": "/ws",
        "trigger": trigger,
        "created": "2026-11-23T00:00:00Z",
        "next_run": next_run,
    })
}

/// `jobs.json` of the file store in `dir`.
fn jobs_file(dir: &Path) -> PathBuf {
    dir.join("jobs.json")
}

/// `jobs.rejected.json` of the file store in `dir`.
fn rejected_file(dir: &Path) -> PathBuf {
    dir.join("jobs.rejected.json")
}

/// Writes `jobs` into `dir`'s `jobs.json` by hand, as a person editing it would.
fn write_jobs(dir: &Path, jobs: &[serde_json::Value]) {
    let file = serde_json::json!({"version": 1, "jobs": jobs});
    std::fs::write(jobs_file(dir), serde_json::to_vec_pretty(&file).unwrap()).unwrap();
}

/// The ids in jobs.json as it is on disk.
fn ids_on_disk(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(jobs_file(dir)).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Files in `dir` whose name contains `part`.
fn files_named(dir: &std::path::Path, part: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(part))
        .collect()
}

/// Log lines written while `f` runs (text format, no colours).
fn logged<R>(f: impl FnOnce() -> R) -> (R, String) {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // tracing remembers per call site whether any subscriber wants its events. While only one
    // subscriber is registered, the first thread to reach a call site decides that alone, by
    // its own default: an owner-loop test rejecting a job on a thread without a subscriber,
    // while this one runs, would decide "nobody" for this test's subscriber too. A second one,
    // registered for good, makes every call site ask all registered subscribers.
    static SECOND: std::sync::LazyLock<tracing::Dispatch> = std::sync::LazyLock::new(|| {
        tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default())
    });
    std::sync::LazyLock::force(&SECOND);
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let result = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    (result, text)
}

#[test]
fn a_job_that_cannot_run_is_set_aside_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(dir.path(), None);
    let tomorrow = hand_job(
        "tmrw",
        serde_json::json!({"kind": "once", "at": "tomorrow"}),
        "2026-11-24T09:00:00Z",
    );
    let bad_cron = hand_job(
        "badcron",
        serde_json::json!({"kind": "cron", "expr": "61 * * * *", "timezone": "UTC"}),
        "2026-11-23T13:00:00Z",
    );
    write_jobs(
        dir.path(),
        &[
            hand_job(
                "first",
                serde_json::json!({"kind": "once", "at": "2026-11-23T13:00:00Z"}),
                "2026-11-23T13:00:00Z",
            ),
            tomorrow.clone(),
            hand_job(
                "second",
                serde_json::json!({"kind": "cron", "expr": "0 9 * * *", "timezone": "Europe/Berlin"}),
                "2026-11-24T08:00:00Z",
            ),
            bad_cron.clone(),
        ],
    );

    let (jobs, log) = logged(|| wait(store.list()).unwrap());
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["first", "second"], "the valid jobs stay");
    assert_eq!(
        ids_on_disk(dir.path()),
        ["first", "second"],
        "jobs.json without them"
    );

    let rejected = wait(store.rejected()).unwrap();
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert_eq!(rejected[0].job, tomorrow, "kept exactly as it was");
    assert_eq!(rejected[0].id(), Some("tmrw"));
    assert!(
        rejected[0].reason.contains("trigger.at")
            && rejected[0]
                .reason
                .contains("\"tomorrow\" is not an RFC 3339 time"),
        "{}",
        rejected[0].reason
    );
    assert_eq!(rejected[1].job, bad_cron);
    assert!(
        rejected[1].reason.contains("invalid cron expression"),
        "{}",
        rejected[1].reason
    );
    let on_disk: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rejected_file(dir.path())).unwrap()).unwrap();
    assert_eq!(on_disk["version"], 1);
    assert_eq!(on_disk["rejected"][0]["job"]["id"], "tmrw");
    assert!(on_disk["rejected"][0]["rejected_at"].is_string());

    // Logged at error level with the id and the reason, never the message.
    for (id, reason) in [
        ("tmrw", &rejected[0].reason),
        ("badcron", &rejected[1].reason),
    ] {
        assert!(
            log.lines().any(|l| l.contains("ERROR")
                && l.contains("scheduler.store.rejected")
                && l.contains(&format!("job=\"{id}\""))
                && l.contains("reason=")),
            "{id} / {reason}: {log}"
        );
    }
    assert!(!log.contains("private words"), "{log}");

    // Loading again (and changing the store) neither duplicates nor loses anything.
    assert_eq!(wait(store.list()).unwrap().len(), 2);
    wait(store.change(move |jobs| jobs.push(job("third", once(t(14, 0, 0)), Some(t(14, 0, 0))))))
        .unwrap();
    assert_eq!(ids_on_disk(dir.path()), ["first", "second", "third"]);
    assert_eq!(
        wait(store.rejected()).unwrap(),
        rejected,
        "no duplicate rejections"
    );
    assert!(files_named(dir.path(), "corrupt").is_empty());
}

#[test]
fn every_kind_of_unrunnable_job_gets_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(dir.path(), None);
    let once_at = serde_json::json!({"kind": "once", "at": "2026-11-23T13:00:00Z"});
    let next = "2026-11-23T13:00:00Z";
    let mut no_session = hand_job("nosession", once_at.clone(), next);
    no_session["session"] = " ".into();
    let mut bad_created = hand_job("badcreated", once_at.clone(), next);
    bad_created["created"] = "yesterday".into();
    let mut no_message = hand_job("nomessage", once_at.clone(), next);
    no_message.as_object_mut().unwrap().remove("message");
    let mut duplicate = hand_job("keep", once_at.clone(), next);
    duplicate["message"] = "the second one".into();
    let cases = [
        (hand_job("keep", once_at.clone(), next), None),
        (
            hand_job(
                "zero",
                serde_json::json!({"kind": "interval", "seconds": 0, "start": next}),
                next,
            ),
            Some("interval of 0 seconds"),
        ),
        (
            // Far beyond the calendar: computing its next run would overflow.
            hand_job(
                "huge",
                serde_json::json!({"kind": "interval", "seconds": 1_000_000_000_000_000u64, "start": next}),
                next,
            ),
            Some("out of range"),
        ),
        (
            hand_job(
                "mars",
                serde_json::json!({"kind": "cron", "expr": "* * * * *", "timezone": "Mars/Olympus"}),
                next,
            ),
            Some("unknown time zone"),
        ),
        (
            hand_job(
                "short",
                serde_json::json!({"kind": "cron", "expr": "* * *"}),
                next,
            ),
            Some("invalid cron expression"),
        ),
        (
            hand_job("weekly", serde_json::json!({"kind": "weekly"}), next),
            Some("trigger: unknown variant `weekly`"),
        ),
        (hand_job("", once_at.clone(), next), Some("empty id")),
        (no_session, Some("empty session")),
        (
            bad_created,
            Some("created: \"yesterday\" is not an RFC 3339 time"),
        ),
        (no_message, Some("missing field `message`")),
        (duplicate, Some("duplicate id \"keep\"")),
        (serde_json::json!(42), Some("a job must be a JSON object")),
    ];
    let raw: Vec<serde_json::Value> = cases.iter().map(|(job, _)| job.clone()).collect();
    write_jobs(dir.path(), &raw);

    let jobs = wait(store.list()).unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].id, "keep");
    assert_eq!(
        jobs[0].message, "private words of keep",
        "the first of two ids is kept"
    );
    let rejected = wait(store.rejected()).unwrap();
    let expected: Vec<&str> = cases.iter().filter_map(|(_, reason)| *reason).collect();
    assert_eq!(rejected.len(), expected.len(), "{rejected:#?}");
    for (entry, reason) in rejected.iter().zip(expected) {
        assert!(
            entry.reason.contains(reason),
            "{reason:?} in {:?}",
            entry.reason
        );
        assert!(!entry.reason.contains("private words"), "{}", entry.reason);
        assert!(
            !entry.reason.contains(" at line "),
            "position dropped: {}",
            entry.reason
        );
    }
    assert_eq!(ids_on_disk(dir.path()), ["keep"]);
}

#[test]
fn a_file_without_a_jobs_array_is_still_moved_aside_whole() {
    for (i, text) in [
        "[1, 2]",
        "{\"version\": 1}",
        "{\"version\": 1, \"jobs\": {}}",
        "not json",
    ]
    .into_iter()
    .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let store = store::open(dir.path(), None);
        std::fs::write(jobs_file(dir.path()), text).unwrap();
        assert!(wait(store.list()).unwrap().is_empty(), "case {i}");
        let aside = files_named(dir.path(), "jobs.json.corrupt-");
        assert_eq!(aside.len(), 1, "case {i}");
        assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), text);
        assert!(!jobs_file(dir.path()).exists(), "case {i}");
        assert!(
            !rejected_file(dir.path()).exists(),
            "case {i}: nothing rejected job by job"
        );
    }
}

#[test]
fn a_broken_rejected_file_is_moved_aside_and_an_unwritable_one_keeps_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(dir.path(), None);
    let valid = hand_job(
        "ok",
        serde_json::json!({"kind": "once", "at": "2026-11-23T13:00:00Z"}),
        "2026-11-23T13:00:00Z",
    );
    let bad = hand_job(
        "bad",
        serde_json::json!({"kind": "once", "at": "tomorrow"}),
        "2026-11-23T13:00:00Z",
    );

    // A rejected file that does not parse: moved aside, never overwritten.
    std::fs::write(rejected_file(dir.path()), "{oops").unwrap();
    assert!(
        wait(store.rejected()).is_err(),
        "listing it reports the problem"
    );
    write_jobs(dir.path(), &[valid.clone(), bad.clone()]);
    assert_eq!(wait(store.list()).unwrap().len(), 1);
    let aside = files_named(dir.path(), "jobs.rejected.json.corrupt-");
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), "{oops");
    assert_eq!(wait(store.rejected()).unwrap().len(), 1);
    assert_eq!(ids_on_disk(dir.path()), ["ok"]);

    // A rejected file that cannot be written: the bad job stays in jobs.json as it was, even
    // through updates; the valid jobs are unaffected. Once it can be written, it is set aside.
    std::fs::remove_file(rejected_file(dir.path())).unwrap();
    std::fs::create_dir(rejected_file(dir.path())).unwrap();
    write_jobs(dir.path(), &[valid.clone(), bad.clone()]);
    let jobs = wait(store.list()).unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(ids_on_disk(dir.path()), ["ok", "bad"]);
    wait(store.change(move |jobs| jobs.push(job("new", once(t(14, 0, 0)), Some(t(14, 0, 0))))))
        .unwrap();
    assert_eq!(ids_on_disk(dir.path()), ["ok", "new", "bad"]);
    let text = std::fs::read_to_string(jobs_file(dir.path())).unwrap();
    let on_disk: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(on_disk["jobs"][2], bad, "kept exactly as it was");

    std::fs::remove_dir(rejected_file(dir.path())).unwrap();
    assert_eq!(wait(store.list()).unwrap().len(), 2);
    assert_eq!(ids_on_disk(dir.path()), ["ok", "new"]);
    let rejected = wait(store.rejected()).unwrap();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].job, bad);
}
