//! A fake Discord for tests: REST (axum) and the gateway websocket (tokio-tungstenite), both on
//! `127.0.0.1:0`, good enough for the real serenity client. Nothing reaches the internet.
//!
//! ```ignore
//! let fake = fake_discord::start().await;
//! // BUB_DISCORD_API_BASE = fake.api_base(), any BUB_DISCORD_TOKEN (see `require_token`)
//! let ident = fake.wait_for_identify(Duration::from_secs(10)).await;   // token, intents
//! let alice = fake_discord::user("42", "alice");
//! fake.dispatch_message(Msg::guild("9", "555", alice, "hey <@777>").mention_bot()).await;
//! let posts = fake.wait_for_posts(1, Duration::from_secs(10)).await;
//! assert_eq!(posts[0].channel_id, "555");
//! ```
//!
//! REST (`<api_base>/api/v10/...`; every request is recorded, see [`FakeDiscord::requests`]):
//!
//! | request | answer |
//! |---|---|
//! | `GET /gateway` | `{"url": "ws://127.0.0.1:WSPORT"}` (`/gateway/bot` too, 1 shard) |
//! | `GET /users/@me` | the bot user ([`BOT_ID`], [`BOT_NAME`]) |
//! | `POST /users/@me/channels` `{"recipient_id"}` | the DM channel with that user, id [`dm_channel`] |
//! | `POST /channels/{id}/messages` | a full Message (ids from 900001 up, content echoed, author = the bot), or the next injected fault ([`FakeDiscord::fail_next_post`]) |
//! | `POST /channels/{id}/messages` as `multipart/form-data` (`payload_json` + `files[N]`) | the same, recorded with the `payload_json` object as the body plus `"attachments_uploaded": [{"field", "filename", "size", "content_type"}]`; the answer's `attachments` point at the fake (downloadable) |
//! | `POST /channels/{id}/typing` | 204 |
//! | `GET /channels/{id}/messages?after=&limit=` | the history of [`FakeDiscord::add_history`] newer than `after`: the `limit` (default 50, at most 100) oldest of them, newest first, as Discord does; or the status of [`FakeDiscord::fail_history`] |
//! | `GET /channels/{id}` | what [`FakeDiscord::set_thread`] / [`FakeDiscord::set_text_channel`] configured, else a text channel `channel-{id}` |
//! | `GET /guilds/{g}/members/{u}` | a member with the roles of [`FakeDiscord::set_bot_roles`] (default none) |
//! | `GET /attachments/{channel}/{id}/{filename}` (no `/api/v10`, no token: the CDN) | the bytes of [`FakeDiscord::add_attachment`] or of an uploaded file, streamed with `content-length`; else 404 |
//! | anything else | 404 `{"message": "404: Not Found", "code": 0}` |
//!
//! With [`FakeDiscord::require_token`], REST calls with another `Authorization` get 401 and an
//! IDENTIFY with another token is closed with code 4004 (authentication failed).
//!
//! Gateway: each connection gets HELLO (interval [`DEFAULT_HEARTBEAT_MS`] unless
//! [`FakeDiscord::set_heartbeat_interval`]), IDENTIFY is recorded and answered with READY (bot
//! user 777 "bub"), heartbeats with ACK, RESUME (recorded, see [`FakeDiscord::wait_for_resume`])
//! with RESUMED. [`FakeDiscord::dispatch`] sends an event (increasing `s`) to every identified
//! connection; [`FakeDiscord::request_reconnect`] sends op 7 RECONNECT, after which serenity
//! reconnects at once and resumes. Note serenity's shard queue waits 5 s before it
//! re-identifies after a reconnect (a resume does not wait).
//!
//! Attachments: `let url = fake.add_attachment("notes.txt", bytes)` and an incoming
//! `Msg::dm(..).attachment_at("1", "notes.txt", Some("text/plain"), size, &url)`; downloads are
//! counted by [`FakeDiscord::attachment_downloads`], uploads kept by
//! [`FakeDiscord::uploaded_files`].
//!
//! The fake runs on the test's tokio runtime: tests that run the `bub` binary as a subprocess
//! need `#[tokio::test(flavor = "multi_thread")]` so it keeps serving while the test waits.

mod gateway;
mod msg;
mod rest;

