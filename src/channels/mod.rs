//! Channels: the chat platforms Bub serves (Telegram, Discord), behind one small trait.
//!
//! * [`Channel`] — what an adapter does, speaking only to its platform: run (receive platform
//!   messages and turn them into [`Inbound`] values), send one [`Part`] (one platform message,
//!   as delivery decided it), edit one, show a typing indicator, download a file. A third
//!   platform is one new module implementing it plus one line in
//!   [`crate::delivery::PLATFORMS`]; its settings and access lists are entries by name,
//!   needing no code.
//! * [`InboundSink`] — where an adapter hands what it received: the durable inbox first, then
//!   a bounded queue to the sessions (a full queue holds the adapter, never drops). It is also
//!   where an adapter says it is [`Ready`] (it knows its own name: Telegram's `getMe`, Discord's
//!   READY), for the daemon's start line.
//!
//! What is built on top: [`crate::delivery`] (the platform table, the outbox, how a turn's
//! result becomes a message) and [`crate::daemon`] (the session actors and the manager).
//!
//! Division of work: the gate ([`crate::access::Gate`]) decides *who may talk* — the chat list,
//! then the sender's admission and role, or a pairing code for a stranger in a private chat —
//! for every message and command, first; the adapter maps its platform's events to the gate's
//! inputs, acts on the decision (hand on, send the pairing text, drop) and decides *whether the
//! bot was addressed* (mentions, replies, keyword); the actor decides *when a turn runs*
//! (window, debounce, batching); the agent runs the turn; delivery splits the answer into
//! parts, and the adapter renders and sends each.

#[cfg(feature = "discord")]
pub mod discord;
pub(crate) mod exclusive;
#[cfg(feature = "telegram")]
pub mod telegram;
pub(crate) mod text;
pub mod webhook;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;

pub use crate::chat::{
    Attachment, AttachmentKind, ChatId, ChatInfo, Content, Control, Inbound, Live, LiveSender,
    MessageId, Outbound, Platform, Quoted, Sender, SessionId, Sticker,
};
use crate::inbox::{Inbox, Received};

/// One message as delivery decided it ([`crate::delivery`]: split at the channel's limits,
/// the file attached to the right part, the reply on the first): Markdown-ish text the adapter
/// renders for its platform — at most [`Channel::message_limit`] characters, or
/// [`Channel::caption_limit`] when it goes with a file — in chat `chat`, replying to `reply_to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub chat: ChatId,
    pub text: String,
    pub reply_to: Option<MessageId>,
    /// A file sent with the text as its caption: a photo, voice note, audio or document by its
    /// type.
    pub file: Option<std::path::PathBuf>,
}

impl Part {
    /// `text` alone in `chat`, replying to nothing.
    pub fn text(chat: impl Into<ChatId>, text: impl Into<String>) -> Self {
        Self {
            chat: chat.into(),
            text: text.into(),
            reply_to: None,
            file: None,
        }
    }
}

