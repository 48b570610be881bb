//! Discord adapter: serenity 0.12 gateway (receive) + REST (send, typing, lookups).
//!
//! * [`Discord::run`] connects to the gateway (intents `GUILD_MESSAGES | DIRECT_MESSAGES |
//!   MESSAGE_CONTENT`) and turns every `MESSAGE_CREATE` that passes the allow-lists into an
//!   [`Inbound`] (`inbound`: bots ignored, allow-lists on every message, addressing rules in
//!   `filter`, the message in `message`). Messages the bot was not addressed in still go to the
//!   session with `mentioned = false`; the session decides about follow-ups. Each one is
//!   journaled (`InboundSink::deliver`) before the session sees it. When the sessions' queues
//!   are full the pipeline waits in the sink; gateway events then wait in its queue
//!   ([`QUEUE`]) and, past it, in serenity's handler tasks: Discord's gateway cannot be paused
//!   (a client that stops reading it is disconnected), so that last wait is not bounded here.
//! * Discord does not replay what a bot missed, so after READY (startup, new session) and
//!   RESUMED the adapter catches up (`catchup`): for the most recently active chats in the
//!   inbox it reads one page of the messages after the last one journaled and runs them,
//!   oldest first, through the same pipeline; the inbox drops any that also came over the
//!   gateway. The catch-up runs in the pipeline task, in order with the gateway's messages.
//! * [`Channel::send_part`] posts one message as delivery made it (at most 2000 characters,
//!   with its file as an attachment), replying when the part says so (`fail_if_not_exists:
//!   false`, no ping of the replied-to user, no `@everyone`/role pings). The reply target
//!   travels in the part, so no per-chat state is kept here.
//!
//! Endpoints: REST goes to `BUB_DISCORD_API_BASE` (default `https://discord.com`) and the
//! gateway URL comes from `GET <base>/api/v10/gateway`. serenity honours a non-default base
//! only through `HttpBuilder::proxy` with its rate limiter disabled, so with an override 429s
//! reach this adapter and `rest::Rest` retries them after `retry_after`. Posts and edits are
//! retried through 5xx answers and network errors like Telegram's sends
//! ([`crate::net::retry::SENDS`]; `DiscordSettings::send_retry_budget`). `BUB_DISCORD_PROXY`
//! (an HTTP/SOCKS proxy) is set on the reqwest client and so covers REST only: serenity 0.12
//! opens the gateway websocket directly and has no proxy option for it. Ambient
//! `HTTPS_PROXY`-style variables are ignored: only `BUB_DISCORD_PROXY` chooses a proxy.
//!
//! The token is kept out of logs and errors: nothing here formats it, `Discord` has no `Debug`,
//! and REST errors are rebuilt from route, status and Discord's message.

mod catchup;
mod filter;
mod inbound;
mod lookup;
mod media;
mod message;
mod rest;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use async_trait::async_trait;
use serde_json::{Value, json};
use serenity::client::{ClientBuilder, Context, EventHandler};
use serenity::gateway::GatewayError;
use serenity::http::{Http, HttpBuilder, LightMethod, Route};
use serenity::model::channel::Message;
use serenity::model::event::ResumedEvent;
use serenity::model::gateway::{GatewayIntents, Ready};
use serenity::model::id::ChannelId;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use catchup::{CatchUp, Reason};
pub(crate) use filter::Rules;
use inbound::{BotUser, Event, Pipeline};
use lookup::Lookups;
use rest::{Rest, RestError};

use super::{Attachment, Channel, ChatId, InboundSink, MessageId, Part};
use crate::access::{Access, Gate};
use crate::channels::invalid;
use crate::config::{ConfigError, DEFAULT_DISCORD_API_BASE, Settings};
use crate::net::client::{self, ClientSpec};
use crate::net::retry::RetryPolicy;