// Test binaries that do not use the Discord fake would otherwise warn about these.
#[allow(unused_imports)]
pub use msg::{Msg, bot_user, other_bot, user, user_with_global_name};

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::task::AbortOnDropHandle;

/// The bot's user id (READY, `/users/@me`, authors of posted messages).
pub const BOT_ID: &str = "777";
/// The bot's user name.
pub const BOT_NAME: &str = "bub";
/// The id of the DM channel with user `user` (`POST /users/@me/channels`).
pub fn dm_channel(user: &str) -> String {
    format!("99{user}")
}

/// Discord's usual heartbeat interval: no heartbeat happens during a short test.
pub const DEFAULT_HEARTBEAT_MS: u64 = 41_250;
/// How long [`FakeDiscord::dispatch`] waits for an identified gateway connection.
const DISPATCH_WAIT: Duration = Duration::from_secs(10);
/// The largest request body accepted (uploads).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// The channel segment of the URLs of [`FakeDiscord::add_attachment`].
const ATTACHMENT_CHANNEL: &str = "1000";

/// One REST request the fake received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// Path without the query, e.g. `/api/v10/channels/555/messages`.
    pub path: String,
    /// The raw query string (`&after=100&limit=100`; empty when none).
    pub query: String,
    /// The JSON body (`Null` when empty, a JSON string when not JSON). A multipart body is
    /// its `payload_json` object plus `attachments_uploaded` (see the module docs).
    pub body: Value,
    /// All headers, names lowercase.
    pub headers: Vec<(String, String)>,
    /// The status the fake answered with.
    pub status: u16,
    pub at: Instant,
}

impl RecordedRequest {
    /// The value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        super::header(&self.headers, name)
    }

    /// The value of a query parameter.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        query_param(&self.query, name)
    }
}

/// One message the bot posted successfully.
#[derive(Debug, Clone)]
pub struct PostedMessage {
    pub channel_id: String,
    /// The id the fake gave it.
    pub id: String,
    /// The request body as sent (`content`, `message_reference`, `allowed_mentions`, ...;
    /// for a multipart post the `payload_json` object plus `attachments_uploaded`).
    pub body: Value,
    pub at: Instant,
}

impl PostedMessage {
    pub fn content(&self) -> &str {
        self.body["content"].as_str().unwrap_or_default()
    }

    /// `message_reference.message_id`, if the post is a reply.
    pub fn reply_to(&self) -> Option<&str> {
        self.body["message_reference"]["message_id"].as_str()
    }
}

/// One IDENTIFY (gateway op 2) received.
#[derive(Debug, Clone)]
pub struct Identify {
    /// As sent, e.g. `Bot test-token`.
    pub token: String,
    pub intents: u64,
    /// The whole `d` object.
    pub payload: Value,
}

struct Fault {
    status: u16,
    body: Value,
    headers: Vec<(String, String)>,
}

#[derive(Default)]
struct Inner {
    valid_token: Option<String>,
    channels: HashMap<String, Value>,
    /// channel → messages served by `GET /channels/{id}/messages`.
    history: HashMap<String, Vec<Value>>,
    /// channel → the status its history requests fail with.
    history_errors: HashMap<String, u16>,
    bot_roles: HashMap<String, Vec<String>>,
    faults: VecDeque<Fault>,
    requests: Vec<RecordedRequest>,
    posts: Vec<PostedMessage>,
    typing: Vec<String>,
    identifies: Vec<Identify>,
    /// The `d` of every RESUME (op 6) received.
    resumes: Vec<Value>,
    sessions: Vec<mpsc::UnboundedSender<WsMessage>>,
    /// URL path (`/attachments/...`, as served) → bytes.
    attachments: HashMap<String, Bytes>,
    /// `(filename, bytes)` of the files of successful multipart posts.
    uploads: Vec<(String, Bytes)>,
}

struct Shared {
    ws_url: String,
    /// `http://127.0.0.1:PORT` of the REST side (attachment URLs).
    rest_base: String,
    next_attachment: AtomicU64,
    heartbeat_ms: AtomicU64,
    reject_identify: AtomicBool,
    heartbeats: AtomicU64,
    seq: AtomicU64,
    next_id: AtomicU64,
    state: Mutex<Inner>,
    changed: Notify,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let out = f(&mut self.state());
        self.changed.notify_waiters();
        out
    }

    /// Waits until `check` returns `Some`, or panics after `timeout` with `what`.
    async fn wait<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut check: impl FnMut(&Inner) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(out) = check(&self.state()) {
                return out;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("fake discord: {what} within {timeout:?}");
            }
        }
    }
}

