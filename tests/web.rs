//! `web.fetch` and `web.search` through the built-in registry, against a local axum server on
//! 127.0.0.1 (pages of each kind, a fake SearXNG and a fake Ollama web-search API). Nothing
//! reaches the internet, and every call is bounded by a timeout.
//!
//! The server is on loopback, which web.fetch's destination guard refuses: most tests turn the
//! guard off (`BUB_WEB_ALLOW_PRIVATE=true`, as [`context`] does); the guard's own tests turn it
//! on and check that the server received nothing.

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bub::access::Authority;
use bub::config::{LoadOptions, Settings};
use bub::tools::ToolError;
use bub::tools::web::{Guard, fetch_with_guard};
use serde_json::{Value, json};
use support::tool_env::ToolEnv;
use support::wait::bounded;
use tokio_util::task::AbortOnDropHandle;

const PAGE: &str = r#"<!DOCTYPE html>
<html><head><title>Test Page</title>
<style>body { color: red; }</style>
<script>var trackingSecret = "do-not-show";</script></head>
<body>
<nav><a href="/home">Home</a> | <a href="/about">About</a></nav>
<h1>Welcome</h1>
<p>The first paragraph with <em>emphasis</em>.</p>
<p>Read <a href="/docs/guide?x=1">the guide</a> or <a href="https://example.org/x">elsewhere</a>.</p>
<script>document.write("injected");</script>
</body></html>"#;

const TEXT: &str = "plain text, <b>not</b> HTML\n  indented line\n";

/// One request as the server saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Vec<u8>,
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Vec<Seen>>,
}

struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _task: AbortOnDropHandle<()>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }
}

async fn start() -> Server {
    let shared = Arc::new(Shared::default());
    let app = Router::new().fallback(handle).with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Server {
        addr,
        shared,
        _task: AbortOnDropHandle::new(task),
    }
}

fn respond(status: StatusCode, content_type: &str, body: impl Into<Body>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, content_type.to_owned())],
        body.into(),
    )
        .into_response()
}

/// Every route: records the request, then answers by path.
async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = to_bytes(body, 1 << 20).await.unwrap_or_default().to_vec();
    shared.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    match parts.uri.path() {
        "/page" => respond(StatusCode::OK, "text/html; charset=utf-8", PAGE),
        "/text" => respond(StatusCode::OK, "text/plain; charset=utf-8", TEXT),
        "/json" => respond(StatusCode::OK, "application/json", r#"{"a": [1, 2]}"#),
        "/missing" => respond(StatusCode::NOT_FOUND, "text/plain", "no such page here\n"),
        "/redirect" => (StatusCode::FOUND, [(header::LOCATION, "/text")]).into_response(),
        "/loop" => (StatusCode::FOUND, [(header::LOCATION, "/loop")]).into_response(),
        // Redirects to the URL in `?u=`.
        "/to" => {
            let query = format!("http://x/?{}", parts.uri.query().unwrap_or_default());
            let target = reqwest::Url::parse(&query)
                .unwrap()
                .query_pairs()
                .find(|(k, _)| k == "u")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
            (StatusCode::FOUND, [(header::LOCATION, target)]).into_response()
        }
        // 6 MB of text, more than the 5 MB download cap.
        "/big" => respond(StatusCode::OK, "text/plain", "0123456789\n".repeat(600_000)),
        "/image.png" => respond(StatusCode::OK, "image/png", png_bytes()),
        "/nul" => respond(
            StatusCode::OK,
            "text/plain",
            b"looks like text\x00\x01\x02 but is not".to_vec(),
        ),
        // No Content-Type header at all.
        "/untyped" => Response::new(Body::from("<!doctype html><p>untyped page</p>")),
        // Fake SearXNG.
        "/searx/search" => respond(
            StatusCode::OK,
            "application/json",
            json!({
                "query": "rust",
                "results": [
                    {"title": "Rust Language", "url": "https://www.rust-lang.org/",
                     "content": "A language empowering everyone\n to build reliable software.",
                     "engine": "duckduckgo"},
                    {"title": "Rust (video game)", "url": "https://rust.facepunch.com/",
                     "content": null},
                    {"title": "Third", "url": "https://example.org/3", "content": "third"},
                ]
            })
            .to_string(),
        ),
        "/searx-off/search" => respond(StatusCode::FORBIDDEN, "text/html", "Forbidden"),
        // Fake Ollama web search.
        "/ollama/api/web_search" => respond(
            StatusCode::OK,
            "application/json",
            json!({"results": [
                {"title": "Ollama", "url": "https://ollama.com/", "content": "Get up and running."},
                {"title": "Ollama blog", "url": "https://ollama.com/blog", "content": "News."},
            ]})
            .to_string(),
        ),
        "/ollama-empty/api/web_search" => {
            respond(StatusCode::OK, "application/json", r#"{"results": []}"#)
        }
        "/ollama-bad/api/web_search" => respond(StatusCode::OK, "text/html", "<html>oops</html>"),
        // Echoes the Authorization header: the key must still not reach the error.
        "/ollama-denied/api/web_search" => {
            let auth = parts
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            respond(
                StatusCode::UNAUTHORIZED,
                "application/json",
                json!({"error": format!("unauthorized: {auth}")}).to_string(),
            )
        }
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "unknown route"),
    }
}

