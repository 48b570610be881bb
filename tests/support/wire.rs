//! What the fakes share about bodies on the wire: a small `multipart/form-data` parser (uploads
//! in), streamed file answers (downloads out), and for the fake model servers the request
//! [`Recorder`], JSON answers ([`json_response`]) and SSE answers ([`sse_response`], written as
//! [`StreamStyle`] says: split mid-line, `\r\n`, keep-alives).
//!
//! ```ignore
//! if let Some(boundary) = wire::boundary(&headers) {
//!     let parts = wire::parse_multipart(&body, &boundary)?;    // Vec<Part>, in order
//!     let fields = wire::text_fields(&parts);                  // {"chat_id": 42, "caption": "hi"}
//!     let file = parts.iter().find(|p| p.is_file());            // name, filename, data
//! }
//! return wire::streamed(bytes);   // 200, content-length set, written in 64 KiB chunks
//! ```
//!
//! The parser takes what reqwest writes (teloxide, serenity and model clients all use it):
//! CRLF line ends, `Content-Disposition: form-data; name="..."; filename="..."` with
//! backslash-escaped quotes, `name*=utf-8''<percent-encoded>` for names reqwest had to encode,
//! and an optional `Content-Type` per part. It needs the whole body in memory, which is what
//! the fakes have anyway.

use std::convert::Infallible;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

/// The size of the pieces [`streamed`] writes.
pub const CHUNK: usize = 64 * 1024;

/// One part of a `multipart/form-data` body.
#[derive(Clone)]
pub struct Part {
    /// The form field name (`chat_id`, `files[0]`, a teloxide attach id, ...).
    pub name: String,
    /// The `filename` parameter: set (possibly empty) for file parts, `None` for text fields.
    pub filename: Option<String>,
    /// The part's own `Content-Type`, if it has one.
    pub content_type: Option<String>,
    /// The part's bytes.
    pub data: Bytes,
}

impl fmt::Debug for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Part")
            .field("name", &self.name)
            .field("filename", &self.filename)
            .field("content_type", &self.content_type)
            .field("size", &self.data.len())
            .finish()
    }
}

impl Part {
    /// Whether this part is a file (it has a `filename`).
    pub fn is_file(&self) -> bool {
        self.filename.is_some()
    }

    /// The bytes as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }

    /// `{"field", "filename", "size", "content_type"}`: a file part as the fakes record it.
    pub fn describe(&self) -> Value {
        json!({"field": self.name, "filename": self.filename, "size": self.data.len(),
               "content_type": self.content_type})
    }
}

/// The boundary of a `multipart/form-data` request, `None` for any other content type.
pub fn boundary(headers: &HeaderMap) -> Option<String> {
    let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let (essence, params) = content_type.split_once(';')?;
    if !essence.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    header_params(params)
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("boundary"))
        .map(|(_, value)| value)
        .filter(|b| !b.is_empty())
}

/// The parts of a multipart body, in order; an error describes what is malformed.
pub fn parse_multipart(body: &Bytes, boundary: &str) -> Result<Vec<Part>, String> {
    let delimiter = format!("--{boundary}").into_bytes();
    let next_delimiter = format!("\r\n--{boundary}").into_bytes();
    let mut pos = find(body, &delimiter, 0).ok_or("no opening boundary")? + delimiter.len();
    let mut parts = Vec::new();
    loop {
        if body[pos..].starts_with(b"--") {
            return Ok(parts);
        }
        while matches!(body.get(pos), Some(b' ' | b'\t')) {
            pos += 1;
        }
        if !body[pos..].starts_with(b"\r\n") {
            return Err(format!("no CRLF after the boundary at byte {pos}"));
        }
        pos += 2;
        let (headers, data_start) = if body[pos..].starts_with(b"\r\n") {
            (&body[pos..pos], pos + 2)
        } else {
            let end = find(body, b"\r\n\r\n", pos).ok_or("unterminated part headers")?;
            (&body[pos..end], end + 4)
        };
        let data_end = find(body, &next_delimiter, data_start).ok_or("unterminated part")?;
        parts.push(part(headers, body.slice(data_start..data_end))?);
        pos = data_end + next_delimiter.len();
    }
}

