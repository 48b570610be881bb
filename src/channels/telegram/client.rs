//! The Bot API client of the `telegram` settings, shared by the adapter and `bub init`'s token
//! check ([`check_token`]): the teloxide [`Bot`] on its own reqwest client
//! (`BUB_TELEGRAM_PROXY`, else no proxy, whatever the ambient `HTTPS_PROXY` says), and error
//! texts that name the host and never the token.

use std::time::Duration;

use anyhow::anyhow;
use teloxide::prelude::*;
use teloxide::{ApiError, RequestError};

use super::redact;
use crate::config::{ChannelSettings, ConfigError};

/// The Bot API client of the `telegram` settings: the teloxide [`Bot`] on its own reqwest client
/// (`BUB_TELEGRAM_PROXY`, else no proxy), and what connection errors name.
pub(super) struct Client {
    pub(super) bot: Bot,
    pub(super) token: String,
    pub(super) api: reqwest::Url,
    pub(super) route: crate::net::Route,
}

impl Client {
    /// Builds the client without any network call; a missing token or a bad URL is a
    /// [`ConfigError`].
    pub(super) fn new(tg: &ChannelSettings) -> anyhow::Result<Self> {
        let token = tg
            .token
            .as_ref()
            .map(|t| t.expose().trim())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ConfigError::new("BUB_TELEGRAM_TOKEN", "no Telegram bot token is set"))?
            .to_owned();
        // A trailing slash would produce `//bot<token>/...` for a base with a path.
        let base = tg.api_base.trim().trim_end_matches('/');
        let url = reqwest::Url::parse(base).map_err(|e| {
            ConfigError::new("BUB_TELEGRAM_API_BASE", format!("not a valid URL: {e}"))
        })?;
        let builder = teloxide::net::default_reqwest_settings()
            .pool_max_idle_per_host(crate::HTTP_IDLE_CONNECTIONS)
            .pool_idle_timeout(crate::HTTP_IDLE_TIMEOUT);
        let route = crate::net::Route::configured(tg.proxy.as_deref());
        let builder = match tg.proxy.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
            Some(proxy) => builder
                .proxy(reqwest::Proxy::all(proxy).map_err(|_| {
                    ConfigError::new("BUB_TELEGRAM_PROXY", "not a valid proxy URL")
                })?),
            None => builder.no_proxy(),
        };
        let client = builder
            .build()
            .map_err(|e| anyhow!("telegram: cannot build the HTTP client: {e}"))?;
        let bot = Bot::with_client(token.clone(), client).set_api_url(url.clone());
        Ok(Self {
            bot,
            token,
            api: url,
            route,
        })
    }
}

/// What Telegram said of a bot token (`bub init`'s check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenCheck {
    /// `getMe` answered: the bot's username, without `@`.
    Accepted(String),
    /// `getMe` answered 401 or 404: no bot has this token.
    Rejected,
    /// Telegram could not be reached (the network, no answer in time): why.
    Unreachable(String),
    /// Telegram answered something else (a 5xx): what, the token redacted.
    NotChecked(String),
}

/// Asks Telegram (`getMe`, within `within`) whether the token of `tg` is a bot's.
pub async fn check_token(tg: &ChannelSettings, within: Duration) -> anyhow::Result<TokenCheck> {
    let client = Client::new(tg)?;
    Ok(
        match tokio::time::timeout(within, client.bot.get_me().send()).await {
            Err(_) => TokenCheck::Unreachable(format!("no answer within {within:?}")),
            Ok(Ok(me)) => TokenCheck::Accepted(me.username.clone().unwrap_or_default()),
            Ok(Err(RequestError::Api(ApiError::InvalidToken))) => TokenCheck::Rejected,
            Ok(Err(e)) => {
                let why = describe(&e, &client.token, &client.api, &client.route);
                match e {
                    RequestError::Network(_) | RequestError::Io(_) => TokenCheck::Unreachable(why),
                    _ => TokenCheck::NotChecked(why),
                }
            }
        },
    )
}

/// `err` as text: a failed connection names the host and the proxy ([`crate::net`]), anything
/// else is teloxide's text with `token` redacted.
pub(super) fn describe(
    err: &RequestError,
    token: &str,
    api: &reqwest::Url,
    route: &crate::net::Route,
) -> String {
    if let RequestError::Network(e) = err
        && let Some(text) = crate::net::unreachable(e, api, route)
    {
        return text;
    }
    redact(&err.to_string(), token)
}
