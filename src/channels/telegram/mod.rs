//! Telegram adapter: `getUpdates` long polling in (a loop of its own over teloxide's [`Bot`]),
//! or updates posted to a webhook ([`webhook`], `BUB_TELEGRAM_WEBHOOK_URL`); `sendMessage` out.
//!
//! * [`Telegram::new`] builds the teloxide [`Bot`] against `BUB_TELEGRAM_API_BASE` on the shared
//!   builder's client ([`crate::net::client`]): the explicit `BUB_TELEGRAM_PROXY` if set,
//!   otherwise **no** proxy (ambient `HTTPS_PROXY` is ignored by design) — `client`, which
//!   `bub init`'s [`check_token`] uses too.
//! * [`Channel::run`] checks the token with `getMe` (a rejected token is a configuration error:
//!   exit 2), then long-polls `message` updates until the
//!   shutdown token fires. Each message goes to the admission gate ([`crate::access::Gate`]: the
//!   chat list, the sender's role, a pairing code for a stranger in a private chat — the adapter
//!   sends the text the gate returns), then [`filter`] (commands, "is the bot addressed") and
//!   [`message`] (content, file, reply) and becomes an [`super::Inbound`]. Updates that arrived
//!   while Bub was down are delivered after a restart unless
//!   `BUB_TELEGRAM_DROP_PENDING_UPDATES` is set.
//! * [`Channel::send_part`] sends one message as delivery made it (at most 4096 characters, or
//!   a file with a caption of at most 1024), rendered as Telegram HTML, falls back to plain
//!   text when Telegram rejects the entities, and retries by the shared policy
//!   ([`crate::net::retry::SENDS`]): `retry_after` honoured up to 60 s (a longer one fails the
//!   send at once: "rate limited: the server asks to wait N s", the rule of [`crate::time`]),
//!   network errors and 5xx answers retried with backoff, all for up to 2 minutes.
//!
//! The bot token is part of every request URL; error texts are scrubbed of it before they are
//! logged or returned, and message texts are never logged.

mod client;
pub(crate) mod filter;
mod media;
pub(crate) mod message;
mod webhook;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use anyhow::anyhow;
use async_trait::async_trait;
use teloxide::ApiError;
use teloxide::RequestError;
use teloxide::prelude::*;
use teloxide::types::{
    AllowedUpdate, BotCommand, ChatAction, MessageId, ParseMode, Recipient, ReplyParameters,
    UpdateKind,
};
use tokio_util::sync::CancellationToken;

use self::client::{Client, describe};
pub use self::client::{TokenCheck, check_token};
use self::filter::{BotIdentity, Command};
use super::{Attachment, Channel, Content, InboundSink, Part, exclusive, text};
use crate::access::{Access, Chat, ChatKind, Decision, Dropped, Gate, User};
use crate::chat;
use crate::config::{ConfigError, Settings};
use crate::net::retry::{Failure, retry};
use crate::time::server_wait;

/// Telegram's message size limit (characters after entity parsing).
pub(crate) const MESSAGE_LIMIT: usize = 4096;
/// Long-poll timeout sent to `getUpdates` (the request's own timeout is extended by it).
const POLL_TIMEOUT: Duration = Duration::from_secs(10);
/// First pause after a failed `getUpdates` (doubled on each failure in a row).
const POLL_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Longest pause between failed `getUpdates`.
const POLL_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long a stop may take to confirm the last offset and finish in-flight handlers.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Reply to `/start`.
pub const START_REPLY: &str = "Bub is online. Send text to start.";

/// The Telegram channel adapter.
pub struct Telegram {
    bot: Bot,
    token: String,
    gate: Gate,
    keyword: String,
    drop_pending_updates: bool,
    /// `BUB_MEDIA_MAX_BYTES`: the photo size described is the largest within it.
    media_max_bytes: u64,
    /// The Bot API's client: its base and route (for connection errors) and how sends are
    /// retried ([`crate::net::retry::SENDS`], within the channel's `send_retry_budget`).
    http: crate::net::client::Client,
    /// `BUB_TELEGRAM_WEBHOOK_URL`: updates are posted (else polled).
    webhook: Option<webhook::Webhook>,
    /// With replicas, the database whose lock lets one of them poll.
    database: Option<Arc<crate::db::Database>>,
}

