//! The listeners under abuse, through the real `bub message`: a flood of half-open connections
//! (request headers begun, never finished) — more than the daemon has file descriptors — stops
//! neither Telegram (polled, or posting to the webhook) nor `/healthz`, and the log names the
//! cap; a connection that never finishes its headers is closed by the HTTP listener and by the
//! console's within the header timeout; the console's forms keep their limit on either.
//!
//! The daemon runs with soft = hard = [`FDS`] descriptors, so raising its soft limit cannot
//! help: only the listener's own limits can.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::support::bub_env::{Daemon, Env, texts};
use crate::support::fake_telegram::private_text;
use crate::support::postgres::free_port;
use crate::support::wait::{WAIT, wait_until};

/// The daemon's descriptor limit, soft and hard.
const FDS: u64 = 256;
/// Clients of the flood: more than the daemon has descriptors.
const FLOOD: usize = 320;
/// A flood client whose connection was closed opens the next after this (an attacker's pace;
/// not a wait for anything).
const PACE: Duration = Duration::from_millis(100);
/// The start of a request that never ends.
const HALF: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n";

/// Starts `bub message` of `env` with soft = hard = [`FDS`] file descriptors.
fn start_with_few_fds(env: &Env) -> Daemon {
    let mut cmd = env.command(&["message"]);
    // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: FDS,
                rlim_max: FDS,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Daemon::spawn(cmd)
}

