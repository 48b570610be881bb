//! A fake Telegram Bot API for tests: an axum app on `127.0.0.1:0` that serves long polling
//! from a queue of pushed updates, answers the send methods with full `Message` objects and
//! records every call. The real teloxide client talks to it unchanged.
//!
//! ```ignore
//! let fake = fake_telegram::start().await;
//! settings.channel_mut("telegram").api_base = fake.api_base();            // BUB_TELEGRAM_API_BASE
//! settings.channel_mut("telegram").token = Some(fake_telegram::TOKEN.into());
//! fake.push_message(private_text(42, 42, "hello"));         // delivered by getUpdates
//! fake.push_message(group_text(-100, 42, "hi @bub_test_bot").mention("@bub_test_bot"));
//! fake.fail_next("sendMessage", 429, fake_telegram::retry_after_body(1));
//! fake.fail_for("getUpdates", 502, Duration::from_secs(3));    // an outage: 5xx for 3 s
//! fake.stall_for("sendMessage", Duration::from_secs(20));       // calls in 20 s never answered
//! fake.stall_after("sendMessage", 3);                 // 3 answered, the ones after never
//! let sent = fake.wait_for_calls("sendMessage", 1, Duration::from_secs(5)).await;
//! assert_eq!(sent[0].body["chat_id"], 42);
//!
//! let path = fake.add_file("voice-1", bytes);          // getFile answers it, GET serves it
//! fake.push_message(private_text(42, 42, "").voice_file("voice-1", 3, 4096));
//! fake.wait_for_calls("file", 1, WAIT).await;           // a download: {"file_path": path}
//! let up = fake.wait_for_calls("sendDocument", 1, WAIT).await;
//! assert_eq!(up[0].body["file"]["size"], 2048);         // multipart: text fields + "file"
//! assert_eq!(fake.uploads()[0].1, report_bytes);
//! fake.fail_next("editMessageText", 429, fake_telegram::retry_after_body(1));
//! ```
//!
//! [`messages`] builds the incoming messages ([`private_text`], [`group_text`], then
//! `.mention(..)`, `.reply_to(..)`, `.photo(..)`, ...).
//!
//! Method names are matched case-insensitively (teloxide sends `SendMessage`). The bot is
//! [`BOT_ID`] / [`BOT_USERNAME`]. `getUpdates` honours `offset` (confirmed updates are
//! forgotten; a negative offset keeps only the newest updates, which is how teloxide drops
//! pending updates — see [`FakeTelegram::dropped_pending_updates`]), `limit` and `timeout`
//! (held at most 10 s, woken at once by a push, released when the fake is dropped). Errors are
//! answered with Telegram's error body and the given status. Mind that teloxide sleeps 10 s
//! after any 5xx answer before it returns the error, and gives up on a call after 17 s: an
//! outage made with [`FakeTelegram::fail_for`] (5xx) or [`FakeTelegram::stall_for`] (no answer,
//! so the client times out) costs a test at least that long.
//!
//! Webhooks: `setWebhook` makes the fake post its queued updates to the webhook as Telegram
//! does ([`webhook`]; the test says where the URL's path is served).
//!
//! Files: [`FakeTelegram::add_file`] registers bytes under a `file_id`; `getFile` answers
//! `{"file_id", "file_unique_id", "file_size", "file_path"}` (400 "Bad Request: invalid
//! file_id" for unknown ids) and `GET /file/bot<token>/<file_path>` serves the bytes in 64 KiB
//! chunks with `content-length` (404 for unknown paths), each download recorded as a call of
//! method `file` with body `{"file_path": ...}`. `sendPhoto`, `sendDocument`, `sendVoice` and
//! `sendAudio` take `multipart/form-data`: the call's body is the text fields (values that read
//! as JSON numbers, booleans, objects or arrays parsed: `"chat_id": 42`, `"reply_parameters":
//! {"message_id": 5}`) plus `"file": {"field", "filename", "size", "content_type", "param"}`
//! for the uploaded file; they answer a full `Message` with `photo` / `document` / `voice` /
//! `audio`, and [`FakeTelegram::uploads`] keeps the bytes. `editMessageText` answers the edited
//! `Message` (with `edit_date`), or 400 [`message_not_modified_body`] when the new text equals
//! the message's current text (what `sendMessage` sent or the last edit set). Faults
//! ([`FakeTelegram::fail_next`], `fail_for`, `stall_for`, `stall_after`) apply to all of these, downloads
//! under the method name `file`.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

