//! A daemon that talks to its owner, with the real binary against the fake Telegram, the fake
//! Discord and the fake model: the start line on stdout (the owner, or how to pair), a
//! stranger's pairing request or group mention told to the owners' private chats once an hour,
//! `BUB_NOTIFY_PAIRING=false`, and the pending request in `bub status`. Assertions are on
//! stdout, what crossed the wire and what `bub status` prints.

use crate::support;

use serde_json::json;
use support::bub_env::{Env, WAIT, code_in, stdout};
use support::fake_discord::{self, Msg};
use support::fake_telegram::{BOT_USERNAME, group_text, private_text};

/// The owner's Telegram id.
const OWNER: i64 = 42;

/// `bub message` on the fake Telegram: nobody on the allow-list, `owners` the owners.
async fn telegram_env(owners: &str) -> Env {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ALLOW_FROM", "");
    env.set("BUB_TELEGRAM_OWNERS", owners);
    env
}

#[tokio::test(flavor = "multi_thread")]
async fn the_start_line_says_how_to_pair_then_names_the_owner() {
    let env = telegram_env("").await;
    let daemon = env.start();
    let line = format!(
        "Bub is on Telegram as @{BOT_USERNAME} — no owner yet: message @{BOT_USERNAME} \
         privately, then run bub pair approve telegram CODE\n"
    );
    daemon.wait_for_stdout(&line).await;
    // The first stranger pairs (and becomes the owner); nobody is told, there is no owner yet.
    env.telegram.push_message(private_text(50, 50, "hello"));
    let code = code_in(&env.wait_for_sent_to(50, 1).await[0]);
    daemon.wait_for_log("owner.notice.none").await;
    let approved = env.run(&["pair", "approve", "telegram", &code]).await;
    assert!(approved.status.success(), "{approved:?}");
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{log}");
    assert_eq!(
        env.telegram.calls_of("sendMessage").len(),
        1,
        "only the code"
    );

    let daemon = env.start();
    let line = format!("Bub is on Telegram as @{BOT_USERNAME} — owner: user50 (id 50)\n");
    daemon.wait_for_stdout(&line).await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{log}");
    assert!(
        log.contains("telegram.start"),
        "the log stays on stderr: {log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_strangers_pairing_request_reaches_the_owner_once() {
    let env = telegram_env(&OWNER.to_string()).await;
    let daemon = env.start();
    daemon
        .wait_for_stdout(&format!("as @{BOT_USERNAME} — owner: id {OWNER}\n"))
        .await;
    env.telegram.push_message(private_text(50, 50, "hello"));
    let code = code_in(&env.wait_for_sent_to(50, 1).await[0]);
    let notices = env.wait_for_sent_to(OWNER, 1).await;
    let notice = &notices[0];
    assert!(
        notice.starts_with("New pairing request on Telegram from User50 (@user50, id 50)."),
        "{notice}"
    );
    assert!(
        notice.contains(&format!("<code>bub pair approve telegram {code}</code>")),
        "{notice}"
    );
    // `bub status` lists the request.
    let status = env.run(&["status"]).await;
    let text = stdout(&status);
    assert!(
        text.contains(&format!(
            "pairing requests (1):\n  {code} telegram user 50 @user50 (expires in"
        )),
        "{text}"
    );
    // The same stranger again within the hour: no code, no notice. Then another stranger,
    // whose name tries to forge a line of the notice: their notice is the second one.
    env.telegram.push_message(private_text(50, 50, "hello?"));
    let forger = json!({"id": 60, "is_bot": false, "username": "user60",
        "first_name": "Eve\n\nbub pair approve telegram EVILCODE <b>x</b> **y**"});
    env.telegram
        .push_message(private_text(60, 60, "let me in").from(forger));
    let notices = env.wait_for_sent_to(OWNER, 2).await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{log}");
    assert_eq!(notices.len(), 2, "{notices:?}");
    let forged = &notices[1];
    assert!(forged.contains("(@user60, id 60)"), "{forged}");
    assert!(
        !forged
            .lines()
            .any(|l| l.trim_start().starts_with("bub pair approve telegram EVIL")),
        "{forged}"
    );
    assert!(forged.contains("&lt;b&gt;x&lt;/b&gt; **y**"), "{forged}");
    assert_eq!(env.sent_to(50).len(), 1, "one code for stranger 50");
    assert!(
        log.contains("owner.notice.sent"),
        "each notice is logged: {log}"
    );
    assert!(env.model.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stranger_mentioning_the_bot_in_a_group_is_told_once_an_hour() {
    let env = telegram_env(&OWNER.to_string()).await;
    let daemon = env.start();
    daemon.wait_for_stdout("— owner: id 42\n").await;
    let handle = format!("@{BOT_USERNAME}");
    let mention =
        |user: i64| group_text(-100, user, &format!("{handle} let me in")).mention(&handle);
    env.telegram.push_message(mention(70));
    // Not addressed: nothing to tell.
    env.telegram
        .push_message(group_text(-100, 71, "just chatting"));
    env.telegram.push_message(mention(70));
    env.telegram.push_message(mention(72));
    let notices = env.wait_for_sent_to(OWNER, 2).await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{log}");
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(
        notices[0].starts_with(
            "User70 (@user70, id 70) addressed the bot on Telegram in group -100, but is not \
             admitted there"
        ),
        "{}",
        notices[0]
    );
    assert!(
        notices[0].contains(&format!("message {handle} privately for a code")),
        "{}",
        notices[0]
    );
    assert!(
        notices[1].starts_with("User72 (@user72, id 72)"),
        "{}",
        notices[1]
    );
    assert_eq!(log.matches("owner.notice.repeat").count(), 1, "{log}");
    // Groups never pair: no code was sent, nobody is pending.
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 2);
    let list = stdout(&env.run(&["pair", "list"]).await);
    assert!(!list.contains("pending "), "{list}");
}

#[tokio::test(flavor = "multi_thread")]
async fn notify_pairing_false_in_config_toml_tells_nobody() {
    let env = telegram_env(&OWNER.to_string()).await;
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::write(env.home.join("config.toml"), "notify_pairing = false\n").unwrap();
    let daemon = env.start();
    daemon.wait_for_stdout("— owner: id 42\n").await;
    env.telegram.push_message(private_text(50, 50, "hello"));
    daemon.wait_for_log("owner.notice.off").await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{log}");
    assert_eq!(env.sent_to(50).len(), 1, "the stranger still gets a code");
    assert!(env.sent_to(OWNER).is_empty(), "the owner is not told");
}

#[tokio::test(flavor = "multi_thread")]
async fn discord_says_who_owns_it_and_tells_the_owner_in_a_dm() {
    let mut env = Env::new().await;
    let discord = fake_discord::start().await;
    env.set("BUB_TELEGRAM_ENABLED", "false");
    env.set("BUB_DISCORD_ENABLED", "true");
    env.set("BUB_DISCORD_TOKEN", "MTIz.discord.test-token");
    env.set("BUB_DISCORD_API_BASE", &discord.api_base());
    env.set("BUB_DISCORD_ALLOW_FROM", "");
    env.set("BUB_DISCORD_OWNERS", "1001");
    let daemon = env.start();
    daemon
        .wait_for_stdout("Bub is on Discord as bub — owner: id 1001\n")
        .await;
    let stranger = fake_discord::user_with_global_name("66", "mallory", "Mal");
    discord
        .dispatch_message(Msg::dm("31", stranger, "let me in"))
        .await;
    let posts = discord.wait_for_posts(2, WAIT).await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{log}");
    assert_eq!(posts[0].channel_id, "31", "the stranger's code");
    let code = code_in(posts[0].content());
    let notice = &posts[1];
    assert_eq!(notice.channel_id, fake_discord::dm_channel("1001"));
    assert!(
        notice
            .content()
            .starts_with("New pairing request on Discord from Mal (@mallory, id 66)."),
        "{}",
        notice.content()
    );
    assert!(
        notice
            .content()
            .contains(&format!("`bub pair approve discord {code}`")),
        "{}",
        notice.content()
    );
    let opened = discord.requests_to("POST", "/api/v10/users/@me/channels");
    assert_eq!(opened.len(), 1, "one DM opened");
}
