//! Answers too long for a chat (issue 19, item 12): past four messages of the platform, the
//! real `bub message` sends the first part ending with a note and the whole answer as
//! `answer.md` — on Telegram (`sendMessage` + `sendDocument`) and Discord (a message, then a
//! multipart post of the file), for a live answer (its message becomes the first part), for `message.send`,
//! and for a delivery recorded before a restart (sent the same way, once). Three messages'
//! worth is still three messages. A daemon killed in the middle of a long answer sends only the
//! parts Telegram had not accepted after its restart (issue 22).

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::bub_env::{Env, WAIT, texts};
use support::fake_discord::{self, Msg};
use support::fake_openai::StreamStyle;
use support::fake_telegram::{self, private_text};
use support::wait::{wait_for, wait_until};

/// An output limit these answers fit in (the fake model stops at the request's `max_tokens`,
/// 4 bytes a token, as a model would).
const LONG_ENOUGH: &str = "100000";

/// The note ending the first part of `whole`.
fn note(whole: &str) -> String {
    format!(
        "\n\n… the whole answer ({} KB) is attached as answer.md",
        whole.len().div_ceil(1024)
    )
}

/// The files uploaded to the fake Telegram, once there are `n` (an upload is kept just after
/// its call is recorded).
async fn uploads(env: &Env, n: usize) -> Vec<(String, Vec<u8>)> {
    let what = format!("{n} upload(s)");
    wait_for(WAIT, &what, || {
        Some(env.telegram.uploads()).filter(|u| u.len() >= n)
    })
    .await
}

/// What is left under `BUB_HOME/outgoing` (the files being sent).
fn spooled(env: &Env) -> usize {
    std::fs::read_dir(env.home.join("outgoing")).map_or(0, |dir| dir.count())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_answer_is_its_first_part_and_a_file_on_telegram_and_discord() {
    let mut env = Env::new().await;
    env.set("BUB_MAX_TOKENS", LONG_ENOUGH);
    let discord = fake_discord::start().await;
    env.set("BUB_DISCORD_ENABLED", "true");
    env.set("BUB_DISCORD_TOKEN", "MTIz.discord.test-token");
    env.set("BUB_DISCORD_API_BASE", &discord.api_base());
    let whole = support::long_answer(200);
    env.model.push_text(whole.clone());
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "write it all"));
    let document = env.telegram.wait_for_calls("sendDocument", 1, WAIT).await;
    let sent = env.telegram.calls_of("sendMessage");
    assert_eq!(sent.len(), 1, "one message, not 50");
    let first = &texts(&sent)[0];
    assert!(first.starts_with("Paragraph 00000: the quick brown fox."));
    assert!(first.ends_with(&note(&whole)), "{first}");
    assert!(first.chars().count() <= 4096);
    assert_eq!(document[0].body["file"]["filename"], "answer.md");
    let uploaded = uploads(&env, 1).await;
    assert_eq!(uploaded[0].0, "senddocument");
    assert!(uploaded[0].1 == whole.as_bytes(), "the whole answer");
    wait_until(WAIT, "the file removed", || spooled(&env) == 0).await;

    // Discord: one message, then the file.
    let whole = support::long_answer(100);
    env.model.push_text(whole.clone());
    discord.wait_for_identify(WAIT).await;
    let dm = Msg::dm("555", fake_discord::user("42", "alice"), "and here");
    let dm_id = dm.message_id();
    discord.dispatch_message(dm).await;
    let posted = discord.wait_for_posts(2, WAIT).await;
    let content = posted[0].content();
    assert!(content.starts_with("Paragraph 00000:"));
    assert!(content.ends_with(&note(&whole)), "{content}");
    assert!(content.chars().count() <= 2000);
    assert_eq!(posted[0].reply_to(), Some(dm_id.as_str()));
    assert_eq!(posted[1].content(), "");
    assert_eq!(
        posted[1].body["attachments_uploaded"][0]["filename"],
        "answer.md"
    );
    let uploads = discord.uploaded_files();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].0, "answer.md");
    assert!(uploads[0].1 == whole.as_bytes(), "the whole answer");

    // Three messages' worth: three messages, no file.
    let three = support::long_answer(10);
    env.model.push_text(three.clone());
    env.telegram
        .push_message_update(private_text(42, 42, "a shorter one"));
    let sent = env.telegram.wait_for_calls("sendMessage", 4, WAIT).await;
    assert_eq!(texts(&sent[1..]).join("\n\n"), three);
    assert!(daemon.stop().await.success());
    assert_eq!(env.telegram.calls_of("sendDocument").len(), 1);
    assert_eq!(discord.posted_messages().len(), 2);
    assert_eq!(spooled(&env), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_answer_recorded_before_a_restart_is_sent_the_same_way_once() {
    let mut env = Env::new().await;
    env.set("BUB_MAX_TOKENS", LONG_ENOUGH);
    let whole = support::long_answer(200);
    env.model.push_text(whole.clone());
    // Telegram takes the first send and never answers: the answer is recorded, not delivered.
    env.telegram
        .stall_for("sendMessage", Duration::from_secs(120));
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "write it all"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    daemon.kill().await;
    assert!(env.telegram.delivered().is_empty());
    // Killed while sending: its file is left (removed by a long send an hour on).
    assert_eq!(spooled(&env), 1);

    // The next start, with Telegram back, delivers the recorded answer: one message, one file.
    env.telegram = fake_telegram::start().await;
    let api_base = env.telegram.api_base();
    env.set("BUB_TELEGRAM_API_BASE", &api_base);
    let daemon = env.start();
    env.telegram.wait_for_calls("sendDocument", 1, WAIT).await;
    assert!(daemon.stop().await.success());
    let sent = env.telegram.calls_of("sendMessage");
    assert_eq!(sent.len(), 1);
    assert!(texts(&sent)[0].ends_with(&note(&whole)));
    assert!(uploads(&env, 1).await[0].1 == whole.as_bytes());
    assert_eq!(env.model.request_count(), 1, "delivered, not run again");

    // A third start has nothing left to send (its second poll: the resumed work is done).
    let polls = env.telegram.calls_of("getUpdates").len();
    let daemon = env.start();
    env.telegram
        .wait_until(WAIT, "a second poll", |f| {
            (f.calls_of("getUpdates").len() >= polls + 2).then_some(())
        })
        .await;
    assert!(daemon.stop().await.success());
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 1);
    assert_eq!(env.telegram.calls_of("sendDocument").len(), 1);
    assert_eq!(spooled(&env), 1, "only the killed daemon's");
}