mod media;
pub mod messages;
pub mod webhook;

use super::wire;

// Not every test binary uses every builder.
#[allow(unused_imports)]
pub use messages::{TgMessage, bot_user, group_text, private_text, user};

/// The bot's user id (`getMe`).
pub const BOT_ID: i64 = 777;
/// The bot's username (`getMe`), without `@`.
pub const BOT_USERNAME: &str = "bub_test_bot";
/// A well-formed token for tests (the fake accepts any token unless
/// [`FakeTelegram::accept_only_token`] is used).
pub const TOKEN: &str = "123456789:AAFakeSecretTokenForTests_abcdefghijk";
/// Longest time a `getUpdates` long poll is held, whatever its `timeout`.
const MAX_POLL_HOLD: Duration = Duration::from_secs(10);
/// First id of messages the bot sends.
const FIRST_SENT_ID: i64 = 1001;
/// The `edit_date` of edited messages.
const EDIT_DATE: i64 = 1700000200;
/// The largest request body accepted (Telegram takes uploads up to 50 MB).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Call {
    /// The method, lowercase (`sendmessage`); `file` for a download.
    pub method: String,
    /// The token from the `/bot<token>/` path segment.
    pub token: String,
    /// The JSON body (`{}` when empty; a JSON string with the raw text when not JSON). A
    /// multipart body is its text fields plus `file` (see the module docs); a download is
    /// `{"file_path": ...}`.
    pub body: Value,
    /// When it arrived.
    pub at: Instant,
    /// The fake did not answer it with success: an injected error ([`FakeTelegram::fail_next`],
    /// [`FakeTelegram::fail_for`]), a stall ([`FakeTelegram::stall_for`]) or an error of its
    /// own (an unknown `file_id` or download path, an edit that changes nothing, a method it
    /// does not fake). A failed `sendMessage` delivered nothing.
    pub failed: bool,
}

/// A time-bounded fault of one method.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Answer with this status and Telegram's error body.
    Status(u16),
    /// Never answer (until the fake is dropped): the client times out.
    Stall,
}

#[derive(Debug, Clone)]
struct Window {
    method: String,
    until: Instant,
    fault: Fault,
    /// Calls answered as usual before the fault starts.
    spared: usize,
}

struct Inner {
    updates: VecDeque<Value>,
    calls: Vec<Call>,
    failures: HashMap<String, VecDeque<(u16, Value)>>,
    windows: Vec<Window>,
    accepted_token: Option<String>,
    /// The current text of each message the bot sent (after its edits), by message id.
    texts: HashMap<i64, String>,
    /// Downloadable files by `file_id`.
    files: HashMap<String, media::StoredFile>,
    /// `(method, bytes)` of the uploads answered with success.
    uploads: Vec<(String, Bytes)>,
    /// The webhook `setWebhook` set ([`webhook`]), where its path is served, what was posted.
    webhook: Option<webhook::Hook>,
    deliver_to: Option<reqwest::Url>,
    posts: Vec<webhook::Post>,
}

struct Shared {
    state: Mutex<Inner>,
    /// Woken on every recorded call and every pushed update.
    changed: Notify,
    next_update_id: AtomicI64,
    next_incoming_id: AtomicI64,
    next_sent_id: AtomicI64,
    /// Numbers the `file_path`s of added files.
    next_file: AtomicI64,
    closed: CancellationToken,
}

/// A running fake; it stops (and releases held long polls) when dropped.
pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// Starts a fake on an ephemeral port of 127.0.0.1.
pub async fn start() -> FakeTelegram {
    let shared = Arc::new(Shared {
        state: Mutex::new(Inner {
            updates: VecDeque::new(),
            calls: Vec::new(),
            failures: HashMap::new(),
            windows: Vec::new(),
            accepted_token: None,
            texts: HashMap::new(),
            files: HashMap::new(),
            uploads: Vec::new(),
            webhook: None,
            deliver_to: None,
            posts: Vec::new(),
        }),
        changed: Notify::new(),
        next_update_id: AtomicI64::new(1),
        next_incoming_id: AtomicI64::new(1),
        next_sent_id: AtomicI64::new(FIRST_SENT_ID),
        next_file: AtomicI64::new(1),
        closed: CancellationToken::new(),
    });
    let app = Router::new()
        .route("/{bot}/{method}", post(handle))
        .route("/file/{bot}/{*path}", get(media::download))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind fake telegram");
    let addr = listener.local_addr().expect("fake telegram address");
    tokio::spawn(webhook::deliver(shared.clone()));
    let closed = shared.closed.clone();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { closed.cancelled().await })
            .await
            .expect("fake telegram server");
    });
    FakeTelegram { addr, shared, task }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.shared.closed.cancel();
        self.task.abort();
    }
}

