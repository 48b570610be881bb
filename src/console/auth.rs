//! Who may use the console: a browser holding a session that a login with the token of
//! `BUB_HOME/console.token` ([`super::token`]) created ([`super::logins`]).
//!
//! * The login form asks for the token and carries no secret of its own (its `POST`, like every
//!   change, must come from the console's own origin: [`super::site`]). Failed logins are
//!   limited ([`super::limit`]). The token is typed, compared in constant time, and never sent
//!   back: a login answers with a cookie holding only the new session's id — `HttpOnly` (no
//!   script reads it), `SameSite=Strict`, `Path=/`, and `Secure` with the `__Host-` name prefix
//!   when the console is reached over TLS (`BUB_CONSOLE_ALLOW_REMOTE`, an `https` public URL).
//! * Every page but the login form and the assets needs a live session: without one (or with
//!   the token itself as the cookie), `401` with the login form.
//! * Every change is a `POST` whose form carries its session's CSRF token (a hidden field of
//!   each form); without it, or with another session's, `403` and nothing changes.
//! * Logout ends the session on the server; a new `console.token` ends every session.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::Form;
use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::limit::{Limiter, retry_after};
use super::logins::{LIFETIME, Logins, Session};
use super::token::TokenFile;
use super::{Console, Shared, page};
use crate::config::{CONSOLE_TOKEN, Settings};
use crate::status::same_token;

/// The session cookie's name on plain HTTP.
const COOKIE: &str = "bub_console";
/// Its name over TLS: the browser takes it only from a secure origin, for `/`, for this host.
const SECURE_COOKIE: &str = "__Host-bub_console";
/// The most cookies of that name looked at in one request (a page on another port of the
/// same host can add its own beside ours).
const MAX_COOKIES: usize = 4;
/// The largest form the console reads (a memory edit is the largest).
pub(super) const MAX_FORM: usize = 256 * 1024;

/// The console's logins: the token they are checked against, the sessions, the limiter.
pub(super) struct Auth {
    token: TokenFile,
    logins: Mutex<Logins>,
    limiter: Mutex<Limiter>,
    /// The cookie is `Secure` and named [`SECURE_COOKIE`].
    secure: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Auth {
    /// The logins of `settings`' console, whose token is `token` now.
    pub(super) fn new(settings: &Settings, token: String) -> Auth {
        let public_https = settings
            .console
            .public_url
            .as_ref()
            .is_some_and(|u| u.https);
        Auth {
            token: TokenFile::new(settings.home.join(CONSOLE_TOKEN), token, Instant::now()),
            logins: Mutex::default(),
            limiter: Mutex::default(),
            secure: settings.console.allow_remote || public_https,
        }
    }

    /// The login token at `now` (the file read again when due); a new one ends every session.
    async fn token(&self, now: Instant) -> Option<Arc<str>> {
        let current = self.token.current(now).await;
        if current.changed {
            lock(&self.logins).end_all();
            tracing::info!("console.token changed: every console session ended");
        }
        current.token
    }

    fn cookie_name(&self) -> &'static str {
        if self.secure { SECURE_COOKIE } else { COOKIE }
    }

    /// The session a request with `headers` belongs to, if it has a live one.
    async fn session(&self, headers: &HeaderMap, now: Instant) -> Option<Session> {
        let token = self.token(now).await;
        let mut logins = lock(&self.logins);
        cookies(headers, self.cookie_name())
            .take(MAX_COOKIES)
            .find_map(|id| logins.check(id, token.as_deref(), now))
    }

    /// `Set-Cookie` for session `id` (none: the cookie dropped).
    fn set_cookie(&self, id: Option<&str>) -> Option<HeaderValue> {
        let name = self.cookie_name();
        let secure = if self.secure { "; Secure" } else { "" };
        let (value, age) = match id {
            Some(id) => (id, LIFETIME.as_secs()),
            None => ("", 0),
        };
        let set =
            format!("{name}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={age}{secure}");
        HeaderValue::from_str(&set).ok()
    }
}

/// The values of the cookies named `name` in `headers`.
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(move |pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}

/// The logged-in operator of a request: the console and the session (for its CSRF token).
/// Only [`require_login`]'s routes have one.
#[derive(Clone)]
pub(super) struct Operator {
    console: Shared,
    session: Session,
}

impl Operator {
    /// The CSRF token of the operator's session, for the forms of the page.
    pub(super) fn csrf(&self) -> &str {
        &self.session.csrf
    }
}

impl std::ops::Deref for Operator {
    type Target = Console;

    fn deref(&self) -> &Console {
        &self.console
    }
}

impl FromRequestParts<Shared> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Shared) -> Result<Self, Response> {
        match parts.extensions.get::<Session>() {
            Some(session) => Ok(Operator {
                console: console.clone(),
                session: session.clone(),
            }),
            None => Err((StatusCode::UNAUTHORIZED, "log in first\n").into_response()),
        }
    }
}

/// Lets a request with a live session through, and a POST only with its session's CSRF token
/// in its form; answers 401 (the login form) or 403 otherwise.
pub(super) async fn require_login(
    State(console): State<Shared>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(session) = console
        .auth
        .session(request.headers(), Instant::now())
        .await
    else {
        let next = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        return login_page(&console, StatusCode::UNAUTHORIZED, &next, None);
    };
    if request.method() == Method::POST {
        // The form is read here to check its token, then handed on whole.
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM).await else {
            return (StatusCode::PAYLOAD_TOO_LARGE, "form too large\n").into_response();
        };
        let csrf = form_urlencoded::parse(&bytes).find(|(name, _)| name == "csrf");
        if !csrf.is_some_and(|(_, t)| same_token(t.as_bytes(), session.csrf.as_bytes())) {
            return (
                StatusCode::FORBIDDEN,
                "forbidden: the form's CSRF token is missing or stale; reload the page\n",
            )
                .into_response();
        }
        request = Request::from_parts(parts, Body::from(bytes));
    }
    request.extensions_mut().insert(session);
    next.run(request).await
}

