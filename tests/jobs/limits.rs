//! The bounds on scheduled jobs, with the real binary against the fakes: a guest's jobs are
//! capped per chat, in message size and in how often they run; the run of a guest's job cannot
//! schedule more jobs; in a group shared by an owner and a guest, the guest removes only the
//! jobs they created; `bub jobs list` names who created each job.

use serde_json::{Value, json};

use super::{jobs, schedule_runs};
use crate::support::bub_env::{Env, WAIT, stdout, texts};
use crate::support::fake_openai::tool_names;
use crate::support::fake_telegram::{group_text, private_text};
use crate::support::wait::wait_until;

/// The `tool.refused` events on every tape.
fn refusals(env: &Env) -> Vec<Value> {
    env.tape_entries()
        .into_iter()
        .filter(|e| e["kind"] == "event" && e["payload"]["name"] == "tool.refused")
        .map(|e| e["payload"]["data"].clone())
        .collect()
}

/// The tool results the model was sent in request `n`.
fn tool_results(env: &Env, n: usize) -> String {
    let messages = env.model.requests()[n]["messages"].clone();
    let results: Vec<Value> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect();
    serde_json::to_string(&results).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_gets_five_jobs_short_messages_and_no_frequent_runs() {
    let env = Env::new().await;
    let cron = |hour: u32| json!({"message": "standup", "cron": format!("0 {hour} * * *")});
    let mut calls = vec![
        (
            "schedule_add",
            json!({"message": "ping", "interval_seconds": 2}),
        ),
        (
            "schedule_add",
            json!({"message": "x".repeat(2000), "cron": "0 8 * * *"}),
        ),
    ];
    calls.extend((1..=6).map(|hour| ("schedule_add", cron(hour))));
    env.model.push_tool_calls(&calls);
    env.model.push_text("Scheduled what I could.");
    let daemon = env.start();
    // User 50 is a guest (everyone is admitted, as with `*`).
    env.telegram
        .push_message(private_text(50, 50, "schedule all of these"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["Scheduled what I could."]);
    assert!(daemon.stop().await.success());

    let stored = jobs(&env);
    assert_eq!(stored.len(), 5, "{stored:?}");
    assert!(stored.iter().all(|j| j["trigger"]["kind"] == "cron"));
    let results = tool_results(&env, 1);
    for refusal in [
        "this schedule runs 2 s apart; guests may schedule runs at most every 300 s (5m 0s)",
        "the job's message is 2000 bytes; guests may schedule messages of at most 1024 bytes",
        "this chat already has 5 scheduled jobs created by guests (the limit for guests); \
         remove one first (schedule.list, schedule.remove)",
    ] {
        assert!(results.contains(refusal), "{refusal:?} not in {results}");
    }
    let refused = refusals(&env);
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert!(
        refused
            .iter()
            .all(|r| r["tool"] == "schedule.add" && r["role"] == "guest")
    );

    // `bub jobs list` names who created each job.
    let listed = stdout(&env.run(&["jobs", "list"]).await);
    let rows: Vec<&str> = listed.lines().collect();
    assert_eq!(rows.len(), 5, "{listed}");
    assert!(
        rows.iter()
            .all(|r| r.contains("session=telegram:50 by=guest (telegram:50) ")),
        "{listed}"
    );
    let owners = stdout(
        &env.run(&[
            "run",
            "--session-id",
            "telegram:50",
            ",schedule.add after_seconds=600 message=x",
        ])
        .await,
    );
    assert!(
        owners.starts_with("scheduled: "),
        "the owner's jobs are counted apart: {owners}"
    );
    let listed = stdout(&env.run(&["jobs", "list"]).await);
    assert!(listed.contains(" by=owner (terminal) "), "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_of_a_guest_s_job_cannot_schedule_more_jobs() {
    let env = Env::new().await;
    let again = json!({"message": "do it again in a second", "after_seconds": 1});
    env.model
        .push_tool_calls(&[("schedule_add", again.clone())]);
    env.model.push_text("I will.");
    // The job's run tries to schedule itself again.
    env.model.push_tool_calls(&[("schedule_add", again)]);
    env.model.push_text("I could not schedule the next one.");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(50, 50, "remind me, and keep reminding me"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(
        texts(&sent),
        ["I will.", "I could not schedule the next one."]
    );
    wait_until(WAIT, "the run recorded and the job removed", || {
        schedule_runs(&env).len() == 1 && jobs(&env).is_empty()
    })
    .await;
    assert!(daemon.stop().await.success());

    assert!(jobs(&env).is_empty(), "no job scheduled by the run");
    let requests = env.model.requests();
    assert_eq!(requests.len(), 4);
    let offered = tool_names(&requests[2]);
    assert!(
        !offered.iter().any(|t| t == "schedule_add")
            && offered.iter().any(|t| t == "schedule_list"),
        "the run is not offered schedule.add: {offered:?}"
    );
    let refusal = "`schedule.add` is not allowed in the scheduled run of a guest's job";
    assert!(
        tool_results(&env, 3).contains(refusal),
        "{}",
        tool_results(&env, 3)
    );
    let refused = refusals(&env);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["tool"], "schedule.add");
    assert!(refused[0]["reason"].as_str().unwrap().starts_with(refusal));
}

/// The job id in a `scheduled: <id> next=…` answer.
fn scheduled_id(text: &str) -> String {
    text.strip_prefix("scheduled: ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("not scheduled: {text}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_shared_group_a_guest_removes_only_their_own_jobs() {
    let env = Env::new().await;
    let daemon = env.start();
    let group = -100;
    // User 42 is an owner, 50 a guest, in the same group.
    env.telegram.push_message(group_text(
        group,
        42,
        ",schedule.add cron='0 9 * * *' timezone=UTC message=standup",
    ));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let owners = scheduled_id(&texts(&sent)[0]);
    let before = std::fs::read(env.home.join("jobs.json")).unwrap();

    env.telegram.push_message(group_text(
        group,
        50,
        &format!(",schedule.remove job_id={owners}"),
    ));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(
        texts(&sent)[1],
        format!(
            "job {owners} was created by someone else; guests may remove only the jobs they \
             created"
        )
    );
    assert_eq!(
        std::fs::read(env.home.join("jobs.json")).unwrap(),
        before,
        "jobs.json unchanged"
    );

    // The guest's own job is theirs to remove.
    env.telegram.push_message(group_text(
        group,
        50,
        ",schedule.add cron='0 10 * * *' timezone=UTC message=mine",
    ));
    let sent = env.telegram.wait_for_calls("sendMessage", 3, WAIT).await;
    let theirs = scheduled_id(&texts(&sent)[2]);
    env.telegram.push_message(group_text(
        group,
        50,
        &format!(",schedule.remove job_id={theirs}"),
    ));
    let sent = env.telegram.wait_for_calls("sendMessage", 4, WAIT).await;
    assert_eq!(texts(&sent)[3], format!("removed: {theirs}"));
    assert!(daemon.stop().await.success());

    let left: Vec<Value> = jobs(&env).into_iter().map(|j| j["id"].clone()).collect();
    assert_eq!(left, [json!(owners)]);
    assert!(
        env.model.requests().is_empty(),
        "refusals need no model call"
    );
    let refused = refusals(&env);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["tool"], "schedule.remove");
}
