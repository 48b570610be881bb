//! The Telegram adapter (real teloxide) against the fake Bot API on 127.0.0.1: what becomes an
//! `Inbound` (allow-lists, commands, mentions, the typed message) and what crosses the wire on
//! delivery (splitting, HTML with plain-text fallback, 429 `retry_after`, typing), plus startup
//! and shutdown behaviour. Every wait is bounded; nothing reaches the internet.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bub::access::{Access, Role};
use bub::channels::telegram::{START_REPLY, Telegram};
use bub::channels::{
    Attachment, AttachmentKind, Channel, ChatInfo, Content, Inbound, Quoted, Sender,
};
use bub::config::Settings;
use bub::inbox::Inbox;
use serde_json::json;
use support::adapter::Running;
use support::fake_telegram::{
    self, BOT_USERNAME, FakeTelegram, TOKEN, bot_user, group_text, private_text, user,
};
use support::outbound;
use support::wait::{WAIT, bounded};

/// Settings against `fake`: everyone admitted (as guests) unless `configure` says otherwise.
/// `BUB_HOME` is a path no test creates (tests that pair set their own).
fn settings(fake: &FakeTelegram, configure: impl FnOnce(&mut Settings)) -> Settings {
    let home = std::env::temp_dir().join("bub-telegram-tests-no-home");
    let mut s = Settings::with_defaults(home.clone(), home);
    s.channel_mut("telegram").enabled = true;
    s.channel_mut("telegram").token = Some(TOKEN.into());
    s.channel_mut("telegram").api_base = fake.api_base().into();
    s.channel_mut("telegram").allow_from = vec!["*".into()];
    configure(&mut s);
    s
}

fn telegram(s: &Settings) -> Telegram {
    Telegram::new(s, Arc::new(Access::new(s))).expect("adapter")
}

/// The adapter running against `fake` with an inbox in memory.
fn run(fake: &FakeTelegram, configure: impl FnOnce(&mut Settings)) -> Running<Telegram> {
    Running::spawn(
        telegram(&settings(fake, configure)),
        Arc::new(Inbox::memory()),
    )
}

/// Waits until the adapter has a normal long poll out (it is past its start-up).
async fn wait_for_long_poll(fake: &FakeTelegram) {
    fake.wait_until(WAIT, "a long poll", |f| {
        f.calls_of("getUpdates")
            .iter()
            .any(|c| c.body["timeout"] == 10)
            .then_some(())
    })
    .await;
}

/// What the message says (its text, a command or a control as written).
fn text(inbound: &Inbound) -> String {
    inbound.text().into_owned()
}

#[tokio::test]
async fn private_text_becomes_a_typed_inbound() {
    let fake = fake_telegram::start().await;
    let id = fake.push_message(private_text(42, 42, "héllo bub ✓"));
    let mut bot = run(&fake, |_| {});
    let inbound = bot.next().await;
    assert_eq!(inbound.channel, "telegram");
    assert_eq!(inbound.chat_id, "42");
    assert_eq!(inbound.message_id, id.to_string());
    assert_eq!(
        inbound.sender,
        Sender {
            id: "42".into(),
            username: Some("user42".into()),
            name: Some("User42".into()),
            role: Role::Guest,
        }
    );
    assert!(inbound.mentioned, "private chats are always addressed");
    assert!(!inbound.reply, "no reply threading in private chats");
    assert_eq!(inbound.session_id(), "telegram:42");
    assert_eq!(
        inbound.content,
        Content::Text("héllo bub ✓".into()),
        "non-ASCII kept"
    );
    assert_eq!(inbound.chat, ChatInfo::private());
    assert!(inbound.attachments.is_empty() && inbound.reply_to.is_none());
    assert_eq!(inbound.platform.fields()["type"], "text");
    assert_eq!(inbound.platform.fields()["date"], 1700000000);

    // Answering while polling runs: the send goes out through the same client.
    let answer = outbound(&inbound.chat_id, "hi *there*", None);
    bounded(support::send(bot.adapter.as_ref(), &answer))
        .await
        .expect("answer sent");
    let sent = fake.sent_messages();
    assert_eq!(sent[0]["text"], "hi <i>there</i>");
    assert!(bot.stop().await.is_empty());

    let first_poll = &fake.calls_of("getUpdates")[0].body;
    assert_eq!(first_poll["allowed_updates"], json!(["message"]));
    assert_eq!(fake.calls_of("getMe")[0].token, TOKEN);
}

