//! `web.search`: the backend the settings name — a SearXNG instance (`BUB_SEARXNG_URL`) first,
//! else Ollama's web search (`BUB_OLLAMA_API_KEY`) — and the numbered result list.

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use reqwest::{Response, Url};
use serde::Deserialize;
use serde_json::json;

use super::{client_for, describe, excerpt, shown};
use crate::config::{Secret, Settings};
use crate::tools::{ToolContext, ToolError};

/// Results listed when `max_results` is not given.
pub(crate) const DEFAULT_MAX_RESULTS: i64 = 5;
/// The most results listed.
pub(crate) const MAX_RESULTS_LIMIT: i64 = 20;
/// The most results Ollama's web search returns (its documented limit).
const OLLAMA_MAX_RESULTS: usize = 10;
/// Characters of a result's content shown as its snippet.
const SNIPPET_CHARS: usize = 300;
/// Characters of a backend's error body quoted in the error.
const ERROR_EXCERPT_CHARS: usize = 200;

/// What web.search says when no backend is configured.
pub(crate) const NOT_CONFIGURED: &str = "web.search has no search backend configured. Set \
     BUB_SEARXNG_URL to the URL of a SearXNG instance (with the json format enabled in its \
     settings.yml, search.formats), or BUB_OLLAMA_API_KEY to use Ollama's web search (a key \
     from https://ollama.com/settings/keys) — in the environment, a .env file or \
     BUB_HOME/config.toml — then restart Bub. web.fetch works without a backend.";

#[derive(Deserialize, schemars::JsonSchema)]
pub(super) struct SearchArgs {
    /// What to search for
    query: String,
    /// Number of results (default 5, 1 to 20)
    max_results: Option<i64>,
}

/// The search backend the settings name (see the module docs).
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    SearXng { base: String },
    Ollama { base: String, key: Secret },
}

impl Backend {
    /// `BUB_SEARXNG_URL`, else `BUB_OLLAMA_API_KEY` at `BUB_OLLAMA_API_BASE`; `None`: neither.
    pub(crate) fn from_settings(s: &Settings) -> Option<Self> {
        if let Some(base) = s.searxng_url.as_deref().filter(|u| !u.trim().is_empty()) {
            return Some(Self::SearXng {
                base: base.trim().to_owned(),
            });
        }
        let key = s.ollama_api_key.as_ref().map(|k| k.expose().trim())?;
        (!key.is_empty()).then(|| Self::Ollama {
            base: s.ollama_api_base.trim().to_owned(),
            key: Secret::from(key),
        })
    }
}

/// One result as backends return it (`title`, `url`, `content`; any may be missing or null).
#[derive(Deserialize)]
struct Hit {
    title: Option<String>,
    url: Option<String>,
    content: Option<String>,
}

#[derive(Deserialize)]
struct Hits {
    results: Option<Vec<Hit>>,
}

pub(super) async fn search(args: SearchArgs, ctx: ToolContext) -> Result<String, ToolError> {
    let query = args.query.trim();
    if query.is_empty() {
        return Err(ToolError::invalid("query must not be empty"));
    }
    let max = args
        .max_results
        .unwrap_or(DEFAULT_MAX_RESULTS)
        .clamp(1, MAX_RESULTS_LIMIT);
    let backend = ctx.process.web.search.as_ref();
    let backend = backend.ok_or(ToolError::new(NOT_CONFIGURED))?;
    let max = max as usize;
    let hits = match backend {
        Backend::SearXng { base } => searxng(base, query).await?,
        Backend::Ollama { base, key } => ollama(base, key.expose(), query, max)
            .await
            // Belt and braces: whatever the backend echoed, the key never leaves.
            .map_err(|e| e.map_message(|m| m.replace(key.expose(), "***")))?,
    };
    Ok(render(hits.into_iter().take(max)))
}

/// `GET {base}/search?q=…&format=json`.
async fn searxng(base: &str, query: &str) -> Result<Vec<Hit>, ToolError> {
    const NAME: &str = "SearXNG search";
    let base = base.trim_end_matches('/');
    let endpoint = if base.ends_with("/search") {
        base.to_owned()
    } else {
        format!("{base}/search")
    };
    let url = parse_endpoint(NAME, &endpoint)?;
    let resp = client_for(&url)?
        .get(url.clone())
        .query(&[("q", query), ("format", "json")])
        .header(ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| ToolError::new(format!("{NAME}: {} ({})", describe(&e), shown(&url))))?;
    let hint = "is the json format enabled in the instance's settings.yml (search.formats)?";
    hits(NAME, &url, resp, hint).await
}

