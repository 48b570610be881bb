//! The channel manager with scripted in-process channels (no network): routing to per-chat
//! sessions, delivery back through the owning channel, channel failures, eviction and shutdown.
//! The platform adapters are covered against fake servers in `tests/telegram.rs`,
//! `tests/discord.rs` and `tests/daemon.rs`.

use crate::support;

use bub::access::Role;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bub::agent::{Reply, TurnInput, TurnRequest, TurnResult};
use bub::channels::{Channel, Inbound, InboundSink, MessageId, Outbound, Part, Sender, SessionId};
use bub::daemon::{ChannelManager, SessionConfig, TurnRunner};
use bub::inbox::Inbox;
use support::wait::bounded;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A channel that delivers `script` at start (and whatever `inject` later receives).
struct Scripted {
    name: &'static str,
    script: Vec<Inbound>,
    fail: Option<&'static str>,
    inject: Mutex<Option<mpsc::UnboundedReceiver<Inbound>>>,
    sent: Mutex<Vec<Outbound>>,
    sent_notify: Notify,
}

impl Scripted {
    fn new(
        name: &'static str,
        script: Vec<Inbound>,
    ) -> (Arc<Self>, mpsc::UnboundedSender<Inbound>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let channel = Arc::new(Self {
            name,
            script,
            fail: None,
            inject: Mutex::new(Some(rx)),
            sent: Mutex::default(),
            sent_notify: Notify::new(),
        });
        (channel, tx)
    }

    async fn wait_sent(&self, n: usize) -> Vec<Outbound> {
        bounded(async {
            loop {
                let notified = self.sent_notify.notified();
                let sent = self.sent.lock().unwrap().clone();
                if sent.len() >= n {
                    return sent;
                }
                notified.await;
            }
        })
        .await
    }
}

#[async_trait]
impl Channel for Scripted {
    fn name(&self) -> &'static str {
        self.name
    }

    async fn run(&self, inbound: InboundSink, shutdown: CancellationToken) -> anyhow::Result<()> {
        if let Some(message) = self.fail {
            anyhow::bail!("{message}");
        }
        for message in &self.script {
            inbound.deliver(message.clone(), None).await.unwrap();
        }
        let mut inject = self.inject.lock().unwrap().take().unwrap();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                Some(message) = inject.recv() => { inbound.deliver(message, None).await.unwrap(); }
            }
        }
    }

    async fn send_part(&self, part: &Part) -> anyhow::Result<Option<MessageId>> {
        let out = Outbound {
            chat_id: part.chat.0.clone(),
            text: part.text.clone(),
            reply_to: part.reply_to.as_ref().map(|id| id.0.clone()),
            file: part.file.clone(),
            edit: None,
        };
        self.sent.lock().unwrap().push(out);
        self.sent_notify.notify_waiters();
        Ok(None)
    }

    fn message_limit(&self) -> usize {
        usize::MAX
    }

    async fn check_recipient(&self, _: &str) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Answers `echo <session>: <prompt>`; never answers prompts containing `hang`.
#[derive(Default)]
struct Echo {
    released: Mutex<Vec<String>>,
    /// Notified when a turn starts.
    started: Notify,
}

#[async_trait]
impl TurnRunner for Echo {
    async fn turn(&self, request: TurnRequest) -> TurnResult {
        let (session_id, input) = (&request.session, request.input);
        let prompt = match input {
            TurnInput::Text(text) | TurnInput::Command(text) | TurnInput::Task(text) => text,
            // The batch's channel line (its adapter), then the texts.
            TurnInput::Chat(batch) => {
                let texts: Vec<_> = batch
                    .messages
                    .iter()
                    .map(|m| m.text().into_owned())
                    .collect();
                format!("channel: ${}\n{}", batch.adapter.name(), texts.join("\n"))
            }
        };
        self.started.notify_one();
        if prompt.contains("hang") {
            std::future::pending::<()>().await;
        }
        let text = format!("echo {session_id}: {prompt}");
        TurnResult {
            replies: vec![Reply { text: text.clone() }],
            assistant_output: text,
            ..Default::default()
        }
    }

    fn release(&self, session_id: &SessionId) {
        self.released.lock().unwrap().push(session_id.to_string());
    }
}

fn config() -> SessionConfig {
    SessionConfig {
        debounce: Duration::ZERO,
        delay: Duration::ZERO,
        window: Duration::from_secs(60),
        max_wait: Duration::from_secs(10),
        idle_ttl: Duration::from_secs(600),
        typing_interval: Duration::from_secs(4),
        live: false,
        home: std::env::temp_dir(),
    }
}

/// A manager over `runner` with [`config`] and an inbox in memory.
fn new_manager(runner: Arc<Echo>) -> ChannelManager {
    ChannelManager::new(runner, config(), Arc::new(Inbox::memory()))
}