impl Telegram {
    /// Builds the client from the `telegram` channel settings (token, API base, proxy) without
    /// any network call; messages are admitted by `access`'s gate. A missing token or a bad URL
    /// is a [`ConfigError`].
    pub fn new(settings: &Settings, access: Arc<Access>) -> anyhow::Result<Self> {
        let tg = &settings.channels["telegram"];
        let Client { bot, token, http } = Client::new(tg)?;
        Ok(Self {
            bot,
            token,
            gate: Gate::new(access),
            keyword: settings.mention_keyword.clone(),
            drop_pending_updates: tg.drop_pending_updates,
            media_max_bytes: settings.media.max_bytes,
            http,
            webhook: tg
                .webhook_url
                .clone()
                .zip(tg.webhook_secret.clone())
                .map(|(url, secret)| webhook::Webhook { url, secret }),
            database: settings.database()?,
        })
    }

    /// `err` as text: a failed connection names the host and the proxy ([`crate::net`]),
    /// anything else is teloxide's text with the token redacted.
    fn describe(&self, err: &RequestError) -> String {
        describe(err, &self.token, &self.http)
    }

    /// The error that stops the channel at start (`getMe`) or while polling: a rejected token
    /// (Telegram answers 401 `Unauthorized`, or 404 `Not Found` for a token that is no bot's
    /// path) is a [`ConfigError`] naming `BUB_TELEGRAM_TOKEN` — restarting cannot fix it, so
    /// `bub message` exits 2; anything else (the network, a 5xx) is a plain error (exit 1).
    fn startup_error(&self, err: &RequestError) -> anyhow::Error {
        match err {
            RequestError::Api(ApiError::InvalidToken) => {
                let api = self.http.base.as_str().trim_end_matches('/');
                let at = match api == crate::config::DEFAULT_TELEGRAM_API_BASE {
                    true => String::new(),
                    false => format!(" at BUB_TELEGRAM_API_BASE={api}"),
                };
                let message = format!("Telegram rejected the bot token (getMe: invalid token{at})");
                ConfigError::new("BUB_TELEGRAM_TOKEN", message).into()
            }
            _ => anyhow!(
                "telegram: getMe failed, cannot start polling: {}",
                self.describe(err)
            ),
        }
    }

    /// Sends the request `build(formatted)` makes — HTML when `formatted`, plain text after
    /// Telegram rejected the entities — retrying by [`SENDS`]: 429s waited out (up to
    /// [`crate::time::MAX_SERVER_WAIT`]; a longer `retry_after` fails at once), network errors
    /// and 5xx answers retried with backoff, for up to 2 minutes. Returns the id of the message
    /// Telegram answered with; `None` when an edit changed nothing ("message is not
    /// modified"). The error is the reason, token redacted.
    async fn send_retrying<F, Fut>(
        &self,
        to: &Recipient,
        formatted: bool,
        build: F,
    ) -> Result<Option<chat::MessageId>, String>
    where
        F: Fn(bool) -> Fut,
        Fut: std::future::Future<Output = Result<teloxide::types::Message, RequestError>>,
    {
        // Once Telegram rejected the entities, every further attempt is plain text.
        let formatted = &AtomicBool::new(formatted);
        let build = &build;
        let attempt = |_| async move {
            let mut result = build(formatted.load(Relaxed)).await;
            if let Err(err) = &result
                && formatted.load(Relaxed)
                && is_format_error(err)
            {
                tracing::warn!(chat_id = %to, error = %self.describe(err),
                    "telegram.send: formatting rejected, resending as plain text");
                formatted.store(false, Relaxed);
                result = build(false).await;
            }
            match result {
                Ok(message) => Ok(Some(chat::MessageId(message.id.0.to_string()))),
                Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(None),
                Err(err @ RequestError::RetryAfter(wait)) => {
                    match server_wait(f64::from(wait.seconds())) {
                        Ok(wait) => Err(Failure::After(self.describe(&err), wait)),
                        Err(too_long) => {
                            tracing::warn!(chat_id = %to, retry_after = too_long.seconds,
                                "telegram.send: rate limited for too long, giving up");
                            Err(Failure::Final(too_long.to_string()))
                        }
                    }
                }
                Err(err) if is_transient(&err) => Err(Failure::Transient(self.describe(&err))),
                Err(err) => Err(Failure::Final(self.describe(&err))),
            }
        };
        let on_retry = |error: &String, attempt, wait: Duration| {
            crate::metrics::retry("telegram");
            tracing::warn!(chat_id = %to, error = %error, attempt,
                retry_in_ms = wait.as_millis() as u64, "telegram.send: failed, retrying");
        };
        retry(&self.http.retry, attempt, on_retry).await
    }
}

