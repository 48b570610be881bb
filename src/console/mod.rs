//! The web console: the sessions, each tape as a timeline, the jobs, pairing, status, cost and
//! memory of a `BUB_HOME`, in a browser — served by `bub console`, or by `bub message` with
//! `BUB_CONSOLE=true`, on `BUB_CONSOLE_LISTEN` (loopback unless `BUB_CONSOLE_ALLOW_REMOTE`).
//!
//! Pages are HTML rendered on the server ([`page`]); one small script, compiled in, reloads the
//! timeline's new entries and submits the pickers. It reads what the operator's commands read,
//! through the same stores (`tape::open`, `JobStore`, `Access`, `Memory`, the usage ledger), on
//! files or on the database alike, and changes state only through them (`Access::approve`,
//! `Memory::replace` within its caps, a job removed as `bub jobs remove` does).
//!
//! Security: every request must name one of the console's own addresses in `Host`, and every
//! change come from its own origin ([`site`]: 421 / 403); nothing but the login page without a
//! session that a login with the token of `BUB_HOME/console.token` created ([`auth`],
//! [`logins`], [`token`]; 401), failed logins limited ([`limit`]); every change is a POST
//! carrying its session's CSRF token (403 without); every value is HTML-escaped by the
//! templates, and the whole page passes through the redactor before it leaves, so no key or
//! token of Bub's is ever shown. Every file or database read runs on the blocking pool.

mod admin;
mod auth;
mod cards;
mod lane;
mod limit;
mod logins;
mod markdown;
mod page;
mod sessions;
mod site;
mod timeline;
mod token;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::access::Access;
use crate::config::Settings;
use crate::db::Database;
use crate::memory::Memory;
use crate::redact::Redactor;
use crate::scheduler::store::JobStore;
use crate::status::Board;

/// What every page reads and changes, shared by the handlers.
pub(crate) struct Console {
    settings: Settings,
    db: Option<Arc<Database>>,
    /// The daemon's own board when the console runs in `bub message`; else its socket is asked.
    board: Option<Arc<Board>>,
    access: Access,
    memory: Memory,
    jobs: Arc<dyn JobStore>,
    /// The logins: the token, the sessions, the limiter.
    auth: auth::Auth,
    /// The console's own addresses (`Host`, `Origin`).
    site: site::Site,
    /// Bub's secrets (the console's token among them), raw and HTML-escaped.
    redactor: Redactor,
    /// The tapes read last, kept open.
    tapes: timeline::Tapes,
}

type Shared = Arc<Console>;

impl Console {
    /// The console of `settings`' `BUB_HOME`, served on `listen` (as bound); creates
    /// `console.token` when there is none (and then returns it, to be printed once).
    pub(crate) fn new(
        settings: &Settings,
        board: Option<Arc<Board>>,
        listen: SocketAddr,
    ) -> anyhow::Result<(Console, Option<String>)> {
        let (token, created) = token::token(&settings.home)?;
        let db = settings.database()?;
        // Bub's secrets, the token among them (it exists now).
        let mut secrets = settings.secret_values();
        let escaped: Vec<String> = secrets.iter().map(|s| page::escape(s)).collect();
        secrets.extend(escaped);
        let console = Console {
            access: Access::new(settings),
            memory: Memory::of(settings)?,
            jobs: crate::scheduler::store::open(&settings.home, db.as_ref()),
            settings: settings.clone(),
            db,
            board,
            auth: auth::Auth::new(settings, token.clone()),
            site: site::Site::new(listen, settings.console.public_url.as_ref()),
            redactor: Redactor::new(secrets),
            tapes: timeline::Tapes::default(),
        };
        Ok((console, created.then_some(token)))
    }
}

