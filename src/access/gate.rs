//! The admission gate: the one decision every platform adapter asks for each message it
//! receives, so that no adapter holds admission or pairing code. An adapter maps its platform's
//! event to the gate's inputs — the channel, the [`Chat`] (its id, private or a group), the
//! sender ([`User`]: id and username) — and acts on the [`Decision`]: hand the message on with
//! the role, send the pairing text, or drop it.
//!
//! The rules, in order:
//! 1. the chat list (`BUB_TELEGRAM_ALLOW_CHATS`, `BUB_DISCORD_ALLOW_CHANNELS`): empty serves
//!    every chat; a thread is served through its listed parent where the list serves threads
//!    (the parent is asked for only then — [`Gate::decide_thread`]);
//! 2. the sender's admission ([`Access::admission`]: owners, pairings, ids, usernames, `*`);
//! 3. a stranger in a private chat asks for pairing ([`Access::request_pairing`]: one code per
//!    hour, the oldest request giving way when a channel has ten, a flood logged once a
//!    minute) and gets the code's text; in a group a stranger is dropped — groups never pair.
//!
//! A new pairing request is published as a [`Knock`] for the owners; so is a stranger who
//! addressed the bot in a group, which only the adapter can tell ([`Gate::knocked_in_group`]).
//!
//! Owners configured by id are admitted in memory; every other decision reads `access.json`
//! (a `stat`, a read when it changed) and runs on the blocking pool, never on the adapter's
//! task. A failure there fails closed: the message is dropped (an unreadable file admits only
//! the configured lists, as everywhere).
//!
//! Logged here, with the channel's name first (`telegram.pairing.requested`, `.skip`, `.error`):
//! the pairing outcomes. Drops are logged by the adapter, next to its other reasons to skip a
//! message.

use std::future::Future;
use std::sync::Arc;

use super::pairing::{self, Request};
use super::{Access, Knock, Role, User};

/// What kind of chat a message was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatKind {
    /// One person and the bot: a stranger here may ask for pairing.
    Private,
    /// A group, a guild channel, a thread: strangers are ignored.
    Group,
}

/// The chat a message was written in, as the gate needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chat<'a> {
    /// The platform's chat id (the session is `<channel>:<id>`).
    pub id: &'a str,
    pub kind: ChatKind,
}

/// Why a message is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// The chat is not served (not on the channel's chat list).
    Chat,
    /// The sender is not admitted (a group; or a private chat that already got its code, or
    /// whose pairing request failed).
    Sender,
}

/// What the adapter does with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Hand it on: the sender is admitted with this role.
    Admit(Role),
    /// A stranger in a private chat: send them this text (their pairing code); the message
    /// itself goes nowhere.
    Pair(String),
    /// Nothing: the message goes nowhere and nothing is said.
    Drop(Dropped),
}

/// The admission gate of one process (see the module docs); cheap to clone.
#[derive(Clone)]
pub struct Gate {
    access: Arc<Access>,
}

/// What the blocking part of a decision found.
enum Found {
    Admitted(Role),
    Stranger,
    Asked(anyhow::Result<Request>),
}

impl Gate {
    pub fn new(access: Arc<Access>) -> Self {
        Self { access }
    }

    /// The decision about a message of `sender` in `chat` on `channel` (see the module docs).
    pub async fn decide(&self, channel: &str, chat: Chat<'_>, sender: User<'_>) -> Decision {
        self.decide_thread(channel, chat, sender, async { None })
            .await
    }

    /// [`Gate::decide`] for a chat that may be a thread: `parent` (the thread's parent chat, or
    /// `None`) is awaited only when the chat is not listed itself and the channel serves the
    /// threads of listed chats — a lookup the adapter makes only when it matters.
    pub(crate) async fn decide_thread(
        &self,
        channel: &str,
        chat: Chat<'_>,
        sender: User<'_>,
        parent: impl Future<Output = Option<String>>,
    ) -> Decision {
        if !self.serves(channel, chat.id, parent).await {
            return Decision::Drop(Dropped::Chat);
        }
        if self.access.is_configured_owner(channel, sender.id) {
            return Decision::Admit(Role::Owner);
        }
        let found = self.find(channel, chat, sender).await;
        let (chat_id, sender_id) = (chat.id, sender.id);
        match found {
            Found::Admitted(role) => Decision::Admit(role),
            Found::Stranger => Decision::Drop(Dropped::Sender),
            Found::Asked(Ok(Request::New(pending))) => {
                tracing::info!(chat_id, sender_id, "{channel}.pairing.requested");
                self.access.knocks.publish(Knock::pairing(&pending, sender));
                Decision::Pair(pairing::code_message(&pending))
            }
            Found::Asked(Ok(other)) => {
                tracing::info!(chat_id, sender_id, outcome = ?other, "{channel}.pairing.skip");
                Decision::Drop(Dropped::Sender)
            }
            Found::Asked(Err(e)) => {
                tracing::error!(chat_id, error = %format!("{e:#}"), "{channel}.pairing.error");
                Decision::Drop(Dropped::Sender)
            }
        }
    }

    /// A stranger (the gate dropped their message: [`Dropped::Sender`]) addressed the bot in
    /// group `chat`: the owners hear of it ([`Knock`]; groups never pair, so there is no code).
    /// The adapter calls it only for a message that addressed the bot.
    pub(crate) fn knocked_in_group(&self, channel: &str, chat: &str, sender: User<'_>) {
        tracing::info!(
            chat_id = chat,
            sender_id = sender.id,
            "{channel}.group.knock"
        );
        let knock = Knock::group(channel, chat, sender, chrono::Utc::now());
        self.access.knocks.publish(knock);
    }

    /// Whether `channel` serves `chat` — for a send outside a reply (`message.send`, `bub send`,
    /// a scheduled answer): rule 1 alone, `parent` awaited as in [`Gate::decide_thread`].
    pub async fn serves(
        &self,
        channel: &str,
        chat: &str,
        parent: impl Future<Output = Option<String>>,
    ) -> bool {
        if self.access.lists_chat(channel, chat) {
            return true;
        }
        let parent = match self.access.serves_threads(channel) {
            true => parent.await,
            false => None,
        };
        self.access.serves_chat(channel, chat, parent.as_deref())
    }

    /// The sender's admission and, for a stranger in a private chat, their pairing request
    /// (`access.json`, whose file work runs on the blocking pool).
    async fn find(&self, channel: &str, chat: Chat<'_>, sender: User<'_>) -> Found {
        let user = User {
            display: None,
            ..sender
        };
        match self.access.role(channel, user).await {
            Some(role) => Found::Admitted(role),
            None if chat.kind == ChatKind::Private => {
                let now = chrono::Utc::now();
                Found::Asked(
                    self.access
                        .request_pairing(channel, user, chat.id, now)
                        .await,
                )
            }
            None => Found::Stranger,
        }
    }
}

#[cfg(test)]
mod tests;