impl Telegram {
    /// Long-polls `getUpdates` until `shutdown`. Each update is journaled and handed on
    /// (through the sink) **before** the next `getUpdates` confirms it with a higher offset:
    /// while the daemon's queues are full the loop waits in the sink and confirms nothing, so
    /// Telegram keeps what Bub cannot take yet. An update that could not be journaled is
    /// fetched again after a pause. Starts after the last update the inbox
    /// journaled, so a restart neither loses nor repeats one. Errors are retried with backoff
    /// (a rejected token stops the channel).
    async fn poll(&self, handler: &Handler, shutdown: CancellationToken) -> anyhow::Result<()> {
        // A webhook set earlier would make Telegram refuse `getUpdates`.
        let delete = self
            .bot
            .delete_webhook()
            .drop_pending_updates(self.drop_pending_updates);
        tokio::select! {
            done = delete.send() => {
                if let Err(e) = done {
                    tracing::warn!(error = %self.describe(&e), "telegram.delete_webhook.error");
                }
            }
            () = shutdown.cancelled() => return Ok(()),
        }
        let mut offset = handler
            .inbound
            .cursor("telegram")
            .and_then(|id| i32::try_from(id + 1).ok());
        let mut backoff = POLL_BACKOFF_MIN;
        loop {
            let mut request = self
                .bot
                .get_updates()
                .timeout(POLL_TIMEOUT.as_secs() as u32)
                .allowed_updates(vec![AllowedUpdate::Message]);
            if let Some(offset) = offset {
                request = request.offset(offset);
            }
            let updates = tokio::select! {
                updates = request.send() => updates,
                () = shutdown.cancelled() => break,
            };
            // Reached or not: `/readyz` and `bub_channel_connected` tell.
            crate::metrics::connected("telegram", updates.is_ok());
            let failed = match updates {
                Ok(updates) => {
                    let mut failed = false;
                    for update in updates {
                        let id = update.id.0;
                        let handled = tokio::select! {
                            handled = handler.on_update(update) => handled,
                            // Held by full queues: this update and the rest are not confirmed.
                            () = shutdown.cancelled() => break,
                        };
                        if let Err(e) = handled {
                            tracing::error!(update_id = id, error = %format!("{e:#}"),
                                "telegram.inbox.error: not confirmed, fetched again later");
                            failed = true;
                            break;
                        }
                        offset = i32::try_from(u64::from(id) + 1).ok();
                    }
                    failed
                }
                Err(RequestError::Api(ApiError::InvalidToken)) => {
                    return Err(self.startup_error(&RequestError::Api(ApiError::InvalidToken)));
                }
                Err(e) => {
                    tracing::warn!(error = %self.describe(&e),
                        retry_in_ms = backoff.as_millis() as u64, "telegram.poll.error");
                    true
                }
            };
            if failed {
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = shutdown.cancelled() => break,
                }
                backoff = (backoff * 2).min(POLL_BACKOFF_MAX);
            } else {
                backoff = POLL_BACKOFF_MIN;
            }
        }
        // Confirm what was taken, so Telegram forgets it (best effort: the inbox's cursor
        // protects the next start anyway).
        if let Some(offset) = offset {
            let confirm = self.bot.get_updates().offset(offset).limit(1).timeout(0);
            let _ = tokio::time::timeout(STOP_GRACE, confirm.send()).await;
        }
        tracing::info!("telegram.stop");
        Ok(())
    }

    /// Registers the chat commands in Telegram's command menu (`setMyCommands`); a failure is
    /// only logged.
    async fn register_commands(&self) {
        let commands: Vec<BotCommand> = crate::chat::CHAT_COMMANDS
            .iter()
            .map(|(name, about)| BotCommand::new(*name, *about))
            .collect();
        if let Err(e) = self.bot.set_my_commands(commands).send().await {
            tracing::warn!(error = %self.describe(&e), "telegram.set_my_commands.error");
        }
    }
}

