//! Answers shown as they are written (`BUB_STREAM=edits`): the real `bub message` against the
//! fake Telegram and a fake model that streams slowly — one message, posted at the first text,
//! edited at most once a second (a 429 waited out, never a burst after it), a status line while
//! a command runs, and the final answer in place of it all. Discord's post and edit at the
//! adapter.

// Its Discord tests need the `discord` feature; what they share with the others is then unused.
#![cfg_attr(not(feature = "discord"), allow(unused_imports))]

use crate::support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bub::access::Access;
#[cfg(feature = "discord")]
use bub::channels::discord::Discord;
use bub::channels::{ChatId, MessageId};
use bub::config::Settings;
use bub::delivery;
use serde_json::json;
use support::bub_env::{Env, texts};
use support::fake_openai::StreamStyle;
use support::fake_telegram::{private_text, retry_after_body};
use support::outbound;
use support::wait::{bounded, wait_until};

const FINAL: &str = "The answer is 42, computed by the shell just now.";

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_streams_into_one_message_edited_at_most_once_a_second_even_under_a_429() {
    let mut env = Env::new().await;
    env.set("BUB_STREAM", "edits");
    env.model.set_stream_style(StreamStyle {
        pieces_per_event: 1,
        pause: Duration::from_millis(400),
        ..StreamStyle::default()
    });
    env.model.push_text_and_tool_calls(
        "Let me look.",
        &[("bash", json!({"cmd": "sleep 1.5; echo 42"}))],
    );
    env.model.push_text(FINAL);
    env.telegram
        .fail_next("editMessageText", 429, retry_after_body(1));
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "what is it?"));
    wait_until(
        Duration::from_secs(30),
        "the final answer in the live message",
        || {
            env.telegram
                .calls_of("editMessageText")
                .iter()
                .any(|c| !c.failed && c.body["text"] == FINAL)
        },
    )
    .await;
    assert!(daemon.stop().await.success());

    // One message: posted at the first text, then only edited.
    let posted = env.telegram.calls_of("sendMessage");
    assert_eq!(posted.len(), 1, "{:?}", texts(&posted));
    let first = posted[0].body["text"].as_str().unwrap().to_owned();
    assert!("Let me look.".starts_with(&first), "{first:?}");
    let edits = env.telegram.calls_of("editMessageText");
    let shown: Vec<&str> = edits
        .iter()
        .filter_map(|c| c.body["text"].as_str())
        .collect();
    assert!(
        shown
            .iter()
            .any(|t| t.contains("<i>running <code>sleep 1.5; echo 42</code>…</i>")),
        "the status line while the command ran: {shown:?}"
    );
    assert_eq!(
        *shown.last().unwrap(),
        FINAL,
        "the final text, no status line"
    );
    assert!(edits.iter().all(|c| c.body["message_id"] == 1001));

    // At most one post or edit a second, counting the 429: its retry waited the second it
    // asked for, and the next edit came a second after that.
    let refused = edits.iter().position(|c| c.failed).expect("the 429");
    let retried = &edits[refused + 1];
    assert!(retried.at.duration_since(edits[refused].at) >= Duration::from_millis(990));
    let mut calls: Vec<_> = posted.iter().chain(&edits).filter(|c| !c.failed).collect();
    calls.sort_by_key(|c| c.at);
    for pair in calls.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(
            gap >= Duration::from_millis(990),
            "{gap:?} between two edits"
        );
    }
}

#[cfg(feature = "discord")]
#[tokio::test]
async fn discord_posts_a_live_message_edits_it_and_the_answer_replaces_it() {
    let fake = support::fake_discord::start().await;
    let mut s = Settings::with_defaults(PathBuf::from("/nonexistent"), PathBuf::from("."));
    s.channel_mut("discord").enabled = true;
    s.channel_mut("discord").token = Some("tok-SECRET".into());
    s.channel_mut("discord").api_base = fake.api_base().into();
    let discord = Discord::new(&s, Arc::new(Access::new(&s))).unwrap();
    let chat = ChatId::from("555");
    let posted = delivery::post_live(&discord, &chat, "Thinking", Some(MessageId("77".into())));
    let id = bounded(posted)
        .await
        .unwrap()
        .expect("Discord edits messages");
    assert_eq!(fake.posted_messages()[0].reply_to(), Some("77"));
    bounded(delivery::edit_live(&discord, &chat, &id, &"x".repeat(2500)))
        .await
        .unwrap();
    let path = format!("/api/v10/channels/555/messages/{}", id.0);
    let edits = fake.requests_to("PATCH", &path);
    let cut = edits[0].body["content"].as_str().unwrap();
    assert_eq!(cut.chars().count(), 2000, "cut to Discord's limit");
    assert!(cut.ends_with('…'));
    // The answer: its first part replaces the live text, the rest is posted.
    let mut out = outbound(
        "555",
        &format!("{}\n\n{}", "a".repeat(1500), "b".repeat(1500)),
        None,
    );
    out.edit = Some(id.0);
    bounded(support::send(&discord, &out)).await.unwrap();
    let edits = fake.requests_to("PATCH", &path);
    assert_eq!(edits.len(), 2);
    assert_eq!(edits[1].body["content"], "a".repeat(1500));
    let posts = fake.posted_messages();
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[1].content(), "b".repeat(1500));
}
