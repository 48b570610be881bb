//! End-to-end tests of scheduled jobs with the real binary: a job added through a model tool call
//! fires in `bub message` and its answer reaches the Telegram chat; `bub idle` fires jobs with
//! send-only clients (no polling); a job survives a restart and fires once even with two
//! processes on one BUB_HOME (`bub idle` beside `bub message` stands by, and when it takes
//! over it does not fire the job again); sessions
//! only see their own jobs; `bub jobs` lists all of them, and the jobs set aside because they
//! cannot run, with the reason. The bounds on guests' jobs are in `jobs/limits.rs`; crashes in
//! the middle of a job and jobs beside a chat's turns in `jobs/durability.rs`.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::bub_env::{Env, WAIT, assert_exit, stderr, stdout, texts};
use support::fake_telegram::private_text;
use support::wait::wait_until;

#[path = "jobs/durability.rs"]
mod durability;
#[path = "jobs/limits.rs"]
mod limits;

/// Every `schedule.run` event on every tape (a line still being written is skipped).
pub(crate) fn schedule_runs(env: &Env) -> Vec<Value> {
    env.tape_text()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["kind"] == "event" && e["payload"]["name"] == "schedule.run")
        .map(|e| e["payload"]["data"].clone())
        .collect()
}

/// The jobs in `jobs.json`.
pub(crate) fn jobs(env: &Env) -> Vec<Value> {
    env.jobs()["jobs"].as_array().unwrap().clone()
}

