//! A fake OpenAI-compatible chat-completions server for tests: an axum app on `127.0.0.1:0`
//! that answers from a FIFO script of replies and records every request.
//!
//! ```ignore
//! let fake = fake_openai::start().await;
//! fake.push_tool_calls(&[("fs_read", json!({"path": "a.txt"}))]); // id "call_1"
//! fake.push_text("done");
//! // ... point the client / the `bub` binary at fake.base_url() ...
//! let reqs = fake.wait_for_requests(2, Duration::from_secs(5)).await;
//! ```
//!
//! A request with `"stream": true` gets the same scripted reply as SSE (text in several
//! `delta.content` pieces, tool calls as fragments with the arguments split in two, a usage chunk
//! with `choices: []` when `stream_options.include_usage` is set, then `data: [DONE]`), each event
//! written in several pieces split mid-line; [`StreamStyle`] adds `\r\n` and keep-alives. When the
//! script is empty the answer is the text [`DEFAULT_REPLY`]. The server runs on the test's tokio
//! runtime: tests that run the `bub` binary as a subprocess need
//! `#[tokio::test(flavor = "multi_thread")]` so it keeps serving while the test waits.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The text served when the script is empty.
pub const DEFAULT_REPLY: &str = "(fake: no scripted reply)";

/// The `usage` object of every reply.
pub fn usage() -> Value {
    json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The JSON body (a JSON string holding the raw text when the body was not JSON).
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// All headers, names lowercase.
    pub headers: Vec<(String, String)>,
}

