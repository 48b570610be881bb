//! Connection errors a person can act on, for every HTTP client (the model, transcription,
//! Telegram, Discord): the host and port that could not be reached, whether a proxy stood in
//! between (and which), and the cause — `cannot reach api.telegram.org:443 (via proxy
//! http://proxy:3128): connection refused`.
//!
//! Invariants: the text never holds a proxy's `user:password@` nor a request's path or query
//! (Telegram's URLs carry the bot token): only the host and port of the URL the caller names.
//!
//! [`client`] builds the platforms' clients (Telegram, Discord, transcription) and [`retry`]
//! is the one retry policy of every client. [`server`] is the other side: the HTTP
//! server of Bub's listeners (timeouts, body limits, a connection cap), and [`fd_limit`] the
//! descriptor budget every connection draws on.

pub mod client;
pub mod fd_limit;
pub mod retry;
pub mod server;

use std::sync::LazyLock;

use hyper_util::client::proxy::matcher::Matcher;
use reqwest::Url;

/// The proxy rules reqwest applies (environment, then system settings), read the same way.
static SYSTEM_PROXIES: LazyLock<Matcher> = LazyLock::new(Matcher::from_system);

/// How a client reaches its hosts: what it was built with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Straight to the host (`no_proxy()`).
    Direct,
    /// Through this proxy (`Proxy::all`): its URL as configured.
    Proxy(String),
    /// By the proxy rules of the environment (`HTTPS_PROXY`, `NO_PROXY`, ...), as reqwest's
    /// default client.
    System,
}

impl Route {
    /// The proxy a request to `url` goes through, if any: `via proxy http://proxy:3128` or
    /// `no proxy` (credentials never shown).
    pub fn describe(&self, url: &Url) -> String {
        let proxy = match self {
            Route::Direct => None,
            Route::Proxy(proxy) => Some(proxy.clone()),
            Route::System => system_proxy(url),
        };
        match proxy {
            Some(proxy) => format!("via proxy {}", without_credentials(&proxy)),
            None => "no proxy".to_owned(),
        }
    }
}

/// Whether the environment's proxy rules send `url` through a proxy (and which).
pub(crate) fn system_proxy(url: &Url) -> Option<String> {
    let uri = url.as_str().parse::<http::Uri>().ok()?;
    SYSTEM_PROXIES
        .intercept(&uri)
        .map(|intercept| intercept.uri().to_string())
}

/// `error` as `cannot reach host:port (no proxy): connection refused` when it is a failed
/// connection to `url` (the host the caller was talking to: its path and query are never
/// shown) over `route`; `None` for any other error (a status, a body that broke off).
pub fn unreachable(error: &reqwest::Error, url: &Url, route: &Route) -> Option<String> {
    if !error.is_connect() {
        return None;
    }
    let host = url.host_str().unwrap_or("?");
    let target = match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    Some(format!(
        "cannot reach {target} ({}): {}",
        route.describe(url),
        cause(error)
    ))
}

/// The innermost cause, as a person says it: `connection refused`, not `Connection refused
/// (os error 111)`.
fn cause(error: &reqwest::Error) -> String {
    let mut deepest: &dyn std::error::Error = error;
    while let Some(source) = deepest.source() {
        deepest = source;
    }
    let text = deepest.to_string();
    let text = match text.find(" (os error") {
        Some(at) => &text[..at],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "connection failed".to_owned(),
    }
}

/// `http://user:secret@proxy:3128` → `http://proxy:3128`; text that is not a URL is not shown.
fn without_credentials(proxy: &str) -> String {
    // reqwest takes `proxy:3128` as `http://proxy:3128`.
    let with_host = |text: &str| Url::parse(text).ok().filter(|u| u.host_str().is_some());
    match with_host(proxy).or_else(|| with_host(&format!("http://{proxy}"))) {
        Some(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.as_str().trim_end_matches('/').to_owned()
        }
        _ => "(not a URL)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_is_shown_without_its_credentials() {
        for (configured, shown) in [
            ("http://user:secret@127.0.0.1:3128", "http://127.0.0.1:3128"),
            ("http://proxy.local:3128/", "http://proxy.local:3128"),
            ("socks5://u:p@proxy:1080", "socks5://proxy:1080"),
            ("user:secret@proxy:3128", "http://proxy:3128"),
        ] {
            let url = Url::parse("https://api.telegram.org/botSECRET/getMe").unwrap();
            let route = Route::Proxy(configured.into());
            assert_eq!(route.describe(&url), format!("via proxy {shown}"));
        }
        let url = Url::parse("https://api.telegram.org/").unwrap();
        assert_eq!(Route::Direct.describe(&url), "no proxy");
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_host_and_port_and_not_the_path() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let url = Url::parse(&format!("http://127.0.0.1:{port}/botSECRET/getMe")).unwrap();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let error = client.get(url.clone()).send().await.unwrap_err();
        let text = unreachable(&error, &url, &Route::Direct).unwrap();
        assert_eq!(
            text,
            format!("cannot reach 127.0.0.1:{port} (no proxy): connection refused")
        );
    }
}