/// A failure worth retrying: the network, a body that is not Telegram's JSON (a proxy's error
/// page), or an error Telegram does not describe as the request's fault (its 5xx answers).
fn is_transient(err: &RequestError) -> bool {
    match err {
        RequestError::Network(_) | RequestError::Io(_) | RequestError::InvalidJson { .. } => true,
        RequestError::Api(ApiError::Unknown(text)) => {
            let permanent = [
                "Bad Request",
                "Forbidden",
                "Unauthorized",
                "Not Found",
                "Conflict",
            ];
            !permanent.iter().any(|p| text.starts_with(p))
        }
        _ => false,
    }
}

/// Telegram refused the HTML entities of a message (400 "can't parse entities" and kin).
fn is_format_error(err: &RequestError) -> bool {
    match err {
        RequestError::Api(ApiError::CantParseEntities(_)) => true,
        RequestError::Api(api) => {
            let text = api.to_string().to_lowercase();
            text.contains("bad request") && text.contains("entit")
        }
        _ => false,
    }
}

fn redact(text: &str, token: &str) -> String {
    if token.is_empty() {
        text.to_owned()
    } else {
        text.replace(token, "***")
    }
}

/// A message id as Telegram expects it (a number); `None` for anything else.
fn message_id(id: &chat::MessageId) -> Option<MessageId> {
    id.0.trim().parse::<i32>().ok().map(MessageId)
}

/// A chat id as Telegram expects it: a number, or `@channelusername`.
fn recipient(chat_id: &str) -> anyhow::Result<Recipient> {
    let chat_id = chat_id.trim();
    if let Ok(id) = chat_id.parse::<i64>() {
        return Ok(Recipient::Id(ChatId(id)));
    }
    if chat_id.starts_with('@') && chat_id.len() > 1 {
        return Ok(Recipient::ChannelUsername(chat_id.to_owned()));
    }
    Err(anyhow!(
        "telegram: invalid chat id {chat_id:?} (expected a number or @channel)"
    ))
}

