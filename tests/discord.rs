//! The real Discord adapter (serenity gateway + REST) against the fake Discord: what crossed
//! the wire (IDENTIFY, posted messages, typing, retries) and what reached the session
//! (`Inbound`: addressed or not, prompt, allow-lists on every message). The catch-up after
//! READY and RESUMED is tested in `discord/catchup.rs`, sending in `discord/send.rs`.

use crate::support;

#[path = "discord/catchup.rs"]
mod catchup;
#[path = "discord/send.rs"]
mod send;

use bub::access::{Access, Role};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bub::channels::discord::Discord;
use bub::channels::{
    Attachment, AttachmentKind, Channel, ChatInfo, Content, Inbound, Part, Quoted, Sender,
};
use bub::config::Settings;
use bub::inbox::Inbox;
use serde_json::{Value, json};
use support::adapter::Running;
use support::fake_discord::{self, FakeDiscord, Msg, user};
use support::outbound;
use support::wait::{WAIT, bounded};

const TOKEN: &str = "tok.SECRET.5f1e9c";
const GUILD: &str = "9";
const CHANNEL: &str = "555";

/// Settings against `fake`: everyone admitted (as guests) unless `configure` says otherwise.
fn settings(fake: &FakeDiscord, configure: impl FnOnce(&mut Settings)) -> Settings {
    let mut s = Settings::with_defaults(PathBuf::from("/nonexistent/home"), PathBuf::from("."));
    s.channel_mut("discord").enabled = true;
    s.channel_mut("discord").token = Some(TOKEN.into());
    s.channel_mut("discord").api_base = fake.api_base().into();
    s.channel_mut("discord").allow_from = vec!["*".into()];
    configure(&mut s);
    s
}

fn discord(s: &Settings) -> Discord {
    Discord::new(s, Arc::new(Access::new(s))).unwrap()
}

/// The adapter's `run` in a task, connected to the fake.
type Bot = Running<Discord>;

/// [`spawn_bot`], once the adapter has identified.
async fn start_bot(fake: &FakeDiscord, configure: impl FnOnce(&mut Settings)) -> Bot {
    let bot = spawn_bot(fake, configure);
    fake.wait_for_identify(WAIT).await;
    bot
}

/// The adapter running against `fake` with an inbox in memory.
fn spawn_bot(fake: &FakeDiscord, configure: impl FnOnce(&mut Settings)) -> Bot {
    spawn_bot_with(fake, Arc::new(Inbox::memory()), configure)
}

/// [`spawn_bot`] with the inbox a previous run left.
fn spawn_bot_with(
    fake: &FakeDiscord,
    inbox: Arc<Inbox>,
    configure: impl FnOnce(&mut Settings),
) -> Bot {
    Running::spawn(discord(&settings(fake, configure)), inbox)
}

fn alice() -> Value {
    user("42", "alice")
}

/// What the message says (its text, a command or a control as written).
fn text(inbound: &Inbound) -> String {
    inbound.text().into_owned()
}

#[tokio::test]
async fn identify_carries_intents_and_bot_token() {
    let fake = fake_discord::start().await;
    let bot = start_bot(&fake, |_| {}).await;
    let ident = fake.wait_for_identify(WAIT).await;
    assert_eq!(
        ident.intents, 37376,
        "GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT"
    );
    assert_eq!(ident.token, format!("Bot {TOKEN}"));
    let gateway = fake.requests_to("GET", "/api/v10/gateway");
    assert_eq!(gateway.len(), 1, "the gateway URL came from the fake");
    assert_eq!(
        gateway[0].header("authorization"),
        Some(format!("Bot {TOKEN}").as_str())
    );
    bot.stop().await;
}

#[tokio::test]
async fn a_dm_is_addressed_and_private() {
    let fake = fake_discord::start().await;
    let mut bot = start_bot(&fake, |_| {}).await;
    let msg = Msg::dm(
        "31",
        fake_discord::user_with_global_name("42", "alice", "Alice"),
        "hello",
    );
    let id = msg.message_id();
    fake.dispatch_message(msg).await;
    let got = bot.next().await;
    assert_eq!(got.channel, "discord");
    assert_eq!(got.chat_id, "31");
    assert_eq!(got.message_id, id);
    assert!(got.mentioned && got.reply);
    assert_eq!(got.content, Content::Text("hello".into()));
    assert_eq!(
        got.sender,
        Sender {
            id: "42".into(),
            username: Some("alice".into()),
            name: Some("Alice".into()),
            role: Role::Guest,
        }
    );
    assert_eq!(got.chat, ChatInfo::private());
    assert_eq!(got.platform.fields()["date"], json!(1704067200.0));
    assert!(!got.platform.fields().contains_key("guild_id"));
    bot.stop().await;
}

