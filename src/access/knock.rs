//! Knocks: a stranger who asked to come in, as the owners should hear of it — a new pairing
//! request from a private chat, or a stranger addressing the bot in a group (groups never pair:
//! the message is dropped, but the owner learns that someone tried).
//!
//! The gate publishes a [`Knock`] on the process's [`Knocks`] (a bounded broadcast: with nobody
//! listening — `bub run`, `bub chat` — it costs nothing; a listener that falls behind loses the
//! oldest, never holds the gate). The daemon listens and tells the owners
//! (`crate::daemon::owner`). A private chat knocks once per code, so at most once an hour per
//! sender (the pairing rules, kept in `access.json`); a group knocks at every addressed message
//! of a stranger, and the listener keeps it to one notice an hour per sender.
//!
//! What a knock carries came from the platform (usernames, display names): untrusted text for
//! whoever renders it.

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;

use super::{Pending, User};

/// Knocks waiting for a slow listener; beyond that the oldest are lost (logged by the listener).
const CAPACITY: usize = 64;

/// Who knocked, on which channel, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knock {
    pub channel: String,
    pub user_id: String,
    /// Their username, as the platform gave it.
    pub username: Option<String>,
    /// The name they show (anyone can set it: never used to admit).
    pub display: Option<String>,
    pub at: DateTime<Utc>,
    pub kind: KnockKind,
}

/// How a stranger knocked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnockKind {
    /// A new pairing request from a private chat: the code the owner approves it with.
    Pairing { code: String },
    /// They addressed the bot in group `chat_id`, where they are not admitted (no code: groups
    /// never pair).
    Group { chat_id: String },
}

impl Knock {
    /// The knock of a new pairing request (`sender`'s display name added).
    pub(crate) fn pairing(pending: &Pending, sender: User<'_>) -> Self {
        Self {
            channel: pending.channel.clone(),
            user_id: pending.user_id.clone(),
            username: pending.username.clone(),
            display: sender.display.map(str::to_owned),
            at: pending.requested_at,
            kind: KnockKind::Pairing {
                code: pending.code.clone(),
            },
        }
    }

    /// The knock of a stranger addressing the bot in group `chat_id`.
    pub(crate) fn group(channel: &str, chat_id: &str, sender: User<'_>, at: DateTime<Utc>) -> Self {
        Self {
            channel: channel.to_owned(),
            user_id: sender.id.to_owned(),
            username: sender.name.map(str::to_owned),
            display: sender.display.map(str::to_owned),
            at,
            kind: KnockKind::Group {
                chat_id: chat_id.to_owned(),
            },
        }
    }
}

/// Where the process's knocks are published (see the module docs).
pub(crate) struct Knocks {
    tx: broadcast::Sender<Knock>,
}

impl Default for Knocks {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl Knocks {
    /// Publishes `knock` to whoever listens (nobody: nothing happens).
    pub(crate) fn publish(&self, knock: Knock) {
        let _ = self.tx.send(knock);
    }

    /// A listener: every knock from now on.
    pub(crate) fn listen(&self) -> broadcast::Receiver<Knock> {
        self.tx.subscribe()
    }
}