#[tokio::test]
async fn group_addressing_rules() {
    let fake = fake_telegram::start().await;
    let g = -100;
    let cases: Vec<(&str, fake_telegram::TgMessage, bool)> = vec![
        ("plain", group_text(g, 1, "hello everyone"), false),
        ("bubble", group_text(g, 1, "bubble tea anyone?"), false),
        ("keyword start", group_text(g, 1, "bub, hi"), true),
        ("keyword end", group_text(g, 1, "hey Bub!"), true),
        (
            "mention entity",
            group_text(g, 1, "ping @Bub_Test_Bot please").mention("@Bub_Test_Bot"),
            true,
        ),
        (
            "other bot mention",
            group_text(g, 1, "ping @other_bot").mention("@other_bot"),
            false,
        ),
        (
            "caption entity",
            group_text(g, 1, "")
                .photo(Some("look @bub_test_bot"))
                .mention("@bub_test_bot"),
            true,
        ),
        (
            "text mention",
            group_text(g, 1, "thanks Bubby").text_mention("Bubby", bot_user()),
            true,
        ),
        (
            "reply to bot",
            group_text(g, 1, "and then?").reply_to(1001, bot_user(), "an answer"),
            true,
        ),
        (
            "reply to human",
            group_text(g, 1, "and then?").reply_to(3, user(9), "hm"),
            false,
        ),
    ];
    let mut expected = Vec::new();
    for (name, msg, mentioned) in cases {
        expected.push((name, fake.push_message(msg), mentioned));
    }
    let mut bot = run(&fake, |_| {});
    for (name, id, mentioned) in expected {
        let inbound = bot.next().await;
        assert_eq!(inbound.message_id, id.to_string(), "{name}: order kept");
        assert_eq!(inbound.mentioned, mentioned, "{name}");
        assert!(inbound.reply, "{name}: group answers reply");
        assert_eq!(inbound.chat_id, "-100");
    }
    assert!(bot.stop().await.is_empty());
}

#[tokio::test]
async fn empty_keyword_disables_keyword_addressing() {
    let fake = fake_telegram::start().await;
    fake.push_message(group_text(-100, 1, "bub, hi"));
    let mut bot = run(&fake, |s| s.mention_keyword = String::new());
    assert!(!bot.next().await.mentioned);
    bot.stop().await;
}

#[tokio::test]
async fn commands_bub_start_and_others() {
    let fake = fake_telegram::start().await;
    fake.push_message(group_text(-100, 1, "/bub what time is it"));
    fake.push_message(group_text(-100, 1, "/help"));
    fake.push_message(group_text(
        -100,
        1,
        &format!("/bub@{BOT_USERNAME} ,tape.info"),
    ));
    fake.push_message(group_text(-100, 1, "/bub@other_bot hi"));
    fake.push_message(private_text(42, 42, "/start"));
    let mut bot = run(&fake, |_| {});

    let first = bot.next().await;
    assert!(first.mentioned, "/bub addresses the bot in a group");
    assert_eq!(first.content, Content::Text("what time is it".into()));
    let second = bot.next().await;
    assert_eq!(
        second.content,
        Content::Command(",tape.info".into()),
        "/bub@Bot followed by a comma command"
    );
    assert!(second.mentioned);

    let sent = fake.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0].body["chat_id"], 42);
    assert_eq!(sent[0].body["text"], START_REPLY);
    assert!(
        bot.stop().await.is_empty(),
        "/help, /bub@other_bot and /start are not inbound"
    );
}

#[tokio::test]
async fn comma_command_prompt_is_verbatim() {
    let fake = fake_telegram::start().await;
    fake.push_message(private_text(42, 42, ",fs.read path=README.md"));
    let mut bot = run(&fake, |_| {});
    let inbound = bot.next().await;
    assert_eq!(
        inbound.content,
        Content::Command(",fs.read path=README.md".into())
    );
    assert!(inbound.is_command());
    bot.stop().await;
}

#[tokio::test]
async fn allow_chats_drops_other_chats_silently() {
    let fake = fake_telegram::start().await;
    let dropped = fake.push_update(json!({"message": group_text(-5, 1, "bub hi").id(1).0}));
    fake.push_message(group_text(-100, 1, "bub hi").id(2));
    let mut bot = run(&fake, |s| {
        s.channel_mut("telegram").allow_chats = vec!["-100".into()]
    });
    let inbound = bot.next().await;
    assert_eq!(inbound.chat_id, "-100");
    fake.wait_for_confirmed(dropped, WAIT).await;
    assert!(bot.stop().await.is_empty(), "chat -5 is not allowed");
    assert!(
        fake.sent_messages().is_empty(),
        "no reply to a dropped chat"
    );
}

