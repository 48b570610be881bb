//! Access: who may talk to Bub, and with which rights.
//!
//! * Admission — a sender is admitted on a channel when they are one of its owners
//!   (`BUB_<CHANNEL>_OWNERS`), were approved by pairing (`BUB_HOME/access.json`), are named in
//!   `BUB_<CHANNEL>_ALLOW_FROM`, or the list is `*`. An allow-list entry of digits only is an id
//!   and matches ids only; any other entry (`@` optional) is a username and matches usernames
//!   only (case-insensitive) — never an id, never a display name. An empty list admits nobody.
//!   Unknown senders may ask for access from a private chat ([`pairing`]); in groups they are
//!   ignored. A channel's chat list (`BUB_TELEGRAM_ALLOW_CHATS`, `BUB_DISCORD_ALLOW_CHANNELS`)
//!   says which chats are served at all.
//! * [`Gate`] — the one decision every platform adapter asks for each message: the chat list,
//!   then the sender's role, or a pairing code for a stranger in a private chat.
//! * Roles — owners get every tool; everyone else admitted is a guest, whose turns run under the
//!   guest [`Policy`]. Owner rights come from ids only: users whose id is on the allow-list are
//!   owners while `*_OWNERS` is empty; a username match, or `*`, admits a guest.
//! * [`Access::admission`] is the one rule: the gate, the inbox's re-check after a restart, a
//!   job's [`Access::reconfirm`] and `bub access explain` all call it, so they cannot disagree.
//! * [`Knock`] — a stranger asking to come in (a new pairing request; addressing the bot in a
//!   group), published for the daemon to tell the [`Access::owners`] ([`knock`]).
//! * [`Authority`] — who asked for a turn and with which role: the least trusted sender of a
//!   batch; a scheduled job keeps its creator's (and loses it when the creator loses access).
//!
//! The lists are per channel, by name, from the settings' channel table
//! ([`crate::config::ChannelTable`]): a platform needs no code here.
//!
//! Invariants: every decision reads the lists and the current `access.json` (a `stat` per
//! decision, re-read when it changed), so an approval or revocation applies to the next message
//! without a restart; a file that cannot be read admits no one beyond the configured lists.
//! Reading the file is blocking work: the gate does it on the blocking pool.

mod explain;
pub mod files;
mod gate;
mod knock;
pub(crate) mod pairing;
pub mod policy;
mod store;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::{Field, Settings, var_name};
use crate::document::Revision;
use crate::terminal::safe_line;
pub use gate::{Chat, ChatKind, Decision, Dropped, Gate};
use knock::Knocks;
pub use knock::{Knock, KnockKind};
pub(crate) use pairing::{FloodLog, Pending, Request};
pub use policy::Policy;
pub(crate) use policy::TurnOrigin;
pub(crate) use store::{AccessFile, AccessStore, Paired};

/// What an admitted sender may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Talks to the agent; the turn runs under the guest policy.
    Guest,
    /// Every tool, the comma commands and the shell.
    Owner,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Guest => "guest",
            Role::Owner => "owner",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A platform user as an adapter sees them: id, and username if they have one. Admission reads
/// only these two — never a display name or nickname, which anyone can set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct User<'a> {
    pub id: &'a str,
    pub name: Option<&'a str>,
    /// The name they show, for the owners' notice of their knock ([`Knock`]) only.
    pub display: Option<&'a str>,
}

/// An owner of a channel, as the daemon's start line and notices name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub id: String,
    /// Their username when a pairing recorded it.
    pub username: Option<String>,
}

/// One sender of a turn.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principal {
    pub channel: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Principal {
    pub(crate) fn user(&self) -> User<'_> {
        User {
            id: &self.id,
            name: self.name.as_deref(),
            display: None,
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.channel, self.id)
    }
}

/// Who asked for a turn, with the role it runs under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authority {
    pub role: Role,
    /// The chat users behind the turn; empty for the local operator (terminal, `bub run`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub senders: Vec<Principal>,
}

