//! Who may use the console: the holder of the login token in `BUB_HOME/console.token`.
//!
//! * The token (64 hex digits from the OS's random source) is created on the first start, mode
//!   0600, and never shown by a page. The login form sends it once; the answer sets it as the
//!   `bub_console` cookie: `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's
//!   page sends it), `Secure` when the console may listen beyond loopback (TLS in front).
//!   Deleting the file and restarting logs every browser out.
//! * Every page but the login form and the assets needs the cookie: without it (or with a wrong
//!   one) the answer is `401` with the login form.
//! * Every change is a `POST` whose form carries this process's CSRF token (a hidden field of
//!   each form); without it, `403` and nothing changes. The login form carries it too.
//! * Tokens are compared in constant time.

use std::path::Path;

use axum::Form;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::{Shared, page};
use crate::config::CONSOLE_TOKEN;

/// The cookie holding it in the browser.
const COOKIE: &str = "bub_console";
/// How long a login lasts (seconds).
const LOGIN_SECONDS: u32 = 30 * 24 * 3600;
/// The largest form the console reads (a memory edit is the largest).
pub(super) const MAX_FORM: usize = 256 * 1024;

/// The login token of `home` and whether it was created now.
pub(super) fn token(home: &Path) -> anyhow::Result<(String, bool)> {
    let path = home.join(CONSOLE_TOKEN);
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().len() >= 32 => return Ok((text.trim().to_owned(), false)),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {}", path.display()))),
    }
    crate::storage::create_private_dir(home)?;
    let token = crate::status::new_token();
    crate::storage::write_atomic(&path, format!("{token}\n").as_bytes(), Some(0o600))?;
    Ok((token, true))
}

fn same(given: &str, expected: &str) -> bool {
    given.as_bytes().ct_eq(expected.as_bytes()).into()
}

/// The value of the login cookie in `headers`, if any.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// Lets a request with the login cookie through, and a POST only with the CSRF token in its
/// form; answers 401 (the login form) or 403 otherwise.
pub(super) async fn require_login(
    State(console): State<Shared>,
    request: Request,
    next: Next,
) -> Response {
    let logged_in = cookie(request.headers()).is_some_and(|c| same(c, &console.token));
    if !logged_in {
        let next = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        return login_page(&console, StatusCode::UNAUTHORIZED, &next, None);
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    // The form is read here to check its token, then handed on whole.
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "form too large\n").into_response();
    };
    let csrf = form_urlencoded::parse(&bytes).find(|(name, _)| name == "csrf");
    if !csrf.is_some_and(|(_, t)| same(&t, &console.csrf)) {
        return (
            StatusCode::FORBIDDEN,
            "forbidden: the form's CSRF token is missing or stale; reload the page\n",
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[derive(Deserialize)]
pub(super) struct Login {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    next: String,
}

/// `POST /login`: the right token sets the cookie and goes on to `next`.
pub(super) async fn login(State(console): State<Shared>, Form(form): Form<Login>) -> Response {
    if !same(&form.csrf, &console.csrf) {
        return (StatusCode::FORBIDDEN, "forbidden: reload the login page\n").into_response();
    }
    if !same(form.token.trim(), &console.token) {
        let error = "That is not the token of console.token.";
        return login_page(&console, StatusCode::UNAUTHORIZED, &form.next, Some(error));
    }
    let secure = if console.settings.console.allow_remote {
        "; Secure"
    } else {
        ""
    };
    let set = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={LOGIN_SECONDS}{secure}",
        console.token
    );
    let mut response = Redirect::to(local(&form.next)).into_response();
    if let Ok(value) = HeaderValue::from_str(&set) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `POST /logout`: the cookie is dropped.
pub(super) async fn logout() -> Response {
    let mut response = Redirect::to("/").into_response();
    let gone = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&gone) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `next` when it is a path of this site (never another site: `//host`, `/\host`), else `/`.
fn local(next: &str) -> &str {
    let ours = next.starts_with('/') && !next.starts_with("//") && !next.starts_with("/\\");
    if ours { next } else { "/" }
}

fn login_page(console: &Shared, status: StatusCode, next: &str, error: Option<&str>) -> Response {
    let body = maud::html! {
        h1 { "Bub console" }
        @if let Some(error) = error { p.error { (error) } }
        form.login method="post" action="/login" {
            input type="hidden" name="csrf" value=(console.csrf);
            input type="hidden" name="next" value=(local(next));
            label for="token" { "Token" }
            input #token type="password" name="token" autocomplete="current-password" autofocus;
            button type="submit" { "Log in" }
        }
        p.hint {
            "The token is in " code { "BUB_HOME/" (CONSOLE_TOKEN) }
            " (" code { "bub console" } " printed it when it created it)."
        }
    };
    page::respond(console, status, "Log in", None, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_login() {
        assert_eq!(local("/session?id=cli"), "/session?id=cli");
        for foreign in [
            "//evil.example/",
            "/\\evil.example",
            "https://evil.example/",
            "",
        ] {
            assert_eq!(local(foreign), "/", "{foreign}");
        }
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; bub_console=abc; b=2"),
        );
        assert_eq!(cookie(&headers), Some("abc"));
        headers.insert(header::COOKIE, HeaderValue::from_static("bub_consolex=abc"));
        assert_eq!(cookie(&headers), None);
    }

    #[test]
    fn the_token_is_created_once_private() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let (first, created) = token(home.path()).unwrap();
        assert!(created);
        assert_eq!(first.len(), 64);
        let mode = std::fs::metadata(home.path().join(CONSOLE_TOKEN))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(token(home.path()).unwrap(), (first, false));
    }
}
