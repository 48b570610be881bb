//! Nothing lost, nothing stuck: the real `bub message` binary against the fake Telegram and
//! model, killed (SIGKILL) or stopped (SIGTERM) at the moments that used to lose messages, and
//! the chat controls (`/stop`, `/new`, `/status`).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::bub_env::{Env, WAIT, texts};
use support::fake_telegram::private_text;

/// Queues a private message from user 42 with `message_id`; returns its update id.
fn push(env: &Env, message_id: i64, text: &str) -> i64 {
    let mut message: Value = private_text(42, 42, text).into();
    message["message_id"] = json!(message_id);
    env.telegram.push_update(json!({ "message": message }))
}

/// Every tape line of the environment, joined.
fn tapes(env: &Env) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(env.home.join("tapes")).unwrap() {
        all.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    all
}

/// Waits (bounded) until `check` holds, polling the file system every 20 ms.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_confirmed_message_survives_kill_9_and_is_answered_once() {
    let mut env = Env::new().await;
    env.set("BUB_MESSAGE_DEBOUNCE_SECONDS", "5");
    let daemon = env.start();
    let update = push(&env, 5, "remember the milk");
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
    assert!(tapes(&env).contains("remember the milk"));

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
    push(&env, 1, "first question");
    env.model.wait_for_requests(1, WAIT).await;
    let queued = push(&env, 2, "second question");
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
    assert!(prompt.contains("first question") && prompt.contains("second question"));
    assert!(daemon.stop().await.success());
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_daemon_per_home() {
    let env = Env::new().await;
    let first = env.start();
    env.telegram.wait_for_calls("getUpdates", 1, WAIT).await;
    let second = env.run(&["message"]).await;
    assert_eq!(second.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&second.stderr);
    let pid = first.child.id().unwrap().to_string();
    assert!(stderr.contains(&format!("pid {pid}")), "{stderr}");
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
    assert_eq!(names, ["stop", "new", "status"]);

    push(&env, 1, ",echo $$ > sleeper.pid; exec sleep 987");
    let pid_file = env.workspace.join("sleeper.pid");
    eventually("the command to start", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    })
    .await;
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    env.model.push_text("queued answer");
    push(&env, 2, "a question behind it");
    push(&env, 3, "/stop");
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent), ["Stopped.", "queued answer"]);
    eventually("the sleeper to die", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.contains(") Z "))
    })
    .await;
    assert!(tapes(&env).contains("\"turn.cancelled\""));
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn status_and_new_from_the_chat() {
    let env = Env::new().await;
    env.model.push_text("hello");
    let daemon = env.start();
    push(&env, 1, "hi");
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    // The turn ends once the delivery is recorded (a moment after Telegram has the answer).
    eventually("the first turn's end in the inbox", || {
        std::fs::read_to_string(env.home.join("inbox.jsonl"))
            .is_ok_and(|j| j.contains(r#""outcome":"sent""#))
    })
    .await;
    push(&env, 2, "/status");
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    let status = texts(&sent).pop().unwrap();
    assert!(status.contains("model: openai:test-model"), "{status}");
    assert!(status.contains("running: nothing"), "{status}");
    assert!(status.contains("jobs: none"), "{status}");
    push(&env, 3, "/new");
    let sent = env.telegram.wait_for_calls("sendMessage", 3, WAIT).await;
    assert!(
        texts(&sent)[2].starts_with("Started a fresh context"),
        "{:?}",
        texts(&sent)
    );
    assert!(tapes(&env).contains(r#""kind":"anchor","payload":{"name":"new""#));
    env.model.push_text("fresh");
    push(&env, 4, "again");
    env.telegram.wait_for_calls("sendMessage", 4, WAIT).await;
    let last = env.model.requests().pop().unwrap();
    let context = serde_json::to_string(&last["messages"]).unwrap();
    assert!(
        !context.contains("\"hi\""),
        "the old exchange left the context: {context}"
    );
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
    push(&env, 1, "are you there?");
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
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no daemon is running"),
        "{out:?}"
    );

    // A turn that fails (the model answers 400), then one that hangs with a message queued.
    env.model.push_raw(
        400,
        r#"{"error":{"message":"bad model"}}"#.into(),
        Vec::new(),
    );
    env.model.push_delay(Duration::from_secs(60));
    env.model.push_text("late");
    let daemon = env.start();
    push(&env, 1, "first");
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    push(&env, 2, "second");
    env.model.wait_for_requests(2, WAIT).await;
    push(&env, 3, "third");
    let mut shown = String::new();
    eventually("the queued message on the status", || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bub"))
            .env_clear()
            .envs(env.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(&env.workspace)
            .arg("status")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        shown = String::from_utf8_lossy(&out.stdout).to_string();
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
    let error = shown.lines().last().unwrap();
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
        !env.home.join("daemon.sock").exists(),
        "the socket goes with the daemon"
    );
    assert_eq!(env.run(&["status"]).await.status.code(), Some(1));
}
