//! `web.fetch`: one GET, the body streamed up to a cap, then shown by its content type — HTML
//! as Markdown (htmd), other text as is, binary refused.

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Response, Url};
use serde::Deserialize;
use serde_json::Value;

use super::html::{self, Page};
use super::{client_for, describe, excerpt, shown};
use crate::tools::registry::parse_args;
use crate::tools::{ToolContext, ToolError};

/// Characters returned when `max_chars` is not given.
pub const DEFAULT_MAX_CHARS: usize = 20_000;
/// The largest `max_chars` honoured.
pub const MAX_CHARS_LIMIT: usize = 200_000;
/// Bytes downloaded at most; the rest of a longer body is not read.
pub const MAX_DOWNLOAD_BYTES: usize = 5 * 1024 * 1024;
/// Leading bytes checked for NUL (binary content served as text).
const SNIFF_BYTES: usize = 8 * 1024;
/// Bytes of an error page read for the excerpt in the error message.
const ERROR_BODY_BYTES: usize = 64 * 1024;
/// Characters of an error page quoted in the error message.
const ERROR_EXCERPT_CHARS: usize = 300;

#[derive(Deserialize)]
struct FetchArgs {
    url: String,
    #[serde(default)]
    max_chars: Option<i64>,
}

/// How a body is shown, from its `Content-Type` (or, without one, its first bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
    Binary,
    /// No usable `Content-Type`: decided from the body.
    Unknown,
}

fn kind_of(content_type: Option<&str>) -> Kind {
    let Some(ct) = content_type else {
        return Kind::Unknown;
    };
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime.is_empty() {
        return Kind::Unknown;
    }
    if mime == "text/html" || mime == "application/xhtml+xml" {
        return Kind::Html;
    }
    let text = mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime.as_str(),
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/ecmascript"
                | "application/x-ndjson"
                | "application/yaml"
                | "application/x-yaml"
                | "application/toml"
                | "application/x-sh"
                | "application/sql"
                | "application/graphql"
        );
    if text { Kind::Text } else { Kind::Binary }
}

/// A body read up to a cap.
struct Body {
    bytes: Vec<u8>,
    /// The body was longer than the cap; the rest was not read.
    cut: bool,
}

/// Streams the body, stopping (and dropping the connection) after `cap` bytes.
async fn read_capped(mut resp: Response, cap: usize) -> Result<Body, reqwest::Error> {
    let hint = resp.content_length().unwrap_or(0).min(cap as u64) as usize;
    let mut bytes = Vec::with_capacity(hint);
    while let Some(chunk) = resp.chunk().await? {
        let room = cap - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(Body { bytes, cut: true });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Body { bytes, cut: false })
}

fn looks_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(SNIFF_BYTES)].contains(&0)
}

fn looks_like_html(bytes: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]).to_ascii_lowercase();
    let head = head.trim_start_matches('\u{feff}').trim_start();
    head.starts_with("<!doctype html") || head.starts_with("<html")
}