/// The console's routes (the caller serves them, alone or beside `/healthz`): every one behind
/// the `Host` and `Origin` checks, the pages behind the login too, no body over the largest form
/// (`auth::MAX_FORM`; the login form's extractor would take 2 MB).
pub(crate) fn router(console: Console) -> Router {
    let shared: Shared = Arc::new(console);
    let pages = Router::new()
        .route("/", get(sessions::list))
        .route("/session", get(timeline::page))
        .route("/session/live", get(timeline::live))
        .route("/file", get(timeline::file))
        .route("/status", get(cards::status))
        .route("/jobs", get(admin::jobs))
        .route("/jobs/remove", post(admin::remove_job))
        .route("/access", get(admin::access))
        .route("/access/approve", post(admin::approve))
        .route("/access/reject", post(admin::reject))
        .route("/access/revoke", post(admin::revoke))
        .route("/memory", get(admin::memory))
        .route("/memory/edit", post(admin::edit_memory))
        .route("/commands/end", post(admin::end_command))
        .route("/logout", post(auth::logout))
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            auth::require_login,
        ));
    Router::new()
        .route("/login", post(auth::login))
        .route("/assets/console.css", get(page::css))
        .route("/assets/console.js", get(page::js))
        .merge(pages)
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            site::guard,
        ))
        .layer(axum::middleware::from_fn(page::headers))
        .layer(axum::extract::DefaultBodyLimit::max(auth::MAX_FORM))
        .with_state(shared)
}

/// Creates the console's token before the agent starts (when `bub message` will serve the
/// console), so that the agent's redactor knows it from the first turn.
pub fn prepare(settings: &Settings) -> anyhow::Result<()> {
    if settings.console.enabled {
        token::token(&settings.home)?;
    }
    Ok(())
}

/// `bub message` with `BUB_CONSOLE=true`: the console's routes when it shares the listener of
/// `BUB_HTTP_LISTEN` (the same address), else `None` after it started serving on its own.
pub async fn in_daemon(
    settings: &Settings,
    board: Arc<Board>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Router>> {
    if !settings.console.enabled {
        return Ok(None);
    }
    if settings.http_listen == Some(settings.console.listen) {
        let (console, _) = Console::new(settings, Some(board), settings.console.listen)?;
        tracing::info!(addr = %settings.console.listen, "console.listen");
        return Ok(Some(router(console)));
    }
    let listener = bind(settings.console.listen).await?;
    let (console, _) = Console::new(settings, Some(board), listener.local_addr()?)?;
    let app = router(console);
    tasks.spawn(serve(listener, app, shutdown.child_token()));
    Ok(None)
}

/// `bub console`: serves the console until `shutdown`. Prints where, and the token when it was
/// created now (afterwards it is only in `console.token`).
pub async fn run(settings: &Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = bind(settings.console.listen).await?;
    let addr = listener.local_addr()?;
    let (console, created) = Console::new(settings, None, addr)?;
    let token_path = settings.home.join(crate::config::CONSOLE_TOKEN);
    // An address the console answers to (not `0.0.0.0`, which no browser names).
    let shown = match addr.ip().is_unspecified() {
        true => SocketAddr::from(([127, 0, 0, 1], addr.port())),
        false => addr,
    };
    println!("Bub console: http://{shown}/");
    if let Some(public) = &settings.console.public_url {
        println!("Behind its proxy: {}/", public.origin());
    }
    if let Some(token) = created {
        println!(
            "Log in with this token (kept in {}): {token}",
            token_path.display(),
        );
    } else {
        println!("Log in with the token in {}", token_path.display());
    }
    serve(listener, router(console), shutdown).await;
    Ok(())
}

async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("BUB_CONSOLE_LISTEN: cannot listen on {addr}"))?;
    tracing::info!(addr = %listener.local_addr()?, "console.listen");
    Ok(listener)
}

/// Serves the console on its own listener until `shutdown` ([`crate::net::server`]: header and
/// request timeouts, a connection cap, no body over the largest form).
async fn serve(listener: tokio::net::TcpListener, app: Router, shutdown: CancellationToken) {
    let server = crate::net::server::Server::new("console", auth::MAX_FORM);
    server.serve(listener, app, shutdown).await;
}

/// The workspace whose tapes the console shows.
fn workspace(console: &Console) -> &Path {
    &console.settings.workspace
}
