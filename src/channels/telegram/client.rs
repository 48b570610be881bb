//! The Bot API client of the `telegram` settings, shared by the adapter and `bub init`'s token
//! check ([`check_token`]): the teloxide [`Bot`] on the client the shared builder makes
//! ([`crate::net::client`]: `BUB_TELEGRAM_PROXY`, else no proxy, whatever the ambient
//! `HTTPS_PROXY` says), and error texts that name the host and never the token.

use std::time::Duration;

use teloxide::prelude::*;
use teloxide::{ApiError, RequestError};

use super::redact;
use crate::channels::invalid;
use crate::config::ChannelSettings;
use crate::net::client::{self, ClientSpec};
use crate::net::retry::SENDS;

/// The Bot API client of the `telegram` settings: the teloxide [`Bot`] on the shared builder's
/// client ([`crate::net::client`]: `BUB_TELEGRAM_PROXY`, else no proxy), what connection errors
/// name, and how sends are retried.
pub(super) struct Client {
    pub(super) bot: Bot,
    pub(super) token: String,
    pub(super) http: crate::net::client::Client,
}

impl Client {
    /// Builds the client without any network call; a missing token or a bad URL is a
    /// [`crate::config::ConfigError`].
    pub(super) fn new(tg: &ChannelSettings) -> anyhow::Result<Self> {
        let token = tg.token.as_ref().map(|t| t.expose());
        let token = client::token("BUB_TELEGRAM_TOKEN", token, "Telegram").map_err(invalid)?;
        let http = ClientSpec {
            base: &tg.api_base,
            base_var: "BUB_TELEGRAM_API_BASE",
            proxy: Some(("BUB_TELEGRAM_PROXY", tg.proxy.as_deref())),
            // teloxide's: a long poll (10 s) fits in a request.
            connect_timeout: Duration::from_secs(5),
            timeout: Some(Duration::from_secs(17)),
            retry: SENDS.within(tg.send_retry_budget),
        }
        .build()
        .map_err(invalid)?;
        let bot = Bot::with_client(token.clone(), http.http.clone()).set_api_url(http.base.clone());
        Ok(Self { bot, token, http })
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
                let why = describe(&e, &client.token, &client.http);
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
pub(super) fn describe(err: &RequestError, token: &str, http: &client::Client) -> String {
    if let RequestError::Network(e) = err
        && let Some(text) = crate::net::unreachable(e, &http.base, &http.route)
    {
        return text;
    }
    redact(&err.to_string(), token)
}