#[derive(Deserialize)]
pub(super) struct Login {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: String,
}

/// `POST /login`: the right token (within the limit of failures) starts a session, replacing
/// the one this browser had, and goes on to `next`.
pub(super) async fn login(
    State(console): State<Shared>,
    headers: HeaderMap,
    Form(form): Form<Login>,
) -> Response {
    let now = Instant::now();
    let auth = &console.auth;
    let token = auth.token(now).await;
    let right = token
        .as_deref()
        .is_some_and(|token| same_token(form.token.trim().as_bytes(), token.as_bytes()));
    let attempt = lock(&auth.limiter).attempt(now, right);
    let token = match (attempt, token) {
        (Ok(true), Some(token)) => token,
        (Err(wait), _) => {
            let wait = retry_after(wait);
            let error = format!("Too many failed logins: try again in {wait} s.");
            let status = StatusCode::TOO_MANY_REQUESTS;
            let mut response = login_page(&console, status, &form.next, Some(&error));
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(wait));
            return response;
        }
        _ => {
            let error = "That is not the token of console.token.";
            return login_page(&console, StatusCode::UNAUTHORIZED, &form.next, Some(error));
        }
    };
    let session = {
        let mut logins = lock(&auth.logins);
        for old in cookies(&headers, auth.cookie_name()).take(MAX_COOKIES) {
            logins.end(old);
        }
        logins.create(token, now)
    };
    let mut response = Redirect::to(local(&form.next)).into_response();
    if let Some(cookie) = auth.set_cookie(Some(&session.id)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// `POST /logout`: the session ends on the server, and the cookie is dropped.
pub(super) async fn logout(operator: Operator) -> Response {
    let auth = &operator.auth;
    lock(&auth.logins).end(&operator.session.id);
    let mut response = Redirect::to("/").into_response();
    if let Some(gone) = auth.set_cookie(None) {
        response.headers_mut().insert(header::SET_COOKIE, gone);
    }
    response
}

/// `next` when it is a path of this site (never another site: `//host`, `/\host`, nor one a
/// browser turns into that by dropping a tab or a line break: `/\t/host`), else `/`.
fn local(next: &str) -> &str {
    let plain = next.bytes().all(|b| b.is_ascii_graphic());
    let ours =
        plain && next.starts_with('/') && !next.starts_with("//") && !next.starts_with("/\\");
    if ours { next } else { "/" }
}

/// The login form: the token, and where to go next. No secret of the console's is in it.
fn login_page(console: &Console, status: StatusCode, next: &str, error: Option<&str>) -> Response {
    let body = maud::html! {
        h1 { "Bub console" }
        @if let Some(error) = error { p.error { (error) } }
        form.login method="post" action="/login" {
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
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r\n/evil.example",
            "https://evil.example/",
            "",
        ] {
            assert_eq!(local(foreign), "/", "{foreign}");
        }
    }

    #[test]
    fn every_cookie_of_the_name_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; bub_console=abc; b=2; bub_console=def"),
        );
        let found: Vec<&str> = cookies(&headers, COOKIE).collect();
        assert_eq!(found, ["abc", "def"]);
        assert_eq!(cookies(&headers, SECURE_COOKIE).count(), 0);
        headers.insert(header::COOKIE, HeaderValue::from_static("bub_consolex=abc"));
        assert_eq!(cookies(&headers, COOKIE).count(), 0);
    }

    fn auth(secure: bool) -> (tempfile::TempDir, Auth) {
        let home = tempfile::tempdir().unwrap();
        let mut settings = Settings::with_defaults(home.path().to_owned(), home.path().to_owned());
        settings.console.allow_remote = secure;
        let (token, _) = super::super::token::token(home.path()).unwrap();
        let auth = Auth::new(&settings, token);
        (home, auth)
    }

    #[test]
    fn the_cookie_holds_the_session_strict_and_http_only_and_secure_over_tls() {
        let (_home, plain) = auth(false);
        let set = plain.set_cookie(Some("abc")).unwrap();
        assert_eq!(
            set.to_str().unwrap(),
            format!(
                "bub_console=abc; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
                LIFETIME.as_secs()
            )
        );
        let (_home, secure) = auth(true);
        let set = secure.set_cookie(Some("abc")).unwrap();
        let set = set.to_str().unwrap();
        assert!(
            set.starts_with("__Host-bub_console=abc; ") && set.ends_with("; Secure"),
            "{set}"
        );
        let gone = secure.set_cookie(None).unwrap();
        assert!(gone.to_str().unwrap().contains("Max-Age=0; Secure"));
    }

    #[tokio::test]
    async fn a_session_is_found_by_any_of_its_cookies_and_not_by_the_token() {
        let (home, auth) = auth(false);
        let token = std::fs::read_to_string(home.path().join(CONSOLE_TOKEN)).unwrap();
        let now = Instant::now();
        let session = lock(&auth.logins).create(token.trim().into(), now);
        let with = |cookie: String| {
            let mut headers = HeaderMap::new();
            headers.insert(header::COOKIE, HeaderValue::from_str(&cookie).unwrap());
            headers
        };
        let tossed = with(format!("bub_console=junk; bub_console={}", session.id));
        assert!(
            auth.session(&tossed, now).await.is_some(),
            "a cookie added beside ours"
        );
        let token = with(format!("bub_console={}", token.trim()));
        assert!(auth.session(&token, now).await.is_none());
        assert!(auth.session(&HeaderMap::new(), now).await.is_none());
    }
}