/// A PNG signature and IHDR chunk, then zeros: binary by type and by content.
fn png_bytes() -> Vec<u8> {
    let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    bytes.extend_from_slice(&[0, 0, 0, 13, b'I', b'H', b'D', b'R']);
    bytes.resize(2048, 0);
    bytes
}

/// Tools with `configure`d settings, the guard off (`BUB_WEB_ALLOW_PRIVATE=true`) unless
/// `configure` turns it on: the test server is on loopback.
fn context(configure: impl FnOnce(&mut Settings)) -> ToolEnv {
    ToolEnv::new("cli:web", Authority::terminal(), |s| {
        s.web_allow_private = true;
        configure(s);
    })
}

async fn fetch(tools: &ToolEnv, url: &str) -> Result<String, ToolError> {
    tools.call("web.fetch", json!({"url": url})).await
}

fn plain() -> ToolEnv {
    context(|_| {})
}

/// The guard on, as by default (`BUB_WEB_ALLOW_PRIVATE` unset).
fn guarded() -> ToolEnv {
    context(|s| s.web_allow_private = false)
}

/// How every refusal ends.
const HINT: &str = "(set BUB_WEB_ALLOW_PRIVATE=true to allow private destinations)";

// ---------------------------------------------------------------------------------------------
// web.fetch

#[tokio::test]
async fn html_becomes_markdown_with_links_and_without_scripts() {
    let server = start().await;
    let out = fetch(&plain(), &server.url("/page")).await.unwrap();
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some(format!("URL: {}", server.url("/page")).as_str())
    );
    assert_eq!(lines.next(), Some("Title: Test Page"));
    assert!(out.contains("# Welcome"), "{out}");
    assert!(
        out.contains("The first paragraph with *emphasis*."),
        "{out}"
    );
    // Relative links are resolved against the page, absolute ones kept.
    let guide = format!("[the guide]({})", server.url("/docs/guide?x=1"));
    assert!(out.contains(&guide), "{out}");
    assert!(out.contains("[elsewhere](https://example.org/x)"), "{out}");
    for absent in [
        "trackingSecret",
        "do-not-show",
        "injected",
        "color: red",
        "About",
    ] {
        assert!(!out.contains(absent), "{absent:?} in {out}");
    }
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    let agent = seen[0].headers[header::USER_AGENT].to_str().unwrap();
    assert!(agent.starts_with("bub/"), "{agent}");
}

#[tokio::test]
async fn text_and_json_are_returned_as_is() {
    let server = start().await;
    let ctx = plain();
    let out = fetch(&ctx, &server.url("/text")).await.unwrap();
    assert_eq!(
        out,
        format!("URL: {}\n\n{}", server.url("/text"), TEXT.trim())
    );
    let out = fetch(&ctx, &server.url("/json")).await.unwrap();
    assert!(out.ends_with("\n\n{\"a\": [1, 2]}"), "{out}");
    // No Content-Type: recognised as HTML from the body.
    let out = fetch(&ctx, &server.url("/untyped")).await.unwrap();
    assert!(out.ends_with("\n\nuntyped page"), "{out}");
}