impl RecordedRequest {
    /// The value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How streamed replies are written.
#[derive(Debug, Clone)]
pub struct StreamStyle {
    /// End lines with `\r\n` instead of `\n`.
    pub crlf: bool,
    /// Send `: keep-alive` comment events before and between data events.
    pub keep_alive: bool,
    /// Each event is written in this many pieces (split mid-line; 1 = whole events).
    pub pieces_per_event: usize,
    /// Pause between pieces, so they reach the client in separate TCP reads.
    pub pause: Duration,
}

impl Default for StreamStyle {
    fn default() -> Self {
        Self {
            crlf: false,
            keep_alive: false,
            pieces_per_event: 2,
            pause: Duration::from_millis(1),
        }
    }
}

/// A scripted reply.
#[derive(Debug, Clone)]
enum Reply {
    /// Text and/or tool calls `(id, name, args)`.
    Message {
        text: Option<String>,
        calls: Vec<(String, String, Value)>,
    },
    /// Served verbatim, streaming or not.
    Raw {
        status: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
}

#[derive(Debug)]
enum Step {
    Delay(Duration),
    Reply(Reply),
}

struct Shared {
    script: Mutex<VecDeque<Step>>,
    recorded: Mutex<Vec<RecordedRequest>>,
    arrived: Notify,
    next_call_id: AtomicU64,
    style: Mutex<StreamStyle>,
    latency: Mutex<Duration>,
}

/// A running fake server; it stops when dropped.
pub struct FakeOpenAi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// Starts a fake on an ephemeral port of 127.0.0.1.
pub async fn start() -> FakeOpenAi {
    let shared = Arc::new(Shared {
        script: Mutex::new(VecDeque::new()),
        recorded: Mutex::new(Vec::new()),
        arrived: Notify::new(),
        next_call_id: AtomicU64::new(1),
        style: Mutex::new(StreamStyle::default()),
        latency: Mutex::new(Duration::ZERO),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .fallback(unknown_route)
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind fake openai");
    let addr = listener.local_addr().expect("fake openai address");
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .await
            .expect("fake openai server");
    });
    FakeOpenAi { addr, shared, task }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeOpenAi {
    /// `http://127.0.0.1:PORT/v1` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a plain text answer.
    pub fn push_text(&self, text: impl Into<String>) {
        self.push(Step::Reply(Reply::Message {
            text: Some(text.into()),
            calls: Vec::new(),
        }));
    }

    /// Queues an answer with tool calls `(name, args)`; returns their ids (`call_1`, `call_2`, …,
    /// unique per server).
    pub fn push_tool_calls(&self, calls: &[(&str, Value)]) -> Vec<String> {
        self.push_message(None, calls)
    }

    /// Queues an answer carrying both text and tool calls; returns the call ids.
    pub fn push_text_and_tool_calls(&self, text: &str, calls: &[(&str, Value)]) -> Vec<String> {
        self.push_message(Some(text.to_owned()), calls)
    }

    /// Queues a verbatim response (errors, 429 with `Retry-After`, malformed JSON, hand-written
    /// SSE). `Content-Type` defaults to `application/json`.
    pub fn push_raw(&self, status: u16, body: String, headers: Vec<(String, String)>) {
        self.push(Step::Reply(Reply::Raw {
            status,
            body,
            headers,
        }));
    }

    /// Delays the next reply by `delay` (after the request is recorded). Delays add up.
    pub fn push_delay(&self, delay: Duration) {
        self.push(Step::Delay(delay));
    }

    /// Delays every reply by `latency` (in addition to scripted delays).
    pub fn set_latency(&self, latency: Duration) {
        *self.shared.latency.lock().unwrap() = latency;
    }

    /// Changes how streamed replies are written.
    pub fn set_stream_style(&self, style: StreamStyle) {
        *self.shared.style.lock().unwrap() = style;
    }

    /// Scripted steps not yet consumed.
    pub fn pending_replies(&self) -> usize {
        self.shared.script.lock().unwrap().len()
    }

    /// The JSON bodies received so far, oldest first.
    pub fn requests(&self) -> Vec<Value> {
        self.recorded().into_iter().map(|r| r.body).collect()
    }

    /// The JSON bodies of the requests after the first `skip` (cheap polling of long runs).
    pub fn requests_since(&self, skip: usize) -> Vec<Value> {
        let recorded = self.shared.recorded.lock().unwrap();
        recorded.iter().skip(skip).map(|r| r.body.clone()).collect()
    }

    /// Everything received so far, oldest first.
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        self.shared.recorded.lock().unwrap().clone()
    }

    /// How many requests arrived so far.
    pub fn request_count(&self) -> usize {
        self.shared.recorded.lock().unwrap().len()
    }

    /// Waits until at least `n` requests arrived and returns them all; panics after `timeout`.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let recorded = self.shared.recorded.lock().unwrap();
                if recorded.len() >= n {
                    return recorded.clone();
                }
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                let got = self.request_count();
                panic!("fake openai: expected {n} request(s) within {timeout:?}, got {got}");
            }
        }
    }

    fn push_message(&self, text: Option<String>, calls: &[(&str, Value)]) -> Vec<String> {
        let calls: Vec<(String, String, Value)> = calls
            .iter()
            .map(|(name, args)| {
                let n = self.shared.next_call_id.fetch_add(1, Ordering::SeqCst);
                (format!("call_{n}"), (*name).to_owned(), args.clone())
            })
            .collect();
        let ids = calls.iter().map(|(id, _, _)| id.clone()).collect();
        self.push(Step::Reply(Reply::Message { text, calls }));
        ids
    }

    fn push(&self, step: Step) {
        self.shared.script.lock().unwrap().push_back(step);
    }
}

