//! From gateway `MESSAGE_CREATE` to [`Inbound`]: one task that takes the gateway's events in
//! arrival order — messages, and the catch-up after READY/RESUMED (`catchup`), whose fetched
//! messages take the same path — and, for each message, drops it (bot author, system/empty
//! message, or what the admission gate drops: channel not served, sender not admitted — who
//! gets the gate's pairing text when they wrote a DM), decides whether the bot was addressed,
//! builds the [`Inbound`], and hands it to the inbox (which drops a message it already has).
//!
//! Order matters: the gate ([`Gate`]) comes first and applies to every message, commands
//! included. The sender is their id and username, never a display name or nickname; a thread's
//! parent is looked up only when the gate asks for it.
//! Lookups (channel info, the bot's roles) are made only when a rule needs them and are
//! cached (see `lookup`). Logs carry ids and reasons, never message text.

use std::sync::Arc;

use serde_json::json;
use serenity::http::Route;
use serenity::model::channel::Message;
use serenity::model::id::UserId;
use tokio::sync::{mpsc, watch};

use super::catchup::CatchUp;
use super::filter::{self, Addressed, Rules, Skip};
use super::lookup::Lookups;
use super::message;
use super::rest::Rest;
use crate::access::{Chat, ChatKind, Decision, Dropped, Gate, Role, User};
use crate::channels::{Inbound, InboundSink};

/// The bot's own user, known once the gateway said READY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotUser {
    pub id: UserId,
    pub name: String,
}

/// The inbound side of one gateway session.
pub(crate) struct Pipeline {
    pub rules: Rules,
    pub gate: Gate,
    pub rest: Arc<Rest>,
    pub lookups: Lookups,
    pub bot: watch::Receiver<Option<BotUser>>,
    pub inbound: InboundSink,
}

/// What the gateway handler hands the pipeline, in the order serenity delivered it.
pub(crate) enum Event {
    /// A `MESSAGE_CREATE` (boxed: a `Message` is large).
    Message(Box<Message>),
    /// READY or RESUMED: fetch what was missed while the bot was away (`catchup`).
    CatchUp(CatchUp),
}

impl Pipeline {
    /// Handles events until the queue closes (the gateway client was dropped) or the session
    /// side stopped listening.
    pub(crate) async fn run(mut self, mut queue: mpsc::Receiver<Event>) {
        while let Some(event) = queue.recv().await {
            // READY is dispatched before any message, but by serenity in its own task.
            let bot = match self.bot.wait_for(Option::is_some).await {
                Ok(user) => user.as_ref().map(|u| u.id),
                Err(_) => return,
            };
            let Some(bot) = bot else { return };
            match event {
                Event::Message(msg) => {
                    self.process(&msg, bot).await;
                }
                Event::CatchUp(plan) => self.catch_up(plan, bot).await,
            }
        }
    }

    /// One message, from the gateway or the catch-up: [`Pipeline::handle`], then the inbox,
    /// which drops a message it already has. `true` when it was handed on as new.
    pub(crate) async fn process(&mut self, msg: &Message, bot: UserId) -> bool {
        let Some(item) = self.handle(msg, bot).await else {
            return false;
        };
        match self.inbound.deliver(item, None).await {
            Ok(new) => new,
            Err(e) => {
                // Not journaled, so the chat's last seen id did not move: a catch-up finds it
                // again unless a newer message of the chat is journaled first.
                tracing::error!(channel_id = %msg.channel_id, message_id = %msg.id,
                    error = %format!("{e:#}"), "discord.inbox.error");
                false
            }
        }
    }

    /// The [`Inbound`] for `msg`, or `None` when it is dropped.
    pub(crate) async fn handle(&mut self, msg: &Message, bot: UserId) -> Option<Inbound> {
        let role = match self.admit(msg).await {
            Ok(role) => role,
            Err((skip, pairing)) => {
                log_skip(msg, skip);
                if let Some(text) = pairing {
                    self.reply_pairing(msg, &text).await;
                } else if skip == Skip::Sender
                    && msg.guild_id.is_some()
                    && filter::addressed(&self.rules, msg, bot).is_some()
                {
                    self.knocked(msg);
                }
                return None;
            }
        };
        let reason = self.addressed(msg, bot).await;
        let text = self
            .rules
            .strip_command(&msg.content)
            .unwrap_or(&msg.content);
        let mut item = message::inbound(msg, text, role);
        item.mentioned = reason.is_some();
        tracing::info!(channel_id = %msg.channel_id, message_id = %msg.id,
            sender_id = %msg.author.id, mentioned = item.mentioned, %role,
            reason = reason.map_or("none", Addressed::as_str), "discord.inbound");
        Some(item)
    }