impl Authority {
    /// The person at this machine's terminal: an owner.
    pub fn terminal() -> Self {
        Self {
            role: Role::Owner,
            senders: Vec::new(),
        }
    }

    /// A turn asked for by one chat user.
    pub fn sender(role: Role, sender: Principal) -> Self {
        Self {
            role,
            senders: vec![sender],
        }
    }

    /// The authority of a batch: the least trusted role, every distinct sender.
    pub(crate) fn least<'a>(all: impl IntoIterator<Item = &'a Authority>) -> Self {
        let mut out = Authority::terminal();
        for a in all {
            out.role = out.role.min(a.role);
            for s in &a.senders {
                if !out.senders.contains(s) {
                    out.senders.push(s.clone());
                }
            }
        }
        out
    }

    /// `owner (terminal)`, `guest (telegram:42, telegram:43)`.
    pub(crate) fn describe(&self) -> String {
        if self.senders.is_empty() {
            return format!("{} (terminal)", self.role);
        }
        let who: Vec<String> = self.senders.iter().map(ToString::to_string).collect();
        format!("{} ({})", self.role, who.join(", "))
    }
}

/// One channel's configured lists.
#[derive(Debug, Clone, Default)]
struct Lists {
    /// `*` is in the allow-list.
    everyone: bool,
    /// Allow-list entries of digits only: user ids, matched against ids only.
    ids: Vec<String>,
    /// The other entries, without a leading `@`: usernames, matched against usernames only.
    usernames: Vec<String>,
    /// `*_OWNERS`.
    owners: Vec<String>,
    /// The chats served (trimmed); empty: every chat.
    chats: Vec<String>,
    /// A thread of a listed chat is served too.
    threads: bool,
}

impl Lists {
    fn new(c: &crate::config::ChannelSettings) -> Self {
        let mut lists = Self {
            owners: c.owners.clone(),
            chats: c.allow_chats.iter().map(|c| c.trim().to_owned()).collect(),
            threads: c.threads,
            ..Self::default()
        };
        for entry in c.allow_from.iter().map(|e| e.trim()) {
            if entry == "*" {
                lists.everyone = true;
            } else if is_id(entry) {
                lists.ids.push(entry.to_owned());
            } else {
                let name = entry.strip_prefix('@').unwrap_or(entry);
                if !name.is_empty() {
                    lists.usernames.push(name.to_owned());
                }
            }
        }
        lists
    }

    /// `chat` is on the chat list, or the list is empty.
    fn lists_chat(&self, chat: &str) -> bool {
        self.chats.is_empty() || self.chats.iter().any(|c| c == chat.trim())
    }

    /// The sender's username is on the allow-list (case-insensitive).
    fn names(&self, user: User<'_>) -> bool {
        user.name.is_some_and(|name| {
            self.usernames
                .iter()
                .any(|entry| entry.eq_ignore_ascii_case(name))
        })
    }
}

/// An allow-list entry that is a user id: digits only.
fn is_id(entry: &str) -> bool {
    !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit())
}

/// Why a sender is admitted: the first rule that matched, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// Their id is in `*_OWNERS`.
    Owners,
    /// Approved by pairing (`access.json`), as the role recorded there.
    Paired,
    /// Their id is on the allow-list: an owner while `*_OWNERS` is empty.
    Id,
    /// Their username is on the allow-list: a guest, always.
    Username,
    /// The allow-list is `*`: a guest.
    Everyone,
}

/// An admitted sender's role and why they have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admission {
    pub role: Role,
    pub via: Via,
}

/// The access rules of one process (see the module docs).
pub struct Access {
    /// Each channel's lists, by name, in the settings' order.
    lists: Vec<(String, Lists)>,
    store: AccessStore,
    cache: Mutex<Cached>,
    /// Per channel: pairing requests since the last flood log line.
    floods: Mutex<HashMap<String, FloodLog>>,
    /// Strangers who asked to come in, for the owners ([`Access::knocks`]).
    knocks: Knocks,
}

