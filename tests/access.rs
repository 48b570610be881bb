//! Admission and pairing with the real binary against the fake Discord, the fake Telegram and
//! the fake model: an allow-list id is matched against ids only (a stranger whose username is
//! the owner's id gets nothing), a username admits a guest (never an owner), `bub access
//! explain` gives the gate's verdict, and a flood of pairing requests locks nobody out.
//! Assertions are on what crossed the wire and what is on disk.

use crate::support;

use support::bub_env::{Env, WAIT, stdout};
use support::fake_discord::{self, FakeDiscord, Msg};
use support::fake_telegram::private_text;

/// The owner's Discord id, the only entry of `BUB_DISCORD_ALLOW_FROM`.
const OWNER: &str = "1001";
/// The guild channel the tests talk in.
const CHANNEL: &str = "555";

/// `bub message` serving only the fake Discord, with `allow_from` and no `BUB_DISCORD_OWNERS`.
async fn discord_env(allow_from: &str) -> (Env, FakeDiscord) {
    let mut env = Env::new().await;
    let discord = fake_discord::start().await;
    env.set("BUB_TELEGRAM_ENABLED", "false");
    env.set("BUB_DISCORD_ENABLED", "true");
    env.set("BUB_DISCORD_TOKEN", "MTIz.discord.test-token");
    env.set("BUB_DISCORD_API_BASE", &discord.api_base());
    env.set("BUB_DISCORD_ALLOW_FROM", allow_from);
    env.set("BUB_DISCORD_OWNERS", "");
    (env, discord)
}

