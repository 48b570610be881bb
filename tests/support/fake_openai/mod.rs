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
//! script is empty the answer is the text [`DEFAULT_REPLY`], or what the responder set with
//! [`FakeOpenAi::set_responder`] / [`FakeOpenAi::echo_tokens`] makes of the request.
//! [`FakeOpenAi::go_down`] closes the port (connections are refused) and
//! [`FakeOpenAi::come_up`] opens it again, same address. [`FakeOpenAi::hold`] keeps every chat
//! request (recorded) unanswered until [`FakeOpenAi::release`]: a model as slow as a test needs. The server runs on the test's tokio
//! runtime: tests that run the `bub` binary as a subprocess need
//! `#[tokio::test(flavor = "multi_thread")]` so it keeps serving while the test waits.
//!
//! Transcription (`POST <base_url>/audio/transcriptions`, multipart with a `file` part and a
//! `model` field, maybe `language`, `response_format`, `prompt`):
//!
//! ```ignore
//! fake.push_transcript("hello there");                  // answered {"text": "hello there"}
//! fake.push_transcription_error(429, r#"{"error":{"message":"slow down"}}"#.into());
//! let t = fake.wait_for_transcriptions(1, WAIT).await;   // model, filename, size, ...
//! ```
//!
//! Each request is recorded as a [`Transcription`] (not among the chat requests of
//! [`FakeOpenAi::requests`]) and answered from its own FIFO: `{"text": ...}` (the bare text for
//! `response_format=text`), or the queued error; an empty queue answers 500 `{"error":
//! {"message": "no transcript queued"}}`, a request without `file` or `model` 400 (neither
//! consumes the queue).
//!
//! Vision: chat requests whose `content` is an array of parts are recorded and answered like
//! any other ([`last_user_text`] joins their text parts, [`image_urls`] lists their images).
//! [`FakeOpenAi::reject_images`] makes the server answer a request carrying an `image_url`
//! part with 400 `Invalid content type. image_url is only supported by certain models.` — a
//! text-only model — without consuming the script.
//!
//! Holding a reply: [`FakeOpenAi::push_hold`] makes the next reply wait until the test releases
//! it (a turn kept in its model call for as long as the test needs); [`FakeOpenAi::max_in_flight`]
//! says how many requests were ever being answered at once.
//!
//! Several models: every request is recorded with its `model`; [`FakeOpenAi::fail_model`] makes
//! the server answer each request naming one model with an error status (recorded, the script
//! not consumed) until [`FakeOpenAi::heal_model`] — a provider down for that model only.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Uri, header};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::wire::{self, Recorder, json_response as raw_response};

mod body;
use body::{completion, cut_at, sse_events};
// The benches mount `support` too and use only some of these.
pub use super::wire::{RecordedRequest, StreamStyle};
#[allow(unused_imports)]
pub use body::{image_urls, last_user_text, tokens, tool_names};

/// The text served when the script is empty.
pub const DEFAULT_REPLY: &str = "(fake: no scripted reply)";
/// The largest request body accepted (audio uploads: OpenAI takes up to 25 MB).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// The `usage` object of a reply, counted as OpenAI would, roughly: `prompt_tokens` are the
/// request body's bytes / 4; `cached_tokens` the bytes the request's tools and messages
/// (serialized, in that order) share as a prefix with the previous request's, / 4, rounded
/// down to 128-token blocks (OpenAI's cache granularity); `completion_tokens` the answer's
/// bytes (text and tool calls) / 4, at least 1.
pub fn usage(body_bytes: usize, shared_prefix_bytes: usize, answer_bytes: usize) -> Value {
    let prompt = body_bytes / 4;
    let cached = (shared_prefix_bytes / 4 / 128 * 128).min(prompt);
    let completion = (answer_bytes / 4).max(1);
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt + completion,
           "prompt_tokens_details": {"cached_tokens": cached}})
}

/// The tools then the messages of a request, serialized: what a prompt cache can reuse.
fn cacheable(request: &Value) -> Vec<u8> {
    let mut bytes = request
        .get("tools")
        .map(Value::to_string)
        .unwrap_or_default();
    bytes.push_str(
        &request
            .get("messages")
            .map(Value::to_string)
            .unwrap_or_default(),
    );
    bytes.into_bytes()
}