struct Cached {
    stamp: Option<Revision>,
    file: Arc<AccessFile>,
}

/// What `revoke` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// A pairing was removed.
    pub removed: bool,
    /// The variable that still admits the user, if any.
    pub still_admitted_by: Option<&'static str>,
}

impl Access {
    pub fn new(settings: &Settings) -> Self {
        Self {
            lists: settings
                .channels
                .iter()
                .map(|(name, c)| (name.to_owned(), Lists::new(c)))
                .collect(),
            store: AccessStore::new(crate::document::open(
                &settings.home,
                // A bad URL stopped the process at start; here it only means files.
                settings.database().ok().flatten().as_ref(),
            )),
            cache: Mutex::new(Cached {
                stamp: None,
                file: Arc::default(),
            }),
            floods: Mutex::default(),
            knocks: Knocks::default(),
        }
    }

    /// Every [`Knock`] from now on: new pairing requests and strangers addressing the bot in
    /// groups (the daemon tells the owners).
    pub(crate) fn knocks(&self) -> tokio::sync::broadcast::Receiver<Knock> {
        self.knocks.listen()
    }

    /// `channel`'s owners: the ids of `*_OWNERS` — or, while it is empty, the ids on the
    /// allow-list — and the users paired as owners, each once, in that order (it may read
    /// `access.json`).
    pub async fn owners(&self, channel: &str) -> Vec<Owner> {
        let Some(lists) = self.lists(channel) else {
            return Vec::new();
        };
        let configured = match lists.owners.is_empty() {
            true => &lists.ids,
            false => &lists.owners,
        };
        let file = self.file().await;
        let paired = file
            .users
            .iter()
            .filter(|p| p.channel == channel && p.role == Role::Owner);
        let mut owners: Vec<Owner> = Vec::new();
        let known = |id: &str| {
            file.users
                .iter()
                .find(|p| p.channel == channel && p.user_id == id)
                .and_then(|p| p.username.clone())
        };
        for id in configured.iter().map(|id| id.trim()) {
            if !id.is_empty() && !owners.iter().any(|o| o.id == id) {
                owners.push(Owner {
                    id: id.to_owned(),
                    username: known(id),
                });
            }
        }
        for p in paired {
            if !owners.iter().any(|o| o.id == p.user_id) {
                owners.push(Owner {
                    id: p.user_id.clone(),
                    username: p.username.clone(),
                });
            }
        }
        owners
    }

    /// Whether everyone is admitted on `channel` (its allow-list is `*`): nobody can ask to pair.
    pub(crate) fn admits_everyone(&self, channel: &str) -> bool {
        self.lists(channel).is_some_and(|l| l.everyone)
    }

    fn lists(&self, channel: &str) -> Option<&Lists> {
        self.lists
            .iter()
            .find(|(name, _)| name == channel)
            .map(|(_, lists)| lists)
    }

    fn known(&self, channel: &str) -> anyhow::Result<&Lists> {
        self.lists(channel).ok_or_else(|| {
            let known: Vec<&str> = self.lists.iter().map(|(n, _)| n.as_str()).collect();
            anyhow!("unknown channel {channel:?} (use {})", known.join(" or "))
        })
    }

    /// Whether `channel` serves chat `chat` by its own id: the chat list is empty or names it.
    /// `false` for an unknown channel.
    pub(crate) fn lists_chat(&self, channel: &str, chat: &str) -> bool {
        self.lists(channel).is_some_and(|l| l.lists_chat(chat))
    }

    /// Whether `channel` serves chat `chat`, or — where threads of listed chats are served —
    /// the thread of `parent`. `false` for an unknown channel.
    pub(crate) fn serves_chat(&self, channel: &str, chat: &str, parent: Option<&str>) -> bool {
        self.lists(channel).is_some_and(|l| {
            l.lists_chat(chat)
                || (l.threads && parent.is_some_and(|p| l.chats.iter().any(|c| c == p.trim())))
        })
    }

