//! Web tools: `web.fetch` reads a page (HTML as Markdown, other text as is) and `web.search`
//! queries the configured search backend (a SearXNG instance or Ollama's web search).
//!
//! Both share one HTTP client per proxy mode, built on first use: user agent `bub/<version>`,
//! connect and total timeouts, the process-wide keep-alive bounds. Proxies come from the
//! environment (`HTTPS_PROXY`, `NO_PROXY`, ...) as reqwest reads them, except for loopback
//! hosts, which are always reached directly.
//!
//! Invariants: only http(s) URLs are requested; downloads are capped and outputs bounded with a
//! visible note; binary bodies are refused, never shown; errors name the URL without its
//! credentials and never contain an API key.

mod fetch;
mod html;
mod search;

use std::sync::LazyLock;
use std::time::Duration;

use reqwest::{Client, Url};
use serde_json::json;

use super::{Tool, ToolError};

/// Time to establish a connection (TCP + TLS).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for a whole request, body included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

type SharedClient = LazyLock<Result<Client, String>>;

/// For remote hosts: proxies from the environment apply.
static PROXIED: SharedClient = LazyLock::new(|| build_client(true));
/// For loopback hosts: never through a proxy.
static DIRECT: SharedClient = LazyLock::new(|| build_client(false));

fn build_client(proxies: bool) -> Result<Client, String> {
    let mut builder = Client::builder()
        .user_agent(concat!("bub/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(crate::HTTP_IDLE_CONNECTIONS)
        .pool_idle_timeout(crate::HTTP_IDLE_TIMEOUT);
    if !proxies {
        builder = builder.no_proxy();
    }
    builder
        .build()
        .map_err(|e| format!("cannot create the HTTP client: {}", describe(&e)))
}

/// The shared client for requests to `url`.
fn client_for(url: &Url) -> Result<&'static Client, ToolError> {
    let shared = if crate::is_loopback(url) {
        &DIRECT
    } else {
        &PROXIED
    };
    shared.as_ref().map_err(|e| ToolError::new(e.clone()))
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

/// The web tools.
pub fn tools() -> Vec<Tool> {
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
             non-2xx status is an error naming it.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "http(s) URL to fetch"},
                    "max_chars": {
                        "type": "integer",
                        "description": "Maximum characters returned (default 20000, at most 200000)"
                    },
                },
                "required": ["url"],
            }),
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
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for"},
                    "max_results": {
                        "type": "integer",
                        "description": "Number of results (default 5, 1 to 20)"
                    },
                },
                "required": ["query"],
            }),
            search::search,
        ),
    ]
}