/// One `POST /audio/transcriptions` request the fake received.
#[derive(Debug, Clone)]
pub struct Transcription {
    /// The `model` field (empty when missing).
    pub model: String,
    /// The `filename` of the `file` part (empty when missing).
    pub filename: String,
    /// The size of the `file` part in bytes.
    pub size: usize,
    /// The `file` part's `Content-Type`, if it had one.
    pub content_type: Option<String>,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The other text fields (`language`, `response_format`, `prompt`, ...), in order.
    pub fields: Vec<(String, String)>,
}

impl Transcription {
    /// The value of another text field (`language`, `response_format`, ...).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A queued answer to a transcription request.
#[derive(Debug, Clone)]
enum TranscriptReply {
    Text(String),
    Error { status: u16, body: String },
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
    Hold(Hold),
    Reply(Reply),
}

/// A reply held back until [`Hold::release`] ([`FakeOpenAi::push_hold`]).
#[derive(Debug, Clone)]
pub struct Hold(Arc<tokio::sync::Semaphore>);

impl Hold {
    /// Lets the held reply go.
    pub fn release(&self) {
        self.0.add_permits(1);
    }
}

struct Shared {
    script: Mutex<VecDeque<Step>>,
    /// Scripts of their own for the requests whose messages contain a text ([`FakeOpenAi::lane`]).
    lanes: Mutex<Vec<(String, VecDeque<Step>)>>,
    recorder: Recorder,
    next_call_id: AtomicU64,
    style: Mutex<StreamStyle>,
    latency: Mutex<Duration>,
    responder: Mutex<Option<Responder>>,
    transcripts: Mutex<VecDeque<TranscriptReply>>,
    transcriptions: Mutex<Vec<Transcription>>,
    reject_images: AtomicBool,
    /// Models answered with an error: model → (status, message).
    failing: Mutex<std::collections::HashMap<String, (u16, String)>>,
    /// The previous chat request's [`cacheable`] bytes.
    previous: Mutex<Vec<u8>>,
    /// The `usage` object of every reply, in order.
    usages: Mutex<Vec<Value>>,
    /// Chat requests being answered now, and the most at once so far.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Chat requests wait (recorded) while this is `true`.
    held: tokio::sync::watch::Sender<bool>,
}

/// Makes the text of the answer to a request when the script is empty.
type Responder = Arc<dyn Fn(&Value) -> String + Send + Sync>;

/// The serving task and the token that stops it gracefully.
struct Server {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// A running fake server; it stops when dropped.
pub struct FakeOpenAi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Mutex<Option<Server>>,
}

/// The function names a recorded request offered the model (`fs_read`, `mcp_call`).
pub fn offered_functions(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// The contents of a recorded request's `tool` messages: the tool results the model was shown.
pub fn tool_results(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Starts a fake on an ephemeral port of 127.0.0.1.
pub async fn start() -> FakeOpenAi {
    let shared = Arc::new(Shared {
        script: Mutex::new(VecDeque::new()),
        recorder: Recorder::default(),
        next_call_id: AtomicU64::new(1),
        style: Mutex::new(StreamStyle::default()),
        latency: Mutex::new(Duration::ZERO),
        responder: Mutex::new(None),
        lanes: Mutex::default(),
        transcripts: Mutex::new(VecDeque::new()),
        transcriptions: Mutex::new(Vec::new()),
        reject_images: AtomicBool::new(false),
        failing: Mutex::default(),
        previous: Mutex::new(Vec::new()),
        usages: Mutex::new(Vec::new()),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
        held: tokio::sync::watch::Sender::new(false),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind fake openai");
    let addr = listener.local_addr().expect("fake openai address");
    let server = serve(listener, shared.clone());
    FakeOpenAi {
        addr,
        shared,
        server: Mutex::new(Some(server)),
    }
}

fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) -> Server {
    let app = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/audio/transcriptions", post(transcriptions))
        .fallback(unknown_route)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared);
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await
            .expect("fake openai server");
    });
    Server { stop, task }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        if let Some(server) = self.server.lock().unwrap().take() {
            server.stop.cancel();
            server.task.abort();
        }
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

    /// Holds the next reply (after its request is recorded) until the returned hold is
    /// released.
    pub fn push_hold(&self) -> Hold {
        let hold = Hold(Arc::new(tokio::sync::Semaphore::new(0)));
        self.push(Step::Hold(hold.clone()));
        hold
    }

    /// The most chat requests that were being answered at the same time so far.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Delays every reply by `latency` (in addition to scripted delays).
    pub fn set_latency(&self, latency: Duration) {
        *self.shared.latency.lock().unwrap() = latency;
    }

    /// Holds chat requests from now on: each is recorded and then waits, unanswered, until
    /// [`Self::release`].
    pub fn hold(&self) {
        self.shared.held.send_replace(true);
    }

    /// Answers the held requests (and the next ones as usual).
    pub fn release(&self) {
        self.shared.held.send_replace(false);
    }

    /// Answers with `respond(request body)` whenever the script is empty (instead of
    /// [`DEFAULT_REPLY`]).
    pub fn set_responder(&self, respond: impl Fn(&Value) -> String + Send + Sync + 'static) {
        *self.shared.responder.lock().unwrap() = Some(Arc::new(respond));
    }

    /// Echo mode: whenever the script is empty, the answer lists the tokens of the request's
    /// last user message that are `prefix` followed by digits and `-` (`m12-3` for prefix
    /// `m`), space-separated, after `"answering: "` — so each answer tells which messages it
    /// answers.
    pub fn echo_tokens(&self, prefix: &str) {
        let prefix = prefix.to_owned();
        self.set_responder(move |request| {
            let tokens = tokens(&last_user_text(request), &prefix);
            format!("answering: {}", tokens.join(" "))
        });
    }

    /// Closes the port: requests in flight are finished, idle connections closed, and new
    /// connections are refused until [`Self::come_up`]. Waits (bounded) until the server
    /// has stopped.
    pub async fn go_down(&self) {
        let server = self.server.lock().unwrap().take();
        if let Some(server) = server {
            server.stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(10), server.task).await;
        }
    }

