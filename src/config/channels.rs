//! The chat platforms' settings: one [`ChannelSettings`] per platform, by name, in a
//! [`ChannelTable`] — no field per platform.
//!
//! A platform's variables are rows of the table in [`super::vars`] tagged with the platform and
//! the [`Field`] they set (`BUB_TELEGRAM_ALLOW_FROM` sets `allow_from` of `telegram`); the loader
//! reads every tagged row into its platform's entry, and [`super::Settings::with_defaults`]
//! starts each entry from its rows' literal defaults. A platform whose variables are in the table
//! needs no code here; a platform without rows (a test's fake) can still be given an entry in
//! code ([`super::Settings::channel_mut`]).

use std::time::Duration;

use super::{MaskedUrl, Secret, vars};

/// What a `BUB_<PLATFORM>_*` variable sets in its platform's [`ChannelSettings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// `bub message` serves the platform.
    Enabled,
    /// The bot token (required when enabled).
    Token,
    /// User ids or usernames admitted; `*` everyone.
    AllowFrom,
    /// User ids with every tool.
    Owners,
    /// Chat ids served (empty: every chat).
    AllowChats,
    /// Like [`Field::AllowChats`], and a thread of a listed chat is served too.
    AllowChannels,
    /// An HTTP(S) proxy for the platform's API.
    Proxy,
    /// The platform's API root.
    ApiBase,
    /// Skip what was sent while Bub was not running.
    DropPendingUpdates,
    /// The prefix of the bot's commands.
    CommandPrefix,
    /// The public URL the platform posts updates to (instead of being polled).
    WebhookUrl,
    /// What the platform sends with every posted update, to prove it is the platform.
    WebhookSecret,
}

/// One platform's settings (`BUB_<PLATFORM>_*`). A platform uses the fields its rows set; the
/// others keep their defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelSettings {
    /// `BUB_<PLATFORM>_ENABLED` (default false).
    pub enabled: bool,
    /// `BUB_<PLATFORM>_TOKEN`. Never logged.
    pub token: Option<Secret>,
    /// `BUB_<PLATFORM>_ALLOW_FROM`: user ids or usernames; empty admits nobody, `*` everyone.
    pub allow_from: Vec<String>,
    /// `BUB_<PLATFORM>_OWNERS`: user ids that get every tool.
    pub owners: Vec<String>,
    /// `BUB_TELEGRAM_ALLOW_CHATS`, `BUB_DISCORD_ALLOW_CHANNELS`: the chats served (empty: all).
    pub allow_chats: Vec<String>,
    /// A thread of a chat on `allow_chats` is served too (the list is `*_ALLOW_CHANNELS`).
    pub threads: bool,
    /// `BUB_<PLATFORM>_PROXY`.
    pub proxy: Option<MaskedUrl>,
    /// `BUB_<PLATFORM>_API_BASE` (the platform's own root by default).
    pub api_base: MaskedUrl,
    /// `BUB_TELEGRAM_DROP_PENDING_UPDATES` (default false): discard messages sent while the
    /// daemon was not running.
    pub drop_pending_updates: bool,
    /// `BUB_DISCORD_COMMAND_PREFIX` (default `!`).
    pub command_prefix: String,
    /// `BUB_TELEGRAM_WEBHOOK_URL`: an `https` URL; updates are posted there (served at its
    /// path on `BUB_HTTP_LISTEN`) instead of polled.
    pub webhook_url: Option<reqwest::Url>,
    /// `BUB_TELEGRAM_WEBHOOK_SECRET` (required with the URL). Never logged.
    pub webhook_secret: Option<Secret>,
    /// How long a send is retried through 5xx answers and network errors: 2 minutes. Not a
    /// variable: tests shorten it.
    pub send_retry_budget: Duration,
}

impl Default for ChannelSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            token: None,
            allow_from: Vec::new(),
            owners: Vec::new(),
            allow_chats: Vec::new(),
            threads: false,
            proxy: None,
            api_base: MaskedUrl::from(""),
            drop_pending_updates: false,
            command_prefix: String::new(),
            webhook_url: None,
            webhook_secret: None,
            send_retry_budget: crate::net::retry::SENDS.budget,
        }
    }
}

