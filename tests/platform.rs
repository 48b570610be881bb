//! Adding a platform is one module and one line: "fakechat" (`support/fake_platform.rs`) is
//! served by the daemon's own pieces — the platform list its channels are built from, the
//! agent against the fake model, the channel manager and the session actors — and its
//! messages pass the same admission gate as Telegram's and Discord's: an owner is answered, a
//! stranger gets a pairing code in a private chat and nothing in a group, and once approved
//! is answered as a guest.

use std::sync::Arc;

use bub::access::{Access, Role};
use bub::agent::AgentRuntime;
use bub::config::{Model, Settings};
use bub::daemon::{ChannelManager, SessionConfig};
use bub::delivery::{PLATFORMS, served_channels};
use bub::inbox::Inbox;
use tokio_util::sync::CancellationToken;

use crate::support::fake_openai;
use crate::support::fake_platform::{self, Said, Server};
use crate::support::wait::bounded;

const OWNER: &str = "7";

#[tokio::test(flavor = "multi_thread")]
async fn a_third_platform_is_one_module_and_one_line_behind_the_same_gate() {
    let dir = tempfile::tempdir().unwrap();
    let (home, workspace) = (dir.path().join("home"), dir.path().join("ws"));
    std::fs::create_dir_all(&workspace).unwrap();
    let model = fake_openai::start().await;
    let server = Server::start();

    let mut s = Settings::with_defaults(home.clone(), workspace);
    s.api_base = Some(model.base_url().into());
    s.model = Model {
        provider: "openai".into(),
        id: "test-model".into(),
    };
    s.message_debounce = std::time::Duration::ZERO;
    s.message_delay = std::time::Duration::ZERO;
    let fakechat = s.channel_mut("fakechat");
    fakechat.enabled = true;
    fakechat.allow_from = vec![OWNER.into()];
    fakechat.api_base = server.api_base().into();

    let agent = Arc::new(AgentRuntime::new(s, Vec::new()));
    // The one line: the platform joins the list the daemon's channels are built from.
    let platforms = [PLATFORMS, &[fake_platform::PLATFORM]].concat();
    let channels = served_channels(&platforms, agent.settings(), agent.access()).unwrap();
    assert_eq!(channels.len(), 1, "only fakechat is enabled");
    agent.outbox().install(&channels);
    let cfg = SessionConfig::from_settings(agent.settings());
    let mut manager = ChannelManager::new(agent.clone(), cfg, Arc::new(Inbox::memory()));
    manager.add(channels[0].clone()).unwrap();
    let shutdown = CancellationToken::new();
    let daemon = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { manager.run(shutdown).await }
    });

    // The owner (an id on the allow-list) is answered by the model.
    model.push_text("hello from the model");
    server.say(Said::private(OWNER, "hi there"));
    let sent = server.wait_for_sent(1).await;
    assert_eq!(sent[0].chat, OWNER);
    assert_eq!(sent[0].text, "hello from the model");
    assert_eq!(model.request_count(), 1);
    assert!(
        model.requests()[0].to_string().contains("hi there"),
        "the message reached the model"
    );

    // A stranger in a group: nothing. A stranger in a private chat: a pairing code.
    server.say(Said::group("-5", "99", "bub, who are you?"));
    server.say(Said::private("99", "let me in"));
    let sent = server.wait_for_sent(2).await;
    assert_eq!(sent[1].chat, "99", "nothing went to the group: {sent:?}");
    let code = sent[1]
        .text
        .split_whitespace()
        .skip_while(|w| *w != "fakechat")
        .nth(1)
        .unwrap_or_else(|| panic!("no pairing code: {}", sent[1].text))
        .to_owned();
    assert!(sent[1].text.contains("bub pair approve fakechat "));
    assert!(sent[1].text.contains("Your fakechat user id is 99."));
    assert_eq!(
        model.request_count(),
        1,
        "no stranger's message reached the model"
    );

    // Approved (as `bub pair approve` does, from another process), the stranger is a guest.
    let approver = Access::new(agent.settings());
    let paired = approver
        .approve("fakechat", &code, None, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(paired.role, Role::Guest, "the channel has an owner already");
    model.push_text("welcome");
    server.say(Said::private("99", "thanks"));
    let sent = server.wait_for_sent(3).await;
    assert_eq!(
        (sent[2].chat.as_str(), sent[2].text.as_str()),
        ("99", "welcome")
    );
    assert_eq!(model.request_count(), 2);
    assert!(server.sent().iter().all(|m| m.chat != "-5"));

    shutdown.cancel();
    bounded(daemon).await.unwrap().unwrap();
}