    /// Whether a thread of a listed chat is served on `channel` (its parent is worth looking
    /// up).
    pub(crate) fn serves_threads(&self, channel: &str) -> bool {
        self.lists(channel).is_some_and(|l| l.threads)
    }

    /// Whether `id` is in `channel`'s `*_OWNERS` (decided without `access.json`).
    pub(crate) fn is_configured_owner(&self, channel: &str, id: &str) -> bool {
        self.lists(channel)
            .is_some_and(|l| l.owners.iter().any(|o| o == id))
    }

    /// The current `access.json`: re-read when its stamp changed; unreadable = empty.
    pub async fn file(&self) -> Arc<AccessFile> {
        let stamp = self.store.stamp().await;
        {
            let cache = self.cache.lock().expect("access cache");
            if cache.stamp.as_ref() == Some(&stamp) {
                return cache.file.clone();
            }
        }
        let file = match self.store.load().await {
            Ok(file) => Arc::new(file),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "access.file.error");
                Arc::default()
            }
        };
        *self.cache.lock().expect("access cache") = Cached {
            stamp: Some(stamp),
            file: file.clone(),
        };
        file
    }

    /// Logs, once at startup, what an operator may not expect of a channel's lists: `*` admits
    /// everyone (as guests); usernames on the list admit guests only.
    pub(crate) fn warn_at_start(&self, channel: &str) {
        let Some(lists) = self.lists(channel) else {
            return;
        };
        if lists.everyone {
            tracing::warn!(
                channel,
                "access.open: the allow-list is `*`: everyone may talk to the bot (as a guest)"
            );
        }
        if !lists.usernames.is_empty() {
            tracing::warn!(
                channel,
                "access.usernames: {} names users by username ({}): they are guests; owners \
                 need ids ({} or an id on the list)",
                allow_var(channel),
                lists.usernames.join(", "),
                owners_var(channel)
            );
        }
    }

    /// Whether and why the sender is admitted on `channel`, with which role: the one rule the
    /// gate, the inbox's re-check, `reconfirm` and `bub access explain` use (see the module
    /// docs). It may read `access.json`.
    pub(crate) async fn admission(&self, channel: &str, user: User<'_>) -> Option<Admission> {
        if self.is_configured_owner(channel, user.id) {
            return self.admission_in(&AccessFile::default(), channel, user);
        }
        self.admission_in(&*self.file().await, channel, user)
    }

    /// [`Self::admission`] with `file` as `access.json`.
    fn admission_in(&self, file: &AccessFile, channel: &str, user: User<'_>) -> Option<Admission> {
        let lists = self.lists(channel)?;
        let admit = |role, via| Some(Admission { role, via });
        if lists.owners.iter().any(|o| o == user.id) {
            return admit(Role::Owner, Via::Owners);
        }
        if let Some(paired) = file
            .users
            .iter()
            .find(|p| p.channel == channel && p.user_id == user.id)
        {
            return admit(paired.role, Via::Paired);
        }
        if lists.ids.iter().any(|id| id == user.id) {
            let role = if lists.owners.is_empty() {
                Role::Owner
            } else {
                Role::Guest
            };
            return admit(role, Via::Id);
        }
        if lists.names(user) {
            return admit(Role::Guest, Via::Username);
        }
        if lists.everyone {
            return admit(Role::Guest, Via::Everyone);
        }
        None
    }

    /// The sender's role on `channel`, or `None` when they are not admitted.
    pub async fn role(&self, channel: &str, user: User<'_>) -> Option<Role> {
        self.admission(channel, user).await.map(|a| a.role)
    }

    /// [`Self::role`] with `file` as `access.json` ([`Self::file`]): for many checks against
    /// one reading.
    pub fn role_in(&self, file: &AccessFile, channel: &str, user: User<'_>) -> Option<Role> {
        self.admission_in(file, channel, user).map(|a| a.role)
    }

    /// Checks a recorded authority again (a scheduled job's creator): each sender must still be
    /// admitted, and the role is the lower of the recorded and the current one.
    pub(crate) async fn reconfirm(&self, recorded: &Authority) -> Result<Authority, String> {
        let mut out = recorded.clone();
        for sender in &recorded.senders {
            match self.role(&sender.channel, sender.user()).await {
                Some(role) => out.role = out.role.min(role),
                None => return Err(format!("{sender} is no longer admitted")),
            }
        }
        Ok(out)
    }

    /// Whether the channel already has an owner: configured, approved, or an id on the list.
    fn has_owner(&self, channel: &str, lists: &Lists, file: &AccessFile) -> bool {
        !lists.owners.is_empty()
            || !lists.ids.is_empty()
            || file
                .users
                .iter()
                .any(|p| p.channel == channel && p.role == Role::Owner)
    }

    /// An unknown sender asks for access from private chat `chat_id`. Writes `access.json` only
    /// for a new request; logs a flood (requests giving way) at most once a minute per channel.
    pub(crate) async fn request_pairing(
        &self,
        channel: &str,
        user: User<'_>,
        chat_id: &str,
        now: DateTime<Utc>,
    ) -> anyhow::Result<Request> {
        self.known(channel)?;
        let template = Pending {
            channel: channel.to_owned(),
            code: pairing::new_code(),
            user_id: user.id.to_owned(),
            username: user.name.map(str::to_owned),
            chat_id: chat_id.to_owned(),
            requested_at: now,
        };
        // Decide on the cached copy first: repeated messages of a stranger cost no file I/O.
        let file = self.file().await;
        let (mut pending, mut gave_way) = (file.pending.clone(), file.gave_way.clone());
        if let (Request::AlreadyAsked, _) =
            pairing::request(&mut pending, &mut gave_way, template.clone(), now)
        {
            return Ok(Request::AlreadyAsked);
        }
        let (request, displaced) = self
            .store
            .update(|file| {
                pairing::request(&mut file.pending, &mut file.gave_way, template.clone(), now)
            })
            .await?;
        if let Request::New(_) = request {
            let mut floods = self.floods.lock().expect("flood log");
            if let Some((requests, gave_way)) = floods
                .entry(channel.to_owned())
                .or_default()
                .note(displaced, now)
            {
                tracing::warn!(
                    channel,
                    requests,
                    gave_way,
                    "pairing.flood: {requests} pairing request(s) since the last line, {gave_way} \
                     of the oldest gave way to newer ones (at most {} wait); see `bub pair list`",
                    pairing::MAX_PENDING
                );
            }
        }
        Ok(request)
    }

    /// Approves the pending request with `code`: the sender is admitted by id, as `role` or, when
    /// none is given, as owner if the channel has none yet, else as guest.
    pub async fn approve(
        &self,
        channel: &str,
        code: &str,
        role: Option<Role>,
        now: DateTime<Utc>,
    ) -> anyhow::Result<Paired> {
        let lists = self.known(channel)?;
        let code = pairing::normalize_code(code);
        let result = self
            .store
            .update(|file| {
                pairing::prune(&mut file.pending, now);
                let at = file
                    .pending
                    .iter()
                    .position(|p| p.channel == channel && p.code == code)?;
                let request = file.pending.remove(at);
                let role = role.unwrap_or(if self.has_owner(channel, lists, file) {
                    Role::Guest
                } else {
                    Role::Owner
                });
                let paired = Paired {
                    channel: channel.to_owned(),
                    user_id: request.user_id,
                    username: request.username,
                    role,
                    approved_at: now,
                };
                file.users
                    .retain(|p| !(p.channel == channel && p.user_id == paired.user_id));
                file.users.push(paired.clone());
                Some(paired)
            })
            .await?;
        match result {
            Some(paired) => Ok(paired),
            None => bail!(
                "no pending request with code {code} on {channel} (codes expire after one hour; \
                 see `bub pair list`)"
            ),
        }
    }

    /// Rejects the pending request with `code` (the sender may ask again later); whether there
    /// was one.
    pub async fn reject(&self, channel: &str, code: &str) -> anyhow::Result<bool> {
        self.known(channel)?;
        let code = pairing::normalize_code(code);
        self.store
            .update(|file| {
                let before = file.pending.len();
                file.pending
                    .retain(|p| !(p.channel == channel && p.code == code));
                file.pending.len() < before
            })
            .await
    }

    /// Removes the pairing of `user_id` (and their pending request).
    pub async fn revoke(&self, channel: &str, user_id: &str) -> anyhow::Result<Revoked> {
        self.known(channel)?;
        let (removed, username) = self
            .store
            .update(|file| {
                let username = file
                    .users
                    .iter()
                    .find(|p| p.channel == channel && p.user_id == user_id)
                    .and_then(|p| p.username.clone());
                let before = (file.users.len(), file.pending.len());
                file.users
                    .retain(|p| !(p.channel == channel && p.user_id == user_id));
                file.pending
                    .retain(|p| !(p.channel == channel && p.user_id == user_id));
                (before != (file.users.len(), file.pending.len()), username)
            })
            .await?;
        let user = User {
            id: user_id,
            name: username.as_deref(),
            display: None,
        };
        let still_admitted_by = self.admission(channel, user).await.map(|a| match a.via {
            Via::Owners => owners_var(channel),
            _ => allow_var(channel),
        });
        Ok(Revoked {
            removed,
            still_admitted_by,
        })
    }

    /// Unexpired pending requests of every channel.
    pub async fn pending(&self, now: DateTime<Utc>) -> Vec<Pending> {
        let mut pending = self.file().await.pending.clone();
        pairing::prune(&mut pending, now);
        pending
    }

    /// `3 pairing requests gave way to newer ones in the last hour` for a channel flooded with
    /// requests, if it was.
    fn flood_note(&self, channel: &str, file: &AccessFile, now: DateTime<Utc>) -> Option<String> {
        let n = pairing::gave_way_in_last_hour(&file.gave_way, channel, now);
        let at_least = if n >= pairing::MAX_GAVE_WAY {
            "at least "
        } else {
            ""
        };
        (n > 0).then(|| {
            format!(
                "{at_least}{n} pairing request(s) gave way to newer ones in the last hour (a \
                 channel keeps the {} newest)",
                pairing::MAX_PENDING
            )
        })
    }

    /// [`Access::flood_note`] of every flooded channel, as `telegram: …`.
    pub(crate) async fn flood_notes(&self, now: DateTime<Utc>) -> Vec<String> {
        let file = self.file().await;
        self.lists
            .iter()
            .filter_map(|(c, _)| Some(format!("{c}: {}", self.flood_note(c, &file, now)?)))
            .collect()
    }
}