    /// Serves again on the same address after [`Self::go_down`] (retrying the bind for a
    /// moment: the port may still be held by the old listener's closing).
    pub async fn come_up(&self) {
        if self.server.lock().unwrap().is_some() {
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("fake openai: cannot bind {} again: {e}", self.addr),
            }
        };
        *self.server.lock().unwrap() = Some(serve(listener, self.shared.clone()));
    }

    /// Queues the text of the next transcription answer (`{"text": text}`).
    pub fn push_transcript(&self, text: impl Into<String>) {
        let reply = TranscriptReply::Text(text.into());
        self.shared.transcripts.lock().unwrap().push_back(reply);
    }

    /// Queues an error as the next transcription answer: `status` with `body` verbatim
    /// (`Content-Type: application/json`).
    pub fn push_transcription_error(&self, status: u16, body: String) {
        let reply = TranscriptReply::Error { status, body };
        self.shared.transcripts.lock().unwrap().push_back(reply);
    }

    /// The transcription requests so far, oldest first.
    pub fn transcriptions(&self) -> Vec<Transcription> {
        self.shared.transcriptions.lock().unwrap().clone()
    }

    /// Waits until at least `n` transcription requests arrived and returns them all; panics
    /// after `timeout`.
    pub async fn wait_for_transcriptions(&self, n: usize, timeout: Duration) -> Vec<Transcription> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.shared.recorder.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let seen = self.transcriptions();
            if seen.len() >= n {
                return seen;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!(
                    "fake openai: expected {n} transcription(s) within {timeout:?}, got {}",
                    seen.len()
                );
            }
        }
    }

    /// While on, a chat request with an `image_url` content part is answered 400 (as a
    /// text-only model does); it is still recorded and does not consume the script.
    pub fn reject_images(&self, on: bool) {
        self.shared.reject_images.store(on, Ordering::SeqCst);
    }

    /// Answers every request naming `model` with `status` and an OpenAI error body saying
    /// `message` (recorded; the script is not consumed), until [`Self::heal_model`].
    pub fn fail_model(&self, model: &str, status: u16, message: &str) {
        let failure = (status, message.to_owned());
        self.shared
            .failing
            .lock()
            .unwrap()
            .insert(model.to_owned(), failure);
    }

    /// Serves `model` again after [`Self::fail_model`].
    pub fn heal_model(&self, model: &str) {
        self.shared.failing.lock().unwrap().remove(model);
    }

    /// The `model` of every chat request, in order.
    pub fn models(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r["model"].as_str().unwrap_or_default().to_owned())
            .collect()
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
        self.shared.recorder.bodies_since(skip)
    }

    /// Everything received so far, oldest first.
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        self.shared.recorder.all()
    }

    /// The `usage` object of every reply served, in order.
    pub fn usages(&self) -> Vec<Value> {
        self.shared.usages.lock().unwrap().clone()
    }

    /// How many requests arrived so far.
    pub fn request_count(&self) -> usize {
        self.shared.recorder.count()
    }

    /// Waits until at least `n` requests arrived and returns them all; panics after `timeout`.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.shared
            .recorder
            .wait_for(n, timeout, "fake openai")
            .await
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

    /// A script of its own for the requests whose messages contain `needle` (while it has
    /// steps): concurrent turns — a subagent beside its parent — get their replies whatever
    /// order their requests come in.
    pub fn lane(&self, needle: &str) -> Lane<'_> {
        Lane {
            fake: self,
            needle: needle.to_owned(),
        }
    }
}

