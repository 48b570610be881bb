//! The catch-up after READY and RESUMED: what the adapter missed is read from the fake's
//! message history (`after=` the inbox's last seen id) and goes through the same filters as a
//! gateway message; the inbox keeps each message once.

use std::path::Path;
use std::sync::Arc;

use bub::access::Role;
use bub::channels::{ChatInfo, Inbound, Sender};
use bub::inbox::Inbox;

use super::support::fake_discord::{self, Msg, user};
use super::{Bot, CHANNEL, GUILD, WAIT, alice, spawn_bot_with};

const HISTORY: &str = "/api/v10/channels/555/messages";

/// A message a previous run journaled in `chat`.
fn journaled(chat: &str, message_id: &str) -> Inbound {
    let sender = Sender::new("42", Some("alice"), Role::Guest);
    Inbound {
        mentioned: true,
        reply: true,
        ..Inbound::new("discord", chat, message_id, sender, "earlier")
    }
}

/// The inbox as a restart finds it in `dir`: a previous run journaled `seen` (chat, message
/// id), in that order, then stopped.
async fn previous_run(dir: &Path, seen: &[(&str, &str)]) -> Arc<Inbox> {
    let path = dir.join("inbox.jsonl");
    let (inbox, _) = Inbox::open(&path, |m| Some(m.sender.role)).unwrap();
    for (chat, id) in seen {
        inbox.receive(&mut journaled(chat, id), None).await.unwrap();
    }
    drop(inbox);
    let (inbox, _resume) = Inbox::open(&path, |m| Some(m.sender.role)).unwrap();
    Arc::new(inbox)
}

/// A live message comes through and nothing else is waiting: anything the catch-up was going
/// to hand on would have come before it (the pipeline keeps the order).
async fn only_live_messages_follow(fake: &fake_discord::FakeDiscord, bot: &mut Bot) {
    let live = Msg::guild(GUILD, CHANNEL, alice(), "are you back?").mention_bot();
    fake.dispatch_message(live.clone()).await;
    assert_eq!(bot.next().await.message_id, live.message_id());
    bot.assert_idle();
}

#[tokio::test]
async fn a_restart_catches_up_through_the_same_filters() {
    let fake = fake_discord::start().await;
    let home = tempfile::tempdir().unwrap();
    fake.set_text_channel(CHANNEL, "general", GUILD);
    // Another chat, more recently active, that the bot may no longer read: skipped.
    fake.fail_history("556", 403);
    let inbox = previous_run(home.path(), &[(CHANNEL, "100"), ("556", "50")]).await;
    fake.add_history(Msg::guild(GUILD, CHANNEL, alice(), "seen before").id("100"));
    let helper = fake_discord::other_bot("88", "helper");
    fake.add_history(Msg::guild(GUILD, CHANNEL, helper, "beep").id("101"));
    let mallory = user("66", "mallory");
    fake.add_history(
        Msg::guild(GUILD, CHANNEL, mallory, "let me in")
            .mention_bot()
            .id("102"),
    );
    fake.add_history(Msg::guild(GUILD, CHANNEL, alice(), "while you were away").id("103"));

    let mut bot = spawn_bot_with(&fake, inbox, |s| {
        s.home = home.path().to_path_buf();
        s.channel_mut("discord").allow_from = vec!["alice".into()];
    });
    let missed = bot.next().await;
    assert_eq!(
        (missed.chat_id.as_str(), missed.message_id.as_str()),
        (CHANNEL, "103")
    );
    // A guild message, although REST messages carry no guild_id: not taken for a DM.
    assert!(!missed.mentioned, "not addressed in a guild channel");
    assert_eq!(missed.platform.fields()["guild_id"], GUILD);
    assert_eq!(
        missed.chat,
        ChatInfo::group(None),
        "a guild message, not a DM"
    );
    only_live_messages_follow(&fake, &mut bot).await;

    let fetched = fake.requests_to("GET", HISTORY);
    assert_eq!(fetched.len(), 1, "one page per chat");
    assert_eq!(fetched[0].query_param("after"), Some("100"));
    assert_eq!(fetched[0].query_param("limit"), Some("100"));
    let refused = fake.requests_to("GET", "/api/v10/channels/556/messages");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].status, 403);
    assert!(refused[0].at < fetched[0].at, "most recently active first");
    assert!(
        fake.posted_messages().is_empty(),
        "no pairing code for a stranger in a guild channel"
    );
    bot.stop().await;
}

#[tokio::test]
async fn a_message_both_fetched_and_dispatched_is_handled_once() {
    let fake = fake_discord::start().await;
    let home = tempfile::tempdir().unwrap();
    fake.set_text_channel(CHANNEL, "general", GUILD);
    let inbox = previous_run(home.path(), &[(CHANNEL, "200")]).await;
    let both = Msg::guild(GUILD, CHANNEL, alice(), "<@777> hello?")
        .mention_bot()
        .id("201");
    fake.add_history(both.clone());

    let mut bot = spawn_bot_with(&fake, inbox, |_| {});
    fake.wait_for_identify(WAIT).await;
    fake.dispatch_message(both).await;
    let got = bot.next().await;
    assert_eq!(got.message_id, "201");
    assert!(got.mentioned);
    let fetched = fake.wait_for_requests("GET", HISTORY, 1, WAIT).await;
    assert_eq!(fetched[0].query_param("after"), Some("200"));
    only_live_messages_follow(&fake, &mut bot).await;
    bot.stop().await;
}

#[tokio::test]
async fn a_gateway_resume_catches_up_too() {
    let fake = fake_discord::start().await;
    let home = tempfile::tempdir().unwrap();
    fake.set_text_channel(CHANNEL, "general", GUILD);
    let inbox = previous_run(home.path(), &[(CHANNEL, "300")]).await;
    let mut bot = spawn_bot_with(&fake, inbox, |_| {});
    // READY's catch-up finds nothing.
    fake.wait_for_requests("GET", HISTORY, 1, WAIT).await;

    fake.add_history(
        Msg::guild(GUILD, CHANNEL, alice(), "<@777> during the gap")
            .mention_bot()
            .id("301"),
    );
    fake.request_reconnect().await;
    let resumes = fake.wait_for_resume(1, WAIT).await;
    assert_eq!(resumes[0]["session_id"], "fake-session");
    assert_eq!(bot.next().await.message_id, "301");
    let fetched = fake.requests_to("GET", HISTORY);
    assert_eq!(fetched.len(), 2);
    assert_eq!(fetched[1].query_param("after"), Some("300"));
    assert_eq!(fake.identifies().len(), 1, "resumed, not identified again");
    only_live_messages_follow(&fake, &mut bot).await;
    bot.stop().await;
}
