//! The daemon's HTTP listener (`BUB_HTTP_LISTEN`): what a load balancer and an operator need.
//!
//! * `GET /healthz` — the process serves: `200 ok`.
//! * `GET /readyz` — every channel the daemon listens on reaches its platform (Telegram's last
//!   poll answered, Discord's gateway connected) and the database (`BUB_DATABASE_URL`) answers
//!   within [`DB_CHECK`]: `200 ready`, else `503` naming what does not. `bub idle` listens on
//!   no channel: ready while it serves (and reaches its database).
//! * `GET /metrics` — [`crate::metrics`] in the Prometheus text format.
//!
//! * The console's pages ([`crate::console`]), when `BUB_CONSOLE_LISTEN` is this address.
//! * `POST` to the path of a webhook URL (`BUB_TELEGRAM_WEBHOOK_URL`) — a platform's update,
//!   checked and stored by [`crate::channels::webhook`].
//!
//! Anything else is 404 (405 for another method). Nothing secret is served: counts under
//! closed label sets, never a message, a chat id or a key. The address is bound before serving
//! starts, so a taken port stops the command with the reason; it is loopback unless
//! `BUB_HTTP_LISTEN` names another.
//!
//! It is served by [`crate::net::server`], which holds under abuse: headers within 5 s, an
//! answer within 30 s, a cap on connections (the oldest half-open one gives way to a newcomer),
//! no body over the webhook's 1 MB (the only route here that reads one; the console's routes
//! come with their own, lower limit).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::net::server::Server;

/// How long `/readyz` waits for the database to answer.
pub(crate) const DB_CHECK: Duration = Duration::from_secs(2);

/// What `/readyz` checks.
#[derive(Clone)]
struct Readiness {
    channels: Vec<&'static str>,
    db: Option<Arc<crate::db::Database>>,
}

/// The content type of `/metrics` (OpenMetrics text, which Prometheus reads).
const METRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `addr` (`BUB_HTTP_LISTEN`) and starts keeping metrics (until then none are kept).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("BUB_HTTP_LISTEN: cannot listen on {addr}"))?;
    tracing::info!(addr = %listener.local_addr()?, "http.listen");
    crate::metrics::enable();
    Ok(listener)
}

/// Serves health and metrics (and `console`'s pages, when it shares this listener) on
/// `BUB_HTTP_LISTEN`, if set, until `shutdown` (`/readyz` waits for `channels`); a port that
/// cannot be bound stops the command before it serves.
pub async fn listen(
    settings: &crate::config::Settings,
    channels: Vec<&'static str>,
    console: Option<Router>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    if let Some(addr) = settings.http_listen {
        let listener = bind(addr).await?;
        let db = settings.database()?;
        let serving = serve(listener, channels, db, console, shutdown.child_token());
        tasks.spawn(serving);
    }
    Ok(())
}

/// Serves on `listener` until `shutdown`; `/readyz` waits for `channels` and `db`.
pub async fn serve(
    listener: TcpListener,
    channels: Vec<&'static str>,
    db: Option<Arc<crate::db::Database>>,
    console: Option<Router>,
    shutdown: CancellationToken,
) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .fallback(posted)
        .with_state(Readiness { channels, db });
    let app = match console {
        Some(console) => app.merge(console),
        None => app,
    };
    let server = Server::new("http", crate::channels::webhook::MAX_BODY);
    server.serve(listener, app, shutdown).await;
}

async fn ready(State(ready): State<Readiness>) -> impl IntoResponse {
    let mut down: Vec<&str> = ready
        .channels
        .iter()
        .copied()
        .filter(|c| !crate::metrics::is_connected(c))
        .collect();
    if let Some(db) = &ready.db
        && !matches!(tokio::time::timeout(DB_CHECK, db.ping()).await, Ok(Ok(())))
    {
        down.push("database");
    }
    match down.is_empty() {
        true => (StatusCode::OK, "ready\n".to_owned()),
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not connected: {}\n", down.join(", ")),
        ),
    }
}

/// A POST to any other path: a webhook's, or 404.
async fn posted(method: Method, uri: Uri, headers: HeaderMap, body: Body) -> StatusCode {
    if method != Method::POST {
        return StatusCode::NOT_FOUND;
    }
    crate::channels::webhook::dispatch(uri.path(), &headers, body).await
}

async fn metrics() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, METRICS_TYPE)],
        crate::metrics::encode(),
    )
}
