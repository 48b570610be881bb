//! A small round-robin HTTP proxy, as a load balancer in front of replicas: each request goes
//! to the next backend; a backend that refuses the connection (a dead replica) is skipped and
//! the request goes to the one after it; an error once the request was sent is answered `502`
//! — a POST is not sent twice (nginx's default), the client posts it again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

/// The proxy; it stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    stop: CancellationToken,
}

struct Backends {
    urls: Vec<String>,
    next: AtomicUsize,
    client: reqwest::Client,
}

impl Proxy {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A proxy on 127.0.0.1 in front of the servers on `ports` (of 127.0.0.1).
pub async fn start(ports: &[u16]) -> Proxy {
    let backends = Arc::new(Backends {
        urls: ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect(),
        next: AtomicUsize::new(0),
        client: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
    });
    let app = axum::Router::new().fallback(forward).with_state(backends);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await;
    });
    Proxy { addr, stop }
}

async fn forward(State(backends): State<Arc<Backends>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 4 << 20).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    for _ in 0..backends.urls.len() {
        let at = backends.next.fetch_add(1, Ordering::Relaxed) % backends.urls.len();
        let mut headers = HeaderMap::new();
        for (name, value) in &parts.headers {
            if name != "host" && name != "content-length" {
                headers.append(name, value.clone());
            }
        }
        let sent = backends
            .client
            .request(parts.method.clone(), format!("{}{path}", backends.urls[at]))
            .headers(headers)
            .body(body.clone())
            .send()
            .await;
        match sent {
            Ok(answer) => {
                let status = answer.status();
                let bytes = answer.bytes().await.unwrap_or_else(|_| Bytes::new());
                return (status, bytes).into_response();
            }
            Err(e) if e.is_connect() => continue,
            Err(_) => return StatusCode::BAD_GATEWAY.into_response(),
        }
    }
    StatusCode::BAD_GATEWAY.into_response()
}