/// Discord's message size limit, in characters.
pub(crate) const MESSAGE_LIMIT: usize = 2000;
/// Gateway messages waiting for the inbound task (back-pressure beyond that).
const QUEUE: usize = 256;
/// How long shutdown waits for serenity to close the gateway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// The intents the adapter asks for: guild messages, DMs and message content (37376).
pub(crate) fn intents() -> GatewayIntents {
    GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
}

/// The Discord channel adapter.
pub struct Discord {
    token: String,
    /// `Some(base)` when `BUB_DISCORD_API_BASE` is not the default.
    api_base: Option<String>,
    proxied: bool,
    client: reqwest::Client,
    rules: Rules,
    gate: Gate,
    rest: Arc<Rest>,
    /// With replicas, the database whose lock lets one of them hold the gateway.
    database: Option<Arc<crate::db::Database>>,
}

impl Discord {
    /// Builds the REST client from the `discord` channel settings (token, API base, proxy,
    /// command prefix) and `settings.mention_keyword`; messages are admitted by `access`'s gate.
    /// Nothing is contacted yet. An empty token or an unusable proxy URL is an error.
    pub fn new(settings: &Settings, access: Arc<Access>) -> anyhow::Result<Self> {
        let d = &settings.channels["discord"];
        let token = d.token.as_ref().map(|t| t.expose());
        let token = client::token("BUB_DISCORD_TOKEN", token, "Discord").map_err(invalid)?;
        let base = d.api_base.trim().trim_end_matches('/');
        let api_base =
            (!base.is_empty() && base != DEFAULT_DISCORD_API_BASE).then(|| base.to_owned());
        let proxy = d.proxy.as_deref().map(str::trim).filter(|p| !p.is_empty());
        let rest = ClientSpec {
            base: api_base.as_deref().unwrap_or(DEFAULT_DISCORD_API_BASE),
            base_var: "BUB_DISCORD_API_BASE",
            proxy: Some(("BUB_DISCORD_PROXY", proxy)),
            connect_timeout: Duration::from_secs(10),
            timeout: Some(Duration::from_secs(30)),
            retry: crate::net::retry::SENDS.within(d.send_retry_budget),
        }
        .build()
        .map_err(invalid)?;
        let client = rest.http.clone();
        let http = build_http(&token, &client, api_base.as_deref());
        Ok(Self {
            rest: Arc::new(Rest::new(Arc::new(http), rest)),
            database: settings.database()?,
            token,
            api_base,
            proxied: proxy.is_some(),
            client,
            gate: Gate::new(access),
            rules: Rules {
                command_prefix: d.command_prefix.clone(),
                keyword: settings.mention_keyword.clone(),
            },
        })
    }

    /// `GET /users/@me`: a rejected token fails here with a clear error, before the gateway
    /// (whose own rejection, close code 4004, is mapped in [`gateway_error`]). Other failures
    /// are only logged: the gateway client retries on its own.
    async fn check_token(&self) -> anyhow::Result<()> {
        match self.rest.get_json(Route::UserMe).await {
            Ok(me) => {
                let name = me.get("username").and_then(Value::as_str).unwrap_or("?");
                let id = me.get("id").and_then(Value::as_str).unwrap_or("?");
                tracing::info!(bot_id = id, bot_name = name, "discord.authenticated");
                Ok(())
            }
            Err(e)
                if e.downcast_ref::<RestError>()
                    .is_some_and(|r| r.status == 401) =>
            {
                Err(rejected_token("REST /users/@me: 401 Unauthorized").into())
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "discord.token_check_failed");
                Ok(())
            }
        }
    }
}

/// serenity's `Http` over `client`: with a non-default API base, `proxy(base)` plus a disabled
/// rate limiter (the only way serenity 0.12 sends REST anywhere but discord.com).
fn build_http(token: &str, client: &reqwest::Client, api_base: Option<&str>) -> Http {
    let mut builder = HttpBuilder::new(token).client(client.clone());
    if let Some(base) = api_base {
        builder = builder.proxy(base).ratelimiter_disabled(true);
    }
    builder.build()
}

