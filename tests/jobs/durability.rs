//! Scheduled jobs on the delivery ledger, with the real binary: a job's run is journaled
//! before its turn, so a SIGKILL in the middle of the turn is answered once after the restart
//! (`bub message`); a SIGKILL after part of the answer was accepted sends only the rest
//! (`bub idle`); and a job that comes due while its chat's turn runs waits for that turn.

use std::time::Duration;

use super::{add_job, jobs, schedule_runs};
use crate::support::bub_env::{Env, WAIT, texts};
use crate::support::fake_telegram::{self, private_text};
use crate::support::wait::wait_until;

#[tokio::test(flavor = "multi_thread")]
async fn a_job_killed_in_its_turn_is_answered_once_after_the_restart() {
    let env = Env::new().await;
    add_job(
        &env,
        "telegram:42",
        "after_seconds=1 message='water the plants'",
    )
    .await;
    // The job's first model call does not answer before the kill.
    env.model.push_delay(Duration::from_secs(60));
    env.model.push_text("(too late)");
    env.model.push_text("Time to water the plants.");
    let daemon = env.start();
    env.model.wait_for_requests(1, WAIT).await;
    daemon.kill().await;
    assert!(env.telegram.calls_of("sendMessage").is_empty());
    let journal = env.inbox_text();
    assert!(
        journal.contains(r#"{"op":"job","seq":1,"#)
            && journal.contains(r#"{"op":"start","seqs":[1]}"#),
        "journaled before its turn:\n{journal}"
    );

    let daemon = env.start();
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["Time to water the plants."]);
    assert_eq!(sent[0].body["chat_id"], 42);
    wait_until(WAIT, "the run recorded and done", || {
        schedule_runs(&env).len() == 1
            && env
                .inbox_text()
                .contains(r#"{"op":"done","seqs":[1],"outcome":"sent"}"#)
    })
    .await;
    assert!(daemon.stop().await.success());
    assert_eq!(
        env.telegram.calls_of("sendMessage").len(),
        1,
        "exactly once"
    );
    let prompts = env.model_prompts();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert!(
        prompts[1].contains("the previous attempt was interrupted")
            && prompts[1].ends_with("water the plants"),
        "{}",
        prompts[1]
    );
    assert!(jobs(&env).is_empty(), "the scheduler did not fire it again");
    assert_eq!(schedule_runs(&env)[0]["delivered"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_the_first_part_of_a_job_s_answer_idle_sends_only_the_rest() {
    let mut env = Env::new().await;
    add_job(
        &env,
        "telegram:42",
        "after_seconds=1 message='the weekly report'",
    )
    .await;
    let whole = crate::support::long_answer(6);
    env.model.push_text(whole.clone());
    // Telegram accepts the first part and never answers the second.
    env.telegram.stall_after("sendMessage", 1);
    let idle = env.spawn(&["idle"]);
    env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    idle.kill().await;
    let first = texts(&env.telegram.delivered());
    assert_eq!(first.len(), 1);
    let journal = env.inbox_text();
    assert!(
        journal.contains(r#"{"op":"sent","seqs":[1],"parts":1}"#),
        "{journal}"
    );

    env.telegram = fake_telegram::start().await;
    let api_base = env.telegram.api_base();
    env.set("BUB_TELEGRAM_API_BASE", &api_base);
    let idle = env.spawn(&["idle"]);
    wait_until(WAIT, "the delivery done", || {
        env.inbox_text()
            .contains(r#"{"op":"done","seqs":[1],"outcome":"sent"}"#)
    })
    .await;
    assert!(idle.stop().await.success());
    let rest = env.telegram.calls_of("sendMessage");
    assert_eq!(rest.len(), 1, "only the second part");
    assert_eq!([first, texts(&rest)].concat().join("\n\n"), whole);
    assert_eq!(env.model.request_count(), 1, "delivered, not run again");
    assert!(env.telegram.calls_of("getUpdates").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_due_during_its_chat_s_turn_waits_for_that_turn() {
    let env = Env::new().await;
    let hold = env.model.push_hold();
    env.model.push_text("Here is my answer.");
    env.model.push_text("Reminder: stretch.");
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "what should I do?"));
    env.model.wait_for_requests(1, WAIT).await;
    // While the chat's turn waits for the model, a job of that chat comes due.
    add_job(&env, "telegram:42", "after_seconds=1 message='stretch'").await;
    daemon.wait_for_log("session.job.queued").await;
    assert!(
        daemon.log().contains("running=true"),
        "queued behind the running turn:\n{}",
        daemon.log()
    );
    assert_eq!(
        env.model.request_count(),
        1,
        "the job's turn has not started"
    );

    hold.release();
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert!(daemon.stop().await.success());
    assert_eq!(texts(&sent), ["Here is my answer.", "Reminder: stretch."]);
    let prompts = env.model_prompts();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert!(prompts[0].contains("what should I do?"), "{prompts:?}");
    assert!(prompts[1].ends_with("\nstretch"), "{prompts:?}");
    assert_eq!(env.model.max_in_flight(), 1, "never two turns at once");
}