/// The script of the requests that contain a text ([`FakeOpenAi::lane`]).
pub struct Lane<'a> {
    fake: &'a FakeOpenAi,
    needle: String,
}

impl Lane<'_> {
    /// Queues a plain text answer in this lane.
    pub fn push_text(&self, text: impl Into<String>) {
        self.push(Step::Reply(Reply::Message {
            text: Some(text.into()),
            calls: Vec::new(),
        }));
    }

    /// Holds this lane's next reply until the returned hold is released.
    pub fn push_hold(&self) -> Hold {
        let hold = Hold(Arc::new(tokio::sync::Semaphore::new(0)));
        self.push(Step::Hold(hold.clone()));
        hold
    }

    fn push(&self, step: Step) {
        let mut lanes = self.fake.shared.lanes.lock().unwrap();
        match lanes.iter_mut().find(|(needle, _)| *needle == self.needle) {
            Some((_, steps)) => steps.push_back(step),
            None => lanes.push((self.needle.clone(), VecDeque::from([step]))),
        }
    }
}

impl Shared {
    /// The usage of the reply to `request` (its body `bytes` long) with `answer_bytes`; the
    /// request becomes the previous one.
    fn usage(&self, request: &Value, bytes: usize, answer_bytes: usize) -> Value {
        let now = cacheable(request);
        let mut previous = self.previous.lock().unwrap();
        let shared = now
            .iter()
            .zip(previous.iter())
            .take_while(|(a, b)| a == b)
            .count();
        *previous = now;
        let usage = usage(bytes, shared, answer_bytes);
        self.usages.lock().unwrap().push(usage.clone());
        usage
    }

