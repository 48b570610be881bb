//! `web.fetch`: one GET (redirects followed, each destination checked by the [`Guard`] unless
//! `BUB_WEB_ALLOW_PRIVATE` is set), the body streamed up to a cap, then shown by its content
//! type — HTML as Markdown (htmd), other text as is, binary refused.

use std::borrow::Cow;

use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use reqwest::{Client, Response, StatusCode, Url};
use serde::Deserialize;

use super::guard::{self, Guard, Refused};
use super::html::{self, Page};
use super::{
    GUARDED, GUARDED_VIA_PROXY, MAX_REDIRECTS, client_for, describe, excerpt, goes_through_proxy,
    guarded_client, shared, shown,
};
use crate::tools::{ToolContext, ToolError};

/// Characters returned when `max_chars` is not given.
pub(crate) const DEFAULT_MAX_CHARS: usize = 20_000;
/// The largest `max_chars` honoured.
pub(crate) const MAX_CHARS_LIMIT: usize = 200_000;
/// Bytes downloaded at most; the rest of a longer body is not read.
pub(crate) const MAX_DOWNLOAD_BYTES: usize = 5 * 1024 * 1024;
/// Leading bytes checked for NUL (binary content served as text).
const SNIFF_BYTES: usize = 8 * 1024;
/// Bytes of an error page read for the excerpt in the error message.
const ERROR_BODY_BYTES: usize = 64 * 1024;
/// Characters of an error page quoted in the error message.
const ERROR_EXCERPT_CHARS: usize = 300;

#[derive(Deserialize, schemars::JsonSchema)]
pub(super) struct FetchArgs {
    /// http(s) URL
    pub url: String,
    /// maximum characters (default 20000)
    pub max_chars: Option<i64>,
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

/// `raw` with `https://` in front when it names no scheme: `example.com/x`, `host:8080/x`,
/// `//example.com` (a bare host name is taken as a web address). Anything with a scheme —
/// `ftp://…`, `file:/…`, `mailto:…` — is left as it is, to be refused by [`parse_http_url`].
fn with_scheme(raw: &str) -> Cow<'_, str> {
    if raw.contains("://") {
        return raw.into();
    }
    if let Some(rest) = raw.strip_prefix("//") {
        return format!("https://{rest}").into();
    }
    let is_scheme = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    };
    // `host:8080/path`: what follows the colon is a port, not a scheme's data.
    let is_port = |s: &str| {
        let port = s.split(['/', '?', '#']).next().unwrap_or("");
        !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
    };
    match raw.split_once(':') {
        Some((scheme, rest)) if is_scheme(scheme) && !is_port(rest) => raw.into(),
        _ => format!("https://{raw}").into(),
    }
}