/// A chat platform adapter: it speaks only to its platform — receiving, and the platform's
/// calls for one message (send, edit, typing, a file's download). What is sent as which
/// messages is [`crate::delivery`]'s decision.
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// Unique name, also the session prefix (`telegram`).
    fn name(&self) -> &'static str;

    /// Connects and receives until `shutdown` is cancelled, handing every allowed message to
    /// `inbound` (addressed or not: the session decides about follow-ups) **before** confirming
    /// it to the platform. Returns an error only when the platform cannot be served at all
    /// (e.g. the token is rejected at startup).
    async fn run(&self, inbound: InboundSink, shutdown: CancellationToken) -> anyhow::Result<()>;

    /// The most characters one message carries: delivery splits a longer text at it.
    fn message_limit(&self) -> usize;

    /// The most characters of text a file carries with it (Telegram's caption: 1024); a longer
    /// text goes before the file as messages of its own. By default a message's.
    fn caption_limit(&self) -> usize {
        self.message_limit()
    }

    /// Sends one message (rendered for the platform, rate limits and transient failures
    /// retried by the shared policy) and returns its id when the platform gives one. Errors
    /// name the chat, never a secret.
    async fn send_part(&self, part: &Part) -> anyhow::Result<Option<MessageId>>;

    /// Whether [`Channel::edit`] works: then a running turn's answer is shown live.
    fn can_edit(&self) -> bool {
        false
    }

    /// Replaces the text of message `message` in `chat` with `text` (at most one message
    /// long); the same text again is not an error.
    async fn edit(&self, _chat: &ChatId, _message: &MessageId, _text: &str) -> anyhow::Result<()> {
        anyhow::bail!("{} cannot edit messages", self.name())
    }

    /// Whether this channel may send to `chat_id` outside a reply (`message.send`, `bub send`,
    /// scheduled runs): the chat must pass the channel's chat allow-list. An error says why not.
    async fn check_recipient(&self, chat_id: &str) -> anyhow::Result<()>;

    /// The private chat with user `user_id`, for a notice to them outside any conversation
    /// (an owner told of a pairing request). Telegram's is the user's id; Discord opens the
    /// DM channel.
    async fn private_chat(&self, user_id: &str) -> anyhow::Result<String> {
        Ok(user_id.to_owned())
    }

    /// Shows the typing indicator once; the session repeats it while a turn runs.
    async fn typing(&self, _chat: &ChatId) -> anyhow::Result<()> {
        Ok(())
    }

    /// Downloads `file` (one of the attachments this adapter made, by its source) into `to`,
    /// streamed, refusing more than `max_bytes` (an error that says so). Returns the bytes
    /// written.
    async fn download(
        &self,
        _file: &Attachment,
        _to: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
        _max_bytes: u64,
    ) -> anyhow::Result<u64> {
        anyhow::bail!("{} cannot download files", self.name())
    }
}

/// A setting a platform's client cannot be built with ([`crate::net::client`]), as the
/// configuration error it is (exit 2, the variable named).
pub(crate) fn invalid(e: crate::net::client::Invalid) -> anyhow::Error {
    crate::config::ConfigError::new(e.var, e.why).into()
}

/// Writes the chunks of `body` into `to`, at most `max_bytes` of them: more is an error (the
/// caller removes what was written). Returns the bytes written.
pub(crate) async fn copy_capped<S, B, E>(
    mut body: S,
    to: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
    max_bytes: u64,
) -> anyhow::Result<u64>
where
    S: futures_util::Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::error::Error + Send + Sync + 'static,
{
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    let mut written = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        let chunk = chunk.as_ref();
        written += chunk.len() as u64;
        if written > max_bytes {
            anyhow::bail!(
                "the file is larger than the {max_bytes}-byte limit (BUB_MEDIA_MAX_BYTES)"
            );
        }
        to.write_all(chunk).await?;
    }
    to.flush().await?;
    Ok(written)
}

/// A channel that is ready to serve: its name and the bot's name on it (`@bub_bot` on
/// Telegram, the bot user's name on Discord).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub channel: &'static str,
    pub bot: String,
}

/// Where an adapter hands what it received: the durable inbox first, then the session actors,
/// through a bounded queue.
#[derive(Clone)]
pub struct InboundSink {
    inbox: Arc<Inbox>,
    tx: mpsc::Sender<Inbound>,
    /// The queue was full at the last hand-off (logged once when it fills, once when it
    /// flows again).
    held: Arc<AtomicBool>,
    /// Where [`InboundSink::ready`] is told, with the channel's name (nobody: not told).
    ready: Option<(&'static str, mpsc::Sender<Ready>)>,
}

impl InboundSink {
    pub fn new(inbox: Arc<Inbox>, tx: mpsc::Sender<Inbound>) -> Self {
        Self {
            inbox,
            tx,
            held: Arc::default(),
            ready: None,
        }
    }