/// `POST {base}/web_search` with `{"query", "max_results"}` and the bearer key.
async fn ollama(base: &str, key: &str, query: &str, max: usize) -> Result<Vec<Hit>, ToolError> {
    const NAME: &str = "Ollama web search";
    let url = parse_endpoint(NAME, &format!("{}/web_search", base.trim_end_matches('/')))?;
    let mut auth = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
        ToolError::new(format!(
            "{NAME}: BUB_OLLAMA_API_KEY contains characters not allowed in HTTP"
        ))
    })?;
    auth.set_sensitive(true);
    let resp = client_for(&url)?
        .post(url.clone())
        .header(AUTHORIZATION, auth)
        .header(ACCEPT, "application/json")
        .json(&json!({"query": query, "max_results": max.min(OLLAMA_MAX_RESULTS)}))
        .send()
        .await
        .map_err(|e| ToolError::new(format!("{NAME}: {} ({})", describe(&e), shown(&url))))?;
    hits(
        NAME,
        &url,
        resp,
        "check BUB_OLLAMA_API_KEY and BUB_OLLAMA_API_BASE",
    )
    .await
}

fn parse_endpoint(name: &str, endpoint: &str) -> Result<Url, ToolError> {
    Url::parse(endpoint)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| ToolError::new(format!("{name}: invalid endpoint URL")))
}

/// The results of a backend's answer; a non-2xx status or an unexpected body is an error
/// naming the backend (with `hint` for statuses that usually mean a setup problem).
async fn hits(name: &str, url: &Url, resp: Response, hint: &str) -> Result<Vec<Hit>, ToolError> {
    let status = resp.status();
    let body = resp
        .text()
        .await
        .map_err(|e| ToolError::new(format!("{name}: {} ({})", describe(&e), shown(url))))?;
    if !status.is_success() {
        let mut msg = format!("{name} failed: HTTP {status} from {}", shown(url));
        let quoted = excerpt(&body, ERROR_EXCERPT_CHARS);
        if !quoted.is_empty() {
            msg.push_str(&format!(": {quoted}"));
        }
        if status.is_client_error() {
            msg.push_str(&format!(" ({hint})"));
        }
        return Err(ToolError::new(msg));
    }
    let parsed: Hits = serde_json::from_str(&body).map_err(|e| {
        ToolError::new(format!(
            "{name}: the answer from {} is not the expected JSON ({e}): {}",
            shown(url),
            excerpt(&body, ERROR_EXCERPT_CHARS)
        ))
    })?;
    Ok(parsed.results.unwrap_or_default())
}

/// `1. <title>\n   <url>\n   <snippet>` per result; `(no results)` for none.
fn render(hits: impl Iterator<Item = Hit>) -> String {
    let mut out = String::new();
    let mut n = 0;
    for hit in hits {
        let url = hit.url.as_deref().map(str::trim).unwrap_or_default();
        let title = excerpt(hit.title.as_deref().unwrap_or_default(), SNIPPET_CHARS);
        if url.is_empty() && title.is_empty() {
            continue;
        }
        n += 1;
        if n > 1 {
            out.push('\n');
        }
        let title = if title.is_empty() {
            "(untitled)"
        } else {
            &title
        };
        out.push_str(&format!("{n}. {title}\n"));
        if !url.is_empty() {
            out.push_str(&format!("   {url}\n"));
        }
        let snippet = excerpt(hit.content.as_deref().unwrap_or_default(), SNIPPET_CHARS);
        if !snippet.is_empty() {
            out.push_str(&format!("   {snippet}\n"));
        }
    }
    if n == 0 {
        return "(no results)".to_owned();
    }
    out.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(title: &str, url: &str, content: &str) -> Hit {
        Hit {
            title: Some(title.into()),
            url: Some(url.into()),
            content: Some(content.into()),
        }
    }

    #[test]
    fn rendering() {
        let out = render(
            vec![
                hit("One", "https://a.test/1", "first\n  snippet"),
                hit("", "", ""),
                hit("Two", "https://a.test/2", ""),
            ]
            .into_iter(),
        );
        assert_eq!(
            out,
            "1. One\n   https://a.test/1\n   first snippet\n\n2. Two\n   https://a.test/2"
        );
        assert_eq!(render(std::iter::empty()), "(no results)");
    }

    #[test]
    fn backend_choice() {
        let mut s = Settings::with_defaults("/tmp".into(), "/tmp".into());
        assert!(Backend::from_settings(&s).is_none());
        s.ollama_api_key = Some("k".into());
        assert!(matches!(
            Backend::from_settings(&s),
            Some(Backend::Ollama { key, .. }) if key.expose() == "k"
        ));
        s.searxng_url = Some("http://127.0.0.1:8888".into());
        assert!(matches!(
            Backend::from_settings(&s),
            Some(Backend::SearXng { .. })
        ));
    }
}