    /// Pops leading delays and holds and the next reply (the responder's or the default text
    /// when the script runs out).
    fn next_reply(&self, request: &Value) -> (Duration, Vec<Hold>, Reply) {
        let messages = request["messages"].to_string();
        let mut lanes = self.lanes.lock().unwrap();
        let lane = lanes
            .iter_mut()
            .find(|(needle, steps)| !steps.is_empty() && messages.contains(needle.as_str()));
        let mut main = self.script.lock().unwrap();
        let script = match lane {
            Some((_, steps)) => steps,
            None => &mut *main,
        };
        let mut delay = *self.latency.lock().unwrap();
        let mut holds = Vec::new();
        loop {
            match script.pop_front() {
                Some(Step::Delay(d)) => delay += d,
                Some(Step::Hold(hold)) => holds.push(hold),
                Some(Step::Reply(reply)) => return (delay, holds, reply),
                None => {
                    let responder = self.responder.lock().unwrap().clone();
                    let text = match responder {
                        Some(respond) => respond(request),
                        None => DEFAULT_REPLY.to_owned(),
                    };
                    return (
                        delay,
                        holds,
                        Reply::Message {
                            text: Some(text),
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
    let request = shared.recorder.record(&uri, &headers, &body);
    let _answering = InFlight::start(&shared);
    let named = request.get("model").and_then(Value::as_str).unwrap_or("");
    let failure = shared.failing.lock().unwrap().get(named).cloned();
    if let Some((status, message)) = failure {
        return raw_response(status, error_body(&message), Vec::new());
    }
    // Held requests wait for `release` (or the fake's end).
    let _ = shared.held.subscribe().wait_for(|held| !held).await;
    if shared.reject_images.load(Ordering::SeqCst) && !image_urls(&request).is_empty() {
        return raw_response(400, images_rejected_body().to_string(), Vec::new());
    }
    let (delay, holds, reply) = shared.next_reply(&request);
    for hold in holds {
        hold.0.acquire().await.expect("hold").forget();
    }
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
    let (text, calls) = match reply {
        Reply::Raw {
            status,
            body,
            headers,
        } => return raw_response(status, body, headers),
        Reply::Message { text, calls } => (text, calls),
    };
    // A model stops writing at the request's limit (`max_completion_tokens` is its newer name).
    let limit = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|key| request.get(*key).and_then(Value::as_u64));
    let mut text = text;
    let cut = text.as_mut().is_some_and(|t| cut_at(t, limit));
    let answer_bytes = text.as_deref().map_or(0, str::len)
        + calls
            .iter()
            .map(|(_, name, args)| name.len() + args.to_string().len())
            .sum::<usize>();
    let usage = shared.usage(&request, body.len(), answer_bytes);
    if stream {
        let style = shared.style.lock().unwrap().clone();
        let usage = include_usage.then_some(usage);
        let events = sse_events(&model, text.as_deref(), &calls, usage, cut);
        wire::sse_response(events.into_iter().map(|d| (None, d)).collect(), style)
    } else {
        let body = completion(&model, text.as_deref(), &calls, usage, cut);
        raw_response(200, body.to_string(), Vec::new())
    }
}

/// Counts a chat request as being answered until dropped.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn start(shared: &Arc<Shared>) -> Self {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// OpenAI's 400 body for an image sent to a text-only model.
pub fn images_rejected_body() -> Value {
    json!({"error": {"message": "Invalid content type. image_url is only supported by certain models.",
        "type": "invalid_request_error", "param": "messages", "code": null}})
}

/// An OpenAI-style error body.
fn error_body(message: &str) -> String {
    json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string()
}

/// `POST /v1/audio/transcriptions`: records the request, answers the next queued transcript
/// (400 without consuming it when the form lacks `file` or `model`).
async fn transcriptions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = match wire::boundary(&headers) {
        Some(boundary) => wire::parse_multipart(&body, &boundary),
        None => Err("the request is not multipart/form-data".to_owned()),
    };
    let parts = parsed.as_deref().unwrap_or_default();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let transcription = transcription(parts, authorization);
    let response_format = transcription.field("response_format").map(str::to_owned);
    let (has_model, has_file) = (!transcription.model.is_empty(), parts.iter().any(is_audio));
    shared.transcriptions.lock().unwrap().push(transcription);
    shared.recorder.arrived.notify_waiters();
    if let Err(e) = &parsed {
        return raw_response(400, error_body(e), Vec::new());
    }
    if !has_file {
        return raw_response(400, error_body("you must provide a file"), Vec::new());
    }
    if !has_model {
        return raw_response(
            400,
            error_body("you must provide a model parameter"),
            Vec::new(),
        );
    }
    let reply = shared.transcripts.lock().unwrap().pop_front();
    match reply {
        None => raw_response(500, error_body("no transcript queued"), Vec::new()),
        Some(TranscriptReply::Error { status, body }) => raw_response(status, body, Vec::new()),
        Some(TranscriptReply::Text(text)) if response_format.as_deref() == Some("text") => {
            let plain = (
                "content-type".to_owned(),
                "text/plain; charset=utf-8".to_owned(),
            );
            raw_response(200, text, vec![plain])
        }
        Some(TranscriptReply::Text(text)) => {
            raw_response(200, json!({"text": text}).to_string(), Vec::new())
        }
    }
}

/// Whether a part is the uploaded audio (`file`, with a filename).
fn is_audio(part: &wire::Part) -> bool {
    part.name == "file" && part.is_file()
}

/// What a transcription form carried.
fn transcription(parts: &[wire::Part], authorization: Option<String>) -> Transcription {
    let file = parts.iter().find(|p| is_audio(p));
    let mut fields: Vec<(String, String)> = parts
        .iter()
        .filter(|p| !p.is_file())
        .map(|p| (p.name.clone(), p.text()))
        .collect();
    let model = fields
        .iter()
        .position(|(name, _)| name == "model")
        .map(|i| fields.remove(i).1)
        .unwrap_or_default();
    Transcription {
        model,
        filename: file.and_then(|f| f.filename.clone()).unwrap_or_default(),
        size: file.map_or(0, |f| f.data.len()),
        content_type: file.and_then(|f| f.content_type.clone()),
        authorization,
        fields,
    }
}

async fn unknown_route(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.recorder.record(&uri, &headers, &body);
    let body = json!({"error": {"message": format!("fake openai: no route for {}", uri.path()), "type": "invalid_request_error"}});
    raw_response(404, body.to_string(), Vec::new())
}