impl Shared {
    fn record(&self, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Value {
        let json = serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
        let header_list: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let authorization = headers
            .get(header::AUTHORIZATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        self.recorded.lock().unwrap().push(RecordedRequest {
            path: uri.path().to_owned(),
            body: json.clone(),
            authorization,
            headers: header_list,
        });
        self.arrived.notify_waiters();
        json
    }

    /// Pops leading delays and the next reply (the default text when the script runs out).
    fn next_reply(&self) -> (Duration, Reply) {
        let mut script = self.script.lock().unwrap();
        let mut delay = *self.latency.lock().unwrap();
        loop {
            match script.pop_front() {
                Some(Step::Delay(d)) => delay += d,
                Some(Step::Reply(reply)) => return (delay, reply),
                None => {
                    let text = Some(DEFAULT_REPLY.to_owned());
                    return (
                        delay,
                        Reply::Message {
                            text,
                            calls: Vec::new(),
                        },
                    );
                }
            }
        }
    }
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = shared.record(&uri, &headers, &body);
    let (delay, reply) = shared.next_reply();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake")
        .to_owned();
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let include_usage =
        request.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
    match reply {
        Reply::Raw {
            status,
            body,
            headers,
        } => raw_response(status, body, headers),
        Reply::Message { text, calls } if stream => {
            let style = shared.style.lock().unwrap().clone();
            let events = sse_events(&model, text.as_deref(), &calls, include_usage);
            sse_response(events, style)
        }
        Reply::Message { text, calls } => {
            let body = completion(&model, text.as_deref(), &calls);
            raw_response(200, body.to_string(), Vec::new())
        }
    }
}

async fn unknown_route(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.record(&uri, &headers, &body);
    let body = json!({"error": {"message": format!("fake openai: no route for {}", uri.path()), "type": "invalid_request_error"}});
    raw_response(404, body.to_string(), Vec::new())
}

fn raw_response(status: u16, body: String, headers: Vec<(String, String)>) -> Response {
    let mut builder =
        Response::builder().status(StatusCode::from_u16(status).expect("valid status"));
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        builder = builder.header(header::CONTENT_TYPE, "application/json");
    }
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    builder
        .body(Body::from(body))
        .expect("fake openai response")
}

/// The assistant message for text and/or calls.
fn message(text: Option<&str>, calls: &[(String, String, Value)]) -> Value {
    let mut msg = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
            })
            .collect();
        msg["tool_calls"] = Value::Array(calls);
    }
    msg
}

fn finish_reason(calls: &[(String, String, Value)]) -> &'static str {
    if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

/// A non-streamed `chat.completion`.
fn completion(model: &str, text: Option<&str>, calls: &[(String, String, Value)]) -> Value {
    json!({
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "finish_reason": finish_reason(calls), "message": message(text, calls)}],
        "usage": usage(),
    })
}

/// The `data:` payloads of a streamed reply, `[DONE]` included.
fn sse_events(
    model: &str,
    text: Option<&str>,
    calls: &[(String, String, Value)],
    include_usage: bool,
) -> Vec<String> {
    let chunk = |choices: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000,
               "model": model, "choices": choices})
    };
    let delta = |delta: Value, finish: Value| {
        chunk(json!([{"index": 0, "delta": delta, "finish_reason": finish}]))
    };
    let mut events = vec![delta(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for piece in split_chars(text.unwrap_or(""), 3) {
        events.push(delta(json!({"content": piece}), Value::Null));
    }
    for (index, (id, name, args)) in calls.iter().enumerate() {
        let first = json!({"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}});
        events.push(delta(json!({"tool_calls": [first]}), Value::Null));
        for piece in split_chars(&args.to_string(), 2) {
            let frag = json!({"index": index, "function": {"arguments": piece}});
            events.push(delta(json!({"tool_calls": [frag]}), Value::Null));
        }
    }
    events.push(delta(json!({}), json!(finish_reason(calls))));
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage();
        events.push(last);
    }
    let mut out: Vec<String> = events.iter().map(Value::to_string).collect();
    out.push("[DONE]".to_owned());
    out
}

/// `s` cut into at most `n` non-empty pieces of about equal length (in characters).
fn split_chars(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(n.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Writes `data` payloads as SSE, each event in `pieces_per_event` byte pieces.
fn sse_response(data: Vec<String>, style: StreamStyle) -> Response {
    let nl = if style.crlf { "\r\n" } else { "\n" };
    let mut events = Vec::new();
    for (i, d) in data.iter().enumerate() {
        if style.keep_alive && i % 2 == 0 {
            events.push(format!(": keep-alive{nl}{nl}"));
        }
        events.push(format!("data: {d}{nl}{nl}"));
    }
    let mut pieces: Vec<Bytes> = Vec::new();
    for event in events {
        let bytes = event.into_bytes();
        let size = bytes.len().div_ceil(style.pieces_per_event.max(1));
        pieces.extend(bytes.chunks(size).map(Bytes::copy_from_slice));
    }
    let pause = style.pause;
    let stream = futures_util::stream::unfold(
        (pieces.into_iter(), true),
        move |(mut rest, first)| async move {
            let piece = rest.next()?;
            if !first && !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            Some((Ok::<_, Infallible>(piece), (rest, false)))
        },
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("fake openai stream")
}
