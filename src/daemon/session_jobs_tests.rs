//! Scheduled runs in the session actor (paused clock): a run waits behind the running turn
//! and is answered through the inbox; a refused or budget-skipped run runs no turn and sends
//! nothing; a session without a chat keeps the answer on its tape.

use tokio::sync::oneshot;

use super::*;

/// What the scheduler waits on.
type Waiting = oneshot::Receiver<Result<(), String>>;

/// A due run of job `j1` in `session`, journaled in `h`'s inbox.
async fn job(h: &Harness, session: &str, prompt: &str) -> (Mail, Waiting) {
    let mut run = JobRun {
        seq: 0,
        job: "j1".into(),
        session: session.into(),
        workspace: PathBuf::new(),
        due: chrono::Utc::now(),
        prompt: prompt.into(),
        creator: Authority::terminal(),
        interrupted: false,
        deliver_to: None,
        subagent: None,
        reports: None,
    };
    h.inbox.scheduled(&mut run).await.unwrap();
    let (done, outcome) = oneshot::channel();
    let run = ScheduledRun {
        run,
        done: Some(done),
    };
    (Mail::Job(run), outcome)
}

/// The `schedule.run` events the runner recorded.
fn schedule_runs(h: &Harness) -> Vec<serde_json::Value> {
    let events = h.runner.events.lock().unwrap();
    let runs = events.iter().filter(|(name, _)| name == "schedule.run");
    runs.map(|(_, data)| data.clone()).collect()
}

fn no_debounce() -> SessionConfig {
    let mut cfg = config();
    cfg.debounce = Duration::ZERO;
    cfg
}

#[tokio::test(start_paused = true)]
async fn a_job_waits_behind_the_running_turn_and_is_answered_through_the_inbox() {
    let mut h = harness_for("telegram:1", no_debounce(), FakeRunner::new(true));
    h.send("first", true).await;
    at(&h, 1.0).await;
    assert_eq!(h.runner.prompts().len(), 1, "the chat's turn is running");
    let (mail, outcome) = job(&h, "telegram:1", "[Scheduled run] stretch").await;
    h.tx.send(mail).await.unwrap();
    h.send("second", true).await;
    at(&h, 5.0).await;
    assert_eq!(
        h.runner.prompts().len(),
        1,
        "the job waits for the running turn"
    );
    assert_eq!(h.inbox.pending(), 3, "both journaled");

    h.runner.gate.as_ref().unwrap().add_permits(3);
    at(&h, 6.0).await;
    assert_eq!(
        h.runner.prompts(),
        [
            "channel: $fake\nfirst",
            "[Scheduled run] stretch",
            "channel: $fake\nsecond"
        ],
        "the job before the batch that came after it"
    );
    assert_eq!(h.runner.max_running.load(Ordering::SeqCst), 1);
    let sent = h.channel.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 3);
    assert_eq!(
        (sent[1].chat_id.as_str(), sent[1].reply_to.as_ref()),
        ("1", None)
    );
    assert_eq!(outcome.await.unwrap(), Ok(()));
    assert_eq!(h.inbox.pending(), 0, "answered and done");
    let runs = schedule_runs(&h);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["delivered"], true);
    assert_eq!(runs[0]["delivery"], "sent to telegram:1");
}

#[tokio::test(start_paused = true)]
async fn a_refused_job_runs_no_turn_and_sends_nothing() {
    let mut runner = FakeRunner::new(false);
    runner.refuse_jobs = Some("telegram:5 is no longer admitted".into());
    let h = harness_for("telegram:1", no_debounce(), runner);
    let (mail, outcome) = job(&h, "telegram:1", "stretch").await;
    h.tx.send(mail).await.unwrap();
    assert_eq!(
        outcome.await.unwrap(),
        Err("refused: telegram:5 is no longer admitted".into())
    );
    assert!(h.runner.prompts().is_empty());
    assert!(sent_texts(&h).is_empty());
    assert_eq!(h.inbox.pending(), 0);
    assert_eq!(
        schedule_runs(&h)[0]["refused"],
        "telegram:5 is no longer admitted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_over_budget_is_skipped_without_a_word_to_the_chat() {
    let mut runner = FakeRunner::new(false);
    runner.result.error = Some(TurnError::Budget("BUB_BUDGET_DAILY_TOKENS".into()));
    let h = harness_for("telegram:1", no_debounce(), runner);
    let (mail, outcome) = job(&h, "telegram:1", "stretch").await;
    h.tx.send(mail).await.unwrap();
    let status = outcome.await.unwrap().unwrap_err();
    assert!(status.starts_with("skipped: "), "{status}");
    assert!(sent_texts(&h).is_empty());
    assert_eq!(h.inbox.pending(), 0);
    assert!(schedule_runs(&h)[0]["skipped"].is_string());
}

#[tokio::test(start_paused = true)]
async fn a_job_in_a_session_without_a_chat_keeps_its_answer_on_the_tape() {
    let h = harness_for("cli", no_debounce(), FakeRunner::new(false));
    let (mail, outcome) = job(&h, "cli", "summarise the day").await;
    h.tx.send(mail).await.unwrap();
    assert_eq!(outcome.await.unwrap(), Ok(()));
    assert_eq!(h.runner.prompts(), ["summarise the day"]);
    assert!(sent_texts(&h).is_empty());
    assert_eq!(h.inbox.pending(), 0);
    let runs = schedule_runs(&h);
    assert_eq!(runs[0]["delivered"], true);
    assert_eq!(
        runs[0]["delivery"],
        "no channel for this session; the answer is on the tape"
    );
}

#[tokio::test(start_paused = true)]
async fn stop_cancels_a_running_job_and_the_scheduler_hears_of_it() {
    let mut h = harness_for("telegram:1", no_debounce(), FakeRunner::new(true));
    let (mail, outcome) = job(&h, "telegram:1", "a long job").await;
    h.tx.send(mail).await.unwrap();
    at(&h, 1.0).await;
    h.send(",stop", false).await;
    let status = outcome.await.unwrap_err();
    assert_eq!(
        status.to_string(),
        "channel closed",
        "the run's turn was dropped"
    );
    at(&h, 2.0).await;
    assert_eq!(sent_texts(&h), ["Stopped."]);
    assert_eq!(h.inbox.pending(), 0, "cancelled is done");
}