    /// Tells `to` when channel `channel`'s adapter is ready ([`InboundSink::ready`]).
    pub(crate) fn announcing(mut self, channel: &'static str, to: mpsc::Sender<Ready>) -> Self {
        self.ready = Some((channel, to));
        self
    }

    /// The adapter is ready to serve as `bot` (after each connection; whoever listens keeps
    /// the first). Never waits: a listener that is behind misses a repeat.
    pub(crate) fn ready(&self, bot: &str) {
        if let Some((channel, to)) = &self.ready {
            let _ = to.try_send(Ready {
                channel,
                bot: bot.to_owned(),
            });
        }
    }

    /// Journals `inbound` and hands it on. `cursor` is the platform's position to resume
    /// from (Telegram's update id). Returns once the message is on disk and in the sessions'
    /// queue: while that queue is full it waits, and so does the adapter — which confirms
    /// nothing meanwhile (backpressure reaches the platform; nothing is dropped).
    /// `Ok(false)`: a message received before, dropped. An error means it is **not** on disk:
    /// the adapter must not confirm it to the platform.
    pub async fn deliver(&self, mut inbound: Inbound, cursor: Option<u64>) -> anyhow::Result<bool> {
        match self.inbox.receive(&mut inbound, cursor).await? {
            Received::Duplicate => {
                tracing::info!(session = %inbound.session_id(),
                    message_id = %inbound.message_id, "inbox.duplicate");
                Ok(false)
            }
            Received::New(_) => {
                crate::metrics::received(&inbound.channel);
                let waited = match self.tx.try_send(inbound) {
                    Ok(()) => Ok(()),
                    Err(TrySendError::Full(inbound)) => {
                        if !self.held.swap(true, Relaxed) {
                            tracing::warn!(session = %inbound.session_id(),
                                "inbound.held: the sessions' queue is full; waiting, and \
                                 confirming nothing more to the platform meanwhile");
                        }
                        self.tx.send(inbound).await.map_err(|_| ())
                    }
                    Err(TrySendError::Closed(_)) => Err(()),
                };
                match waited {
                    // The manager stopped: the message is journaled and resumes on restart.
                    Err(()) => tracing::debug!("inbound receiver closed"),
                    Ok(()) => {
                        if self.tx.capacity() > 0 && self.held.swap(false, Relaxed) {
                            tracing::info!("inbound.flowing: the sessions' queue has room again");
                        }
                    }
                }
                Ok(true)
            }
        }
    }

    /// Reads the platform positions again (with replicas: what the others received while
    /// this one stood by), before polling or catching up.
    pub(crate) async fn refresh_positions(&self) -> anyhow::Result<()> {
        self.inbox.refresh_positions().await
    }

    /// The platform cursor journaled for `channel` (Telegram: the last update id taken).
    pub(crate) fn cursor(&self, channel: &str) -> Option<u64> {
        self.inbox.cursor(channel)
    }

    /// The newest message id seen per chat of `channel`, most recently active first.
    #[cfg(feature = "discord")]
    pub(crate) fn last_seen(&self, channel: &str, limit: usize) -> Vec<(String, u64)> {
        self.inbox.last_seen(channel, limit)
    }
}

/// The keyword rule of both platforms: `word` occurs in `text` case-insensitively with no
/// letter, digit or `_` right before or after it ("bubble" does not contain "bub"). An empty
/// `word` never matches.
pub(crate) fn contains_word(text: &str, word: &str) -> bool {
    let word = word.trim().to_lowercase();
    if word.is_empty() {
        return false;
    }
    let text = text.to_lowercase();
    let is_word_char = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(pos) = text[from..].find(&word) {
        let start = from + pos;
        let end = start + word.len();
        let before_ok = text[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !is_word_char(c));
        let after_ok = text[end..].chars().next().is_none_or(|c| !is_word_char(c));
        if before_ok && after_ok {
            return true;
        }
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}
