//! The catch-up: Discord does not replay messages to a bot that was away, so after READY (a
//! start, or a new session when the old one could not be resumed) and after RESUMED the
//! adapter reads over REST what it missed in the chats it was talking in.
//!
//! * **Which chats.** The inbox's last seen ids ([`InboundSink::last_seen`]: the newest
//!   message id journaled per Discord chat), the [`MAX_CHATS`] most recently active. The
//!   gateway handler takes this snapshot ([`CatchUp::snapshot`]) as soon as it handles
//!   READY/RESUMED, so messages journaled after that cannot move the starting point past what
//!   was missed.
//! * **What.** One page per chat: `GET /channels/{id}/messages?after=<last seen>&limit=100`
//!   ([`PAGE`]), with the REST client's 429 retries. A full page means more were missed; that
//!   is logged (`discord.catchup.truncated`), not fetched. Chats are read one after the
//!   other; a chat that fails (unknown channel, no access, a rate limit too long to wait) is
//!   logged and skipped, and no chat is started after [`BUDGET`].
//! * **How.** Oldest first (Discord answers newest first), each message through
//!   [`Pipeline::process`] exactly like a gateway `MESSAGE_CREATE`: bots ignored, allow-lists,
//!   admission (and pairing for a stranger's DM), addressing, the message, then the inbox, which
//!   drops a message it already has — a message that arrives both ways is handled once. REST
//!   messages carry no `guild_id`; it comes from the channel lookup (cached; the addressing
//!   rules use it too), so a guild message is never taken for a DM. A chat whose channel
//!   cannot be looked up is skipped.
//! * **When.** The catch-up is an event on the pipeline's queue ([`Event::CatchUp`]), so it
//!   runs inside the pipeline task, in order with the gateway's messages: messages that
//!   arrive meanwhile wait in the queue (then serenity waits) for its bounded number of
//!   requests, and the session gets the missed messages before the newer live ones. serenity
//!   runs each event handler in a task of its own, so a message arriving in the same instant
//!   as READY may still overtake the catch-up; it is then handled first, and still once.
//!
//! Messages the pipeline drops (bots, strangers) are not journaled, so they do not move a
//! chat's last seen id: the next catch-up reads them again and drops them again.
//!
//! [`Event::CatchUp`]: super::inbound::Event::CatchUp

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use serde::Deserialize as _;
use serde_json::Value;
use serenity::http::Route;
use serenity::model::channel::Message;
use serenity::model::id::UserId;
use tokio::time::Instant;

use super::inbound::Pipeline;
use crate::channels::InboundSink;

/// Chats read per catch-up, the most recently active first.
pub(crate) const MAX_CHATS: usize = 50;
/// Messages read per chat: one page, Discord's largest.
pub(crate) const PAGE: usize = 100;
/// No chat is started after this (live messages wait while the catch-up runs).
pub(crate) const BUDGET: Duration = Duration::from_secs(60);

/// What made the catch-up run (for the logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// READY: a start, or a new gateway session.
    Ready,
    /// RESUMED: the session went on after a reconnect.
    Resumed,
}

impl Reason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::Ready => "ready",
            Reason::Resumed => "resumed",
        }
    }
}

/// A catch-up to run: the chats and the newest message id journaled in each, as they were
/// when the gateway said READY or RESUMED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CatchUp {
    pub reason: Reason,
    /// `(channel id, last seen message id)`, most recently active first.
    pub chats: Vec<(String, u64)>,
}

impl CatchUp {
    /// The inbox's last seen ids for Discord, now (at most [`MAX_CHATS`] chats).
    pub(crate) fn snapshot(sink: &InboundSink, reason: Reason) -> Self {
        Self {
            reason,
            chats: sink.last_seen("discord", MAX_CHATS),
        }
    }
}

