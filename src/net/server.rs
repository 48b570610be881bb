//! The HTTP server of Bub's listeners — `BUB_HTTP_LISTEN` (`daemon::http`) and the console's
//! `BUB_CONSOLE_LISTEN` — one accept loop over hyper serving an axum `Router`, built to hold
//! when whoever reaches the port misbehaves (`axum::serve` closes no connection whose request
//! never ends and takes every connection offered, until the process has no descriptor left for
//! Telegram, the model or `/healthz`):
//!
//! * **Headers in time.** A request's headers must arrive within [`HEADER_TIMEOUT`] of the
//!   connection being ready for them (hyper's `header_read_timeout`, on tokio's timer): a
//!   connection that never finishes them is closed, and so is a keep-alive connection idle that
//!   long between requests. Headers are at most [`MAX_HEADER_BYTES`].
//! * **Requests in time.** A request is answered within [`REQUEST_LIMIT`], its body read
//!   included: else `503` and the connection is closed.
//! * **Bodies bounded.** No request body longer than the listener's `max_body` is read (the
//!   largest any of its routes accepts; a route that accepts less checks its own limit).
//! * **Connections capped.** At most [`connection_cap`] at once: a share of the descriptor limit
//!   (`RLIMIT_NOFILE`, raised at start: [`super::fd_limit`]), so a flood leaves the rest of the
//!   process its descriptors. At the cap a new connection is always taken and the oldest one
//!   with no request in flight — a slow-loris one, still sending its headers — is closed for it
//!   ([`connections`]: the cap is strict, at most one socket more while that one closes); one
//!   warning per episode names the cap.
//!
//! Shutdown: when the token is cancelled the port is closed, idle connections are closed, and a
//! request in flight has [`SHUTDOWN_GRACE`] to finish; `serve` returns after that.

mod connections;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use axum::response::IntoResponse;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use connections::{Activity, Connections, InFlight, Slot};

/// How long a connection may take to send a request's headers (and stay idle between
/// requests). A client sends them in one round trip, so a few seconds are generous even far
/// away; a slow-loris connection is closed after them whether or not the cap is reached.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a request may take to be answered, its body read included. The slowest honest
/// request is a webhook post waiting for the journal or a console page read from a long tape:
/// well under a second; a body trickled in to hold a connection ends here.
pub(crate) const REQUEST_LIMIT: Duration = Duration::from_secs(30);

/// The most connections one listener holds, however high the descriptor limit: a scraper, a
/// load balancer's checks, Telegram's webhook (one connection) and an operator's browser need a
/// handful.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// The fewest connections a listener's cap allows, however low the descriptor limit.
const MIN_CONNECTIONS: usize = 16;

/// A listener holds at most this share (1/4) of the descriptor limit: with the two listeners of
/// `bub message` (the HTTP one and the console's), half of it stays for the chats, the model,
/// tapes and the journal.
const FD_SHARE: u64 = 4;

/// The largest request head (request line and headers) read, so that a half-open connection
/// costs at most this much memory (hyper's default is ~400 KB).
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;

/// How long a request in flight may still take once shutdown began.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The pause after a failed `accept` (out of descriptors: the connection waits in the backlog).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// The cap on one listener's connections when the soft descriptor limit is `soft`: a quarter
/// of it, between [`MIN_CONNECTIONS`] and [`MAX_CONNECTIONS`].
pub fn connection_cap(soft: u64) -> usize {
    let share = usize::try_from(soft / FD_SHARE).unwrap_or(usize::MAX);
    share.clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)
}

/// One listener's server: its name in the log and its limits.
pub struct Server {
    name: &'static str,
    max_body: usize,
    header_timeout: Duration,
    request_limit: Duration,
    cap: usize,
}

impl Server {
    /// The server of listener `name` (`http`, `console`), reading request bodies of at most
    /// `max_body` bytes, its cap from the descriptor limit in force now.
    pub fn new(name: &'static str, max_body: usize) -> Server {
        Server {
            name,
            max_body,
            header_timeout: HEADER_TIMEOUT,
            request_limit: REQUEST_LIMIT,
            cap: connection_cap(super::fd_limit::soft()),
        }
    }

    /// Serves `app` on `listener` until `shutdown` (see the module's doc).
    pub async fn serve(self, listener: TcpListener, app: Router, shutdown: CancellationToken) {
        let connections = Connections::new(self.name, self.cap);
        let mut http = http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .max_buf_size(MAX_HEADER_BYTES);
        let shared = Arc::new(Shared {
            http,
            app: TowerToHyperService::new(app),
            max_body: self.max_body,
            request_limit: self.request_limit,
        });
        let tracker = TaskTracker::new();
        let mut failing = false;
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Once per episode: out of descriptors, this repeats every pause.
                    if !failing {
                        tracing::warn!(listener = self.name, error = %e, "listen.accept_failed");
                    }
                    failing = true;
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(ACCEPT_PAUSE) => continue,
                    }
                }
            };
            failing = false;
            let slot = tokio::select! {
                () = shutdown.cancelled() => break,
                slot = connections.admit() => slot,
            };
            tracker.spawn(connection(stream, slot, shared.clone(), shutdown.clone()));
            // The connection just taken reads its headers before the next one is admitted, so
            // a burst of newer connections at the cap cannot close it before it could show it
            // is a real request.
            tokio::task::yield_now().await;
        }
        drop(listener);
        tracker.close();
        tracker.wait().await;
    }
}

/// What every connection of a listener shares.
struct Shared {
    http: http1::Builder,
    app: TowerToHyperService<Router>,
    max_body: usize,
    request_limit: Duration,
}

/// Serves one connection until it ends, is closed for a newer one, or shutdown (then its
/// request in flight has [`SHUTDOWN_GRACE`]). `slot`, a parameter, is dropped after the
/// connection and its socket, so the cap counts sockets still open.
async fn connection(
    stream: TcpStream,
    slot: Slot,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    // Small answers: sent at once, not held back waiting for an acknowledgement.
    let _ = stream.set_nodelay(true);
    let service = {
        let shared = shared.clone();
        let activity = slot.activity.clone();
        hyper::service::service_fn(move |request| {
            let shared = shared.clone();
            let activity = activity.clone();
            async move { Ok::<_, Infallible>(shared.respond(request, &activity).await) }
        })
    };
    let served = shared.http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    tokio::select! {
        result = served.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "listen.connection");
            }
        }
        () = slot.evicted() => {}
        () = shutdown.cancelled() => {
            served.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, served).await;
        }
    }
}

impl Shared {
    /// `request` answered by the router within the request limit (else 503, closing), its body
    /// bounded; in flight on its connection until the response's body has been sent.
    async fn respond(
        &self,
        request: Request<Incoming>,
        activity: &Arc<Activity>,
    ) -> Response<Tracked> {
        let in_flight = activity.begin();
        let max_body = self.max_body;
        let request = request.map(|body| Body::new(http_body_util::Limited::new(body, max_body)));
        let call = hyper::service::Service::call(&self.app, request);
        let response = match tokio::time::timeout(self.request_limit, call).await {
            Ok(Ok(response)) => response,
            Ok(Err(never)) => match never {},
            Err(_) => too_slow(),
        };
        response.map(|body| Tracked {
            body,
            _in_flight: in_flight,
        })
    }
}

/// The answer to a request not answered within the limit; the connection closes after it (its
/// body may be half read).
fn too_slow() -> Response<Body> {
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        "the request took too long\n",
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A response body that keeps its request in flight until it has been sent (or dropped).
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An error of one connection, not of the listener: the next `accept` may succeed at once.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