/// The running fake; dropping it stops both servers.
pub struct FakeDiscord {
    shared: Arc<Shared>,
    rest_addr: SocketAddr,
    ws_addr: SocketAddr,
    _tasks: [AbortOnDropHandle<()>; 2],
}

/// Starts REST and gateway on `127.0.0.1:0`.
pub async fn start() -> FakeDiscord {
    let rest = TcpListener::bind("127.0.0.1:0").await.expect("bind rest");
    let ws = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind gateway");
    let (rest_addr, ws_addr) = (rest.local_addr().unwrap(), ws.local_addr().unwrap());
    let shared = Arc::new(Shared {
        ws_url: format!("ws://{ws_addr}"),
        rest_base: format!("http://{rest_addr}"),
        next_attachment: AtomicU64::new(600_000),
        heartbeat_ms: AtomicU64::new(DEFAULT_HEARTBEAT_MS),
        reject_identify: AtomicBool::new(false),
        heartbeats: AtomicU64::new(0),
        seq: AtomicU64::new(0),
        next_id: AtomicU64::new(900_000),
        state: Mutex::new(Inner::default()),
        changed: Notify::new(),
    });
    let app = Router::new()
        .fallback(rest::handler)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(Arc::clone(&shared));
    let rest_task = tokio::spawn(async move {
        axum::serve(rest, app).await.expect("fake discord rest");
    });
    let gw_shared = Arc::clone(&shared);
    let ws_task = tokio::spawn(async move {
        while let Ok((stream, _)) = ws.accept().await {
            tokio::spawn(gateway::serve(Arc::clone(&gw_shared), stream));
        }
    });
    FakeDiscord {
        shared,
        rest_addr,
        ws_addr,
        _tasks: [rest_task, ws_task].map(AbortOnDropHandle::new),
    }
}

impl FakeDiscord {
    /// `http://127.0.0.1:PORT`: the value for `BUB_DISCORD_API_BASE`.
    pub fn api_base(&self) -> String {
        format!("http://{}", self.rest_addr)
    }

    /// `ws://127.0.0.1:WSPORT`, as served by `GET /api/v10/gateway`.
    pub fn gateway_url(&self) -> String {
        format!("ws://{}", self.ws_addr)
    }

    /// HELLO's heartbeat interval for connections opened from now on.
    pub fn set_heartbeat_interval(&self, interval: Duration) {
        let ms = interval.as_millis() as u64;
        self.shared.heartbeat_ms.store(ms.max(1), Ordering::SeqCst);
    }

    /// Accept only `token` (with or without the `Bot ` prefix): other REST calls get 401, other
    /// IDENTIFYs are closed with 4004.
    pub fn require_token(&self, token: &str) {
        let token = token.strip_prefix("Bot ").unwrap_or(token).to_owned();
        self.shared.update(|s| s.valid_token = Some(token));
    }

    /// Close every IDENTIFY with 4004 (authentication failed), whatever the token.
    pub fn reject_identify(&self, reject: bool) {
        self.shared.reject_identify.store(reject, Ordering::SeqCst);
    }

    /// `GET /channels/{id}` answers a guild text channel named `name`.
    pub fn set_text_channel(&self, id: &str, name: &str, guild_id: &str) {
        let v = json!({"id": id, "type": 0, "name": name, "guild_id": guild_id, "position": 0,
                       "permission_overwrites": [], "nsfw": false, "parent_id": null});
        self.shared.update(|s| s.channels.insert(id.to_owned(), v));
    }

    /// `GET /channels/{id}` answers a public thread named `name` under `parent_id`.
    pub fn set_thread(&self, id: &str, name: &str, parent_id: &str, guild_id: &str) {
        let v = json!({"id": id, "type": 11, "name": name, "guild_id": guild_id,
                       "parent_id": parent_id, "owner_id": "42", "message_count": 1,
                       "member_count": 1, "thread_metadata": {"archived": false,
                       "auto_archive_duration": 1440, "locked": false,
                       "archive_timestamp": "2024-01-01T00:00:00.000000+00:00"}});
        self.shared.update(|s| s.channels.insert(id.to_owned(), v));
    }