#[async_trait]
impl Channel for Telegram {
    fn name(&self) -> &'static str {
        "telegram"
    }

    async fn run(&self, inbound: InboundSink, shutdown: CancellationToken) -> anyhow::Result<()> {
        let me = tokio::select! {
            me = self.bot.get_me().send() => me.map_err(|e| self.startup_error(&e))?,
            () = shutdown.cancelled() => return Ok(()),
        };
        let identity = BotIdentity {
            id: me.id.0,
            username: me.username.clone().unwrap_or_default(),
        };
        tracing::info!(bot_id = identity.id, username = %identity.username,
            drop_pending_updates = self.drop_pending_updates, "telegram.start");
        crate::metrics::connected("telegram", true);
        inbound.ready(&format!("@{}", identity.username));
        self.register_commands().await;
        let handler = Handler {
            bot: self.bot.clone(),
            token: self.token.clone(),
            me: identity,
            gate: self.gate.clone(),
            keyword: self.keyword.clone(),
            media_max_bytes: self.media_max_bytes,
            inbound,
        };
        let received = match &self.webhook {
            Some(webhook) => self.receive(webhook, &handler, shutdown).await,
            None => {
                let lock = crate::db::TELEGRAM_POLL_LOCK;
                let db = self.database.as_ref();
                match exclusive::acquire(db, "telegram", lock, &shutdown).await? {
                    None => Ok(()),
                    Some(held) => tokio::select! {
                        // What other replicas polled meanwhile is not polled again.
                        polled = async {
                            handler.inbound.refresh_positions().await?;
                            self.poll(&handler, shutdown).await
                        } => polled,
                        () = held.lost() => Err(anyhow::anyhow!(
                            "lost the database lock of Telegram's long polling (another replica may poll now)"
                        )),
                    },
                }
            }
        };
        crate::metrics::connected("telegram", false);
        received
    }

    fn message_limit(&self) -> usize {
        MESSAGE_LIMIT
    }

    fn caption_limit(&self) -> usize {
        media::CAPTION_LIMIT
    }

    async fn send_part(&self, part: &Part) -> anyhow::Result<Option<chat::MessageId>> {
        let to = recipient(&part.chat.0)?;
        let reply_to = part.reply_to.as_ref().and_then(message_id);
        let sent = match &part.file {
            Some(path) => self.send_file(&to, path, &part.text, reply_to).await,
            None => {
                let html = text::telegram_html(&part.text);
                self.send_retrying(&to, !html.trim().is_empty(), |formatted| {
                    let mut request = match formatted {
                        true => (self.bot.send_message(to.clone(), html.as_str()))
                            .parse_mode(ParseMode::Html),
                        false => self.bot.send_message(to.clone(), part.text.as_str()),
                    };
                    if let Some(id) = reply_to {
                        let reply = ReplyParameters::new(id).allow_sending_without_reply();
                        request = request.reply_parameters(reply);
                    }
                    request.send()
                })
                .await
            }
        };
        sent.map_err(|e| anyhow!("telegram: sending to chat {} failed: {e}", part.chat.0))
    }

    fn can_edit(&self) -> bool {
        true
    }

    async fn edit(
        &self,
        chat: &chat::ChatId,
        message: &chat::MessageId,
        text: &str,
    ) -> anyhow::Result<()> {
        let to = recipient(&chat.0)?;
        let id = message_id(message)
            .ok_or_else(|| anyhow!("telegram: {message:?} is not a message id"))?;
        let html = text::telegram_html(text);
        self.send_retrying(&to, !html.trim().is_empty(), |formatted| {
            let request = self.bot.edit_message_text(to.clone(), id, "");
            let request = match formatted {
                true => request.text(html.as_str()).parse_mode(ParseMode::Html),
                false => request.text(text),
            };
            request.send()
        })
        .await
        .map(drop)
        .map_err(|e| anyhow!("telegram: editing message {} failed: {e}", message.0))
    }

    async fn check_recipient(&self, chat_id: &str) -> anyhow::Result<()> {
        let chat = match recipient(chat_id)? {
            Recipient::Id(id) => id.0.to_string(),
            Recipient::ChannelUsername(name) => name,
        };
        if self.gate.serves("telegram", &chat, async { None }).await {
            Ok(())
        } else {
            Err(anyhow!(
                "refused: telegram chat {chat_id} is not in BUB_TELEGRAM_ALLOW_CHATS"
            ))
        }
    }

    async fn download(
        &self,
        file: &Attachment,
        to: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
        max_bytes: u64,
    ) -> anyhow::Result<u64> {
        self.fetch(file, to, max_bytes).await
    }

    async fn typing(&self, chat: &chat::ChatId) -> anyhow::Result<()> {
        self.bot
            .send_chat_action(recipient(&chat.0)?, ChatAction::Typing)
            .send()
            .await
            .map_err(|e| {
                anyhow!(
                    "telegram: typing in chat {} failed: {}",
                    chat.0,
                    self.describe(&e)
                )
            })?;
        Ok(())
    }
}

/// What handling one update needs; the polling loop hands it each update in turn.
struct Handler {
    bot: Bot,
    token: String,
    me: BotIdentity,
    gate: Gate,
    keyword: String,
    media_max_bytes: u64,
    inbound: InboundSink,
}

impl Handler {
    /// One update: messages go through [`Handler::on_message`], everything else is skipped.
    /// An error means the message could not be journaled (do not confirm it).
    async fn on_update(&self, update: Update) -> anyhow::Result<()> {
        let cursor = u64::from(update.id.0);
        match update.kind {
            UpdateKind::Message(msg) => self.on_message(msg, cursor).await,
            _ => {
                tracing::debug!(update_id = cursor, "telegram.skip: not a message update");
                Ok(())
            }
        }
    }

