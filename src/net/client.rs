//! One builder for the HTTP clients of the platforms Bub talks to — Telegram's Bot API,
//! Discord's REST (and so `bub send`, which sends through them) and speech transcription: the
//! token and the base URL checked, how the server is reached (the platform's own proxy
//! variable, or the environment's rules but never for a server on this machine or the local
//! network), the timeouts, a bounded keep-alive pool, and the retry policy the calls are made
//! with ([`super::retry`]). A setting it cannot use is an [`Invalid`] naming its variable,
//! which the caller reports as a configuration error. (The model client keeps its own builder:
//! its retries are per provider.)

use std::time::Duration;

use reqwest::Url;

use super::Route;
use super::retry::RetryPolicy;

/// A setting a client cannot be built with: its variable and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}: {why}")]
pub struct Invalid {
    pub var: &'static str,
    pub why: String,
}

/// What one platform's client is built from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientSpec<'a> {
    /// The base URL (a trailing `/` is dropped) and the variable that sets it.
    pub base: &'a str,
    pub base_var: &'static str,
    /// The platform's own proxy setting and its variable (`BUB_TELEGRAM_PROXY`): through the
    /// proxy when set, else straight to the host — the environment's proxy variables ignored
    /// by design. `None`: the environment's rules, except for a server on this machine or the
    /// local network, reached directly (a proxy must not capture calls to it).
    pub proxy: Option<(&'static str, Option<&'a str>)>,
    pub connect_timeout: Duration,
    /// The longest one request may take (`None`: no bound here).
    pub timeout: Option<Duration>,
    /// How its calls are retried.
    pub retry: RetryPolicy,
}

/// A platform's client: what it sends with, what its connection errors name, and how its
/// calls are retried.
#[derive(Debug, Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub base: Url,
    pub route: Route,
    pub retry: RetryPolicy,
}

impl ClientSpec<'_> {
    /// Builds the client, without any network call.
    pub(crate) fn build(&self) -> Result<Client, Invalid> {
        let invalid = |var, why: String| Invalid { var, why };
        let base = Url::parse(self.base.trim().trim_end_matches('/'))
            .map_err(|e| invalid(self.base_var, format!("not a valid URL: {e}")))?;
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("bub/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .pool_max_idle_per_host(crate::HTTP_IDLE_CONNECTIONS)
            .pool_idle_timeout(crate::HTTP_IDLE_TIMEOUT);
        if let Some(timeout) = self.timeout {
            builder = builder.timeout(timeout);
        }
        let route = match self.proxy {
            Some((var, url)) => match url.map(str::trim).filter(|p| !p.is_empty()) {
                Some(url) => {
                    let proxy = reqwest::Proxy::all(url)
                        .map_err(|_| invalid(var, "not a valid proxy URL".into()))?;
                    builder = builder.proxy(proxy);
                    Route::Proxy(url.to_owned())
                }
                None => Route::Direct,
            },
            None if crate::is_loopback(&base) => Route::Direct,
            None => Route::System,
        };
        if route == Route::Direct {
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| invalid(self.base_var, format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            http,
            base,
            route,
            retry: self.retry,
        })
    }
}

/// The bot token set by `var`, trimmed; none, or an empty one, is [`Invalid`] ("no Telegram
/// bot token is set").
pub fn token(var: &'static str, token: Option<&str>, platform: &str) -> Result<String, Invalid> {
    match token.map(str::trim).filter(|t| !t.is_empty()) {
        Some(token) => Ok(token.to_owned()),
        None => Err(Invalid {
            var,
            why: format!("no {platform} bot token is set"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(
        base: &str,
        proxy: Option<(&'static str, Option<&'static str>)>,
    ) -> ClientSpec<'static> {
        ClientSpec {
            base: Box::leak(base.to_owned().into_boxed_str()),
            base_var: "BUB_X_API_BASE",
            proxy,
            connect_timeout: Duration::from_secs(1),
            timeout: None,
            retry: RetryPolicy::ONCE,
        }
    }

    #[test]
    fn the_base_proxy_and_token_are_checked_and_the_route_told() {
        let configured = |url| Some(("BUB_X_PROXY", url));
        let client = spec("http://h:1/tg/", configured(Some("  ")))
            .build()
            .unwrap();
        assert_eq!(
            (client.base.as_str(), client.route),
            ("http://h:1/tg", Route::Direct)
        );
        let proxied = spec("https://h", configured(Some(" http://p:3128 ")));
        let route = proxied.build().unwrap().route;
        assert_eq!(route, Route::Proxy("http://p:3128".into()));
        let err = spec("not a url", configured(None)).build().unwrap_err();
        assert_eq!(err.var, "BUB_X_API_BASE");
        let err = spec("https://h", configured(Some("::bad::"))).build();
        assert_eq!(err.unwrap_err().var, "BUB_X_PROXY");
        // The environment's rules, but a local server directly.
        let local = spec("http://127.0.0.1:8080/v1", None);
        assert_eq!(local.build().unwrap().route, Route::Direct);
        let remote = spec("https://api.openai.com/v1", None);
        assert_eq!(remote.build().unwrap().route, Route::System);
        assert_eq!(token("T", Some(" 1:ab "), "X").unwrap(), "1:ab");
        let none = token("BUB_X_TOKEN", Some("  "), "X").unwrap_err();
        assert_eq!(none.to_string(), "BUB_X_TOKEN: no X bot token is set");
    }
}