/// Runs `manager` until the returned token is cancelled.
fn start(manager: ChannelManager) -> (CancellationToken, JoinHandle<anyhow::Result<()>>) {
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { manager.run(shutdown).await }
    });
    (shutdown, run)
}

fn inbound(channel: &str, chat: &str, id: &str, text: &str) -> Inbound {
    let sender = Sender::new("42", None, Role::Owner);
    Inbound {
        mentioned: true,
        ..Inbound::new(channel, chat, id, sender, text)
    }
}

#[tokio::test]
async fn each_chat_gets_its_own_session_and_its_own_replies() {
    let (tg, _tx) = Scripted::new(
        "tg",
        vec![
            inbound("tg", "1", "10", "hello"),
            inbound("tg", "2", "20", "hi"),
        ],
    );
    let mut manager = new_manager(Arc::default());
    manager.add(tg.clone()).unwrap();
    let (shutdown, run) = start(manager);
    let mut sent = tg.wait_sent(2).await;
    sent.sort_by(|a, b| a.chat_id.cmp(&b.chat_id));
    assert_eq!(sent[0].chat_id, "1");
    assert_eq!(sent[0].text, "echo tg:1: channel: $tg\nhello");
    assert_eq!(sent[1].text, "echo tg:2: channel: $tg\nhi");
    shutdown.cancel();
    bounded(run).await.unwrap().unwrap();
}

#[tokio::test]
async fn replies_go_back_through_the_channel_that_owns_the_chat() {
    let (a, _ta) = Scripted::new("alpha", vec![inbound("alpha", "7", "1", "from alpha")]);
    let (b, _tb) = Scripted::new("beta", vec![inbound("beta", "7", "1", "from beta")]);
    let mut manager = new_manager(Arc::default());
    manager.add(a.clone()).unwrap();
    manager.add(b.clone()).unwrap();
    assert_eq!(manager.channel_names(), ["alpha", "beta"]);
    let (shutdown, run) = start(manager);
    assert_eq!(
        a.wait_sent(1).await[0].text,
        "echo alpha:7: channel: $alpha\nfrom alpha"
    );
    assert_eq!(
        b.wait_sent(1).await[0].text,
        "echo beta:7: channel: $beta\nfrom beta"
    );
    shutdown.cancel();
    bounded(run).await.unwrap().unwrap();
}

#[tokio::test]
async fn duplicate_names_and_failing_channels_are_errors() {
    let mut manager = new_manager(Arc::default());
    let (a, _) = Scripted::new("same", vec![]);
    let (b, _) = Scripted::new("same", vec![]);
    manager.add(a).unwrap();
    let err = manager.add(b).unwrap_err().to_string();
    assert!(err.contains("channel 'same' already registered"), "{err}");

    let mut manager = new_manager(Arc::default());
    manager
        .add(Arc::new(Scripted {
            name: "broken",
            script: vec![],
            fail: Some("token rejected"),
            inject: Mutex::new(None),
            sent: Mutex::default(),
            sent_notify: Notify::new(),
        }))
        .unwrap();
    let err = bounded(manager.run(CancellationToken::new()))
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("channel broken: token rejected"),
        "{err:#}"
    );
}

#[tokio::test(start_paused = true)]
async fn idle_sessions_are_evicted_and_come_back_on_the_next_message() {
    let (tg, inject) = Scripted::new("tg", vec![inbound("tg", "1", "1", "one")]);
    let runner = Arc::new(Echo::default());
    let mut cfg = config();
    cfg.idle_ttl = Duration::from_secs(30);
    let mut manager = ChannelManager::new(runner.clone(), cfg, Arc::new(Inbox::memory()));
    manager.add(tg.clone()).unwrap();
    let actors = manager.actors();
    let (shutdown, run) = start(manager);
    tg.wait_sent(1).await;
    assert_eq!(actors.len(), 1);
    // Lets 31 s pass on the paused clock (at once in real time): the session idles past its TTL.
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(actors.len(), 0, "evicted after the idle TTL");
    assert_eq!(*runner.released.lock().unwrap(), ["tg:1"]);
    inject.send(inbound("tg", "1", "2", "two")).unwrap();
    assert_eq!(
        tg.wait_sent(2).await[1].text,
        "echo tg:1: channel: $tg\ntwo"
    );
    assert_eq!(actors.len(), 1);
    shutdown.cancel();
    bounded(run).await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_drops_a_hanging_turn_after_the_grace_period() {
    let (tg, _tx) = Scripted::new("tg", vec![inbound("tg", "1", "1", "hang forever")]);
    let runner = Arc::new(Echo::default());
    let mut manager = new_manager(runner.clone());
    manager.add(tg).unwrap();
    let (shutdown, run) = start(manager);
    bounded(runner.started.notified()).await;
    let started = tokio::time::Instant::now();
    shutdown.cancel();
    bounded(run).await.unwrap().unwrap();
    let took = started.elapsed();
    assert!(
        took <= Duration::from_secs(10),
        "stopped within 10 s: {took:?}"
    );
}