/// Restarts `env`'s daemon against a fresh fake Telegram (the killed one's stalled calls stay
/// with the old fake).
async fn restart_with_a_fresh_telegram(env: &mut Env) -> support::bub_env::Daemon {
    env.telegram = fake_telegram::start().await;
    let api_base = env.telegram.api_base();
    env.set("BUB_TELEGRAM_API_BASE", &api_base);
    env.start()
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_3_of_4_parts_a_restart_sends_only_the_4th() {
    let mut env = Env::new().await;
    env.set("BUB_MAX_TOKENS", LONG_ENOUGH);
    let whole = support::long_answer(14); // four messages of Telegram's
    env.model.push_text(whole.clone());
    // Telegram accepts three parts and never answers the fourth.
    env.telegram.stall_after("sendMessage", 3);
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "write it all"));
    env.telegram.wait_for_calls("sendMessage", 4, WAIT).await;
    daemon.kill().await;
    let first = texts(&env.telegram.delivered());
    assert_eq!(first.len(), 3);
    let recorded = env.inbox_text();
    assert!(
        recorded.contains(r#"{"op":"sent","seqs":[1],"parts":3}"#),
        "{recorded}"
    );

    let daemon = restart_with_a_fresh_telegram(&mut env).await;
    // The delivery ends with its `done` record, after its last part.
    wait_until(WAIT, "the delivery done", || {
        env.inbox_text()
            .contains(r#"{"op":"done","seqs":[1],"outcome":"sent"}"#)
    })
    .await;
    assert!(daemon.stop().await.success());
    let rest = env.telegram.calls_of("sendMessage");
    assert_eq!(rest.len(), 1, "only the 4th");
    let all = [first, texts(&rest)].concat();
    assert_eq!(all.join("\n\n"), whole, "every part once, in order");
    assert!(rest[0].body.get("reply_parameters").is_none());
    assert_eq!(env.model.request_count(), 1, "delivered, not run again");
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_the_first_part_a_restart_sends_only_the_file() {
    let mut env = Env::new().await;
    env.set("BUB_MAX_TOKENS", LONG_ENOUGH);
    let whole = support::long_answer(200);
    env.model.push_text(whole.clone());
    // The first part is accepted; the file's upload never answered.
    env.telegram
        .stall_for("sendDocument", Duration::from_secs(120));
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "write it all"));
    env.telegram.wait_for_calls("sendDocument", 1, WAIT).await;
    daemon.kill().await;
    assert_eq!(env.telegram.delivered().len(), 1);

    let daemon = restart_with_a_fresh_telegram(&mut env).await;
    assert!(uploads(&env, 1).await[0].1 == whole.as_bytes());
    assert!(daemon.stop().await.success());
    assert!(
        env.telegram.calls_of("sendMessage").is_empty(),
        "the first part not again"
    );
    assert_eq!(env.telegram.calls_of("sendDocument").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_answer_and_message_send_are_capped_the_same_way() {
    let mut env = Env::new().await;
    env.set("BUB_MAX_TOKENS", LONG_ENOUGH);
    env.set("BUB_STREAM", "edits");
    env.model.set_stream_style(StreamStyle {
        pieces_per_event: 1,
        pause: Duration::ZERO,
        ..StreamStyle::default()
    });
    let whole = support::long_answer(60);
    env.model.push_text(whole.clone());
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "write it all"));
    env.telegram.wait_for_calls("sendDocument", 1, WAIT).await;
    // The live message was posted, then edited into the first part; the file follows.
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 1);
    let edits = env.telegram.calls_of("editMessageText");
    let last = edits.last().unwrap().body["text"].as_str().unwrap();
    assert!(last.ends_with(&note(&whole)), "{last}");
    assert!(uploads(&env, 1).await[0].1 == whole.as_bytes());

    // message.send to another chat: the same.
    let sent = support::long_answer(30);
    env.model.push_tool_calls(&[(
        "message_send",
        json!({"channel": "telegram", "chat_id": "7", "text": sent}),
    )]);
    env.model.push_text("Sent.");
    env.telegram
        .push_message_update(private_text(42, 42, "send it to 7"));
    env.telegram.wait_for_calls("sendDocument", 2, WAIT).await;
    assert!(daemon.stop().await.success());
    let to_7: Vec<_> = env
        .telegram
        .calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.body["chat_id"] == 7)
        .collect();
    assert_eq!(to_7.len(), 1);
    assert!(texts(&to_7)[0].ends_with(&note(&sent)));
    assert!(uploads(&env, 2).await[1].1 == sent.as_bytes());
}