#[tokio::test]
async fn not_found_is_an_error_naming_the_status() {
    let server = start().await;
    let err = fetch(&plain(), &server.url("/missing")).await.unwrap_err();
    assert_eq!(
        err.message(),
        format!(
            "HTTP 404 Not Found for {}: no such page here",
            server.url("/missing")
        )
    );
}

#[tokio::test]
async fn redirects_are_followed_and_the_final_url_noted() {
    let server = start().await;
    let ctx = plain();
    let out = fetch(&ctx, &server.url("/redirect")).await.unwrap();
    assert!(
        out.starts_with(&format!(
            "URL: {} (redirected from {})\n",
            server.url("/text"),
            server.url("/redirect")
        )),
        "{out}"
    );
    assert!(out.ends_with(TEXT.trim()), "{out}");
    let paths: Vec<_> = server.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/redirect", "/text"]);

    let err = fetch(&ctx, &server.url("/loop")).await.unwrap_err();
    assert!(err.message().contains("too many redirects"), "{err}");
}

#[tokio::test]
async fn oversized_bodies_are_cut_with_a_visible_note() {
    let server = start().await;
    let ctx = plain();
    let started = Instant::now();
    let out = fetch(&ctx, &server.url("/big")).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let (content, note) = out.split_once("\n\n[truncated").expect("a truncation note");
    let content = content.split_once("\n\n").unwrap().1;
    assert_eq!(content.chars().count(), 20_000);
    assert!(content.starts_with("0123456789\n0123456789"));
    assert!(note.contains("more than"), "{note}");
    assert!(
        out.ends_with("[the download also stopped at 5 MB]"),
        "{out:.200}"
    );

    // A larger max_chars (coerced from a string, as in a comma command) shows more.
    let out = ctx
        .call(
            "web.fetch",
            json!({"url": server.url("/big"), "max_chars": "50000"}),
        )
        .await
        .unwrap();
    assert!(
        out.contains("showing the first 50000 of more than"),
        "{out:.200}"
    );
    let err = ctx
        .call(
            "web.fetch",
            json!({"url": server.url("/text"), "max_chars": 0}),
        )
        .await
        .unwrap_err();
    assert!(err.message().contains("max_chars"), "{err}");
}

#[tokio::test]
async fn binary_content_is_refused() {
    let server = start().await;
    let ctx = plain();
    let err = fetch(&ctx, &server.url("/image.png")).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("binary content (image/png, 2048 bytes) is not shown"),
        "{err}"
    );
    assert!(err.message().contains("bash"), "{err}");
    // Declared as text, but NUL bytes say otherwise.
    let err = fetch(&ctx, &server.url("/nul")).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("binary content (text/plain, 29 bytes)"),
        "{err}"
    );
}

#[tokio::test]
async fn only_http_urls_are_fetched() {
    let ctx = plain();
    for url in ["file:///etc/passwd", "ftp://127.0.0.1/file"] {
        let err = fetch(&ctx, url).await.unwrap_err();
        assert!(
            err.message().contains("only fetches http and https"),
            "{url}: {err}"
        );
    }
    let err = fetch(&ctx, "no url at all").await.unwrap_err();
    assert!(err.message().starts_with("invalid URL"), "{err}");
    let err = ctx.call("web.fetch", json!({})).await.unwrap_err();
    assert_eq!(err.message(), "missing required argument: url");
}

#[tokio::test]
async fn connection_failures_are_reported() {
    let port = support::closed_addr().port();
    let url = format!("http://user:pw@127.0.0.1:{port}/x");
    let err = fetch(&plain(), &url).await.unwrap_err();
    assert!(err.message().contains("could not connect"), "{err}");
    assert!(!err.message().contains("pw"), "credentials leaked: {err}");
}

