//! A fake Anthropic Messages API (`POST /v1/messages`) for tests: answers from a FIFO script,
//! records every request, and checks what the real service checks.
//!
//! ```ignore
//! let fake = fake_anthropic::start().await;             // key: fake_anthropic::KEY
//! fake.push_tool_calls(&[("fs_read", json!({"path": "a.txt"}))]); // id "toolu_1"
//! fake.push_text("done");
//! let reqs = fake.wait_for_requests(2, WAIT).await;
//! ```
//!
//! Like the service: a request without `x-api-key: KEY` is answered 401
//! (`authentication_error`), one without `anthropic-version` 400; a body with more than 4
//! `cache_control` blocks, a first message not from the user, two consecutive messages of one
//! role, or a `tool_result` whose `tool_use_id` is not a `tool_use` of the message before is
//! answered 400 `invalid_request_error` — none of these consume the script. `"stream": true`
//! gets the reply as SSE events (`message_start` with the usage, a `ping`, text in
//! `text_delta` pieces, each tool call as `tool_use` with its input in `input_json_delta`
//! pieces, `message_delta` with the stop reason and output tokens, `message_stop`).
//! [`FakeAnthropic::set_usage`] sets the `usage` of the replies.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};

use super::wire::{
    RecordedRequest, Recorder, Reply, Script, ScriptedCall, Serving, StreamStyle, json_response,
    split_chars, sse_response,
};

/// The key the fake accepts.
pub const KEY: &str = "sk-ant-test-7777";
/// The text served when the script is empty.
pub const DEFAULT_REPLY: &str = "(fake anthropic: no scripted reply)";

#[derive(Default)]
struct Shared {
    script: Script,
    recorder: Recorder,
    next_id: AtomicU64,
    usage: Mutex<Option<Value>>,
}

/// A running fake; it stops when dropped.
pub struct FakeAnthropic {
    serving: Serving,
    shared: std::sync::Arc<Shared>,
}

pub async fn start() -> FakeAnthropic {
    let shared = std::sync::Arc::new(Shared::default());
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .with_state(shared.clone());
    FakeAnthropic {
        serving: Serving::start(app, "fake anthropic").await,
        shared,
    }
}

/// The `usage` of every reply unless [`FakeAnthropic::set_usage`] says otherwise.
pub fn usage() -> Value {
    json!({"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
        "output_tokens": 5})
}

impl FakeAnthropic {
    /// `http://127.0.0.1:PORT` (the client adds `/v1/messages`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.serving.addr)
    }

    pub fn push_text(&self, text: &str) {
        self.shared.script.push(Reply::Message {
            text: Some(text.to_owned()),
            calls: Vec::new(),
        });
    }

    /// Queues tool calls `(name, input)`, after `text` if any; returns their ids (`toolu_1`, …).
    pub fn push_message(&self, text: Option<&str>, calls: &[(&str, Value)]) -> Vec<String> {
        let calls: Vec<ScriptedCall> = calls
            .iter()
            .map(|(name, args)| ScriptedCall {
                id: format!(
                    "toolu_{}",
                    self.shared.next_id.fetch_add(1, Ordering::SeqCst) + 1
                ),
                name: (*name).to_owned(),
                args: args.clone(),
                signature: None,
            })
            .collect();
        let ids = calls.iter().map(|c| c.id.clone()).collect();
        self.shared.script.push(Reply::Message {
            text: text.map(str::to_owned),
            calls,
        });
        ids
    }

    pub fn push_tool_calls(&self, calls: &[(&str, Value)]) -> Vec<String> {
        self.push_message(None, calls)
    }

    /// Queues a verbatim answer.
    pub fn push_raw(&self, status: u16, body: String, headers: Vec<(String, String)>) {
        self.shared.script.push(Reply::Raw {
            status,
            body,
            headers,
        });
    }

    /// The `usage` object of the next replies (message_start carries it whole).
    pub fn set_usage(&self, usage: Value) {
        *self.shared.usage.lock().unwrap() = Some(usage);
    }

    pub fn recorded(&self) -> Vec<RecordedRequest> {
        self.shared.recorder.all()
    }

    /// The JSON bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.recorder.bodies_since(0)
    }

    pub fn request_count(&self) -> usize {
        self.shared.recorder.count()
    }

    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.shared
            .recorder
            .wait_for(n, timeout, "fake anthropic")
            .await
    }
}