impl FakeTelegram {
    /// `http://127.0.0.1:PORT` (no trailing slash): the value for `BUB_TELEGRAM_API_BASE`.
    pub fn api_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a raw update; an `update_id` is assigned when missing. Returns the update id.
    pub fn push_update(&self, mut update: Value) -> i64 {
        let id = match update.get("update_id").and_then(Value::as_i64) {
            Some(id) => {
                self.shared
                    .next_update_id
                    .fetch_max(id + 1, Ordering::SeqCst);
                id
            }
            None => {
                let id = self.shared.next_update_id.fetch_add(1, Ordering::SeqCst);
                update["update_id"] = json!(id);
                id
            }
        };
        self.shared.state.lock().unwrap().updates.push_back(update);
        self.shared.changed.notify_waiters();
        id
    }

    /// Queues a `message` update (a [`TgMessage`] or raw message JSON); a `message_id` is
    /// assigned when missing. Returns the message id.
    pub fn push_message(&self, message: impl Into<Value>) -> i64 {
        self.queue_message(message.into()).0
    }

    /// [`Self::push_message`], returning the update id instead (for
    /// [`Self::wait_for_confirmed`]).
    pub fn push_message_update(&self, message: impl Into<Value>) -> i64 {
        self.queue_message(message.into()).1
    }

    /// Queues a `message` update; returns the message id and the update id.
    fn queue_message(&self, mut message: Value) -> (i64, i64) {
        let id = match message.get("message_id").and_then(Value::as_i64) {
            Some(id) => id,
            None => {
                let id = self.shared.next_incoming_id.fetch_add(1, Ordering::SeqCst);
                message["message_id"] = json!(id);
                id
            }
        };
        (id, self.push_update(json!({"message": message})))
    }

    /// Updates not yet confirmed by a `getUpdates` offset.
    pub fn pending_updates(&self) -> usize {
        self.shared.state.lock().unwrap().updates.len()
    }

    /// The next call of `method` (case-insensitive) is answered with `status` and `body`
    /// instead (e.g. [`retry_after_body`], [`cant_parse_entities_body`]). Failures queue up.
    pub fn fail_next(&self, method: &str, status: u16, body: Value) {
        let mut state = self.shared.state.lock().unwrap();
        state
            .failures
            .entry(method.to_ascii_lowercase())
            .or_default()
            .push_back((status, body));
    }

    /// For `duration` from now, every call of `method` (case-insensitive) is answered with
    /// `status` and Telegram's error body (`{"ok":false,"error_code":status,...}`). Calls
    /// [`Self::fail_next`] queued are answered first; of overlapping windows the one added
    /// first applies.
    pub fn fail_for(&self, method: &str, status: u16, duration: Duration) {
        self.add_window(method, duration, Fault::Status(status), 0);
    }

    /// For `duration` from now, calls of `method` are recorded and never answered (held until
    /// the client gives up or the fake is dropped): a network timeout. A stalled `sendMessage`
    /// delivers nothing.
    pub fn stall_for(&self, method: &str, duration: Duration) {
        self.add_window(method, duration, Fault::Stall, 0);
    }

    /// The next `n` calls of `method` (case-insensitive) are answered as usual, the ones
    /// after them never (as [`Self::stall_for`], for as long as the fake runs): a platform that
    /// stops answering in the middle of a long answer.
    pub fn stall_after(&self, method: &str, n: usize) {
        self.add_window(method, Duration::from_secs(3600), Fault::Stall, n);
    }

    fn add_window(&self, method: &str, duration: Duration, fault: Fault, spared: usize) {
        self.shared.state.lock().unwrap().windows.push(Window {
            method: method.to_ascii_lowercase(),
            until: Instant::now() + duration,
            fault,
            spared,
        });
    }

    /// Only this token is accepted; any other gets 401 `Unauthorized` (as Telegram does).
    pub fn accept_only_token(&self, token: &str) {
        self.shared.state.lock().unwrap().accepted_token = Some(token.to_owned());
    }

    /// Registers a downloadable file: `getFile` with `file_id` answers its `file_path`
    /// (returned, `files/<n>/<file_id>`) and its size, and `GET /file/bot<token>/<file_path>`
    /// serves `bytes`. Adding the same `file_id` again replaces the file (new path).
    pub fn add_file(&self, file_id: &str, bytes: Vec<u8>) -> String {
        let size = bytes.len() as u64;
        media::store_file(&self.shared, file_id, bytes.into(), size)
    }

