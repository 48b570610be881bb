//! Proactive messaging with the real binary: `message.send` through the fake Telegram and the
//! fake Discord, no duplicate final reply after the agent answered with `message.send`, and
//! `bub send` (delivery, stdin, exit codes).

use crate::support;

use std::process::Stdio;

use serde_json::json;
use support::bub_env::{Env, WAIT, assert_exit, stderr, stdout, texts};
use support::fake_discord;
use support::fake_telegram::{self, private_text};
use support::wait::bounded;
use tokio::io::AsyncWriteExt;

#[tokio::test(flavor = "multi_thread")]
async fn message_send_reaches_telegram_and_discord_chats() {
    let mut env = Env::new().await;
    let discord = fake_discord::start().await;
    env.set("BUB_DISCORD_TOKEN", "MTIz.discord.test-token");
    env.set("BUB_DISCORD_API_BASE", &discord.api_base());
    // Defaults to this session's chat; the channel need not be enabled, its token is enough.
    env.set("BUB_TELEGRAM_ENABLED", "false");
    let out = env
        .run(&[
            "run",
            "--session-id",
            "telegram:42",
            ",message.send text='**done**'",
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "sent to telegram:42");
    let sent = env.telegram.calls_of("sendMessage");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["chat_id"], 42);
    assert_eq!(sent[0].body["text"], "<b>done</b>");

    let out = env
        .run(&[
            "run",
            "--session-id",
            "telegram:42",
            ",message.send channel=discord chat_id=777 reply_to=555 text='hi discord'",
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let posted = discord.wait_for_posts(1, WAIT).await;
    assert_eq!(posted[0].content(), "hi discord");
    assert_eq!(posted[0].reply_to(), Some("555"));
    assert_eq!(
        discord
            .requests_to("POST", "/api/v10/channels/777/messages")
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_sent_with_message_send_is_not_posted_again() {
    let env = Env::new().await;
    env.model
        .push_tool_calls(&[("message_send", json!({"text": "Here is the report."}))]);
    env.model.push_text("Here is the report.");
    // A second message in the same chat: a normal answer is posted again as usual.
    env.model.push_text("Anything else?");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(42, 42, "send me the report"));
    let first = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&first), ["Here is the report."]);
    env.telegram.push_message(private_text(42, 42, "thanks"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(
        texts(&sent),
        ["Here is the report.", "Anything else?"],
        "the turn that used message.send posted nothing else"
    );
    assert!(daemon.stop().await.success());
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn bub_send_delivers_and_reports_failures_with_exit_codes() {
    let mut env = Env::new().await;
    let out = env
        .run(&["send", "telegram", "42", "Hello *there*", "--reply-to", "7"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let sent = env.telegram.calls_of("sendMessage");
    assert_eq!(sent[0].body["text"], "Hello <i>there</i>");
    assert_eq!(sent[0].body["reply_parameters"]["message_id"], 7);

    // TEXT `-` reads stdin; a long text is split like the daemon's answers.
    let long = "word ".repeat(1200);
    let mut cmd = env.command(&["send", "telegram", "42", "-"]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(long.as_bytes())
        .await
        .unwrap();
    let out = bounded(child.wait_with_output()).await.unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let sent = env.telegram.calls_of("sendMessage");
    assert_eq!(sent.len(), 3, "6000 characters → two messages");
    let joined: String = texts(&sent[1..]).join(" ");
    assert_eq!(joined.split_whitespace().count(), 1200, "nothing lost");

    // Telegram refuses: exit 1 with the reason, the token not shown.
    env.telegram
        .fail_next("SendMessage", 400, fake_telegram::chat_not_found_body());
    let out = env.run(&["send", "telegram", "404", "anyone?"]).await;
    assert_exit(&out, 1, "chat not found");
    assert!(!stderr(&out).contains(fake_telegram::TOKEN));

    // Bad channel and missing token: configuration errors, exit 2, naming what is wrong.
    let out = env.run(&["send", "slack", "1", "hi"]).await;
    assert_exit(&out, 2, "unknown channel");
    let out = env.run(&["send", "discord", "1", "hi"]).await;
    assert_exit(&out, 2, "BUB_DISCORD_TOKEN");
    env.set("BUB_TELEGRAM_TOKEN", "");
    let out = env.run(&["send", "telegram", "1", "hi"]).await;
    assert_exit(&out, 2, "BUB_TELEGRAM_TOKEN");
}