/// The text fields of a form as a JSON object, in order. A value that reads as a JSON number,
/// boolean, object or array becomes that (`"42"` → `42`, `{"message_id":5}` → an object);
/// anything else stays a string. File parts are left out.
pub fn text_fields(parts: &[Part]) -> Map<String, Value> {
    parts
        .iter()
        .filter(|p| !p.is_file())
        .map(|p| (p.name.clone(), form_value(&p.text())))
        .collect()
}

/// A text field's value as JSON (see [`text_fields`]).
pub fn form_value(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::Object(_) | Value::Array(_))) => v,
        _ => Value::String(text.to_owned()),
    }
}

/// A 200 answer carrying `bytes` as `application/octet-stream`, with `content-length` set,
/// written in [`CHUNK`]-sized pieces (a large file is not one write).
pub fn streamed(bytes: Bytes) -> Response {
    let len = bytes.len();
    let chunks: Vec<Result<Bytes, Infallible>> = (0..len)
        .step_by(CHUNK)
        .map(|start| Ok(bytes.slice(start..(start + CHUNK).min(len))))
        .collect();
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, len)
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .expect("streamed response")
}

/// One part from its header block and its data.
fn part(headers: &[u8], data: Bytes) -> Result<Part, String> {
    let headers = String::from_utf8_lossy(headers);
    let mut disposition = None;
    let mut content_type = None;
    for line in headers.split("\r\n").filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad part header {line:?}"))?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-disposition" => disposition = Some(value.trim().to_owned()),
            "content-type" => content_type = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let disposition = disposition.ok_or("a part without Content-Disposition")?;
    let (kind, params) = disposition.split_once(';').unwrap_or((&disposition, ""));
    if !kind.trim().eq_ignore_ascii_case("form-data") {
        return Err(format!("not form-data: {disposition:?}"));
    }
    let params = header_params(params);
    let param = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let name = match (param("name"), param("name*")) {
        (Some(name), _) => name,
        (None, Some(encoded)) => decode_ext_value(&encoded),
        (None, None) => return Err(format!("a part without a name: {disposition:?}")),
    };
    Ok(Part {
        name,
        filename: param("filename"),
        content_type,
        data,
    })
}

/// `key=value` pairs after a header's first `;`, separated by `;`; quoted values are
/// unquoted (backslash escapes resolved). Keys are lowercase.
fn header_params(params: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = params.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ';' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            return out;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        }
        value.extend(chars.by_ref().take_while(|c| *c != ';'));
        out.push((key.trim().to_ascii_lowercase(), value.trim_end().to_owned()));
    }
}

/// An RFC 8187 value (`utf-8''files%5B0%5D`) decoded.
fn decode_ext_value(value: &str) -> String {
    let encoded = value.splitn(3, '\'').nth(2).unwrap_or(value);
    percent_encoding::percent_decode_str(encoded)
        .decode_utf8_lossy()
        .into_owned()
}

/// The first position of `needle` in `haystack` at or after `from`.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let last = haystack.len().checked_sub(needle.len())?;
    let mut i = from;
    while i <= last {
        i += haystack[i..=last].iter().position(|&b| b == needle[0])?;
        if haystack[i..].starts_with(needle) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// One request a fake model server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The query string, if any (`alt=sse`).
    pub query: Option<String>,
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
        super::header(&self.headers, name)
    }
}

/// The requests a fake received, oldest first, and the signal that one arrived.
#[derive(Default)]
pub struct Recorder {
    recorded: Mutex<Vec<RecordedRequest>>,
    /// Notified whenever something arrives (the fakes may use it for their other records).
    pub arrived: Notify,
}

