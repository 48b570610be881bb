//! From gateway `MESSAGE_CREATE` to [`Inbound`]: one task that takes the messages in arrival
//! order and, for each, drops it (bot author, system/empty message, channel or sender not
//! allowed), decides whether the bot was addressed, and builds the prompt.
//!
//! Order matters: allow-lists come first and apply to every message, commands included.
//! Lookups (channel info, the bot's roles) are made only when a rule needs them and are
//! cached (see `lookup`). Logs carry ids and reasons, never message text.

use serenity::model::channel::Message;
use serenity::model::id::UserId;
use tokio::sync::{mpsc, watch};

use super::filter::{self, Addressed, Rules, Skip};
use super::lookup::Lookups;
use super::prompt;
use crate::channels::Inbound;

/// The bot's own user, known once the gateway said READY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotUser {
    pub id: UserId,
    pub name: String,
}

/// The inbound side of one gateway session.
pub struct Pipeline {
    pub rules: Rules,
    pub lookups: Lookups,
    pub bot: watch::Receiver<Option<BotUser>>,
    pub inbound: mpsc::UnboundedSender<Inbound>,
}

impl Pipeline {
    /// Handles messages until the queue closes (the gateway client was dropped) or the
    /// session side stopped listening.
    pub async fn run(mut self, mut queue: mpsc::Receiver<Message>) {
        while let Some(msg) = queue.recv().await {
            // READY is dispatched before any message, but by serenity in its own task.
            let bot = match self.bot.wait_for(Option::is_some).await {
                Ok(user) => user.as_ref().map(|u| u.id),
                Err(_) => return,
            };
            let Some(bot) = bot else { return };
            if let Some(item) = self.handle(&msg, bot).await
                && self.inbound.send(item).is_err()
            {
                return;
            }
        }
    }

    /// The [`Inbound`] for `msg`, or `None` when it is dropped.
    pub async fn handle(&mut self, msg: &Message, bot: UserId) -> Option<Inbound> {
        if let Err(skip) = self.admit(msg).await {
            log_skip(msg, skip);
            return None;
        }
        let reason = self.addressed(msg, bot).await;
        let text = self
            .rules
            .strip_command(&msg.content)
            .unwrap_or(&msg.content);
        let item = Inbound {
            channel: "discord".to_owned(),
            chat_id: msg.channel_id.to_string(),
            message_id: msg.id.to_string(),
            sender_id: msg.author.id.to_string(),
            prompt: prompt::build(msg, text),
            mentioned: reason.is_some(),
            reply: true,
        };
        tracing::info!(channel_id = %msg.channel_id, message_id = %msg.id,
            sender_id = %msg.author.id, mentioned = item.mentioned,
            reason = reason.map_or("none", Addressed::as_str), "discord.inbound");
        Some(item)
    }

    /// Bots, system and empty messages, then the allow-lists.
    async fn admit(&mut self, msg: &Message) -> Result<(), Skip> {
        if let Some(skip) = filter::ignored(msg) {
            return Err(skip);
        }
        let channel_id = msg.channel_id.to_string();
        if !self.rules.channel_listed(&channel_id) {
            // Only a guild thread can be allowed through its parent.
            let parent = match msg.guild_id {
                Some(_) => self
                    .lookups
                    .channel(msg.channel_id)
                    .await
                    .and_then(|c| c.thread_parent),
                None => None,
            };
            if !self.rules.channel_allowed(&channel_id, parent.as_deref()) {
                return Err(Skip::Channel);
            }
        }
        let author = &msg.author;
        let id = author.id.to_string();
        if !self
            .rules
            .sender_allowed(&id, &author.name, author.global_name.as_deref())
        {
            return Err(Skip::Sender);
        }
        Ok(())
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