    /// Adds `msg` (a [`Msg`] or message JSON) to the history of its `channel_id`, served by
    /// `GET /channels/{id}/messages`. As in Discord's REST answers, `guild_id` and `member` are
    /// left out (they come only with gateway events).
    pub fn add_history(&self, msg: impl Into<Value>) {
        let mut msg: Value = msg.into();
        if let Some(obj) = msg.as_object_mut() {
            obj.remove("guild_id");
            obj.remove("member");
        }
        let channel = msg["channel_id"].as_str().unwrap_or_default().to_owned();
        self.shared
            .update(|s| s.history.entry(channel).or_default().push(msg));
    }

    /// `GET /channels/{channel_id}/messages` answers `status` (403: Missing Access, else
    /// 404: Unknown Channel).
    pub fn fail_history(&self, channel_id: &str, status: u16) {
        self.shared
            .update(|s| s.history_errors.insert(channel_id.to_owned(), status));
    }

    /// The bot's roles in `guild_id` (`GET /guilds/{guild_id}/members/777`).
    pub fn set_bot_roles(&self, guild_id: &str, roles: &[&str]) {
        let roles = roles.iter().map(|r| r.to_string()).collect();
        self.shared
            .update(|s| s.bot_roles.insert(guild_id.to_owned(), roles));
    }

    /// The next `POST /channels/{id}/messages` is answered with `status`, `body` and `headers`
    /// instead of being created. Faults queue up: call it twice for two failures. A 429:
    /// `fail_next_post(429, json!({"message": "You are being rate limited.", "retry_after": 0.5,
    /// "global": false, "code": 0}), &[("retry-after", "0.5")])`.
    pub fn fail_next_post(&self, status: u16, body: Value, headers: &[(&str, &str)]) {
        let headers = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.shared.update(|s| {
            s.faults.push_back(Fault {
                status,
                body,
                headers,
            })
        });
    }

    /// Serves `bytes` as an attachment at the returned URL on the fake itself,
    /// `http://127.0.0.1:PORT/attachments/1000/<n>/<filename>` (filename percent-encoded).
    pub fn add_attachment(&self, filename: &str, bytes: Vec<u8>) -> String {
        rest::store_attachment(&self.shared, ATTACHMENT_CHANNEL, filename, bytes.into()).1
    }

    /// How many attachment downloads were answered with the bytes.
    pub fn attachment_downloads(&self) -> usize {
        let state = self.shared.state();
        state
            .requests
            .iter()
            .filter(|r| r.method == "GET" && r.path.starts_with("/attachments/") && r.status == 200)
            .count()
    }

    /// The files of the multipart posts answered with success, oldest first:
    /// `(filename, bytes)`.
    pub fn uploaded_files(&self) -> Vec<(String, Vec<u8>)> {
        let state = self.shared.state();
        state
            .uploads
            .iter()
            .map(|(name, bytes)| (name.clone(), bytes.to_vec()))
            .collect()
    }

    /// Every IDENTIFY so far.
    pub fn identifies(&self) -> Vec<Identify> {
        self.shared.state().identifies.clone()
    }

    /// Waits for an IDENTIFY (returns the latest); panics after `timeout`.
    pub async fn wait_for_identify(&self, timeout: Duration) -> Identify {
        self.shared
            .wait(timeout, "no IDENTIFY", |s| s.identifies.last().cloned())
            .await
    }

    /// Sends a dispatch event (`op 0`, next `s`) to every identified connection, waiting up to
    /// 10 s for one (panics otherwise). Returns the sequence number.
    pub async fn dispatch(&self, event: &str, data: Value) -> u64 {
        let sessions = self.identified_sessions().await;
        let seq = self.shared.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let frame = json!({"op": 0, "s": seq, "t": event, "d": data}).to_string();
        for tx in sessions {
            let _ = tx.send(WsMessage::Text(frame.clone()));
        }
        seq
    }