    /// [`Self::add_file`], but `getFile` reports `reported_size` as the `file_size` (a lie:
    /// the download still serves `bytes`).
    pub fn add_file_reporting_size(
        &self,
        file_id: &str,
        bytes: Vec<u8>,
        reported_size: u64,
    ) -> String {
        media::store_file(&self.shared, file_id, bytes.into(), reported_size)
    }

    /// The files uploaded by `sendPhoto` / `sendDocument` / `sendVoice` / `sendAudio` calls
    /// answered with success, oldest first: `(method lowercase, bytes)`.
    pub fn uploads(&self) -> Vec<(String, Vec<u8>)> {
        let state = self.shared.state.lock().unwrap();
        state
            .uploads
            .iter()
            .map(|(method, bytes)| (method.clone(), bytes.to_vec()))
            .collect()
    }

    /// The current text of a message the bot sent (after its successful edits).
    pub fn current_text(&self, message_id: i64) -> Option<String> {
        self.shared
            .state
            .lock()
            .unwrap()
            .texts
            .get(&message_id)
            .cloned()
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.state.lock().unwrap().calls.clone()
    }

    /// The calls of `method` (case-insensitive), oldest first.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        let method = method.to_ascii_lowercase();
        let state = self.shared.state.lock().unwrap();
        state
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// The `sendMessage` calls answered with success (what reached the chats), oldest first.
    pub fn delivered(&self) -> Vec<Call> {
        let mut calls = self.calls_of("sendMessage");
        calls.retain(|c| !c.failed);
        calls
    }

    /// How many `sendMessage` calls arrived (cheap, for polling long runs).
    pub fn sent_count(&self) -> usize {
        let state = self.shared.state.lock().unwrap();
        state
            .calls
            .iter()
            .filter(|c| c.method == "sendmessage")
            .count()
    }

    /// The bodies of all `sendMessage` calls, oldest first.
    pub fn sent_messages(&self) -> Vec<Value> {
        self.calls_of("sendmessage")
            .into_iter()
            .map(|c| c.body)
            .collect()
    }

    /// Whether the client dropped pending updates: `deleteWebhook` with
    /// `drop_pending_updates`, or a `getUpdates` call with a negative offset.
    pub fn dropped_pending_updates(&self) -> bool {
        if self
            .calls_of("deleteWebhook")
            .iter()
            .any(|c| c.body["drop_pending_updates"] == true)
        {
            return true;
        }
        self.calls_of("getupdates")
            .iter()
            .any(|c| c.body.get("offset").and_then(Value::as_i64).unwrap_or(0) < 0)
    }

    /// Waits until at least `n` calls of `method` arrived and returns them all; panics after
    /// `timeout`.
    pub async fn wait_for_calls(&self, method: &str, n: usize, timeout: Duration) -> Vec<Call> {
        self.wait_until(timeout, &format!("{n} {method} call(s)"), |fake| {
            let calls = fake.calls_of(method);
            (calls.len() >= n).then_some(calls)
        })
        .await
    }

    /// Waits until a `getUpdates` call asks for an offset above `update_id`, i.e. the client
    /// has received (and confirmed) that update. Panics after `timeout`.
    pub async fn wait_for_confirmed(&self, update_id: i64, timeout: Duration) {
        self.wait_until(timeout, &format!("offset > {update_id}"), |fake| {
            fake.calls_of("getupdates")
                .iter()
                .any(|c| c.body.get("offset").and_then(Value::as_i64).unwrap_or(0) > update_id)
                .then_some(())
        })
        .await
    }

    /// Polls `check` on every change until it returns `Some`; panics after `timeout`.
    pub async fn wait_until<T>(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&Self) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(value) = check(self) {
                return value;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let seen: Vec<String> = self.calls().iter().map(|c| c.method.clone()).collect();
                panic!("fake telegram: no {what} within {timeout:?}; calls: {seen:?}");
            }
        }
    }
}

/// Telegram's 429 body: teloxide turns it into `RequestError::RetryAfter(secs)`.
pub fn retry_after_body(secs: u64) -> Value {
    json!({"ok": false, "error_code": 429,
        "description": format!("Too Many Requests: retry after {secs}"),
        "parameters": {"retry_after": secs}})
}