#[tokio::test]
async fn unknown_senders_get_one_pairing_code_privately_and_silence_in_groups() {
    let fake = fake_telegram::start().await;
    let home = tempfile::tempdir().unwrap();
    fake.push_message(private_text(50, 50, "hello"));
    fake.push_message(private_text(50, 50, "hello again"));
    fake.push_message(group_text(-100, 50, "bub hello"));
    fake.push_message(group_text(-100, 50, "/start"));
    fake.push_message(group_text(-100, 50, ",touch pwned"));
    fake.push_message(group_text(-100, 1, "bub hi").from(json!({"id": 1,
        "is_bot": false, "first_name": "Ann", "username": "Ann_Allowed"})));
    let last = fake.push_message(private_text(7, 7, "hi"));
    let mut bot = run(&fake, |s| {
        s.home = home.path().to_path_buf();
        s.channel_mut("telegram").allow_from = vec!["@ann_allowed".into(), "7".into()];
    });
    let mut admitted = [bot.next().await, bot.next().await];
    admitted.sort_by(|a, b| a.sender.id.cmp(&b.sender.id));
    let senders: Vec<&str> = admitted.iter().map(|i| i.sender.id.as_str()).collect();
    assert_eq!(senders, ["1", "7"], "admitted by username and by id");
    assert_eq!(admitted[0].sender.username.as_deref(), Some("Ann_Allowed"));
    let roles: Vec<Role> = admitted.iter().map(|i| i.sender.role).collect();
    assert_eq!(
        roles,
        [Role::Guest, Role::Owner],
        "a listed id owns the bot, a listed username is a guest"
    );
    fake.wait_for_confirmed(last, WAIT).await;
    let rest = bot.stop().await;
    assert!(
        rest.is_empty(),
        "unknown senders produce no inbound: {rest:?}"
    );
    let sent = fake.sent_messages();
    assert_eq!(
        sent.len(),
        1,
        "one code, only in the private chat: {sent:?}"
    );
    assert_eq!(sent[0]["chat_id"], 50);
    let text = sent[0]["text"].as_str().unwrap();
    let code = text
        .split_whitespace()
        .find(|w| {
            w.len() == 8
                && w.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        })
        .unwrap_or_else(|| panic!("a code in {text:?}"));
    assert!(
        text.contains(&format!("bub pair approve telegram {code}")),
        "{text}"
    );
    let access = Access::new(&settings(&fake, |s| s.home = home.path().to_path_buf()));
    let pending = access.pending(chrono::Utc::now()).await;
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].user_id.as_str(), pending[0].code.as_str()),
        ("50", code)
    );
}

#[tokio::test]
async fn message_without_sender_is_ignored() {
    let fake = fake_telegram::start().await;
    let ignored = fake.push_message(group_text(-100, 1, "bub hi").without_sender());
    fake.push_message(group_text(-100, 1, "bub there"));
    let mut bot = run(&fake, |_| {});
    let inbound = bot.next().await;
    assert_ne!(inbound.message_id, ignored.to_string());
    assert!(bot.stop().await.is_empty());
}

#[tokio::test]
async fn edits_are_not_messages() {
    let fake = fake_telegram::start().await;
    let edit = private_text(42, 42, "edited text").id(5).0;
    fake.push_update(json!({"edited_message": edit}));
    fake.push_message(private_text(42, 42, "fresh"));
    let mut bot = run(&fake, |_| {});
    assert_eq!(text(&bot.next().await), "fresh");
    assert!(bot.stop().await.is_empty());
}

#[tokio::test]
async fn media_is_described_with_its_file() {
    let fake = fake_telegram::start().await;
    fake.push_message(private_text(42, 42, "").photo(Some("sunset")));
    fake.push_message(private_text(42, 42, "").document("report.pdf", "application/pdf", None));
    fake.push_message(private_text(42, 42, "").voice(7));
    let mut bot = run(&fake, |_| {});

    let photo = bot.next().await;
    assert_eq!(photo.platform.fields()["type"], "photo");
    assert_eq!(text(&photo), "[Photo message] Caption: sunset");
    let large = AttachmentKind::Photo {
        width: 1280,
        height: 853,
    };
    assert_eq!(
        photo.attachments,
        [Attachment {
            size: Some(90000),
            ..Attachment::new(large, Some("photo-large".into()))
        }]
    );

    let doc = bot.next().await;
    assert_eq!(doc.platform.fields()["type"], "document");
    assert_eq!(text(&doc), "[Document: report.pdf (application/pdf)]");
    assert_eq!(
        doc.attachments,
        [Attachment {
            name: Some("report.pdf".into()),
            mime: Some("application/pdf".into()),
            size: Some(2048),
            ..Attachment::new(AttachmentKind::Document, Some("doc-1".into()))
        }]
    );

    let voice = bot.next().await;
    assert_eq!(voice.platform.fields()["type"], "voice");
    assert_eq!(text(&voice), "[Voice message: 7s]");
    let seven = AttachmentKind::Voice { seconds: 7 };
    assert_eq!(
        voice.attachments,
        [Attachment::new(seven, Some("voice-1".into()))]
    );
    bot.stop().await;
}