/// `bub access explain discord:CHANNEL --user ID [--username NAME]`: the line about the user.
async fn explain_user(env: &Env, id: &str, username: Option<&str>) -> String {
    let chat = format!("discord:{CHANNEL}");
    let mut args = vec!["access", "explain", &chat, "--user", id];
    if let Some(name) = username {
        args.extend(["--username", name]);
    }
    let out = env.run(&args).await;
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    text.lines()
        .find(|l| l.starts_with("user "))
        .unwrap_or_else(|| panic!("no user line in {text}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stranger_whose_username_is_the_owners_id_gets_nothing() {
    let (mut env, discord) = discord_env(OWNER).await;
    // The owner's notice of the stranger is owner.rs's subject.
    env.set("BUB_NOTIFY_PAIRING", "false");
    let marker = env.workspace.join("stranger-was-here");
    let daemon = env.start();
    discord.wait_for_identify(WAIT).await;
    let stranger = fake_discord::user("66", OWNER);
    let touch = format!(",touch {}", marker.display());
    discord
        .dispatch_message(Msg::guild("9", CHANNEL, stranger.clone(), &touch).mention_bot())
        .await;
    discord
        .dispatch_message(Msg::dm("31", stranger.clone(), &touch))
        .await;
    // The DM gets a pairing code, as any stranger's does (messages are handled in order).
    let posts = discord.wait_for_posts(1, WAIT).await;
    assert_eq!(posts[0].channel_id, "31");
    assert!(
        posts[0].content().contains("bub pair approve discord "),
        "{}",
        posts[0].content()
    );
    // The owner, by id, still owns the bot: the shell answers.
    let owner = fake_discord::user(OWNER, "the-owner");
    discord
        .dispatch_message(Msg::guild("9", CHANNEL, owner, ",echo owner-ok").mention_bot())
        .await;
    let posts = discord.wait_for_posts(2, WAIT).await;
    assert_eq!(posts[1].content(), "owner-ok");
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success());
    assert!(!marker.exists(), "the stranger's command ran");
    assert!(env.model.requests().is_empty(), "no model call");
    assert_eq!(discord.posted_messages().len(), 2, "nothing else was said");
    assert!(log.contains("sender_not_allowed"), "{log}");

    // `bub access explain` agrees with the gate, with or without the username.
    for username in [None, Some(OWNER)] {
        let line = explain_user(&env, "66", username).await;
        assert!(line.contains(": not admitted"), "{line}");
    }
    let line = explain_user(&env, OWNER, Some("the-owner")).await;
    assert!(
        line.contains(": owner (their id is on BUB_DISCORD_ALLOW_FROM)"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discord_user_admitted_by_username_is_a_guest() {
    let (env, discord) = discord_env(&format!("{OWNER}, @Carol")).await;
    let daemon = env.start();
    discord.wait_for_identify(WAIT).await;
    let carol = fake_discord::user("77", "carol");
    let marker = env.workspace.join("carol-was-here");
    let touch = format!(",touch {}", marker.display());
    discord
        .dispatch_message(Msg::guild("9", CHANNEL, carol, &touch).mention_bot())
        .await;
    let posts = discord.wait_for_posts(1, WAIT).await;
    assert_eq!(
        posts[0].content(),
        "`bash` is not allowed for guests in this chat"
    );
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success());
    assert!(!marker.exists());
    assert!(
        log.contains(
            "BUB_DISCORD_ALLOW_FROM names users by username (Carol): they are guests; owners \
             need ids (BUB_DISCORD_OWNERS or an id on the list)"
        ),
        "one warning at startup: {log}"
    );
    let line = explain_user(&env, "77", Some("carol")).await;
    assert!(
        line.contains(
            "user 77 @carol: guest (their username is on BUB_DISCORD_ALLOW_FROM: usernames admit \
             guests only; owners need ids (BUB_DISCORD_OWNERS or an id on the list))"
        ),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_telegram_user_admitted_by_username_is_a_guest() {
    let mut env = Env::new().await;
    // The fake Telegram's user 50 has the username `user50`.
    env.set("BUB_TELEGRAM_ALLOW_FROM", "user50");
    env.set("BUB_TELEGRAM_OWNERS", "");
    let daemon = env.start();
    env.telegram.push_message(private_text(50, 50, ",echo hi"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(
        sent[0].body["text"],
        "<code>bash</code> is not allowed for guests in this chat"
    );
    assert!(daemon.stop().await.success());
    assert!(env.model.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_strangers_locks_nobody_out_of_pairing() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ALLOW_FROM", "");
    env.set("BUB_TELEGRAM_OWNERS", "");
    let daemon = env.start();
    // Twelve throw-away accounts ask, then the real user.
    let strangers: Vec<i64> = (100..112).collect();
    for id in &strangers {
        env.telegram
            .push_message(private_text(*id, *id, "let me in"));
    }
    let real = 50;
    env.telegram.push_message(private_text(real, real, "hello"));
    let sent = env.telegram.wait_for_calls("sendMessage", 13, WAIT).await;
    let last = &sent[12].body;
    assert_eq!(last["chat_id"], real, "the real user still gets a code");
    let text = last["text"].as_str().unwrap();
    assert!(text.contains("Your telegram user id is 50."), "{text}");
    let code = text
        .lines()
        .find_map(|l| l.strip_prefix("bub pair approve telegram "))
        .unwrap_or_else(|| panic!("no code in {text}"))
        .to_owned();
    // A stranger whose request gave way asks again: no second code within the hour.
    let update = env
        .telegram
        .push_message_update(private_text(100, 100, "again"));
    env.telegram.wait_for_confirmed(update, WAIT).await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success());
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 13);
    assert!(env.model.requests().is_empty());
    assert_eq!(
        log.matches("pairing.flood").count(),
        1,
        "one line for the burst: {log}"
    );
    assert!(
        log.contains("11 pairing request(s) since the last line, 1 of the oldest gave way"),
        "{log}"
    );

    let list = stdout(&env.run(&["pair", "list"]).await);
    assert!(
        list.contains(&format!("pending  {code} telegram user 50 @user50")),
        "{list}"
    );
    assert_eq!(list.matches("pending  ").count(), 10, "{list}");
    for gone in ["user 100 ", "user 101 ", "user 102 "] {
        assert!(!list.contains(gone), "{gone} gave way: {list}");
    }
    assert!(
        list.contains(
            "flood    telegram: 3 pairing request(s) gave way to newer ones in the last hour"
        ),
        "{list}"
    );
    let approved = env.run(&["pair", "approve", "telegram", &code]).await;
    assert!(
        stdout(&approved).contains("user 50 @user50 as owner"),
        "{approved:?}"
    );
}
