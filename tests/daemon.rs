//! End-to-end tests of `bub message`: the real binary with the real teloxide (and serenity)
//! clients against the fake Telegram / Discord servers and the fake model on 127.0.0.1.
//! Assertions are on what crossed the wire and what is on disk.

use crate::support;

use std::time::Duration;

use support::bub_env::{Env, WAIT, texts};
use support::fake_discord::{self, Msg};
use support::fake_telegram::{self, group_text, private_text};

#[tokio::test(flavor = "multi_thread")]
async fn private_message_is_answered_once_and_recorded() {
    let env = Env::new().await;
    // A slow answer: the typing indicator shows while the turn runs.
    env.model.push_delay(Duration::from_millis(300));
    env.model.push_text("Hello **Ann**!");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(42, 42, "hi, I am Ann"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0].body["chat_id"], 42);
    assert_eq!(sent[0].body["text"], "Hello <b>Ann</b>!");
    assert_eq!(sent[0].body["parse_mode"], "HTML");
    assert!(
        sent[0].body.get("reply_parameters").is_none(),
        "no reply threading in private chats"
    );
    let prompt = &env.model_prompts()[0];
    assert_eq!(
        prompt, "channel: $telegram\n@user42: hi, I am Ann",
        "a private message: its sender and text, no ids"
    );
    assert!(
        !env.telegram.calls_of("sendChatAction").is_empty(),
        "typing shown during the turn"
    );
    assert!(daemon.stop().await.success());
    assert_eq!(
        env.telegram.calls_of("sendMessage").len(),
        1,
        "answered exactly once"
    );
    assert_eq!(env.tape_paths().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn group_gating_burst_batching_and_commands() {
    let mut env = Env::new().await;
    env.set("BUB_MESSAGE_DEBOUNCE_SECONDS", "0.5");
    env.model.push_text("batched answer");
    let daemon = env.start();
    // Not addressed: never reaches the model.
    env.telegram
        .push_message(group_text(-100, 1, "just chatting about bubbles"));
    // A comma command runs at once without the model, even unaddressed.
    env.telegram
        .push_message(group_text(-100, 1, ",echo from-shell"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0].body["text"], "from-shell");
    assert!(env.model.requests().is_empty());
    // A burst addressed by mention: one model call with all three messages.
    let first = env
        .telegram
        .push_message(group_text(-100, 1, "hey @bub_test_bot").mention("@bub_test_bot"));
    env.telegram
        .push_message(group_text(-100, 2, "and also this"));
    let last = env
        .telegram
        .push_message(group_text(-100, 1, "bub, one more"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(sent[1].body["text"], "batched answer");
    assert_eq!(
        sent[1].body["reply_parameters"]["message_id"], last,
        "replies to the last message"
    );
    let prompts = env.model_prompts();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    let lines: Vec<&str> = prompts[0].lines().collect();
    assert_eq!(lines.len(), 4, "{prompts:?}");
    assert!(
        lines[1].contains("hey @bub_test_bot") && lines[1].starts_with(&format!("[#{first}] ")),
        "{lines:?}"
    );
    assert!(!prompts[0].contains("bubbles"));
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_arriving_mid_turn_is_answered_in_the_next_turn() {
    let env = Env::new().await;
    env.model.push_delay(Duration::from_millis(1500));
    env.model.push_text("first answer");
    env.model.push_text("second answer");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(7, 7, "first question"));
    env.model.wait_for_requests(1, WAIT).await;
    env.telegram
        .push_message(private_text(7, 7, "second question"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent), ["first answer", "second answer"]);
    let requests = env.model.requests();
    assert_eq!(
        requests.len(),
        2,
        "one turn at a time, no concurrent second turn"
    );
    let second = serde_json::to_string(&requests[1]["messages"]).unwrap();
    assert!(
        second.contains("first answer"),
        "the second turn sees the first one's answer"
    );
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn history_survives_a_restart_and_pending_messages_are_not_lost() {
    let env = Env::new().await;
    env.model.push_text("Nice to meet you, Bo.");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(9, 9, "my name is Bo"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert!(daemon.stop().await.success(), "SIGTERM is a clean stop");

    // Sent while the daemon was down: answered after the restart.
    env.telegram
        .push_message(private_text(9, 9, "what is my name?"));
    env.model.push_text("You are Bo.");
    let daemon = env.start();
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent), ["Nice to meet you, Bo.", "You are Bo."]);
    let history = serde_json::to_string(&env.model.requests()[1]["messages"]).unwrap();
    assert!(history.contains("my name is Bo") && history.contains("Nice to meet you, Bo."));
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn allow_lists_apply_to_messages_and_commands() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ALLOW_FROM", "alice,1001");
    env.set("BUB_TELEGRAM_OWNERS", "");
    // The owner's notice of the stranger is owner.rs's subject.
    env.set("BUB_NOTIFY_PAIRING", "false");
    let daemon = env.start();
    env.telegram
        .push_message(group_text(-5, 666, ",touch pwned"));
    env.telegram
        .push_message(private_text(666, 666, "let me in"));
    env.telegram
        .push_message(private_text(1001, 1001, ",echo allowed"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    let mut got = texts(&sent);
    got.sort();
    assert!(got[0].starts_with("I don't know you yet"), "{got:?}");
    assert_eq!(got[1], "allowed");
    assert!(env.model.requests().is_empty());
    assert!(daemon.stop().await.success());
    assert_eq!(
        env.telegram.calls_of("sendMessage").len(),
        2,
        "nothing said in the group"
    );
    assert!(!env.workspace.join("pwned").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn model_errors_reach_the_chat_and_the_daemon_keeps_running() {
    let env = Env::new().await;
    env.model.push_raw(
        400,
        r#"{"error":{"message":"model not found"}}"#.into(),
        vec![],
    );
    env.model.push_text("recovered");
    let daemon = env.start();
    env.telegram.push_message(private_text(3, 3, "hello?"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let text = sent[0].body["text"].as_str().unwrap();
    assert!(
        text.starts_with("Error: ") && text.contains("model not found"),
        "{text}"
    );
    env.telegram.push_message(private_text(3, 3, "again"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(sent[1].body["text"], "recovered");
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn rejected_token_stops_the_daemon_with_a_clear_error() {
    let env = Env::new().await;
    env.telegram.accept_only_token("999:other");
    let (status, stderr) = env.start().exit_with_log().await;
    // A configuration error: a supervisor holds on exit 2 instead of restarting in a loop.
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("BUB_TELEGRAM_TOKEN"), "{stderr}");
    assert!(
        !stderr.contains(fake_telegram::TOKEN),
        "the token never appears: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn discord_and_telegram_are_served_by_one_daemon() {
    let mut env = Env::new().await;
    let discord = fake_discord::start().await;
    env.set("BUB_DISCORD_ENABLED", "true");
    env.set("BUB_DISCORD_TOKEN", "MTIz.discord.test-token");
    env.set("BUB_DISCORD_API_BASE", &discord.api_base());
    env.model.push_text("answer one");
    env.model.push_text("answer two");
    let daemon = env.start();
    discord.wait_for_identify(WAIT).await;
    let dm = Msg::dm(
        "555",
        fake_discord::user("42", "alice"),
        "hello from discord",
    );
    let dm_id = dm.message_id();
    discord.dispatch_message(dm).await;
    let posted = discord.wait_for_posts(1, WAIT).await;
    assert_eq!(posted[0].content(), "answer one");
    assert_eq!(
        posted[0].reply_to(),
        Some(dm_id.as_str()),
        "answers reply to the message"
    );
    env.telegram
        .push_message(private_text(8, 8, "and from telegram"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0].body["text"], "answer two");
    let prompts = env.model_prompts();
    assert!(
        prompts[0].starts_with("channel: $discord\n") && prompts[0].contains("hello from discord")
    );
    assert!(daemon.stop().await.success());
    assert_eq!(discord.posted_messages().len(), 1, "exactly one reply");
}

/// A port on 127.0.0.1 nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Telegram out of reach: the error names the host and port and whether a proxy was used —
/// the proxy's URL without its credentials — and never the bot token of the request's URL.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_telegram_is_named_with_its_proxy() {
    let mut env = Env::new().await;
    let port = closed_port();
    env.set("BUB_TELEGRAM_API_BASE", &format!("http://127.0.0.1:{port}"));
    let (status, log) = env.spawn(&["message"]).exit_with_log().await;
    assert_eq!(status.code(), Some(1), "{log}");
    let direct = format!("cannot reach 127.0.0.1:{port} (no proxy): connection refused");
    assert!(log.contains(&direct), "{log}");

    let proxy = closed_port();
    env.set(
        "BUB_TELEGRAM_PROXY",
        &format!("http://user:secret@127.0.0.1:{proxy}"),
    );
    env.set("BUB_TELEGRAM_API_BASE", "https://api.telegram.org");
    let (status, log) = env.spawn(&["message"]).exit_with_log().await;
    assert_eq!(status.code(), Some(1), "{log}");
    let via = format!(
        "cannot reach api.telegram.org:443 (via proxy http://127.0.0.1:{proxy}): connection refused"
    );
    assert!(log.contains(&via), "{log}");
    assert!(!log.contains("secret"), "{log}");
    assert!(!log.contains(fake_telegram::TOKEN), "{log}");
    assert!(env.model.requests().is_empty());
}