#[tokio::test]
async fn guild_message_without_mention_still_reaches_the_session() {
    let fake = fake_discord::start().await;
    let mut bot = start_bot(&fake, |_| {}).await;
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "just chatting").nick("Ali"))
        .await;
    let got = bot.next().await;
    assert!(!got.mentioned);
    assert_eq!(got.chat_id, CHANNEL);
    assert_eq!(got.chat, ChatInfo::group(None));
    assert_eq!(got.platform.fields()["guild_id"], GUILD);
    assert_eq!(
        got.sender.name.as_deref(),
        Some("Ali"),
        "the guild nick is the display name"
    );
    bot.stop().await;
}

#[tokio::test]
async fn mentions_of_the_bot_user_and_its_roles_address_it() {
    let fake = fake_discord::start().await;
    fake.set_bot_roles(GUILD, &["55"]);
    let mut bot = start_bot(&fake, |_| {}).await;

    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "<@777> hi").mention_bot())
        .await;
    assert!(bot.next().await.mentioned, "user mention");

    let other = Msg::guild(GUILD, CHANNEL, alice(), "<@5> hi").mention(user("5", "carol"));
    fake.dispatch_message(other).await;
    assert!(!bot.next().await.mentioned, "someone else's mention");

    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "<@&55> hi").mention_role("55"))
        .await;
    assert!(bot.next().await.mentioned, "mention of the bot's role");

    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "<@&66> hi").mention_role("66"))
        .await;
    assert!(!bot.next().await.mentioned, "mention of another role");

    let lookups = fake.requests_to("GET", "/api/v10/guilds/9/members/777");
    assert_eq!(
        lookups.len(),
        1,
        "the bot's roles are fetched once per guild"
    );
    bot.stop().await;
}

#[tokio::test]
async fn a_reply_to_the_bot_addresses_it_and_carries_the_context() {
    let fake = fake_discord::start().await;
    let mut bot = start_bot(&fake, |_| {}).await;
    let answer = Msg::guild(GUILD, CHANNEL, fake_discord::bot_user(), "the answer is 42");
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "why?").reply_to(&answer))
        .await;
    let got = bot.next().await;
    assert!(got.mentioned);
    assert_eq!(
        got.reply_to,
        Some(Quoted {
            message_id: answer.message_id(),
            sender_id: Some("777".into()),
            username: Some("bub".into()),
            text: Some("the answer is 42".into()),
        })
    );

    let human = Msg::guild(GUILD, CHANNEL, user("5", "carol"), "something");
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "agreed").reply_to(&human))
        .await;
    assert!(!bot.next().await.mentioned, "a reply to someone else");
    bot.stop().await;
}

#[tokio::test]
async fn the_prefix_command_addresses_the_bot_and_is_stripped() {
    let fake = fake_discord::start().await;
    let mut bot = start_bot(&fake, |_| {}).await;
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "!bub do x"))
        .await;
    let got = bot.next().await;
    assert!(got.mentioned);
    assert_eq!(got.content, Content::Text("do x".into()));

    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "!bub ,help"))
        .await;
    let got = bot.next().await;
    assert!(got.mentioned && got.is_command());
    assert_eq!(
        got.content,
        Content::Command(",help".into()),
        "a comma command is passed verbatim"
    );
    bot.stop().await;
}

#[tokio::test]
async fn a_thread_named_bub_addresses_the_bot() {
    let fake = fake_discord::start().await;
    fake.set_thread("600", "bub-help", CHANNEL, GUILD);
    fake.set_thread("601", "question-1", "556", GUILD);
    fake.set_text_channel("602", "bub-general", GUILD);
    let mut bot = start_bot(&fake, |_| {}).await;

    fake.dispatch_message(Msg::guild(GUILD, "600", alice(), "how do I x"))
        .await;
    let got = bot.next().await;
    assert!(got.mentioned, "thread bub-help");
    assert_eq!(got.chat_id, "600", "a thread is its own session");

    fake.dispatch_message(Msg::guild(GUILD, "601", alice(), "how do I x"))
        .await;
    assert!(!bot.next().await.mentioned, "thread question-1");

    fake.dispatch_message(Msg::guild(GUILD, "602", alice(), "how do I x"))
        .await;
    assert!(
        !bot.next().await.mentioned,
        "only threads count, not channels"
    );

    fake.dispatch_message(Msg::guild(GUILD, "600", alice(), "again"))
        .await;
    assert!(bot.next().await.mentioned);
    let lookups = fake.requests_to("GET", "/api/v10/channels/600");
    assert_eq!(lookups.len(), 1, "channel info is cached");
    bot.stop().await;
}

