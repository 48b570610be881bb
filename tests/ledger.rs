//! Every send on the delivery ledger, with the real binary killed (SIGKILL) at the moment that
//! used to repeat or strand a message: right after a `message.send` to another chat (not sent
//! again after the restart), while one was unconfirmed (sent once), during a streamed answer
//! (the chat ends with one message holding the final answer), and `bub send --id` killed,
//! failed and run again (never twice, nothing lost).

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::bub_env::{Env, WAIT, assert_exit, stderr, texts};
use support::fake_openai::StreamStyle;
use support::fake_telegram::{self, private_text};
use support::wait::{bounded, wait_until};

/// The `sendMessage` calls of the fake Telegram to `chat`.
fn sent_to(env: &Env, chat: i64) -> Vec<support::fake_telegram::Call> {
    let calls = env.telegram.calls_of("sendMessage");
    calls
        .into_iter()
        .filter(|c| c.body["chat_id"] == chat)
        .collect()
}

/// The tool results the model was sent in its last request.
fn last_tool_results(env: &Env) -> Vec<String> {
    let requests = env.model.requests();
    let messages = requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn send_to_7() -> [(&'static str, Value); 1] {
    [(
        "message_send",
        json!({"channel": "telegram", "chat_id": "7", "text": "The build is green."}),
    )]
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_right_after_a_message_send_to_another_chat_the_restart_does_not_send_it_again() {
    let env = Env::new().await;
    env.model.push_tool_calls(&send_to_7());
    // The model's next call never answers: the daemon dies in the middle of the turn.
    env.model.push_delay(Duration::from_secs(120));
    env.model.push_text("never seen");
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "tell chat 7 the build is green"));
    env.model.wait_for_requests(2, WAIT).await;
    assert_eq!(texts(&sent_to(&env, 7)), ["The build is green."]);
    assert!(
        env.inbox_text().contains(r#""op":"send_done""#),
        "accepted, recorded: {}",
        env.inbox_text()
    );
    daemon.kill().await;

    // The turn runs again after the restart, and the model sends the same message again.
    env.model.push_tool_calls(&send_to_7());
    env.model.push_text("Told chat 7.");
    let daemon = env.start();
    env.wait_for_chat_text("Told chat 7.").await;
    assert!(daemon.stop().await.success());
    assert_eq!(sent_to(&env, 7).len(), 1, "chat 7 got it exactly once");
    let told = last_tool_results(&env);
    assert!(
        told.iter().any(|t| t.contains(
            "already sent to telegram:7 before a restart interrupted this turn: not sent again"
        )),
        "{told:?}"
    );
    assert_eq!(env.model.request_count(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_while_a_message_send_was_unconfirmed_the_restart_sends_it_once() {
    let mut env = Env::new().await;
    env.model.push_tool_calls(&send_to_7());
    // Telegram takes the send and never answers.
    env.telegram
        .stall_for("sendMessage", Duration::from_secs(120));
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "tell chat 7 the build is green"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    daemon.kill().await;
    assert!(env.telegram.delivered().is_empty());
    let journal = env.inbox_text();
    assert!(journal.contains(r#""op":"send","seqs":[1]"#), "{journal}");
    assert!(!journal.contains("send_done"), "{journal}");

    // Telegram is back: the turn runs again and its identical send goes out, once.
    env.telegram = fake_telegram::start().await;
    let api_base = env.telegram.api_base();
    env.set("BUB_TELEGRAM_API_BASE", &api_base);
    env.model.push_tool_calls(&send_to_7());
    env.model.push_text("Told chat 7.");
    let daemon = env.start();
    env.wait_for_chat_text("Told chat 7.").await;
    assert!(daemon.stop().await.success());
    assert_eq!(texts(&sent_to(&env, 7)), ["The build is green."]);
    assert!(
        last_tool_results(&env)
            .iter()
            .any(|t| t == "sent to telegram:7"),
        "{:?}",
        last_tool_results(&env)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_during_a_streamed_answer_the_chat_ends_with_one_message_holding_the_answer() {
    const FINAL: &str = "The notes say: buy milk, call Ann.";
    let mut env = Env::new().await;
    env.set("BUB_STREAM", "edits");
    env.model.set_stream_style(StreamStyle {
        pieces_per_event: 1,
        pause: Duration::from_millis(50),
        ..StreamStyle::default()
    });
    std::fs::write(env.workspace.join("notes.txt"), "buy milk, call Ann").unwrap();
    env.model.push_text_and_tool_calls(
        "Let me read your notes.",
        &[("fs_read", json!({"path": "notes.txt"}))],
    );
    env.model.push_delay(Duration::from_secs(120));
    env.model.push_text("never seen");
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "what do my notes say?"));
    env.model.wait_for_requests(2, WAIT).await;
    // The live message is posted and on the ledger before the turn ends.
    wait_until(WAIT, "the live message recorded", || {
        env.inbox_text().contains(r#""op":"live""#)
    })
    .await;
    daemon.kill().await;
    let posted = env.telegram.calls_of("sendMessage");
    assert_eq!(posted.len(), 1, "the partial answer: {:?}", texts(&posted));
    let journal = env.inbox_text();
    let live: Value = journal
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["op"] == "live")
        .unwrap();
    let id: i64 = live["id"].as_str().unwrap().parse().unwrap();
    // What was streamed so far (edits come at most once a second).
    let partial = env.telegram.current_text(id).unwrap();
    assert!(partial.starts_with("Let"), "{partial:?}");

    // The restart runs the turn again in that message: the final answer replaces the partial
    // one, and nothing else is posted.
    env.model.push_text(FINAL);
    let daemon = env.start();
    wait_until(WAIT, "the turn done", || {
        env.inbox_text()
            .contains(r#"{"op":"done","seqs":[1],"outcome":"sent"}"#)
    })
    .await;
    assert!(daemon.stop().await.success());
    assert_eq!(
        env.telegram.calls_of("sendMessage").len(),
        1,
        "no second copy"
    );
    assert_eq!(env.telegram.current_text(id).as_deref(), Some(FINAL));
    let edits = env.telegram.calls_of("editMessageText");
    assert!(
        edits.iter().all(|c| c.body["message_id"] == id),
        "one message"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bub_send_with_an_id_never_sends_twice_and_loses_nothing() {
    let mut env = Env::new().await;
    // A text of two Telegram messages; Telegram accepts the first and never answers the second.
    let long = format!("{}\n\n{}", "a".repeat(3000), "b".repeat(3000));
    env.telegram.stall_after("sendMessage", 1);
    let mut killed = env.command(&["send", "telegram", "42", &long, "--id", "report-1"]);
    killed.stderr(std::process::Stdio::null());
    let mut killed = killed.spawn().unwrap();
    env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    killed.start_kill().unwrap();
    bounded(killed.wait()).await.unwrap();
    assert_eq!(texts(&env.telegram.delivered()), ["a".repeat(3000)]);

    // Run again with the same key: only the part Telegram had not accepted.
    env.telegram = fake_telegram::start().await;
    let api_base = env.telegram.api_base();
    env.set("BUB_TELEGRAM_API_BASE", &api_base);
    let out = env
        .run(&["send", "telegram", "42", &long, "--id", "report-1"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        texts(&env.telegram.calls_of("sendMessage")),
        ["b".repeat(3000)]
    );
    // And again: sent before, nothing sent, exit 0.
    let out = env
        .run(&["send", "telegram", "42", &long, "--id", "report-1"])
        .await;
    assert_exit(&out, 0, "--id report-1: sent before");
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 1);

    // A failure is exit 1 and loses nothing: the same key sends it once Telegram takes it.
    env.telegram
        .fail_next("SendMessage", 400, fake_telegram::chat_not_found_body());
    let out = env
        .run(&["send", "telegram", "42", "backup done", "--id", "b-1"])
        .await;
    assert_exit(&out, 1, "chat not found");
    let out = env
        .run(&["send", "telegram", "42", "backup done", "--id", "b-1"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        texts(&env.telegram.delivered()),
        ["b".repeat(3000), "backup done".to_owned()]
    );

    // The key of another message: a usage error, nothing sent.
    let out = env
        .run(&["send", "telegram", "42", "other", "--id", "b-1"])
        .await;
    assert_exit(&out, 2, "--id b-1: already used for another message");
    // Without a key, each run is a message of its own.
    for _ in 0..2 {
        let out = env.run(&["send", "telegram", "42", "ping"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(env.telegram.delivered().len(), 4);
}
