//! Web tools: `web.fetch` reads a page (HTML as Markdown, other text as is) and `web.search`
//! queries the configured search backend (a SearXNG instance or Ollama's web search).
//!
//! Both share HTTP clients built on first use: user agent `bub/<version>`, connect and total
//! timeouts, the process-wide keep-alive bounds, at most [`MAX_REDIRECTS`] redirects. Proxies
//! come from the environment (`HTTPS_PROXY`, `NO_PROXY`, ...) as reqwest reads them, except for
//! loopback hosts, which are always reached directly.
//!
//! `web.fetch` refuses loopback, private, link-local and other non-public destinations unless
//! `BUB_WEB_ALLOW_PRIVATE` is set ([`guard`] says how, and what remains when a proxy is used):
//! its guarded clients check each address after DNS resolution and on every redirect hop.
//! `web.search` is not guarded: it talks to the URLs the operator configured.
//!
//! Invariants: only http(s) URLs are requested; downloads are capped and outputs bounded with a
//! visible note; binary bodies are refused, never shown; errors name the URL without its
//! credentials and never contain an API key.

mod fetch;
mod guard;
mod html;
mod search;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use reqwest::redirect::Policy;
use reqwest::{Client, ClientBuilder, Url};

pub use guard::Guard;

use super::{Tool, ToolError};
use crate::config::Settings;

/// What the web tools read of the settings, converted once for the process.
#[derive(Debug, Clone)]
pub(crate) struct WebConfig {
    /// Where `web.search` asks (`BUB_SEARXNG_URL`, else Ollama's with `BUB_OLLAMA_API_KEY`);
    /// `None`: it says how to configure one.
    pub search: Option<search::Backend>,
    /// `BUB_WEB_ALLOW_PRIVATE`: `web.fetch` may reach non-public addresses.
    pub allow_private: bool,
}

impl WebConfig {
    pub(crate) fn from_settings(s: &Settings) -> Self {
        Self {
            search: search::Backend::from_settings(s),
            allow_private: s.web_allow_private,
        }
    }
}

/// Time to establish a connection (TCP + TLS).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for a whole request, body included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Redirects followed at most (reqwest's default, kept by the guarded clients).
const MAX_REDIRECTS: usize = 10;

type SharedClient = LazyLock<Result<Client, String>>;

/// For remote hosts: proxies from the environment apply.
static PROXIED: SharedClient = LazyLock::new(|| build(common().redirect(redirect_limit())));
/// For loopback hosts: never through a proxy.
static DIRECT: SharedClient =
    LazyLock::new(|| build(common().no_proxy().redirect(redirect_limit())));
/// `web.fetch` with the guard on, without a proxy: every address checked by the resolver and
/// every redirect by the policy (see [`guarded_client`]).
static GUARDED: SharedClient = LazyLock::new(|| guarded_client(Guard::strict()));
/// `web.fetch` with the guard on, through a proxy: redirects are not followed here but in
/// fetch.rs, which checks each hop before the proxy resolves it.
static GUARDED_VIA_PROXY: SharedClient = LazyLock::new(|| build(common().redirect(Policy::none())));