#[tokio::test]
async fn the_keyword_counts_only_as_a_whole_word() {
    let fake = fake_discord::start().await;
    let mut bot = start_bot(&fake, |_| {}).await;
    for (text, addressed) in [
        ("hey Bub, what's up", true),
        ("bubble tea anyone?", false),
        ("ask bub.", true),
        ("the bubs", false),
    ] {
        fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), text))
            .await;
        assert_eq!(bot.next().await.mentioned, addressed, "{text}");
    }
    bot.stop().await;

    let mut bot = start_bot(&fake, |s| s.mention_keyword = "agent".into()).await;
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "hey bub"))
        .await;
    assert!(!bot.next().await.mentioned, "keyword changed");
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "hey Agent!"))
        .await;
    assert!(bot.next().await.mentioned);
    bot.stop().await;
}

#[tokio::test]
async fn allow_from_drops_every_message_of_other_senders_and_pairs_in_dms() {
    let fake = fake_discord::start().await;
    let home = tempfile::tempdir().unwrap();
    let mut bot = start_bot(&fake, |s| {
        s.home = home.path().to_path_buf();
        s.channel_mut("discord").allow_from = vec!["alice".into(), "7".into(), "Dora D".into()];
    })
    .await;
    let mallory = user("66", "mallory");
    // Bub v0.2.3's bypass: follow-ups and comma commands of non-allowed users.
    for msg in [
        Msg::guild(GUILD, CHANNEL, mallory.clone(), ",bash rm -rf /"),
        Msg::guild(GUILD, CHANNEL, mallory.clone(), "just a follow-up"),
        Msg::guild(GUILD, CHANNEL, mallory.clone(), "<@777> hi").mention_bot(),
        Msg::dm("31", mallory.clone(), "hello in private"),
    ] {
        fake.dispatch_message(msg).await;
    }
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "marker"))
        .await;
    let got = bot.next().await;
    assert_eq!(got.sender.id, "42", "{got:?}");
    assert_eq!(
        got.sender.role,
        Role::Guest,
        "a username admits a guest, never an owner"
    );
    bot.assert_idle();
    // Only the DM got an answer: a pairing code, no mention of anyone.
    let posts = fake.wait_for_posts(1, WAIT).await;
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0].channel_id, "31");
    assert!(
        posts[0].content().contains("bub pair approve discord "),
        "{}",
        posts[0].content()
    );
    assert_eq!(posts[0].body["allowed_mentions"]["parse"], json!([]));

    // By id too; never by display name (anyone can set "Dora D" or "alice" as theirs).
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, user("7", "bob"), ",help"))
        .await;
    let by_id = bot.next().await;
    assert_eq!(
        (text(&by_id), by_id.sender.role),
        (",help".into(), Role::Owner)
    );
    let fake_dora = fake_discord::user_with_global_name("8", "dora", "Dora D");
    let fake_alice = fake_discord::user_with_global_name("9", "eve", "alice");
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, fake_dora, ",touch pwned"))
        .await;
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, fake_alice, ",touch pwned").nick("alice"))
        .await;
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "marker 2"))
        .await;
    assert_eq!(bot.next().await.sender.id, "42");
    bot.assert_idle();
    bot.stop().await;
}