/// serenity's event handler: hands MESSAGE_CREATE, and a catch-up for READY and RESUMED, to
/// the inbound task.
struct Gateway {
    bot: watch::Sender<Option<BotUser>>,
    queue: mpsc::Sender<Event>,
    /// Read for the catch-up's last seen ids only (the pipeline delivers).
    sink: InboundSink,
}

#[async_trait]
impl EventHandler for Gateway {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        tracing::info!(bot_id = %ready.user.id, bot_name = %ready.user.name, "discord.ready");
        crate::metrics::connected("discord", true);
        // The snapshot comes before the bot user is known: on the first READY the pipeline
        // journals nothing before that.
        let plan = CatchUp::snapshot(&self.sink, Reason::Ready);
        self.bot.send_replace(Some(BotUser {
            id: ready.user.id,
            name: ready.user.name.clone(),
        }));
        self.sink.ready(&ready.user.name);
        // Sends fail only while shutting down.
        let _ = self.queue.send(Event::CatchUp(plan)).await;
    }

    async fn resume(&self, _ctx: Context, _resumed: ResumedEvent) {
        tracing::info!("discord.resumed");
        let plan = CatchUp::snapshot(&self.sink, Reason::Resumed);
        let _ = self.queue.send(Event::CatchUp(plan)).await;
    }

    /// The gateway went down or came back (`/readyz`, `bub_channel_connected`).
    async fn shard_stage_update(
        &self,
        _ctx: Context,
        event: serenity::gateway::ShardStageUpdateEvent,
    ) {
        let up = event.new == serenity::gateway::ConnectionStage::Connected;
        crate::metrics::connected("discord", up);
    }

    async fn message(&self, _ctx: Context, msg: Message) {
        let _ = self.queue.send(Event::Message(Box::new(msg))).await;
    }
}

/// Discord refused the token: a [`ConfigError`] naming `BUB_DISCORD_TOKEN` (restarting cannot
/// fix it, so `bub message` exits 2).
fn rejected_token(how: &str) -> ConfigError {
    ConfigError::new(
        "BUB_DISCORD_TOKEN",
        format!("Discord rejected the bot token ({how})"),
    )
}

/// A clear error for the gateway failures serenity gives up on.
fn gateway_error(err: serenity::Error) -> anyhow::Error {
    match err {
        serenity::Error::Gateway(GatewayError::InvalidAuthentication) => {
            rejected_token("gateway: authentication failed, close code 4004").into()
        }
        serenity::Error::Gateway(
            GatewayError::DisallowedGatewayIntents | GatewayError::InvalidGatewayIntents,
        ) => anyhow!(
            "discord refused the gateway intents: enable the Message Content intent for the bot \
             in the Discord developer portal"
        ),
        other => anyhow!("discord gateway failed: {other}"),
    }
}

/// The JSON body of one posted message part.
fn message_body(content: &str, channel: ChannelId, reply_to: Option<u64>) -> Value {
    let mut body = json!({
        "content": content,
        "allowed_mentions": {"parse": ["users"], "replied_user": false},
    });
    if let Some(id) = reply_to {
        body["message_reference"] = json!({
            "message_id": id.to_string(),
            "channel_id": channel.to_string(),
            "fail_if_not_exists": false,
        });
    }
    body
}

/// A Discord snowflake (non-zero).
fn snowflake(id: &str) -> Option<u64> {
    id.trim().parse::<u64>().ok().filter(|id| *id != 0)
}

fn channel_id(chat_id: &str) -> anyhow::Result<ChannelId> {
    snowflake(chat_id)
        .map(ChannelId::new)
        .ok_or_else(|| anyhow!("discord: {chat_id:?} is not a channel id"))
}

