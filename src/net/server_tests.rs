//! The server's limits in process, with short limits and raw TCP clients: headers in time,
//! requests in time, bodies bounded, the cap (the oldest half-open connection gives way to a
//! real request), shutdown. The real binary's listeners under a flood: `tests/listener.rs`.

use std::time::Duration;

use axum::routing::{get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// A bound on every step (the machine may be busy).
const STEP: Duration = Duration::from_secs(10);

/// A half-open request: headers begun, never finished.
const HALF: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n";

fn app() -> Router {
    Router::new()
        .route("/", get(|| async { "ok\n" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "late\n"
            }),
        )
        .route(
            "/echo",
            post(|body: Bytes| async move { body.len().to_string() }),
        )
}

/// Serves [`app`] on a free port with these limits; the address and the shutdown token.
async fn start(server: Server) -> (std::net::SocketAddr, CancellationToken) {
    start_app(server, app()).await
}

async fn start_app(server: Server, app: Router) -> (std::net::SocketAddr, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(server.serve(listener, app, shutdown.clone()));
    (addr, shutdown)
}

fn server(cap: usize) -> Server {
    Server {
        name: "test",
        max_body: 1024,
        header_timeout: Duration::from_millis(300),
        request_limit: Duration::from_millis(300),
        cap,
    }
}

/// `raw` sent on a new connection to `addr`: everything the server answers until it closes it.
async fn exchange(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    read_to_close(&mut stream).await
}

/// Everything the server sends until it closes the connection (bounded by [`STEP`]).
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let read = tokio::time::timeout(STEP, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    });
    read.await
        .expect("the server closed the connection in time");
    String::from_utf8_lossy(&got).into_owned()
}

async fn half_open(addr: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(HALF).await.unwrap();
    stream
}

#[tokio::test]
async fn headers_not_finished_in_time_close_the_connection() {
    let (addr, _shutdown) = start(server(8)).await;
    let mut stream = half_open(addr).await;
    let began = std::time::Instant::now();
    assert_eq!(read_to_close(&mut stream).await, "");
    assert!(
        began.elapsed() >= Duration::from_millis(250),
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test]
async fn a_request_slower_than_the_limit_is_answered_503_and_closed() {
    let (addr, _shutdown) = start(server(8)).await;
    let answer = exchange(addr, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.ends_with("the request took too long\n"), "{answer}");
}

#[tokio::test]
async fn a_body_over_the_listeners_limit_is_refused() {
    let (addr, _shutdown) = start(server(8)).await;
    for (len, status) in [(1024, "200"), (1025, "413")] {
        let mut raw = format!(
            "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n"
        )
        .into_bytes();
        raw.extend(vec![b'a'; len]);
        let answer = exchange(addr, &raw).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn at_the_cap_the_oldest_half_open_connection_gives_way_to_a_request() {
    let mut long_headers = server(4);
    long_headers.header_timeout = Duration::from_secs(60);
    let (addr, _shutdown) = start(long_headers).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(half_open(addr).await);
    }
    // A new half-open connection closes the oldest one.
    held.push(half_open(addr).await);
    assert_eq!(read_to_close(&mut held[0]).await, "", "the oldest closed");
    // A request at the cap is served, and closes the next oldest.
    let answer = exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok\n"), "{answer}");
    assert_eq!(
        read_to_close(&mut held[1]).await,
        "",
        "the next oldest closed"
    );
    // The newer ones are still open: nothing closed them.
    for stream in &mut held[2..] {
        let mut byte = [0u8; 1];
        let still = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut byte)).await;
        assert!(still.is_err(), "still open: {still:?}");
    }
}

#[tokio::test]
async fn when_every_connection_trickles_a_body_the_oldest_gives_way_to_a_request() {
    let mut patient = server(2);
    patient.request_limit = Duration::from_secs(60);
    // `/hold` says when it runs (the request's headers were read), then reads the body.
    let (began, mut running) = tokio::sync::mpsc::channel(4);
    let hold = post(move |body: Body| {
        let began = began.clone();
        async move {
            began.send(()).await.unwrap();
            let read = axum::body::to_bytes(body, 1024).await;
            read.map(|b| b.len().to_string()).unwrap_or_default()
        }
    });
    let (addr, _shutdown) = start_app(patient, app().route("/hold", hold)).await;
    // Two requests whose bodies never come: in flight, not half-open.
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let head = "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc";
        stream.write_all(head.as_bytes()).await.unwrap();
        slow.push(stream);
        tokio::time::timeout(STEP, running.recv()).await.unwrap();
    }
    let answer = exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        read_to_close(&mut slow[0]).await,
        "",
        "the oldest request closed"
    );
    let mut byte = [0u8; 1];
    let still = tokio::time::timeout(Duration::from_millis(100), slow[1].read(&mut byte)).await;
    assert!(still.is_err(), "the newer one still open: {still:?}");
}

#[tokio::test]
async fn shutdown_closes_the_port_and_idle_connections() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let mut long_headers = server(8);
    long_headers.header_timeout = Duration::from_secs(60);
    let serving = tokio::spawn(long_headers.serve(listener, app(), shutdown.clone()));
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(STEP, idle.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    shutdown.cancel();
    tokio::time::timeout(STEP, serving).await.unwrap().unwrap();
    assert_eq!(read_to_close(&mut idle).await, "");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the port is closed"
    );
}

#[test]
fn the_cap_is_a_quarter_of_the_descriptor_limit_within_bounds() {
    assert_eq!(connection_cap(256), 64);
    assert_eq!(connection_cap(1024), 256);
    assert_eq!(connection_cap(524_288), MAX_CONNECTIONS);
    assert_eq!(connection_cap(u64::MAX), MAX_CONNECTIONS);
    assert_eq!(connection_cap(20), MIN_CONNECTIONS);
}