impl Recorder {
    /// Records a request and returns its body as JSON.
    pub fn record(&self, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Value {
        let json = serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
        let text = |v: &axum::http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
        let header_list = headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), text(v)))
            .collect();
        self.recorded.lock().unwrap().push(RecordedRequest {
            path: uri.path().to_owned(),
            query: uri.query().map(str::to_owned),
            body: json.clone(),
            authorization: headers.get(header::AUTHORIZATION).map(text),
            headers: header_list,
        });
        self.arrived.notify_waiters();
        json
    }

    /// Everything received so far.
    pub fn all(&self) -> Vec<RecordedRequest> {
        self.recorded.lock().unwrap().clone()
    }

    /// The JSON bodies of the requests after the first `skip`.
    pub fn bodies_since(&self, skip: usize) -> Vec<Value> {
        let recorded = self.recorded.lock().unwrap();
        recorded.iter().skip(skip).map(|r| r.body.clone()).collect()
    }

    /// How many requests arrived so far.
    pub fn count(&self) -> usize {
        self.recorded.lock().unwrap().len()
    }

    /// Waits until at least `n` requests arrived and returns them all; panics after `timeout`
    /// naming the fake (`who`).
    pub async fn wait_for(&self, n: usize, timeout: Duration, who: &str) -> Vec<RecordedRequest> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let recorded = self.recorded.lock().unwrap();
                if recorded.len() >= n {
                    return recorded.clone();
                }
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                let got = self.count();
                panic!("{who}: expected {n} request(s) within {timeout:?}, got {got}");
            }
        }
    }
}

/// An answer of `status` with `body`; `Content-Type` defaults to `application/json`.
pub fn json_response(status: u16, body: String, headers: Vec<(String, String)>) -> Response {
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
    builder.body(Body::from(body)).expect("fake response")
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

/// A 200 `text/event-stream` answer of `events` (`(event name, data)`), each event written in
/// `style.pieces_per_event` byte pieces.
pub fn sse_response(events: Vec<(Option<String>, String)>, style: StreamStyle) -> Response {
    let nl = if style.crlf { "\r\n" } else { "\n" };
    let mut texts = Vec::new();
    for (i, (name, data)) in events.iter().enumerate() {
        if style.keep_alive && i % 2 == 0 {
            texts.push(format!(": keep-alive{nl}{nl}"));
        }
        let name = name
            .as_ref()
            .map(|n| format!("event: {n}{nl}"))
            .unwrap_or_default();
        texts.push(format!("{name}data: {data}{nl}{nl}"));
    }
    let mut pieces: Vec<Bytes> = Vec::new();
    for event in texts {
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
        .expect("fake stream")
}

/// `s` cut into at most `n` non-empty pieces of about equal length (in characters).
pub fn split_chars(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(n.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// A fake served on an ephemeral port of 127.0.0.1 until dropped.
pub struct Serving {
    pub addr: std::net::SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Serving {
    /// Binds 127.0.0.1:0 and serves `app` on the test's runtime.
    pub async fn start(app: axum::Router, who: &'static str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind {who}: {e}"));
        let addr = listener.local_addr().expect("bound address");
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await
                .unwrap_or_else(|e| panic!("{who} server: {e}"));
        });
        Self { addr, stop, task }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop.cancel();
        self.task.abort();
    }
}

/// A scripted answer of the fake Anthropic and Gemini servers.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Text and/or tool calls.
    Message {
        text: Option<String>,
        calls: Vec<ScriptedCall>,
    },
    /// Served verbatim, streaming or not (`Content-Type` defaults to JSON).
    Raw {
        status: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
}

/// A tool call a fake model makes.
#[derive(Debug, Clone)]
pub struct ScriptedCall {
    pub id: String,
    pub name: String,
    pub args: Value,
    /// Gemini's `thoughtSignature` for the call.
    pub signature: Option<String>,
}

/// A FIFO of [`Reply`]s; an empty script answers `default` text.
#[derive(Default)]
pub struct Script(Mutex<std::collections::VecDeque<Reply>>);

impl Script {
    pub fn push(&self, reply: Reply) {
        self.0.lock().unwrap().push_back(reply);
    }

    /// The next reply, or a text answer `default` when the script is empty.
    pub fn next(&self, default: &str) -> Reply {
        self.0
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Reply::Message {
                text: Some(default.to_owned()),
                calls: Vec::new(),
            })
    }
}