// ---------------------------------------------------------------------------------------------
// web.fetch's destination guard

#[tokio::test]
async fn loopback_is_refused_before_any_request_unless_allowed() {
    let server = start().await;
    let url = server.url("/text");
    let err = fetch(&guarded(), &url).await.unwrap_err();
    assert_eq!(
        err.message(),
        format!("refused: 127.0.0.1 is a loopback address {HINT}")
    );
    assert!(server.seen().is_empty(), "the server was reached");

    // BUB_WEB_ALLOW_PRIVATE=true: the same fetch reaches the server.
    let out = fetch(&plain(), &url).await.unwrap();
    assert!(out.ends_with(TEXT.trim()), "{out}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused() {
    let server = start().await;
    let port = server.addr.port();
    let ctx = guarded();
    // Also without a scheme (https:// is assumed).
    for url in [
        format!("http://localhost:{port}/text"),
        format!("localhost:{port}/text"),
    ] {
        let err = fetch(&ctx, &url).await.unwrap_err();
        assert!(
            err.message().starts_with("refused: localhost resolves to "),
            "{url}: {err}"
        );
        assert!(
            err.message().contains(", a loopback address (set"),
            "{url}: {err}"
        );
        assert!(err.message().ends_with(HINT), "{url}: {err}");
    }
    assert!(server.seen().is_empty(), "the server was reached");

    let url = format!("http://localhost:{port}/text");
    let out = fetch(&plain(), &url).await.unwrap();
    assert!(out.ends_with(TEXT.trim()), "{out}");
}

#[tokio::test]
async fn other_spellings_of_loopback_are_refused() {
    let server = start().await;
    let port = server.addr.port();
    let ctx = guarded();
    for (host, refusal) in [
        (
            "[::ffff:127.0.0.1]",
            "::ffff:127.0.0.1 is an IPv6 form of 127.0.0.1, a loopback address",
        ),
        (
            "[::ffff:7f00:1]",
            "::ffff:127.0.0.1 is an IPv6 form of 127.0.0.1, a loopback address",
        ),
        ("[::1]", "::1 is a loopback address"),
        ("127.1", "127.0.0.1 is a loopback address"),
        ("0x7f.0.0.1", "127.0.0.1 is a loopback address"),
        ("2130706433", "127.0.0.1 is a loopback address"),
        ("127.0.0.2", "127.0.0.2 is a loopback address"),
        ("0.0.0.0", "0.0.0.0 is an unspecified address"),
    ] {
        let url = format!("http://{host}:{port}/text");
        let err = fetch(&ctx, &url).await.unwrap_err();
        assert_eq!(err.message(), format!("refused: {refusal} {HINT}"), "{url}");
    }
    assert!(server.seen().is_empty(), "the server was reached");
}

#[tokio::test]
async fn metadata_and_private_networks_are_refused_without_connecting() {
    let ctx = guarded();
    for (url, refusal) in [
        (
            "http://169.254.169.254/latest/meta-data",
            "169.254.169.254 is a link-local address",
        ),
        ("http://[fe80::1]/", "fe80::1 is a link-local address"),
        ("http://10.0.0.1/", "10.0.0.1 is a private address"),
        ("https://172.16.0.1/", "172.16.0.1 is a private address"),
        (
            "http://192.168.0.1:8080/",
            "192.168.0.1 is a private address",
        ),
        ("http://[fd00::1]/", "fd00::1 is a private address"),
        (
            "http://100.64.0.1/",
            "100.64.0.1 is a carrier-grade NAT address",
        ),
        ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
        (
            "http://255.255.255.255/",
            "255.255.255.255 is a broadcast address",
        ),
    ] {
        // Refused before connecting (an attempt could take the 10 s connect timeout).
        let started = Instant::now();
        let err = fetch(&ctx, url).await.unwrap_err();
        assert_eq!(err.message(), format!("refused: {refusal} {HINT}"), "{url}");
        assert!(started.elapsed() < Duration::from_secs(2), "{url}");
    }
}

/// `fetch_with_guard` with the guard's test exception for `server` (its exact address and port).
async fn fetch_through_exception(server: &Server, url: &str) -> Result<String, ToolError> {
    let guard = Guard::for_tests_allowing(server.addr);
    bounded(fetch_with_guard(url, guard)).await
}

#[tokio::test]
async fn redirects_to_forbidden_destinations_are_refused() {
    let server = start().await;
    let port = server.addr.port();
    let paths = || -> Vec<String> { server.seen().into_iter().map(|s| s.path).collect() };

    // The exception lets the test server answer, including a redirect to itself.
    let out = fetch_through_exception(&server, &server.url("/redirect"))
        .await
        .unwrap();
    assert!(out.contains("(redirected from"), "{out}");
    assert_eq!(paths(), ["/redirect", "/text"]);

    // Each hop is checked: a redirect anywhere else is refused before it is followed.
    for (target, refusal) in [
        (
            format!("http://[::ffff:127.0.0.1]:{port}/text"),
            "::ffff:127.0.0.1 is an IPv6 form of 127.0.0.1, a loopback address".to_owned(),
        ),
        (
            format!("http://127.0.0.2:{port}/text"),
            "127.0.0.2 is a loopback address".to_owned(),
        ),
        (
            "http://169.254.169.254/latest/meta-data".to_owned(),
            "169.254.169.254 is a link-local address".to_owned(),
        ),
        (
            "http://10.0.0.1/admin".to_owned(),
            "10.0.0.1 is a private address".to_owned(),
        ),
    ] {
        let before = paths().len();
        let url = reqwest::Url::parse_with_params(&server.url("/to"), [("u", &target)]).unwrap();
        let err = fetch_through_exception(&server, url.as_str())
            .await
            .unwrap_err();
        let shown = reqwest::Url::parse(&target).unwrap();
        let expected = format!("refused: redirect to {shown}: {refusal}");
        assert!(err.message().starts_with(&expected), "{target}: {err}");
        assert!(err.message().ends_with(HINT), "{target}: {err}");
        assert_eq!(paths()[before..], ["/to"], "{target} was followed");
    }

    // The same socket under a host name: the exception covers the literal address only, and
    // the resolver refuses the name (it knows the name, not the redirect's URL).
    let before = paths().len();
    let target = format!("http://localhost:{port}/text");
    let url = reqwest::Url::parse_with_params(&server.url("/to"), [("u", &target)]).unwrap();
    let err = fetch_through_exception(&server, url.as_str())
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("refused: after a redirect, localhost resolves to "),
        "{err}"
    );
    assert!(err.message().ends_with(HINT), "{err}");
    assert_eq!(paths()[before..], ["/to"], "the redirect was followed");

    // The redirect limit is kept: the first request and 10 redirects, then an error.
    let before = paths().len();
    let err = fetch_through_exception(&server, &server.url("/loop"))
        .await
        .unwrap_err();
    assert!(err.message().contains("too many redirects"), "{err}");
    assert_eq!(paths().len() - before, 11);
}