    /// Applies the rules in order (sender, the gate, commands, addressing) and forwards the
    /// message. Logs reasons and ids, never the text.
    async fn on_message(&self, msg: Message, cursor: u64) -> anyhow::Result<()> {
        let chat_id = msg.chat.id.0;
        let message_id = msg.id.0;
        let Some(from) = msg.from.as_ref() else {
            tracing::debug!(chat_id, message_id, "telegram.skip: no sender");
            return Ok(());
        };
        let sender_id = from.id.0;
        let sender = sender_id.to_string();
        let private = msg.chat.is_private();
        let chat_key = chat_id.to_string();
        let chat = Chat {
            id: &chat_key,
            kind: if private {
                ChatKind::Private
            } else {
                ChatKind::Group
            },
        };
        let display = from.full_name();
        let user = User {
            id: &sender,
            name: from.username.as_deref(),
            display: Some(&display),
        };
        let role = match self.gate.decide("telegram", chat, user).await {
            Decision::Admit(role) => role,
            Decision::Drop(Dropped::Chat) => {
                tracing::info!(
                    chat_id,
                    message_id,
                    "telegram.skip: chat not in allow_chats"
                );
                return Ok(());
            }
            decision @ (Decision::Pair(_) | Decision::Drop(Dropped::Sender)) => {
                tracing::info!(
                    chat_id,
                    message_id,
                    sender_id,
                    private,
                    "telegram.skip: sender not admitted"
                );
                if let Decision::Pair(text) = decision {
                    self.reply_plain(chat_id, &text).await;
                } else if !private && filter::is_addressed(&msg, &self.me, &self.keyword) {
                    self.gate.knocked_in_group("telegram", &chat_key, user);
                }
                return Ok(());
            }
        };
        let described = message::describe_within(&msg, self.media_max_bytes);
        let kind = described.kind;
        let mut mentioned = filter::is_addressed(&msg, &self.me, &self.keyword);
        // What the message says, typed here once: a slash command as the control or comma
        // command it stands for, any other text read by `Content::of`.
        let mut content = None;
        if let Some(text) = msg.text() {
            match filter::parse_command(text, &self.me.username) {
                Command::None => {}
                Command::Start => {
                    tracing::info!(chat_id, message_id, sender_id, "telegram.start_command");
                    self.reply_plain(chat_id, START_REPLY).await;
                    return Ok(());
                }
                Command::Bub(rest) => content = Some(Content::of(rest)),
                Command::Control(control) => content = Some(Content::Control(control)),
                Command::Model(model) => content = Some(Content::model(model)),
                Command::Ignored => {
                    tracing::debug!(chat_id, message_id, "telegram.skip: other command");
                    return Ok(());
                }
            }
            mentioned |= content.is_some();
        }
        let content = content.unwrap_or_else(|| Content::of(&described.content));
        let mut inbound = message::inbound(&msg, described, content, role);
        inbound.mentioned = mentioned;
        tracing::info!(
            chat_id,
            message_id,
            sender_id,
            mentioned,
            %role,
            kind,
            "telegram.inbound"
        );
        self.inbound.deliver(inbound, Some(cursor)).await?;
        Ok(())
    }