#[tokio::test]
async fn allow_channels_drops_every_message_elsewhere_but_allows_threads_of_listed_channels() {
    let fake = fake_discord::start().await;
    fake.set_thread("700", "question-1", CHANNEL, GUILD);
    fake.set_thread("701", "bub-other", "556", GUILD);
    let mut bot = start_bot(&fake, |s| {
        s.channel_mut("discord").allow_chats = vec![CHANNEL.into()]
    })
    .await;
    for msg in [
        Msg::guild(GUILD, "556", alice(), ",bash ls"),
        Msg::guild(GUILD, "556", alice(), "follow-up"),
        Msg::guild(GUILD, "556", alice(), "<@777> hi").mention_bot(),
        Msg::guild(GUILD, "701", alice(), "<@777> in a thread of 556").mention_bot(),
        Msg::dm("31", alice(), "a DM is a channel too"),
    ] {
        fake.dispatch_message(msg).await;
    }
    fake.dispatch_message(Msg::guild(GUILD, "700", alice(), ",help"))
        .await;
    let got = bot.next().await;
    assert_eq!(
        (got.chat_id.as_str(), text(&got).as_str()),
        ("700", ",help")
    );
    bot.assert_idle();
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "hi"))
        .await;
    assert_eq!(bot.next().await.chat_id, CHANNEL);
    bot.stop().await;
}

#[tokio::test]
async fn bot_authors_and_system_messages_are_ignored() {
    let fake = fake_discord::start().await;
    let mut bot = start_bot(&fake, |_| {}).await;
    let other_bot = fake_discord::other_bot("88", "helper");
    for msg in [
        Msg::guild(GUILD, CHANNEL, other_bot.clone(), "<@777> hi").mention_bot(),
        Msg::dm("31", other_bot, "hi"),
        Msg::guild(GUILD, CHANNEL, fake_discord::bot_user(), "my own answer"),
        Msg::guild(GUILD, CHANNEL, alice(), "pinned a message").set("type", json!(6)),
        Msg::guild(GUILD, CHANNEL, alice(), ""),
    ] {
        fake.dispatch_message(msg).await;
    }
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "marker"))
        .await;
    assert_eq!(text(&bot.next().await), "marker");
    bot.assert_idle();
    bot.stop().await;
}

#[tokio::test]
async fn attachments_and_stickers_are_described_with_their_files() {
    let fake = fake_discord::start().await;
    let mut bot = start_bot(&fake, |_| {}).await;
    let msg = Msg::dm("31", alice(), "")
        .attachment("5", "photo.png", Some("image/png"), 2048)
        .attachment("6", "notes", None, 12);
    fake.dispatch_message(msg).await;
    let got = bot.next().await;
    assert_eq!(text(&got), "[Attachment: photo.png]\n[Attachment: notes]");
    let url = "https://cdn.example.invalid/attachments/5/photo.png";
    assert_eq!(
        got.attachments[0],
        Attachment {
            name: Some("photo.png".into()),
            mime: Some("image/png".into()),
            size: Some(2048),
            ..Attachment::new(AttachmentKind::File, Some(url.into()))
        }
    );
    assert_eq!(got.attachments[1].mime, None, "no type given");

    fake.dispatch_message(Msg::dm("31", alice(), "").sticker("9", "wave"))
        .await;
    let got = bot.next().await;
    assert_eq!(text(&got), "[Sticker: wave]");
    assert_eq!(
        got.attachments,
        [Attachment {
            name: Some("wave".into()),
            ..Attachment::new(AttachmentKind::Sticker(Box::default()), None)
        }]
    );
    bot.stop().await;
}

/// An adapter that only sends (its `run` is not started).
fn sender(fake: &FakeDiscord) -> Discord {
    discord(&settings(fake, |_| {}))
}

#[tokio::test]
async fn typing_posts_to_the_channel() {
    let fake = fake_discord::start().await;
    let discord = sender(&fake);
    bounded(discord.typing(&CHANNEL.into())).await.unwrap();
    assert_eq!(fake.wait_for_typing(1, WAIT).await, [CHANNEL]);
    assert_eq!(fake.typing_calls(), [CHANNEL]);
    let call = &fake.requests_to("POST", "/api/v10/channels/555/typing")[0];
    assert_eq!(
        call.header("authorization"),
        Some(format!("Bot {TOKEN}").as_str())
    );
}