// ---------------------------------------------------------------------------------------------
// web.search

#[tokio::test]
async fn search_without_a_backend_says_how_to_configure_one() {
    let err = plain()
        .call("web.search", json!({"query": "rust"}))
        .await
        .unwrap_err();
    assert!(err.message().contains("BUB_SEARXNG_URL"), "{err}");
    assert!(err.message().contains("BUB_OLLAMA_API_KEY"), "{err}");
}

#[tokio::test]
async fn searxng_backend() {
    let server = start().await;
    let base = server.url("/searx");
    let ctx = context(|s| {
        s.searxng_url = Some(base.into());
        // SearXNG wins over Ollama when both are set.
        s.ollama_api_key = Some("unused-key".into());
        // The configured backend is reached with web.fetch's guard on (it is on loopback here).
        s.web_allow_private = false;
    });
    let out = ctx
        .call(
            "web.search",
            json!({"query": "rust & cargo", "max_results": 2}),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        "1. Rust Language\n   https://www.rust-lang.org/\n   A language empowering everyone to \
         build reliable software.\n\n2. Rust (video game)\n   https://rust.facepunch.com/"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].path, "/searx/search");
    let query =
        reqwest::Url::parse(&format!("http://x/?{}", seen[0].query.as_deref().unwrap())).unwrap();
    let pairs: Vec<(String, String)> = query.query_pairs().into_owned().collect();
    assert_eq!(
        pairs,
        [
            ("q".to_owned(), "rust & cargo".to_owned()),
            ("format".to_owned(), "json".to_owned())
        ]
    );
    assert!(seen[0].headers.get(header::AUTHORIZATION).is_none());

    // An instance without the JSON format answers 403: the error says what to check.
    let base = server.url("/searx-off");
    let ctx = context(|s| s.searxng_url = Some(base.into()));
    let err = ctx
        .call("web.search", json!({"query": "x"}))
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("SearXNG search failed: HTTP 403 Forbidden from"),
        "{err}"
    );
    assert!(err.message().contains("json format"), "{err}");
}