/// The http(s) URL to fetch, or why not.
fn parse_http_url(raw: &str) -> Result<Url, ToolError> {
    let raw = raw.trim();
    let url = Url::parse(raw).map_err(|e| ToolError::new(format!("invalid URL {raw:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::new(format!(
            "unsupported URL scheme {:?}: web.fetch only fetches http and https URLs (read \
             local files with fs.read)",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ToolError::new(format!("URL {raw:?} has no host")));
    }
    Ok(url)
}

fn binary_error(content_type: Option<&str>, size: String) -> ToolError {
    let ct = content_type.map_or("no content type", str::trim);
    ToolError::new(format!(
        "binary content ({ct}, {size}) is not shown; web.fetch returns text and HTML only — \
         download it with bash (e.g. curl -fsSLo FILE URL) to inspect it"
    ))
}

fn byte_count(bytes: usize, cut: bool) -> String {
    if cut {
        format!("more than {bytes} bytes")
    } else {
        format!("{bytes} bytes")
    }
}

pub(super) async fn fetch(args: Value, _ctx: ToolContext) -> Result<String, ToolError> {
    let args: FetchArgs = parse_args(args)?;
    let max_chars = match args.max_chars {
        None => DEFAULT_MAX_CHARS,
        Some(n) if n >= 1 => usize::try_from(n).map_or(MAX_CHARS_LIMIT, |n| n.min(MAX_CHARS_LIMIT)),
        Some(_) => return Err(ToolError::new("max_chars must be at least 1")),
    };
    let url = parse_http_url(&args.url)?;
    let resp = client_for(&url)?
        .get(url.clone())
        .header(
            ACCEPT,
            "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5",
        )
        .send()
        .await
        .map_err(|e| ToolError::new(format!("fetching {}: {}", shown(&url), describe(&e))))?;

    let final_url = resp.url().clone();
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let content_type = content_type.as_deref();
    let mut kind = kind_of(content_type);
    let read_error = |e: reqwest::Error| {
        ToolError::new(format!("fetching {}: {}", shown(&final_url), describe(&e)))
    };

    if !status.is_success() {
        let mut msg = format!("HTTP {status} for {}", shown(&final_url));
        if matches!(kind, Kind::Html | Kind::Text | Kind::Unknown)
            && let Ok(body) = read_capped(resp, ERROR_BODY_BYTES).await
            && !looks_binary(&body.bytes)
        {
            let text = String::from_utf8_lossy(&body.bytes);
            let text = if kind == Kind::Html || looks_like_html(&body.bytes) {
                let html = text.into_owned();
                html::convert(html, final_url.clone()).await.markdown
            } else {
                text.into_owned()
            };
            let quoted = excerpt(&text, ERROR_EXCERPT_CHARS);
            if !quoted.is_empty() {
                msg.push_str(": ");
                msg.push_str(&quoted);
            }
        }
        return Err(ToolError::new(msg));
    }

    if kind == Kind::Binary {
        // Not downloaded when the size is known: it would not be shown anyway.
        let size = match resp.content_length() {
            Some(n) => format!("{n} bytes"),
            None => {
                let body = read_capped(resp, MAX_DOWNLOAD_BYTES)
                    .await
                    .map_err(read_error)?;
                byte_count(body.bytes.len(), body.cut)
            }
        };
        return Err(binary_error(content_type, size));
    }

    let body = read_capped(resp, MAX_DOWNLOAD_BYTES)
        .await
        .map_err(read_error)?;
    if looks_binary(&body.bytes) {
        return Err(binary_error(
            content_type,
            byte_count(body.bytes.len(), body.cut),
        ));
    }
    if kind == Kind::Unknown {
        kind = if looks_like_html(&body.bytes) {
            Kind::Html
        } else {
            Kind::Text
        };
    }
    let text = String::from_utf8_lossy(&body.bytes).into_owned();
    let page = if kind == Kind::Html {
        html::convert(text, final_url.clone()).await
    } else {
        Page {
            title: None,
            markdown: text,
            note: None,
        }
    };
    Ok(render(&url, &final_url, page, body.cut, max_chars))
}

/// The tool's output: where, what, the content (cut to `max_chars`) and notes on what is missing.
fn render(requested: &Url, final_url: &Url, page: Page, download_cut: bool, max: usize) -> String {
    let mut out = format!("URL: {}", shown(final_url));
    if final_url != requested {
        out.push_str(&format!(" (redirected from {})", shown(requested)));
    }
    out.push('\n');
    if let Some(title) = page
        .title
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        out.push_str(&format!("Title: {title}\n"));
    }
    out.push('\n');
    let content = page.markdown.trim();
    let total = content.chars().count();
    if content.is_empty() {
        out.push_str("(no text content)");
    } else if total > max {
        let cut_at = content
            .char_indices()
            .nth(max)
            .map_or(content.len(), |(i, _)| i);
        out.push_str(&content[..cut_at]);
        let of = if download_cut {
            format!("more than {total}")
        } else {
            total.to_string()
        };
        out.push_str(&format!(
            "\n\n[truncated: showing the first {max} of {of} characters; max_chars (up to \
             {MAX_CHARS_LIMIT}) shows more]"
        ));
    } else {
        out.push_str(content);
    }
    if download_cut && total <= max {
        out.push_str(&format!(
            "\n\n[truncated: the download stopped at {} MB; the rest of the body was not read]",
            MAX_DOWNLOAD_BYTES / (1024 * 1024)
        ));
    } else if download_cut {
        out.push_str(&format!(
            "\n[the download also stopped at {} MB]",
            MAX_DOWNLOAD_BYTES / (1024 * 1024)
        ));
    }
    if let Some(note) = &page.note {
        out.push_str(&format!("\n\n[{note}]"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(kind_of(Some("text/html; charset=utf-8")), Kind::Html);
        assert_eq!(kind_of(Some("application/xhtml+xml")), Kind::Html);
        assert_eq!(kind_of(Some("text/plain")), Kind::Text);
        assert_eq!(kind_of(Some("application/ld+json")), Kind::Text);
        assert_eq!(kind_of(Some("application/atom+xml")), Kind::Text);
        assert_eq!(kind_of(Some("image/png")), Kind::Binary);
        assert_eq!(kind_of(Some("application/pdf")), Kind::Binary);
        assert_eq!(kind_of(None), Kind::Unknown);
    }

    #[test]
    fn urls_other_than_http_are_refused() {
        for bad in [
            "file:///etc/passwd",
            "ftp://example.com/x",
            "not a url",
            "http://",
        ] {
            assert!(parse_http_url(bad).is_err(), "{bad}");
        }
        assert!(parse_http_url(" https://example.com ").is_ok());
    }
}