/// Settings every client shares.
fn common() -> ClientBuilder {
    Client::builder()
        .user_agent(concat!("bub/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(crate::HTTP_IDLE_CONNECTIONS)
        .pool_idle_timeout(crate::HTTP_IDLE_TIMEOUT)
}

fn redirect_limit() -> Policy {
    Policy::limited(MAX_REDIRECTS)
}

fn build(builder: ClientBuilder) -> Result<Client, String> {
    builder
        .build()
        .map_err(|e| format!("cannot create the HTTP client: {}", describe(&e)))
}

/// A client whose every destination `guard` checks: never through a proxy, host names resolved
/// by [`guard::GuardedResolver`], redirects checked by [`guard::redirect_policy`].
fn guarded_client(guard: Guard) -> Result<Client, String> {
    build(
        common()
            .no_proxy()
            .dns_resolver(Arc::new(guard::GuardedResolver))
            .redirect(guard::redirect_policy(guard)),
    )
}

fn shared(client: &'static SharedClient) -> Result<&'static Client, ToolError> {
    client.as_ref().map_err(|e| ToolError::new(e.clone()))
}

/// The unguarded shared client for requests to `url`.
fn client_for(url: &Url) -> Result<&'static Client, ToolError> {
    shared(if crate::is_loopback(url) {
        &DIRECT
    } else {
        &PROXIED
    })
}

/// Whether a request to `url` goes through a proxy (never for loopback hosts), so that
/// `web.fetch` knows when a proxy — not the guarded resolver — will resolve a host.
fn goes_through_proxy(url: &Url) -> bool {
    !crate::is_loopback(url) && crate::net::system_proxy(url).is_some()
}

/// `url` without `user:password@`, for messages.
fn shown(url: &Url) -> String {
    let mut url = url.clone();
    if !url.username().is_empty() || url.password().is_some() {
        let _ = url.set_username("");
        let _ = url.set_password(None);
    }
    url.to_string()
}

/// A reqwest error with its causes, without the URL (callers name it, redacted).
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("timed out (limit {} s)", REQUEST_TIMEOUT.as_secs());
    }
    let mut text = String::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    // The top-level message names the URL; its causes say what went wrong.
    if e.is_connect() {
        text.push_str("could not connect");
    } else if e.is_redirect() {
        // The limit (refusals by the guard's policy are reported before this is called).
        text.push_str("too many redirects");
        source = None;
    } else if e.is_body() || e.is_decode() {
        text.push_str("error reading the response body");
    } else {
        text.push_str("request failed");
    }
    while let Some(cause) = source {
        let msg = cause.to_string();
        if !text.contains(&msg) {
            text.push_str(": ");
            text.push_str(&msg);
        }
        source = cause.source();
    }
    text
}

/// The first `max` characters of `text` with whitespace runs collapsed, `…` when cut.
fn excerpt(text: &str, max: usize) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= max {
        return collapsed;
    }
    let mut cut: String = collapsed.chars().take(max).collect();
    cut.push('…');
    cut
}

/// `web.fetch` with an explicit guard instead of the one `BUB_WEB_ALLOW_PRIVATE` selects: for
/// tests, with [`Guard::for_tests_allowing`] (a test server's own address passes, so a redirect
/// from it can be served and its later hops checked). The tool itself never calls this.
pub async fn fetch_with_guard(url: &str, guard: Guard) -> Result<String, ToolError> {
    let args = fetch::FetchArgs {
        url: url.to_owned(),
        max_chars: None,
    };
    fetch::fetch_with(args, Some(guard)).await
}

/// The web tools.
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "web.fetch",
            "Fetch a web page as Markdown",
            "GETs `url` (http or https; redirects followed) and returns its content: HTML as \
             Markdown (the main text, links kept as [text](url), scripts, styles and navigation \
             dropped), other text (plain, JSON, XML, ...) as is. The output starts with the \
             final URL and the page title. At most `max_chars` characters (default 20000) are \
             returned, with a note when the page is longer; downloads stop at 5 MB. Binary \
             content (images, PDFs, archives) is refused: download it with bash instead. A \
             non-2xx status is an error naming it. A URL without a scheme gets https://. \
             Loopback, private and link-local destinations (checked after DNS and on every \
             redirect) are refused unless the operator sets BUB_WEB_ALLOW_PRIVATE=true.",
            fetch::fetch,
        ),
        Tool::new(
            "web.search",
            "Search the web",
            "Searches the web for `query` and lists up to `max_results` results (default 5, \
             1 to 20), each with its title, URL and a snippet; read a result with web.fetch. \
             The backend is configured by the user: BUB_SEARXNG_URL (a SearXNG instance) or \
             BUB_OLLAMA_API_KEY (Ollama's web search, at most 10 results); without one the \
             tool says so.",
            search::search,
        ),
    ]
}