#[tokio::test]
async fn reply_context_is_quoted() {
    let fake = fake_telegram::start().await;
    let quoted = "q".repeat(150);
    fake.push_message(group_text(-100, 1, "bub why?").reply_to(1001, bot_user(), &quoted));
    let mut bot = run(&fake, |_| {});
    assert_eq!(
        bot.next().await.reply_to,
        Some(Quoted {
            message_id: "1001".into(),
            sender_id: Some("777".into()),
            username: Some(BOT_USERNAME.into()),
            text: Some("q".repeat(100)),
        })
    );
    bot.stop().await;
}

#[tokio::test]
async fn pending_updates_are_delivered_by_default() {
    let fake = fake_telegram::start().await;
    fake.push_message(private_text(42, 42, "sent while the daemon was down"));
    let mut bot = run(&fake, |_| {});
    assert_eq!(text(&bot.next().await), "sent while the daemon was down");
    bot.stop().await;
    assert!(!fake.dropped_pending_updates());
    assert_eq!(fake.pending_updates(), 0, "the stop confirmed the offset");

    // A restart does not deliver the handled message again.
    let mut again = run(&fake, |_| {});
    fake.push_message(private_text(42, 42, "after restart"));
    assert_eq!(text(&again.next().await), "after restart");
    assert!(again.stop().await.is_empty());
}

#[tokio::test]
async fn drop_pending_updates_when_configured() {
    let fake = fake_telegram::start().await;
    fake.push_message(private_text(42, 42, "old"));
    let mut bot = run(&fake, |s| {
        s.channel_mut("telegram").drop_pending_updates = true
    });
    // Once a normal long poll is running, the drop is done.
    wait_for_long_poll(&fake).await;
    assert!(fake.dropped_pending_updates());
    fake.push_message(private_text(42, 42, "new"));
    assert_eq!(text(&bot.next().await), "new");
    assert!(bot.stop().await.is_empty());
}

#[tokio::test]
async fn shutdown_returns_promptly_during_a_long_poll() {
    let fake = fake_telegram::start().await;
    let bot = run(&fake, |_| {});
    wait_for_long_poll(&fake).await;
    let started = Instant::now();
    bot.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "stopped in {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn shutdown_before_start_returns_ok() {
    let fake = fake_telegram::start().await;
    let bot = run(&fake, |_| {});
    bot.shutdown.cancel();
    let started = Instant::now();
    bot.stop().await;
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn rejected_token_fails_run_without_leaking_it() {
    let fake = fake_telegram::start().await;
    fake.accept_only_token("1:other-token");
    let bot = run(&fake, |_| {});
    let err = bounded(bot.task)
        .await
        .expect("task")
        .expect_err("a rejected token is fatal");
    let text = format!("{err:#}");
    assert!(text.contains("token"), "{text}");
    assert!(text.contains("BUB_TELEGRAM_TOKEN"), "{text}");
    assert!(!text.contains(TOKEN), "token leaked: {text}");
}

fn adapter(fake: &FakeTelegram) -> Telegram {
    telegram(&settings(fake, |_| {}))
}

#[tokio::test]
async fn long_answer_is_split_into_html_chunks_replying_first() {
    let fake = fake_telegram::start().await;
    let tg = adapter(&fake);
    let paragraph = "lorem ipsum dolor sit amet ".repeat(20);
    let text = vec![paragraph.trim(); 17].join("\n\n");
    assert!(text.chars().count() > 9000);
    bounded(support::send(&tg, &outbound("-100", &text, Some("55"))))
        .await
        .expect("sent");
    let sent = fake.sent_messages();
    assert_eq!(sent.len(), 3, "9000+ characters need 3 messages");
    for (i, body) in sent.iter().enumerate() {
        let chunk = body["text"].as_str().unwrap();
        assert!(chunk.chars().count() <= 4096, "chunk {i} too long");
        assert_eq!(body["parse_mode"], "HTML");
        assert_eq!(body["chat_id"], -100);
        if i == 0 {
            assert_eq!(body["reply_parameters"]["message_id"], 55);
            assert_eq!(
                body["reply_parameters"]["allow_sending_without_reply"],
                true
            );
        } else {
            assert!(
                body.get("reply_parameters").is_none(),
                "only the first replies"
            );
        }
    }
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let joined: Vec<String> = sent
        .iter()
        .flat_map(|b| words(b["text"].as_str().unwrap()))
        .collect();
    assert_eq!(joined, words(&text), "nothing lost or duplicated");
}

#[tokio::test]
async fn rejected_formatting_is_resent_as_plain_text() {
    let fake = fake_telegram::start().await;
    fake.fail_next(
        "sendMessage",
        400,
        fake_telegram::cant_parse_entities_body(),
    );
    let tg = adapter(&fake);
    bounded(support::send(
        &tg,
        &outbound("42", "**bold** and <tags>", None),
    ))
    .await
    .expect("plain retry succeeds");
    let sent = fake.sent_messages();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["parse_mode"], "HTML");
    assert!(sent[1].get("parse_mode").is_none());
    assert_eq!(sent[1]["text"], "**bold** and <tags>");
}