    /// The identified connections, waiting up to 10 s for one (panics otherwise).
    async fn identified_sessions(&self) -> Vec<mpsc::UnboundedSender<WsMessage>> {
        self.shared
            .wait(DISPATCH_WAIT, "no identified gateway connection", |s| {
                (!s.sessions.is_empty()).then(|| s.sessions.clone())
            })
            .await
    }

    /// Sends `MESSAGE_CREATE` with `msg` (a [`Msg`] or raw message JSON).
    pub async fn dispatch_message(&self, msg: impl Into<Value>) -> u64 {
        self.dispatch("MESSAGE_CREATE", msg.into()).await
    }

    /// Sends op 7 RECONNECT to every identified connection: serenity drops the connection,
    /// opens a new one and sends RESUME (answered with RESUMED).
    pub async fn request_reconnect(&self) {
        let sessions = self.identified_sessions().await;
        let frame = json!({"op": 7, "d": null}).to_string();
        for tx in sessions {
            let _ = tx.send(WsMessage::Text(frame.clone()));
        }
    }

    /// Waits until at least `n` RESUMEs arrived and returns their payloads (`session_id`,
    /// `seq`, `token`); panics after `timeout`.
    pub async fn wait_for_resume(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let what = format!("fewer than {n} RESUME(s)");
        self.shared
            .wait(timeout, &what, |s| {
                (s.resumes.len() >= n).then(|| s.resumes.clone())
            })
            .await
    }

    /// Every REST request so far (including failed and rejected ones).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.state().requests.clone()
    }

    /// The REST requests with this method and exactly this path (`/api/v10/...`).
    pub fn requests_to(&self, method: &str, path: &str) -> Vec<RecordedRequest> {
        requests_to(&self.shared.state().requests, method, path)
    }

    /// Waits until at least `n` requests with this method and path were answered and returns
    /// them all; panics after `timeout`.
    pub async fn wait_for_requests(
        &self,
        method: &str,
        path: &str,
        n: usize,
        timeout: Duration,
    ) -> Vec<RecordedRequest> {
        let what = format!("fewer than {n} {method} {path}");
        self.shared
            .wait(timeout, &what, |s| {
                let seen = requests_to(&s.requests, method, path);
                (seen.len() >= n).then_some(seen)
            })
            .await
    }

    /// The messages posted successfully so far, in order.
    pub fn posted_messages(&self) -> Vec<PostedMessage> {
        self.shared.state().posts.clone()
    }

    /// Waits until at least `n` messages were posted and returns them all; panics after
    /// `timeout`.
    pub async fn wait_for_posts(&self, n: usize, timeout: Duration) -> Vec<PostedMessage> {
        let what = format!("fewer than {n} posted message(s)");
        self.shared
            .wait(timeout, &what, |s| {
                (s.posts.len() >= n).then(|| s.posts.clone())
            })
            .await
    }

    /// The channel ids of the typing calls so far.
    pub fn typing_calls(&self) -> Vec<String> {
        self.shared.state().typing.clone()
    }

    /// Waits until at least `n` typing calls arrived; panics after `timeout`.
    pub async fn wait_for_typing(&self, n: usize, timeout: Duration) -> Vec<String> {
        let what = format!("fewer than {n} typing call(s)");
        self.shared
            .wait(timeout, &what, |s| {
                (s.typing.len() >= n).then(|| s.typing.clone())
            })
            .await
    }

    /// Heartbeats (op 1) received so far.
    pub fn heartbeats(&self) -> u64 {
        self.shared.heartbeats.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` heartbeats arrived; panics after `timeout`.
    pub async fn wait_for_heartbeats(&self, n: u64, timeout: Duration) -> u64 {
        let what = format!("fewer than {n} heartbeat(s)");
        self.shared
            .wait(timeout, &what, |_| {
                let seen = self.heartbeats();
                (seen >= n).then_some(seen)
            })
            .await
    }
}

/// The requests with this method and exactly this path.
fn requests_to(requests: &[RecordedRequest], method: &str, path: &str) -> Vec<RecordedRequest> {
    requests
        .iter()
        .filter(|r| r.method.eq_ignore_ascii_case(method) && r.path == path)
        .cloned()
        .collect()
}

/// The value of `name` in a raw query string (serenity writes `?&after=1&limit=2`).
fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}