/// Telegram's 400 body for bad HTML/Markdown entities.
pub fn cant_parse_entities_body() -> Value {
    json!({"ok": false, "error_code": 400,
        "description": "Bad Request: can't parse entities: Unsupported start tag \"foo\" at byte offset 0"})
}

/// Telegram's 400 body for an unknown chat.
pub fn chat_not_found_body() -> Value {
    json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"})
}

/// Telegram's 400 body for an edit that changes nothing.
pub fn message_not_modified_body() -> Value {
    json!({"ok": false, "error_code": 400,
        "description": "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"})
}

/// Telegram's 400 body for `getFile` with an unknown `file_id`.
pub fn invalid_file_id_body() -> Value {
    json!({"ok": false, "error_code": 400, "description": "Bad Request: invalid file_id"})
}

/// Telegram's error body for a fault window.
fn window_body(fault: Fault) -> Value {
    let status = match fault {
        Fault::Status(status) => status,
        Fault::Stall => 504,
    };
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    json!({"ok": false, "error_code": status, "description": reason})
}

fn ok(result: Value) -> Response {
    axum::Json(json!({"ok": true, "result": result})).into_response()
}

fn error(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, axum::Json(body)).into_response()
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let method = method.to_ascii_lowercase();
    let token = bot.strip_prefix("bot").unwrap_or(&bot).to_owned();
    let (body, upload) = match wire::boundary(&headers) {
        Some(boundary) => match media::form_body(&method, &body, &boundary) {
            Ok(form) => form,
            Err(e) => (Value::String(e), None),
        },
        None => (json_body(&body), None),
    };
    let recorded = record(&shared, &method, &token, &body);
    if let Some(response) = injected_response(&shared, recorded.injected).await {
        return response;
    }
    let response = answer(&shared, &method, &body, upload).await;
    if !response.status().is_success() {
        mark_failed(&shared, recorded.index);
    }
    response
}

/// A request body as JSON: `{}` when empty, a JSON string with the raw text when not JSON.
fn json_body(body: &Bytes) -> Value {
    if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    }
}

/// Where a call went in the record, and the fault injected into it.
struct Recorded {
    index: usize,
    injected: Option<(Fault, Value)>,
}

/// Records a call and picks its injected fault: a rejected token, then [`FakeTelegram::fail_next`],
/// then a [`FakeTelegram::fail_for`] / [`FakeTelegram::stall_for`] window.
fn record(shared: &Shared, method: &str, token: &str, body: &Value) -> Recorded {
    let recorded = {
        let mut state = shared.state.lock().unwrap();
        let now = Instant::now();
        state.windows.retain(|w| w.until > now);
        let rejected = state.accepted_token.as_ref().is_some_and(|t| t != token);
        let injected = if rejected {
            let body = json!({"ok": false, "error_code": 401, "description": "Unauthorized"});
            Some((Fault::Status(401), body))
        } else if let Some((status, body)) =
            state.failures.get_mut(method).and_then(VecDeque::pop_front)
        {
            Some((Fault::Status(status), body))
        } else {
            let window = state.windows.iter_mut().find(|w| w.method == method);
            match window {
                Some(w) if w.spared > 0 => {
                    w.spared -= 1;
                    None
                }
                w => w.map(|w| (w.fault, window_body(w.fault))),
            }
        };
        state.calls.push(Call {
            method: method.to_owned(),
            token: token.to_owned(),
            body: body.clone(),
            at: now,
            failed: injected.is_some(),
        });
        Recorded {
            index: state.calls.len() - 1,
            injected,
        }
    };
    shared.changed.notify_waiters();
    recorded
}

/// The answer to an injected fault (a stall holds until the client gives up or the fake
/// stops); `None` when there is none.
async fn injected_response(shared: &Shared, injected: Option<(Fault, Value)>) -> Option<Response> {
    match injected? {
        (Fault::Status(status), body) => Some(error(status, body)),
        (Fault::Stall, body) => {
            // Held until the client gives up (hyper then drops this future) or the fake stops.
            shared.closed.cancelled().await;
            Some(error(504, body))
        }
    }
}

/// Marks a recorded call as not answered with success.
fn mark_failed(shared: &Shared, index: usize) {
    if let Some(call) = shared.state.lock().unwrap().calls.get_mut(index) {
        call.failed = true;
    }
    shared.changed.notify_waiters();
}