#[tokio::test]
async fn shutdown_returns_promptly() {
    let fake = fake_discord::start().await;
    let bot = start_bot(&fake, |_| {}).await;
    let started = Instant::now();
    bot.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    // Cancelled before it ever connected.
    let bot = spawn_bot(&fake, |_| {});
    let started = Instant::now();
    bot.stop().await;
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn a_rejected_token_is_a_clear_error_without_the_token() {
    let fake = fake_discord::start().await;
    fake.require_token("another-token");
    let bot = spawn_bot(&fake, |_| {});
    let err = format!("{:#}", bounded(bot.task).await.unwrap().unwrap_err());
    assert!(
        err.contains("BUB_DISCORD_TOKEN: Discord rejected the bot token"),
        "{err}"
    );
    assert!(!err.contains(TOKEN), "{err}");

    // Accepted over REST but refused by the gateway (close code 4004).
    let fake = fake_discord::start().await;
    fake.reject_identify(true);
    let bot = spawn_bot(&fake, |_| {});
    let err = format!("{:#}", bounded(bot.task).await.unwrap().unwrap_err());
    assert!(
        err.contains("BUB_DISCORD_TOKEN: Discord rejected the bot token"),
        "{err}"
    );
    assert!(!err.contains(TOKEN), "{err}");
}

#[tokio::test]
async fn heartbeats_are_acknowledged_and_the_connection_stays_up() {
    let fake = fake_discord::start().await;
    fake.set_heartbeat_interval(Duration::from_millis(200));
    let mut bot = start_bot(&fake, |_| {}).await;
    fake.wait_for_heartbeats(3, WAIT).await;
    fake.dispatch_message(Msg::dm("31", alice(), "still there?"))
        .await;
    assert!(bot.next().await.mentioned);
    assert_eq!(fake.identifies().len(), 1, "no reconnect");
    bot.stop().await;
}

/// A `MakeWriter` collecting log output.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn logs_carry_neither_the_token_nor_message_text() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .with_ansi(false)
        .finish();
    // The test runtime is single-threaded, so a thread-local default sees every task.
    let _guard = tracing::subscriber::set_default(subscriber);

    let fake = fake_discord::start().await;
    let mut bot = start_bot(&fake, |s| {
        s.channel_mut("discord").allow_from = vec!["alice".into()]
    })
    .await;
    fake.dispatch_message(Msg::guild(
        GUILD,
        CHANNEL,
        user("66", "mallory"),
        "private-words-1",
    ))
    .await;
    fake.dispatch_message(Msg::guild(GUILD, CHANNEL, alice(), "private-words-2").mention_bot())
        .await;
    assert!(bot.next().await.mentioned);
    let out = outbound(CHANNEL, "x", None);
    fake.fail_next_post(
        429,
        json!({"message": "slow down", "retry_after": 0.01}),
        &[],
    );
    bounded(support::send(bot.adapter.as_ref(), &out))
        .await
        .unwrap();
    bot.stop().await;

    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(
        text.contains("discord.inbound") && text.contains("sender_not_allowed"),
        "{text}"
    );
    assert!(text.contains("discord.rate_limited"), "{text}");
    let ours: String = text.lines().filter(|l| l.contains("bub::")).collect();
    assert!(
        !ours.contains("private-words"),
        "message text logged:\n{ours}"
    );
    assert!(!text.contains(TOKEN), "token logged");
}

/// Discord's REST API out of reach: the error names the host and port and the proxy, without
/// the proxy's credentials or the token.
#[tokio::test]
async fn an_unreachable_discord_is_named_with_its_proxy() {
    let closed = || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (port, proxy) = (closed(), closed());
    for (configured, route) in [
        (None, "no proxy".to_owned()),
        (
            Some(format!("http://user:secret@127.0.0.1:{proxy}")),
            format!("via proxy http://127.0.0.1:{proxy}"),
        ),
    ] {
        let mut s = Settings::with_defaults(PathBuf::from("/nonexistent/home"), PathBuf::from("."));
        s.channel_mut("discord").enabled = true;
        s.channel_mut("discord").token = Some(TOKEN.into());
        s.channel_mut("discord").api_base = format!("http://127.0.0.1:{port}/api/v10").into();
        s.channel_mut("discord").proxy = configured.map(Into::into);
        // A failed connection is retried like a 5xx: within a short budget here.
        s.channel_mut("discord").send_retry_budget = Duration::from_secs(2);
        let discord = Discord::new(&s, Arc::new(Access::new(&s))).unwrap();
        let started = Instant::now();
        let err = bounded(discord.send_part(&Part::text(CHANNEL, "hi")))
            .await
            .unwrap_err();
        // At least one retry after a backoff of 1 s (×0.5 to ×1.5).
        assert!(
            started.elapsed() >= Duration::from_millis(500),
            "not retried"
        );
        let text = format!("{err:#}");
        assert!(
            text.contains(&format!(
                "cannot reach 127.0.0.1:{port} ({route}): connection refused"
            )),
            "{text}"
        );
        assert!(!text.contains("secret") && !text.contains(TOKEN), "{text}");
    }
}