#[async_trait]
impl Channel for Discord {
    fn name(&self) -> &'static str {
        "discord"
    }

    async fn run(&self, inbound: InboundSink, shutdown: CancellationToken) -> anyhow::Result<()> {
        if self.token.is_empty() {
            return Err(
                ConfigError::new("BUB_DISCORD_TOKEN", "no Discord bot token is set").into(),
            );
        }
        if self.proxied {
            tracing::warn!(
                "discord.proxy covers REST only; the gateway websocket connects directly"
            );
        }
        let lock = crate::db::DISCORD_GATEWAY_LOCK;
        let db = self.database.as_ref();
        let Some(held) =
            crate::channels::exclusive::acquire(db, "discord", lock, &shutdown).await?
        else {
            return Ok(());
        };
        // The catch-up starts from what every replica received, not what this one last saw.
        inbound.refresh_positions().await?;
        let (bot_tx, bot_rx) = watch::channel(None);
        let (queue_tx, queue_rx) = mpsc::channel(QUEUE);
        let handler = Gateway {
            bot: bot_tx,
            queue: queue_tx,
            sink: inbound.clone(),
        };
        let connect = async {
            self.check_token().await?;
            let http = build_http(&self.token, &self.client, self.api_base.as_deref());
            ClientBuilder::new_with_http(http, intents())
                .event_handler(handler)
                .into_future()
                .await
                .map_err(|e| anyhow!("discord: cannot build the gateway client: {e}"))
        };
        let mut client = tokio::select! {
            client = connect => client?,
            () = shutdown.cancelled() => return Ok(()),
        };
        let pipeline = Pipeline {
            rules: self.rules.clone(),
            gate: self.gate.clone(),
            rest: Arc::clone(&self.rest),
            lookups: Lookups::new(Arc::clone(&self.rest)),
            bot: bot_rx,
            inbound,
        };
        let _worker = AbortOnDropHandle::new(tokio::spawn(pipeline.run(queue_rx)));
        let shards = Arc::clone(&client.shard_manager);
        let start = client.start();
        tokio::pin!(start);
        tokio::select! {
            result = &mut start => return result.map_err(gateway_error),
            () = held.lost() => {
                return Err(anyhow!(
                    "lost the database lock of Discord's gateway (another replica may hold it now)"
                ));
            }
            () = shutdown.cancelled() => {}
        }
        tracing::info!("discord.stopping");
        if tokio::time::timeout(SHUTDOWN_GRACE, shards.shutdown_all())
            .await
            .is_err()
            || tokio::time::timeout(SHUTDOWN_GRACE, start).await.is_err()
        {
            tracing::warn!("discord.stop_timeout");
        }
        Ok(())
    }

    fn message_limit(&self) -> usize {
        MESSAGE_LIMIT
    }

    async fn send_part(&self, part: &Part) -> anyhow::Result<Option<MessageId>> {
        let channel = channel_id(&part.chat.0)?;
        let reply_to = part.reply_to.as_ref().and_then(|id| snowflake(&id.0));
        let mut body = message_body(&part.text, channel, reply_to);
        let route = Route::ChannelMessages {
            channel_id: channel,
        };
        let sent = match &part.file {
            Some(path) => {
                let file = media::attachment(path).await?;
                body["attachments"] = json!([{"id": 0, "filename": file.filename}]);
                self.rest.post_with_file(route, &body, &file).await
            }
            None => self.rest.post(route, &body).await,
        };
        let sent =
            sent.with_context(|| format!("discord: sending to channel {} failed", part.chat.0))?;
        let sent: Value = serde_json::from_slice(&sent).unwrap_or_default();
        Ok(sent["id"].as_str().map(|id| MessageId(id.to_owned())))
    }

    fn can_edit(&self) -> bool {
        true
    }

    async fn edit(&self, chat: &ChatId, message: &MessageId, text: &str) -> anyhow::Result<()> {
        let route = Route::ChannelMessage {
            channel_id: channel_id(&chat.0)?,
            message_id: snowflake(&message.0)
                .map(serenity::model::id::MessageId::new)
                .ok_or_else(|| anyhow!("discord: {message:?} is not a message id"))?,
        };
        self.rest
            .patch(route, &json!({"content": text}))
            .await
            .map(drop)
    }

    async fn check_recipient(&self, chat_id: &str) -> anyhow::Result<()> {
        let id = channel_id(chat_id)?;
        // A thread is served when its parent channel is listed.
        let parent = async {
            Lookups::new(Arc::clone(&self.rest))
                .channel(id)
                .await
                .and_then(|c| c.thread_parent)
        };
        if self.gate.serves("discord", chat_id, parent).await {
            Ok(())
        } else {
            Err(anyhow!(
                "refused: discord channel {chat_id} is not in BUB_DISCORD_ALLOW_CHANNELS"
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

    /// Opens (or finds) the DM channel with the user: `POST /users/@me/channels`.
    async fn private_chat(&self, user_id: &str) -> anyhow::Result<String> {
        let id =
            snowflake(user_id).ok_or_else(|| anyhow!("discord: {user_id:?} is not a user id"))?;
        let body = json!({"recipient_id": id.to_string()});
        let opened = self
            .rest
            .post(Route::UserMeDmChannels, &body)
            .await
            .with_context(|| format!("discord: opening a DM with user {user_id} failed"))?;
        let opened: serde_json::Value = serde_json::from_slice(&opened)?;
        opened["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("discord: the DM channel with user {user_id} has no id"))
    }

    async fn typing(&self, chat: &ChatId) -> anyhow::Result<()> {
        let route = Route::ChannelTyping {
            channel_id: channel_id(&chat.0)?,
        };
        self.rest
            .call(LightMethod::Post, route, None, &RetryPolicy::ONCE)
            .await
            .with_context(|| format!("discord: typing in channel {} failed", chat.0))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_are_messages_dms_and_content() {
        assert_eq!(intents().bits(), 37376);
    }

    #[test]
    fn only_the_first_part_replies() {
        let b = message_body("hi", ChannelId::new(7), Some(42));
        assert_eq!(
            b["message_reference"],
            json!({"message_id": "42", "channel_id": "7", "fail_if_not_exists": false})
        );
        assert_eq!(b["allowed_mentions"]["replied_user"], false);
        let b = message_body("hi", ChannelId::new(7), None);
        assert!(b.get("message_reference").is_none());
    }

    #[test]
    fn ids_are_checked() {
        assert!(channel_id("555").is_ok());
        assert!(channel_id("0").is_err());
        assert!(channel_id("abc").is_err());
        assert_eq!(snowflake(" 12 "), Some(12));
    }

    #[test]
    fn new_rejects_an_empty_token_and_keeps_it_out_of_errors() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Settings::with_defaults(dir.path().join("h"), dir.path().join("w"));
        let err = Discord::new(&s, Arc::new(Access::new(&s)))
            .err()
            .expect("no token")
            .to_string();
        assert!(err.contains("BUB_DISCORD_TOKEN"), "{err}");
        s.channel_mut("discord").token = Some("secret-token-123".into());
        s.channel_mut("discord").proxy = Some("::not a url::".into());
        let err = Discord::new(&s, Arc::new(Access::new(&s)))
            .err()
            .expect("bad proxy")
            .to_string();
        assert!(
            !err.contains("secret-token-123") && err.contains("BUB_DISCORD_PROXY"),
            "{err}"
        );
        s.channel_mut("discord").proxy = None;
        let d = Discord::new(&s, Arc::new(Access::new(&s))).unwrap();
        assert!(
            d.api_base.is_none(),
            "default base keeps serenity's rate limiter"
        );
        assert!(d.rest.http.ratelimiter.is_some());
        s.channel_mut("discord").api_base = "http://127.0.0.1:9/".into();
        let d = Discord::new(&s, Arc::new(Access::new(&s))).unwrap();
        assert_eq!(d.api_base.as_deref(), Some("http://127.0.0.1:9"));
        assert!(d.rest.http.ratelimiter.is_none());
        assert_eq!(d.rest.http.proxy.as_deref(), Some("http://127.0.0.1:9"));
    }
}
