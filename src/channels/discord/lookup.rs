//! The two Discord facts the addressing rules cannot read from a message, fetched over REST
//! on demand and kept in small bounded caches:
//!
//! * channel info (`GET /channels/{id}`): is it a thread, its name, its parent, its guild — for
//!   the `bub…` thread rule, for `allow_channels` on threads, and for messages fetched by the
//!   catch-up (REST messages carry no `guild_id`);
//! * the bot's roles in a guild (`GET /guilds/{id}/members/{bot}`) — a mention of one of them
//!   addresses the bot.
//!
//! Each lookup happens at most once per key per [`TTL`] (names and roles change rarely), and
//! each cache holds at most [`CAPACITY`] keys, evicting the oldest entry (no unbounded maps).
//! A failed lookup is logged and treated as "not a thread" / "no roles"; it is not cached.
//! Lookups are JSON (`serde_json::Value`) rather than serenity's models, so a channel type
//! serenity does not know yet cannot make the lookup fail.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use serenity::http::Route;
use serenity::model::id::{ChannelId, GuildId, RoleId, UserId};

use super::rest::Rest;

/// Keys per cache.
pub(crate) const CAPACITY: usize = 512;
/// How long a looked-up fact is trusted.
pub(crate) const TTL: Duration = Duration::from_secs(600);

/// A map with at most `capacity` entries, each valid for `ttl`; inserting into a full map
/// evicts the oldest entry.
pub(crate) struct BoundedCache<K, V> {
    capacity: usize,
    ttl: Duration,
    entries: HashMap<K, (Instant, V)>,
    order: VecDeque<K>,
}

impl<K: Eq + Hash + Clone, V: Clone> BoundedCache<K, V> {
    pub(crate) fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            capacity: capacity.max(1),
            ttl,
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// The value for `key` if present and younger than the TTL.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let (at, value) = self.entries.get(key)?;
        (at.elapsed() < self.ttl).then(|| value.clone())
    }

    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self
            .entries
            .insert(key.clone(), (Instant::now(), value))
            .is_some()
        {
            self.order.retain(|k| k != &key);
        }
        self.order.push_back(key);
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// What the adapter needs to know about a channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ChannelInfo {
    pub name: String,
    /// Set for threads only (a text channel's `parent_id` is its category, which does not
    /// count for `allow_channels`).
    pub thread_parent: Option<String>,
    pub is_thread: bool,
    /// The guild the channel belongs to; `None` for a DM channel.
    pub guild_id: Option<GuildId>,
}

impl ChannelInfo {
    /// From a Discord channel object: types 10, 11 and 12 are threads.
    pub(crate) fn from_json(v: &Value) -> Self {
        let is_thread = matches!(v.get("type").and_then(Value::as_u64), Some(10..=12));
        let parent = v
            .get("parent_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Self {
            name: v
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            thread_parent: if is_thread { parent } else { None },
            is_thread,
            guild_id: v
                .get("guild_id")
                .and_then(Value::as_str)
                .and_then(|id| id.parse::<u64>().ok())
                .filter(|id| *id != 0)
                .map(GuildId::new),
        }
    }
}

/// Cached lookups over [`Rest`].
pub(crate) struct Lookups {
    rest: Arc<Rest>,
    channels: BoundedCache<ChannelId, ChannelInfo>,
    roles: BoundedCache<GuildId, Vec<RoleId>>,
}

impl Lookups {
    pub(crate) fn new(rest: Arc<Rest>) -> Self {
        Self {
            rest,
            channels: BoundedCache::new(CAPACITY, TTL),
            roles: BoundedCache::new(CAPACITY, TTL),
        }
    }

    /// The channel's info; `None` when the lookup failed.
    pub(crate) async fn channel(&mut self, channel_id: ChannelId) -> Option<ChannelInfo> {
        if let Some(info) = self.channels.get(&channel_id) {
            return Some(info);
        }
        match self.rest.get_json(Route::Channel { channel_id }).await {
            Ok(v) => {
                let info = ChannelInfo::from_json(&v);
                self.channels.insert(channel_id, info.clone());
                Some(info)
            }
            Err(e) => {
                tracing::warn!(channel_id = %channel_id, error = %e, "discord.lookup.channel_failed");
                None
            }
        }
    }

    /// The bot's roles in `guild_id` (empty when the lookup failed).
    pub(crate) async fn bot_roles(&mut self, guild_id: GuildId, bot: UserId) -> Vec<RoleId> {
        if let Some(roles) = self.roles.get(&guild_id) {
            return roles;
        }
        let route = Route::GuildMember {
            guild_id,
            user_id: bot,
        };
        match self.rest.get_json(route).await {
            Ok(v) => {
                let roles: Vec<RoleId> = v
                    .get("roles")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.as_str()?.parse::<u64>().ok())
                    .filter(|id| *id != 0)
                    .map(RoleId::new)
                    .collect();
                self.roles.insert(guild_id, roles.clone());
                roles
            }
            Err(e) => {
                tracing::warn!(guild_id = %guild_id, error = %e, "discord.lookup.roles_failed");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cache_is_bounded_and_evicts_oldest() {
        let mut c = BoundedCache::new(2, Duration::from_secs(60));
        c.insert(1, "a");
        c.insert(2, "b");
        c.insert(1, "a2"); // refresh: 2 is now the oldest
        c.insert(3, "c");
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&1), Some("a2"));
        assert_eq!(c.get(&2), None);
        assert_eq!(c.get(&3), Some("c"));
        for k in 10..1000 {
            c.insert(k, "x");
        }
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn cache_entries_expire() {
        let mut c = BoundedCache::new(4, Duration::ZERO);
        c.insert(1, 1);
        assert_eq!(c.get(&1), None);
    }

    #[test]
    fn channel_info_from_json() {
        let thread = json!({"id":"1","type":11,"name":"bub-help","parent_id":"10","guild_id":"9"});
        assert_eq!(
            ChannelInfo::from_json(&thread),
            ChannelInfo {
                name: "bub-help".into(),
                thread_parent: Some("10".into()),
                is_thread: true,
                guild_id: Some(GuildId::new(9)),
            }
        );
        let text = json!({"id":"10","type":0,"name":"general","parent_id":"3"});
        let info = ChannelInfo::from_json(&text);
        assert!(!info.is_thread);
        assert_eq!(
            info.thread_parent, None,
            "a category is not a thread parent"
        );
        assert_eq!(info.guild_id, None, "no guild_id, as for a DM channel");
        assert_eq!(ChannelInfo::from_json(&json!({})), ChannelInfo::default());
    }
}