impl ChannelSettings {
    /// The entry of `platform` before any source is read: the literal defaults of its rows.
    fn defaults_of(platform: &str) -> Self {
        let mut out = Self::default();
        for (var, field) in vars::rows_of(platform) {
            match field {
                Field::ApiBase => out.api_base = MaskedUrl::from(var.default),
                Field::CommandPrefix => out.command_prefix = var.default.to_owned(),
                Field::AllowChannels => out.threads = true,
                _ => {}
            }
        }
        out
    }
}

/// Every platform's settings by name, in the order of the variables table (platforms added in
/// code come after).
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelTable(Vec<(String, ChannelSettings)>);

impl ChannelTable {
    /// An entry with the built-in defaults for every platform of the variables table.
    pub(crate) fn defaults() -> Self {
        Self(
            vars::platforms()
                .map(|name| (name.to_owned(), ChannelSettings::defaults_of(name)))
                .collect(),
        )
    }

    /// The settings of `platform`, if it has any.
    pub fn get(&self, platform: &str) -> Option<&ChannelSettings> {
        self.0.iter().find(|(n, _)| n == platform).map(|(_, c)| c)
    }

    /// The settings of `platform`, added with the defaults when it has none yet.
    pub fn get_mut(&mut self, platform: &str) -> &mut ChannelSettings {
        let at = match self.0.iter().position(|(n, _)| n == platform) {
            Some(at) => at,
            None => {
                self.0
                    .push((platform.to_owned(), ChannelSettings::defaults_of(platform)));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    /// Every platform's name and settings.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ChannelSettings)> {
        self.0.iter().map(|(n, c)| (n.as_str(), c))
    }
}

impl std::ops::Index<&str> for ChannelTable {
    type Output = ChannelSettings;

    /// The settings of `platform`; panics for a platform without an entry (a platform of the
    /// variables table always has one).
    fn index(&self, platform: &str) -> &ChannelSettings {
        self.get(platform)
            .unwrap_or_else(|| panic!("no settings for channel {platform:?}"))
    }
}

/// The variable that sets `field` of `platform` (`BUB_DISCORD_ALLOW_CHANNELS` for discord's
/// chat list), for messages that name it; `None` when the platform has no such row.
pub(crate) fn var_name(platform: &str, field: Field) -> Option<&'static str> {
    let chats = [Field::AllowChats, Field::AllowChannels];
    vars::rows_of(platform)
        .find(|(_, f)| *f == field || (chats.contains(&field) && chats.contains(f)))
        .map(|(var, _)| var.name)
}

/// Whether `name` is a platform of the variables table (its chat sessions are `name:chat`).
pub(crate) fn is_platform(name: &str) -> bool {
    vars::platforms().any(|p| p == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_the_platforms_and_their_variables() {
        assert_eq!(
            vars::platforms().collect::<Vec<_>>(),
            ["telegram", "discord"]
        );
        assert!(is_platform("discord") && !is_platform("cli") && !is_platform("matrix"));
        assert_eq!(
            var_name("telegram", Field::AllowChats),
            Some("BUB_TELEGRAM_ALLOW_CHATS")
        );
        assert_eq!(
            var_name("discord", Field::AllowChats),
            Some("BUB_DISCORD_ALLOW_CHANNELS")
        );
        assert_eq!(
            var_name("discord", Field::Owners),
            Some("BUB_DISCORD_OWNERS")
        );
        assert_eq!(var_name("matrix", Field::Owners), None);
        let table = ChannelTable::defaults();
        assert_eq!(table["discord"].command_prefix, "!");
        assert!(table["discord"].threads && !table["telegram"].threads);
        assert_eq!(table["telegram"].api_base, "https://api.telegram.org");
        assert!(table.get("matrix").is_none());
        let mut table = table;
        table.get_mut("matrix").enabled = true;
        let names: Vec<&str> = table.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["telegram", "discord", "matrix"]);
        assert_eq!(
            table["matrix"],
            ChannelSettings {
                enabled: true,
                ..ChannelSettings::default()
            }
        );
    }
}