    /// A short plain-text notice; failures are logged, not returned.
    async fn reply_plain(&self, chat_id: i64, text: &str) {
        if let Err(e) = self.bot.send_message(ChatId(chat_id), text).send().await {
            let error = redact(&e.to_string(), &self.token);
            tracing::warn!(chat_id, error = %error, "telegram.reply.error");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn telegram(s: &Settings) -> anyhow::Result<Telegram> {
        Telegram::new(s, Arc::new(Access::new(s)))
    }

    fn settings(f: impl FnOnce(&mut Settings)) -> Settings {
        let mut s = Settings::with_defaults("/tmp".into(), "/tmp".into());
        s.channel_mut("telegram").enabled = true;
        s.channel_mut("telegram").token = Some("123:SECRET".into());
        f(&mut s);
        s
    }

    #[test]
    fn new_requires_token_and_valid_urls() {
        let err = telegram(&settings(|s| s.channel_mut("telegram").token = None))
            .err()
            .unwrap();
        assert!(err.to_string().contains("BUB_TELEGRAM_TOKEN"), "{err}");
        let err = telegram(&settings(|s| {
            s.channel_mut("telegram").api_base = "not a url".into()
        }))
        .err()
        .unwrap();
        assert!(err.to_string().contains("BUB_TELEGRAM_API_BASE"), "{err}");
        let err = telegram(&settings(|s| {
            s.channel_mut("telegram").proxy = Some("::bad::".into())
        }))
        .err()
        .unwrap();
        assert!(err.to_string().contains("BUB_TELEGRAM_PROXY"), "{err}");
        assert!(
            telegram(&settings(
                |s| s.channel_mut("telegram").proxy = Some("http://127.0.0.1:1".into())
            ))
            .is_ok()
        );
    }

    #[test]
    fn api_base_trailing_slash_is_dropped() {
        let tg = telegram(&settings(|s| {
            s.channel_mut("telegram").api_base = "http://h:1/tg/".into()
        }))
        .unwrap();
        assert_eq!(tg.bot.api_url().as_str(), "http://h:1/tg");
    }

    #[test]
    fn recipients_and_redaction() {
        assert!(matches!(recipient("-100"), Ok(Recipient::Id(ChatId(-100)))));
        assert!(matches!(
            recipient("@chan"),
            Ok(Recipient::ChannelUsername(_))
        ));
        assert!(recipient("abc").is_err());
        assert_eq!(redact("url /bot1:XY/GetMe", "1:XY"), "url /bot***/GetMe");
    }

    /// A slash command is typed once, here: the session gets the control or the comma command
    /// it stands for, never a text to parse again.
    #[tokio::test]
    async fn a_slash_command_reaches_the_session_typed() {
        use crate::channels::Control;
        let home = tempfile::tempdir().unwrap();
        let mut s = Settings::with_defaults(home.path().into(), home.path().into());
        s.channel_mut("telegram").token = Some("123:SECRET".into());
        s.channel_mut("telegram").allow_from = vec!["42".into()];
        let tg = telegram(&s).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        let handler = Handler {
            bot: tg.bot.clone(),
            token: tg.token.clone(),
            me: BotIdentity {
                id: 777,
                username: "bub_bot".into(),
            },
            gate: tg.gate.clone(),
            keyword: String::new(),
            media_max_bytes: u64::MAX,
            inbound: InboundSink::new(Arc::new(crate::inbox::Inbox::memory()), tx),
        };
        let command = |line: &str| Content::Command(line.into());
        let said = [
            ("/stop", Content::Control(Control::Stop)),
            ("/usage@bub_bot", Content::Control(Control::Usage)),
            ("/model openai:gpt-4o", command(",model openai:gpt-4o")),
            ("/model", command(",model")),
            ("/bub ,status", Content::Control(Control::Status)),
            (" ,tape.info ", command(",tape.info")),
            ("hello, there", Content::Text("hello, there".into())),
        ];
        for (i, (text, content)) in said.into_iter().enumerate() {
            let msg = serde_json::json!({"message_id": i + 1, "date": 1700000000,
                "chat": {"id": 42, "type": "private", "first_name": "A"},
                "from": {"id": 42, "is_bot": false, "first_name": "A"}, "text": text});
            let msg: Message = serde_json::from_value(msg).unwrap();
            handler.on_message(msg, i as u64 + 1).await.unwrap();
            let got = rx.recv().await.unwrap();
            assert_eq!((got.content, got.mentioned), (content, true), "{text}");
        }
    }

    #[test]
    fn format_errors() {
        let e = RequestError::Api(ApiError::CantParseEntities(
            "Bad Request: can't parse entities".into(),
        ));
        assert!(is_format_error(&e));
        let e = RequestError::Api(ApiError::Unknown("Bad Request: entities too long".into()));
        assert!(is_format_error(&e));
        let e = RequestError::Api(ApiError::ChatNotFound);
        assert!(!is_format_error(&e));
    }
}