#[tokio::test]
async fn rate_limit_retry_after_is_honoured() {
    let fake = fake_telegram::start().await;
    fake.fail_next("sendMessage", 429, fake_telegram::retry_after_body(1));
    let tg = adapter(&fake);
    let out = outbound("42", "hello", None);
    bounded(support::send(&tg, &out))
        .await
        .expect("sent after waiting");
    let calls = fake.calls_of("sendMessage");
    assert_eq!(calls.len(), 2);
    let gap = calls[1].at - calls[0].at;
    assert!(gap >= Duration::from_millis(900), "waited only {gap:?}");
    assert!(gap < Duration::from_secs(5), "waited {gap:?}");
    assert_eq!(calls[1].body["text"], "hello");
}

#[tokio::test]
async fn a_retry_after_beyond_the_maximum_fails_at_once() {
    let fake = fake_telegram::start().await;
    fake.fail_next("sendMessage", 429, fake_telegram::retry_after_body(3600));
    let tg = adapter(&fake);
    let started = Instant::now();
    let err = bounded(support::send(&tg, &outbound("42", "hello", None)))
        .await
        .expect_err("rate limited");
    assert!(started.elapsed() < Duration::from_secs(5));
    let text = format!("{err:#}");
    assert!(
        text.contains("42") && text.contains("rate limited: the server asks to wait 3600 s"),
        "{text}"
    );
    assert_eq!(fake.calls_of("sendMessage").len(), 1, "no retry");
}

#[tokio::test]
async fn typing_sends_chat_action() {
    let fake = fake_telegram::start().await;
    let tg = adapter(&fake);
    bounded(tg.typing(&"-100".into())).await.expect("typing");
    let calls = fake.calls_of("sendChatAction");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].body, json!({"chat_id": -100, "action": "typing"}));
}

#[tokio::test]
async fn send_errors_name_the_chat_not_the_token() {
    let fake = fake_telegram::start().await;
    fake.fail_next("sendMessage", 400, fake_telegram::chat_not_found_body());
    let tg = adapter(&fake);
    let err = bounded(support::send(&tg, &outbound("31337", "hi", None)))
        .await
        .expect_err("chat not found");
    let text = format!("{err:#}");
    assert!(text.contains("31337"), "{text}");
    assert!(!text.contains(TOKEN), "{text}");

    // A connection error (nothing listens on the port) must not leak the token either.
    let closed = support::closed_addr();
    let tg = telegram(&settings(&fake, |s| {
        s.channel_mut("telegram").api_base = format!("http://{closed}").into()
    }));
    // Connection errors are retried for two minutes (an outage delays, not loses, an answer):
    // let the paused clock run through the pauses.
    tokio::time::pause();
    let err = support::send(&tg, &outbound("42", "hi", None))
        .await
        .expect_err("refused");
    let text = format!("{err:#}");
    assert!(text.contains("42"), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
    let err = tg.typing(&"42".into()).await.expect_err("refused");
    assert!(!format!("{err:#}").contains(TOKEN));
}

#[tokio::test]
async fn api_base_trailing_slash_is_tolerated() {
    // The fake routes `/{bot}/{method}` only: `//bot...` would not reach it.
    let fake = fake_telegram::start().await;
    let tg = telegram(&settings(&fake, |s| {
        s.channel_mut("telegram").api_base = format!("{}/", fake.api_base()).into()
    }));
    bounded(support::send(&tg, &outbound("42", "hi", None)))
        .await
        .expect("trailing slash tolerated");
    assert_eq!(fake.sent_messages().len(), 1);
}
