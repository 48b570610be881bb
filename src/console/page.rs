//! The console's page frame: the layout and navigation around every page, the assets compiled
//! into the binary, the security headers of every answer, and the last step before a page
//! leaves — the redactor over the whole HTML. A logged-in page is rendered for its
//! [`Operator`], whose session's CSRF token its forms carry.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::Console;
use super::auth::Operator;

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// What every answer carries: no script or style but the console's own, no framing, nothing
/// cached or sniffed, no referrer.
const HEADERS: [(&str, &str); 6] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// Adds [`HEADERS`] to every answer.
pub(super) async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    for (name, value) in HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

pub(super) async fn css() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS)
}

pub(super) async fn js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        JS,
    )
}

/// The pages of the navigation: path and title.
const NAV: [(&str, &str); 5] = [
    ("/", "Sessions"),
    ("/jobs", "Jobs"),
    ("/access", "Access"),
    ("/status", "Status"),
    ("/memory", "Memory"),
];

/// The navigation of a logged-in page: the current page's path, and the CSRF token of the
/// operator's session for the logout form.
pub(super) struct Nav<'a> {
    pub current: &'a str,
    pub csrf: &'a str,
}

/// `body` in the frame (with the navigation when given), redacted.
pub(super) fn respond(
    console: &Console,
    status: StatusCode,
    title: &str,
    nav: Option<Nav<'_>>,
    body: Markup,
) -> Response {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Bub" }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body {
                @if let Some(Nav { current, csrf }) = nav {
                    nav {
                        @for (path, name) in NAV {
                            a href=(path) class=[(path == current).then_some("current")] { (name) }
                        }
                        form.logout method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    };
    (status, Html(redacted(console, page.into_string()))).into_response()
}

/// A page of the console for `operator`, 200.
pub(super) fn ok(operator: &Operator, title: &str, nav: &str, body: Markup) -> Response {
    let nav = Nav {
        current: nav,
        csrf: operator.csrf(),
    };
    respond(operator, StatusCode::OK, title, Some(nav), body)
}

/// A fragment (the timeline's new entries), redacted like a page.
pub(super) fn fragment(console: &Console, body: Markup) -> Response {
    Html(redacted(console, body.into_string())).into_response()
}

/// A short error a page could not avoid (a missing session, a store that failed), 4xx/5xx.
pub(super) fn error(operator: &Operator, status: StatusCode, message: &str) -> Response {
    let body =
        html! { h1 { "Error" } p.error { (message) } p { a href="/" { "Back to the sessions" } } };
    let nav = Nav {
        current: "",
        csrf: operator.csrf(),
    };
    respond(operator, status, "Error", Some(nav), body)
}

/// The hidden CSRF field of a form: the operator's session's token.
pub(super) fn csrf(operator: &Operator) -> Markup {
    html! { input type="hidden" name="csrf" value=(operator.csrf()); }
}

fn redacted(console: &Console, html: String) -> String {
    match console.redactor.redact(&html) {
        std::borrow::Cow::Borrowed(_) => html,
        std::borrow::Cow::Owned(clean) => clean,
    }
}

/// `text` as the templates escape it (how a secret would look inside a page).
pub(super) fn escape(text: &str) -> String {
    html! { (text) }.into_string()
}

/// `text` for a query string.
pub(super) fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Runs `render` (file or database reads) for `operator` on the blocking pool; a failure is a
/// 500 page.
pub(super) async fn blocking(
    operator: Operator,
    render: impl FnOnce(&Operator) -> anyhow::Result<Response> + Send + 'static,
) -> Response {
    let worker = operator.clone();
    match tokio::task::spawn_blocking(move || render(&worker)).await {
        Ok(rendered) => or_error(&operator, rendered),
        Err(e) => error(&operator, StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The page `rendered`, or for its failure a 500 page.
pub(super) fn or_error(operator: &Operator, rendered: anyhow::Result<Response>) -> Response {
    rendered.unwrap_or_else(|e| {
        tracing::warn!(error = %format!("{e:#}"), "console.error");
        error(
            operator,
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("{e:#}"),
        )
    })
}

/// An RFC 3339 date as the console shows it: `2026-11-27 17:02:03` in local time.
pub(super) fn when(date: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(date).map_or_else(
        |_| date.to_owned(),
        |d| {
            d.with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        },
    )
}

/// The first `max` characters of `text`, with how many more there were.
pub(super) fn cut(text: &str, max: usize) -> (String, usize) {
    let total = text.chars().count();
    if total <= max {
        return (text.to_owned(), 0);
    }
    (text.chars().take(max).collect(), total - max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_found_in_a_page_as_the_templates_escape_it() {
        let secret = "p&ss\"w<rd>";
        assert_eq!(escape(secret), "p&amp;ss&quot;w&lt;rd&gt;");
        let page = html! { p { (secret) } }.into_string();
        assert!(page.contains(&escape(secret)));
        let redactor = crate::redact::Redactor::new([secret.to_owned(), escape(secret)]);
        assert_eq!(redactor.redact(&page), "<p>[redacted]</p>");
    }

    #[test]
    fn cut_counts_characters() {
        assert_eq!(cut("héllo", 10), ("héllo".to_owned(), 0));
        assert_eq!(cut("héllo", 2), ("hé".to_owned(), 3));
    }
}
