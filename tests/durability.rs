//! Nothing lost, nothing stuck: the real `bub message` binary against the fake Telegram and
//! model, killed (SIGKILL) or stopped (SIGTERM) at the moments that used to lose messages, and
//! the chat controls (`/stop`, `/new`, `/status`).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::bub_env::{Env, WAIT, assert_exit, stderr, stdout, texts};
use support::fake_telegram::private_text;
use support::wait::wait_until;

/// Queues a private message from user 42; returns its update id.
fn push(env: &Env, text: &str) -> i64 {
    env.telegram.push_message_update(private_text(42, 42, text))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_confirmed_message_survives_kill_9_and_is_answered_once() {
    let mut env = Env::new().await;
    env.set("BUB_MESSAGE_DEBOUNCE_SECONDS", "5");
    let daemon = env.start();
    let update = push(&env, "remember the milk");
    // Telegram was told: the next getUpdates carries a higher offset.
    env.telegram.wait_for_confirmed(update, WAIT).await;
    daemon.kill().await;
    assert!(env.telegram.calls_of("sendMessage").is_empty());
    assert_eq!(env.model.request_count(), 0, "killed while debouncing");

    env.model.push_text("noted: milk");
    let daemon = env.start();
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["noted: milk"]);
    assert!(env.model_prompts()[0].contains("remember the milk"));
    assert!(daemon.stop().await.success());
    assert_eq!(
        env.telegram.calls_of("sendMessage").len(),
        1,
        "answered once"
    );
    assert_eq!(env.model.request_count(), 1);
    assert!(env.tape_text().contains("remember the milk"));

    // A third start has nothing left to do.
    let daemon = env.start();
    env.telegram
        .wait_until(WAIT, "a long poll", |f| {
            (f.calls_of("getUpdates").len() > 4).then_some(())
        })
        .await;
    assert!(daemon.stop().await.success());
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_leaves_the_running_and_the_queued_message_for_the_next_start() {
    let env = Env::new().await;
    env.model.push_delay(Duration::from_secs(30));
    env.model.push_text("too late");
    let daemon = env.start();
    push(&env, "first question");
    env.model.wait_for_requests(1, WAIT).await;
    let queued = push(&env, "second question");
    env.telegram.wait_for_confirmed(queued, WAIT).await;
    let asked = Instant::now();
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{log}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert!(env.telegram.calls_of("sendMessage").is_empty());

    env.model.push_text("both answered");
    let daemon = env.start();
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["both answered"]);
    let prompt = env.model_prompts().pop().unwrap();
    assert!(
        prompt.contains("previous attempt was interrupted"),
        "{prompt}"
    );
    assert!(
        prompt.contains("first question") && prompt.contains("second question"),
        "{prompt}"
    );
    assert!(daemon.stop().await.success());
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_daemon_per_home() {
    let env = Env::new().await;
    let first = env.start();
    env.telegram.wait_for_calls("getUpdates", 1, WAIT).await;
    let second = env.run(&["message"]).await;
    let pid = first.child.id().unwrap();
    assert_exit(&second, 2, &format!("pid {pid}"));
    assert!(first.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_from_the_chat_kills_the_running_command_and_keeps_the_queue() {
    let env = Env::new().await;
    let daemon = env.start();
    let commands = env.telegram.wait_for_calls("setMyCommands", 1, WAIT).await;
    let names: Vec<&str> = commands[0].body["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["stop", "new", "status", "usage", "model"]);

    push(&env, ",echo $$ > sleeper.pid; exec sleep 987");
    let pid_file = env.workspace.join("sleeper.pid");
    wait_until(WAIT, "the command to start", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    })
    .await;
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    env.model.push_text("queued answer");
    push(&env, "a question behind it");
    push(&env, "/stop");
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent), ["Stopped.", "queued answer"]);
    wait_until(WAIT, "the sleeper to die", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.contains(") Z "))
    })
    .await;
    assert!(env.tape_text().contains("\"turn.cancelled\""));
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn status_and_new_from_the_chat() {
    let env = Env::new().await;
    env.model.push_text("hello");
    let daemon = env.start();
    push(&env, "remember: answer in French");
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    // The turn ends once the delivery is recorded (a moment after Telegram has the answer).
    wait_until(WAIT, "the first turn's end in the inbox", || {
        env.inbox_text().contains(r#""outcome":"sent""#)
    })
    .await;
    push(&env, "/status");
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    let status = texts(&sent).pop().unwrap();
    assert!(status.contains("model: openai:test-model"), "{status}");
    assert!(status.contains("running: nothing"), "{status}");
    assert!(status.contains("jobs: none"), "{status}");
    push(&env, "/new");
    let sent = env.telegram.wait_for_calls("sendMessage", 3, WAIT).await;
    assert!(
        texts(&sent)[2].starts_with("Started a fresh context"),
        "{:?}",
        texts(&sent)
    );
    assert!(
        env.tape_text()
            .contains(r#""kind":"anchor","payload":{"name":"new""#)
    );
    env.model.push_text("fresh");
    push(&env, "again");
    env.telegram.wait_for_calls("sendMessage", 4, WAIT).await;
    let last = env.model.requests().pop().unwrap();
    let messages = last["messages"].as_array().unwrap();
    let context = serde_json::to_string(&messages[1..]).unwrap();
    assert!(
        !context.contains("answer in French"),
        "the old exchange left the context: {context}"
    );
    // What the chat asked to remember outlives the fresh context.
    let system = messages[0]["content"].as_str().unwrap();
    assert!(system.contains("- answer in French"), "{system}");
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_telegram_outage_delays_the_answer_but_does_not_lose_it() {
    let env = Env::new().await;
    env.model.push_text("made it");
    let body = json!({"ok": false, "error_code": 502, "description": "Bad Gateway"});
    env.telegram.fail_next("sendMessage", 502, body.clone());
    env.telegram.fail_next("sendMessage", 502, body);
    let daemon = env.start();
    push(&env, "are you there?");
    let sent = env
        .telegram
        .wait_for_calls("sendMessage", 3, Duration::from_secs(60))
        .await;
    assert_eq!(texts(&sent)[2], "made it");
    assert!(daemon.stop().await.success());
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn bub_status_shows_the_running_daemon_and_exits_1_without_one() {
    let env = Env::new().await;
    let out = env.run(&["status"]).await;
    assert_exit(&out, 1, "no daemon is running");

    // A turn that fails (the model answers 400), then one that hangs with a message queued.
    env.model.push_raw(
        400,
        r#"{"error":{"message":"bad model"}}"#.into(),
        Vec::new(),
    );
    env.model.push_delay(Duration::from_secs(60));
    env.model.push_text("late");
    let daemon = env.start();
    push(&env, "first");
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    push(&env, "second");
    env.model.wait_for_requests(2, WAIT).await;
    push(&env, "third");
    let mut shown = String::new();
    wait_until(WAIT, "the queued message on the status", || {
        let out = env.std_command(&["status"]).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        shown = stdout(&out);
        shown.contains("queued 1 message(s)")
    })
    .await;
    assert!(shown.contains("model: openai:test-model"), "{shown}");
    assert!(shown.contains("channels: telegram"), "{shown}");
    assert!(
        shown.contains("sessions: 1 live, 1 running, 1 queued"),
        "{shown}"
    );
    assert!(
        shown.contains("telegram:42  running an answer to 1 message(s) for "),
        "{shown}"
    );
    assert!(shown.contains("last errors (newest first):"), "{shown}");
    let mut lines = shown.lines();
    let error = lines
        .find(|l| l.starts_with("last errors"))
        .and_then(|_| lines.next())
        .unwrap();
    assert!(
        error.contains("telegram:42  ") && error.contains("bad model"),
        "{shown}"
    );
    assert!(!shown.contains("sk-test-secret"), "{shown}");

    let out = env.run(&["status", "--json"]).await;
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["sessions"][0]["session"], "telegram:42");
    assert_eq!(json["errors"].as_array().unwrap().len(), 1);

    assert!(daemon.stop().await.success());
    assert!(
        !env.home.join("daemon.sock").exists() && !env.home.join("daemon.token").exists(),
        "the socket and its token go with the daemon"
    );
    assert_eq!(env.run(&["status"]).await.status.code(), Some(1));
}