/// Adds a job to `session` with a comma command through `bub run` (no model call).
pub(crate) async fn add_job(env: &Env, session: &str, args: &str) -> String {
    let out = env
        .run(&[
            "run",
            "--session-id",
            session,
            &format!(",schedule.add {args}"),
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let id = text
        .trim()
        .strip_prefix("scheduled: ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected output: {text}"));
    id.to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_added_by_the_model_fires_in_the_daemon_and_reaches_the_chat() {
    let env = Env::new().await;
    env.model.push_tool_calls(&[(
        "schedule_add",
        json!({"message": "remind Ann to stretch", "after_seconds": 1}),
    )]);
    env.model.push_text("I will remind you in a second.");
    env.model.push_text("Time to **stretch**, Ann!");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(42, 42, "remind me to stretch in a second"));

    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(
        texts(&sent),
        [
            "I will remind you in a second.",
            "Time to <b>stretch</b>, Ann!"
        ]
    );
    assert_eq!(sent[1].body["chat_id"], 42);
    let prompts = env.model_prompts();
    assert_eq!(prompts.len(), 3, "{prompts:?}");
    assert!(
        prompts[2].starts_with("[Scheduled run of job ")
            && prompts[2].ends_with("\nremind Ann to stretch"),
        "{}",
        prompts[2]
    );
    // The run and its delivery are on the session's tape; the one-shot job is gone.
    wait_until(WAIT, "the run recorded and the job removed", || {
        !schedule_runs(&env).is_empty() && jobs(&env).is_empty()
    })
    .await;
    let runs = schedule_runs(&env);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["delivered"], true);
    assert_eq!(runs[0]["delivery"], "sent to telegram:42");
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_fires_jobs_and_delivers_without_polling() {
    let env = Env::new().await;
    let id = add_job(&env, "telegram:7", "after_seconds=1 message='say pong'").await;
    let listed = stdout(&env.run(&["jobs", "list"]).await);
    assert!(
        listed.contains(&id)
            && listed.contains("session=telegram:7")
            && listed.contains("msg=say pong"),
        "{listed}"
    );
    env.model.push_text("pong");
    let idle = env.spawn(&["idle"]);
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0].body["chat_id"], 7);
    assert_eq!(texts(&sent), ["pong"]);
    assert!(idle.stop().await.success());
    assert!(
        env.telegram.calls_of("getUpdates").is_empty(),
        "bub idle never polls for messages"
    );
    assert_eq!(env.model.request_count(), 1, "one turn, for the job");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_survives_a_restart_and_fires_once_with_two_processes() {
    let env = Env::new().await;
    add_job(&env, "telegram:9", "after_seconds=3 message='once only'").await;
    // The first owner stops before the job is due.
    let first = env.spawn(&["idle"]);
    first.wait_for_log("scheduler.owner").await;
    assert!(first.stop().await.success());
    assert!(env.telegram.calls_of("sendMessage").is_empty());
    // After the restart, `bub message` and a `bub idle` beside it on the same BUB_HOME: one
    // process writes the inbox and runs the jobs; the idle one stands by.
    env.model.push_text("done once");
    env.model.push_text("a second firing would say this");
    let daemon = env.start();
    daemon.wait_for_log("scheduler.owner").await;
    let standby = env.spawn(&["idle"]);
    standby.wait_for_log("idle.standby").await;
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["done once"]);
    wait_until(WAIT, "the run recorded and the job removed", || {
        schedule_runs(&env).len() == 1 && jobs(&env).is_empty()
    })
    .await;
    // Once the daemon stops, the standby takes over (it retries every 5 s) and finds nothing
    // left to fire; a `bub message` started now is refused, naming it.
    assert!(daemon.stop().await.success());
    standby.wait_for_log("scheduler.owner").await;
    let refused = env.run(&["message"]).await;
    let pid = standby.child.id().unwrap();
    assert_exit(
        &refused,
        2,
        &format!("another `bub message` or `bub idle` (pid {pid}) is serving BUB_HOME"),
    );
    // Deliberately idle: a second firing by the new owner would reach the model within this.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, log) = standby.stop_with_log().await;
    assert!(status.success());
    assert!(
        !log.contains("scheduler.fire"),
        "the standby fired nothing:\n{log}"
    );
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 1);
    assert_eq!(env.model.request_count(), 1);
    assert_eq!(schedule_runs(&env).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_see_and_remove_only_their_own_jobs() {
    let env = Env::new().await;
    let id = add_job(
        &env,
        "telegram:1",
        "cron='0 9 * * *' timezone=UTC message=standup",
    )
    .await;
    let own = stdout(
        &env.run(&["run", "--session-id", "telegram:1", ",schedule.list"])
            .await,
    );
    assert!(
        own.contains(&id) && own.contains("cron '0 9 * * *' (UTC)"),
        "{own}"
    );
    let other = stdout(
        &env.run(&["run", "--session-id", "telegram:2", ",schedule.list"])
            .await,
    );
    assert_eq!(other.trim(), "(no scheduled jobs)");

    // Another session cannot remove it (the failed command falls back to the model).
    env.model.push_text("That job is not yours.");
    let out = env
        .run(&[
            "run",
            "--session-id",
            "telegram:2",
            &format!(",schedule.remove job_id={id}"),
        ])
        .await;
    let prompt = &env.model_prompts()[0];
    assert!(prompt.contains(&format!("job not found: {id}")), "{prompt}");
    assert!(out.status.success());
    assert_eq!(jobs(&env).len(), 1);

    let out = env
        .run(&[
            "run",
            "--session-id",
            "telegram:1",
            &format!(",schedule.remove job_id={id}"),
        ])
        .await;
    assert_eq!(stdout(&out).trim(), format!("removed: {id}"));
    assert!(jobs(&env).is_empty());

    // `bub jobs` works across sessions; removing an unknown id fails.
    let id = add_job(&env, "discord:5", "interval_seconds=3600 message=hourly").await;
    let out = env.run(&["jobs", "remove", &id]).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), format!("removed: {id}"));
    let out = env.run(&["jobs", "remove", &id]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("job not found"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_list_shows_the_valid_jobs_and_why_a_bad_one_was_set_aside() {
    let env = Env::new().await;
    std::fs::create_dir_all(&env.home).unwrap();
    let job = |id: &str, trigger: Value| {
        json!({
            "id": id,
            "session": "telegram:1",
            "message": format!("confidential plans {id}"),
            "workspace": env.workspace,
            "trigger": trigger,
            "created": "2026-01-01T00:00:00Z",
            "next_run": "2099-01-01T09:00:00Z",
        })
    };
    // Written by hand, as a person editing jobs.json would.
    let file = json!({"version": 1, "jobs": [
        job("good1", json!({"kind": "cron", "expr": "0 9 * * *", "timezone": "UTC"})),
        job("late1", json!({"kind": "once", "at": "tomorrow"})),
    ]});
    std::fs::write(
        env.home.join("jobs.json"),
        serde_json::to_string_pretty(&file).unwrap(),
    )
    .unwrap();

    let out = env.run(&["jobs", "list"]).await;
    let (listed, log) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{listed}\n{log}");
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines[0].starts_with("good1 ") && lines[0].contains("session=telegram:1"),
        "{listed}"
    );
    let rejected_file = env.home.join("jobs.rejected.json");
    assert_eq!(
        lines[1],
        format!(
            "rejected late1 trigger.at: \"tomorrow\" is not an RFC 3339 time (e.g. \
             2026-12-24T18:00:00Z) (set aside in {})",
            rejected_file.display()
        )
    );
    assert!(
        log.contains("scheduler.store.rejected") && log.contains("late1"),
        "{log}"
    );
    assert!(
        !log.contains("confidential"),
        "no message text in logs: {log}"
    );
    assert_eq!(jobs(&env).len(), 1);

    // Listing again: the same, no duplicate rejection, nothing new logged.
    let again = env.run(&["jobs", "list"]).await;
    assert!(again.status.success());
    assert_eq!(stdout(&again), listed);
    assert!(again.stderr.is_empty(), "{}", stderr(&again));
}