/// `42 @ann` (the username when there is one), for listings; what the platform gave is escaped
/// for a terminal (see [`crate::terminal`]).
pub fn who(user_id: &str, username: Option<&str>) -> String {
    let id = safe_line(user_id);
    match username {
        Some(name) => format!("{id} @{}", safe_line(name)),
        None => id.into_owned(),
    }
}

/// `BUB_TELEGRAM_ALLOW_FROM` / `BUB_DISCORD_ALLOW_FROM`: the variable of `channel`'s sender
/// list (a channel without variables: "its allow-list").
pub(crate) fn allow_var(channel: &str) -> &'static str {
    var_name(channel, Field::AllowFrom).unwrap_or("its allow-list")
}

/// `BUB_TELEGRAM_OWNERS` / `BUB_DISCORD_OWNERS` (a channel without variables: "its owners").
pub(crate) fn owners_var(channel: &str) -> &'static str {
    var_name(channel, Field::Owners).unwrap_or("its owners")
}

/// `BUB_TELEGRAM_ALLOW_CHATS` / `BUB_DISCORD_ALLOW_CHANNELS` (a channel without variables:
/// "its chat list").
pub(crate) fn chats_var(channel: &str) -> &'static str {
    var_name(channel, Field::AllowChats).unwrap_or("its chat list")
}

#[cfg(test)]
mod tests;
