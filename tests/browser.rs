//! The browser harness (`support::browser`) checked against itself: a real headless Chromium
//! through ChromeDriver, on a small page served from 127.0.0.1 — a form, a button whose click
//! changes the page through a script of the same origin (the page's CSP allows no other), and
//! a session cookie with HttpOnly and SameSite=Strict.

use crate::support;

use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;
use support::browser::{Browser, screenshots};
use tokio_util::task::AbortOnDropHandle;

const PAGE: &str = r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Harness</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
</head><body>
<h1>Harness</h1>
<form id="greet">
  <label for="name">Name</label> <input id="name" name="name" autocomplete="off">
  <button id="go" type="button">Greet</button>
</form>
<p id="out">waiting</p>
<script src="/app.js"></script>
</body></html>
"#;

const SCRIPT: &str = r#"document.getElementById('go').addEventListener('click', () => {
  const name = document.getElementById('name').value;
  document.getElementById('out').textContent = 'Hello, ' + name + '!';
});
"#;

/// The page's server on 127.0.0.1:0: its base URL and the task serving it.
async fn serve() -> (String, AbortOnDropHandle<()>) {
    let app = Router::new()
        .route(
            "/",
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                        (
                            header::SET_COOKIE,
                            "session=s3cret; Path=/; HttpOnly; SameSite=Strict",
                        ),
                        // Only same-origin scripts: an inline handler would not run.
                        (header::CONTENT_SECURITY_POLICY, "default-src 'self'"),
                    ],
                    PAGE,
                )
                    .into_response()
            }),
        )
        .route(
            "/app.js",
            get(|| async { ([(header::CONTENT_TYPE, "text/javascript")], SCRIPT) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), AbortOnDropHandle::new(task))
}

#[tokio::test]
async fn clicks_types_reads_cookies_and_screenshots_in_chromium() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let (base, _server) = serve().await;
        let browser = Browser::start().await.expect("starting the browser");

        browser.goto(&format!("{base}/")).await.unwrap();
        assert_eq!(browser.url().await.unwrap(), format!("{base}/"));
        assert!(browser.source().await.unwrap().contains("<h1>Harness</h1>"));

        let name = browser.find("#name").await.unwrap();
        assert_eq!(
            browser.attribute(&name, "name").await.unwrap().as_deref(),
            Some("name")
        );
        assert_eq!(browser.attribute(&name, "placeholder").await.unwrap(), None);
        browser.type_text(&name, "Ada").await.unwrap();
        assert_eq!(
            browser.property(&name, "value").await.unwrap(),
            json!("Ada")
        );

        let out = browser.find("#out").await.unwrap();
        assert_eq!(browser.text(&out).await.unwrap(), "waiting");
        let go = browser.find("#go").await.unwrap();
        browser.click(&go).await.unwrap();
        let greeted = browser.wait_text("#out", "Hello, Ada!").await.unwrap();
        assert_eq!(browser.text(&greeted).await.unwrap(), "Hello, Ada!");
        assert_eq!(browser.find_all("form input").await.unwrap().len(), 1);
        assert!(browser.find_all(".absent").await.unwrap().is_empty());

        // Elements go to scripts as arguments and come back as results.
        let tag = browser
            .execute(
                "return arguments[0].tagName + ':' + arguments[1];",
                &[go.to_arg(), json!(7)],
            )
            .await
            .unwrap();
        assert_eq!(tag, json!("BUTTON:7"));

        // The cookie is HttpOnly: the page's scripts cannot see it, the browser holds it.
        assert_eq!(
            browser
                .execute("return document.cookie;", &[])
                .await
                .unwrap(),
            json!("")
        );
        let cookies = browser.cookies().await.unwrap();
        let session = cookies
            .iter()
            .find(|c| c.name == "session")
            .unwrap_or_else(|| panic!("no session cookie in {cookies:?}"));
        assert_eq!(session.value, "s3cret");
        assert!(session.http_only, "{session:?}");
        assert_eq!(session.same_site.as_deref(), Some("Strict"), "{session:?}");
        assert_eq!(session.path.as_deref(), Some("/"));

        const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";
        let wide = screenshots().join("browser_harness.png");
        let png = browser.screenshot(&wide).await.unwrap();
        assert!(png.starts_with(PNG));
        assert!(std::fs::read(&wide).unwrap().starts_with(PNG));

        browser.set_window_size(390, 844).await.unwrap();
        let width = browser
            .execute("return window.innerWidth;", &[])
            .await
            .unwrap();
        assert!(
            width.as_u64().is_some_and(|w| w <= 390),
            "inner width {width}"
        );
        let phone = screenshots().join("browser_harness_phone.png");
        assert!(browser.screenshot(&phone).await.unwrap().starts_with(PNG));
    })
    .await
    .expect("the browser test did not finish within 60 s");
}

#[tokio::test]
async fn a_missing_element_is_an_error_naming_the_selector_and_the_page() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let (base, _server) = serve().await;
        let browser = Browser::start().await.expect("starting the browser");
        browser.goto(&format!("{base}/")).await.unwrap();
        let err = browser.find("#nowhere").await.unwrap_err().to_string();
        assert!(err.contains("#nowhere"), "{err}");
        assert!(err.contains(&format!("{base}/")), "{err}");
    })
    .await
    .expect("the browser test did not finish within 60 s");
}
