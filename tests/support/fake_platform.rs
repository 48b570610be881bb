//! A third chat platform, "fakechat", added the way ARCHITECTURE.md says a platform is added:
//! this module (the adapter, implementing `Channel`) and one line — its [`PLATFORM`] in the list
//! of platforms the daemon's channels are built from. Nothing else in Bub knows it: its settings
//! are an entry of the settings' channel table (`settings.channel_mut("fakechat")`), and its
//! messages are admitted by the same gate as Telegram's and Discord's.
//!
//! Its "server" is in memory: a [`Server`] registered under an address that the platform's
//! `api_base` names (as the other fakes are reached by their port). The test says things into
//! it ([`Server::say`]) and reads what the bot sent ([`Server::wait_for_sent`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use async_trait::async_trait;
use bub::access::{Access, Chat, ChatKind, Decision, Gate, User};
use bub::channels::{Channel, ChatInfo, Inbound, InboundSink, MessageId, Part, Sender};
use bub::config::Settings;
use bub::delivery::Platform;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::wait::bounded;

/// The platform's one line.
pub const PLATFORM: Platform = Platform::new("fakechat", |s, a| Ok(Arc::new(FakeChat::new(s, a)?)));

/// One message a user writes on the platform.
#[derive(Debug, Clone)]
pub struct Said {
    pub chat: String,
    pub private: bool,
    pub sender: String,
    pub username: Option<String>,
    pub text: String,
}

impl Said {
    /// `sender` writes `text` to the bot in their private chat.
    pub fn private(sender: &str, text: &str) -> Self {
        Self {
            chat: sender.to_owned(),
            private: true,
            sender: sender.to_owned(),
            username: None,
            text: text.to_owned(),
        }
    }

    /// `sender` writes `text` in group `chat`.
    pub fn group(chat: &str, sender: &str, text: &str) -> Self {
        Self {
            chat: chat.to_owned(),
            private: false,
            ..Self::private(sender, text)
        }
    }
}

/// One message the bot sent: its chat and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub chat: String,
    pub text: String,
}

/// The platform's side of one test.
struct Inner {
    said: mpsc::UnboundedSender<Said>,
    to_bot: Mutex<Option<mpsc::UnboundedReceiver<Said>>>,
    sent: Mutex<Vec<Sent>>,
    sent_notify: Notify,
}

/// The servers of the running tests, by address.
static SERVERS: LazyLock<Mutex<HashMap<String, Arc<Inner>>>> = LazyLock::new(Mutex::default);

/// An in-memory fakechat server (see the module docs); unregistered when dropped.
pub struct Server {
    address: String,
    inner: Arc<Inner>,
}

impl Server {
    pub fn start() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let address = format!("fakechat://server-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let (said, to_bot) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            said,
            to_bot: Mutex::new(Some(to_bot)),
            sent: Mutex::default(),
            sent_notify: Notify::new(),
        });
        SERVERS
            .lock()
            .unwrap()
            .insert(address.clone(), Arc::clone(&inner));
        Self { address, inner }
    }

    /// What the platform's `api_base` is set to.
    pub fn api_base(&self) -> String {
        self.address.clone()
    }

    /// A user writes to the bot.
    pub fn say(&self, said: Said) {
        self.inner.said.send(said).expect("the adapter runs");
    }

    /// What the bot sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.inner.sent.lock().unwrap().clone()
    }

    /// Waits (bounded) until the bot sent `n` messages.
    pub async fn wait_for_sent(&self, n: usize) -> Vec<Sent> {
        bounded(async {
            loop {
                let notified = self.inner.sent_notify.notified();
                let sent = self.sent();
                if sent.len() >= n {
                    return sent;
                }
                notified.await;
            }
        })
        .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        SERVERS.lock().unwrap().remove(&self.address);
    }
}

impl Inner {
    fn record(&self, chat: &str, text: &str) {
        self.sent.lock().unwrap().push(Sent {
            chat: chat.to_owned(),
            text: text.to_owned(),
        });
        self.sent_notify.notify_waiters();
    }
}

/// The fakechat adapter.
pub struct FakeChat {
    server: Arc<Inner>,
    gate: Gate,
    next_id: AtomicU64,
}

impl FakeChat {
    /// Connects to the server the `fakechat` settings' `api_base` names.
    pub fn new(settings: &Settings, access: Arc<Access>) -> anyhow::Result<Self> {
        let base = &settings.channels["fakechat"].api_base;
        let server = SERVERS
            .lock()
            .unwrap()
            .get(&**base)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("fakechat: no server at {:?}", &**base))?;
        Ok(Self {
            server,
            gate: Gate::new(access),
            next_id: AtomicU64::new(1),
        })
    }

    /// One message: the gate's inputs from it, then what the decision says.
    async fn on_message(&self, said: Said, inbound: &InboundSink) -> anyhow::Result<()> {
        let kind = match said.private {
            true => ChatKind::Private,
            false => ChatKind::Group,
        };
        let chat = Chat {
            id: &said.chat,
            kind,
        };
        let sender = User {
            id: &said.sender,
            name: said.username.as_deref(),
            display: None,
        };
        match self.gate.decide("fakechat", chat, sender).await {
            Decision::Admit(role) => {
                let message_id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let sender = Sender::new(&said.sender, said.username.as_deref(), role);
                let id = message_id.to_string();
                let message = Inbound {
                    mentioned: true,
                    reply: !said.private,
                    chat: match said.private {
                        true => ChatInfo::private(),
                        false => ChatInfo::group(None),
                    },
                    ..Inbound::new("fakechat", &said.chat, &id, sender, &said.text)
                };
                inbound.deliver(message, None).await?;
            }
            Decision::Pair(text) => self.server.record(&said.chat, &text),
            Decision::Drop(_) => {}
        }
        Ok(())
    }
}

#[async_trait]
impl Channel for FakeChat {
    fn name(&self) -> &'static str {
        "fakechat"
    }

    async fn run(&self, inbound: InboundSink, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut to_bot = self
            .server
            .to_bot
            .lock()
            .unwrap()
            .take()
            .ok_or_else(|| anyhow::anyhow!("fakechat: the server has a client already"))?;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                said = to_bot.recv() => match said {
                    Some(said) => self.on_message(said, &inbound).await?,
                    None => return Ok(()),
                },
            }
        }
    }

    async fn send_part(&self, part: &Part) -> anyhow::Result<Option<MessageId>> {
        self.server.record(&part.chat.0, &part.text);
        Ok(None)
    }

    fn message_limit(&self) -> usize {
        4096
    }

    async fn check_recipient(&self, chat_id: &str) -> anyhow::Result<()> {
        match self.gate.serves("fakechat", chat_id, async { None }).await {
            true => Ok(()),
            false => anyhow::bail!("refused: fakechat chat {chat_id} is not served"),
        }
    }
}