/// The answer to a call of `method` that no fault was injected into.
async fn answer(
    shared: &Shared,
    method: &str,
    body: &Value,
    upload: Option<wire::Part>,
) -> Response {
    match method {
        "getme" => ok(json!({"id": BOT_ID, "is_bot": true, "first_name": "Bub",
            "username": BOT_USERNAME, "can_join_groups": true,
            "can_read_all_group_messages": false, "supports_inline_queries": false,
            "can_connect_to_business": false, "has_main_web_app": false})),
        "getwebhookinfo" => {
            let pending = shared.state.lock().unwrap().updates.len();
            ok(json!({"url": "", "has_custom_certificate": false, "pending_update_count": pending}))
        }
        "getupdates" if shared.state.lock().unwrap().webhook.is_some() => webhook::conflict(),
        "getupdates" => ok(get_updates(shared, body).await),
        "setwebhook" => webhook::set(shared, body),
        "sendmessage" => {
            let id = shared.next_sent_id.fetch_add(1, Ordering::SeqCst);
            let message = sent_message(id, body);
            let text = message["text"].as_str().unwrap_or_default().to_owned();
            shared.state.lock().unwrap().texts.insert(id, text);
            ok(message)
        }
        "editmessagetext" => edit_message_text(shared, body),
        "getfile" => media::get_file(shared, body),
        "sendphoto" | "senddocument" | "sendvoice" | "sendaudio" => {
            media::send_media(shared, method, body, upload)
        }
        "deletewebhook" => webhook::delete(shared, body),
        "sendchataction" | "setmycommands" | "deletemessage" | "setmessagereaction" => {
            ok(json!(true))
        }
        _ => error(
            404,
            json!({"ok": false, "error_code": 404,
                "description": format!("Not Found: method {method} is not faked")}),
        ),
    }
}

/// `editMessageText`: the edited `Message` (with `edit_date`), or 400 "message is not
/// modified" when the text equals the message's current text.
fn edit_message_text(shared: &Shared, body: &Value) -> Response {
    let id = body.get("message_id").and_then(Value::as_i64).unwrap_or(0);
    let text = body.get("text").and_then(Value::as_str).unwrap_or_default();
    {
        let mut state = shared.state.lock().unwrap();
        if state.texts.get(&id).is_some_and(|current| current == text) {
            return error(400, message_not_modified_body());
        }
        state.texts.insert(id, text.to_owned());
    }
    let mut message = sent_message(id, body);
    message["edit_date"] = json!(EDIT_DATE);
    ok(message)
}

/// Long poll: confirm `offset`, return up to `limit` updates, or wait for a push.
async fn get_updates(shared: &Shared, body: &Value) -> Value {
    let offset = body.get("offset").and_then(Value::as_i64).unwrap_or(0);
    let limit = body
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(100, |l| l.clamp(1, 100)) as usize;
    let timeout = body.get("timeout").and_then(Value::as_u64).unwrap_or(0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout).min(MAX_POLL_HOLD);
    loop {
        let changed = shared.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        {
            let mut state = shared.state.lock().unwrap();
            let updates = &mut state.updates;
            if offset < 0 {
                let keep = offset.unsigned_abs() as usize;
                while updates.len() > keep {
                    updates.pop_front();
                }
            } else {
                while updates
                    .front()
                    .is_some_and(|u| u["update_id"].as_i64().unwrap_or(0) < offset)
                {
                    updates.pop_front();
                }
            }
            if !updates.is_empty() || timeout == 0 {
                return Value::Array(updates.iter().take(limit).cloned().collect());
            }
        }
        tokio::select! {
            _ = &mut changed => {}
            _ = tokio::time::sleep_until(deadline) => return json!([]),
            _ = shared.closed.cancelled() => return json!([]),
        }
    }
}

/// The full `Message` Telegram returns for a sent or edited message.
fn sent_message(message_id: i64, body: &Value) -> Value {
    let chat = match body.get("chat_id") {
        Some(Value::Number(n)) => {
            let id = n.as_i64().unwrap_or(0);
            if id > 0 {
                json!({"id": id, "type": "private", "first_name": format!("User{id}")})
            } else {
                json!({"id": id, "type": "supergroup", "title": "Test group"})
            }
        }
        Some(Value::String(name)) => {
            json!({"id": -1001, "type": "channel", "title": name, "username": name.trim_start_matches('@')})
        }
        _ => json!({"id": 0, "type": "private", "first_name": "Nobody"}),
    };
    json!({"message_id": message_id, "date": 1700000100, "chat": chat, "from": bot_user(),
        "text": body.get("text").cloned().unwrap_or(json!(""))})
}