/// The http(s) URL to fetch, or why not.
fn parse_http_url(raw: &str) -> Result<Url, ToolError> {
    let raw = raw.trim();
    let url = Url::parse(&with_scheme(raw))
        .map_err(|e| ToolError::invalid(format!("invalid URL {raw:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::invalid(format!(
            "unsupported URL scheme {:?}: web.fetch only fetches http and https URLs (read \
             local files with fs.read)",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ToolError::invalid(format!("URL {raw:?} has no host")));
    }
    Ok(url)
}

/// The GET for `url`, redirects followed as `client` does.
async fn send(client: &Client, url: &Url) -> Result<Response, ToolError> {
    client
        .get(url.clone())
        .header(
            ACCEPT,
            "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5",
        )
        .send()
        .await
        .map_err(|e| request_error(url, &e))
}

/// A failed request to `url` as the tool's error: the guard's refusal when it refused.
fn request_error(url: &Url, e: &reqwest::Error) -> ToolError {
    let Some(refused) = guard::refusal(e) else {
        return ToolError::new(format!("fetching {}: {}", shown(url), describe(e)));
    };
    // The resolver only knows the name it was asked for: when that is not the URL's host, a
    // redirect led there (the error carries the first URL, not the hop's).
    let redirected = refused
        .name()
        .is_some_and(|name| !url.host_str().is_some_and(|h| h.eq_ignore_ascii_case(name)));
    if redirected {
        refused.clone().after_some_redirect().into()
    } else {
        refused.clone().into()
    }
}

impl From<Refused> for ToolError {
    fn from(refused: Refused) -> Self {
        ToolError::new(refused.to_string())
    }
}

/// The GET for `url` with every destination checked by `guard`.
async fn send_guarded(url: &Url, guard: Guard) -> Result<Response, ToolError> {
    if goes_through_proxy(url) {
        return send_via_proxy(shared(&GUARDED_VIA_PROXY)?, url, guard).await;
    }
    // An IP literal never reaches the resolver: checked here (and later hops by the policy).
    guard.check_url(url)?;
    if guard == Guard::strict() {
        return send(shared(&GUARDED)?, url).await;
    }
    // A test's guard: its own client, so its exception never reaches the shared one.
    let client = guarded_client(guard).map_err(ToolError::new)?;
    send(&client, url).await
}

/// The GET for `url` through a proxy, which resolves host names itself: each hop's host is
/// resolved and checked here before it is sent, and redirects are followed here (`client`
/// follows none), at most [`MAX_REDIRECTS`].
async fn send_via_proxy(client: &Client, first: &Url, guard: Guard) -> Result<Response, ToolError> {
    let mut url = first.clone();
    let mut redirects = 0;
    loop {
        let check = async {
            guard.check_url(&url)?;
            guard::check_lookup(&url).await
        };
        if let Err(refused) = check.await {
            let refused = match redirects {
                0 => refused,
                _ => refused.after_redirect(shown(&url)),
            };
            return Err(refused.into());
        }
        let resp = send(client, &url).await?;
        let Some(next) = redirect_target(&resp) else {
            return Ok(resp);
        };
        if redirects == MAX_REDIRECTS {
            return Err(ToolError::new(format!(
                "fetching {}: too many redirects",
                shown(first)
            )));
        }
        redirects += 1;
        url = next?;
    }
}

/// Where a redirect response sends the request next, as reqwest follows them: a 301, 302, 303,
/// 307 or 308 with a `Location` (relative to the response's URL). `None`: not a redirect.
fn redirect_target(resp: &Response) -> Option<Result<Url, ToolError>> {
    let redirect = matches!(
        resp.status(),
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    );
    let location = resp.headers().get(LOCATION).filter(|_| redirect)?;
    let next = location.to_str().ok().and_then(|l| resp.url().join(l).ok());
    Some(match next {
        Some(next) if matches!(next.scheme(), "http" | "https") => Ok(next),
        Some(next) => Err(ToolError::new(format!(
            "{} redirects to {}, which is not an http(s) URL",
            shown(resp.url()),
            shown(&next)
        ))),
        None => Err(ToolError::new(format!(
            "{} redirects to an invalid location {:?}",
            shown(resp.url()),
            String::from_utf8_lossy(location.as_bytes())
        ))),
    })
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

pub(super) async fn fetch(args: FetchArgs, ctx: ToolContext) -> Result<String, ToolError> {
    let guard = (!ctx.process.web.allow_private).then(Guard::strict);
    fetch_with(args, guard).await
}

/// `web.fetch` with `guard` checking every destination (`None`: `BUB_WEB_ALLOW_PRIVATE`).
pub(super) async fn fetch_with(args: FetchArgs, guard: Option<Guard>) -> Result<String, ToolError> {
    let max_chars = match args.max_chars {
        None => DEFAULT_MAX_CHARS,
        Some(n) if n >= 1 => usize::try_from(n).map_or(MAX_CHARS_LIMIT, |n| n.min(MAX_CHARS_LIMIT)),
        Some(_) => return Err(ToolError::invalid("max_chars must be at least 1")),
    };
    let url = parse_http_url(&args.url)?;
    let resp = match guard {
        Some(guard) => send_guarded(&url, guard).await?,
        None => send(client_for(&url)?, &url).await?,
    };

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

    #[test]
    fn urls_without_a_scheme_get_https() {
        for (raw, expected) in [
            ("example.com", "https://example.com/"),
            (" example.com/a?b=1#c ", "https://example.com/a?b=1#c"),
            ("www.example.com:8080/x", "https://www.example.com:8080/x"),
            ("localhost:3000", "https://localhost:3000/"),
            ("//example.com/x", "https://example.com/x"),
            ("[::1]:8080/", "https://[::1]:8080/"),
            ("http://example.com", "http://example.com/"),
            ("HTTPS://Example.COM/P", "https://example.com/P"),
        ] {
            assert_eq!(parse_http_url(raw).unwrap().as_str(), expected, "{raw}");
        }
        // A scheme other than http(s) is still refused, not turned into a host.
        for raw in [
            "mailto:someone@example.com",
            "file:/etc/passwd",
            "javascript:alert(1)",
            "data:text/plain,hi",
            "ftp://example.com/",
        ] {
            let err = parse_http_url(raw).unwrap_err();
            assert!(
                err.message().starts_with("unsupported URL scheme"),
                "{raw}: {err}"
            );
        }
    }

    /// A fake HTTP proxy on 127.0.0.1: records the absolute-form URI of every request it is
    /// asked to forward and answers by path, as the origin would.
    mod proxy {
        use std::net::SocketAddr;
        use std::sync::{Arc, Mutex};

        use axum::extract::{Request, State};
        use axum::http::{StatusCode, header};
        use axum::response::{IntoResponse, Response};

        pub(crate) struct FakeProxy {
            pub addr: SocketAddr,
            pub seen: Arc<Mutex<Vec<String>>>,
            task: tokio::task::JoinHandle<()>,
        }

        impl Drop for FakeProxy {
            fn drop(&mut self) {
                self.task.abort();
            }
        }

        impl FakeProxy {
            pub(crate) fn seen(&self) -> Vec<String> {
                std::mem::take(&mut *self.seen.lock().unwrap())
            }
        }

        async fn forward(State(seen): State<Arc<Mutex<Vec<String>>>>, req: Request) -> Response {
            seen.lock().unwrap().push(req.uri().to_string());
            let to = |location: &str| {
                (StatusCode::FOUND, [(header::LOCATION, location.to_owned())]).into_response()
            };
            match req.uri().path() {
                "/page" => "through the proxy".into_response(),
                "/to-public" => to("http://93.184.215.15/page"),
                "/to-metadata" => to("http://169.254.169.254/latest/meta-data"),
                "/to-localhost" => to("http://localhost/page"),
                "/loop" => to("/loop"),
                _ => StatusCode::NOT_FOUND.into_response(),
            }
        }

        pub(crate) async fn start() -> FakeProxy {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let app = axum::Router::new()
                .fallback(forward)
                .with_state(seen.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            FakeProxy { addr, seen, task }
        }
    }

    #[tokio::test]
    async fn through_a_proxy_every_hop_is_checked_before_it_is_sent() {
        use std::time::Duration;

        let proxy = proxy::start().await;
        let client = super::super::common()
            .proxy(reqwest::Proxy::http(format!("http://{}", proxy.addr)).unwrap())
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let guard = Guard::strict();
        let get = |url: &str| {
            let url = Url::parse(url).unwrap();
            let client = client.clone();
            async move {
                let sent = send_via_proxy(&client, &url, guard);
                tokio::time::timeout(Duration::from_secs(20), sent)
                    .await
                    .expect("bounded")
            }
        };

        // Public addresses go through the proxy, redirects between them too.
        let resp = get("http://93.184.215.14/to-public").await.unwrap();
        assert_eq!(resp.url().as_str(), "http://93.184.215.15/page");
        assert_eq!(resp.text().await.unwrap(), "through the proxy");
        assert_eq!(
            proxy.seen(),
            [
                "http://93.184.215.14/to-public",
                "http://93.184.215.15/page"
            ]
        );

        // Forbidden first destinations never reach the proxy: an IP literal, a name.
        let err = get("http://10.1.2.3/page").await.unwrap_err();
        assert!(
            err.message()
                .starts_with("refused: 10.1.2.3 is a private address"),
            "{err}"
        );
        let err = get("http://localhost/page").await.unwrap_err();
        assert!(
            err.message().starts_with("refused: localhost resolves to"),
            "{err}"
        );
        assert!(proxy.seen().is_empty());

        // A redirect to a forbidden destination is refused before it is sent.
        let err = get("http://93.184.215.14/to-metadata").await.unwrap_err();
        assert_eq!(
            err.message(),
            "refused: redirect to http://169.254.169.254/latest/meta-data: 169.254.169.254 is \
             a link-local address (set BUB_WEB_ALLOW_PRIVATE=true to allow private destinations)"
        );
        let err = get("http://93.184.215.14/to-localhost").await.unwrap_err();
        assert!(
            err.message()
                .starts_with("refused: redirect to http://localhost/page: localhost resolves to"),
            "{err}"
        );
        assert_eq!(
            proxy.seen(),
            [
                "http://93.184.215.14/to-metadata",
                "http://93.184.215.14/to-localhost"
            ]
        );

        // The redirect limit holds: the first request and 10 redirects, then an error.
        let err = get("http://93.184.215.14/loop").await.unwrap_err();
        assert_eq!(
            err.message(),
            "fetching http://93.184.215.14/loop: too many redirects"
        );
        assert_eq!(proxy.seen().len(), 1 + MAX_REDIRECTS);
    }
}