    /// Bots, system and empty messages, then the gate (the channel — a thread through its
    /// parent —, the sender). A refusal comes with the pairing text to send, if any.
    async fn admit(&mut self, msg: &Message) -> Result<Role, (Skip, Option<String>)> {
        if let Some(skip) = filter::ignored(msg) {
            return Err((skip, None));
        }
        let channel_id = msg.channel_id.to_string();
        let chat = Chat {
            id: &channel_id,
            kind: match msg.guild_id {
                Some(_) => ChatKind::Group,
                None => ChatKind::Private,
            },
        };
        let id = msg.author.id.to_string();
        let user = User {
            id: &id,
            name: Some(&msg.author.name),
            display: msg.author.global_name.as_deref(),
        };
        // Only a guild thread can be served through its parent.
        let lookups = &mut self.lookups;
        let parent = async {
            match msg.guild_id {
                Some(_) => lookups
                    .channel(msg.channel_id)
                    .await
                    .and_then(|c| c.thread_parent),
                None => None,
            }
        };
        match self.gate.decide_thread("discord", chat, user, parent).await {
            Decision::Admit(role) => Ok(role),
            Decision::Drop(Dropped::Chat) => Err((Skip::Channel, None)),
            Decision::Drop(Dropped::Sender) => Err((Skip::Sender, None)),
            Decision::Pair(text) => Err((Skip::Sender, Some(text))),
        }
    }

    /// A stranger addressed the bot in a guild channel: the owners hear of it (the cheap
    /// addressing rules only: no lookup is made for a stranger).
    fn knocked(&self, msg: &Message) {
        let (id, chat) = (msg.author.id.to_string(), msg.channel_id.to_string());
        let user = User {
            id: &id,
            name: Some(&msg.author.name),
            display: msg.author.global_name.as_deref(),
        };
        self.gate.knocked_in_group("discord", &chat, user);
    }

    /// Sends a stranger's DM the gate's pairing text (the message itself goes nowhere).
    async fn reply_pairing(&self, msg: &Message, text: &str) {
        let channel_id = msg.channel_id;
        let body = json!({
            "content": text,
            "allowed_mentions": {"parse": []},
        });
        if let Err(e) = self
            .rest
            .post(Route::ChannelMessages { channel_id }, &body)
            .await
        {
            tracing::warn!(%channel_id, error = %format!("{e:#}"), "discord.pairing.reply_error");
        }
    }

    /// The cheap rules first, then a role mention, then a `bub…` thread (both need lookups).
    async fn addressed(&mut self, msg: &Message, bot: UserId) -> Option<Addressed> {
        if let Some(reason) = filter::addressed(&self.rules, msg, bot) {
            return Some(reason);
        }
        let guild = msg.guild_id?;
        if !msg.mention_roles.is_empty() {
            let roles = self.lookups.bot_roles(guild, bot).await;
            if msg.mention_roles.iter().any(|r| roles.contains(r)) {
                return Some(Addressed::RoleMention);
            }
        }
        let info = self.lookups.channel(msg.channel_id).await?;
        (info.is_thread && filter::is_bub_thread(&info.name)).then_some(Addressed::Thread)
    }
}

/// A denied sender is worth an `info` line; bots, system messages and other channels are
/// routine (`debug`). Ids and the reason only.
fn log_skip(msg: &Message, skip: Skip) {
    let (channel_id, message_id, sender_id) = (msg.channel_id, msg.id, msg.author.id);
    if skip == Skip::Sender {
        tracing::info!(%channel_id, %message_id, %sender_id, reason = skip.as_str(), "discord.skip");
    } else {
        tracing::debug!(%channel_id, %message_id, %sender_id, reason = skip.as_str(), "discord.skip");
    }
}