#[tokio::test]
async fn ollama_backend() {
    let server = start().await;
    let base = server.url("/ollama/api");
    let ctx = context(|s| {
        s.ollama_api_key = Some("sk-test-123".into());
        s.ollama_api_base = base.into();
    });
    let out = ctx
        .call("web.search", json!({"query": "what is ollama"}))
        .await
        .unwrap();
    assert_eq!(
        out,
        "1. Ollama\n   https://ollama.com/\n   Get up and running.\n\n\
         2. Ollama blog\n   https://ollama.com/blog\n   News."
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].path, "/ollama/api/web_search");
    assert_eq!(
        seen[0].headers[header::AUTHORIZATION].to_str().unwrap(),
        "Bearer sk-test-123"
    );
    let body: Value = serde_json::from_slice(&seen[0].body).unwrap();
    assert_eq!(body, json!({"query": "what is ollama", "max_results": 5}));

    // max_results is sent (clamped to Ollama's limit of 10), also when given as a string.
    ctx.call("web.search", json!({"query": "q", "max_results": "50"}))
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&server.seen()[1].body).unwrap();
    assert_eq!(body["max_results"], 10);
}

#[tokio::test]
async fn ollama_errors_name_the_backend_and_never_the_key() {
    let server = start().await;
    let with_base = |path: &str| {
        let base = server.url(path);
        context(move |s| {
            s.ollama_api_key = Some("sk-secret-456".into());
            s.ollama_api_base = base.into();
        })
    };
    let q = json!({"query": "x"});

    let out = with_base("/ollama-empty/api")
        .call("web.search", q.clone())
        .await
        .unwrap();
    assert_eq!(out, "(no results)");

    let err = with_base("/ollama-denied/api")
        .call("web.search", q.clone())
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("Ollama web search failed: HTTP 401 Unauthorized"),
        "{err}"
    );
    assert!(err.message().contains("BUB_OLLAMA_API_KEY"), "{err}");
    assert!(
        !err.message().contains("sk-secret-456"),
        "key leaked: {err}"
    );

    let err = with_base("/ollama-bad/api")
        .call("web.search", q.clone())
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("Ollama web search: the answer from"),
        "{err}"
    );
    assert!(err.message().contains("not the expected JSON"), "{err}");
}

#[test]
fn searxng_url_setting_is_validated() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let load = |value: &str| {
        let env = [
            ("HOME", root.display().to_string()),
            ("BUB_SEARXNG_URL", value.to_owned()),
        ];
        Settings::load(&LoadOptions {
            workspace: Some(root.clone()),
            config_file: None,
            env: Some(env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
            cwd: Some(root.clone()),
            ..LoadOptions::default()
        })
    };
    let settings = load("http://127.0.0.1:8888/").unwrap();
    assert_eq!(
        settings.searxng_url.as_deref(),
        Some("http://127.0.0.1:8888")
    );
    assert_eq!(load("").unwrap().searxng_url, None);
    let err = load("ftp://searx.local").unwrap_err();
    assert_eq!(err.var, "BUB_SEARXNG_URL");
}