/// An Anthropic error body.
pub fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

async fn messages(
    State(shared): State<std::sync::Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = shared.recorder.record(&uri, &headers, &body);
    let refuse = |status: u16, kind: &str, message: String| {
        json_response(status, error_body(kind, &message).to_string(), Vec::new())
    };
    if headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(KEY) {
        return refuse(401, "authentication_error", "invalid x-api-key".into());
    }
    if headers.get("anthropic-version").is_none() {
        return refuse(
            400,
            "invalid_request_error",
            "anthropic-version: header is required".into(),
        );
    }
    if let Err(message) = check(&request) {
        return refuse(400, "invalid_request_error", message);
    }
    let model = request["model"].as_str().unwrap_or("fake").to_owned();
    let usage = shared.usage.lock().unwrap().clone().unwrap_or_else(usage);
    match shared.script.next(DEFAULT_REPLY) {
        Reply::Raw {
            status,
            body,
            headers,
        } => json_response(status, body, headers),
        Reply::Message { text, calls } if request["stream"] == true => sse_response(
            events(&model, text.as_deref(), &calls, &usage),
            StreamStyle::default(),
        ),
        Reply::Message { text, calls } => {
            let mut content: Vec<Value> = text
                .iter()
                .map(|t| json!({"type": "text", "text": t}))
                .collect();
            content.extend(
                calls.iter().map(
                    |c| json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.args}),
                ),
            );
            let body = json!({"id": "msg_fake", "type": "message", "role": "assistant",
                "model": model, "content": content, "stop_reason": stop_reason(&calls),
                "stop_sequence": null, "usage": usage});
            json_response(200, body.to_string(), Vec::new())
        }
    }
}

fn stop_reason(calls: &[ScriptedCall]) -> &'static str {
    if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

/// What the real API refuses with 400.
fn check(request: &Value) -> Result<(), String> {
    let breakpoints = request.to_string().matches("\"cache_control\"").count();
    if breakpoints > 4 {
        return Err(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
        ));
    }
    let messages = request["messages"]
        .as_array()
        .ok_or("messages: Field required")?;
    let mut previous: Option<&Value> = None;
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        if i == 0 && role != "user" {
            return Err("messages: the first message must use the \"user\" role".into());
        }
        if previous.is_some_and(|p| p["role"] == role) {
            return Err(format!("messages: roles must alternate (message {i})"));
        }
        let blocks = message["content"].as_array().into_iter().flatten();
        for block in blocks.filter(|b| b["type"] == "tool_result") {
            let id = &block["tool_use_id"];
            let called = previous
                .and_then(|p| p["content"].as_array())
                .is_some_and(|b| b.iter().any(|b| b["type"] == "tool_use" && b["id"] == *id));
            if !called {
                return Err(format!(
                    "messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {id}"
                ));
            }
        }
        previous = Some(message);
    }
    Ok(())
}

/// The SSE events of a streamed reply.
fn events(
    model: &str,
    text: Option<&str>,
    calls: &[ScriptedCall],
    usage: &Value,
) -> Vec<(Option<String>, String)> {
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(1);
    let mut out = vec![
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "usage": start_usage}}),
        json!({"type": "ping"}),
    ];
    let mut index = 0;
    if let Some(text) = text {
        out.push(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}));
        for piece in split_chars(text, 3) {
            out.push(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": piece}}));
        }
        out.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    for call in calls {
        out.push(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}));
        for piece in split_chars(&call.args.to_string(), 2) {
            out.push(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece}}));
        }
        out.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    out.push(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason(calls), "stop_sequence": null},
        "usage": {"output_tokens": usage["output_tokens"]}}));
    out.push(json!({"type": "message_stop"}));
    out.into_iter()
        .map(|e| (e["type"].as_str().map(str::to_owned), e.to_string()))
        .collect()
}