impl Pipeline {
    /// Runs `plan`: for each chat, one page of the messages after its last seen one, oldest
    /// first, each through [`Pipeline::process`]. A failing chat is logged and skipped; no chat
    /// starts after [`BUDGET`].
    pub(crate) async fn catch_up(&mut self, plan: CatchUp, bot: UserId) {
        if plan.chats.is_empty() {
            return;
        }
        let reason = plan.reason.as_str();
        let deadline = Instant::now() + BUDGET;
        let (mut fetched, mut delivered) = (0, 0);
        for (i, (chat, after)) in plan.chats.iter().enumerate() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                tracing::warn!(
                    reason,
                    skipped = plan.chats.len() - i,
                    "discord.catchup.out_of_time"
                );
                break;
            }
            let messages = match tokio::time::timeout(remaining, self.missed(chat, *after)).await {
                Ok(Ok(messages)) => messages,
                Ok(Err(e)) => {
                    tracing::warn!(reason, channel_id = %chat, error = %format!("{e:#}"),
                        "discord.catchup.chat_failed");
                    continue;
                }
                Err(_) => {
                    tracing::warn!(reason, channel_id = %chat, "discord.catchup.chat_timeout");
                    continue;
                }
            };
            fetched += messages.len();
            for msg in &messages {
                if self.process(msg, bot).await {
                    delivered += 1;
                }
            }
        }
        tracing::info!(
            reason,
            chats = plan.chats.len(),
            fetched,
            delivered,
            "discord.catchup"
        );
    }

    /// The messages of `chat` after `after` (one page), oldest first, with the channel's
    /// `guild_id` set (REST messages lack it).
    async fn missed(&mut self, chat: &str, after: u64) -> anyhow::Result<Vec<Message>> {
        let channel_id = super::channel_id(chat)?;
        let query = [("after", after.to_string()), ("limit", PAGE.to_string())];
        let page = self
            .rest
            .get_json_query(Route::ChannelMessages { channel_id }, &query)
            .await?;
        let entries = page
            .as_array()
            .context("discord: a message history that is not a list")?;
        if entries.len() >= PAGE {
            tracing::warn!(%channel_id, after, page = PAGE,
                "discord.catchup.truncated: more messages were missed than one page holds; \
                 only the oldest page is handled");
        }
        let mut messages = oldest_first(entries, after);
        if messages.is_empty() {
            return Ok(messages);
        }
        let info = self
            .lookups
            .channel(channel_id)
            .await
            .ok_or_else(|| anyhow!("discord: channel {chat} could not be looked up"))?;
        for msg in &mut messages {
            msg.guild_id = msg.guild_id.or(info.guild_id);
        }
        Ok(messages)
    }
}

/// The entries of a history page newer than `after`, as messages, oldest first. An entry that
/// is not a message serenity understands is logged and skipped.
fn oldest_first(entries: &[Value], after: u64) -> Vec<Message> {
    let mut messages: Vec<Message> = entries
        .iter()
        .filter_map(|entry| match Message::deserialize(entry) {
            Ok(msg) => Some(msg),
            Err(e) => {
                let id = entry.get("id").and_then(Value::as_str).unwrap_or("?");
                tracing::warn!(message_id = id, error = %e, "discord.catchup.unreadable");
                None
            }
        })
        .filter(|msg| msg.id.get() > after)
        .collect();
    messages.sort_unstable_by_key(|msg| msg.id);
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(id: &str) -> Value {
        json!({"id": id, "channel_id": "555", "author": {"id": "42", "username": "alice"},
               "content": "hi", "timestamp": "2024-01-01T00:00:00.000000+00:00",
               "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
               "attachments": [], "embeds": [], "pinned": false, "type": 0})
    }

    #[test]
    fn a_page_is_handled_oldest_first_and_only_after_the_last_seen_id() {
        let page = [
            entry("105"),
            json!({"id": "104", "not": "a message"}),
            entry("103"),
            entry("100"),
            entry("99"),
            entry("101"),
        ];
        let ids: Vec<u64> = oldest_first(&page, 100)
            .iter()
            .map(|m| m.id.get())
            .collect();
        assert_eq!(ids, [101, 103, 105]);
        assert!(oldest_first(&[], 1).is_empty());
    }
}
