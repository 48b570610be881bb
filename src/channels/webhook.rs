//! Webhook intake: a platform that posts its updates to Bub (Telegram's `setWebhook`) registers
//! a route here for the path of its public URL, and the HTTP listener (`BUB_HTTP_LISTEN`,
//! `daemon::http`) hands every other POST to [`dispatch`].
//!
//! A post is checked before anything is kept: the secret header, compared in constant time (a
//! wrong or missing one is `401` and nothing is stored), and the body's size (over
//! [`MAX_BODY`]: `413`). An accepted body goes to the adapter that registered the route, which
//! answers once it has stored the update (the inbox's journal, acknowledged on disk): `200`
//! only then. Anything else makes the platform send it again, so nothing is lost; the adapter
//! recognises an update it already stored, so a retry is stored once.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use tokio::sync::{mpsc, oneshot};

use crate::config::Secret;

/// The largest body accepted (Telegram's updates are a few KB).
pub const MAX_BODY: usize = 1 << 20;

/// Posts waiting for their adapter, per route: a full queue holds the next post's response.
const QUEUE: usize = 16;

/// One accepted post: its body, and where the adapter says how it went.
pub(crate) struct Posted {
    pub body: Bytes,
    pub done: oneshot::Sender<Outcome>,
}

/// What the adapter made of a post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Stored (or stored before, or nothing to store): the platform may forget it.
    Stored,
    /// Not an update of the platform's: sending it again will not help.
    Malformed,
    /// Not stored (the journal failed, the daemon is stopping): the platform should retry.
    NotStored,
}

#[derive(Clone)]
struct Route {
    header: &'static str,
    secret: Secret,
    posts: mpsc::Sender<Posted>,
}

/// The routes of this process, by path (one per webhook platform).
static ROUTES: LazyLock<Mutex<HashMap<String, Route>>> = LazyLock::new(Mutex::default);

/// A route while it is registered (removed when dropped).
pub(crate) struct Registration {
    path: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        routes().remove(&self.path);
    }
}

fn routes() -> std::sync::MutexGuard<'static, HashMap<String, Route>> {
    ROUTES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers `path`: posts carrying `secret` in header `header` are handed to the returned
/// queue until the registration is dropped.
pub(crate) fn register(
    path: &str,
    header: &'static str,
    secret: Secret,
) -> (Registration, mpsc::Receiver<Posted>) {
    let (posts, queue) = mpsc::channel(QUEUE);
    let route = Route {
        header,
        secret,
        posts,
    };
    routes().insert(path.to_owned(), route);
    let registration = Registration {
        path: path.to_owned(),
    };
    (registration, queue)
}

/// Hands a POST to `path` to its route and answers with what came of it: `404` (no route),
/// `401` (wrong or missing secret), `413` (a body over [`MAX_BODY`]), `200` (stored), `400`
/// (not an update), `503` (not stored: retry). The body is read only after the secret matched.
pub async fn dispatch(path: &str, headers: &HeaderMap, body: Body) -> StatusCode {
    let Some(route) = routes().get(path).cloned() else {
        return StatusCode::NOT_FOUND;
    };
    let given = headers
        .get(route.header)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if !crate::status::same_token(given, route.secret.expose().as_bytes()) {
        return StatusCode::UNAUTHORIZED;
    }
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return StatusCode::PAYLOAD_TOO_LARGE;
    };
    let (done, outcome) = oneshot::channel();
    if route.posts.send(Posted { body, done }).await.is_err() {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    match outcome.await {
        Ok(Outcome::Stored) => StatusCode::OK,
        Ok(Outcome::Malformed) => StatusCode::BAD_REQUEST,
        Ok(Outcome::NotStored) | Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}