/// [`FLOOD`] clients holding half-open connections to `addr`: each sends [`HALF`] and waits;
/// when the server closes its connection it opens another. Ends when dropped.
struct Flood {
    stop: CancellationToken,
    /// Clients whose first connection was established.
    connected: Arc<AtomicUsize>,
    /// Connections the server closed.
    closed: Arc<AtomicUsize>,
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Flood {
    fn start(addr: SocketAddr) -> Flood {
        let flood = Flood {
            stop: CancellationToken::new(),
            connected: Arc::default(),
            closed: Arc::default(),
        };
        for _ in 0..FLOOD {
            let stop = flood.stop.clone();
            let (connected, closed) = (flood.connected.clone(), flood.closed.clone());
            tokio::spawn(stop.clone().run_until_cancelled_owned(async move {
                let mut first = true;
                loop {
                    if let Ok(mut stream) = TcpStream::connect(addr).await {
                        let _ = stream.write_all(HALF).await;
                        if std::mem::take(&mut first) {
                            connected.fetch_add(1, Ordering::Relaxed);
                        }
                        let mut buf = [0u8; 64];
                        while stream.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                        closed.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(PACE).await;
                }
            }));
        }
        flood
    }

    /// Waits until every client has connected once: the flood is at full strength.
    async fn established(&self) {
        wait_until(WAIT, "every flood client connected", || {
            self.connected.load(Ordering::Relaxed) == FLOOD
        })
        .await;
    }
}

/// `GET http://127.0.0.1:port/healthz` on a new connection: its status (`None`: no answer).
async fn healthz(port: u16) -> Option<u16> {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let response = client
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    Some(response.status().as_u16())
}

/// Waits (bounded) until `/healthz` answers 200.
async fn healthy(port: u16) {
    let deadline = Instant::now() + WAIT;
    let mut last = None;
    while Instant::now() < deadline {
        last = healthz(port).await;
        if last == Some(200) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("/healthz did not answer 200 within {WAIT:?}; last: {last:?}");
}

/// The log line of the cap being reached, naming it: the cap of a listener when the process
/// may open [`FDS`] descriptors.
async fn cap_named(daemon: &Daemon) {
    daemon.wait_for_log("listen.full").await;
    let cap = bub::net::server::connection_cap(FDS);
    let log = daemon.log();
    let line = log.lines().find(|l| l.contains("listen.full")).unwrap();
    assert!(line.contains(&format!("cap={cap}")), "{line}");
    assert_eq!(log.matches("listen.full:").count(), 1, "once: {log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_half_open_connections_stops_neither_polling_nor_healthz() {
    let mut env = Env::new().await;
    let port = free_port();
    env.set("BUB_HTTP_LISTEN", &port.to_string());
    let daemon = start_with_few_fds(&env);
    healthy(port).await;
    env.telegram.wait_for_calls("getUpdates", 1, WAIT).await;
    daemon.wait_for_log("nofile.limit").await;
    assert!(
        daemon.log().contains("soft_before=256 soft_after=256"),
        "the hard limit is the soft one: {}",
        daemon.log()
    );

    let flood = Flood::start(SocketAddr::from(([127, 0, 0, 1], port)));
    flood.established().await;
    // The owner writes while the flood holds the listener: answered.
    env.model.push_text("Still here.");
    env.telegram
        .push_message(private_text(42, 42, "are you there?"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["Still here."]);
    healthy(port).await;
    cap_named(&daemon).await;
    assert!(
        flood.closed.load(Ordering::Relaxed) > 0,
        "the server closed some"
    );
    drop(flood);
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_post_during_a_flood_is_taken_and_answered() {
    let mut env = Env::new().await;
    let port = free_port();
    env.set("BUB_HTTP_LISTEN", &port.to_string());
    env.set(
        "BUB_TELEGRAM_WEBHOOK_URL",
        "https://bot.example/tg/hook-flood",
    );
    env.set("BUB_TELEGRAM_WEBHOOK_SECRET", "s3cret-Token_1");
    env.telegram
        .deliver_webhooks_to(&format!("http://127.0.0.1:{port}"));
    let daemon = start_with_few_fds(&env);
    daemon.wait_for_log("telegram.webhook").await;

    let flood = Flood::start(SocketAddr::from(([127, 0, 0, 1], port)));
    flood.established().await;
    env.model.push_text("Posted and answered.");
    let id = env
        .telegram
        .push_message_update(private_text(42, 42, "hello during the flood"));
    wait_until(WAIT, "the post answered 200", || {
        let posts = env.telegram.webhook_posts();
        posts.iter().any(|p| p.update_id == id && p.status == 200)
    })
    .await;
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["Posted and answered."]);
    cap_named(&daemon).await;
    drop(flood);
    assert!(daemon.stop().await.success());
}

/// Opens a connection to `addr`, sends [`HALF`], and returns how long the server took to close
/// it (failing the test after the header timeout and 5 s more).
async fn closed_after(addr: SocketAddr) -> Duration {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(HALF).await.unwrap();
    let began = Instant::now();
    let bound = bub::net::server::HEADER_TIMEOUT + Duration::from_secs(5);
    let mut buf = [0u8; 64];
    let closed = async { while stream.read(&mut buf).await.is_ok_and(|n| n > 0) {} };
    tokio::time::timeout(bound, closed)
        .await
        .unwrap_or_else(|_| panic!("{addr}: still open after {bound:?}"));
    began.elapsed()
}

#[tokio::test(flavor = "multi_thread")]
async fn headers_never_finished_are_closed_within_the_header_timeout() {
    let mut env = Env::new().await;
    let (port, console_port) = (free_port(), free_port());
    env.set("BUB_HTTP_LISTEN", &port.to_string());
    env.set("BUB_CONSOLE", "true");
    env.set("BUB_CONSOLE_LISTEN", &console_port.to_string());
    let daemon = env.start();
    healthy(port).await;
    daemon.wait_for_log("console.listen").await;
    let timeout = bub::net::server::HEADER_TIMEOUT;
    let (http, console) = tokio::join!(
        closed_after(SocketAddr::from(([127, 0, 0, 1], port))),
        closed_after(SocketAddr::from(([127, 0, 0, 1], console_port))),
    );
    for took in [http, console] {
        assert!(took >= timeout - Duration::from_secs(1), "{took:?}");
    }
    assert_eq!(login(console_port, 300 * 1024).await, 413);
    assert_eq!(login(console_port, 1024).await, 401, "a small form is read");
    assert!(daemon.stop().await.success());
}

/// POSTs a login form of `len` bytes (a wrong token) to the console on `port`, from the
/// console's own page (its `Origin`): the status.
async fn login(port: u16, len: usize) -> u16 {
    let form = format!("token={}", "a".repeat(len - 6));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let response = client
        .post(format!("http://127.0.0.1:{port}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", format!("http://127.0.0.1:{port}"))
        .timeout(Duration::from_secs(10))
        .body(form)
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_sharing_the_http_listener_keeps_its_form_limit() {
    let mut env = Env::new().await;
    let port = free_port();
    env.set("BUB_HTTP_LISTEN", &port.to_string());
    env.set("BUB_CONSOLE", "true");
    env.set("BUB_CONSOLE_LISTEN", &port.to_string());
    let daemon = env.start();
    healthy(port).await;
    // Over the console's 256 KB, under the listener's 1 MB (the webhook's).
    assert_eq!(login(port, 300 * 1024).await, 413);
    assert_eq!(login(port, 1024).await, 401, "a small form is read");
    assert!(daemon.stop().await.success());
}
